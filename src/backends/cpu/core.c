/* cpu backend plumbing: engine and stream, error reporting, node lifetime,
 * memory descriptors, primitive creation and execution records. */
#ifdef SPRY_HAVE_DNNL
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "backends/cpu/shares.h"
#include "backends/cpu/vec.h"
#include "core/bf16.h"

int cpu_dnnl_fail(const char *file, int line, const char *call, dnnl_status_t st) {
  return sp_error_set_at(file, line, "oneDNN %s failed: %s", call, dnnl_status2str(st));
}

void cpu_dnnl_abort(const char *file, int line, const char *call, dnnl_status_t st) {
  fprintf(stderr, "spry: %s:%d: oneDNN %s failed while running a bound primitive: %s\n", file, line, call,
          dnnl_status2str(st));
  abort();
}

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* One engine and one in-order stream for the process: the CPU engine is
 * stateless apart from its kernels' JIT cache, and execution is synchronous. */
static void make_engine(void) {
  if (dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
  if (dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags) != dnnl_success) g_stream = NULL;
}

dnnl_engine_t cpu_engine(void) {
  pthread_once(&g_once, make_engine);
  return g_engine;
}

dnnl_stream_t cpu_stream(void) {
  pthread_once(&g_once, make_engine);
  return g_stream;
}

int cpu_bn_stats_offer = 1;
int cpu_shares_dynamic = 1;

/* Only nodes of this backend come here: the plan offers a producer's state
 * to the batch norm that is its only consumer, both prepared by the cpu
 * backend's table (a producer the plan could not prepare here is not offered). */
int cpu_node_take_stats(void *producer_state) {
  cpu_node *n = producer_state;
  if (!n || !n->stats_able || !cpu_bn_stats_offer) return 0;
  n->stats_on = 1;
  return 1;
}

void *cpu_node_new(size_t size, const cpu_vt *vt) {
  cpu_node *n = sp_xcalloc(1, size);
  n->vt = vt;
  return n;
}

void cpu_node_free(cpu_node *n) {
  if (!n) return;
  if (n->vt && n->vt->release) n->vt->release(n);
  for (int i = 0; i < n->n_mems; i++) dnnl_memory_destroy(n->mems[i]);
  for (int i = 0; i < n->n_prims; i++) dnnl_primitive_destroy(n->prims[i]);
  for (int i = 0; i < n->n_pds; i++) dnnl_primitive_desc_destroy(n->pds[i]);
  sp_aligned_free(n->kept);
  free(n);
}

void *cpu_node_keep(cpu_node *n, size_t bytes) {
  sp_aligned_free(n->kept);
  n->kept = sp_aligned_alloc(bytes ? bytes : 64);
  return n->kept;
}

void cpu_report(sp_op_prep *p, cpu_node *n) {
  p->state = n;
  n->out_plain = cpu_md_is_plain(&n->out_md) && n->out_md.data_type == dnnl_f32;
  p->out_layout = n->out_plain ? NULL : &n->out_md;
  p->out_bytes = cpu_md_bytes(&n->out_md);
}

int cpu_report_scratch(sp_op_prep *p, cpu_node *n, size_t fwd_scratch, size_t bwd_scratch) {
  p->fwd_scratch_bytes = fwd_scratch;
  p->bwd_scratch_bytes = bwd_scratch;
  cpu_report(p, n);
  return 0;
}

/* ---- memory descriptors ---- */

dnnl_data_type_t cpu_dt(sp_dtype t) {
  switch (t) {
    case SP_BF16: return dnnl_bf16;
    case SP_U8: return dnnl_u8;
    case SP_I32: return dnnl_s32;
    default: return dnnl_f32;
  }
}

static void dims_of(const sp_shape *s, dnnl_dims_t d) {
  for (int i = 0; i < s->ndim; i++) d[i] = s->d[i];
}

