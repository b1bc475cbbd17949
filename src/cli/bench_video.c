/* `spry bench video`: clip sampling throughput of the video reader, one JSON
 * line (medians over --runs passes over all FILES, after one warm-up pass).
 * A clip = open + sample indices (TSN or dense, training mode) + fetch them
 * resized to short side --size and centre-cropped + close, which is what a
 * loader worker does per sample. FILES may be frame folders made by
 * `spry prepare frames` (the frames-vs-video comparison). After timing,
 * every sampled frame of one pass is checked against a full sequential
 * decode of its file (`accuracy_mismatches` must be 0). */
#include <omp.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/video.h"

typedef struct {
  int tsn, segments, frames, stride, size, threads, no_cache, no_skip;
} bench_cfg;

/* Process CPU seconds (all threads): on a shared, loaded machine the CPU
 * cost per clip is steadier than wall-clock rates. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int clip_len(const bench_cfg *c) { return c->tsn ? c->segments : c->frames; }

static int sample(const bench_cfg *c, int64_t n, int64_t epoch, int64_t index, int64_t *idx) {
  if (c->tsn) return sp_sample_tsn(n, c->segments, 1, 7, epoch, index, idx);
  return sp_sample_dense(n, c->frames, c->stride, 1, 0, 1, 7, epoch, index, idx);
}

/* One clip as a loader would read it; 0 or -1. Adds the reader's work
 * counters to *work. */
static int read_clip(const bench_cfg *c, const char *file, int64_t epoch, int64_t index, uint8_t *buf,
                     sp_video_stats *work) {
  sp_video_options opt = {.threads = c->threads, .no_index_cache = c->no_cache, .no_skip = c->no_skip};
  sp_video *v = sp_video_open_with(file, &opt);
  if (!v) return -1;
  int64_t idx[1024];
  int64_t n = sp_video_frame_count(v);
  sp_video_geom g = sp_video_geom_square(c->size, SP_VIDEO_CHW);
  int rc = n > 0 && sample(c, n, epoch, index, idx) == 0 ? sp_video_get_frames(v, idx, clip_len(c), &g, buf) : -1;
  sp_video_stats st = sp_video_get_stats(v);
  work->decoded += st.decoded;
  work->skipped += st.skipped;
  work->packets += st.packets;
  sp_video_close(v);
  return rc;
}

typedef struct {
  const int64_t *want;
  int n;
  uint8_t *ref; /* [n] frames */
  size_t fb;
} ref_ctx;

static int keep_wanted(int64_t i, const uint8_t *px, int h, int w, void *user) {
  ref_ctx *r = user;
  for (int j = 0; j < r->n; j++)
    if (r->want[j] == i) memcpy(r->ref + (size_t)j * r->fb, px, r->fb);
  return 0;
}

/* Frames of one pass that differ from the sequential decode. */
static int check_file(const bench_cfg *c, const char *file, int64_t index, int *checked) {
  sp_video *v = sp_video_open(file);
  if (!v) return -1;
  int L = clip_len(c), oh, ow, bad = 0;
  int64_t idx[1024];
  sp_video_geom g = sp_video_geom_square(c->size, SP_VIDEO_CHW);
  int64_t n = sp_video_frame_count(v);
  if (n <= 0 || sample(c, n, 0, index, idx) != 0 || sp_video_out_size(v, &g, &oh, &ow) != 0) {
    sp_video_close(v);
    return -1;
  }
  size_t fb = (size_t)oh * ow * 3;
  uint8_t *got = sp_xmalloc(fb * L), *ref = sp_xcalloc((size_t)L, fb);
  ref_ctx r = {idx, L, ref, fb};
  if (sp_video_get_frames(v, idx, L, &g, got) != 0 || sp_video_decode_all(v, &g, keep_wanted, &r) < 0) bad = -1;
  for (int j = 0; bad >= 0 && j < L; j++) bad += memcmp(got + (size_t)j * fb, ref + (size_t)j * fb, fb) != 0;
  *checked += L;
  free(got);
  free(ref);
  sp_video_close(v);
  return bad;
}

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

