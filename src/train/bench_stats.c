/* What the library benchmarks (bench_video.c, bench_data.c) report of their
 * runs: medians, steadier than means on a shared machine. */
#include <stdlib.h>

#include "spry/bench.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double sp_bench_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
