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
 * The loops are inline assembly so the compiler can neither merge the chains
 * nor drop them; target attributes let this file build without -march=native. One JSON line; a kernel the CPU lacks reports null. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "io/json.h"
#include "spry/common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPRY_PEAK_X86 1
#define CLOBBER16                                                                                                     \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", \
      "xmm14", "xmm15"
/* One instruction into each of 16 accumulators, sources zmm30/zmm31 (ymm14/15
 * for AVX2, which has only 16 registers: 14 chains there). */
#define Z16(ins)                                                                                               \
  ins " %%zmm30,%%zmm31,%%zmm0\n\t" ins " %%zmm30,%%zmm31,%%zmm1\n\t" ins " %%zmm30,%%zmm31,%%zmm2\n\t" ins    \
      " %%zmm30,%%zmm31,%%zmm3\n\t" ins " %%zmm30,%%zmm31,%%zmm4\n\t" ins " %%zmm30,%%zmm31,%%zmm5\n\t" ins    \
      " %%zmm30,%%zmm31,%%zmm6\n\t" ins " %%zmm30,%%zmm31,%%zmm7\n\t" ins " %%zmm30,%%zmm31,%%zmm8\n\t" ins    \
      " %%zmm30,%%zmm31,%%zmm9\n\t" ins " %%zmm30,%%zmm31,%%zmm10\n\t" ins " %%zmm30,%%zmm31,%%zmm11\n\t" ins  \
      " %%zmm30,%%zmm31,%%zmm12\n\t" ins " %%zmm30,%%zmm31,%%zmm13\n\t" ins " %%zmm30,%%zmm31,%%zmm14\n\t" ins \
      " %%zmm30,%%zmm31,%%zmm15\n\t"
#define Y14(ins)                                                                                              \
  ins " %%ymm14,%%ymm15,%%ymm0\n\t" ins " %%ymm14,%%ymm15,%%ymm1\n\t" ins " %%ymm14,%%ymm15,%%ymm2\n\t" ins   \
      " %%ymm14,%%ymm15,%%ymm3\n\t" ins " %%ymm14,%%ymm15,%%ymm4\n\t" ins " %%ymm14,%%ymm15,%%ymm5\n\t" ins   \
      " %%ymm14,%%ymm15,%%ymm6\n\t" ins " %%ymm14,%%ymm15,%%ymm7\n\t" ins " %%ymm14,%%ymm15,%%ymm8\n\t" ins   \
      " %%ymm14,%%ymm15,%%ymm9\n\t" ins " %%ymm14,%%ymm15,%%ymm10\n\t" ins " %%ymm14,%%ymm15,%%ymm11\n\t" ins \
      " %%ymm14,%%ymm15,%%ymm12\n\t" ins " %%ymm14,%%ymm15,%%ymm13\n\t"

/* Each kernel is one asm block: sources and accumulators zeroed inside it
 * (every lane stays 0: no denormal or inf assists), the counted loop, and
 * vzeroupper on the way out, so no compiler-generated code runs between. */
#define ZERO16(z)                                                                                      \
  z " %%zmm0,%%zmm0,%%zmm0\n\t" z " %%zmm1,%%zmm1,%%zmm1\n\t" z " %%zmm2,%%zmm2,%%zmm2\n\t" z          \
    " %%zmm3,%%zmm3,%%zmm3\n\t" z " %%zmm4,%%zmm4,%%zmm4\n\t" z " %%zmm5,%%zmm5,%%zmm5\n\t" z          \
    " %%zmm6,%%zmm6,%%zmm6\n\t" z " %%zmm7,%%zmm7,%%zmm7\n\t" z " %%zmm8,%%zmm8,%%zmm8\n\t" z          \
    " %%zmm9,%%zmm9,%%zmm9\n\t" z " %%zmm10,%%zmm10,%%zmm10\n\t" z " %%zmm11,%%zmm11,%%zmm11\n\t" z    \
    " %%zmm12,%%zmm12,%%zmm12\n\t" z " %%zmm13,%%zmm13,%%zmm13\n\t" z " %%zmm14,%%zmm14,%%zmm14\n\t" z \
    " %%zmm15,%%zmm15,%%zmm15\n\t" z " %%zmm30,%%zmm30,%%zmm30\n\t" z " %%zmm31,%%zmm31,%%zmm31\n\t"
