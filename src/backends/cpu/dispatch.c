/* The cpu backend's op table: which ops run on oneDNN, and the thunks that
 * forward the plan's calls to each node's own vtable (so prepare may choose
 * the oneDNN path or the plain adapter per node). */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "core/cpu_peak.h"
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

/* The widest instruction set oneDNN uses here, by name (its effective ISA:
 * the CPU's, or less under ONEDNN_MAX_CPU_ISA). */
static const char *isa_name(dnnl_cpu_isa_t isa) {
  static const struct {
    dnnl_cpu_isa_t isa;
    const char *name;
  } names[] = {{dnnl_cpu_isa_avx512_core_amx, "AVX-512 with AMX"},
               {dnnl_cpu_isa_avx512_core_bf16, "AVX-512 with BF16"},
               {dnnl_cpu_isa_avx512_core_vnni, "AVX-512 with VNNI"},
               {dnnl_cpu_isa_avx512_core, "AVX-512"},
               {dnnl_cpu_isa_avx2_vnni, "AVX2 with VNNI"},
               {dnnl_cpu_isa_avx2, "AVX2"},
               {dnnl_cpu_isa_avx, "AVX"},
               {dnnl_cpu_isa_sse41, "SSE4.1"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if ((isa & names[i].isa) == names[i].isa) return names[i].name;
  return "below SSE4.1";
}

/* oneDNN 2.6 computes bf16 from AVX-512 (avx512_core) on: below it, its
 * bf16 primitives do not exist, and a bf16 plan would run every convolution
 * on the reference kernels, with our own bf16 kernels fed layouts they were
 * never built for. Refused instead, with the reason. */
int sp_backend_cpu_bf16(void) {
  if (sp_backend_cpu_avx512()) return 1;
  sp_error_set("bf16 needs a CPU with AVX-512 (oneDNN has no bf16 kernels below it); this one runs %s",
               sp_backend_cpu_isa());
  return 0;
}

/* Without AMX, oneDNN's bf16 convolutions and matmuls run on vdpbf16ps,
 * whose rate differs by CPU: AMD Zen 4 / 5 do twice the f32 FMA work with it,
 * while a Xeon whose AMX the hypervisor hides ran it at 0.49-0.56x (spry bench
 * peak, 2 threads), and its bf16 training at 0.6x its f32 (ResUNet-50 batch
 * 16: 4.27 against 7.17 images/s). So bf16 is chosen where it pays, timed
 * once: AMX, or dot products at 1.2x FMA or more. */
static double bf16_ratio;

double sp_backend_cpu_bf16_ratio(void) { return bf16_ratio; }

int sp_backend_cpu_bf16_pays(void) {
  const char *env = getenv("SPRY_BF16");
  if (env && !strcmp(env, "off")) {
    sp_error_set("bf16 turned off by SPRY_BF16=off");
    return 0;
  }
  if (!sp_backend_cpu_bf16()) return 0;
  if ((env && !strcmp(env, "force")) || cpu_amx_usable()) return 1;
  static int known = -1; /* the first caller times it; later ones read the answer */
  if (known < 0) {
    bf16_ratio = sp_peak_bf16_over_fp32();
    known = bf16_ratio >= 1.2;
  }
  if (known) return 1;
  if (bf16_ratio > 0)
    sp_error_set(
        "bf16 is slower than f32 on this CPU (no AMX; its bf16 dot products do %.2fx the work of f32 FMA "
        "per second); SPRY_BF16=force keeps bf16",
        bf16_ratio);
  else /* AVX-512 without AVX512_BF16 (Skylake-SP, Ice Lake): oneDNN converts to f32 in its kernels */
    sp_error_set("bf16 is slower than f32 on this CPU (no AMX, no AVX512_BF16); SPRY_BF16=force keeps bf16");
  return 0;
}

int sp_backend_cpu_avx512(void) {
  return (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}
const char *sp_backend_cpu_isa(void) { return isa_name(dnnl_get_effective_cpu_isa()); }
#else
int sp_backend_cpu_avx512(void) { return 0; }
const char *sp_backend_cpu_isa(void) { return "none (no oneDNN in this build)"; }
int sp_backend_cpu_bf16(void) {
  sp_error_set("backend 'cpu' is not available in this build (oneDNN was not found)");
  return 0;
}
int sp_backend_cpu_bf16_pays(void) { return sp_backend_cpu_bf16(); }
double sp_backend_cpu_bf16_ratio(void) { return 0; }

void sp_backend_cpu_time_reorders(int on) { (void)on; }
double sp_backend_cpu_reorder_seconds(void) { return 0; }

const sp_op_def *sp_backend_cpu_op(const sp_op_def *op) {
  (void)op;
  sp_error_set("backend 'cpu' is not available in this build (oneDNN was not found; use --backend ref)");
  return NULL;
}
#endif
