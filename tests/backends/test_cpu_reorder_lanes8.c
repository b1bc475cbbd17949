/* The 8-channel activation reorders of our own (backends/cpu/reorder_lanes8.c)
 * against oneDNN's on the same values: one 16-channel block (half padding)
 * to channels-last and back, f32 and bf16, position counts that leave tails
 * after the whole 64-byte lines, on one thread and on all, with the output
 * past the caches and not. The bytes must be equal, the padding included
 * (both write it as zeros). Then where the path is not taken, and
 * ResUNet-50's last decoder block (1x1 -> 3x3 -> 1x1 at 8 channels) through
 * a frozen inference plan against the reference backend. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "cpu_reorder_run.h"

/* src -> dst by oneDNN (own = 0) or by ours (own = 1); returns the path
 * ours took (cpu_exec .lanes8.on). */
static int reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate, int own,
                   const void *from, void *to) {
  cpu_reorder_use_lanes8 = own;
  cpu_exec e;
  cpu_reorder_run(src, dst, accumulate, from, to, &e);
  cpu_reorder_use_lanes8 = 1;
  return e.lanes8.on;
}

static void fill_bytes(unsigned char *p, size_t n, uint64_t seed) {
  sp_test_rng rng = {seed};
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(sp_test_rng_next(&rng) >> 24);
}

/* Random values of the dtype (finite: oneDNN's reorder may canonicalise
 * what is not a number). */
static void fill_values(void *p, size_t count, dnnl_data_type_t dt, uint64_t seed) {
  sp_test_rng rng = {seed};
  for (size_t i = 0; i < count; i++) {
    const float v = sp_test_rng_uniform(&rng, -4, 4);
    if (dt == dnnl_f32) {
      ((float *)p)[i] = v;
    } else {
      uint32_t b;
      memcpy(&b, &v, 4);
      ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
    }
  }
}

/* Both directions of one shape; the destination starts as junk, so the
 * padding must be written. Returns how many of the two ours ran. */
static int both_ways_agree(const dnnl_dims_t dims, dnnl_data_type_t dt) {
  dnnl_memory_desc_t blocked, cl;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&blocked, 4, dims, dt, dnnl_aBcd16b), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&cl, 4, dims, dt, dnnl_acdb), dnnl_success);
  const size_t big = dnnl_memory_desc_get_size(&blocked), esize = dt == dnnl_f32 ? 4 : 2;
  assert_int_equal(big, 2 * dnnl_memory_desc_get_size(&cl));
  /* 64-byte aligned, as plan buffers are (the streamed stores need it);
   * aligned_alloc wants a size in whole alignments. */
  const size_t alloc = (big + 63) / 64 * 64;
  unsigned char *src = aligned_alloc(64, alloc), *ref = aligned_alloc(64, alloc), *got = aligned_alloc(64, alloc);
  int ran = 0;
  for (int dir = 0; dir < 2; dir++) {
    const dnnl_memory_desc_t *from = dir ? &cl : &blocked, *to = dir ? &blocked : &cl;
    fill_values(src, big / esize, dt, 7 + (uint64_t)dir); /* the blocked source's padding is junk too */
    fill_bytes(ref, big, 19), fill_bytes(got, big, 19);
    assert_int_equal(reorder(from, to, 0, 0, src, ref), 0);
    ran += reorder(from, to, 0, 1, src, got);
    assert_memory_equal(got, ref, dnnl_memory_desc_get_size(to));
  }
  free(src), free(ref), free(got);
  return ran;
}

static void matches_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  /* 70 positions: a tail of 2 after bf16's 4-position lines; 323 odd (f32's
   * pairs); 36864 large enough for both threads (from 256 KB). */
  const dnnl_dims_t shapes[] = {{2, 8, 5, 7}, {1, 8, 17, 19}, {4, 8, 96, 96}};
  const dnnl_data_type_t dts[] = {dnnl_f32, dnnl_bf16};
  for (int stream = 0; stream < 2; stream++) {
    cpu_bn_stream_bytes = stream ? 0 : (int64_t)1 << 40; /* every output past the caches, or none */
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
      for (size_t d = 0; d < 2; d++) assert_int_equal(both_ways_agree(shapes[i], dts[d]), 2);
  }
  cpu_bn_stream_bytes = -1;
}

