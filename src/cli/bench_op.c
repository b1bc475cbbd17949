/* `spry bench op tshift --shape NT,C,H,W --segments S --ratio R [--runs N]`
 *
 * The fused temporal shift against the composed version the seed's Python
 * builds from framework ops
 * (reshape -> pad -> three slices -> concat, each its own buffer, and their
 * backward: concat-split, slice scatter into a zeroed padded gradient, pad
 * crop; the zeroing is timed, as every framework pays it), written here in C
 * with the same parallel copies, and against a
 * plain parallel memcpy of the same bytes (the speed limit of any shift).
 * The fused figures (fwd_ms, fwdbwd_ms) are the cpu backend's kernel
 * (backends/cpu/tshift.c) in the blocked layout TSM trains in (nChw16c),
 * writing a fresh input gradient as the composed crop does; ref_* are the
 * reference op (ops/tshift.c, plain layout, accumulating backward, its
 * gradient zeroed outside the timed region as a plan would). One JSON line. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli_video.h"
#include "io/json.h"
#include "ops/ops.h"
#ifdef SPRY_HAVE_DNNL
#include "backends/cpu/cpu.h"
#endif

typedef struct {
  int64_t n, t, c, hw; /* clips, segments, channels, pixels per plane */
  int64_t c1, c2;      /* the seed's channel boundaries: int(C r), int(2 C r) */
  float *x, *pad, *s1, *s2, *s3, *out;
  float *dout, *ds1, *ds2, *ds3, *dpad, *dx;
} composed;

/* Copies channels [c0, c0+nc) of frames [f0, f0+T) of a [N, Tsrc, C, HW]
 * tensor into a [N, T, nc, HW] one: what a framework's slice does. */
static void slice_copy(const float *src, int64_t tsrc, int64_t f0, int64_t c, int64_t c0, int64_t nc, float *dst,
                       int64_t n, int64_t t, int64_t hw) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; i++)
    for (int64_t f = 0; f < t; f++)
      memcpy(dst + ((i * t + f) * nc) * hw, src + ((i * tsrc + f0 + f) * c + c0) * hw, (size_t)(nc * hw) * 4);
}

/* The inverse: [N, T, nc, HW] into channels c0.. of frames f0.. of [N, Tdst, C, HW]. */
static void slice_put(const float *src, int64_t nc, float *dst, int64_t tdst, int64_t f0, int64_t c, int64_t c0,
                      int64_t n, int64_t t, int64_t hw) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; i++)
    for (int64_t f = 0; f < t; f++)
      memcpy(dst + ((i * tdst + f0 + f) * c + c0) * hw, src + ((i * t + f) * nc) * hw, (size_t)(nc * hw) * 4);
}

static void zero(float *p, int64_t n);

static void composed_forward(composed *m) {
  const int64_t n = m->n, t = m->t, c = m->c, hw = m->hw, frame = c * hw;
  /* pad: [N, T+2, C, HW] with zero first and last frames */
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    memset(m->pad + (i * (t + 2)) * frame, 0, (size_t)frame * 4);
    memcpy(m->pad + (i * (t + 2) + 1) * frame, m->x + i * t * frame, (size_t)(t * frame) * 4);
    memset(m->pad + (i * (t + 2) + t + 1) * frame, 0, (size_t)frame * 4);
  }
  /* The seed (Paddle's convention) takes the first group from t-1 and the
   * second from t+1; ops/tshift.c the mirror (first from t+1). Same bytes
   * moved either way; this follows the op so the outputs can be compared. */
  slice_copy(m->pad, t + 2, 2, c, 0, m->c1, m->s1, n, t, hw);
  slice_copy(m->pad, t + 2, 0, c, m->c1, m->c2 - m->c1, m->s2, n, t, hw);
  slice_copy(m->pad, t + 2, 1, c, m->c2, c - m->c2, m->s3, n, t, hw);
  /* concat along channels */
  slice_put(m->s1, m->c1, m->out, t, 0, c, 0, n, t, hw);
  slice_put(m->s2, m->c2 - m->c1, m->out, t, 0, c, m->c1, n, t, hw);
  slice_put(m->s3, c - m->c2, m->out, t, 0, c, m->c2, n, t, hw);
}

