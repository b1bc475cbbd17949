/* spry dist: data-parallel training over MPI (Open MPI; `mpirun` or Slurm `srun`).
 *
 * Every rank runs the same program on its own shard of each batch; gradients
 * are summed across ranks in buckets while backward is still running
 * (MPI_Iallreduce launched as soon as a bucket's gradients are final) and
 * the optimizer steps on sum / W (the sums times 1/W), so W ranks with a
 * per-rank batch B take the same steps as one process with batch W*B (exactly
 * so with synchronised batch norm, which also all-reduces the per-channel
 * statistics).
 *
 * Built without MPI (SPRY_MPI=OFF), or started without a launcher, every call
 * here is the single-process version: rank 0 of a world of 1, nothing sent.
 *
 * Errors: every MPI call is checked; a failure or a wait past the timeout
 * prints what was being done and which rank(s) are missing, then ends the
 * whole job (MPI_Abort) instead of hanging. */
#ifndef SPRY_DIST_H
#define SPRY_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "spry/graph.h"
#include "spry/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build has MPI. */
int sp_dist_compiled(void);
/* Starts MPI once per process when it was launched by mpirun / srun (any of
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, SLURM_STEP_NUM_TASKS set), unless
 * SPRY_MPI=0; otherwise stays a world of 1. Idempotent; MPI_Finalize runs at
 * exit. Returns 0, or -1 with an error. */
