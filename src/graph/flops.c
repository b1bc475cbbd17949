/* Forward FLOPs of a plan (2 per multiply-add of the conv/deconv/linear ops;
 * the rest is memory-bound and left out, as is usual in training reports). */
#include "graph/plan_internal.h"
#include "ops/ops.h"

double sp_plan_node_forward_flops(const sp_plan *p, int i) {
  const sp_graph *g = p->g;
  if (i < 0 || i >= g->n_nodes) return 0;
  const sp_node *nd = &g->nodes[i];
  if (!nd->op || nd->n_param < 1) return 0;
  const sp_tensor *w = &g->params[nd->param[0]].value;
  double wn = (double)sp_tensor_numel(w);
  if (nd->op == &sp_op_conv2d) /* each output element: Cin/groups * kh * kw MACs */
    return 2.0 * (double)sp_shape_numel(&p->nodes[i].shape) * wn / (double)w->shape.d[0];
  if (nd->op == &sp_op_conv_transpose2d) /* each input element scatters Cout/groups * kh * kw */
    return 2.0 * (double)sp_shape_numel(&p->nodes[nd->in[0]].shape) * wn / (double)w->shape.d[0];
  if (nd->op == &sp_op_linear) return 2.0 * (double)p->nodes[i].shape.d[0] * wn;
  return 0;
}

double sp_plan_forward_flops(const sp_plan *p) {
  double total = 0;
  for (int i = 0; i < p->g->n_nodes; i++) total += sp_plan_node_forward_flops(p, i);
  return total;
}
