/* `spry eval --weights W [--data DIR] [--format F] [CONFIG]`: accuracy of a
 * checkpoint on its run's validation split or on any annotated folder. The
 * last line of output is one JSON object. */
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_video.h"
#include "io/json.h"
#include "spry/plot.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "train/trainer_internal.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry eval --weights W.safetensors [--data DIR] [--format F] [--boxes FILE.csv] [--set key=value ...]\n"
          "                 [--out DIR] [--backend B] [CONFIG]\n"
          "  Evaluates on the run's validation split (config stored in the checkpoint, or CONFIG),\n"
          "  or on every image of DIR (--data; format auto|csv|coco|dlib|imm|asf|pts).\n"
          "  Faces are cut around the run's box source (data.box), never the true points unless asked:\n"
          "  --boxes FILE.csv  boxes from a file (image,x,y,w,h): data.box=file\n"
          "  --set data.box=detect|image|file|auto|points  (points: the figure is optimistic)\n"
          "  --per-face FILE.csv  one row per face: image, box source and box, mean error (px), NME\n"
          "  Writes OUT/ced.png (default OUT: the checkpoint's folder); the last output line is JSON:\n"
          "  mean_px, nme_io, nme_ip, fr_008, fr_010, auc_010 (fractions), val_loss, count, box (where the\n"
          "  boxes came from: image, detector, file, annotation, points; boxes: counts when mixed).\n");
}

static void put_metric(sp_json_buf *b, const char *key, double v) {
  sp_json_key(b, key);
  if (isfinite(v)) sp_json_f64(b, v);
  else sp_json_null(b);
}

/* "box": where the faces' boxes came from; "boxes": the counts, when mixed
 * (a detector's misses fall back to a square from the points). */
static void put_box_sources(sp_json_buf *b, const sp_cache *c) {
  int counts[SP_BOXSRC_COUNT], kinds = 0;
  sp_cache_box_counts(c, counts);
  for (int s = 1; s < SP_BOXSRC_COUNT; s++) kinds += counts[s] > 0;
  sp_json_key(b, "box"), sp_json_str(b, sp_box_source_name(sp_kp_box_source(c)));
  if (kinds < 2) return;
  sp_json_key(b, "boxes"), sp_json_obj_begin(b);
  for (int s = 1; s < SP_BOXSRC_COUNT; s++)
    if (counts[s]) sp_json_key(b, sp_box_source_name((sp_box_source)s)), sp_json_int(b, counts[s]);
  sp_json_obj_end(b);
}

/* Each face's box and errors, for a look at the worst faces or to run
 * another tool on the same faces and boxes (bench/peers/dlib_landmarks.cc). */
static int write_per_face(const char *path, const sp_kp_data *d, const sp_cache *c, const float *pred, const float *gt,
                          const double *nme) {
  FILE *f = fopen(path, "w");
  if (!f) return sp_error_set("--per-face %s: cannot create it", path);
  fprintf(f, "image,box_source,x,y,w,h,mean_px,nme_io\n");
  /* split: none caches the training list once for both (kp_data.c). */
  const sp_dataset *ds = d->val_cache == d->train_cache ? &d->train : &d->val;
  for (int i = 0; i < c->n; i++) {
    double px = 0;
    for (int j = 0; j < d->k; j++) {
      const float *p = pred + ((size_t)i * d->k + j) * 2, *g = gt + ((size_t)i * d->k + j) * 2;
      px += hypot(p[0] - g[0], p[1] - g[1]);
    }
    const float *b = c->box + (size_t)4 * i;
    fprintf(f, "%s,%s,%.9g,%.9g,%.9g,%.9g,%.6f,", ds->s[c->source[i]].image,
            sp_box_source_name((sp_box_source)c->box_src[i]), b[0], b[1], b[2], b[3], px / d->k);
    if (d->eyes.n_left) fprintf(f, "%.6f\n", nme[i]);
    else fprintf(f, "\n");
  }
  if (fclose(f) != 0) return sp_error_set("--per-face %s: write failed", path);
  fprintf(stderr, "spry eval: wrote %s\n", path);
  return 0;
}

static int write_ced(const char *dir, const double *per_face, int n, int have_eyes) {
  enum { STEPS = 101 };
  double t[STEPS], f[STEPS];
  double max = have_eyes ? 0.2 : 0;
  if (!have_eyes)
    for (int i = 0; i < n; i++) max = fmax(max, per_face[i]);
  sp_ced_curve(per_face, n, max > 0 ? max : 1, STEPS, t, f);
  char path[2048];
  snprintf(path, sizeof path, "%s/ced.png", dir);
  sp_series s = {"validation", t, f, STEPS};
  int rc = sp_plot_lines(path, 720, 480, "Cumulative error distribution", have_eyes ? "NME (inter-ocular)" : "mean error (px)",
                         "fraction of faces", 1, &s, 0);
  if (rc == 0) fprintf(stderr, "spry eval: wrote %s\n", path);
  return rc;
}

