/* The keypoint trainer: epochs of augmented batches through one training
 * plan, a validation pass per epoch, metrics.jsonl, checkpoints (last + best),
 * exact resume, and a clean stop on Ctrl-C.
 *
 * Under mpirun / srun it trains data-parallel (spry/dist.h): `batch` is the
 * global batch, each rank trains batch / world samples of it, gradients are
 * all-reduced during backward, every rank validates its part of the
 * validation set (the figures are of the whole set), and rank 0 alone writes
 * checkpoints, metrics and the report, and draws progress. Steps count
 * global batches, so a run resumes at any world size that divides the
 * batch. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "spry/dist.h"
#include "spry/train.h"
#include "train/metrics_log.h"
#include "train/dist_config.h"
#include "train/trainer_internal.h"

static volatile sig_atomic_t stop_requested;
static void on_sigint(int sig) {
  (void)sig;
  stop_requested = 1;
}

/* Tests stop a run exactly where Ctrl-C would, after a given number of
 * optimizer steps (0 = never). */
static int64_t stop_after_steps;
void sp_train_stop_after(int64_t steps) { stop_after_steps = steps; }
int64_t sp_train_stop_after_steps(void) { return stop_after_steps; }

typedef struct {
  const sp_train_config *cfg;
  const char *config_text;
  sp_kp_data data;
  sp_graph *g;
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_backend backend;
  sp_plan *train_plan;
  sp_kp_evaluator eval;
  sp_loader *train_loader, *val_loader;
  sp_opt_param *params;
  int n_params;
  sp_optimizer *opt;
  float *targets; /* [batch][k][2] model units */
  char dir[1024];
  int rank, world, local_batch; /* data parallel: this rank's share of the global batch */
  sp_grad_reducer *reducer;     /* NULL in a world of one */
  int *slot_of;                 /* optimizer slot of each graph parameter (data parallel) */
  int refused;                  /* every rank refused the run together */
} run;

static sp_plan *train_plan(run *r) {
  sp_input_shape in[2] = {
      {"image", sp_shape4(r->local_batch, r->cfg->data.channels, r->cfg->data.size, r->cfg->data.size)},
      {"points", sp_shape3(r->local_batch, r->data.k, 2)}};
  /* Training reads only the loss; validation has plans of its own (f32). */
  unsigned flags = SP_PLAN_LOSS_ONLY | (!strcmp(r->cfg->precision, "bf16") ? SP_PLAN_BF16 : 0);
  return sp_plan_new(r->g, 2, in, r->backend, 1, flags);
}

static void fill_inputs(run *r, sp_plan *p, const sp_batch *b) {
  sp_batch_normalize(b, r->cfg->data.mean, r->cfg->data.std, SP_F32, sp_plan_input(p, "image")->data);
  sp_kp_points_to_model(&r->data, b->points, b->n, r->scale, r->offset, sp_plan_input(p, "points")->data);
}

/* Validation: loss, and metrics in pixels of the original image (errors in
 * the network's input pixels times the crop's source side / input side). */
typedef struct {
  double loss;
  sp_kp_metrics m;
  double baseline_px; /* error of predicting the training mean shape (in each crop) */
  double seconds;     /* wall time of the pass (the ranks' shared one) */
} val_result;

static int validate(run *r, int64_t epoch, val_result *out) {
  float *pred, *gt;
  int n;
  double t0 = sp_now();
  if (sp_kp_evaluate(&r->eval, r->data.val_cache, r->val_loader, epoch, r->world > 1, &pred, &gt, &n, &out->loss) != 0)
    return -1;
  int rc = sp_kp_metrics_compute(pred, gt, n, r->data.k, r->data.eyes.n_left ? &r->data.eyes : NULL, &out->m, NULL);
  out->baseline_px = sp_kp_mean_shape_error(&r->data, r->data.val_cache);
  out->seconds = sp_now() - t0;
  free(pred);
  free(gt);
  return rc;
}