static void composed_backward(composed *m) {
  const int64_t n = m->n, t = m->t, c = m->c, hw = m->hw, frame = c * hw;
  /* Each slice's backward starts from a zeroed gradient of the padded
   * tensor (frameworks allocate it zero-filled); here the three share one. */
  zero(m->dpad, m->n * (t + 2) * frame);
  /* concat backward: split the gradient into the three slices */
  slice_copy(m->dout, t, 0, c, 0, m->c1, m->ds1, n, t, hw);
  slice_copy(m->dout, t, 0, c, m->c1, m->c2 - m->c1, m->ds2, n, t, hw);
  slice_copy(m->dout, t, 0, c, m->c2, c - m->c2, m->ds3, n, t, hw);
  /* slice backward: scatter into the (zeroed) padded gradient */
  slice_put(m->ds1, m->c1, m->dpad, t + 2, 2, c, 0, n, t, hw);
  slice_put(m->ds2, m->c2 - m->c1, m->dpad, t + 2, 0, c, m->c1, n, t, hw);
  slice_put(m->ds3, c - m->c2, m->dpad, t + 2, 1, c, m->c2, n, t, hw);
  /* pad backward: crop */
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++)
    memcpy(m->dx + i * t * frame, m->dpad + (i * (t + 2) + 1) * frame, (size_t)(t * frame) * 4);
}

static float *buf(int64_t n) {
  float *p = sp_aligned_alloc((size_t)n * 4);
  /* Touch every page once: first-touch costs are not what is measured. */
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) p[i] = (float)(i % 97) * 0.01f;
  return p;
}

static void par_memcpy(float *dst, const float *src, int64_t n) {
  int64_t chunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += chunk) memcpy(dst + i, src + i, (size_t)(n - i < chunk ? n - i : chunk) * 4);
}

static void zero(float *p, int64_t n) {
  int64_t chunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += chunk) memset(p + i, 0, (size_t)(n - i < chunk ? n - i : chunk) * 4);
}

static void usage(FILE *f) {
  fprintf(f, "usage: spry bench op tshift --shape NT,C,H,W --segments S --ratio R [--runs N] [--threads T]\n"
             "  the fused temporal shift (the cpu backend's kernel in nChw16c, and the reference op)\n"
             "  against the seed's composed version (pad, three slices, concat; and their backward)\n"
             "  and a parallel memcpy of the same bytes; one JSON line. --ratio: 0.125 or 1/8\n");
}

