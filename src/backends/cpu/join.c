/* add (oneDNN binary) and concat along channels (oneDNN concat).
 *
 * Backward of both is a copy of (a slice of) the output gradient into each
 * input's gradient: a reorder from the output's layout (a submemory view for
 * concat) into the input's, overwriting when fresh and accumulating (sum
 * post-op) otherwise.
 *
 * oneDNN's binary add has fast kernels only when both inputs share a layout;
 * when they do not (an inference plan may pick channels-last for one conv
 * and blocked for another), the second input is reordered into the first's
 * layout in forward scratch rather than run on the reference kernel (2.3 s
 * instead of ~10 ms for one 64x32x224x224 add). */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"

typedef struct {
  cpu_node base;
  int n_in, run_backward, is_concat;
  dnnl_memory_desc_t in_md[SP_OP_MAX_IN], part_md[SP_OP_MAX_IN];
  dnnl_primitive_desc_t fwd_pd, grad_pd[SP_OP_MAX_IN][2];
  dnnl_primitive_t fwd, grad_prim[SP_OP_MAX_IN][2];
  cpu_exec f, g[SP_OP_MAX_IN];
  /* add: input 1 reordered into input 0's layout first (fwd scratch at in1_off) */
  int reorder_in1;
  dnnl_memory_desc_t in1_md;
  dnnl_primitive_desc_t in1_pd;
  dnnl_primitive_t in1_prim;
  size_t in1_off;
  cpu_exec in1;
} join_node;

static void join_forward(cpu_node *n, const sp_op_args *a) {
  join_node *s = (join_node *)n;
  if (s->reorder_in1) cpu_exec_run(&s->in1);
  cpu_exec_run(&s->f);
}

static void join_backward(cpu_node *n, const sp_op_args *a) {
  join_node *s = (join_node *)n;
  for (int k = 0; k < s->n_in; k++)
    if (a->d_in[k]) cpu_exec_run(&s->g[k]);
}

static int join_bind(cpu_node *n, const sp_op_args *a, char *fs, char *bs) {
  join_node *s = (join_node *)n;
  if (s->reorder_in1 && cpu_bind_reorder(&s->in1, n, s->in1_pd, s->in1_prim, a->in[1]->data, fs + s->in1_off, fs))
    return -1;
  cpu_exec_init(&s->f, s->fwd);
  for (int k = 0; k < s->n_in; k++) {
    int arg = s->is_concat ? DNNL_ARG_MULTIPLE_SRC + k : (k ? DNNL_ARG_SRC_1 : DNNL_ARG_SRC_0);
    int moved = k == 1 && s->reorder_in1;
    if (cpu_exec_arg(&s->f, n, arg, moved ? &s->in1_md : &s->in_md[k],
                     moved ? (void *)(fs + s->in1_off) : a->in[k]->data))
      return -1;
  }
  if (cpu_exec_arg(&s->f, n, DNNL_ARG_DST, &s->base.out_md, a->out->data) ||
      cpu_exec_scratchpad(&s->f, n, s->fwd_pd, fs))
    return -1;
  if (!s->run_backward) return 0;
  for (int k = 0; k < s->n_in; k++) {
    if (!a->d_in[k]) continue;
    int acc = !(a->d_in_fresh & (1u << k));
    /* The submemory md carries the slice's offset, so the source pointer is
     * the whole output gradient. */
    if (cpu_bind_reorder(&s->g[k], n, s->grad_pd[k][acc], s->grad_prim[k][acc], a->d_out->data, a->d_in[k]->data, bs))
      return -1;
  }
  return 0;
}

static const cpu_vt join_vt = {join_forward, join_backward, join_bind, NULL};

static int grad_reorders(sp_op_prep *p, join_node *s, size_t *bwd) {
  for (int k = 0; k < s->n_in; k++) {
    if (!p->need_d_in[k]) continue;
    const dnnl_memory_desc_t *from = s->is_concat ? &s->part_md[k] : &s->base.out_md;
    for (int acc = 0; acc < 2; acc++) {
      if (cpu_make_reorder(&s->base, from, &s->in_md[k], acc, &s->grad_pd[k][acc], &s->grad_prim[k][acc])) return -1;
      if (cpu_scratchpad_bytes(s->grad_pd[k][acc]) > *bwd) *bwd = cpu_scratchpad_bytes(s->grad_pd[k][acc]);
    }
  }
  return 0;
}

