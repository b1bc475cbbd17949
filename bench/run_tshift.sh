#!/bin/bash
# The fused temporal shift vs composed versions (ours in C, PyTorch's, Paddle's
# own op where it installs) on the seed's shapes and TSM-R50's layer1 shape.
# Prints JSON lines. Usage: bench/run_tshift.sh [RUNS]   (from the repo root)
# Paddle: `python3 -m venv VENV && VENV/bin/pip install paddlepaddle`,
# then PADDLE_PY=VENV/bin/python bench/run_tshift.sh (skipped when it does not import)
set -u
runs=${1:-20}
spry=${SPRY:-build/spry}
torch_py=${TORCH_PY:-/usr/bin/python3}
paddle_py=${PADDLE_PY:-python3}
threads=${THREADS:-$(nproc)}
cases=("32,16,32,32 2 0.2" "128,64,128,128 2 0.2" "64,256,56,56 8 1/8")
for c in "${cases[@]}"; do
  set -- $c
  r=$runs
  [ "$1" = "128,64,128,128" ] && r=$(( runs < 5 ? runs : 5 ))  # 0.5 GB per tensor
  "$spry" bench op tshift --shape "$1" --segments "$2" --ratio "$3" --runs "$r" --threads "$threads"
  "$torch_py" bench/peers/torch_tshift.py --shape "$1" --segments "$2" --ratio "$3" --runs "$r" --threads "$threads" \
    || echo '{"bench":"op_tshift","impl":"torch_composed","error":"torch peer failed"}'
  if [ -x "$paddle_py" ]; then
    "$paddle_py" bench/peers/paddle_tshift.py --shape "$1" --segments "$2" --ratio "$3" --runs "$r"
  else
    echo "{\"bench\":\"op_tshift\",\"impl\":\"paddle\",\"error\":\"no python with paddle at $paddle_py\"}"
  fi
done
