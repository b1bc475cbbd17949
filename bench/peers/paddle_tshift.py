#!/usr/bin/env python3
"""PaddlePaddle peer for `spry bench op tshift`: Paddle's own fused
F.temporal_shift (the seed's "temporal shift op") and the seed's composed
version, forward and forward+backward, median ms. One JSON line; when Paddle
is not importable the line says so ({"error": ...}).

usage: paddle_tshift.py --shape NT,C,H,W --segments S --ratio R [--runs N]
"""
import argparse
import json
import time


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
    a = ap.parse_args()
    ratio = eval(a.ratio, {}, {}) if "/" in a.ratio else float(a.ratio)
    try:
        import paddle
        import paddle.nn.functional as F
    except Exception as e:  # not installed: say so in the JSON line
        print(json.dumps({"bench": "op_tshift", "impl": "paddle", "error": "paddle not importable: %s" % e}))
        return
    paddle.set_device("cpu")
    shape = [int(s) for s in a.shape.split(",")]

    def composed(x):
        s = x.shape
        r = x.reshape((-1, a.segments, s[1], s[2], s[3]))
        p = paddle.nn.functional.pad(r, [1, 1, 0, 0, 0, 0], data_format="NCDHW") if False else \
            paddle.concat([paddle.zeros_like(r[:, :1]), r, paddle.zeros_like(r[:, :1])], axis=1)
        c1, c2 = int(s[1] * ratio), int(s[1] * 2 * ratio)
        out = paddle.concat([p[:, :a.segments, :c1], p[:, 2:a.segments + 2, c1:c2], p[:, 1:a.segments + 1, c2:]], axis=2)
        return out.reshape(s)

    x = paddle.randn(shape)
    x.stop_gradient = False
    g = paddle.randn(shape)
    res = {}
    for name, fn in (("fused", lambda t: F.temporal_shift(t, seg_num=a.segments, shift_ratio=ratio)),
                     ("composed", composed)):
        fwd, fb = [], []
        for i in range(a.runs + 2):
            t0 = time.perf_counter()
            with paddle.no_grad():
                fn(x)
            t1 = time.perf_counter()
            y = fn(x)
            (y * g).sum().backward()
            t2 = time.perf_counter()
            x.clear_gradient()
            if i >= 2:
                fwd.append(t1 - t0)
                fb.append(t2 - t1)
        res[name + "_fwd_ms"] = median(fwd) * 1e3
        res[name + "_fwdbwd_ms"] = median(fb) * 1e3
    res.update({"bench": "op_tshift", "impl": "paddle", "paddle": paddle.__version__, "shape": a.shape,
                "segments": a.segments, "ratio": ratio, "runs": a.runs,
                "note": "fwdbwd includes a multiply+sum to get a scalar loss"})
    print(json.dumps(res))


if __name__ == "__main__":
    main()
