#!/bin/bash
# ab_wino.sh [calls]: conv_wino_s2.c's forward and input gradient against
# oneDNN's kernels on vgg-face's four stride-2 layers (batch 64 and 1) and
# ResNet-50's three (batch 16), in one process each (wino_vs_onednn.c);
# STRIDE=1 SHAPES=...: conv_wino.c's on stride-1 shapes. Build first (`make`): this
# links build/libspry.a. On AVX-512 machines oneDNN is held to AVX2, where
# it chooses the 8-channel blocks this kernel is for.
set -euo pipefail
# shellcheck source=bench/kernel_ab/build.sh
source "$(dirname "$0")/build.sh" wino_vs_onednn.c
export ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# SHAPES="N H C_IN C_OUT, ...": other shapes
IFS=, read -ra shapes <<<"${SHAPES:-64 112 8 16,64 56 16 32,64 28 32 64,64 14 64 128,1 112 8 16,1 56 16 32,1 28 32 64,1 14 64 128,16 56 128 128,16 28 256 256,16 14 512 512}"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086 # the shape's four numbers are four arguments
  "$out/ab" $shape "${1:-15}"
done
