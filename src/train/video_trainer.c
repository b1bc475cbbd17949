/* The video trainer: epochs of clips through plans per batch shape (one
 * shape normally, a Multigrid cycle of them otherwise), a validation pass,
 * metrics.jsonl, checkpoints (last + best top-1), exact resume, a clean stop
 * on Ctrl-C. Same structure as the keypoint trainer (trainer.c), data
 * parallel under mpirun / srun the same way: `batch` is the global batch,
 * rank r trains slice r of every global batch, gradients are all-reduced
 * during backward, every rank validates its part of the set, and rank 0
 * alone writes. */
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
#include "train/dist_config.h"
#include "train/trainer_internal.h"
#include "train/metrics_log.h"
#include "train/video_internal.h"

static volatile sig_atomic_t stop_requested;
static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

typedef struct {
  const sp_video_config *cfg;
  const char *config_text;
  sp_video_list train, val;
  sp_vnet net;
  sp_video_loader *train_loader, *val_loader;
  sp_opt_param *params;
  int n_params;
  sp_optimizer *opt;
  sp_multigrid mg;
  sp_video_shape *shapes;
  int cap_shapes;
  char dir[1024];
  int rank, world, local_batch; /* data parallel: this rank's share of each batch */
  int refused;                  /* every rank refused the run together */
  sp_grad_reducer *reducer;     /* NULL in a world of one */
  int *slot_of;
  sp_plan *watched;             /* the plan last hooked to the reducer */
} run;

/* data.num_classes, else one past the largest label of the lists; every
 * label must then lie in [0, classes) (a list's own labels always do). */
static int classes_of(const run *r, int max_train, int max_val, int *classes) {
  const sp_video_config *cfg = r->cfg;
  *classes = (max_train > max_val ? max_train : max_val) + 1;
  if (!cfg->data.num_classes) return 0;
  *classes = cfg->data.num_classes;
  if (sp_video_list_check_labels(&r->train, cfg->data.train_list, *classes) != 0) return -1;
  return r->val.n ? sp_video_list_check_labels(&r->val, cfg->data.val_list, *classes) : 0;
}

/* Every rank must have left out the same clips (a file that one node sees
 * and another does not would shift every batch): the kept entries (their
 * list lines and labels) hashed, rank 0's hash against each rank's. */
static uint64_t kept_hash(const sp_video_list *l, uint64_t h) {
  for (int i = 0; i < l->n; i++) {
    int32_t e[2] = {l->line ? l->line[i] : i, l->label[i]};
    h = sp_dist_hash(e, sizeof e, h);
  }
  return sp_dist_hash(&l->n, sizeof l->n, h);
}

/* An error every rank meets alike (config and kept clips agreed): they fail
 * together, each with the message, and none needs the job aborted. */
static int refuse(run *r, int rc) {
  r->refused = 1;
  return rc;
}

static int same_lists_on_ranks(const run *r) {
  char odd[128];
  uint64_t mine = kept_hash(&r->val, kept_hash(&r->train, 0));
  if (sp_dist_ranks_differ(mine, odd, sizeof odd, 10 * r->cfg->dist.timeout_s) == 0) return 0;
  return sp_error_set("distributed run refused: rank(s) %s kept other clips than rank 0 (this rank kept %d train / "
                      "%d val clips): a clip is missing on some machines only; give every machine the same data",
                      odd, r->train.n, r->val.n);
}