__attribute__((target("avx512f"))) static void fma512(long iters) {
  __asm__ volatile(ZERO16("vpxord") "1:\n\t" Z16("vfmadd231ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
                   : "+r"(iters)::CLOBBER16, "xmm30", "xmm31", "cc");
}
__attribute__((target("avx512f"))) static void dpbf16_512(long iters) {
  __asm__ volatile(ZERO16("vpxord") "1:\n\t" Z16("vdpbf16ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
                   : "+r"(iters)::CLOBBER16, "xmm30", "xmm31", "cc");
}
__attribute__((target("avx2,fma"))) static void fma256(long iters) {
  __asm__ volatile(
      "vxorps %%ymm14,%%ymm14,%%ymm14\n\tvxorps %%ymm15,%%ymm15,%%ymm15\n\t"
      "vxorps %%ymm0,%%ymm0,%%ymm0\n\tvxorps %%ymm1,%%ymm1,%%ymm1\n\tvxorps %%ymm2,%%ymm2,%%ymm2\n\t"
      "vxorps %%ymm3,%%ymm3,%%ymm3\n\tvxorps %%ymm4,%%ymm4,%%ymm4\n\tvxorps %%ymm5,%%ymm5,%%ymm5\n\t"
      "vxorps %%ymm6,%%ymm6,%%ymm6\n\tvxorps %%ymm7,%%ymm7,%%ymm7\n\tvxorps %%ymm8,%%ymm8,%%ymm8\n\t"
      "vxorps %%ymm9,%%ymm9,%%ymm9\n\tvxorps %%ymm10,%%ymm10,%%ymm10\n\tvxorps %%ymm11,%%ymm11,%%ymm11\n\t"
      "vxorps %%ymm12,%%ymm12,%%ymm12\n\tvxorps %%ymm13,%%ymm13,%%ymm13\n\t"
      "1:\n\t" Y14("vfmadd231ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
      : "+r"(iters)::"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
        "xmm12", "xmm13", "xmm14", "xmm15", "cc");
}

/* AMX: CPUID.(7,0).EDX bit 24 (AMX-TILE) and bit 22 (AMX-BF16), then the
 * kernel's permission to use the tile data state (Linux >= 5.16). */
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
static int amx_usable(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 22))) return 0;
#ifdef SYS_arch_prctl
  return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
  return 0;
#endif
}

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_tilecfg;

/* Tiles 0-3 accumulate, 4-5 and 6-7 are the two operands (zeros). */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_bf16(long iters) {
  static const uint16_t zeros[16 * 32] __attribute__((aligned(64)));
  amx_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  /* ldtilecfg in asm with a memory input: GCC 12 drops the stores to cfg
   * before the _tile_loadconfig builtin (it does not see the read). */
  __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (long i = 0; i < iters; i++) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_release();
}

/* Runs `kernel(iters)` on every thread at once; returns the median seconds
 * and, in *threads, how many threads the runtime really gave. */
static double time_parallel(void (*kernel)(long), long iters, int *threads, int runs) {
  double t[32];
  if (runs > 32) runs = 32;
  int got = 1;
  /* Wake the team, the cores and the wide units before timing. */
#pragma omp parallel num_threads(*threads)
  kernel(iters / 10);
  for (int r = 0; r < runs; r++) {
    double t0 = sp_now();
#pragma omp parallel num_threads(*threads)
    {
      kernel(iters);
#pragma omp single nowait
      got = omp_get_num_threads();
    }
    t[r] = sp_now() - t0;
  }
  *threads = got;
  return sp_median(t, runs);
}
#endif

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
#ifdef SPRY_PEAK_X86
  const long iters = 20000000; /* 16 instructions each: ~0.1-0.3 s per run */
  if (__builtin_cpu_supports("avx512f")) {
    isa = "avx512";
    int t = threads;
    double s = time_parallel(fma512, iters, &t, runs);
    fp32 = (double)iters * 16 * 16 * 2 * t / s * 1e-9;
    if (__builtin_cpu_supports("avx512bf16")) {
      t = threads;
      s = time_parallel(dpbf16_512, iters, &t, runs);
      bf16 = (double)iters * 16 * 16 * 4 * t / s * 1e-9;
    }
    if (amx_usable()) {
      const long amx_iters = iters / 8; /* ~16 cycles per tdpbf16ps */
      t = threads;
      s = time_parallel(amx_bf16, amx_iters, &t, runs);
      amx = (double)amx_iters * 4 * 16 * 16 * 32 * 2 * t / s * 1e-9;
    }
  } else if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2")) {
    isa = "avx2";
    int t = threads;
    double s = time_parallel(fma256, iters, &t, runs);
    fp32 = (double)iters * 14 * 8 * 2 * t / s * 1e-9;
  }
#endif
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
