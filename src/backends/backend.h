/* Backend dispatch: a plan asks its backend for the implementation of each op.
 * The ref backend answers with the op's own reference kernels (ops/<op>.c);
 * a fast backend answers with its own sp_op_def for the ops it accelerates and
 * falls back to the reference for the rest. Backends never include each other. */
#ifndef SPRY_BACKENDS_BACKEND_H
#define SPRY_BACKENDS_BACKEND_H

#include "ops/op.h"
#include "ops/ops.h"
#include "spry/graph.h"

/* The implementation to run for op on backend b, or NULL with an error set
 * when the backend is not available in this build. */
const sp_op_def *sp_backend_op(sp_backend b, const sp_op_def *op);

/* The cpu backend's answer (backends/cpu/dispatch.c): its oneDNN
 * implementation, or its plain adapter around the reference kernel; NULL with
 * an error set when the build has no oneDNN. */
const sp_op_def *sp_backend_cpu_op(const sp_op_def *op);
/* 1 when the cpu backend computes bf16 plans on this machine, else 0 with
 * the reason set (sp_backend_bf16 in spry/graph.h is the public face). */
int sp_backend_cpu_bf16(void);
/* ... and when they are also faster than f32 ones (sp_backend_bf16_pays in
 * spry/graph.h); sp_backend_cpu_bf16_ratio: the one-thread bf16 dot over
 * f32 FMA throughput that decided it where AMX is absent (0: not timed). */
int sp_backend_cpu_bf16_pays(void);
double sp_backend_cpu_bf16_ratio(void);
/* 1 when oneDNN runs AVX-512 (avx512_core) kernels here: bf16, and f32
 * activations in 16-channel blocks (8-channel ones below it); and the
 * widest instruction set it runs, by name ("AVX2"). Under
 * ONEDNN_MAX_CPU_ISA both follow the limit. */
int sp_backend_cpu_avx512(void);
const char *sp_backend_cpu_isa(void);
/* The cpu backend's reorder clock (bench train --profile): on/off, and the
 * seconds its layout conversions took since it was turned on. */
void sp_backend_cpu_time_reorders(int on);
double sp_backend_cpu_reorder_seconds(void);
/* The cpu backend's temporal-shift kernel (backends/cpu/bench.c) on f32
 * tensors of `shape` in the blocked layout TSM trains in (nChw16c), writing a
 * fresh input gradient: after two warm-up rounds, runs timed rounds of
 * forward (fwd_s[r]) and forward + backward (fwdbwd_s[r]), in seconds. 0, or
 * -1 with an error when the build has no oneDNN or the kernel refuses. */
int sp_backend_cpu_time_tshift(const sp_tshift_attr *attr, sp_shape shape, int runs, double *fwd_s, double *fwdbwd_s);

#endif