int sp_cli_bench_op(int argc, char **argv) {
  int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
  if (help || argc < 2 || strcmp(argv[1], "tshift")) {
    usage(help ? stdout : stderr);
    return help ? 0 : 2;
  }
  const char *shape_s = "32,16,32,32";
  int segments = 2, runs = 20, threads = omp_get_max_threads();
  float ratio = 0.2f;
  for (int i = 2; i < argc; i++) {
    int r;
    const char *rs = NULL;
    if ((r = sp_arg_str(argc, argv, &i, "--shape", &shape_s)) || (r = sp_arg_int(argc, argv, &i, "--segments", 1, 4096, &segments)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 1, 1024, &threads)) || (r = sp_arg_str(argc, argv, &i, "--ratio", &rs))) {
      if (r < 0) return 2;
      if (rs) {
        /* "1/8" or "0.125" */
        int a, b;
        ratio = sscanf(rs, "%d/%d", &a, &b) == 2 && b ? (float)a / b : (float)atof(rs);
      }
      continue;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
    fprintf(stderr, "spry bench op: unknown option %s\n", argv[i]);
    usage(stderr);
    return 2;
  }
  long long d[4];
  if (sscanf(shape_s, "%lld,%lld,%lld,%lld", &d[0], &d[1], &d[2], &d[3]) != 4 || d[0] % segments || d[0] < 1 ||
      d[1] < 1 || d[2] < 1 || d[3] < 1) {
    fprintf(stderr, "spry bench op: --shape must be NT,C,H,W with NT a multiple of --segments\n");
    return 2;
  }
  /* Two shifted groups of ratio * C channels each must fit in C. */
  if (!(ratio >= 0 && ratio <= 0.5f)) {
    fprintf(stderr, "spry bench op: --ratio must be in [0, 0.5] (each of the two shifted groups is ratio * C channels)\n");
    return 2;
  }
  /* About 16 tensors of the shape's size (the composed version's
   * intermediates, the fused op's, the copy's): refuse what cannot fit
   * instead of dying in the allocator. */
  const double need = 16.0 * 4 * (double)d[0] * (double)d[1] * (double)d[2] * (double)d[3];
  const double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
  if (!(need <= 0.8 * ram)) {
    fprintf(stderr, "spry bench op: --shape %s needs about %.1f GB, this machine has %.1f GB\n", shape_s, need / 1e9,
            ram / 1e9);
    return 2;
  }
  omp_set_num_threads(threads);
  composed m = {.n = d[0] / segments, .t = segments, .c = d[1], .hw = d[2] * d[3]};
  /* The seed's boundaries: c1 = int(C r), c2 = int(2 C r); the fused op with
   * back = fwd = r shifts the same channel groups when C r is whole. */
  m.c1 = (int64_t)(m.c * ratio);
  m.c2 = (int64_t)(m.c * 2 * ratio);
  const int64_t numel = d[0] * d[1] * d[2] * d[3], padded = m.n * (m.t + 2) * m.c * m.hw;
  m.x = buf(numel), m.out = buf(numel), m.dout = buf(numel), m.dx = buf(numel);
  m.pad = buf(padded), m.dpad = buf(padded);
  m.s1 = buf(numel * m.c1 / m.c + 1), m.s2 = buf(numel * (m.c2 - m.c1) / m.c + 1), m.s3 = buf(numel * (m.c - m.c2) / m.c + 1);
  m.ds1 = buf(numel * m.c1 / m.c + 1), m.ds2 = buf(numel * (m.c2 - m.c1) / m.c + 1), m.ds3 = buf(numel * (m.c - m.c2) / m.c + 1);
  float *fy = buf(numel), *fdx = buf(numel);

  sp_shape s4 = sp_shape4(d[0], d[1], d[2], d[3]);
  sp_tensor tx = sp_tensor_view(SP_F32, s4, m.x), ty = sp_tensor_view(SP_F32, s4, fy);
  sp_tensor tdy = sp_tensor_view(SP_F32, s4, m.dout), tdx = sp_tensor_view(SP_F32, s4, fdx);
  sp_tshift_attr at = {segments, ratio, ratio};
  sp_op_args a;
  memset(&a, 0, sizeof a);
  a.attr = &at, a.n_in = 1, a.in[0] = &tx, a.out = &ty, a.d_in[0] = &tdx, a.d_out = &tdy, a.training = 1;

  double *ref_tf = malloc(sizeof(double) * runs), *ref_tfb = malloc(sizeof(double) * runs);
  double *tf = malloc(sizeof(double) * runs), *tfb = malloc(sizeof(double) * runs), *tc = malloc(sizeof(double) * runs),
         *tcf = malloc(sizeof(double) * runs), *tm = malloc(sizeof(double) * runs);
  for (int r = -2; r < runs; r++) { /* two warm-up rounds */
    double t0 = sp_now();
    sp_op_tshift.forward(&a);
    double t1 = sp_now();
    zero(fdx, numel);
    double t2 = sp_now();
    sp_op_tshift.backward(&a);
    double t3 = sp_now();
    composed_forward(&m);
    double t5 = sp_now();
    composed_backward(&m);
    double t6 = sp_now();
    par_memcpy(fy, m.x, numel);
    double t7 = sp_now();
    if (r < 0) continue;
    ref_tf[r] = t1 - t0, ref_tfb[r] = (t1 - t0) + (t3 - t2), tcf[r] = t5 - t3, tc[r] = t6 - t3, tm[r] = t7 - t6;
  }
  /* The cpu backend's kernel on nChw16c buffers (padded to 16 channels). */
  double blk_f = NAN, blk_fb = NAN;
#ifdef SPRY_HAVE_DNNL
  {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {d[0], d[1], d[2], d[3]};
    sp_op_prep pr = {.op = &sp_op_tshift, .attr = &at, .n_in = 1, .training = 1, .run_backward = 1};
    pr.in_shape[0] = pr.out_shape = s4;
    pr.in_dtype[0] = SP_F32;
    pr.in_layout[0] = &md;
    pr.need_d_in[0] = 1;
    if (dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_aBcd16b) == dnnl_success &&
        cpu_tshift_prepare(&pr) == 0) {
      cpu_node *node = pr.state;
      int64_t nb = (int64_t)(cpu_md_bytes(&md) / 4);
      float *bx = buf(nb), *by = buf(nb), *bdy = buf(nb), *bdx = buf(nb);
      sp_tensor vx = sp_tensor_view(SP_F32, s4, bx), vy = sp_tensor_view(SP_F32, s4, by);
      sp_tensor vdy = sp_tensor_view(SP_F32, s4, bdy), vdx = sp_tensor_view(SP_F32, s4, bdx);
      sp_op_args ba = a;
      ba.in[0] = &vx, ba.out = &vy, ba.d_out = &vdy, ba.d_in[0] = &vdx, ba.impl = node, ba.d_in_fresh = 1;
      for (int r = -2; r < runs; r++) {
        double t0 = sp_now();
        node->vt->forward(node, &ba);
        double t1 = sp_now();
        node->vt->backward(node, &ba);
        double t2 = sp_now();
        if (r < 0) continue;
        tf[r] = t1 - t0, tfb[r] = t2 - t0;
      }
      blk_f = sp_median(tf, runs), blk_fb = sp_median(tfb, runs);
      sp_aligned_free(bx), sp_aligned_free(by), sp_aligned_free(bdy), sp_aligned_free(bdx);
      cpu_node_free(node);
    }
  }
