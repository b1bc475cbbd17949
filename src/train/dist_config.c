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

static int per_machine(const char *line, size_t len) {
  static const char *const keys[] = {"threads:", "workers:", NULL};
  for (int i = 0; keys[i]; i++)
    if (len >= strlen(keys[i]) && !strncmp(line, keys[i], strlen(keys[i]))) return 1;
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

char *sp_dist_run_identity(const char *resolved, int resume) {
  if (!resolved) resolved = "";
  size_t n = strlen(resolved);
  char *out = sp_xmalloc(2 * n + 64), *at = out; /* a number may grow to 24 characters */
  at += sprintf(at, "resume: %s\n", resume ? "true" : "false");
  for (const char *line = resolved; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    if (!per_machine(line, len)) { /* top-level keys start the line */
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
