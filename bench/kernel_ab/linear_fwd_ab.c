/* linear_fwd.c's forward product against oneDNN's sgemm ('N', 'T') and its
 * matmul on the plain weights (what linear_gemm.c ran), on one shape
 * (default vgg-face's fc1 at batch 64: 64 x 6272 -> 1024), calls
 * alternating, median of each; checks the results agree. Dev-time only:
 * ab_linear_fwd.sh builds and runs it. */
#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "harness.h"

int main(int argc, char **argv) {
  const int64_t m = argc > 1 ? atoll(argv[1]) : 64, k = argc > 2 ? atoll(argv[2]) : 6272,
                n = argc > 3 ? atoll(argv[3]) : 1024;
  const int calls = argc > 4 ? atoi(argv[4]) : 15, threads = omp_get_max_threads();
  /* W as plans hold parameters (sp_aligned_alloc: transparent huge pages where granted). */
  float *x = malloc(sizeof(float) * m * k), *w = sp_aligned_alloc(sizeof(float) * n * k),
        *b = malloc(sizeof(float) * n);
  float *y0 = malloc(sizeof(float) * m * n), *y1 = malloc(sizeof(float) * m * n), *y2 = malloc(sizeof(float) * m * n);
  for (int64_t i = 0; i < m * k; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < n * k; i++) w[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
  for (int64_t i = 0; i < n; i++) b[i] = 0.01f * (float)(i % 13);
  void *scratch = malloc(cpu_linear_fwd_scratch_bytes(m, k, n));
  cpu_linear_fwd_on = 2;

  /* The matmul: x [m][k] times W^T (W plain [n][k] seen as [k][n] with strides), bias [1][n]. */
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t xd, wd, bd, yd;
  dnnl_dims_t xs = {m, k}, ws = {k, n}, bs = {1, n}, ys = {m, n}, wstr = {1, k};
  CK(dnnl_memory_desc_init_by_tag(&xd, 2, xs, dnnl_f32, dnnl_ab));
  CK(dnnl_memory_desc_init_by_strides(&wd, 2, ws, dnnl_f32, wstr));
  CK(dnnl_memory_desc_init_by_tag(&bd, 2, bs, dnnl_f32, dnnl_ab));
  CK(dnnl_memory_desc_init_by_tag(&yd, 2, ys, dnnl_f32, dnnl_ab));
  dnnl_matmul_desc_t md;
  CK(dnnl_matmul_desc_init(&md, &xd, &wd, &bd, &yd));
  dnnl_primitive_desc_t pd;
  CK(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL));
  dnnl_primitive_t mm;
  CK(dnnl_primitive_create(&mm, pd));
  dnnl_memory_t xm, wm, bm, ym;
  CK(dnnl_memory_create(&xm, &xd, eng, x));
  CK(dnnl_memory_create(&wm, &wd, eng, w));
  CK(dnnl_memory_create(&bm, &bd, eng, b));
  CK(dnnl_memory_create(&ym, &yd, eng, y2));
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, ym}};

  double *t[3];
  for (int i = 0; i < 3; i++) t[i] = malloc(sizeof(double) * calls);
  for (int c = -2; c < calls; c++) {
    double t0 = now();
    cpu_linear_fwd_f32(x, w, b, y0, m, k, n, threads, scratch);
    double t1 = now();
    for (int64_t r = 0; r < m; r++) memcpy(y1 + r * n, b, sizeof(float) * n);
    CK(dnnl_sgemm('N', 'T', m, n, k, 1.0f, x, k, w, k, 1.0f, y1, n));
    double t2 = now();
    CK(dnnl_primitive_execute(mm, st, 4, args));
    CK(dnnl_stream_wait(st));
    double t3 = now();
    if (c >= 0) t[0][c] = t1 - t0, t[1][c] = t2 - t1, t[2][c] = t3 - t2;
  }
  double err = 0, mag = 0;
  for (int64_t i = 0; i < m * n; i++) {
    err = fmax(err, fmax(fabs(y0[i] - y1[i]), fabs(y0[i] - y2[i])));
    mag = fmax(mag, fabs(y1[i]));
  }
  const char *name[3] = {"linear_fwd", "sgemm N T", "matmul"};
  const double flop = 2.0 * m * k * n;
  printf("m %lld k %lld n %lld, %d threads, max |diff| %.3g of max |y| %.3g\n", (long long)m, (long long)k,
         (long long)n, threads, err, mag);
  for (int i = 0; i < 3; i++) {
    qsort(t[i], calls, sizeof(double), by_value);
    printf("  %-11s median %.3f ms (%.0f GFLOP/s), min %.3f\n", name[i], 1e3 * t[i][calls / 2],
           flop / t[i][calls / 2] * 1e-9, 1e3 * t[i][0]);
  }
  return err <= 1e-3 * mag ? 0 : 1;
}
