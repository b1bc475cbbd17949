/* The f32 loops of a 3x3 padding-1 convolution on 8 lanes, one output row
 * at a time from padded input rows, into oneDNN's 8-channel blocks
 * (nChw8c): what conv_narrow.c runs for the inference stem (conv_stem.c)
 * below AVX-512, which computes vgg-face's second layer from rows of its
 * own.
 *
 * A padded input row is `blocks` blocks of 8 input channels, each row_len
 * positions x 8 channels (position 0 is the left padding; zeros past the
 * row). Per 6 output positions and 16 output channels, 12 accumulators
 * (two vectors of 8 channels a position) take, for every tap and input
 * channel, two weight vectors against the position's value broadcast: 2
 * loads and 6 broadcasts feed 12 FMAs, and 12 accumulators, 2 weights and
 * the broadcast take 15 of the 16 registers. Each position's two vectors are its
 * output in two 8-channel blocks: nothing is transposed. */
#ifndef SPRY_BACKENDS_CPU_ROWS8_H
#define SPRY_BACKENDS_CPU_ROWS8_H

#include "backends/cpu/vec.h"

#if defined(__AVX2__) && defined(__FMA__)
#define CPU_ROWS8 1 /* the loops exist in this build */

enum {
  ROWS8_KS = 3, /* the window */
  ROWS8_PG = 6  /* output positions per group */
};

/* Where rows8_row reads and writes. wt: [tap][ic][oc] (ic = 8 blocks);
 * bias: oc values (a bias or a folded batch norm's shift), or NULL; plane:
 * floats from one input block's row to the next block's (row_len 8 in a
 * padded row); out: block 0's output row, block b at out + b block. */
typedef struct {
  const float *wt, *bias;
  int64_t blocks, plane, oc, ow, block;
  int relu;
} rows8_args;

/* Output positions ox0 .. ox0 + np - 1 (np <= pg), channels ob .. ob + 15,
 * from the valid rows. The stride and pg are constants where called. */
INLINE void rows8_group(const rows8_args *a, const float *const *rows, const int *valid, float *out, int64_t ox0,
                        int64_t ob, int64_t np, const int sw, const int pg) {
  const int64_t oc = a->oc, ic = 8 * a->blocks, plane = a->plane;
  vf8 acc[ROWS8_PG][2];
  const vf8 b0 = a->bias ? vload_f(a->bias + ob) : vbcast(0.0f), b1 = a->bias ? vload_f(a->bias + ob + 8) : b0;
  VEC_UNROLL
  for (int q = 0; q < pg; q++) acc[q][0] = b0, acc[q][1] = b1;
  for (int r = 0; r < ROWS8_KS; r++) {
    if (!valid[r]) continue;
    for (int c = 0; c < ROWS8_KS; c++)
      for (int64_t cb = 0; cb < a->blocks; cb++) {
        const float *x = rows[r] + cb * plane + (sw * ox0 + c) * 8,
                    *wt = a->wt + ((r * ROWS8_KS + c) * ic + 8 * cb) * oc + ob;
        for (int k = 0; k < 8; k++) {
          const vf8 w0 = vload_f(wt + k * oc), w1 = vload_f(wt + k * oc + 8);
          VEC_UNROLL
          for (int q = 0; q < pg; q++) {
            const vf8 v = vbcast(x[q * sw * 8 + k]);
            acc[q][0] += v * w0;
            acc[q][1] += v * w1;
          }
        }
      }
  }
  float *o0 = out + (ob / 8) * a->block + ox0 * 8, *o1 = o0 + a->block;
  for (int64_t q = 0; q < np; q++) {
    *(vf8u *)(o0 + q * 8) = a->relu ? vrelu8(acc[q][0]) : acc[q][0];
    *(vf8u *)(o1 + q * 8) = a->relu ? vrelu8(acc[q][1]) : acc[q][1];
  }
}

/* Positions of the next group with `left` positions to go: 6 at a time,
 * but 7 or 8 as two groups of 4 (a group of 2 keeps only 4 sums in
 * flight, too few for the FMA's latency). */
static inline int64_t rows8_next(int64_t left) {
  return left == 7 || left == 8 ? 4 : left < ROWS8_PG ? left : ROWS8_PG;
}

/* rows8_group with pg = rows8_pg(np), a constant in each call. */
INLINE void rows8_group_any(const rows8_args *a, const float *const *rows, const int *valid, float *out, int64_t ox0,
                            int64_t ob, int64_t np, const int sw) {
  if (np > 4)
    rows8_group(a, rows, valid, out, ox0, ob, np, sw, ROWS8_PG);
  else if (np > 2)
    rows8_group(a, rows, valid, out, ox0, ob, np, sw, 4);
  else
    rows8_group(a, rows, valid, out, ox0, ob, np, sw, 2);
}

/* One output row (oc in 16s) from padded rows: they must run to sw (6
 * groups - 1) + 3 positions (rows8_row_len). */
INLINE void rows8_row_sw(const rows8_args *a, const float *const *rows, const int *valid, float *out, const int sw) {
  for (int64_t ob = 0; ob < a->oc; ob += 16)
    for (int64_t ox0 = 0, np; ox0 < a->ow; ox0 += np) {
      np = rows8_next(a->ow - ox0);
      rows8_group_any(a, rows, valid, out, ox0, ob, np, sw);
    }
}

static inline void rows8_row(const rows8_args *a, const float *const *rows, const int *valid, float *out, int sw) {
  if (sw == 2)
    rows8_row_sw(a, rows, valid, out, 2);
  else
    rows8_row_sw(a, rows, valid, out, 1);
}
#endif

/* Positions of a padded input row for an output row of ow positions at
 * stride sw from iw input positions: the left padding, the row, and what
 * the last group reads past it. */
static inline int64_t rows8_row_len(int64_t iw, int64_t ow, int64_t sw) {
  const int64_t groups = (ow + 5) / 6, reach = sw * (groups * 6 - 1) + 3;
  return reach > iw + 2 ? reach : iw + 2;
}

#endif
