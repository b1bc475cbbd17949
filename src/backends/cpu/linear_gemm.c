/* linear in f32 on plain tensors as three oneDNN sgemm calls, the way
 * PyTorch's addmm runs it: y = x W^T + b, dx (+)= dy W, dW (+)= dy^T x
 * (written where sp_plan_zero_grad marked it).
 *
 * Why not the inner-product primitive (linear.c) here: it wants its weights
 * in a blocked layout, so every training step reorders the plain master
 * weights into it and the weight gradient back out. For a wide layer those
 * two transposing reorders cost more than the three products: on vgg-face's
 * fc1 (1152 -> 1024, batch 16, one thread) 3.2 ms of reorders against 2.1 ms
 * of inner products, where the three sgemm calls take 1.5 ms. sgemm reads the
 * master weights where they lie and accumulates the weight gradient in place
 * (beta = 1), so nothing is copied. bf16 plans, frozen (inference) plans
 * and inputs in a blocked layout keep the primitive. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"

typedef struct {
  cpu_node base;
  int64_t n, in, out;
  int has_bias;
} gemm_node;

static void gemm_forward(cpu_node *node, const sp_op_args *a) {
  gemm_node *s = (gemm_node *)node;
  float *y = a->out->data;
  float beta = 0.0f;
  if (s->has_bias) { /* y starts as the bias in every row; the product adds to it */
    const float *b = a->param[1]->data;
    for (int64_t i = 0; i < s->n; i++) memcpy(y + i * s->out, b, sizeof(float) * (size_t)s->out);
    beta = 1.0f;
  }
  DNNL_RUN(dnnl_sgemm('N', 'T', s->n, s->out, s->in, 1.0f, a->in[0]->data, s->in, a->param[0]->data, s->in, beta, y,
                      s->out));
}

static void gemm_backward(cpu_node *node, const sp_op_args *a) {
  gemm_node *s = (gemm_node *)node;
  const float *dy = a->d_out->data;
  if (a->d_in[0]) { /* overwrite when this node is the gradient's first writer, else add */
    float beta = (a->d_in_fresh & 1u) ? 0.0f : 1.0f;
    DNNL_RUN(dnnl_sgemm('N', 'N', s->n, s->in, s->out, 1.0f, dy, s->out, a->param[0]->data, s->in, beta,
                        a->d_in[0]->data, s->in));
  }
  if (a->d_param[0])
    DNNL_RUN(dnnl_sgemm('T', 'N', s->out, s->in, s->n, 1.0f, dy, s->out, a->in[0]->data, s->in,
                        (a->d_param_fresh & 1u) ? 0.0f : 1.0f, a->d_param[0]->data, s->in));
  if (s->has_bias && a->d_param[1]) {
    float *db = a->d_param[1]->data;
    if (a->d_param_fresh & 2u) memset(db, 0, sizeof(float) * (size_t)s->out);
    for (int64_t i = 0; i < s->n; i++) cpu_add_f32(db, dy + i * s->out, (size_t)s->out);
  }
}

static int gemm_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  (void)n, (void)a, (void)fs, (void)bs; /* reads the arena's tensors at each call */
  return 0;
}

static const cpu_vt gemm_vt = {gemm_forward, gemm_backward, gemm_bind, NULL};

int cpu_linear_gemm_prepare(sp_op_prep *p) {
  /* A frozen plan reorders its weights once and keeps them (linear.c): no
   * per-step reorder to save, and it must not see weights change. */
  if (p->bf16 || p->frozen || p->in_shape[0].ndim != 2 || p->in_dtype[0] != SP_F32) return 1;
  dnnl_memory_desc_t x_md;
  if (cpu_md_input(&x_md, p, 0) || !cpu_md_is_plain(&x_md) || x_md.data_type != dnnl_f32) return 1;
  gemm_node *s = cpu_node_new(sizeof *s, &gemm_vt);
  s->n = p->in_shape[0].d[0];
  s->in = p->in_shape[0].d[1];
  s->out = p->out_shape.d[1];
  s->has_bias = p->n_param > 1;
  if (cpu_md_plain(&s->base.out_md, &p->out_shape, dnnl_f32)) {
    cpu_node_free(&s->base);
    return -1;
  }
  p->saved_bytes = 0;
  p->param_grad_overwrites = s->has_bias ? 3u : 1u;
  p->fwd_scratch_bytes = 0;
  p->bwd_scratch_bytes = 0;
  cpu_report(p, &s->base);
  return 0;
}
#endif
