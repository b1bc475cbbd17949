/* iBUG / 300-W .pts files:
 *   version: 1
 *   n_points: 68
 *   {
 *   x y
 *   ...
 *   }
 * Coordinates are read as written (300-W uses 1-based Matlab pixels; callers
 * who care subtract 1). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

int sp_read_pts(const char *path, sp_kp_sample *out) {
  FILE *f = sp_ann_open(path, out);
  if (!f) return -1;
  char line[512];
  int n_points = -1, in_block = 0, got = 0, closed = 0;
  while (fgets(line, sizeof line, f)) {
    char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    if (!in_block) {
      if (!strncmp(t, "n_points", 8)) {
        char *colon = strchr(t, ':');
        char *end = NULL;
        long v = colon ? strtol(colon + 1, &end, 10) : -1;
        if (!colon || end == colon + 1 || v <= 0 || out->pts) {
          fclose(f);
          sp_kp_sample_free(out);
          return sp_error_set("%s: bad n_points line '%.40s'", path, t);
        }
        if (sp_ann_alloc_points(out, v, path, "n_points")) {
          fclose(f);
          return -1;
        }
        n_points = (int)v;
      } else if (*t == '{') {
        in_block = 1;
      }
      continue;
    }
    if (*t == '}') {
      closed = 1;
      break;
    }
    if (*t == '\n' || *t == '\r' || !*t) continue;
    float x, y;
    if (sscanf(t, "%f %f", &x, &y) != 2 || got >= n_points) {
      fclose(f);
      sp_kp_sample_free(out);
      return sp_error_set("%s: bad or extra point line %d", path, got + 1);
    }
    out->pts[2 * got] = x;
    out->pts[2 * got + 1] = y;
    got++;
  }
  fclose(f);
  if (n_points < 0 || !closed || got != n_points) {
    sp_kp_sample_free(out);
    return sp_error_set("%s: expected %d points in a closed { } block, found %d", path, n_points, got);
  }
  out->k = n_points;
  static const char *exts[] = {".jpg", ".png", ".jpeg"};
  for (size_t i = 0; i < 3 && !out->image; i++) {
    char *p = sp_path_with_ext(path, exts[i]);
    if (sp_file_exists(p))
      out->image = p;
    else
      free(p);
  }
  if (!out->image) out->image = sp_path_with_ext(path, ".jpg");
  return 0;
}
