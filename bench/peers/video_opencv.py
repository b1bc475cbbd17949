"""OpenCV peer of `spry bench video`: the classic loader that decodes a clip
sequentially with cv2.VideoCapture up to the last sampled frame (grab() for
frames it skips, retrieve() for the ones it keeps), then resizes and crops.
Usage: python3 video_opencv.py --sampler tsn --segments 8 --size 224 FILES..."""
import os
import sys

# OpenCV's FFmpeg backend decodes with one thread per core unless told; the
# comparison is per decoder thread, so honour --threads (set before import).
if "--threads" in sys.argv:
    os.environ.setdefault("OPENCV_FFMPEG_CAPTURE_OPTIONS", "threads;" + sys.argv[sys.argv.index("--threads") + 1])
else:
    os.environ.setdefault("OPENCV_FFMPEG_CAPTURE_OPTIONS", "threads;1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402

import video_common as vc


def decode(path, idx, a, native=False):
    cap = cv2.VideoCapture(path)
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
        cap = cv2.VideoCapture(f)
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))  # what a loader uses; may over-report
        cap.release()
        return np.stack(decode(f, vc.sample(a, n, epoch, index), a))

    vc.run("opencv", a, read_clip, lambda f, idx: decode(f, idx, a, native=True),
           {"version": cv2.__version__})


if __name__ == "__main__":
    main()
