/* `spry bench data`: throughput of the image pipeline, one JSON line per
 * stage (medians of --runs runs):
 *   decode    = cold decode + crop + resize into the RAM cache (W threads)
 *   augment   = cached augment (scale, flip, RandAugment 2/7) + collate to u8
 *   normalize = augment + collate + normalise to f32 on the consumer side */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/data.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench data --dataset DIR [--size 224] [--batch 64] [--workers W] [--cache]\n"
          "                       [--cache-file PATH] [--runs 5] [--images N] [--gray] [--seed S]\n"
          "  --cache       map the crops from an on-disk cache file (built on first use)\n"
          "  --images N    images per augment/normalize run (default 4096; epochs repeat)\n");
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

int sp_cli_bench_data(int argc, char **argv) {
  const char *dataset = NULL, *cache_file = NULL;
  int size = 224, batch = 64, workers = 0, use_cache = 0, runs = 5, images = 4096, channels = 3;
  int64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *seed_s = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!strcmp(a, "--cache")) { use_cache = 1; continue; }
    if (!strcmp(a, "--gray")) { channels = 1; continue; }
    /* Each option names itself and its range when its value is wrong. */
    int r;
    if ((r = sp_arg_str(argc, argv, &i, "--dataset", &dataset)) ||
        (r = sp_arg_str(argc, argv, &i, "--cache-file", &cache_file)) ||
        (r = sp_arg_int(argc, argv, &i, "--size", 8, 4096, &size)) ||
        (r = sp_arg_int(argc, argv, &i, "--batch", 1, 65536, &batch)) ||
        (r = sp_arg_int(argc, argv, &i, "--workers", 0, 1024, &workers)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--images", 1, 100000000, &images)) ||
        (r = sp_arg_str(argc, argv, &i, "--seed", &seed_s))) {
      if (r < 0) return 2;
      if (cache_file) use_cache = 1;
      if (seed_s && sp_parse_int64(seed_s, 0, INT64_MAX, &seed) != 0) {
        fprintf(stderr, "spry bench data: --seed wants a non-negative integer, got '%s'\n", seed_s);
        return 2;
      }
      continue;
    }
    fprintf(stderr, "spry bench data: unknown option %s\n", a);
    usage(stderr);
    return 2;
  }
  if (!dataset) {
    fprintf(stderr, "spry bench data: --dataset is required\n");
    usage(stderr);
    return 2;
  }
  sp_dataset ds;
  if (sp_dataset_open_dir(dataset, &ds) != 0) {
    fprintf(stderr, "spry bench data: %s\n", sp_last_error());
    sp_dataset_free(&ds);
    return 1;
  }
  sp_crop_config cc = sp_crop_config_default();
  cc.size = size;
  cc.channels = channels;
  cc.threads = workers;
  int W = workers;

  /* decode: every run is cold (the OS file cache is warm, as for torchvision). */
  double *rate = malloc(sizeof(double) * (size_t)runs);
  sp_cache *cache = NULL;
  for (int r = 0; r < runs; r++) {
    sp_cache_free(cache);
    double t0 = sp_now();
    cache = sp_cache_build(&ds, &cc);
    if (!cache) { fprintf(stderr, "spry bench data: %s\n", sp_last_error()); free(rate); sp_dataset_free(&ds); return 1; }
    rate[r] = ds.n / (sp_now() - t0);
  }
  printf("{\"bench\":\"data\",\"stage\":\"decode\",\"workers\":%d,\"batch\":%d,\"size\":%d,\"images\":%d,"
         "\"images_per_s\":%.1f}\n", W, batch, size, ds.n, median(rate, runs));
  fflush(stdout);
  if (use_cache) {
    char def[4096];
    if (!cache_file) {
      const char *tmp = getenv("TMPDIR");
      snprintf(def, sizeof def, "%s/spry-bench-data-%d.cache", tmp && *tmp ? tmp : "/tmp", size);
      cache_file = def;
    }
    sp_cache_free(cache);
    int rebuilt = 0;
    cache = sp_cache_open(cache_file, &ds, &cc, &rebuilt);
    if (cache && rebuilt) { /* built and written now: map it like a second run would */
      sp_cache_free(cache);
      cache = sp_cache_open(cache_file, &ds, &cc, &rebuilt);
    }
    if (!cache) { fprintf(stderr, "spry bench data: %s\n", sp_last_error()); free(rate); sp_dataset_free(&ds); return 1; }
  }

  sp_loader_config lc = sp_loader_config_default(batch, size);
  lc.workers = workers;
  lc.seed = seed;
  lc.drop_last = 0;
  sp_loader *l = sp_loader_create(cache, sp_scheme_for_k(cache->k), &lc);
  if (!l) { fprintf(stderr, "spry bench data: %s\n", sp_last_error()); sp_cache_free(cache); free(rate); sp_dataset_free(&ds); return 1; }
  float *norm = sp_aligned_alloc(sizeof(float) * (size_t)batch * channels * size * size);
  int64_t epoch = 0;
  run_loader(l, &epoch, batch * 2, 1, norm); /* warm-up: page in the cache and buffers */
  const char *stage[2] = {"augment", "normalize"};
  for (int s = 0; s < 2; s++) {
    for (int r = 0; r < runs; r++) rate[r] = run_loader(l, &epoch, images, s, norm);
    printf("{\"bench\":\"data\",\"stage\":\"%s\",\"workers\":%d,\"batch\":%d,\"size\":%d,\"images_per_s\":%.1f,"
           "\"cache\":\"%s\"}\n", stage[s], W, batch, size, median(rate, runs), cache->from_file ? "mmap" : "ram");
    fflush(stdout);
  }
  sp_aligned_free(norm);
  sp_loader_destroy(l);
  sp_cache_free(cache);
  free(rate);
  sp_dataset_free(&ds);
  return 0;
}