/* Only 8 channels between one 16-channel block and channels-last, written. */
static void taken_only_where_it_fits(void **s) {
  (void)s;
  cmp_require_cpu();
  cpu_lanes8 t;
  dnnl_memory_desc_t b8, c8, b16c, c16, e8, cbf;
  const dnnl_dims_t d8 = {2, 8, 4, 4}, d16 = {2, 16, 4, 4};
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b8, 4, d8, dnnl_f32, dnnl_aBcd16b), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&c8, 4, d8, dnnl_f32, dnnl_acdb), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&e8, 4, d8, dnnl_f32, dnnl_aBcd8b), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&cbf, 4, d8, dnnl_bf16, dnnl_acdb), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b16c, 4, d16, dnnl_f32, dnnl_aBcd16b), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&c16, 4, d16, dnnl_f32, dnnl_acdb), dnnl_success);
  assert_int_equal(cpu_lanes8_of(&t, &b8, &c8, 0), 1);
  assert_int_equal(t.to_channels_last, 1);
  assert_int_equal(cpu_lanes8_of(&t, &c8, &b8, 0), 1);
  assert_int_equal(t.to_channels_last, 0);
  assert_int_equal(cpu_lanes8_of(&t, &b8, &c8, 1), 0);    /* added: oneDNN's */
  assert_int_equal(cpu_lanes8_of(&t, &b16c, &c16, 0), 0); /* 16 channels: no padding */
  assert_int_equal(cpu_lanes8_of(&t, &e8, &c8, 0), 0);    /* 8-channel blocks */
  assert_int_equal(cpu_lanes8_of(&t, &b8, &cbf, 0), 0);   /* a dtype change */
  assert_int_equal(cpu_lanes8_of(&t, &c8, &c8, 0), 0);    /* the same layout */
}

/* ResUNet-50's last decoder block as a frozen plan runs it: a 32-channel
 * up-layer (a 2x2 stride-2 transposed convolution, which a frozen f32
 * plan writes in 16-channel blocks), then 32 -> 8 (1x1),
 * 8 -> 8 (3x3), 8 -> 32 (1x1), each with its batch norm folded, ReLUs, and
 * the residual add absorbed by the last layer; against the reference. */
static sp_value conv_bn(sp_graph *g, sp_value x, const char *name, int out, int k) {
  char bn[16];
  snprintf(bn, sizeof bn, "%s.bn", name);
  return sp_batchnorm(g, sp_conv2d(g, x, name, (sp_conv_args){.out_ch = out, .kernel = k, .pad = k / 2}), bn);
}

static sp_value narrow_block(sp_graph *g, sp_value x) {
  x = sp_conv_transpose2d(g, x, "up", (sp_deconv_args){.out_ch = 32, .kernel = 2, .stride = 2});
  x = sp_relu(g, sp_batchnorm(g, x, "up.bn"));
  sp_value y = sp_relu(g, conv_bn(g, x, "conv1", 8, 1));
  y = sp_relu(g, conv_bn(g, y, "conv2", 8, 3));
  return sp_relu(g, sp_add(g, conv_bn(g, y, "conv3", 32, 1), x));
}

static void narrow_block_matches_reference(void **s) {
  (void)s;
  cmp_require_cpu();
  for (int bf16 = 0; bf16 < 2; bf16++) {
    if (bf16 && !sp_backend_cpu_bf16()) continue;
    cmp_case k = {"8-channel block",
                  narrow_block,
                  2,
                  16,
                  10,
                  10,
                  0,
                  SP_PLAN_FROZEN | (bf16 ? SP_PLAN_BF16 : 0),
                  bf16 ? 6e-2 : 1e-4,
                  0};
    const long before = cpu_lanes8_runs;
    cmp_run(&k);
    /* f32 with AVX-512: oneDNN puts the 1x1 layers on 16-channel blocks and
     * the 3x3 layer channels-last, so the plan reorders between them. */
    if (!bf16 && sp_backend_cpu_avx512()) assert_true(cpu_lanes8_runs > before);
  }
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(matches_onednn), cmocka_unit_test(taken_only_where_it_fits),
             cmocka_unit_test(narrow_block_matches_reference))
