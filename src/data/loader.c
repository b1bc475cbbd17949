/* The prefetching batch loader for cached face crops, on the batch ring
 * (batch_ring.h): the work unit is a piece of a batch (a few samples), so
 * that all workers help with the batch the consumer waits for and none idles
 * at the end of an epoch. Samples are augmented straight into the slot's
 * contiguous planar buffer. Batch j's contents depend only on (seed, epoch,
 * j), so any number of workers gives bitwise the same batches. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch_ring.h"
#include "data/data_internal.h"
#include "spry/rng.h"

/* Samples per work unit: small enough to share a batch between workers,
 * large enough that the ring's lock is taken rarely. */
#define PIECE_SAMPLES 8

struct sp_loader {
  const sp_cache *cache;
  const sp_scheme *scheme;
  sp_loader_config cfg;
  sp_batch_ring *ring;
  sp_batch *slots; /* one batch per ring slot */
  int depth;
  /* The epoch (written only while the ring is paused). */
  int32_t *order; /* this rank's samples of the epoch, in order */
  int per_rank;
  int shard_begin; /* eval_shard: this rank's first sample of the order */
  int piece;       /* samples per work unit */
};

sp_loader_config sp_loader_config_default(int batch, int out_size) {
  sp_loader_config c;
  memset(&c, 0, sizeof c);
  c.batch = batch;
  c.seed = 0;
  c.shuffle = 1;
  c.drop_last = 1;
  c.rank = 0;
  c.world = 1;
  c.aug = sp_augment_config_default(out_size);
  return c;
}

static int batch_count(const sp_loader *l, int64_t batch_no) {
  int64_t start = batch_no * l->cfg.batch;
  return (int)(l->per_rank - start < l->cfg.batch ? l->per_rank - start : l->cfg.batch);
}

static int ring_units(void *ctx, int64_t batch) {
  const sp_loader *l = ctx;
  return (batch_count(l, batch) + l->piece - 1) / l->piece;
}

static void ring_begin(void *ctx, int slot, int64_t batch, int64_t epoch) {
  sp_loader *l = ctx;
  sp_batch *b = &l->slots[slot];
  b->n = batch_count(l, batch);
  b->epoch = epoch;
  b->step = batch;
}

static void ring_fill(void *ctx, int slot, int64_t batch, int unit, int64_t epoch) {
  sp_loader *l = ctx;
  const sp_cache *c = l->cache;
  const int B = l->cfg.batch, S = l->cfg.aug.out_size, k = c->k;
  const int64_t start = batch * B;
  const int n = batch_count(l, batch), j0 = unit * l->piece, j1 = j0 + l->piece < n ? j0 + l->piece : n;
  sp_batch *b = &l->slots[slot];
  const size_t img = (size_t)c->channels * S * S;
  for (int j = j0; j < j1; j++) {
    int idx = l->order[start + j];
    b->index[j] = idx;
    /* Keyed by the cache index: the same sample gets the same randomness in
     * an epoch whatever its position, worker or rank. */
    uint64_t key = sp_rng_key(l->cfg.seed, (uint64_t)epoch, (uint64_t)idx);
    sp_augment_sample(c, idx, &l->cfg.aug, l->scheme, key, b->pixels + img * j, b->points + (size_t)j * k * 2,
                      b->flags + (size_t)j * k);
  }
}

static const sp_batch_ring_ops ring_ops = {ring_units, ring_begin, ring_fill};