static int add_setup(sp_op_prep *p, join_node *s) {
  dnnl_memory_desc_t dst;
  s->n_in = 2;
  s->run_backward = p->run_backward;
  if (cpu_md_input(&s->in_md[0], p, 0) || cpu_md_input(&s->in_md[1], p, 1)) return -1;
  if (p->out_plain ? cpu_md_plain(&dst, &p->out_shape, dnnl_f32)
                   : cpu_md_any(&dst, &p->out_shape, s->in_md[0].data_type))
    return -1;
  dnnl_binary_desc_t d;
  dnnl_primitive_desc_t pd;
  DNNL_TRY(dnnl_binary_desc_init(&d, dnnl_binary_add, &s->in_md[0], &s->in_md[1], &dst));
  if (cpu_pd(&d, NULL, NULL, &pd)) return -1;
  if (cpu_pd_is_ref(pd) && s->in_md[0].data_type == s->in_md[1].data_type &&
      !cpu_md_equal(&s->in_md[0], &s->in_md[1])) {
    /* Mixed layouts: bring input 1 into input 0's. */
    dnnl_primitive_desc_destroy(pd);
    if (cpu_md_retype(&s->in1_md, &s->in_md[0], s->in_md[1].data_type) ||
        cpu_make_reorder(&s->base, &s->in_md[1], &s->in1_md, 0, &s->in1_pd, &s->in1_prim))
      return -1;
    s->reorder_in1 = 1;
    DNNL_TRY(dnnl_binary_desc_init(&d, dnnl_binary_add, &s->in_md[0], &s->in1_md, &dst));
    if (cpu_pd(&d, NULL, NULL, &pd)) return -1;
  }
  if (cpu_adopt(&s->base, pd, &s->fwd)) return -1;
  s->fwd_pd = pd;
  s->base.out_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  size_t bwd = 0;
  if (p->run_backward && grad_reorders(p, s, &bwd)) return -1;
  p->saved_bytes = 0;
  size_t fwd = cpu_scratchpad_bytes(s->fwd_pd);
  if (s->reorder_in1) {
    if (cpu_scratchpad_bytes(s->in1_pd) > fwd) fwd = cpu_scratchpad_bytes(s->in1_pd);
    s->in1_off = cpu_take(&fwd, cpu_md_bytes(&s->in1_md));
  }
  p->fwd_scratch_bytes = fwd;
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
}

int cpu_add_prepare(sp_op_prep *p) {
  int fused = cpu_add_relu_prepare(p); /* add_relu.c, when relu follows in the same layout */
  if (fused <= 0) return fused;
  join_node *s = cpu_node_new(sizeof *s, &join_vt);
  if (add_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}

static int concat_setup(sp_op_prep *p, join_node *s) {
  dnnl_memory_desc_t dst;
  s->n_in = p->n_in;
  s->is_concat = 1;
  s->run_backward = p->run_backward;
  for (int k = 0; k < p->n_in; k++) {
    if (cpu_md_input(&s->in_md[k], p, k)) return -1;
    if (s->in_md[k].data_type != s->in_md[0].data_type) return sp_error_set("concat inputs of different types");
  }
  if (p->out_plain ? cpu_md_plain(&dst, &p->out_shape, dnnl_f32)
                   : cpu_md_any(&dst, &p->out_shape, s->in_md[0].data_type))
    return -1;
  dnnl_primitive_attr_t attr;
  DNNL_TRY(dnnl_primitive_attr_create(&attr));
  dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success)
    st = dnnl_concat_primitive_desc_create(&s->fwd_pd, &dst, p->n_in, 1, s->in_md, attr, cpu_engine());
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_concat_primitive_desc_create", st);
  s->base.pds[s->base.n_pds++] = s->fwd_pd;
  DNNL_TRY(dnnl_primitive_create(&s->fwd, s->fwd_pd));
  s->base.prims[s->base.n_prims++] = s->fwd;
  s->base.out_md = *cpu_pd_md(s->fwd_pd, dnnl_query_dst_md, 0);
  size_t bwd = 0;
  if (p->run_backward) {
    dnnl_dims_t off = {0, 0, 0, 0, 0};
    for (int k = 0; k < p->n_in; k++) {
      dnnl_dims_t dims;
      for (int i = 0; i < p->in_shape[k].ndim; i++) dims[i] = p->in_shape[k].d[i];
      DNNL_TRY(dnnl_memory_desc_init_submemory(&s->part_md[k], &s->base.out_md, dims, off));
      off[1] += p->in_shape[k].d[1];
    }
    if (grad_reorders(p, s, &bwd)) return -1;
  }
  p->saved_bytes = 0;
  p->fwd_scratch_bytes = cpu_scratchpad_bytes(s->fwd_pd);
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
}

int cpu_concat_prepare(sp_op_prep *p) {
  const int rows = cpu_concat_rows_prepare(p); /* concat_rows.c: one layout, whole runs per row */
  if (rows <= 0) return rows;
  join_node *s = cpu_node_new(sizeof *s, &join_vt);
  if (concat_setup(p, s) != 0) return cpu_fallback(p, &s->base);
  return 0;
}
#endif
