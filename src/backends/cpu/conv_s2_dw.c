/* The weight gradient of f32 3x3 convolutions with stride 2 and padding 1
 * (even input size: the output is half of it) and at most
 * cpu_s2dw_max_c_in input channels, on 8-channel blocks (nChw8c), in loops
 * of our own. What f32 training plans use below AVX-512, where oneDNN 2.6
 * picks those blocks.
 *
 *   dW[oc][ic][kh][kw] (=|+=) sum over n, oh, ow of
 *                             dY[n][oc][oh][ow] X[n][ic][2 oh + kh - 1][2 ow + kw - 1]
 *
 * Why: on Zen 3 (AVX2, 2 threads) oneDNN's jit:avx2 backward-weights kernel
 * ran vgg-face's stride-2 layers (batch 64: 8 -> 16 at 112, 16 -> 32 at 56,
 * 32 -> 64 at 28, 64 -> 128 at 14; 0.46 GFLOP each) in 5.3-8.5 ms a call,
 * 55-85 GFLOP/s against an FMA peak of 165-180. Alone, against oneDNN in
 * the same process, alternating: 1.13-1.93x; in the training step 0.5-1.5
 * ms less a layer (bench/README_train.md, session 47). Not from 128 input
 * channels: ResNet-50's stride-2 layers (128-512 channels, batch 16) ran no
 * faster in the step than on oneDNN's kernel.
 *
 * How: per thread, over bands of output rows, for 16 output channels (two
 * vectors of dY), one kernel row kh and two input channels, the 3 taps kw
 * x 2 channels x 2 vectors = 12 sums stay in registers over the band's
 * positions: per position, 2 loads of dY and 6 broadcasts of X for 12
 * FMAs. The band (about cpu_s2dw_band_positions output positions, with its
 * input rows) stays in cache while every (kh, channel pair) passes over it.
 * Each thread sums into its own copy ([16-channel group][tap][ic][16]);
 * the copies are added in thread order at the end, so the result does not
 * depend on timing.
 *
 * A forward pass and an input gradient in the same style (R positions x 16
 * output channels in registers) were built and measured too: alone 0.8-1.4x
 * oneDNN's, in the step no faster, so they were left out. */
#ifdef SPRY_HAVE_DNNL
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"

int cpu_s2dw_own = 1;
long cpu_s2dw_calls;
/* Taken up to this many input channels. */
int64_t cpu_s2dw_max_c_in = 64;
/* The weight gradient's band: about this many output positions. */
int64_t cpu_s2dw_band_positions = 256;

int cpu_s2dw_prepare(cpu_s2dw *m, int64_t n, int64_t ih, int64_t iw, int64_t c_in, int64_t c_out, size_t *work_bytes) {
  memset(m, 0, sizeof *m);
  if (!cpu_s2dw_own || n < 1 || ih < 2 || iw < 2 || ih % 2 || iw % 2 || c_in < 8 || c_in % 8 ||
      c_in > cpu_s2dw_max_c_in || c_out < 16 || c_out % 16)
    return 1;
  m->n = n, m->ih = ih, m->iw = iw, m->oh = ih / 2, m->ow = iw / 2, m->c_in = c_in, m->c_out = c_out;
  m->threads = omp_get_max_threads();
  m->band = cpu_s2dw_band_positions / m->ow < 1 ? 1 : cpu_s2dw_band_positions / m->ow;
  *work_bytes = sizeof(float) * 9 * (size_t)(c_in * c_out) * (size_t)m->threads + 64;
  return 0;
}

/* sums[og][tap][ic][16] over output rows [r0, r1) (row n OH + oh), added
 * onto what sums holds. */
