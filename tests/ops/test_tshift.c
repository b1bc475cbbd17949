/* tshift: the fused op against a composed version (zero-pad T, slice, concat,
 * as TSM/Paddle write it) for forward and backward, finite-difference
 * gradients, PyTorch fixtures, and shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "opcheck.h"

typedef struct {
  int64_t nt, c, h, w;
  int segments;
  float rb, rf;
} tshift_case;

static const tshift_case CASES[] = {
    {8, 16, 3, 3, 4, 0.125f, 0.125f}, /* TSM default: 1/8 each way */
    {6, 12, 3, 5, 3, 0.25f, 0.125f},  /* asymmetric */
    {6, 7, 2, 3, 3, 0.0f, 0.3f},      /* no backward fold, odd C */
    {4, 10, 1, 1, 2, 0.2f, 0.2f},     /* seed's Paddle setting, 1x1 planes */
    {3, 5, 2, 2, 1, 0.4f, 0.2f},      /* T = 1: every shifted channel is zero */
    {10, 9, 3, 2, 5, 0.34f, 0.34f},   /* several clips, folds 3+3 of 9 */
    {4, 4, 2, 1, 4, 0.5f, 0.5f},      /* all channels shifted */
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* The composed reference: x as [N,T,C,H,W], padded with one zero frame at
 * each end of T, then out = cat(pad[t+2, :fb], pad[t, fb:fb+ff], x[t, fb+ff:]). */
static void composed_forward(const tshift_case *k, const float *x, float *y) {
  const int64_t T = k->segments, n = k->nt / T, hw = k->h * k->w, frame = k->c * hw;
  const int64_t fb = (int64_t)floorf((float)k->c * k->rb), ff = (int64_t)floorf((float)k->c * k->rf);
  float *pad = calloc((size_t)(n * (T + 2) * frame), sizeof(float));
  for (int64_t b = 0; b < n; b++)
    for (int64_t t = 0; t < T; t++)
      memcpy(pad + (b * (T + 2) + t + 1) * frame, x + (b * T + t) * frame, (size_t)frame * sizeof(float));
  for (int64_t b = 0; b < n; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < k->c; c++) {
        const int64_t src_t = c < fb ? t + 2 : (c < fb + ff ? t : t + 1); /* index into padded T */
        for (int64_t i = 0; i < hw; i++)
          y[(b * T + t) * frame + c * hw + i] = pad[(b * (T + 2) + src_t) * frame + c * hw + i];
      }
  free(pad);
}

/* The composed backward: scatter each d out element back to its source in the
 * padded tensor, then drop the pad frames. */
static void composed_backward(const tshift_case *k, const float *dy, float *dx) {
  const int64_t T = k->segments, n = k->nt / T, hw = k->h * k->w, frame = k->c * hw;
  const int64_t fb = (int64_t)floorf((float)k->c * k->rb), ff = (int64_t)floorf((float)k->c * k->rf);
  float *dpad = calloc((size_t)(n * (T + 2) * frame), sizeof(float));
  for (int64_t b = 0; b < n; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < k->c; c++) {
        const int64_t src_t = c < fb ? t + 2 : (c < fb + ff ? t : t + 1);
        for (int64_t i = 0; i < hw; i++)
          dpad[(b * (T + 2) + src_t) * frame + c * hw + i] += dy[(b * T + t) * frame + c * hw + i];
      }
  for (int64_t b = 0; b < n; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t i = 0; i < frame; i++) dx[(b * T + t) * frame + i] += dpad[(b * (T + 2) + t + 1) * frame + i];
  free(dpad);
}

static void tshift_equals_composed(void **state) {
  (void)state;
  sp_test_rng rng = {7};
  for (int ci = 0; ci < N_CASES; ci++) {
    const tshift_case *k = &CASES[ci];
    sp_tshift_attr at = {.segments = k->segments, .ratio_back = k->rb, .ratio_fwd = k->rf};
    sp_shape s = sp_shape4(k->nt, k->c, k->h, k->w), os;
    char err[256] = "";
    if (sp_op_tshift.infer(&at, 1, &s, 0, NULL, &os, err, sizeof err) != 0) fail_msg("case %d: %s", ci, err);
    const int64_t n = sp_shape_numel(&s);
    sp_tensor x = sp_tensor_alloc(SP_F32, s), y = sp_tensor_alloc(SP_F32, s);
    sp_tensor dy = sp_tensor_alloc(SP_F32, s), dx = sp_tensor_alloc(SP_F32, s);
    float *want = malloc((size_t)n * sizeof(float)), *dwant = malloc((size_t)n * sizeof(float));
    sp_test_fill_uniform(&rng, x.data, n, -1, 1);
    sp_test_fill_uniform(&rng, dy.data, n, -1, 1);
    sp_test_fill_uniform(&rng, dx.data, n, -1, 1); /* accumulate onto non-zero */
    memcpy(dwant, dx.data, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) ((float *)y.data)[i] = NAN;

    sp_op_args a = {.attr = &at, .n_in = 1, .in = {&x}, .d_in = {&dx}, .out = &y, .d_out = &dy};
    sp_op_tshift.forward(&a);
    composed_forward(k, x.data, want);
    /* pure data movement: bit-identical */
    if (memcmp(want, y.data, (size_t)n * sizeof(float)) != 0) fail_msg("case %d: forward differs", ci);
    sp_op_tshift.backward(&a);
    composed_backward(k, dy.data, dwant);
    if (memcmp(dwant, dx.data, (size_t)n * sizeof(float)) != 0) fail_msg("case %d: backward differs", ci);

    free(want);
    free(dwant);
    sp_tensor_free(&x);
    sp_tensor_free(&y);
    sp_tensor_free(&dx);
    sp_tensor_free(&dy);
  }
}