int sp_cli_bench_video(int argc, char **argv) {
  bench_cfg c = {1, 8, 32, 2, 224, 1, 0, 0};
  int runs = 5, workers = 1, check = 1, nfiles = 0;
  const char **files = sp_xcalloc((size_t)argc, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      free(files);
      return 0;
    }
    if (a[0] != '-') {
      files[nfiles++] = a;
      continue;
    }
    if (!strcmp(a, "--no-index-cache")) { c.no_cache = 1; continue; }
    if (!strcmp(a, "--no-check")) { check = 0; continue; }
    if (!strcmp(a, "--no-skip")) { c.no_skip = 1; continue; }
    if (!v) {
      fprintf(stderr, "spry bench video: %s needs a value\n", a);
      free(files);
      return 2;
    }
    if (!strcmp(a, "--sampler")) {
      if (strcmp(v, "tsn") && strcmp(v, "dense")) {
        fprintf(stderr, "spry bench video: --sampler is tsn or dense\n");
        free(files);
        return 2;
      }
      c.tsn = !strcmp(v, "tsn");
      i++;
      continue;
    }
    /* Each option names itself and its range when its value is wrong. */
    int r;
    if ((r = sp_arg_int(argc, argv, &i, "--segments", 1, 1024, &c.segments)) ||
        (r = sp_arg_int(argc, argv, &i, "--frames", 1, 1024, &c.frames)) ||
        (r = sp_arg_int(argc, argv, &i, "--stride", 1, 1024, &c.stride)) ||
        (r = sp_arg_int(argc, argv, &i, "--size", 8, 4096, &c.size)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--workers", 1, 1024, &workers)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 1, 1024, &c.threads))) {
      if (r < 0) {
        free(files);
        return 2;
      }
      continue;
    }
    fprintf(stderr, "spry bench video: unknown option %s\n", a);
    usage(stderr);
    free(files);
    return 2;
  }
  if (nfiles == 0 || clip_len(&c) > 1024) {
    fprintf(stderr, "spry bench video: %s\n", nfiles ? "a clip has at most 1024 frames" : "give the video FILES");
    usage(stderr);
    free(files);
    return 2;
  }
  size_t clip_bytes = (size_t)clip_len(&c) * c.size * c.size * 3;
  uint8_t **bufs = sp_xcalloc((size_t)workers, sizeof(uint8_t *));
  for (int w = 0; w < workers; w++) bufs[w] = sp_xmalloc(clip_bytes);
  double *rate = sp_xcalloc((size_t)runs, sizeof(double)), *cpu = sp_xcalloc((size_t)runs, sizeof(double));
  int failed = 0;
  char err[512] = "";
  sp_video_stats work = {0};
  /* Pass 0 warms the page cache (and the index cache unless disabled). */
  for (int r = 0; r <= runs && !failed; r++) {
    double t0 = sp_now(), c0 = cpu_now();
#pragma omp parallel for num_threads(workers) schedule(dynamic)
    for (int i = 0; i < nfiles; i++) {
      sp_video_stats w = {0};
      int bad = read_clip(&c, files[i], r, i, bufs[omp_get_thread_num()], &w) != 0;
      if (r > 0) {
#pragma omp critical
        {
          work.decoded += w.decoded;
          work.skipped += w.skipped;
          work.packets += w.packets;
        }
      }
      if (bad) {
#pragma omp critical
        {
          if (!failed) snprintf(err, sizeof err, "%s", sp_last_error());
          failed = 1;
        }
      }
    }
    if (r > 0) {
      rate[r - 1] = nfiles / (sp_now() - t0);
      cpu[r - 1] = 1000.0 * (cpu_now() - c0) / nfiles;
    }
  }
  int rc = 0;
  if (failed) {
    fprintf(stderr, "spry bench video: %s\n", err);
    rc = 1;
  } else {
    int mismatches = 0, checked = 0;
    for (int i = 0; check && i < nfiles && mismatches >= 0; i++) {
      int b = check_file(&c, files[i], i, &checked);
      if (b < 0) {
        fprintf(stderr, "spry bench video: check %s: %s\n", files[i], sp_last_error());
        mismatches = -1;
      } else {
        mismatches += b;
      }
    }
    double cps = sp_median(rate, runs);
    printf("{\"bench\": \"video\", \"impl\": \"spry\", \"sampler\": \"%s\", \"segments\": %d, \"frames\": %d, "
           "\"stride\": %d, \"size\": %d, \"files\": %d, \"runs\": %d, \"workers\": %d, \"threads\": %d, "
           "\"index_cache\": %s, \"skip_unreferenced\": %s, \"clips_per_s\": %.3f, "
           "\"frames_decoded_per_clip\": %.1f, \"packets_per_clip\": %.1f, \"frames_per_s\": %.2f, "
           "\"cpu_ms_per_clip\": %.2f, \"accuracy_checked\": %d, \"accuracy_mismatches\": %d}\n",
           c.tsn ? "tsn" : "dense", c.tsn ? c.segments : 0, c.tsn ? 0 : c.frames, c.tsn ? 0 : c.stride, c.size,
           nfiles, runs, workers, c.threads, c.no_cache ? "false" : "true", c.no_skip ? "false" : "true", cps,
           (double)work.decoded / ((double)runs * nfiles), (double)work.packets / ((double)runs * nfiles),
           cps * clip_len(&c), sp_median(cpu, runs), checked, mismatches);
    if (mismatches != 0) rc = 1;
  }
  for (int w = 0; w < workers; w++) free(bufs[w]);
  free(bufs);
  free(rate);
  free(cpu);
  free(files);
  return rc;
}
