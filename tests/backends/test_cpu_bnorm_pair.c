/* The batch-norm pair kernels (backends/cpu/bnorm_pair.c): the end of a
 * projection block, y = max(bn1(x1) + bn2(x2), 0), computed by the node that
 * absorbed the add with bn2 adopted, against the same two batch norms run
 * apart by the kernels the plan used before (bn2 writing r, bn1 with the
 * residual add; backward: bn1 writing r's gradient, bn2 reading it). Every
 * layout the pair walks (nChw8c, nChw16c, channels-last of 8, 24, 32, 40
 * and 256 channels: two positions a vector, one and two lane groups and a
 * last group of 8), f32 and bf16, batch and running statistics, each input
 * gradient written fresh or added into, or bn2's not wanted. The graph-level
 * checks (the fusion taken, whole blocks against the reference backend)
 * are in test_cpu_residual.c. */
#include <math.h>
#include <string.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "core/bf16.h"

typedef struct {
  dnnl_format_tag_t tag;
  int bf16, batch, add1, add2, no_dx2;
  int64_t n, c, h, w;
} pair_case;

typedef struct {
  float *gamma, *beta, *mean, *var, *dg, *db;
} bn_params;

static bn_params params_new(int64_t c, sp_test_rng *rng) {
  bn_params p = {malloc(4 * c), malloc(4 * c), calloc(c + 16, 4), calloc(c + 16, 4), calloc(c, 4), calloc(c, 4)};
  sp_test_fill_uniform(rng, p.gamma, c, 0.5f, 1.5f);
  sp_test_fill_uniform(rng, p.beta, c, -0.5f, 0.5f);
  sp_test_fill_uniform(rng, p.mean, c, -0.3f, 0.3f);
  sp_test_fill_uniform(rng, p.var, c, 0.5f, 2.0f);
  return p;
}

static void params_free(bn_params *p) { free(p->gamma), free(p->beta), free(p->mean), free(p->var), free(p->dg), free(p->db); }

/* ||got - want|| / ||want|| over n values of type bf16 or f32: in bf16 the
 * two paths' ReLU masks may differ where y is within a rounding of zero,
 * which moves a few gradient values by a whole dy; the L2 norm weighs those
 * by their share. */
static double rel_diff(const void *got, const void *want, size_t n, int bf16) {
  double err = 0, big = 0;
  for (size_t i = 0; i < n; i++) {
    const double g = bf16 ? sp_bf16_widen(((const uint16_t *)got)[i]) : ((const float *)got)[i];
    const double w = bf16 ? sp_bf16_widen(((const uint16_t *)want)[i]) : ((const float *)want)[i];
    err += (g - w) * (g - w), big += w * w;
  }
  return big > 0 ? sqrt(err / big) : sqrt(err);
}

static void fill(void *buf, size_t n, int bf16, sp_test_rng *rng, float lo, float hi) {
  for (size_t i = 0; i < n; i++) {
    const float v = sp_test_rng_uniform(rng, lo, hi);
    if (bf16)
      ((uint16_t *)buf)[i] = sp_bf16_round(v);
    else
      ((float *)buf)[i] = v;
  }
}

