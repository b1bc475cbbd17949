"""Shared by the video_*.py peers of `spry bench video`: the same samplers,
the same protocol (one warm-up pass, then --runs timed passes over all files,
median clips/s) and the same JSON line, so the numbers compare directly.

Frame accuracy: one pass of sampled indices is fetched at native size and each
frame is matched against a full sequential decode (PyAV, every frame); a frame
counts as wrong when another frame within +-3 of the wanted one is closer.
"""
import argparse
import json
import random
import statistics
import sys
import time

import numpy as np


def parse(impl):
    p = argparse.ArgumentParser(description=f"{impl} peer of spry bench video")
    p.add_argument("--sampler", choices=["tsn", "dense"], default="tsn")
    p.add_argument("--segments", type=int, default=8)
    p.add_argument("--frames", type=int, default=32)
    p.add_argument("--stride", type=int, default=2)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-check", action="store_true")
    p.add_argument("files", nargs="+")
    return p.parse_args()


def sample(a, n, epoch, index):
    """TSN (one random frame per segment) or dense (T frames at stride tau
    from a random start), training mode, as in src/video/sample.c."""
    r = random.Random(epoch * 1000003 + index)
    if a.sampler == "tsn":
        out = []
        for k in range(a.segments):
            lo = int(k * n / a.segments)
            hi = int((k + 1) * n / a.segments)
            lo = min(lo, n - 1)
            hi = max(hi, lo + 1)
            out.append(lo + r.randrange(hi - lo))
        return out
    span = (a.frames - 1) * a.stride + 1
    start = r.randrange(max(n - span, 0) + 1)
    return [min(start + t * a.stride, n - 1) for t in range(a.frames)]


def clip_len(a):
    return a.segments if a.sampler == "tsn" else a.frames


def resized_dims(w, h, size):
    if w <= h:
        return size, int(round(h * size / w))
    return int(round(w * size / h)), size


def center_crop(img, size):
    h, w = img.shape[:2]
    y, x = (h - size) // 2, (w - size) // 2
    return img[y:y + size, x:x + size]


def reference_frames(path):
    import av
    with av.open(path) as c:
        s = c.streams.video[0]
        return [f.to_ndarray(format="rgb24") for f in c.decode(s)]


def check(a, fetch_native):
    """fetch_native(path, indices) -> list of HxWx3 RGB frames at native size."""
    checked = bad = 0
    for i, path in enumerate(a.files):
        ref = reference_frames(path)
        idx = sample(a, len(ref), 0, i)
        got = fetch_native(path, idx)
        for want, frame in zip(idx, got):
            checked += 1
            lo, hi = max(0, want - 3), min(len(ref), want + 4)
            d = [np.abs(ref[j].astype(np.int16) - frame.astype(np.int16)).mean() for j in range(lo, hi)]
            if lo + int(np.argmin(d)) != want:
                bad += 1
        bad += len(idx) - len(got)
    return checked, bad


def run(impl, a, read_clip, fetch_native, extra=None):
    """read_clip(path, epoch, index) -> array [T, size, size, 3] (one clip)."""
    rates, cpu = [], []
    for r in range(a.runs + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        for i, f in enumerate(a.files):
            clip = read_clip(f, r, i)
            assert clip.shape[0] == clip_len(a), (f, clip.shape)
        if r > 0:
            rates.append(len(a.files) / (time.perf_counter() - t0))
            cpu.append(1000.0 * (time.process_time() - c0) / len(a.files))
    checked, bad = (0, -1) if a.no_check else check(a, fetch_native)
    cps = statistics.median(rates)
    line = {"bench": "video", "impl": impl, "sampler": a.sampler,
            "segments": a.segments if a.sampler == "tsn" else 0,
            "frames": a.frames if a.sampler == "dense" else 0,
            "stride": a.stride if a.sampler == "dense" else 0, "size": a.size,
            "files": len(a.files), "runs": a.runs, "threads": a.threads,
            "clips_per_s": round(cps, 3), "frames_per_s": round(cps * clip_len(a), 2),
            "cpu_ms_per_clip": round(statistics.median(cpu), 2),
            "accuracy_checked": checked, "accuracy_mismatches": bad}
    line.update(extra or {})
    print(json.dumps(line))
    sys.stdout.flush()
