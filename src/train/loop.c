/* The one training loop (see loop.h): epochs of batches through the task's
 * plans, a validation pass per epoch, metrics.jsonl, checkpoints (last every
 * epoch, best by the task's direction), exact resume, a clean stop on Ctrl-C.
 *
 * Under mpirun / srun it trains data-parallel (spry/dist.h): `batch` is the
 * global batch, each rank trains batch / world items of it, gradients are
 * all-reduced during backward, every rank validates its part of the
 * validation set (the figures are of the whole set), and rank 0 alone writes
 * checkpoints, metrics and the report and draws progress; after its solo
 * work every rank learns how it went (sp_share_rank0). Steps count global
 * batches, so a run resumes at any world size that divides the batch. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/train.h"
#include "train/dist_config.h"
#include "train/loop.h"
#include "train/metrics_log.h"
#include "train/stop_signals.h"
#include "train/trainer_internal.h"

static int64_t stop_after_steps;
void sp_train_stop_after(int64_t steps) { stop_after_steps = steps; }

int sp_loop_refuse(sp_loop *l, int rc) {
  l->refused = 1;
  return rc;
}

/* Where a resumed run stands. */
typedef struct {
  int64_t epoch, step;
  double loss_sum, best;
} resume_point;

/* ------------------------------------------------------------ run folder */

/* A fresh run must not silently replace another run's checkpoints. */
static int check_fresh_folder(const sp_loop *l) {
  if (l->run_flags & (SP_RUN_RESUME | SP_RUN_OVERWRITE) || l->rank != 0) return 0;
  static const char *const files[] = {"last.safetensors", "best.safetensors"};
  for (int i = 0; i < 2; i++) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", l->dir, files[i]);
    if (access(path, F_OK) == 0)
      return sp_error_set(
          "%s holds another run's %s: continue it with --resume %s, start over with --overwrite, "
          "or train into another folder (--set out=DIR)",
          l->dir, files[i], l->dir);
  }
  return 0;
}

static int setup(sp_loop *l, const sp_task_ops *ops, void *task) {
  const sp_loop_config *cfg = l->cfg;
  if (sp_dist_init() != 0) return -1;
  sp_dist_set_timeout(cfg->dist->timeout_s);
  l->rank = sp_dist_rank();
  l->world = sp_dist_world();
  l->local_batch = cfg->batch / l->world;
  /* Refused on every rank alike (no rank is left waiting). */
  char *identity = sp_dist_run_identity(l->config_text, (l->run_flags & SP_RUN_RESUME) != 0);
  int same = sp_dist_check_run(identity, SPRY_VERSION);
  free(identity);
  if (same != 0) return sp_loop_refuse(l, -1);
  if (cfg->batch % l->world)
    return sp_loop_refuse(
        l, sp_error_set("batch %d is the global batch and must be a multiple of the %d ranks", cfg->batch, l->world));
  /* Rank 0 looks, every rank learns the outcome: a refusal is everyone's. */
  sp_rank0_state fresh = {check_fresh_folder(l), 0, 0, 0, 0};
  if (sp_share_rank0(&fresh, cfg->dist->timeout_s, "the run folder check") != 0) return sp_loop_refuse(l, -1);
  if (sp_check_run_folder(l->dir, (l->run_flags & SP_RUN_RESUME) != 0, cfg->dist->timeout_s) != 0)
    return sp_loop_refuse(l, -1);
  if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
  if (ops->setup(task, l) != 0) return -1;
  l->params = sp_train_opt_params(l->g, &l->n_params);
  sp_opt_config oc = *cfg->optimizer;
  if (!(l->opt = sp_optimizer_new(&oc, l->n_params, l->params))) return -1;
  if (l->world > 1) {
    l->reducer = sp_grad_reducer_new(l->g, l->bucket_plan, (size_t)(cfg->dist->bucket_mb * (1 << 20)));
    l->watched = l->bucket_plan; /* hooked by sp_grad_reducer_new */
    if (sp_grad_reducer_set_bf16(l->reducer, !strcmp(cfg->dist->compress, "bf16"))) return -1;
    l->slot_of = sp_dist_param_slots(l->g);
    if (l->rank == 0)
      fprintf(stderr,
              "spry: data parallel over %d ranks, %d %s each per step, %s batch norm, %d gradient bucket(s) "
              "(%.1f MB, %s)\n",
              l->world, l->local_batch, ops->unit, cfg->dist->sync_bn ? "synchronised" : "per-rank",
              sp_grad_reducer_buckets(l->reducer), sp_grad_reducer_bytes(l->reducer) / 1e6,
              strcmp(cfg->dist->compress, "bf16") ? "fp32" : "bf16");
  }
  return 0;
}

