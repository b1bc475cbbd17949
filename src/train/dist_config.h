/* The `dist:` section of a run config, read the same way by the keypoint
 * (config.c) and video (video_config.c) configs. */
#ifndef SPRY_TRAIN_DIST_CONFIG_H
#define SPRY_TRAIN_DIST_CONFIG_H

#include "io/yaml_read.h"
#include "spry/dist.h"

/* dist.sync_bn, dist.timeout_s, dist.bucket_mb, dist.compress into *d. */
int sp_dist_config_read(sp_yaml_reader *r, sp_dist_config *d);

#endif
