/* What the line-based annotation readers (ann_imm.c, ann_pts.c) do alike:
 * open the file for a fresh sample, and take a point count within the limit
 * every face's annotation has (data_internal.h). */
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

FILE *sp_ann_open(const char *path, sp_kp_sample *out) {
  memset(out, 0, sizeof *out);
  out->identity = -1;
  FILE *f = fopen(path, "r");
  if (!f) sp_error_set("%s: cannot open", path);
  return f;
}

int sp_ann_alloc_points(sp_kp_sample *out, long count, const char *path, const char *key) {
  if (count > SP_MAX_KEYPOINTS) {
    if (key) return sp_error_set("%s: %s %ld; a face's annotation has at most %d", path, key, count, SP_MAX_KEYPOINTS);
    return sp_error_set("%s: %ld points; a face's annotation has at most %d", path, count, SP_MAX_KEYPOINTS);
  }
  out->pts = sp_xcalloc((size_t)count * 2, sizeof(float));
  return 0;
}
