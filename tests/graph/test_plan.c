/* Plans: memory reuse never changes results, gradients of whole graphs
 * (fan-out included) match finite differences, plans share parameters, shape
 * errors name the node, and runs are bitwise reproducible. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/graph.h"
#include "spry/models.h"
#include "testkit.h"

/* conv -> BN -> relu, fanned out into two branches that meet again in add and
 * concat, then pooled, flattened, regressed to points and scored by L1 +
 * structure loss: exercises fan-out, multi-input ops and two loss terms. */
static const int32_t neighbours[4 * 2] = {1, 2, 0, 3, 0, 3, 1, 2};

static sp_graph *small_net(uint64_t seed, int smooth) {
  sp_graph *g = sp_graph_new(seed);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_value t = sp_graph_input(g, "points", SP_F32, 4);
  x = sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 6, .kernel = 3, .pad = 1, .bias = 1});
  x = sp_batchnorm(g, x, "stem_bn");
  x = smooth ? sp_hardswish(g, x) : sp_relu(g, x);
  sp_value a = sp_conv2d(g, x, "branch_a", (sp_conv_args){.out_ch = 6, .kernel = 3, .pad = 1, .groups = 2});
  sp_value b = sp_conv2d(g, x, "branch_b", (sp_conv_args){.out_ch = 6, .kernel = 1, .bias = 1});
  sp_value s = sp_add(g, a, b);
  sp_value cat[2] = {s, x};
  x = sp_concat(g, 2, cat);
  x = smooth ? sp_avgpool2d(g, x, (sp_pool_args){.kernel = 2, .stride = 2}) : sp_maxpool2d(g, x, (sp_pool_args){.kernel = 2, .stride = 2});
  x = sp_flatten(g, x);
  x = sp_linear(g, x, "head", 12 * 4 * 4, 8, 1);
  int64_t shape[3] = {0, 4, 2};
  sp_value p = sp_reshape(g, x, 3, shape);
  sp_graph_output(g, p, "pred");
  sp_graph_loss(g, sp_l1_loss(g, p, t), 1.0f);
  sp_graph_loss(g, sp_structure_loss(g, p, t, 4, 2, neighbours), 0.2f);
  assert_null(sp_graph_error(g));
  return g;
}

static sp_plan *plan_for(sp_graph *g, int n, int hw, unsigned flags) {
  sp_input_shape in[2] = {{"image", sp_shape4(n, 3, hw, hw)}, {"points", sp_shape3(n, 4, 2)}};
  sp_plan *p = sp_plan_new(g, 2, in, SP_BACKEND_REF, 1, flags);
  if (!p) fail_msg("plan: %s", sp_last_error());
  return p;
}

static void fill_inputs(sp_plan *p, uint64_t seed) {
  sp_test_rng r = {seed};
  sp_tensor *x = sp_plan_input(p, "image"), *t = sp_plan_input(p, "points");
  sp_test_fill_uniform(&r, x->data, sp_tensor_numel(x), -1, 1);
  sp_test_fill_uniform(&r, t->data, sp_tensor_numel(t), -2, 2);
}

static double step(sp_graph *g, sp_plan *p, uint64_t seed) {
  fill_inputs(p, seed);
  sp_graph_zero_grad(g);
  assert_int_equal(sp_plan_forward(p), 0);
  assert_int_equal(sp_plan_backward(p), 0);
  return sp_plan_loss(p);
}

static void copy_grads(sp_graph *g, float **out) {
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    sp_tensor *gr = sp_graph_param_grad(g, i);
    out[i] = NULL;
    if (!gr) continue;
    out[i] = malloc(sp_tensor_bytes(gr));
    memcpy(out[i], gr->data, sp_tensor_bytes(gr));
  }
}

