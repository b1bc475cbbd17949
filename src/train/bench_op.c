/* `sp_bench_tshift` (spry/bench.h, `spry bench op tshift`): the fused
 * temporal shift against the composed version the seed's Python builds from
 * framework ops (reshape -> pad -> three slices -> concat, each its own
 * buffer, and their backward: concat-split, slice scatter into a zeroed padded
 * gradient, pad crop; the zeroing is timed, as every framework pays it),
 * written here in C with the same parallel copies, and against a plain
 * parallel memcpy of the same bytes (the speed limit of any shift). The fused
 * figures are the cpu backend's kernel (backends/cpu/tshift.c, timed by the
 * backend in the blocked layout TSM trains in, nChw16c, writing a fresh input
 * gradient as the composed crop does); ref_* are the reference op
 * (ops/tshift.c, plain layout, accumulating backward, its gradient zeroed
 * outside the timed region as a plan would). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "ops/ops.h"
#include "spry/bench.h"

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

sp_bench_tshift_options sp_bench_tshift_options_default(void) {
  return (sp_bench_tshift_options){.shape = {32, 16, 32, 32}, .segments = 2, .ratio = 0.2f, .runs = 20};
}

int sp_bench_tshift_fits(const sp_bench_tshift_options *o, double *need, double *have) {
  const int64_t *d = o->shape;
  *need = 16.0 * 4 * (double)d[0] * (double)d[1] * (double)d[2] * (double)d[3];
  *have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
  return *need <= 0.8 * *have;
}

/* The timings of every round (one array per figure, `runs` each). */
typedef struct {
  double *ref_f, *ref_fb, *comp_f, *comp_fb, *mem, *cpu_f, *cpu_fb;
} round_times;

/* The reference op, the composed version and the memcpy, round by round. */
static void time_rounds(composed *m, const sp_op_args *a, float *fy, float *fdx, int64_t numel, int runs,
                        round_times *t) {
  for (int r = -2; r < runs; r++) { /* two warm-up rounds */
    double t0 = sp_now();
    sp_op_tshift.forward(a);
    double t1 = sp_now();
    zero(fdx, numel);
    double t2 = sp_now();
    sp_op_tshift.backward(a);
    double t3 = sp_now();
    composed_forward(m);
    double t5 = sp_now();
    composed_backward(m);
    double t6 = sp_now();
    par_memcpy(fy, m->x, numel);
    double t7 = sp_now();
    if (r < 0) continue;
    t->ref_f[r] = t1 - t0, t->ref_fb[r] = (t1 - t0) + (t3 - t2), t->comp_f[r] = t5 - t3, t->comp_fb[r] = t6 - t3;
    t->mem[r] = t7 - t6;
  }
}

/* The fused op must equal the composed one, forward and backward, where
 * C r is whole. */
static int same_output(composed *m, const sp_op_args *a, const float *fy, float *fdx, int64_t numel, float ratio) {
  sp_op_tshift.forward(a);
  zero(fdx, numel);
  sp_op_tshift.backward(a);
  composed_forward(m);
  composed_backward(m);
  if (m->c1 * 2 == m->c2 && m->c1 == (int64_t)((float)m->c * ratio))
    return !memcmp(fy, m->out, (size_t)numel * 4) && !memcmp(fdx, m->dx, (size_t)numel * 4);
  return 1;
}