#endif
  /* The fused op must equal the composed one, forward and backward, where
   * C r is whole. */
  int equal = 1;
  sp_op_tshift.forward(&a);
  zero(fdx, numel);
  sp_op_tshift.backward(&a);
  composed_forward(&m);
  composed_backward(&m);
  if (m.c1 * 2 == m.c2 && m.c1 == (int64_t)((float)m.c * ratio))
    equal = !memcmp(fy, m.out, (size_t)numel * 4) && !memcmp(fdx, m.dx, (size_t)numel * 4);
  double ref_fwd = sp_median(ref_tf, runs), ref_fwdbwd = sp_median(ref_tfb, runs), comp = sp_median(tc, runs),
         compf = sp_median(tcf, runs), mem = sp_median(tm, runs);
  /* Headline: the fast backend's kernel when this build has it. */
  double fwd = isnan(blk_f) ? ref_fwd : blk_f, fwdbwd = isnan(blk_fb) ? ref_fwdbwd : blk_fb;
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "bench"), sp_json_str(&b, "op_tshift");
  sp_json_key(&b, "shape"), sp_json_str(&b, shape_s);
  sp_json_key(&b, "segments"), sp_json_int(&b, segments);
  sp_json_key(&b, "ratio"), sp_json_f64(&b, ratio);
  sp_json_key(&b, "threads"), sp_json_int(&b, threads);
  sp_json_key(&b, "runs"), sp_json_int(&b, runs);
  sp_json_key(&b, "kernel"), sp_json_str(&b, isnan(blk_f) ? "ref" : "cpu_nChw16c");
  sp_json_key(&b, "fwd_ms"), sp_json_f64(&b, fwd * 1e3);
  sp_json_key(&b, "fwdbwd_ms"), sp_json_f64(&b, fwdbwd * 1e3);
  sp_json_key(&b, "ref_fwd_ms"), sp_json_f64(&b, ref_fwd * 1e3);
  sp_json_key(&b, "ref_fwdbwd_ms"), sp_json_f64(&b, ref_fwdbwd * 1e3);
  sp_json_key(&b, "composed_fwd_ms"), sp_json_f64(&b, compf * 1e3);
  sp_json_key(&b, "composed_fwdbwd_ms"), sp_json_f64(&b, comp * 1e3);
  sp_json_key(&b, "memcpy_ms"), sp_json_f64(&b, mem * 1e3);
  sp_json_key(&b, "speedup_vs_composed"), sp_json_f64(&b, comp / fwdbwd);
  sp_json_key(&b, "speedup_vs_composed_fwd"), sp_json_f64(&b, compf / fwd);
  sp_json_key(&b, "fwd_vs_memcpy"), sp_json_f64(&b, fwd / mem);
  sp_json_key(&b, "same_output"), sp_json_bool(&b, equal);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
  free(ref_tf), free(ref_tfb), free(tf), free(tfb), free(tc), free(tcf), free(tm);
  float *all[] = {m.x, m.out, m.dout, m.dx, m.pad, m.dpad, m.s1, m.s2, m.s3, m.ds1, m.ds2, m.ds3, fy, fdx};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sp_aligned_free(all[i]);
  return 0;
}