static void reuse_never_changes_results(void **state) {
  (void)state;
  sp_graph *g1 = small_net(7, 0), *g2 = small_net(7, 0);
  /* Reused arena, with dead buffers poisoned with NaN, vs. private buffers. */
  sp_plan *shared = plan_for(g1, 3, 8, SP_PLAN_POISON);
  sp_plan *naive = plan_for(g2, 3, 8, SP_PLAN_NO_REUSE);
  assert_int_equal(sp_plan_verify(shared), 0);
  assert_true(sp_plan_arena_bytes(shared) < sp_plan_naive_bytes(shared));
  printf("# arena %zu bytes planned vs %zu naive\n", sp_plan_arena_bytes(shared), sp_plan_naive_bytes(shared));
  for (int it = 0; it < 3; it++) {
    double l1 = step(g1, shared, 100 + it), l2 = step(g2, naive, 100 + it);
    assert_true(isfinite(l1));
    assert_true(l1 == l2);
    for (int i = 0; i < sp_graph_param_count(g1); i++) {
      sp_tensor *a = sp_graph_param_grad(g1, i), *b = sp_graph_param_grad(g2, i);
      if (!a) continue;
      for (int64_t k = 0; k < sp_tensor_numel(a); k++) assert_true(isfinite(((float *)a->data)[k]));
      assert_memory_equal(a->data, b->data, sp_tensor_bytes(a));
    }
    const sp_tensor *pa = sp_plan_output(shared, "pred"), *pb = sp_plan_output(naive, "pred");
    assert_memory_equal(pa->data, pb->data, sp_tensor_bytes(pa));
  }
  sp_plan_free(shared);
  sp_plan_free(naive);
  sp_graph_free(g1);
  sp_graph_free(g2);
}

/* A plan told that only the losses are read trains bitwise the same, keeps
 * no output (sp_plan_output says why) and needs no more memory. */
static void loss_only_plans_keep_no_outputs(void **state) {
  (void)state;
  sp_graph *g1 = small_net(7, 0), *g2 = small_net(7, 0);
  sp_plan *all = plan_for(g1, 3, 8, SP_PLAN_POISON), *loss = plan_for(g2, 3, 8, SP_PLAN_POISON | SP_PLAN_LOSS_ONLY);
  assert_int_equal(sp_plan_verify(loss), 0);
  assert_true(sp_plan_arena_bytes(loss) <= sp_plan_arena_bytes(all));
  for (int it = 0; it < 2; it++) {
    double l1 = step(g1, all, 300 + it), l2 = step(g2, loss, 300 + it);
    assert_true(isfinite(l1) && l1 == l2);
    for (int i = 0; i < sp_graph_param_count(g1); i++) {
      sp_tensor *a = sp_graph_param_grad(g1, i), *b = sp_graph_param_grad(g2, i);
      if (a) assert_memory_equal(a->data, b->data, sp_tensor_bytes(a));
    }
  }
  assert_non_null(sp_plan_output(all, "pred"));
  assert_null(sp_plan_output(loss, "pred"));
  assert_non_null(strstr(sp_last_error(), "'pred'"));
  sp_plan_free(all);
  sp_plan_free(loss);
  sp_graph_free(g1);
  sp_graph_free(g2);
}

/* Every trainable parameter's gradient (a sample of entries) against central
 * differences of the total loss: checks fan-out accumulation, zeroing of
 * reused gradient buffers, and the loss weights. */
