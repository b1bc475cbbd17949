# Sourced by the ab_*.sh scripts with a harness file name: builds
# bench/kernel_ab/$1 against build/libspry.a (build it first: `make`) into
# $out/ab, a temporary folder removed on exit.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
gcc -O2 -march=native -fopenmp -I"$root/src" -I"$root/include" -DSPRY_HAVE_DNNL \
  "$root/bench/kernel_ab/$1" "$root/build/libspry.a" \
  $(pkg-config --libs libavformat libavcodec libswscale libavutil) -ldnnl -lturbojpeg -lopenblas -lm -lstdc++ \
  -o "$out/ab"
