/* The batch ring (see batch_ring.h): worker threads, slot states, claiming
 * work units in batch order, epoch cancellation, in-order hand-over. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "data/batch_ring.h"
#include "spry/common.h"

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD } slot_state;

typedef struct {
  slot_state state;
  int64_t batch; /* which batch of the epoch the slot holds */
  uint64_t gen;  /* the epoch generation it was claimed in */
  int pending;   /* units not filled yet */
} slot;

struct sp_batch_ring {
  const sp_batch_ring_ops *ops;
  void *ctx;
  int depth, n_workers;
  slot *slots;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work_cv;  /* workers: a slot became free, an epoch started, or stop */
  pthread_cond_t ready_cv; /* consumer: a batch became ready; pause: a fill ended */
  /* epoch state (under mu) */
  int64_t epoch;
  uint64_t gen;
  int n_batches;
  int64_t claim_batch; /* the next unit to claim: (claim_batch, claim_unit) */
  int claim_unit;
  int64_t next_take;
  int filling; /* units being filled right now */
  int held;    /* the slot the consumer holds, -1 none */
  int stop;
};

/* Under mu: can a unit be claimed? A batch's first unit needs its slot free;
 * later units join the slot already being filled. */
static int work_available(const sp_batch_ring *r) {
  if (r->claim_batch >= r->n_batches) return 0;
  return r->claim_unit > 0 || r->slots[r->claim_batch % r->depth].state == SLOT_FREE;
}

static void *worker_main(void *arg) {
  sp_batch_ring *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->stop && !work_available(r)) pthread_cond_wait(&r->work_cv, &r->mu);
    if (r->stop) break;
    const int64_t j = r->claim_batch, epoch = r->epoch;
    const int u = r->claim_unit, at = (int)(j % r->depth), units = r->ops->units(r->ctx, j);
    slot *s = &r->slots[at];
    if (u == 0) {
      *s = (slot){SLOT_FILLING, j, r->gen, units};
      r->ops->begin(r->ctx, at, j, epoch);
    }
    if (u + 1 >= units)
      r->claim_batch++, r->claim_unit = 0;
    else
      r->claim_unit++;
    const uint64_t gen = r->gen;
    r->filling++;
    pthread_mutex_unlock(&r->mu);
    r->ops->fill(r->ctx, at, j, u, epoch);
    pthread_mutex_lock(&r->mu);
    r->filling--;
    if (--s->pending == 0) {
      /* A batch of a cancelled epoch is dropped: its slot is simply free again. */
      s->state = gen == r->gen ? SLOT_READY : SLOT_FREE;
      if (s->state == SLOT_FREE) pthread_cond_broadcast(&r->work_cv);
    }
    pthread_cond_broadcast(&r->ready_cv);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

sp_batch_ring *sp_batch_ring_new(int workers, int depth, const sp_batch_ring_ops *ops, void *ctx) {
  if (workers < 1 || depth < 1) {
    sp_error_set("batch ring: %d workers and %d slots (both must be at least 1)", workers, depth);
    return NULL;
  }
  sp_batch_ring *r = sp_xcalloc(1, sizeof *r);
  r->ops = ops;
  r->ctx = ctx;
  r->depth = depth;
  r->held = -1;
  r->slots = sp_xcalloc((size_t)depth, sizeof(slot));
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->work_cv, NULL);
  pthread_cond_init(&r->ready_cv, NULL);
  r->threads = sp_xmalloc(sizeof(pthread_t) * (size_t)workers);
  /* Workers start with SIGINT / SIGTERM blocked (a thread inherits its
   * creator's mask): the trainer's stop request then lands on another
   * thread (train/stop_signals.c), and a worker's reads (stdio inside the
   * image libraries) never return EINTR half way through a file. */
  sigset_t stop_signals, old;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old);
  for (int i = 0; i < workers; i++) {
    if (pthread_create(&r->threads[i], NULL, worker_main, r) != 0) {
      pthread_sigmask(SIG_SETMASK, &old, NULL);
      sp_batch_ring_free(r);
      sp_error_set("batch ring: cannot start worker thread %d", i);
      return NULL;
    }
    r->n_workers = i + 1;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return r;
}

void sp_batch_ring_pause(sp_batch_ring *r) {
  pthread_mutex_lock(&r->mu);
  /* Stop claiming, wait for fills in flight (they read what the caller is
   * about to change), free every slot. */
  r->gen++;
  r->n_batches = 0;
  while (r->filling > 0) pthread_cond_wait(&r->ready_cv, &r->mu);
  for (int i = 0; i < r->depth; i++) r->slots[i].state = SLOT_FREE;
  r->held = -1;
  pthread_mutex_unlock(&r->mu);
}

void sp_batch_ring_start(sp_batch_ring *r, int64_t epoch, int n_batches) {
  pthread_mutex_lock(&r->mu);
  r->epoch = epoch;
  r->claim_batch = 0;
  r->claim_unit = 0;
  r->next_take = 0;
  r->n_batches = n_batches;
  pthread_cond_broadcast(&r->work_cv);
  pthread_mutex_unlock(&r->mu);
}

int sp_batch_ring_next(sp_batch_ring *r) {
  pthread_mutex_lock(&r->mu);
  if (r->held >= 0) { /* the previous batch is handed back now */
    r->slots[r->held].state = SLOT_FREE;
    r->held = -1;
    pthread_cond_broadcast(&r->work_cv);
  }
  if (r->next_take >= r->n_batches) {
    pthread_mutex_unlock(&r->mu);
    return -1;
  }
  const int64_t j = r->next_take;
  slot *s = &r->slots[j % r->depth];
  while (!(s->state == SLOT_READY && s->batch == j && s->gen == r->gen)) pthread_cond_wait(&r->ready_cv, &r->mu);
  s->state = SLOT_HELD;
  r->held = (int)(j % r->depth);
  r->next_take++;
  pthread_mutex_unlock(&r->mu);
  return (int)(j % r->depth);
}

void sp_batch_ring_free(sp_batch_ring *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  r->stop = 1;
  pthread_cond_broadcast(&r->work_cv);
  pthread_mutex_unlock(&r->mu);
  /* Workers finish the unit in hand (at most one each) and leave. */
  for (int i = 0; i < r->n_workers; i++) pthread_join(r->threads[i], NULL);
  pthread_cond_destroy(&r->work_cv);
  pthread_cond_destroy(&r->ready_cv);
  pthread_mutex_destroy(&r->mu);
  free(r->threads);
  free(r->slots);
  free(r);
}