int cpu_md_plain(dnnl_memory_desc_t *md, const sp_shape *s, dnnl_data_type_t dt) {
  static const dnnl_format_tag_t tags[6] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde};
  dnnl_dims_t d;
  if (s->ndim < 1 || s->ndim > 5) return sp_error_set("cpu backend: %d-dimensional tensors are not supported", s->ndim);
  dims_of(s, d);
  DNNL_TRY(dnnl_memory_desc_init_by_tag(md, s->ndim, d, dt, tags[s->ndim]));
  return 0;
}

int cpu_md_any(dnnl_memory_desc_t *md, const sp_shape *s, dnnl_data_type_t dt) {
  dnnl_dims_t d;
  dims_of(s, d);
  DNNL_TRY(dnnl_memory_desc_init_by_tag(md, s->ndim, d, dt, dnnl_format_tag_any));
  return 0;
}

int cpu_md_input(dnnl_memory_desc_t *md, const sp_op_prep *p, int k) {
  if (p->in_layout[k]) {
    *md = *(const dnnl_memory_desc_t *)p->in_layout[k];
    return 0;
  }
  return cpu_md_plain(md, &p->in_shape[k], cpu_dt(p->in_dtype[k]));
}

int cpu_md_retype(dnnl_memory_desc_t *md, const dnnl_memory_desc_t *src, dnnl_data_type_t dt) {
  *md = *src;
  if (src->data_type == dt) return 0;
  if (src->format_kind == dnnl_format_kind_any) {
    md->data_type = dt;
    return 0;
  }
  if (src->format_kind != dnnl_blocked) return sp_error_set("cpu backend: cannot retype a non-blocked layout");
  /* Same blocking, element size changes: strides are in elements, so only
   * the type changes (the extra/compensation fields are unused for f32/bf16). */
  md->data_type = dt;
  return 0;
}

/* Each dimension's stride in elements where a layout is plain strides in
 * disguise: no padding, and at most one inner block that spans its whole
 * dimension (16 channels in 16-channel blocks: that block's elements are
 * neighbours, stride 1, and the block index is always 0). 0 otherwise. */
static int flat_strides(const dnnl_memory_desc_t *m, dnnl_dim_t *st) {
  const dnnl_blocking_desc_t *b = &m->format_desc.blocking;
  if (m->format_kind != dnnl_blocked || m->offset0 != 0 || m->extra.flags != 0 || b->inner_nblks > 1) return 0;
  for (int d = 0; d < m->ndims; d++) {
    if (m->padded_dims[d] != m->dims[d] || m->padded_offsets[d] != 0) return 0;
    st[d] = b->strides[d];
  }
  if (b->inner_nblks == 1) {
    if (b->inner_blks[0] != m->dims[b->inner_idxs[0]]) return 0;
    st[b->inner_idxs[0]] = 1;
  }
  return 1;
}

/* Equal as memory: every element at the same byte in both. Besides oneDNN's
 * own equality this takes, for example, 16 channels channels-last (acdb)
 * and in 16-channel blocks (aBcd16b) as one layout, so the plan passes such
 * a tensor between the two kinds of kernel without a reorder (vgg-face's
 * 16-channel layer: 0.9 + 0.8 ms a step of copies that changed nothing). */
int cpu_md_equal(const dnnl_memory_desc_t *a, const dnnl_memory_desc_t *b) {
  if (dnnl_memory_desc_equal(a, b)) return 1;
  if (a->ndims != b->ndims || a->data_type != b->data_type) return 0;
  dnnl_dim_t sa[DNNL_MAX_NDIMS], sb[DNNL_MAX_NDIMS];
  if (!flat_strides(a, sa) || !flat_strides(b, sb)) return 0;
  for (int d = 0; d < a->ndims; d++)
    if (a->dims[d] != b->dims[d] || (a->dims[d] > 1 && sa[d] != sb[d])) return 0;
  return 1;
}