int sp_bench_tshift(const sp_bench_tshift_options *o, sp_bench_tshift_result *res) {
  const int64_t *d = o->shape;
  const int segments = o->segments, runs = o->runs;
  const float ratio = o->ratio;
  double need, have;
  if (segments < 1 || runs < 1 || d[0] < 1 || d[1] < 1 || d[2] < 1 || d[3] < 1 || d[0] % segments)
    return sp_error_set("bench op: the shape must be positive with NT a multiple of the segments; runs positive");
  /* Two shifted groups of ratio * C channels each must fit in C. */
  if (!(ratio >= 0 && ratio <= 0.5f)) return sp_error_set("bench op: ratio must be in [0, 0.5]");
  if (!sp_bench_tshift_fits(o, &need, &have))
    return sp_error_set("bench op: the shape needs about %.1f GB, this machine has %.1f GB", need / 1e9, have / 1e9);
  if (o->threads > 0) omp_set_num_threads(o->threads);
  composed m = {.n = d[0] / segments, .t = segments, .c = d[1], .hw = d[2] * d[3]};
  /* The seed's boundaries: c1 = int(C r), c2 = int(2 C r); the fused op with
   * back = fwd = r shifts the same channel groups when C r is whole. */
  m.c1 = (int64_t)(m.c * ratio);
  m.c2 = (int64_t)(m.c * 2 * ratio);
  const int64_t numel = d[0] * d[1] * d[2] * d[3], padded = m.n * (m.t + 2) * m.c * m.hw;
  m.x = buf(numel), m.out = buf(numel), m.dout = buf(numel), m.dx = buf(numel);
  m.pad = buf(padded), m.dpad = buf(padded);
  m.s1 = buf(numel * m.c1 / m.c + 1), m.s2 = buf(numel * (m.c2 - m.c1) / m.c + 1),
  m.s3 = buf(numel * (m.c - m.c2) / m.c + 1);
  m.ds1 = buf(numel * m.c1 / m.c + 1), m.ds2 = buf(numel * (m.c2 - m.c1) / m.c + 1),
  m.ds3 = buf(numel * (m.c - m.c2) / m.c + 1);
  float *fy = buf(numel), *fdx = buf(numel);

  sp_shape s4 = sp_shape4(d[0], d[1], d[2], d[3]);
  sp_tensor tx = sp_tensor_view(SP_F32, s4, m.x), ty = sp_tensor_view(SP_F32, s4, fy);
  sp_tensor tdy = sp_tensor_view(SP_F32, s4, m.dout), tdx = sp_tensor_view(SP_F32, s4, fdx);
  sp_tshift_attr at = {segments, ratio, ratio};
  sp_op_args a;
  memset(&a, 0, sizeof a);
  a.attr = &at, a.n_in = 1, a.in[0] = &tx, a.out = &ty, a.d_in[0] = &tdx, a.d_out = &tdy, a.training = 1;

  double *all_t = malloc(sizeof(double) * (size_t)runs * 7);
  round_times t = {
      all_t, all_t + runs, all_t + 2 * runs, all_t + 3 * runs, all_t + 4 * runs, all_t + 5 * runs, all_t + 6 * runs};
  time_rounds(&m, &a, fy, fdx, numel, runs, &t);
  /* Headline: the fast backend's kernel when this build has it. */
  const int cpu = sp_backend_cpu_time_tshift(&at, s4, runs, t.cpu_f, t.cpu_fb) == 0;
  if (!cpu) sp_error_clear();
  *res = (sp_bench_tshift_result){.kernel = cpu ? "cpu_nChw16c" : "ref", .threads = omp_get_max_threads()};
  res->same_output = same_output(&m, &a, fy, fdx, numel, ratio);
  res->ref_fwd_ms = sp_bench_median(t.ref_f, runs) * 1e3, res->ref_fwdbwd_ms = sp_bench_median(t.ref_fb, runs) * 1e3;
  res->composed_fwd_ms = sp_bench_median(t.comp_f, runs) * 1e3;
  res->composed_fwdbwd_ms = sp_bench_median(t.comp_fb, runs) * 1e3;
  res->memcpy_ms = sp_bench_median(t.mem, runs) * 1e3;
  res->fwd_ms = cpu ? sp_bench_median(t.cpu_f, runs) * 1e3 : res->ref_fwd_ms;
  res->fwdbwd_ms = cpu ? sp_bench_median(t.cpu_fb, runs) * 1e3 : res->ref_fwdbwd_ms;
  free(all_t);
  float *bufs[] = {m.x, m.out, m.dout, m.dx, m.pad, m.dpad, m.s1, m.s2, m.s3, m.ds1, m.ds2, m.ds3, fy, fdx};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sp_aligned_free(bufs[i]);
  return 0;
}
