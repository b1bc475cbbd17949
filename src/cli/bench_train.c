/* `spry bench train`: training (or inference) speed of a model, one JSON line
 * per measurement; medians over timed steps after warm-up. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "io/json.h"
#include "spry/dist.h"
#include "spry/graph.h"
#include "spry/models.h"
#include "spry/optim.h"
#include "spry/rng.h"
#include "spry/train.h"

typedef struct {
  const char *model, *backend_name, *dtype;
  sp_backend backend;
  int batch, threads, steps, warmup, height, width, keypoints, channels, infer, profile;
  int segments;         /* video models: frames per clip (the batch counts clips) */
  int sync_bn;          /* under mpirun: synchronised batch norm */
  double bucket_mb;     /* under mpirun: gradient bucket size */
  const char *compress; /* under mpirun: none | bf16 gradients on the wire */
  int sync_only;        /* under mpirun: meet once per step, exchange no gradients */
  int profile_nodes;    /* --profile-nodes: and a line per node */
  int bf16;             /* plans compute in bf16: asked, and faster than f32 here (or SPRY_BF16=force) */
  int batch_given;      /* --batch on the command line: --infer measures that batch alone */
} bench_opts;

/* Data-parallel figures of the train bench (a world of 1 without mpirun). */
static struct {
  int ranks, buckets, overlapped;
  size_t reduced_bytes, param_bytes;
} dist_stats = {1, 0, 0, 0, 0};

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench train [--model M] [--backend ref|cpu] [--batch B] [--threads T]\n"
          "                        [--dtype f32|bf16] [--size S|HxW] [--steps N] [--warmup W]\n"
          "                        [--keypoints K] [--channels C] [--segments S] [--infer] [--profile]\n"
          "                        [--profile-nodes]\n"
          "                        [--sync-bn] [--bucket-mb MB] [--compress none|bf16] [--sync-only]\n"
          "                        (--dtype bf16: what a config's precision: bf16 gets, f32 where that is\n"
          "                        faster on this CPU, \"computes\" in each line; SPRY_BF16=force keeps bf16;\n"
          "                        --infer: frozen inference at batch 1 and 64 (with --batch: B alone),\n"
          "                        one process; --profile: time per op kind, forward and backward, or\n"
          "                        forward per batch;\n"
          "                        --profile-nodes: and a line per node that ran, slowest first;\n"
          "                        under mpirun: --batch is per rank; --sync-only: the ranks meet once\n"
          "                        per step with an 8-byte all-reduce and exchange no gradients, which\n"
          "                        measures what lock-step alone costs)\n"
          "models: %s\n",
          sp_model_names());
}

