/* The end of a ResNet block with a projection shortcut, as one batch norm
 * that absorbed the residual add and the ReLU and adopted the other branch's
 * batch norm (bnorm.c, graph/plan.c):
 *
 *   y = max(bn1(x1) + bn2(x2), 0)
 *
 * x1 and x2 are the two convolutions' outputs, in one layout. bn2's own node
 * still computes its statistics (and running ones); these loops do the rest.
 *
 * Why: apart, bn2 wrote r = bn2(x2) only for the add to read it, and in
 * backward the fused node wrote the masked gradient into r's gradient only
 * for bn2's backward to read it twice. With activations of S bytes the two
 * nodes moved about 17S a step (forward: bn1 3S, bn2 with the add, the
 * residual and the mask 4.25S; backward: 6.25S and 5S, counting the 1-byte
 * mask as S/4); here about 12S: forward 5.25S (the two statistics passes,
 * then x1 and x2 read, y and the mask written), backward 8.5S (sums over
 * dy, the mask, x1 and x2; then the same reads and both input gradients
 * written); the mask is a bit a value now (bnorm.h), S/32 in bf16.
 * ResUNet-50 has eight such block ends (the encoder's four first blocks,
 * the decoder's four), 193 MB of them at batch 16 in f32.
 *
 * Layouts whose lanes are a multiple of 8 only (bnorm.c takes the pair only
 * there): at most two lane groups side by side, since each group holds
 * twice the constants and a third sum. The sums and coefficients are the
 * two nodes' own (bnorm_kernels.c), per channel in the same tile order. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/bnorm_walk.h"

/* FOR_EACH_GROUP with at most two groups at a time. */
#define PAIR_FOR_EACH_GROUP(L, np, GROUP)                               \
  do {                                                                  \
    if (VW == 16 && (L) == 8) {                                         \
      const int64_t even_ = (np) & ~(int64_t)1;                         \
      GROUP(0, 16, 1, 0, even_);                                        \
      if (even_ < (np)) GROUP(0, 8, 1, even_, np);                      \
    } else {                                                            \
      int64_t j_ = 0;                                                   \
      for (; j_ + 2 * VW <= (L); j_ += 2 * VW) GROUP(j_, VW, 2, 0, np); \
      for (; j_ + VW <= (L); j_ += VW) GROUP(j_, VW, 1, 0, np);         \
      if (j_ < (L)) GROUP(j_, 8, 1, 0, np);                             \
    }                                                                   \
  } while (0)

enum { PG = 2 };

int cpu_bn_pair_walks(const cpu_bn_geom *g) { return g->lanes > 1 && g->lanes % 8 == 0; }

/* ---- forward ---- */

void cpu_bn_pair_constants(const cpu_bn_geom *g, const bn_scratch *s, const cpu_bn_partner *q) {
  for (int64_t c = 0; c < (int64_t)channels_padded(g); c++) {
    if (c >= g->c) {
      s->k2[c] = s->a2[c] = s->b2[c] = s->d2[c] = 0.0f;
      continue;
    }
    const double inv_std = 1.0 / sqrt((double)q->var[c] + q->eps);
    s->k2[c] = q->mean[c];
    s->a2[c] = (float)(inv_std * (q->gamma ? q->gamma[c] : 1.0f));
    s->b2[c] = q->beta ? q->beta[c] : 0.0f;
  }
}

INLINE void normalize_group(const void *x, const void *x2, void *y, uint8_t *mask, int64_t at, int64_t L, int64_t j,
                            int w, int G, int64_t p0, int64_t p1, const bn_scratch *s, int64_t c0, int bf16, int nt) {
  vfw m[PG], sc[PG], sh[PG], m2[PG], sc2[PG], sh2[PG];
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    const int64_t jg = j + g * w;
    m[g] = vconst(s->k + c0, jg, w, L), sc[g] = vconst(s->a + c0, jg, w, L), sh[g] = vconst(s->b + c0, jg, w, L);
    m2[g] = vconst(s->k2 + c0, jg, w, L), sc2[g] = vconst(s->a2 + c0, jg, w, L);
    sh2[g] = vconst(s->b2 + c0, jg, w, L);
  }
  for (int64_t p = p0; p < p1; p += positions_per_vector(w, L)) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      vfw v = vaffine(vldw(x, i, bf16, w), m[g], sc[g], sh[g]);
      v += vaffine(vldw(x2, i, bf16, w), m2[g], sc2[g], sh2[g]);
      if (mask) vbits_gt0(mask, i, v, w);
      if (nt)
        vstw_nt(y, i, vrelu(v), bf16, w);
      else
        vstw(y, i, vrelu(v), bf16, w);
    }
  }
}

