/* Keypoint data for a run: read the folder, split by identity (or a list),
 * cache uint8 crops (RAM, and an mmap-able file in the run directory), and
 * describe the predicted subset of points. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/trainer_internal.h"

static int cmp_path(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int split(const sp_train_config *cfg, sp_kp_data *d) {
  if (!strcmp(cfg->data.split, "none")) {
    /* Train and validate on everything (tiny smoke runs, and `spry eval
     * --data`), whether or not the file names carry a person. */
    sp_dataset_init(&d->train);
    sp_dataset_init(&d->val);
    for (int i = 0; i < d->all.n; i++)
      sp_dataset_add_copy(&d->train, &d->all, i), sp_dataset_add_copy(&d->val, &d->all, i);
    return 0;
  }
  if (!strcmp(cfg->data.split, "list")) {
    if (!cfg->data.val_list[0]) return sp_error_set("data.split is 'list' but data.val_list is not set");
    /* The list names the validation images; training is the rest (looked
     * up in the sorted validation paths: a scan per image was quadratic). */
    if (sp_dataset_split_list(&d->all, cfg->data.val_list, &d->val) != 0) return -1;
    sp_dataset_init(&d->train);
    const char **val = sp_xmalloc(sizeof(char *) * (size_t)(d->val.n ? d->val.n : 1));
    for (int j = 0; j < d->val.n; j++) val[j] = d->val.s[j].image;
    qsort(val, (size_t)d->val.n, sizeof(char *), cmp_path);
    for (int i = 0; i < d->all.n; i++) {
      const char *img = d->all.s[i].image;
      if (!d->val.n || !bsearch(&img, val, (size_t)d->val.n, sizeof(char *), cmp_path))
        sp_dataset_add_copy(&d->train, &d->all, i);
    }
    free(val);
    return 0;
  }
  if (sp_dataset_split_identity(&d->all, SP_SPLIT_TRAIN, cfg->data.val_fraction, &d->train) != 0) return -1;
  return sp_dataset_split_identity(&d->all, SP_SPLIT_VAL, cfg->data.val_fraction, &d->val);
}

/* Validation is scored on boxes a user has: a run that cuts its training
 * crops around the true points validates on the detector's boxes, unless
 * data.val_box says otherwise. */
const char *sp_kp_val_box(const sp_train_config *cfg) {
  if (cfg->data.val_box[0]) return cfg->data.val_box;
  return !strcmp(cfg->data.box, "points") ? "detect" : cfg->data.box;
}

static sp_cache *cache(const sp_train_config *cfg, const sp_kp_data *d, const char *box, const char *cache_dir,
                       int write, const char *name, const sp_dataset *ds) {
  sp_crop_config cc = sp_crop_config_default();
  cc.size = cfg->data.crop_size;
  cc.channels = cfg->data.channels;
  cc.margin = cfg->data.margin;
  cc.threads = cfg->workers;
  if (sp_box_mode_parse(box, &cc.box) != 0) return NULL;
  cc.boxes = d->boxes;
  char what[300];
  snprintf(what, sizeof what, "%s: %d crops of data.crop_size %d x %d channel(s)", name, ds->n, cc.size, cc.channels);
  if (sp_mem_check((double)ds->n * cc.size * cc.size * cc.channels, what) != 0) return NULL;
  if (!cfg->data.cache_file || !cache_dir) return sp_cache_build(ds, &cc);
  char path[2048];
  snprintf(path, sizeof path, "%s/%s", cache_dir, name);
  int rebuilt = 0;
  sp_cache *c = write ? sp_cache_open(path, ds, &cc, &rebuilt) : sp_cache_open_readonly(path, ds, &cc, &rebuilt);
  if (c)
    fprintf(stderr, "spry: %s cache %s (%d crops)\n", name,
            !rebuilt ? "reused"
            : write  ? "built"
                     : "built in RAM",
            c->n);
  return c;
}

/* Eyes of the full scheme, re-expressed in subset indices (kept only when
 * every eye point is predicted). */
static void subset_eyes(sp_kp_data *d) {
  sp_eye_points full;
  memset(&d->eyes, 0, sizeof d->eyes);
  if (!sp_eye_points_for_k(d->k_all, &full)) return;
  sp_eye_points e = full;
  for (int side = 0; side < 2; side++) {
    int n = side ? full.n_right : full.n_left;
    int *idx = side ? e.right : e.left;
    for (int i = 0; i < n; i++) {
      int found = -1;
      for (int j = 0; j < d->k; j++)
        if (d->subset[j] == idx[i]) found = j;
      if (found < 0) return;
      idx[i] = found;
    }
  }
  d->eyes = e;
}

