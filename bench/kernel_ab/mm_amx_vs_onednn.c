/* mm_amx.c's bf16 product C = A B against oneDNN's brgemm matmul on the same
 * problem (A [M, K] and C [M, N] row-major bf16, B from f32 weights), in
 * one process, alternating call by call: per shape the medians and the
 * fastest of `runs` calls, the packing of B timed apart, and whether the two
 * C are equal bit for bit; at the end the sums weighted by how often a step
 * runs each shape. Reads "M K N count" lines from stdin (ab_mm_amx.sh feeds
 * ResUNet-50's bf16 training shapes at batch 16). Dev-time only; needs AMX. */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "harness.h"

enum { MAX_RUNS = 101 };

int main(int argc, char **argv) {
  const int runs = argc > 1 ? atoi(argv[1]) : 15;
  if (runs < 1 || runs > MAX_RUNS || !cpu_amx_usable()) {
    fprintf(stderr, "usage: mm_amx_vs_onednn [runs <= %d] < shapes (needs AMX)\n", MAX_RUNS);
    return 2;
  }
  dnnl_engine_t eng;
  dnnl_stream_t st;
  CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  CK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
  const int threads = omp_get_max_threads();
  long long m, k, n;
  double count, sum_d = 0, sum_t = 0, sum_p = 0, min_d = 0, min_t = 0;
  while (scanf("%lld %lld %lld %lf", &m, &k, &n, &count) == 4) {
    if (!cpu_mm_amx_fits(m, k, n)) {
      printf("%lld x %lld x %lld: not a shape the tiles take\n", m, k, n);
      continue;
    }
    dnnl_memory_desc_t ad, bd, cd;
    const dnnl_dims_t a_dims = {m, k}, b_dims = {k, n}, c_dims = {m, n};
    CK(dnnl_memory_desc_init_by_tag(&ad, 2, a_dims, dnnl_bf16, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&bd, 2, b_dims, dnnl_bf16, dnnl_ab));
    CK(dnnl_memory_desc_init_by_tag(&cd, 2, c_dims, dnnl_bf16, dnnl_ab));
    dnnl_matmul_desc_t d;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    CK(dnnl_matmul_desc_init(&d, &ad, &bd, NULL, &cd));
    CK(dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL));
    CK(dnnl_primitive_create(&prim, pd));
    uint16_t *a = aligned_alloc(64, (size_t)(m * k * 2)), *b = aligned_alloc(64, (size_t)(k * n * 2));
    uint16_t *c1 = aligned_alloc(64, (size_t)(m * n * 2)), *c2 = aligned_alloc(64, (size_t)(m * n * 2));
    uint16_t *bp = aligned_alloc(64, cpu_mm_amx_packed_bytes(k, n));
    float *w = aligned_alloc(64, (size_t)(k * n * 4));
    if (!a || !b || !c1 || !c2 || !bp || !w) return 1;
    for (long long i = 0; i < m * k; i++) a[i] = (uint16_t)(0x3f80 + i % 7); /* 1 .. 1.05 */
    for (long long i = 0; i < k * n; i++) b[i] = 0x3f00, w[i] = 0.5f;
    dnnl_memory_t ma, mb, mc;
    CK(dnnl_memory_create(&ma, &ad, eng, a));
    CK(dnnl_memory_create(&mb, &bd, eng, b));
    CK(dnnl_memory_create(&mc, &cd, eng, c1));
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double td[MAX_RUNS], tt[MAX_RUNS], tp[MAX_RUNS];
    for (int r = -1; r < runs; r++) { /* one warm-up call each */
      const double t0 = now();
      CK(dnnl_primitive_execute(prim, st, 3, args));
      CK(dnnl_stream_wait(st));
      const double t1 = now();
      cpu_mm_amx_pack(w, k, n, 0, bp, threads);
      const double t2 = now();
      cpu_mm_amx(a, m, k, bp, n, c2, NULL, threads);
      const double t3 = now();
      if (r >= 0) td[r] = t1 - t0, tp[r] = t2 - t1, tt[r] = t3 - t2;
    }
    qsort(td, (size_t)runs, sizeof(double), by_value);
    qsort(tt, (size_t)runs, sizeof(double), by_value);
    qsort(tp, (size_t)runs, sizeof(double), by_value);
    const double md = td[runs / 2], mt = tt[runs / 2], mp = tp[runs / 2];
    printf("%6lld %5lld %5lld x%-3.0f oneDNN %7.3f ms  tiles %7.3f (+ pack %.3f)  oneDNN / tiles %.2f%s\n", m, k, n,
           count, md * 1e3, mt * 1e3, mp * 1e3, md / mt, memcmp(c1, c2, (size_t)(m * n * 2)) ? "  (C differs)" : "");
    sum_d += count * md, sum_t += count * mt, sum_p += count * mp, min_d += count * td[0], min_t += count * tt[0];
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(prim), dnnl_primitive_desc_destroy(pd);
    free(a), free(b), free(c1), free(c2), free(bp), free(w);
  }
  printf("a step's products: oneDNN %.1f ms, tiles %.1f (+ pack %.1f): %.3f; fastest runs %.1f / %.1f: %.3f\n",
         sum_d * 1e3, sum_t * 1e3, sum_p * 1e3, sum_d / sum_t, min_d * 1e3, min_t * 1e3, min_d / min_t);
  dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
  return 0;
}
