/* Face boxes: where a sample's box comes from (data.box), their geometry
 * (IoU, the points' extent, the detector-like fallback square) and the one
 * sanity check every box passes before a crop is cut around it. */
#include <math.h>
#include <string.h>

#include "data/data_internal.h"

static const char *const mode_names[] = {"auto", "image", "detect", "file", "points"};
static const char *const source_names[] = {"none", "image", "annotation", "file", "detector", "points"};

const char *sp_box_mode_name(sp_box_mode m) { return (unsigned)m < 5 ? mode_names[m] : "?"; }

int sp_box_mode_parse(const char *s, sp_box_mode *m) {
  for (int i = 0; i < 5; i++)
    if (!strcmp(s, mode_names[i])) return *m = (sp_box_mode)i, 0;
  return sp_error_set("box source '%s': expected auto, image, detect, file or points", s);
}

const char *sp_box_source_name(sp_box_source s) { return (unsigned)s < SP_BOXSRC_COUNT ? source_names[s] : "?"; }

double sp_box_iou(const float a[4], const float b[4]) {
  double ix = fmin(a[0] + a[2], b[0] + b[2]) - fmax(a[0], b[0]);
  double iy = fmin(a[1] + a[3], b[1] + b[3]) - fmax(a[1], b[1]);
  if (!(ix > 0 && iy > 0)) return 0;
  double inter = ix * iy, uni = (double)a[2] * a[3] + (double)b[2] * b[3] - inter;
  return uni > 0 ? inter / uni : 0;
}

int sp_points_box(const float *pts, const uint8_t *vis, int k, float box[4]) {
  float lx = INFINITY, ly = INFINITY, hx = -INFINITY, hy = -INFINITY;
  for (int i = 0; i < k; i++) {
    if (vis && !vis[i]) continue;
    lx = fminf(lx, pts[2 * i]), hx = fmaxf(hx, pts[2 * i]);
    ly = fminf(ly, pts[2 * i + 1]), hy = fmaxf(hy, pts[2 * i + 1]);
  }
  if (!(hx >= lx && hy >= ly)) return -1;
  /* One point (a nose-tip set) or a line still spans a pixel. */
  box[0] = lx, box[1] = ly, box[2] = fmaxf(hx - lx, 1.f), box[3] = fmaxf(hy - ly, 1.f);
  return 0;
}

void sp_box_like_detector(const float pb[4], float box[4]) {
  float side = fmaxf(pb[2], pb[3]);
  box[0] = pb[0] + pb[2] * 0.5f - side * 0.5f;
  box[1] = pb[1] + pb[3] * 0.5f - side * 0.5f + 0.1f * side;
  box[2] = box[3] = side;
}

int sp_box_check(const float b[4], int w, int h) {
  for (int i = 0; i < 4; i++)
    if (!isfinite(b[i]) || fabsf(b[i]) > 1e6f)
      return sp_error_set("box %g,%g,%gx%g is not finite or absurdly large", b[0], b[1], b[2], b[3]);
  if (!(b[2] > 0 && b[3] > 0)) return sp_error_set("box %g,%g,%gx%g has no area", b[0], b[1], b[2], b[3]);
  /* A box that misses the image would "find" a face in the black padding. */
  if (!(b[0] < w && b[1] < h && b[0] + b[2] > 0 && b[1] + b[3] > 0))
    return sp_error_set("box %g,%g,%gx%g lies outside the %dx%d image", b[0], b[1], b[2], b[3], w, h);
  return 0;
}

int sp_face_match(const sp_face *faces, int n, const float points_box[4]) {
  int best = -1;
  double best_iou = -1;
  for (int i = 0; i < n; i++) { /* ties go to the more confident, earlier face */
    double iou = sp_box_iou(faces[i].box, points_box);
    if (iou >= SP_DETECT_MIN_IOU && iou > best_iou) best_iou = iou, best = i;
  }
  return best;
}
