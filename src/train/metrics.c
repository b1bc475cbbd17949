/* Keypoint metrics (see include/spry/metrics.h). AUC and failure rates follow
 * the 300-W convention: per-face NME with the inter-ocular (outer corners)
 * normaliser, CED integrated up to the threshold. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"
#include "spry/metrics.h"
#include "spry/plot.h"

int sp_eye_points_for_k(int k, sp_eye_points *out) {
  memset(out, 0, sizeof *out);
  int l0, r0, n;
  if (k == 68)
    l0 = 36, r0 = 42, n = 6; /* iBUG 300-W, 0-based */
  else if (k == 58)
    l0 = 13, r0 = 21, n = 8; /* IMM: .asf points 14-21 and 22-29 */
  else
    return 0;
  out->n_left = out->n_right = n;
  for (int i = 0; i < n; i++) out->left[i] = l0 + i, out->right[i] = r0 + i;
  return 1;
}

static void centre(const float *p, const int *idx, int n, double *cx, double *cy) {
  *cx = *cy = 0;
  for (int i = 0; i < n; i++) *cx += p[2 * idx[i]], *cy += p[2 * idx[i] + 1];
  *cx /= n;
  *cy /= n;
}

/* The eye point farthest from the other eye's centre: the outer corner,
 * whichever way the face is mirrored. */
static void outer(const float *p, const int *idx, int n, double ox, double oy, double *x, double *y) {
  double best = -1;
  for (int i = 0; i < n; i++) {
    double dx = p[2 * idx[i]] - ox, dy = p[2 * idx[i] + 1] - oy, d = dx * dx + dy * dy;
    if (d > best) best = d, *x = p[2 * idx[i]], *y = p[2 * idx[i] + 1];
  }
}

int sp_kp_metrics_compute(const float *pred, const float *gt, int n, int k, const sp_eye_points *eyes,
                          sp_kp_metrics *out, double *per_face_nme) {
  memset(out, 0, sizeof *out);
  if (n <= 0 || k <= 0) return sp_error_set("metrics: nothing to evaluate (%d faces, %d points)", n, k);
  int have_eyes = eyes && eyes->n_left > 0 && eyes->n_right > 0;
  double *nme = sp_xmalloc(sizeof(double) * (size_t)n);
  double sum_px = 0, sum_io = 0, sum_ip = 0;
  for (int f = 0; f < n; f++) {
    const float *p = pred + (size_t)f * k * 2, *g = gt + (size_t)f * k * 2;
    double face = 0;
    for (int i = 0; i < k; i++) face += hypot((double)p[2 * i] - g[2 * i], (double)p[2 * i + 1] - g[2 * i + 1]);
    face /= k;
    sum_px += face;
    nme[f] = face;
    if (have_eyes) {
      double lx, ly, rx, ry, olx = 0, oly = 0, orx = 0, ory = 0;
      centre(g, eyes->left, eyes->n_left, &lx, &ly);
      centre(g, eyes->right, eyes->n_right, &rx, &ry);
      outer(g, eyes->left, eyes->n_left, rx, ry, &olx, &oly);
      outer(g, eyes->right, eyes->n_right, lx, ly, &orx, &ory);
      double io = hypot(olx - orx, oly - ory), ip = hypot(lx - rx, ly - ry);
      nme[f] = io > 0 ? face / io : INFINITY;
      sum_io += nme[f];
      sum_ip += ip > 0 ? face / ip : INFINITY;
    }
  }
  out->count = n;
  out->mean_px = sum_px / n;
  if (have_eyes) {
    out->nme_io = sum_io / n;
    out->nme_ip = sum_ip / n;
    int f8 = 0, f10 = 0;
    /* Written as "not within": a face whose error is NaN (a diverged model)
     * is a failure, not a success. */
    for (int f = 0; f < n; f++) f8 += !(nme[f] <= 0.08), f10 += !(nme[f] <= 0.10);
    out->fr_008 = (double)f8 / n;
    out->fr_010 = (double)f10 / n;
    /* AUC of the CED on [0, 0.1]: mean over faces of max(0, 1 - nme/0.1),
     * which is the exact integral of the step-function CED. */
    double auc = 0;
    for (int f = 0; f < n; f++) auc += nme[f] < 0.10 ? 1.0 - nme[f] / 0.10 : 0.0;
    out->auc_010 = auc / n;
  } else {
    out->nme_io = out->nme_ip = out->fr_008 = out->fr_010 = out->auc_010 = NAN;
  }
  if (per_face_nme) memcpy(per_face_nme, nme, sizeof(double) * (size_t)n);
  free(nme);
  return 0;
}

const char *sp_metric_text(double v, int decimals, char *buf, size_t n) {
  if (isnan(v))
    snprintf(buf, n, "n/a");
  else
    snprintf(buf, n, "%.*f", decimals, v);
  return buf;
}

void sp_ced_curve(const double *per_face, int n, double max, int n_steps, double *thresholds, double *fraction) {
  for (int s = 0; s < n_steps; s++) {
    double t = max * s / (n_steps > 1 ? n_steps - 1 : 1);
    int below = 0;
    for (int f = 0; f < n; f++) below += per_face[f] <= t;
    thresholds[s] = t;
    fraction[s] = n ? (double)below / n : 0;
  }
}

int sp_ced_faces_above(const double *per_face, int n, double max) {
  int above = 0;
  for (int f = 0; f < n; f++) above += !(per_face[f] <= max);
  return above;
}

int sp_ced_png(const char *path, int w, int h, const double *per_face, int n, int have_eyes) {
  enum { STEPS = 101 };
  double t[STEPS], frac[STEPS], max = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(per_face[i])) max = fmax(max, per_face[i]);
  /* NME has a conventional range (failures start at 0.08-0.10); pixels do
   * not, so that chart spans every face. */
  if (have_eyes)
    max = 0.2;
  else if (!(max > 0))
    max = 1;
  sp_ced_curve(per_face, n, max, STEPS, t, frac);
  int above = sp_ced_faces_above(per_face, n, max);
  char note[96] = "";
  /* A curve flat at 0 reads as "no data" unless the chart says where the
   * faces went. */
  if (above > 0) snprintf(note, sizeof note, "%d face%s above the plotted range", above, above == 1 ? "" : "s");
  sp_series s = {"validation", t, frac, STEPS};
  return sp_plot_lines_opt(path, w, h, "Cumulative error distribution",
                           have_eyes ? "NME (inter-ocular)" : "mean error (px)", "fraction of faces", 1, &s,
                           &(sp_plot_lines_options){.y_min = 0, .y_max = 1, .note = note});
}
