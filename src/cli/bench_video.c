/* `spry bench video`: clip sampling throughput of the video reader, one JSON
 * line (medians over --runs passes over all FILES, after one warm-up pass).
 * A clip = open + sample indices (TSN or dense, training mode) + fetch them
 * resized to short side --size and centre-cropped + close, which is what a
 * loader worker does per sample. FILES may be frame folders made by
 * `spry prepare frames` (the frames-vs-video comparison). After timing,
 * every sampled frame of one pass is checked against a full sequential
 * decode of its file (`accuracy_mismatches` must be 0). The measuring is
 * sp_bench_video (train/bench_video.c); this file parses and prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/bench.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench video --sampler tsn --segments 8 --size 224 FILES...\n"
          "       spry bench video --sampler dense --frames 32 --stride 2 --size 224 FILES...\n"
          "  [--runs 5] [--workers 1] [--threads 1] [--no-index-cache] [--no-skip] [--no-check]\n"
          "  FILES are videos or frame folders (spry prepare frames); one JSON line.\n"
          "  --workers W clips in parallel (one reader each); --threads T decoder threads per clip\n"
          "  --no-skip: decode every picture of a run, also those nothing references (for comparison)\n"
          "  frames_decoded_per_clip: pictures the decoder decoded per clip (mean of the timed passes)\n");
}

/* Options into *o, FILES into files (o->files, o->n_files). ARGS_PARSED, or the
 * exit status: ARGS_HELP_SHOWN after --help, ARGS_BAD after a message. */
static int parse_args(int argc, char **argv, sp_bench_video_options *o, const char **files) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return ARGS_HELP_SHOWN;
    }
    if (a[0] != '-') {
      files[o->n_files++] = a;
      continue;
    }
    if (!strcmp(a, "--no-index-cache")) {
      o->no_index_cache = 1;
      continue;
    }
    if (!strcmp(a, "--no-check")) {
      o->check = 0;
      continue;
    }
    if (!strcmp(a, "--no-skip")) {
      o->no_skip = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "spry bench video: %s needs a value\n", a);
      return ARGS_BAD;
    }
    if (!strcmp(a, "--sampler")) {
      if (strcmp(v, "tsn") && strcmp(v, "dense")) {
        fprintf(stderr, "spry bench video: --sampler is tsn or dense\n");
        return ARGS_BAD;
      }
      o->tsn = !strcmp(v, "tsn");
      i++;
      continue;
    }
    /* Each option names itself and its range when its value is wrong. */
    int r;
    if ((r = sp_arg_int(argc, argv, &i, "--segments", 1, 1024, &o->segments)) ||
        (r = sp_arg_int(argc, argv, &i, "--frames", 1, 1024, &o->frames)) ||
        (r = sp_arg_int(argc, argv, &i, "--stride", 1, 1024, &o->stride)) ||
        (r = sp_arg_int(argc, argv, &i, "--size", 8, 4096, &o->size)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &o->runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--workers", 1, 1024, &o->workers)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 1, 1024, &o->threads))) {
      if (r < 0) return ARGS_BAD;
      continue;
    }
    fprintf(stderr, "spry bench video: unknown option %s\n", a);
    usage(stderr);
    return ARGS_BAD;
  }
  o->files = files;
  if (o->n_files == 0 || sp_bench_video_clip_len(o) > SP_BENCH_VIDEO_MAX_CLIP) {
    fprintf(stderr, "spry bench video: %s\n", o->n_files ? "a clip has at most 1024 frames" : "give the video FILES");
    usage(stderr);
    return ARGS_BAD;
  }
  return ARGS_PARSED;
}

static void print_result(const sp_bench_video_options *o, const sp_bench_video_result *res) {
  printf(
      "{\"bench\": \"video\", \"impl\": \"spry\", \"sampler\": \"%s\", \"segments\": %d, \"frames\": %d, "
      "\"stride\": %d, \"size\": %d, \"files\": %d, \"runs\": %d, \"workers\": %d, \"threads\": %d, "
      "\"index_cache\": %s, \"skip_unreferenced\": %s, \"clips_per_s\": %.3f, "
      "\"frames_decoded_per_clip\": %.1f, \"packets_per_clip\": %.1f, \"frames_per_s\": %.2f, "
      "\"cpu_ms_per_clip\": %.2f, \"accuracy_checked\": %d, \"accuracy_mismatches\": %d}\n",
      o->tsn ? "tsn" : "dense", o->tsn ? o->segments : 0, o->tsn ? 0 : o->frames, o->tsn ? 0 : o->stride, o->size,
      o->n_files, o->runs, o->workers, o->threads, o->no_index_cache ? "false" : "true", o->no_skip ? "false" : "true",
      res->clips_per_s, res->frames_decoded_per_clip, res->packets_per_clip, res->frames_per_s, res->cpu_ms_per_clip,
      res->accuracy_checked, res->accuracy_mismatches);
}

int sp_cli_bench_video(int argc, char **argv) {
  sp_bench_video_options o = sp_bench_video_options_default();
  const char **files = sp_xcalloc((size_t)argc, sizeof(char *));
  int rc = parse_args(argc, argv, &o, files);
  if (rc == ARGS_PARSED) {
    sp_bench_video_result res;
    if (sp_bench_video(&o, &res) != 0) {
      fprintf(stderr, "spry bench video: %s\n", sp_last_error());
      rc = 1;
    } else {
      if (res.check_failed >= 0)
        fprintf(stderr, "spry bench video: check %s: %s\n", files[res.check_failed], res.check_error);
      print_result(&o, &res);
      rc = res.accuracy_mismatches != 0;
    }
  }
  free(files);
  return rc;
}
