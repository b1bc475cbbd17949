/* What conv_stem.c (the stem's forward, its plans) and conv_stem_dw.c (its
 * weight gradient) share: the node's state and where a tap reads the
 * padded image. Private to those two files. */
#ifndef SPRY_BACKENDS_CPU_CONV_STEM_H
#define SPRY_BACKENDS_CPU_CONV_STEM_H

#include "backends/cpu/conv_narrow.h"
#include "backends/cpu/cpu.h"

enum { STEM_MAX_IC = 4, STEM_MAX_K = 49, STEM_MAX_OC = 64 };

typedef struct {
  cpu_node base;
  int64_t n, ic, ih, iw, oc, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, k; /* k = ic kh kw taps */
  int64_t hp, wq; /* the padded image's rows, and values per phase row (pad_image) */
  int has_bias, threads;
  int bf16;              /* image copy and output in bf16 (else f32: inference plans only) */
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
/* The weight gradient (conv_stem_dw.c): the stem node's backward. */
void cpu_stem_backward(cpu_node *n, const sp_op_args *a);

#endif
