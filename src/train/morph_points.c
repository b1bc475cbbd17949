/* Point files for `spry morph --points-a/--points-b` (see spry/train.h):
 * `spry predict`'s JSON (its first line, the largest face), a bare
 * [[x,y],...] array, or an annotation file (IMM .dat/.asf, iBUG .pts). Here
 * rather than in the CLI so that the fuzzer reaches it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/json.h"
#include "spry/train.h"

/* Far outside any photo, yet small enough that the morph's geometry stays
 * exact; infinite or NaN points were quietly moved to the image centre. */
#define MAX_COORD 1e6

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcasecmp(s + n - m, suffix);
}

static int check_points(const char *path, const float *pts, int k) {
  for (int i = 0; i < k; i++)
    if (!(fabsf(pts[2 * i]) <= MAX_COORD && fabsf(pts[2 * i + 1]) <= MAX_COORD))
      return sp_error_set("%s: point %d is (%g, %g), not a finite position in the photo", path, i, (double)pts[2 * i],
                          (double)pts[2 * i + 1]);
  return 0;
}

static int read_annotation(const char *path, int im_w, int im_h, float **pts, int *k) {
  sp_kp_sample s;
  memset(&s, 0, sizeof s);
  int rc = ends_with(path, ".dat")   ? sp_read_imm_dat(path, &s)
           : ends_with(path, ".asf") ? sp_read_imm_asf(path, &s)
                                     : sp_read_pts(path, &s);
  if (rc != 0) return -1;
  *k = s.k;
  *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)s.k);
  for (int i = 0; i < s.k; i++) {
    (*pts)[2 * i] = s.pts[2 * i] * (s.relative ? (float)im_w : 1.0f);
    (*pts)[2 * i + 1] = s.pts[2 * i + 1] * (s.relative ? (float)im_h : 1.0f);
  }
  sp_kp_sample_free(&s);
  return 0;
}

/* `spry predict`'s {"faces":[{"box":..,"points":...}]}: the largest face's
 * object; the document itself otherwise. NULL with an error when "faces" is
 * empty. */
static const sp_json *largest_face(const sp_json *doc, const char *path) {
  const sp_json *faces = doc->type == SP_JSON_OBJECT ? sp_json_get(doc, "faces") : NULL, *face = doc;
  if (!faces) return doc;
  double best_area = -1;
  for (size_t f = 0; faces->type == SP_JSON_ARRAY && f < sp_json_len(faces); f++) {
    const sp_json *box = sp_json_get(sp_json_at(faces, f), "box");
    double bw = 0, bh = 0;
    if (box && sp_json_len(box) == 4)
      sp_json_as_double(sp_json_at(box, 2), &bw), sp_json_as_double(sp_json_at(box, 3), &bh);
    if (bw * bh > best_area) best_area = bw * bh, face = sp_json_at(faces, f);
  }
  if (face == doc) sp_error_set("%s: no face in the first line (\"faces\" is empty)", path);
  return face == doc ? NULL : face;
}

static int points_of(const sp_json *arr, const char *path, float **pts, int *k) {
  int n = arr && arr->type == SP_JSON_ARRAY ? (int)sp_json_len(arr) : 0;
  if (n < 1) return sp_error_set("%s: no \"points\" array", path);
  if (n > SP_MAX_KEYPOINTS) return sp_error_set("%s: %d points; a face has at most %d", path, n, SP_MAX_KEYPOINTS);
  *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)n);
  for (int i = 0; i < n; i++) {
    const sp_json *p = sp_json_at(arr, (size_t)i);
    double x, y;
    if (p->type != SP_JSON_ARRAY || sp_json_len(p) != 2 || sp_json_as_double(sp_json_at(p, 0), &x) ||
        sp_json_as_double(sp_json_at(p, 1), &y)) {
      free(*pts), *pts = NULL;
      return sp_error_set("%s: point %d is not an [x, y] pair of numbers", path, i);
    }
    (*pts)[2 * i] = (float)x, (*pts)[2 * i + 1] = (float)y;
  }
  *k = n;
  return 0;
}

static int read_json(const char *path, float **pts, int *k) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(path, &buf, &len) != 0) return -1;
  /* `spry predict` prints one object per line: use the first. */
  size_t line = 0;
  while (line < len && buf[line] != '\n') line++;
  sp_json *doc = sp_json_parse((const char *)buf, line, 64u << 20);
  free(buf);
  if (!doc) return sp_error_set("%s: %s", path, sp_last_error());
  const sp_json *face = largest_face(doc, path);
  int rc = face ? points_of(face->type == SP_JSON_ARRAY ? face : sp_json_get(face, "points"), path, pts, k) : -1;
  sp_json_free(doc);
  return rc;
}

int sp_morph_points_read(const char *path, int im_w, int im_h, float **pts, int *k) {
  *pts = NULL;
  *k = 0;
  int rc = ends_with(path, ".dat") || ends_with(path, ".asf") || ends_with(path, ".pts")
               ? read_annotation(path, im_w, im_h, pts, k)
               : read_json(path, pts, k);
  if (rc == 0 && check_points(path, *pts, *k) != 0) rc = -1;
  if (rc != 0) {
    free(*pts);
    *pts = NULL;
    *k = 0;
  }
  return rc;
}
