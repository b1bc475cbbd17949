#!/bin/bash
# Training and inference speed of spry's cpu backend against the newest
# PyTorch from PyPI on the same machine, back to back, model by model; prints
# the JSON lines of both and a ratio line per pair.
#
#   bench/run_train.sh [threads] [steps]
#     MODELS="vgg-face resnet50 resunet50 tsm-r50"  models (tsm-r50: 8 segments, 2 clips)
#     PARTS="train infer"    training (batch 64 vgg-face, 2 clips video, 16 else) and/or
#                            frozen inference at batch 1 and 64 (vgg-face, resunet50)
#     DTYPES="f32 bf16"      REPS=3 (spry/PyTorch pairs per figure, interleaved)
#     VARIANTS=nchw,channels_last,compile   the PyTorch variants (best one is the peer)
#     BEST_ONCE=1            time every variant in the first pair of a figure only, then the
#                            best one (training) or the best eager one and compile (inference);
#                            0: every variant in every pair
#     PROFILE=0              no per-op profile of spry's bf16 step
#     INFER_STEPS=N          timed steps of each inference run, both sides (default: steps,
#                            at least 12: vgg-face's 17 ms batch-64 step over 4 steps is a 70 ms
#                            window, and spry's figure moved 2043-3888 img/s between identical runs)
#     INFER_STEPS_B1=N       ... at batch 1 (default: 5 x INFER_STEPS: resunet50's 80 ms batch-1
#                            step over 12 steps was a 1 s window, and on a noisy Zen 3 spry's
#                            figure moved 7.9-12.7 img/s between the pairs of one run)
#     PY=python              a Python with torch (default: bench/.venv-torch, made and
#                            filled from PyPI with `pip install torch torchvision` if missing)
#
# First lines: the machine (CPU model, its AVX-512 / AMX flags, PyTorch's
# version) and `spry bench peak` (fp32 FMA, bf16 dot, AMX bf16 tile and copy
# limits, the denominator of each spry row's spry_of_peak). Each figure is
# REPS pairs; a "ratio_median" line gives the median of the pairs' ratios (on
# a shared machine one pair can be off by 30% either way). Each ratio line
# carries host_then, the host's limits read just before its pair. Training
# ratios are against PyTorch's best variant; inference ratios against the
# best eager variant and against torch.compile separately.
set -u
cd "$(dirname "$0")/.."
T=${1:-2}
STEPS=${2:-10}
SPRY=${SPRY:-build/spry}
MODELS=${MODELS:-"vgg-face resnet50 resunet50 tsm-r50"}
PARTS=${PARTS:-"train infer"}
DTYPES=${DTYPES:-"f32 bf16"}
REPS=${REPS:-3}
INFER_STEPS=${INFER_STEPS:-$((STEPS > 12 ? STEPS : 12))}
INFER_STEPS_B1=${INFER_STEPS_B1:-$((5 * INFER_STEPS))}
VARIANTS=${VARIANTS:-nchw,channels_last,compile}
BEST_ONCE=${BEST_ONCE:-1}
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 OMP_NUM_THREADS=$T

if [ -z "${PY:-}" ]; then
  PY=bench/.venv-torch/bin/python
  if ! "$PY" -c 'import torch, torchvision' 2>/dev/null; then
    echo "# installing the newest torch + torchvision from PyPI into bench/.venv-torch" >&2
    python3 -m venv bench/.venv-torch && bench/.venv-torch/bin/pip install -q --upgrade torch torchvision >&2 ||
      { echo "bench/run_train.sh: could not install torch into bench/.venv-torch" >&2; exit 1; }
  fi
fi

# The machine: what "this CPU" means in every figure below.
$PY - <<'PY'
import json, re, torch
info = open("/proc/cpuinfo").read()
model = re.search(r"model name\s*:\s*(.*)", info)
flags = sorted(set(re.findall(r"\b(amx\w*|avx512\w*|avx2|avx_vnni|fma|f16c)\b", info)))
print(json.dumps({"bench": "machine", "cpu": model.group(1) if model else None, "flags": flags,
                  "torch": torch.__version__, "torch_threads": torch.get_num_threads()}))
PY
PEAK=$($SPRY bench peak --threads "$T")
echo "$PEAK"

