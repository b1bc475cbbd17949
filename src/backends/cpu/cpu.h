/* The cpu backend's internals (oneDNN C API), shared by the files of cpu/.
 *
 * Every op the backend runs is one `cpu_node` (the sp_op_args.impl state):
 * prepare() creates its primitive descriptors and primitives once per plan and
 * reports its output layout (a dnnl_memory_desc_t owned by the node), bind()
 * wraps the arena's buffers in dnnl memory objects, forward/backward execute.
 * A node starts with a vtable so prepare can pick the oneDNN path or, for
 * cases oneDNN cannot do as PyTorch does, the plain adapter (adapter.c: the
 * reference kernel after one documented reorder to plain f32).
 *
 * Layout rules: a value's gradient has the value's layout; graph inputs,
 * graph outputs and losses are plain f32; parameters are plain f32 in the
 * graph (master weights) and reordered (to blocked, and to bf16 in bf16 plans)
 * into the node's saved buffer each forward. */
#ifndef SPRY_BACKENDS_CPU_H
#define SPRY_BACKENDS_CPU_H

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/op.h"

/* Status checks that name the call. DNNL_TRY returns -1 with the error set
 * (prepare/bind); DNNL_RUN aborts (execution cannot fail once bound, so a
 * failure there is a bug, and forward/backward return void). */
