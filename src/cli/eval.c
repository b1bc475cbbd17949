/* `spry eval --weights W [--data DIR] [--format F] [--boxes FILE] [--set k=v ...] [CONFIG]`:
 * accuracy of a keypoint checkpoint (sp_kp_eval_checkpoint) on its run's
 * validation split or on any annotated folder; video checkpoints go to
 * eval_video.c. The last line of output is one JSON object. */
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/cli_video.h"
#include "io/json.h"
#include "spry/plot.h"
#include "spry/train.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: spry eval --weights W.safetensors [--data DIR] [--format F] [--boxes FILE.csv] [--set key=value ...]\n"
      "                 [--per-face FILE.csv] [--out DIR] [--backend B] [CONFIG]\n"
      "  Scores a keypoint checkpoint on its run's validation split (config stored in the checkpoint,\n"
      "  or CONFIG), or on every image of DIR (--data; format auto|csv|coco|dlib|imm|asf|pts).\n"
      "  Faces are cut around the run's box source (data.box), never the true points unless asked:\n"
      "  --boxes FILE.csv  boxes from a file (image,x,y,w,h): data.box=file\n"
      "  --set data.box=detect|image|file|auto|points  (points: the figure is optimistic)\n"
      "  --per-face FILE.csv  one row per face: image, box source and box, mean error (px), NME\n"
      "  --out DIR  where ced.png goes (default: ced_eval.png, or ced_<DIR name>.png with --data, in the\n"
      "             checkpoint's folder; the run report's ced.png is left alone)\n"
      "  The last output line is JSON: mean_px, nme_io, nme_ip, fr_008, fr_010, auc_010 (fractions),\n"
      "  val_loss, count, box (where the boxes came from: image, detector, file, annotation, points;\n"
      "  boxes: the counts when mixed).\n"
      "  Video checkpoints (task: video): spry eval --task video --help.\n");
}

static void put(sp_json_buf *b, const char *key, double v) {
  sp_json_key(b, key);
  if (isfinite(v))
    sp_json_f64(b, v);
  else
    sp_json_null(b);
}

static void print_result(const sp_kp_eval_result *r) {
  char t[5][32];
  const sp_kp_metrics *m = &r->m;
  fprintf(stderr,
          "spry eval: %d faces (%s boxes)  mean error %.3f px (mean shape %.3f px)  NME inter-ocular %s  "
          "inter-pupil %s  FR@0.08 %s  FR@0.10 %s  AUC@0.10 %s\n",
          r->count, r->box, m->mean_px, r->mean_shape_px, sp_metric_text(m->nme_io, 4, t[0], 32),
          sp_metric_text(m->nme_ip, 4, t[1], 32), sp_metric_text(m->fr_008, 3, t[2], 32),
          sp_metric_text(m->fr_010, 3, t[3], 32), sp_metric_text(m->auc_010, 4, t[4], 32));
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  put(&b, "mean_px", m->mean_px);
  put(&b, "nme_io", m->nme_io);
  put(&b, "nme_ip", m->nme_ip);
  put(&b, "fr_008", m->fr_008);
  put(&b, "fr_010", m->fr_010);
  put(&b, "auc_010", m->auc_010);
  put(&b, "val_loss", r->val_loss); /* the training loss on the set, as metrics.jsonl names it */
  sp_json_key(&b, "count"), sp_json_int(&b, r->count);
  sp_json_key(&b, "box"), sp_json_str(&b, r->box);
  int kinds = 0;
  for (int s = 1; s < SP_BOXSRC_COUNT; s++) kinds += r->box_counts[s] > 0;
  if (kinds > 1) { /* a detector's misses fall back to a square from the points */
    sp_json_key(&b, "boxes"), sp_json_obj_begin(&b);
    for (int s = 1; s < SP_BOXSRC_COUNT; s++)
      if (r->box_counts[s]) sp_json_key(&b, sp_box_source_name((sp_box_source)s)), sp_json_int(&b, r->box_counts[s]);
    sp_json_obj_end(&b);
  }
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
}

/* --out: made (and taken back if the evaluation fails) before any work, so
 * an --out that cannot take the plot is an error at once. */
