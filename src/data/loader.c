/* The prefetching batch loader: persistent worker threads fill a bounded
 * ring of batch slots; the consumer takes them in order.
 *
 * Work unit = a piece of a batch (a few samples), so that all workers help
 * with the batch the consumer waits for and none idles at the end of an
 * epoch. The first piece of batch j claims slot j % depth (once it is free);
 * samples are augmented straight into the slot's contiguous planar buffer;
 * the last piece to finish marks the batch ready. Batch j's contents depend
 * only on (seed, epoch, j), so any number of workers gives bitwise the same
 * batches. All waiting is on condition variables; nobody polls. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "spry/rng.h"

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct {
  sp_batch b;
  slot_state state;
  int64_t batch_no; /* which batch of the epoch this slot holds */
  uint64_t gen;     /* epoch generation it was claimed in */
  int pending;      /* pieces not finished yet */
} slot;

struct sp_loader {
  const sp_cache *cache;
  const sp_scheme *scheme;
  sp_loader_config cfg;
  int depth, n_workers;
  slot *slots;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv;  /* workers: a slot became free, an epoch started, or stop */
  pthread_cond_t ready_cv; /* consumer: a batch became ready; start_epoch: a fill ended */
  /* epoch state (under mu) */
  int32_t *order;          /* this rank's samples of the epoch, in order */
  int per_rank;
  int shard_begin; /* eval_shard: this rank's first sample of the order */
  int n_batches;
  int piece;               /* samples per work unit */
  int pieces_per_batch;
  int64_t epoch;
  uint64_t gen;
  int64_t next_claim, next_take; /* next_claim counts pieces */
  int filling;             /* slots being filled right now */
  int held;                /* slot index the consumer holds, -1 none */
  int stop;
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

static void fill_piece(sp_loader *l, slot *s, const int32_t *order, int64_t batch_no, int piece_no, int64_t epoch) {
  const sp_cache *c = l->cache;
  const int B = l->cfg.batch, S = l->cfg.aug.out_size, k = c->k;
  int64_t start = batch_no * B;
  int n = batch_count(l, batch_no);
  int j0 = piece_no * l->piece, j1 = j0 + l->piece < n ? j0 + l->piece : n;
  sp_batch *b = &s->b;
  const size_t img = (size_t)c->channels * S * S;
  for (int j = j0; j < j1; j++) {
    int idx = order[start + j];
    b->index[j] = idx;
    /* Keyed by the cache index: the same sample gets the same randomness in
     * an epoch whatever its position, worker or rank. */
    uint64_t key = sp_rng_key(l->cfg.seed, (uint64_t)epoch, (uint64_t)idx);
    sp_augment_sample(c, idx, &l->cfg.aug, l->scheme, key, b->pixels + img * j, b->points + (size_t)j * k * 2,
                      b->flags + (size_t)j * k);
  }
}

/* Under mu: can the next piece be taken? A batch's first piece needs its
 * slot free; later pieces join the slot already being filled. */
static int piece_available(const sp_loader *l) {
  int64_t j = l->next_claim / l->pieces_per_batch;
  if (j >= l->n_batches) return 0;
  int p = (int)(l->next_claim % l->pieces_per_batch);
  if (p * l->piece >= batch_count(l, j)) return 0; /* cannot happen: skipped on claim */
  const slot *s = &l->slots[j % l->depth];
  return p == 0 ? s->state == SLOT_FREE : 1;
}

static void *worker_main(void *arg) {
  sp_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !piece_available(l)) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stop) break;
    int64_t j = l->next_claim / l->pieces_per_batch;
    int p = (int)(l->next_claim % l->pieces_per_batch);
    slot *s = &l->slots[j % l->depth];
    int n = batch_count(l, j);
    int pieces = (n + l->piece - 1) / l->piece;
    if (p == 0) {
      s->state = SLOT_FILLING;
      s->batch_no = j;
      s->gen = l->gen;
      s->pending = pieces;
      s->b.n = n;
      s->b.epoch = l->epoch;
      s->b.step = j;
    }
    /* A short last batch has fewer pieces: jump to the next batch. */
    l->next_claim = p + 1 >= pieces ? (j + 1) * l->pieces_per_batch : l->next_claim + 1;
    int64_t epoch = l->epoch;
    uint64_t gen = l->gen;
    const int32_t *order = l->order;
    l->filling++;
    pthread_mutex_unlock(&l->mu);
    fill_piece(l, s, order, j, p, epoch);
    pthread_mutex_lock(&l->mu);
    l->filling--;
    if (--s->pending == 0) {
      /* A batch of a cancelled epoch is dropped: its slot is simply free again. */
      s->state = gen == l->gen ? SLOT_READY : SLOT_FREE;
      if (s->state == SLOT_FREE) pthread_cond_broadcast(&l->work_cv);
    }
    pthread_cond_broadcast(&l->ready_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

sp_loader *sp_loader_create(const sp_cache *cache, const sp_scheme *scheme, const sp_loader_config *cfg) {
  if (!cache || cache->n <= 0) { sp_error_set("loader: empty cache"); return NULL; }
  if (cfg->batch <= 0) { sp_error_set("loader: batch %d must be positive", cfg->batch); return NULL; }
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
  l->n_workers = cfg->workers > 0 ? cfg->workers : sp_default_threads();
  l->depth = cfg->prefetch > 0 ? cfg->prefetch : 2 * l->n_workers;
  if (l->depth < 1) l->depth = 1;
  l->held = -1;
  if (l->cfg.eval_shard && world > 1) {
    l->shard_begin = (int)((int64_t)l->cfg.rank * cache->n / world);
    l->per_rank = (int)((int64_t)(l->cfg.rank + 1) * cache->n / world) - l->shard_begin;
  } else {
    l->cfg.eval_shard = 0;
    l->per_rank = cache->n / world; /* equal counts keep data-parallel ranks in step */
    if (l->per_rank == 0) l->per_rank = cache->n;
  }
  l->order = sp_xmalloc(sizeof(int32_t) * (size_t)cache->n);
  l->n_batches = 0; /* nothing to do until an epoch starts */
  /* Pieces of ~8 samples: small enough to share a batch between workers,
   * large enough that the lock is taken rarely. */
  l->piece = cfg->batch < 8 ? cfg->batch : 8;
  l->pieces_per_batch = (cfg->batch + l->piece - 1) / l->piece;
  const int S = cfg->aug.out_size, B = cfg->batch, k = cache->k;
  l->slots = sp_xcalloc((size_t)l->depth, sizeof(slot));
  for (int i = 0; i < l->depth; i++) {
    sp_batch *b = &l->slots[i].b;
    b->c = cache->channels; b->h = S; b->w = S; b->k = k;
    b->pixels = sp_aligned_alloc((size_t)B * cache->channels * S * S);
    b->points = sp_xmalloc(sizeof(float) * 2 * (size_t)k * B);
    b->flags = sp_xmalloc((size_t)k * B);
    b->index = sp_xmalloc(sizeof(int32_t) * (size_t)B);
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  l->threads = sp_xmalloc(sizeof(pthread_t) * (size_t)l->n_workers);
  for (int i = 0; i < l->n_workers; i++) {
    if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
      l->n_workers = i;
      sp_loader_destroy(l);
      sp_error_set("loader: cannot start worker thread %d", i);
      return NULL;
    }
  }
  return l;
}

int sp_loader_batches_per_epoch(const sp_loader *l) {
  int B = l->cfg.batch;
  return l->cfg.drop_last ? l->per_rank / B : (l->per_rank + B - 1) / B;
}

int sp_loader_start_epoch(sp_loader *l, int64_t epoch) {
  pthread_mutex_lock(&l->mu);
  /* Cancel the current epoch: stop claiming, wait for fills in flight (they
   * read `order`, which is about to change), free every slot. */
  l->gen++;
  l->n_batches = 0;
  while (l->filling > 0) pthread_cond_wait(&l->ready_cv, &l->mu);
  for (int i = 0; i < l->depth; i++) l->slots[i].state = SLOT_FREE;
  l->held = -1;
  const int n = l->cache->n;
  int32_t *all = sp_xmalloc(sizeof(int32_t) * (size_t)n);
  for (int i = 0; i < n; i++) all[i] = i;
  if (l->cfg.shuffle) {
    /* Same permutation on every rank (seed, epoch); each takes its slice. */
    sp_rng r = sp_rng_make(sp_rng_key(l->cfg.seed, (uint64_t)epoch, UINT64_C(0xFFFFFFFFFFFF)));
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
  l->epoch = epoch;
  l->next_claim = 0;
  l->next_take = 0;
  l->n_batches = sp_loader_batches_per_epoch(l);
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  return 0;
}

const sp_batch *sp_loader_next(sp_loader *l) {
  pthread_mutex_lock(&l->mu);
  if (l->held >= 0) { /* the previous batch is handed back now */
    l->slots[l->held].state = SLOT_FREE;
    l->held = -1;
    pthread_cond_broadcast(&l->work_cv);
  }
  if (l->next_take >= l->n_batches) {
    pthread_mutex_unlock(&l->mu);
    return NULL;
  }
  int64_t j = l->next_take;
  slot *s = &l->slots[j % l->depth];
  while (!(s->state == SLOT_READY && s->batch_no == j && s->gen == l->gen)) pthread_cond_wait(&l->ready_cv, &l->mu);
  s->state = SLOT_HELD;
  l->held = (int)(j % l->depth);
  l->next_take++;
  pthread_mutex_unlock(&l->mu);
  return &s->b;
}

void sp_loader_destroy(sp_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  /* Workers finish the batch in hand (at most one each) and leave. */
  for (int i = 0; i < l->n_workers; i++) pthread_join(l->threads[i], NULL);
  for (int i = 0; i < l->depth; i++) {
    sp_aligned_free(l->slots[i].b.pixels);
    free(l->slots[i].b.points);
    free(l->slots[i].b.flags);
    free(l->slots[i].b.index);
  }
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_mutex_destroy(&l->mu);
  free(l->threads);
  free(l->slots);
  free(l->order);
  free(l);
}
