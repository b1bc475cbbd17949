#!/usr/bin/env bash
# Multigrid vs the normal schedule on the synthetic action set: the same
# epochs of TSM-R18 (configs/synth-tsm-r18*.yaml), wall-clock of training and
# final / best top-1; plus TSN for the motion floor. One JSON line per run.
# Usage: bench/run_multigrid.sh [EPOCHS] [CLIPS]   (from any folder)
# env: SPRY (binary), DATA (where the clips are made; a set of another size
# there is made again), BACKEND (cpu)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
epochs=${1:-12}
clips=${2:-192}
spry=${SPRY:-$here/build/spry}
data=${DATA:-$here/data/synth_actions}
runs="$here/runs"
[ -x "$spry" ] || { echo "run_multigrid: no spry binary at $spry (run make first)" >&2; exit 1; }

# The clips: made when missing, or when the set there has another size.
make_set() { # dir count seed
  local dir=$1 count=$2 seed=$3
  if [ -f "$dir/list.txt" ] && [ "$(wc -l < "$dir/list.txt")" -eq "$count" ]; then return; fi
  rm -rf "$dir"
  "$spry" synth actions --count "$count" --frames 16 --size 64 --seed "$seed" --out "$dir" >&2
}
make_set "$data/train" "$clips" 1
make_set "$data/val" $((clips / 3)) 2
mkdir -p "$runs"

sets=(--set "data.train_list=$data/train/list.txt" --set "data.val_list=$data/val/list.txt" --set "epochs=$epochs"
      --set "backend=${BACKEND:-cpu}")
for cfg in synth-tsm-r18 synth-tsm-r18-multigrid synth-tsn-r18; do
  out="$runs/bench-$cfg"
  t0=$(date +%s.%N)
  if ! line=$("$spry" train "$here/configs/$cfg.yaml" "${sets[@]}" --set "out=$out" --overwrite 2>"$out.log" | tail -1); then
    echo "run_multigrid: $cfg failed; its log: $out.log" >&2
    tail -5 "$out.log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  # Numbers through a JSON writer, never printf: the line is valid JSON.
  python3 -c 'import json,sys; print(json.dumps({"bench": "multigrid", "config": sys.argv[1], "epochs": int(sys.argv[2]),
    "clips": int(sys.argv[3]), "wall_s": round(float(sys.argv[5]) - float(sys.argv[4]), 2),
    "result": json.loads(sys.argv[6])}))' "$cfg" "$epochs" "$clips" "$t0" "$t1" "$line"
done
