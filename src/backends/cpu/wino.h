/* The Winograd kernels of our own for f32 3x3 convolutions (conv_wino.c:
 * stride 1 on 8-channel blocks, conv_wino16.c: on 16, conv_wino_s2.c:
 * stride 2): their shared plan (cpu_wino) and entry points. Included by
 * cpu.h. */
#ifndef SPRY_BACKENDS_CPU_WINO_H
#define SPRY_BACKENDS_CPU_WINO_H

#include <stddef.h>
#include <stdint.h>

/* conv_wino.c: Winograd F(4x4, 3x3) for f32 3x3 convolutions, stride 1,
 * padding 1, on 8-channel blocks in and out (below AVX-512, where oneDNN has
 * no Winograd kernel); forward, backward data as the same product on the
 * turned kernel, and the weight gradient. cpu_wino_own = 0: never taken
 * (tests compare with oneDNN). */
extern int cpu_wino_own;
extern int cpu_wino_stream;                  /* 0: 8-lane outputs written through the caches, never streamed */
extern long cpu_wino_streamed;               /* calls whose output was streamed (tests check the path ran) */
extern long cpu_wino_calls;                  /* products run (tests check the path ran) */
extern int64_t cpu_wino_min_tiles;           /* taken from this many 4x4 output tiles (tests lower it) */
extern int64_t cpu_wino_min_tiles_frozen;    /* ... in frozen plans (weights transformed once) */
extern int64_t cpu_wino_by_panels_max_tiles; /* up to this many tiles threads split the output channels */
extern size_t cpu_wino_dw_per_thread_max;    /* weight gradients with dU up to this many bytes sum it per thread */
typedef struct {
  int64_t n, h, w, c_in, c_out; /* the product: c_in channels in, c_out out, both h x w */
  int64_t th, tw, tiles, chunk; /* 2x2 output tiles a column / row, in all, a chunk */
  int64_t v_plane, m_plane;     /* floats from one xi's rows to the next's, transformed input / products */
  int64_t v_floats, m_floats;   /* a thread's transformed input / products */
  int64_t du_floats;            /* the weight gradient's transformed sums */
  int dw_per_thread;            /* ... summed per thread, chunk by chunk (narrow layers) */
  int by_panels;                /* forward / backward data: threads split the output channels, not the tiles */
  int flip;                     /* backward data: g'[ic][oc] = the kernel [oc][ic] turned by 180 degrees */
  int threads;                  /* the team the work memory was sized for */
  int lanes;                    /* stride 1: the blocking of input and output, 8 or 16 (conv_wino16.c) */
  /* Stride 2 (conv_wino_s2.c): h x w the input, ho x wo the output; per
   * transformed position xi of 5 x 5, the product's depth (c_in for each
   * parity phase of the input that reaches xi) and where its V and U start. */
  int stride;
  int64_t ho, wo, k[25], v_off[25], m_off[25], u_off[25];
} cpu_wino;
/* Tiles a chunk when `tiles` are shared by `threads` (balanced, at most 96). */
int64_t cpu_wino_chunk(int64_t tiles, int threads);
/* 0: taken, with the transformed weights' bytes in *u_bytes and the work
 * memory's in *work_bytes; 1: does not apply (channels: c_in in blocks of
 * `lanes`, 8 or 16 (16: forward only), c_out in 16s; fewer tiles than the
 * bound for a frozen plan or not). */
int cpu_wino_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int flip, int frozen,
                     int lanes, size_t *u_bytes, size_t *work_bytes);
/* u from the plain weights [OC][IC][3][3], each product output channel
 * scaled by scale[o] (a folded batch norm) unless NULL. */
void cpu_wino_weights(const cpu_wino *m, float *u, const float *w, const float *scale);
/* y (or y +=, accumulate) = the convolution of x (nChw8c, or nChw16c at
 * 16 lanes) with u, + bias, ReLU'd. */
void cpu_wino_run(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                  int accumulate, char *work);
/* conv_wino16.c: cpu_wino_run's three steps on 16-channel blocks for tiles
 * t0 .. t0 + rows - 1 and output panels [p0, p1), v and mm the thread's
 * transformed input and products. The products' register block is
 * CPU_WINO16_ROWS tiles, a chunk at most CPU_WINO16_MAX_CHUNK.
 * cpu_wino16_on = 0: AVX-512 builds leave 16-channel layers to oneDNN's
 * Winograd (conv_winograd.c); taken from cpu_wino16_min_c to
 * cpu_wino16_max_c channels in and out. */
#define CPU_WINO16_ROWS 12
#define CPU_WINO16_MAX_CHUNK 48
extern int cpu_wino16_on;
extern int cpu_wino16_dx;     /* 0: input gradients stay on oneDNN */
extern int cpu_wino16_stream; /* 0: outputs written through the caches, not streamed */
extern long cpu_wino16_calls; /* calls run on 16 lanes (tests check the path ran) */
extern int64_t cpu_wino16_min_c, cpu_wino16_max_c, cpu_wino16_max_c_train, cpu_wino16_min_tiles;
void cpu_wino16_chunk(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                      int accumulate, float *v, float *mm, int64_t t0, int64_t rows, int64_t p0, int64_t p1);
/* Stride 2, padding 1 (conv_wino_s2.c), the input h x w: as cpu_wino_prepare
 * (flip: backward data, c_in in 16s and c_out in 8s then); cpu_wino_weights
 * and cpu_wino_run then take it (bias and ReLU forward only). */
extern int cpu_wino_s2_on;                                 /* 0: stride-2 layers stay on oneDNN */
extern int64_t cpu_wino_s2_min_c_in, cpu_wino_s2_max_c_in; /* taken for input channels in this range */
extern int64_t cpu_wino_s2_min_tiles,
    cpu_wino_s2_min_tiles_dx; /* ... from this many 4x4 tiles (forward / input gradient) */
int cpu_wino_s2_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int flip,
                        size_t *u_bytes, size_t *work_bytes);
void cpu_wino_s2_weights(const cpu_wino *m, float *u, const float *w);
void cpu_wino_s2_run(const cpu_wino *m, const float *u, const float *x, float *y, const float *bias, int relu,
                     int accumulate, char *work);
/* The weight gradient of the convolution c_in -> c_out: 0 taken (its work
 * memory's bytes in *work_bytes), 1 not (as cpu_wino_prepare). */
int cpu_wino_dw_prepare(cpu_wino *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, size_t *work_bytes);
/* dw [OC][IC][3][3] = (fresh) or += the weight gradient from x and dy (nChw8c). */
void cpu_wino_dw_run(const cpu_wino *m, const float *x, const float *dy, float *dw, int fresh, char *work);

#endif
