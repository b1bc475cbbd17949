#!/bin/bash
# Training (and batch-1 inference) speed of spry's cpu backend against PyTorch
# on the same machine, back to back, model by model; prints the JSON lines of
# both and a ratio line per pair. Medians: each side reports the median step
# of --steps timed steps; run this script several times on a quiet machine.
# First line: `spry bench peak`, this machine's fp32 / bf16 / copy limits; each
# ratio line gives spry's GFLOP/s as a fraction of the peak of its dtype.
#
#   bench/run_train.sh [threads] [steps]        (MODELS="vgg-face resnet50" to choose,
#                                               PARTS="infer" for inference only, DTYPES="f32",
#                                               REPS=3: pairs per figure, interleaved,
#                                               PROFILE=0: no per-op profile of spry's f32 step)
#
# Each figure is REPS spry/PyTorch pairs run back to back; after them one
# "ratio_median" line gives the median of the pairs' ratios (on a shared
# machine a single pair can be off by 30% either way).
set -u
cd "$(dirname "$0")/.."
T=${1:-2}
STEPS=${2:-10}
SPRY=${SPRY:-build/spry}
PY=${PY:-/usr/bin/python3}
MODELS=${MODELS:-"vgg-face resnet50 resunet18 resunet50"}
PARTS=${PARTS:-"train infer"}
DTYPES=${DTYPES:-"f32 bf16"}
REPS=${REPS:-3}
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 OMP_NUM_THREADS=$T

# This machine's limits, measured now: the denominator of "percent of peak".
PEAK=$($SPRY bench peak --threads "$T")
echo "$PEAK"

ratio() { # spry_json torch_json label
  $PY - "$1" "$2" "$3" "$PEAK" <<'PY'
import json, sys
a, b, peak = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[4])
key = "bf16_gflops_per_s" if a.get("dtype") == "bf16" else "fp32_gflops_per_s"
gf = a.get("gflops_per_s")
of_peak = round(gf / peak[key], 3) if peak.get(key) and isinstance(gf, (int, float)) else None
print(json.dumps({"bench": "ratio", "what": sys.argv[3], "spry_images_per_s": round(a["images_per_s"], 2),
                  "torch_images_per_s": round(b["images_per_s"], 2), "torch_layout": b.get("layout"),
                  "spry_over_torch": round(a["images_per_s"] / b["images_per_s"], 3),
                  "spry_gflops_per_s": round(gf, 1) if isinstance(gf, (int, float)) else None,
                  "spry_of_peak": of_peak}))
PY
}

ratios=()
median_line() { # label, then the ratios of its pairs (none: no line)
  [ $# -gt 1 ] || return 0
  $PY - "$@" <<'PY'
import json, statistics, sys
r = [float(x) for x in sys.argv[2:] if x]
print(json.dumps({"bench": "ratio_median", "what": sys.argv[1], "pairs": len(r), "ratios": r,
                  "spry_over_torch": round(statistics.median(r), 3)}))
PY
}
pair() { # spry_json torch_json label: prints both, the ratio line, keeps the ratio
  echo "$1"; echo "$2"
  local line
  line=$(ratio "$1" "$2" "$3") || return 0
  echo "$line"
  [ -n "$line" ] && ratios+=("$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["spry_over_torch"])' "$line")")
}

batch_of() { case $1 in vgg-face) echo 64 ;; *) echo 16 ;; esac; }

for m in $MODELS; do
  if ! $SPRY bench train --model "$m" --steps 1 --warmup 0 --batch 1 --size 64 >/dev/null 2>&1; then
    echo "{\"bench\":\"skip\",\"model\":\"$m\",\"why\":\"not in this build of spry\"}"
    continue
  fi
  b=$(batch_of "$m")
  declare -A spry_rates=()
  for dt in $DTYPES; do
    [[ " $PARTS " == *" train "* ]] || break
    ratios=()
    for _ in $(seq "$REPS"); do
      s=$($SPRY bench train --model "$m" --backend cpu --batch "$b" --threads "$T" --dtype $dt --steps "$STEPS" --warmup 2 | tail -1)
      p=$($PY bench/peers/torch_train.py --model "$m" --batch "$b" --threads "$T" --dtype $dt --steps "$STEPS" --warmup 2 | tail -1)
      pair "$s" "$p" "$m train $dt b$b"
      spry_rates[$dt]+=" $($PY -c 'import json,sys; print(json.loads(sys.argv[1])["images_per_s"])' "$s" 2>/dev/null)"
    done
    median_line "$m train $dt b$b" ${ratios[@]+"${ratios[@]}"}
  done
  if [ -n "${spry_rates[f32]:-}" ] && [ -n "${spry_rates[bf16]:-}" ]; then
    # The mixed-precision goal: spry bf16 against spry f32 (medians of the runs above).
    $PY - "$m" "${spry_rates[f32]}" "${spry_rates[bf16]}" <<'PY'
import json, statistics, sys
f32, bf16 = ([float(x) for x in a.split()] for a in sys.argv[2:4])
print(json.dumps({"bench": "bf16_over_f32", "model": sys.argv[1], "spry_f32_images_per_s": statistics.median(f32),
                  "spry_bf16_images_per_s": statistics.median(bf16),
                  "ratio": round(statistics.median(bf16) / statistics.median(f32), 3)}))
PY
  fi
  if [ "${PROFILE:-1}" = 1 ] && [[ " $PARTS " == *" train "* ]]; then
    # Where spry's step goes: ms per op kind, forward and backward.
    $SPRY bench train --model "$m" --backend cpu --batch "$b" --threads "$T" --steps 3 --warmup 1 --profile | tail -n +2
  fi
  unset spry_rates
  [[ " $PARTS " == *" infer "* ]] || continue
  case $m in vgg-face|resunet50)
    ratios=()
    for _ in $(seq "$REPS"); do
      s=$($SPRY bench train --model "$m" --backend cpu --threads "$T" --infer --steps "$STEPS" --warmup 2 | head -1)
      p=$($PY bench/peers/torch_train.py --model "$m" --threads "$T" --infer --steps "$STEPS" --warmup 2 --layout nchw | tail -1)
      pair "$s" "$p" "$m infer f32 b1 (torch eager)"
    done
    median_line "$m infer f32 b1 (torch eager)" ${ratios[@]+"${ratios[@]}"}
  esac
done
