#!/bin/bash
# ab_linear_fwd.sh [calls]: linear_fwd.c's f32 forward product against
# oneDNN's sgemm and matmul (linear_fwd_ab.c) on vgg-face's fc1 at batch 64
# and 16, and fc2 at 64. Build first (`make`): this links build/libspry.a.
# SHAPES="M K N, ...": other shapes.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -O2 -march=native -fopenmp -I"$root/src" -I"$root/include" -DSPRY_HAVE_DNNL \
  "$root/bench/kernel_ab/linear_fwd_ab.c" "$root/build/libspry.a" \
  $(pkg-config --libs libavformat libavcodec libswscale libavutil) -ldnnl -lturbojpeg -lopenblas -lm -lstdc++ \
  -o "$out/ab"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
IFS=, read -ra shapes <<<"${SHAPES:-64 6272 1024,16 6272 1024,64 1024 136}"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086 # the shape's three numbers are three arguments
  "$out/ab" $shape "${1:-15}"
done
