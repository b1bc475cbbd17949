/* The one batch ring behind the image loader (loader.c) and the video clip
 * loader (src/video/loader.c): persistent worker threads fill a bounded ring
 * of batch slots in work units, the consumer takes batches in order, and an
 * epoch can be cancelled and restarted at any time.
 *
 * A loader owns its slots' contents (an array of its own batch type, one per
 * slot) and says what a batch's work units are (pieces of a few samples, or
 * one clip each); the ring does the threads, the claiming, the waiting and
 * the shutdown. The first unit of batch j claims slot j % depth once that
 * slot is free, later units of the same batch join it, and the batch is
 * ready when its last unit is filled. All waiting is on condition variables;
 * nobody polls. Batch j's contents must depend only on (epoch, j): then any
 * number of workers gives the same batches. */
#ifndef SPRY_DATA_BATCH_RING_H
#define SPRY_DATA_BATCH_RING_H

#include <stdint.h>

typedef struct {
  /* Work units of batch j in the current epoch (at least 1). */
  int (*units)(void *ctx, int64_t batch);
  /* Under the ring's lock, when batch j's first unit is claimed: the slot's
   * header (sample count, shape, epoch, step). Keep it short. */
  void (*begin)(void *ctx, int slot, int64_t batch, int64_t epoch);
  /* Outside the lock, on a worker: unit u of batch j into the slot. */
  void (*fill)(void *ctx, int slot, int64_t batch, int unit, int64_t epoch);
} sp_batch_ring_ops;

typedef struct sp_batch_ring sp_batch_ring;

/* Starts `workers` threads over `depth` slots; NULL with an error. Nothing is
 * filled until an epoch starts. ops and ctx must outlive the ring. */
sp_batch_ring *sp_batch_ring_new(int workers, int depth, const sp_batch_ring_ops *ops, void *ctx);
/* Cancels the epoch in progress: when this returns no worker is filling,
 * none will until sp_batch_ring_start, every slot is free, and the caller
 * may change what fills read (the epoch's order, the slots' buffers). */
void sp_batch_ring_pause(sp_batch_ring *r);
/* Starts an epoch of n_batches batches (after sp_batch_ring_pause). */
void sp_batch_ring_start(sp_batch_ring *r, int64_t epoch, int n_batches);
/* The slot that holds the epoch's next batch, waiting for it to be filled;
 * -1 when the epoch is done. The slot is the caller's until its next call
 * (or pause, or free). */
int sp_batch_ring_next(sp_batch_ring *r);
/* Stops the workers (each finishes the unit in hand) and frees the ring,
 * not the loader's slot contents. */
void sp_batch_ring_free(sp_batch_ring *r);

#endif