int sp_dist_init(void);
int sp_dist_rank(void);
int sp_dist_world(void);
/* Seconds a rank waits for the others before ending the job (default 300). */
void sp_dist_set_timeout(double seconds);
double sp_dist_timeout(void);
/* Prints "spry dist: rank R: MESSAGE" and ends every rank of the job. */
void sp_dist_abort(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Blocking helpers with the timeout (what names the step in messages). */
int sp_dist_bcast(void *buf, size_t bytes, const char *what); /* from rank 0 */
int sp_dist_sum_f64(double *x, int n, const char *what);      /* in place */
int sp_dist_barrier(double timeout_s, const char *what);
/* Every rank's hash of config_text and its spry version against rank 0's; -1
 * on every rank with an error naming the ranks that differ. */
int sp_dist_check_run(const char *config_text, const char *version);
/* Every rank's hash of what it read (its data) against rank 0's: the number
 * of ranks whose hash differs, the same on every rank, and their list ("1,
 * 3") in odd. Machines that see different files under the same paths would
 * otherwise train silently on different data. */
int sp_dist_ranks_differ(uint64_t mine, char *odd, size_t cap, double timeout_s);
/* FNV-1a 64 of a byte string (the config hash). */
uint64_t sp_dist_hash(const void *data, size_t n, uint64_t h);

/* Rank 0's parameters and buffers (BN running statistics) to every rank. */
int sp_dist_bcast_params(sp_graph *g);
/* Rank 0's buffers alone: with per-rank batch norm each rank's running
 * statistics differ, and a validation shared by the ranks must use rank 0's
 * (the ones its checkpoint holds). */
int sp_dist_bcast_buffers(sp_graph *g);
/* Rank 0's optimizer state (moments) and step count to every rank. */
int sp_dist_bcast_optimizer(sp_optimizer *opt);

/* Synchronised batch norm: every batchnorm node of g sums its per-channel
 * statistics (forward) and gradient projections (backward) over the ranks, so
 * it normalises with the statistics of the global batch. Call before making
 * plans (the cpu backend then runs those nodes on the reference kernel). */
void sp_dist_enable_sync_bn(sp_graph *g);

/* The `dist:` keys of a run config (keypoint and video alike). */
typedef struct {
  int sync_bn;      /* batch norm with statistics of the global batch (0: per rank) */
  double timeout_s; /* a rank waiting longer than this for the others ends the job (300) */
  double bucket_mb; /* gradient all-reduce bucket size (4) */
  char compress[8]; /* none | bf16: gradients travel as bfloat16 (none) */
} sp_dist_config;
sp_dist_config sp_dist_config_default(void);

/* ---- bucketed gradient all-reduce ----------------------------------------- */
typedef struct sp_grad_reducer sp_grad_reducer;

/* Buckets of about bucket_bytes over the trainable parameters of g, in the
 * order plan p's backward makes their gradients final, and hooks p's backward
 * so each bucket is launched the moment its last gradient is final. One
 * reducer per plan. */
sp_grad_reducer *sp_grad_reducer_new(sp_graph *g, sp_plan *p, size_t bucket_bytes);
void sp_grad_reducer_free(sp_grad_reducer *r);
/* Hooks plan p's backward to this reducer too (plans that come and go, as
 * Multigrid's, made from graphs sharing g's gradients); the reducer does not
 * keep p, so free such plans before the reducer. */
void sp_grad_reducer_watch(sp_grad_reducer *r, sp_plan *p);
/* Gradients travel as bfloat16 (on = 1) or fp32 (0, the default): half the
 * bytes, the mean gradient rounded to bf16 (8 significant bits); parameters
 * stay fp32 and equal on every rank. Between steps only. */
int sp_grad_reducer_set_bf16(sp_grad_reducer *r, int on);
/* The packing it uses: round to nearest even, NaN kept (tests). */
void sp_grad_reducer_pack_bf16(const float *x, uint16_t *h, int64_t n);
/* Before backward: starts the step. extra[0..n_extra) (n_extra <= 8: e.g. the
 * loss and a stop vote) are summed over ranks alongside the gradients. */
int sp_grad_reducer_begin(sp_grad_reducer *r, const double *extra, int n_extra);
/* After backward: launches any bucket not launched yet, waits for all of them
 * (timeout), writes the sums times 1/W into the gradients, and the summed
 * extras into extra_out (may be NULL). */
int sp_grad_reducer_finish(sp_grad_reducer *r, double *extra_out);
/* The same, but leaving each bucket's sums (not means) in the gradients (the
 * caller scales by 1/W itself: sp_dist_step, through the optimizer's
 * gradient scale, saving a pass over every gradient), and calling
 * on_bucket(user, params, n) with each bucket's parameter ids (in the graph)
 * the moment that bucket's sums are in place, in launch order, while later
 * buckets may still be on the wire: the optimizer step waits only for what
 * it updates. on_bucket may call sp_grad_reducer_progress between pieces of
 * work to keep the rest moving (Open MPI advances non-blocking collectives
 * only inside MPI calls). */
typedef void (*sp_bucket_done_fn)(void *user, const int *params, int n);
int sp_grad_reducer_finish_sums(sp_grad_reducer *r, double *extra_out, sp_bucket_done_fn on_bucket, void *user);
void sp_grad_reducer_progress(sp_grad_reducer *r);

/* The optimizer step of a data-parallel run (train/dist_step.c): finishes
 * the exchange bucket by bucket and updates each bucket's parameters as soon
 * as its sums are in place (read times 1/W; the optimizer's gradient scale is
 * 1 again afterwards), then counts the step: bitwise what
 * sp_grad_reducer_finish + sp_optimizer_step give, with the last buckets'
 * exchange overlapping the first buckets' update. Not with gradient
 * clipping (it needs every gradient first). slot_of: sp_dist_param_slots(g),
 * the optimizer slot of each graph parameter (-1 for buffers); params: the
 * table given to sp_optimizer_new (sp_train_opt_params). */
int *sp_dist_param_slots(sp_graph *g);
int sp_dist_step(sp_grad_reducer *r, sp_optimizer *opt, const int *slot_of, const sp_opt_param *params, float lr,
                 double *extra_out);
/* Introspection (bench, tests). */
int sp_grad_reducer_buckets(const sp_grad_reducer *r);
size_t sp_grad_reducer_bytes(const sp_grad_reducer *r); /* gradient bytes all-reduced per step */
/* Bucket index of each trainable parameter id (-1 for buffers), and the
 * number of times each bucket was launched in the last step. */
int sp_grad_reducer_bucket_of(const sp_grad_reducer *r, int param);
int sp_grad_reducer_launches(const sp_grad_reducer *r, int bucket);
/* Buckets launched during the last step's backward, before finish: how much
 * communication could overlap with compute. */
int sp_grad_reducer_launched_early(const sp_grad_reducer *r);
/* Feeds "these parameters' gradients are final" by hand (tests of bucketing
 * in any order; backward does this through the plan hook). */
void sp_grad_reducer_ready(sp_grad_reducer *r, const int *params, int n);

#ifdef __cplusplus
}
#endif
#endif
