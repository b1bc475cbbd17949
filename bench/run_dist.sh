#!/usr/bin/env bash
# Data-parallel scaling of `spry bench train` (bench/README_dist.md):
#   1 process x 1 thread  vs  mpirun -np 2 x 1 thread each,
# plus two independent 1-thread processes started the same way (SPRY_MPI=0),
# which isolates the cost of communication from CPU contention on a busy machine,
# and the 2 ranks with --sync-only (they meet once per step and send no
# gradients), which isolates what lock-step alone costs from the exchange.
# Prints the JSON lines, then the scaling efficiency and the bytes all-reduced
# per step against the parameter bytes. Runs are interleaved REPS times and
# the median of each is used (other jobs on a shared machine add noise); the
# median of the per-repetition efficiencies (each 2-rank run against the
# 1-process run just before it) is printed too, with its range.
#
#   bench/run_dist.sh [extra spry bench train args]   e.g. --backend ref --size 64
# env: SPRY (binary, build/spry), NP (ranks, 2), REPS (5), MODEL (vgg-face),
#      BACKEND (cpu when it runs, else ref), SIZE (96), BATCH (per rank, 16),
#      STEPS (timed steps per run, 30).
set -euo pipefail
cd "$(dirname "$0")/.."
SPRY=${SPRY:-build/spry}
NP=${NP:-2}
REPS=${REPS:-5}
STEPS=${STEPS:-30}
MODEL=${MODEL:-vgg-face}
SIZE=${SIZE:-96}
BATCH=${BATCH:-16}
# Root in CI and containers; shared memory without the single-copy path.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
MPIRUN=(mpirun -np "$NP" --oversubscribe --bind-to core -x OMP_NUM_THREADS=1)
if [ -z "${BACKEND:-}" ]; then
  BACKEND=ref
  "$SPRY" bench train --model "$MODEL" --backend cpu --threads 1 --batch 2 --size 32 --steps 1 --warmup 0 \
    >/dev/null 2>&1 && BACKEND=cpu
fi
ARGS=(bench train --model "$MODEL" --backend "$BACKEND" --threads 1 --batch "$BATCH" --size "$SIZE"
      --steps "$STEPS" --warmup 3 "$@")
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
median() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

one=() dist=() sync=() indep=() line_one='' line_dist=''
for r in $(seq "$REPS"); do
  line_one=$(OMP_NUM_THREADS=1 "$SPRY" "${ARGS[@]}")
  one+=("$(field "$line_one" images_per_s)")
  line_dist=$("${MPIRUN[@]}" "$SPRY" "${ARGS[@]}")
  dist+=("$(field "$line_dist" images_per_s)")
  sync+=("$(field "$("${MPIRUN[@]}" "$SPRY" "${ARGS[@]}" --sync-only)" images_per_s)")
  # NP separate processes (no MPI): their summed rate is the most NP ranks
  # could reach on this machine right now.
  total=0
  while read -r l; do total=$(python3 -c "print($total + $(field "$l" images_per_s))"); done \
    < <("${MPIRUN[@]}" -x SPRY_MPI=0 "$SPRY" "${ARGS[@]}")
  indep+=("$total")
  echo "rep $r: 1 process $(printf %.1f "${one[-1]}") img/s, $NP ranks $(printf %.1f "${dist[-1]}") img/s," \
       "lock-step only $(printf %.1f "${sync[-1]}") img/s, $NP independent processes $(printf %.1f "$total") img/s" >&2
done
echo "$line_one"
echo "$line_dist"
m1=$(median "${one[@]}") md=$(median "${dist[@]}") mi=$(median "${indep[@]}") ms=$(median "${sync[@]}")
python3 - "$m1" "$md" "$mi" "$NP" "$line_dist" "${one[*]}" "${dist[*]}" "$ms" <<'PY'
import json, statistics, sys
one, dist, indep, np_, line = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
sync = float(sys.argv[8])
per_rep = [d / (np_ * o) for o, d in zip(map(float, sys.argv[6].split()), map(float, sys.argv[7].split()))]
print(json.dumps({
    "bench": "train_dist_scaling", "model": line["model"], "backend": line["backend"], "ranks": np_,
    "batch_per_rank": line["batch"], "size": line["size"],
    "images_per_s_1_process": round(one, 1), "images_per_s_ranks": round(dist, 1),
    "images_per_s_independent": round(indep, 1),
    "images_per_s_lockstep_only": round(sync, 1),
    "lockstep_only_vs_independent": round(sync / indep, 3),
    "scaling_efficiency": round(dist / (np_ * one), 3),
    "efficiency_vs_independent": round(dist / indep, 3),
    "scaling_efficiency_per_rep_median": round(statistics.median(per_rep), 3),
    "scaling_efficiency_per_rep_range": [round(min(per_rep), 3), round(max(per_rep), 3)],
    "param_bytes": line["param_bytes"], "allreduce_bytes_per_step": line["allreduce_bytes_per_step"],
    "allreduce_to_param_bytes": round(line["allreduce_bytes_per_step"] / line["param_bytes"], 3),
    "allreduce_buckets": line["allreduce_buckets"], "buckets_launched_in_backward": line["buckets_launched_in_backward"],
}))
PY
