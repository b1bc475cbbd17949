/* The weight reorders of our own (backends/cpu/reorder_w16.c) against
 * oneDNN's on the same values: every 16 x 16 blocked layout the convolutions
 * ask for, with plain layouts of either dim innermost (1x1 kernels in oihw
 * or iohw, larger ones channels-last: whole tiles) or the kernel positions
 * innermost (up to 3x3 in oihw / iohw: runs of 16 kernel-size values), f32 both
 * directions, written and added, and f32 into the bf16 pair-blocked
 * layouts. Larger kernels in oihw must stay oneDNN's. The bits must be equal: it is the same data movement, and an added
 * value is one f32 sum either way. */
#include "backend_compare.h"

#ifdef SPRY_HAVE_DNNL
#include "cpu_reorder_run.h"

/* src -> dst by oneDNN (own = 0) or by ours (own = 1); returns the path
 * ours took (cpu_exec .w16.on). */
static int reorder(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate, int own,
                   const void *from, void *to) {
  cpu_reorder_use_w16 = own;
  cpu_exec e;
  cpu_reorder_run(src, dst, accumulate, from, to, &e);
  cpu_reorder_use_w16 = 1;
  return e.w16.on;
}

static void fill(float *p, size_t n, uint64_t seed) {
  sp_test_rng rng = {seed};
  for (size_t i = 0; i < n; i++) p[i] = sp_test_rng_uniform(&rng, -1, 1);
}

/* One case both ways, written and added; returns the path ours took into
 * the plain layout. */
static int both_ways_agree(int ndims, const dnnl_dims_t dims, dnnl_format_tag_t blocked, dnnl_format_tag_t plain) {
  dnnl_memory_desc_t b, p;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b, ndims, dims, dnnl_f32, blocked), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&p, ndims, dims, dnnl_f32, plain), dnnl_success);
  /* A padded blocked layout is the larger one. */
  const size_t n = (dnnl_memory_desc_get_size(&b) > dnnl_memory_desc_get_size(&p) ? dnnl_memory_desc_get_size(&b)
                                                                                  : dnnl_memory_desc_get_size(&p)) /
                   sizeof(float);
  float *src = malloc(n * sizeof(float)), *ref = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
  int path[2] = {-1, -1};
  for (int dir = 0; dir < 2; dir++)
    for (int acc = 0; acc < 2; acc++) {
      const dnnl_memory_desc_t *from = dir ? &p : &b, *to = dir ? &b : &p;
      fill(src, n, 11 + (uint64_t)dir);
      fill(ref, n, 23), fill(got, n, 23); /* what an added reorder adds onto */
      assert_int_equal(reorder(from, to, acc, 0, src, ref), 0);
      const int ours = reorder(from, to, acc, 1, src, got);
      assert_true(path[dir] < 0 || ours == path[dir]);
      path[dir] = ours;
      assert_memory_equal(got, ref, n * sizeof(float));
    }
  free(src), free(ref), free(got);
  /* Plain f32 into f32 blocks by runs stays oneDNN's (it was as fast). */
  assert_int_equal(path[1], path[0] == W16_RUNS ? 0 : path[0]);
  return path[0];
}

static void weights_match_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_format_tag_t blocked[] = {dnnl_ABcd16b16a, dnnl_ABcd16a16b, dnnl_BAcd16a16b, dnnl_BAcd16b16a};
  const struct {
    dnnl_format_tag_t tag;
    int kernel, ours; /* the path ours must take */
  } plain[] = {{dnnl_abcd, 1, W16_TILES}, {dnnl_bacd, 1, W16_TILES}, {dnnl_acdb, 3, W16_TILES},
               {dnnl_cdba, 3, W16_TILES}, {dnnl_acdb, 2, W16_TILES}, {dnnl_abcd, 3, W16_RUNS},
               {dnnl_bacd, 3, W16_RUNS},  {dnnl_abcd, 2, W16_RUNS},  {dnnl_bacd, 2, W16_RUNS},
               {dnnl_abcd, 5, 0}};
  for (size_t b = 0; b < sizeof blocked / sizeof *blocked; b++)
    for (size_t q = 0; q < sizeof plain / sizeof *plain; q++) {
      const dnnl_dims_t dims = {32, 48, plain[q].kernel, plain[q].kernel};
      assert_int_equal(both_ways_agree(4, dims, blocked[b], plain[q].tag), plain[q].ours);
    }
}

/* Linear layers' weights [OUT, IN] (2D blocked layouts). */
static void matrices_match_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_dims_t dims = {64, 32};
  const dnnl_format_tag_t blocked[] = {dnnl_AB16b16a, dnnl_AB16a16b, dnnl_BA16a16b};
  for (size_t b = 0; b < sizeof blocked / sizeof *blocked; b++) {
    assert_int_equal(both_ways_agree(2, dims, blocked[b], dnnl_ab), W16_TILES);
    assert_int_equal(both_ways_agree(2, dims, blocked[b], dnnl_ba), W16_TILES);
  }
}

