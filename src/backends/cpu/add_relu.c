/* add followed by relu, as one node: y = max(a + b, 0), the end of every
 * ResNet block.
 *
 * Unfused, the pair costs five passes over the block's output in forward and
 * backward together beyond the inputs (add writes s; relu reads s, writes y;
 * relu backward reads dy and y, writes g; add backward reads g twice). Fused,
 * forward writes y and a one-byte mask (s > 0) into saved, and backward
 * writes mask ? dy : 0 straight into both inputs' gradients (overwriting when
 * fresh, adding otherwise). Taken when both inputs and the output share one
 * layout, f32 or bf16 (the layout the convolutions chose); otherwise join.c's
 * oneDNN add and a separate relu run. bf16 sums in f32 and rounds once (as
 * oneDNN's add does). Padding lanes stay zero: 0 + 0 is not above 0. */
#ifdef SPRY_HAVE_DNNL
#include <stdint.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

typedef struct {
  cpu_node base;
  int64_t count; /* elements in the layout, padding included */
  int bf16;
} add_relu_node;

/* bf16: the same passes, f32 arithmetic, one rounding per value written;
 * VW values a step (vec.h): at one value a step with integer rounding the
 * loop was instruction bound. The scalar tail covers count % VW. */
typedef uint8_t vbw __attribute__((vector_size(VW)));
typedef uint8_t vbwu __attribute__((vector_size(VW), aligned(1)));

static void forward_bf16(const uint16_t *x0, const uint16_t *x1, uint16_t *y, uint8_t *mask, int64_t count) {
  const int64_t whole = count / VW * VW;
#pragma omp parallel for schedule(guided)
  for (int64_t i = 0; i < whole; i += VW) {
    const vfw v = vldw(x0, i, 1, VW) + vldw(x1, i, 1, VW);
    const viw pos = (viw)(v > 0.0f);
    vstw(y, i, (vfw)((viw)v & pos), 1, VW);
    if (mask) *(vbwu *)(mask + i) = __builtin_convertvector(pos & 1, vbw);
  }
  for (int64_t i = whole; i < count; i++) {
    const float v = sp_bf16_widen(x0[i]) + sp_bf16_widen(x1[i]);
    if (mask) mask[i] = v > 0.0f;
    y[i] = sp_bf16_round(v > 0.0f ? v : 0.0f);
  }
}

static void add_relu_forward(cpu_node *n, const sp_op_args *a) {
  const add_relu_node *s = (const add_relu_node *)n;
  if (s->bf16) {
    forward_bf16(a->in[0]->data, a->in[1]->data, a->out->data, a->saved, s->count);
    return;
  }
  const float *x0 = a->in[0]->data, *x1 = a->in[1]->data;
  float *y = a->out->data;
  uint8_t *mask = a->saved; /* NULL without backward */
  const int64_t count = s->count;
  if (mask) {
#pragma omp parallel for simd schedule(guided)
    for (int64_t i = 0; i < count; i++) {
      const float v = x0[i] + x1[i];
      mask[i] = v > 0.0f;
      y[i] = v > 0.0f ? v : 0.0f;
    }
  } else {
#pragma omp parallel for simd schedule(guided)
    for (int64_t i = 0; i < count; i++) {
      const float v = x0[i] + x1[i];
      y[i] = v > 0.0f ? v : 0.0f;
    }
  }
}

/* The gradients of the inputs in d[0], d[1] (either NULL; written when
 * fresh, added into otherwise) in one pass over dy and the mask: one pass
 * per input read dy and the mask twice. The two are distinct tensors here
 * (x + x takes two passes, one input at a time). bf16: a fresh
 * gradient is a bit select, no arithmetic. */
