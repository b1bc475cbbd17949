/* The weight gradient of 1x1 convolutions on 16-channel blocked bf16
 * activations (backends/cpu/conv_dw_blocked.c): the kernel against a double
 * sum of the same bf16 products (odd positions per image, chunks across
 * images, both thread splits, written and added, one and two threads), a
 * bf16 training step with and without it, and where a plan takes it. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float f32_of(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* An N x C x hw tensor in aBcd16b, random values in [-2, 2). */
static uint16_t *blocked_random(int64_t n, int64_t c, int64_t hw, unsigned *seed) {
  uint16_t *t = malloc(sizeof(uint16_t) * (size_t)(n * c * hw));
  for (int64_t i = 0; i < n * c * hw; i++) t[i] = bf16_of(4.0f * (float)rand_r(seed) / (float)RAND_MAX - 2.0f);
  return t;
}
static float at(const uint16_t *t, int64_t c, int64_t hw, int64_t n, int64_t ch, int64_t p) {
  return f32_of(t[((n * (c / 16) + ch / 16) * hw + p) * 16 + ch % 16]);
}

typedef struct {
  int64_t n, hw, oc, ic;
} dwb_case;

/* Each case against the double sum, written (from NaN) and added (onto 0.5),
 * with 1 and 2 threads: within f32 summation of |terms|. */
static void check_case(const dwb_case *k) {
  unsigned seed = (unsigned)(k->n * 131 + k->hw * 7 + k->oc + k->ic);
  uint16_t *x = blocked_random(k->n, k->ic, k->hw, &seed), *dy = blocked_random(k->n, k->oc, k->hw, &seed);
  const size_t m = (size_t)(k->oc * k->ic);
  double *want = calloc(m, sizeof(double)), *mag = calloc(m, sizeof(double));
  for (int64_t o = 0; o < k->oc; o++)
    for (int64_t i = 0; i < k->ic; i++)
      for (int64_t n = 0; n < k->n; n++)
        for (int64_t p = 0; p < k->hw; p++) {
          const double t = (double)at(dy, k->oc, k->hw, n, o, p) * at(x, k->ic, k->hw, n, i, p);
          want[o * k->ic + i] += t, mag[o * k->ic + i] += fabs(t);
        }
  float *dw = malloc(sizeof(float) * m);
  for (int threads = 1; threads <= 2; threads++) {
    char *scratch = malloc(cpu_dw_blocked_scratch_bytes(k->oc, k->ic, threads) + 64);
    for (int fresh = 1; fresh >= 0; fresh--) {
      for (size_t j = 0; j < m; j++) dw[j] = fresh ? NAN : 0.5f;
      cpu_dw_blocked(dy, x, k->n, k->hw, k->oc, k->ic, dw, scratch, threads, fresh);
      for (size_t j = 0; j < m; j++) {
        const double w = want[j] + (fresh ? 0.0 : 0.5), tol = 1e-5 * (mag[j] + 1.0);
        if (!(fabs(dw[j] - w) <= tol))
          fail_msg("n%ld hw%ld oc%ld ic%ld threads %d fresh %d: dW[%zu] = %g, want %g", (long)k->n, (long)k->hw,
                   (long)k->oc, (long)k->ic, threads, fresh, j, dw[j], w);
      }
    }
    free(scratch);
  }
  free(x), free(dy), free(want), free(mag), free(dw);
}