/* ------------------------------------------------------------ checkpoints */

static int save(sp_loop *l, const char *name, int64_t epoch, int64_t step_in_epoch, double loss_sum, double best) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", l->dir, name);
  sp_checkpoint_meta meta = {.epoch = epoch,
                             .iteration = sp_optimizer_steps(l->opt),
                             .seed = l->cfg->seed,
                             .config = l->config_text,
                             .model = l->cfg->model,
                             .step_in_epoch = step_in_epoch,
                             .loss_sum = loss_sum,
                             .best = best,
                             .box_source = l->box_source};
  return sp_checkpoint_save(path, l->g, l->opt, &meta);
}

/* The checkpoint's run against this one: the same config (but for the keys
 * a machine or a moved folder may change), or the user said it changed. */
static int same_run(const sp_loop *l, const char *stored, const char *path) {
  static const char *const free_keys[] = {"threads", "workers", "out", NULL};
  char *a = sp_config_canonical(stored, free_keys), *b = sp_config_canonical(l->config_text, free_keys);
  char key[256], was[160], now[160];
  int differs = sp_config_diff(b, a, key, sizeof key, now, was, sizeof now), rc = 0;
  free(a);
  free(b);
  if (!differs) return 0;
  if (l->run_flags & SP_RUN_RESUME_CHANGED) {
    fprintf(stderr,
            "spry: resuming with a changed config (first change at %s: was '%s', now '%s'); the interrupted "
            "epoch starts again\n",
            key[0] ? key : "a line", was, now);
    return 1;
  }
  rc = sp_error_set(
      "--resume %s: the config differs from the one %s was trained with, at %s (was '%s', now "
      "'%s'); resume with the same config, or pass --resume-changed to continue with this one from "
      "the start of the interrupted epoch",
      l->dir, path, key[0] ? key : "a line", was, now);
  return rc;
}

/* Rank 0 reads the checkpoint (other machines need not see the file); the
 * others learn where it stands and get its weights and optimizer state. */
static int resume(sp_loop *l, resume_point *at) {
  sp_rank0_state st = {0};
  if (l->rank == 0) {
    char path[1100];
    static char buf[1 << 20];
    snprintf(path, sizeof path, "%s/last.safetensors", l->dir);
    sp_checkpoint_meta m;
    st.rc = sp_checkpoint_load(path, l->g, l->opt, &m, buf, sizeof buf);
    int changed = st.rc == 0 && m.config ? same_run(l, m.config, path) : 0;
    if (changed < 0) st.rc = -1;
    if (st.rc == 0) {
      st = (sp_rank0_state){0, m.epoch, changed ? 0 : m.step_in_epoch, changed ? 0 : m.loss_sum, m.best};
      if (m.epoch >= l->cfg->epochs)
        fprintf(stderr, "spry: %s finished all %d epochs; nothing to train (its figures follow)\n", path,
                l->cfg->epochs);
      else
        fprintf(stderr, "spry: resuming %s at epoch %lld step %lld\n", path, (long long)st.epoch + 1,
                (long long)st.step);
    }
  }
  int rc = sp_share_rank0(&st, l->cfg->dist->timeout_s, "resume");
  if (rc == 0 && l->world > 1) {
    sp_dist_bcast_params(l->g);
    sp_dist_bcast_optimizer(l->opt);
  }
  *at = (resume_point){st.epoch, st.step, st.loss_sum, st.best};
  return rc;
}

/* ------------------------------------------------------------ one step */

/* One optimizer step: *loss is the step's loss (the global mean under
 * mpirun), *stop whether some rank asked to stop. */
