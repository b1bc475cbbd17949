/* The batch loader: bitwise identical batches for 1 and 2 workers, disjoint
 * shards, evaluation shards that together give one process's epoch, epochs
 * cover every sample once, clean restart and shutdown
 * mid-epoch, and the batched normalisation. */
#include <math.h>

#include "data_testutil.h"

static sp_cache *synthetic_cache(int n, int s, int k) {
  sp_cache *c = tu_cache_alloc(n, s, k);
  sp_test_rng r = {11};
  for (size_t i = 0; i < (size_t)n * s * s * 3; i++) c->pixels[i] = (uint8_t)(sp_test_rng_next(&r) >> 56);
  sp_test_fill_uniform(&r, c->points, 2 * n * k, 4, (float)s - 4);
  return c;
}

typedef struct {
  uint8_t *px;
  float *pts;
  uint8_t *flags;
  int32_t *idx;
  int total;
} run_out;

static run_out run_sharded(const sp_cache *c, int workers, int prefetch, int epochs, int rank, int world, int eval_shard) {
  sp_loader_config cfg = sp_loader_config_default(6, 40);
  cfg.workers = workers;
  cfg.prefetch = prefetch;
  cfg.seed = 42;
  cfg.drop_last = 0;
  cfg.rank = rank;
  cfg.world = world;
  cfg.eval_shard = eval_shard;
  sp_scheme sc;
  int flip[4] = {1, 0, 2, 3};
  assert_int_equal(sp_scheme_from_table("four", 4, flip, &sc), 0);
  sp_loader *l = sp_loader_create(c, &sc, &cfg);
  assert_non_null(l);
  size_t img = 3 * 40 * 40, cap = (size_t)c->n * epochs;
  run_out o = {malloc(cap * img), malloc(cap * 8 * sizeof(float)), malloc(cap * 4), malloc(cap * 4), 0};
  for (int e = 0; e < epochs; e++) {
    assert_int_equal(sp_loader_start_epoch(l, e), 0);
    const sp_batch *b;
    int nb = 0;
    while ((b = sp_loader_next(l))) {
      assert_int_equal(b->epoch, e);
      assert_int_equal(b->step, nb++);
      assert_int_equal(b->c, 3);
      assert_int_equal(b->h, 40);
      memcpy(o.px + o.total * img, b->pixels, b->n * img);
      memcpy(o.pts + o.total * 8, b->points, b->n * 8 * sizeof(float));
      memcpy(o.flags + o.total * 4, b->flags, b->n * 4);
      memcpy(o.idx + o.total, b->index, b->n * 4);
      o.total += b->n;
    }
    assert_int_equal(nb, sp_loader_batches_per_epoch(l));
  }
  sp_loader_destroy(l);
  return o;
}

static run_out run(const sp_cache *c, int workers, int prefetch, int epochs, int rank, int world) {
  return run_sharded(c, workers, prefetch, epochs, rank, world, 0);
}

static void free_run(run_out *o) {
  free(o->px); free(o->pts); free(o->flags); free(o->idx);
}

static void same_batches_for_any_worker_count(void **state) {
  (void)state;
  sp_cache *c = synthetic_cache(29, 48, 4);
  run_out a = run(c, 1, 1, 2, 0, 1), b = run(c, 2, 3, 2, 0, 1), d = run(c, 3, 0, 2, 0, 1);
  assert_int_equal(a.total, 2 * 29);
  assert_int_equal(b.total, a.total);
  assert_memory_equal(a.px, b.px, (size_t)a.total * 3 * 40 * 40);
  assert_memory_equal(a.pts, b.pts, (size_t)a.total * 8 * sizeof(float));
  assert_memory_equal(a.flags, b.flags, (size_t)a.total * 4);
  assert_memory_equal(a.idx, b.idx, (size_t)a.total * 4);
  assert_memory_equal(a.px, d.px, (size_t)a.total * 3 * 40 * 40);
  /* Each epoch is a permutation of all samples, different per epoch. */
  int seen[29] = {0};
  for (int i = 0; i < 29; i++) seen[a.idx[i]]++;
  for (int i = 0; i < 29; i++) assert_int_equal(seen[i], 1);
  assert_true(memcmp(a.idx, a.idx + 29, 29 * 4) != 0);
  free_run(&a); free_run(&b); free_run(&d);
  sp_cache_free(c);
}

