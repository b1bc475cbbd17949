#!/bin/bash
# ab_s2dw.sh [calls]: conv_s2_dw.c's weight gradient against oneDNN's kernel
# on vgg-face's four stride-2 layers (batch 64) and ResNet-50's three (batch
# 16; plans leave those to oneDNN: no faster in the step), in one process
# each (s2dw_vs_onednn.c). Build first (`make`): this
# links build/libspry.a. On AVX-512 machines oneDNN is held to AVX2, where
# it chooses the 8-channel blocks this kernel is for.
set -euo pipefail
# shellcheck source=bench/kernel_ab/build.sh
source "$(dirname "$0")/build.sh" s2dw_vs_onednn.c
export ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for shape in "64 112 8 16" "64 56 16 32" "64 28 32 64" "64 14 64 128" "16 56 128 128" "16 28 256 256" \
  "16 14 512 512"; do
  "$out/ab" $shape "${1:-15}"
done
