/* The ref backend: the plain-C reference kernels that live with each op; and
 * the dispatch to the other backends (each answers for itself). */
#include "backends/backend.h"

const sp_op_def *sp_backend_op(sp_backend b, const sp_op_def *op) {
  if (b == SP_BACKEND_REF) return op;
  if (b == SP_BACKEND_CPU) return sp_backend_cpu_op(op);
  sp_error_set("backend '%s' is not available in this build (use --backend ref)", sp_backend_name(b));
  return NULL;
}

int sp_backend_bf16_pays(sp_backend b) {
  if (b == SP_BACKEND_CPU) return sp_backend_cpu_bf16_pays();
  return sp_backend_bf16(b); /* 0, with the reason */
}

int sp_backend_bf16(sp_backend b) {
  if (b == SP_BACKEND_CPU) return sp_backend_cpu_bf16();
  sp_error_set("bf16 plans need the cpu backend (the %s backend computes in f32)", sp_backend_name(b));
  return 0;
}