/* Large enough for both threads (the small ones run on one). */
static void large_weights_in_parallel(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_dims_t k1 = {512, 256, 1, 1}, k3 = {256, 128, 3, 3};
  assert_int_equal(both_ways_agree(4, k1, dnnl_ABcd16b16a, dnnl_abcd), W16_TILES);
  assert_int_equal(both_ways_agree(4, k3, dnnl_BAcd16a16b, dnnl_acdb), W16_TILES);
  assert_int_equal(both_ways_agree(4, k3, dnnl_ABcd16b16a, dnnl_abcd), W16_RUNS);
}

/* Plain f32 weights into the bf16 kernels' pair-blocked layouts (rounded
 * to nearest even, as oneDNN does). */
static int into_bf16_agrees(const dnnl_dims_t dims, dnnl_format_tag_t blocked, dnnl_format_tag_t plain) {
  dnnl_memory_desc_t b, p;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b, 4, dims, dnnl_bf16, blocked), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&p, 4, dims, dnnl_f32, plain), dnnl_success);
  const size_t n = dnnl_memory_desc_get_size(&p) / sizeof(float);
  assert_int_equal(dnnl_memory_desc_get_size(&b), n * sizeof(uint16_t));
  float *src = malloc(n * sizeof(float));
  uint16_t *ref = calloc(n, sizeof(uint16_t)), *got = calloc(n, sizeof(uint16_t));
  fill(src, n, 31);
  assert_int_equal(reorder(&p, &b, 0, 0, src, (float *)ref), 0);
  const int ours = reorder(&p, &b, 0, 1, src, (float *)got);
  assert_memory_equal(got, ref, n * sizeof(uint16_t));
  free(src), free(ref), free(got);
  return ours;
}

static void bf16_tiles_match_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_format_tag_t blocked[] = {dnnl_ABcd8b16a2b, dnnl_BAcd8a16b2a, dnnl_ABcd8a16b2a};
  const dnnl_dims_t k1 = {32, 64, 1, 1}, k3 = {48, 32, 3, 3}, k2 = {32, 64, 2, 2}, big = {512, 256, 1, 1};
  for (size_t b = 0; b < sizeof blocked / sizeof *blocked; b++) {
    assert_int_equal(into_bf16_agrees(k1, blocked[b], dnnl_abcd), W16_TILES);
    assert_int_equal(into_bf16_agrees(k1, blocked[b], dnnl_bacd), W16_TILES);
    assert_int_equal(into_bf16_agrees(k3, blocked[b], dnnl_acdb), W16_TILES);
    assert_int_equal(into_bf16_agrees(k3, blocked[b], dnnl_abcd), W16_RUNS);
    assert_int_equal(into_bf16_agrees(k3, blocked[b], dnnl_bacd), W16_RUNS);
    assert_int_equal(into_bf16_agrees(k2, blocked[b], dnnl_bacd), W16_RUNS); /* transposed convolutions */
  }
  assert_int_equal(into_bf16_agrees(big, dnnl_ABcd8b16a2b, dnnl_abcd), W16_TILES);
  /* Never the other way, nor added. */
  dnnl_memory_desc_t bd, pd;
  cpu_w16 t;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&bd, 4, k1, dnnl_bf16, dnnl_ABcd8b16a2b), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&pd, 4, k1, dnnl_f32, dnnl_abcd), dnnl_success);
  assert_int_equal(cpu_w16_of(&t, &pd, &bd, 1), 0);
  assert_int_equal(cpu_w16_of(&t, &bd, &pd, 0), 0);
}

/* What ours leaves to oneDNN: channel counts not in 16s (padded blocks),
 * bf16 gradients, layouts blocked one way, and the switch off (kernels
 * larger than 3x3 in oihw: weights_match_onednn). */
static void other_reorders_stay_onednn(void **s) {
  (void)s;
  cmp_require_cpu();
  const dnnl_dims_t odd = {24, 32, 1, 1}, ok = {32, 32, 3, 3};
  assert_int_equal(both_ways_agree(4, odd, dnnl_ABcd16b16a, dnnl_abcd), 0);
  assert_int_equal(both_ways_agree(4, ok, dnnl_aBcd16b, dnnl_abcd), 0);
  dnnl_memory_desc_t b, p;
  cpu_w16 t;
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b, 4, ok, dnnl_bf16, dnnl_ABcd16b16a), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&p, 4, ok, dnnl_bf16, dnnl_abcd), dnnl_success);
  assert_int_equal(cpu_w16_of(&t, &b, &p, 0), 0);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&b, 4, ok, dnnl_f32, dnnl_ABcd16b16a), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&p, 4, ok, dnnl_f32, dnnl_abcd), dnnl_success);
  assert_int_equal(dnnl_memory_desc_init_by_tag(&p, 4, ok, dnnl_f32, dnnl_acdb), dnnl_success);
  assert_int_equal(cpu_w16_of(&t, &b, &p, 1), W16_TILES);
  cpu_reorder_use_w16 = 0;
  assert_int_equal(cpu_w16_of(&t, &b, &p, 1), 0);
  cpu_reorder_use_w16 = 1;
}
#endif

CMP_CPU_MAIN(cmocka_unit_test(weights_match_onednn), cmocka_unit_test(matrices_match_onednn),
             cmocka_unit_test(large_weights_in_parallel), cmocka_unit_test(bf16_tiles_match_onednn),
             cmocka_unit_test(other_reorders_stay_onednn))
