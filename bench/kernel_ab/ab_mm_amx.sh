#!/bin/bash
# ab_mm_amx.sh [runs]: mm_amx.c's bf16 products against oneDNN's matmul
# (mm_amx_vs_onednn.c) on the 1x1 and up-layer products of a ResUNet-50 bf16
# training step at batch 16 (M K N and how often a step runs it), alternating
# in one process. Build first (`make`): this links build/libspry.a. Needs AMX.
# SHAPES="M K N COUNT, ...": other shapes.
set -euo pipefail
# shellcheck source=bench/kernel_ab/build.sh
source "$(dirname "$0")/build.sh" mm_amx_vs_onednn.c
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
default="12544 128 512 7,12544 256 512 3,12544 512 128 7,12544 512 256 3,12544 64 256 1,12544 768 256 1,\
12544 768 64 1,12544 256 768 1,12544 64 768 1,12544 256 64 1,200704 96 64 1,200704 64 96 1,\
3136 1024 256 11,3136 1024 512 3,3136 128 512 1,3136 1536 128 1,3136 1536 512 1,3136 256 1024 11,\
3136 512 1024 3,3136 512 128 1,3136 128 1536 1,3136 512 1536 1,50176 256 128 2,50176 256 64 6,\
50176 32 128 1,50176 384 128 1,50176 384 32 1,50176 64 256 6,50176 64 64 2,50176 128 256 2,\
50176 128 32 1,50176 128 384 1,50176 32 384 1,784 1024 2048 1,784 2048 512 5,784 512 2048 5,\
784 2048 1024 1,784 2048 2048 2"
tr ',' '\n' <<<"${SHAPES:-$default}" | "$out/ab" "${1:-15}"
