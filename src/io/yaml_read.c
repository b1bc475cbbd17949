/* Typed, strict reads from a YAML tree (see yaml_read.h). Shared by the
 * keypoint and video run configs so both report mistakes the same way. */
#include "io/yaml_read.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"

int sp_yr_bad(const sp_yaml_reader *r, const char *key, const sp_yaml *v, const char *want) {
  char got[200];
  if (v && v->kind == SP_YAML_SCALAR && v->value)
    snprintf(got, sizeof got, "'%s'", v->value);
  else
    snprintf(got, sizeof got, "%s", v && v->kind == SP_YAML_SEQ ? "that list" : "a map");
  if (v && v->line) return sp_error_set("%s: %s (line %d): expected %s, got %s", r->file, key, v->line, want, got);
  /* Line 0: the value came from the command line (--set, or an option such
   * as eval's --format), not from the file. */
  return sp_error_set("%s (from the command line): expected %s, got %s", key, want, got);
}

sp_yaml *sp_yr_find(sp_yaml_reader *r, const char *key) {
  char path[256];
  snprintf(path, sizeof path, "%s", key);
  sp_yaml *node = r->root;
  char *save = NULL, *part = strtok_r(path, ".", &save);
  size_t depth = 0;
  while (part && node) {
    if (node->kind != SP_YAML_MAP) {
      r->failed = 1;
      sp_error_set("%s: %.*s (line %d): expected a map of keys", r->file, (int)depth - 1, key, node->line);
      return NULL;
    }
    depth += strlen(part) + 1;
    node = sp_yaml_get(node, part);
    if (node) node->used = 1;
    part = strtok_r(NULL, ".", &save);
  }
  return node;
}

static int parse_number(const char *s, double lo, double hi, double *out) {
  /* Decimal only: strtod also reads hex ("0x10" would be a batch of 16). */
  if (strpbrk(s, "xX")) return -1;
  char *end;
  errno = 0;
  double d = strtod(s, &end);
  while (isspace((unsigned char)*end)) end++;
  if (end == s || *end || errno || !(d >= lo && d <= hi)) return -1;
  *out = d;
  return 0;
}

int sp_yr_double(sp_yaml_reader *r, const char *key, double lo, double hi, double *out) {
  sp_yaml *v = sp_yr_find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[128];
  snprintf(want, sizeof want, "a number in [%g, %g]", lo, hi);
  if (v->kind != SP_YAML_SCALAR || parse_number(v->value, lo, hi, out) != 0) return sp_yr_bad(r, key, v, want);
  return 0;
}

int sp_yr_float(sp_yaml_reader *r, const char *key, double lo, double hi, float *out) {
  double d = *out;
  if (sp_yr_double(r, key, lo, hi, &d) != 0) return -1;
  *out = (float)d;
  return 0;
}

int sp_yr_int(sp_yaml_reader *r, const char *key, long lo, long hi, int *out) {
  double d = *out;
  if (sp_yr_double(r, key, (double)lo, (double)hi, &d) != 0) return -1;
  if (d != floor(d)) return sp_yr_bad(r, key, sp_yr_find(r, key), "an integer");
  *out = (int)d;
  return 0;
}

int sp_yr_bool(sp_yaml_reader *r, const char *key, int *out) {
  sp_yaml *v = sp_yr_find(r, key);
  if (!v) return r->failed ? -1 : 0;
  static const char *const on[] = {"true", "yes", "on", "1"}, *const off[] = {"false", "no", "off", "0"};
  for (int i = 0; v->kind == SP_YAML_SCALAR && i < 4; i++) {
    if (!strcmp(v->value, on[i])) return *out = 1, 0;
    if (!strcmp(v->value, off[i])) return *out = 0, 0;
  }
  return sp_yr_bad(r, key, v, "true or false");
}

int sp_yr_string(sp_yaml_reader *r, const char *key, char *out, size_t n, const char *const *choices) {
  sp_yaml *v = sp_yr_find(r, key);
  if (!v) return r->failed ? -1 : 0;
  if (v->kind != SP_YAML_SCALAR || strlen(v->value) >= n) return sp_yr_bad(r, key, v, "a short text");
  if (choices) {
    int ok = 0;
    char want[256] = "one of:";
    for (const char *const *c = choices; *c; c++) {
      ok |= !strcmp(*c, v->value);
      strncat(want, " ", sizeof want - strlen(want) - 1);
      strncat(want, *c, sizeof want - strlen(want) - 1);
    }
    if (!ok) return sp_yr_bad(r, key, v, want);
  }
  snprintf(out, n, "%s", v->value);
  return 0;
}

int sp_yr_list(sp_yaml_reader *r, const char *key, int max, double lo, double hi, double *out, int *count) {
  *count = 0;
  sp_yaml *v = sp_yr_find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[128];
  snprintf(want, sizeof want, "a list of at most %d numbers in [%g, %g]", max, lo, hi);
  if (v->kind != SP_YAML_SEQ || v->n > max) return sp_yr_bad(r, key, v, want);
  for (int i = 0; i < v->n; i++) {
    sp_yaml *it = v->items[i];
    if (it->kind != SP_YAML_SCALAR || parse_number(it->value, lo, hi, &out[i]) != 0) return sp_yr_bad(r, key, it, want);
  }
  *count = v->n;
  return 0;
}

int sp_yr_triple(sp_yaml_reader *r, const char *key, double lo, double hi, float out[3]) {
  sp_yaml *v = sp_yr_find(r, key);
  if (!v) return r->failed ? -1 : 0;
  char want[128];
  snprintf(want, sizeof want, "one number or a list of 3 in [%g, %g]", lo, hi);
  int n = v->kind == SP_YAML_SEQ ? v->n : 1;
  if ((v->kind == SP_YAML_SEQ && n != 3 && n != 1) || v->kind == SP_YAML_MAP) return sp_yr_bad(r, key, v, want);
  double d[3];
  for (int i = 0; i < n; i++) {
    sp_yaml *it = v->kind == SP_YAML_SEQ ? v->items[i] : v;
    if (it->kind != SP_YAML_SCALAR || parse_number(it->value, lo, hi, &d[i]) != 0) return sp_yr_bad(r, key, it, want);
  }
  for (int i = 0; i < 3; i++) out[i] = (float)d[n == 3 ? i : 0];
  return 0;
}

int sp_yr_finish(sp_yaml_reader *r, int n_sets, char *const *sets, int (*read)(sp_yaml_reader *r, void *cfg), void *cfg,
                 char **resolved) {
  if (!r->root) return -1;
  int rc = 0;
  for (int i = 0; i < n_sets && rc == 0; i++) rc = sp_yaml_set(r->root, sets[i]);
  if (rc == 0) rc = read(r, cfg);
  if (rc == 0) {
    char key[512];
    int line = 0;
    if (sp_yaml_first_unused(r->root, key, sizeof key, &line))
      rc = line ? sp_error_set("%s: unknown key '%s' (line %d)", r->file, key, line)
                : sp_error_set("%s: unknown key '%s' (from --set)", r->file, key);
  }
  if (rc == 0 && resolved) *resolved = sp_yaml_emit(r->root);
  sp_yaml_free(r->root);
  r->root = NULL;
  return rc;
}
