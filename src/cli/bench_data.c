/* `spry bench data`: throughput of the image pipeline, one JSON line per
 * stage (medians of --runs runs):
 *   decode    = cold decode + crop + resize into the RAM cache (W threads)
 *   augment   = cached augment (scale, flip, RandAugment 2/7) + collate to u8
 *   normalize = augment + collate + normalise to f32 on the consumer side
 * The measuring is sp_bench_data (train/bench_data.c); this file parses and
 * prints each stage as it finishes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/bench.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench data --dataset DIR [--size 224] [--batch 64] [--workers W] [--cache]\n"
          "                       [--cache-file PATH] [--runs 5] [--images N] [--gray] [--seed S]\n"
          "  --cache       map the crops from an on-disk cache file (built on first use; without\n"
          "                --cache-file a temporary one in $TMPDIR, removed at the end)\n"
          "  --images N    images per augment/normalize run (default 4096; epochs repeat)\n");
}

/* Options into *o: ARGS_PARSED, or the exit status (ARGS_HELP_SHOWN after --help,
 * ARGS_BAD after a message). */
static int parse_args(int argc, char **argv, sp_bench_data_options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *seed_s = NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return ARGS_HELP_SHOWN;
    }
    if (!strcmp(a, "--cache")) {
      o->use_cache = 1;
      continue;
    }
    if (!strcmp(a, "--gray")) {
      o->channels = 1;
      continue;
    }
    /* Each option names itself and its range when its value is wrong. */
    int r;
    if ((r = sp_arg_str(argc, argv, &i, "--dataset", &o->dataset)) ||
        (r = sp_arg_str(argc, argv, &i, "--cache-file", &o->cache_file)) ||
        (r = sp_arg_int(argc, argv, &i, "--size", 8, 4096, &o->size)) ||
        (r = sp_arg_int(argc, argv, &i, "--batch", 1, 65536, &o->batch)) ||
        (r = sp_arg_int(argc, argv, &i, "--workers", 0, 1024, &o->workers)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &o->runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--images", 1, 100000000, &o->images)) ||
        (r = sp_arg_str(argc, argv, &i, "--seed", &seed_s))) {
      if (r < 0) return ARGS_BAD;
      if (o->cache_file) o->use_cache = 1;
      if (seed_s && sp_parse_int64(seed_s, 0, INT64_MAX, &o->seed) != 0) {
        fprintf(stderr, "spry bench data: --seed wants a non-negative integer, got '%s'\n", seed_s);
        return ARGS_BAD;
      }
      continue;
    }
    fprintf(stderr, "spry bench data: unknown option %s\n", a);
    usage(stderr);
    return ARGS_BAD;
  }
  if (!o->dataset) {
    fprintf(stderr, "spry bench data: --dataset is required\n");
    usage(stderr);
    return ARGS_BAD;
  }
  return ARGS_PARSED;
}

static void print_stage(const sp_bench_data_stage *s, void *user) {
  const sp_bench_data_options *o = user;
  if (!strcmp(s->stage, "decode"))
    printf(
        "{\"bench\":\"data\",\"stage\":\"decode\",\"workers\":%d,\"batch\":%d,\"size\":%d,\"images\":%d,"
        "\"images_per_s\":%.1f}\n",
        o->workers, o->batch, o->size, s->images, s->images_per_s);
  else
    printf(
        "{\"bench\":\"data\",\"stage\":\"%s\",\"workers\":%d,\"batch\":%d,\"size\":%d,\"images_per_s\":%.1f,"
        "\"cache\":\"%s\"}\n",
        s->stage, o->workers, o->batch, o->size, s->images_per_s, s->from_file ? "mmap" : "ram");
  fflush(stdout);
}

int sp_cli_bench_data(int argc, char **argv) {
  sp_bench_data_options o = sp_bench_data_options_default();
  int rc = parse_args(argc, argv, &o);
  if (rc != ARGS_PARSED) return rc;
  o.on_stage = print_stage;
  o.user = &o;
  sp_bench_data_result res;
  if (sp_bench_data(&o, &res) != 0) {
    fprintf(stderr, "spry bench data: %s\n", sp_last_error());
    return 1;
  }
  return 0;
}
