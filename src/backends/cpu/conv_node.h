/* The state of a (transposed) convolution node on the cpu backend, shared
 * by conv.c (prepare, bind, run) and conv_fwd_choice.c (the forward
 * primitive's choice). Nothing else includes it. */
#ifndef SPRY_BACKENDS_CPU_CONV_NODE_H
#define SPRY_BACKENDS_CPU_CONV_NODE_H
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

enum { R_SRC, R_WEI, R_WEI_BD, R_SRC_BW, R_DDST_BW, R_DX_SET, R_DX_ACC, R_DW, R_DW_SET, N_REORDERS };

typedef struct {
  cpu_node base;
  int has_bias, need_dx, need_dw, run_backward, reorder_src, reorder_wei_bd, reorder_src_bw, reorder_ddst_bw;
  dnnl_memory_desc_t x_md, src_md, wplain_md, wei_md, bias_md, dst_md, dwei_md;
  dnnl_memory_desc_t dsrc_md, wei_bd_md, src_bw_md,
      ddst_bw_md; /* backward data's diff_src, weights; backward weights' src, diff_dst */
  dnnl_primitive_desc_t fwd_pd, bwd_data_pd, bwd_wei_pd, re_pd[N_REORDERS];
  dnnl_primitive_t fwd, bwd_data, bwd_wei, re[N_REORDERS];
  size_t src_off, wei_off;   /* in saved (training) or forward scratch */
  void *wei_kept;            /* frozen plans: the prepared weights */
  int fold_bn;               /* frozen: the absorbed batch norm is folded in */
  int post_relu;             /* frozen: and the ReLU after it is a post-op */
  int post_add;              /* frozen: then a residual add (binary post-op) and maybe the ReLU after it */
  int post_sum;              /* ... as a sum post-op, the output written over the add's other input */
  int add_other;             /* the add's other input: its index there */
  dnnl_memory_desc_t add_md; /* ... and its layout */
  float *wfold, *bfold;      /* its plain folded weights and bias (kept) */
  size_t dsrc_off, dwei_off, dbias_off, wbd_off, sbw_off, dbw_off;          /* in backward scratch */
  cpu_exec x_src, w_wei, conv, w_bd, s_bw, d_bw, dx, dx_out, dw, dw_out[2]; /* dw_out: [0] adds, [1] writes */
  float *dbias;
  int64_t n_bias;
  int mm; /* backward runs as matrix products (conv_mm.c) */
  cpu_mm1x1 mm1x1;
  int mm_fwd;     /* forward by mm_amx.c too (mm1x1.amx_fwd, no post-ops) */
  int mm_stream;  /* ... its output written past the caches (cpu_stream_threshold_plan) */
  uint16_t *mm_w; /* bound: W^T packed for it, in the weights' buffer */
  /* base.stats in saved, the products' sums for them in forward scratch */
  size_t stats_off, stats_work_off;
  double *stats_work;
  int bww;        /* the weight gradient runs as im2col + matmul (conv_bww_mm.c) */
  int dw_blocked; /* ... or on the blocked layout in registers (conv_dw_blocked.c) */
  cpu_dwb_shape dwb;
  int dwb_x_rows;    /* X is dwb's row side (a transposed convolution, or the roles swapped) */
  int dwb_threads;   /* the team its scratch was sized for */
  char *dwb_scratch; /* from the start of backward scratch */
  cpu_bww_mm bwwmm;
  int colmm; /* forward and the input gradient as im2col + matmul (conv_col_mm.c) */
  cpu_colmm cm;
  size_t cm_fwd, cm_bwd; /* its scratch bytes, from 0 of each region */
  int s2dx;              /* the input gradient runs as a 2x2 forward convolution + shuffle (conv_s2_dx.c) */
  cpu_s2dx s2;
  int dxfwd,
      dxfwd_on; /* an input gradient added onto another's: ready / bound as a forward convolution (conv_dx_fwd.c) */
  cpu_dxfwd dxf;
  int dc1; /* a transposed convolution's forward as 1x1 + shuffle (deconv_1x1.c) */
  cpu_dc1 d1;
  int cat; /* ... in its direct form, with the concat after its batch norm and ReLU absorbed */
  size_t dc1_off, dc1_fwd, dc1_kept; /* its scratch in forward scratch; its W' bytes (frozen) */
  int dcb;                           /* ... and its backward as 1x1 products on a copy of dY (deconv_1x1_bwd.c) */
  cpu_dcb db;
  int wino, wino_dx, wino_dw; /* forward / backward data / weight gradient by our Winograd F(4x4, 3x3) (conv_wino.c) */
  cpu_wino wf, wb, wd;
  size_t wd_work_bytes; /* the weight gradient's: from the start of backward scratch */
  const void *wd_src;
  int s2dw; /* the weight gradient of a stride-2 layer by our loops (conv_s2_dw.c) */
  cpu_s2dw sd;
  size_t wf_u_bytes, wf_work_bytes, wf_u_off, wf_work_off; /* forward: U kept (frozen) or in forward scratch */
  size_t wb_u_bytes, wb_work_bytes, wb_work_off;           /* backward data: from the start of backward scratch */
  float *wf_u, *wb_u, *wf_bias;
  const float *wf_src;
  char *wf_work, *wb_work, *wb_work_base;
} conv_node;

/* conv_fwd_choice.c: the forward primitive in s->fwd_pd / s->fwd, with the
 * frozen plan's ReLU or residual add as post-ops (0, or -1 with the error set). */
int cpu_conv_choose_fwd(sp_op_prep *p, conv_node *s, const cpu_conv_geom *g, const dnnl_memory_desc_t *src_any,
                        const dnnl_memory_desc_t *wei_any, const dnnl_memory_desc_t *dst_any);
/* Frozen: the residual add after the folded batch norm can be a post-op
 * (fills s->add_md, s->add_other; s->post_sum where the plan lets the
 * output overwrite the add's other input and cpu_conv_use_post_sum). */
int cpu_conv_post_add_fits(const sp_op_prep *p, conv_node *s, dnnl_data_type_t dt);
/* ... and oneDNN keeps the kernel it has without the add. */
int cpu_conv_same_kernel_without_add(sp_op_prep *p, const conv_node *s, const cpu_conv_geom *g,
                                     const dnnl_memory_desc_t *wei_any);
#endif
#endif
