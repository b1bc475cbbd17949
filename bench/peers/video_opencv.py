"""OpenCV peer of `spry bench video`: the classic loader that decodes a clip
sequentially with cv2.VideoCapture up to the last sampled frame (grab() for
frames it skips, retrieve() for the ones it keeps), then resizes and crops.
Usage: python3 video_opencv.py --sampler tsn --segments 8 --size 224 FILES..."""
import os
import sys

# OpenCV's FFmpeg backend decodes with one thread per core unless told; the
# comparison is per decoder thread, so honour --threads. The decoder's thread
# count is the CAP_PROP_N_THREADS open parameter (see open_capture); these
# FFmpeg options are demuxer options, kept for older OpenCV builds.
if "--threads" in sys.argv:
    os.environ.setdefault("OPENCV_FFMPEG_CAPTURE_OPTIONS", "threads;" + sys.argv[sys.argv.index("--threads") + 1])
else:
    os.environ.setdefault("OPENCV_FFMPEG_CAPTURE_OPTIONS", "threads;1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402

import video_common as vc


def open_capture(path, a):
    """cv2.VideoCapture with --threads decoder threads. Without the
    parameter OpenCV 4.5+ decodes on one thread per core (measured here:
    CAP_PROP_N_THREADS 2 on 2 cores, 1.2x the CPU time of wall time)."""
    cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, a.threads])
    if not cap.isOpened():
        raise SystemExit(f"video_opencv.py: OpenCV cannot open {path}")
    return cap


def decode(path, idx, a, native=False):
    cap = open_capture(path, a)
    want = sorted(set(idx))
    got = {}
    last = want[-1]
    i = 0
    while i <= last:
        if not cap.grab():
            break
        if i in want:
            ok, bgr = cap.retrieve()
            if ok:
                rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                if not native:
                    h, w = rgb.shape[:2]
                    rw, rh = vc.resized_dims(w, h, a.size)
                    rgb = vc.center_crop(cv2.resize(rgb, (rw, rh), interpolation=cv2.INTER_LINEAR), a.size)
                got[i] = rgb
        i += 1
    cap.release()
    return [got[j] for j in idx if j in got]


def main():
    a = vc.parse("opencv")
    cv2.setNumThreads(a.threads)

    def read_clip(f, epoch, index):
        cap = open_capture(f, a)
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))  # what a loader uses; may over-report
        cap.release()
        return np.stack(decode(f, vc.sample(a, n, epoch, index), a))

    probe = open_capture(a.files[0], a)
    threads = int(probe.get(cv2.CAP_PROP_N_THREADS))
    probe.release()
    vc.run("opencv", a, read_clip, lambda f, idx: decode(f, idx, a, native=True),
           {"version": cv2.__version__, "decoder_threads": threads})


if __name__ == "__main__":
    main()
