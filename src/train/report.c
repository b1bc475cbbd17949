/* The run report: PNG figures and an index.html in the run directory, for a
 * person to look at: loss and validation curves, the best and worst
 * validation faces with predicted vs. true points, the CED, the ResUNet's
 * heatmaps for a few keypoints, and the first layer's filters. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/dist.h"
#include "spry/plot.h"
#include "spry/train.h"
#include "train/config_shared.h"
#include "train/metrics_log.h"
#include "train/trainer_internal.h"

typedef struct {
  double *epoch, *train, *val, *px, *base, *seconds;
  int n;
} history;

static void history_free(history *h) {
  free(h->epoch), free(h->train), free(h->val), free(h->px), free(h->base), free(h->seconds);
}

/* metrics.jsonl -> arrays (one row per epoch). */
static int read_history(const char *dir, history *h) {
  memset(h, 0, sizeof *h);
  static const char *const keys[6] = {"epoch", "train_loss", "val_loss", "val_mean_px", "val_mean_shape_px", "epoch_s"};
  double *cols[6];
  if (sp_metrics_log_read(dir, 6, keys, cols, &h->n) != 0) return -1;
  h->epoch = cols[0], h->train = cols[1], h->val = cols[2], h->px = cols[3], h->base = cols[4], h->seconds = cols[5];
  return 0;
}

/* Source pixels -> cache crop pixels of sample i (inverse of the crop). */
static void to_crop(const sp_cache *c, int i, const float *src, int k, float *dst) {
  sp_crop_rect r = sp_cache_crop_rect(c, i);
  for (int j = 0; j < k; j++) {
    dst[2 * j] = src[2 * j], dst[2 * j + 1] = src[2 * j + 1];
    sp_source_to_crop(r, c->size, &dst[2 * j], &dst[2 * j + 1]);
  }
}

/* Sample i's face box in crop pixels (edges scale like lengths); 0, or 1
 * when the box is the whole image (nothing worth drawing). */
static int box_in_crop(const sp_cache *c, int i, float *out) {
  if (c->box_src[i] == SP_BOXSRC_IMAGE) return 1;
  sp_crop_rect r = sp_cache_crop_rect(c, i);
  const float *b = c->box + (size_t)i * 4;
  out[0] = (float)((b[0] - r.x0) * c->size / r.w), out[1] = (float)((b[1] - r.y0) * c->size / r.h);
  out[2] = (float)(b[2] * c->size / r.w), out[3] = (float)(b[3] * c->size / r.h);
  return 0;
}

/* "detector 280, points 7 (data.box: detect)": where the validation faces'
 * boxes came from, and what the config asked for. */
static void box_sources_text(const sp_cache *c, const sp_train_config *cfg, char *out, size_t n) {
  int counts[SP_BOXSRC_COUNT];
  sp_cache_box_counts(c, counts);
  size_t o = 0;
  for (int b = 1; b < SP_BOXSRC_COUNT && o < n; b++)
    if (counts[b])
      o += (size_t)snprintf(out + o, n - o, "%s%s %d", o ? ", " : "", sp_box_source_name((sp_box_source)b), counts[b]);
  if (o < n) snprintf(out + o, n - o, " (data.box: %s)", sp_kp_val_box(cfg));
}

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static int cmp_err(const void *a, const void *b, void *ctx) {
  const double *e = ctx;
  double x = e[*(const int *)a], y = e[*(const int *)b];
  return x < y ? -1 : x > y;
}

