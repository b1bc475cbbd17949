/* Whether `precision: bf16` computes in bf16 here (sp_backend_bf16_pays):
 * only where bf16 kernels exist and are faster than f32 (AMX, or bf16 dot
 * products doing at least 1.2x the work of f32 FMA, timed once), with the
 * reason when not; SPRY_BF16=force and =off override it; a config's flags
 * follow the answer. The timing itself (core/cpu_peak.c) gives a ratio
 * where the CPU has AVX512_BF16 and 0 where it does not. */
#include <stdlib.h>
#include <string.h>

#include "backend_compare.h"
#include "core/cpu_peak.h"

#ifdef SPRY_HAVE_DNNL
#include "train/config_shared.h"

static void ratio_is_timed_where_the_instructions_exist(void **st) {
  (void)st;
  const double r = sp_peak_bf16_over_fp32();
  printf("# bf16 dot over f32 FMA, one thread: %.3f\n", r);
  if (!sp_peak_supported(SP_PEAK_DPBF16)) {
    assert_true(r == 0);
    return;
  }
  /* 2 bf16 products a lane against 1 f32 one: between an eighth and 4x on any CPU */
  assert_true(r > 0.125 && r < 4.0);
}

static void pays_only_where_bf16_is_faster(void **st) {
  (void)st;
  cmp_require_cpu();
  unsetenv("SPRY_BF16");
  const int kernels = sp_backend_bf16(SP_BACKEND_CPU), pays = sp_backend_bf16_pays(SP_BACKEND_CPU);
  const double r = sp_backend_cpu_bf16_ratio();
  printf("# bf16 kernels %d, pays %d, timed ratio %.3f (%s)\n", kernels, pays, r, pays ? "" : sp_last_error());
  if (!kernels) {
    assert_int_equal(pays, 0);
  } else if (pays) {
    /* AMX (not timed: r stays 0) or fast dot products */
    assert_true(r == 0 || r >= 1.2);
  } else {
    assert_true(r >= 0 && r < 1.2); /* 0: AVX-512 without AVX512_BF16, where oneDNN emulates bf16 */
    assert_non_null(strstr(sp_last_error(), "slower than f32"));
    assert_non_null(strstr(sp_last_error(), "SPRY_BF16=force"));
  }
  sp_error_clear();
  /* the flags a run config gets follow the answer */
  assert_int_equal(sp_config_precision_flags("bf16", SP_BACKEND_CPU), pays ? SP_PLAN_BF16 : 0u);
  assert_int_equal(sp_config_precision_flags("f32", SP_BACKEND_CPU), 0u);
  assert_string_equal(sp_config_precision_text("bf16", "cpu"), pays ? "bf16"
                                                               : kernels
                                                                   ? "f32 (bf16 asked: slower than f32 on this CPU)"
                                                                   : "f32 (bf16 asked: this CPU has no bf16 kernels)");
}

static void environment_overrides(void **st) {
  (void)st;
  cmp_require_cpu();
  const int kernels = sp_backend_bf16(SP_BACKEND_CPU);
  sp_error_clear();
  setenv("SPRY_BF16", "force", 1);
  assert_int_equal(sp_backend_bf16_pays(SP_BACKEND_CPU), kernels); /* forced, where kernels exist */
  assert_int_equal(sp_config_precision_flags("bf16", SP_BACKEND_CPU), kernels ? SP_PLAN_BF16 : 0u);
  sp_error_clear();
  setenv("SPRY_BF16", "off", 1);
  assert_int_equal(sp_backend_bf16_pays(SP_BACKEND_CPU), 0);
  assert_non_null(strstr(sp_last_error(), "SPRY_BF16=off"));
  sp_error_clear();
  assert_int_equal(sp_config_precision_flags("bf16", SP_BACKEND_CPU), 0u);
  unsetenv("SPRY_BF16");
  /* the ref backend never computes bf16 */
  assert_int_equal(sp_backend_bf16_pays(SP_BACKEND_REF), 0);
  sp_error_clear();
}
#endif

int main(void) {
#ifdef SPRY_HAVE_DNNL
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ratio_is_timed_where_the_instructions_exist),
      cmocka_unit_test(pays_only_where_bf16_is_faster),
      cmocka_unit_test(environment_overrides),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
#else
  printf("# cpu backend not built: skipped\n");
  return 77;
#endif
}
