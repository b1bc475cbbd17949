/* Work cut into a fixed number of items (shares) that the threads of a
 * parallel region take one at a time as they come free, for the cpu
 * backend's kernels of our own (bnorm_walk.h, conv_wino.c, mm_amx.c, ...).
 *
 * Why: on a shared host one core often runs 10-30% slower than the other
 * for minutes at a time (the same loop timed on each vCPU alone: 121-125
 * against 162 GFLOP/s), and a program beside spry can take half a core.
 * With a fixed half each, the faster thread waits at the end of every
 * parallel region. ResUNet-50 bf16 training, batch 16 (Xeon with AMX, 2
 * threads, perf over the steps alone): with fixed halves 10.1-10.6% of the
 * samples were spent waiting in libgomp, 7.4-9.8 on one thread and 0.8-2.7
 * on the other; with shares 5.7-8.5%, even between the threads (what is
 * left: oneDNN's kernels, which split their work their own way). With a
 * busy loop beside it on one core, the step took 0.70-0.96x the time of
 * fixed halves (3 alternating pairs), batch norm 0.75-0.82x.
 *
 * Results must not depend on who took what: a kernel that sums across
 * items keeps a sum per share and adds them in share order (bnorm_walk.h,
 * mm_amx.c's statistics), never per thread.
 *
 *   int64_t next = 0;                         (before the region: shared)
 *   #pragma omp parallel
 *   for (cpu_share_walk w = cpu_shares_begin(&next, n); (i = cpu_shares_next(&w)) >= 0;) ...
 *
 * cpu_shares_dynamic = 0: thread t takes items t, t + nt, t + 2 nt, ...
 * (A/B runs, and tests that compare the two orders bit for bit).
 *
 * Plain loops whose items share no sums take OpenMP's schedule(guided) for
 * the same reason (add_relu.c, blurpool.c, concat_rows.c, conv_col_mm.c,
 * conv_mm.c, deconv_1x1.c, deconv_mm.c, maxpool_cl.c): chunks that shrink as the loop ends, taken
 * as threads come free. */
#ifndef SPRY_BACKENDS_CPU_SHARES_H
#define SPRY_BACKENDS_CPU_SHARES_H

#include <omp.h>
#include <stdint.h>

extern int cpu_shares_dynamic;

/* Shares a thread, at most: enough that a core running 20-50% slower ends
 * within a share of the other. */
enum { CPU_SHARES_PER_THREAD = 8 };

/* Shares for `items` items and `threads` threads: one an item at most. */
static inline int64_t cpu_shares_count(int64_t items, int threads) {
  const int64_t most = (int64_t)threads * CPU_SHARES_PER_THREAD;
  return items < most ? items : most;
}

/* Share i of `shares` over [0, items): the contiguous items [*lo, *hi). */
static inline void cpu_share_range(int64_t items, int64_t shares, int64_t i, int64_t *lo, int64_t *hi) {
  *lo = items * i / shares;
  *hi = items * (i + 1) / shares;
}

typedef struct {
  int64_t *next;         /* the region's counter (shared, zero before the region) */
  int64_t count, cursor; /* items; the next one taken without the counter */
  int step, dynamic;
} cpu_share_walk;

static inline cpu_share_walk cpu_shares_begin(int64_t *next, int64_t count) {
  const cpu_share_walk w = {next, count, omp_get_thread_num(), omp_get_num_threads(), cpu_shares_dynamic};
  return w;
}

/* The next item this thread takes, or -1 when none is left. */
static inline int64_t cpu_shares_next(cpu_share_walk *w) {
  int64_t i;
  if (w->dynamic) {
    i = __atomic_fetch_add(w->next, 1, __ATOMIC_RELAXED);
  } else {
    i = w->cursor;
    w->cursor += w->step;
  }
  return i < w->count ? i : -1;
}

#endif
