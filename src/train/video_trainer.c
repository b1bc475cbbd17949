/* The video task of the training loop (loop.h): clips from the video loader
 * through one plan per batch shape (one shape normally, a Multigrid cycle of
 * them otherwise), and a validation pass scored per video ("best" is the
 * highest top-1). sp_video_train_run is the video run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "spry/train.h"
#include "train/loop.h"
#include "train/video_internal.h"

typedef struct {
  const sp_video_config *cfg;
  sp_loop *loop;
  sp_video_list train, val;
  int classes;
  sp_vnet net;
  sp_video_loader *train_loader, *val_loader;
  sp_multigrid mg;
  sp_video_shape *shapes;
  int cap_shapes;
  sp_video_eval_result v; /* the last validation pass */
} video_task;

/* data.num_classes, else one past the largest label of the lists; every
 * label must then lie in [0, classes) (a list's own labels always do). */
static int classes_of(const video_task *t, int max_train, int max_val, int file_classes, int *classes) {
  const sp_video_config *cfg = t->cfg;
  *classes = (max_train > max_val ? max_train : max_val) + 1;
  if (file_classes) {
    /* The classes file numbers the classes; its labels were checked. */
    *classes = file_classes;
    if (cfg->data.num_classes && cfg->data.num_classes != file_classes)
      return sp_error_set("data.num_classes = %d, but the classes file of %s names %d classes", cfg->data.num_classes,
                          cfg->data.train_list, file_classes);
    return 0;
  }
  /* Without a classes file labels are numbered from 0: a list that never
   * uses 0 is most likely 1-based (UCF's published trainlists), which would
   * train every clip as its neighbour class. */
  int has_zero = 0;
  for (int i = 0; i < t->train.n && !has_zero; i++) has_zero = t->train.label[i] == 0;
  for (int i = 0; i < t->val.n && !has_zero; i++) has_zero = t->val.label[i] == 0;
  if (!has_zero && *classes > 1)
    return sp_error_set(
        "%s: no clip has label 0: a 1-based list (UCF's published trainlists)? Name its classes file "
        "(data.classes: classInd.txt, whose numbers say where labels start), or make a 0-based list "
        "with `spry prepare list DIR --labels classInd.txt --split LIST --out OUT`",
        cfg->data.train_list);
  if (!cfg->data.num_classes)
    return sp_video_list_check_dense(&t->train, cfg->data.train_list, t->val.n ? &t->val : NULL, cfg->data.val_list);
  *classes = cfg->data.num_classes;
  if (sp_video_list_check_labels(&t->train, cfg->data.train_list, *classes) != 0) return -1;
  return t->val.n ? sp_video_list_check_labels(&t->val, cfg->data.val_list, *classes) : 0;
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

static int same_lists_on_ranks(const video_task *t) {
  char odd[128];
  uint64_t mine = kept_hash(&t->val, kept_hash(&t->train, 0));
  if (sp_dist_ranks_differ(mine, odd, sizeof odd, 10 * t->cfg->dist.timeout_s) == 0) return 0;
  return sp_error_set(
      "distributed run refused: rank(s) %s kept other clips than rank 0 (this rank kept %d train / "
      "%d val clips): a clip is missing on some machines only; give every machine the same data",
      odd, t->train.n, t->val.n);
}

/* The lists, checked alike on every rank, and the class count. */
static int read_lists(video_task *t, sp_loop *l) {
  const sp_video_config *cfg = t->cfg;
  if (!cfg->data.train_list[0]) return sp_error_set("data.train_list is not set");
  int max_train = -1, max_val = -1, file_classes = 0;
  if (sp_video_list_open(cfg, cfg->data.train_list, &t->train, &max_train, &file_classes) != 0) return -1;
  if (cfg->data.val_list[0] && sp_video_list_open(cfg, cfg->data.val_list, &t->val, &max_val, NULL) != 0) return -1;
  if (same_lists_on_ranks(t) != 0) return sp_loop_refuse(l, -1); /* decided together: none waits */
  if (classes_of(t, max_train, max_val, file_classes, &t->classes) != 0) return -1;
  if (t->classes < 2)
    return sp_loop_refuse(
        l, sp_error_set("%s: needs at least 2 classes, labels give %d", cfg->data.train_list, t->classes));
  if (t->train.n < cfg->batch)
    return sp_loop_refuse(l, sp_error_set("batch %d is larger than the %d training clips", cfg->batch, t->train.n));
  return 0;
}

static int make_loaders(video_task *t, const sp_loop *l) {
  const sp_video_config *cfg = t->cfg;
  sp_video_loader_config lc = sp_video_loader_config_default(l->local_batch, sp_video_cfg_frames(cfg), cfg->data.size);
  lc.sampler = cfg->data.sampler;
  lc.stride = cfg->data.stride;
  lc.short_side = cfg->data.short_side;
  lc.flip_prob = cfg->data.flip;
  lc.workers = cfg->workers;
  lc.seed = cfg->seed;
  lc.rank = l->rank;
  lc.world = l->world;
  if (!(t->train_loader = sp_video_loader_create(&t->train, &lc))) return -1;
  if (!t->val.n) return 0;
  /* Validation: each rank scores its part of the whole set. */
  sp_video_loader_config vc = lc;
  vc.eval_shard = 1;
  vc.train = 0;
  vc.shuffle = 0;
  vc.drop_last = 0;
  vc.test_clips = cfg->data.test_clips;
  return (t->val_loader = sp_video_loader_create(&t->val, &vc)) ? 0 : -1;
}

static int video_setup(void *task, sp_loop *l) {
  video_task *t = task;
  const sp_video_config *cfg = t->cfg;
  t->loop = l;
  if (read_lists(t, l) != 0) return -1;
  if (sp_vnet_init(&t->net, cfg, t->classes) != 0) return -1;
  /* Rank 0 reads the pretrained weights; the broadcast gives them to all. */
  if (l->rank == 0 && cfg->pretrained[0] && sp_vnet_load_pretrained(&t->net, cfg->pretrained) != 0) return -1;
  sp_dist_bcast_params(sp_vnet_graph(&t->net)); /* every rank starts from rank 0's weights */
  l->g = sp_vnet_graph(&t->net);
  /* No bucket plan: Multigrid plans come and go, so each is hooked as it is
   * used; buckets go by descending parameter id, head first, as backward
   * finalises them. */
  l->bucket_plan = NULL;
  if (make_loaders(t, l) != 0) return -1;
  /* The schedule of the global batch over the global epoch (each rank's
   * share times the ranks), so W ranks take the shapes, learning rates and
   * iterations of one process; each shape's batch is then split over the
   * ranks (video_start_epoch). */
  const int frames = sp_video_cfg_frames(cfg);
  t->mg = (sp_multigrid){cfg->multigrid.long_cycle,
                         cfg->multigrid.short_cycle,
                         cfg->batch,
                         frames,
                         cfg->data.size,
                         cfg->epochs,
                         sp_video_loader_entries(t->train_loader) * l->world,
                         cfg->multigrid.cycles};
  t->cap_shapes = t->mg.entries + 1;
  t->shapes = sp_xmalloc(sizeof(sp_video_shape) * (size_t)t->cap_shapes);
  sp_plan *p = sp_vnet_plan(&t->net, frames, l->local_batch, cfg->data.size, 1);
  if (!p) return -1;
  if (l->rank == 0)
    fprintf(stderr,
            "spry: %s, %d classes, %d train / %d val clips, %d frames at %d px, %lld parameters, %s backend, "
            "plan %.1f MB%s%s\n",
            cfg->model, t->classes, t->train.n, t->val.n, frames, cfg->data.size,
            (long long)sp_graph_param_numel(l->g, 1), cfg->backend, sp_plan_arena_bytes(p) / 1e6,
            cfg->multigrid.long_cycle ? ", multigrid long" : "", cfg->multigrid.short_cycle ? ", multigrid short" : "");
  return 0;
}

static int video_start_epoch(void *task, int64_t epoch, int *steps, int64_t *items) {
  video_task *t = task;
  int n = sp_multigrid_epoch_shapes(&t->mg, epoch, 0, t->shapes, t->cap_shapes);
  /* Global batches to this rank's share (every shape's batch is at least the
   * base batch, a multiple of the ranks; a Multigrid batch that is not one
   * loses its remainder). */
  for (int j = 0; j < n; j++) t->shapes[j].batch /= t->loop->world;
  *steps = n;
  *items = t->mg.entries;
  return sp_video_loader_start_epoch_shapes(t->train_loader, epoch, t->shapes, n);
}

static int video_next(void *task, sp_loop_batch *out) {
  video_task *t = task;
  const sp_video_batch *b = sp_video_loader_next(t->train_loader);
  if (!b) return 0;
  /* Unreadable clips train as zeros (the loader named each one). */
  *out = (sp_loop_batch){b, b->n, b->failed};
  return 1;
}

static sp_plan *video_fill(void *task, const sp_loop_batch *lb) {
  video_task *t = task;
  const sp_video_batch *b = lb->data;
  sp_plan *p = sp_vnet_plan(&t->net, b->t, b->n, b->h, 1);
  if (!p) {
    sp_error_push("the plan for %d clips x %d frames x %d px", b->n, b->t, b->h);
    return NULL;
  }
  sp_vnet_fill(&t->net, p, b);
  return p;
}

static double video_lr_scale(void *task, int64_t epoch) {
  return sp_multigrid_lr_scale(&((video_task *)task)->mg, epoch);
}

static int video_can_validate(void *task) { return ((video_task *)task)->val_loader != NULL; }

static int video_validate(void *task, int64_t epoch, int over_ranks, sp_loop_val *out) {
  video_task *t = task;
  int rc = sp_video_evaluate(&t->net, t->val_loader, &t->val, epoch, over_ranks, &t->v);
  *out = (sp_loop_val){t->v.loss, t->v.top1};
  return rc;
}

static void video_log_epoch(void *task, sp_json_buf *b, int64_t epoch, int steps, int unreadable) {
  video_task *t = task;
  sp_json_key(b, "iterations"), sp_json_int(b, steps);
  sp_json_key(b, "stage"), sp_json_int(b, sp_multigrid_stage(&t->mg, epoch));
  sp_json_key(b, "unreadable_train_clips"), sp_json_int(b, unreadable); /* all ranks; they went in as zeros */
}

static void video_log_validation(void *task, sp_json_buf *b) {
  video_task *t = task;
  sp_json_key(b, "val_top1"), sp_json_f64(b, t->v.top1);
  sp_json_key(b, "val_top5"), sp_json_f64(b, t->v.top5);
}

static void video_print_validation(void *task) {
  video_task *t = task;
  fprintf(stderr, "  top-1 %.3f  top-5 %.3f", t->v.top1, t->v.top5);
}

static int video_report(void *task, const char *dir, int over_ranks) {
  video_task *t = task;
  if (over_ranks && t->loop->rank > 0) return 0; /* from metrics.jsonl: rank 0's to write */
  return sp_video_report(dir, t->cfg->model, t->classes);
}

static void video_teardown(void *task) {
  video_task *t = task;
  sp_vnet_free(&t->net);
  sp_video_loader_destroy(t->train_loader);
  sp_video_loader_destroy(t->val_loader);
  free(t->shapes);
  sp_video_list_free(&t->train);
  sp_video_list_free(&t->val);
}

static const sp_task_ops video_ops = {
    .unit = "clips",
    .rate_key = "clips_per_s",
    .best = SP_BEST_HIGHER,
    .setup = video_setup,
    .start_epoch = video_start_epoch,
    .next = video_next,
    .fill = video_fill,
    .lr_scale = video_lr_scale,
    .can_validate = video_can_validate,
    .validate = video_validate,
    .log_epoch = video_log_epoch,
    .log_validation = video_log_validation,
    .print_validation = video_print_validation,
    .report = video_report,
    .teardown = video_teardown,
};

int sp_video_train_run(const sp_video_config *cfg, const char *config_text, int run_flags, sp_video_summary *summary) {
  video_task t;
  memset(&t, 0, sizeof t);
  t.cfg = cfg;
  t.v = (sp_video_eval_result){.loss = NAN, .top1 = NAN, .top5 = NAN};
  sp_loop_config lc = SP_LOOP_CONFIG_OF(cfg);
  sp_loop_result r;
  int rc = sp_loop_run(&lc, config_text, (unsigned)run_flags, &video_ops, &t, &r);
  if (summary) {
    memset(summary, 0, sizeof *summary);
    summary->train_loss = r.train_loss;
    summary->val_loss = t.v.loss;
    summary->top1 = t.v.top1;
    summary->top5 = t.v.top5;
    summary->best_top1 = r.best;
    summary->train_s = r.train_s;
    summary->iterations = r.iterations;
    summary->val_clips = t.v.videos;
    summary->val_failed = t.v.failed;
  }
  return rc;
}
