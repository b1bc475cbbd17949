"""Re-encodes clips with libx264's default settings (no preset, tune, crf or
GOP given: preset medium, crf 23, keyint 250 with scene cuts, 3 B-frames with
b-pyramid, 3 references), which is what `ffmpeg -i in -c:v libx264 out.mp4`
makes; for the "x264 defaults" set of bench/run_video.sh (PyAV has libx264).
Usage: python3 video_make_x264.py --out DIR FILES...   (writes DIR/<name>.mp4)"""
import argparse
import os
from fractions import Fraction

import av


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for path in a.files:
        dst = os.path.join(a.out, os.path.basename(path).replace(".", "_") + "_x264.mp4")
        with av.open(path) as i, av.open(dst, "w") as o:
            s = i.streams.video[0]
            rate = Fraction(s.average_rate or s.guessed_rate or 25)
            out = o.add_stream("libx264", rate=rate)
            out.width, out.height = s.codec_context.width, s.codec_context.height
            out.pix_fmt = "yuv420p"
            for n, f in enumerate(i.decode(s)):
                f = f.reformat(format="yuv420p")
                f.pict_type = 0  # let x264 place its own I-frames, not copy the source's
                f.pts, f.time_base = n, 1 / rate  # constant rate (AVI has no pts)
                for pkt in out.encode(f):
                    o.mux(pkt)
            for pkt in out.encode():
                o.mux(pkt)
        print(dst)


if __name__ == "__main__":
    main()