static int train_step(sp_loop *l, sp_plan *p, double lr, double *loss_out, int *stop) {
  sp_plan_zero_grad(p); /* as sp_graph_zero_grad, for this plan's backward below */
  sp_plan_set_step(p, (uint64_t)sp_optimizer_steps(l->opt));
  sp_plan_forward(p);
  double loss = sp_plan_loss(p);
  /* The loss and a Ctrl-C vote ride with the gradients: every rank gets the
   * global mean loss and stops after the same step. */
  double totals[2] = {loss, sp_stop_signals_requested() ? 1.0 : 0.0};
  if (l->reducer) {
    /* A plan not hooked yet would still be exact (finish launches every
     * bucket), only without overlap. */
    if (p != l->watched) sp_grad_reducer_watch(l->reducer, p), l->watched = p;
    sp_grad_reducer_begin(l->reducer, totals, 2);
  }
  sp_plan_backward(p);
  if (l->reducer && l->cfg->clip_norm <= 0) {
    /* Each bucket's parameters are updated as soon as it is reduced. */
    if (sp_dist_step(l->reducer, l->opt, l->slot_of, l->params, (float)lr, totals) != 0)
      sp_dist_abort("optimizer step: %s", sp_last_error());
  } else {
    if (l->reducer) sp_grad_reducer_finish(l->reducer, totals);
    if (l->cfg->clip_norm > 0) sp_clip_grad_norm(l->n_params, l->params, l->cfg->clip_norm);
    sp_optimizer_step(l->opt, (float)lr);
  }
  *stop = l->reducer ? totals[1] > 0 : sp_stop_signals_requested();
  *loss_out = l->reducer ? totals[0] / l->world : loss;
  return 0;
}

/* ------------------------------------------------------------ one epoch */

typedef struct {
  int steps, step, trained, failed, stopping;
  int64_t items, items_done;
  double loss_sum, lr, seconds;
} epoch_state;

static int run_epoch(sp_loop *l, const sp_task_ops *ops, void *task, int64_t epoch, const resume_point *from,
                     epoch_state *e) {
  const sp_loop_config *cfg = l->cfg;
  memset(e, 0, sizeof *e);
  if (ops->start_epoch(task, epoch, &e->steps, &e->items) != 0) return -1;
  const int resumed = epoch == from->epoch;
  e->loss_sum = resumed ? from->loss_sum : 0;
  double scale = ops->lr_scale ? ops->lr_scale(task, epoch) : 1.0, t0 = sp_now();
  int64_t trained_items = 0;
  sp_progress bar;
  sp_progress_begin(&bar);
  sp_loop_batch b;
  int rc = 0;
  while (ops->next(task, &b) == 1) {
    if (resumed && e->step < from->step) { /* trained before the resume */
      e->items_done += (int64_t)b.n * l->world;
      e->step++;
      continue;
    }
    /* The schedule runs on the items of the whole job's epoch, so Multigrid's
     * varying batches do not make it jump. */
    e->lr = sp_lr_at_epoch(cfg->schedule, sp_epoch_progress(epoch, e->items_done, e->items)) * scale;
    sp_plan *p = ops->fill(task, &b);
    /* The other ranks are already in this step's exchange: end the job. */
    if (!p && l->world > 1) sp_dist_abort("making the step's plan: %s", sp_last_error());
    if (!p) return -1;
    double loss = NAN;
    int stop = 0;
    train_step(l, p, e->lr, &loss, &stop);
    if (!isfinite(loss)) {
      rc = sp_error_set("the loss became %g at epoch %lld step %d (learning rate %g too high?)", loss,
                        (long long)epoch + 1, e->step, e->lr);
      break;
    }
    e->failed += b.failed;
    e->loss_sum += loss;
    e->items_done += (int64_t)b.n * l->world;
    trained_items += (int64_t)b.n * l->world;
    e->step++, e->trained++;
    if (l->rank == 0)
      sp_progress_draw(&bar, (int)epoch + 1, cfg->epochs, e->step, e->steps, e->loss_sum / e->step,
                       trained_items / (sp_now() - t0), 0);
    if (stop || (stop_after_steps > 0 && sp_optimizer_steps(l->opt) >= stop_after_steps)) {
      e->stopping = 1;
      break;
    }
  }
  sp_progress_end(&bar);
  e->seconds = sp_now() - t0;
  e->items = trained_items; /* from here on: what this process trained */
  return rc;
}

/* ------------------------------------------------------------ logging */

static void append_metrics(sp_loop *l, const sp_task_ops *ops, void *task, int64_t epoch, const epoch_state *e,
                           double train_loss, int unreadable, int validated, const sp_loop_val *v, double val_s) {
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", l->dir);
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
  sp_json_key(&b, "lr"), sp_json_f64(&b, e->lr);
  sp_json_key(&b, ops->rate_key), sp_json_f64(&b, e->items / e->seconds);
  sp_json_key(&b, "epoch_s"), sp_json_f64(&b, e->seconds);
  if (ops->log_epoch) ops->log_epoch(task, &b, epoch, e->steps, unreadable);
  if (validated) {
    sp_json_key(&b, "val_loss"), sp_json_f64(&b, v->loss);
    ops->log_validation(task, &b);
    sp_json_key(&b, "val_s"), sp_json_f64(&b, val_s);
  }
  sp_json_obj_end(&b);
  fprintf(f, "%s\n", b.s);
  fclose(f);
  sp_json_buf_free(&b);
}

