/* `spry bench peak [--threads T] [--runs N]`: what this machine can do at
 * most, measured now, so "percent of peak" in the other benchmarks has a
 * denominator taken on the same host in the same session rather than from a
 * data sheet (a VM's clock and a CPU's bf16 unit differ from the sheet).
 *
 * - fp32: 16 independent chains of 512-bit FMA (vfmadd231ps) per thread,
 *   2 flops per lane; 14 chains of 256-bit FMA where AVX-512 is absent.
 * - bf16: 16 chains of vdpbf16ps (AVX512_BF16), 2 bf16 products + their sum
 *   into an fp32 lane, counted as 4 flops per fp32 lane as oneDNN counts it.
 *   Its throughput relative to fp32 FMA decides whether bf16 training can
 *   be faster at all: convolutions are compute bound.
 * - copy: a parallel memcpy of --copy-mb MiB (256), counted as bytes read +
 *   bytes written (STREAM's convention for Copy).
 *
 * - amx_bf16: where the CPU has AMX tiles (AMX-BF16) and the kernel lets the
 *   process use them (arch_prctl XTILEDATA), 4 chains of tdpbf16ps per
 *   thread on 16x32 bf16 tiles into 16x16 fp32 tiles: 16 x 16 x 32 x 2 flops
 *   each. This, not vdpbf16ps, is what oneDNN's bf16 convolutions and
 *   matmuls run on such CPUs (Sapphire Rapids and later), so it is the
 *   denominator of a bf16 "percent of peak"; null elsewhere (AMD Zen 5 has
 *   AVX512_BF16 without AMX).
 *
 * The loops live in core/cpu_peak.c (the bf16 choice times two of them
 * too). One JSON line; a kernel the CPU lacks reports null. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "core/cpu_peak.h"
#include "io/json.h"
#include "spry/common.h"

/* Runs `kernel(iters)` on every thread at once; returns the median seconds
 * and, in *threads, how many threads the runtime really gave. */
static double time_parallel(sp_peak_kind kernel, long iters, int *threads, int runs) {
  double t[32];
  if (runs > 32) runs = 32;
  int got = 1;
  /* Wake the team, the cores and the wide units before timing. */
#pragma omp parallel num_threads(*threads)
  sp_peak_run(kernel, iters / 10);
  for (int r = 0; r < runs; r++) {
    double t0 = sp_now();
#pragma omp parallel num_threads(*threads)
    {
      sp_peak_run(kernel, iters);
#pragma omp single nowait
      got = omp_get_num_threads();
    }
    t[r] = sp_now() - t0;
  }
  *threads = got;
  return sp_median(t, runs);
}

static double copy_gbs(int threads, int runs, int mb) {
  const size_t n = (size_t)mb << 20, chunk = (size_t)1 << 20;
  char *a = sp_aligned_alloc(n), *b = sp_aligned_alloc(n);
  memset(a, 1, n), memset(b, 2, n);
  double t[32];
  if (runs > 32) runs = 32;
  for (int r = 0; r < runs; r++) {
    double t0 = sp_now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i += chunk) memcpy(b + i, a + i, chunk);
    t[r] = sp_now() - t0;
  }
  sp_aligned_free(a), sp_aligned_free(b);
  return 2.0 * (double)n / sp_median(t, runs) * 1e-9;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench peak [--threads T] [--runs N] [--copy-mb MB]\n"
          "  this machine's limits now, one JSON line: fp32 FMA and bf16 dot GFLOP/s over T threads,\n"
          "  the AMX bf16 tile peak where the CPU has AMX (null otherwise), and copy GB/s over MB\n");
}

int sp_cli_bench_peak(int argc, char **argv) {
  int threads = omp_get_max_threads(), runs = 5, copy_mb = 256;
  for (int i = 1; i < argc; i++) {
    int r;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
    if ((r = sp_arg_int(argc, argv, &i, "--threads", 1, 256, &threads)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 32, &runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--copy-mb", 1, 1 << 16, &copy_mb))) {
      if (r < 0) return 2;
      continue;
    }
    fprintf(stderr, "spry bench peak: unexpected argument '%s'\n", argv[i]);
    usage(stderr);
    return 2;
  }
  double fp32 = -1, bf16 = -1, amx = -1;
  const char *isa = "none";
  const long iters = 20000000; /* 16 instructions each: ~0.1-0.3 s per run */
  if (sp_peak_supported(SP_PEAK_FMA512)) {
    isa = "avx512";
    int t = threads;
    double s = time_parallel(SP_PEAK_FMA512, iters, &t, runs);
    fp32 = (double)iters * sp_peak_flops(SP_PEAK_FMA512) * t / s * 1e-9;
    if (sp_peak_supported(SP_PEAK_DPBF16)) {
      t = threads;
      s = time_parallel(SP_PEAK_DPBF16, iters, &t, runs);
      bf16 = (double)iters * sp_peak_flops(SP_PEAK_DPBF16) * t / s * 1e-9;
    }
    if (sp_peak_supported(SP_PEAK_AMX)) {
      const long amx_iters = iters / 8; /* ~16 cycles per tdpbf16ps */
      t = threads;
      s = time_parallel(SP_PEAK_AMX, amx_iters, &t, runs);
      amx = (double)amx_iters * sp_peak_flops(SP_PEAK_AMX) * t / s * 1e-9;
    }
  } else if (sp_peak_supported(SP_PEAK_FMA256)) {
    isa = "avx2";
    int t = threads;
    double s = time_parallel(SP_PEAK_FMA256, iters, &t, runs);
    fp32 = (double)iters * sp_peak_flops(SP_PEAK_FMA256) * t / s * 1e-9;
  }
  double copy = copy_gbs(threads, runs, copy_mb);
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "bench"), sp_json_str(&b, "peak");
  sp_json_key(&b, "threads"), sp_json_int(&b, threads);
  sp_json_key(&b, "isa"), sp_json_str(&b, isa);
  sp_json_key(&b, "fp32_gflops_per_s");
  fp32 > 0 ? sp_json_f64(&b, fp32) : sp_json_null(&b);
  sp_json_key(&b, "bf16_gflops_per_s");
  bf16 > 0 ? sp_json_f64(&b, bf16) : sp_json_null(&b);
  sp_json_key(&b, "bf16_over_fp32");
  bf16 > 0 && fp32 > 0 ? sp_json_f64(&b, bf16 / fp32) : sp_json_null(&b);
  sp_json_key(&b, "amx_bf16_gflops_per_s");
  amx > 0 ? sp_json_f64(&b, amx) : sp_json_null(&b);
  sp_json_key(&b, "amx_over_fp32");
  amx > 0 && fp32 > 0 ? sp_json_f64(&b, amx / fp32) : sp_json_null(&b);
  sp_json_key(&b, "copy_gb_per_s"), sp_json_f64(&b, copy);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
  return 0;
}
