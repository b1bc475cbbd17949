/* IMM face database annotations: the original .asf (relative coordinates,
 * '#' comment header, host image name at the end) and the pixel .dat variant
 * (lines "idx x y", idx 1-based). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

/* The image next to an annotation: same base name, first existing extension. */
static char *sibling_image(const char *ann_path) {
  static const char *exts[] = {".jpg", ".jpeg", ".png", ".JPG", ".PNG", ".bmp"};
  for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
    char *p = sp_path_with_ext(ann_path, exts[i]);
    if (sp_file_exists(p)) return p;
    free(p);
  }
  return sp_path_with_ext(ann_path, ".jpg"); /* missing: reported when decoding */
}

static int is_blank_or_comment(const char *line) {
  while (*line == ' ' || *line == '\t') line++;
  return *line == '#' || *line == '\n' || *line == '\r' || *line == 0;
}

int sp_read_imm_asf(const char *path, sp_kp_sample *out) {
  FILE *f = sp_ann_open(path, out);
  if (!f) return -1;
  char line[1024];
  int count = -1, got = 0;
  char host[512] = "";
  while (fgets(line, sizeof line, f)) {
    if (is_blank_or_comment(line)) continue;
    if (count < 0) {
      char *end;
      long v = strtol(line, &end, 10);
      if (end == line || v <= 0) {
        fclose(f);
        return sp_error_set("%s: expected the number of points, got '%.40s'", path, line);
      }
      if (sp_ann_alloc_points(out, v, path, NULL)) {
        fclose(f);
        return -1;
      }
      count = (int)v;
      out->k = count;
      continue;
    }
    if (got < count) {
      int pathno, type, ptno, from, to;
      float x, y;
      if (sscanf(line, "%d %d %f %f %d %d %d", &pathno, &type, &x, &y, &ptno, &from, &to) != 7) {
        fclose(f);
        sp_kp_sample_free(out);
        return sp_error_set("%s: bad point line %d: '%.60s'", path, got + 1, line);
      }
      out->pts[2 * got] = x;
      out->pts[2 * got + 1] = y;
      got++;
      continue;
    }
    if (!host[0]) sscanf(line, "%511s", host);
  }
  fclose(f);
  if (count < 0 || got != count) {
    sp_kp_sample_free(out);
    return sp_error_set("%s: expected %d points, found %d", path, count, got);
  }
  out->relative = 1;
  if (host[0]) {
    char *dir = sp_path_dirname(path);
    out->image = sp_path_join(dir, host);
    free(dir);
  } else {
    out->image = sibling_image(path);
  }
  return 0;
}

int sp_read_imm_dat(const char *path, sp_kp_sample *out) {
  FILE *f = sp_ann_open(path, out);
  if (!f) return -1;
  char line[512];
  int n = 0, cap = 64;
  float *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)cap);
  int lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (is_blank_or_comment(line)) continue;
    int idx;
    float x, y;
    char extra;
    int fields = sscanf(line, "%d %f %f %c", &idx, &x, &y, &extra);
    if (fields != 3 || idx != n + 1) {
      fclose(f);
      free(pts);
      return sp_error_set("%s: line %d is not 'idx x y' with idx %d", path, lineno, n + 1);
    }
    if (n == SP_MAX_KEYPOINTS) {
      /* A face has at most SP_MAX_KEYPOINTS points: more is another kind of
       * file, and reading it all would only end in "no keypoints". */
      fclose(f);
      free(pts);
      return sp_error_set("%s: more than %d points (line %d); a face's annotation has at most %d", path,
                          SP_MAX_KEYPOINTS, lineno, SP_MAX_KEYPOINTS);
    }
    if (n == cap) {
      cap *= 2;
      pts = sp_xrealloc(pts, sizeof(float) * 2 * (size_t)cap);
    }
    pts[2 * n] = x;
    pts[2 * n + 1] = y;
    n++;
  }
  fclose(f);
  if (n == 0) {
    free(pts);
    return sp_error_set("%s: no points", path);
  }
  out->k = n;
  out->pts = pts;
  out->image = sibling_image(path);
  return 0;
}
