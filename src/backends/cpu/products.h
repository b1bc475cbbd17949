/* The matrix-product kernels' interfaces (convolutions' backward and
 * forward as products, AMX tiles of our own), included by cpu.h after the
 * node, execution and batch-norm declarations they use: conv_mm.c,
 * conv_thin_dw.c, mm_amx.c, dw_amx.c, conv_dw_blocked.c, conv_bww_mm.c,
 * conv_col_mm.c (and the statistics helper conv_in8_s2.c shares). Nothing
 * else includes it. */
#ifndef SPRY_BACKENDS_CPU_PRODUCTS_H
#define SPRY_BACKENDS_CPU_PRODUCTS_H
#ifdef SPRY_HAVE_DNNL

/* A strided 1x1 convolution's input grid (cpu_mm1x1_prepare): output
 * position (n, i, j) reads input (n, sh i, sw j). */
typedef struct {
  int64_t n, ih, iw, oh, ow, sh, sw;
} cpu_mm1x1_grid;
typedef struct {
  int64_t rows, ic, oc; /* rows = N OH OW, the output positions */
  int need_dx, need_dw, has_bias, threads;
  /* Stride above 1: dW reads X's grid positions gathered into xs, and the
   * input gradient is computed into dxs (f32, compact) and then spread over
   * dX (the other positions zero, or left as they are where it adds). */
  int strided;
  cpu_mm1x1_grid grid;
  dnnl_memory_desc_t dxs_md;
  size_t xs_off, dxs_off;
  uint16_t *xs;
  float *dxs;
  int thin_dw; /* the weight gradient by conv_thin_dw.c, not a matmul */
  int amx_dw;  /* ... or by dw_amx.c */
  int amx_dx;  /* the input gradient by mm_amx.c, not oneDNN's matmul (wh: W packed for it) */
  int amx_fwd; /* and forward (conv.c; W^T packed into the node's weight buffer) */
  dnnl_memory_desc_t dy_md, x_md, wh_md, dw_md, dyt_md;
  dnnl_primitive_desc_t dx_pd[2], dw_pd[2]; /* [0] writes, [1] adds */
  dnnl_primitive_t dx_prim[2], dw_prim[2];
  size_t wh_off, bias_off, thin_off, amx_off; /* in backward scratch, after the largest matmul scratchpad */
  uint16_t *wh;                               /* bound: the bf16 weights backward data reads */
  double *bias_acc, *thin_acc;
  char *amx_scratch;
  cpu_exec dx, dw[2];
} cpu_mm1x1;
/* Creates the products (owned by n) and sizes their backward scratch; -1
 * (error set) when oneDNN has no fast matmul for them. grid: NULL for
 * stride 1, else the strided layer's (rows = its N OH OW). */
int cpu_mm1x1_prepare(cpu_mm1x1 *m, cpu_node *n, int64_t rows, int64_t ic, int64_t oc, int need_dx, int need_dw,
                      int has_bias, const cpu_mm1x1_grid *grid, size_t *bwd_scratch);
int cpu_mm1x1_bind(cpu_mm1x1 *m, cpu_node *n, const sp_op_args *a, char *bwd_scratch);
void cpu_mm1x1_backward(const cpu_mm1x1 *m, const sp_op_args *a);
/* conv_thin_dw.c: dW[o][i] += sum_r dY[r][o] X[r][i] for a 1x1 convolution
 * with 16 or 32 channels on one side and 8 or 16 on the other (bf16 rows,
 * plain f32 dW), in registers; fits: 0 for other shapes, builds without
 * 16-lane vectors, and with the switch off (tests compare both paths). */
extern int cpu_conv_use_thin_dw;
int cpu_thin_dw_fits(int64_t oc, int64_t ic);
size_t cpu_thin_dw_scratch_bytes(int64_t oc, int64_t ic, int threads);
void cpu_thin_dw(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw,
                 double *scratch, int threads, int fresh); /* fresh: write dw instead of adding */
/* cpu_node.stats: 1 when the node producing a batch norm's input offers
 * its statistics (now taken), 0 otherwise; cpu_bn_stats_offer = 0: never
 * offered (tests). */
extern int cpu_bn_stats_offer;
int cpu_node_take_stats(void *producer_state);
/* The producers' statistics (mm_amx.c, conv_in8_s2.c): a part of nb values
 * with mean mb and sum of squared deviations m2b merged into the running
 * count, mean and m2, in double (Chan et al.'s pairwise update). */
