/* Clip sampling throughput of the video reader (`spry bench video`): medians
 * over timed passes over all files, after one warm-up pass, then every
 * sampled frame of one pass checked against a full sequential decode of its
 * file. See spry/bench.h. */
#include <omp.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/bench.h"
#include "spry/video.h"

sp_bench_video_options sp_bench_video_options_default(void) {
  return (sp_bench_video_options){.tsn = 1,
                                  .segments = 8,
                                  .frames = 32,
                                  .stride = 2,
                                  .size = 224,
                                  .threads = 1,
                                  .runs = 5,
                                  .workers = 1,
                                  .check = 1};
}

int sp_bench_video_clip_len(const sp_bench_video_options *c) { return c->tsn ? c->segments : c->frames; }

/* Process CPU seconds (all threads): on a shared, loaded machine the CPU
 * cost per clip is steadier than wall-clock rates. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int sample(const sp_bench_video_options *c, int64_t n, int64_t epoch, int64_t index, int64_t *idx) {
  if (c->tsn) return sp_sample_tsn(n, c->segments, 1, 7, epoch, index, idx);
  return sp_sample_dense(n, c->frames, c->stride, 1, 0, 1, 7, epoch, index, idx);
}

/* One clip as a loader would read it; 0 or -1. Adds the reader's work
 * counters to *work. */
static int read_clip(const sp_bench_video_options *c, const char *file, int64_t epoch, int64_t index, uint8_t *buf,
                     sp_video_stats *work) {
  sp_video_options opt = {.threads = c->threads, .no_index_cache = c->no_index_cache, .no_skip = c->no_skip};
  sp_video *v = sp_video_open_with(file, &opt);
  if (!v) return -1;
  int64_t idx[SP_BENCH_VIDEO_MAX_CLIP];
  int64_t n = sp_video_frame_count(v);
  sp_video_geom g = sp_video_geom_square(c->size, SP_VIDEO_CHW);
  int rc = n > 0 && sample(c, n, epoch, index, idx) == 0
               ? sp_video_get_frames(v, idx, sp_bench_video_clip_len(c), &g, buf)
               : -1;
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
static int check_file(const sp_bench_video_options *c, const char *file, int64_t index, int *checked) {
  sp_video *v = sp_video_open(file);
  if (!v) return -1;
  int L = sp_bench_video_clip_len(c), oh, ow, bad = 0;
  int64_t idx[SP_BENCH_VIDEO_MAX_CLIP];
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

/* Pass 0 warms the page cache (and the index cache unless disabled); passes
 * 1..runs are timed into rate[] (clips/s) and cpu[] (CPU ms per clip), and
 * their reader work summed into *work. -1 with the first failing clip's error. */
static int timed_passes(const sp_bench_video_options *c, double *rate, double *cpu, sp_video_stats *work) {
  const int nfiles = c->n_files, workers = c->workers;
  size_t clip_bytes = (size_t)sp_bench_video_clip_len(c) * c->size * c->size * 3;
  uint8_t **bufs = sp_xcalloc((size_t)workers, sizeof(uint8_t *));
  for (int w = 0; w < workers; w++) bufs[w] = sp_xmalloc(clip_bytes);
  int failed = 0;
  char err[512] = "";
  for (int r = 0; r <= c->runs && !failed; r++) {
    double t0 = sp_now(), c0 = cpu_now();
#pragma omp parallel for num_threads(workers) schedule(dynamic)
    for (int i = 0; i < nfiles; i++) {
      sp_video_stats w = {0};
      int bad = read_clip(c, c->files[i], r, i, bufs[omp_get_thread_num()], &w) != 0;
      if (r > 0) {
#pragma omp critical
        {
          work->decoded += w.decoded;
          work->skipped += w.skipped;
          work->packets += w.packets;
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
  for (int w = 0; w < workers; w++) free(bufs[w]);
  free(bufs);
  return failed ? sp_error_set("%s", err) : 0;
}

/* Every file's sampled frames against its sequential decode, until a check
 * cannot run (then mismatches -1, and which file and why). */
static void check_accuracy(const sp_bench_video_options *c, sp_bench_video_result *res) {
  int mismatches = 0, checked = 0;
  res->check_failed = -1;
  res->check_error[0] = 0;
  for (int i = 0; c->check && i < c->n_files && mismatches >= 0; i++) {
    int b = check_file(c, c->files[i], i, &checked);
    if (b < 0) {
      res->check_failed = i;
      snprintf(res->check_error, sizeof res->check_error, "%s", sp_last_error());
      mismatches = -1;
    } else {
      mismatches += b;
    }
  }
  res->accuracy_checked = checked;
  res->accuracy_mismatches = mismatches;
}

int sp_bench_video(const sp_bench_video_options *c, sp_bench_video_result *res) {
  memset(res, 0, sizeof *res);
  if (c->n_files < 1 || !c->files) return sp_error_set("bench video: no files given");
  if (sp_bench_video_clip_len(c) > SP_BENCH_VIDEO_MAX_CLIP)
    return sp_error_set("bench video: a clip has at most %d frames", SP_BENCH_VIDEO_MAX_CLIP);
  if (c->runs < 1 || c->workers < 1 || c->size < 1)
    return sp_error_set("bench video: runs, workers and size must be positive");
  const int runs = c->runs, nfiles = c->n_files;
  double *rate = sp_xcalloc((size_t)runs, sizeof(double)), *cpu = sp_xcalloc((size_t)runs, sizeof(double));
  sp_video_stats work = {0};
  int rc = timed_passes(c, rate, cpu, &work);
  if (rc == 0) {
    check_accuracy(c, res);
    double cps = sp_bench_median(rate, runs);
    res->clips_per_s = cps;
    res->frames_decoded_per_clip = (double)work.decoded / ((double)runs * nfiles);
    res->packets_per_clip = (double)work.packets / ((double)runs * nfiles);
    res->frames_per_s = cps * sp_bench_video_clip_len(c);
    res->cpu_ms_per_clip = sp_bench_median(cpu, runs);
  }
  free(rate);
  free(cpu);
  return rc;
}
