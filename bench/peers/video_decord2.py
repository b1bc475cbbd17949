"""decord2 peer of `spry bench video` (PyPI decord2, the maintained fork of
decord; its module is also named `decord`): the same reading as
video_decord.py, reported as "decord2". Needs an environment where decord2,
not decord, is installed.
Usage: python3 video_decord2.py --sampler tsn --segments 8 --size 224 FILES..."""
import video_decord

if __name__ == "__main__":
    video_decord.main("decord2")