static void append_metrics(run *r, int64_t epoch, double train_loss, double lr, double img_s, double epoch_s,
                           const val_result *v) {
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  FILE *f = fopen(path, "a");
  if (!f) {
    fprintf(stderr, "spry: cannot append to %s: %s\n", path, strerror(errno));
    return;
  }
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "epoch"), sp_json_int(&b, epoch + 1);
  sp_json_key(&b, "train_loss"), sp_json_f64(&b, train_loss);
  sp_json_key(&b, "lr"), sp_json_f64(&b, lr);
  sp_json_key(&b, "images_per_s"), sp_json_f64(&b, img_s);
  sp_json_key(&b, "epoch_s"), sp_json_f64(&b, epoch_s);
  if (v) {
    sp_json_key(&b, "val_loss"), sp_json_f64(&b, v->loss);
    sp_json_key(&b, "val_mean_px"), sp_json_f64(&b, v->m.mean_px);
    sp_json_key(&b, "val_nme_io"), sp_json_f64(&b, v->m.nme_io);
    sp_json_key(&b, "val_nme_ip"), sp_json_f64(&b, v->m.nme_ip);
    sp_json_key(&b, "val_mean_shape_px"), sp_json_f64(&b, v->baseline_px);
    sp_json_key(&b, "val_s"), sp_json_f64(&b, v->seconds);
  }
  sp_json_obj_end(&b);
  fprintf(f, "%s\n", b.s);
  fclose(f);
  sp_json_buf_free(&b);
}

static int save(run *r, const char *name, int64_t epoch, int64_t step_in_epoch, double loss_sum, double best) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", r->dir, name);
  sp_checkpoint_meta meta = {.epoch = epoch, .iteration = sp_optimizer_steps(r->opt), .seed = r->cfg->seed,
                             .config = r->config_text, .model = r->cfg->model, .step_in_epoch = step_in_epoch,
                             .loss_sum = loss_sum, .best = best,
                             .box_source = sp_box_source_name(sp_kp_box_source(r->data.train_cache))};
  return sp_checkpoint_save(path, r->g, r->opt, &meta);
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

/* An error every rank meets alike (it depends only on what the ranks have
 * already agreed on: the config, the data hash): they fail together, each
 * with the message, and none needs the job aborted. */
static int refuse(run *r, int rc) {
  r->refused = 1;
  return rc;
}

static int same_data_on_ranks(const run *r) {
  char odd[128];
  const sp_kp_data *d = &r->data;
  /* Ranks on machines that do not share the run folder build their own
   * caches here: rank 0 may wait a cache build long, as at the barrier. */
  uint64_t mine = cache_hash(d->val_cache, cache_hash(d->train_cache, 0));
  if (sp_dist_ranks_differ(mine, odd, sizeof odd, 10 * r->cfg->dist.timeout_s) == 0) return 0;
  return sp_error_set("distributed run refused: rank(s) %s read other images or annotations than rank 0 (this rank "
                      "has %d train / %d val faces): the data differs between machines; give every machine the same "
                      "data", odd, d->train_cache->n, d->val_cache->n);
}