static int prepare_out(const char *out, char **made) {
  *made = sp_missing_dirs_top(out);
  if (sp_make_dirs(out) == 0 && access(out, W_OK) == 0) return 0;
  fprintf(stderr, "spry eval: --out %s: %s\n", out, access(out, F_OK) == 0 ? "not a writable folder" : sp_last_error());
  /* sp_make_dirs may have made parents before it failed (a last part whose
   * name is too long): they go again. */
  if (*made) sp_remove_empty_dirs(out, *made);
  free(*made);
  *made = NULL;
  return -1;
}

/* Where the CED plot goes: OUT/ced.png, else next to the weights under a
 * name of its own (never the run report's ced.png): ced_eval.png for the
 * run's split, ced_<folder>.png for --data. 1 when there is no writable
 * place (a read-only model folder: said, not an error). */
static int ced_path(const char *weights, const char *out, const char *data, char *path, size_t n) {
  if (out) return snprintf(path, n, "%s/ced.png", out), 0;
  char dir[2048], name[512] = "eval";
  snprintf(dir, sizeof dir, "%s", weights);
  if (data) {
    snprintf(name, sizeof name, "%s", data);
    size_t len = strlen(name);
    while (len > 1 && name[len - 1] == '/') name[--len] = 0;
    const char *base = strrchr(name, '/');
    memmove(name, base ? base + 1 : name, strlen(base ? base + 1 : name) + 1);
  }
  const char *d = dirname(dir);
  if (access(d, W_OK) != 0) {
    fprintf(stderr, "spry eval: %s is not writable: no CED plot (give --out DIR)\n", d);
    return 1;
  }
  snprintf(path, n, "%s/ced_%s.png", d, name);
  return 0;
}

int sp_cli_eval(int argc, char **argv) {
  if (sp_cli_eval_is_video(argc, argv)) return sp_cli_eval_video(argc, argv); /* --task video or its checkpoint */
  if (sp_arg_wants_help(argc, argv)) return usage(stdout), 0;
  sp_kp_eval_options o = {0};
  const char *weights = NULL, *out = NULL, *set = NULL;
  char **sets = sp_xcalloc((size_t)argc, sizeof(char *));
  int rc = 2;
  for (int i = 1; i < argc; i++) {
    int r;
    if ((r = sp_arg_str(argc, argv, &i, "--weights", &weights)) ||
        (r = sp_arg_str(argc, argv, &i, "--data", &o.data)) ||
        (r = sp_arg_str(argc, argv, &i, "--format", &o.format)) || (r = sp_arg_str(argc, argv, &i, "--out", &out)) ||
        (r = sp_arg_str(argc, argv, &i, "--backend", &o.backend)) ||
        (r = sp_arg_str(argc, argv, &i, "--boxes", &o.boxes)) ||
        (r = sp_arg_str(argc, argv, &i, "--per-face", &o.per_face_csv)) ||
        (r = sp_arg_str(argc, argv, &i, "--set", &set))) {
      if (r < 0) goto done;
      if (set && !strchr(set, '=')) {
        fprintf(stderr, "spry eval: --set wants key=value, got '%s'\n", set);
        goto done;
      }
      if (set) sets[o.n_sets++] = (char *)set, set = NULL;
    } else if (argv[i][0] != '-' && !o.config) {
      o.config = argv[i];
    } else {
      fprintf(stderr, "spry eval: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      goto done;
    }
  }
  if (!weights) {
    usage(stderr);
    goto done;
  }
  o.sets = sets;
  char *made = NULL, ced[2200];
  if (out && prepare_out(out, &made) != 0) goto done;
  if (!ced_path(weights, out, o.data, ced, sizeof ced)) o.ced_png = ced;
  sp_kp_eval_result r;
  int e = sp_kp_eval_checkpoint(weights, &o, &r);
  if (e != 0) {
    fprintf(stderr, "spry eval: %s\n", sp_last_error());
    if (made) sp_remove_empty_dirs(out, made);
    rc = e == -2 ? 2 : 1;
  } else {
    if (o.ced_png) fprintf(stderr, "spry eval: wrote %s\n", o.ced_png);
    if (o.per_face_csv) fprintf(stderr, "spry eval: wrote %s\n", o.per_face_csv);
    print_result(&r);
    rc = 0;
  }
  free(made);
  sp_plot_release_caches(); /* fontconfig's caches: leak-clean exits under ASan */
done:
  free(sets);
  return rc;
}
