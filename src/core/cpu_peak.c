/* The throughput loops of core/cpu_peak.h.
 *
 * The loops are inline assembly so the compiler can neither merge the chains
 * nor drop them; target attributes let this file build without
 * -march=native. */
#include "core/cpu_peak.h"

#include <string.h>

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

#endif

int sp_peak_supported(sp_peak_kind k) {
#ifdef SPRY_PEAK_X86
  switch (k) {
    case SP_PEAK_FMA512: return __builtin_cpu_supports("avx512f");
    case SP_PEAK_DPBF16: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    case SP_PEAK_FMA256: return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    case SP_PEAK_AMX: return __builtin_cpu_supports("avx512f") && amx_usable();
  }
#else
  (void)k;
#endif
  return 0;
}

void sp_peak_run(sp_peak_kind k, long iters) {
#ifdef SPRY_PEAK_X86
  switch (k) {
    case SP_PEAK_FMA512: fma512(iters); break;
    case SP_PEAK_DPBF16: dpbf16_512(iters); break;
    case SP_PEAK_FMA256: fma256(iters); break;
    case SP_PEAK_AMX: amx_bf16(iters); break;
  }
#else
  (void)k, (void)iters;
#endif
}

double sp_peak_flops(sp_peak_kind k) {
  switch (k) {
    case SP_PEAK_FMA512: return 16.0 * 16 * 2;
    case SP_PEAK_DPBF16: return 16.0 * 16 * 4;
    case SP_PEAK_FMA256: return 14.0 * 8 * 2;
    case SP_PEAK_AMX: return 4.0 * 16 * 16 * 32 * 2;
  }
  return 0;
}

/* GFLOP/s of the loop on this thread: the best of 5 runs of `iters` rounds,
 * after one to wake the wide units. */
static double one_thread_gflops(sp_peak_kind k, long iters) {
  sp_peak_run(k, iters);
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    const double t0 = sp_now();
    sp_peak_run(k, iters);
    const double t = sp_now() - t0;
    if (t < best) best = t;
  }
  return (double)iters * sp_peak_flops(k) / (best > 0 ? best : 1e-9) * 1e-9;
}

double sp_peak_bf16_over_fp32(void) {
  if (!sp_peak_supported(SP_PEAK_FMA512) || !sp_peak_supported(SP_PEAK_DPBF16)) return 0;
  /* 20000 rounds of 16 instructions: 0.1-0.3 ms a run at 2-4 GHz */
  const double fp32 = one_thread_gflops(SP_PEAK_FMA512, 20000), bf16 = one_thread_gflops(SP_PEAK_DPBF16, 20000);
  return fp32 > 0 ? bf16 / fp32 : 0;
}
