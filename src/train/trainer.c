/* The keypoint task of the training loop (loop.h): cached uint8 face crops
 * through the augmenting batch loader, one training plan, and a validation
 * pass whose figures are in pixels of the source images ("best" is the
 * lowest mean error). sp_train_run is the keypoint run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "spry/train.h"
#include "train/config_shared.h"
#include "train/loop.h"
#include "train/trainer_internal.h"

typedef struct {
  const sp_train_config *cfg;
  sp_loop *loop;
  sp_kp_data data;
  sp_graph *g;
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_backend backend;
  sp_plan *train_plan;
  sp_kp_evaluator eval;
  sp_loader *train_loader, *val_loader;
  /* The last validation pass. */
  sp_kp_metrics m;
  double val_loss, baseline_px;
} kp_task;

static sp_plan *train_plan(kp_task *t, int local_batch) {
  const sp_train_config *cfg = t->cfg;
  sp_input_shape in[2] = {{"image", sp_shape4(local_batch, cfg->data.channels, cfg->data.size, cfg->data.size)},
                          {"points", sp_shape3(local_batch, t->data.k, 2)}};
  /* Training reads only the loss; validation has plans of its own (f32). */
  unsigned flags = SP_PLAN_LOSS_ONLY | sp_config_precision_flags(cfg->precision, t->backend);
  return sp_plan_new(t->g, 2, in, t->backend, 1, flags);
}

/* What a rank read, for comparing across ranks: each cache's count, crop
 * geometry and points (not the pixels: another machine's JPEG decoder may
 * round a few differently, which is harmless; a missing image or another
 * annotation is not, it would shift every batch). */
static uint64_t cache_hash(const sp_cache *c, uint64_t h) {
  int32_t head[4] = {c->n, c->size, c->channels, c->k};
  h = sp_dist_hash(head, sizeof head, h);
  h = sp_dist_hash(c->points, sizeof(float) * 2 * (size_t)c->n * (size_t)c->k, h);
  h = sp_dist_hash(c->vis, (size_t)c->n * (size_t)c->k, h);
  h = sp_dist_hash(c->box_src, (size_t)c->n, h);
  return sp_dist_hash(c->crop, sizeof(float) * 4 * (size_t)c->n, h);
}

static int same_data_on_ranks(const kp_task *t) {
  char odd[128];
  const sp_kp_data *d = &t->data;
  /* Ranks on machines that do not share the run folder build their own
   * caches here: rank 0 may wait a cache build long, as at the barrier. */
  uint64_t mine = cache_hash(d->val_cache, cache_hash(d->train_cache, 0));
  if (sp_dist_ranks_differ(mine, odd, sizeof odd, 10 * t->cfg->dist.timeout_s) == 0) return 0;
  return sp_error_set(
      "distributed run refused: rank(s) %s read other images or annotations than rank 0 (this rank "
      "has %d train / %d val faces): the data differs between machines; give every machine the same "
      "data",
      odd, d->train_cache->n, d->val_cache->n);
}

/* The augmenting training loader (this rank's slice of every global batch)
 * and the validation loader (this rank's part of the set, no augmentation). */
static int make_loaders(kp_task *t, const sp_loop *l) {
  const sp_train_config *cfg = t->cfg;
  sp_loader_config lc = sp_loader_config_default(l->local_batch, cfg->data.size);
  lc.workers = cfg->workers;
  lc.seed = cfg->seed;
  lc.aug.scale_min = cfg->augment.scale_min;
  lc.aug.scale_max = cfg->augment.scale_max;
  lc.aug.translate = cfg->augment.translate;
  lc.aug.rotate_deg = cfg->augment.rotate;
  lc.aug.flip_prob = cfg->augment.flip;
  lc.aug.ra_n = cfg->augment.ra_n;
  lc.aug.ra_m = cfg->augment.ra_m;
  lc.rank = l->rank;
  lc.world = l->world;
  if (!(t->train_loader = sp_loader_create(t->data.train_cache, t->data.scheme, &lc))) return -1;
  sp_loader_config vc = lc;
  vc.batch = cfg->batch;
  vc.eval_shard = 1;
  vc.shuffle = 0;
  vc.drop_last = 0;
  vc.aug = sp_augment_config_none(cfg->data.size);
  return (t->val_loader = sp_loader_create(t->data.val_cache, NULL, &vc)) ? 0 : -1;
}

static int kp_setup(void *task, sp_loop *l) {
  kp_task *t = task;
  const sp_train_config *cfg = t->cfg;
  t->loop = l;
  if (sp_backend_parse(cfg->backend, &t->backend) != 0) return -1;
  /* Rank 0 alone writes the run folder and builds its cache files first;
   * the others then map them (a shared file system) or build in RAM. */
  if (l->rank > 0) sp_dist_barrier(10 * cfg->dist.timeout_s, "rank 0 reading the data");
  if (sp_kp_data_open(cfg, l->dir, l->rank == 0, &t->data) != 0) return -1;
  if (l->rank == 0) sp_dist_barrier(10 * cfg->dist.timeout_s, "rank 0 reading the data");
  if (same_data_on_ranks(t) != 0) return sp_loop_refuse(l, -1); /* decided together: none waits */
  if (t->data.train_cache->n < cfg->batch)
    return sp_loop_refuse(
        l, sp_error_set("batch %d is larger than the %d training images", cfg->batch, t->data.train_cache->n));
  if (!(t->g = sp_kp_build_graph(cfg, &t->data, t->neighbours, &t->scale, &t->offset))) return -1;
  if (l->world > 1 && cfg->dist.sync_bn) sp_dist_enable_sync_bn(t->g);
  sp_dist_bcast_params(t->g); /* every rank starts from rank 0's weights */
  if (!(t->train_plan = train_plan(t, l->local_batch))) return -1;
  t->eval = (sp_kp_evaluator){t->g, t->backend, cfg, &t->data, t->scale, t->offset, NULL, NULL};
  l->g = t->g;
  l->bucket_plan = t->train_plan;
  l->box_source = sp_box_source_name(sp_kp_box_source(t->data.train_cache));
  if (make_loaders(t, l) != 0) return -1;
  if (l->rank == 0)
    fprintf(stderr,
            "spry: %s, %d keypoints, %d train / %d val images (boxes: %s), %lld parameters, %s backend, plan %.1f MB "
            "(%.1f MB naive)\n",
            cfg->model, t->data.k, t->data.train_cache->n, t->data.val_cache->n, l->box_source,
            (long long)sp_graph_param_numel(t->g, 1), cfg->backend, sp_plan_arena_bytes(t->train_plan) / 1e6,
            sp_plan_naive_bytes(t->train_plan) / 1e6);
  return 0;
}