static int parse(int argc, char **argv, bench_opts *o) {
  *o = (bench_opts){"vgg-face", sp_backend_default_name(),
                    "f32",      SP_BACKEND_REF,
                    64,         omp_get_max_threads(),
                    10,         1,
                    224,        224,
                    68,         -1,
                    0,          0,
                    8,          0,
                    4.0,        "none",
                    0,          0,
                    0,          0};
  for (int i = 1; i < argc; i++) {
    const char *size = NULL;
    int r = 0;
    if (!strcmp(argv[i], "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(argv[i], "--batch")) o->batch_given = 1;
    if ((r = sp_arg_str(argc, argv, &i, "--model", &o->model)) ||
        (r = sp_arg_str(argc, argv, &i, "--backend", &o->backend_name)) ||
        (r = sp_arg_str(argc, argv, &i, "--dtype", &o->dtype)) ||
        (r = sp_arg_str(argc, argv, &i, "--compress", &o->compress)) ||
        (r = sp_arg_int(argc, argv, &i, "--batch", 1, 1 << 16, &o->batch)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 1, 1024, &o->threads)) ||
        (r = sp_arg_int(argc, argv, &i, "--steps", 1, 1 << 20, &o->steps)) ||
        (r = sp_arg_int(argc, argv, &i, "--warmup", 0, 1 << 20, &o->warmup)) ||
        (r = sp_arg_int(argc, argv, &i, "--keypoints", 1, 1 << 16, &o->keypoints)) ||
        (r = sp_arg_int(argc, argv, &i, "--channels", 1, 4, &o->channels)) ||
        (r = sp_arg_int(argc, argv, &i, "--segments", 1, 1024, &o->segments)) ||
        (r = sp_arg_flag(argv, i, "--infer", &o->infer)) || (r = sp_arg_flag(argv, i, "--profile", &o->profile)) ||
        (r = sp_arg_flag(argv, i, "--profile-nodes", &o->profile_nodes)) ||
        (r = sp_arg_flag(argv, i, "--sync-bn", &o->sync_bn)) ||
        (r = sp_arg_flag(argv, i, "--sync-only", &o->sync_only))) {
      if (r < 0) return -1;
      continue;
    }
    const char *mb = NULL;
    if ((r = sp_arg_str(argc, argv, &i, "--bucket-mb", &mb)) == 1) {
      o->bucket_mb = atof(mb);
      if (!(o->bucket_mb > 0)) {
        fprintf(stderr, "spry bench train: --bucket-mb wants a positive size in MB, got '%s'\n", mb);
        return -1;
      }
      continue;
    }
    if (r < 0) return -1;
    if ((r = sp_arg_str(argc, argv, &i, "--size", &size)) == 1) {
      if (sp_parse_size(size, &o->height, &o->width) != 0) {
        fprintf(stderr, "spry bench train: --size wants S or HxW, got '%s'\n", size);
        return -1;
      }
      continue;
    }
    if (r < 0) return -1;
    fprintf(stderr, "spry bench train: unknown option '%s'\n", argv[i]);
    usage(stderr);
    return -1;
  }
  if (o->profile_nodes) o->profile = 1;
  if (sp_backend_parse(o->backend_name, &o->backend) != 0) {
    fprintf(stderr, "spry bench train: %s\n", sp_last_error());
    return -1;
  }
  if (strcmp(o->compress, "none") && strcmp(o->compress, "bf16")) {
    fprintf(stderr, "spry bench train: --compress must be none or bf16, got '%s'\n", o->compress);
    return -1;
  }
  if (strcmp(o->dtype, "f32") && strcmp(o->dtype, "bf16")) {
    fprintf(stderr, "spry bench train: --dtype must be f32 or bf16, got '%s'\n", o->dtype);
    return -1;
  }
  if (!strcmp(o->dtype, "bf16") && !sp_backend_bf16(o->backend)) {
    fprintf(stderr, "spry bench train: --dtype bf16: %s (use --dtype f32)\n", sp_last_error());
    return -1;
  }
  /* bf16 as a run config's `precision: bf16` gets it: f32 where that is
   * faster here (the lines say "computes": "f32"). */
  o->bf16 = !strcmp(o->dtype, "bf16") && sp_backend_bf16_pays(o->backend);
  if (!strcmp(o->dtype, "bf16") && !o->bf16) {
    fprintf(stderr, "spry bench train: --dtype bf16: %s; computing in f32, as a run config would\n", sp_last_error());
    sp_error_clear();
  }
  if (o->channels < 0) o->channels = !strncmp(o->model, "vgg", 3) ? 1 : 3;
  return 0;
}

static void fill_random(sp_tensor *t, uint64_t key) {
  sp_rng r = sp_rng_make(key);
  float *x = t->data;
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) x[i] = sp_rng_range(&r, -1, 1);
}

static int is_video(const bench_opts *o) { return !strncmp(o->model, "tsn-", 4) || !strncmp(o->model, "tsm-", 4); }
static int is_classifier(const bench_opts *o) { return !strncmp(o->model, "resnet", 6) || is_video(o); }

/* Images in the input batch of `batch` samples (clips of video models). */
static int frames_of(const bench_opts *o, int batch) { return is_video(o) ? batch * o->segments : batch; }

