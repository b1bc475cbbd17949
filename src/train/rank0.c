/* Rank 0's solo work told to every rank (trainer_internal.h). */
#include "spry/common.h"
#include "spry/dist.h"
#include "train/trainer_internal.h"

int sp_share_rank0(sp_rank0_state *st, double timeout_s, const char *what) {
  if (sp_dist_world() < 2) return st->rc;
  sp_dist_barrier(10 * timeout_s, what);
  sp_dist_bcast(st, sizeof *st, what);
  if (st->rc != 0 && sp_dist_rank() > 0) sp_error_set("rank 0 failed during %s (see its message)", what);
  return st->rc;
}
