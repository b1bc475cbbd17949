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
 * and inputs in a blocked layout keep the primitive.
 * The forward product runs as a matmul primitive on the same plain weights
 * (a transposed stride view) with the bias as its own: sgemm's N x T case
 * took 5.7 ms on vgg-face's fc1 (batch 64, 6272 -> 1024, 2 threads, Zen 5),
 * the brgemm matmul 3.4. With up to 128 rows the weight gradient is a
 * kernel of our own (linear_dw.c): sgemm ran it at half the speed. Below
 * AVX-512 the forward product of a large layer is our own too
 * (linear_fwd.c), in frozen plans as well: it reads the plain weights. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"

typedef struct {
  cpu_node base;
  int64_t n, in, out;
  int has_bias, own_dw, own_fwd, threads;
  float *dw_pack; /* the weight-gradient kernel's packed dy, in backward scratch */
  void *fwd_work; /* own_fwd: linear_fwd.c's packed x and y^T, in forward scratch */
  dnnl_memory_desc_t x_md, wt_md, b_md, y_md;
  dnnl_primitive_desc_t fwd_pd;
  dnnl_primitive_t fwd;
  cpu_exec f;
} gemm_node;

static void gemm_forward(cpu_node *node, const sp_op_args *a) {
  gemm_node *s = (gemm_node *)node;
  if (s->own_fwd)
    cpu_linear_fwd_f32(a->in[0]->data, a->param[0]->data, s->has_bias ? a->param[1]->data : NULL, a->out->data, s->n,
                       s->in, s->out, s->threads, s->fwd_work);
  else
    cpu_exec_run(&s->f);
}

static void gemm_backward(cpu_node *node, const sp_op_args *a) {
  gemm_node *s = (gemm_node *)node;
  const float *dy = a->d_out->data;
  if (a->d_in[0]) { /* overwrite when this node is the gradient's first writer, else add */
    float beta = (a->d_in_fresh & 1u) ? 0.0f : 1.0f;
    DNNL_RUN(dnnl_sgemm('N', 'N', s->n, s->in, s->out, 1.0f, dy, s->out, a->param[0]->data, s->in, beta,
                        a->d_in[0]->data, s->in));
  }
  if (a->d_param[0] && s->own_dw) /* few rows: linear_dw.c */
    cpu_linear_dw_f32(dy, a->in[0]->data, a->d_param[0]->data, s->n, s->out, s->in, !(a->d_param_fresh & 1u),
                      s->threads, s->dw_pack);
  else if (a->d_param[0])
    DNNL_RUN(dnnl_sgemm('T', 'N', s->out, s->in, s->n, 1.0f, dy, s->out, a->in[0]->data, s->in,
                        (a->d_param_fresh & 1u) ? 0.0f : 1.0f, a->d_param[0]->data, s->in));
  if (s->has_bias && a->d_param[1]) {
    float *db = a->d_param[1]->data;
    if (a->d_param_fresh & 2u) memset(db, 0, sizeof(float) * (size_t)s->out);
    for (int64_t i = 0; i < s->n; i++) cpu_add_f32(db, dy + i * s->out, (size_t)s->out);
  }
}

static int gemm_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  gemm_node *s = (gemm_node *)n;
  /* Backward's sgemm calls read the arena's tensors at each call; only the
   * weight-gradient kernel's packed dy needs a place (its scratch). */
  s->dw_pack = (float *)bs;
  if (s->own_fwd) {
    s->fwd_work = fs;
    return 0;
  }
  cpu_exec_init(&s->f, s->fwd);
  return cpu_exec_arg(&s->f, n, DNNL_ARG_SRC, &s->x_md, a->in[0]->data) ||
                 cpu_exec_arg(&s->f, n, DNNL_ARG_WEIGHTS, &s->wt_md, a->param[0]->data) ||
                 (s->has_bias && cpu_exec_arg(&s->f, n, DNNL_ARG_BIAS, &s->b_md, a->param[1]->data)) ||
                 cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->y_md, a->out->data) ||
                 cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs)
             ? -1
             : 0;
}

/* y[N, OUT] = x[N, IN] W^T + b: W^T is the plain [OUT, IN] weights read by column. */
static int make_forward(gemm_node *s) {
  dnnl_dims_t xd = {s->n, s->in}, wd = {s->in, s->out}, ws = {1, s->in}, yd = {s->n, s->out}, bd = {1, s->out};
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->x_md, 2, xd, dnnl_f32, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&s->wt_md, 2, wd, dnnl_f32, ws));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->y_md, 2, yd, dnnl_f32, dnnl_ab));
  DNNL_TRY(dnnl_memory_desc_init_by_tag(&s->b_md, 2, bd, dnnl_f32, dnnl_ab));
  return cpu_matmul_make(&s->base, &s->x_md, &s->wt_md, s->has_bias ? &s->b_md : NULL, &s->y_md, 0, &s->fwd_pd,
                         &s->fwd);
}

static const cpu_vt gemm_vt = {gemm_forward, gemm_backward, gemm_bind, NULL};

int cpu_linear_gemm_prepare(sp_op_prep *p) {
  /* A frozen plan reorders its weights once and keeps them (linear.c): no
   * per-step reorder to save; it comes here only for linear_fwd.c's
   * product, which reads the plain weights as they are at each call. */
  if (p->bf16 || p->in_shape[0].ndim != 2 || p->in_dtype[0] != SP_F32) return 1;
  const int own_fwd = cpu_linear_fwd_applies(p->in_shape[0].d[0], p->in_shape[0].d[1], p->out_shape.d[1]);
  if (p->frozen && !own_fwd) return 1;
  dnnl_memory_desc_t x_md;
  if (cpu_md_input(&x_md, p, 0) || !cpu_md_is_plain(&x_md) || x_md.data_type != dnnl_f32) return 1;
  gemm_node *s = cpu_node_new(sizeof *s, &gemm_vt);
  s->n = p->in_shape[0].d[0];
  s->in = p->in_shape[0].d[1];
  s->out = p->out_shape.d[1];
  s->has_bias = p->n_param > 1;
  s->own_dw = cpu_linear_dw_applies(s->n);
  s->own_fwd = own_fwd;
  s->threads = omp_get_max_threads();
  if (cpu_md_plain(&s->base.out_md, &p->out_shape, dnnl_f32)) {
    cpu_node_free(&s->base);
    return -1;
  }
  p->saved_bytes = 0;
  p->param_grad_overwrites = s->has_bias ? 3u : 1u;
  const size_t bwd = s->own_dw ? cpu_linear_dw_pack_bytes(s->n, s->out) : 0;
  if (own_fwd) return cpu_report_scratch(p, &s->base, cpu_linear_fwd_scratch_bytes(s->n, s->in, s->out), bwd);
  if (make_forward(s)) { /* no fast matmul: the inner product (linear.c) */
    sp_error_clear();
    cpu_node_free(&s->base);
    return 1;
  }
  return cpu_report_scratch(p, &s->base, cpu_scratchpad_bytes(s->fwd_pd), bwd);
}
#endif
