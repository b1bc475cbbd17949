/* Bucketed gradient all-reduce, overlapped with backward.
 *
 * Parameters are grouped into buckets of about bucket_bytes in the order the
 * plan's backward makes their gradients final (the plan tells which node
 * finalises each one). The plan's gradient-ready hook counts down each
 * bucket; a bucket whose gradients are all final is packed into its own
 * buffer (or, holding one gradient, used where it lies) and handed to
 * MPI_Iallreduce at once, so the transfer runs while backward computes the
 * earlier layers.
 *
 * Buckets are launched strictly in index order (a ready bucket waits for the
 * ones before it): collectives on a communicator must be issued in the same
 * order on every rank, and this way that holds whatever order the hook
 * reports gradients in. Each bucket is launched once per step; finish()
 * launches any bucket whose gradients were never reported (parameters no
 * backward touched), waits for all, and writes sum times 1/W back (or
 * leaves the sums for the optimizer to scale: sp_grad_reducer_finish_sums).
 *
 * With bf16 on the wire (sp_grad_reducer_set_bf16) each bucket is packed to
 * bfloat16 (round to nearest even) and summed by a user op that adds in fp32
 * and rounds once per addition: half the bytes to move and to copy through
 * shared memory. Each rank's gradient is rounded once and each of the W-1
 * additions once more, so the error grows with the world size (PyTorch DDP's
 * bf16 hook divides by W before the exchange; here the sum is scaled by 1/W
 * after, as in fp32). Every rank unpacks the same reduced buffer, so the ranks'
 * parameters stay bitwise equal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "spry/common.h"
#include "train/dist_internal.h"

typedef struct {
  int first, count; /* into r->order */
  int64_t numel;
  int pending; /* gradients not final yet this step */
  int launched, launches;
  float *buf;
  uint16_t *half; /* bf16 wire buffer (bf16 mode only) */
#ifdef SPRY_HAVE_MPI
  MPI_Request req;
#endif
} bucket;

struct sp_grad_reducer {
  sp_graph *g;
  sp_plan *p;
  int n_params;            /* all graph parameters (ids) */
  int *bucket_of;          /* [n_params] -1: not reduced (buffers) */
  unsigned char *is_ready; /* [n_params] this step */
  int *order;              /* parameter ids, bucket by bucket */
  bucket *b;
  int n_buckets, next_launch, early, in_step;
  int64_t step;
  double extra[8];
  int n_extra;
  int bf16; /* gradients travel as bfloat16 */
#ifdef SPRY_HAVE_MPI
  MPI_Request extra_req;
  MPI_Op bf16_sum;
#endif
};

static int64_t numel_of(sp_graph *g, int q) { return sp_tensor_numel(sp_graph_param_grad(g, q)); }

static void hook(void *user, const int *params, int n) { sp_grad_reducer_ready(user, params, n); }

typedef struct {
  int id, node;
} ready_at;

