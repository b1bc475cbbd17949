#!/usr/bin/env bash
# Training from a recipe end to end, as a user runs it: `spry train
# configs/imm-face58.yaml` (the seed's part 2: the modified VGG on the whole
# IMM photo, 224 gray, batch 64, AdamW, augmentation) against the same
# recipe in PyTorch (bench/peers/torch_keypoints.py: a DataLoader with
# workers, PIL augmentation, eager PyTorch), one after the other, REPS times,
# for EPOCHS epochs each. Prints a JSON line per run (training images a
# second: spry's epochs summed without its validation, PyTorch's whole
# loop) and the median ratio. Both use THREADS threads.
# Usage: [EPOCHS=20] [REPS=3] [THREADS=2] [PY=python] bench/run_train_e2e.sh [IMM_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
data="${1:-$here/../shared/data/imm_face_db}"
spry="${SPRY_BIN:-$here/build/spry}"
epochs="${EPOCHS:-20}" reps="${REPS:-3}" threads="${THREADS:-2}"
py="${PY:-$here/bench/.venv-torch/bin/python}"
[ -x "$spry" ] || { echo "run_train_e2e: no spry binary at $spry (run make first)" >&2; exit 1; }
[ -x "$py" ] || { echo "run_train_e2e: no Python with torch at $py (bench/run_train.sh makes one; or set PY)" >&2; exit 1; }
[ -d "$data" ] || { echo "run_train_e2e: no IMM folder at $data" >&2; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
train_images=$(( $(ls "$data"/*.dat | awk -F/ '{split($NF, a, "-"); if (a[1] + 0 <= 32) n++} END {print n + 0}') / 64 * 64 ))
ratios=()
for r in $(seq "$reps"); do
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 "$spry" train "$here/configs/imm-face58.yaml" \
    --set "data.path=$data" --set "epochs=$epochs" --set "threads=$threads" --set "out=$work/run$r" >"$work/spry.log" 2>&1 ||
    { cat "$work/spry.log" >&2; exit 1; }
  spry_ips=$(python3 -c "import json,sys; rows=[json.loads(l) for l in open(sys.argv[1])]; \
print(round(sum(r['images_per_s'] * r['epoch_s'] for r in rows) / sum(r['epoch_s'] for r in rows), 1))" \
    "$work/run$r/metrics.jsonl")
  "$py" "$here/bench/peers/torch_keypoints.py" --data "$data" --epochs "$epochs" --threads "$threads" \
    --eval-every 100000 >"$work/torch.log" 2>&1 || { cat "$work/torch.log" >&2; exit 1; }
  torch_s=$(tail -n 1 "$work/torch.log" | python3 -c "import json,sys; print(json.load(sys.stdin)['train_s'])")
  torch_ips=$(python3 -c "print(round($epochs * $train_images / $torch_s, 1))")
  ratio=$(python3 -c "print(round($spry_ips / $torch_ips, 2))")
  ratios+=("$ratio")
  printf '{"bench":"train_e2e","recipe":"imm-face58","epochs":%s,"threads":%s,"spry_images_per_s":%s,"torch_images_per_s":%s,"spry_over_torch":%s}\n' \
    "$epochs" "$threads" "$spry_ips" "$torch_ips" "$ratio"
done
printf '{"bench":"train_e2e_median","pairs":%s,"ratios":[%s],"spry_over_torch":%s}\n' "$reps" \
  "$(IFS=,; echo "${ratios[*]}")" "$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}')"