static int setup(run *r, const sp_video_config *cfg, const char *config_text, int resume) {
  memset(r, 0, sizeof *r);
  r->cfg = cfg;
  r->config_text = config_text;
  snprintf(r->dir, sizeof r->dir, "%s", cfg->out);
  if (sp_dist_init() != 0) return -1;
  sp_dist_set_timeout(cfg->dist.timeout_s);
  r->rank = sp_dist_rank();
  r->world = sp_dist_world();
  r->local_batch = cfg->batch / r->world;
  char *identity = sp_dist_run_identity(config_text, resume);
  int same = sp_dist_check_run(identity, SPRY_VERSION);
  free(identity);
  if (same != 0) { /* refused on every rank alike */
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
  if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
  if (!cfg->data.train_list[0]) return sp_error_set("data.train_list is not set");
  int max_train = -1, max_val = -1, classes;
  if (sp_video_list_open(cfg, cfg->data.train_list, &r->train, &max_train) != 0) return -1;
  if (cfg->data.val_list[0] && sp_video_list_open(cfg, cfg->data.val_list, &r->val, &max_val) != 0) return -1;
  if (same_lists_on_ranks(r) != 0) {
    r->refused = 1; /* decided together: every rank fails here, none waits */
    return -1;
  }
  if (classes_of(r, max_train, max_val, &classes) != 0) return -1;
  if (classes < 2)
    return refuse(r, sp_error_set("%s: needs at least 2 classes, labels give %d", cfg->data.train_list, classes));
  if (r->train.n < cfg->batch)
    return refuse(r, sp_error_set("batch %d is larger than the %d training clips", cfg->batch, r->train.n));
  if (sp_vnet_init(&r->net, cfg, classes) != 0) return -1;
  /* Rank 0 reads the pretrained weights; the broadcast gives them to all. */
  if (r->rank == 0 && cfg->pretrained[0] && sp_vnet_load_pretrained(&r->net, cfg->pretrained) != 0) return -1;
  sp_dist_bcast_params(sp_vnet_graph(&r->net)); /* every rank starts from rank 0's weights */
  r->params = sp_train_opt_params(sp_vnet_graph(&r->net), &r->n_params);
  r->opt = sp_optimizer_new(&cfg->optimizer, r->n_params, r->params);
  if (!r->opt) return -1;
  int frames = sp_video_cfg_frames(cfg);
  sp_video_loader_config lc = sp_video_loader_config_default(r->local_batch, frames, cfg->data.size);
  lc.sampler = cfg->data.sampler;
  lc.stride = cfg->data.stride;
  lc.short_side = cfg->data.short_side;
  lc.flip_prob = cfg->data.flip;
  lc.workers = cfg->workers;
  lc.seed = cfg->seed;
  lc.rank = r->rank;
  lc.world = r->world;
  if (!(r->train_loader = sp_video_loader_create(&r->train, &lc))) return -1;
  if (r->val.n) { /* validation: each rank scores its part of the whole set */
    sp_video_loader_config vc = lc;
    vc.eval_shard = 1;
    vc.train = 0;
    vc.shuffle = 0;
    vc.drop_last = 0;
    vc.test_clips = cfg->data.test_clips;
    if (!(r->val_loader = sp_video_loader_create(&r->val, &vc))) return -1;
  }
  /* The schedule of the global batch over the global epoch (each rank's
   * share times the ranks), so W ranks take the shapes, learning rates and
   * iterations of one process; each shape's batch is then split over the
   * ranks (epoch_shapes). */
  r->mg = (sp_multigrid){cfg->multigrid.long_cycle, cfg->multigrid.short_cycle, cfg->batch, frames, cfg->data.size,
                         cfg->epochs, sp_video_loader_entries(r->train_loader) * r->world, cfg->multigrid.cycles};
  r->cap_shapes = r->mg.entries + 1;
  r->shapes = sp_xmalloc(sizeof(sp_video_shape) * (size_t)r->cap_shapes);
  sp_plan *p = sp_vnet_plan(&r->net, frames, r->local_batch, cfg->data.size, 1);
  if (!p) return -1;
  if (r->world > 1) {
    /* No plan given: Multigrid plans come and go, so each one is hooked as
     * it is used (sp_grad_reducer_watch); buckets go by descending parameter
     * id, head first, as backward finalises them. */
    r->reducer = sp_grad_reducer_new(sp_vnet_graph(&r->net), NULL, (size_t)(cfg->dist.bucket_mb * (1 << 20)));
    if (sp_grad_reducer_set_bf16(r->reducer, !strcmp(cfg->dist.compress, "bf16"))) return -1;
    r->slot_of = sp_dist_param_slots(sp_vnet_graph(&r->net));
  }
  if (r->rank > 0) return 0;
  if (r->world > 1)
    fprintf(stderr,
            "spry: data parallel over %d ranks, %d clips each per step, %s batch norm, %d gradient bucket(s) "
            "(%.1f MB, %s)\n",
            r->world, r->local_batch, cfg->dist.sync_bn ? "synchronised" : "per-rank",
            sp_grad_reducer_buckets(r->reducer), sp_grad_reducer_bytes(r->reducer) / 1e6,
            strcmp(cfg->dist.compress, "bf16") ? "fp32" : "bf16");
  fprintf(stderr, "spry: %s, %d classes, %d train / %d val clips, %d frames at %d px, %lld parameters, %s backend, "
          "plan %.1f MB%s%s\n",
          cfg->model, classes, r->train.n, r->val.n, frames, cfg->data.size,
          (long long)sp_graph_param_numel(sp_vnet_graph(&r->net), 1), cfg->backend, sp_plan_arena_bytes(p) / 1e6,
          cfg->multigrid.long_cycle ? ", multigrid long" : "", cfg->multigrid.short_cycle ? ", multigrid short" : "");
  return 0;
}

static void teardown(run *r) {
  sp_vnet_free(&r->net); /* its plans hold the reducer's hook: they go first */
  sp_grad_reducer_free(r->reducer);
  free(r->slot_of);
  sp_video_loader_destroy(r->train_loader);
  sp_video_loader_destroy(r->val_loader);
  sp_optimizer_free(r->opt);
  free(r->params);
  free(r->shapes);
  sp_video_list_free(&r->train);
  sp_video_list_free(&r->val);
}

static int save(run *r, const char *name, int64_t epoch, int64_t step, double loss_sum, double best) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", r->dir, name);
  sp_checkpoint_meta m = {.epoch = epoch, .iteration = sp_optimizer_steps(r->opt), .seed = r->cfg->seed,
                          .config = r->config_text, .model = r->cfg->model, .step_in_epoch = step,
                          .loss_sum = loss_sum, .best = best};
  return sp_checkpoint_save(path, sp_vnet_graph(&r->net), r->opt, &m);
}