static void kernel_against_double(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_dw_blocked_fits(16, 32)) {
    printf("# this build has no AVX512-BF16: the kernel is not used, skipped\n");
    skip();
  }
  const dwb_case cases[] = {
      {2, 15, 16, 32},   /* odd positions per image, one 8-row group per thread */
      {3, 49, 32, 64},   /* 7x7: odd, split by positions */
      {40, 25, 16, 64},  /* chunks of 512 positions across images */
      {3, 49, 16, 2048}, /* chunks of 64 positions, split at odd points */
      {2, 9, 512, 512},  /* a large dW: split by rows */
      {1, 1, 16, 32},    /* one position: a pair with zero */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* No positions: a fresh gradient is zero, an accumulated one unchanged
 * (a small dW split by positions, a large one by rows). */
static void no_positions(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_dw_blocked_fits(16, 32)) skip();
  const int64_t shapes[2][2] = {{16, 32}, {512, 512}};
  for (int s = 0; s < 2; s++) {
    const int64_t oc = shapes[s][0], ic = shapes[s][1];
    float *dw = malloc(sizeof(float) * (size_t)(oc * ic));
    char *scratch = malloc(cpu_dw_blocked_scratch_bytes(oc, ic, 2) + 64);
    for (int64_t j = 0; j < oc * ic; j++) dw[j] = NAN;
    cpu_dw_blocked(NULL, NULL, 0, 49, oc, ic, dw, scratch, 2, 1);
    for (int64_t j = 0; j < oc * ic; j++) assert_true(dw[j] == 0.0f);
    for (int64_t j = 0; j < oc * ic; j++) dw[j] = 1.5f;
    cpu_dw_blocked(NULL, NULL, 0, 49, oc, ic, dw, scratch, 2, 0);
    for (int64_t j = 0; j < oc * ic; j++) assert_true(dw[j] == 1.5f);
    free(dw), free(scratch);
  }
}

/* 3x3 -> 1x1 32 -> 64 -> ReLU -> 1x1 64 -> 32 -> head. */
static sp_value b_1x1_pair(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_conv2d(g, x, "up", (sp_conv_args){.out_ch = 64, .kernel = 1}));
  x = sp_conv2d(g, x, "down", (sp_conv_args){.out_ch = 32, .kernel = 1});
  return sp_conv2d(g, sp_relu(g, x), "head", (sp_conv_args){.out_ch = 4, .kernel = 1, .bias = 1});
}

static void kernel_or_onednn(int path) { cpu_conv_use_dw_blocked = path == 0; }

/* Against the reference, and one bf16 step with the kernel against one with
 * oneDNN's backward weights (where the plan's layouts let it run: machines
 * without AMX; with AMX both steps take the same channels-last paths). */
static void step_against_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"1x1 pair", b_1x1_pair, 3, 3, 9, 7, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k.tol = 0;
  cmp_two_paths(&k, kernel_or_onednn, 5e-3);
  cpu_conv_use_dw_blocked = 1;
}

/* A bf16 training 1x1 convolution on a blocked input keeps that layout and
 * takes the kernel where it fits; not with a bias, a stride, or 8 channels. */
static int taken(int ic, int oc, int stride, int bias) {
  dnnl_memory_desc_t md;
  const int64_t h = 9, w = 7, oh = (h - 1) / stride + 1, ow = (w - 1) / stride + 1;
  dnnl_dims_t dims = {2, ic, h, w};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_bf16, dnnl_aBcd16b), dnnl_success);
  sp_conv2d_attr at = {stride, stride, 0, 0, 1, 1, 1};
  sp_op_prep p = cmp_conv_prep(&sp_op_conv2d, &at, sp_shape4(2, ic, h, w), sp_shape4(2, oc, oh, ow),
                               sp_shape4(oc, ic, 1, 1), bias, 1, &md);
  assert_int_equal(cpu_conv_prepare(&p), 0);
  const int r = cpu_conv_uses_dw_blocked(p.state);
  cpu_node_free(p.state);
  return r;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  const int fits = cpu_dw_blocked_fits(32, 64);
  assert_int_equal(taken(64, 32, 1, 0), fits);
  assert_int_equal(taken(64, 32, 1, 1), 0); /* bias: oneDNN's */
  assert_int_equal(taken(64, 32, 2, 0), 0); /* stride 2 */
  assert_int_equal(taken(16, 32, 1, 0), 0); /* ic not a multiple of 32 */
  cpu_conv_use_dw_blocked = 0;
  assert_int_equal(taken(64, 32, 1, 0), 0);
  cpu_conv_use_dw_blocked = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(kernel_against_double), cmocka_unit_test(no_positions),
             cmocka_unit_test(step_against_onednn), cmocka_unit_test(taken_where_it_applies))
