/* Throughput of the image pipeline (`spry bench data`): decode into the RAM
 * cache, then augment + collate, then augment + collate + normalise, each the
 * median of several runs. See spry/bench.h. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/bench.h"
#include "spry/data.h"

sp_bench_data_options sp_bench_data_options_default(void) {
  return (sp_bench_data_options){.size = 224, .batch = 64, .runs = 5, .images = 4096, .channels = 3, .seed = 1};
}

/* Images per second of the loader over about `images` samples. */
static double run_loader(sp_loader *l, int64_t *epoch, int images, int normalize, void *norm_out) {
  static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  double t0 = sp_now();
  int done = 0;
  while (done < images) {
    if (sp_loader_start_epoch(l, (*epoch)++) != 0) return -1;
    const sp_batch *b;
    while ((b = sp_loader_next(l)) && done < images) {
      if (normalize && sp_batch_normalize(b, mean, std, SP_F32, norm_out) != 0) return -1;
      done += b->n;
    }
  }
  return done / (sp_now() - t0);
}

static void finish_stage(const sp_bench_data_options *o, sp_bench_data_result *res, sp_bench_data_stage s) {
  res->stages[res->n_stages++] = s;
  if (o->on_stage) o->on_stage(&s, o->user);
}

/* decode: every run is cold (the OS file cache is warm, as for torchvision).
 * Returns the last run's cache, or NULL with an error. */
static sp_cache *bench_decode(const sp_bench_data_options *o, const sp_dataset *ds, const sp_crop_config *cc,
                              double *rate, sp_bench_data_result *res) {
  sp_cache *cache = NULL;
  for (int r = 0; r < o->runs; r++) {
    sp_cache_free(cache);
    double t0 = sp_now();
    cache = sp_cache_build(ds, cc);
    if (!cache) return NULL;
    rate[r] = ds->n / (sp_now() - t0);
  }
  finish_stage(o, res, (sp_bench_data_stage){"decode", sp_bench_median(rate, o->runs), ds->n, 0});
  return cache;
}

/* The crops mapped from the cache file (built and written on first use, then
 * mapped like a second run would), in place of the decoded cache. */
static sp_cache *map_cache_file(const sp_bench_data_options *o, const sp_dataset *ds, const sp_crop_config *cc,
                                sp_cache *decoded, char *made, size_t made_n) {
  const char *cache_file = o->cache_file;
  if (!cache_file) {
    /* Ours alone (the pid), and removed by the caller when the bench ends:
     * tens of MB in the temp folder are not the user's to clean up. */
    const char *tmp = getenv("TMPDIR");
    snprintf(made, made_n, "%s/spry-bench-data-%d-%ld.cache", tmp && *tmp ? tmp : "/tmp", o->size, (long)getpid());
    cache_file = made;
  }
  sp_cache_free(decoded);
  int rebuilt = 0;
  sp_cache *cache = sp_cache_open(cache_file, ds, cc, &rebuilt);
  if (cache && rebuilt) { /* built and written now: map it like a second run would */
    sp_cache_free(cache);
    cache = sp_cache_open(cache_file, ds, cc, &rebuilt);
  }
  return cache;
}

/* augment and normalize: the loader over the cache, after a warm-up that
 * pages in the cache and buffers. */
static int bench_loader(const sp_bench_data_options *o, const sp_cache *cache, double *rate,
                        sp_bench_data_result *res) {
  sp_loader_config lc = sp_loader_config_default(o->batch, o->size);
  lc.workers = o->workers;
  lc.seed = o->seed;
  lc.drop_last = 0;
  sp_loader *l = sp_loader_create(cache, sp_scheme_for_k(cache->k), &lc);
  if (!l) return -1;
  float *norm = sp_aligned_alloc(sizeof(float) * (size_t)o->batch * o->channels * o->size * o->size);
  int64_t epoch = 0;
  run_loader(l, &epoch, o->batch * 2, 1, norm); /* warm-up: page in the cache and buffers */
  static const char *const stage[2] = {"augment", "normalize"};
  for (int s = 0; s < 2; s++) {
    for (int r = 0; r < o->runs; r++) rate[r] = run_loader(l, &epoch, o->images, s, norm);
    finish_stage(o, res, (sp_bench_data_stage){stage[s], sp_bench_median(rate, o->runs), 0, cache->from_file});
  }
  sp_aligned_free(norm);
  sp_loader_destroy(l);
  return 0;
}

int sp_bench_data(const sp_bench_data_options *o, sp_bench_data_result *res) {
  memset(res, 0, sizeof *res);
  if (!o->dataset) return sp_error_set("bench data: no dataset given");
  if (o->runs < 1 || o->batch < 1 || o->images < 1)
    return sp_error_set("bench data: runs, batch and images must be positive");
  sp_dataset ds;
  if (sp_dataset_open_dir(o->dataset, &ds) != 0) {
    sp_dataset_free(&ds);
    return -1;
  }
  sp_crop_config cc = sp_crop_config_default();
  cc.size = o->size;
  cc.channels = o->channels;
  cc.threads = o->workers;

  double *rate = malloc(sizeof(double) * (size_t)o->runs);
  int rc = -1;
  char made[4096] = "";
  sp_cache *cache = bench_decode(o, &ds, &cc, rate, res);
  if (cache && o->use_cache) cache = map_cache_file(o, &ds, &cc, cache, made, sizeof made);
  if (cache) rc = bench_loader(o, cache, rate, res);
  sp_cache_free(cache);
  if (made[0]) unlink(made); /* on success and on error alike */
  free(rate);
  sp_dataset_free(&ds);
  return rc;
}
