/* Strict typed reads from a YAML config tree: every getter marks what it read
 * (so unknown keys can be reported), checks type and range, and on a bad value
 * sets an error naming the file, the dotted key and its line. A key that is
 * absent leaves *out unchanged (the default) and returns 0. */
#ifndef SPRY_IO_YAML_READ_H
#define SPRY_IO_YAML_READ_H

#include <stddef.h>

#include "io/yaml.h"

typedef struct {
  const char *file; /* names the source in messages */
  sp_yaml *root;
  int failed; /* a section that should be a map is not one */
} sp_yaml_reader;

/* Always returns -1: "FILE: KEY (line N): expected WANT, got 'VALUE'". */
int sp_yr_bad(const sp_yaml_reader *r, const char *key, const sp_yaml *v, const char *want);
/* The node at a dotted key, marking the maps on the way used; NULL if absent
 * (or with r->failed set when a section on the way is not a map). */
sp_yaml *sp_yr_find(sp_yaml_reader *r, const char *key);

int sp_yr_double(sp_yaml_reader *r, const char *key, double lo, double hi, double *out);
int sp_yr_float(sp_yaml_reader *r, const char *key, double lo, double hi, float *out);
int sp_yr_int(sp_yaml_reader *r, const char *key, long lo, long hi, int *out);
int sp_yr_bool(sp_yaml_reader *r, const char *key, int *out);
/* choices: NULL-terminated list of allowed values, or NULL for any text. */
int sp_yr_string(sp_yaml_reader *r, const char *key, char *out, size_t n, const char *const *choices);
/* A list of at most max numbers; *count is 0 when the key is absent. */
int sp_yr_list(sp_yaml_reader *r, const char *key, int max, double lo, double hi, double *out, int *count);
/* One number (used for all three) or a list of 3. */
int sp_yr_triple(sp_yaml_reader *r, const char *key, double lo, double hi, float out[3]);

/* Applies "key=value" overrides, runs read(r, cfg), reports the first key no
 * getter read as unknown, and emits the resolved YAML when asked. Frees the
 * tree. */
int sp_yr_finish(sp_yaml_reader *r, int n_sets, char *const *sets, int (*read)(sp_yaml_reader *r, void *cfg), void *cfg,
                 char **resolved);

#endif
