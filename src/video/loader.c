/* The video clip loader (see include/spry/video_loader.h).
 *
 * Same machinery as the image loader (loader.c): persistent workers claim
 * work under one mutex, fill a ring of batch slots, and the consumer takes
 * batches in order. The work unit is one clip, not a piece of ~8 samples as
 * for images: decoding a clip costs milliseconds, far more than a lock.
 * Batches may have different shapes within an epoch (Multigrid), so each
 * epoch carries its own list of shapes and slots are sized for the largest. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "spry/rng.h"
#include "spry/video_loader.h"

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct {
  sp_video_batch b;
  slot_state state;
  int64_t batch_no;
  uint64_t gen;
  int pending;
} slot;

struct sp_video_loader {
  const sp_video_list *list;
  sp_video_loader_config cfg;
  int depth, n_workers;
  slot *slots;
  size_t slot_bytes; /* pixel capacity of each slot */
  int slot_clips;    /* label capacity */
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, ready_cv;
  /* epoch state (under mu) */
  int32_t *order;
  int entries, per_rank;
  int shard_begin; /* eval_shard: this rank's first entry of the order */
  sp_video_shape *shapes;
  int64_t *first; /* first[j]: position in order of batch j's first clip */
  int n_batches, cap_batches;
  int64_t epoch;
  uint64_t gen;
  int64_t claim_batch;
  int claim_clip;
  int64_t next_take;
  int filling, held, stop;
};

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
    rc = sp_sample_dense(n, frames, cfg->stride > 0 ? cfg->stride : 1, cfg->train, clip, clips, cfg->seed, epoch,
                         entry, idx);
  if (rc != 0) goto done;
  /* A smaller Multigrid size keeps the crop's share of the frame: the short
   * side shrinks with it. */
  int base_short = cfg->short_side > 0 ? cfg->short_side : cfg->size * 8 / 7;
  int short_side = (int)lround((double)base_short * size / cfg->size);
  if (short_side < size) short_side = size;
  sp_video_geom g = {.short_side = short_side, .layout = SP_VIDEO_CHW};
  int rh, rw;
  if ((rc = sp_video_out_size(v, &g, &rh, &rw)) != 0) goto done;
  g.crop_h = g.crop_w = size;
  g.crop_y = g.crop_x = -1;
  /* The crop's own stream, apart from the frame sampler's use of the key. */
  sp_rng r = sp_rng_make(sp_rng_key(sp_rng_key(cfg->seed, 0x6372u, 0x6f70u), (uint64_t)epoch, (uint64_t)entry));
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

/* Under mu: is there a clip to claim? A batch's first clip needs its slot free. */
static int work_available(const sp_video_loader *l) {
  if (l->claim_batch >= l->n_batches) return 0;
  const slot *s = &l->slots[l->claim_batch % l->depth];
  return l->claim_clip == 0 ? s->state == SLOT_FREE : 1;
}