static void whole_graph_gradients(void **state) {
  (void)state;
  sp_graph *g = small_net(11, 1);
  sp_plan *p = plan_for(g, 2, 8, 0);
  step(g, p, 5);
  int n = sp_graph_param_count(g);
  float **grads = calloc((size_t)n, sizeof(float *));
  copy_grads(g, grads);
  sp_test_rng r = {3};
  int checked = 0;
  for (int i = 0; i < n; i++) {
    if (!grads[i]) continue;
    sp_tensor *w = sp_graph_param_value(g, i);
    for (int k = 0; k < 6; k++) {
      int64_t j = (int64_t)(sp_test_rng_next(&r) % (uint64_t)sp_tensor_numel(w));
      float *v = (float *)w->data + j, keep = *v;
      const double eps = 1e-2;
      *v = keep + (float)eps;
      fill_inputs(p, 5);
      sp_plan_forward(p);
      double plus = sp_plan_loss(p);
      *v = keep - (float)eps;
      fill_inputs(p, 5);
      sp_plan_forward(p);
      double minus = sp_plan_loss(p);
      *v = keep;
      double numeric = (plus - minus) / (2 * eps), analytic = grads[i][j];
      if (fabs(numeric - analytic) > 3e-3 + 3e-2 * fabs(numeric))
        fail_msg("%s[%lld]: analytic %.6g vs numeric %.6g", sp_graph_param_name(g, i), (long long)j, analytic,
                 numeric);
      checked++;
    }
    free(grads[i]);
  }
  assert_true(checked > 30);
  free(grads);
  sp_plan_free(p);
  sp_graph_free(g);
}

static void plans_share_parameters(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  x = sp_conv2d(g, x, "conv", (sp_conv_args){.out_ch = 4, .kernel = 3, .stride = 2, .pad = 1, .bias = 1});
  x = sp_global_avgpool(g, x);
  x = sp_flatten(g, x);
  sp_graph_output(g, x, "features");
  sp_input_shape s1 = {"image", sp_shape4(2, 3, 16, 16)}, s2 = {"image", sp_shape4(5, 3, 11, 7)};
  sp_plan *a = sp_plan_new(g, 1, &s1, SP_BACKEND_REF, 0, 0), *b = sp_plan_new(g, 1, &s2, SP_BACKEND_REF, 0, 0);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(sp_plan_shape(b, x)->d[0], 5);
  /* Setting the bias through the graph is seen by both plans. */
  sp_tensor *w = sp_graph_param_value(g, sp_graph_param_find(g, "conv.weight"));
  sp_tensor *bias = sp_graph_param_value(g, sp_graph_param_find(g, "conv.bias"));
  memset(w->data, 0, sp_tensor_bytes(w));
  for (int i = 0; i < 4; i++) ((float *)bias->data)[i] = (float)i + 0.5f;
  sp_plan_forward(a);
  sp_plan_forward(b);
  for (int i = 0; i < 4; i++) {
    assert_true(((const float *)sp_plan_output(a, "features")->data)[i] == (float)i + 0.5f);
    assert_true(((const float *)sp_plan_output(b, "features")->data)[4 * 4 + i] == (float)i + 0.5f);
  }
  sp_plan_free(a);
  sp_plan_free(b);
  sp_graph_free(g);
}

static void shape_errors_name_the_node(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, -1);
  sp_graph_push_scope(g, "stage2");
  x = sp_linear(g, sp_flatten(g, x), "fc", 100, 10, 1);
  sp_graph_pop_scope(g);
  /* Node names carry the scope (the profile's per-node lines show them). */
  assert_string_equal(sp_graph_node_name(g, x), "stage2.fc");
  assert_string_equal(sp_graph_node_name(g, 0), "image");
  assert_null(sp_graph_node_name(g, sp_graph_node_count(g)));
  assert_null(sp_graph_node_name(g, -1));
  sp_input_shape s = {"image", sp_shape4(2, 3, 4, 4)};
  assert_null(sp_plan_new(g, 1, &s, SP_BACKEND_REF, 0, 0));
  const char *e = sp_last_error();
  assert_non_null(strstr(e, "stage2.fc"));
  assert_non_null(strstr(e, "[2,48]"));
  sp_input_shape wrong = {"pixels", sp_shape4(2, 3, 4, 4)};
  assert_null(sp_plan_new(g, 1, &wrong, SP_BACKEND_REF, 0, 0));
  assert_non_null(strstr(sp_last_error(), "image"));
  sp_graph_free(g);

  /* Build-time errors: a conv on an input of unknown channels, and a VGG at a
   * size that is not a multiple of 32. */
  g = sp_graph_new(1);
  x = sp_graph_input(g, "image", SP_F32, -1);
  x = sp_conv2d(g, x, "conv", (sp_conv_args){.out_ch = 4, .kernel = 3, .pad = 1});
  x = sp_relu(g, x);
  assert_int_equal(x, -1);
  assert_non_null(strstr(sp_graph_error(g), "channel count"));
  assert_null(sp_plan_new(g, 1, &s, SP_BACKEND_REF, 0, 0));
  sp_graph_free(g);
  g = sp_graph_new(1);
  assert_int_equal(sp_model_vgg(g, sp_graph_input(g, "image", SP_F32, 1), 100, 96, 58), -1);
  assert_non_null(strstr(sp_graph_error(g), "100x96"));
  sp_graph_free(g);
}

