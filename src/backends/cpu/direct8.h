/* conv_direct8.c's interface: a direct f32 3x3 convolution (padding 1,
 * stride 1 or 2) of frozen plans on 8-channel blocks, for layers with few
 * output positions and many channels (batch 1's deep layers), where the
 * weights are the large operand. Included by cpu.h. */
#ifndef SPRY_BACKENDS_CPU_DIRECT8_H
#define SPRY_BACKENDS_CPU_DIRECT8_H

#include <stddef.h>
#include <stdint.h>

extern int cpu_direct8_on;                /* 0: never taken (tests compare with oneDNN) */
extern long cpu_direct8_calls;            /* runs (tests check the path ran) */
extern int64_t cpu_direct8_max_positions; /* taken up to this many output positions (batch x rows x columns) */
extern int64_t cpu_direct8_min_c_in;      /* ... from this many input channels */
extern int cpu_direct8_prefetch;
typedef struct {
  int64_t n, h, w, ho, wo, c_in, c_out, stride; /* x: n x c_in x h x w, y: n x c_out x ho x wo */
  int64_t hp, wp, plane;                        /* the padded input: rows, positions a row, floats a block */
} cpu_direct8;
/* 0: taken, the packed weights' bytes in *w_bytes and the work memory's
 * (the padded input) in *work_bytes; 1: does not apply (c_in in 8s, c_out
 * in 16s, the output the standard size for padding 1, stride 1 or 2). The
 * size rules (positions, channels) are conv.c's. */
int cpu_direct8_prepare(cpu_direct8 *m, int64_t n, int64_t h, int64_t w, int64_t c_in, int64_t c_out, int64_t stride,
                        size_t *w_bytes, size_t *work_bytes);
/* The plain weights [OC][IC][3][3] packed for the kernel. */
void cpu_direct8_weights(const cpu_direct8 *m, float *packed, const float *w);
/* y = the convolution of x (nChw8c) with the packed weights, + bias (or
 * none), ReLU'd where relu; y nChw8c. */
void cpu_direct8_run(const cpu_direct8 *m, const float *packed, const float *x, float *y, const float *bias, int relu,
                     char *work);

#endif