INLINE void grads_bf16(uint16_t *const d[2], const int fresh[2], const uint16_t *dy, const uint8_t *mask,
                       int64_t count) {
  const int64_t whole = count / VW * VW;
#pragma omp parallel for schedule(guided)
  for (int64_t i = 0; i < whole; i += VW) {
    for (int k = 0; k < 2; k++) {
      if (!d[k]) continue;
      if (fresh[k]) {
        *(vhwu *)(d[k] + i) = *(const vhwu *)(dy + i) & vmask16(mask, i);
      } else {
        const vfw g = (vfw)((viw)vldw(dy, i, 1, VW) & vmask32(mask, i, VW));
        vstw(d[k], i, vldw(d[k], i, 1, VW) + g, 1, VW);
      }
    }
  }
  for (int64_t i = whole; i < count; i++)
    for (int k = 0; k < 2; k++)
      if (d[k])
        d[k][i] = fresh[k] ? (mask[i] ? dy[i] : 0)
                           : sp_bf16_round(sp_bf16_widen(d[k][i]) + (mask[i] ? sp_bf16_widen(dy[i]) : 0.0f));
}

INLINE void grads_f32(float *const d[2], const int fresh[2], const float *dy, const uint8_t *mask, int64_t count) {
  const int64_t whole = count / VW * VW;
#pragma omp parallel for schedule(guided)
  for (int64_t i = 0; i < whole; i += VW) {
    const vfw g = (vfw)((viw)vldw(dy, i, 0, VW) & vmask32(mask, i, VW));
    for (int k = 0; k < 2; k++)
      if (d[k]) vstw(d[k], i, fresh[k] ? g : vldw(d[k], i, 0, VW) + g, 0, VW);
  }
  for (int64_t i = whole; i < count; i++)
    for (int k = 0; k < 2; k++)
      if (d[k]) d[k][i] = (fresh[k] ? 0.0f : d[k][i]) + (mask[i] ? dy[i] : 0.0f);
}

static void add_relu_backward(cpu_node *n, const sp_op_args *a) {
  const add_relu_node *s = (const add_relu_node *)n;
  void *d[2] = {a->d_in[0] ? a->d_in[0]->data : NULL, a->d_in[1] ? a->d_in[1]->data : NULL};
  const int fresh[2] = {(int)(a->d_in_fresh & 1u), (int)((a->d_in_fresh >> 1) & 1u)};
  if (d[0] && d[0] == d[1]) { /* x + x: the gradient is 2 g, one input's share per pass */
    void *one[2] = {d[0], NULL};
    for (int k = 0; k < 2; k++) {
      const int f[2] = {fresh[k], 0};
      if (s->bf16)
        grads_bf16((uint16_t *const *)one, f, a->d_out->data, a->saved, s->count);
      else
        grads_f32((float *const *)one, f, a->d_out->data, a->saved, s->count);
    }
    return;
  }
  if (s->bf16)
    grads_bf16((uint16_t *const *)d, fresh, a->d_out->data, a->saved, s->count);
  else
    grads_f32((float *const *)d, fresh, a->d_out->data, a->saved, s->count);
}

static const cpu_vt add_relu_vt = {add_relu_forward, add_relu_backward, NULL, NULL};

int cpu_add_relu_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t m0, m1;
  if (p->consumer[0].op != &sp_op_relu || p->consumer[0].out_plain || p->out_plain || cpu_md_input(&m0, p, 0) ||
      cpu_md_input(&m1, p, 1) || (m0.data_type != dnnl_f32 && m0.data_type != dnnl_bf16) || !cpu_md_equal(&m0, &m1))
    return 1; /* not this case */
  add_relu_node *s = cpu_node_new(sizeof *s, &add_relu_vt);
  s->base.out_md = m0;
  s->bf16 = m0.data_type == dnnl_bf16;
  s->count = (int64_t)(cpu_md_bytes(&m0) / (s->bf16 ? 2 : 4));
  p->saved_bytes = p->run_backward ? (size_t)s->count : 0;
  p->fwd_scratch_bytes = p->bwd_scratch_bytes = 0;
  p->absorb_consumer = 1;
  cpu_report(p, &s->base);
  return 0;
}
#endif