static void run_case(const pair_case *k) {
  dnnl_dims_t d = {k->n, k->c, k->h, k->w};
  dnnl_memory_desc_t md;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&md, 4, d, k->bf16 ? dnnl_bf16 : dnnl_f32, k->tag), dnnl_success);
  const sp_shape s = sp_shape4(k->n, k->c, k->h, k->w);
  cpu_bn_geom g;
  assert_int_equal(cpu_bn_geom_of(&g, &md, &s), 0);
  assert_true(cpu_bn_pair_walks(&g));
  const size_t bytes = cpu_md_bytes(&md), n = bytes / (k->bf16 ? 2 : 4);
  sp_test_rng rng = {(uint64_t)(k->c * 977 + k->tag * 13 + k->bf16 + 2 * k->batch)};
  bn_params p1 = params_new(k->c, &rng), p2 = params_new(k->c, &rng), q1 = p1, q2 = p2;
  /* The second run's statistics and gradients (the parameters are shared). */
  q1.mean = calloc(k->c + 16, 4), q1.var = calloc(k->c + 16, 4), q1.dg = calloc(k->c, 4), q1.db = calloc(k->c, 4);
  q2.mean = calloc(k->c + 16, 4), q2.var = calloc(k->c + 16, 4), q2.dg = calloc(k->c, 4), q2.db = calloc(k->c, 4);
  memcpy(q1.mean, p1.mean, 4 * k->c), memcpy(q1.var, p1.var, 4 * k->c);
  memcpy(q2.mean, p2.mean, 4 * k->c), memcpy(q2.var, p2.var, 4 * k->c);
  char *x1 = calloc(bytes, 1), *x2 = calloc(bytes, 1), *dy = calloc(bytes, 1);
  char *r = calloc(bytes, 1), *dr = calloc(bytes, 1), *y_apart = calloc(bytes, 1), *y_pair = calloc(bytes, 1);
  char *dx1_apart = calloc(bytes, 1), *dx2_apart = calloc(bytes, 1), *dx1_pair = calloc(bytes, 1),
       *dx2_pair = calloc(bytes, 1);
  uint8_t *mask_apart = calloc(n, 1), *mask_pair = calloc(n, 1);
  /* Values in every lane, padding included: the kernels must keep padding
   * lanes of y and the gradients at zero whatever x holds there. */
  fill(x1, n, k->bf16, &rng, -2.0f, 2.5f);
  fill(x2, n, k->bf16, &rng, -1.5f, 2.0f);
  fill(dy, n, k->bf16, &rng, -1.0f, 1.0f);
  if (k->add1) fill(dx1_apart, n, k->bf16, &rng, -0.5f, 0.5f), memcpy(dx1_pair, dx1_apart, bytes);
  if (k->add2) fill(dx2_apart, n, k->bf16, &rng, -0.5f, 0.5f), memcpy(dx2_pair, dx2_apart, bytes);
  char *scratch = malloc(cpu_bn_bwd_scratch_bytes(&g));
  const float eps = 1e-5f;

  /* Apart: bn2 writes r; bn1 adds it (the mask kept); backward: bn1 writes
   * r's gradient (the masked dy), bn2 reads it. */
  cpu_bn_forward(&g, x2, r, p2.mean, p2.var, p2.gamma, p2.beta, eps, k->batch, 0, NULL, scratch);
  cpu_bn_residual res = {r, mask_apart, dr, 0, 0, NULL};
  cpu_bn_forward(&g, x1, y_apart, p1.mean, p1.var, p1.gamma, p1.beta, eps, k->batch, 1, &res, scratch);
  cpu_bn_backward(&g, x1, dy, dx1_apart, k->add1, p1.mean, p1.var, p1.gamma, p1.beta, eps, k->batch, 1, &res, p1.dg,
                  p1.db, scratch);
  cpu_bn_backward(&g, x2, dr, k->no_dx2 ? NULL : dx2_apart, k->add2, p2.mean, p2.var, p2.gamma, p2.beta, eps, k->batch,
                  0, NULL, p2.dg, p2.db, scratch);

  /* The pair: bn2's statistics alone (y NULL), then one node for the rest. */
  cpu_bn_forward(&g, x2, NULL, q2.mean, q2.var, q2.gamma, q2.beta, eps, k->batch, 0, NULL, scratch);
  const cpu_bn_partner partner = {x2,  q2.mean, q2.var,  q2.gamma, q2.beta, eps,
                                  k->batch, k->no_dx2 ? NULL : dx2_pair, k->add2, q2.dg, q2.db};
  cpu_bn_residual pres = {NULL, mask_pair, NULL, 0, 0, &partner};
  cpu_bn_forward(&g, x1, y_pair, q1.mean, q1.var, q1.gamma, q1.beta, eps, k->batch, 1, &pres, scratch);
  cpu_bn_backward(&g, x1, dy, dx1_pair, k->add1, q1.mean, q1.var, q1.gamma, q1.beta, eps, k->batch, 1, &pres, q1.dg,
                  q1.db, scratch);

  /* f32: the same sums in the same order but for bn2's, whose masked dy
   * the pair never rounds or stores; bf16: r rounded to bf16 apart, not in
   * the pair (one rounding of y, 2^-8 of the largest value, and what it
   * moves in the gradients). */
  const double tol = k->bf16 ? 6e-2 : 1e-5;
  const double e[8] = {rel_diff(y_pair, y_apart, n, k->bf16),
                       rel_diff(dx1_pair, dx1_apart, n, k->bf16),
                       k->no_dx2 ? 0.0 : rel_diff(dx2_pair, dx2_apart, n, k->bf16),
                       rel_diff(q1.dg, p1.dg, k->c, 0),
                       rel_diff(q1.db, p1.db, k->c, 0),
                       rel_diff(q2.dg, p2.dg, k->c, 0),
                       rel_diff(q2.db, p2.db, k->c, 0),
                       rel_diff(q2.var, p2.var, k->c, 0) + rel_diff(q2.mean, p2.mean, k->c, 0)};
  printf("# tag %d bf16 %d batch %d add %d %d no_dx2 %d c %lld: y %.2g dx1 %.2g dx2 %.2g dg1 %.2g db1 %.2g dg2 %.2g db2 "
         "%.2g stats %.2g\n",
         (int)k->tag, k->bf16, k->batch, k->add1, k->add2, k->no_dx2, (long long)k->c, e[0], e[1], e[2], e[3], e[4],
         e[5], e[6], e[7]);
  for (int i = 0; i < 8; i++)
    if (!(e[i] <= tol)) fail_msg("pair result %d differs from the two nodes apart by %.3g (> %.2g)", i, e[i], tol);
  if (memcmp(mask_pair, mask_apart, n) && !k->bf16) fail_msg("the pair's ReLU mask differs");
  /* Padding lanes of y and both input gradients stay zero. */
  for (int64_t img = 0; img < k->n; img++)
    for (int64_t ch = k->c; ch < g.blocks * g.lanes; ch++)
      for (int64_t pos = 0; pos < g.hw; pos++) {
        const int64_t i = img * g.img_stride + ch / g.lanes * g.blk_stride + pos * g.lanes + ch % g.lanes;
        const void *bufs[3] = {y_pair, dx1_pair, dx2_pair};
        for (int b = 0; b < 3; b++) {
          const float v = k->bf16 ? sp_bf16_widen(((const uint16_t *)bufs[b])[i]) : ((const float *)bufs[b])[i];
          if (b > 0 && (k->add1 || k->add2)) continue; /* added into: the test's own values stay */
          if (v != 0.0f) fail_msg("padding lane %lld of output %d is %g", (long long)ch, b, (double)v);
        }
      }
  free(x1), free(x2), free(dy), free(r), free(dr), free(y_apart), free(y_pair);
  free(dx1_apart), free(dx2_apart), free(dx1_pair), free(dx2_pair), free(mask_apart), free(mask_pair), free(scratch);
  free(q1.mean), free(q1.var), free(q1.dg), free(q1.db), free(q2.mean), free(q2.var), free(q2.dg), free(q2.db);
  params_free(&p1), params_free(&p2);
}