static void print_epoch(const sp_loop *l, const sp_task_ops *ops, void *task, int64_t epoch, const epoch_state *e,
                        double train_loss, int validated, const sp_loop_val *v) {
  fprintf(stderr, "epoch %lld/%d  train %.4f", (long long)epoch + 1, l->cfg->epochs, train_loss);
  if (validated) {
    fprintf(stderr, "  val %.4f", v->loss);
    ops->print_validation(task);
  }
  fprintf(stderr, "  %d it  %.1f %s/s  %.1f s\n", e->trained, e->items / e->seconds, ops->unit, e->seconds);
}

/* Unreadable items of the epoch: each rank names its own, the log counts the
 * whole job's (a clip one machine cannot read shows there). */
static int unreadable_all(const sp_loop *l, const epoch_state *e, int64_t epoch, const char *unit) {
  if (e->failed > 0) {
    char who[32] = "";
    if (l->world > 1) snprintf(who, sizeof who, "rank %d: ", l->rank);
    fprintf(stderr, "spry: %swarning: epoch %lld: %d of %lld training %s could not be read and went in as zeros\n", who,
            (long long)epoch + 1, e->failed, (long long)e->items / l->world, unit);
  }
  double all = e->failed;
  if (l->world > 1) sp_dist_sum_f64(&all, 1, "unreadable items");
  return (int)all;
}

static int better(sp_best_direction d, double score, double best) {
  return d == SP_BEST_LOWER ? score < best : score > best;
}

/* ------------------------------------------------------------ the run */

/* A resumed run's time is the whole run's: the epochs metrics.jsonl logged
 * (rank 0's log; the others keep their own count). */
static void whole_run_time(const sp_loop *l, sp_loop_result *res) {
  if (l->rank != 0 || !(l->run_flags & SP_RUN_RESUME)) return;
  static const char *const keys[1] = {"epoch_s"};
  double *col;
  int n;
  if (sp_metrics_log_read(l->dir, 1, keys, &col, &n) != 0) return;
  double total = 0;
  for (int i = 0; i < n; i++) total += isfinite(col[i]) ? col[i] : 0;
  free(col);
  if (total > res->train_s) res->train_s = total;
}

static void teardown(sp_loop *l, const sp_task_ops *ops, void *task) {
  /* The reducer unhooks the bucket plan, which is still there; plans it
   * watched keep a stale hook, but they are freed next and never run again. */
  sp_grad_reducer_free(l->reducer);
  ops->teardown(task);
  free(l->slot_of);
  sp_optimizer_free(l->opt);
  free(l->params);
}

/* After an epoch: validate, then rank 0 logs and saves while the others wait
 * for its outcome. Returns 0 or the run's error. */
static int end_epoch(sp_loop *l, const sp_task_ops *ops, void *task, int64_t epoch, const epoch_state *e, double *best,
                     sp_loop_result *res) {
  const sp_loop_config *cfg = l->cfg;
  int unreadable = unreadable_all(l, e, epoch, ops->unit);
  double train_loss = e->loss_sum / (e->steps ? e->steps : 1);
  res->train_loss = train_loss;
  int validate = ops->can_validate(task) && ((epoch + 1) % cfg->eval_every == 0 || epoch + 1 == cfg->epochs);
  sp_loop_val v = {NAN, NAN};
  double t0 = sp_now();
  /* Every rank validates its part with rank 0's batch-norm statistics
   * (per-rank batch norm leaves each rank its own): the model rank 0's
   * checkpoint holds. A failed validation is every rank's. */
  if (validate && l->world > 1) sp_dist_bcast_buffers(l->g);
  int rc = validate ? ops->validate(task, epoch, l->world > 1, &v) : 0;
  res->validated |= validate && rc == 0;
  sp_rank0_state st = {rc, 0, 0, 0, *best};
  if (l->rank == 0 && rc == 0) {
    append_metrics(l, ops, task, epoch, e, train_loss, unreadable, validate, &v, sp_now() - t0);
    print_epoch(l, ops, task, epoch, e, train_loss, validate, &v);
    if (validate && better(ops->best, v.score, *best)) {
      *best = v.score;
      st.rc = save(l, "best.safetensors", epoch + 1, 0, 0, *best);
    }
    /* last.safetensors is the per-epoch checkpoint; it carries best so far. */
    if (st.rc == 0) st.rc = save(l, "last.safetensors", epoch + 1, 0, 0, *best);
    st.best = *best;
  }
  int shared = sp_share_rank0(&st, cfg->dist->timeout_s, "rank 0's checkpoint");
  *best = st.best;
  return rc != 0 ? rc : shared;
}

