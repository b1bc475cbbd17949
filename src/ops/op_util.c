/* Small kernels several ops share (op.h): written once, tested through each
 * op that uses them. */
#include "ops/op.h"

/* Parallel over channels only when there is enough work to pay the fork. */
#define PAR_MIN_WORK 32768

void sp_op_bias_grad_nchw(const float *dy, int64_t n, int64_t c, int64_t hw, float *db) {
#pragma omp parallel for schedule(static) if (n * c * hw >= PAR_MIN_WORK)
  for (int64_t co = 0; co < c; co++) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
      const float *dyc = dy + (i * c + co) * hw;
      for (int64_t k = 0; k < hw; k++) s += dyc[k];
    }
    db[co] += (float)s;
  }
}
