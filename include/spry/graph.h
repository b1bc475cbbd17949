/* spry graphs: a static op graph built by calls, planned once per input shape.
 *
 *   sp_graph *g = sp_graph_new(seed);
 *   sp_value x = sp_graph_input(g, "image", SP_F32, 1);
 *   x = sp_conv2d(g, x, "conv1", 8, 3, 2, 1, 1, 1, 0);   ... build ...
 *   sp_plan *p = sp_plan_new(g, 1, &(sp_input_shape){"image", shape}, SP_BACKEND_REF, 1);
 *   fill sp_plan_input(p, "image"); sp_plan_forward(p); sp_plan_backward(p);
 *
 * Parameters (and BN running statistics) live in the graph, so any number of
 * plans for different input shapes share them. A plan fixes every shape, and
 * places all activations, gradients and saved scratch in one arena by
 * liveness: nothing is allocated while training.
 *
 * Builders never fail loudly: on a bad argument they record the first error in
 * the graph and return -1; later builders pass -1 through. Check
 * sp_graph_error(g) once after building. */
#ifndef SPRY_GRAPH_H
#define SPRY_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "spry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_graph sp_graph;
typedef struct sp_plan sp_plan;
struct sp_op_def;
typedef int sp_value; /* a node (and its single output); -1 = error */

typedef enum { SP_BACKEND_REF = 0, SP_BACKEND_CPU = 1 } sp_backend;
const char *sp_backend_name(sp_backend b);
int sp_backend_parse(const char *name, sp_backend *out);
/* The backend a run config gets when it names none: "cpu" (oneDNN) when this
 * build has it, else "ref". */
const char *sp_backend_default_name(void);
/* 1 when backend b computes bf16 plans (SP_PLAN_BF16) on this machine; else
 * 0, with the reason in sp_last_error(): the ref backend computes in f32, and
 * the cpu backend needs AVX-512 (oneDNN has no bf16 kernels below it). */
int sp_backend_bf16(sp_backend b);
/* 1 when bf16 plans on backend b are also faster here than f32 ones: the
 * cpu backend on AMX, or where the CPU's bf16 dot products (AVX512_BF16) do
 * at least 1.2x the work of its f32 FMA per second, timed once on first use
 * (a few milliseconds). Else 0 with the reason in sp_last_error(): a run
 * config's `precision: bf16` then computes in f32 (faster here), with a
 * note. The environment variable SPRY_BF16=force makes it 1 wherever
 * sp_backend_bf16 is, SPRY_BF16=off 0 everywhere. */
int sp_backend_bf16_pays(sp_backend b);

