/* The weight gradient of 1x1 convolutions on 16-channel blocked bf16
 * activations (backends/cpu/conv_dw_blocked.c): the kernel against a double
 * sum of the same bf16 products (odd positions per image, chunks across
 * images, both thread splits, written and added, one and two threads; 16
 * columns, 8 rows from padded blocks, 8 -> 32 with the roles swapped), a
 * bf16 training step with and without it, and where a plan takes it. */
#include <math.h>
#include <stdlib.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "core/bf16.h"

/* Channels of aBcd16b: a last block of 8 is padded to 16. */
static int64_t padded(int64_t c) { return (c + 15) / 16 * 16; }

/* An N x C x H x W tensor in aBcd16b, random values in [-2, 2), padding
 * lanes too (the kernel must not read them). */
static uint16_t *blocked_random(int64_t n, int64_t c, int64_t hw, unsigned *seed) {
  const int64_t count = n * padded(c) * hw;
  uint16_t *t = malloc(sizeof(uint16_t) * (size_t)count + 64);
  for (int64_t i = 0; i < count; i++) t[i] = sp_bf16_round(4.0f * (float)rand_r(seed) / (float)RAND_MAX - 2.0f);
  return t;
}

/* What side d reads at grid (y, x), tap (i, j), as a double (0 outside). */
static double side_at(const cpu_dwb_side *d, int64_t n, int64_t ch, int64_t y, int64_t x, int64_t i, int64_t j) {
  const int64_t ty = y * d->sy + i * d->dy + d->oy, tx = x * d->sx + j * d->dx + d->ox;
  if (ty < 0 || ty >= d->h || tx < 0 || tx >= d->w) return 0.0;
  return sp_bf16_widen(d->t[((n * (padded(d->c) / 16) + ch / 16) * d->h * d->w + ty * d->w + tx) * 16 + ch % 16]);
}

/* Each case against the double sum, written (from NaN) and added (onto 0.5),
 * with 1 and 2 threads: within f32 summation of |terms|. */
static void check_shape(const char *label, cpu_dwb_shape s) {
  unsigned seed = (unsigned)(s.n * 131 + s.gh * 7 + s.a.c + s.b.c + s.kh);
  s.a.t = blocked_random(s.n, s.a.c, s.a.h * s.a.w, &seed);
  s.b.t = blocked_random(s.n, s.b.c, s.b.h * s.b.w, &seed);
  const int64_t taps = s.kh * s.kw, size = s.b.c * s.a.c * taps;
  double *want = calloc((size_t)size, sizeof(double)), *mag = calloc((size_t)size, sizeof(double));
  for (int64_t r = 0; r < s.b.c; r++)
    for (int64_t c = 0; c < s.a.c; c++)
      for (int64_t i = 0; i < s.kh; i++)
        for (int64_t j = 0; j < s.kw; j++) {
          const int64_t at = r * s.row_stride + c * s.col_stride + (i * s.kw + j) * s.tap_stride;
          for (int64_t n = 0; n < s.n; n++)
            for (int64_t y = 0; y < s.gh; y++)
              for (int64_t x = 0; x < s.gw; x++) {
                const double t = side_at(&s.b, n, r, y, x, i, j) * side_at(&s.a, n, c, y, x, i, j);
                want[at] += t, mag[at] += fabs(t);
              }
        }
  float *dw = malloc(sizeof(float) * (size_t)size);
  for (int threads = 1; threads <= 2; threads++) {
    char *scratch = malloc(cpu_dw_blocked_scratch_bytes(&s, threads) + 64);
    for (int fresh = 1; fresh >= 0; fresh--) {
      for (int64_t j = 0; j < size; j++) dw[j] = fresh ? NAN : 0.5f;
      cpu_dw_blocked(&s, dw, scratch, threads, fresh);
      for (int64_t j = 0; j < size; j++) {
        const double w = want[j] + (fresh ? 0.0 : 0.5), tol = 1e-5 * (mag[j] + 1.0);
        if (!(fabs(dw[j] - w) <= tol))
          fail_msg("%s: threads %d fresh %d: dW[%ld] = %g, want %g", label, threads, fresh, (long)j, dw[j], w);
      }
    }
    free(scratch);
  }
  free((void *)s.a.t), free((void *)s.b.t), free(want), free(mag), free(dw);
}

