#!/bin/bash
# ab_switch.sh VAR A B [spry bench train args...]: one binary, a switch
# (a global int of the cpu backend, such as cpu_wino_stream) set to A or B by
# gdb before main runs, whole-model steps in alternating runs (A B, B A, A B,
# ...), per-node medians of --profile-nodes and the steps' medians; each node
# is shown against A scaled by the median node's B/A (the host's drift).
#
# Why: on a shared VM the same binary moves 20-60% between runs minutes apart,
# more than most kernel changes. Alternating the two sides in one build, and
# reading the nodes the switch touches against those it does not (their
# medians should agree), separates a change from the host's drift.
#
#   bench/kernel_ab/ab_switch.sh cpu_wino_stream 0 1 --model resunet50 --infer --batch 64 --dtype f32
#   PAIRS=5 TOP=20 bench/kernel_ab/ab_switch.sh cpu_conv_use_s2_dx 0 1 --model vgg-face --batch 64 --dtype bf16
#
# Env: PAIRS (default 3), STEPS (3), WARMUP (1), TOP (nodes shown, 15),
# SPRY (the binary, default build/spry). Needs gdb and python3 (dev time only).
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
var=$1 a=$2 b=$3
shift 3
root=$(git rev-parse --show-toplevel)
spry=${SPRY:-$root/build/spry}
pairs=${PAIRS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
command -v gdb > /dev/null || { echo "ab_switch.sh: needs gdb (apt-get install gdb)" >&2; exit 2; }
[ -x "$spry" ] || { echo "ab_switch.sh: $spry not built (make)" >&2; exit 2; }

# One run with VAR=value; its JSON lines into $out/side.run.json.
run_one() {
  local side=$1 value=$2 k=$3
  shift 3
  gdb -q -batch -ex 'set pagination off' -ex 'break main' -ex run -ex "set var $var=$value" -ex continue \
    --args "$spry" bench train --steps "${STEPS:-3}" --warmup "${WARMUP:-1}" --profile-nodes "$@" \
    2> "$out/gdb.err" | grep '^{' > "$out/$side.$k.json" || true
  # gdb runs on past a `set var` it cannot do: both sides would be the same run.
  if grep -q 'No symbol' "$out/gdb.err"; then
    echo "ab_switch.sh: $spry has no switch named $var" >&2
    exit 1
  fi
  if ! grep -q '"ms_per_step"' "$out/$side.$k.json"; then
    echo "ab_switch.sh: run $side ($var=$value) printed no step; gdb said:" >&2
    tail -5 "$out/gdb.err" >&2
    exit 1
  fi
  printf '%s (%s=%s): %s ms a step\n' "$side" "$var" "$value" \
    "$(grep -o '"ms_per_step":[0-9.]*' "$out/$side.$k.json" | head -1 | cut -d: -f2)"
}

for k in $(seq "$pairs"); do
  if [ $((k % 2)) -eq 1 ]; then
    run_one A "$a" "$k" "$@"
    run_one B "$b" "$k" "$@"
  else
    run_one B "$b" "$k" "$@"
    run_one A "$a" "$k" "$@"
  fi
done

python3 - "$out" "$var" "$a" "$b" "${TOP:-15}" << 'EOF'
import glob, json, statistics, sys
out, var, a, b, top = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])

def load(side):
    steps, nodes = [], {}
    for f in sorted(glob.glob(f"{out}/{side}.*.json")):
        for line in open(f):
            r = json.loads(line)
            if "ms_per_step" in r and r.get("bench") in ("train", "infer"):
                steps.append(r["ms_per_step"])
            elif r.get("bench", "").endswith("profile_node"):
                key = (r["name"], r["op"])
                nodes.setdefault(key, []).append(r["fwd_ms_per_step"] + r["bwd_ms_per_step"])
    return steps, nodes

sa, na = load("A")
sb, nb = load("B")
med = statistics.median
print(f"\nstep ms ({len(sa)} runs a side): {var}={a} {med(sa):.1f} {[round(x) for x in sa]}"
      f"  {var}={b} {med(sb):.1f} {[round(x) for x in sb]}  B/A {med(sb) / med(sa):.3f}")
# The host's drift between runs moves every node alike: the median node's B/A
# estimates it, and each node is shown against A scaled by it, so the nodes
# the switch touched stand out from those it did not.
ratios = sorted(med(nb[k]) / med(na[k]) for k in na.keys() & nb.keys() if med(na[k]) > 0.05)
drift = med(ratios) if ratios else 1.0
rows = []
for key in na.keys() & nb.keys():
    ma, mb = med(na[key]), med(nb[key])
    rows.append((mb - ma * drift, key, ma, mb, min(na[key]), max(na[key]), min(nb[key]), max(nb[key])))
rows.sort(key=lambda r: -abs(r[0]))
print(f"the median node's B/A (the host's drift between the sides): {drift:.3f}")
print("nodes that moved most against it (fwd + bwd ms a step, medians; the runs' range in brackets):")
print(f"{'B - A*drift':>11}  {'node':<34} {'A':>8} {'B':>8}")
for d, (name, op), ma, mb, la, ha, lb, hb in rows[:top]:
    print(f"{d:11.2f}  {name + ' (' + op + ')':<34} {ma:8.2f} {mb:8.2f}   [{la:.1f}-{ha:.1f}] [{lb:.1f}-{hb:.1f}]")
total_a = sum(med(v) for v in na.values())
total_b = sum(med(v) for v in nb.values())
moved = sum(r[0] for r in rows[:top])
print(f"sum of node medians: A {total_a:.1f}  B {total_b:.1f}; the {min(top, len(rows))} above {moved:+.1f} ms "
      "against the drift")
EOF