static int face_grid(const char *path, const char *title, const sp_kp_data *d, const sp_cache *c, const int *order,
                     int n, const float *pred, const float *gt, const double *err, char captions[][48]) {
  sp_grid_cell cells[8];
  float *pts = sp_xmalloc(sizeof(float) * 4 * (size_t)d->k * 8), boxes[8][4];
  for (int i = 0; i < n; i++) {
    int f = order[i], src = f; /* evaluation order = cache order (no shuffle) */
    float *p = pts + (size_t)i * 4 * d->k, *g = p + 2 * d->k;
    to_crop(c, src, pred + (size_t)f * d->k * 2, d->k, p);
    to_crop(c, src, gt + (size_t)f * d->k * 2, d->k, g);
    snprintf(captions[i], 48, "%.1f px", err[f]);
    cells[i] = (sp_grid_cell){c->pixels + (size_t)src * c->size * c->size * c->channels,
                              c->size,
                              c->size,
                              c->channels,
                              p,
                              g,
                              d->k,
                              captions[i],
                              box_in_crop(c, src, boxes[i]) ? NULL : boxes[i]};
  }
  int rc = sp_keypoint_grid_png(path, title, 4, n, cells, 192, 0);
  free(pts);
  return rc;
}

/* Heatmaps of the first validation face for a few telling keypoints. */
static int heatmap_figure(const char *path, sp_kp_evaluator *e, const sp_cache *c) {
  const sp_train_config *cfg = e->cfg;
  int S = cfg->data.size, C = cfg->data.channels, k = e->data->k;
  sp_input_shape in[2] = {{"image", sp_shape4(1, C, S, S)}, {"points", sp_shape3(1, k, 2)}};
  sp_plan *p = sp_plan_new(e->g, 2, in, e->backend, 0, 0);
  if (!p) return -1;
  if (!sp_plan_output(p, "heatmaps")) {
    sp_plan_free(p);
    return 1; /* a regression model: nothing to draw */
  }
  sp_image crop = {c->size, c->size, c->channels, c->pixels};
  uint8_t *hwc = sp_xmalloc((size_t)S * S * C), *chw = sp_xmalloc((size_t)S * S * C);
  sp_crop_rect whole = sp_crop_rect_whole(c->size, c->size);
  sp_image_crop(&crop, whole, S, 0, hwc);
  sp_image_crop(&crop, whole, S, 1, chw);
  sp_normalize_u8(chw, 1, C, (int64_t)S * S, cfg->data.mean, cfg->data.std, SP_F32, sp_plan_input(p, "image")->data);
  sp_plan_forward(p);
  const float *logits = sp_plan_output(p, "heatmaps")->data;
  const float *pts = sp_plan_output(p, "points_out")->data;
  /* iBUG-68: outer eye corners, nose tip, mouth centre (the seed's figure). */
  int pick68[4] = {36, 45, 30, 66}, pick[4], n = k < 4 ? k : 4;
  const char *names68[4] = {"eye corner", "eye corner", "nose tip", "mouth"};
  char names[4][32];
  const char *captions[4];
  float *maps[4], marks[8], truth[8];
  /* The face's labelled points, from the cache's pixels to the S x S input. */
  const double zoom = (double)c->size / S, cc = (c->size - 1) * 0.5, cs = (S - 1) * 0.5;
  for (int i = 0; i < n; i++) {
    pick[i] = k == 68 ? pick68[i] : i * k / n;
    snprintf(names[i], sizeof names[i], "%s (%d)", k == 68 ? names68[i] : "point", pick[i]);
    captions[i] = names[i];
    const float *h = logits + (size_t)pick[i] * S * S;
    maps[i] = sp_xmalloc(sizeof(float) * (size_t)S * S);
    float mx = -INFINITY;
    for (int j = 0; j < S * S; j++) mx = fmaxf(mx, h[j]);
    double sum = 0;
    for (int j = 0; j < S * S; j++) sum += maps[i][j] = expf(h[j] - mx);
    for (int j = 0; j < S * S; j++) maps[i][j] = (float)(maps[i][j] / sum);
    marks[2 * i] = (pts[2 * pick[i]] - e->offset) / e->scale;
    marks[2 * i + 1] = (pts[2 * pick[i] + 1] - e->offset) / e->scale;
    const float *g = c->points + (size_t)pick[i] * 2; /* face 0 */
    int seen = !c->vis || c->vis[pick[i]];
    truth[2 * i] = seen ? (float)((g[0] - cc) / zoom + cs) : NAN;
    truth[2 * i + 1] = seen ? (float)((g[1] - cc) / zoom + cs) : NAN;
  }
  int rc = sp_heatmaps_png(path, hwc, S, S, C, n, (const float *const *)maps, captions, marks, truth, 192);
  for (int i = 0; i < n; i++) free(maps[i]);
  free(hwc);
  free(chw);
  sp_plan_free(p);
  return rc;
}

