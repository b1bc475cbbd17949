"""decord peer of `spry bench video` (PyPI decord, when it installs):
VideoReader with decoder-side resize to the short side, get_batch of the
sampled indices (decord's GOP-sharing batch read), centre crop.
Usage: python3 video_decord.py --sampler tsn --segments 8 --size 224 FILES..."""
import decord
import numpy as np

import video_common as vc


def main():
    a = vc.parse("decord")
    dims = {}

    def read_clip(f, epoch, index):
        if f not in dims:
            vr0 = decord.VideoReader(f, num_threads=a.threads)
            h, w = vr0[0].shape[:2]
            dims[f] = vc.resized_dims(w, h, a.size)
        rw, rh = dims[f]
        vr = decord.VideoReader(f, width=rw, height=rh, num_threads=a.threads)
        idx = vc.sample(a, len(vr), epoch, index)
        frames = vr.get_batch(idx).asnumpy()
        return np.stack([vc.center_crop(x, a.size) for x in frames])

    def fetch_native(f, idx):
        vr = decord.VideoReader(f, num_threads=a.threads)
        return list(vr.get_batch(idx).asnumpy())

    vc.run("decord", a, read_clip, fetch_native, {"version": decord.__version__})


if __name__ == "__main__":
    main()
