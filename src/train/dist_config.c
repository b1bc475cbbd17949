/* Defaults and YAML reading of the `dist:` keys (spry/dist.h), and what the
 * ranks compare before a run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"

#include "train/dist_config.h"

sp_dist_config sp_dist_config_default(void) {
  sp_dist_config d = {.sync_bn = 0, .timeout_s = 300, .bucket_mb = 4};
  snprintf(d.compress, sizeof d.compress, "none");
  return d;
}

int sp_dist_config_read(sp_yaml_reader *r, sp_dist_config *d) {
  static const char *const compressions[] = {"none", "bf16", NULL};
  if (sp_yr_bool(r, "dist.sync_bn", &d->sync_bn) || sp_yr_double(r, "dist.timeout_s", 1, 1e6, &d->timeout_s) ||
      sp_yr_double(r, "dist.bucket_mb", 0.001, 4096, &d->bucket_mb) ||
      sp_yr_string(r, "dist.compress", d->compress, sizeof d->compress, compressions))
    return -1;
  return 0;
}

/* A top-level "key:" line of one of the keys (NULL-terminated list). */
static int top_level_key(const char *line, size_t len, const char *const *keys) {
  for (int i = 0; keys && keys[i]; i++) {
    size_t k = strlen(keys[i]);
    if (len > k && !strncmp(line, keys[i], k) && line[k] == ':') return 1;
  }
  return 0;
}

/* A scalar that reads as a number, written the one way %.17g writes it, so
 * "1e-3", "0.0010" and "0.001" compare equal; "01" stays as it is (a folder
 * name, not a number). 0 when the value is no number. */
static int canonical_number(const char *v, size_t len, char *out, size_t cap) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return 0;
  memcpy(buf, v, len);
  buf[len] = '\0';
  const char *digits = buf + (buf[0] == '-' || buf[0] == '+');
  if (digits[0] == '0' && digits[1] >= '0' && digits[1] <= '9') return 0;
  char *end;
  double x = strtod(buf, &end);
  if (end == buf || *end || strpbrk(buf, "xXnNiI")) return 0; /* hex, nan, inf: as written */
  snprintf(out, cap, "%.17g", x);
  return 1;
}

char *sp_config_canonical(const char *resolved, const char *const *skip) {
  if (!resolved) resolved = "";
  size_t n = strlen(resolved);
  char *out = sp_xmalloc(2 * n + 64), *at = out; /* a number may grow to 24 characters */
  for (const char *line = resolved; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (!top_level_key(line, len, skip)) { /* top-level keys start the line */
      /* The value: after "key: " or "- ". */
      const char *colon = memchr(line, ':', len), *dash = line + strspn(line, " ");
      const char *value = colon ? colon + 1 : (dash < line + len && *dash == '-') ? dash + 1 : NULL;
      while (value && value < line + len && *value == ' ') value++;
      char num[64];
      if (value && value < line + len && canonical_number(value, (size_t)(line + len - value), num, sizeof num))
        at += sprintf(at, "%.*s%s\n", (int)(value - line), line, num);
      else
        at += sprintf(at, "%.*s\n", (int)len, line);
    }
    line += len + (end ? 1 : 0);
  }
  *at = '\0';
  return out;
}

char *sp_dist_run_identity(const char *resolved, int resume) {
  /* Machines may differ in cores: threads and workers are theirs to set. */
  static const char *const per_machine[] = {"threads", "workers", NULL};
  char *body = sp_config_canonical(resolved, per_machine);
  size_t n = strlen(body);
  char *out = sp_xmalloc(n + 32);
  snprintf(out, n + 32, "resume: %s\n%s", resume ? "true" : "false", body);
  free(body);
  return out;
}

/* The dotted key of line `target` of an indented "key: value" text
 * (list items take their parent's key): "optimizer.lr". */
static void key_path(const char *text, int target, char *out, size_t cap) {
  struct {
    int indent;
    char key[64];
  } stack[16];
  int depth = 0, line_no = 0;
  out[0] = '\0';
  for (const char *line = text; *line && line_no <= target; line_no++) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    int indent = 0;
    while ((size_t)indent < len && line[indent] == ' ') indent++;
    while (depth > 0 && stack[depth - 1].indent >= indent) depth--;
    const char *colon = memchr(line + indent, ':', len - (size_t)indent);
    int is_key = line[indent] != '-' && colon != NULL;
    if (line_no == target || is_key) {
      size_t used = 0;
      for (int i = 0; i < depth && used + 2 < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "." : "", stack[i].key);
      if (is_key && used + 2 < cap)
        snprintf(out + used, cap - used, "%s%.*s", used ? "." : "", (int)(colon - line - indent), line + indent);
      if (is_key && depth < 16) {
        stack[depth].indent = indent;
        snprintf(stack[depth].key, sizeof stack[depth].key, "%.*s", (int)(colon - line - indent), line + indent);
        depth++;
      }
    }
    line += len + (end ? 1 : 0);
  }
}

/* First line where the two texts differ: its number, and each side's line. */
static int first_difference(const char *mine, const char *theirs, char *here, char *there, size_t cap) {
  for (int line_no = 0;; line_no++) {
    const char *e1 = strchr(mine, '\n'), *e2 = strchr(theirs, '\n');
    size_t l1 = e1 ? (size_t)(e1 - mine) : strlen(mine), l2 = e2 ? (size_t)(e2 - theirs) : strlen(theirs);
    if (l1 != l2 || strncmp(mine, theirs, l1)) {
      size_t s1 = strspn(mine, " "), s2 = strspn(theirs, " "); /* the key path says where it is */
      snprintf(here, cap, "%.*s", (int)(l1 > s1 ? l1 - s1 : 0), mine + (l1 > s1 ? s1 : l1));
      snprintf(there, cap, "%.*s", (int)(l2 > s2 ? l2 - s2 : 0), theirs + (l2 > s2 ? s2 : l2));
      return line_no;
    }
    if (!e1 || !e2) return -1;
    mine = e1 + 1, theirs = e2 + 1;
  }
}

int sp_config_diff(const char *a, const char *b, char *key, size_t key_cap, char *in_a, char *in_b, size_t cap) {
  int line = first_difference(a, b, in_a, in_b, cap);
  if (line < 0) return 0;
  key_path(a, line, key, key_cap);
  return 1;
}