/* Later nodes first (their backward runs first); ties by id for a fixed order. */
static int by_ready(const void *a, const void *b) {
  const ready_at *x = a, *y = b;
  if (x->node != y->node) return x->node > y->node ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

sp_grad_reducer *sp_grad_reducer_new(sp_graph *g, sp_plan *p, size_t bucket_bytes) {
  sp_grad_reducer *r = sp_xcalloc(1, sizeof *r);
  r->g = g;
  r->p = p;
  r->n_params = sp_graph_param_count(g);
  size_t np = (size_t)(r->n_params ? r->n_params : 1);
  r->bucket_of = sp_xmalloc(sizeof(int) * np);
  r->is_ready = sp_xcalloc(np, 1);
  r->order = sp_xmalloc(sizeof(int) * np);
  ready_at *ra = sp_xmalloc(sizeof(ready_at) * np);
  int n = 0;
  for (int q = 0; q < r->n_params; q++) {
    r->bucket_of[q] = -1;
    if (!sp_graph_param_grad(g, q)) continue;
    /* Never-finalised parameters (-1) sort last: finish() sends them. */
    int node = p ? sp_plan_grad_ready_node(p, q) : q;
    ra[n++] = (ready_at){q, node};
  }
  qsort(ra, (size_t)n, sizeof *ra, by_ready);
  r->b = sp_xcalloc((size_t)(n ? n : 1), sizeof(bucket));
  size_t cur = 0;
  for (int i = 0; i < n; i++) {
    int q = ra[i].id;
    size_t bytes = sizeof(float) * (size_t)numel_of(g, q);
    /* A gradient of a bucket's size or more gets a bucket of its own, so it
     * is reduced in place without the pack and unpack copies (vgg-face's
     * fc1.weight is 94% of all gradient bytes). */
    int alone = bytes >= bucket_bytes;
    if (r->n_buckets == 0 || (cur >= bucket_bytes && cur > 0) || (alone && cur > 0)) {
      r->b[r->n_buckets++] = (bucket){.first = i};
      cur = 0;
    }
    if (alone) cur = bucket_bytes; /* closes the bucket behind it */
    bucket *bk = &r->b[r->n_buckets - 1];
    r->order[i] = q;
    r->bucket_of[q] = r->n_buckets - 1;
    bk->count++;
    bk->numel += numel_of(g, q);
    cur += bytes;
  }
  free(ra);
  for (int k = 0; k < r->n_buckets; k++) {
    if (r->b[k].count > 1) r->b[k].buf = sp_xmalloc(sizeof(float) * (size_t)r->b[k].numel);
#ifdef SPRY_HAVE_MPI
    r->b[k].req = MPI_REQUEST_NULL;
#endif
  }
#ifdef SPRY_HAVE_MPI
  r->extra_req = MPI_REQUEST_NULL;
  r->bf16_sum = MPI_OP_NULL;
#endif
  if (p) sp_plan_set_grad_hook(p, hook, r);
  return r;
}

void sp_grad_reducer_watch(sp_grad_reducer *r, sp_plan *p) {
  if (p) sp_plan_set_grad_hook(p, hook, r);
}

void sp_grad_reducer_free(sp_grad_reducer *r) {
  if (!r) return;
  if (r->p) sp_plan_set_grad_hook(r->p, NULL, NULL);
#ifdef SPRY_HAVE_MPI
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (r->bf16_sum != MPI_OP_NULL && !finalized) MPI_Op_free(&r->bf16_sum);
#endif
  for (int k = 0; k < r->n_buckets; k++) free(r->b[k].buf), sp_aligned_free(r->b[k].half);
  free(r->b);
  free(r->order);
  free(r->is_ready);
  free(r->bucket_of);
  free(r);
}

int sp_grad_reducer_buckets(const sp_grad_reducer *r) { return r->n_buckets; }
int sp_grad_reducer_bucket_of(const sp_grad_reducer *r, int param) {
  return param >= 0 && param < r->n_params ? r->bucket_of[param] : -1;
}
int sp_grad_reducer_launches(const sp_grad_reducer *r, int k) {
  return k >= 0 && k < r->n_buckets ? r->b[k].launches : 0;
}
int sp_grad_reducer_launched_early(const sp_grad_reducer *r) { return r->early; }

size_t sp_grad_reducer_bytes(const sp_grad_reducer *r) {
  size_t s = 0;
  for (int k = 0; k < r->n_buckets; k++) s += (r->bf16 ? 2 : sizeof(float)) * (size_t)r->b[k].numel;
  return s;
}

void sp_grad_reducer_pack_bf16(const float *x, uint16_t *h, int64_t n) {
  for (int64_t i = 0; i < n; i++) h[i] = sp_bf16_round(x[i]);
}

#ifdef SPRY_HAVE_MPI
/* The sums times `scale` (1/W for the mean, the optimizer's own factor; 1 to
 * leave the sums) into the gradients. Separate loops with restrict so they
 * vectorise (a scalar divide over vgg-face's 1.6 M gradients cost ~2 ms of a
 * 20 ms step). */
static void scale_in_place(float *d, int64_t m, float scale) {
  for (int64_t j = 0; j < m; j++) d[j] *= scale;
}
static void scale_packed(float *restrict d, const float *restrict sum, int64_t m, float scale) {
  for (int64_t j = 0; j < m; j++) d[j] = sum[j] * scale;
}
static void scale_bf16(float *restrict d, const uint16_t *restrict sum, int64_t m, float scale) {
  for (int64_t j = 0; j < m; j++) d[j] = sp_bf16_widen(sum[j]) * scale;
}

/* MPI user op on MPI_UINT16_T holding bf16: inout = bf16(in + inout). */
static void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  sp_bf16_add(inout, in, *len);
}
#endif