static void append_metrics(run *r, int64_t epoch, double loss, double lr, double clips_s, double epoch_s, int iters,
                           int unreadable, const sp_video_eval_result *v) {
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", r->dir);
  FILE *f = fopen(path, "a");
  if (!f) return (void)fprintf(stderr, "spry: cannot append to %s: %s\n", path, strerror(errno));
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "epoch"), sp_json_int(&b, epoch + 1);
  sp_json_key(&b, "train_loss"), sp_json_f64(&b, loss);
  sp_json_key(&b, "lr"), sp_json_f64(&b, lr);
  sp_json_key(&b, "clips_per_s"), sp_json_f64(&b, clips_s);
  sp_json_key(&b, "epoch_s"), sp_json_f64(&b, epoch_s);
  sp_json_key(&b, "iterations"), sp_json_int(&b, iters);
  sp_json_key(&b, "stage"), sp_json_int(&b, sp_multigrid_stage(&r->mg, epoch));
  sp_json_key(&b, "unreadable_train_clips"), sp_json_int(&b, unreadable); /* all ranks; they went in as zeros */
  if (v) {
    sp_json_key(&b, "val_loss"), sp_json_f64(&b, v->loss);
    sp_json_key(&b, "val_top1"), sp_json_f64(&b, v->top1);
    sp_json_key(&b, "val_top5"), sp_json_f64(&b, v->top5);
    sp_json_key(&b, "val_s"), sp_json_f64(&b, v->seconds);
  }
  sp_json_obj_end(&b);
  fprintf(f, "%s\n", b.s);
  fclose(f);
  sp_json_buf_free(&b);
}

/* One optimizer step on batch b: *loss is its loss (the global mean under
 * mpirun). Returns 0, or -1 on a plan error (set). *stop: some rank asked
 * to stop. */
static int train_step(run *r, const sp_video_batch *b, double lr, double *loss_out, int *stop) {
  sp_plan *p = sp_vnet_plan(&r->net, b->t, b->n, b->h, 1);
  /* The other ranks are already in this step's exchange: end the job. */
  if (!p && r->world > 1)
    sp_dist_abort("making the plan for %d clips x %d frames x %d px: %s", b->n, b->t, b->h, sp_last_error());
  if (!p) return -1;
  sp_vnet_fill(&r->net, p, b);
  sp_graph_zero_grad(sp_vnet_graph(&r->net));
  sp_plan_set_step(p, (uint64_t)sp_optimizer_steps(r->opt));
  sp_plan_forward(p);
  double loss = sp_plan_loss(p);
  /* The loss and a Ctrl-C vote ride with the gradients. */
  double totals[2] = {loss, stop_requested ? 1.0 : 0.0};
  if (r->reducer) {
    /* A plan not hooked yet would still be exact (finish launches every
     * bucket), only without overlap. */
    if (p != r->watched) sp_grad_reducer_watch(r->reducer, p), r->watched = p;
    sp_grad_reducer_begin(r->reducer, totals, 2);
  }
  sp_plan_backward(p);
  if (r->reducer && r->cfg->clip_norm <= 0) {
    if (sp_dist_step(r->reducer, r->opt, r->slot_of, r->params, (float)lr, totals) != 0)
      sp_dist_abort("optimizer step: %s", sp_last_error());
  } else {
    if (r->reducer) sp_grad_reducer_finish(r->reducer, totals);
    if (r->cfg->clip_norm > 0) sp_clip_grad_norm(r->n_params, r->params, r->cfg->clip_norm);
    sp_optimizer_step(r->opt, (float)lr);
  }
  *stop = r->reducer ? totals[1] > 0 : stop_requested;
  *loss_out = r->reducer ? totals[0] / r->world : loss;
  return 0;
}