static int save_interrupted(sp_loop *l, int64_t epoch, const epoch_state *e, double best) {
  sp_rank0_state st = {0};
  if (l->rank == 0) {
    st.rc = save(l, "last.safetensors", epoch, e->step, e->loss_sum, best);
    fprintf(stderr, "spry: interrupted at epoch %lld step %d; saved %s/last.safetensors (resume with --resume)\n",
            (long long)epoch + 1, e->step, l->dir);
  }
  int rc = sp_share_rank0(&st, l->cfg->dist->timeout_s, "saving the interrupted run");
  return rc == 0 ? 130 : rc;
}

int sp_loop_run(const sp_loop_config *cfg, const char *config_text, unsigned run_flags, const sp_task_ops *ops,
                void *task, sp_loop_result *out) {
  sp_loop l;
  memset(&l, 0, sizeof l);
  l.cfg = cfg;
  l.config_text = config_text;
  l.run_flags = run_flags;
  snprintf(l.dir, sizeof l.dir, "%s", cfg->out);
  sp_loop_result res = {.train_loss = NAN, .best = ops->best == SP_BEST_LOWER ? INFINITY : -1};
  int rc = setup(&l, ops, task);
  /* A rank-local setup failure would leave the others waiting: end the job. */
  if (rc != 0 && l.world > 1 && !l.refused) sp_dist_abort("setup failed: %s", sp_last_error());
  resume_point from = {0, 0, 0, res.best};
  if (rc == 0 && (run_flags & SP_RUN_RESUME)) rc = resume(&l, &from);
  double best = from.best;
  /* metrics.jsonl holds the epochs this run has done: none when fresh. */
  if (rc == 0 && l.rank == 0 && sp_metrics_log_start(l.dir, from.epoch) != 0)
    fprintf(stderr, "spry: warning: %s\n", sp_last_error());
  /* Ctrl-C / SIGTERM from here on: stop after the step (stop_signals.c). */
  const int watching = rc == 0 && sp_stop_signals_begin(cfg->threads) == 0;
  if (rc == 0 && !watching) {
    if (l.world > 1) sp_dist_abort("%s", sp_last_error()); /* the other ranks would wait in the first step */
    rc = -1;
  }
  for (int64_t epoch = from.epoch; rc == 0 && epoch < cfg->epochs; epoch++) {
    epoch_state e;
    rc = run_epoch(&l, ops, task, epoch, &from, &e);
    res.train_s += e.seconds;
    res.iterations += e.trained;
    if (rc != 0) break;
    /* Stopped on an epoch's last step: the epoch is complete, and ends as
     * every epoch does (validation, metrics, checkpoints) before the stop. */
    if (e.stopping && e.step < e.steps) {
      rc = save_interrupted(&l, epoch, &e, best);
      break;
    }
    rc = end_epoch(&l, ops, task, epoch, &e, &best, &res);
    if (rc == 0 && e.stopping) {
      if (l.rank == 0)
        fprintf(stderr, "spry: interrupted after epoch %lld; resume with --resume\n", (long long)epoch + 1);
      rc = epoch + 1 < cfg->epochs ? 130 : 0;
      break;
    }
  }
  /* A run with nothing left to train (resumed after its last epoch) still
   * gives its figures: one validation pass of the final model. */
  if (rc == 0 && !res.validated && ops->can_validate(task)) {
    sp_loop_val v;
    if (l.world > 1) sp_dist_bcast_buffers(l.g);
    rc = ops->validate(task, cfg->epochs, l.world > 1, &v);
    res.validated = rc == 0;
  }
  if (watching) sp_stop_signals_end();
  if (rc == 0) { /* the ranks may share its evaluation; rank 0 writes it */
    int report_rc = ops->report(task, l.dir, l.world > 1);
    if (l.rank == 0 && report_rc == 0)
      fprintf(stderr, "spry: report in %s/index.html\n", l.dir);
    else if (l.rank == 0 && report_rc < 0)
      fprintf(stderr, "spry: warning: report incomplete: %s\n", sp_last_error());
  }
  res.best = best;
  if (l.opt) res.iterations = sp_optimizer_steps(l.opt);
  if (rc == 0 || rc == 130) whole_run_time(&l, &res); /* a failed run's error stays the one shown */
  if (out) *out = res;
  teardown(&l, ops, task);
  if (rc != 0 && rc != 130) sp_run_folder_abandon(l.dir); /* a failed fresh run leaves no empty folder */
  return rc;
}