int sp_grad_reducer_set_bf16(sp_grad_reducer *r, int on) {
  if (r->in_step) return sp_error_set("grad reducer: the wire type changes between steps only");
  on = !!on;
  if (on == r->bf16) return 0;
  r->bf16 = on;
  for (int k = 0; k < r->n_buckets; k++) {
    sp_aligned_free(r->b[k].half);
    r->b[k].half = on ? sp_aligned_alloc(2 * (size_t)(r->b[k].numel ? r->b[k].numel : 1)) : NULL;
  }
#ifdef SPRY_HAVE_MPI
  if (on && r->bf16_sum == MPI_OP_NULL && sp_dist_world() > 1)
    sp_dist_check(MPI_Op_create(bf16_sum_op, 1, &r->bf16_sum), "MPI_Op_create", "bf16 gradient sum");
#endif
  return 0;
}

static void launch(sp_grad_reducer *r, int k) {
  bucket *bk = &r->b[k];
  bk->launched = 1;
  bk->launches++;
#ifdef SPRY_HAVE_MPI
  if (sp_dist_world() < 2) return;
  if (r->bf16) {
    uint16_t *at = bk->half;
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      sp_tensor *gr = sp_graph_param_grad(r->g, r->order[i]);
      sp_grad_reducer_pack_bf16(gr->data, at, sp_tensor_numel(gr));
      at += sp_tensor_numel(gr);
    }
    sp_dist_check(MPI_Iallreduce(MPI_IN_PLACE, bk->half, (int)bk->numel, MPI_UINT16_T, r->bf16_sum, sp_dist_comm_grad(),
                                 &bk->req),
                  "MPI_Iallreduce", "gradient bucket (bf16)");
    return;
  }
  float *data = bk->buf;
  if (!data) {
    /* One gradient: reduced where it lies; it is final, nothing writes it
     * before finish(). */
    data = sp_graph_param_grad(r->g, r->order[bk->first])->data;
  } else {
    float *at = bk->buf;
    for (int i = bk->first; i < bk->first + bk->count; i++) {
      sp_tensor *gr = sp_graph_param_grad(r->g, r->order[i]);
      memcpy(at, gr->data, sizeof(float) * (size_t)sp_tensor_numel(gr));
      at += sp_tensor_numel(gr);
    }
  }
  sp_dist_check(MPI_Iallreduce(MPI_IN_PLACE, data, (int)bk->numel, MPI_FLOAT, MPI_SUM, sp_dist_comm_grad(), &bk->req),
                "MPI_Iallreduce", "gradient bucket");
#endif
}

/* Open MPI moves non-blocking collectives forward only inside MPI calls;
 * a test of the in-flight buckets at every hook keeps them moving. */
static void progress(sp_grad_reducer *r) {
#ifdef SPRY_HAVE_MPI
  for (int k = 0; k < r->next_launch; k++) {
    if (r->b[k].req == MPI_REQUEST_NULL) continue;
    int done = 0;
    sp_dist_check(MPI_Test(&r->b[k].req, &done, MPI_STATUS_IGNORE), "MPI_Test", "gradient bucket");
    if (!done) break;
  }
#else
  (void)r;
#endif
}

void sp_grad_reducer_ready(sp_grad_reducer *r, const int *params, int n) {
  for (int i = 0; i < n; i++) {
    int q = params[i];
    if (q < 0 || q >= r->n_params || r->bucket_of[q] < 0 || r->is_ready[q]) continue; /* exactly once */
    r->is_ready[q] = 1;
    r->b[r->bucket_of[q]].pending--;
  }
  while (r->next_launch < r->n_buckets && r->b[r->next_launch].pending == 0) launch(r, r->next_launch++);
  progress(r);
}

