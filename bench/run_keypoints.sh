#!/usr/bin/env bash
# Keypoint accuracy as a user gets it, spry against dlib's 68-point shape
# predictor on the same faces and the same boxes. Scores a trained 68-point
# checkpoint (default: the faces68-resunet18 recipe's best) on its run's
# identity-disjoint validation split three ways:
#   file      the boxes file of the run (dlib's own face detector, precomputed)
#   detect    spry's built-in detector (the same HOG detector, run by spry)
#   points    crops cut from the true points: "optimistic", shown for contrast
# then runs dlib's predictor (bench/peers/dlib_landmarks.cc) on exactly the
# faces and boxes of each of the first two (the CSV `spry eval --per-face`
# writes) and prints one JSON line per figure plus the ratio spry/dlib (NME,
# lower is better: below 1 means spry is more accurate).
# Usage: bench/run_keypoints.sh [WEIGHTS] [DATA]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
weights="${1:-$here/runs/faces68-resunet18/best.safetensors}"
data="${2:-$here/../shared/data/youtube_faces_68}"
spry="${SPRY_BIN:-$here/build/spry}"
model="${DLIB_MODEL:-/usr/share/dlib/shape_predictor_68_face_landmarks.dat}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
[ -x "$spry" ] || { echo "run_keypoints: no spry binary at $spry (run make first)" >&2; exit 1; }
[ -f "$weights" ] || { echo "run_keypoints: no checkpoint $weights (train configs/faces68-resunet18.yaml first)" >&2; exit 1; }
[ -f "$data/keypoints.csv" ] || { echo "run_keypoints: $data has no keypoints.csv" >&2; exit 1; }

json_of() { grep '^{' "$1" | tail -n 1; }

for box in file detect points; do
  "$spry" eval --weights "$weights" --set "data.box=$box" --per-face "$work/$box.csv" --out "$work" \
    >"$work/$box.out" 2>"$work/$box.err" || { cat "$work/$box.err" >&2; exit 1; }
  printf '{"bench":"keypoints","tool":"spry","boxes":"%s"%s,"result":%s}\n' "$box" \
    "$([ "$box" = points ] && echo ',"note":"optimistic: crops cut from the true points"')" "$(json_of "$work/$box.out")"
done

peer="$work/dlib_landmarks"
if ! [ -f "$model" ] || ! g++ -O2 "$here/bench/peers/dlib_landmarks.cc" -o "$peer" \
      -ldlib -llapack -lblas -ljpeg -lpng 2>"$work/peer.err"; then
  echo '{"bench":"keypoints","note":"peer not installed: spry figures only (Debian: libdlib-dev libdlib-data)"}'
  exit 0
fi
for box in file detect; do
  "$peer" "$work/$box.csv" "$data/keypoints.csv" "$model" >"$work/dlib_$box.out"
  printf '{"bench":"keypoints","tool":"dlib","boxes":"%s","result":%s}\n' "$box" "$(json_of "$work/dlib_$box.out")"
done

python3 - "$work" <<'PY'
import json, os, sys
w = sys.argv[1]
last = lambda f: json.loads([l for l in open(os.path.join(w, f)) if l.startswith("{")][-1])
for box in ("file", "detect"):
    s, d = last(box + ".out"), last("dlib_" + box + ".out")
    print(json.dumps({"bench": "keypoints", "boxes": box, "faces": s["count"],
                      "spry_nme_io": round(s["nme_io"], 4), "dlib_nme_io": round(d["nme_io"], 4),
                      "ratio_spry_over_dlib": round(s["nme_io"] / d["nme_io"], 3), "goal": 0.75}))
PY
