/* Data parallelism changes nothing but speed: W ranks with per-rank batch
 * G/W take the same 5 SGD steps as one process with batch G when batch norm
 * is synchronised (statistics of the global batch); with per-rank batch norm
 * they differ, as expected. Run by `mpirun -np 2` (also passes as 1 process,
 * where both sides are one process). */
#include <math.h>

#include "dist_testutil.h"
#include "spry/optim.h"
#include "spry/train.h"

enum { GLOBAL_BATCH = 8, STEPS = 5 };

/* overlap: the optimizer updates each bucket as soon as it is reduced
 * (sp_dist_step) instead of after the whole exchange. bf16: gradients travel
 * as bfloat16. */
static float *train_with(int dist, int sync_bn, sp_backend be, int overlap, int bf16, int64_t *n) {
  const int world = dist ? sp_dist_world() : 1, rank = dist ? sp_dist_rank() : 0;
  const int b = GLOBAL_BATCH / world;
  sp_graph *g = dt_build();
  if (dist && sync_bn) sp_dist_enable_sync_bn(g);
  if (dist) assert_int_equal(sp_dist_bcast_params(g), 0);
  sp_plan *p = dt_plan(g, b, be);
  /* Small buckets: several per step, launched at different points of backward. */
  sp_grad_reducer *red = dist ? sp_grad_reducer_new(g, p, 256) : NULL;
  if (red) assert_int_equal(sp_grad_reducer_set_bf16(red, bf16), 0);
  int np;
  sp_opt_param *params = sp_train_opt_params(g, &np);
  sp_opt_config oc = sp_opt_config_default(SP_OPT_SGD);
  oc.momentum = 0.9f;
  sp_optimizer *opt = sp_optimizer_new(&oc, np, params);
  assert_non_null(opt);
  int *slot_of = sp_dist_param_slots(g);
  for (int s = 0; s < STEPS; s++) {
    /* Rank r holds slots r*b .. r*b+b-1 of the global batch. */
    for (int j = 0; j < b; j++) dt_fill(p, j, (int64_t)s * GLOBAL_BATCH + rank * b + j);
    sp_graph_zero_grad(g);
    sp_plan_set_step(p, (uint64_t)s);
    assert_int_equal(sp_plan_forward(p), 0);
    double loss = sp_plan_loss(p), total = 0;
    if (red) assert_int_equal(sp_grad_reducer_begin(red, &loss, 1), 0);
    assert_int_equal(sp_plan_backward(p), 0);
    if (red && overlap) {
      assert_int_equal(sp_dist_step(red, opt, slot_of, params, 0.05f, &total), 0);
    } else {
      if (red) assert_int_equal(sp_grad_reducer_finish(red, &total), 0);
      assert_int_equal(sp_optimizer_step(opt, 0.05f), 0);
    }
    if (red) assert_true(fabs(total / world - loss) < 10 * fabs(loss) + 1); /* summed, finite */
  }
  float *snap = dt_snapshot(g, n);
  sp_grad_reducer_free(red);
  free(slot_of);
  sp_optimizer_free(opt);
  free(params);
  sp_plan_free(p);
  sp_graph_free(g);
  return snap;
}

static float *train(int dist, int sync_bn, sp_backend be, int64_t *n) {
  return train_with(dist, sync_bn, be, 0, 0, n);
}

/* Updating each bucket as soon as it is reduced (small buckets here: several
 * per step) gives bitwise the parameters of updating after the exchange. */
static void overlapped_step_is_bitwise(void **state) {
  (void)state;
  int64_t n, m;
  float *after = train_with(1, 1, SP_BACKEND_REF, 0, 0, &n), *overlapped = train_with(1, 1, SP_BACKEND_REF, 1, 0, &m);
  assert_int_equal(n, m);
  assert_memory_equal(after, overlapped, sizeof(float) * (size_t)n);
  free(after);
  free(overlapped);
}

static void sync_bn_matches_one_process(void **state) {
  (void)state;
  int64_t n, m;
  float *one = train(0, 0, SP_BACKEND_REF, &n), *dist = train(1, 1, SP_BACKEND_REF, &m);
  assert_int_equal(n, m);
  int64_t worst;
  double ratio = sp_test_close_ratio(dist, one, n, 1e-4, 1e-5, &worst);
  if (ratio > 1)
    print_error("rank %d: parameter %lld: %g (W ranks) vs %g (1 process)\n", sp_dist_rank(), (long long)worst,
                dist[worst], one[worst]);
  assert_true(ratio <= 1);
  free(one);
  free(dist);
}

