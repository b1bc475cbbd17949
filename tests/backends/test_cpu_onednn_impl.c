/* oneDNN implementations the cpu backend must not take (backends/cpu/core.c,
 * cpu_pd): oneDNN 2.6's AMX 1x1 forward convolution with a binary post-op
 * wrote past the end of its output at 6x6 and got most values wrong. Here
 * that convolution is made through cpu_pd, run with a guard region after its
 * output, and checked against a double-precision sum. On machines without
 * AMX oneDNN never offers that kernel; the check still runs (on whatever it
 * picks). */
#include <math.h>

#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#include "core/bf16.h"

enum { N = 1, IC = 256, OC = 1024, H = 6, W = 6, P = N * H * W, GUARD = 4096 };

static void conv_1x1_with_binary_add_at_6x6(void **s) {
  (void)s;
  cmp_require_cpu();
  dnnl_memory_desc_t src, wany, dst, bias, wplain;
  dnnl_dims_t sd = {N, IC, H, W}, wd = {OC, IC, 1, 1}, dd = {N, OC, H, W}, bd = {OC}, one = {1, 1}, zero = {0, 0};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_bf16, dnnl_acdb), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_bf16, dnnl_format_tag_any), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&wplain, 4, wd, dnnl_bf16, dnnl_oihw), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_bf16, dnnl_acdb), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&bias, 1, bd, dnnl_f32, dnnl_a), dnnl_success);
  dnnl_convolution_desc_t cd;
  assert_int_equal(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &src,
                                                      &wany, &bias, &dst, one, zero, zero),
                   dnnl_success);
  dnnl_post_ops_t po;
  assert_int_equal(dnnl_post_ops_create(&po), dnnl_success);
  assert_int_equal(dnnl_post_ops_append_binary(po, dnnl_binary_add, &dst), dnnl_success);
  dnnl_primitive_desc_t pd;
  if (cpu_pd(&cd, NULL, po, &pd) != 0) {
    dnnl_post_ops_destroy(po);
    printf("# no bf16 convolution here (%s): skipped\n", sp_last_error());
    skip();
  }
  dnnl_post_ops_destroy(po);
  print_message("# implementation: %s\n", cpu_pd_impl(pd));
  assert_true(cpu_pd_impl(pd)[0] != '\0');
  assert_string_not_equal(cpu_pd_impl(pd), "jit_1x1:avx512_core_amx_bf16");

  /* The output is followed by the input in one buffer, as a plan's arena
   * may place them; the kernel that was skipped overwrote that input. */
  uint16_t *arena = malloc(sizeof(uint16_t) * ((size_t)P * OC * 2 + (size_t)P * IC + GUARD));
  uint16_t *other = arena, *out = other + (size_t)P * OC, *x = out + (size_t)P * OC, *guard = x + (size_t)P * IC;
  uint16_t *w = malloc(sizeof(uint16_t) * OC * IC);
  float *b = malloc(sizeof(float) * OC);
  sp_test_rng rng = {5};
  for (int i = 0; i < P * IC; i++) x[i] = sp_bf16_round(sp_test_rng_uniform(&rng, -0.5f, 0.5f));
  for (int i = 0; i < OC * IC; i++) w[i] = sp_bf16_round(sp_test_rng_uniform(&rng, -0.05f, 0.05f));
  for (int i = 0; i < OC; i++) b[i] = 0.1f * (float)i / OC;
  for (int i = 0; i < P * OC; i++) other[i] = sp_bf16_round(sp_test_rng_uniform(&rng, 0, 1));
  for (int i = 0; i < GUARD; i++) guard[i] = 0x5a5a;
  uint16_t *x_kept = malloc(sizeof(uint16_t) * P * IC);
  memcpy(x_kept, x, sizeof(uint16_t) * P * IC);

  /* Weights into the kernel's layout; then the convolution. */
  const dnnl_memory_desc_t *wmd = cpu_pd_md(pd, dnnl_query_weights_md, 0);
  void *wk = malloc(dnnl_memory_desc_get_size(wmd));
  dnnl_primitive_desc_t rpd;
  assert_int_equal(dnnl_reorder_primitive_desc_create(&rpd, &wplain, cpu_engine(), wmd, cpu_engine(), NULL),
                   dnnl_success);
  dnnl_primitive_t reorder, conv;
  assert_int_equal(dnnl_primitive_create(&reorder, rpd), dnnl_success);
  assert_int_equal(dnnl_primitive_create(&conv, pd), dnnl_success);
  const dnnl_memory_desc_t *spmd = cpu_pd_md(pd, dnnl_query_scratchpad_md, 0);
  void *scratch = malloc(cpu_scratchpad_bytes(pd) + 64);
  dnnl_memory_t mw, mwk, mx, mb, mo, mother, msp;
  assert_int_equal(dnnl_memory_create(&mw, &wplain, cpu_engine(), w), dnnl_success);
  assert_int_equal(dnnl_memory_create(&mwk, wmd, cpu_engine(), wk), dnnl_success);
  assert_int_equal(dnnl_memory_create(&mx, &src, cpu_engine(), x), dnnl_success);
  assert_int_equal(dnnl_memory_create(&mb, &bias, cpu_engine(), b), dnnl_success);
  assert_int_equal(dnnl_memory_create(&mo, &dst, cpu_engine(), out), dnnl_success);
  assert_int_equal(dnnl_memory_create(&mother, &dst, cpu_engine(), other), dnnl_success);
  assert_int_equal(dnnl_memory_create(&msp, spmd, cpu_engine(), scratch), dnnl_success);
  dnnl_exec_arg_t ra[2] = {{DNNL_ARG_FROM, mw}, {DNNL_ARG_TO, mwk}};
  dnnl_exec_arg_t ca[6] = {{DNNL_ARG_SRC, mx},  {DNNL_ARG_WEIGHTS, mwk},
                           {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, mo},
                           {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mother},
                           {DNNL_ARG_SCRATCHPAD, msp}};
  assert_int_equal(dnnl_primitive_execute(reorder, cpu_stream(), 2, ra), dnnl_success);
  assert_int_equal(dnnl_primitive_execute(conv, cpu_stream(), 6, ca), dnnl_success);
  assert_int_equal(dnnl_stream_wait(cpu_stream()), dnnl_success);

  assert_memory_equal(x, x_kept, sizeof(uint16_t) * P * IC);
  for (int i = 0; i < GUARD; i++) assert_int_equal(guard[i], 0x5a5a);
  /* Every output within two bf16 steps of the exact value (bf16 inputs,
   * f32 sums, one rounding at the end). */
  double worst = 0;
  for (int p = 0; p < P; p++)
    for (int o = 0; o < OC; o++) {
      double acc = b[o];
      for (int c = 0; c < IC; c++) acc += (double)sp_bf16_widen(x[p * IC + c]) * sp_bf16_widen(w[o * IC + c]);
      acc += sp_bf16_widen(other[p * OC + o]);
      const double err = fabs(sp_bf16_widen(out[p * OC + o]) - acc) / (fabs(acc) + 1e-3);
      if (err > worst) worst = err;
    }
  print_message("# worst relative error %.3g\n", worst);
  assert_true(worst <= 2.0 / 128);

  dnnl_memory_destroy(mw), dnnl_memory_destroy(mwk), dnnl_memory_destroy(mx), dnnl_memory_destroy(mb);
  dnnl_memory_destroy(mo), dnnl_memory_destroy(mother), dnnl_memory_destroy(msp);
  dnnl_primitive_destroy(reorder), dnnl_primitive_destroy(conv);
  dnnl_primitive_desc_destroy(rpd), dnnl_primitive_desc_destroy(pd);
  free(scratch), free(wk), free(x_kept), free(b), free(w), free(arena);
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(conv_1x1_with_binary_add_at_6x6))
