/* What the tests of the kernels on AMX tiles share (test_cpu_dw_amx.c,
 * test_cpu_mm_amx.c): skipping where the tiles are not usable, and the
 * values in [-0.5, 0.5) their products are checked on. */
#ifndef SPRY_TEST_AMX_TILES_H
#define SPRY_TEST_AMX_TILES_H

#include <stdint.h>

#include "backend_compare.h"
#include "backends/cpu/cpu.h"

static inline void need_amx(void) {
  cmp_require_cpu();
  if (!cpu_amx_usable()) {
    printf("# no AMX here (or ONEDNN_MAX_CPU_ISA caps it): the tile products are not run\n");
    skip();
  }
}

/* The next value of a linear congruential sequence, in [-0.5, 0.5). */
static inline float unit(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)(*s >> 8) / (float)(1u << 24) - 0.5f;
}

#endif
