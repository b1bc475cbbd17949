/* The cpu backend's batch-norm kernels of our own (bnorm_kernels.c,
 * bnorm_pair.c) as the nodes that run them see them (bnorm.c, and the
 * frozen plans' folding in conv.c, deconv_1x1.c, conv_stem.c). Included by
 * cpu.h. */
#ifndef SPRY_BACKENDS_CPU_BNORM_H
#define SPRY_BACKENDS_CPU_BNORM_H

#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>

#include "ops/op.h"

/* An activation as batch norm walks it: `blocks` blocks of `lanes` channels
 * side by side at each of hw positions (16 / 8: nChw16c / nChw8c; c:
 * channels-last or [N, C]; 1: plain NCHW); f32 or bf16. */
typedef struct {
  int64_t n, c, hw, lanes, blocks, img_stride, blk_stride; /* strides in elements */
  int bf16;
  int threads; /* the team the kernels use (the scratch holds one share each) */
  int stream;  /* y and dx written past the caches (cpu_bn_stream_bytes) */
  /* y and dy: elements more per image than x and dx have (a batch norm
   * writing its part of a wider concat output, bnorm.c); 0 otherwise. */
  int64_t y_img_extra;
} cpu_bn_geom;
/* Activations (bytes) from which batch norm's outputs bypass the caches;
 * -1 (the default): half the last-level cache. Tests set 0 and INT64_MAX. */
extern int64_t cpu_bn_stream_bytes;
/* Output bytes from which kernels write past the caches: cpu_bn_stream_bytes,
 * or half the last-level cache where that is -1 (bnorm_kernels.c). */
int64_t cpu_stream_threshold(void);
/* A plan's: that, capped at cpu_train_stream_cap in training plans where
 * cpu_bn_stream_bytes is -1 (bnorm_kernels.c says why). */
extern int64_t cpu_train_stream_cap;
int64_t cpu_stream_threshold_plan(int training);
/* 0, or -1 for a layout the kernels do not walk. */
int cpu_bn_geom_of(cpu_bn_geom *g, const dnnl_memory_desc_t *md, const sp_shape *s);
size_t cpu_bn_scratch_bytes(const cpu_bn_geom *g);
size_t cpu_bn_bwd_scratch_bytes(const cpu_bn_geom *g);
/* A second batch norm, adopted by the one that absorbed the residual add
 * (bnorm.c, bnorm_pair.c): r = bn2(x2) is computed where it is added, from
 * x2 (in the first's layout) and bn2's statistics, which bn2's own forward
 * computed (batch) or which are its running ones. Backward writes bn2's
 * input gradient dx (added into with dx_add; NULL: not wanted) and adds
 * its parameter gradients (NULL: not wanted). */
typedef struct {
  const void *x;
  const float *mean, *var, *gamma, *beta;
  float eps;
  int batch;
  void *dx;
  int dx_add;
  float *dgamma, *dbeta;
} cpu_bn_partner;
/* The residual add a batch norm absorbed with the ReLU after it (bnorm.c):
 * y = max(bn(x) + r, 0), r in x's layout. Forward writes the mask y[i] > 0
 * (NULL without backward): bit i % 8 of byte i / 8 where the lanes are a
 * multiple of 8 (the vector walk; a byte a value was an eighth of what
 * forward wrote and backward read there), else byte i;
 * cpu_bn_mask_bytes(g) in all. Backward writes the masked dy into dr (NULL:
 * not wanted), or adds it with dr_add. With partner, r is bn2(x2) (r and dr
 * unused). */
typedef struct {
  const void *r;
  uint8_t *mask;
  void *dr;
  int dr_add;
  int dr_stream; /* the kernels' own: dr written past the caches (callers leave it 0) */
  const cpu_bn_partner *partner;
} cpu_bn_residual;
size_t cpu_bn_mask_bytes(const cpu_bn_geom *g);
/* Whether the kernels take a partner in this geometry (lanes a multiple of 8). */
int cpu_bn_pair_walks(const cpu_bn_geom *g);
/* y = (x - mean) gamma / sqrt(var + eps) + beta (then max(., 0) with relu;
 * + r first with res, relu then required). batch: mean and var (biased) are
 * computed into mean[c], var[c]; else read. y NULL: the statistics alone
 * (a batch norm another adopted). */
void cpu_bn_forward(const cpu_bn_geom *g, const void *x, void *y, float *mean, float *var, const float *gamma,
                    const float *beta, float eps, int batch, int relu, const cpu_bn_residual *res, char *scratch);
/* dx (written, or added into with accumulate; may be NULL), and dgamma,
 * dbeta added into (may be NULL); dy is the gradient after the fused ReLU
 * (and add: res as forward had it). */
void cpu_bn_backward(const cpu_bn_geom *g, const void *x, const void *dy, void *dx, int accumulate, const float *mean,
                     const float *var, const float *gamma, const float *beta, float eps, int batch, int relu,
                     const cpu_bn_residual *res, float *dgamma, float *dbeta, char *scratch);
/* The batch norm whose args are bn, on its running statistics, as
 * y = x scale + shift for channel c, after a bias b: what a frozen plan
 * folds into the op before it (conv.c, deconv_1x1.c, conv_stem.c). */
void cpu_bn_fold(const sp_op_args *bn, int64_t c, float b, float *scale, float *shift);

#endif