static void print_line(const bench_opts *o, const char *bench, int batch, double step_s, double flops_per_step) {
  sp_json_buf b;
  char size[32];
  sp_json_buf_init(&b);
  snprintf(size, sizeof size, "%dx%d", o->height, o->width);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "bench"), sp_json_str(&b, bench);
  sp_json_key(&b, "model"), sp_json_str(&b, o->model);
  sp_json_key(&b, "backend"), sp_json_str(&b, sp_backend_name(o->backend));
  sp_json_key(&b, "dtype"), sp_json_str(&b, o->dtype);
  sp_json_key(&b, "computes"), sp_json_str(&b, o->bf16 ? "bf16" : "f32");
  sp_json_key(&b, "batch"), sp_json_int(&b, batch);
  sp_json_key(&b, "threads"), sp_json_int(&b, o->threads);
  sp_json_key(&b, "size"), sp_json_str(&b, size);
  sp_json_key(&b, "steps"), sp_json_int(&b, o->steps);
  /* Under mpirun every rank trains `batch` images per step. */
  int ranks = !strcmp(bench, "train") ? dist_stats.ranks : 1;
  sp_json_key(&b, "ranks"), sp_json_int(&b, ranks);
  sp_json_key(&b, "images_per_s"), sp_json_f64(&b, (double)frames_of(o, batch) * ranks / step_s);
  if (is_video(o)) sp_json_key(&b, "clips_per_s"), sp_json_f64(&b, (double)batch * ranks / step_s);
  sp_json_key(&b, "ms_per_step"), sp_json_f64(&b, 1e3 * step_s);
  sp_json_key(&b, "gflops_per_s"), sp_json_f64(&b, flops_per_step / step_s * 1e-9);
  if (!strcmp(bench, "train")) {
    sp_json_key(&b, "param_bytes"), sp_json_int(&b, (int64_t)dist_stats.param_bytes);
    sp_json_key(&b, "allreduce_bytes_per_step"), sp_json_int(&b, (int64_t)dist_stats.reduced_bytes);
    sp_json_key(&b, "allreduce_buckets"), sp_json_int(&b, dist_stats.buckets);
    sp_json_key(&b, "buckets_launched_in_backward"), sp_json_int(&b, dist_stats.overlapped);
    if (ranks > 1) sp_json_key(&b, "sync_bn"), sp_json_bool(&b, o->sync_bn);
    if (ranks > 1) sp_json_key(&b, "compress"), sp_json_str(&b, o->compress);
    if (ranks > 1) sp_json_key(&b, "sync_only"), sp_json_bool(&b, o->sync_only);
  }
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
}

/* Seconds in the fast backend's reorders so far (0 without oneDNN). */
static double reorder_seconds(void) { return sp_backend_reorder_seconds(); }

/* Opens a profile line: "train_profile<suffix>" (or "infer_..."), the model
 * and, for inference, the batch. */
static void profile_line_begin(sp_json_buf *b, const bench_opts *o, int batch, const char *suffix) {
  char bench[48];
  snprintf(bench, sizeof bench, "%s_profile%s", o->infer ? "infer" : "train", suffix);
  sp_json_buf_init(b);
  sp_json_obj_begin(b);
  sp_json_key(b, "bench"), sp_json_str(b, bench);
  sp_json_key(b, "model"), sp_json_str(b, o->model);
  if (o->infer) sp_json_key(b, "batch"), sp_json_int(b, batch);
}

static void print_profile_line(const bench_opts *o, int batch, const char *op, double fwd_s, double bwd_s, int steps,
                               const char *note) {
  sp_json_buf b;
  profile_line_begin(&b, o, batch, "");
  sp_json_key(&b, "op"), sp_json_str(&b, op);
  sp_json_key(&b, "fwd_ms_per_step"), sp_json_f64(&b, 1e3 * fwd_s / steps);
  sp_json_key(&b, "bwd_ms_per_step"), sp_json_f64(&b, 1e3 * bwd_s / steps);
  if (note) sp_json_key(&b, "note"), sp_json_str(&b, note);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
}

/* Time per op kind, forward and backward, summed over the timed steps; then
 * the reorders inside those ops and the optimizer step (with the gradient
 * exchange under mpirun), which no node's time holds. */
typedef struct {
  double reorder_fwd, reorder_bwd, optimizer, zero_grad;
  double steps_total; /* wall time of the profiled steps */
} step_profile;

typedef struct {
  int node;
  double fwd, bwd;
  const char *op;
} node_time;

