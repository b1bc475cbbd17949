/* The video clip loader (see include/spry/video_loader.h), on the batch ring
 * the image loader uses too (src/data/batch_ring.h). The work unit is one
 * clip, not a piece of ~8 samples as for images: decoding a clip costs
 * milliseconds, far more than a lock. Batches may have different shapes
 * within an epoch (Multigrid), so each epoch carries its own list of shapes
 * and slots are sized for the largest. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch_ring.h"
#include "data/data_internal.h"
#include "spry/rng.h"
#include "spry/video_loader.h"

struct sp_video_loader {
  const sp_video_list *list;
  sp_video_loader_config cfg;
  sp_batch_ring *ring;
  sp_video_batch *slots; /* one batch per ring slot */
  int depth;
  size_t slot_bytes; /* pixel capacity of each slot */
  int slot_clips;    /* label capacity */
  /* The epoch (written only while the ring is paused). */
  int32_t *order;
  int entries, per_rank;
  int shard_begin; /* eval_shard: this rank's first entry of the order */
  sp_video_shape *shapes;
  int64_t *first; /* first[j]: position in order of batch j's first clip */
  int cap_batches;
};

/* With no data.short_side, frames are resized so that the crop is 7/8 of the
 * short side (224 of 256), the usual resize-then-crop of video recipes. */
#define SHORT_SIDE_PER_CROP (8.0 / 7.0)

sp_video_loader_config sp_video_loader_config_default(int batch, int frames, int size) {
  sp_video_loader_config c;
  memset(&c, 0, sizeof c);
  c.sampler = SP_SAMPLER_TSN;
  c.frames = frames;
  c.stride = 1;
  c.size = size;
  c.train = 1;
  c.flip_prob = 0.5f;
  c.test_clips = 1;
  c.batch = batch;
  c.shuffle = 1;
  c.drop_last = 1;
  c.world = 1;
  return c;
}

static void flip_planes(uint8_t *px, int planes, int h, int w) {
  for (int p = 0; p < planes; p++)
    for (int y = 0; y < h; y++) {
      uint8_t *row = px + ((size_t)p * h + y) * w;
      for (int a = 0, b = w - 1; a < b; a++, b--) {
        uint8_t t = row[a];
        row[a] = row[b];
        row[b] = t;
      }
    }
}

int sp_video_load_clip(const sp_video_list *list, const sp_video_loader_config *cfg, int64_t epoch, int64_t entry,
                       int frames, int size, uint8_t *out) {
  int clips = cfg->test_clips > 0 && !cfg->train ? cfg->test_clips : 1;
  int vid = (int)(entry / clips), clip = (int)(entry % clips);
  if (vid < 0 || vid >= list->n) return sp_error_set("video loader: entry %lld out of range", (long long)entry);
  const char *path = list->path[vid];
  int64_t idx[1024];
  if (frames < 1 || frames > 1024) return sp_error_set("video loader: %d frames per clip outside 1..1024", frames);
  sp_video *v = sp_video_open(path);
  if (!v) return -1;
  int rc = -1;
  int64_t n = list->frames && list->frames[vid] > 0 ? list->frames[vid] : sp_video_frame_count(v);
  if (n <= 0) goto done;
  if (cfg->sampler == SP_SAMPLER_TSN)
    rc = sp_sample_tsn(n, frames, cfg->train, cfg->seed, epoch, entry, idx);
  else
    rc = sp_sample_dense(n, frames, cfg->stride > 0 ? cfg->stride : 1, cfg->train, clip, clips, cfg->seed, epoch, entry,
                         idx);
  if (rc != 0) goto done;
  /* A smaller Multigrid size keeps the crop's share of the frame: the short
   * side shrinks with it. */
  int base_short = cfg->short_side > 0 ? cfg->short_side : (int)(cfg->size * SHORT_SIDE_PER_CROP);
  int short_side = (int)lround((double)base_short * size / cfg->size);
  if (short_side < size) short_side = size;
  sp_video_geom g = {.short_side = short_side, .layout = SP_VIDEO_CHW};
  int rh, rw;
  if ((rc = sp_video_out_size(v, &g, &rh, &rw)) != 0) goto done;
  g.crop_h = g.crop_w = size;
  g.crop_y = g.crop_x = -1;
  /* The crop's own stream, apart from the frame sampler's use of the key. */
  sp_rng r = sp_rng_make(
      sp_rng_key(sp_rng_key(cfg->seed, SP_RNG_VIDEO_CROP_A, SP_RNG_VIDEO_CROP_B), (uint64_t)epoch, (uint64_t)entry));
  if (cfg->train) {
    g.crop_y = rh > size ? (int)sp_rng_below(&r, (uint32_t)(rh - size + 1)) : 0;
    g.crop_x = rw > size ? (int)sp_rng_below(&r, (uint32_t)(rw - size + 1)) : 0;
  }
  if ((rc = sp_video_get_frames(v, idx, frames, &g, out)) != 0) goto done;
  if (cfg->train && sp_rng_uniform(&r) < cfg->flip_prob) flip_planes(out, frames * 3, size, size);
done:
  if (rc != 0 && n <= 0) sp_error_set("%s: no frames", path);
  sp_video_close(v);
  return rc;
}

