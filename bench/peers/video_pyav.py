"""PyAV peer of `spry bench video`: seek-based reading as PyAV loaders do it.
Frame index -> timestamp by the nominal frame rate; for each wanted frame
(in order) seek backward to the keyframe before it unless it lies ahead in
what is being decoded, decode until the frame's pts is reached, convert with
swscale (frame.reformat) to the resized size, crop.
Usage: python3 video_pyav.py --sampler tsn --segments 8 --size 224 FILES..."""
import av
import numpy as np

import video_common as vc


def fetch(path, idx, a, native=False):
    out = {}
    with av.open(path) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO" if a.threads > 1 else "SLICE"
        s.thread_count = a.threads
        rate = s.average_rate or s.guessed_rate
        tb = s.time_base
        start = s.start_time or 0
        w, h = s.codec_context.width, s.codec_context.height
        rw, rh = vc.resized_dims(w, h, a.size)
        dec = None
        cur = -1  # pts of the last decoded frame
        for want in sorted(set(idx)):
            target = start + int(round(want / rate / tb))
            if dec is None or target <= cur or target - cur > int(round(2 / rate / tb)) * 8:
                c.seek(target, stream=s, backward=True, any_frame=False)
                dec = c.decode(s)
            for f in dec:
                cur = f.pts if f.pts is not None else cur + 1
                if cur >= target - int(0.5 / rate / tb):
                    if native:
                        img = f.to_ndarray(format="rgb24")
                    else:
                        img = vc.center_crop(f.reformat(width=rw, height=rh, format="rgb24").to_ndarray(), a.size)
                    out[want] = img
                    break
    return [out[j] for j in idx if j in out]


def main():
    a = vc.parse("pyav")

    def read_clip(f, epoch, index):
        with av.open(f) as c:
            n = c.streams.video[0].frames  # container's count, as loaders use it
        return np.stack(fetch(f, vc.sample(a, n, epoch, index), a))

    vc.run("pyav", a, read_clip, lambda f, idx: fetch(f, idx, a, native=True), {"version": av.__version__})


if __name__ == "__main__":
    main()