static void *worker_main(void *arg) {
  sp_video_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && !work_available(l)) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stop) break;
    int64_t j = l->claim_batch;
    int i = l->claim_clip;
    const sp_video_shape sh = l->shapes[j];
    slot *s = &l->slots[j % l->depth];
    if (i == 0) {
      s->state = SLOT_FILLING;
      s->batch_no = j;
      s->gen = l->gen;
      s->pending = sh.batch;
      s->b = (sp_video_batch){.n = sh.batch, .t = sh.frames, .h = sh.size, .w = sh.size, .pixels = s->b.pixels,
                              .label = s->b.label, .video = s->b.video, .clip = s->b.clip, .bad = s->b.bad,
                              .epoch = l->epoch,
                              .step = j};
    }
    if (++l->claim_clip >= sh.batch) l->claim_batch++, l->claim_clip = 0;
    int64_t entry = l->order[l->first[j] + i], epoch = l->epoch;
    uint64_t gen = l->gen;
    l->filling++;
    pthread_mutex_unlock(&l->mu);

    const size_t clip_bytes = (size_t)sh.frames * 3 * sh.size * sh.size;
    uint8_t *out = s->b.pixels + clip_bytes * i;
    int clips = l->cfg.test_clips > 0 && !l->cfg.train ? l->cfg.test_clips : 1;
    s->b.video[i] = (int32_t)(entry / clips);
    s->b.clip[i] = (int32_t)(entry % clips);
    s->b.label[i] = l->list->label[entry / clips];
    int bad = sp_video_load_clip(l->list, &l->cfg, epoch, entry, sh.frames, sh.size, out) != 0;
    if (bad) {
      /* A bad clip must not stop training: zeros (the dataset mean after
       * normalisation is close to it), counted and reported. */
      fprintf(stderr, "spry data: skip %s: %s\n", l->list->path[entry / clips], sp_last_error());
      memset(out, 0, clip_bytes);
    }

    pthread_mutex_lock(&l->mu);
    l->filling--;
    s->b.bad[i] = (uint8_t)bad;
    s->b.failed += bad;
    if (--s->pending == 0) {
      s->state = gen == l->gen ? SLOT_READY : SLOT_FREE;
      if (s->state == SLOT_FREE) pthread_cond_broadcast(&l->work_cv);
    }
    pthread_cond_broadcast(&l->ready_cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

sp_video_loader *sp_video_loader_create(const sp_video_list *list, const sp_video_loader_config *cfg) {
  if (!list || list->n <= 0) return sp_error_set("video loader: empty list"), NULL;
  if (cfg->batch <= 0 || cfg->frames <= 0 || cfg->size < 8)
    return sp_error_set("video loader: batch %d, frames %d, size %d must be positive (size >= 8)", cfg->batch,
                        cfg->frames, cfg->size), NULL;
  int world = cfg->world > 0 ? cfg->world : 1;
  if (cfg->rank < 0 || cfg->rank >= world)
    return sp_error_set("video loader: rank %d outside world size %d", cfg->rank, world), NULL;
  sp_video_loader *l = sp_xcalloc(1, sizeof *l);
  l->list = list;
  l->cfg = *cfg;
  l->cfg.world = world;
  if (l->cfg.test_clips < 1 || l->cfg.train) l->cfg.test_clips = 1;
  l->n_workers = cfg->workers > 0 ? cfg->workers : sp_default_threads();
  l->depth = cfg->prefetch > 0 ? cfg->prefetch : 2 * l->n_workers;
  l->held = -1;
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
  l->slots = sp_xcalloc((size_t)l->depth, sizeof(slot));
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  l->threads = sp_xmalloc(sizeof(pthread_t) * (size_t)l->n_workers);
  for (int i = 0; i < l->n_workers; i++)
    if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
      l->n_workers = i;
      sp_video_loader_destroy(l);
      return sp_error_set("video loader: cannot start worker thread %d", i), NULL;
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
  pthread_mutex_lock(&l->mu);
  /* Cancel the current epoch: stop claiming, wait for fills in flight (they
   * read order and the slots about to change), free every slot. */
  l->gen++;
  l->n_batches = 0;
  while (l->filling > 0) pthread_cond_wait(&l->ready_cv, &l->mu);
  for (int i = 0; i < l->depth; i++) l->slots[i].state = SLOT_FREE;
  l->held = -1;
  if (bytes > l->slot_bytes || clips > l->slot_clips) {
    for (int i = 0; i < l->depth; i++) {
      sp_video_batch *b = &l->slots[i].b;
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
    sp_rng r = sp_rng_make(sp_rng_key(l->cfg.seed, (uint64_t)epoch, UINT64_C(0xFFFFFFFFFFFF)));
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
  l->epoch = epoch;
  l->claim_batch = 0;
  l->claim_clip = 0;
  l->next_take = 0;
  l->n_batches = n_shapes;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
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
  pthread_mutex_lock(&l->mu);
  if (l->held >= 0) {
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

void sp_video_loader_destroy(sp_video_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->n_workers; i++) pthread_join(l->threads[i], NULL);
  for (int i = 0; i < l->depth; i++) {
    sp_aligned_free(l->slots[i].b.pixels);
    free(l->slots[i].b.label), free(l->slots[i].b.video), free(l->slots[i].b.clip), free(l->slots[i].b.bad);
  }
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_mutex_destroy(&l->mu);
  free(l->threads);
  free(l->slots);
  free(l->order);
  free(l->shapes);
  free(l->first);
  free(l);
}