static int ring_units(void *ctx, int64_t batch) { return ((sp_video_loader *)ctx)->shapes[batch].batch; }

static void ring_begin(void *ctx, int slot, int64_t batch, int64_t epoch) {
  sp_video_loader *l = ctx;
  const sp_video_shape sh = l->shapes[batch];
  sp_video_batch *b = &l->slots[slot];
  *b = (sp_video_batch){.n = sh.batch,
                        .t = sh.frames,
                        .h = sh.size,
                        .w = sh.size,
                        .pixels = b->pixels,
                        .label = b->label,
                        .video = b->video,
                        .clip = b->clip,
                        .bad = b->bad,
                        .epoch = epoch,
                        .step = batch};
}

static void ring_fill(void *ctx, int slot, int64_t batch, int i, int64_t epoch) {
  sp_video_loader *l = ctx;
  const sp_video_shape sh = l->shapes[batch];
  sp_video_batch *b = &l->slots[slot];
  const int64_t entry = l->order[l->first[batch] + i];
  const size_t clip_bytes = (size_t)sh.frames * 3 * sh.size * sh.size;
  uint8_t *out = b->pixels + clip_bytes * i;
  int clips = l->cfg.test_clips > 0 && !l->cfg.train ? l->cfg.test_clips : 1;
  b->video[i] = (int32_t)(entry / clips);
  b->clip[i] = (int32_t)(entry % clips);
  b->label[i] = l->list->label[entry / clips];
  int bad = sp_video_load_clip(l->list, &l->cfg, epoch, entry, sh.frames, sh.size, out) != 0;
  if (bad) {
    /* A bad clip must not stop training: zeros (the dataset mean after
     * normalisation is close to it), counted and reported. */
    fprintf(stderr, "spry data: skip %s: %s\n", l->list->path[entry / clips], sp_last_error());
    memset(out, 0, clip_bytes);
  }
  b->bad[i] = (uint8_t)bad;
}

static const sp_batch_ring_ops ring_ops = {ring_units, ring_begin, ring_fill};

sp_video_loader *sp_video_loader_create(const sp_video_list *list, const sp_video_loader_config *cfg) {
  if (!list || list->n <= 0) return sp_error_set("video loader: empty list"), NULL;
  if (cfg->batch <= 0 || cfg->frames <= 0 || cfg->size < 8)
    return sp_error_set("video loader: batch %d, frames %d, size %d must be positive (size >= 8)", cfg->batch,
                        cfg->frames, cfg->size),
           NULL;
  int world = cfg->world > 0 ? cfg->world : 1;
  if (cfg->rank < 0 || cfg->rank >= world)
    return sp_error_set("video loader: rank %d outside world size %d", cfg->rank, world), NULL;
  sp_video_loader *l = sp_xcalloc(1, sizeof *l);
  l->list = list;
  l->cfg = *cfg;
  l->cfg.world = world;
  if (l->cfg.test_clips < 1 || l->cfg.train) l->cfg.test_clips = 1;
  const int workers = cfg->workers > 0 ? cfg->workers : sp_default_threads();
  l->depth = cfg->prefetch > 0 ? cfg->prefetch : 2 * workers;
  l->entries = list->n * l->cfg.test_clips;
  if (l->cfg.eval_shard && world > 1) {
    /* Contiguous parts: the test clips of a video (adjacent entries) mostly
     * stay on one rank. */
    l->shard_begin = (int)((int64_t)l->cfg.rank * l->entries / world);
    l->per_rank = (int)((int64_t)(l->cfg.rank + 1) * l->entries / world) - l->shard_begin;
  } else {
    /* Equal counts keep data-parallel ranks in step. */
    l->cfg.eval_shard = 0;
    l->per_rank = l->entries / world > 0 ? l->entries / world : l->entries;
  }
  l->order = sp_xmalloc(sizeof(int32_t) * (size_t)l->entries);
  l->slots = sp_xcalloc((size_t)l->depth, sizeof(sp_video_batch));
  if (!(l->ring = sp_batch_ring_new(workers, l->depth, &ring_ops, l))) {
    sp_video_loader_destroy(l);
    return NULL;
  }
  return l;
}

int sp_video_loader_entries(const sp_video_loader *l) { return l->per_rank; }
int sp_video_loader_entries_all(const sp_video_loader *l) { return l->entries; }

int sp_video_loader_batches_per_epoch(const sp_video_loader *l) {
  int B = l->cfg.batch;
  return l->cfg.drop_last ? l->per_rank / B : (l->per_rank + B - 1) / B;
}

