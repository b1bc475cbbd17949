/* The CSV layout of youtube_faces_68 (Udacity P1): a header row, then
 * "name,x0,y0,...,x(K-1),y(K-1)" per image. Identity = the name without a
 * leading train_/test_, up to the last '_' (frames of one person share it). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

static void identity_of(const char *name, char *out, size_t n) {
  const char *s = name;
  if (!strncmp(s, "train_", 6))
    s += 6;
  else if (!strncmp(s, "test_", 5))
    s += 5;
  const char *u = strrchr(s, '_');
  size_t len = u ? (size_t)(u - s) : strlen(s);
  if (len >= n) len = n - 1;
  memcpy(out, s, len);
  out[len] = 0;
}

int sp_read_keypoints_csv(const char *csv_path, const char *image_dir, sp_dataset *ds) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(csv_path, &buf, &len) != 0) return -1;
  /* The lines below are C strings: a NUL byte would end the file there,
   * silently. */
  const uint8_t *nul = memchr(buf, 0, len);
  if (nul) {
    size_t at = (size_t)(nul - buf);
    free(buf);
    return sp_error_set("%s: not a text file (a NUL byte at offset %zu)", csv_path, at);
  }
  char *dir = image_dir ? sp_xstrdup(image_dir) : sp_path_dirname(csv_path);
  char *save = NULL;
  int lineno = 0, expected_cols = -1;
  for (char *line = strtok_r((char *)buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    lineno++;
    size_t L = strlen(line);
    if (L && line[L - 1] == '\r') line[--L] = 0;
    if (!L) continue;
    /* Count columns first: the header fixes K for the whole file. */
    int cols = 1;
    for (char *c = line; *c; c++) cols += *c == ',';
    if (lineno == 1) {
      expected_cols = cols;
      if ((cols - 1) % 2 || cols < 3) {
        free(dir);
        free(buf);
        return sp_error_set("%s: header has %d columns; expected name + 2K coordinates", csv_path, cols);
      }
      if ((cols - 1) / 2 > SP_MAX_KEYPOINTS) {
        free(dir);
        free(buf);
        return sp_error_set("%s: header has %d columns, %d points; a face has at most %d", csv_path, cols,
                            (cols - 1) / 2, SP_MAX_KEYPOINTS);
      }
      continue;
    }
    char what[1200];
    char *comma = strchr(line, ',');
    if (!comma) continue;
    *comma = 0;
    snprintf(what, sizeof what, "%s (%s line %d)", line, sp_path_base(csv_path), lineno);
    if (cols != expected_cols) {
      sp_data_skip(what, "has %d values, expected %d", cols - 1, expected_cols - 1);
      ds->skipped++;
      continue;
    }
    sp_kp_sample s = {0};
    s.k = (cols - 1) / 2;
    s.pts = sp_xmalloc(sizeof(float) * 2 * (size_t)s.k);
    char *p = comma + 1;
    int bad = 0;
    for (int i = 0; i < 2 * s.k; i++) {
      char *e;
      s.pts[i] = strtof(p, &e);
      if (e == p || (*e != ',' && *e != 0)) bad = 1;
      p = *e ? e + 1 : e;
    }
    if (bad) {
      sp_data_skip(what, "non-numeric coordinate");
      ds->skipped++;
      free(s.pts);
      continue;
    }
    char ident[512];
    identity_of(line, ident, sizeof ident);
    s.image = sp_path_join(dir, line);
    s.identity = sp_dataset_identity(ds, ident);
    sp_dataset_add(ds, &s, what);
  }
  free(dir);
  free(buf);
  return 0;
}