static inline void cpu_moments_merge(double *count, double *mean, double *m2, double nb, double mb, double m2b) {
  const double total = *count + nb, delta = mb - *mean;
  *mean += delta * nb / total;
  *m2 += m2b + delta * delta * *count * nb / total;
  *count = total;
}
/* mm_amx.c: C[m][n] (=|+=) A[m][k] B[k][n] (+ bias[n]) in bf16 on AMX tiles,
 * A and C row-major bf16, B packed from f32 weights by cpu_mm_amx_pack (w
 * is [k][n], or [n][k] with transposed); fits: 0 without usable AMX, with
 * the switch off, or unless m is a multiple of 16, n of 32 and k of 32
 * (or 8 or 16). */
extern int cpu_use_mm_amx;
/* Input gradients (1x1 convolutions, up-layers) on the tiles too: off, as
 * alone they ran no faster than oneDNN's matmul on a loaded host. */
extern int cpu_mm_amx_dx;
/* 0: its callers never stream C (cpu_mm_epilogue.stream; benchmarks compare). */
extern int cpu_mm_amx_stream;
extern long cpu_mm_amx_streamed;                      /* products that streamed C (tests) */
extern long cpu_mm_amx_calls, cpu_mm_amx_stats_calls; /* products run; those with statistics (tests) */
extern int64_t cpu_mm_amx_panel_bytes;                /* B bytes a panel of columns may hold (tests make it small) */
int cpu_mm_amx_fits(int64_t m, int64_t k, int64_t n);
size_t cpu_mm_amx_packed_bytes(int64_t k, int64_t n);
void cpu_mm_amx_pack(const float *w, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads);
void cpu_mm_amx_pack_bf16(const uint16_t *w, int64_t k, int64_t n, int transposed, uint16_t *bp, int threads);
/* What happens to C's f32 sums on their way to bf16 (NULL: nothing). */
typedef struct {
  const float *bias; /* [n] added, or NULL */
  int accumulate;    /* C's old values added (one rounding, as oneDNN's sum post-op) */
  /* Non-NULL: the mean and biased variance of each of C's columns as stored
   * (a batch norm's statistics), summed in stats (cpu_mm_amx_stats_bytes). */
  float *mean, *var;
  double *stats;
  int64_t channels; /* the statistics' channel of column j: j % channels (0: n channels) */
  /* up_k > 0: C's rows are the pixels (image, i, j) of up_h x up_w images
   * and its columns (a, b, o) the taps and channels of a transposed
   * convolution with kernel = stride = up_k: C[r][(a up_k + b) up_oc + o]
   * goes to output pixel (up_k i + a, up_k j + b), channel o, of the
   * channels-last output (up_k up_oc a multiple of 32). */
  int64_t up_k, up_h, up_w, up_oc;
  /* Non-NULL: C is f32, written here ([m][n]; c unused) or added onto
   * (accumulate); no bias, statistics or up-layer scatter with it. */
  float *c32;
  /* 1: C's bf16 rows written past the caches where a row's 64-byte run is
   * a whole line (not when adding onto C): outputs from
   * cpu_stream_threshold_plan's bytes. */
  int stream;
} cpu_mm_epilogue;
size_t cpu_mm_amx_stats_bytes(int64_t n, int threads);
void cpu_mm_amx(const uint16_t *a, int64_t m, int64_t k, const uint16_t *bp, int64_t n, uint16_t *c,
                const cpu_mm_epilogue *e, int threads);
/* dw_amx.c: the same weight gradient on AMX tiles for long thin products
 * (many rows, at most 256 K gradient values, channels in 16s); fits: 0
 * without usable AMX, for other shapes and with the switch off. */
extern int cpu_conv_use_dw_amx, cpu_dw_amx_min_rows;
int cpu_dw_amx_fits(int64_t rows, int64_t oc, int64_t ic);
size_t cpu_dw_amx_scratch_bytes(int64_t oc, int64_t ic, int threads);
void cpu_dw_amx(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw, int accumulate,
                char *scratch, int threads);
/* The wide form, for few rows (up to 256) and more gradient values than
 * cpu_dw_amx takes (a linear's weight gradient over a batch): the threads
 * share dW's columns and write (or add) them from the tiles. */