static int setup(run *r, const sp_train_config *cfg, const char *config_text, int resume) {
  memset(r, 0, sizeof *r);
  r->cfg = cfg;
  r->config_text = config_text;
  snprintf(r->dir, sizeof r->dir, "%s", cfg->out);
  if (sp_dist_init() != 0) return -1;
  sp_dist_set_timeout(cfg->dist.timeout_s);
  r->rank = sp_dist_rank();
  r->world = sp_dist_world();
  r->local_batch = cfg->batch / r->world;
  /* Refused on every rank alike (no rank is left waiting). */
  char *identity = sp_dist_run_identity(config_text, resume);
  int same = sp_dist_check_run(identity, SPRY_VERSION);
  free(identity);
  if (same != 0) {
    r->refused = 1;
    return -1;
  }
  if (cfg->batch % r->world)
    return refuse(r, sp_error_set("batch %d is the global batch and must be a multiple of the %d ranks", cfg->batch,
                                  r->world));
  if (sp_check_run_folder(r->dir, resume, cfg->dist.timeout_s) != 0) {
    r->refused = 1; /* every rank fails here together */
    return -1;
  }
  if (sp_backend_parse(cfg->backend, &r->backend) != 0) return -1;
  if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
  /* Rank 0 builds the cache file first; the others then map it. */
  if (r->rank > 0) sp_dist_barrier(10 * cfg->dist.timeout_s, "rank 0 reading the data");
  /* Rank 0 alone writes the run folder: the others map its cache files
   * when they see them (a shared file system) and build in RAM otherwise. */
  if (sp_kp_data_open(cfg, r->dir, r->rank == 0, &r->data) != 0) return -1;
  if (r->rank == 0) sp_dist_barrier(10 * cfg->dist.timeout_s, "rank 0 reading the data");
  if (same_data_on_ranks(r) != 0) {
    r->refused = 1; /* decided together: every rank fails here, none waits */
    return -1;
  }
  if (r->data.train_cache->n < cfg->batch)
    return refuse(r, sp_error_set("batch %d is larger than the %d training images", cfg->batch, r->data.train_cache->n));
  r->g = sp_kp_build_graph(cfg, &r->data, r->neighbours, &r->scale, &r->offset);
  if (!r->g) return -1;
  if (r->world > 1 && cfg->dist.sync_bn) sp_dist_enable_sync_bn(r->g);
  sp_dist_bcast_params(r->g); /* every rank starts from rank 0's weights */
  r->train_plan = train_plan(r);
  if (!r->train_plan) return -1;
  r->eval = (sp_kp_evaluator){r->g, r->backend, cfg, &r->data, r->scale, r->offset, NULL, NULL};
  r->params = sp_train_opt_params(r->g, &r->n_params);
  sp_opt_config oc = cfg->optimizer;
  r->opt = sp_optimizer_new(&oc, r->n_params, r->params);
  if (!r->opt) return -1;
  if (r->world > 1) {
    r->reducer = sp_grad_reducer_new(r->g, r->train_plan, (size_t)(cfg->dist.bucket_mb * (1 << 20)));
    if (sp_grad_reducer_set_bf16(r->reducer, !strcmp(cfg->dist.compress, "bf16"))) return -1;
    r->slot_of = sp_dist_param_slots(r->g);
  }

  sp_loader_config lc = sp_loader_config_default(r->local_batch, cfg->data.size);
  lc.workers = cfg->workers;
  lc.seed = cfg->seed;
  lc.shuffle = 1;
  lc.drop_last = 1;
  lc.aug.scale_min = cfg->augment.scale_min;
  lc.aug.scale_max = cfg->augment.scale_max;
  lc.aug.translate = cfg->augment.translate;
  lc.aug.rotate_deg = cfg->augment.rotate;
  lc.aug.flip_prob = cfg->augment.flip;
  lc.aug.ra_n = cfg->augment.ra_n;
  lc.aug.ra_m = cfg->augment.ra_m;
  lc.rank = r->rank;
  lc.world = r->world;
  r->train_loader = sp_loader_create(r->data.train_cache, r->data.scheme, &lc);
  sp_loader_config vc = lc; /* validation: each rank its part of the set, global batch */
  vc.batch = cfg->batch;
  vc.eval_shard = 1;
  vc.shuffle = 0;
  vc.drop_last = 0;
  vc.aug = sp_augment_config_none(cfg->data.size);
  r->val_loader = r->train_loader ? sp_loader_create(r->data.val_cache, NULL, &vc) : NULL;
  if (!r->val_loader) return -1;
  if (r->rank > 0) return 0;
  if (r->world > 1)
    fprintf(stderr,
            "spry: data parallel over %d ranks, %d images each per step, %s batch norm, %d gradient bucket(s) "
            "(%.1f MB, %s)\n",
            r->world, r->local_batch, cfg->dist.sync_bn ? "synchronised" : "per-rank", sp_grad_reducer_buckets(r->reducer),
            sp_grad_reducer_bytes(r->reducer) / 1e6, strcmp(cfg->dist.compress, "bf16") ? "fp32" : "bf16");
  fprintf(stderr, "spry: %s, %d keypoints, %d train / %d val images, %lld parameters, %s backend, plan %.1f MB (%.1f MB naive)\n",
          cfg->model, r->data.k, r->data.train_cache->n, r->data.val_cache->n,
          (long long)sp_graph_param_numel(r->g, 1), cfg->backend, sp_plan_arena_bytes(r->train_plan) / 1e6,
          sp_plan_naive_bytes(r->train_plan) / 1e6);
  return 0;
}

static void teardown(run *r) {
  sp_grad_reducer_free(r->reducer);
  free(r->slot_of);
  sp_loader_destroy(r->train_loader);
  sp_loader_destroy(r->val_loader);
  sp_optimizer_free(r->opt);
  free(r->params);
  sp_plan_free(r->train_plan);
  sp_kp_evaluator_free(&r->eval);
  sp_graph_free(r->g);
  sp_kp_data_free(&r->data);
}

