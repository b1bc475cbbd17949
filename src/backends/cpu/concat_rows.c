/* concat along channels as copies of our own, where every input and the
 * output share one layout in which each input is a contiguous run per
 * "row": channels-last (a row is a position, the runs its inputs' channels),
 * or plain / channel-blocked with each input a whole number of blocks (a row
 * is an image, the runs its inputs' blocks). So
 *
 *   forward    out[r, off_k .. off_k + len_k) = in_k[r, 0 .. len_k)
 *   backward   d_in_k[r, ..] (=|+=) d_out[r, off_k ..]
 *
 * Why: oneDNN 2.6's concat and the submemory reorders that split the
 * gradient ran ResUNet-50's decoder concats at 11-16 GB/s (bf16, batch 16:
 * 11 ms forward and 14 backward a step over four concats; the 96-channel
 * 112 x 112 one took 4.7 ms forward for 77 MB moved), where a copy loop
 * runs at the machine's copy rate. Other layouts (a padded last block,
 * inputs in different layouts) keep join.c's oneDNN concat. */
#ifdef SPRY_HAVE_DNNL
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"
#include "ops/ops.h"

int cpu_concat_use_rows = 1;
int cpu_concat_stream = 1;
long cpu_concat_streamed;

typedef struct {
  cpu_node base;
  int n_in, bf16;
  int short_runs;      /* channels-last: every run a few vectors */
  int stream;          /* short runs written past the caches (cpu_stream_threshold_plan; AVX-512 builds) */
  size_t es;           /* bytes per element */
  int64_t rows, total; /* rows, and elements per output row */
  int64_t len[SP_OP_MAX_IN], off[SP_OP_MAX_IN]; /* per input: run length and offset in the output row */
} concat_rows_node;

/* Byte moves of 64 and 32 (may_alias: the bytes are bf16 or f32 values). */
typedef float v64b __attribute__((vector_size(64), aligned(1), may_alias));
typedef float v32b __attribute__((vector_size(32), aligned(1), may_alias));

/* A run of bytes: inline vector moves for the short runs of channels-last
 * rows (64 or 128 bytes each, a few hundred thousand a step), memcpy
 * otherwise. */
static inline void copy_run(char *d, const char *s, size_t bytes) {
  if (bytes <= 1024 && bytes % 64 == 0)
    for (size_t i = 0; i < bytes; i += 64) *(v64b *)(d + i) = *(const v64b *)(s + i);
  else if (bytes <= 1024 && bytes % 32 == 0)
    for (size_t i = 0; i < bytes; i += 32) *(v32b *)(d + i) = *(const v32b *)(s + i);
  else
    memcpy(d, s, bytes);
}

/* copy_run past the caches where the run is whole 64-byte lines on their
 * alignment (channels-last rows of 32 bf16 channels and more); the caller
 * fences. */
static inline void copy_run_nt(char *d, const char *s, size_t bytes) {
#ifdef __AVX512F__
  if (bytes <= 1024 && bytes % 64 == 0 && ((uintptr_t)d & 63) == 0) {
    for (size_t i = 0; i < bytes; i += 64) _mm512_stream_ps((float *)(d + i), _mm512_loadu_ps((const float *)(s + i)));
    return;
  }
#endif
  copy_run(d, s, bytes);
}

/* d[0..n) += s[0..n): bf16 widened, summed in f32, rounded once. */
static inline void add_run(void *d, const void *s, int64_t n, int bf16) {
  int64_t i = 0;
  for (; i + VW <= n; i += VW) vstw(d, i, vldw(d, i, bf16, VW) + vldw(s, i, bf16, VW), bf16, VW);
  if (bf16)
    sp_bf16_add((uint16_t *)d + i, (const uint16_t *)s + i, n - i);
  else
    for (; i < n; i++) ((float *)d)[i] += ((const float *)s)[i];
}

/* A long run (an image's blocks) is split in pieces so a few images still
 * keep every thread busy. */
enum { PIECE_BYTES = 1 << 18 };

/* Channels-last rows are short: each row's runs in turn, the output written
 * in order. Image rows are long: per input, pieces of a run. */
static void concat_rows_forward(cpu_node *n, const sp_op_args *a) {
  const concat_rows_node *s = (const concat_rows_node *)n;
  char *out = a->out->data;
  if (s->short_runs) {
#pragma omp parallel
    {
#pragma omp for schedule(guided)
      for (int64_t r = 0; r < s->rows; r++)
        for (int k = 0; k < s->n_in; k++) {
          char *d = out + (size_t)(r * s->total + s->off[k]) * s->es;
          const char *from = (const char *)a->in[k]->data + (size_t)(r * s->len[k]) * s->es;
          if (s->stream)
            copy_run_nt(d, from, (size_t)s->len[k] * s->es);
          else
            copy_run(d, from, (size_t)s->len[k] * s->es);
        }
      if (s->stream) __builtin_ia32_sfence(); /* the streamed lines out before the region's barrier */
    }
    cpu_concat_streamed += s->stream;
    return;
  }
  for (int k = 0; k < s->n_in; k++) {
    const char *in = a->in[k]->data;
    const size_t run = (size_t)s->len[k] * s->es, pieces = (run + PIECE_BYTES - 1) / PIECE_BYTES;
#pragma omp parallel for schedule(guided)
    for (int64_t t = 0; t < s->rows * (int64_t)pieces; t++) {
      const int64_t r = t / (int64_t)pieces;
      const size_t at = (size_t)(t % (int64_t)pieces) * PIECE_BYTES, left = run - at;
      copy_run(out + (size_t)(r * s->total + s->off[k]) * s->es + at, in + (size_t)r * run + at,
               left < PIECE_BYTES ? left : PIECE_BYTES);
    }
  }
}