/* Fold sizes as documented: floor(C * ratio) per side, channels [0,fb) from
 * t+1. Checked by hand on one small case so the composed version above is
 * not the only witness. */
static void tshift_hand_case(void **state) {
  (void)state;
  /* N=1, T=3, C=4, 1x1: ratios 0.25 -> fb = ff = 1 */
  sp_tshift_attr at = {.segments = 3, .ratio_back = 0.25f, .ratio_fwd = 0.25f};
  float xv[12] = {/* t0 */ 1, 2, 3, 4, /* t1 */ 5, 6, 7, 8, /* t2 */ 9, 10, 11, 12};
  const float want[12] = {5, 0, 3, 4, 9, 2, 7, 8, 0, 6, 11, 12};
  float yv[12];
  sp_tensor x = sp_tensor_view(SP_F32, sp_shape4(3, 4, 1, 1), xv), y = sp_tensor_view(SP_F32, x.shape, yv);
  sp_op_args a = {.attr = &at, .n_in = 1, .in = {&x}, .out = &y};
  sp_op_tshift.forward(&a);
  for (int i = 0; i < 12; i++) assert_true(yv[i] == want[i]);
}

static void tshift_gradients(void **state) {
  (void)state;
  for (int ci = 0; ci < N_CASES; ci++) {
    const tshift_case *k = &CASES[ci];
    sp_tshift_attr at = {.segments = k->segments, .ratio_back = k->rb, .ratio_fwd = k->rf};
    sp_opcheck_case c = {.label = "tshift", .op = &sp_op_tshift, .attr = &at, .n_in = 1, .seed = 300 + (uint64_t)ci};
    c.in_shape[0] = sp_shape4(k->nt, k->c, k->h, k->w);
    sp_opcheck_gradients(&c);
  }
}

static void tshift_fixtures(void **state) {
  (void)state;
  struct {
    const char *file;
    sp_tshift_attr at;
  } f[] = {
      {"ops/tshift_t4_c16.safetensors", {4, 0.125f, 0.125f}},
      {"ops/tshift_t3_asym.safetensors", {3, 0.25f, 0.125f}},
      {"ops/tshift_t2_paddle.safetensors", {2, 0.2f, 0.2f}},
  };
  for (int i = 0; i < 3; i++) {
    sp_opcheck_case c = {.label = f[i].file, .op = &sp_op_tshift, .attr = &f[i].at, .n_in = 1};
    sp_opcheck_fixture(&c, f[i].file, 0, 1e-30); /* data movement: exact */
  }
}

static void tshift_shape_errors(void **state) {
  (void)state;
  char err[256] = "";
  sp_shape s = sp_shape4(6, 8, 2, 2), out;
  sp_tshift_attr at = {.segments = 4, .ratio_back = 0.125f, .ratio_fwd = 0.125f};
  assert_int_equal(sp_op_tshift.infer(&at, 1, &s, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "[6,8,2,2]"));
  assert_non_null(strstr(err, "segments=4"));
  sp_tshift_attr wide = {.segments = 2, .ratio_back = 0.75f, .ratio_fwd = 0.5f};
  assert_int_equal(sp_op_tshift.infer(&wide, 1, &s, 0, NULL, &out, err, sizeof err), -1);
  assert_non_null(strstr(err, "6+4 > C=8"));
  sp_tshift_attr zero = {.segments = 0};
  assert_int_equal(sp_op_tshift.infer(&zero, 1, &s, 0, NULL, &out, err, sizeof err), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(tshift_equals_composed), cmocka_unit_test(tshift_hand_case),
      cmocka_unit_test(tshift_gradients),       cmocka_unit_test(tshift_fixtures),
      cmocka_unit_test(tshift_shape_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
