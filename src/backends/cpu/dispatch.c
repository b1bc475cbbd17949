/* The cpu backend's op table: which ops run on oneDNN, and the thunks that
 * forward the plan's calls to each node's own vtable (so prepare may choose
 * the oneDNN path or the plain adapter per node). */
#include <string.h>

#include "backends/backend.h"
#include "ops/ops.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

static void thunk_forward(const sp_op_args *a) {
  cpu_node *n = a->impl;
  n->vt->forward(n, a);
}

static void thunk_backward(const sp_op_args *a) {
  cpu_node *n = a->impl;
  n->vt->backward(n, a);
}

static int thunk_bind(void *state, const sp_op_args *a, void *fwd_scratch, void *bwd_scratch) {
  cpu_node *n = state;
  return n->vt->bind ? n->vt->bind(n, a, fwd_scratch, bwd_scratch) : 0;
}

static void thunk_release(void *state) { cpu_node_free(state); }

/* Every path honours d_in_fresh (overwrites, or zeroes first), so the plan
 * never zeroes a gradient a cpu node writes first. */
#define CPU_DEF(NAME, PREPARE)                                                                                \
  {                                                                                                           \
    .name = NAME, .flags = SP_OP_GRAD_OVERWRITES_FRESH, .forward = thunk_forward, .backward = thunk_backward, \
    .prepare = PREPARE, .bind = thunk_bind, .release = thunk_release                                          \
  }

static const struct {
  const sp_op_def *op;
  sp_op_def impl;
} table[] = {
    {&sp_op_conv2d, CPU_DEF("cpu.conv2d", cpu_conv_prepare)},
    {&sp_op_conv_transpose2d, CPU_DEF("cpu.conv_transpose2d", cpu_deconv_prepare)},
    {&sp_op_linear, CPU_DEF("cpu.linear", cpu_linear_prepare)},
    {&sp_op_batchnorm, CPU_DEF("cpu.batchnorm", cpu_bnorm_prepare)},
    {&sp_op_relu, CPU_DEF("cpu.relu", cpu_relu_prepare)},
    {&sp_op_maxpool2d, CPU_DEF("cpu.maxpool2d", cpu_maxpool_prepare)},
    {&sp_op_avgpool2d, CPU_DEF("cpu.avgpool2d", cpu_avgpool_prepare)},
    {&sp_op_global_avgpool, CPU_DEF("cpu.global_avgpool", cpu_global_avgpool_prepare)},
    {&sp_op_upsample, CPU_DEF("cpu.upsample", cpu_upsample_prepare)},
    {&sp_op_add, CPU_DEF("cpu.add", cpu_add_prepare)},
    {&sp_op_concat, CPU_DEF("cpu.concat", cpu_concat_prepare)},
    {&sp_op_tshift, CPU_DEF("cpu.tshift", cpu_tshift_prepare)},
    {&sp_op_softargmax, CPU_DEF("cpu.softargmax", cpu_softargmax_prepare)},
    {&sp_op_blurpool, CPU_DEF("cpu.blurpool", cpu_blurpool_prepare)},
};

static const sp_op_def adapter = CPU_DEF("cpu.plain", cpu_adapter_prepare);

const sp_op_def *sp_backend_cpu_op(const sp_op_def *op) {
  if (!cpu_engine() || !cpu_stream()) {
    sp_error_set("cpu backend: oneDNN could not create a CPU engine and stream");
    return NULL;
  }
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].op == op) return &table[i].impl;
  return &adapter;
}

void sp_backend_cpu_time_reorders(int on) { cpu_reorder_timing(on); }
double sp_backend_cpu_reorder_seconds(void) { return cpu_reorder_seconds(); }
#else
void sp_backend_cpu_time_reorders(int on) { (void)on; }
double sp_backend_cpu_reorder_seconds(void) { return 0; }

const sp_op_def *sp_backend_cpu_op(const sp_op_def *op) {
  (void)op;
  sp_error_set("backend 'cpu' is not available in this build (oneDNN was not found; use --backend ref)");
  return NULL;
}
#endif
