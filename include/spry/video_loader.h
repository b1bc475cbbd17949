/* The video clip loader: the image loader's design (persistent workers, a
 * bounded ring of prefetched batch slots, results independent of the worker
 * count) for clips sampled from videos or pre-decoded frame folders.
 *
 * A batch is uint8 [n*t][3][h][w], the t frames of each clip consecutive (the
 * layout TSN/TSM take after normalisation). Each clip's randomness (frames,
 * crop, flip) comes from sp_rng_key(seed, epoch, entry), so the same seed
 * gives the same batches whatever the worker count or rank.
 *
 * Batches may change shape within an epoch (Multigrid): start an epoch with a
 * list of per-batch shapes; batch j then takes the next shapes[j].batch
 * entries of the epoch's order and samples shapes[j].frames frames at
 * shapes[j].size. With world W > 1 the shapes are this rank's share: batch j
 * of rank r is slice r of the global batch of W x shapes[j].batch entries
 * (so W ranks together see one process's global batches). */
#ifndef SPRY_VIDEO_LOADER_H
#define SPRY_VIDEO_LOADER_H

#include <stdint.h>

#include "spry/video.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SP_SAMPLER_TSN = 0, SP_SAMPLER_DENSE = 1 } sp_sampler_kind;

typedef struct {
  sp_sampler_kind sampler;
  int frames;      /* TSN: segments; dense: clip length */
  int stride;      /* dense: frame stride (tau) */
  int size;        /* square crop side */
  int short_side;  /* resize the short side to this before cropping; 0 = size * 8 / 7 */
  int train;       /* 1: random frames, random crop, flips; 0: centre frames and crop */
  float flip_prob; /* training only */
  int test_clips;  /* dense testing: evenly spaced clips per video (entries of one video are adjacent) */
  int batch;       /* clips per batch (the default shape) */
  int workers;     /* 0 = cores */
  int prefetch;    /* slots; 0 = 2 * workers */
  uint64_t seed;
  int shuffle, drop_last;
  int rank, world; /* sharding: rank r takes slice r of every global batch */
  /* Evaluation sharding instead (world > 1): rank r takes the contiguous
   * entries [r E / W, (r+1) E / W) of the epoch's order, so the ranks cover
   * all E entries once between them, in parts that differ by at most one.
   * Ranks then take different numbers of batches: for passes with no
   * collective inside (evaluation), not training. */
  int eval_shard;
} sp_video_loader_config;
sp_video_loader_config sp_video_loader_config_default(int batch, int frames, int size);

/* One batch shape (Multigrid changes it per iteration). */
typedef struct {
  int batch, frames, size;
} sp_video_shape;

typedef struct {
  int n, t, h, w;  /* clips, frames per clip, frame size */
  uint8_t *pixels; /* [n*t][3][h][w] */
  int32_t *label;  /* [n] */
  int32_t *video;  /* [n] index into the list */
  int32_t *clip;   /* [n] test clip number (0 in training) */
  uint8_t *bad;    /* [n] 1: this clip could not be read (its frames are zero) */
  int failed;      /* clips that could not be read: the count of bad */
  int64_t epoch, step;
} sp_video_batch;

typedef struct sp_video_loader sp_video_loader;
/* The list must outlive the loader. */
sp_video_loader *sp_video_loader_create(const sp_video_list *list, const sp_video_loader_config *cfg);
/* Entries per epoch for this rank (videos * test_clips / world; with
 * eval_shard, this rank's part). */
int sp_video_loader_entries(const sp_video_loader *l);
/* Entries of one epoch over all ranks (videos * test_clips). */
int sp_video_loader_entries_all(const sp_video_loader *l);
/* An epoch of default-shaped batches. */
int sp_video_loader_start_epoch(sp_video_loader *l, int64_t epoch);
/* An epoch of n_shapes batches shaped as given (copied); their batch sizes
 * must not sum past the entries. Cancels the current epoch. */
int sp_video_loader_start_epoch_shapes(sp_video_loader *l, int64_t epoch, const sp_video_shape *shapes, int n_shapes);
int sp_video_loader_batches_per_epoch(const sp_video_loader *l);
/* Next batch in order, or NULL at the end of the epoch; valid until the next
 * call of next/start/destroy. */
const sp_video_batch *sp_video_loader_next(sp_video_loader *l);
void sp_video_loader_destroy(sp_video_loader *l);

/* One clip straight into out ([t][3][size][size]): what a worker does, for
 * tests and tools. entry = video * test_clips + clip. 0 or -1. */
int sp_video_load_clip(const sp_video_list *list, const sp_video_loader_config *cfg, int64_t epoch, int64_t entry,
                       int frames, int size, uint8_t *out);

#ifdef __cplusplus
}
#endif
#endif