/* The model as a user runs it: `spry predict` on the first validation photo
 * as it is on disk (no box; faces found the way the run found them), drawn
 * on the colour photo. 1 when there is nothing to draw from. */
static int photo_figure(const char *dir, const char *path, const sp_kp_data *d, const sp_cache *c, char *caption,
                        size_t n) {
  char weights[1200];
  snprintf(weights, sizeof weights, "%s/best.safetensors", dir);
  if (access(weights, R_OK) != 0) snprintf(weights, sizeof weights, "%s/last.safetensors", dir);
  if (access(weights, R_OK) != 0 || c->n == 0) return 1;
  const sp_dataset *ds = d->val_cache == d->train_cache ? &d->train : &d->val;
  const char *image = ds->s[c->source[0]].image;
  sp_kp_predictor *p = sp_kp_predictor_open(weights, NULL);
  if (!p) return -1;
  sp_kp_face *faces = NULL;
  int k = sp_kp_predictor_keypoints(p), rc = -1, nf = sp_kp_predict_file(p, image, NULL, &faces);
  sp_image im = {0, 0, 0, NULL};
  if (nf >= 0 && sp_image_load(image, 3, &im) == 0) {
    float *boxes = sp_xmalloc(sizeof(float) * 4 * (size_t)(nf ? nf : 1));
    const float **pts = sp_xmalloc(sizeof(float *) * (size_t)(nf ? nf : 1));
    for (int f = 0; f < nf; f++) memcpy(boxes + 4 * f, faces[f].box, sizeof(float) * 4), pts[f] = faces[f].pts;
    rc = sp_draw_faces_png(path, im.px, im.w, im.h, im.c, nf, boxes, pts, k);
    free(boxes);
    free(pts);
  }
  snprintf(caption, n,
           "`spry predict --weights %s %s`: the photo as it is on disk, no box given; %s. %d face(s) found.",
           base_name(weights), base_name(image),
           sp_kp_predictor_box_mode(p) == SP_BOX_IMAGE ? "the model reads the whole photo"
                                                       : "faces from the face detector (yellow frames)",
           nf > 0 ? nf : 0);
  sp_image_free(&im);
  sp_kp_faces_free(faces, nf);
  sp_kp_predictor_close(p);
  return rc;
}

static int first_filters(const char *path, sp_graph *g) {
  for (int i = 0; i < sp_graph_param_count(g); i++) {
    const sp_tensor *w = sp_graph_param_value(g, i);
    if (w->shape.ndim == 4 && sp_graph_param_grad(g, i))
      return sp_filters_png(path, w->data, (int)w->shape.d[0], (int)w->shape.d[1], (int)w->shape.d[2],
                            (int)w->shape.d[3], 40);
  }
  return 1;
}

/* The report being written: its folder, figures so far, and whether any failed. */
typedef struct {
  const char *dir;
  sp_report_item items[12];
  int n_items, rc;
  char path[1200];
} report;

static const char *in_dir(report *r, const char *file) {
  snprintf(r->path, sizeof r->path, "%s/%s", r->dir, file);
  return r->path;
}

static void add_item(report *r, const char *title, const char *file, const char *caption) {
  if (r->n_items < (int)(sizeof r->items / sizeof r->items[0]))
    r->items[r->n_items++] = (sp_report_item){title, file, caption};
}