#define DNNL_TRY(call)                                                             \
  do {                                                                             \
    dnnl_status_t st_ = (call);                                                    \
    if (st_ != dnnl_success) return cpu_dnnl_fail(__FILE__, __LINE__, #call, st_); \
  } while (0)
#define DNNL_RUN(call)                                                       \
  do {                                                                       \
    dnnl_status_t st_ = (call);                                              \
    if (st_ != dnnl_success) cpu_dnnl_abort(__FILE__, __LINE__, #call, st_); \
  } while (0)
int cpu_dnnl_fail(const char *file, int line, const char *call, dnnl_status_t st);
void cpu_dnnl_abort(const char *file, int line, const char *call, dnnl_status_t st) __attribute__((noreturn));

dnnl_engine_t cpu_engine(void); /* process-wide, created on first use */
dnnl_stream_t cpu_stream(void);

/* ---- nodes ---------------------------------------------------------------- */
typedef struct cpu_node cpu_node;
typedef struct {
  void (*forward)(cpu_node *n, const sp_op_args *a);
  void (*backward)(cpu_node *n, const sp_op_args *a);
  int (*bind)(cpu_node *n, const sp_op_args *a, char *fwd_scratch, char *bwd_scratch);
  void (*release)(cpu_node *n); /* op-specific parts; the common ones go in cpu_node_free */
} cpu_vt;

#define CPU_MAX_PRIMS 16
#define CPU_MAX_MEMS 48
#define CPU_MAX_ARGS 12

/* reorder_w16.c: an f32 weight reorder between a 16 x 16 blocked layout and
 * a plain one in which one of the two blocked dims is innermost (or from that
 * plain f32 into bf16 pair-blocked tiles), as tiles of our own (oneDNN 2.6
 * runs many of these on a slow generic kernel). */
enum { W16_TILES = 1, W16_RUNS = 2, W16_MAX_RUN = 9 /* kernel positions: 3x3 */ };
typedef struct {
  int on; /* 0, W16_TILES (one of the two dims innermost on the plain side) or W16_RUNS (up to 3x3 in oihw / iohw) */
  int to_plain, transpose, accumulate;
  int mid_is_row;                 /* W16_RUNS: the plain dim next to the kernel positions is the tile's row dim */
  int pairs;                      /* into bf16 tiles whose rows go in pairs (the bf16 kernels' weights) */
  int64_t nb[2];                  /* blocks along the tile's row dim and column dim */
  int64_t bstride[2], pstride[2]; /* per block (blocked side) and per element (plain) of those dims */
  int64_t spatial, bsp, psp;      /* kernel positions, and their stride on either side */
} cpu_w16;
extern int cpu_reorder_use_w16; /* 0: oneDNN's reorders for these too (tests compare) */
/* 1 with *t filled when src -> dst (written, or added with accumulate) is
 * such a reorder, else 0. */
int cpu_w16_of(cpu_w16 *t, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate);
void cpu_w16_run(const cpu_w16 *t, const void *src, void *dst, int serial);

/* reorder_lanes8.c: an activation of 8 channels between one 16-channel
 * block (half padding) and channels-last, f32 or bf16, written. */
typedef struct {
  int on, to_channels_last, esize, stream; /* stream: the output past the caches */
  int64_t positions;                       /* N H W */
} cpu_lanes8;
extern int cpu_reorder_use_lanes8; /* 0: oneDNN's reorders for these too (tests compare) */
int cpu_lanes8_of(cpu_lanes8 *t, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate);
void cpu_lanes8_run(const cpu_lanes8 *t, const void *src, void *dst, int serial);
extern long cpu_lanes8_runs; /* calls so far (tests check where the path is taken) */

/* One primitive execution with its arguments (bound memory objects). */
typedef struct {
  dnnl_primitive_t prim;
  int n_args;
  int serial; /* run on this thread alone (small reorders, see cpu_bind_reorder) */
  dnnl_exec_arg_t args[CPU_MAX_ARGS];
  cpu_w16 w16;         /* a reorder run by reorder_w16.c instead of prim (w16.on) */
  cpu_lanes8 lanes8;   /* ... or by reorder_lanes8.c (lanes8.on) */
  const void *own_src; /* the reorder's buffers, for either */
  void *own_dst;
} cpu_exec;

struct cpu_node {
  const cpu_vt *vt;
  dnnl_memory_desc_t out_md; /* the output's layout (the plan's opaque layout) */
  int out_plain;             /* out_md is plain: report NULL to the plan */
  int n_pds, n_prims, n_mems;
  dnnl_primitive_desc_t pds[CPU_MAX_PRIMS];
  dnnl_primitive_t prims[CPU_MAX_PRIMS];
  dnnl_memory_t mems[CPU_MAX_MEMS];
  void *kept; /* cpu_node_keep: memory that outlives every step (frozen weights) */
  /* The batch statistics of the output, for the batch norm reading it (a
   * bf16 training plan's products on mm_amx.c and conv_in8_s2.c's f32
   * forward compute them as they write it): offered at prepare (stats_able), taken by that batch norm at its
   * prepare (stats_on); bound: mean[c], then the biased var[c]. */
  int stats_able, stats_on;
  float *stats;
};

/* Allocates a zeroed node of `size` bytes (an op struct starting with cpu_node). */
void *cpu_node_new(size_t size, const cpu_vt *vt);
void cpu_node_free(cpu_node *n);
/* Finishes prepare: reports state, layout and output bytes to the plan. */
void cpu_report(sp_op_prep *p, cpu_node *n);
/* The same with the node's forward and backward scratch bytes; returns 0 (the
 * end of a successful prepare). */
int cpu_report_scratch(sp_op_prep *p, cpu_node *n, size_t fwd_scratch, size_t bwd_scratch);

/* ---- one-input oneDNN nodes (unary.c): relu, pooling, upsampling ---------- */
typedef struct {
  cpu_node base;
  int run_backward, has_ws;
  int bwd_reads_dst; /* the backward primitive reads the output (relu) */
  dnnl_memory_desc_t src_md, dst_md, ws_md;
  dnnl_primitive_desc_t fwd_pd, bwd_pd, acc_pd;
  dnnl_primitive_t fwd, bwd, acc;
  size_t dsrc_off; /* scratch for a gradient that is added, not written */
  cpu_exec f, b, b_out;
} cpu_unary;
/* The steps of a unary prepare: a new node; after making fwd_pd / fwd, take
 * the output layout and workspace from it; then make the backward primitive
 * (bwd_desc, or NULL for inference) and report to the plan (0, or -1 with
 * the error set). */
cpu_unary *cpu_unary_new(sp_op_prep *p);
void cpu_unary_forward_made(cpu_unary *s);
int cpu_unary_finish(sp_op_prep *p, cpu_unary *s, const void *bwd_desc);

/* ---- memory descriptors ------------------------------------------------------ */
dnnl_data_type_t cpu_dt(sp_dtype t);
/* Plain row-major md for a shape (1-5 dims). */
int cpu_md_plain(dnnl_memory_desc_t *md, const sp_shape *s, dnnl_data_type_t dt);
/* format_any md (the primitive chooses). */
int cpu_md_any(dnnl_memory_desc_t *md, const sp_shape *s, dnnl_data_type_t dt);
/* Input k's layout: the producer's md, or plain for a plain value. */
int cpu_md_input(dnnl_memory_desc_t *md, const sp_op_prep *p, int k);
/* The same layout in another data type (bf16 <-> f32). */
int cpu_md_retype(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *src, dnnl_data_type_t dt);
int cpu_md_equal(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b);
int cpu_md_is_plain(const dnnl_memory_desc_t *md);
size_t cpu_md_bytes(const dnnl_memory_desc_t *md);
/* The channel layout of a 4-D activation, for the kernels of our own that
 * work in it (tshift.c, softargmax.c, blurpool.c): 1 (plain NCHW), 8 or 16
 * (aBcd8b / aBcd16b: channel blocks), CPU_LANES_NHWC (channels-last), or 0
 * (any other layout). cpu_lanes_tag maps it back to oneDNN's tag. */
enum { CPU_LANES_NHWC = -1 };
int cpu_md_lanes(const dnnl_memory_desc_t *md);
dnnl_format_tag_t cpu_lanes_tag(int lanes);
/* A primitive descriptor's md for a query (dnnl_query_src_md, ...). */
const dnnl_memory_desc_t *cpu_pd_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index);

/* ---- primitives --------------------------------------------------------------- */
/* Creates a primitive descriptor (user-managed scratchpad, so scratchpads live
 * in the plan's arena) and its primitive; both are owned by n. post_ops may
 * be NULL. Returns 0 or -1 with the error set. */
/* The two halves of cpu_make, for trying layouts: a descriptor the caller
 * owns (destroy it if unused), and adopting one into n with its primitive. */
int cpu_pd(const void *op_desc, const_dnnl_primitive_desc_t hint, const_dnnl_post_ops_t post_ops,
           dnnl_primitive_desc_t *pd);
int cpu_adopt(cpu_node *n, dnnl_primitive_desc_t pd, dnnl_primitive_t *prim);
int cpu_make(cpu_node *n, const void *op_desc, const_dnnl_primitive_desc_t hint, const_dnnl_post_ops_t post_ops,
             dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim);
/* *po = a sum post-op (the primitive adds into its destination) when
 * accumulate, else NULL; the caller destroys it. 0, or -1 with the error. */
int cpu_sum_post_ops(int accumulate, dnnl_post_ops_t *po);
/* The backward primitive (bwd_desc, hinted by its forward) of an op whose
 * input gradient has the input's layout md, and the accumulating reorder
 * md -> md that adds a gradient written to scratch into one already there (a
 * node that is not the first writer). *scratch: the larger scratchpad of the
 * two. 0, or -1 with the error. */
int cpu_make_backward_acc(cpu_node *n, const void *bwd_desc, const_dnnl_primitive_desc_t fwd_pd,
                          const dnnl_memory_desc_t *md, dnnl_primitive_desc_t *bwd_pd, dnnl_primitive_t *bwd,
                          dnnl_primitive_desc_t *acc_pd, dnnl_primitive_t *acc, size_t *scratch);
/* A reorder src -> dst; accumulate adds into dst (sum post-op) instead of
 * overwriting. */
int cpu_make_reorder(cpu_node *n, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate,
                     dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim);
size_t cpu_scratchpad_bytes(const_dnnl_primitive_desc_t pd);
/* A descriptor tried and found wanting: destroyed and cleared; returns 1
 * (a rewrite's "not taken"). */
int cpu_pd_decline(dnnl_primitive_desc_t *pd);
/* For a pass rewritten as another convolution (conv_dx_fwd.c, conv_s2_dx.c,
 * deconv_1x1.c): n adopts pd, *w_md becomes the weights' layout it chose,
 * the reorder from w_plain into it is made, and *scratch is the larger of
 * the two scratchpads (they run one after the other). 0, or -1 with the
 * error. */
int cpu_adopt_with_weights(cpu_node *n, dnnl_primitive_desc_t pd, dnnl_primitive_t *prim,
                           const dnnl_memory_desc_t *w_plain, dnnl_memory_desc_t *w_md, dnnl_primitive_desc_t *re_pd,
                           dnnl_primitive_t *re, size_t *scratch);
/* The implementation is oneDNN's reference (slow) kernel: "ref:any". */
/* oneDNN's name for the implementation (e.g. "brgconv:avx512_core_amx"), "" if none. */
const char *cpu_pd_impl(const_dnnl_primitive_desc_t pd);
int cpu_pd_is_ref(const_dnnl_primitive_desc_t pd);

/* A memory object over ptr (owned by n); NULL with the error set on failure. */
dnnl_memory_t cpu_mem(cpu_node *n, const dnnl_memory_desc_t *md, void *ptr);
/* Starts an execution record and adds arguments to it (bind time). */
void cpu_exec_init(cpu_exec *e, dnnl_primitive_t prim);
int cpu_exec_arg(cpu_exec *e, cpu_node *n, int arg, const dnnl_memory_desc_t *md, void *ptr);
/* The primitive's scratchpad (at the start of the step's scratch region). */
int cpu_exec_scratchpad(cpu_exec *e, cpu_node *n, const_dnnl_primitive_desc_t pd, char *scratch);
void cpu_exec_run(const cpu_exec *e);
/* `bench train --profile`: while on, cpu_exec_run adds the wall time of every
 * oneDNN reorder (layout changes, and gradients accumulated across layouts)
 * to a process-wide total, so a profile can show what the layouts cost. */
void cpu_reorder_timing(int on);
double cpu_reorder_seconds(void);
/* Binds a reorder made by cpu_make_reorder: from src_ptr to dst_ptr.
 * Reorders of at most cpu_serial_reorder_bytes (256 KB) of source run on the
 * calling thread alone. */
extern size_t cpu_serial_reorder_bytes;
int cpu_bind_reorder(cpu_exec *e, cpu_node *n, const_dnnl_primitive_desc_t pd, dnnl_primitive_t prim, void *src_ptr,
                     void *dst_ptr, char *scratch);

/* Memory of the node's own that lives as long as the plan (frozen plans
 * keep prepared weights there); one allocation per node, freed with it. */
void *cpu_node_keep(cpu_node *n, size_t bytes);

/* Bump allocation inside a node's scratch or saved region (64-byte aligned). */
size_t cpu_take(size_t *used, size_t bytes);

/* Falls back to the plain adapter when oneDNN refuses a case (logged when
 * SPRY_CPU_VERBOSE is set); n (may be NULL) is freed first. */
int cpu_fallback(sp_op_prep *p, cpu_node *n);

/* Adds src[0..n) into dst[0..n) (f32; parameter gradients, n small). */
void cpu_add_f32(float *dst, const float *src, size_t n);
/* dst = src rounded to bf16 (weights the bf16 products read, every step):
 * VW values a step (vec.h), threads from 64K values. */
void cpu_round_bf16(uint16_t *dst, const float *src, int64_t count);

/* ---- batch-norm kernels of our own: bnorm.h ------------------------------------ */
#include "backends/cpu/bnorm.h"

/* ---- matrix products (conv_mm.c, linear_mm.c) ------------------------------------- */
/* A matmul c = a b (+ bias) owned by n, adding into c with accumulate (sum
 * post-op); -1 (error set) when oneDNN would run its reference kernel. */
int cpu_matmul_make(cpu_node *n, const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b,
                    const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *c, int accumulate,
                    dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim);
/* linear_mm.c: bf16 training on a plain input as matmuls on the plain
 * master weights; 1 when the case does not apply. */
int cpu_linear_mm_prepare(sp_op_prep *p);

#include "backends/cpu/products.h" /* conv_mm.c, mm_amx.c, dw_amx.c, conv_bww_mm.c, conv_col_mm.c, ... */
/* conv_s2_dx.c: the input gradient of a bf16 channels-last 3x3, stride-2,
 * padding-1 convolution (even input size) as a 2x2 forward convolution of
 * dY into the four parity phases of dX, then a shuffle into dX. */
extern int cpu_conv_use_s2_dx;
extern int64_t cpu_conv_s2_dx_max_channels;
typedef struct {
  int64_t n, ic, oc, ih, iw, oh, ow;
  dnnl_memory_desc_t dy_md, d_md, w_plain_md, w_md;
  dnnl_primitive_desc_t pd, re_pd;
  dnnl_primitive_t prim, re;
  size_t w_plain_off, w_off, d_off; /* in backward scratch */
  uint16_t *w_plain, *d, *dx;
  cpu_exec w_re, conv;
} cpu_s2dx;
/* 0: taken (its backward scratch bytes in *bwd_scratch); 1: not (the shape,
 * the layouts src / dst or no AMX kernel for the product); -1: error set. */
int cpu_s2dx_prepare(cpu_s2dx *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *src,
                     const dnnl_memory_desc_t *dst, size_t *bwd_scratch);
int cpu_s2dx_bind(cpu_s2dx *m, cpu_node *n, const void *dy, void *dx, char *bwd_scratch);
void cpu_s2dx_run(const cpu_s2dx *m, const float *w, int accumulate); /* w: the plain f32 master weights */
/* conv_dx_fwd.c: the input gradient of a 1x1 stride-1 convolution (f32, or
 * bf16 in channel blocks) that adds onto one already there, as a forward
 * convolution of dY with W^T and a sum post-op (backward data takes none). */
extern int cpu_conv_use_dx_fwd;
typedef struct {
  dnnl_memory_desc_t dy_md, dx_md, wt_plain_md, wt_md;
  dnnl_primitive_desc_t pd, re_pd;
  dnnl_primitive_t prim, re;
  size_t wt_off; /* W^T in the primitive's blocks, in backward scratch */
  cpu_exec wt_re, conv;
} cpu_dxfwd;
/* 0: ready (its backward scratch bytes in *bwd_scratch); 1: not (the shape,
 * the dtype or no real kernel on these layouts); -1: error set. */
int cpu_dxfwd_prepare(cpu_dxfwd *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *x_md,
                      const dnnl_memory_desc_t *dy_md, size_t *bwd_scratch);
int cpu_dxfwd_bind(cpu_dxfwd *m, cpu_node *n, const float *w, const void *dy, void *dx, char *bwd_scratch);
void cpu_dxfwd_run(const cpu_dxfwd *m); /* dX += the product */
extern long cpu_dxfwd_calls;            /* cpu_dxfwd_run's calls so far (tests check the path ran) */
/* deconv_1x1.c: the forward pass of an f32 transposed convolution with
 * kernel = stride = 2, no padding, from cpu_deconv_1x1_min_channels input
 * channels (256; 0 turns it off), as a 1x1 convolution into 4 OC channels and
 * a shuffle of channel blocks (16 with AVX-512, 8 with AVX2) into Y. */
extern int64_t cpu_deconv_1x1_min_channels;
extern long cpu_dc1_calls; /* cpu_dc1_run's calls so far (tests check the path ran) */
typedef struct {
  int64_t n, ic, oc, h, w;
  int64_t lanes; /* channels a block: X's, Y's and Y''s */
  int fold;      /* frozen: 1 the batch norm after it folded in (W' scaled, a bias), 2 and the ReLU as a post-op */
  dnnl_memory_desc_t x_md, y2_md, w2_plain_md, w2_md, b2_md;
  dnnl_primitive_desc_t pd, re_pd;
  dnnl_primitive_t prim, re;
  size_t w2_plain_off, w2_off, b2_off, y2_off; /* in forward scratch (W' and its bias unless kept) */
  char *kept;                                  /* frozen plans: W' plain and blocked there (the node's own memory) */
  float *w2_plain, *b2, *y2, *y;
  void *w2;
  cpu_exec w_re, conv;
  /* 16-channel blocks, AVX-512 builds, up to cpu_deconv_direct_max_ic input
   * channels, frozen with the batch norm folded or nothing folded: no 1x1
   * form, no shuffle; each output row straight from its input row
   * (deconv_1x1.c's direct), W'' [OC/16][ky][IC][kx][16] at w2_off (kept
   * by frozen plans, in forward scratch otherwise). */
  int direct, stream;
  const float *x;
  /* Frozen plans with the concat after the folded batch norm and ReLU
   * absorbed (U-Net's skip join, cpu_dc1_concat_prepare; either form): Y is
   * the concat's first oc channels of out_c; the skip (skip_c channels, in
   * the same blocks) is copied after them, streamed (stream) when the
   * concat is large. */
  int64_t out_c, skip_c;
  const float *skip;
} cpu_dc1;
/* 0: m (direct or 1x1 form) also computes p->consumer[2], a concat of its
 * ReLU's output and an earlier value in the same blocks (*out_md: the
 * concat's); 1: not. cpu_dc1_bind_skip: that value's address. */
int cpu_dc1_concat_prepare(cpu_dc1 *m, const sp_op_prep *p, dnnl_memory_desc_t *out_md);
void cpu_dc1_bind_skip(cpu_dc1 *m, const void *skip);
extern int cpu_dc1_use_concat; /* the switch tests and benchmarks compare with (1) */
extern int64_t cpu_deconv_direct_max_ic;
extern int cpu_deconv_direct_unfolded; /* 1: plans that fold nothing (training too) take the direct form */
extern long cpu_dc1_direct_calls, cpu_dc1_cat_calls; /* direct forwards; those with a concat */
/* 0: taken (its forward scratch bytes in *fwd_scratch; with keep, the bytes
 * W' needs in the node's own memory in *kept_bytes, given by cpu_dc1_keep;
 * fold as cpu_dc1.fold); 1: not; -1: error set. */
int cpu_dc1_prepare(cpu_dc1 *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *src,
                    const dnnl_memory_desc_t *dst, int keep, int fold, size_t *fwd_scratch, size_t *kept_bytes);
void cpu_dc1_keep(cpu_dc1 *m, char *kept);
int cpu_dc1_bind(cpu_dc1 *m, cpu_node *n, const void *x, void *y, char *fwd_scratch);
/* w: the plain f32 weights [IC, OC, 2, 2]; bn: the folded batch norm's args */
void cpu_dc1_run(const cpu_dc1 *m, const float *w, const struct sp_op_args *bn, int weights_changed);
/* deconv_1x1_bwd.c: the backward pass of an f32 transposed convolution with
 * kernel = stride = 2 as 1x1 products on a space-to-depth copy of dY (0:
 * oneDNN's deconvolution backward, which tests compare it with). */
extern int cpu_deconv_1x1_bwd;
extern long cpu_dcb_calls; /* backward passes run (tests) */
typedef struct {
  int64_t n, ic, oc, h, w, lanes; /* lanes: dY's channel block, 16 or 8 */
  int dx, dw;                     /* prepared for the input gradient / the weight gradient */
  int run_dx, run_dw;             /* ... and bound to one */
  dnnl_memory_desc_t x_md, dy2_md, w_plain_md, wt_md, dw_plain_md, dw2_md;
  dnnl_primitive_desc_t dx_pd[2], wt_re_pd, dw_pd, dw_re_pd[2]; /* [0] writes, [1] adds */
  dnnl_primitive_t dx_prim[2], wt_re_prim, dw_prim, dw_re_prim[2];
  size_t dy2_off, wt_off, dw2_off; /* in backward scratch, after the primitives' scratchpads */
  const float *dy;
  float *dy2;
  cpu_exec wt_re, dx_run[2], dw_run, dw_out[2];
} cpu_dcb;
/* 0: taken (backward scratch bytes in *bwd_scratch); 1: not; -1: error set. */
int cpu_dcb_prepare(cpu_dcb *m, cpu_node *n, const cpu_conv_shape *c, const dnnl_memory_desc_t *x,
                    const dnnl_memory_desc_t *dy, int need_dx, int need_dw, size_t *bwd_scratch);
/* w: the plain weights [IC, OC, 2, 2]; dx or dw NULL: that gradient is not wanted now */
int cpu_dcb_bind(cpu_dcb *m, cpu_node *n, const float *w, const void *x, const void *dy, void *dx, float *dw,
                 char *bwd_scratch);
/* dx_fresh / dw_fresh: write the gradient, else add to it */
void cpu_dcb_run(const cpu_dcb *m, int dx_fresh, int dw_fresh);
#include "backends/cpu/wino.h" /* conv_wino.c, conv_wino16.c, conv_wino_s2.c */

/* conv_s2_dw.c: the weight gradient of f32 3x3 convolutions with stride 2,
 * padding 1, an even input size and up to cpu_s2dw_max_c_in input
 * channels, on 8-channel blocks (below AVX-512). cpu_s2dw_own = 0: never
 * taken (tests compare with oneDNN). */
extern int cpu_s2dw_own;
extern long cpu_s2dw_calls;             /* runs (tests check the path ran) */
extern int64_t cpu_s2dw_max_c_in;       /* taken up to this many input channels */
extern int64_t cpu_s2dw_band_positions; /* output positions a band (tests lower it) */
typedef struct {
  int64_t n, ih, iw, oh, ow, c_in, c_out;
  int64_t band; /* output rows a pass */
  int threads;  /* the team the work memory was sized for */
} cpu_s2dw;
/* 0: applies (input channels in 8s, output channels in 16s), with its work
 * memory's bytes; 1: does not. */
int cpu_s2dw_prepare(cpu_s2dw *m, int64_t n, int64_t ih, int64_t iw, int64_t c_in, int64_t c_out, size_t *work_bytes);
/* dw [OC][IC][3][3] = (fresh) or += the weight gradient from x and dy (nChw8c). */
void cpu_s2dw_run(const cpu_s2dw *m, const float *x, const float *dy, float *dw, int fresh, char *work);
/* conv_desc.c: a (transposed) convolution node's oneDNN descriptors. */
typedef struct {
  int deconv, groups;
  dnnl_dims_t strides, dil, pad_l, pad_r;
  dnnl_alg_kind_t alg[3]; /* forward, backward data, backward weights: direct or Winograd */
} cpu_conv_geom;
void cpu_conv_geom_of_conv(const sp_op_prep *p, cpu_conv_geom *g); /* with the Winograd choice */
void cpu_conv_geom_of_deconv(const sp_op_prep *p, cpu_conv_geom *g);
int cpu_conv_init_fwd(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, dnnl_prop_kind_t prop,
                      const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                      const dnnl_memory_desc_t *dst);
int cpu_conv_init_bwd_data(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, const dnnl_memory_desc_t *dsrc,
                           const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *ddst);
int cpu_conv_init_bwd_wei(const cpu_conv_geom *g, dnnl_convolution_desc_t *d, const dnnl_memory_desc_t *src,
                          const dnnl_memory_desc_t *dwei, const dnnl_memory_desc_t *dbias,
                          const dnnl_memory_desc_t *ddst);
/* The plain f32 weights as the graph stores them and an "any" of dtype dt. */
int cpu_conv_weight_mds(const sp_op_prep *p, const cpu_conv_geom *g, dnnl_memory_desc_t *plain, dnnl_memory_desc_t *any,
                        dnnl_data_type_t dt);
/* conv_bww_mm.c: 0 builds col plain and lets the matmul pack it (tests
 * compare the two). */
extern int cpu_bww_use_packed;
/* conv_bww_mm.c: 0 keeps layers with few input channels (a stem on the
 * image) off the tiles (tests compare); runs of that path so far. */
extern int cpu_bww_use_small;
extern long cpu_bww_small_calls;
int cpu_bww_small_applies(int64_t ic, int64_t oc, int64_t kh, int64_t kw);
/* conv.c: 0 keeps oneDNN's convolution backward for 1x1 convolutions
 * (tests compare the two paths; benchmarks measure them). */
extern int cpu_conv_use_matmul;
/* 0: a frozen conv's residual add stays a binary post-op into a buffer of
 * its own (conv_fwd_choice.c; tests compare the two). */
extern int cpu_conv_use_post_sum;
/* conv_winograd.c: 0 keeps f32 3x3 convolutions on oneDNN's direct kernels
 * instead of its Winograd ones (tests compare the two); which passes of a
 * convolution take them (bit 0 forward, 1 backward data, 2 weights). */
extern int cpu_conv_winograd;
int cpu_conv_winograd_choice(const sp_op_prep *p, int groups, const int64_t *strides, const int64_t *dil,
                             const int64_t *pad_l, const int64_t *pad_r);
/* conv.c: input channels from which the weight gradient of a non-1x1 bf16
 * convolution runs as im2col + matmul (64; tests lower it). */
extern int64_t cpu_conv_bww_min_channels;
/* conv.c: 0 keeps strided 1x1 layers' backward off the products (oneDNN's
 * convolution backward; tests compare). */
extern int cpu_conv_mm_strided;
extern int64_t
    cpu_bww_whole_min_t; /* conv_bww_mm.c: T's bytes from which a layer of few rows takes the whole-layer form */
/* A conv node's state (sp_op_prep.state) runs its backward as products. */
int cpu_conv_uses_matmul(const void *state);
int cpu_conv_uses_col_mm(const void *state);     /* forward and input gradient as im2col + matmul (conv_col_mm.c) */
int cpu_conv_uses_thin_dw(const void *state);    /* its weight gradient by conv_thin_dw.c */
int cpu_conv_bww_packed(const void *state);      /* ... by conv_bww_mm.c with col packed */
int cpu_conv_bww_amx(const void *state);         /* ... and its products on AMX tiles */
int cpu_conv_bww_whole(const void *state);       /* ... all rows at once (the whole-layer form) */
int cpu_conv_bww_small(const void *state);       /* ... few input channels, our own packed im2col */
int cpu_conv_uses_dw_blocked(const void *state); /* ... by conv_dw_blocked.c */
int cpu_conv_winograd_passes(const void *state); /* bit 0 forward, 1 backward data, 2 weights: on Winograd */
int cpu_conv_uses_s2_dx(const void *state);      /* its input gradient by conv_s2_dx.c */
int cpu_conv_dx_fwd_ready(const void *state);    /* ... when added onto another's, by conv_dx_fwd.c */
int cpu_conv_deconv_1x1(const void *state);      /* a transposed one's forward by deconv_1x1.c */
int cpu_conv_deconv_1x1_bwd(const void *state);  /* ... and its backward by deconv_1x1_bwd.c */
int cpu_conv_s2dw_own(const void *state);        /* the weight gradient by conv_s2_dw.c */
int cpu_conv_wino_own(const void *state);        /* passes by conv_wino.c: bit 0 forward, 1 backward data */
int cpu_conv_src_lanes(const void *state);       /* cpu_md_lanes of the layout its forward reads */
int cpu_conv_reorders_src(const void *state);    /* 1: its input is copied into that layout each forward */
int cpu_conv_dst_lanes(const void *state);       /* ... and writes */
/* deconv_mm.c: a bf16 channels-last transposed convolution with kernel =
 * stride as matrix products; 1 when the case does not apply (then oneDNN's
 * deconvolution). Input channels from which it is taken (128; tests lower
 * it), and whether a node's state is one. */
int cpu_deconv_mm_prepare(sp_op_prep *p);
/* conv_stem.c: a bf16 training plan's first convolution on the plain f32
 * image with few channels and a small window, as loops of our own; 1 when
 * the case does not apply. Whether a node's state is one. */
int cpu_conv_stem_prepare(sp_op_prep *p);
/* conv_stem_bn.c: an f32 training plan's stem (8 output channels) with the
 * batch norm and ReLU after it; 1 when it does not apply. */
int cpu_conv_stem_bn_prepare(sp_op_prep *p);
int cpu_conv_is_stem_bn(const void *state);
extern int cpu_stem_bn_on;     /* 0 never; 1 where it applies (conv_stem_bn.c) */
extern long cpu_stem_bn_calls; /* its forward calls (tests: the path ran) */
int cpu_conv_is_stem(const void *state);
extern int cpu_conv_use_stem;              /* 0: oneDNN's convolution there (tests compare the two) */
extern int cpu_conv_stem_train_amx;        /* 1: bf16 training takes the stem where the AMX weight gradient would too */
extern int64_t cpu_conv_stem_infer_max_oc; /* inference: the stem up to this many output channels */
extern int cpu_conv_stem_f32_infer;        /* f32 inference takes the stem alone (default: AVX-512 builds only) */
extern int cpu_conv_stem_fuse_next;        /* 0: the 3x3 conv after an inference stem runs on its own */
extern long cpu_stem_fused_calls;          /* forward calls of a stem computing that conv (tests: the path ran) */
/* conv_narrow.c: a bf16 inference plan's 3x3 convolution from a
 * channels-last input of 8 channels into groups of 16, as a loop of our
 * own; 1 when the case does not apply. Whether a node's state is one. */
int cpu_conv_narrow_prepare(sp_op_prep *p);
int cpu_conv_is_narrow(const void *state);
extern int cpu_conv_use_narrow;               /* 0: oneDNN's convolution there (tests compare the two) */
extern int64_t cpu_conv_narrow_min_positions; /* output positions from which it is taken (tests lower it) */
extern long cpu_narrow_calls;                 /* forward calls so far (tests: the path ran) */
extern int64_t cpu_deconv_mm_min_channels;
int cpu_deconv_uses_matmul(const void *state);
/* conv_softargmax.c: a bf16 plan's 1x1 convolution on channels-last input
 * whose only consumer is soft-argmax (a heatmap head), fused with it so the
 * heatmaps are never stored; 1 when the case does not apply. Whether a
 * node's state is one, and the switch tests use to compare the two paths. */
int cpu_conv_softargmax_prepare(sp_op_prep *p);
int cpu_conv_is_softargmax(const void *state);
extern int cpu_conv_use_softargmax;
/* conv_tail.c: a frozen f32 plan's bottleneck block (1x1 to 8 channels,
 * 3x3, 1x1 back, identity residual, ReLUs, batch norms folded) computed band
 * by band inside the heatmap head after it (AVX-512 builds). cpu_tail_match:
 * 1 when conv1's prep p (its chain of cpu_tail_links() consumers) is one,
 * with head filled as the head's own prep; then the node's state (band: image
 * rows a tile), its per-thread scratch, the folded weights (from conv1's
 * args), the head's args among them, one band's block output as planes [C]
 * [band * W] and the head's logits from them (k heatmaps, computed in
 * groups of 8 or a last 4: W's rows past k zero to the next 8).
 * cpu_conv_is_tail: the node runs one; the switch lets tests compare the
 * paths; cpu_tail_calls counts forwards. */
typedef struct cpu_tail cpu_tail;
int cpu_tail_match(const sp_op_prep *p, const dnnl_memory_desc_t *x, sp_op_prep *head);
int cpu_tail_links(void);
cpu_tail *cpu_tail_new(const sp_op_prep *p, int64_t band);
size_t cpu_tail_thread_bytes(const cpu_tail *t);
void cpu_tail_fold(cpu_tail *t, const sp_op_args *a);
const sp_op_args *cpu_tail_head_args(const sp_op_args *a);
const float *cpu_tail_band(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                           char *buf);
/* The next band's input (its 16-channel blocks' lines), prefetched while
 * the logits of this one run. */
typedef struct {
  const char *at[4];
  int64_t lines;
  int blocks;
} cpu_tail_next;
void cpu_tail_next_of(const cpu_tail *t, const float *x, const cpu_bn_geom *g, int64_t img, int64_t y0, int64_t nr,
                      cpu_tail_next *next);
void cpu_tail_logits(const cpu_tail *t, const float *y, const float *w, float *l, int64_t ldl, int64_t k, int64_t np,
                     const cpu_tail_next *next);
extern int64_t cpu_tail_band_positions;
int cpu_conv_is_tail(const void *state);
extern int cpu_conv_use_tail;
extern long cpu_tail_calls;
/* softargmax_amx.c: its per-tile products on AMX tiles (bf16, channels-last,
 * C % 32 == 0; the shapes and zero rows the file's top describes).
 * cpu_amx_usable: AMX-BF16 here, allowed by ONEDNN_MAX_CPU_ISA and by the
 * kernel. cpu_conv_uses_softargmax_amx: the node runs them; the switch (1)
 * lets tests compare them with oneDNN's matmuls. */
int cpu_amx_usable(void);
void cpu_amx_head_logits(const uint16_t *w, const uint16_t *x, float *l, int64_t ldl, int64_t c, int64_t kp,
                         int64_t rows, uint16_t *bt);
void cpu_amx_head_dw(const uint16_t *dl, int64_t ldd, const uint16_t *x, float *dw, int64_t c, int64_t kp, int64_t rows,
                     uint16_t *xp);
void cpu_amx_head_w_pairs(const uint16_t *w, int64_t k, int64_t c, int64_t kp32, uint16_t *wv);
void cpu_amx_head_dx(const uint16_t *dl, int64_t ldd, const uint16_t *wv, uint16_t *dx, int64_t c, int64_t kp32,
                     int64_t rows, int accumulate, int stream, uint16_t *at, float *ct);
int cpu_conv_uses_softargmax_amx(const void *state);
extern int cpu_conv_use_softargmax_amx;
extern long cpu_softargmax_streamed; /* backward passes whose input gradient went past the caches (tests) */
/* softargmax_planes.c: the head's per-tile products on planes (f32,
 * 16-channel blocks, AVX-512 builds: cpu_planes_built). gather: np positions
 * of a tile's blocks (x at its first position, blocks blk_stride apart) into
 * planes [blocks * 16][ldx], zero from np to np32 (np rounded up to 32);
 * scatter: planes back into the blocks' np positions, written or added.
 * logits: l[k][p] from W [k rounded up to 8][c] (zero rows past k), the
 * tail's next band prefetched meanwhile (next; NULL: nothing); dx:
 * planes dX[c][p] from dL [k][ldd] and W^T [c][kp]; dw: dwv[k][c][16 lanes]
 * += per-lane sums of dL[k][p] X[c][p] for k4 (k rounded up to 4, dL's
 * rows zero past k) heatmaps. np32 positions each. The switch (1) lets
 * tests compare them with oneDNN's matmuls; cpu_conv_uses_softargmax_planes:
 * the node runs them; cpu_planes_calls counts the passes (forward or
 * backward) run on them. */
int cpu_planes_built(void);
int cpu_conv_uses_softargmax_planes(const void *state);
void cpu_planes_gather(const float *x, int64_t blocks, int64_t blk_stride, int64_t np, int64_t np32, float *xp,
                       int64_t ldx);
void cpu_planes_scatter(const float *xp, int64_t ldx, int64_t blocks, int64_t blk_stride, int64_t np, float *x,
                        int accumulate);
void cpu_planes_logits(const float *xp, int64_t ldx, const float *w, int64_t c, float *l, int64_t ldl, int64_t k,
                       int64_t np32, const cpu_tail_next *next);
void cpu_planes_dx(const float *dl, int64_t ldd, const float *wt, int64_t kp, int64_t k, int64_t c, float *dxp,
                   int64_t ldx, int64_t np32);
void cpu_planes_dw(const float *dl, int64_t ldd, const float *xp, int64_t ldx, int64_t k4, int64_t c, int64_t np32,
                   float *dwv);
extern int cpu_conv_use_softargmax_planes;
extern long cpu_planes_calls;

/* ---- ops (one file each) -------------------------------------------------------- */
int cpu_adapter_prepare(sp_op_prep *p); /* adapter.c: the reference kernel on plain f32 */
int cpu_conv_prepare(sp_op_prep *p);    /* conv.c: conv2d */
int cpu_deconv_prepare(sp_op_prep *p);  /* conv.c: conv_transpose2d */
int cpu_linear_prepare(sp_op_prep *p);
/* linear_gemm.c: f32 on a plain input as sgemm calls on the plain weights;
 * 1 when the case does not apply (bf16, frozen plans, a blocked input). */
int cpu_linear_gemm_prepare(sp_op_prep *p);
/* linear_dw.c: the f32 weight gradient dW[n][k] (+)= sum_m dy[m][n] x[m][k]
 * for few rows m (AVX-512 or AVX2 builds, m <= cpu_linear_dw_max_rows; tests
 * move the bound to take either path). `pack` is scratch of
 * cpu_linear_dw_pack_bytes(m, n) (0 where the build reads dy in place). */
extern int cpu_linear_dw_max_rows;
int cpu_linear_dw_applies(int64_t rows);
size_t cpu_linear_dw_pack_bytes(int64_t m, int64_t n);
void cpu_linear_dw_f32(const float *dy, const float *x, float *dw, int64_t m, int64_t n, int64_t k, int accumulate,
                       int threads, float *pack);
/* linear_fwd.c: the f32 forward product y = x W^T + b on plain x and the
 * plain weights, below AVX-512 (cpu_linear_fwd_on: 0 never, 2 on AVX-512
 * too for tests), for cpu_linear_fwd_min_rows to _max_rows rows and from
 * cpu_linear_fwd_min_weights weights; `scratch` holds
 * cpu_linear_fwd_scratch_bytes (64-byte aligned inside). */
extern int cpu_linear_fwd_on;
extern int64_t cpu_linear_fwd_min_rows, cpu_linear_fwd_max_rows, cpu_linear_fwd_min_weights;
extern long cpu_linear_fwd_calls; /* calls so far (tests) */
int cpu_linear_fwd_applies(int64_t m, int64_t k, int64_t n);
size_t cpu_linear_fwd_scratch_bytes(int64_t m, int64_t k, int64_t n);
void cpu_linear_fwd_f32(const float *x, const float *w, const float *bias, float *y, int64_t m, int64_t k, int64_t n,
                        int threads, void *scratch);
int cpu_bnorm_prepare(sp_op_prep *p);
int cpu_bnorm_streams(const void *state); /* 1: a batch-norm node of our kernels writing past the caches */
/* bnorm.c: 1 runs oneDNN's batch norm even where our kernels walk the layout
 * (tests compare the two; benchmarks measure them). */
extern int cpu_bnorm_use_onednn;
extern int cpu_bnorm_fuse_add; /* 0: a batch norm never absorbs a residual add (tests compare the two) */
/* conv_mid8.c: f32 3x3 (stride 1, padding 1, no bias) between 8-channel
 * maps in 16-channel blocks, not frozen; 1 when the case does not apply.
 * cpu_conv_use_mid8 = 0 leaves it to oneDNN (tests compare the two). */
int cpu_conv_mid8_prepare(sp_op_prep *p);
int cpu_conv_is_mid8(const void *state);
extern int cpu_conv_use_mid8;
extern long cpu_mid8_calls;
/* conv_in8_s2.c: f32 3x3 with stride 2 (padding 1, no bias) from 8
 * channels-last input channels into 16 to 64, training and evaluation
 * plans (not frozen): forward, input and weight gradient as loops of our
 * own. cpu_conv_use_in8s2 = 0 leaves it to oneDNN (tests compare the two). */
int cpu_conv_in8s2_prepare(sp_op_prep *p);
int cpu_conv_is_in8s2(const void *state);
extern int cpu_conv_use_in8s2;
extern long cpu_in8s2_calls;
/* 0: an absorbed add never adopts the batch norm computing its other input */
extern int cpu_bnorm_fuse_pair;
/* 0: a batch norm + ReLU never absorbs the concat after it */
extern int cpu_bnorm_fuse_concat;
int cpu_relu_prepare(sp_op_prep *p);
int cpu_maxpool_prepare(sp_op_prep *p);
int cpu_avgpool_prepare(sp_op_prep *p);
int cpu_global_avgpool_prepare(sp_op_prep *p);
int cpu_upsample_prepare(sp_op_prep *p);
int cpu_add_prepare(sp_op_prep *p);
int cpu_concat_prepare(sp_op_prep *p);
/* concat_rows.c: concat as copies where every input and the output share a
 * layout with whole runs per row (channels-last, or unpadded blocks); 1 when
 * that does not apply. The switch (1) lets tests compare it with oneDNN's. */
int cpu_concat_rows_prepare(sp_op_prep *p);
int cpu_concat_is_rows(const void *state);
extern int cpu_concat_use_rows;
extern int cpu_concat_stream;          /* 0: channels-last rows never past the caches (cpu_stream_threshold_plan) */
extern long cpu_concat_streamed;       /* forward passes that streamed (tests) */
int cpu_tshift_prepare(sp_op_prep *p); /* tshift.c: in the blocked layout */
/* tshift.c: fresh outputs of at least this many bytes bypass the cache
 * (non-temporal stores); tests lower it to cover that path. */
extern size_t cpu_tshift_stream_min_bytes;
int cpu_softargmax_prepare(sp_op_prep *p); /* softargmax.c: in the blocked layout */
int cpu_blurpool_prepare(sp_op_prep *p);   /* blurpool.c: in the blocked layout */
/* add_relu.c: add absorbing the relu after it; 1 when the case does not apply. */
int cpu_add_relu_prepare(sp_op_prep *p);

#endif
