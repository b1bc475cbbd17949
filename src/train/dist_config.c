/* Defaults and YAML reading of the `dist:` keys (spry/dist.h). */
#include <stdio.h>

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
