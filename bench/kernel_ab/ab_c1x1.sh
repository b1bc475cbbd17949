#!/bin/bash
# ab_c1x1.sh [calls]: conv_1x1.c's frozen f32 1x1 convolution against
# oneDNN's on ResUNet-50's 1x1 layer shapes at batch 64 (and 1 with
# SHAPES=...), in one process each (c1x1_vs_onednn.c). ADD=1: with the
# residual add; FLUSH=0: caches not flushed between calls. Build first
# (`make`): this links build/libspry.a.
set -euo pipefail
# shellcheck source=bench/kernel_ab/build.sh
source "$(dirname "$0")/build.sh" c1x1_vs_onednn.c
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# SHAPES="N HW_SIDE C_IN C_OUT, ...": other shapes
IFS=, read -ra shapes <<<"${SHAPES:-64 56 64 256,64 56 256 64,64 56 256 128,64 28 128 512,64 28 512 128,64 28 512 256,64 14 256 1024,64 14 1024 256,64 7 512 2048,64 7 2048 512,64 56 384 128,64 28 768 256,64 14 1536 512,64 112 128 64,64 112 16 64}"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086 # the shape's four numbers are four arguments
  "$out/ab" $shape "${1:-9}"
done
