#!/bin/bash
# ab_linear_fwd.sh [calls]: linear_fwd.c's f32 forward product against
# oneDNN's sgemm and matmul (linear_fwd_ab.c) on vgg-face's fc1 at batch 64
# and 16, and fc2 at 64. Build first (`make`): this links build/libspry.a.
# SHAPES="M K N, ...": other shapes.
set -euo pipefail
# shellcheck source=bench/kernel_ab/build.sh
source "$(dirname "$0")/build.sh" linear_fwd_ab.c
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
IFS=, read -ra shapes <<<"${SHAPES:-64 6272 1024,16 6272 1024,64 1024 136}"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086 # the shape's three numbers are three arguments
  "$out/ab" $shape "${1:-15}"
done
