/* What the kernel A/B harnesses here share: a oneDNN call that must
 * succeed, a monotonic clock, and the comparison qsort needs for medians.
 * Dev-time only, like the harnesses. */
#ifndef SPRY_BENCH_KERNEL_AB_HARNESS_H
#define SPRY_BENCH_KERNEL_AB_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                         \
  do {                                                                \
    if ((x) != dnnl_success) {                                        \
      fprintf(stderr, "oneDNN failed: %s (line %d)\n", #x, __LINE__); \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#endif
