/* What the heatmap head fused with soft-argmax (conv_softargmax.c) shares
 * with its per-tile exponential kernels (softargmax_tile.c): the node, the
 * statistics forward saves for backward, and the kernels. Included by those
 * two files only. */
#ifndef SPRY_BACKENDS_CPU_CONV_SOFTARGMAX_H
#define SPRY_BACKENDS_CPU_CONV_SOFTARGMAX_H
#ifdef SPRY_HAVE_DNNL

#include "backends/cpu/cpu.h"

/* What one thread executes with: its stream, and memory objects whose data
 * handles are set per tile. */
enum { M_X, M_XT, M_L, M_DL, M_W, M_DX, M_DLT, M_DW, M_PAD, N_MEMS };
typedef struct {
  dnnl_stream_t stream;
  dnnl_memory_t m[N_MEMS];
} tile_exec;

typedef struct {
  cpu_node base;
  int64_t n, c, k, kp, h, w, hw; /* kp: k rounded up to 16 (the per-heatmap arrays' stride) */
  int64_t rows, tiles;           /* positions per tile; tiles per image (the last may be shorter) */
  int64_t rt;                    /* the column and row tables' length: rows + 16 */
  int64_t ldl, ldd;              /* row strides of the logits and of dL (elements) */
  float scale;
  int has_bias, need_dx, need_dw, threads;
  int f32;       /* the plan computes in f32 (else bf16) */
  size_t es;     /* bytes per activation element: 4 or 2 */
  cpu_bn_geom g; /* the input's layout (lanes, blocks, strides) */
  int in_place;  /* channels-last: a full tile's rows are a matrix in x and dx */
  int amx;       /* the products on AMX tiles (softargmax_amx.c), not oneDNN matmuls */
  int stream_dx; /* amx: a whole tile's fresh dX rows past the caches (cpu_stream_threshold_plan) */
  int64_t kp32;  /* amx: k rounded up to 32 (dL's rows, W's heatmap pairs) */
  int planes;    /* f32 16-channel blocks: the products on planes (softargmax_planes.c) */
  int64_t ldx;   /* planes: row stride of X's and dX's planes */
  int64_t k4;    /* planes: k rounded up to 4 (dL's rows the weight gradient reads) */
  /* Frozen inference plans: W and the bias prepared once, again only when
   * the parameters change (sp_plan_params_changed). */
  void *w_kept;
  float *b_kept;
  dnnl_memory_desc_t x_md, xt_md, l_md, dl_md, w_md, dlt_md, dw_md, pad_md;
  dnnl_primitive_desc_t fwd_pd, dx_pd[2], dw_pd; /* dx: [0] writes, [1] adds */
  dnnl_primitive_t fwd, dx_prim[2], dw_prim;
  tile_exec *te; /* one per thread */
  /* Scratch (forward and backward alike): shared parts, then one region per
   * thread. */
  size_t o_w, o_part, o_coef, o_stats, o_threads, thread_bytes;
  size_t t_l, t_x, t_dl, t_dx, t_dw, t_db, t_ij, t_pad; /* inside a thread's region */
  size_t t_amx, t_xp; /* amx: operand buffers (B, A and C of a step), dW's position pairs */
  /* A bottleneck block computed in front of the head (conv_tail.c), or NULL:
   * then a tile is a band of `band` image rows, and t_tail its scratch. */
  cpu_tail *tail;
  int64_t band;
  size_t t_tail;
} csam_node;

/* Per heatmap, saved for backward: the max and 1/sum of exp(L - max), and the
 * unscaled expected column and row. */
typedef struct {
  float max, inv_sum, ex, ey;
} csam_stat;

/* softargmax_tile.c, a tile of np positions from p0 at a time (rows of the
 * logits lt ldl apart, a heatmap's positions side by side; b the bias per
 * heatmap):
 *   tile_coords   the positions' columns jc and rows ic as floats, rt each;
 *   tile_sums     part = [max | sum | column sum | row sum] per heatmap, kp
 *                 floats each, the exponentials against the tile's own max;
 *   merge_tiles   per image and heatmap, the tiles' sums at their common max:
 *                 the expected column and row into y (scaled), st for backward;
 *   backward_coefs  coef = [a | b | c | max | inv_sum] per image and heatmap
 *                 for dL = p (a j + b i + c), p = exp(L - max) inv_sum;
 *   tile_grad     dL in the plan's precision ([k][ldd], zero past np to rows)
 *                 and its row sums added into db. */
void csam_tile_coords(const csam_node *s, int64_t p0, float *jc, float *ic);
void csam_tile_sums(const csam_node *s, const float *lt, const float *b, const float *jc, const float *ic, int64_t np,
                    float *part);
void csam_merge_tiles(const csam_node *s, const float *part, float *y, csam_stat *st);
void csam_backward_coefs(const csam_node *s, const csam_stat *st, const float *dy, float *coef);
void csam_tile_grad(const csam_node *s, const float *lt, const float *b, const float *cf, const float *jc,
                    const float *ic, int64_t np, void *dl, double *db);

#endif
#endif
