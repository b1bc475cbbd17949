"""decord peer of `spry bench video` (PyPI decord 0.6): VideoReader with
decoder-side resize to the short side, get_batch of the sampled indices
(decord's GOP-sharing batch read), centre crop. video_decord2.py runs the same
code on decord2, the maintained fork, which installs the same `decord`
module (so the two need separate environments).
Usage: python3 video_decord.py --sampler tsn --segments 8 --size 224 FILES..."""
import importlib.metadata
import sys

import decord
import numpy as np

import video_common as vc


def installed(dist):
    """Version of the installed distribution `dist`, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main(impl="decord"):
    # Both distributions provide `import decord`: refuse to report one under
    # the other's name.
    if not installed(impl):
        other = "decord2" if impl == "decord" else "decord"
        sys.exit(f"video_{impl}.py: the `decord` module here comes from {other} "
                 f"{installed(other)}, not {impl}; use an environment with {impl} installed")
    a = vc.parse(impl)
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

    vc.run(impl, a, read_clip, fetch_native, {"version": installed(impl)})


if __name__ == "__main__":
    main()