static void curves(report *r, const history *h) {
  sp_series loss[2] = {{"train", h->epoch, h->train, h->n}, {"validation", h->epoch, h->val, h->n}};
  r->rc |= sp_plot_lines(in_dir(r, "loss.png"), 800, 480, "Loss", "epoch", "loss", 2, loss, 1);
  add_item(r, "Loss", "loss.png", "Training loss (mean over the epoch) and validation loss.");
  sp_series err[2] = {{"model", h->epoch, h->px, h->n}, {"training mean shape", h->epoch, h->base, h->n}};
  r->rc |= sp_plot_lines(in_dir(r, "val_error.png"), 800, 480, "Validation error", "epoch",
                         "mean error (px of the original image)", 2, err, 0);
  add_item(r, "Validation error", "val_error.png",
           "Mean point error on the validation faces, against the floor of predicting the training mean shape in "
           "every crop.");
}

/* Mean point error of each face (px of the source image). */
static double *face_errors(const float *pred, const float *gt, int n, int k) {
  double *px = sp_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int j = 0; j < k; j++)
      s += hypot(pred[((size_t)i * k + j) * 2] - gt[((size_t)i * k + j) * 2],
                 pred[((size_t)i * k + j) * 2 + 1] - gt[((size_t)i * k + j) * 2 + 1]);
    px[i] = s / k;
  }
  return px;
}

static void best_and_worst(report *r, const sp_kp_data *d, const sp_cache *c, const float *pred, const float *gt,
                           int n) {
  double *px = face_errors(pred, gt, n, d->k);
  int *order = sp_xmalloc(sizeof(int) * (size_t)(n ? n : 1)), worst[8];
  for (int i = 0; i < n; i++) order[i] = i;
  qsort_r(order, (size_t)n, sizeof(int), cmp_err, px);
  char captions[8][48];
  const int shown = n < 8 ? n : 8;
  for (int i = 0; i < shown; i++) worst[i] = order[n - 1 - i];
  r->rc |= face_grid(in_dir(r, "best.png"), "Best validation faces (green: truth, red: prediction)", d, c, order, shown,
                     pred, gt, px, captions);
  r->rc |= face_grid(in_dir(r, "worst.png"), "Worst validation faces (green: truth, red: prediction)", d, c, worst,
                     shown, pred, gt, px, captions);
  add_item(r, "Best validation faces", "best.png",
           "Mean error per face under each crop; the yellow frame is the face box the model was given (none when "
           "it saw the whole photo).");
  add_item(r, "Worst validation faces", "worst.png", NULL);
  free(px);
  free(order);
}

static void ced(report *r, const double *per_face, int n, int have_eyes) {
  r->rc |= sp_ced_png(in_dir(r, "ced.png"), 800, 480, per_face, n, have_eyes);
  add_item(r, "Cumulative error distribution", "ced.png", NULL);
}

static void model_figures(report *r, sp_kp_evaluator *e, const sp_cache *c) {
  int hm = heatmap_figure(in_dir(r, "heatmaps.png"), e, c);
  if (hm == 0)
    add_item(r, "Heatmaps", "heatmaps.png",
             "The model's probability map for a few keypoints of the first validation face. White crosshair: the "
             "model's point, the map's expected value (soft-argmax); green ring: the labelled (true) point.");
  r->rc |= hm < 0;
  static char photo_caption[2600];
  int ph = photo_figure(r->dir, in_dir(r, "photo.png"), e->data, c, photo_caption, sizeof photo_caption);
  if (ph == 0)
    add_item(r, "Prediction on a photo", "photo.png", photo_caption);
  else if (ph < 0)
    fprintf(stderr, "spry: report: photo.png: %s\n", sp_last_error());
  if (first_filters(in_dir(r, "filters.png"), e->g) == 0)
    add_item(r, "First-layer filters", "filters.png",
             "The first convolution's filters, one tile per output channel, each stretched to its own range (black "
             "its smallest weight, white its largest); colour for RGB input, grey for one channel. Smooth, "
             "oriented tiles are edge and blob detectors; noise-like tiles have learnt little.");
}

