/* A bf16 training plan's linear on a plain input (backends/cpu/linear_mm.c)
 * with a weight gradient larger than dw_amx.c's per-thread sums take (a
 * linear over a batch: vgg-face's fc1), computed on AMX tiles by
 * cpu_dw_amx_wide: against the reference backend, against oneDNN's matmul
 * on the same values (the switch off), added onto the gradient when not
 * told to overwrite it, and taken only where it applies. Rows (the batch)
 * of 5 and 40 (one and two steps of 32, padded with zeros), output blocks
 * of 16 in odd count (a 32 x 32 block's edge), input columns shared by two
 * threads unevenly. Skipped without AMX. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* [N, 5, 16, 13] -> 1040 -> 528 (33 blocks of 16: 549 K gradient values) -> 16. */
static sp_value b_wide(sp_graph *g, sp_value x) {
  x = sp_linear(g, sp_flatten(g, x), "fc1", 5 * 16 * 13, 528, 1);
  return sp_linear(g, sp_relu(g, x), "fc2", 528, 16, 0);
}

static void require_amx(void) {
  cmp_require_cpu();
  cmp_require_bf16();
  if (!cpu_amx_usable()) {
    printf("# no usable AMX here: the wide weight gradient does not run: skipped\n");
    skip();
  }
}

static cmp_case wide_case(int n) {
  return (cmp_case){n == 5 ? "wide dW, 5 rows" : "wide dW, 40 rows", b_wide, n, 5, 16, 13, 1, SP_PLAN_BF16, 6e-2, 0};
}

static void against_ref(void **st) {
  (void)st;
  require_amx();
  for (int n = 5; n <= 40; n += 35) {
    const cmp_case k = wide_case(n);
    cmp_run_counted(&k, &cpu_dw_amx_wide_calls, 1, "wide weight gradient");
  }
}

static void tiles_or_onednn(int path) { cpu_conv_use_dw_amx = path == 0; }

/* The tiles and oneDNN's matmul sum the same bf16 products in f32, in
 * other orders. */
static void same_as_onednn(void **st) {
  (void)st;
  require_amx();
  for (int n = 5; n <= 40; n += 35) {
    const cmp_case k = wide_case(n);
    const long before = cpu_dw_amx_wide_calls;
    cmp_two_paths_with(&k, tiles_or_onednn, 1e-5, NULL);
    assert_int_equal(cpu_dw_amx_wide_calls, before + 1); /* the tiles' plan's step, not oneDNN's */
  }
  cpu_conv_use_dw_amx = 1;
}

/* Without sp_plan_zero_grad between two steps the gradient adds (the
 * tiles start from dW). */
static void gradient_adds(void **st) {
  (void)st;
  require_amx();
  const cmp_case k = wide_case(40);
  const long before = cpu_dw_amx_wide_calls;
  cmp_grad_adds_twice(&k, "fc1.weight", 3);
  assert_int_equal(cpu_dw_amx_wide_calls - before, 2);
}

static void taken_where_it_applies(void **st) {
  (void)st;
  require_amx();
  assert_true(cpu_dw_amx_wide_fits(64, 1024, 6272)); /* vgg-face's fc1 at batch 64 */
  assert_true(cpu_dw_amx_wide_fits(256, 528, 1040));
  assert_false(cpu_dw_amx_wide_fits(257, 528, 1040)); /* more rows: oneDNN's matmul */
  assert_false(cpu_dw_amx_wide_fits(64, 512, 1024));  /* 512 K values: cpu_dw_amx's sums */
  assert_false(cpu_dw_amx_wide_fits(64, 520, 1040));  /* not in 16s */
  cpu_conv_use_dw_amx = 0;
  assert_false(cpu_dw_amx_wide_fits(64, 1024, 6272));
  cpu_conv_use_dw_amx = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(same_as_onednn), cmocka_unit_test(gradient_adds),
             cmocka_unit_test(taken_where_it_applies))