static const struct {
  dnnl_format_tag_t tag;
  int lanes;
} lane_layouts[] = {{dnnl_abcd, 1}, {dnnl_aBcd16b, 16}, {dnnl_aBcd8b, 8}, {dnnl_acdb, CPU_LANES_NHWC}};

int cpu_md_lanes(const dnnl_memory_desc_t *md) {
  if (md->ndims != 4) return 0;
  for (size_t i = 0; i < sizeof lane_layouts / sizeof lane_layouts[0]; i++) {
    dnnl_memory_desc_t m;
    if (dnnl_memory_desc_init_by_tag(&m, 4, md->dims, md->data_type, lane_layouts[i].tag) == dnnl_success &&
        dnnl_memory_desc_equal(&m, md)) /* by name: 8 channels channels-last stay channels-last */
      return lane_layouts[i].lanes;
  }
  return 0;
}

dnnl_format_tag_t cpu_lanes_tag(int lanes) {
  for (size_t i = 0; i < sizeof lane_layouts / sizeof lane_layouts[0]; i++)
    if (lane_layouts[i].lanes == lanes) return lane_layouts[i].tag;
  return dnnl_format_tag_undef;
}

int cpu_md_is_plain(const dnnl_memory_desc_t *md) {
  if (md->format_kind != dnnl_blocked || md->format_desc.blocking.inner_nblks != 0) return 0;
  /* Row-major dense: strides decrease and each is the product of the dims after it. */
  dnnl_dim_t want = 1;
  for (int i = md->ndims - 1; i >= 0; i--) {
    if (md->padded_dims[i] != md->dims[i] || md->padded_offsets[i] != 0) return 0;
    if (md->dims[i] != 1 && md->format_desc.blocking.strides[i] != want) return 0;
    want *= md->dims[i];
  }
  return md->offset0 == 0;
}

size_t cpu_md_bytes(const dnnl_memory_desc_t *md) { return dnnl_memory_desc_get_size(md); }

const dnnl_memory_desc_t *cpu_pd_md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int index) {
  return dnnl_primitive_desc_query_md(pd, what, index);
}

/* ---- primitives ---- */

static int keep(cpu_node *n, dnnl_primitive_desc_t pd, dnnl_primitive_t prim) {
  if (n->n_pds >= CPU_MAX_PRIMS) {
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    return sp_error_set("cpu backend: more than %d primitives in one node", CPU_MAX_PRIMS);
  }
  n->pds[n->n_pds++] = pd;
  n->prims[n->n_prims++] = prim;
  return 0;
}

static int make_attr(dnnl_primitive_attr_t *attr, const_dnnl_post_ops_t post_ops) {
  DNNL_TRY(dnnl_primitive_attr_create(attr));
  dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success && post_ops) st = dnnl_primitive_attr_set_post_ops(*attr, post_ops);
  if (st != dnnl_success) {
    dnnl_primitive_attr_destroy(*attr);
    return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_primitive_attr_set_*", st);
  }
  return 0;
}

/* Implementations never taken. oneDNN 2.6's AMX 1x1 forward convolution
 * (`jit_1x1:avx512_core_amx_bf16`; its brgemm 1x1 is taken instead except
 * with a binary post-op) writes past the end of its destination and gets
 * values wrong when the spatial size is 6x6 (1x256x6x6 -> 1024, bf16, binary
 * add: the input after the output in memory was overwritten and 62% of the
 * outputs were off; the bottleneck-6x6 case in test_cpu_models.c). The next on
 * oneDNN's list, `jit:avx512_core_amx_bf16`, computes the same shapes right. */
static int impl_is_broken(const_dnnl_primitive_desc_t pd) {
  return strcmp(cpu_pd_impl(pd), "jit_1x1:avx512_core_amx_bf16") == 0;
}

