/* The crop cache file (data/cache_file.c): header and contents. The input is
 * the file, with the fingerprint (bytes 16..23 of the header) set to the
 * one of the fixed dataset below, so the fuzzer reaches past the header
 * match into the size checks and the per-sample checks. A cache that maps
 * must be safe to read everywhere the loader and the evaluation read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "fuzz_common.h"

#define N_SAMPLES 3
#define K 2

static sp_dataset ds;
static sp_crop_config cfg;

static void setup(void) {
  if (ds.n) return;
  sp_dataset_init(&ds);
  for (int i = 0; i < N_SAMPLES; i++) {
    sp_kp_sample s = {0};
    s.image = sp_xstrdup(i == 0 ? "/nonexistent/a.jpg" : i == 1 ? "/nonexistent/b.jpg" : "/nonexistent/c.png");
    s.k = K;
    s.pts = sp_xmalloc(sizeof(float) * 2 * K);
    for (int j = 0; j < 2 * K; j++) s.pts[j] = (float)(10 * i + j);
    s.identity = -1;
    sp_dataset_add(&ds, &s, "fuzz");
  }
  cfg = sp_crop_config_default();
  cfg.size = 8;
  cfg.channels = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  uint8_t *buf = malloc(size ? size : 1);
  memcpy(buf, data, size);
  if (size >= 24) {
    uint64_t fp = sp_cache_fingerprint(&ds, &cfg);
    memcpy(buf + 16, &fp, 8);
  }
  const char *path = fz_write("cache_train.bin", buf, size);
  free(buf);
  sp_cache *c = NULL;
  if (sp_cache_try_map(path, &ds, &cfg, &c) != 0) return 0;
  FZ_ASSERT(c->n > 0 && c->n <= ds.n && c->k == K && c->size == cfg.size && c->channels == cfg.channels);
  for (size_t b = 0; b < (size_t)c->n * c->size * c->size * c->channels; b++) fz_sink += c->pixels[b];
  int counts[SP_BOXSRC_COUNT];
  sp_cache_box_counts(c, counts);
  for (int i = 0; i < c->n; i++) {
    FZ_ASSERT(c->source[i] >= 0 && c->source[i] < ds.n);
    for (int j = 0; j < c->k; j++) {
      float x = c->points[(i * K + j) * 2], y = c->points[(i * K + j) * 2 + 1];
      sp_cache_crop_to_source(c, i, &x, &y);
      FZ_ASSERT(!isnan(x) && !isnan(y));
    }
  }
  sp_cache_free(c);
  return 0;
}
