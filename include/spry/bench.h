/* Benchmarks as library calls: what `spry bench video`, `spry bench data`
 * and `spry bench op` measure, usable from C. The CLI only parses options and prints each result
 * as one JSON line. */
#ifndef SPRY_BENCH_H
#define SPRY_BENCH_H

#include <stdint.h>

#include "spry/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Median of n doubles (sorts v in place); 0 when n <= 0. */
double sp_bench_median(double *v, int n);

/* ---- video: clip sampling throughput of the reader ----------------------
 * A clip = open + sample indices (TSN or dense, training mode) + fetch them
 * resized to short side `size` and centre-cropped + close, which is what a
 * loader worker does per sample. Files may be videos or frame folders. One
 * warm-up pass over all files, then `runs` timed passes; after timing, every
 * sampled frame of one pass is compared with a full sequential decode of its
 * file (unless check is 0). */

#define SP_BENCH_VIDEO_MAX_CLIP 1024 /* frames a clip may have */

typedef struct {
  int tsn;            /* 1: TSN sampler (segments frames); 0: dense (frames, stride) [1] */
  int segments;       /* [8] */
  int frames, stride; /* [32, 2] */
  int size;           /* short side and square crop [224] */
  int threads;        /* decoder threads per clip [1] */
  int no_index_cache; /* rescan each file every time [0] */
  int no_skip;        /* decode every picture, also those nothing references [0] */
  int runs;           /* timed passes [5] */
  int workers;        /* clips read in parallel, one reader each [1] */
  int check;          /* compare sampled frames with a sequential decode [1] */
  int n_files;
  const char *const *files;
} sp_bench_video_options;

typedef struct {
  double clips_per_s;             /* median over the timed passes */
  double frames_decoded_per_clip; /* pictures the decoder decoded per clip (mean of the timed passes) */
  double packets_per_clip;        /* mean of the timed passes */
  double frames_per_s;            /* clips_per_s times the clip length */
  double cpu_ms_per_clip;         /* process CPU time per clip, median over the timed passes */
  int accuracy_checked;           /* frames compared with the sequential decode */
  int accuracy_mismatches;        /* frames that differ; -1 when a check could not run */
  int check_failed;               /* the file whose check could not run, -1 if none */
  char check_error[1024];         /* why (when check_failed >= 0) */
} sp_bench_video_result;

sp_bench_video_options sp_bench_video_options_default(void);
/* Frames per clip of these options (segments for TSN, else frames). */
int sp_bench_video_clip_len(const sp_bench_video_options *opt);
/* 0 with *res filled (accuracy failures are reported in it), or -1 with an
 * error when a clip of a timed pass could not be read. */
int sp_bench_video(const sp_bench_video_options *opt, sp_bench_video_result *res);

/* ---- data: throughput of the image pipeline ------------------------------
 * Three stages, each the median images/s of `runs` runs:
 *   decode    = cold decode + crop + resize into the RAM cache (workers threads)
 *   augment   = cached augment (scale, flip, RandAugment 2/7) + collate to u8
 *   normalize = augment + collate + normalise to f32 on the consumer side */

typedef struct {
  const char *stage;   /* "decode", "augment" or "normalize" */
  double images_per_s; /* median over the runs */
  int images;          /* decode: the dataset's image count */
  int from_file;       /* augment, normalize: crops mapped from the cache file (else in RAM) */
} sp_bench_data_stage;

typedef struct {
  const char *dataset;    /* a folder sp_dataset_open_dir reads */
  int size;               /* crop side [224] */
  int batch;              /* [64] */
  int workers;            /* decode and loader threads; 0 = online cores [0] */
  int use_cache;          /* map the crops from an on-disk cache file, built on first use [0] */
  const char *cache_file; /* NULL: $TMPDIR (or /tmp)/spry-bench-data-SIZE-PID.cache, removed at the end */
  int runs;               /* [5] */
  int images;             /* images per augment/normalize run; epochs repeat [4096] */
  int channels;           /* 3, or 1 for gray [3] */
  int64_t seed;           /* [1] */
  /* Called as each stage finishes (may be NULL), before the next one starts. */
  void (*on_stage)(const sp_bench_data_stage *stage, void *user);
  void *user;
} sp_bench_data_options;

#define SP_BENCH_DATA_STAGES 3

typedef struct {
  sp_bench_data_stage stages[SP_BENCH_DATA_STAGES];
  int n_stages; /* stages that finished */
} sp_bench_data_result;

sp_bench_data_options sp_bench_data_options_default(void);
/* 0, or -1 with an error (the dataset, the cache or the loader failed; the
 * stages that finished before are in *res). */
int sp_bench_data(const sp_bench_data_options *opt, sp_bench_data_result *res);

/* ---- op: the fused temporal shift against its composed version ---------
 * The seed's Python builds the shift from framework ops (reshape -> pad ->
 * three slices -> concat, each its own buffer; backward: concat split, slice
 * scatter into a zeroed padded gradient, pad crop, the zeroing timed as every
 * framework pays it); here that composition is written in C with the same
 * parallel copies. It is timed against the fused op (the cpu backend's kernel
 * in nChw16c when the build has it, writing a fresh input gradient), the
 * reference op (plain layout, accumulating backward, its gradient zeroed
 * outside the timed region as a plan would) and a parallel memcpy of the same
 * bytes (the speed limit of any shift). Medians of `runs` rounds after two
 * warm-up rounds. */

typedef struct {
  int64_t shape[4]; /* NT, C, H, W; NT a multiple of segments [32, 16, 32, 32] */
  int segments;     /* T [2] */
  float ratio;      /* each of the two shifted groups is ratio * C channels, in [0, 0.5] [0.2] */
  int runs;         /* [20] */
  int threads;      /* OpenMP threads; 0 = OpenMP's default [0] */
} sp_bench_tshift_options;

typedef struct {
  const char *kernel;       /* "cpu_nChw16c", or "ref" where the build has no cpu kernel */
  int threads;              /* the threads it ran with */
  double fwd_ms, fwdbwd_ms; /* the fused op: `kernel`'s */
  double ref_fwd_ms, ref_fwdbwd_ms;
  double composed_fwd_ms, composed_fwdbwd_ms;
  double memcpy_ms;
  int same_output; /* fused and composed agree bit for bit, forward and backward (1 where C ratio is not whole) */
} sp_bench_tshift_result;

sp_bench_tshift_options sp_bench_tshift_options_default(void);
/* 1 when this machine can hold the benchmark: it allocates about 16 tensors
 * of the shape (*need bytes), refused above 80% of the memory (*have bytes),
 * instead of dying in the allocator. */
int sp_bench_tshift_fits(const sp_bench_tshift_options *opt, double *need, double *have);
/* 0 with *res filled, or -1 with an error (options out of range, a shape
 * that does not fit in memory). */
int sp_bench_tshift(const sp_bench_tshift_options *opt, sp_bench_tshift_result *res);

#ifdef __cplusplus
}
#endif

#endif
