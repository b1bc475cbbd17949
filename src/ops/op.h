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
/* Ops after a node that its prepare is told about and may absorb (a conv,
 * its batch norm and ReLU, and the next conv with its own two; a frozen
 * bottleneck block's three convolutions, batch norms, ReLUs and residual add
 * with the heatmap head and soft-argmax after it: eleven). */
#define SP_OP_CHAIN 11

enum {
  SP_OP_BWD_NEEDS_INPUT = 1u << 0,  /* backward reads in[] (activations kept alive) */
  SP_OP_BWD_NEEDS_OUTPUT = 1u << 1, /* backward reads out */
  SP_OP_IS_LOSS = 1u << 2,          /* output is a scalar loss */
  SP_OP_NO_GRAD = 1u << 3,          /* op has no backward (e.g. argmax-style outputs) */
  /* Implementation flag (fast backends): when this node is the first to write
   * an input's gradient (sp_op_args.d_in_fresh), backward overwrites it, so the
   * plan skips zeroing that buffer. */
  SP_OP_GRAD_OVERWRITES_FRESH = 1u << 4,
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
  /* ---- fast backends only (reference kernels ignore these) ---- */
  void *impl;          /* the state prepare() made for this node */
  void *scratch;       /* prep.fwd_scratch_bytes in forward, prep.bwd_scratch_bytes in backward */
  unsigned d_in_fresh; /* bit k: this node is the first writer of d_in[k] (see SP_OP_GRAD_OVERWRITES_FRESH) */
  /* bit k: backward writes d_param[k] instead of adding into it (set by
   * sp_plan_backward_fresh where prepare reported param_grad_overwrites). */
  unsigned d_param_fresh;
  /* Forward of a SP_PLAN_FROZEN plan: 1 when the parameters changed since
   * the last forward (always 1 in other plans), so weights prepared from
   * them must be prepared again. */
  int params_stale;
  /* The consumer this node absorbed (sp_op_prep.absorb_consumer), for its
   * parameters and state (a folded batch norm); NULL otherwise. */
  const struct sp_op_args *consumer;
  /* The consumer's consumer when absorbed too (a residual add, for its
   * other input); NULL otherwise. */
  const struct sp_op_args *consumer2;
  /* Every absorbed node in order: chain[0] is consumer, chain[1] consumer2
   * (a chain of fused convolutions reads the later ones' weights here). */
  const struct sp_op_args *chain[SP_OP_CHAIN];
  /* The node this one adopted (sp_op_prep.adopt_other): what it reads of
   * that node (input, statistics, parameters) and writes for it (its input
   * and parameter gradients); NULL otherwise. */
  const struct sp_op_args *adopted;
} sp_op_args;

/* A node that consumes the output of another (or of that one's consumer):
 * what a fusing prepare needs to know about it. */
typedef struct {
  const struct sp_op_def *op; /* NULL: none offered */
  const void *attr;
  int out_plain; /* its output must be plain (a graph output or loss) */
  int n_param, n_state;
  sp_shape param_shape[SP_OP_MAX_PARAM];
  sp_shape out_shape;
  int n_in, other;  /* 1; or 2, the other input being in[other] */
  int other_is_in0; /* that other input is the prepared node's own in[0] (an identity shortcut) */
  sp_shape other_shape;
  sp_dtype other_dtype;
  const void *other_layout;
  /* The node that computes the other input, where it may be adopted
   * (sp_op_prep.adopt_other): this consumer is its only one, it absorbed
   * nothing, its output is not kept and its backward runs as the prepared
   * node's does. Its op and the state its prepare made; NULL otherwise. */
  const struct sp_op_def *other_op;
  void *other_state;
  /* 1: the other input's buffer may hold the prepared node's output
   * (sp_op_prep.out_over_other): no backward runs anywhere near it, it is
   * computed by an op (not a graph input), not kept, and this consumer is
   * its last reader. */
  int other_overwritable;
} sp_op_consumer;

/* What a fast backend's prepare() sees and reports for one node. The plan calls
 * it in node order after shape inference, so every input's layout is known;
 * what it reports sizes the node's buffers in the arena. A layout is opaque to
 * the plan (the backend's memory descriptor, owned by the producing node's
 * state); NULL means plain: contiguous row-major, f32 (or the graph input's
 * dtype). A value's gradient has its value's layout and byte size. */