/* One input's gradient from its run of row r's output gradient, bytes
 * [at, at + bytes): written when fresh, else added. */
static inline void grad_piece(const concat_rows_node *s, const sp_op_args *a, int k, int64_t r, size_t at,
                              size_t bytes) {
  const size_t run = (size_t)s->len[k] * s->es;
  const char *from = (const char *)a->d_out->data + (size_t)(r * s->total + s->off[k]) * s->es + at;
  char *to = (char *)a->d_in[k]->data + (size_t)r * run + at;
  if (((a->d_in_fresh >> k) & 1u) && s->stream && s->short_runs)
    copy_run_nt(to, from, bytes);
  else if ((a->d_in_fresh >> k) & 1u)
    copy_run(to, from, bytes);
  else
    add_run(to, from, (int64_t)(bytes / s->es), s->bf16);
}

static void concat_rows_backward(cpu_node *n, const sp_op_args *a) {
  const concat_rows_node *s = (const concat_rows_node *)n;
  if (s->short_runs) {
#pragma omp parallel
    {
#pragma omp for schedule(guided)
      for (int64_t r = 0; r < s->rows; r++)
        for (int k = 0; k < s->n_in; k++)
          if (a->d_in[k]) grad_piece(s, a, k, r, 0, (size_t)s->len[k] * s->es);
      if (s->stream) __builtin_ia32_sfence();
    }
    return;
  }
  for (int k = 0; k < s->n_in; k++) {
    if (!a->d_in[k]) continue;
    const size_t run = (size_t)s->len[k] * s->es, pieces = (run + PIECE_BYTES - 1) / PIECE_BYTES;
#pragma omp parallel for schedule(guided)
    for (int64_t t = 0; t < s->rows * (int64_t)pieces; t++) {
      const size_t at = (size_t)(t % (int64_t)pieces) * PIECE_BYTES, left = run - at;
      grad_piece(s, a, k, t / (int64_t)pieces, at, left < PIECE_BYTES ? left : PIECE_BYTES);
    }
  }
}

static const cpu_vt concat_rows_vt = {concat_rows_forward, concat_rows_backward, NULL, NULL};

/* The inputs' shared layout as lanes (cpu_md_lanes), or 0 when they differ,
 * are neither f32 nor bf16, or a blocked input has padding lanes. */
static int shared_lanes(const sp_op_prep *p, const dnnl_memory_desc_t *md) {
  const int lanes = cpu_md_lanes(&md[0]);
  if (!lanes || (md[0].data_type != dnnl_f32 && md[0].data_type != dnnl_bf16)) return 0;
  for (int k = 0; k < p->n_in; k++) {
    if (p->in_shape[k].ndim != 4 || cpu_md_lanes(&md[k]) != lanes || md[k].data_type != md[0].data_type) return 0;
    if (lanes > 1 && p->in_shape[k].d[1] % lanes) return 0;
  }
  return lanes;
}

int cpu_concat_rows_prepare(sp_op_prep *p) {
  dnnl_memory_desc_t md[SP_OP_MAX_IN];
  if (!cpu_concat_use_rows || p->n_in > SP_OP_MAX_IN) return 1;
  for (int k = 0; k < p->n_in; k++)
    if (cpu_md_input(&md[k], p, k)) return 1;
  const int lanes = shared_lanes(p, md);
  if (!lanes || (p->out_plain && (lanes != 1 || md[0].data_type != dnnl_f32))) return 1;
  concat_rows_node *s = cpu_node_new(sizeof *s, &concat_rows_vt);
  const sp_shape *o = &p->out_shape;
  const int64_t hw = o->d[2] * o->d[3];
  s->n_in = p->n_in, s->bf16 = md[0].data_type == dnnl_bf16, s->es = s->bf16 ? 2 : 4;
  s->rows = lanes == CPU_LANES_NHWC ? o->d[0] * hw : o->d[0];
  int64_t at = 0;
  for (int k = 0; k < p->n_in; k++) {
    s->len[k] = lanes == CPU_LANES_NHWC ? p->in_shape[k].d[1] : p->in_shape[k].d[1] * hw;
    s->off[k] = at, at += s->len[k];
  }
  s->total = at;
  s->short_runs = lanes == CPU_LANES_NHWC;
  s->stream = s->short_runs && cpu_concat_stream &&
              (int64_t)s->es * s->rows * s->total >= cpu_stream_threshold_plan(p->run_backward);
  dnnl_dims_t od = {o->d[0], o->d[1], o->d[2], o->d[3]};
  if (dnnl_memory_desc_init_by_tag(&s->base.out_md, 4, od, md[0].data_type, cpu_lanes_tag(lanes)) != dnnl_success) {
    cpu_node_free(&s->base);
    return 1;
  }
  p->saved_bytes = 0;
  p->fwd_scratch_bytes = p->bwd_scratch_bytes = 0;
  cpu_report(p, &s->base);
  return 0;
}

int cpu_concat_is_rows(const void *state) { return ((const cpu_node *)state)->vt == &concat_rows_vt; }
#endif