/* The run's facts and the last validation's figures, as a table. */
static void index_page(report *r, sp_kp_evaluator *e, const history *h, const sp_kp_metrics *m, int n) {
  const sp_train_config *cfg = e->cfg;
  const sp_cache *c = e->data->val_cache;
  double best = INFINITY, total_s = 0;
  int best_epoch = 0;
  for (int i = 0; i < h->n; i++) {
    if (isfinite(h->px[i]) && h->px[i] < best) best = h->px[i], best_epoch = (int)h->epoch[i];
    if (isfinite(h->seconds[i])) total_s += h->seconds[i];
  }
  enum { ROWS = 13 };
  char v[ROWS][160];
  const char *keys[ROWS] = {"model",
                            "data",
                            "face boxes",
                            "training / validation faces",
                            "epochs",
                            "batch, optimizer",
                            "precision, backend",
                            "training time",
                            "best validation error (px)",
                            "last validation error (px)",
                            "mean shape baseline (px)",
                            "NME inter-ocular / inter-pupil",
                            "AUC@0.10"};
  const char *vals[ROWS];
  for (int i = 0; i < ROWS; i++) vals[i] = v[i];
  char io[32], ip[32];
  snprintf(v[0], 160, "%s, %d keypoints, %d x %d x %d input", cfg->model, e->data->k, cfg->data.channels,
           cfg->data.size, cfg->data.size);
  snprintf(v[1], 160, "%s", cfg->data.path);
  box_sources_text(c, cfg, v[2], 160);
  snprintf(v[3], 160, "%d / %d", e->data->train_cache->n, n);
  snprintf(v[4], 160, "%d of %d", h->n, cfg->epochs);
  snprintf(v[5], 160, "%d, %s lr %g", cfg->batch, sp_opt_kind_name(cfg->optimizer.kind), cfg->lr);
  snprintf(v[6], 160, "%s, %s", sp_config_precision_text(cfg->precision, cfg->backend), cfg->backend);
  snprintf(v[7], 160, "%.0f s", total_s);
  snprintf(v[8], 160, "%.3f (epoch %d)", best, best_epoch);
  snprintf(v[9], 160, "%.3f", m->mean_px);
  snprintf(v[10], 160, "%.3f", sp_kp_mean_shape_error(e->data, c));
  snprintf(v[11], 160, "%s / %s", sp_metric_text(m->nme_io, 4, io, sizeof io),
           sp_metric_text(m->nme_ip, 4, ip, sizeof ip));
  sp_metric_text(m->auc_010, 4, v[12], 160);
  char title[256];
  snprintf(title, sizeof title, "spry run: %s, faces cut around %s boxes", cfg->model,
           sp_box_source_name(sp_kp_box_source(c)));
  r->rc |= sp_report_index_html(in_dir(r, "index.html"), title, ROWS, keys, vals, r->n_items, r->items);
}

int sp_kp_report(const char *dir, sp_kp_evaluator *e, sp_loader *val_loader, int over_ranks) {
  const sp_kp_data *d = e->data;
  const sp_cache *c = d->val_cache;
  float *pred = NULL, *gt = NULL;
  int n = 0;
  double vloss;
  /* First, as the ranks share it; then rank 0 alone writes. */
  if (sp_kp_evaluate(e, c, val_loader, 0, over_ranks, &pred, &gt, &n, &vloss) != 0) return -1;
  history h;
  int rc = over_ranks && sp_dist_rank() > 0 ? 1 : read_history(dir, &h);
  if (rc != 0) {
    free(pred);
    free(gt);
    return rc > 0 ? 0 : -1;
  }
  report r = {.dir = dir};
  curves(&r, &h);
  sp_kp_metrics m;
  double *per_face = sp_xmalloc(sizeof(double) * (size_t)(n ? n : 1));
  sp_kp_metrics_compute(pred, gt, n, d->k, d->eyes.n_left ? &d->eyes : NULL, &m, per_face);
  best_and_worst(&r, d, c, pred, gt, n);
  ced(&r, per_face, n, d->eyes.n_left > 0);
  model_figures(&r, e, c);
  index_page(&r, e, &h, &m, n);
  free(pred), free(gt), free(per_face);
  history_free(&h);
  return r.rc ? -1 : 0;
}
