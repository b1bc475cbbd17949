#!/usr/bin/env bash
# Runs `spry bench data` and the torchvision peer on the same files in one go
# and prints both plus the ratios (spry augment / torchvision preloaded, spry
# decode / torchvision decode). Usage: bench/run_data.sh [DATASET] [WORKERS]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dataset="${1:-$here/../shared/data/imm_face_db}"
workers="${2:-2}"
size="${SIZE:-224}"; batch="${BATCH:-64}"; runs="${RUNS:-5}"
spry="${SPRY_BIN:-$here/build/spry}"
py="${PYTHON:-/usr/bin/python3}"
out="$(mktemp)"; trap 'rm -f "$out"' EXIT
[ -x "$spry" ] || { echo "run_data: no spry binary at $spry (run make first)" >&2; exit 1; }
[ -d "$dataset" ] || { echo "run_data: no dataset folder $dataset" >&2; exit 1; }

"$spry" bench data --dataset "$dataset" --size "$size" --batch "$batch" --workers "$workers" \
  --runs "$runs" --cache | tee -a "$out"
if ! "$py" -c "import torch, torchvision, PIL" 2>/dev/null; then
  echo '{"bench": "data", "note": "peer not installed: spry figures only (python3 -m venv V && V/bin/pip install torch torchvision pillow; PYTHON=V/bin/python)"}'
  exit 0
fi
"$py" "$here/bench/peers/torchvision_loader.py" --dataset "$dataset" --size "$size" --batch "$batch" \
  --workers "$workers" --runs "$runs" | tee -a "$out"

"$py" - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
get = lambda peer, stage: next(r["images_per_s"] for r in rows if r.get("peer", "spry") == peer and r["stage"] == stage)
dec = get("spry", "decode") / get("torchvision", "decode")
aug = get("spry", "augment") / get("torchvision", "preloaded")
nor = get("spry", "normalize") / get("torchvision", "preloaded")
print(json.dumps({"bench": "data", "ratio": "spry/torchvision", "decode": round(dec, 2),
                  "augment_vs_preloaded": round(aug, 2), "normalize_vs_preloaded": round(nor, 2),
                  "goal": {"decode": 3, "augment_vs_preloaded": 5}}))
PY