static int slower_first(const void *a, const void *b) {
  const double x = ((const node_time *)a)->fwd + ((const node_time *)a)->bwd;
  const double y = ((const node_time *)b)->fwd + ((const node_time *)b)->bwd;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* --profile-nodes: each node that ran (absorbed ones ran in their host),
 * slowest first, with its name and output shape: where a model's time goes
 * layer by layer. */
static void print_profile_nodes(const bench_opts *o, int batch, const sp_graph *g, const sp_plan *p, int n_nodes,
                                int steps) {
  node_time *t = sp_xmalloc(sizeof *t * (size_t)(n_nodes ? n_nodes : 1));
  int n = 0;
  for (int i = 0; i < n_nodes; i++) {
    node_time *e = &t[n];
    sp_plan_profile(p, i, &e->fwd, &e->bwd, &e->op);
    e->node = i;
    n += e->fwd + e->bwd > 0;
  }
  qsort(t, (size_t)n, sizeof *t, slower_first);
  for (int k = 0; k < n; k++) {
    char shape[128];
    const char *name = sp_graph_node_name(g, t[k].node);
    sp_json_buf j;
    profile_line_begin(&j, o, batch, "_node");
    sp_json_key(&j, "node"), sp_json_int(&j, t[k].node);
    sp_json_key(&j, "name"), sp_json_str(&j, name ? name : "");
    sp_json_key(&j, "op"), sp_json_str(&j, t[k].op);
    sp_json_key(&j, "out"), sp_json_str(&j, sp_shape_str(sp_plan_shape(p, t[k].node), shape, sizeof shape));
    sp_json_key(&j, "fwd_ms_per_step"), sp_json_f64(&j, 1e3 * t[k].fwd / steps);
    sp_json_key(&j, "bwd_ms_per_step"), sp_json_f64(&j, 1e3 * t[k].bwd / steps);
    /* Forward products as direct ones (Winograd layers show above the
     * machine's peak): which layers run far from it. */
    double gflop = 1e-9 * sp_plan_node_forward_flops(p, t[k].node);
    if (gflop > 0) {
      sp_json_key(&j, "fwd_gflop"), sp_json_f64(&j, gflop);
      if (t[k].fwd > 0) sp_json_key(&j, "fwd_gflops_per_s"), sp_json_f64(&j, gflop * steps / t[k].fwd);
    }
    sp_json_obj_end(&j);
    printf("%s\n", j.s);
    sp_json_buf_free(&j);
  }
  free(t);
}

static void print_profile(const bench_opts *o, int batch, const sp_graph *g, const sp_plan *p, int n_nodes, int steps,
                          const step_profile *sp) {
  const char *kinds[64];
  double fwd[64] = {0}, bwd[64] = {0};
  int n_kinds = 0;
  for (int i = 0; i < n_nodes; i++) {
    double f, b;
    const char *name;
    sp_plan_profile(p, i, &f, &b, &name);
    int k = 0;
    while (k < n_kinds && strcmp(kinds[k], name)) k++;
    if (k == n_kinds) {
      if (n_kinds == 64) continue;
      kinds[n_kinds++] = name;
    }
    fwd[k] += f;
    bwd[k] += b;
  }
  double total = sp->optimizer + sp->zero_grad;
  for (int k = 0; k < n_kinds; k++) {
    total += fwd[k] + bwd[k];
    if (fwd[k] != 0 || bwd[k] != 0) print_profile_line(o, batch, kinds[k], fwd[k], bwd[k], steps, NULL);
  }
  if (sp->reorder_fwd + sp->reorder_bwd > 0)
    print_profile_line(o, batch, "reorders", sp->reorder_fwd, sp->reorder_bwd, steps,
                       "oneDNN layout changes and cross-layout gradient sums, inside the ops above");
  if (!o->infer) {
    print_profile_line(o, batch, "optimizer", 0, sp->optimizer, steps,
                       "after backward: update (and exchange under mpirun)");
    print_profile_line(o, batch, "zero_grad", sp->zero_grad, 0, steps,
                       "before forward: parameter gradients cleared (sp_plan_zero_grad: those a first writer "
                       "overwrites are only marked)");
  }
  if (o->profile_nodes) print_profile_nodes(o, batch, g, p, n_nodes, steps);
  /* What the lines above account for, against the mean step they come from
   * (the train line gives the median step, which a noisy step moves less). */
  sp_json_buf b;
  profile_line_begin(&b, o, batch, "_total");
  sp_json_key(&b, "profile_ms_per_step"), sp_json_f64(&b, 1e3 * total / steps);
  sp_json_key(&b, "mean_step_ms"), sp_json_f64(&b, 1e3 * sp->steps_total / steps);
  sp_json_key(&b, "profile_over_step"), sp_json_f64(&b, sp->steps_total > 0 ? total / sp->steps_total : 0);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
}

/* ResNet classifiers train on labels with cross-entropy; the keypoint models
 * regress points with L1 (as the seed). */

static unsigned plan_flags(const bench_opts *o) { return o->bf16 ? SP_PLAN_BF16 : 0; }

static sp_input_shape target_shape(const bench_opts *o, int batch) {
  int k = !strcmp(o->model, "vgg-nose") ? 1 : o->keypoints;
  return (sp_input_shape){"target", is_classifier(o) ? sp_shape1(batch) : sp_shape3(batch, k, 2)};
}

static void fill_target(const bench_opts *o, sp_tensor *t) {
  if (!is_classifier(o)) {
    fill_random(t, 2);
    return;
  }
  for (int64_t i = 0; i < sp_tensor_numel(t); i++) ((int32_t *)t->data)[i] = (int32_t)((i * 7919) % 1000);
}

static sp_graph *build(const bench_opts *o, sp_value *out) {
  sp_graph *g = sp_graph_new(1);
  sp_value x = sp_graph_input(g, "image", SP_F32, o->channels);
  sp_value t =
      is_classifier(o) ? sp_graph_input(g, "target", SP_I32, -1) : sp_graph_input(g, "target", SP_F32, o->keypoints);
  sp_model_spec spec = {.name = o->model,
                        .channels = o->channels,
                        .height = o->height,
                        .width = o->width,
                        .keypoints = o->keypoints,
                        .segments = o->segments};
  *out = sp_model_build(g, &spec, x);
  sp_graph_output(g, *out, "out");
  sp_graph_loss(g, is_classifier(o) ? sp_cross_entropy(g, *out, t) : sp_l1_loss(g, *out, t), 1.0f);
  if (sp_graph_error(g)) {
    fprintf(stderr, "spry bench train: %s\n", sp_graph_error(g));
    sp_graph_free(g);
    return NULL;
  }
  return g;
}

/* What the JSON line reports of the gradient exchange. */
static void note_dist_stats(const sp_graph *g, const sp_grad_reducer *red, int world) {
  dist_stats.ranks = world;
  dist_stats.param_bytes = sizeof(float) * (size_t)sp_graph_param_numel(g, 1);
  if (!red) return;
  dist_stats.reduced_bytes = sp_grad_reducer_bytes(red);
  dist_stats.buckets = sp_grad_reducer_buckets(red);
  dist_stats.overlapped = sp_grad_reducer_launched_early(red);
}

static int run_train(const bench_opts *o) {
  sp_value out;
  if (sp_dist_init() != 0) {
    fprintf(stderr, "spry bench train: %s\n", sp_last_error());
    return 1;
  }
  const int world = sp_dist_world(), rank = sp_dist_rank();
  sp_graph *g = build(o, &out);
  if (!g) return 1;
  if (world > 1 && o->sync_bn) sp_dist_enable_sync_bn(g);
  sp_input_shape in[2] = {{"image", sp_shape4(frames_of(o, o->batch), o->channels, o->height, o->width)},
                          target_shape(o, o->batch)};
  sp_plan *p = sp_plan_new(g, 2, in, o->backend, 1, plan_flags(o) | SP_PLAN_LOSS_ONLY);
  if (!p) {
    fprintf(stderr, "spry bench train: %s\n", sp_last_error());
    sp_graph_free(g);
    return 1;
  }
  fill_random(sp_plan_input(p, "image"), 1 + (uint64_t)rank); /* each rank its own images */
  fill_target(o, sp_plan_input(p, "target"));
  sp_dist_bcast_params(g);
  sp_grad_reducer *red =
      world > 1 && !o->sync_only ? sp_grad_reducer_new(g, p, (size_t)(o->bucket_mb * (1 << 20))) : NULL;
  if (red) sp_grad_reducer_set_bf16(red, !strcmp(o->compress, "bf16"));
  int n;
  sp_opt_param *params = sp_train_opt_params(g, &n);
  sp_opt_config cfg = sp_opt_config_default(SP_OPT_ADAMW);
  sp_optimizer *opt = sp_optimizer_new(&cfg, n, params);
  int *slot_of = red ? sp_dist_param_slots(g) : NULL;
  double *times = sp_xmalloc(sizeof(double) * (size_t)o->steps);
  step_profile prof = {0};
  for (int s = 0; s < o->warmup + o->steps; s++) {
    int profiling = o->profile && s >= o->warmup;
    if (s == o->warmup && o->profile) {
      sp_plan_enable_profile(p, 1);
      sp_backend_time_reorders(1);
    }
    double t0 = sp_now(), r0 = reorder_seconds();
    sp_plan_zero_grad(p); /* as the training loop does */
    if (profiling) prof.zero_grad += sp_now() - t0;
    sp_plan_forward(p);
    double r1 = reorder_seconds();
    if (red) sp_grad_reducer_begin(red, NULL, 0);
    sp_plan_backward(p);
    double r2 = reorder_seconds(), t2 = sp_now();
    if (red) { /* the step time includes the exchange */
      if (sp_dist_step(red, opt, slot_of, params, 1e-4f, NULL) != 0)
        sp_dist_abort("optimizer step: %s", sp_last_error());
    } else {
      double meet = 1; /* --sync-only: the step's one meeting, no gradients (parameters drift apart) */
      if (world > 1 && sp_dist_sum_f64(&meet, 1, "bench step") != 0) sp_dist_abort("%s", sp_last_error());
      sp_optimizer_step(opt, 1e-4f);
    }
    double t3 = sp_now();
    if (profiling)
      prof.reorder_fwd += r1 - r0, prof.reorder_bwd += r2 - r1, prof.optimizer += t3 - t2, prof.steps_total += t3 - t0;
    if (s >= o->warmup) times[s - o->warmup] = t3 - t0;
  }
  sp_backend_time_reorders(0);
  if (sp_optimizer_steps(opt) != o->warmup + o->steps) /* one update per step, whatever the path */
    sp_dist_abort("bench: %lld optimizer steps for %d steps", (long long)sp_optimizer_steps(opt), o->warmup + o->steps);
  double flops = 3.0 * sp_plan_forward_flops(p);
  note_dist_stats(g, red, world);
  /* Ranks step in lock-step (every step waits for all gradients), so rank
   * 0's time is the job's; it alone prints. */
  if (rank == 0) print_line(o, "train", o->batch, sp_median(times, o->steps), flops);
  if (o->profile && rank == 0) print_profile(o, o->batch, g, p, sp_graph_node_count(g), o->steps, &prof);
  sp_grad_reducer_free(red);
  free(slot_of);
  free(times);
  sp_optimizer_free(opt);
  free(params);
  sp_plan_free(p);
  sp_graph_free(g);
  return 0;
}

static int run_infer(const bench_opts *o) {
  int batches[2] = {1, 64}, n_batches = 2;
  if (o->batch_given) batches[0] = o->batch, n_batches = 1; /* one size, as asked (a sweep, an A/B) */
  sp_value out;
  sp_graph *g = build(o, &out);
  if (!g) return 1;
  for (int b = 0; b < n_batches; b++) {
    sp_input_shape in[2] = {{"image", sp_shape4(frames_of(o, batches[b]), o->channels, o->height, o->width)},
                            target_shape(o, batches[b])};
    /* As a deployed model runs: weights prepared once (SP_PLAN_FROZEN). */
    sp_plan *p = sp_plan_new(g, 2, in, o->backend, 0, plan_flags(o) | SP_PLAN_FROZEN);
    if (!p) {
      fprintf(stderr, "spry bench train: %s\n", sp_last_error());
      sp_graph_free(g);
      return 1;
    }
    fill_random(sp_plan_input(p, "image"), 1);
    double *times = sp_xmalloc(sizeof(double) * (size_t)o->steps);
    step_profile prof = {0};
    for (int s = 0; s < o->warmup + o->steps; s++) {
      if (s == o->warmup && o->profile) {
        sp_plan_enable_profile(p, 1);
        sp_backend_time_reorders(1);
      }
      double t0 = sp_now(), r0 = reorder_seconds();
      sp_plan_forward(p);
      const double t1 = sp_now();
      if (s >= o->warmup) times[s - o->warmup] = t1 - t0;
      if (o->profile && s >= o->warmup) prof.reorder_fwd += reorder_seconds() - r0, prof.steps_total += t1 - t0;
    }
    sp_backend_time_reorders(0);
    print_line(o, "infer", batches[b], sp_median(times, o->steps), sp_plan_forward_flops(p));
    if (o->profile) print_profile(o, batches[b], g, p, sp_graph_node_count(g), o->steps, &prof);
    free(times);
    sp_plan_free(p);
  }
  sp_graph_free(g);
  return 0;
}

int sp_cli_bench_train(int argc, char **argv) {
  bench_opts o;
  if (parse(argc, argv, &o) != 0) return 2;
  omp_set_num_threads(o.threads);
  if (sp_dist_init() != 0) {
    fprintf(stderr, "spry bench train: %s\n", sp_last_error());
    return 1;
  }
  const int world = sp_dist_world();
  if (o.infer && world > 1) {
    if (sp_dist_rank() == 0)
      fprintf(stderr, "spry bench train: --infer measures one process (batch 1 and 64); start it without mpirun\n");
    return 2;
  }
  if (world == 1 && (o.sync_only || o.sync_bn || strcmp(o.compress, "none") || o.bucket_mb != 4.0))
    fprintf(stderr,
            "spry bench train: note: --sync-only, --sync-bn, --compress and --bucket-mb apply under mpirun; "
            "this is one process\n");
  return o.infer ? run_infer(&o) : run_train(&o);
}
