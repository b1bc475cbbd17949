/* The input gradient of f32 1x1 stride-1 convolutions that add onto another
 * reader's, as a forward convolution with W^T and a sum post-op
 * (backends/cpu/conv_dx_fwd.c): against the reference backend, against
 * oneDNN's backward data + accumulating reorder on the same values, and
 * ready where the rule says. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"

/* Two 1x1 layers read one value (ResUNet's decoder block: conv1 and the
 * shortcut): the second's input gradient adds onto the first's. */
static sp_value b_two_readers(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  sp_value a = sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch = 48, .kernel = 1});
  sp_value b = sp_conv2d(g, x, "shortcut", (sp_conv_args){.out_ch = 48, .kernel = 1, .bias = 1});
  return sp_conv2d(g, sp_relu(g, sp_add(g, a, b)), "post", (sp_conv_args){.out_ch = 4, .kernel = 1});
}

/* A ResNet bottleneck: the block's input read by conv1 and by the residual
 * add (absorbed into the last batch norm, whose backward writes first). */
static sp_value b_bottleneck(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "stem", (sp_conv_args){.out_ch = 64, .kernel = 3, .pad = 1}), "bn0"));
  sp_value h = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, x, "conv1", (sp_conv_args){.out_ch = 16, .kernel = 1}), "bn1"));
  h = sp_relu(g, sp_batchnorm(g, sp_conv2d(g, h, "conv2", (sp_conv_args){.out_ch = 16, .kernel = 3, .pad = 1}), "bn2"));
  h = sp_batchnorm(g, sp_conv2d(g, h, "conv3", (sp_conv_args){.out_ch = 64, .kernel = 1}), "bn3");
  return sp_conv2d(g, sp_relu(g, sp_add(g, h, x)), "head", (sp_conv_args){.out_ch = 3, .kernel = 1});
}

/* The same after one more 3x3 layer: the image's first layer writes a
 * layout of its own in bf16 without AMX, the second 16-channel blocks. */
static sp_value b_two_readers_deeper(sp_graph *g, sp_value x) {
  x = sp_relu(g, sp_conv2d(g, x, "pre0", (sp_conv_args){.out_ch = 32, .kernel = 3, .pad = 1}));
  return b_two_readers(g, x);
}

static void against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  const long before = cpu_dxfwd_calls;
  cmp_case k = {"dx fwd two readers", b_two_readers, 2, 5, 12, 10, 1, 0, 0, 0};
  cmp_run(&k);
  const long mid = cpu_dxfwd_calls;
  k = (cmp_case){"dx fwd bottleneck", b_bottleneck, 3, 3, 9, 11, 1, 0, 0, 0};
  cmp_run(&k);
  printf("# forward-convolution input gradients run: %ld, %ld\n", mid - before, cpu_dxfwd_calls - mid);
  assert_true(mid > before);
  assert_true(cpu_dxfwd_calls > mid);
}

/* bf16 plans take it where oneDNN picks 16-channel blocks, which it does
 * without AMX (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, as the sanitizer build
 * runs); with AMX 1x1 backward runs as matrix products (conv_mm.c). */
static void bf16_against_ref(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_require_bf16();
  const long before = cpu_dxfwd_calls;
  cmp_case k = {"dx fwd two readers bf16", b_two_readers_deeper, 2, 5, 12, 10, 1, SP_PLAN_BF16, 6e-2, 0};
  cmp_run(&k);
  const int amx = dnnl_get_effective_cpu_isa() >= dnnl_cpu_isa_avx512_core_amx;
  printf("# forward-convolution input gradients run: %ld (AMX: %d)\n", cpu_dxfwd_calls - before, amx);
  if (!amx) assert_true(cpu_dxfwd_calls > before);
}

static void fwd_or_onednn(int path) { cpu_conv_use_dx_fwd = path == 0; }

/* The same f32 products: the gradients agree to f32 rounding (here bit for
 * bit: both kernels sum over OC in one order, and the add is one rounding
 * either way). */
static void same_as_onednn(void **st) {
  (void)st;
  cmp_require_cpu();
  cmp_case k = {"dx fwd two readers vs onednn", b_two_readers, 2, 5, 12, 10, 1, 0, 0, 0};
  cmp_two_paths(&k, fwd_or_onednn, 1e-5);
  k = (cmp_case){"dx fwd bottleneck vs onednn", b_bottleneck, 3, 3, 9, 11, 1, 0, 0, 0};
  cmp_two_paths(&k, fwd_or_onednn, 1e-5);
  cpu_conv_use_dx_fwd = 1;
}

/* Whether a training convolution of this shape, its input in `tag`, has
 * the path ready (it is bound where the gradient is added). */
static int ready(int ic, int oc, int k, int stride, int bf16, dnnl_format_tag_t tag) {
  void *state = cmp_conv_node(2, ic, oc, 14, 10, k, stride, 0, bf16, tag);
  const int r = cpu_conv_dx_fwd_ready(state);
  cpu_node_free(state);
  return r;
}

static void ready_where_it_applies(void **st) {
  (void)st;
  cmp_require_cpu();
  /* The blocks oneDNN's f32 kernels take here: 16 channels with AVX-512, 8 below. */
  const dnnl_format_tag_t blk = sp_backend_cpu_avx512() ? dnnl_aBcd16b : dnnl_aBcd8b;
  assert_int_equal(ready(64, 32, 1, 1, 0, blk), 1);
  assert_int_equal(ready(256, 64, 1, 1, 0, blk), 1);
  assert_int_equal(ready(64, 32, 3, 1, 0, blk), 0); /* 3x3 */
  assert_int_equal(ready(64, 32, 1, 2, 0, blk), 0); /* stride 2 */
  if (cmp_bf16_here()) assert_int_equal(ready(64, 32, 1, 1, 1, dnnl_aBcd16b), 1); /* bf16 in blocks too */
  assert_int_equal(ready(64, 32, 1, 1, 0, dnnl_abcd), 0);    /* the input plain (an image) */
  cpu_conv_use_dx_fwd = 0;
  assert_int_equal(ready(64, 32, 1, 1, 0, blk), 0);
  cpu_conv_use_dx_fwd = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(against_ref), cmocka_unit_test(bf16_against_ref), cmocka_unit_test(same_as_onednn),
             cmocka_unit_test(ready_where_it_applies))