static void shards_are_disjoint(void **state) {
  (void)state;
  sp_cache *c = synthetic_cache(30, 40, 4);
  run_out r0 = run(c, 2, 0, 1, 0, 3), r1 = run(c, 1, 0, 1, 1, 3), r2 = run(c, 2, 0, 1, 2, 3);
  assert_int_equal(r0.total, 10);
  assert_int_equal(r1.total, 10);
  int seen[30] = {0};
  for (int i = 0; i < 10; i++) { seen[r0.idx[i]]++; seen[r1.idx[i]]++; seen[r2.idx[i]]++; }
  for (int i = 0; i < 30; i++) assert_int_equal(seen[i], 1);
  free_run(&r0); free_run(&r1); free_run(&r2);
  sp_cache_free(c);
}

/* Evaluation shards: 3 ranks over 29 samples take contiguous parts of 9,
 * 10 and 10 and together give one process's epoch, sample for sample
 * (pixels, points, indices). */
static void eval_shards_cover_the_epoch_in_order(void **state) {
  (void)state;
  sp_cache *c = synthetic_cache(29, 40, 4);
  run_out one = run(c, 2, 0, 1, 0, 1);
  const int sizes[3] = {9, 10, 10};
  size_t img = 3 * 40 * 40;
  int at = 0;
  for (int rank = 0; rank < 3; rank++) {
    run_out r = run_sharded(c, 1 + rank % 2, 0, 1, rank, 3, 1);
    assert_int_equal(r.total, sizes[rank]);
    assert_memory_equal(r.idx, one.idx + at, (size_t)r.total * 4);
    assert_memory_equal(r.px, one.px + at * img, (size_t)r.total * img);
    assert_memory_equal(r.pts, one.pts + at * 8, (size_t)r.total * 8 * sizeof(float));
    at += r.total;
    free_run(&r);
  }
  assert_int_equal(at, 29);
  free_run(&one);
  sp_cache_free(c);
}

static void restart_and_shutdown_mid_epoch(void **state) {
  (void)state;
  sp_cache *c = synthetic_cache(64, 48, 4);
  sp_loader_config cfg = sp_loader_config_default(8, 40);
  cfg.workers = 2;
  cfg.prefetch = 2;
  sp_loader *l = sp_loader_create(c, NULL, &cfg);
  assert_non_null(l);
  assert_int_equal(sp_loader_batches_per_epoch(l), 8);
  assert_int_equal(sp_loader_start_epoch(l, 0), 0);
  assert_non_null(sp_loader_next(l));
  /* Restart while workers are filling: the new epoch is complete and clean. */
  assert_int_equal(sp_loader_start_epoch(l, 1), 0);
  int n = 0;
  const sp_batch *b;
  while ((b = sp_loader_next(l))) { assert_int_equal(b->epoch, 1); n++; }
  assert_int_equal(n, 8);
  assert_null(sp_loader_next(l)); /* stays at the end */
  assert_int_equal(sp_loader_start_epoch(l, 2), 0);
  assert_non_null(sp_loader_next(l));
  sp_loader_destroy(l); /* mid-epoch, batches in flight */
  /* Bad settings are errors, not crashes. */
  cfg.rank = 3;
  cfg.world = 2;
  assert_null(sp_loader_create(c, NULL, &cfg));
  assert_non_null(strstr(sp_last_error(), "rank"));
  sp_cache_free(c);
}

static void normalize_f32_and_bf16(void **state) {
  (void)state;
  uint8_t px[2 * 3 * 4];
  for (int i = 0; i < 24; i++) px[i] = (uint8_t)(i * 11);
  sp_batch b = {0};
  b.n = 2; b.c = 3; b.h = 2; b.w = 2; b.pixels = px;
  float mean[3] = {0.5f, 0.25f, 0.f}, std[3] = {0.5f, 2.f, 1.f};
  float out[24];
  uint16_t out16[24];
  assert_int_equal(sp_batch_normalize(&b, mean, std, SP_F32, out), 0);
  assert_int_equal(sp_batch_normalize(&b, mean, std, SP_BF16, out16), 0);
  for (int i = 0; i < 24; i++) {
    int ch = (i / 4) % 3;
    float want = (px[i] / 255.f - mean[ch]) / std[ch];
    assert_float_equal(out[i], want, 1e-6);
    assert_float_equal(sp_bf16_to_f32(out16[i]), want, fabsf(want) / 128 + 1e-6);
  }
  assert_int_equal(sp_batch_normalize(&b, mean, std, SP_U8, out), -1);
  std[1] = 0;
  assert_int_equal(sp_batch_normalize(&b, mean, std, SP_F32, out), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(same_batches_for_any_worker_count),
      cmocka_unit_test(shards_are_disjoint),
      cmocka_unit_test(eval_shards_cover_the_epoch_in_order),
      cmocka_unit_test(restart_and_shutdown_mid_epoch),
      cmocka_unit_test(normalize_f32_and_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
