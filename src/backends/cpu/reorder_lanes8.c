/* Activation reorders of our own between the two layouts oneDNN's AVX-512
 * kernels use for a tensor of 8 channels: one 16-channel block, half of it
 * padding (aBcd16b: its direct and 1x1 kernels), and channels-last (acdb:
 * its brgemm kernels), f32 or bf16, written (never added).
 *
 * Why: ResUNet-50's last decoder block narrows to 8 channels at 224 x 224.
 * Its 1x1 layers run on the padded blocks, its 3x3 layer channels-last
 * (oneDNN 2.6 has only its reference kernel for that layer on the padded
 * blocks), so each forward reorders the 3x3 layer's input and output.
 * oneDNN ran both on its generic `jit:uni` reorder: f32 frozen inference at
 * batch 64 on the Xeon with AMX, 17.8 and 23.8 ms (`ONEDNN_VERBOSE`) of a
 * 2.39 s step. Standalone, 2 threads, [64, 8, 224, 224] f32, best of 5:
 * oneDNN 24.7 / 25.5 ms (blocks -> channels-last / back), ours 8.6 / 7.6
 * with the outputs past the caches, 11.1 / 13.3 without.
 *
 * How: a position's 8 values are one contiguous run on both sides (32 bytes
 * in f32, 16 in bf16); the blocked side holds it in the first half of its
 * 64 (32) bytes, the rest zero. Each 64-byte line of the output is built in
 * a register from the runs it takes and stored whole; outputs of at least
 * cpu_stream_threshold() bytes bypass the caches (vstw_nt's reason: the
 * next layer finds them in memory either way). The padding is written as
 * zeros, as oneDNN's reorder writes it. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

int cpu_reorder_use_lanes8 = 1;
long cpu_lanes8_runs;

int cpu_lanes8_of(cpu_lanes8 *t, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate) {
  memset(t, 0, sizeof *t);
  if (!cpu_reorder_use_lanes8 || accumulate || src->ndims != 4 || dst->ndims != 4 || src->data_type != dst->data_type ||
      (src->data_type != dnnl_f32 && src->data_type != dnnl_bf16))
    return 0;
  for (int i = 0; i < 4; i++)
    if (src->dims[i] != dst->dims[i]) return 0;
  if (src->dims[1] != 8) return 0;
  const int ls = cpu_md_lanes(src), ld = cpu_md_lanes(dst);
  if (ls == 16 && ld == CPU_LANES_NHWC)
    t->to_channels_last = 1;
  else if (!(ls == CPU_LANES_NHWC && ld == 16))
    return 0;
  t->esize = src->data_type == dnnl_bf16 ? 2 : 4;
  t->positions = src->dims[0] * src->dims[2] * src->dims[3];
  t->stream = (int64_t)cpu_md_bytes(dst) >= cpu_stream_threshold();
  t->on = 1;
  return 1;
}

/* Positions [p0, p1) one at a time: the tails, and builds without AVX-512. */
static void positions_one_by_one(const cpu_lanes8 *t, const char *src, char *dst, int64_t p0, int64_t p1) {
  const size_t run = 8 * (size_t)t->esize;
  for (int64_t p = p0; p < p1; p++) {
    if (t->to_channels_last) {
      memcpy(dst + p * run, src + p * 2 * run, run);
    } else {
      memcpy(dst + p * 2 * run, src + p * run, run);
      memset(dst + p * 2 * run + run, 0, run);
    }
  }
}

#if defined(__AVX512F__)
static inline void store_line(void *p, __m512i v, int stream) {
  if (stream)
    _mm512_stream_si512((__m512i *)p, v);
  else
    _mm512_storeu_si512(p, v);
}

/* One 64-byte output line at line index k: 2 (f32) or 4 (bf16) positions'
 * runs side by side, or 1 (f32) or 2 (bf16) positions each followed by
 * its zero padding. */
static inline void line(const cpu_lanes8 *t, const char *src, char *dst, int64_t k, int stream) {
  if (t->to_channels_last) {
    const char *s = src + k * 128; /* the output line's positions take 128 input bytes */
    __m512i v;
    if (t->esize == 4) {
      v = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)s));
      v = _mm512_inserti64x4(v, _mm256_loadu_si256((const __m256i *)(s + 64)), 1);
    } else {
      v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)s));
      v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + 32)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + 64)), 2);
      v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(s + 96)), 3);
    }
    store_line(dst + k * 64, v, stream);
  } else {
    const char *s = src + k * 32; /* the output line's positions take 32 input bytes */
    const __m256i in = _mm256_loadu_si256((const __m256i *)s);
    __m512i v;
    if (t->esize == 4) {
      v = _mm512_zextsi256_si512(in);
    } else {
      /* qwords 0 1 of the input (position 0), two zero, 2 3 (position 1), two zero. */
      const __m512i idx = _mm512_set_epi64(0, 0, 3, 2, 0, 0, 1, 0);
      v = _mm512_maskz_permutexvar_epi64(0x33, idx, _mm512_zextsi256_si512(in));
    }
    store_line(dst + k * 64, v, stream);
  }
}
#endif

void cpu_lanes8_run(const cpu_lanes8 *t, const void *src, void *dst, int serial) {
  const char *s = src;
  char *d = dst;
  cpu_lanes8_runs++; /* plans run their nodes one at a time */
#if defined(__AVX512F__)
  /* Output lines whole; the positions left over after the last whole line go one by one. */
  const int64_t per_line = t->to_channels_last ? 64 / (8 * t->esize) : 64 / (16 * t->esize);
  const int64_t lines = t->positions / per_line;
  const int stream = t->stream && ((uintptr_t)d & 63) == 0;
#pragma omp parallel if (!serial)
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t k0 = lines * id / nt, k1 = lines * (id + 1) / nt;
    for (int64_t k = k0; k < k1; k++) line(t, s, d, k, stream);
    if (stream) _mm_sfence();
  }
  positions_one_by_one(t, s, d, lines * per_line, t->positions);
#else
  (void)serial;
  positions_one_by_one(t, s, d, 0, t->positions);
#endif
}
#endif