/* A convolution's weight gradient (columns: input channels) and a kernel =
 * stride transposed one's (columns: output channels), as conv.c builds them. */
static cpu_dwb_shape conv_shape(int64_t n, int64_t ic, int64_t ih, int64_t iw, int64_t oc, int64_t k, int64_t stride,
                                int64_t pad, int64_t dil) {
  const int64_t oh = (ih + 2 * pad - dil * (k - 1) - 1) / stride + 1,
                ow = (iw + 2 * pad - dil * (k - 1) - 1) / stride + 1;
  return (cpu_dwb_shape){n,
                         oh,
                         ow,
                         k,
                         k,
                         {NULL, ic, ih, iw, stride, stride, dil, dil, -pad, -pad},
                         {NULL, oc, oh, ow, 1, 1, 0, 0, 0, 0},
                         ic * k * k,
                         k * k,
                         1};
}
static cpu_dwb_shape deconv_shape(int64_t n, int64_t ic, int64_t ih, int64_t iw, int64_t oc, int64_t k) {
  return (cpu_dwb_shape){
      n,          ih,    iw, k, k, {NULL, oc, ih * k, iw * k, k, k, 1, 1, 0, 0}, {NULL, ic, ih, iw, 1, 1, 0, 0, 0, 0},
      oc * k * k, k * k, 1};
}

static void kernel_against_double(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_dw_blocked_fits(16, 32)) {
    printf("# this build has no AVX512-BF16: the kernel is not used, skipped\n");
    skip();
  }
  /* 1x1: odd positions per image, one 8-row group per thread; 7x7 split by
   * positions; chunks of 512 positions across images; chunks of 64 split at
   * odd points; a large dW split by rows; one position (paired with zero). */
  check_shape("1x1 5x3", conv_shape(2, 32, 5, 3, 16, 1, 1, 0, 1));
  check_shape("1x1 7x7", conv_shape(3, 64, 7, 7, 32, 1, 1, 0, 1));
  check_shape("1x1 across images", conv_shape(40, 64, 5, 5, 16, 1, 1, 0, 1));
  check_shape("1x1 2048", conv_shape(3, 2048, 7, 7, 16, 1, 1, 0, 1));
  check_shape("1x1 rows", conv_shape(2, 512, 3, 3, 512, 1, 1, 0, 1));
  check_shape("1x1 one position", conv_shape(1, 32, 1, 1, 16, 1, 1, 0, 1));
  /* 3x3 padded, stride 2 on odd sizes, dilation 2, a large dW split by rows,
   * and a transposed convolution with kernel = stride 2. */
  check_shape("3x3", conv_shape(2, 32, 9, 7, 16, 3, 1, 1, 1));
  check_shape("3x3 stride 2", conv_shape(2, 32, 9, 9, 32, 3, 2, 1, 1));
  check_shape("3x3 dilation 2", conv_shape(2, 64, 8, 9, 16, 3, 1, 2, 2));
  check_shape("3x3 rows", conv_shape(2, 128, 5, 6, 128, 3, 1, 1, 1));
  check_shape("3x3 512 stride 2 (2.4 M dW values)", conv_shape(2, 512, 4, 3, 512, 3, 2, 1, 1));
  check_shape("7x7 stride 2", conv_shape(1, 32, 12, 11, 16, 7, 2, 3, 1));
  /* Grids one and three positions wide: every pair of a tap's gather leaves
   * its grid row (gather_pairs' per-position path), across images too. */
  check_shape("3x3 one column", conv_shape(3, 32, 5, 1, 16, 3, 1, 1, 1));
  check_shape("3x3 stride 2, three columns", conv_shape(3, 16, 7, 5, 32, 3, 2, 1, 1));
  check_shape("deconv 2x2", deconv_shape(2, 16, 5, 3, 32, 2));
  check_shape("deconv 2x2 rows", deconv_shape(2, 256, 3, 3, 256, 2));
  /* 16-channel layers: a last 16 columns alone; 8 rows from a padded block. */
  check_shape("3x3 16 columns", conv_shape(2, 16, 9, 7, 32, 3, 1, 1, 1));
  check_shape("1x1 48 columns", conv_shape(3, 48, 5, 5, 16, 1, 1, 0, 1));
  check_shape("1x1 8 rows", conv_shape(2, 32, 7, 5, 8, 1, 1, 0, 1));
  check_shape("3x3 8 rows 16 columns", conv_shape(2, 16, 9, 9, 8, 3, 1, 1, 1));
  check_shape("3x3 24 rows", conv_shape(2, 32, 6, 5, 24, 3, 2, 1, 1));
  /* Threads split the columns (3x3: A's pairs are built at every tap) with
   * an odd block count: one thread's share ends in a 16-column tile. */
  check_shape("3x3 80 columns split", conv_shape(2, 80, 5, 6, 256, 3, 1, 1, 1));
  /* ... and a 1x1 whose sums go straight into dW, split by columns. */
  check_shape("1x1 columns split, direct", conv_shape(2, 1024, 3, 3, 256, 1, 1, 0, 1));
  check_shape("deconv 2x2 16 columns", deconv_shape(2, 32, 5, 3, 16, 2));
  /* 8 -> 32, 1x1: the roles swapped (rows: the 8 input channels), dW
   * [OC][IC] written by column, as conv.c builds it. */
  const cpu_dwb_side x8 = {NULL, 8, 6, 5, 1, 1, 0, 0, 0, 0}, y32 = {NULL, 32, 6, 5, 1, 1, 0, 0, 0, 0};
  check_shape("1x1 8 -> 32 swapped", (cpu_dwb_shape){3, 6, 5, 1, 1, y32, x8, 1, 8, 1});
}