int cpu_pd(const void *op_desc, const_dnnl_primitive_desc_t hint, const_dnnl_post_ops_t post_ops,
           dnnl_primitive_desc_t *pd) {
  dnnl_primitive_attr_t attr;
  if (make_attr(&attr, post_ops) != 0) return -1;
  dnnl_primitive_desc_iterator_t it;
  dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, op_desc, attr, cpu_engine(), hint);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_primitive_desc_iterator_create", st);
  /* The first implementation that is not known broken (oneDNN orders them
   * fastest first). */
  *pd = NULL;
  do {
    *pd = dnnl_primitive_desc_iterator_fetch(it);
    if (*pd && impl_is_broken(*pd)) dnnl_primitive_desc_destroy(*pd), *pd = NULL;
  } while (!*pd && (st = dnnl_primitive_desc_iterator_next(it)) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  if (!*pd) return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_primitive_desc_iterator_next", dnnl_unimplemented);
  return 0;
}

int cpu_adopt(cpu_node *n, dnnl_primitive_desc_t pd, dnnl_primitive_t *prim) {
  dnnl_status_t st = dnnl_primitive_create(prim, pd);
  if (st != dnnl_success) {
    dnnl_primitive_desc_destroy(pd);
    return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_primitive_create", st);
  }
  return keep(n, pd, *prim);
}

int cpu_pd_decline(dnnl_primitive_desc_t *pd) {
  dnnl_primitive_desc_destroy(*pd);
  *pd = NULL;
  return 1;
}

int cpu_adopt_with_weights(cpu_node *n, dnnl_primitive_desc_t pd, dnnl_primitive_t *prim,
                           const dnnl_memory_desc_t *w_plain, dnnl_memory_desc_t *w_md, dnnl_primitive_desc_t *re_pd,
                           dnnl_primitive_t *re, size_t *scratch) {
  if (cpu_adopt(n, pd, prim)) return -1;
  *w_md = *cpu_pd_md(pd, dnnl_query_weights_md, 0);
  if (cpu_make_reorder(n, w_plain, w_md, 0, re_pd, re)) return -1;
  *scratch = cpu_scratchpad_bytes(pd);
  if (cpu_scratchpad_bytes(*re_pd) > *scratch) *scratch = cpu_scratchpad_bytes(*re_pd);
  return 0;
}

int cpu_make(cpu_node *n, const void *op_desc, const_dnnl_primitive_desc_t hint, const_dnnl_post_ops_t post_ops,
             dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim) {
  if (cpu_pd(op_desc, hint, post_ops, pd) != 0) return -1;
  return cpu_adopt(n, *pd, prim);
}

int cpu_sum_post_ops(int accumulate, dnnl_post_ops_t *po) {
  *po = NULL;
  if (!accumulate) return 0;
  DNNL_TRY(dnnl_post_ops_create(po));
  dnnl_status_t st = dnnl_post_ops_append_sum(*po, 1.0f);
  if (st != dnnl_success) {
    dnnl_post_ops_destroy(*po);
    *po = NULL;
    return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_post_ops_append_sum", st);
  }
  return 0;
}

int cpu_make_backward_acc(cpu_node *n, const void *bwd_desc, const_dnnl_primitive_desc_t fwd_pd,
                          const dnnl_memory_desc_t *md, dnnl_primitive_desc_t *bwd_pd, dnnl_primitive_t *bwd,
                          dnnl_primitive_desc_t *acc_pd, dnnl_primitive_t *acc, size_t *scratch) {
  if (cpu_make(n, bwd_desc, fwd_pd, NULL, bwd_pd, bwd) || cpu_make_reorder(n, md, md, 1, acc_pd, acc)) return -1;
  *scratch = cpu_scratchpad_bytes(*bwd_pd);
  if (cpu_scratchpad_bytes(*acc_pd) > *scratch) *scratch = cpu_scratchpad_bytes(*acc_pd);
  return 0;
}