extern long cpu_dw_amx_wide_calls;
int cpu_dw_amx_wide_fits(int64_t rows, int64_t oc, int64_t ic);
size_t cpu_dw_amx_wide_scratch_bytes(int64_t rows, int64_t oc, int64_t ic, int threads);
void cpu_dw_amx_wide(const uint16_t *dy, const uint16_t *x, int64_t rows, int64_t oc, int64_t ic, float *dw,
                     int accumulate, char *scratch, int threads);
/* One chunk of conv_bww_mm.c's products on the tiles: t[OC][k] += dY^T col
 * for count rows of dY (channels-last, OC in 16s) and col in the packed
 * im2col layout (k in 16s); ap: OC x count rounded to 32 bf16 of scratch. */
void cpu_dw_amx_packed_chunk(const uint16_t *dy, int64_t oc, int64_t count, const uint16_t *col, int64_t kblk_stride,
                             int64_t nblk_stride, int64_t k, float *t, uint16_t *ap);
/* The whole-layer form (conv_bww_mm.c for few rows and a large T): dY^T of
 * all rows arranged once (steps s0 .. s1 - 1 of `steps` here, threads share
 * them), then t[OC][c0 .. c0 + ncols) = dY^T col for a panel of columns
 * (c0 a multiple of 64, ncols of 16), each 32 x 32 block of T in tiles over
 * every row. */
void cpu_dw_amx_arrange_dy(const uint16_t *dy, int64_t oc, int64_t rows, int64_t s0, int64_t s1, int64_t steps,
                           uint16_t *ap);
void cpu_dw_amx_col_panel(const uint16_t *ap, int64_t oc, int64_t steps, const uint16_t *col, int64_t kblk_stride,
                          int64_t nblk_stride, int64_t c0, int64_t ncols, float *t, int64_t ldt);
/* conv_dw_blocked.c: the weight gradient of a bf16 convolution (or kernel =
 * stride transposed convolution) on 16-channel blocked activations
 * (aBcd16b) into the plain f32 dW, with AVX512-BF16 dot products:
 *
 *   dW[r][c][t] (+)= sum over grid positions q of B[r](q, t) A[c](q, t)
 *
 * A side reads grid position (y, x) at tap (i, j) at (y sy + i dy + oy,
 * x sx + j dx + ox) of its tensor, zero outside. fits: 0 for channel counts
 * it does not take (rows % 16, cols % 32), builds without AVX512-BF16, and
 * with the switch off (tests compare both paths). */
typedef struct {
  const uint16_t *t;
  int64_t c, h, w;
  int64_t sy, sx, dy, dx, oy, ox;
} cpu_dwb_side;
typedef struct {
  int64_t n, gh, gw, kh, kw;                  /* the grid and the taps */
  cpu_dwb_side a, b;                          /* a: dW's columns (vectors), b: its rows */
  int64_t row_stride, col_stride, tap_stride; /* dW[r rs + c cs + (i kw + j) ts] */
} cpu_dwb_shape;
extern int cpu_conv_use_dw_blocked;
int cpu_dw_blocked_fits(int64_t rows, int64_t cols);
size_t cpu_dw_blocked_scratch_bytes(const cpu_dwb_shape *s, int threads);
void cpu_dw_blocked(const cpu_dwb_shape *s, float *dw, char *scratch, int threads,
                    int fresh); /* fresh: write dw instead of adding */
/* conv_bww_mm.c: a convolution's weight gradient as im2col + matmul over
 * chunks of output positions (bf16 channels-last, one group, no bias). */
typedef struct {
  int64_t n, ih, iw, ic, oh, ow, oc, kh, kw, sh, sw, pt, pl, dh, dw;
} cpu_conv_shape;
typedef struct {
  cpu_conv_shape c;
  int64_t rows, chunk, k; /* k = kh kw ic */
  int64_t kt;             /* T's columns: k, or (small) k rounded up to 16 for the tiles */
  int threads;
  /* col is written straight in the matmul's packed layout (BA16a64b2a:
   * 32-row blocks of 64 columns, row pairs interleaved), so the matmul does
   * not pack it again; else plain [rows, k]. Element strides of a 32-row
   * block and of a 64-column block, per primitive. */
  int packed;
  int amx;   /* the products on AMX tiles (dw_amx.c) reading the packed col */
  int whole; /* amx, few rows and a large T: col and dY^T of all rows at once, threads split T's columns */
  int small; /* amx, few input channels (a stem on the image): col packed by our own im2col, no oneDNN product */
  size_t rows_bytes; /* small: each thread's zero-padded input rows (kh of them) */
  int64_t row_len;   /* small: values in one of those rows */
  int64_t kblk_stride[2], nblk_stride[2];
  dnnl_memory_desc_t a_md[2], b_md[2], t_md; /* [0]: a full chunk, [1]: the tail */
  dnnl_primitive_desc_t pd[2];
  dnnl_primitive_t prim[2];
  size_t pad_bytes, col_bytes, t_bytes, a_bytes, thread_bytes; /* per thread in backward scratch */
  int64_t whole_kblk;                                          /* whole: col's 32-row block stride (elements) */
  size_t whole_off;       /* whole: col, dY^T and T in backward scratch from here */
  dnnl_memory_t *mems;    /* per thread and primitive: dY view, col, T, scratchpad */
  dnnl_stream_t *streams; /* one per thread (each runs its products itself) */
  const void *x, *dy;
  float *dw;
  char *base;
} cpu_bww_mm;
/* Rows [r0, r0 + count) of the im2col matrix of a channels-last bf16 x
 * into col (row r: output position r's window, (kh, kw, ic) in that order,
 * zeros in the padding; kh kw ic values a row). */