typedef struct sp_op_prep {
  /* given */
  const struct sp_op_def *op; /* the graph's op (its reference kernels) */
  const void *attr;
  int n_in;
  sp_shape in_shape[SP_OP_MAX_IN];
  sp_dtype in_dtype[SP_OP_MAX_IN];
  const void *in_layout[SP_OP_MAX_IN];
  int need_d_in[SP_OP_MAX_IN]; /* backward must produce this input's gradient */
  int n_param;
  sp_shape param_shape[SP_OP_MAX_PARAM];
  int param_grad[SP_OP_MAX_PARAM]; /* the parameter is trainable */
  int n_state;
  sp_shape out_shape;
  int training;     /* the plan was made for training (batch statistics) */
  int run_backward; /* this node's backward runs */
  int out_plain;    /* the output must be plain (a graph output or loss) */
  int bf16;         /* the plan computes in bf16 (SP_PLAN_BF16) */
  int frozen;       /* SP_PLAN_FROZEN: weights may be prepared once (see params_stale) */
  /* The chain of sole consumers after this node, for fusions: consumer[0]
   * is the output's only consumer (op NULL when it has none, several, or
   * the output is a graph output or loss); consumer[1] that one's sole
   * consumer, consumer[2] the next. A two-input consumer (an add) is offered
   * when it comes right after the node before it and its other input is
   * computed before this node: a ResNet block's end, where a batch norm
   * absorbs the residual add (consumer[0]), or a frozen conv folds its batch
   * norm and takes the add and the ReLU as post-ops (consumer[1], [2]);
   * up to SP_OP_CHAIN links (the inference stem computes the next conv). */
  sp_op_consumer consumer[SP_OP_CHAIN];
  /* The node computing in[0], where this node is its only consumer and it
   * absorbed nothing: its op and the state its prepare made (a batch norm
   * taking the statistics its convolution computed as it wrote its output);
   * NULL otherwise. */
  const struct sp_op_def *in0_op;
  void *in0_state;
  /* reported */
  /* 1: this node also computes its sole consumer (e.g. batchnorm + relu): the
   * plan skips the consumer and gives its output and gradient this node's
   * buffers, so d_out here is the gradient of the consumer's output.
   * 2: the consumer's consumer too (consumer[1]); k: consumer[0 .. k - 1]. */
  int absorb_consumer;
  /* 1: having absorbed consumer[0] (two inputs), this node also computes the
   * part of the other input's producer that only that consumer needed
   * (consumer[0].other_state, which the backend marks): a batch norm whose
   * normalised output only the residual add read. The producer's forward
   * still runs (its statistics) and its output is left unwritten; its
   * backward is this node's, which writes its input and parameter
   * gradients (sp_op_args.adopted). */
  int adopt_other;
  /* k + 1: the node writes its output over consumer[k]'s other input, which
   * it reads there first (a frozen conv's residual add as a sum post-op:
   * the add's output is not written to a buffer of its own, which cost a
   * read of it before the write). Only where that link is absorbed and
   * other_overwritable; the plan then gives this node that input's buffer.
   * 0: its own buffer. */
  int out_over_other;
  /* With absorbed nodes, out_layout and out_bytes describe the last one's
   * output (the host's buffer holds only that: a stem computing the conv
   * after it reports that conv's smaller output). */
  /* bit k: told so (sp_op_args.d_param_fresh), backward overwrites
   * d_param[k], so sp_plan_backward_fresh need not zero it first. */
  unsigned param_grad_overwrites;
  void *state;            /* passed back as sp_op_args.impl; freed by release() */
  const void *out_layout; /* NULL: plain */
  size_t out_bytes;       /* activation (and gradient) bytes */
  size_t saved_bytes;     /* replaces op->saved_bytes */
  size_t fwd_scratch_bytes, bwd_scratch_bytes;
} sp_op_prep;

