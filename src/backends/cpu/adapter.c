/* The plain adapter: runs an op's reference kernel inside a cpu plan.
 *
 * Used for the ops oneDNN has no primitive for and spry has no kernel of its
 * own for (losses, reshape, HardSwish, dropout, ...; soft-argmax, BlurPool
 * and the temporal shift in the layouts their kernels do not take) and for cases where
 * oneDNN's semantics differ from PyTorch's. Inputs that arrive in a blocked
 * or bf16 layout are reordered once to plain f32 (into the saved region when
 * the reference backward reads its inputs, else into forward scratch); the
 * output is plain f32. In backward, gradients for such inputs are computed
 * into plain f32 scratch and reordered (accumulating) into the input's layout.
 * When every input is already plain this costs nothing beyond a call.
 *
 * A reshape of a blocked input is only its reorder: forward reorders the
 * input straight into the (plain) output, backward the output's gradient
 * straight into the input's (written or added). Through the reference it
 * was a reorder, a copy, a cleared buffer, an add and a reorder: vgg-face's
 * flatten before fc1 (64 x 128 x 7 x 7) took 0.66 ms a training step. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"
#include "ops/ops.h"

typedef struct {
  cpu_node base;
  const sp_op_def *ref;
  int n_in;
  int reordered[SP_OP_MAX_IN]; /* input k is not plain f32: works on a plain copy */
  int in_saved;                /* plain copies live in saved (the reference backward reads inputs) */
  int direct;                  /* a reshape of a reordered input: the reorders alone, no reference */
  size_t ref_saved_bytes;
  size_t copy_off[SP_OP_MAX_IN], grad_off[SP_OP_MAX_IN];
  dnnl_memory_desc_t in_md[SP_OP_MAX_IN], plain_md[SP_OP_MAX_IN];
  dnnl_primitive_desc_t to_plain_pd[SP_OP_MAX_IN], grad_pd[SP_OP_MAX_IN][2];
  dnnl_primitive_t to_plain_prim[SP_OP_MAX_IN], grad_prim[SP_OP_MAX_IN][2];
  cpu_exec to_plain[SP_OP_MAX_IN], grad_back[SP_OP_MAX_IN];
  sp_tensor copy[SP_OP_MAX_IN], grad[SP_OP_MAX_IN];
  sp_op_args ref_args;
} adapter_node;

static void adapter_forward(cpu_node *n, const sp_op_args *a) {
  adapter_node *s = (adapter_node *)n;
  if (s->direct) {
    cpu_exec_run(&s->to_plain[0]);
    return;
  }
  for (int k = 0; k < s->n_in; k++)
    if (s->reordered[k]) cpu_exec_run(&s->to_plain[k]);
  s->ref_args.seed = a->seed;
  s->ref->forward(&s->ref_args);
}

static void adapter_backward(cpu_node *n, const sp_op_args *a) {
  adapter_node *s = (adapter_node *)n;
  if (s->direct) {
    if (a->d_in[0]) cpu_exec_run(&s->grad_back[0]);
    return;
  }
  for (int k = 0; k < s->n_in; k++) {
    if (!a->d_in[k]) continue;
    if (s->reordered[k])
      memset(s->grad[k].data, 0, sp_tensor_bytes(&s->grad[k]));
    else if (a->d_in_fresh & (1u << k))
      memset(a->d_in[k]->data, 0, sp_tensor_bytes(a->d_in[k]));
  }
  s->ref_args.seed = a->seed;
  s->ref->backward(&s->ref_args);
  for (int k = 0; k < s->n_in; k++)
    if (a->d_in[k] && s->reordered[k]) cpu_exec_run(&s->grad_back[k]);
}