int sp_video_train_run(const sp_video_config *cfg, const char *config_text, int resume, sp_video_summary *summary) {
  run r;
  int rc = setup(&r, cfg, config_text, resume);
  /* A rank-local setup failure would leave the others waiting: end the job. */
  if (rc != 0 && r.world > 1 && !r.refused) sp_dist_abort("setup failed: %s", sp_last_error());
  int64_t start_epoch = 0, start_step = 0;
  double resumed_loss = 0, best = -1;
  if (rc == 0 && resume) {
    /* Rank 0 reads the checkpoint; steps count global batches, so any world
     * size resumes it. */
    sp_rank0_state st = {0};
    if (r.rank == 0) {
      char path[1100], buf[1 << 16];
      snprintf(path, sizeof path, "%s/last.safetensors", r.dir);
      sp_checkpoint_meta m;
      if ((st.rc = sp_checkpoint_load(path, sp_vnet_graph(&r.net), r.opt, &m, buf, sizeof buf)) == 0) {
        st = (sp_rank0_state){0, m.epoch, m.step_in_epoch, m.loss_sum, m.best};
        fprintf(stderr, "spry: resuming %s at epoch %lld step %lld\n", path, (long long)m.epoch + 1,
                (long long)m.step_in_epoch);
      }
    }
    rc = sp_share_rank0(&st, cfg->dist.timeout_s, "resume");
    if (rc == 0 && r.world > 1) {
      sp_dist_bcast_params(sp_vnet_graph(&r.net));
      sp_dist_bcast_optimizer(r.opt);
    }
    start_epoch = st.epoch, start_step = st.step, resumed_loss = st.loss_sum, best = st.rc == 0 ? st.best : best;
  }
  /* metrics.jsonl holds the epochs this run has done: none when fresh. */
  if (rc == 0 && r.rank == 0 && sp_metrics_log_start(r.dir, start_epoch) != 0)
    fprintf(stderr, "spry: warning: %s\n", sp_last_error());
  stop_requested = 0;
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sp_video_eval_result v = {.loss = NAN, .top1 = NAN, .top5 = NAN};
  double last_loss = NAN, train_s = 0;
  int64_t iterations = 0;
  for (int64_t epoch = start_epoch; rc == 0 && epoch < cfg->epochs; epoch++) {
    int n = sp_multigrid_epoch_shapes(&r.mg, epoch, 0, r.shapes, r.cap_shapes);
    /* Global batches to this rank's share (every shape's batch is at least
     * the base batch, a multiple of the ranks; a Multigrid batch that is not
     * one loses its remainder). */
    for (int j = 0; j < n; j++) r.shapes[j].batch /= r.world;
    if ((rc = sp_video_loader_start_epoch_shapes(r.train_loader, epoch, r.shapes, n)) != 0) break;
    sp_progress bar;
    sp_progress_begin(&bar);
    double loss_sum = epoch == start_epoch ? resumed_loss : 0, t0 = sp_now(), lr = 0;
    int step = 0, trained = 0, stopping = 0, failed = 0;
    int64_t clips_done = 0, clips_trained = 0;
    const sp_video_batch *b;
    while ((b = sp_video_loader_next(r.train_loader))) {
      if (epoch == start_epoch && step < start_step) { /* trained before the resume */
        clips_done += b->n;
        step++;
        continue;
      }
      /* Progress in clips, not iterations: Multigrid changes the batch size
       * within and between epochs, and the schedule must not jump. */
      double progress = sp_epoch_progress(epoch, clips_done * r.world, r.mg.entries);
      lr = sp_lr_at_epoch(&cfg->schedule, progress) * sp_multigrid_lr_scale(&r.mg, epoch);
      int stop = 0;
      double loss = NAN;
      /* A plan error is set by the plan; a non-finite loss is this run's to
       * describe (labels are checked against the classes in setup). */
      if ((rc = train_step(&r, b, lr, &loss, &stop)) != 0) break;
      if (!isfinite(loss)) {
        rc = sp_error_set("the loss became %g at epoch %lld step %d (learning rate %g too high?)", loss,
                          (long long)epoch + 1, step, lr);
        break;
      }
      /* Unreadable clips train as zeros (the loader named each one). */
      failed += b->failed;
      loss_sum += loss;
      clips_done += b->n;
      clips_trained += b->n;
      step++, trained++, iterations++;
      if (r.rank == 0)
        sp_progress_draw(&bar, (int)epoch + 1, cfg->epochs, step, n, loss_sum / step,
                         clips_trained * r.world / (sp_now() - t0), 0);
      /* Every rank has taken the same steps: they all stop here together. */
      int64_t stop_at = sp_train_stop_after_steps();
      if (stop || (stop_at > 0 && sp_optimizer_steps(r.opt) >= stop_at)) {
        stopping = 1;
        break;
      }
    }
    sp_progress_end(&bar);
    if (failed > 0) { /* each rank counts the clips of its own share */
      char who[32] = "";
      if (r.world > 1) snprintf(who, sizeof who, "rank %d: ", r.rank);
      fprintf(stderr, "spry: %swarning: epoch %lld: %d of %lld training clips could not be read and went in as zeros\n",
              who, (long long)epoch + 1, failed, (long long)clips_trained);
    }
    /* The whole job's count for the log: a clip one machine cannot read
     * (another copy of the file there) shows up in metrics.jsonl. */
    double failed_all = failed;
    if (r.world > 1) sp_dist_sum_f64(&failed_all, 1, "unreadable clips");
    double epoch_s = sp_now() - t0;
    train_s += epoch_s;
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
    last_loss = loss_sum / (step ? step : 1);
    int do_val = r.val_loader && ((epoch + 1) % cfg->eval_every == 0 || epoch + 1 == cfg->epochs);
    if (do_val) {
      /* Every rank scores its part of the set with rank 0's batch-norm
       * statistics (per-rank batch norm leaves each rank its own), the
       * model rank 0's checkpoint holds. */
      if (r.world > 1) sp_dist_bcast_buffers(sp_vnet_graph(&r.net));
      rc = sp_video_evaluate(&r.net, r.val_loader, &r.val, epoch, r.world > 1, &v);
    }
    if (r.rank > 0) { /* rank 0 writes; the others wait for its outcome (a failed validation is everyone's) */
      sp_rank0_state st = {0};
      if ((rc = sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint")) != 0) break;
      best = st.best;
      continue;
    }
    double clips_s = clips_trained * r.world / epoch_s;
    if (rc == 0) {
      append_metrics(&r, epoch, last_loss, lr, clips_s, epoch_s, n, (int)failed_all, do_val ? &v : NULL);
      fprintf(stderr, "epoch %lld/%d  train %.4f", (long long)epoch + 1, cfg->epochs, last_loss);
      if (do_val) fprintf(stderr, "  val %.4f  top-1 %.3f  top-5 %.3f", v.loss, v.top1, v.top5);
      fprintf(stderr, "  %d it  %.1f clips/s  %.1f s\n", n, clips_s, epoch_s);
      if (do_val && v.top1 > best) {
        best = v.top1;
        rc = save(&r, "best.safetensors", epoch + 1, 0, 0, best);
      }
    }
    if (rc == 0) rc = save(&r, "last.safetensors", epoch + 1, 0, 0, best);
    sp_rank0_state st = {rc, 0, 0, 0, best};
    if (sp_share_rank0(&st, cfg->dist.timeout_s, "rank 0's checkpoint") != 0) break;
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (rc == 0 && r.rank == 0) {
    if (sp_video_report(r.dir, cfg->model) == 0) fprintf(stderr, "spry: report in %s/index.html\n", r.dir);
    else fprintf(stderr, "spry: warning: report incomplete: %s\n", sp_last_error());
  }
  if (summary) {
    memset(summary, 0, sizeof *summary);
    summary->train_loss = last_loss;
    summary->val_loss = v.loss;
    summary->top1 = v.top1;
    summary->top5 = v.top5;
    summary->best_top1 = best;
    summary->train_s = train_s;
    summary->iterations = iterations;
    summary->val_clips = v.videos;
    summary->val_failed = v.failed;
  }
  teardown(&r);
  return rc;
}
