/* metrics.jsonl at the start of a run (see metrics_log.h). */
#define _GNU_SOURCE
#include "train/metrics_log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "spry/common.h"

static int64_t line_epoch(const char *line) {
  const char *e = strstr(line, "\"epoch\":");
  return e ? strtoll(e + 8, NULL, 10) : -1;
}

int sp_metrics_log_start(const char *dir, int64_t done) {
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  FILE *in = fopen(path, "r");
  if (!in) return errno == ENOENT ? 0 : sp_error_set("%s: %s", path, strerror(errno));
  char *kept = NULL, *line = NULL;
  size_t kept_len = 0, cap = 0;
  FILE *out = open_memstream(&kept, &kept_len);
  int64_t dropped = 0;
  while (getline(&line, &cap, in) > 0) {
    int64_t e = line_epoch(line);
    if (e >= 1 && e <= done)
      fputs(line, out);
    else
      dropped++;
  }
  free(line);
  fclose(in);
  fclose(out);
  int rc = dropped ? sp_write_file_atomic(path, kept, kept_len) : 0;
  free(kept);
  if (rc == 0 && dropped)
    fprintf(stderr, "spry: %s: dropped %lld line(s) of epochs after %lld (an earlier run's)\n", path,
            (long long)dropped, (long long)done);
  return rc;
}

int sp_metrics_log_read(const char *dir, int n_keys, const char *const *keys, double **cols, int *n_rows) {
  char path[1100];
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  for (int k = 0; k < n_keys; k++) cols[k] = NULL;
  *n_rows = 0;
  FILE *f = fopen(path, "r");
  if (!f) return sp_error_set("%s: cannot open: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  int rows = 0, room = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    sp_json *o = sp_json_parse(line, (size_t)len, (size_t)len + 1);
    if (!o) continue; /* a line cut by a crash */
    if (rows == room) {
      room = room ? 2 * room : 64;
      for (int k = 0; k < n_keys; k++) cols[k] = sp_xrealloc(cols[k], sizeof(double) * (size_t)room);
    }
    for (int k = 0; k < n_keys; k++) {
      double v = NAN;
      const sp_json *x = sp_json_get(o, keys[k]);
      if (x) sp_json_as_double(x, &v);
      cols[k][rows] = v;
    }
    rows++;
    sp_json_free(o);
  }
  free(line);
  fclose(f);
  *n_rows = rows;
  return 0;
}