static int kp_start_epoch(void *task, int64_t epoch, int *steps, int64_t *items) {
  kp_task *t = task;
  sp_loader_start_epoch(t->train_loader, epoch);
  *steps = sp_loader_batches_per_epoch(t->train_loader);
  *items = (int64_t)*steps * t->cfg->batch;
  return 0;
}

static int kp_next(void *task, sp_loop_batch *out) {
  kp_task *t = task;
  const sp_batch *b = sp_loader_next(t->train_loader);
  if (!b) return 0;
  *out = (sp_loop_batch){b, b->n, 0};
  return 1;
}

static sp_plan *kp_fill(void *task, const sp_loop_batch *lb) {
  kp_task *t = task;
  const sp_batch *b = lb->data;
  sp_plan *p = t->train_plan;
  sp_batch_normalize(b, t->cfg->data.mean, t->cfg->data.std, SP_F32, sp_plan_input(p, "image")->data);
  sp_kp_points_to_model(&t->data, b->points, b->n, t->scale, t->offset, sp_plan_input(p, "points")->data);
  return p;
}

static int kp_can_validate(void *task) { return ((kp_task *)task)->val_loader != NULL; }

/* Loss, and metrics in pixels of the source images. */
static int kp_validate(void *task, int64_t epoch, int over_ranks, sp_loop_val *out) {
  kp_task *t = task;
  float *pred, *gt;
  int n;
  if (sp_kp_evaluate(&t->eval, t->data.val_cache, t->val_loader, epoch, over_ranks, &pred, &gt, &n, &t->val_loss) != 0)
    return -1;
  int rc = sp_kp_metrics_compute(pred, gt, n, t->data.k, t->data.eyes.n_left ? &t->data.eyes : NULL, &t->m, NULL);
  t->baseline_px = sp_kp_mean_shape_error(&t->data, t->data.val_cache);
  free(pred);
  free(gt);
  *out = (sp_loop_val){t->val_loss, t->m.mean_px};
  return rc;
}

static void kp_log_validation(void *task, sp_json_buf *b) {
  kp_task *t = task;
  sp_json_key(b, "val_mean_px"), sp_json_f64(b, t->m.mean_px);
  sp_json_key(b, "val_nme_io"), sp_json_f64(b, t->m.nme_io);
  sp_json_key(b, "val_nme_ip"), sp_json_f64(b, t->m.nme_ip);
  sp_json_key(b, "val_mean_shape_px"), sp_json_f64(b, t->baseline_px);
}

static void kp_print_validation(void *task) {
  kp_task *t = task;
  char io[32];
  fprintf(stderr, "  %.2f px (mean shape %.2f)  NME-IO %s", t->m.mean_px, t->baseline_px,
          sp_metric_text(t->m.nme_io, 4, io, sizeof io));
}

static int kp_report(void *task, const char *dir, int over_ranks) {
  kp_task *t = task;
  return sp_kp_report(dir, &t->eval, t->val_loader, over_ranks);
}

static void kp_teardown(void *task) {
  kp_task *t = task;
  sp_loader_destroy(t->train_loader);
  sp_loader_destroy(t->val_loader);
  sp_plan_free(t->train_plan);
  sp_kp_evaluator_free(&t->eval);
  sp_graph_free(t->g);
  sp_kp_data_free(&t->data);
}

static const sp_task_ops kp_ops = {
    .unit = "img",
    .rate_key = "images_per_s",
    .best = SP_BEST_LOWER,
    .setup = kp_setup,
    .start_epoch = kp_start_epoch,
    .next = kp_next,
    .fill = kp_fill,
    .can_validate = kp_can_validate,
    .validate = kp_validate,
    .log_validation = kp_log_validation,
    .print_validation = kp_print_validation,
    .report = kp_report,
    .teardown = kp_teardown,
};

int sp_train_run(const sp_train_config *cfg, const char *config_text, int run_flags, sp_train_summary *summary) {
  kp_task t;
  memset(&t, 0, sizeof t);
  t.cfg = cfg;
  t.val_loss = t.baseline_px = NAN;
  t.m.mean_px = t.m.nme_io = NAN;
  sp_loop_config lc = SP_LOOP_CONFIG_OF(cfg);
  sp_loop_result r;
  int rc = sp_loop_run(&lc, config_text, (unsigned)run_flags, &kp_ops, &t, &r);
  if (summary) {
    summary->val = t.m;
    summary->val_loss = t.val_loss;
    summary->train_loss = r.train_loss;
    summary->best_mean_px = r.best;
    summary->mean_shape_px = t.baseline_px;
  }
  return rc;
}