int sp_grad_reducer_begin(sp_grad_reducer *r, const double *extra, int n_extra) {
  if (n_extra < 0 || n_extra > 8) return sp_error_set("grad reducer: %d extra values (at most 8)", n_extra);
  sp_dist_beat();
  r->step++;
  r->in_step = 1;
  r->next_launch = 0;
  r->early = 0;
  memset(r->is_ready, 0, (size_t)(r->n_params ? r->n_params : 1));
  for (int k = 0; k < r->n_buckets; k++) {
    r->b[k].pending = r->b[k].count;
    r->b[k].launched = r->b[k].launches = 0;
  }
  r->n_extra = n_extra;
  if (n_extra) memcpy(r->extra, extra, sizeof(double) * (size_t)n_extra);
#ifdef SPRY_HAVE_MPI
  /* Launched first, so it is done long before the last bucket. */
  if (sp_dist_world() > 1 && n_extra)
    sp_dist_check(
        MPI_Iallreduce(MPI_IN_PLACE, r->extra, n_extra, MPI_DOUBLE, MPI_SUM, sp_dist_comm_grad(), &r->extra_req),
        "MPI_Iallreduce", "step totals");
#endif
  return 0;
}

void sp_grad_reducer_progress(sp_grad_reducer *r) { progress(r); }

static int finish(sp_grad_reducer *r, double *extra_out, sp_bucket_done_fn on_bucket, void *user, int sums) {
  if (!r->in_step) return sp_error_set("grad reducer: finish without begin");
  r->in_step = 0;
  r->early = r->next_launch;
  /* Gradients no backward reported (unused parameters) go as they are. */
  for (int i = 0; i < r->n_buckets; i++)
    if (r->b[i].pending > 0) {
      for (int j = r->b[i].first; j < r->b[i].first + r->b[i].count; j++) sp_grad_reducer_ready(r, &r->order[j], 1);
    }
#ifdef SPRY_HAVE_MPI
  const int world = sp_dist_world();
  if (world > 1 && r->n_extra) {
    char what[96];
    snprintf(what, sizeof what, "all-reduce of step %lld totals", (long long)r->step);
    sp_dist_wait(&r->extra_req, what, sp_dist_timeout());
  }
  /* Times 1/W rather than divided by W: what the optimizer does with the
   * sums left in place (sp_dist_step), so both paths agree to the bit. */
  const float scale = sums ? 1.0f : 1.0f / (float)world;
#else
  const int world = 1;
#endif
  /* Bucket by bucket in launch order: each one's mean (or sum) is ready for
   * the caller (the optimizer) while the later ones are still on the wire. */
  for (int k = 0; k < r->n_buckets; k++) {
    bucket *bk = &r->b[k];
#ifdef SPRY_HAVE_MPI
    if (world > 1) {
      char what[96];
      snprintf(what, sizeof what, "gradient all-reduce (step %lld, bucket %d of %d)", (long long)r->step, k + 1,
               r->n_buckets);
      sp_dist_wait(&bk->req, what, sp_dist_timeout());
      const uint16_t *h = bk->half;
      const float *at = bk->buf;
      for (int i = bk->first; i < bk->first + bk->count; i++) {
        sp_tensor *gr = sp_graph_param_grad(r->g, r->order[i]);
        float *d = gr->data;
        if (!at) at = d; /* reduced in place */
        int64_t m = sp_tensor_numel(gr);
        if (h) {
          scale_bf16(d, h, m, scale);
          h += m;
          continue;
        }
        if (at != d)
          scale_packed(d, at, m, scale);
        else if (scale != 1.0f)
          scale_in_place(d, m, scale);
        at += m;
      }
    }
#endif
    if (on_bucket) on_bucket(user, &r->order[bk->first], bk->count);
  }
  (void)world;
  if (extra_out && r->n_extra) memcpy(extra_out, r->extra, sizeof(double) * (size_t)r->n_extra);
  return 0;
}

int sp_grad_reducer_finish_sums(sp_grad_reducer *r, double *extra_out, sp_bucket_done_fn on_bucket, void *user) {
  return finish(r, extra_out, on_bucket, user, 1);
}
int sp_grad_reducer_finish(sp_grad_reducer *r, double *extra_out) { return finish(r, extra_out, NULL, NULL, 0); }
