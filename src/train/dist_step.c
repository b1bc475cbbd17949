/* The data-parallel optimizer step that waits only for what it updates.
 *
 * Backward launches each gradient bucket's all-reduce as soon as the bucket
 * is final; the first buckets (the head's gradients, finalised first) are
 * usually reduced before backward ends, the last ones not. Instead of
 * waiting for every bucket and then updating every parameter, each bucket's
 * parameters are updated the moment its sums are in place, in pieces with
 * an MPI progress call between them, so the exchange of the last buckets
 * runs while the first ones are updated (Open MPI advances non-blocking
 * collectives only inside MPI calls). The gradients keep the ranks' sums and
 * the optimizer reads them times 1/W, which is what the mean of
 * sp_grad_reducer_finish holds, so with every update rule elementwise the
 * result is bitwise that of one sp_optimizer_step after the exchange. */
#include "spry/common.h"
#include "spry/dist.h"
#include "spry/graph.h"
#include "spry/optim.h"

/* Elements per piece: ~1 MB of each of parameter, gradient and state, so a
 * progress call comes every few hundred microseconds. */
enum { PIECE = 1 << 18 };

typedef struct {
  sp_grad_reducer *red;
  sp_optimizer *opt;
  const int *slot_of;
  const sp_opt_param *params;
  float lr;
  int rc;
} bucket_step;

static void update_bucket(void *user, const int *ids, int n) {
  bucket_step *b = user;
  for (int i = 0; i < n && b->rc == 0; i++) {
    int slot = b->slot_of[ids[i]];
    if (slot < 0) continue;
    const int64_t numel = b->params[slot].numel;
    for (int64_t at = 0; at < numel && b->rc == 0; at += PIECE) {
      b->rc = sp_optimizer_step_part(b->opt, b->lr, slot, at, at + PIECE < numel ? at + PIECE : numel);
      sp_grad_reducer_progress(b->red);
    }
  }
}

int *sp_dist_param_slots(sp_graph *g) {
  int n = sp_graph_param_count(g), slot = 0;
  int *s = sp_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  /* The optimizer's table (sp_train_opt_params) lists the trainable
   * parameters in graph order. */
  for (int i = 0; i < n; i++) s[i] = sp_graph_param_grad(g, i) ? slot++ : -1;
  return s;
}

int sp_dist_step(sp_grad_reducer *red, sp_optimizer *opt, const int *slot_of, const sp_opt_param *params, float lr,
                 double *extra_out) {
  bucket_step b = {red, opt, slot_of, params, lr, 0};
  /* The optimizer reads sum * (1/W): the mean without a pass of its own. */
  sp_optimizer_set_grad_scale(opt, 1.0f / (float)sp_dist_world());
  int rc = sp_grad_reducer_finish_sums(red, extra_out, update_bucket, &b) != 0 || b.rc != 0 ? -1 : 0;
  sp_optimizer_set_grad_scale(opt, 1.0f);
  if (rc == 0) sp_optimizer_step_done(opt);
  return rc;
}