int sp_kp_data_open(const sp_train_config *cfg, const char *cache_dir, int write_cache, sp_kp_data *d) {
  memset(d, 0, sizeof *d);
  if (!cfg->data.path[0]) return sp_error_set("data.path is not set (the dataset folder)");
  sp_dataset_init(&d->all);
  if (sp_dataset_open_dir_format(cfg->data.path, cfg->data.format, &d->all) != 0) return -1;
  if (d->all.n == 0) return sp_error_set("%s: no usable annotated images", cfg->data.path);
  if (split(cfg, d) != 0) return -1;
  /* Annotations skipped while reading the folder, reported once with the
   * training cache. */
  d->train.skipped = d->all.skipped;
  if (d->train.n == 0 || d->val.n == 0) {
    int anonymous = 0;
    for (int i = 0; i < d->all.n; i++) anonymous += d->all.s[i].identity < 0;
    if (!strcmp(cfg->data.split, "identity") && anonymous)
      return sp_error_set(
          "%s: the split left %d training and %d validation images: %d of the %d images name no "
          "person, so an identity split cannot place them (use data.split: list or none)",
          cfg->data.path, d->train.n, d->val.n, anonymous, d->all.n);
    if (!strcmp(cfg->data.split, "identity"))
      return sp_error_set(
          "%s: the split left %d training and %d validation images: data.val_fraction %g of the %d "
          "persons sent %s to validation; %s, or use data.split: list (data.val_list names the "
          "validation images) or none (validate on the training images)",
          cfg->data.path, d->train.n, d->val.n, cfg->data.val_fraction, d->all.n_identities,
          d->val.n ? "all of them" : "none", d->val.n ? "lower it" : "raise it (e.g. 0.2 or 0.3)");
    return sp_error_set("%s: the split left %d training and %d validation images (data.split: %s)", cfg->data.path,
                        d->train.n, d->val.n, cfg->data.split);
  }
  d->k_all = d->all.k;
  d->k = cfg->data.n_keypoints ? cfg->data.n_keypoints : d->k_all;
  for (int i = 0; i < d->k; i++) {
    d->subset[i] = cfg->data.n_keypoints ? cfg->data.keypoints[i] : i;
    if (d->subset[i] >= d->k_all)
      return sp_error_set("data.keypoints: index %d, but the data has %d points", d->subset[i], d->k_all);
  }
  d->scheme = sp_scheme_for_k(d->k_all);
  if (cfg->data.n_flip_table) {
    if (cfg->data.n_flip_table != d->k_all)
      return sp_error_set("data.flip_table has %d entries, the data has %d points", cfg->data.n_flip_table, d->k_all);
    if (sp_scheme_from_table("config", d->k_all, cfg->data.flip_table, &d->user_scheme) != 0)
      return sp_error_push("data.flip_table");
    d->scheme = &d->user_scheme;
  }
  if (cfg->augment.flip > 0 && !d->scheme)
    return sp_error_set("augment.flip needs a flip table, and none is known for %d points (IMM-58 and iBUG-68 are)",
                        d->k_all);
  if (cache_dir && write_cache) mkdir(cache_dir, 0755);
  if (cfg->data.boxes[0] && sp_box_table_read(cfg->data.boxes, &d->boxes) != 0) return sp_error_push("data.boxes");
  /* split: none validates on the training images: one cache serves both
   * (`spry eval --data` decoded every image twice), cut as validation is. */
  const int one = !strcmp(cfg->data.split, "none");
  d->train_cache =
      cache(cfg, d, one ? sp_kp_val_box(cfg) : cfg->data.box, cache_dir, write_cache, "cache_train.bin", &d->train);
  if (one)
    d->val_cache = d->train_cache;
  else
    d->val_cache =
        d->train_cache ? cache(cfg, d, sp_kp_val_box(cfg), cache_dir, write_cache, "cache_val.bin", &d->val) : NULL;
  if (!d->train_cache || !d->val_cache) {
    /* Which part: eval crops the training images too (their points give the
     * mean shape it compares with), so a boxes file needs rows for them. */
    const int file = !strcmp(d->train_cache ? sp_kp_val_box(cfg) : cfg->data.box, "file");
    return sp_error_push("%s, the %s images%s", cfg->data.path, d->train_cache ? "validation" : "training",
                         file && !d->train_cache ? " (spry eval reads them too, for the mean-shape baseline: the "
                                                   "boxes file needs their rows as well)"
                                                 : "");
  }
  if (d->train_cache->n == 0 || d->val_cache->n == 0)
    return sp_error_set("%s: no image could be decoded", cfg->data.path);
  d->mean_shape = sp_xcalloc((size_t)d->k * 2, sizeof(float));
  for (int i = 0; i < d->train_cache->n; i++)
    for (int j = 0; j < d->k; j++)
      for (int c = 0; c < 2; c++)
        d->mean_shape[2 * j + c] += d->train_cache->points[((size_t)i * d->k_all + d->subset[j]) * 2 + c];
  for (int j = 0; j < 2 * d->k; j++) d->mean_shape[j] /= (float)d->train_cache->n;
  subset_eyes(d);
  return 0;
}

void sp_kp_data_free(sp_kp_data *d) {
  if (d->val_cache != d->train_cache) sp_cache_free(d->val_cache);
  sp_cache_free(d->train_cache);
  sp_dataset_free(&d->all);
  sp_dataset_free(&d->train);
  sp_dataset_free(&d->val);
  sp_box_table_free(d->boxes);
  free(d->mean_shape);
  memset(d, 0, sizeof *d);
}

void sp_kp_points_to_model(const sp_kp_data *d, const float *batch_pts, int n, float scale, float offset, float *dst) {
  for (int i = 0; i < n; i++)
    for (int j = 0; j < d->k; j++)
      for (int c = 0; c < 2; c++)
        dst[((size_t)i * d->k + j) * 2 + c] = batch_pts[((size_t)i * d->k_all + d->subset[j]) * 2 + c] * scale + offset;
}

sp_box_source sp_kp_box_source(const sp_cache *c) {
  int counts[SP_BOXSRC_COUNT], best = SP_BOXSRC_NONE;
  if (!c) return SP_BOXSRC_NONE;
  sp_cache_box_counts(c, counts);
  for (int b = 1; b < SP_BOXSRC_COUNT; b++)
    if (counts[b] > counts[best]) best = b;
  return (sp_box_source)best;
}
