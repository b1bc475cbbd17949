#!/bin/bash
# Multigrid vs the normal schedule on the synthetic action set: the same
# epochs of TSM-R18 (configs/synth-tsm-r18*.yaml), wall-clock of training and
# final / best top-1; plus TSN for the motion floor. JSON lines.
# Usage: bench/run_multigrid.sh [EPOCHS] [CLIPS]   (from the repo root)
# env: SPRY (binary), DATA (where the clips are made), BACKEND (cpu)
set -eu
epochs=${1:-12}
clips=${2:-192}
spry=${SPRY:-build/spry}
data=${DATA:-data/synth_actions}
[ -f "$data/train/list.txt" ] || "$spry" synth actions --count "$clips" --frames 16 --size 64 --out "$data/train"
[ -f "$data/val/list.txt" ] || "$spry" synth actions --count $((clips / 3)) --frames 16 --size 64 --seed 2 --out "$data/val"
set_data=(--set "data.train_list=$data/train/list.txt" --set "data.val_list=$data/val/list.txt" --set "epochs=$epochs"
          --set "backend=${BACKEND:-cpu}")
for cfg in synth-tsm-r18 synth-tsm-r18-multigrid synth-tsn-r18; do
  out=runs/bench-$cfg
  rm -rf "$out"
  t0=$(date +%s.%N)
  line=$("$spry" train configs/$cfg.yaml "${set_data[@]}" --set out=$out 2>"$out.log" | tail -1)
  t1=$(date +%s.%N)
  echo "{\"bench\":\"multigrid\",\"config\":\"$cfg\",\"epochs\":$epochs,\"clips\":$clips,\"wall_s\":$(echo "$t1 - $t0" | bc),\"result\":$line}"
done