/* Per-rank statistics normalise each shard by itself: another model. */
static void local_bn_differs(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip();
  int64_t n, m;
  float *one = train(0, 0, SP_BACKEND_REF, &n), *dist = train(1, 0, SP_BACKEND_REF, &m);
  assert_true(sp_test_close_ratio(dist, one, n, 1e-3, 1e-3, NULL) > 1);
  free(one);
  free(dist);
}

/* The cpu backend runs sync batch norm on the reference kernel (and the rest
 * on oneDNN): same steps within the backends' agreement. */
static void sync_bn_on_cpu_backend(void **state) {
  (void)state;
#ifdef SPRY_HAVE_DNNL
  int64_t n, m;
  float *one = train(0, 0, SP_BACKEND_REF, &n), *dist = train(1, 1, SP_BACKEND_CPU, &m);
  assert_true(sp_test_close_ratio(dist, one, n, 2e-3, 2e-4, NULL) <= 1);
  free(one);
  free(dist);
#else
  skip();
#endif
}

/* Gradients on the wire as bfloat16: the 5 steps move the parameters as the
 * fp32 exchange does, to bf16 precision (8 significant bits: each step's mean
 * gradient is off by at most ~2^-8 relative), and every rank holds bitwise
 * the same parameters (all unpack the same reduced buffer). */
static void bf16_wire_is_close_and_the_same_on_every_rank(void **state) {
  (void)state;
  if (sp_dist_world() < 2) skip(); /* one process sends nothing */
  int64_t n, m, k;
  sp_graph *g0 = dt_build();
  float *init = dt_snapshot(g0, &k);
  sp_graph_free(g0);
  float *exact = train_with(1, 1, SP_BACKEND_REF, 1, 0, &n), *half = train_with(1, 1, SP_BACKEND_REF, 1, 1, &m);
  assert_int_equal(n, m);
  assert_int_equal(n, k);
  double moved = 0, off = 0;
  for (int64_t i = 0; i < n; i++) {
    moved = fmax(moved, fabs((double)exact[i] - init[i]));
    off = fmax(off, fabs((double)half[i] - exact[i]));
  }
  assert_true(moved > 1e-3); /* training did move the parameters */
  if (off > 0.01 * moved) print_error("rank %d: bf16 wire off by %g, parameters moved %g\n", sp_dist_rank(), off, moved);
  assert_true(off <= 0.01 * moved);
  {
    assert_true(off > 0); /* the gradients really were rounded */
    float *from0 = malloc(sizeof(float) * (size_t)n);
    memcpy(from0, half, sizeof(float) * (size_t)n);
    assert_int_equal(sp_dist_bcast(from0, sizeof(float) * (size_t)n, "rank 0's parameters"), 0);
    double differs = memcmp(from0, half, sizeof(float) * (size_t)n) != 0;
    assert_int_equal(sp_dist_sum_f64(&differs, 1, "parameter mismatch votes"), 0);
    assert_true(differs == 0);
    free(from0);
  }
  free(init);
  free(exact);
  free(half);
}

/* The packing: round to nearest even, exact values kept, NaN stays NaN,
 * overflow to infinity (the sum op and pack share it). */
static void bf16_pack_rounds_to_nearest_even(void **state) {
  (void)state;
  const float x[] = {1.0f, -2.5f, 1.00390625f /* 1 + 2^-8: a tie, down to 1 */, 1.01171875f /* 1 + 3*2^-8: tie, up */,
                     1.0f + 0x1p-8f + 0x1p-20f /* above the tie: up */, 3.4e38f, INFINITY, -0.0f, NAN};
  const uint16_t want[] = {0x3f80, 0xc020, 0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7f80, 0x8000};
  uint16_t h[9];
  sp_grad_reducer_pack_bf16(x, h, 9);
  for (int i = 0; i < 8; i++)
    if (h[i] != want[i]) fail_msg("pack(%a) = 0x%04x, want 0x%04x", (double)x[i], h[i], want[i]);
  assert_true((h[8] & 0x7f80) == 0x7f80 && (h[8] & 0x7f) != 0); /* NaN */
}

int main(void) {
  assert_int_equal(sp_dist_init(), 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(sync_bn_matches_one_process),
      cmocka_unit_test(overlapped_step_is_bitwise),
      cmocka_unit_test(local_bn_differs),
      cmocka_unit_test(sync_bn_on_cpu_backend),
      cmocka_unit_test(bf16_wire_is_close_and_the_same_on_every_rank),
      cmocka_unit_test(bf16_pack_rounds_to_nearest_even),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
