/* Predictions over a cached dataset, mapped back to source-image pixels:
 * shared by the trainer's validation pass (split over the ranks of a
 * data-parallel run) and `spry eval`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "train/trainer_internal.h"

static sp_plan *plan_for(sp_kp_evaluator *e, int n) {
  const sp_train_config *c = e->cfg;
  sp_input_shape in[2] = {{"image", sp_shape4(n, c->data.channels, c->data.size, c->data.size)},
                          {"points", sp_shape3(n, e->data->k, 2)}};
  /* Frozen: the weights are prepared once per evaluation pass (below), not
   * once per batch. */
  return sp_plan_new(e->g, 2, in, e->backend, 0, SP_PLAN_FROZEN);
}

static sp_plan *plan_of_size(sp_kp_evaluator *e, int n) {
  sp_plan **slot = n == e->cfg->batch ? &e->full : &e->tail;
  if (*slot && sp_plan_input(*slot, "image")->shape.d[0] == n) return *slot;
  sp_plan_free(*slot);
  return *slot = plan_for(e, n);
}

/* Each rank predicted its part of the set (an eval_shard loader) into its
 * rows, zeros elsewhere: the rows, loss sum and counts summed over the ranks
 * in one message (x + 0 is exact) give every rank the whole set. The ground
 * truth needs no message: every rank holds the whole cache. */
static void sum_over_ranks(float *pred, size_t floats, double *loss_sum, int *done, int *rc) {
  double *v = sp_xmalloc(sizeof(double) * (floats + 3));
  for (size_t i = 0; i < floats; i++) v[i] = pred[i];
  v[floats] = *loss_sum, v[floats + 1] = *done, v[floats + 2] = *rc != 0;
  if (*rc != 0) /* the other ranks only learn that this one failed */
    fprintf(stderr, "spry: rank %d: validation: %s\n", sp_dist_rank(), sp_last_error());
  sp_dist_sum_f64(v, (int)(floats + 3), "validation");
  for (size_t i = 0; i < floats; i++) pred[i] = (float)v[i];
  *loss_sum = v[floats], *done = (int)v[floats + 1];
  if (v[floats + 2] > 0 && *rc == 0) *rc = sp_error_set("validation failed on another rank (see its message)");
  free(v);
}

/* Ground truth of every sample in source-image pixels. */
static void ground_truth(const sp_kp_data *d, const sp_cache *cache, float *gt) {
  for (int idx = 0; idx < cache->n; idx++)
    for (int j = 0; j < d->k; j++) {
      float *o = gt + ((size_t)idx * d->k + j) * 2;
      const float *g = cache->points + ((size_t)idx * d->k_all + d->subset[j]) * 2;
      o[0] = g[0], o[1] = g[1];
      sp_cache_crop_to_source(cache, idx, &o[0], &o[1]);
    }
}

int sp_kp_evaluate(sp_kp_evaluator *e, const sp_cache *cache, sp_loader *loader, int64_t epoch, int over_ranks,
                   float **pred_out, float **gt_out, int *n_out, double *loss_out) {
  const sp_kp_data *d = e->data;
  int k = d->k, S = e->cfg->data.size, rc = 0;
  const size_t floats = (size_t)cache->n * k * 2;
  /* Row i is sample i of the cache: zeros where another rank predicts. */
  float *pred = sp_xcalloc(floats ? floats : 1, sizeof(float));
  double loss_sum = 0;
  int done = 0;
  sp_loader_start_epoch(loader, epoch);
  /* The trainer changed the weights since the last pass. */
  if (e->full) sp_plan_params_changed(e->full);
  if (e->tail) sp_plan_params_changed(e->tail);
  const sp_batch *b;
  while ((b = sp_loader_next(loader))) {
    sp_plan *p = rc == 0 ? plan_of_size(e, b->n) : NULL;
    if (!p) {
      rc = -1;
      continue; /* drain the epoch so the loader is idle afterwards */
    }
    sp_batch_normalize(b, e->cfg->data.mean, e->cfg->data.std, SP_F32, sp_plan_input(p, "image")->data);
    sp_kp_points_to_model(d, b->points, b->n, e->scale, e->offset, sp_plan_input(p, "points")->data);
    sp_plan_forward(p);
    loss_sum += sp_plan_loss(p) * b->n;
    const float *u = sp_plan_output(p, "points_out")->data;
    for (int i = 0; i < b->n; i++) {
      /* Network input pixels -> cache crop pixels (the unaugmented map is a
       * zoom about the centres) -> source pixels (the crop square). */
      int idx = b->index[i];
      double zoom = (double)cache->size / S, cc = (cache->size - 1) * 0.5, cs = (S - 1) * 0.5;
      for (int j = 0; j < k; j++) {
        size_t o = ((size_t)idx * k + j) * 2;
        float px = (u[((size_t)i * k + j) * 2] - e->offset) / e->scale;
        float py = (u[((size_t)i * k + j) * 2 + 1] - e->offset) / e->scale;
        pred[o] = (float)((px - cs) * zoom + cc);
        pred[o + 1] = (float)((py - cs) * zoom + cc);
        sp_cache_crop_to_source(cache, idx, &pred[o], &pred[o + 1]);
      }
    }
    done += b->n;
  }
  if (over_ranks) sum_over_ranks(pred, floats, &loss_sum, &done, &rc);
  if (rc == 0 && done != cache->n)
    rc = sp_error_set("evaluation saw %d of the %d samples (the loader must cover the set once)", done, cache->n);
  if (rc != 0) {
    free(pred);
    return -1;
  }
  float *gt = sp_xmalloc(sizeof(float) * (floats ? floats : 1));
  ground_truth(d, cache, gt);
  *pred_out = pred;
  *gt_out = gt;
  *n_out = done;
  *loss_out = done ? loss_sum / done : NAN;
  return 0;
}

void sp_kp_evaluator_free(sp_kp_evaluator *e) {
  sp_plan_free(e->full);
  sp_plan_free(e->tail);
  e->full = e->tail = NULL;
}

double sp_kp_mean_shape_error(const sp_kp_data *d, const sp_cache *c) {
  double total = 0;
  for (int i = 0; i < c->n; i++) {
    /* Crop pixels -> source pixels, per axis: a whole photo is stretched. */
    sp_crop_rect r = sp_cache_crop_rect(c, i);
    double sx = r.w / c->size, sy = r.h / c->size, face = 0;
    for (int j = 0; j < d->k; j++) {
      const float *g = c->points + ((size_t)i * d->k_all + d->subset[j]) * 2;
      face += hypot((g[0] - d->mean_shape[2 * j]) * sx, (g[1] - d->mean_shape[2 * j + 1]) * sy);
    }
    total += face / d->k;
  }
  return c->n ? total / c->n : NAN;
}