static void same_seed_same_bits(void **state) {
  (void)state;
  sp_graph *a = small_net(42, 0), *b = small_net(42, 0), *c = small_net(43, 0);
  sp_plan *pa = plan_for(a, 2, 8, 0), *pb = plan_for(b, 2, 8, 0), *pc = plan_for(c, 2, 8, 0);
  double la = step(a, pa, 9), lb = step(b, pb, 9), lc = step(c, pc, 9);
  assert_true(la == lb);
  assert_true(la != lc);
  for (int i = 0; i < sp_graph_param_count(a); i++) {
    sp_tensor *ga = sp_graph_param_grad(a, i), *gb = sp_graph_param_grad(b, i);
    if (ga) assert_memory_equal(ga->data, gb->data, sp_tensor_bytes(ga));
  }
  sp_plan_free(pa);
  sp_plan_free(pb);
  sp_plan_free(pc);
  sp_graph_free(a);
  sp_graph_free(b);
  sp_graph_free(c);
}

static void vgg_face_shapes_and_parameter_count(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, 1);
  sp_value p = sp_model_vgg(g, x, 224, 224, 58);
  assert_null(sp_graph_error(g));
  sp_graph_output(g, p, "points");
  sp_input_shape s = {"image", sp_shape4(1, 1, 224, 224)};
  sp_plan *pl = sp_plan_new(g, 1, &s, SP_BACKEND_REF, 0, 0);
  assert_non_null(pl);
  const sp_shape *o = sp_plan_shape(pl, p);
  assert_int_equal(o->ndim, 3);
  assert_int_equal(o->d[1], 58);
  assert_int_equal(o->d[2], 2);
  assert_int_not_equal(sp_graph_param_find(g, "layers.4.1.conv.weight"), -1);
  assert_int_not_equal(sp_graph_param_find(g, "bn1.running_var"), -1);
  /* Trainable parameters of the seed's printed model: convs + BN affine +
   * fc1 (6272*1024+1024) + bn1 (2*1024) + fc2 (1024*116+116). */
  int64_t convs = 1 * 8 * 9 + 8 * 16 * 9 + 16 * 32 * 9 + 32 * 32 * 9 + 32 * 64 * 9 + 64 * 64 * 9 + 64 * 128 * 9 +
                  128 * 128 * 9;
  int64_t bns = 2 * (8 + 16 + 32 + 32 + 64 + 64 + 128 + 128);
  int64_t fcs = 6272 * 1024 + 1024 + 2 * 1024 + 1024 * 116 + 116;
  assert_int_equal(sp_graph_param_numel(g, 1), convs + bns + fcs);
  sp_plan_free(pl);
  sp_graph_free(g);
}

/* zero_grad clears every byte of every gradient whatever the thread count:
 * large gradients are split between threads, at sizes that do not divide
 * evenly (131 x 257 floats), small ones are not. */