/* No positions: a fresh gradient is zero, an accumulated one unchanged
 * (1x1 split by positions and by rows, 3x3 through the sum arrays). */
static void no_positions(void **st) {
  (void)st;
  cmp_require_cpu();
  if (!cpu_dw_blocked_fits(16, 32)) skip();
  const cpu_dwb_shape shapes[] = {conv_shape(0, 32, 7, 7, 16, 1, 1, 0, 1), conv_shape(0, 512, 7, 7, 512, 1, 1, 0, 1),
                                  conv_shape(0, 32, 7, 7, 16, 3, 1, 1, 1), conv_shape(0, 128, 7, 7, 128, 3, 1, 1, 1)};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int64_t size = shapes[s].a.c * shapes[s].b.c * shapes[s].kh * shapes[s].kw;
    float *dw = malloc(sizeof(float) * (size_t)size);
    char *scratch = malloc(cpu_dw_blocked_scratch_bytes(&shapes[s], 2) + 64);
    for (int64_t j = 0; j < size; j++) dw[j] = NAN;
    cpu_dw_blocked(&shapes[s], dw, scratch, 2, 1);
    for (int64_t j = 0; j < size; j++) assert_true(dw[j] == 0.0f);
    for (int64_t j = 0; j < size; j++) dw[j] = 1.5f;
    cpu_dw_blocked(&shapes[s], dw, scratch, 2, 0);
    for (int64_t j = 0; j < size; j++) assert_true(dw[j] == 1.5f);
    free(dw), free(scratch);
  }
}

/* 3x3 -> 1x1 32 -> 64 -> ReLU -> 3x3 stride 2 -> 2x2 up (transposed) ->
 * 1x1 64 -> 32 -> head: 1x1, 3x3, strided and transposed weight gradients. */
static sp_value b_layers(sp_graph *g, sp_value x) {
  x = sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1});
  x = sp_relu(g, sp_conv2d(g, x, "up", (sp_conv_args){.out_ch = 64, .kernel = 1}));
  x = sp_relu(g, sp_conv2d(g, x, "s2", (sp_conv_args){.out_ch = 32, .kernel = 3, .stride = 2, .pad = 1}));
  x = sp_relu(g, sp_conv_transpose2d(g, x, "t", (sp_deconv_args){.out_ch = 64, .kernel = 2, .stride = 2}));
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
  cmp_case k = {"layers", b_layers, 3, 3, 10, 8, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  k.tol = 0;
  cmp_two_paths(&k, kernel_or_onednn, 5e-3);
  cpu_conv_use_dw_blocked = 1;
}

/* With AVX512-BF16 and no AMX (AMD Zen 5), oneDNN's bf16 training
 * convolutions read and write 16-channel blocks, which is where the kernel
 * is for; with AMX, a blocked input may still be given another output
 * layout. */