# bf16 runs from AVX-512 on (oneDNN has no bf16 kernels below it): on an AVX2
# CPU spry refuses it, saying so, and the bf16 figures are left out.
PROFILE_DT=bf16
if [[ " $DTYPES " == *" bf16 "* ]] &&
   ! why=$($SPRY bench train --model vgg-face --dtype bf16 --steps 1 --warmup 0 --batch 1 --size 64 2>&1 >/dev/null); then
  echo "{\"bench\":\"skip\",\"dtype\":\"bf16\",\"why\":$(printf '%s' "$why" | $PY -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}"
  DTYPES=$(echo " $DTYPES " | sed 's/ bf16 / /; s/^ *//; s/ *$//')
  PROFILE_DT=f32
fi

ratio() { # spry_json torch_json label which(best|eager|compile)
  $PY - "$1" "$2" "$3" "$4" "$PEAK" "${PAIR_PEAK:-$PEAK}" <<'PY'
import json, sys
a, b, label, which, peak = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
now = json.loads(sys.argv[6])
v = {k: x for k, x in b.get("variants", {}).items() if isinstance(x, (int, float))}
if which == "eager":
    peer = max([v[k] for k in ("nchw", "channels_last") if k in v] or [0])
    layout = max((k for k in ("nchw", "channels_last") if k in v), key=lambda k: v[k], default=None)
elif which == "compile":
    peer, layout = v.get("compile", 0), "compile"
else:
    peer, layout = b["images_per_s"], b.get("layout")
if not peer:
    sys.exit(0)
if a.get("computes", a.get("dtype")) == "bf16":  # "computes": f32 where bf16 is slower here
    key = "amx_bf16_gflops_per_s" if peak.get("amx_bf16_gflops_per_s") else "bf16_gflops_per_s"
else:
    key = "fp32_gflops_per_s"
gf = a.get("gflops_per_s")
of_peak = round(gf / peak[key], 3) if peak.get(key) and isinstance(gf, (int, float)) else None
print(json.dumps({"bench": "ratio", "what": label, "spry_images_per_s": round(a["images_per_s"], 2),
                  "torch_images_per_s": round(peer, 2), "torch_variant": layout,
                  "spry_over_torch": round(a["images_per_s"] / peer, 3),
                  "spry_gflops_per_s": round(gf, 1) if isinstance(gf, (int, float)) else None,
                  "spry_of_peak": of_peak, "peak_key": key, "spry_computes": a.get("computes", a.get("dtype")),
                  "host_then": {k: round(now[k]) for k in ("fp32_gflops_per_s", "amx_bf16_gflops_per_s", "copy_gb_per_s")
                                if isinstance(now.get(k), (int, float))}}))
PY
}

# The host's limits just before a pair, printed in its ratio line as
# host_then (1.5 s: the median of 3 runs; a single run read fp32 at about
# half its rate, the FMA loop not yet warm). On a shared host the phase
# moves the figures more than most changes do. Within session 68 the AMX
# bf16 peak read 2069-5988 GFLOP/s (the fp32 one 216-355), a phase lasting
# minutes, and spry, whose bf16 step leans on AMX, lost more of its speed
# in the slow phases than PyTorch did (resunet50 bf16 training, the same
# binary: 1.57x with the AMX peak at 2282 before the run, 2.09x at 5571).
pair_peak() { PAIR_PEAK=$($SPRY bench peak --threads "$T" --runs 3); }