int sp_video_loader_start_epoch_shapes(sp_video_loader *l, int64_t epoch, const sp_video_shape *shapes, int n_shapes) {
  int64_t total = 0;
  size_t bytes = 0;
  int clips = 0;
  for (int j = 0; j < n_shapes; j++) {
    const sp_video_shape *s = &shapes[j];
    if (s->batch < 1 || s->frames < 1 || s->frames > 1024 || s->size < 8)
      return sp_error_set("video loader: batch shape %d is %d clips x %d frames x %d px", j, s->batch, s->frames,
                          s->size);
    total += s->batch;
    size_t b = (size_t)s->batch * s->frames * 3 * s->size * s->size;
    bytes = b > bytes ? b : bytes;
    clips = s->batch > clips ? s->batch : clips;
  }
  if (total > l->per_rank)
    return sp_error_set("video loader: %d batches take %lld clips, the epoch has %d", n_shapes, (long long)total,
                        l->per_rank);
  if (l->cfg.world > 1 && !l->cfg.eval_shard && total * l->cfg.world > l->entries)
    return sp_error_set("video loader: %d ranks x %lld clips per epoch, the list has %d", l->cfg.world,
                        (long long)total, l->entries);
  /* The current epoch is cancelled: no fill reads the order or the slots now. */
  sp_batch_ring_pause(l->ring);
  if (bytes > l->slot_bytes || clips > l->slot_clips) {
    for (int i = 0; i < l->depth; i++) {
      sp_video_batch *b = &l->slots[i];
      sp_aligned_free(b->pixels);
      free(b->label), free(b->video), free(b->clip), free(b->bad);
      b->pixels = sp_aligned_alloc(bytes);
      b->label = sp_xmalloc(sizeof(int32_t) * (size_t)clips);
      b->video = sp_xmalloc(sizeof(int32_t) * (size_t)clips);
      b->clip = sp_xmalloc(sizeof(int32_t) * (size_t)clips);
      b->bad = sp_xmalloc((size_t)clips);
    }
    l->slot_bytes = bytes;
    l->slot_clips = clips;
  }
  if (n_shapes > l->cap_batches) {
    l->cap_batches = n_shapes;
    l->shapes = sp_xrealloc(l->shapes, sizeof(sp_video_shape) * (size_t)n_shapes);
    l->first = sp_xrealloc(l->first, sizeof(int64_t) * (size_t)n_shapes);
  }
  int64_t pos = 0;
  for (int j = 0; j < n_shapes; j++) {
    l->shapes[j] = shapes[j];
    l->first[j] = pos;
    pos += shapes[j].batch;
  }
  int32_t *all = sp_xmalloc(sizeof(int32_t) * (size_t)l->entries);
  for (int i = 0; i < l->entries; i++) all[i] = i;
  if (l->cfg.shuffle) {
    /* The same permutation on every rank (seed, epoch); each takes its slice. */
    sp_rng r = sp_rng_make(sp_rng_key(l->cfg.seed, (uint64_t)epoch, SP_RNG_EPOCH_ORDER));
    sp_rng_shuffle(&r, all, l->entries);
  }
  if (l->cfg.eval_shard) {
    /* This rank's contiguous part, whatever the batch shapes. */
    memcpy(l->order, all + l->shard_begin, sizeof(int32_t) * (size_t)total);
  } else {
    /* Batch j of every rank is slice `rank` of global batch j (the ranks'
     * batches side by side), so W ranks train on exactly the global batches
     * of one process with W times the batch. A world of one takes the prefix. */
    const int world = l->cfg.world > 1 ? l->cfg.world : 1, rank = world > 1 ? l->cfg.rank : 0;
    int64_t at = 0, global = 0;
    for (int j = 0; j < n_shapes; j++) {
      memcpy(l->order + at, all + global + (int64_t)rank * shapes[j].batch, sizeof(int32_t) * (size_t)shapes[j].batch);
      at += shapes[j].batch;
      global += (int64_t)shapes[j].batch * world;
    }
  }
  free(all);
  sp_batch_ring_start(l->ring, epoch, n_shapes);
  return 0;
}

int sp_video_loader_start_epoch(sp_video_loader *l, int64_t epoch) {
  int n = sp_video_loader_batches_per_epoch(l), B = l->cfg.batch;
  sp_video_shape *s = sp_xmalloc(sizeof(sp_video_shape) * (size_t)(n > 0 ? n : 1));
  for (int j = 0; j < n; j++) {
    int left = l->per_rank - j * B;
    s[j] = (sp_video_shape){left < B ? left : B, l->cfg.frames, l->cfg.size};
  }
  int rc = sp_video_loader_start_epoch_shapes(l, epoch, s, n);
  free(s);
  return rc;
}

const sp_video_batch *sp_video_loader_next(sp_video_loader *l) {
  int slot = sp_batch_ring_next(l->ring);
  if (slot < 0) return NULL;
  sp_video_batch *b = &l->slots[slot];
  b->failed = 0;
  for (int i = 0; i < b->n; i++) b->failed += b->bad[i];
  return b;
}

void sp_video_loader_destroy(sp_video_loader *l) {
  if (!l) return;
  sp_batch_ring_free(l->ring); /* workers gone: the slots are ours */
  for (int i = 0; l->slots && i < l->depth; i++) {
    sp_aligned_free(l->slots[i].pixels);
    free(l->slots[i].label), free(l->slots[i].video), free(l->slots[i].clip), free(l->slots[i].bad);
  }
  free(l->slots);
  free(l->order);
  free(l->shapes);
  free(l->first);
  free(l);
}
