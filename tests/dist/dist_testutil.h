/* A small conv + batch-norm model and deterministic samples for the
 * distributed tests (every rank can rebuild any global sample by index). */
#ifndef SPRY_DIST_TESTUTIL_H
#define SPRY_DIST_TESTUTIL_H

#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "spry/graph.h"
#include "spry/rng.h"
#include "testkit.h"

#define DT_C 3
#define DT_S 8
#define DT_OUT 4

/* conv-BN-ReLU, strided conv-BN-ReLU, linear; MSE loss against "target". */
static inline sp_graph *dt_build(void) {
  sp_graph *g = sp_graph_new(7);
  sp_value x = sp_graph_input(g, "image", SP_F32, DT_C);
  sp_value t = sp_graph_input(g, "target", SP_F32, DT_OUT);
  x = sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch = 6, .kernel = 3, .pad = 1, .bias = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn1"));
  x = sp_conv2d(g, x, "conv2", (sp_conv_args){.out_ch = 8, .kernel = 3, .stride = 2, .pad = 1});
  x = sp_relu(g, sp_batchnorm(g, x, "bn2"));
  x = sp_flatten(g, x);
  x = sp_linear(g, x, "fc", 8 * (DT_S / 2) * (DT_S / 2), DT_OUT, 1);
  sp_graph_output(g, x, "out");
  sp_graph_loss(g, sp_mse_loss(g, x, t), 1.0f);
  assert_null(sp_graph_error(g));
  return g;
}

static inline sp_plan *dt_plan(sp_graph *g, int batch, sp_backend be) {
  sp_input_shape in[2] = {{"image", sp_shape4(batch, DT_C, DT_S, DT_S)}, {"target", sp_shape2(batch, DT_OUT)}};
  sp_plan *p = sp_plan_new(g, 2, in, be, 1, 0);
  assert_non_null(p);
  return p;
}

/* Global sample `index` into slot j of the plan's inputs. */
static inline void dt_fill(sp_plan *p, int j, int64_t index) {
  sp_rng r = sp_rng_make(sp_rng_key(99, 0, (uint64_t)index));
  float *im = (float *)sp_plan_input(p, "image")->data + (size_t)j * DT_C * DT_S * DT_S;
  float *tg = (float *)sp_plan_input(p, "target")->data + (size_t)j * DT_OUT;
  /* An offset per sample, so batch statistics differ from shard to shard. */
  float shift = sp_rng_range(&r, -1.0f, 1.0f);
  for (int k = 0; k < DT_C * DT_S * DT_S; k++) im[k] = sp_rng_normal(&r) + shift;
  for (int k = 0; k < DT_OUT; k++) tg[k] = sp_rng_range(&r, -1, 1);
}

/* All parameters and buffers of g, concatenated (malloc'ed). */
static inline float *dt_snapshot(sp_graph *g, int64_t *n) {
  int64_t total = 0;
  for (int i = 0; i < sp_graph_param_count(g); i++) total += sp_tensor_numel(sp_graph_param_value(g, i));
  float *s = malloc(sizeof(float) * (size_t)total), *at = s;
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    sp_tensor *t = sp_graph_param_value(g, i);
    memcpy(at, t->data, sizeof(float) * (size_t)sp_tensor_numel(t));
    at += sp_tensor_numel(t);
  }
  *n = total;
  return s;
}

#endif
