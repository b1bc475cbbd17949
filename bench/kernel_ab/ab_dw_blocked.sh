#!/bin/bash
# ab_dw_blocked.sh [REV] [shape|-] [calls]: the bf16 blocked weight-gradient
# kernel of git revision REV (default HEAD) against the working tree's, in one
# process (dw_blocked_ab.c). Build first (`make`): this links build/libspry.a.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
rev=${1:-HEAD}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
git -C "$root" show "$rev:src/backends/cpu/conv_dw_blocked.c" > "$out/base.c"
# The build's own flags for the base (CMakeLists.txt): with plain -O2 the base's
# sums transpose stayed scalar and the 512-channel layers read 8-10% faster
# than the same file in the build.
cflags="-O2 -march=native -fopenmp -fvect-cost-model=dynamic -I$root/src -I$root/include -DSPRY_HAVE_DNNL"
gcc $cflags -Dcpu_dw_blocked=base_dw -Dcpu_dw_blocked_scratch_bytes=base_scratch \
  -Dcpu_dw_blocked_fits=base_fits -Dcpu_conv_use_dw_blocked=base_use -c "$out/base.c" -o "$out/base.o"
gcc $cflags "$root/bench/kernel_ab/dw_blocked_ab.c" "$out/base.o" "$root/build/libspry.a" \
  $(pkg-config --libs libavformat libavcodec libswscale libavutil) -ldnnl -lturbojpeg -lopenblas -lm -lstdc++ \
  -o "$out/ab"
OMP_NUM_THREADS=2 "$out/ab" "${2:--}" "${3:-15}"
