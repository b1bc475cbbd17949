/* The loops of conv_narrow.c (a 3x3 convolution from 8 input channels into
 * groups of 16, inference only), for its own node (channels-last bf16 rows)
 * and for the inference stem (conv_stem.c), which computes this layer from
 * its own rows while they are in cache (planar rows, f32 or bf16). A row at
 * a time: the caller gives the KS padded input rows an output row reads. */
#ifndef SPRY_BACKENDS_CPU_CONV_NARROW_H
#define SPRY_BACKENDS_CPU_CONV_NARROW_H

#include "backends/cpu/cpu.h"
#include "ops/ops.h"

enum {
  CPU_NARROW_IC = 8,    /* input channels: 4 pairs in bf16 */
  CPU_NARROW_KS = 3,    /* the window */
  CPU_NARROW_AMX_K = 96 /* three window rows of 4 positions x 8 channels: the tiles' K (conv_narrow_amx.c) */
};

typedef struct {
  int64_t n, ic, ih, iw, oc, oh, ow, sw; /* sw: the stride (both ways) */
  int64_t row_len;                       /* positions of a padded input row (position 0: the left padding) */
  int f32;                               /* input, weights and output in f32 (else bf16) */
  /* The padded input rows: channels-last (position-major; bf16 only), or
   * planar ([IC][row_len] in f32, channel pairs [IC / 2][row_len][2] in
   * bf16: what the stem writes without transposing its vectors of
   * positions). */
  int planar;
  int has_bias, fold, relu; /* fold: the batch norm after it is folded in; relu: and its ReLU */
  /* f32 where oneDNN runs below AVX-512: the output in its 8-channel blocks
   * (nChw8c, what its AVX2 kernels read next), from loops on 8 lanes. */
  int blocked8;
  /* bf16 on AMX tiles (conv_narrow_amx.c; channels-last rows): the weights
   * again as VNNI tiles, per window row [4 positions][4 channel pairs][oc][2],
   * the fourth position's zero. */
  int amx;
  size_t wt_off, bias_off, wamx_off; /* in the memory cpu_narrow_take sized */
  void *wt;                          /* bf16 pairs [tap][ic / 2][oc][2], or f32 [tap][ic][oc] */
  uint16_t *wamx;
  float *bias; /* the bias, or the folded batch norm's shift */
} cpu_narrow;

extern int cpu_narrow_use_amx;   /* 1: bf16 on AMX tiles where usable (tests switch it off) */
extern long cpu_narrow_amx_rows; /* rows run on the tiles (tests) */

/* The geometry of a convolution (attr, input, weight and output shapes)
 * whose case the loops take; 1 (g untouched) when they do not: 8 input
 * channels, 16 to 64 output channels in groups of 16, 3x3, pad 1, stride 1
 * or 2, no dilation; a build with AVX512-BF16 where oneDNN runs AVX-512
 * (bf16 or f32), or f32 on AVX2 + FMA below it (cpu_narrow.blocked8). */
int cpu_narrow_init(cpu_narrow *g, const sp_conv2d_attr *at, const sp_shape *in, const sp_shape *w, const sp_shape *out,
                    int f32, int has_bias);
/* Sizes the weights and bias in *bytes (offsets into the memory bound to
 * cpu_narrow_bind). */
void cpu_narrow_take(cpu_narrow *g, size_t *bytes);
void cpu_narrow_bind(cpu_narrow *g, char *mem);
/* The weights as the loops read them, from the conv's node (its weight and
 * bias) and the absorbed batch norm's where g->fold. */
void cpu_narrow_weights(const cpu_narrow *g, const sp_op_args *conv, const sp_op_args *bn);
/* Bytes of one padded input row (either layout). */
size_t cpu_narrow_row_bytes(const cpu_narrow *g);
/* Where output row `row` (image n, row oy: n oh + oy) starts, in bytes
 * from the output's first: channels-last, or block 0's row in nChw8c. */
size_t cpu_narrow_out_offset(const cpu_narrow *g, int64_t row);
/* One output row into out (ow x oc, channels-last, or the row of each
 * 8-channel block where blocked8: out at cpu_narrow_out_offset) from the KS padded input
 * rows it reads (rows[r] unread where !valid[r]: the padding). */
void cpu_narrow_row(const cpu_narrow *g, const char *const *rows, const int *valid, char *out);
/* The same on AMX tiles (cpu_narrow.amx), in a thread that configured them:
 * cpu_narrow_tiles(g, 1) before its rows, (g, 0) after (nothing where
 * !g->amx; the configuration took a tenth of a row's time). */
void cpu_narrow_row_amx(const cpu_narrow *g, const char *const *rows, const int *valid, char *out);
void cpu_narrow_tiles(const cpu_narrow *g, int on);

#endif
