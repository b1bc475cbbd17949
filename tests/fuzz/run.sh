#!/usr/bin/env bash
# Runs every libFuzzer harness of BIN_DIR for SECONDS each (make fuzz; CI's
# smoke uses 15), FUZZ_JOBS at a time (default: one per core), from its seed corpus in
# tests/fuzz/corpus/NAME. New inputs go to WORK/corpus/NAME, never into the
# repository; a crash leaves WORK/artifacts/NAME-crash-* and fails the run.
# FUZZ_RUNS=N stops each harness after N executions instead (SECONDS stays
# the upper bound): what a long campaign of "at least 1 M each" uses.
# FUZZ_SEED=S fixes libFuzzer's mutation seed: CI's smoke then runs a prefix
# of the same input sequence a longer local run with that seed has checked,
# so a submission cannot fail CI on an input nobody has seen.
# Usage: run.sh BIN_DIR SECONDS [WORK] [NAME...]
set -uo pipefail
bin=${1:?usage: run.sh BIN_DIR SECONDS [WORK] [NAME...]}
seconds=${2:?seconds per harness}
work=${3:-$(dirname "$bin")}
shift $(( $# < 3 ? $# : 3 ))
src=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$bin"/fuzz_*; do names+=("$(basename "$f" | sed 's/^fuzz_//')"); done
fi
mkdir -p "$work/corpus" "$work/artifacts" "$work/logs"
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# One harness, its exit status kept next to its log for the table below.
run_one() {
  local name=$1 log="$work/logs/$1.log"
  mkdir -p "$work/corpus/$name"
  # nice: the machine is shared; -close_fd_mask=3: the readers' own skip
  # lines would flood the log (crash reports still come through);
  # -rss_limit_mb: the allocation policy keeps every input under 1 GB
  # (SPRY_MAX_MEMORY_MB), so 2 GB of RSS is a bug.
  nice -n 10 "$bin/fuzz_$name" -max_total_time="$seconds" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} ${FUZZ_SEED:+-seed=$FUZZ_SEED} -close_fd_mask=3 -rss_limit_mb=2048 -timeout=20 \
    -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-" \
    "$work/corpus/$name" "$src/corpus/$name" >"$log" 2>&1
  echo $? >"$work/logs/$name.rc"
}

# FUZZ_JOBS harnesses at a time (default: one per core): CI's smoke takes
# seconds x harnesses / cores instead of seconds x harnesses.
running=0
for name in "${names[@]}"; do
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

failed=()
printf '%-16s %12s %8s %8s %8s\n' harness executions exec/s cov ft
for name in "${names[@]}"; do
  log="$work/logs/$name.log"
  rc=$(cat "$work/logs/$name.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-16s %12s %8s %8s %8s\n' "$name" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}"
  if [ "$rc" -ne 0 ]; then
    failed+=("$name")
    echo "  fuzz_$name failed (exit $rc); log: $log" >&2
    grep -m5 -E 'ERROR|runtime error|Test unit written' "$log" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "make fuzz: ${#failed[@]} harness(es) found a crash: ${failed[*]}; fix it, then keep the input as" \
       "tests/fuzz/corpus/NAME/crash-<what> (a regression test: ctest runs fuzz.NAME)" >&2
  exit 1
fi