INLINE void normalize_tiles(const cpu_bn_geom *g, const bn_scratch *s, const void *x, void *y,
                            const cpu_bn_residual *res, int64_t L, int bf16) {
  const tiling t = tiles_of(g);
  tile_walk walk = tiles_begin(s, PASS_APPLY, &t, 0);
  for (int64_t k; tiles_next(&walk, &k);) {
    int64_t blk, np;
    const int64_t at = tile_at(g, &t, k, &blk, &np), c0 = blk * L;
#define NORMALIZE_GROUP(j, w, G, p0, p1) \
  normalize_group(x, res->partner->x, y, res->mask, at, L, j, w, G, p0, p1, s, c0, bf16, g->stream)
    PAIR_FOR_EACH_GROUP(L, np, NORMALIZE_GROUP);
#undef NORMALIZE_GROUP
  }
}

/* One specialisation per (lanes, dtype): 8 and 16 lanes constant. */
#define PAIR_DISPATCH(BODY, g, ...)                                    \
  do {                                                                 \
    const int64_t L_ = (g)->lanes;                                     \
    if (L_ == 16)                                                      \
      (g)->bf16 ? BODY(__VA_ARGS__, 16, 1) : BODY(__VA_ARGS__, 16, 0); \
    else if (L_ == 8)                                                  \
      (g)->bf16 ? BODY(__VA_ARGS__, 8, 1) : BODY(__VA_ARGS__, 8, 0);   \
    else                                                               \
      (g)->bf16 ? BODY(__VA_ARGS__, L_, 1) : BODY(__VA_ARGS__, L_, 0); \
  } while (0)

void cpu_bn_pair_normalize(const cpu_bn_geom *g, const bn_scratch *s, const void *x, void *y,
                           const cpu_bn_residual *res) {
  PAIR_DISPATCH(normalize_tiles, g, g, s, x, y, res);
}

/* ---- backward ---- */

/* g = dy where the mask is set: its sum and its products with x - k and
 * x2 - k2 (k, k2 the means), over positions [p0, p1) of G lane groups, two
 * sets of sums on alternate positions (bnorm_kernels.c's sum_group). */
INLINE void sum_step(const void *x, const void *x2, const void *dy, const uint8_t *mask, int64_t i, int w, vfw k,
                     vfw k2, vfw *s1, vfw *s2, vfw *s3, int bf16) {
  const vfw gv = vbits_select(vldw(dy, i, bf16, w), mask, i, w);
  *s1 += gv;
  *s2 += gv * (vldw(x, i, bf16, w) - k);
  *s3 += gv * (vldw(x2, i, bf16, w) - k2);
}

INLINE void sum_group(const void *x, const void *x2, const void *dy, const uint8_t *mask, int64_t at, int64_t L,
                      int64_t j, int w, int G, int64_t p0, int64_t p1, const bn_scratch *s, int64_t c0, double *acc,
                      int64_t cp, int bf16) {
  vfw k[PG], k2[PG], s1[PG], s2[PG], s3[PG], t1[PG], t2[PG], t3[PG];
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    k[g] = vconst(s->k + c0, j + g * w, w, L), k2[g] = vconst(s->k2 + c0, j + g * w, w, L);
    s1[g] = s2[g] = s3[g] = t1[g] = t2[g] = t3[g] = vbcastw(0.0f);
  }
  const int64_t step = positions_per_vector(w, L);
  int64_t p = p0;
  for (; p + step < p1; p += 2 * step) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      sum_step(x, x2, dy, mask, i, w, k[g], k2[g], &s1[g], &s2[g], &s3[g], bf16);
      sum_step(x, x2, dy, mask, i + step * L, w, k[g], k2[g], &t1[g], &t2[g], &t3[g], bf16);
    }
  }
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    const int64_t jg = c0 + j + g * w;
    if (p < p1) sum_step(x, x2, dy, mask, at + p * L + j + g * w, w, k[g], k2[g], &s1[g], &s2[g], &s3[g], bf16);
    add_into_doubles(acc + jg, s1[g] + t1[g], w, L);
    add_into_doubles(acc + cp + jg, s2[g] + t2[g], w, L);
    add_into_doubles(acc + 2 * cp + jg, s3[g] + t3[g], w, L);
  }
}

INLINE void sum_tiles(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy,
                      const cpu_bn_residual *res, int64_t L, int bf16) {
  const tiling t = tiles_of(g);
  const int64_t cp = (int64_t)channels_padded(g);
  tile_walk walk = tiles_begin(s, PASS_SUMS, &t, 3 * cp);
  for (int64_t k; tiles_next(&walk, &k);) {
    double *acc = walk.acc;
    int64_t blk, np;
    const int64_t at = tile_at(g, &t, k, &blk, &np), c0 = blk * L;
#define SUM_GROUP(j, w, G, p0, p1) \
  sum_group(x, res->partner->x, dy, res->mask, at, L, j, w, G, p0, p1, s, c0, acc, cp, bf16)
    PAIR_FOR_EACH_GROUP(L, np, SUM_GROUP);
#undef SUM_GROUP
  }
}