typedef struct sp_op_def {
  const char *name;
  unsigned flags;
  /* Output shape from input shapes (and param shapes, for checks). Returns 0,
   * or -1 with a message in err naming the offending shapes. */
  int (*infer)(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param, sp_shape *out,
               char *err, size_t errlen);
  /* Bytes saved from forward for backward; NULL means none. */
  size_t (*saved_bytes)(const void *attr, int n_in, const sp_shape *in, const sp_shape *out);
  void (*forward)(const sp_op_args *a);
  void (*backward)(const sp_op_args *a);
  /* ---- fast backends only (NULL for reference ops) ---- */
  int (*prepare)(sp_op_prep *p); /* 0, or -1 with sp_error_set */
  /* Buffers placed: create what needs their addresses. a is the node's wired
   * args; the scratch pointers are this node's per-step scratch (or NULL). */
  int (*bind)(void *state, const sp_op_args *a, void *fwd_scratch, void *bwd_scratch);
  void (*release)(void *state);
} sp_op_def;

/* Shared by the ops (ops/op_util.c): the bias gradient of an NCHW output,
 * db[c] += sum over n and the c-th plane of dy (double sums). */
void sp_op_bias_grad_nchw(const float *dy, int64_t n, int64_t c, int64_t hw, float *db);
/* dx += dy over n elements: the backward of every op that passes its output
 * gradient through unchanged (add, reshape). */
void sp_op_grad_pass(float *dx, const float *dy, int64_t n);

/* The planes of an op that maps each [h, w] plane of an NCHW input to an
 * [ho, wo] plane of its output (pooling, upsampling, BlurPool). */
typedef struct {
  int64_t planes, h, w, ho, wo;
} sp_plane_geom;
sp_plane_geom sp_plane_geom_of(const sp_shape *in, const sp_shape *out);

/* Batch norm's per-channel pieces, shared by batchnorm and batchnorm_sync
 * (ops/op_util.c; the sync op differs only in where the sums are added up).
 * x is viewed as [n, c, s]; mean and inv_std are channel ch's; xhat =
 * (x - mean) inv_std. */
typedef struct {
  int64_t n, c, s;
} sp_bn_geom;
sp_bn_geom sp_bn_geom_of(const sp_shape *x);
/* y = (x - mean) scale + shift over channel ch. */
void sp_bn_normalize_channel(const sp_bn_geom *g, int64_t ch, const float *x, double mean, double scale, double shift,
                             float *y);
/* The running buffers move towards the batch's mean and unbiased variance
 * (var is the biased one over m values). */
void sp_bn_running_update(float *rm, float *rv, int64_t ch, double mean, double var, double m, double momentum);
/* sum dy and sum dy xhat over channel ch: dbeta and dgamma, and the two
 * projections batch-statistics backward removes from dy. */
void sp_bn_grad_sums(const sp_bn_geom *g, int64_t ch, const float *x, const float *dy, double mean, double inv_std,
                     double *sum_dy, double *sum_dy_xhat);
/* dx += scale (dy - mean_dy - xhat mean_dy_xhat) over channel ch. */
void sp_bn_input_grad(const sp_bn_geom *g, int64_t ch, const float *x, const float *dy, double mean, double inv_std,
                      double scale, double mean_dy, double mean_dy_xhat, float *dx);

/* A direct 2-D convolution's geometry (stride, zero padding, dilation,
 * groups), on which the reference loops of conv2d and conv_transpose2d run
 * (ops/conv_loops.c). A transposed convolution uses the direct convolution it
 * is the adjoint of: that one's input is the transposed one's output. */
typedef struct {
  int64_t n, cin, h, w;        /* input */
  int64_t cout, cin_g, kh, kw; /* weight [cout, cin_g, kh, kw] */
  int64_t ho, wo;              /* output */
  int64_t sh, sw, ph, pw, dh, dw, groups;
} sp_conv_geom;
/* y[n, cout] = bias + the taps of x (the forward); bias may be NULL; y is
 * overwritten, or added to when accumulate. */
void sp_conv_gather(const sp_conv_geom *g, const float *x, const float *w, const float *bias, float *y, int accumulate);
/* dx[n, cin] = bias + the taps of dy spread back (the input gradient); bias
 * is indexed by input channel and may be NULL; overwritten or accumulated. */
void sp_conv_scatter(const sp_conv_geom *g, const float *dy, const float *w, const float *bias, float *dx,
                     int accumulate);
/* dw[cout, cin_g, kh, kw] += sum over (n, oh, ow) of x dy. */
void sp_conv_weight_grad(const sp_conv_geom *g, const float *x, const float *dy, float *dw);

#endif
