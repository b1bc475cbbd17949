/* Timings of this backend's own kernels in the layouts plans give them, for
 * the library's benchmarks (`spry bench op`): a benchmark above the graph
 * cannot build a blocked layout itself without oneDNN's headers, so the
 * backend times its node and hands back the raw times. */
#include "backends/backend.h"

#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"

/* Fresh buffers with every page touched once (in parallel, as the kernel
 * later reads them): first-touch costs are not what is measured. */
static float *touched(int64_t n) {
  float *p = sp_aligned_alloc((size_t)n * 4);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) p[i] = (float)(i % 97) * 0.01f;
  return p;
}

int sp_backend_cpu_time_tshift(const sp_tshift_attr *at, sp_shape s4, int runs, double *fwd_s, double *fwdbwd_s) {
  dnnl_memory_desc_t md;
  dnnl_dims_t dims = {s4.d[0], s4.d[1], s4.d[2], s4.d[3]};
  sp_op_prep pr = {.op = &sp_op_tshift, .attr = at, .n_in = 1, .training = 1, .run_backward = 1};
  pr.in_shape[0] = pr.out_shape = s4;
  pr.in_dtype[0] = SP_F32;
  pr.in_layout[0] = &md;
  pr.need_d_in[0] = 1;
  if (dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd16b) != dnnl_success)
    return sp_error_set("cpu backend: no nChw16c layout for this shape");
  if (cpu_tshift_prepare(&pr) != 0) return -1;
  cpu_node *node = pr.state;
  const int64_t nb = (int64_t)(cpu_md_bytes(&md) / 4); /* channels padded to 16 */
  float *bx = touched(nb), *by = touched(nb), *bdy = touched(nb), *bdx = touched(nb);
  sp_tensor vx = sp_tensor_view(SP_F32, s4, bx), vy = sp_tensor_view(SP_F32, s4, by);
  sp_tensor vdy = sp_tensor_view(SP_F32, s4, bdy), vdx = sp_tensor_view(SP_F32, s4, bdx);
  sp_op_args a;
  memset(&a, 0, sizeof a);
  a.attr = at, a.n_in = 1, a.training = 1, a.impl = node, a.d_in_fresh = 1;
  a.in[0] = &vx, a.out = &vy, a.d_out = &vdy, a.d_in[0] = &vdx;
  for (int r = -2; r < runs; r++) { /* two warm-up rounds */
    double t0 = sp_now();
    node->vt->forward(node, &a);
    double t1 = sp_now();
    node->vt->backward(node, &a);
    double t2 = sp_now();
    if (r < 0) continue;
    fwd_s[r] = t1 - t0, fwdbwd_s[r] = t2 - t0;
  }
  sp_aligned_free(bx), sp_aligned_free(by), sp_aligned_free(bdy), sp_aligned_free(bdx);
  cpu_node_free(node);
  return 0;
}
#else
int sp_backend_cpu_time_tshift(const sp_tshift_attr *at, sp_shape s4, int runs, double *fwd_s, double *fwdbwd_s) {
  (void)at, (void)s4, (void)runs, (void)fwd_s, (void)fwdbwd_s;
  return sp_error_set("backend 'cpu' is not available in this build (oneDNN was not found)");
}
#endif
