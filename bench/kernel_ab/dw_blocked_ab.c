/* One process, two versions of the bf16 blocked weight-gradient kernel
 * (backends/cpu/conv_dw_blocked.c): `base_*` (an older revision's file,
 * compiled with its symbols renamed by ab_dw_blocked.sh) and the current
 * build's. They run alternately, call by call, on ResNet-50's layer shapes
 * at batch 16 with the caches flushed before each call, so that the
 * machine's slow drifts (a shared VM's neighbours) fall on both alike; the
 * medians per shape and their sum are printed, with the largest difference
 * between the two results (0 where the change keeps the order of sums).
 *
 * Separate processes could not tell a 10% change here: the same binary
 * moved 20-60% between runs minutes apart (session 40).
 *
 *   usage: dw_blocked_ab [shape index | -] [calls per version]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/cpu/cpu.h"
#include "harness.h"

size_t base_scratch(const cpu_dwb_shape *s, int threads);
void base_dw(const cpu_dwb_shape *s, float *dw, char *scratch, int threads, int fresh);

enum { THREADS = 2, MAX_CALLS = 64 };

/* A convolution's weight gradient as conv.c describes it to the kernel. */
static cpu_dwb_shape conv_shape(int64_t n, int64_t ic, int64_t ih, int64_t oc, int64_t k, int64_t stride) {
  const int64_t pad = k / 2, oh = (ih + 2 * pad - k) / stride + 1;
  return (cpu_dwb_shape){n,
                         oh,
                         oh,
                         k,
                         k,
                         {NULL, ic, ih, ih, stride, stride, 1, 1, -pad, -pad},
                         {NULL, oc, oh, oh, 1, 1, 0, 0, 0, 0},
                         ic * k * k,
                         k * k,
                         1};
}

int main(int argc, char **argv) {
  /* ic, input size, oc, kernel, stride, batch: ResNet-50's distinct layers
   * at batch 16, then vgg-face's at batch 64. */
  static const int64_t layers[][6] = {
      {64, 56, 64, 3, 1, 16},   {128, 28, 128, 3, 1, 16}, {256, 14, 256, 3, 1, 16}, {512, 7, 512, 3, 1, 16},
      {256, 56, 64, 1, 1, 16},  {64, 56, 256, 1, 1, 16},  {1024, 14, 256, 1, 1, 16}, {256, 14, 1024, 1, 1, 16},
      {2048, 7, 512, 1, 1, 16}, {512, 7, 2048, 1, 1, 16}, {256, 28, 512, 1, 1, 16},  {512, 14, 512, 3, 2, 16},
      {128, 56, 128, 3, 2, 16}, {256, 56, 512, 1, 2, 16}, {16, 56, 32, 3, 2, 64},    {32, 28, 32, 3, 1, 64},
      {32, 28, 64, 3, 2, 64},   {64, 14, 64, 3, 1, 64},   {64, 14, 128, 3, 2, 64},   {128, 7, 128, 3, 1, 64}};
  const int n_layers = (int)(sizeof layers / sizeof layers[0]);
  const int all = argc < 2 || argv[1][0] == '-', first = all ? 0 : atoi(argv[1]), last = all ? n_layers : first + 1;
  int calls = argc > 2 ? atoi(argv[2]) : 15;
  if (calls < 1 || calls > MAX_CALLS || first < 0 || last > n_layers) {
    fprintf(stderr, "usage: %s [shape 0-%d | -] [calls 1-%d]\n", argv[0], n_layers - 1, MAX_CALLS);
    return 2;
  }
  const size_t flush_bytes = (size_t)96 << 20; /* past any last-level cache here */
  char *flush = malloc(flush_bytes);
  double sum_base = 0, sum_now = 0;
  for (int l = first; l < last; l++) {
    cpu_dwb_shape s = conv_shape(layers[l][5], layers[l][0], layers[l][1], layers[l][2], layers[l][3], layers[l][4]);
    const size_t xa = (size_t)(s.n * (s.a.c + 15) / 16 * 16 * s.a.h * s.a.w),
                 yb = (size_t)(s.n * (s.b.c + 15) / 16 * 16 * s.b.h * s.b.w);
    uint16_t *x = malloc(2 * xa + 64), *y = malloc(2 * yb + 64);
    for (size_t i = 0; i < xa; i++) x[i] = (uint16_t)(0x3f80 + i % 7); /* bf16 1.0 .. 1.05 */
    for (size_t i = 0; i < yb; i++) y[i] = (uint16_t)(0x3f00 + i % 5);
    s.a.t = x, s.b.t = y;
    const size_t values = (size_t)(s.a.c * s.b.c * s.kh * s.kw);
    float *dw_base = malloc(4 * values), *dw_now = malloc(4 * values);
    size_t sb = cpu_dw_blocked_scratch_bytes(&s, THREADS);
    if (base_scratch(&s, THREADS) > sb) sb = base_scratch(&s, THREADS);
    char *scratch = aligned_alloc(64, (sb + 127) / 64 * 64);
    double t_base[MAX_CALLS], t_now[MAX_CALLS];
    for (int r = 0; r <= calls; r++) /* call 0 of each: warm-up */
      for (int v = 0; v < 2; v++) {
        const int base = (v ^ r) & 1; /* which goes first alternates */
        memset(flush, r, flush_bytes);
        const double t0 = now();
        if (base)
          base_dw(&s, dw_base, scratch, THREADS, 1);
        else
          cpu_dw_blocked(&s, dw_now, scratch, THREADS, 1);
        const double t = now() - t0;
        if (r > 0) (base ? t_base : t_now)[r - 1] = t;
      }
    double diff = 0;
    for (size_t i = 0; i < values; i++) {
      const double d = dw_base[i] > dw_now[i] ? dw_base[i] - dw_now[i] : dw_now[i] - dw_base[i];
      if (d > diff) diff = d;
    }
    qsort(t_base, (size_t)calls, sizeof(double), by_value);
    qsort(t_now, (size_t)calls, sizeof(double), by_value);
    const double mb = t_base[calls / 2], mn = t_now[calls / 2],
                 flops = 2.0 * (double)s.n * (double)(s.gh * s.gw) * (double)values;
    printf(
        "n%-2ld ic %4ld %3ldx%-3ld oc %4ld k%ld s%ld: base %.2f ms, now %.2f ms (median of %d; %.0f -> %.0f GFLOP/s), "
        "max |difference| %g\n",
        (long)layers[l][5], (long)layers[l][0], (long)layers[l][1], (long)layers[l][1], (long)layers[l][2], (long)layers[l][3],
        (long)layers[l][4], 1e3 * mb, 1e3 * mn, calls, flops / mb * 1e-9, flops / mn * 1e-9, diff);
    sum_base += mb, sum_now += mn;
    free(x), free(y), free(dw_base), free(dw_now), free(scratch);
  }
  printf("sum of medians: base %.2f ms, now %.2f ms, now / base %.3f\n", 1e3 * sum_base, 1e3 * sum_now,
         sum_now / sum_base);
  free(flush);
  return 0;
}