declare -A ratios=()
median_line() { # label, then the ratios of its pairs (none: no line)
  [ $# -gt 1 ] || return 0
  $PY - "$@" <<'PY'
import json, statistics, sys
r = [float(x) for x in sys.argv[2:] if x]
print(json.dumps({"bench": "ratio_median", "what": sys.argv[1], "pairs": len(r), "ratios": r,
                  "spry_over_torch": round(statistics.median(r), 3)}))
PY
}
pair() { # spry_json torch_json label which: prints the ratio line, keeps the ratio under label
  local line
  line=$(ratio "$1" "$2" "$3" "$4") || return 0
  [ -n "$line" ] || return 0
  echo "$line"
  ratios[$3]+=" $($PY -c 'import json,sys; print(json.loads(sys.argv[1])["spry_over_torch"])' "$line")"
}
medians() { # labels...
  for l in "$@"; do
    # shellcheck disable=SC2086
    median_line "$l" ${ratios[$l]:-}
  done
}

# The variants to time after a first peer line (BEST_ONCE=1): its best, or
# (inference, "eager+compile") its best eager one and compile.
narrow() { # torch_json mode
  [ "$BEST_ONCE" = 1 ] || { echo "$VARIANTS"; return; }
  $PY - "$1" "$2" "$VARIANTS" <<'PY'
import json, sys
try:
    v = {k: x for k, x in json.loads(sys.argv[1]).get("variants", {}).items() if isinstance(x, (int, float))}
except ValueError:
    v = {}
if not v:
    print(sys.argv[3])
elif sys.argv[2] == "best":
    print(max(v, key=v.get))
else:
    eager = [k for k in ("nchw", "channels_last") if k in v]
    print(",".join(([max(eager, key=v.get)] if eager else []) + (["compile"] if "compile" in v else [])))
PY
}

batch_of() { case $1 in vgg-face) echo 64 ;; tsm-*|tsn-*) echo 2 ;; *) echo 16 ;; esac; }
video_args() { case $1 in tsm-*|tsn-*) echo "--segments 8" ;; *) echo "" ;; esac; }

for m in $MODELS; do
  if ! $SPRY bench train --model "$m" --steps 1 --warmup 0 --batch 1 --size 64 >/dev/null 2>&1; then
    echo "{\"bench\":\"skip\",\"model\":\"$m\",\"why\":\"not in this build of spry\"}"
    continue
  fi
  b=$(batch_of "$m")
  va=$(video_args "$m")
  if [[ " $PARTS " == *" train "* ]]; then
    for dt in $DTYPES; do
      label="$m train $dt b$b"
      vars=$VARIANTS
      for _ in $(seq "$REPS"); do
        pair_peak
        # shellcheck disable=SC2086
        s=$($SPRY bench train --model "$m" --backend cpu --batch "$b" --threads "$T" --dtype $dt --steps "$STEPS" --warmup 2 $va | tail -1)
        # shellcheck disable=SC2086
        p=$($PY bench/peers/torch_train.py --model "$m" --batch "$b" --threads "$T" --dtype $dt --steps "$STEPS" --warmup 2 \
              --variants "$vars" $va 2>/dev/null | tail -1)
        echo "$s"; echo "$p"
        pair "$s" "$p" "$label" best
        vars=$(narrow "$p" best)
      done
      medians "$label"
    done
    if [ "${PROFILE:-1}" = 1 ]; then
      # Where spry's bf16 step goes (f32's where bf16 does not run): ms per op kind, forward and backward.
      # shellcheck disable=SC2086
      $SPRY bench train --model "$m" --backend cpu --batch "$b" --threads "$T" --dtype $PROFILE_DT --steps 3 --warmup 1 --profile $va
    fi
  fi
  [[ " $PARTS " == *" infer "* ]] || continue
  case $m in vgg-face|resunet50)
    for dt in $DTYPES; do
      declare -A ivars=([1]=$VARIANTS [64]=$VARIANTS)
      for _ in $(seq "$REPS"); do
        for ib in 1 64; do
          pair_peak
          is=$INFER_STEPS
          [ "$ib" = 1 ] && is=$INFER_STEPS_B1
          sl=$($SPRY bench train --model "$m" --backend cpu --threads "$T" --dtype "$dt" --infer --batch "$ib" --steps "$is" \
                 --warmup 2 | tail -1)
          echo "$sl"
          p=$($PY bench/peers/torch_train.py --model "$m" --batch "$ib" --threads "$T" --dtype "$dt" --infer --steps "$is" \
                --warmup 2 --variants "${ivars[$ib]}" 2>/dev/null | tail -1)
          echo "$p"
          pair "$sl" "$p" "$m infer $dt b$ib vs eager" eager
          pair "$sl" "$p" "$m infer $dt b$ib vs compile" compile
          ivars[$ib]=$(narrow "$p" eager+compile)
        done
      done
      medians "$m infer $dt b1 vs eager" "$m infer $dt b1 vs compile" "$m infer $dt b64 vs eager" "$m infer $dt b64 vs compile"
    done
  esac
done
