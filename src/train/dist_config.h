/* The `dist:` section of a run config, read the same way by the keypoint
 * (config.c) and video (video_config.c) configs. */
#ifndef SPRY_TRAIN_DIST_CONFIG_H
#define SPRY_TRAIN_DIST_CONFIG_H

#include "io/yaml_read.h"
#include "spry/dist.h"

/* dist.sync_bn, dist.timeout_s, dist.bucket_mb, dist.compress into *d. */
int sp_dist_config_read(sp_yaml_reader *r, sp_dist_config *d);

/* What the ranks of a run must agree on (sp_dist_check_run): a first line
 * "resume: true|false", then the resolved config without the top-level keys
 * that may differ between machines (threads, workers: their core counts),
 * numbers written one way (1e-3 = 0.0010 = 0.001). Free with free(). */
char *sp_dist_run_identity(const char *resolved_config, int resume);

/* A resolved config without the top-level keys in skip (NULL-terminated),
 * numbers written one way: two runs' texts compare line by line. */
char *sp_config_canonical(const char *resolved_config, const char *const *skip);
/* 0 when a and b (canonical texts) are equal; else 1, with the dotted key of
 * the first line that differs ("optimizer.lr") and that line on each side. */
int sp_config_diff(const char *a, const char *b, char *key, size_t key_cap, char *in_a, char *in_b, size_t cap);

#endif
