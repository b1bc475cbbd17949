/* What conv_stem.c (the stem's forward, its plans), conv_stem_dw.c (its
 * weight gradient) and conv_stem_bn.c (training's stem with its batch norm)
 * share: the node's state, the padded image and where a tap reads it, and
 * the row loops. Private to those files. */
#ifndef SPRY_BACKENDS_CPU_CONV_STEM_H
#define SPRY_BACKENDS_CPU_CONV_STEM_H

#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

enum { STEM_MAX_IC = 4, STEM_MAX_K = 49, STEM_MAX_OC = 64 };

typedef struct {
  cpu_node base;
  int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, k; /* k = ic kh kw taps */
  int64_t hp, wq; /* the padded image's rows, and values per phase row (cpu_stem_pad_image) */
  int has_bias, threads;
  int bf16;              /* image copy and output in bf16 (else f32: inference plans and conv_stem_bn.c) */
  int infer, fold, relu; /* an inference plan; the batch norm after it folded in (frozen), and the ReLU */
  int stream;            /* inference's output written past the caches (cpu_stream_threshold) */
  int kept;              /* frozen: wt and bias in the node's own memory, made again only when stale */
  size_t wt_off, bias_off, acc_off, img_off; /* in forward / backward scratch (img_off: inference's rows) */
  size_t pad_slice;                          /* inference: one thread's padded rows, whole cache lines */
  void *img;        /* bound: the padded image (training: saved for backward), or inference's padded rows per thread */
  float *wt, *bias; /* bias: folded (inference) */
  double *acc;
  /* Inference: the 3x3 convolution after the stem's batch norm and ReLU
   * (and its own two), computed here row by row from stem rows in a ring
   * of KS per thread (conv_narrow.h's padded rows): the stem's output is
   * never stored. */
  int fused;
  cpu_narrow next;
  size_t ring_off;
  char *ring;
  /* bf16, fused: the weights of taps 2p and 2p + 1 as one bf16 pair per
   * output channel (wpair[8 p + l]: tap 2p in the high half), for
   * vdpbf16ps; in the node's kept memory. */
  size_t wpair_off;
  uint32_t *wpair;
} stem_node;

/* Where tap t (t = (r kw + c) ic + i) of output row `row` reads position 0
 * into src[t]; position ox is ox values on. img: the whole padded image
 * (training), or with `slot` this row's padded rows (inference). */
void cpu_stem_tap_rows(const stem_node *s, const void *img, int64_t row, const int64_t *slot, const void **src);
/* The geometry of the stem prep describes (its shapes and attributes, the
 * padded rows' length), and one thread's ring of padded image rows. */
void cpu_stem_geometry(stem_node *s, const sp_op_prep *p);
size_t cpu_stem_pad_slice(const stem_node *s);
/* s->wt ([tap][oc]) and s->bias from the weights [oc][ic][kh][kw] and bias
 * (NULL: none), with the batch norm `fold` folded in (NULL: none). */
void cpu_stem_weights(const stem_node *s, const float *w, const float *b, const sp_op_args *fold);
/* The image rows output row `row` reads, padded into this thread's ring
 * (pad: cpu_stem_pad_slice bytes; pad_held: -1 at first), and where each
 * tap reads position 0 of them (src; consecutive positions are consecutive
 * values, valid up to ow + 8). */
void cpu_stem_window(const stem_node *s, const float *x, int64_t row, char *pad, int64_t *pad_held, const void **src);
/* The whole image padded and split by column phase into img (training:
 * saved for backward), in the plan's type: padded row (n, i, y) at
 * ((n ic + i) hp + y) sw wq values. */
void cpu_stem_pad_image(const stem_node *s, const float *x, void *img);

/* The weight gradient (conv_stem_dw.c): the stem node's backward. */
void cpu_stem_backward(cpu_node *n, const sp_op_args *a);

#endif