sp_loader *sp_loader_create(const sp_cache *cache, const sp_scheme *scheme, const sp_loader_config *cfg) {
  if (!cache || cache->n <= 0) {
    sp_error_set("loader: empty cache");
    return NULL;
  }
  if (cfg->batch <= 0) {
    sp_error_set("loader: batch %d must be positive", cfg->batch);
    return NULL;
  }
  if (cfg->aug.out_size < 8 || cfg->aug.out_size > 4096) {
    sp_error_set("loader: output size %d outside 8..4096", cfg->aug.out_size);
    return NULL;
  }
  int world = cfg->world > 0 ? cfg->world : 1;
  if (cfg->rank < 0 || cfg->rank >= world) {
    sp_error_set("loader: rank %d outside world size %d", cfg->rank, world);
    return NULL;
  }
  if (scheme && scheme->k != cache->k) {
    sp_error_set("loader: scheme '%s' has %d points, the data %d", scheme->name, scheme->k, cache->k);
    return NULL;
  }
  sp_loader *l = sp_xcalloc(1, sizeof *l);
  l->cache = cache;
  l->scheme = scheme;
  l->cfg = *cfg;
  l->cfg.world = world;
  const int workers = cfg->workers > 0 ? cfg->workers : sp_default_threads();
  l->depth = cfg->prefetch > 0 ? cfg->prefetch : 2 * workers;
  if (l->cfg.eval_shard && world > 1) {
    l->shard_begin = (int)((int64_t)l->cfg.rank * cache->n / world);
    l->per_rank = (int)((int64_t)(l->cfg.rank + 1) * cache->n / world) - l->shard_begin;
  } else {
    l->cfg.eval_shard = 0;
    l->per_rank = cache->n / world; /* equal counts keep data-parallel ranks in step */
    if (l->per_rank == 0) l->per_rank = cache->n;
  }
  l->order = sp_xmalloc(sizeof(int32_t) * (size_t)cache->n);
  l->piece = cfg->batch < PIECE_SAMPLES ? cfg->batch : PIECE_SAMPLES;
  const int S = cfg->aug.out_size, B = cfg->batch, k = cache->k;
  l->slots = sp_xcalloc((size_t)l->depth, sizeof(sp_batch));
  for (int i = 0; i < l->depth; i++) {
    sp_batch *b = &l->slots[i];
    b->c = cache->channels;
    b->h = S;
    b->w = S;
    b->k = k;
    b->pixels = sp_aligned_alloc((size_t)B * cache->channels * S * S);
    b->points = sp_xmalloc(sizeof(float) * 2 * (size_t)k * B);
    b->flags = sp_xmalloc((size_t)k * B);
    b->index = sp_xmalloc(sizeof(int32_t) * (size_t)B);
  }
  if (!(l->ring = sp_batch_ring_new(workers, l->depth, &ring_ops, l))) {
    sp_loader_destroy(l);
    return NULL;
  }
  return l;
}

int sp_loader_batches_per_epoch(const sp_loader *l) {
  int B = l->cfg.batch;
  return l->cfg.drop_last ? l->per_rank / B : (l->per_rank + B - 1) / B;
}

int sp_loader_start_epoch(sp_loader *l, int64_t epoch) {
  sp_batch_ring_pause(l->ring); /* the current epoch is cancelled; nothing reads `order` now */
  const int n = l->cache->n;
  int32_t *all = sp_xmalloc(sizeof(int32_t) * (size_t)n);
  for (int i = 0; i < n; i++) all[i] = i;
  if (l->cfg.shuffle) {
    /* Same permutation on every rank (seed, epoch); each takes its slice. */
    sp_rng r = sp_rng_make(sp_rng_key(l->cfg.seed, (uint64_t)epoch, SP_RNG_EPOCH_ORDER));
    sp_rng_shuffle(&r, all, n);
  }
  /* Batch-interleaved shards: step s of rank r is slice r of the global
   * batch s (world * batch samples), so W ranks with batch B see exactly the
   * batches of one process with batch W * B, at any world size. The samples
   * left after the full batches are split in contiguous pieces. */
  const int W = l->cfg.world, R = l->cfg.rank, B = l->cfg.batch;
  const int full = l->per_rank / B * B;
  const int tiny = (int64_t)l->per_rank * W > n; /* fewer samples than ranks: each rank takes them all */
  for (int i = 0; i < l->per_rank; i++)
    l->order[i] = l->cfg.eval_shard ? all[l->shard_begin + i] /* this rank's contiguous part */
                  : tiny            ? all[i]
                  : i < full        ? all[((int64_t)(i / B) * W + R) * B + i % B]
                                    : all[(int64_t)full * W + (int64_t)R * (l->per_rank - full) + (i - full)];
  free(all);
  sp_batch_ring_start(l->ring, epoch, sp_loader_batches_per_epoch(l));
  return 0;
}

const sp_batch *sp_loader_next(sp_loader *l) {
  int slot = sp_batch_ring_next(l->ring);
  return slot < 0 ? NULL : &l->slots[slot];
}

void sp_loader_destroy(sp_loader *l) {
  if (!l) return;
  sp_batch_ring_free(l->ring); /* workers gone: the slots are ours */
  for (int i = 0; l->slots && i < l->depth; i++) {
    sp_aligned_free(l->slots[i].pixels);
    free(l->slots[i].points);
    free(l->slots[i].flags);
    free(l->slots[i].index);
  }
  free(l->slots);
  free(l->order);
  free(l);
}