void cpu_bn_pair_sums(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy,
                      const cpu_bn_residual *res) {
  PAIR_DISPATCH(sum_tiles, g, g, s, x, dy, res);
}

/* The partner's parameter gradients and dx2 coefficients from the shares'
 * sums (one thread): bnorm_kernels.c's finish_backward for bn2, whose
 * masked gradient is this node's. */
void cpu_bn_pair_finish(const cpu_bn_geom *g, const bn_scratch *s, const cpu_bn_partner *q) {
  const int64_t cp = (int64_t)channels_padded(g);
  const double m = (double)(g->n * g->hw);
  for (int64_t c = 0; c < cp; c++) {
    if (c >= g->c) {
      s->a2[c] = s->b2[c] = s->d2[c] = 0.0f;
      continue;
    }
    double s1 = 0.0, s3 = 0.0;
    for (int64_t i = 0; i < s->shares; i++) s1 += share_acc(s, i)[c], s3 += share_acc(s, i)[2 * cp + c];
    bn_backward_channel(s1, s3, m, q->var[c], q->eps, q->gamma ? q->gamma[c] : 1.0f, q->batch,
                        q->dgamma ? q->dgamma + c : NULL, q->dbeta ? q->dbeta + c : NULL, &s->a2[c], &s->b2[c],
                        &s->d2[c]);
  }
}

/* v into d: added to what is there, streamed past the caches, or stored. */
INLINE void put(void *d, int64_t i, vfw v, int add, int nt, int bf16, int w) {
  if (add)
    vstw(d, i, v + vldw(d, i, bf16, w), bf16, w);
  else if (nt)
    vstw_nt(d, i, v, bf16, w);
  else
    vstw(d, i, v, bf16, w);
}

/* dx = a g + b (x - k) + d and dx2 likewise, g the masked dy. */
INLINE void dx_group(const void *x, const void *x2, const void *dy, void *dx, void *dx2, const uint8_t *mask,
                     int64_t at, int64_t L, int64_t j, int w, int G, int64_t p0, int64_t p1, const bn_scratch *s,
                     int64_t c0, int add, int add2, int bf16, int nt) {
  vfw k[PG], a[PG], b[PG], d[PG], k2[PG], a2[PG], b2[PG], d2[PG];
  VEC_UNROLL
  for (int g = 0; g < G; g++) {
    const int64_t jg = j + g * w;
    k[g] = vconst(s->k + c0, jg, w, L), a[g] = vconst(s->a + c0, jg, w, L);
    b[g] = vconst(s->b + c0, jg, w, L), d[g] = vconst(s->d + c0, jg, w, L);
    k2[g] = vconst(s->k2 + c0, jg, w, L), a2[g] = vconst(s->a2 + c0, jg, w, L);
    b2[g] = vconst(s->b2 + c0, jg, w, L), d2[g] = vconst(s->d2 + c0, jg, w, L);
  }
  for (int64_t p = p0; p < p1; p += positions_per_vector(w, L)) {
    VEC_UNROLL
    for (int g = 0; g < G; g++) {
      const int64_t i = at + p * L + j + g * w;
      const vfw gv = vbits_select(vldw(dy, i, bf16, w), mask, i, w);
      if (dx) put(dx, i, b[g] * (vldw(x, i, bf16, w) - k[g]) + (a[g] * gv + d[g]), add, nt, bf16, w);
      if (dx2) put(dx2, i, b2[g] * (vldw(x2, i, bf16, w) - k2[g]) + (a2[g] * gv + d2[g]), add2, nt, bf16, w);
    }
  }
}

INLINE void dx_tiles(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy, void *dx, int add,
                     const cpu_bn_residual *res, int64_t L, int bf16) {
  const tiling t = tiles_of(g);
  const cpu_bn_partner *q = res->partner;
  tile_walk walk = tiles_begin(s, PASS_APPLY, &t, 0);
  for (int64_t k; tiles_next(&walk, &k);) {
    int64_t blk, np;
    const int64_t at = tile_at(g, &t, k, &blk, &np), c0 = blk * L;
#define DX_GROUP(j, w, G, p0, p1) \
  dx_group(x, q->x, dy, dx, q->dx, res->mask, at, L, j, w, G, p0, p1, s, c0, add, q->dx_add, bf16, g->stream)
    PAIR_FOR_EACH_GROUP(L, np, DX_GROUP);
#undef DX_GROUP
  }
}

void cpu_bn_pair_dx(const cpu_bn_geom *g, const bn_scratch *s, const void *x, const void *dy, void *dx, int add,
                    const cpu_bn_residual *res) {
  PAIR_DISPATCH(dx_tiles, g, g, s, x, dy, dx, add, res);
}
#endif
