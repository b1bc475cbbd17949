/* The contract between an op and the graph that runs it.
 *
 * Every op lives in ops/<name>.c and exports one `const sp_op_def sp_op_<name>`:
 * a shape rule, a plain-C reference forward and backward (the oracle every fast
 * backend is tested against), and how many bytes it must save between forward
 * and backward. Kernels see only tensors (sp_op_args), never the graph.
 *
 * Conventions (also in ops/README.md):
 *  - Layout is contiguous row-major NCHW (or N,C / N,K,2 for 2-D/3-D tensors).
 *  - Reference kernels compute in f32 (accumulating in double where a sum is long).
 *  - forward writes every element of `out`.
 *  - backward ACCUMULATES: d_in[i] += ..., d_param[j] += ... . A NULL d_in[i]
 *    means that input needs no gradient (graph input, integer labels).
 *  - Losses output a single f32 scalar (shape [1]) and are mean-reduced unless
 *    their attr says otherwise; d_out then holds the loss weight.
 */
#ifndef SPRY_OPS_OP_H
#define SPRY_OPS_OP_H

#include <stddef.h>
#include <stdint.h>

#include "spry/tensor.h"

#define SP_OP_MAX_IN 8
#define SP_OP_MAX_PARAM 4

enum {
  SP_OP_BWD_NEEDS_INPUT = 1u << 0,  /* backward reads in[] (activations kept alive) */
  SP_OP_BWD_NEEDS_OUTPUT = 1u << 1, /* backward reads out */
  SP_OP_IS_LOSS = 1u << 2,          /* output is a scalar loss */
  SP_OP_NO_GRAD = 1u << 3,          /* op has no backward (e.g. argmax-style outputs) */
};

typedef struct sp_op_args {
  const void *attr; /* op-specific attribute struct (see ops/ops.h) */
  int n_in;
  const sp_tensor *in[SP_OP_MAX_IN];
  sp_tensor *d_in[SP_OP_MAX_IN]; /* accumulate; NULL = not needed */
  int n_param;
  const sp_tensor *param[SP_OP_MAX_PARAM]; /* trainable: weight, bias, gamma, beta */
  sp_tensor *d_param[SP_OP_MAX_PARAM];     /* accumulate; NULL = frozen */
  int n_state;
  sp_tensor *state[SP_OP_MAX_PARAM]; /* non-trainable buffers, e.g. BN running mean/var */
  sp_tensor *out;
  const sp_tensor *d_out;
  void *saved; /* saved_bytes() bytes: forward writes, backward reads */
  int training;
  uint64_t seed; /* per node and step: stochastic ops (dropout) draw from it */
} sp_op_args;

typedef struct sp_op_def {
  const char *name;
  unsigned flags;
  /* Output shape from input shapes (and param shapes, for checks). Returns 0,
   * or -1 with a message in err naming the offending shapes. */
  int (*infer)(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
               sp_shape *out, char *err, size_t errlen);
  /* Bytes saved from forward for backward; NULL means none. */
  size_t (*saved_bytes)(const void *attr, int n_in, const sp_shape *in, const sp_shape *out);
  void (*forward)(const sp_op_args *a);
  void (*backward)(const sp_op_args *a);
} sp_op_def;

#endif