void cpu_im2col_rows(const cpu_conv_shape *c, const void *x, uint16_t *col, int64_t r0, int64_t count);
int cpu_bww_mm_prepare(cpu_bww_mm *m, cpu_node *n, const cpu_conv_shape *c, size_t *bwd_scratch);
int cpu_bww_mm_bind(cpu_bww_mm *m, const void *x, const void *dy, float *dw, char *bwd_scratch);
void cpu_bww_mm_run(const cpu_bww_mm *m, int fresh); /* fresh: write dW instead of adding */
void cpu_bww_mm_release(cpu_bww_mm *m);
/* maxpool_cl.c: max pooling on channels-last f32 / bf16 (channels a
 * multiple of the vector width) as loops of our own; 0 taken, 1 not (the
 * layout, the shape or the switch off), -1 error set. */
extern int cpu_maxpool_use_own;
extern long cpu_maxpool_own_calls; /* forwards run (tests check where it is taken) */
int cpu_maxpool_own_prepare(sp_op_prep *p);
/* conv_col_mm.c: a bf16 training convolution with few output positions and
 * many weights (OH OW <= cpu_col_mm_max_positions, IC >= cpu_col_mm_min_channels)
 * as im2col + matmul forward and as matmul + a gather of each input's taps
 * for the input gradient; cpu_col_mm_calls counts forwards. */
extern int cpu_conv_use_col_mm;
extern int64_t cpu_col_mm_max_positions, cpu_col_mm_min_channels;
extern long cpu_col_mm_calls;
extern int cpu_col_mm_amx; /* its products on mm_amx.c's tiles where they fit; 0: oneDNN's matmul (tests compare) */
typedef struct {
  cpu_conv_shape c;
  int64_t m, k; /* M = N OH OW rows, K = kh kw ic */
  int need_dx, threads;
  dnnl_memory_desc_t col_md, wtt_md, y_md, wt_md, dcol_md;
  dnnl_primitive_desc_t fwd_pd, dx_pd;
  dnnl_primitive_t fwd, dx;
  int amx;    /* forward on mm_amx.c's tiles (Wt^T packed into bp), not oneDNN's matmul */
  int amx_dx; /* ... and dcol (f32 out, Wt packed into bpx) */
  size_t col_off, dcol_off, bp_off, bpx_off; /* in forward / backward scratch */
  void *y;
  const void *dy;
  uint16_t *bp, *bpx;
  size_t wt_bytes; /* Wt, kept by the node from forward to backward */
  const void *x;
  uint16_t *wt, *col;
  float *dcol;
  cpu_exec fwd_run, dx_run;
} cpu_colmm;
/* 0: taken (its forward and backward scratch bytes); 1: not; -1: error set. */
int cpu_colmm_prepare(cpu_colmm *m, cpu_node *n, const cpu_conv_shape *c, int need_dx, size_t *fwd_scratch,
                      size_t *bwd_scratch);
/* wt: wt_bytes kept from forward to backward; dy NULL: no input gradient. */
int cpu_colmm_bind(cpu_colmm *m, cpu_node *n, const void *x, void *y, uint16_t *wt, const void *dy, char *fwd_scratch,
                   char *bwd_scratch);
void cpu_colmm_forward(const cpu_colmm *m, const float *w); /* w: the plain f32 master weights */
void cpu_colmm_dx(const cpu_colmm *m, void *dx, int fresh); /* fresh: write dX instead of adding */

#endif
#endif
