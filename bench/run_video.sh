#!/usr/bin/env bash
# Runs `spry bench video` and the OpenCV, PyAV and decord peers on the same
# clips in one go (TSN 8 segments and dense 32x2, 224 crops, one decoder
# thread each), then the seed's frames-vs-video comparison (TSN from JPEG
# frame folders made by `spry prepare frames` vs from the videos), and prints
# the ratios. Peers that are not installed are installed from PyPI if pip can,
# else skipped. Usage: bench/run_video.sh [FILES...]   (default: the real
# clips in ../shared/data/action_clips; RUNS=5, PYTHON=python3)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
spry="${SPRY_BIN:-$here/build/spry}"
py="${PYTHON:-python3}"
runs="${RUNS:-5}"
clips="$here/../shared/data/action_clips"
if [ $# -gt 0 ]; then files=("$@"); else
  files=("$clips/kinetics400/demo.mp4" "$clips/kinetics400/test.mp4" "$clips/ucf101/test.avi"); fi
out="$(mktemp)"; work="$(mktemp -d)"; trap 'rm -rf "$out" "$work"' EXIT

have() { "$py" -c "import $1" 2>/dev/null; }
want_peer() { # module, pip name
  have "$1" || "$py" -m pip install --quiet "$2" >/dev/null 2>&1 || true
  have "$1"
}
peers=()
want_peer cv2 opencv-python-headless && peers+=(opencv)
want_peer av av && peers+=(pyav)
want_peer decord decord && peers+=(decord)

for sampler in "--sampler tsn --segments 8" "--sampler dense --frames 32 --stride 2"; do
  # shellcheck disable=SC2086
  "$spry" bench video $sampler --size 224 --runs "$runs" "${files[@]}" | tee -a "$out"
  for p in "${peers[@]}"; do
    # shellcheck disable=SC2086
    (cd "$here/bench/peers" && "$py" "video_$p.py" $sampler --size 224 --runs "$runs" "${files[@]}") | tee -a "$out"
  done
done

# Frames vs video (the seed's 3.22x): same clips pre-decoded to JPEG folders.
printf '%s 0\n' "${files[@]}" > "$work/list.txt"
"$spry" prepare frames --list "$work/list.txt" --out "$work/frames" 2>/dev/null
mapfile -t dirs < <(awk '{print $1}' "$work/frames/frames.list" | sed "s|^|$work/frames/|")
"$spry" bench video --sampler tsn --segments 8 --size 224 --runs "$runs" --no-check "${dirs[@]}" \
  | sed 's/"impl": "spry"/"impl": "spry-frames"/' | tee -a "$out"

"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def get(impl, sampler, key="clips_per_s"):
    return next((r[key] for r in rows if r["impl"] == impl and r["sampler"] == sampler), None)
for sampler in ("tsn", "dense"):
    base = get("spry", sampler)
    cpu = get("spry", sampler, "cpu_ms_per_clip")
    for peer in ("opencv", "pyav", "decord"):
        other = get(peer, sampler)
        if other:
            print(json.dumps({"bench": "video", "ratio": f"spry/{peer}", "sampler": sampler,
                              "clips_per_s": round(base / other, 2),
                              "cpu_per_clip": round(get(peer, sampler, "cpu_ms_per_clip") / cpu, 2)}))
fr, vid = get("spry-frames", "tsn"), get("spry", "tsn")
print(json.dumps({"bench": "video", "ratio": "frames/video", "sampler": "tsn",
                  "clips_per_s": round(fr / vid, 2),
                  "cpu_per_clip": round(get("spry", "tsn", "cpu_ms_per_clip") / get("spry-frames", "tsn", "cpu_ms_per_clip"), 2),
                  "seed": 3.22}))
PY
