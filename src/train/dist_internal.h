/* Pieces of the MPI layer shared by train/dist.c and train/dist_reduce.c. */
#ifndef SPRY_DIST_INTERNAL_H
#define SPRY_DIST_INTERNAL_H

#include "spry/dist.h"

#ifdef SPRY_HAVE_MPI
#include <mpi.h>

/* The communicators: gradients (buckets and step extras), batch-norm sums,
 * and heartbeats. Separate ones, so traffic of one kind never has to be
 * ordered against another's. */
MPI_Comm sp_dist_comm_grad(void);
MPI_Comm sp_dist_comm_sync(void);
/* Aborts the job with a message naming the call, the rank and `what` when
 * rc is not MPI_SUCCESS. */
void sp_dist_check(int rc, const char *call, const char *what);
/* Polls req until done; past timeout_s, names the ranks that have not
 * reached this rank's latest phase and aborts the job. */
void sp_dist_wait(MPI_Request *req, const char *what, double timeout_s);
#endif

/* Marks a new phase (a step, a broadcast) and tells the other ranks, so a
 * rank that times out can say which ranks never got there. */
void sp_dist_beat(void);

#endif