static void every_walk(void **st) {
  (void)st;
  cmp_require_cpu();
  const struct {
    dnnl_format_tag_t tag;
    int64_t c;
  } shapes[] = {{dnnl_aBcd16b, 20}, {dnnl_aBcd16b, 32}, {dnnl_aBcd8b, 24}, {dnnl_acdb, 8},
                {dnnl_acdb, 24},    {dnnl_acdb, 32},    {dnnl_acdb, 40},   {dnnl_acdb, 256}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int bf16 = 0; bf16 < 2; bf16++)
      for (int batch = 0; batch < 2; batch++) {
        const int v = (int)i + bf16 + batch;
        pair_case k = {shapes[i].tag, bf16, batch, v & 1, (v >> 1) & 1, 0, 3, shapes[i].c, 7, 9};
        run_case(&k);
      }
  pair_case k = {dnnl_aBcd16b, 0, 1, 0, 0, 1, 2, 32, 5, 5}; /* bn2's input gradient not wanted */
  run_case(&k);
}

/* Outputs past the caches (streamed stores) and plain, the same bytes. */
static void streamed_outputs(void **st) {
  (void)st;
  cmp_require_cpu();
  const int64_t keep = cpu_bn_stream_bytes;
  for (int stream = 0; stream < 2; stream++) {
    cpu_bn_stream_bytes = stream ? 0 : INT64_MAX;
    pair_case k = {dnnl_aBcd16b, 0, 1, 0, 1, 0, 2, 32, 6, 7};
    run_case(&k);
    k.tag = dnnl_acdb, k.bf16 = 1;
    run_case(&k);
  }
  cpu_bn_stream_bytes = keep;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(every_walk), cmocka_unit_test(streamed_outputs))