int sp_train_run(const sp_train_config *cfg, const char *config_text, int resume, sp_train_summary *summary) {
  run r;
  int rc = setup(&r, cfg, config_text, resume);
  /* A rank-local setup failure would leave the others waiting: end the job. */
  if (rc != 0 && r.world > 1 && !r.refused) sp_dist_abort("setup failed: %s", sp_last_error());
  int64_t start_epoch = 0, start_step = 0;
  double resumed_loss_sum = 0;
  double best = INFINITY;
  if (rc == 0 && resume) {
    /* Rank 0 reads the checkpoint (other machines need not see the file);
     * steps count global batches, so any world size resumes it. */
    sp_rank0_state st = {0};
    if (r.rank == 0) {
      char path[1100], buf[1 << 16];
      snprintf(path, sizeof path, "%s/last.safetensors", r.dir);
      sp_checkpoint_meta m;
      st.rc = sp_checkpoint_load(path, r.g, r.opt, &m, buf, sizeof buf);
      if (st.rc == 0) {
        st = (sp_rank0_state){0, m.epoch, m.step_in_epoch, m.loss_sum, m.best};
        fprintf(stderr, "spry: resuming %s at epoch %lld step %lld\n", path, (long long)m.epoch + 1,
                (long long)m.step_in_epoch);
      }
    }
    rc = sp_share_rank0(&st, cfg->dist.timeout_s, "resume");
    if (rc == 0 && r.world > 1) {
      sp_dist_bcast_params(r.g);
      sp_dist_bcast_optimizer(r.opt);
    }
    start_epoch = st.epoch;
    start_step = st.step;
    resumed_loss_sum = st.loss_sum;
    best = st.best;
  }
  /* metrics.jsonl holds the epochs this run has done: none when fresh. */
  if (rc == 0 && r.rank == 0 && sp_metrics_log_start(r.dir, start_epoch) != 0)
    fprintf(stderr, "spry: warning: %s\n", sp_last_error());
  stop_requested = 0;
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  int steps = rc == 0 ? sp_loader_batches_per_epoch(r.train_loader) : 0;
  val_result v = {0};
  double last_train_loss = NAN;
  for (int64_t epoch = start_epoch; rc == 0 && epoch < cfg->epochs; epoch++) {
    sp_progress bar;
    sp_progress_begin(&bar);
    sp_loader_start_epoch(r.train_loader, epoch);
    double loss_sum = epoch == start_epoch ? resumed_loss_sum : 0, t0 = sp_now(), lr = 0;
    int step = 0, trained = 0, stopping = 0;
    const sp_batch *b;
    while ((b = sp_loader_next(r.train_loader))) {
      if (epoch == start_epoch && step < start_step) { /* already trained before the resume */
        step++;
        continue;
      }
      fill_inputs(&r, r.train_plan, b);
      sp_graph_zero_grad(r.g);
      sp_plan_set_step(r.train_plan, (uint64_t)sp_optimizer_steps(r.opt));
      sp_plan_forward(r.train_plan);
      double loss = sp_plan_loss(r.train_plan);
      /* The loss and a Ctrl-C vote ride with the gradients: every rank gets
       * the global mean loss and stops after the same step. */
      double totals[2] = {loss, stop_requested ? 1.0 : 0.0};
      if (r.reducer) sp_grad_reducer_begin(r.reducer, totals, 2);
      sp_plan_backward(r.train_plan);
      lr = sp_lr_at_epoch(&cfg->schedule, sp_epoch_progress((double)epoch, step, steps));
      if (r.reducer && cfg->clip_norm <= 0) {
        /* Each bucket's parameters are updated as soon as it is reduced. */
        if (sp_dist_step(r.reducer, r.opt, r.slot_of, r.params, (float)lr, totals) != 0)
          sp_dist_abort("optimizer step %lld: %s", (long long)step, sp_last_error());
        loss = totals[0] / r.world;
      } else {
        if (r.reducer) {
          sp_grad_reducer_finish(r.reducer, totals);
          loss = totals[0] / r.world;
        }
        if (cfg->clip_norm > 0) sp_clip_grad_norm(r.n_params, r.params, cfg->clip_norm);
        sp_optimizer_step(r.opt, (float)lr);
      }
      if (!isfinite(loss)) {
        rc = sp_error_set("the loss became %g at epoch %lld step %d (learning rate %g too high?)", loss,
                          (long long)epoch + 1, step, lr);
        break;
      }
      loss_sum += loss;
      step++;
      trained++;
      double dt = sp_now() - t0;
      if (r.rank == 0)
        sp_progress_draw(&bar, (int)epoch + 1, cfg->epochs, step, steps, loss_sum / step, trained * cfg->batch / dt, 0);
      if (stop_after_steps > 0 && sp_optimizer_steps(r.opt) >= stop_after_steps) stopping = 1;
      if (r.reducer ? totals[1] > 0 : stop_requested) stopping = 1;
      if (stopping) break;
    }
    sp_progress_end(&bar);
    if (rc != 0) break;
    if (stopping) {
      sp_rank0_state st = {0};
      if (r.rank == 0) {
        st.rc = save(&r, "last.safetensors", epoch, step, loss_sum, best);
        fprintf(stderr, "spry: interrupted at epoch %lld step %d; saved %s/last.safetensors (resume with --resume)\n",
                (long long)epoch + 1, step, r.dir);
      }
      rc = sp_share_rank0(&st, cfg->dist.timeout_s, "saving the interrupted run");
      rc = rc == 0 ? 130 : rc;
      break;
    }
    double epoch_s = sp_now() - t0, train_loss = loss_sum / (steps ? steps : 1);
    last_train_loss = train_loss;
    int do_val = (epoch + 1) % cfg->eval_every == 0 || epoch + 1 == cfg->epochs;
    /* Every rank validates its part of the set with rank 0's batch-norm
     * statistics (per-rank batch norm leaves each rank its own): the model
     * rank 0's checkpoint holds. A failure is every rank's. */
    if (do_val && r.world > 1) sp_dist_bcast_buffers(r.g);
    int val_rc = do_val ? validate(&r, epoch, &v) : 0;
    if (r.rank > 0) { /* rank 0 writes; the others wait for its outcome */
      sp_rank0_state st = {0};
      if ((rc = sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint")) != 0) break;
      best = st.best;
      continue;
    }
    if (val_rc != 0) {
      rc = -1;
      sp_rank0_state st = {rc, 0, 0, 0, best};
      sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint");
      break;
    }
    append_metrics(&r, epoch, train_loss, lr, trained * cfg->batch / epoch_s, epoch_s, do_val ? &v : NULL);
    fprintf(stderr, "epoch %lld/%d  train %.4f", (long long)epoch + 1, cfg->epochs, train_loss);
    if (do_val) {
      char io[32];
      fprintf(stderr, "  val %.4f  %.2f px (mean shape %.2f)  NME-IO %s", v.loss, v.m.mean_px, v.baseline_px,
              sp_metric_text(v.m.nme_io, 4, io, sizeof io));
    }
    fprintf(stderr, "  %.0f img/s  %.1f s\n", trained * cfg->batch / epoch_s, epoch_s);
    if (do_val && v.m.mean_px < best) {
      best = v.m.mean_px;
      if ((rc = save(&r, "best.safetensors", epoch + 1, 0, 0, best)) != 0) {
      sp_rank0_state st = {rc, 0, 0, 0, best};
      sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint");
      break;
    }
    }
    /* last.safetensors is the per-epoch checkpoint; it carries best so far. */
    rc = save(&r, "last.safetensors", epoch + 1, 0, 0, best);
    sp_rank0_state st = {rc, 0, 0, 0, best};
    if (sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint") != 0) break;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (rc == 0) { /* the ranks share its evaluation; rank 0 writes it */
    int report_rc = sp_kp_report(r.dir, &r.eval, r.val_loader, r.world > 1);
    if (r.rank == 0 && report_rc == 0) fprintf(stderr, "spry: report in %s/index.html\n", r.dir);
    else if (r.rank == 0) fprintf(stderr, "spry: warning: report incomplete: %s\n", sp_last_error());
  }
  if (summary) {
    summary->val = v.m;
    summary->val_loss = v.loss;
    summary->train_loss = last_train_loss;
    summary->best_mean_px = best;
    summary->mean_shape_px = v.baseline_px;
  }
  teardown(&r);
  return rc;
}
