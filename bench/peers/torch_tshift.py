#!/usr/bin/python3
"""PyTorch peer for `spry bench op tshift`: the seed's composed temporal shift
(reshape -> pad -> three slices -> concat) with autograd, forward and
forward+backward, median ms. One JSON line.

usage: torch_tshift.py --shape NT,C,H,W --segments S --ratio R [--runs N] [--threads T]
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F


def composed(x, seg_num, shift_ratio):
    # The seed's Python, in PyTorch ops (F.pad pads the last dims first).
    shape = x.shape
    r = x.reshape(-1, seg_num, shape[1], shape[2], shape[3])
    p = F.pad(r, (0, 0, 0, 0, 0, 0, 1, 1))
    c1 = int(shape[1] * shift_ratio)
    c2 = int(shape[1] * 2 * shift_ratio)
    s1 = p[:, :seg_num, :c1]
    s2 = p[:, 2:seg_num + 2, c1:c2]
    s3 = p[:, 1:seg_num + 1, c2:]
    return torch.cat([s1, s2, s3], dim=2).reshape(shape)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="32,16,32,32")
    ap.add_argument("--segments", type=int, default=2)
    ap.add_argument("--ratio", default="0.2")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    ratio = eval(a.ratio, {}, {}) if "/" in a.ratio else float(a.ratio)
    shape = [int(s) for s in a.shape.split(",")]
    x = torch.randn(shape, requires_grad=True)
    g = torch.randn(shape)
    fwd, fb = [], []
    for i in range(a.runs + 2):
        t0 = time.perf_counter()
        with torch.no_grad():
            composed(x, a.segments, ratio)
        t1 = time.perf_counter()
        x.grad = None
        t2 = time.perf_counter()
        y = composed(x, a.segments, ratio)
        y.backward(g)
        t3 = time.perf_counter()
        if i >= 2:
            fwd.append(t1 - t0)
            fb.append(t3 - t2)
    print(json.dumps({"bench": "op_tshift", "impl": "torch_composed", "torch": torch.__version__,
                      "shape": a.shape, "segments": a.segments, "ratio": ratio,
                      "threads": torch.get_num_threads(), "runs": a.runs,
                      "composed_fwd_ms": median(fwd) * 1e3, "composed_fwdbwd_ms": median(fb) * 1e3}))


if __name__ == "__main__":
    main()