static void zero_grad_clears_every_byte(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(3);
  sp_value x = sp_graph_input(g, "image", SP_F32, 257);
  sp_value y = sp_linear(g, sp_linear(g, x, "big", 257, 131, 1), "small", 131, 3, 1);
  sp_graph_loss(g, sp_l1_loss(g, y, sp_graph_input(g, "points", SP_F32, 3)), 1.0f);
  sp_input_shape in[2] = {{"image", sp_shape2(2, 257)}, {"points", sp_shape2(2, 3)}};
  sp_plan *p = sp_plan_new(g, 2, in, SP_BACKEND_REF, 1, 0);
  if (!p) fail_msg("plan: %s", sp_last_error());
  const int before = omp_get_max_threads(), threads[] = {1, 2, 3, 7};
  for (int t = 0; t < 4; t++) {
    omp_set_num_threads(threads[t]);
    for (int i = 0; i < sp_graph_param_count(g); i++)
      if (sp_graph_param_grad(g, i)) memset(sp_graph_param_grad(g, i)->data, 0xff, sp_tensor_bytes(sp_graph_param_grad(g, i)));
    sp_graph_zero_grad(g);
    for (int i = 0; i < sp_graph_param_count(g); i++) {
      const sp_tensor *gr = sp_graph_param_grad(g, i);
      if (!gr) continue;
      const unsigned char *b = gr->data;
      for (size_t k = 0; k < sp_tensor_bytes(gr); k++)
        if (b[k]) fail_msg("%d threads: grad.%s byte %zu not cleared", threads[t], sp_graph_param_name(g, i), k);
    }
  }
  omp_set_num_threads(before);
  sp_plan_free(p);
  sp_graph_free(g);
}

/* An auxiliary output is kept by plain plans and dropped by frozen ones
 * (with an error that names the flag); ordinary outputs stay in both, with
 * the same values. */
static void frozen_plans_drop_aux_outputs(void **state) {
  (void)state;
  sp_graph *g = sp_graph_new(5);
  sp_value x = sp_graph_input(g, "image", SP_F32, 6);
  sp_value h = sp_linear(g, x, "hidden", 6, 4, 1);
  sp_graph_output_aux(g, h, "hidden_out");
  sp_graph_output(g, sp_linear(g, sp_relu(g, h), "last", 4, 2, 1), "out");
  sp_input_shape in = {"image", sp_shape2(3, 6)};
  sp_plan *plain = sp_plan_new(g, 1, &in, SP_BACKEND_REF, 0, 0);
  sp_plan *frozen = sp_plan_new(g, 1, &in, SP_BACKEND_REF, 0, SP_PLAN_FROZEN);
  if (!plain || !frozen) fail_msg("plan: %s", sp_last_error());
  for (int i = 0; i < 18; i++) {
    ((float *)sp_plan_input(plain, "image")->data)[i] = (float)(i % 5) - 2.0f;
    ((float *)sp_plan_input(frozen, "image")->data)[i] = (float)(i % 5) - 2.0f;
  }
  assert_int_equal(sp_plan_forward(plain), 0);
  assert_int_equal(sp_plan_forward(frozen), 0);
  assert_non_null(sp_plan_output(plain, "hidden_out"));
  assert_null(sp_plan_output(frozen, "hidden_out"));
  assert_non_null(strstr(sp_last_error(), "SP_PLAN_FROZEN"));
  const sp_tensor *a = sp_plan_output(plain, "out"), *b = sp_plan_output(frozen, "out");
  assert_non_null(a);
  assert_non_null(b);
  assert_memory_equal(a->data, b->data, sp_tensor_bytes(a));
  sp_plan_free(plain);
  sp_plan_free(frozen);
  sp_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reuse_never_changes_results),
      cmocka_unit_test(loss_only_plans_keep_no_outputs),
      cmocka_unit_test(whole_graph_gradients),
      cmocka_unit_test(plans_share_parameters),
      cmocka_unit_test(shape_errors_name_the_node),
      cmocka_unit_test(same_seed_same_bits),
      cmocka_unit_test(vgg_face_shapes_and_parameter_count),
      cmocka_unit_test(zero_grad_clears_every_byte),
      cmocka_unit_test(frozen_plans_drop_aux_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
