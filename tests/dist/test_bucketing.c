/* Gradient buckets: every trainable parameter in exactly one bucket (buffers
 * in none), each bucket launched once per step whatever order gradients are
 * reported in (also a different order on every rank), the result the mean
 * over ranks, and backward's hook launching every bucket before finish. */
#include <math.h>

#include "dist_testutil.h"

static void every_parameter_in_one_bucket(void **state) {
  (void)state;
  sp_graph *g = dt_build();
  sp_plan *p = dt_plan(g, 2, SP_BACKEND_REF);
  sp_grad_reducer *r = sp_grad_reducer_new(g, p, 200);
  assert_true(sp_grad_reducer_buckets(r) > 2);
  size_t trainable = 0;
  for (int q = 0; q < sp_graph_param_count(g); q++) {
    int b = sp_grad_reducer_bucket_of(r, q);
    if (sp_graph_param_flags(g, q) & SP_PARAM_BUFFER) {
      assert_int_equal(b, -1);
      continue;
    }
    assert_true(b >= 0 && b < sp_grad_reducer_buckets(r));
    trainable += sizeof(float) * (size_t)sp_tensor_numel(sp_graph_param_value(g, q));
  }
  assert_int_equal(sp_grad_reducer_bytes(r), trainable);
  assert_int_equal(trainable, sizeof(float) * (size_t)sp_graph_param_numel(g, 1));
  /* Backward finalises the head first: the linear layer opens bucket 0. */
  assert_int_equal(sp_grad_reducer_bucket_of(r, sp_graph_param_find(g, "fc.weight")), 0);
  assert_int_equal(sp_grad_reducer_bucket_of(r, sp_graph_param_find(g, "conv1.bias")),
                   sp_grad_reducer_buckets(r) - 1);
  sp_grad_reducer_free(r);
  sp_plan_free(p);
  sp_graph_free(g);
}

static float grad_value(int rank, int q, int64_t j) { return (float)(rank + 1) * 0.5f + (float)q + 0.001f * (float)j; }

/* Reported in a shuffled order that differs per rank, some twice. */
static void any_order_reduces_once(void **state) {
  (void)state;
  const int world = sp_dist_world(), rank = sp_dist_rank();
  sp_graph *g = dt_build();
  sp_grad_reducer *r = sp_grad_reducer_new(g, NULL, 128);
  const int np = sp_graph_param_count(g);
  /* Both kinds of bucket are checked below: packed (several small
   * gradients) and reduced in place (one gradient of 128 bytes or more). */
  int members[64] = {0}, alone = 0, packed = 0;
  for (int q = 0; q < np; q++)
    if (sp_grad_reducer_bucket_of(r, q) >= 0) members[sp_grad_reducer_bucket_of(r, q)]++;
  for (int b = 0; b < sp_grad_reducer_buckets(r); b++) {
    alone += members[b] == 1;
    packed += members[b] > 1;
  }
  assert_true(alone > 0 && packed > 0);
  for (int round = 0; round < 3; round++) {
    for (int q = 0; q < np; q++) {
      sp_tensor *gr = sp_graph_param_grad(g, q);
      if (!gr) continue;
      for (int64_t j = 0; j < sp_tensor_numel(gr); j++) ((float *)gr->data)[j] = grad_value(rank, q, j);
    }
    int32_t ids[64];
    assert_true(np <= 64);
    for (int q = 0; q < np; q++) ids[q] = q;
    sp_rng rng = sp_rng_make(sp_rng_key(5, (uint64_t)round, (uint64_t)rank));
    sp_rng_shuffle(&rng, ids, np);
    assert_int_equal(sp_grad_reducer_begin(r, NULL, 0), 0);
    for (int q = 0; q < np; q++) {
      int id = ids[q];
      sp_grad_reducer_ready(r, &id, 1);
      if (q % 3 == 0) sp_grad_reducer_ready(r, &id, 1); /* a repeat is ignored */
    }
    assert_int_equal(sp_grad_reducer_launched_early(r), 0); /* counted at finish */
    assert_int_equal(sp_grad_reducer_finish(r, NULL), 0);
    assert_int_equal(sp_grad_reducer_launched_early(r), sp_grad_reducer_buckets(r));
    for (int b = 0; b < sp_grad_reducer_buckets(r); b++) assert_int_equal(sp_grad_reducer_launches(r, b), 1);
    for (int q = 0; q < np; q++) {
      sp_tensor *gr = sp_graph_param_grad(g, q);
      if (!gr) continue;
      for (int64_t j = 0; j < sp_tensor_numel(gr); j++) {
        double mean = 0;
        for (int k = 0; k < world; k++) mean += grad_value(k, q, j);
        mean /= world;
        assert_true(fabs(((float *)gr->data)[j] - mean) <= 1e-5 * fabs(mean));
      }
    }
  }
  sp_grad_reducer_free(r);
  sp_graph_free(g);
}

/* Some gradients never reported: finish sends them anyway, once. */
static void unreported_sent_at_finish(void **state) {
  (void)state;
  sp_graph *g = dt_build();
  sp_grad_reducer *r = sp_grad_reducer_new(g, NULL, 128);
  assert_int_equal(sp_grad_reducer_begin(r, NULL, 0), 0);
  int first = 0;
  sp_grad_reducer_ready(r, &first, 1);
  assert_int_equal(sp_grad_reducer_finish(r, NULL), 0);
  for (int b = 0; b < sp_grad_reducer_buckets(r); b++) assert_int_equal(sp_grad_reducer_launches(r, b), 1);
  sp_grad_reducer_free(r);
  sp_graph_free(g);
}

/* Through the plan: backward's hook makes every bucket final (and launched)
 * before finish, i.e. communication starts while backward still runs. */
static void backward_launches_every_bucket(void **state) {
  (void)state;
  sp_graph *g = dt_build();
  sp_plan *p = dt_plan(g, 2, SP_BACKEND_REF);
  sp_grad_reducer *r = sp_grad_reducer_new(g, p, 200);
  for (int j = 0; j < 2; j++) dt_fill(p, j, j + 2 * sp_dist_rank());
  for (int step = 0; step < 2; step++) {
    sp_graph_zero_grad(g);
    assert_int_equal(sp_plan_forward(p), 0);
    double loss = sp_plan_loss(p), total = 0;
    assert_int_equal(sp_grad_reducer_begin(r, &loss, 1), 0);
    assert_int_equal(sp_plan_backward(p), 0);
    assert_int_equal(sp_grad_reducer_finish(r, &total), 0);
    assert_int_equal(sp_grad_reducer_launched_early(r), sp_grad_reducer_buckets(r));
    for (int b = 0; b < sp_grad_reducer_buckets(r); b++) assert_int_equal(sp_grad_reducer_launches(r, b), 1);
    /* Step totals are summed over the ranks. */
    double want = loss;
    sp_dist_sum_f64(&want, 1, "test");
    assert_true(fabs(total - want) <= 1e-12 * fabs(want));
  }
  /* Every trainable parameter is finalised by some node of this plan. */
  for (int q = 0; q < sp_graph_param_count(g); q++)
    if (!(sp_graph_param_flags(g, q) & SP_PARAM_BUFFER)) assert_true(sp_plan_grad_ready_node(p, q) >= 0);
  sp_grad_reducer_free(r);
  sp_plan_free(p);
  sp_graph_free(g);
}

int main(void) {
  assert_int_equal(sp_dist_init(), 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_parameter_in_one_bucket),
      cmocka_unit_test(any_order_reduces_once),
      cmocka_unit_test(unreported_sent_at_finish),
      cmocka_unit_test(backward_launches_every_bucket),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
