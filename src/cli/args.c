#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"

int sp_arg_str(int argc, char **argv, int *i, const char *name, const char **out) {
  if (strcmp(argv[*i], name)) return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "spry: option %s needs a value\n", name);
    return -1;
  }
  *out = argv[++*i];
  return 1;
}

int sp_arg_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi, int *out) {
  const char *s;
  int r = sp_arg_str(argc, argv, i, name, &s);
  if (r != 1) return r;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*s == 0 || *end || v < lo || v > hi) {
    fprintf(stderr, "spry: option %s wants an integer in [%lld, %lld], got '%s'\n", name, (long long)lo, (long long)hi,
            s);
    return -1;
  }
  *out = (int)v;
  return 1;
}

int sp_parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*s == 0 || *end || errno == ERANGE || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int sp_arg_flag(char **argv, int i, const char *name, int *out) {
  if (strcmp(argv[i], name)) return 0;
  *out = 1;
  return 1;
}

int sp_parse_size(const char *s, int *h, int *w) {
  char *end;
  long a = strtol(s, &end, 10), b = a;
  if (*end == 'x') b = strtol(end + 1, &end, 10);
  if (*end || a <= 0 || b <= 0 || a > 8192 || b > 8192) return -1;
  *h = (int)a;
  *w = (int)b;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double sp_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int sp_parse_box(const char *s, float box[4]) {
  double v[4];
  char *end;
  const char *p = s;
  for (int i = 0; i < 4; i++) {
    v[i] = strtod(p, &end);
    if (end == p) return sp_error_set("'%s': expected x,y,w,h (four numbers)", s);
    p = end;
    if (i < 3) {
      if (*p != ',') return sp_error_set("'%s': expected x,y,w,h (four numbers)", s);
      p++;
    }
  }
  if (*p) return sp_error_set("'%s': extra text after x,y,w,h", s);
  for (int i = 0; i < 4; i++)
    if (!isfinite(v[i]) || fabs(v[i]) > 1e6) return sp_error_set("'%s': values must be finite, at most 1e6", s);
  if (!(v[2] > 0 && v[3] > 0)) return sp_error_set("'%s': w and h must be > 0", s);
  for (int i = 0; i < 4; i++) box[i] = (float)v[i];
  return 0;
}

int sp_arg_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
  return 0;
}