int cpu_make_reorder(cpu_node *n, const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate,
                     dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim) {
  dnnl_post_ops_t po;
  if (cpu_sum_post_ops(accumulate, &po)) return -1;
  dnnl_primitive_attr_t attr;
  int rc = make_attr(&attr, po);
  if (po) dnnl_post_ops_destroy(po);
  if (rc != 0) return -1;
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(pd, src, cpu_engine(), dst, cpu_engine(), attr);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_reorder_primitive_desc_create", st);
  st = dnnl_primitive_create(prim, *pd);
  if (st != dnnl_success) {
    dnnl_primitive_desc_destroy(*pd);
    return cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_primitive_create (reorder)", st);
  }
  return keep(n, *pd, *prim);
}

const char *cpu_pd_impl(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  return dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl ? impl : "";
}

int cpu_pd_is_ref(const_dnnl_primitive_desc_t pd) { return strncmp(cpu_pd_impl(pd), "ref", 3) == 0; }

size_t cpu_scratchpad_bytes(const_dnnl_primitive_desc_t pd) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* ---- memory and execution ---- */

dnnl_memory_t cpu_mem(cpu_node *n, const dnnl_memory_desc_t *md, void *ptr) {
  dnnl_memory_t m;
  if (n->n_mems >= CPU_MAX_MEMS) {
    sp_error_set("cpu backend: more than %d memory objects in one node", CPU_MAX_MEMS);
    return NULL;
  }
  dnnl_status_t st = dnnl_memory_create(&m, md, cpu_engine(), ptr);
  if (st != dnnl_success) {
    cpu_dnnl_fail(__FILE__, __LINE__, "dnnl_memory_create", st);
    return NULL;
  }
  n->mems[n->n_mems++] = m;
  return m;
}

void cpu_exec_init(cpu_exec *e, dnnl_primitive_t prim) {
  e->prim = prim;
  e->n_args = 0;
  e->serial = 0;
  e->w16.on = 0;
  e->lanes8.on = 0;
}

int cpu_exec_arg(cpu_exec *e, cpu_node *n, int arg, const dnnl_memory_desc_t *md, void *ptr) {
  if (e->n_args >= CPU_MAX_ARGS) return sp_error_set("cpu backend: too many primitive arguments");
  dnnl_memory_t m = cpu_mem(n, md, ptr);
  if (!m) return -1;
  e->args[e->n_args++] = (dnnl_exec_arg_t){arg, m};
  return 0;
}

int cpu_exec_scratchpad(cpu_exec *e, cpu_node *n, const_dnnl_primitive_desc_t pd, char *scratch) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (!md || dnnl_memory_desc_get_size(md) == 0) return 0;
  if (!scratch) return sp_error_set("cpu backend: a primitive needs a scratchpad but the node has no scratch");
  return cpu_exec_arg(e, n, DNNL_ARG_SCRATCHPAD, md, scratch);
}

size_t cpu_serial_reorder_bytes = 256 << 10;

static int reorder_timing;
static double reorder_seconds;

void cpu_reorder_timing(int on) { reorder_timing = on; }
double cpu_reorder_seconds(void) { return reorder_seconds; }

static int is_reorder(dnnl_primitive_t prim) {
  const_dnnl_primitive_desc_t pd;
  dnnl_primitive_kind_t kind;
  return dnnl_primitive_get_primitive_desc(prim, &pd) == dnnl_success &&
         dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &kind) == dnnl_success && kind == dnnl_reorder;
}

void cpu_exec_run(const cpu_exec *e) {
  if (!e->prim) return;
  /* Only when profiling: the kind query is not free. */
  double t0 = reorder_timing && is_reorder(e->prim) ? sp_now() : 0;
  if (e->w16.on) {
    cpu_w16_run(&e->w16, e->own_src, e->own_dst, e->serial);
  } else if (e->lanes8.on) {
    cpu_lanes8_run(&e->lanes8, e->own_src, e->own_dst, e->serial);
  } else if (e->serial) {
    /* oneDNN (OpenMP runtime) sizes each parallel region by
     * omp_get_max_threads() when it runs. */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    dnnl_status_t st = dnnl_primitive_execute(e->prim, cpu_stream(), e->n_args, e->args);
    omp_set_num_threads(threads);
    if (st != dnnl_success) cpu_dnnl_abort(__FILE__, __LINE__, "dnnl_primitive_execute", st);
  } else {
    DNNL_RUN(dnnl_primitive_execute(e->prim, cpu_stream(), e->n_args, e->args));
  }
  if (t0 > 0) reorder_seconds += sp_now() - t0;
}