static int blocks_expected(void) { return dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16; }

/* 1: the node computes its weight gradient with the kernel; 0: not, though
 * its layouts are 16-channel blocks in and out; -1: other layouts (then it
 * must not). */
static int outcome(const void *state, int ok_layouts) {
  const int blocked = cpu_conv_src_lanes(state) == 16 && cpu_conv_dst_lanes(state) == 16;
  if (blocks_expected() && ok_layouts) assert_true(blocked);
  const int r = cpu_conv_uses_dw_blocked(state);
  if (!blocked) {
    assert_int_equal(r, 0);
    return -1;
  }
  return r;
}

/* A bf16 training convolution on a blocked input takes the kernel where
 * the channels fit and its layouts are blocks; not with a bias or 16 input
 * channels. */
static int taken_if(int ic, int oc, int k, int stride, int bias, int ok_layouts) {
  void *state = cmp_conv_node(2, ic, oc, 9, 7, k, stride, bias, 1, dnnl_aBcd16b);
  const int r = outcome(state, ok_layouts);
  cpu_node_free(state);
  return r;
}
static int taken(int ic, int oc, int k, int stride, int bias) { return taken_if(ic, oc, k, stride, bias, 1); }

/* The same for a transposed convolution: kernel = stride without padding. */
static int taken_deconv(int ic, int oc, int k, int stride, int pad) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {2, ic, 7, 7};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_bf16, dnnl_aBcd16b), dnnl_success);
  sp_conv_transpose2d_attr at = {stride, stride, pad, pad, 0, 0, 1, 1, 1};
  const int64_t out = 6 * stride - 2 * pad + k;
  sp_op_prep p = cmp_conv_prep(&sp_op_conv_transpose2d, &at, sp_shape4(2, ic, 7, 7), sp_shape4(2, oc, out, out),
                               sp_shape4(ic, oc, k, k), 0, 1, &md);
  assert_int_equal(cpu_deconv_prepare(&p), 0);
  const int r = cpu_deconv_uses_matmul(p.state) ? -2 : outcome(p.state, 1);
  cpu_node_free(p.state);
  return r;
}

static void taken_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  const int fits = cpu_dw_blocked_fits(32, 64);
  /* -1 (layouts other than blocks) only where oneDNN has other kernels: outcome() checks. */
  const int cases[][5] = {{64, 32, 1, 1, 0}, {64, 32, 3, 1, 0}, {64, 32, 3, 2, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const int r = taken(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4]);
    if (r != -1) assert_int_equal(r, fits);
  }
  assert_true(taken(64, 32, 1, 1, 1) <= 0); /* bias: oneDNN's */
  /* 16 input channels, 8 output channels, 8 -> 32 1x1 (swapped): taken
   * where oneDNN keeps blocks (for fewer than 16 input channels its forward
   * may read plain NCHW). */
  const int narrow[][5] = {{16, 32, 3, 1, 0}, {32, 8, 1, 1, 0}, {8, 32, 1, 1, 0}, {16, 16, 1, 1, 0}};
  for (size_t i = 0; i < sizeof narrow / sizeof narrow[0]; i++) {
    const int r = taken_if(narrow[i][0], narrow[i][1], narrow[i][2], narrow[i][3], narrow[i][4], 0);
    if (r != -1) assert_int_equal(r, fits);
  }
  assert_true(taken_if(8, 8, 3, 1, 0, 0) <= 0);   /* 8 input channels, 3x3: oneDNN's */
  assert_true(taken_if(16, 16, 3, 1, 0, 0) <= 0); /* taps over few channels: oneDNN's */
  assert_true(taken_if(8, 32, 3, 1, 0, 0) <= 0);  /* ... and no swap beyond 1x1 */
  const int d = taken_deconv(32, 64, 2, 2, 0);
  if (d >= 0) assert_int_equal(d, fits);
  assert_true(taken_deconv(32, 64, 3, 2, 1) <= 0); /* kernel != stride */
  cpu_conv_use_dw_blocked = 0;
  assert_true(taken(64, 32, 1, 1, 0) <= 0);
  cpu_conv_use_dw_blocked = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(kernel_against_double), cmocka_unit_test(no_positions),
             cmocka_unit_test(step_against_onednn), cmocka_unit_test(taken_where_it_applies))
