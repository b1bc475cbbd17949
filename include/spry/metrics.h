/* Keypoint accuracy: mean pixel error, NME by inter-ocular and inter-pupil
 * distance, failure rates, AUC and the cumulative error distribution (CED). */
#ifndef SPRY_METRICS_H
#define SPRY_METRICS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The two eyes of a landmark scheme, as lists of point indices (contours).
 * Outer corner = the eye's point farthest from the other eye's centre; pupil
 * = mean of the eye's points. */
typedef struct {
  int n_left, n_right;
  int left[16], right[16];
} sp_eye_points;

/* iBUG-68: 36-41 and 42-47; IMM-58: 14-21 and 22-29 (1-based 14..29 in the
 * .asf numbering). Returns 0 when K has no known eyes (NME then undefined). */
int sp_eye_points_for_k(int k, sp_eye_points *out);

typedef struct {
  int count;             /* faces */
  double mean_px;        /* mean point-to-point distance, pixels of the original image */
  double nme_io;         /* mean over faces of (mean distance / inter-ocular distance); NaN without eyes */
  double nme_ip;         /* ... / inter-pupil distance */
  double fr_008, fr_010; /* fraction of faces with NME-IO above 0.08 / 0.10 */
  double auc_010;        /* area under the CED of NME-IO on [0, 0.10], normalised to 1 */
} sp_kp_metrics;

/* pred and gt: [n][k][2] in the same pixel units. per_face_nme (optional,
 * [n]) receives each face's NME-IO (or its mean px error without eyes). */
int sp_kp_metrics_compute(const float *pred, const float *gt, int n, int k, const sp_eye_points *eyes,
                          sp_kp_metrics *out, double *per_face_nme);
/* v with `decimals` decimals for people to read, or "n/a" when it is
 * undefined (NaN: the normalised errors of a layout with no eye points, such
 * as the nose tip alone). Writes buf and returns it. */
const char *sp_metric_text(double v, int decimals, char *buf, size_t n);
/* CED: fraction of faces with error <= t, at n_steps thresholds on [0, max]. */
void sp_ced_curve(const double *per_face, int n, double max, int n_steps, double *thresholds, double *fraction);
/* Faces a CED on [0, max] leaves off: error above max, or not finite. */
int sp_ced_faces_above(const double *per_face, int n, double max);
/* The CED figure of the run report and `spry eval`, w x h px: NME (inter-
 * ocular) up to 0.2 when have_eyes, else mean px error up to the largest; the
 * y axis is [0, 1] (fractions of faces) whatever the curve, and when faces lie
 * beyond the x range the legend says "N faces above the plotted range".
 * 0, or -1 with an error naming path. */
int sp_ced_png(const char *path, int w, int h, const double *per_face, int n, int have_eyes);

#ifdef __cplusplus
}
#endif
#endif
