/* Which passes of a convolution run on oneDNN's Winograd kernels (bit 0
 * forward, 1 backward data, 2 backward weights).
 *
 * Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3; F(2x2, 3x3) for batch-1
 * inference) for f32 3x3 stride-1 convolutions: 4x fewer products (2.25x) in
 * exchange for input/output transforms. Measured one oneDNN kernel at a
 * time (Xeon with AMX, 2 threads, nChw16c, ms, direct -> Winograd):
 *
 *   batch 16,  64 ch 56x56   fwd 7.9 -> 4.0, bwd data 8.9 -> 4.0, bwd weights 8.8 -> 4.3
 *   batch 16, 256 ch 14x14   8.1 -> 3.9, 8.4 -> 4.7, 8.4 -> 5.1
 *   batch 16, 512 ch 7x7     7.7 -> 3.8, 7.7 -> 7.0, 10.6 -> 6.4
 *   batch 16,  32 ch 112x112 8.1 -> 5.5, 8.2 -> 5.5, 9.1 -> 5.0
 *   batch 1,   64 ch 56x56   0.53 -> 0.30, 0.54 -> 0.32, 0.54 -> 0.38
 *   batch 1,  256 ch 14x14   0.50 -> 0.33, 0.50 -> 1.05, 0.52 -> 0.86
 *   batch 1,   32 ch 112x112 0.49 -> 0.53 forward;  8 ch 224x224 0.27 -> 1.01
 *
 * with every output within 1e-5 of the direct kernel's largest (relative).
 * So: from 32 channels in and out (64 for batch 1, where forward inference
 * takes the 2x3 kernel), and backward only from 64 output tiles of 4x4 over
 * the batch, where its transforms have enough work to spread. (In a
 * training plan the weights are transformed on every call: inside resunet50
 * f32 b16 the 512-channel 7x7 layers, 64 tiles, come out even with the
 * direct kernels, 28-30 ms a step each; the 256-channel 14x14 ones went
 * from 26 to 16.8-17.8 ms, the 64-channel 56x56 ones from 27 to 14.) oneDNN has
 * no bf16 Winograd kernel. Whole models, f32, 2 threads, medians of three
 * alternating runs against the direct kernels: training resunet50 b16 +7%,
 * resnet50 b16 +12%, tsm-r50 2x8 frames +12%, vgg-face b64 +6%; frozen
 * inference resunet50 batch 1 / 64 +4% / +17%, vgg-face +0% / +1%.
 * Layers that conv_wino16.c takes (AVX-512 builds: 16 to 256 channels, 128
 * in training, from 64 tiles) keep these primitives but do not run their
 * forward and input gradient. */
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

int cpu_conv_winograd = 1;

int cpu_conv_winograd_choice(const sp_op_prep *p, int groups, const int64_t *strides, const int64_t *dil,
                             const int64_t *pad_l, const int64_t *pad_r) {
  const sp_shape *w = &p->param_shape[0], *out = &p->out_shape;
  const int64_t min_channels = out->d[0] == 1 ? 64 : 32;
  if (!cpu_conv_winograd || p->bf16 || groups != 1 || w->d[2] != 3 || w->d[3] != 3 || strides[0] != 1 ||
      strides[1] != 1 || dil[0] || dil[1] || pad_l[0] != 1 || pad_l[1] != 1 || pad_r[0] != 1 || pad_r[1] != 1 ||
      w->d[0] < min_channels || w->d[1] < min_channels)
    return 0;
  const int64_t tiles = out->d[0] * ((out->d[2] + 3) / 4) * ((out->d[3] + 3) / 4);
  return tiles >= 64 ? 7 : 1;
}
#endif
