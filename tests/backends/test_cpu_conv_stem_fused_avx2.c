/* test_cpu_conv_stem_fused.c with oneDNN held to AVX2 (8-channel blocks):
 * the fused stem's 8-lane f32 loops (conv_narrow.h's blocked8) on every
 * machine with AVX2 + FMA, AVX-512 ones included (below AVX-512 it repeats
 * the plain test, in a tenth of a second). */
#define STEM_FUSED_ON_AVX2 1
#include "test_cpu_conv_stem_fused.c"