static int adapter_bind(cpu_node *n, const sp_op_args *a, char *fwd_scratch, char *bwd_scratch) {
  adapter_node *s = (adapter_node *)n;
  s->ref_args = *a;
  s->ref_args.saved = s->ref_saved_bytes ? a->saved : NULL;
  for (int k = 0; k < s->n_in; k++) {
    if (!s->reordered[k]) continue;
    char *base = s->in_saved ? (char *)a->saved : fwd_scratch;
    s->copy[k] = sp_tensor_view(SP_F32, a->in[k]->shape, s->direct ? a->out->data : base + s->copy_off[k]);
    s->ref_args.in[k] = &s->copy[k];
    cpu_exec_init(&s->to_plain[k], s->to_plain_prim[k]);
    if (cpu_exec_arg(&s->to_plain[k], n, DNNL_ARG_FROM, &s->in_md[k], a->in[k]->data) != 0 ||
        cpu_exec_arg(&s->to_plain[k], n, DNNL_ARG_TO, &s->plain_md[k], s->copy[k].data) != 0 ||
        cpu_exec_scratchpad(&s->to_plain[k], n, s->to_plain_pd[k], fwd_scratch) != 0)
      return -1;
    if (!a->d_in[k]) continue;
    s->grad[k] =
        sp_tensor_view(SP_F32, a->in[k]->shape, s->direct ? (void *)a->d_out->data : bwd_scratch + s->grad_off[k]);
    s->ref_args.d_in[k] = &s->grad[k];
    int acc = !(a->d_in_fresh & (1u << k));
    cpu_exec_init(&s->grad_back[k], s->grad_prim[k][acc]);
    if (cpu_exec_arg(&s->grad_back[k], n, DNNL_ARG_FROM, &s->plain_md[k], s->grad[k].data) != 0 ||
        cpu_exec_arg(&s->grad_back[k], n, DNNL_ARG_TO, &s->in_md[k], a->d_in[k]->data) != 0 ||
        cpu_exec_scratchpad(&s->grad_back[k], n, s->grad_pd[k][acc], bwd_scratch) != 0)
      return -1;
  }
  return 0;
}

static const cpu_vt adapter_vt = {adapter_forward, adapter_backward, adapter_bind, NULL};

int cpu_adapter_prepare(sp_op_prep *p) {
  adapter_node *s = cpu_node_new(sizeof *s, &adapter_vt);
  s->ref = p->op;
  s->n_in = p->n_in;
  s->ref_saved_bytes = p->saved_bytes;
  s->in_saved = (p->op->flags & SP_OP_BWD_NEEDS_INPUT) && p->run_backward;
  /* Primitive scratchpads (reorders rarely need one) sit at offset 0 of the
   * step's scratch; copies and gradients follow. */
  size_t fwd_pad = 0, bwd_pad = 0;
  for (int k = 0; k < p->n_in; k++) {
    if (!p->in_layout[k]) continue;
    s->reordered[k] = 1;
    if (cpu_md_input(&s->in_md[k], p, k) != 0 || cpu_md_plain(&s->plain_md[k], &p->in_shape[k], dnnl_f32) != 0 ||
        cpu_make_reorder(&s->base, &s->in_md[k], &s->plain_md[k], 0, &s->to_plain_pd[k], &s->to_plain_prim[k]) != 0)
      goto fail;
    size_t b = cpu_scratchpad_bytes(s->to_plain_pd[k]);
    if (b > fwd_pad) fwd_pad = b;
    if (!p->need_d_in[k]) continue;
    for (int acc = 0; acc < 2; acc++) {
      if (cpu_make_reorder(&s->base, &s->plain_md[k], &s->in_md[k], acc, &s->grad_pd[k][acc], &s->grad_prim[k][acc]))
        goto fail;
      b = cpu_scratchpad_bytes(s->grad_pd[k][acc]);
      if (b > bwd_pad) bwd_pad = b;
    }
  }
  size_t fwd = fwd_pad, bwd = bwd_pad, saved = p->saved_bytes;
  s->direct = p->op == &sp_op_reshape && p->n_in == 1 && s->reordered[0];
  for (int k = 0; k < p->n_in && !s->direct; k++) {
    if (!s->reordered[k]) continue;
    size_t bytes = cpu_md_bytes(&s->plain_md[k]);
    s->copy_off[k] = s->in_saved ? cpu_take(&saved, bytes) : cpu_take(&fwd, bytes);
    if (p->need_d_in[k]) s->grad_off[k] = cpu_take(&bwd, bytes);
  }
  if (cpu_md_plain(&s->base.out_md, &p->out_shape, dnnl_f32) != 0) goto fail;
  p->saved_bytes = saved;
  p->fwd_scratch_bytes = fwd;
  p->bwd_scratch_bytes = bwd;
  cpu_report(p, &s->base);
  return 0;
fail:
  cpu_node_free(&s->base);
  return -1;
}
#endif
