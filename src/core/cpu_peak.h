/* The throughput loops behind `spry bench peak` and the bf16 choice: each
 * runs `iters` rounds of independent instructions on the calling thread
 * (sp_peak_flops gives the flops a round counts), so a caller times what
 * the CPU can do at most now, not what a data sheet says. x86-64 with GCC or
 * Clang only; elsewhere nothing is supported. */
#ifndef SPRY_CORE_CPU_PEAK_H
#define SPRY_CORE_CPU_PEAK_H

typedef enum {
  SP_PEAK_FMA512, /* 16 chains of 512-bit vfmadd231ps: 2 flops a lane */
  SP_PEAK_DPBF16, /* 16 chains of 512-bit vdpbf16ps (AVX512_BF16): 4 flops an fp32 lane, as oneDNN counts it */
  SP_PEAK_FMA256, /* 14 chains of 256-bit vfmadd231ps (AVX2 has 16 registers) */
  SP_PEAK_AMX,    /* 4 chains of tdpbf16ps on 16 x 32 bf16 tiles into 16 x 16 fp32 (AMX-BF16) */
} sp_peak_kind;

/* The CPU has the instructions (and, for AMX, the kernel lets this process
 * use the tile state: Linux >= 5.16). */
int sp_peak_supported(sp_peak_kind k);
/* Runs the loop on this thread (the caller checked sp_peak_supported). */
void sp_peak_run(sp_peak_kind k, long iters);
/* Flops one round of the loop counts. */
double sp_peak_flops(sp_peak_kind k);
/* One thread, now: bf16 dot products' GFLOP/s over fp32 FMA's (a few
 * milliseconds, the best of several short runs each); 0 where the CPU lacks
 * AVX-512 or AVX512_BF16. */
double sp_peak_bf16_over_fp32(void);

#endif