/* ---- graph ---------------------------------------------------------------- */
sp_graph *sp_graph_new(uint64_t seed);
void sp_graph_free(sp_graph *g);
/* First build error ("conv2d 'stage2.0.conv': ..."), or NULL. */
const char *sp_graph_error(const sp_graph *g);
/* Records a build error (the first one is kept) and returns -1; for model builders. */
int sp_graph_fail(sp_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int sp_graph_node_count(const sp_graph *g);
/* Node i's full name ("decoder.4.block.conv2"; a graph input's own name), or
 * NULL out of range. */
const char *sp_graph_node_name(const sp_graph *g, int i);

/* Name scopes prefix parameter and node names: "stage2" + "0" + "conv" ->
 * "stage2.0.conv.weight". printf-style. */
void sp_graph_push_scope(sp_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sp_graph_pop_scope(sp_graph *g);

/* A named graph input. channels is the size of dim 1 when known at build time
 * (builders need it to size weights), or -1. */
sp_value sp_graph_input(sp_graph *g, const char *name, sp_dtype dtype, int channels);
/* Keeps v alive after forward and makes it readable by name. */
void sp_graph_output(sp_graph *g, sp_value v, const char *name);
/* An auxiliary output (ResUNet's heatmaps, for report figures): plain plans
 * keep it like any output; a SP_PLAN_FROZEN plan (prediction, evaluation,
 * deployment) treats it as an inner value, so a fast backend keeps it in its
 * own layout and reuses its memory, and sp_plan_output returns NULL for it. */
void sp_graph_output_aux(sp_graph *g, sp_value v, const char *name);
/* Adds weight * v (a scalar loss node) to the training objective. */
void sp_graph_loss(sp_graph *g, sp_value v, float weight);
/* Channels of v known at build time, or -1. */
int sp_graph_channels(const sp_graph *g, sp_value v);

/* ---- parameters ------------------------------------------------------------ */
typedef enum {
  SP_INIT_ZERO,
  SP_INIT_ONE,
  SP_INIT_UNIFORM_FAN_IN, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default for conv/linear */
  SP_INIT_KAIMING_NORMAL, /* N(0, 2/fan): ResNet convs (fan = fan_out, ReLU gain) */
} sp_init;

enum {
  SP_PARAM_NO_DECAY = 1u << 0, /* BN and bias: excluded from weight decay by default */
  SP_PARAM_BUFFER = 1u << 1,   /* not trainable: BN running stats */
};

/* Registers "<scope>.<name>". Returns its id, or -1 (duplicate name). */
int sp_graph_param(sp_graph *g, const char *name, sp_shape shape, sp_init init, int64_t fan, unsigned flags);
int sp_graph_param_count(const sp_graph *g);
const char *sp_graph_param_name(const sp_graph *g, int id);
unsigned sp_graph_param_flags(const sp_graph *g, int id);
sp_tensor *sp_graph_param_value(sp_graph *g, int id);
sp_tensor *sp_graph_param_grad(sp_graph *g, int id); /* NULL for buffers */
int sp_graph_param_find(const sp_graph *g, const char *name);
/* Parameter i of the node that made value v (a conv's weight, a batch
 * norm's gamma): its id, or -1 when the node has no such parameter. */
int sp_graph_value_param(const sp_graph *g, sp_value v, int i);
void sp_graph_zero_grad(sp_graph *g);
int64_t sp_graph_param_numel(const sp_graph *g, int trainable_only);

/* A node of any op (builders below wrap this). attr is copied. */
sp_value sp_graph_node(sp_graph *g, const struct sp_op_def *op, const void *attr, size_t attr_size, const char *name,
                       int n_in, const sp_value *in, int n_param, const int *params, int n_state, const int *states,
                       int channels);

/* ---- builders (ops/ops.h documents each op's semantics) --------------------- */

/* Named arguments of the convolution and pooling builders, written as
 * designated initialisers: sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch =
 * 64, .kernel = 7, .stride = 2, .pad = 3}). A field left out (0) takes the
 * default in its comment. */
typedef struct {
  int out_ch;   /* output channels */
  int kernel;   /* square kernel side */
  int stride;   /* 0: 1 */
  int pad;      /* on every side */
  int dilation; /* 0: 1 */
  int groups;   /* 0: 1 */
  int bias;     /* 1: a bias parameter */
} sp_conv_args;
typedef struct {
  int out_ch, kernel;
  int stride; /* 0: 1 */
  int pad;
  int out_pad; /* extra output rows/columns (PyTorch output_padding) */
  int bias;
} sp_deconv_args;
typedef struct {
  int kernel;
  int stride; /* 0: 1 */
  int pad;
  int exclude_pad; /* avg pool: 1 divides by the window's pixels inside the image (PyTorch count_include_pad=False) */
  int ceil_mode;   /* PyTorch ceil_mode */
} sp_pool_args;

sp_value sp_conv2d(sp_graph *g, sp_value x, const char *name, sp_conv_args a);
sp_value sp_conv_transpose2d(sp_graph *g, sp_value x, const char *name, sp_deconv_args a);
sp_value sp_linear(sp_graph *g, sp_value x, const char *name, int in_features, int out_features, int bias);
sp_value sp_batchnorm(sp_graph *g, sp_value x, const char *name);
/* Turns every batchnorm node of g into synchronised batch norm: its batch
 * statistics and gradient projections are summed over data-parallel ranks by
 * sum(user, x, n) (in place). Call before making plans. Returns how many
 * nodes changed. */
int sp_graph_sync_batchnorm(sp_graph *g, void (*sum)(void *user, double *x, int n), void *user);
sp_value sp_relu(sp_graph *g, sp_value x);
sp_value sp_hardswish(sp_graph *g, sp_value x);
sp_value sp_dropout(sp_graph *g, sp_value x, float p);
sp_value sp_maxpool2d(sp_graph *g, sp_value x, sp_pool_args a); /* exclude_pad unused: pads with -inf */
sp_value sp_avgpool2d(sp_graph *g, sp_value x, sp_pool_args a);
sp_value sp_global_avgpool(sp_graph *g, sp_value x);
sp_value sp_blurpool(sp_graph *g, sp_value x, int filter_size, int stride);
sp_value sp_upsample(sp_graph *g, sp_value x, int scale, int bilinear);
sp_value sp_add(sp_graph *g, sp_value a, sp_value b);
sp_value sp_concat(sp_graph *g, int n, const sp_value *xs);
sp_value sp_reshape(sp_graph *g, sp_value x, int ndim, const int64_t *dims);
sp_value sp_flatten(sp_graph *g, sp_value x); /* [N, everything else] */
sp_value sp_softargmax(sp_graph *g, sp_value heatmaps, float scale);
sp_value sp_spatial_softmax(sp_graph *g, sp_value heatmaps);
sp_value sp_tshift(sp_graph *g, sp_value x, int segments, float ratio_back, float ratio_fwd);
sp_value sp_l1_loss(sp_graph *g, sp_value pred, sp_value target);
sp_value sp_mse_loss(sp_graph *g, sp_value pred, sp_value target);
sp_value sp_l2_loss(sp_graph *g, sp_value pred, sp_value target);        /* mean per-point distance */
sp_value sp_euclidean_loss(sp_graph *g, sp_value pred, sp_value target); /* summed over points */
/* neighbours[k*n_neighbours + j]: must outlive the graph (the graph keeps the pointer). */
sp_value sp_structure_loss(sp_graph *g, sp_value pred, sp_value target, int n_points, int n_neighbours,
                           const int32_t *neighbours);
sp_value sp_cross_entropy(sp_graph *g, sp_value logits, sp_value labels);

/* ---- plans --------------------------------------------------------------- */
typedef struct {
  const char *name;
  sp_shape shape;
} sp_input_shape;

enum {
  SP_PLAN_NO_REUSE = 1u << 0, /* every buffer its own memory (for tests) */
  SP_PLAN_POISON = 1u << 1,   /* fill buffers with NaN when their life ends (for tests) */
  /* Mixed precision (cpu backend): bf16 weights and activations in forward and
   * backward, f32 accumulation, f32 parameter gradients; parameters, optimizer
   * state and graph outputs stay f32. */
  SP_PLAN_BF16 = 1u << 2,
  /* Inference over parameters that stay fixed (prediction, evaluation of a
   * loaded checkpoint): a fast backend prepares each weight (layout,
   * precision) at the first forward and reuses it. Call
   * sp_plan_params_changed after writing the parameters. Not for training
   * plans. */
  SP_PLAN_FROZEN = 1u << 3,
  /* The caller reads only the losses (a training loop): graph outputs that
   * are not losses become inner values, so a fast backend keeps them in its
   * own layout and their memory is reused; sp_plan_output returns NULL for
   * them. (ResUNet's heatmaps output otherwise forces its head conv into
   * plain NCHW and keeps an N*K*H*W buffer alive.) */
  SP_PLAN_LOSS_ONLY = 1u << 4,
};

/* Shape inference (errors name the node, its op and the shapes), memory plan,
 * backend primitives. training=1 plans backward too. */
sp_plan *sp_plan_new(sp_graph *g, int n_inputs, const sp_input_shape *inputs, sp_backend backend, int training,
                     unsigned flags);
void sp_plan_free(sp_plan *p);
/* An input's tensor: it keeps what the caller wrote across forwards. */
sp_tensor *sp_plan_input(sp_plan *p, const char *name);
/* A node's output tensor; valid after forward for outputs and losses (others
 * may have been reused). NULL (sp_last_error says why) for a node the
 * backend fused with the ones next to it (a conv and its batch norm in a
 * frozen plan): mark it a graph output to keep it. */
const sp_tensor *sp_plan_value(const sp_plan *p, sp_value v);
const sp_tensor *sp_plan_output(const sp_plan *p, const char *name);
const sp_shape *sp_plan_shape(const sp_plan *p, sp_value v);
/* The graph's parameters or buffers were written (checkpoint load, optimizer
 * step): a SP_PLAN_FROZEN plan prepares its weights again at the next
 * forward. Harmless on other plans. */
void sp_plan_params_changed(sp_plan *p);
/* Sets the step number that seeds stochastic ops (dropout). */
void sp_plan_set_step(sp_plan *p, uint64_t step);
int sp_plan_forward(sp_plan *p);
/* Accumulates into the graph's parameter gradients (call sp_graph_zero_grad
 * first unless accumulating over micro-batches). */
int sp_plan_backward(sp_plan *p);
/* What a training loop calls instead of sp_graph_zero_grad when this plan's
 * sp_plan_backward comes next: a gradient whose first writer in that
 * backward can write it instead of adding to it is not cleared but marked
 * (a bf16 linear's 25 MB weight gradient is then written once, not cleared,
 * read and written); every other one is zeroed now. A marked gradient holds
 * zeros plus this backward only after it; the backward clears the marks, so
 * a later one adds again. */
void sp_plan_zero_grad(sp_plan *p);
/* Weighted sum of the loss terms after forward. */
double sp_plan_loss(const sp_plan *p);
size_t sp_plan_arena_bytes(const sp_plan *p);
size_t sp_plan_naive_bytes(const sp_plan *p);
/* Checks that no two buffers that are live at the same time overlap. */
int sp_plan_verify(const sp_plan *p);
/* FLOPs of one forward pass (conv, deconv and linear; 2 per multiply-add). */
double sp_plan_forward_flops(const sp_plan *p);
/* The same for node i alone (0 for ops without products, or out of range). */
double sp_plan_node_forward_flops(const sp_plan *p, int i);
/* Gradient-ready hook (data-parallel training): after each node's backward,
 * fn gets the trainable parameters whose gradients that backward made final,
 * so their all-reduce can start while the rest of backward runs. A parameter
 * is final after the backward of the earliest node in forward order that
 * uses it. fn NULL removes the hook. */
typedef void (*sp_grad_ready_fn)(void *user, const int *params, int n);
void sp_plan_set_grad_hook(sp_plan *p, sp_grad_ready_fn fn, void *user);
/* The node after whose backward `param`'s gradient is final, or -1 when no
 * backward writes it (buffers, frozen or unused parameters). */
int sp_plan_grad_ready_node(const sp_plan *p, int param);
/* Time the fast backend spends converting layouts (reorders), summed over
 * every plan from sp_backend_time_reorders(1) on (`bench train --profile`). */
void sp_backend_time_reorders(int on);
double sp_backend_reorder_seconds(void);
/* Optional per-op timing (for `bench --profile`): seconds spent per node. */
void sp_plan_enable_profile(sp_plan *p, int on);
int sp_plan_profile(const sp_plan *p, int node, double *fwd_s, double *bwd_s, const char **op_name);

#ifdef __cplusplus
}
#endif
#endif
