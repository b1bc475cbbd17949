/* Every op spry knows: its definition and its attribute struct.
 * Shapes use NCHW; "K" is a keypoint count, points are [N,K,2] as (x, y).
 * Semantics follow PyTorch unless a comment says otherwise (fixtures check it). */
#ifndef SPRY_OPS_OPS_H
#define SPRY_OPS_OPS_H

#include "ops/op.h"

/* Every op below, once (ops/registry.c). */
extern const sp_op_def *const sp_ops_all[];
extern const int sp_ops_count;

/* ---- convolution family ------------------------------------------------ */

/* in: x[N,Cin,H,W]; params: weight[Cout,Cin/groups,kh,kw], optional bias[Cout]
 * (n_param 1 or 2). Out: [N,Cout,Ho,Wo], Ho = (H+2p-d(k-1)-1)/s+1. */
typedef struct {
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
} sp_conv2d_attr;
extern const sp_op_def sp_op_conv2d;

/* Transposed conv (PyTorch ConvTranspose2d). params: weight[Cin,Cout/groups,kh,kw],
 * optional bias[Cout]. Ho = (H-1)s - 2p + d(k-1) + out_pad + 1. */
typedef struct {
  int stride_h, stride_w, pad_h, pad_w, out_pad_h, out_pad_w, dil_h, dil_w, groups;
} sp_conv_transpose2d_attr;
extern const sp_op_def sp_op_conv_transpose2d;

/* in: x[N,F]; params: weight[O,F], optional bias[O]. Out [N,O]. No attr. */
extern const sp_op_def sp_op_linear;

/* ---- normalisation ----------------------------------------------------- */

/* in: x[N,C] or [N,C,...]; params: gamma[C], beta[C]; state: running_mean[C],
 * running_var[C] (unbiased in the running update, as PyTorch). Training uses
 * batch statistics (biased variance) and updates the running ones; eval uses
 * running ones. saved: per-channel mean and inverse std. */
typedef struct {
  float eps;      /* 1e-5 */
  float momentum; /* 0.1: running = (1-m) running + m batch */
} sp_batchnorm_attr;
extern const sp_op_def sp_op_batchnorm;
/* Synchronised batchnorm (data-parallel): the same with batch statistics of
 * the global batch; sum(user, x, n) adds n doubles over all ranks in place.
 * Made by sp_graph_sync_batchnorm from batchnorm nodes. */
typedef struct {
  sp_batchnorm_attr bn; /* what batchnorm's own kernels are given (batchnorm_sync.c passes &bn) */
  void (*sum)(void *user, double *x, int n);
  void *sum_user;
} sp_batchnorm_sync_attr;
extern const sp_op_def sp_op_batchnorm_sync;

/* ---- activations ------------------------------------------------------- */
extern const sp_op_def sp_op_relu;      /* no attr */
extern const sp_op_def sp_op_hardswish; /* x * relu6(x + 3) / 6; no attr */

/* Inverted dropout: training keeps each element with prob 1-p and scales by
 * 1/(1-p); eval is identity. The mask is a pure function of (seed, index). */
typedef struct {
  float p;
} sp_dropout_attr;
extern const sp_op_def sp_op_dropout;

/* ---- pooling and resampling -------------------------------------------- */

typedef struct {
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
  int count_include_pad; /* avg pool only; PyTorch default 1 */
  int ceil_mode;         /* PyTorch ceil_mode */
} sp_pool2d_attr;
extern const sp_op_def sp_op_maxpool2d; /* pads with -inf; ties: first max wins */
extern const sp_op_def sp_op_avgpool2d;
extern const sp_op_def sp_op_global_avgpool; /* [N,C,H,W] -> [N,C,1,1]; no attr */

/* BlurPool (Zhang 2019): depthwise fixed binomial filter then stride. filter
 * size 3 ([1,2,1] outer product / 16), reflect padding 1, stride 2 by default. */
typedef struct {
  int filter_size; /* 2..5: binomial rows [1,1],[1,2,1],[1,3,3,1],[1,4,6,4,1] */
  int stride;
} sp_blurpool_attr;
extern const sp_op_def sp_op_blurpool;

