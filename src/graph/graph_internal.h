/* Graph and plan internals shared by the files of graph/ (not installed). */
#ifndef SPRY_GRAPH_INTERNAL_H
#define SPRY_GRAPH_INTERNAL_H

#include "ops/op.h"
#include "spry/graph.h"

typedef struct {
  const sp_op_def *op; /* NULL for a graph input */
  char *name;
  void *attr;
  int n_in, n_param, n_state;
  sp_value in[SP_OP_MAX_IN];
  int param[SP_OP_MAX_PARAM];
  int state[SP_OP_MAX_PARAM];
  int channels;
  sp_dtype input_dtype; /* inputs only */
  int is_output, is_loss;
  int is_aux; /* an auxiliary output (sp_graph_output_aux) */
  float loss_weight;
} sp_node;

typedef struct {
  char *name;
  unsigned flags;
  sp_tensor value, grad; /* grad.data NULL for buffers */
} sp_param;

struct sp_graph {
  uint64_t seed;
  sp_node *nodes;
  int n_nodes, cap_nodes;
  sp_param *params;
  int n_params, cap_params;
  char scope[512];
  int scope_len[32];
  int scope_depth;
  char *error;
  int n_builders_failed;
};

/* Zeroes every parameter gradient, except those with skip[i] != 0 (skip
 * may be NULL), each large one by all threads. */
void sp_graph_zero_grads_except(sp_graph *g, const unsigned char *skip);

/* "<scope>.<name>" (or just name at the top level) into buf. */
const char *sp_graph_scoped(const sp_graph *g, const char *name, char *buf, size_t n);

/* ---- memory planning (memplan.c) ---- */
typedef struct {
  size_t bytes;
  int start, end; /* inclusive steps on the forward+backward timeline */
  size_t offset;  /* filled by sp_memplan_place */
} sp_buffer_req;

/* Places buffers so that two with overlapping lifetimes never overlap in
 * memory; returns the arena size. no_reuse gives every buffer its own range. */
size_t sp_memplan_place(sp_buffer_req *reqs, int n, int no_reuse);

#endif
