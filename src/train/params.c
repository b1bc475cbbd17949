/* The graph's trainable parameters in the optimizer's terms. */
#include "spry/train.h"

sp_opt_param *sp_train_opt_params(sp_graph *g, int *n) {
  int count = 0, total = sp_graph_param_count(g);
  sp_opt_param *p = sp_xcalloc((size_t)(total ? total : 1), sizeof *p);
  for (int i = 0; i < total; i++) {
    sp_tensor *grad = sp_graph_param_grad(g, i);
    if (!grad) continue; /* buffers: BN running statistics */
    sp_tensor *v = sp_graph_param_value(g, i);
    p[count].name = sp_graph_param_name(g, i);
    p[count].data = v->data;
    p[count].grad = grad->data;
    p[count].numel = sp_tensor_numel(v);
    p[count].no_decay = (sp_graph_param_flags(g, i) & SP_PARAM_NO_DECAY) != 0;
    count++;
  }
  *n = count;
  return p;
}
