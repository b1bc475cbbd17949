/* conv_narrow.h's output row on AMX tiles (bf16, channels-last input rows;
 * machines with AMX). Per window row r, the A tile of 16 output positions
 * is read straight from the padded input row: row q at position (ox0 + q)
 * sw, 32 values (4 positions of 8 channels: the window's 3 and one more,
 * whose weights are zero), rows sw positions apart. So per 16 output
 * channels and window row, one tdpbf16ps of K = 32 against the weights as
 * VNNI tiles (cpu_narrow.wamx: [r][4 positions x 4 channel pairs][oc][2]);
 * no copy of the windows. Up to four groups of 16 positions at once (tiles
 * 0-3 their sums), so one group's products do not wait on another's; A
 * tiles 4-6 take turns, B (7) is one window row's weights for all of them.
 * The batch norm's shift (folded) and the ReLU are applied on the way out.
 *
 * Why: on a Xeon with AMX a vdpbf16ps runs at half the rate of an f32 FMA
 * (`spry bench peak`: bf16 dot 119-163 GFLOP/s, fp32 FMA 208-213), so the
 * vector loops ran vgg-face's second layer (8 -> 16, stride 2, batch 64,
 * inside the frozen stem) at their peak: 2.8 ms of a 12 ms bf16 inference
 * step. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/amx.h"
#include "backends/cpu/conv_narrow.h"

long cpu_narrow_amx_rows; /* rows run here (tests) */

enum { GROUPS = 4, CHUNK = 16 * GROUPS, PAIRS = CPU_NARROW_AMX_K / CPU_NARROW_KS / 2 };

#define C_ZERO(g)                \
  do {                           \
    if (ng > (g)) _tile_zero(g); \
  } while (0)
#define C_PRODUCT(g, at)                                      \
  do {                                                        \
    if (ng > (g)) {                                           \
      _tile_loadd(at, in + 16 * (g)*sw * CPU_NARROW_IC, lda); \
      _tile_dpbf16ps(g, at, 7);                               \
    }                                                         \
  } while (0)
#define C_STORE(g)                                    \
  do {                                                \
    if (ng > (g)) _tile_stored(g, c + 256 * (g), 64); \
  } while (0)

AMX_FN void cpu_narrow_row_amx(const cpu_narrow *g, const char *const *rows, const int *valid, char *out) {
  float c[CHUNK * 16] __attribute__((aligned(64)));
  const int64_t ow = g->ow, oc = g->oc, sw = g->sw, lda = 2 * sw * CPU_NARROW_IC;
  const uint16_t *w = g->wamx;
  __atomic_add_fetch(&cpu_narrow_amx_rows, 1, __ATOMIC_RELAXED);
  for (int64_t j = 0; j < ow; j += CHUNK) {
    const int64_t np = ow - j < CHUNK ? ow - j : CHUNK, ng = (np + 15) / 16;
    for (int64_t ob = 0; ob < oc; ob += 16) {
      C_ZERO(0);
      C_ZERO(1);
      C_ZERO(2);
      C_ZERO(3);
      for (int r = 0; r < CPU_NARROW_KS; r++) {
        if (!valid[r]) continue; /* the padding: nothing to add */
        const uint16_t *in = (const uint16_t *)rows[r] + j * sw * CPU_NARROW_IC;
        _tile_loadd(7, w + (r * PAIRS * oc + ob) * 2, 4 * oc);
        C_PRODUCT(0, 4);
        C_PRODUCT(1, 5);
        C_PRODUCT(2, 6);
        C_PRODUCT(3, 4);
      }
      C_STORE(0);
      C_STORE(1);
      C_STORE(2);
      C_STORE(3);
      const __m512 bias = _mm512_loadu_ps(g->bias + ob);
      for (int64_t q = 0; q < np; q++) {
        __m512 v = _mm512_add_ps(_mm512_load_ps(c + 16 * q), bias);
        if (g->relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
        _mm256_storeu_si256((__m256i *)(out + 2 * ((j + q) * oc + ob)), (__m256i)_mm512_cvtneps_pbh(v));
      }
    }
  }
}

AMX_FN void cpu_narrow_tiles(const cpu_narrow *g, int on) {
  if (!g->amx) return;
  if (on)
    tiles_configure();
  else
    _tile_release();
}
#endif