static void dw_band(const cpu_s2dw *m, const float *x, const float *dy, float *sums, int64_t r0, int64_t r1) {
  const int64_t IH = m->ih, IW = m->iw, OH = m->oh, OW = m->ow, ci = m->c_in, cb_n = ci / 8, ob_n = m->c_out / 8;
  for (int64_t og = 0; og < m->c_out / 16; og++)
    for (int kh = 0; kh < 3; kh++)
      for (int64_t ip = 0; ip < ci / 2; ip++) {
        const int64_t ic = 2 * ip, cb = ic / 8, c = ic % 8;
        float *s = sums + (og * 9 + kh * 3) * ci * 16 + ic * 16; /* tap kw: + kw ci 16; channel c + 1: + 16 */
        vf8 acc[3][2][2];
        VEC_UNROLL for (int kw = 0; kw < 3; kw++) VEC_UNROLL for (int i = 0; i < 2; i++)
            VEC_UNROLL for (int j = 0; j < 2; j++) acc[kw][i][j] = vload_f(s + kw * ci * 16 + i * 16 + j * 8);
        for (int64_t row = r0; row < r1; row++) {
          const int64_t img = row / OH, oh = row % OH, ih = 2 * oh + kh - 1;
          if (ih < 0 || ih >= IH) continue;
          const float *xr = x + ((img * cb_n + cb) * IH + ih) * IW * 8 + c; /* position p's channel c: xr[8 p] */
          const float *d0 = dy + ((img * ob_n + og * 2) * OH + oh) * OW * 8, *d1 = d0 + OH * OW * 8;
          { /* output column 0: column -1 of the input is padding */
            const vf8 g0 = vload_f(d0), g1 = vload_f(d1);
            VEC_UNROLL for (int kw = 1; kw < 3; kw++) VEC_UNROLL for (int i = 0; i < 2; i++) {
              const vf8 b = vbcast(xr[8 * (kw - 1) + i]);
              acc[kw][i][0] += b * g0, acc[kw][i][1] += b * g1;
            }
          }
          for (int64_t ow = 1; ow < OW; ow++) {
            const vf8 g0 = vload_f(d0 + 8 * ow), g1 = vload_f(d1 + 8 * ow);
            const float *xp = xr + 8 * (2 * ow - 1);
            VEC_UNROLL for (int kw = 0; kw < 3; kw++) VEC_UNROLL for (int i = 0; i < 2; i++) {
              const vf8 b = vbcast(xp[8 * kw + i]);
              acc[kw][i][0] += b * g0, acc[kw][i][1] += b * g1;
            }
          }
        }
        VEC_UNROLL for (int kw = 0; kw < 3; kw++) VEC_UNROLL for (int i = 0; i < 2; i++) {
          vf8u *to = (vf8u *)(s + kw * ci * 16 + i * 16);
          to[0] = acc[kw][i][0], to[1] = acc[kw][i][1];
        }
      }
}

void cpu_s2dw_run(const cpu_s2dw *m, const float *x, const float *dy, float *dw, int fresh, char *work) {
  const int64_t ci = m->c_in, co = m->c_out, rows = m->n * m->oh, per = 9 * ci * co;
  float *base = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
  cpu_s2dw_calls++;
#pragma omp parallel num_threads(m->threads)
  {
    /* The team may be smaller than asked for (inside another parallel
     * region): each thread its own share and copy, whatever their number. */
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    float *sums = base + (size_t)t * (size_t)per;
    memset(sums, 0, sizeof(float) * (size_t)per);
    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
    for (int64_t b = r0; b < r1; b += m->band) dw_band(m, x, dy, sums, b, b + m->band < r1 ? b + m->band : r1);
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t o = 0; o < co; o++) {
      const int64_t og = o / 16, lane = o % 16;
      for (int64_t i = 0; i < ci; i++)
        for (int tap = 0; tap < 9; tap++) {
          const size_t at = (size_t)(((og * 9 + tap) * ci + i) * 16 + lane);
          float v = 0.0f;
          for (int c = 0; c < nt; c++) v += base[(size_t)c * (size_t)per + at];
          float *k = dw + (o * ci + i) * 9 + tap;
          *k = fresh ? v : *k + v;
        }
    }
  }
}
#endif