int sp_cli_eval(int argc, char **argv) {
  if (sp_cli_eval_is_video(argc, argv)) return sp_cli_eval_video(argc, argv); /* --task video or its checkpoint */
  const char *weights = NULL, *data = NULL, *format = NULL, *config = NULL, *out = NULL, *backend = NULL;
  const char *boxes = NULL, *per_face_csv = NULL;
  /* --set key=value, after the options that set keys themselves: the user's last word wins. */
  char **user_sets = sp_xcalloc((size_t)argc, sizeof(char *));
  int n_user_sets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(user_sets), usage(stdout), 0;
    if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
    else if (!strcmp(argv[i], "--boxes") && i + 1 < argc) boxes = argv[++i];
    else if (!strcmp(argv[i], "--per-face") && i + 1 < argc) per_face_csv = argv[++i];
    else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      if (!strchr(argv[i + 1], '=')) {
        fprintf(stderr, "spry eval: --set wants key=value, got '%s'\n", argv[i + 1]);
        return free(user_sets), 2;
      }
      user_sets[n_user_sets++] = argv[++i];
    }
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (!strcmp(argv[i], "--format") && i + 1 < argc) format = argv[++i];
    else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (argv[i][0] != '-' && !config) config = argv[i];
    else {
      fprintf(stderr, "spry eval: unexpected argument '%s'\n", argv[i]);
      return free(user_sets), usage(stderr), 2;
    }
  }
  if (!weights) return free(user_sets), usage(stderr), 2;

  /* The run's config: given, or the one stored in the checkpoint. */
  char **sets = sp_xcalloc((size_t)n_user_sets + 8, sizeof(char *));
  int n_sets = 0;
  char set_data[1100], set_format[64], set_backend[64], set_boxes[1100];
  if (data) {
    snprintf(set_data, sizeof set_data, "data.path=%s", data);
    sets[n_sets++] = set_data;
    sets[n_sets++] = "data.split=none";
  }
  if (format) snprintf(set_format, sizeof set_format, "data.format=%s", format), sets[n_sets++] = set_format;
  if (backend) snprintf(set_backend, sizeof set_backend, "backend=%s", backend), sets[n_sets++] = set_backend;
  if (boxes) {
    snprintf(set_boxes, sizeof set_boxes, "data.boxes=%s", boxes);
    sets[n_sets++] = "data.box=file";
    sets[n_sets++] = set_boxes;
  }
  /* eval scores the validation cache: a box source asked for applies to it.
   * A run trained on crops cut around the true points is scored on what a
   * user has (sp_kp_val_box: the detector's boxes) unless asked otherwise. */
  char set_val_box[64];
  if (boxes) sets[n_sets++] = "data.val_box=file";
  for (int i = 0; i < n_user_sets; i++) {
    sets[n_sets++] = user_sets[i];
    if (!strncmp(user_sets[i], "data.box=", 9)) {
      snprintf(set_val_box, sizeof set_val_box, "data.val_box=%s", user_sets[i] + 9);
      sets[n_sets++] = set_val_box;
    }
  }
  free(user_sets);
  sp_train_config cfg;
  int rc;
  if (config) {
    rc = sp_train_config_load(config, n_sets, sets, &cfg, NULL);
  } else {
    sp_st_file *f = sp_st_open(weights);
    const char *text = f ? sp_st_meta(f, "config") : NULL;
    if (f && !text) sp_error_set("%s: no config stored in the checkpoint; pass the run's CONFIG", weights);
    rc = text ? sp_train_config_parse(text, weights, n_sets, sets, &cfg, NULL) : -1;
    sp_st_close(f);
  }
  free(sets);
  if (rc != 0) {
    fprintf(stderr, "spry eval: %s\n", sp_last_error());
    return 2;
  }
  if (!strcmp(sp_kp_val_box(&cfg), "points"))
    fprintf(stderr, "spry eval: boxes from the true points: the figure is optimistic (no user has those boxes)\n");
  else if (!strcmp(cfg.data.box, "points"))
    fprintf(stderr, "spry eval: the run cut its crops around the true points; scoring on %s boxes, what a user has "
                    "(--set data.box=points gives the optimistic figure)\n", sp_kp_val_box(&cfg));
  char weights_dir[2048];
  snprintf(weights_dir, sizeof weights_dir, "%s", weights);
  /* An --out the user asked for must take the plot: checked before the
   * evaluation, not after it. Next to the weights it is a courtesy, and a
   * read-only model folder only earns a warning. */
  const int out_given = out != NULL;
  char *made = out_given ? sp_missing_dirs_top(out) : NULL; /* removed again if the evaluation fails */
  if (out_given && (sp_make_dirs(out) != 0 || access(out, W_OK) != 0)) {
    fprintf(stderr, "spry eval: --out %s: %s\n", out, access(out, F_OK) == 0 ? "not a writable folder" : sp_last_error());
    /* sp_make_dirs may have made parents before it failed (a last part whose
     * name is too long): they go again, as after any later failure. */
    if (made) sp_remove_empty_dirs(out, made);
    free(made);
    return 2;
  }
  if (!out) out = dirname(weights_dir);

  sp_kp_data d;
  memset(&d, 0, sizeof d);
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_graph *g = NULL;
  sp_backend be;
  cfg.augment.flip = 0; /* no augmentation in evaluation: no flip table needed */
  cfg.data.cache_file = 0;
  int data_ok = 0;
  if (sp_backend_parse(cfg.backend, &be) != 0 || !(data_ok = sp_kp_data_open(&cfg, NULL, 0, &d) == 0) ||
      !(g = sp_kp_build_graph(&cfg, &d, neighbours, &scale, &offset)) ||
      sp_checkpoint_load(weights, g, NULL, NULL, NULL, 0) != 0) {
    /* Other data than the run's: most often another point layout. */
    if (data && data_ok && g)
      sp_error_set("the model of %s does not fit the %d-point faces of %s (%s)", weights, d.k, data, sp_last_error());
    fprintf(stderr, "spry eval: %s\n", sp_last_error());
    sp_graph_free(g);
    sp_kp_data_free(&d);
    if (made) sp_remove_empty_dirs(out, made);
    free(made);
    return 1;
  }
  sp_loader_config lc = sp_loader_config_default(cfg.batch, cfg.data.size);
  lc.workers = cfg.workers;
  lc.shuffle = 0;
  lc.drop_last = 0;
  lc.aug = sp_augment_config_none(cfg.data.size);
  sp_loader *loader = sp_loader_create(d.val_cache, NULL, &lc);
  sp_kp_evaluator e = {g, be, &cfg, &d, scale, offset, NULL, NULL};
  float *pred = NULL, *gt = NULL;
  int n = 0;
  double loss;
  sp_kp_metrics m;
  double *per_face = NULL;
  rc = loader ? sp_kp_evaluate(&e, d.val_cache, loader, 0, 0, &pred, &gt, &n, &loss) : -1;
  if (rc == 0) {
    per_face = sp_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
    rc = sp_kp_metrics_compute(pred, gt, n, d.k, d.eyes.n_left ? &d.eyes : NULL, &m, per_face);
  }
  if (rc == 0 && per_face_csv && write_per_face(per_face_csv, &d, d.val_cache, pred, gt, per_face) != 0) rc = -1;
  if (rc == 0 && write_ced(out, per_face, n, d.eyes.n_left > 0) != 0) {
    if (out_given) rc = -1; /* reported below */
    else fprintf(stderr, "spry eval: warning: %s\n", sp_last_error());
  }
  if (rc == 0) {
    char t[5][32];
    fprintf(stderr, "spry eval: %d faces  mean error %.3f px (mean shape %.3f px)  NME inter-ocular %s  "
                    "inter-pupil %s  FR@0.08 %s  FR@0.10 %s  AUC@0.10 %s\n",
            n, m.mean_px, sp_kp_mean_shape_error(&d, d.val_cache), sp_metric_text(m.nme_io, 4, t[0], 32),
            sp_metric_text(m.nme_ip, 4, t[1], 32), sp_metric_text(m.fr_008, 3, t[2], 32),
            sp_metric_text(m.fr_010, 3, t[3], 32), sp_metric_text(m.auc_010, 4, t[4], 32));
    sp_json_buf b;
    sp_json_buf_init(&b);
    sp_json_obj_begin(&b);
    put_metric(&b, "mean_px", m.mean_px);
    put_metric(&b, "nme_io", m.nme_io);
    put_metric(&b, "nme_ip", m.nme_ip);
    put_metric(&b, "fr_008", m.fr_008);
    put_metric(&b, "fr_010", m.fr_010);
    put_metric(&b, "auc_010", m.auc_010);
    put_metric(&b, "val_loss", loss); /* the training loss on the set, as the video eval and metrics.jsonl name it */
    sp_json_key(&b, "count"), sp_json_int(&b, n);
    put_box_sources(&b, d.val_cache);
    sp_json_obj_end(&b);
    printf("%s\n", b.s);
    sp_json_buf_free(&b);
  } else {
    fprintf(stderr, "spry eval: %s\n", sp_last_error());
  }
  free(per_face);
  free(pred);
  free(gt);
  sp_kp_evaluator_free(&e);
  sp_loader_destroy(loader);
  sp_graph_free(g);
  sp_kp_data_free(&d);
  sp_plot_release_caches(); /* fontconfig's caches: leak-clean exits under ASan */
  if (rc != 0 && made) sp_remove_empty_dirs(out, made);
  free(made);
  return rc == 0 ? 0 : 1;
}
