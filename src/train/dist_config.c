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

char *sp_dist_run_identity(const char *resolved, int resume) {
  if (!resolved) resolved = "";
  size_t n = strlen(resolved);
  char *out = sp_xmalloc(n + 32), *at = out;
  at += sprintf(at, "resume: %s\n", resume ? "true" : "false");
  for (const char *line = resolved; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
    if (!per_machine(line, len)) { /* top-level keys start the line */
      memcpy(at, line, len);
      at += len;
    }
    line += len;
  }
  *at = '\0';
  return out;
}