/* 0: a reorder that writes; 1: one that adds (a sum post-op of scale 1, what
 * cpu_make_reorder makes); -1: anything else. */
static int reorder_sums(const_dnnl_primitive_desc_t pd) {
  const_dnnl_primitive_attr_t attr;
  const_dnnl_post_ops_t po;
  if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success ||
      dnnl_primitive_attr_get_post_ops(attr, &po) != dnnl_success)
    return -1;
  const int len = dnnl_post_ops_len(po);
  float scale = 0;
  if (len == 0) return 0;
  return len == 1 && dnnl_post_ops_get_kind(po, 0) == dnnl_sum &&
                 dnnl_post_ops_get_params_sum(po, 0, &scale) == dnnl_success && scale == 1.0f
             ? 1
             : -1;
}

int cpu_bind_reorder(cpu_exec *e, cpu_node *n, const_dnnl_primitive_desc_t pd, dnnl_primitive_t prim, void *src_ptr,
                     void *dst_ptr, char *scratch) {
  cpu_exec_init(e, prim);
  /* A reorder of a few thousand values (most weights, every step) takes
   * microseconds on one thread; in a parallel region it waits at the
   * barrier for every thread, which on a shared machine means a descheduled
   * one (measured: 3-4 ms per 16x8x3x3 weight under load). */
  e->serial = cpu_md_bytes(cpu_pd_md(pd, dnnl_query_src_md, 0)) <= cpu_serial_reorder_bytes;
  int accumulate = reorder_sums(pd);
  const dnnl_memory_desc_t *from = cpu_pd_md(pd, dnnl_query_src_md, 0), *to = cpu_pd_md(pd, dnnl_query_dst_md, 0);
  if (accumulate >= 0 && (cpu_w16_of(&e->w16, from, to, accumulate) || cpu_lanes8_of(&e->lanes8, from, to, accumulate)))
    e->own_src = src_ptr, e->own_dst = dst_ptr;
  if (cpu_exec_arg(e, n, DNNL_ARG_FROM, cpu_pd_md(pd, dnnl_query_src_md, 0), src_ptr) != 0 ||
      cpu_exec_arg(e, n, DNNL_ARG_TO, cpu_pd_md(pd, dnnl_query_dst_md, 0), dst_ptr) != 0)
    return -1;
  return cpu_exec_scratchpad(e, n, pd, scratch);
}

int cpu_fallback(sp_op_prep *p, cpu_node *n) {
  if (getenv("SPRY_CPU_VERBOSE"))
    fprintf(stderr, "spry cpu backend: %s runs the reference kernel (%s)\n", p->op->name, sp_last_error());
  cpu_node_free(n);
  return cpu_adapter_prepare(p);
}

size_t cpu_take(size_t *used, size_t bytes) {
  size_t at = (*used + 63) & ~(size_t)63;
  *used = at + bytes;
  return at;
}

void cpu_add_f32(float *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void cpu_round_bf16(uint16_t *dst, const float *src, int64_t count) {
  const int64_t whole = count / VW * VW;
  /* Threads only where the copy is worth a parallel region (~256 KB). */
#pragma omp parallel for schedule(static) if (count >= 65536)
  for (int64_t i = 0; i < whole; i += VW) vstw(dst, i, vldw(src, i, 0, VW), 1, VW);
  for (int64_t i = whole; i < count; i++) dst[i] = sp_bf16_round(src[i]);
}
#endif
