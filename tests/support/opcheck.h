/* Op test harness: finite-difference gradient checks and PyTorch fixture
 * comparisons for any sp_op_def. Used by tests/ops/test_*.c (and later to check
 * fast backends against the reference). */
#ifndef SPRY_OPCHECK_H
#define SPRY_OPCHECK_H

#include "ops/op.h"
#include "testkit.h"

/* Optional custom initialiser. kind: 0 input, 1 param, 2 state. */
typedef void (*sp_opcheck_init_fn)(int kind, int index, sp_tensor *t, sp_test_rng *rng);

typedef struct {
  const char *label;     /* printed in failures, e.g. "conv2d s2 p1 g2" */
  const sp_op_def *op;
  const void *attr;
  int n_in;
  sp_shape in_shape[SP_OP_MAX_IN];
  sp_dtype in_dtype[SP_OP_MAX_IN]; /* default SP_F32 (0) */
  int no_grad[SP_OP_MAX_IN];       /* 1: input needs no gradient (labels, targets) */
  int n_param;
  sp_shape param_shape[SP_OP_MAX_PARAM];
  int n_state;
  sp_shape state_shape[SP_OP_MAX_PARAM];
  int training;
  uint64_t seed;
  float lo, hi;            /* uniform init range; both 0 means [-1, 1] */
  float min_abs;           /* resample inputs with |x| < min_abs (keeps away from kinks) */
  sp_opcheck_init_fn init; /* overrides the uniform init when set */
  double eps;              /* finite-difference step; default 1e-2 */
  double rtol, atol;       /* default 2e-2, 2e-3 */
  int max_checks;          /* elements checked per tensor; default 64 (sampled) */
} sp_opcheck_case;

/* Runs forward (output pre-filled with NaN: every element must be written,
 * forward twice must be bitwise equal) and backward (input/param gradients
 * pre-filled with random values: backward must accumulate), then compares
 * analytic gradients with central differences of sum(out * r) computed in
 * double. Fails the current cmocka test with a report on mismatch. */
void sp_opcheck_gradients(const sp_opcheck_case *c);

/* Compares forward and backward with a PyTorch fixture
 * (tests/fixtures/ops/<file>): tensors named in0.., param0.., state0.. (inputs,
 * parameters, buffers before the step), out, dout, din0.. (for inputs without
 * no_grad), dparam0.., state_out0.. (buffers after a training forward). Shapes
 * come from the file; c supplies op, attr, counts, training, no_grad. */
void sp_opcheck_fixture(const sp_opcheck_case *c, const char *file, double rtol, double atol);

#endif