/* 2x upsampling: nearest, or bilinear with align_corners=False (PyTorch default). */
typedef struct {
  int scale; /* 2 */
  int bilinear;
} sp_upsample_attr;
extern const sp_op_def sp_op_upsample;

/* ---- structure ----------------------------------------------------------- */
extern const sp_op_def sp_op_add;    /* n_in 2, same shape; no attr */
extern const sp_op_def sp_op_concat; /* n_in >= 2, along dim 1 (channels); no attr */

/* Copy into a new shape with the same element count; a dim of -1 is inferred,
 * 0 keeps the input's dim. Flatten = {2, {0, -1}}. */
typedef struct {
  int ndim;
  int64_t d[SP_MAX_DIMS];
} sp_reshape_attr;
extern const sp_op_def sp_op_reshape;

/* ---- keypoint head --------------------------------------------------------- */

/* in: heatmap logits [N,K,H,W] -> points [N,K,2]: spatial softmax per channel
 * (max-subtracted), then expected (x, y) with pixel j at x = j (so the image's
 * pixel coordinates when the heatmap is at input resolution), times scale. */
typedef struct {
  float scale; /* multiply the coordinates (1 at input resolution) */
} sp_softargmax_attr;
extern const sp_op_def sp_op_softargmax;

/* Spatial softmax alone (for heatmap reports): [N,K,H,W] -> same shape. */
extern const sp_op_def sp_op_spatial_softmax;

/* ---- video ---------------------------------------------------------------- */

/* Temporal shift (TSM) on x[N*T,C,H,W]: channels [0,fold_back) take the value
 * of frame t+1, channels [fold_back, fold_back+fold_fwd) take frame t-1, the
 * rest stay; out-of-range frames give zeros. fold_x = floor(C * ratio_x) as in
 * PaddlePaddle's temporal_shift. One pass, no intermediate tensors. */
typedef struct {
  int segments;     /* T */
  float ratio_back; /* fraction of channels shifted from t+1 */
  float ratio_fwd;  /* fraction of channels shifted from t-1 */
} sp_tshift_attr;
extern const sp_op_def sp_op_tshift;
/* Channels in a fold of ratio r over c channels: floor(c r). */
int64_t sp_tshift_fold(int64_t c, float ratio);

/* ---- losses (scalar output [1], mean-reduced) ------------------------------ */

/* in: pred, target (same shape). L1 = mean |p - t|; MSE = mean (p - t)^2. */
extern const sp_op_def sp_op_l1_loss;
extern const sp_op_def sp_op_mse_loss;

/* in: pred[N,K,2], target[N,K,2]. Per-point Euclidean distance
 * sqrt(dx^2 + dy^2 + eps). L2 = mean over N*K points; Euclidean = sum over
 * points, mean over N (the seed's "Euclidean loss"). */
typedef struct {
  int sum_points; /* 0: mean over points (L2), 1: sum over points (Euclidean) */
  float eps;      /* 1e-8 keeps the gradient finite at zero distance */
} sp_point_loss_attr;
extern const sp_op_def sp_op_point_loss;

/* Structure loss (the seed's): for every keypoint i and each neighbour j in
 * neighbours[i*n_neighbours .. +n_neighbours): |(p_i - p_j) - (t_i - t_j)|
 * summed over x and y, mean over N * K * n_neighbours * 2 (an L1 on
 * difference vectors). neighbours are usually the 2 nearest points on the
 * training mean shape (see sp_structure_neighbours). The pointer must outlive
 * the graph. in: pred[N,K,2], target[N,K,2]. */
typedef struct {
  int n_points;
  int n_neighbours;
  const int32_t *neighbours;
} sp_structure_loss_attr;
extern const sp_op_def sp_op_structure_loss;
/* Fills out[K*n] with the n nearest other points of mean_shape[K,2]. */
void sp_structure_neighbours(const float *mean_shape, int k, int n, int32_t *out);

/* Cross-entropy on logits[N,C] and integer labels (i32 [N]); mean over N. */
extern const sp_op_def sp_op_cross_entropy;

#endif
