/* The MPI layer: start-up, rank and world, checked calls with a timeout that
 * names the missing ranks, broadcasts, the config/version check and the sum
 * callback of synchronised batch norm. Without MPI (SPRY_MPI=OFF) or without
 * a launcher, a world of one where every collective is the identity. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include "spry/common.h"
#include "train/dist_config.h"
#include "train/dist_internal.h"

static struct {
  int inited, rank, world;
  double timeout;
#ifdef SPRY_HAVE_MPI
  int started; /* this process called MPI_Init */
  MPI_Comm grad, sync, beat;
  /* Heartbeats: my phase count; the last count seen from each rank, and the
   * receive posted for each peer (one message in flight per peer). */
  long phase;
  long *seen, *recv_buf, *send_buf;
  MPI_Request *recv_req, *send_req;
#endif
} D = {.rank = 0, .world = 1, .timeout = 300.0};

int sp_dist_rank(void) { return D.rank; }
int sp_dist_world(void) { return D.world; }
void sp_dist_set_timeout(double seconds) { D.timeout = seconds > 0 ? seconds : 300.0; }
double sp_dist_timeout(void) { return D.timeout; }

uint64_t sp_dist_hash(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  if (!h) h = UINT64_C(0xcbf29ce484222325);
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * UINT64_C(0x100000001b3);
  return h;
}

void sp_dist_abort(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "spry dist: rank %d of %d: %s\n", D.rank, D.world, msg);
  fflush(stderr);
#ifdef SPRY_HAVE_MPI
  if (D.started) MPI_Abort(MPI_COMM_WORLD, 3);
#endif
  exit(3);
}

#ifdef SPRY_HAVE_MPI
int sp_dist_compiled(void) { return 1; }
MPI_Comm sp_dist_comm_grad(void) { return D.grad; }
MPI_Comm sp_dist_comm_sync(void) { return D.sync; }

void sp_dist_check(int rc, const char *call, const char *what) {
  if (rc == MPI_SUCCESS) return;
  char err[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) snprintf(err, sizeof err, "MPI error %d", rc);
  sp_dist_abort("%s failed (%s): %s", call, what, err);
}

static int launched_by_mpi(void) {
  const char *off = getenv("SPRY_MPI");
  if (off && !strcmp(off, "0")) return 0;
  /* Open MPI's mpirun, PMI/PMIx launchers (MPICH, Slurm's srun --mpi=...),
   * and srun itself (SLURM_STEP_NUM_TASKS: set for job steps only, not in
   * the batch script, which must not become a 1-rank MPI job by itself). */
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

static void finalize(void) {
  if (!D.started) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  /* Drain the heartbeat receives so Finalize does not wait on them. */
  for (int p = 0; p < D.world; p++) {
    if (p == D.rank) continue;
    if (D.recv_req[p] != MPI_REQUEST_NULL) {
      MPI_Cancel(&D.recv_req[p]);
      MPI_Wait(&D.recv_req[p], MPI_STATUS_IGNORE);
    }
    if (D.send_req[p] != MPI_REQUEST_NULL) MPI_Wait(&D.send_req[p], MPI_STATUS_IGNORE);
  }
  MPI_Comm_free(&D.grad);
  MPI_Comm_free(&D.sync);
  MPI_Comm_free(&D.beat);
  MPI_Finalize();
}

static void post_recv(int p) {
  sp_dist_check(MPI_Irecv(&D.recv_buf[p], 1, MPI_LONG, p, 7, D.beat, &D.recv_req[p]), "MPI_Irecv", "heartbeat");
}

/* Reads every heartbeat that has arrived; keeps one receive posted per peer. */
static void poll_beats(void) {
  for (int p = 0; p < D.world; p++) {
    if (p == D.rank) continue;
    for (;;) {
      int done = 0;
      sp_dist_check(MPI_Test(&D.recv_req[p], &done, MPI_STATUS_IGNORE), "MPI_Test", "heartbeat");
      if (!done) break;
      D.seen[p] = D.recv_buf[p];
      post_recv(p);
    }
  }
}

void sp_dist_beat(void) {
  if (D.world < 2) return;
  D.phase++;
  for (int p = 0; p < D.world; p++) {
    if (p == D.rank) continue;
    /* Tiny messages go eagerly; the previous send is long done. */
    if (D.send_req[p] != MPI_REQUEST_NULL) sp_dist_wait(&D.send_req[p], "heartbeat send", D.timeout);
    D.send_buf[p] = D.phase;
    sp_dist_check(MPI_Isend(&D.send_buf[p], 1, MPI_LONG, p, 7, D.beat, &D.send_req[p]), "MPI_Isend", "heartbeat");
  }
  poll_beats();
}

static void timeout_abort(const char *what, double timeout_s) {
  poll_beats();
  char late[512] = "";
  size_t len = 0;
  for (int p = 0; p < D.world && len + 32 < sizeof late; p++)
    if (p != D.rank && D.seen[p] < D.phase)
      len += (size_t)snprintf(late + len, sizeof late - len, "%s%d (at phase %ld)", len ? ", " : "", p, D.seen[p]);
  if (len)
    sp_dist_abort(
        "%s did not complete within %.0f s: rank(s) %s never reached phase %ld; they died or hang "
        "(set dist.timeout_s to wait longer)",
        what, timeout_s, late, D.phase);
  /* Heartbeats count steps: a rank stuck inside the current step (stopped,
   * swapping, deadlocked in a kernel) is not behind by one. */
  sp_dist_abort(
      "%s did not complete within %.0f s; every rank started phase %ld, so one of them is stuck inside it "
      "(stopped, swapping, hung) or MPI / the network is (set dist.timeout_s to wait longer)",
      what, timeout_s, D.phase);
}

void sp_dist_wait(MPI_Request *req, const char *what, double timeout_s) {
  double t0 = sp_now();
  for (long polls = 0;; polls++) {
    int done = 0;
    sp_dist_check(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test", what);
    if (done) return;
    /* Open MPI advances a large all-reduce (many pipelined segments) only
     * inside MPI calls, so sleeping between tests would stall every segment:
     * poll, yielding the core only if another thread wants it; sleep only
     * after a second (a peer is computing or late). */
    if (sp_now() - t0 > 1.0) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    } else if (polls > 1000) {
      sched_yield();
    }
    if ((polls & 255) == 0 && sp_now() - t0 > timeout_s) timeout_abort(what, timeout_s);
  }
}

int sp_dist_init(void) {
  if (D.inited) return 0;
  D.inited = 1;
  int already = 0;
  MPI_Initialized(&already);
  if (!already && !launched_by_mpi()) return 0;
  if (!already) {
    int provided = 0;
    /* Open MPI's default non-blocking all-reduce for large buffers runs at
     * less than half the speed of its blocking one here (2.6 vs 1.1 ms for
     * 6.4 MB on 2 ranks); its ring algorithm matches the blocking speed and
     * advances segment by segment at each MPI_Test during backward. A value
     * the user set (environment or mpirun --mca) wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    /* Only the main thread calls MPI (loader and OpenMP threads never do). */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return sp_error_set("MPI_Init_thread failed (launched by mpirun/srun, but MPI could not start)");
    D.started = 1;
    atexit(finalize);
  }
  /* Errors come back as codes, so every failure gets a message naming the
   * call and the rank instead of Open MPI's generic abort. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  sp_dist_check(MPI_Comm_rank(MPI_COMM_WORLD, &D.rank), "MPI_Comm_rank", "start-up");
  sp_dist_check(MPI_Comm_size(MPI_COMM_WORLD, &D.world), "MPI_Comm_size", "start-up");
  sp_dist_check(MPI_Comm_dup(MPI_COMM_WORLD, &D.grad), "MPI_Comm_dup", "start-up");
  sp_dist_check(MPI_Comm_dup(MPI_COMM_WORLD, &D.sync), "MPI_Comm_dup", "start-up");
  sp_dist_check(MPI_Comm_dup(MPI_COMM_WORLD, &D.beat), "MPI_Comm_dup", "start-up");
  size_t w = (size_t)D.world;
  D.seen = sp_xcalloc(w, sizeof(long));
  D.recv_buf = sp_xcalloc(w, sizeof(long));
  D.send_buf = sp_xcalloc(w, sizeof(long));
  D.recv_req = sp_xmalloc(w * sizeof(MPI_Request));
  D.send_req = sp_xmalloc(w * sizeof(MPI_Request));
  for (int p = 0; p < D.world; p++) {
    D.recv_req[p] = D.send_req[p] = MPI_REQUEST_NULL;
    if (p != D.rank) post_recv(p);
  }
  const char *t = getenv("SPRY_DIST_TIMEOUT");
  if (t && atof(t) > 0) D.timeout = atof(t);
  return 0;
}

int sp_dist_bcast(void *buf, size_t bytes, const char *what) {
  if (D.world < 2) return 0;
  sp_dist_beat();
  const size_t chunk = (size_t)1 << 30; /* MPI counts are ints */
  for (size_t off = 0; off < bytes; off += chunk) {
    int n = (int)(bytes - off < chunk ? bytes - off : chunk);
    MPI_Request req;
    sp_dist_check(MPI_Ibcast((char *)buf + off, n, MPI_BYTE, 0, D.grad, &req), "MPI_Ibcast", what);
    sp_dist_wait(&req, what, D.timeout);
  }
  return 0;
}

int sp_dist_sum_f64(double *x, int n, const char *what) {
  if (D.world < 2) return 0;
  sp_dist_beat(); /* a timeout here names the ranks that never arrived */
  MPI_Request req;
  sp_dist_check(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, D.grad, &req), "MPI_Iallreduce", what);
  sp_dist_wait(&req, what, D.timeout);
  return 0;
}

int sp_dist_barrier(double timeout_s, const char *what) {
  if (D.world < 2) return 0;
  sp_dist_beat();
  MPI_Request req;
  sp_dist_check(MPI_Ibarrier(D.grad, &req), "MPI_Ibarrier", what);
  sp_dist_wait(&req, what, timeout_s > 0 ? timeout_s : D.timeout);
  return 0;
}

/* Batch-norm sums run inside forward and backward, on their own
 * communicator, while gradient buckets may be in flight on D.grad. */
static void bn_sum(void *user, double *x, int n) {
  (void)user;
  MPI_Request req;
  sp_dist_check(MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, D.sync, &req), "MPI_Iallreduce",
                "sync batch norm");
  sp_dist_wait(&req, "sync batch norm", D.timeout);
}

int sp_dist_check_run(const char *config_text, const char *version) {
  if (D.world < 2) return 0;
  sp_dist_beat();
  struct {
    uint64_t hash;
    char version[32];
  } mine = {sp_dist_hash(config_text ? config_text : "", config_text ? strlen(config_text) : 0, 0), {0}};
  snprintf(mine.version, sizeof mine.version, "%s", version);
  void *all = sp_xmalloc(sizeof mine * (size_t)D.world);
  MPI_Request req;
  sp_dist_check(MPI_Iallgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, D.grad, &req),
                "MPI_Iallgather", "config check");
  sp_dist_wait(&req, "config check", D.timeout);
  char cfg_bad[256] = "", ver_bad[256] = "";
  size_t nc = 0, nv = 0;
  const char *v0 = (const char *)all + sizeof(uint64_t);
  for (int p = 1; p < D.world; p++) {
    const char *e = (const char *)all + sizeof mine * (size_t)p;
    uint64_t h0, hp;
    memcpy(&h0, all, sizeof h0);
    memcpy(&hp, e, sizeof hp);
    if (strncmp(e + sizeof(uint64_t), v0, 32) && nv + 24 < sizeof ver_bad)
      nv +=
          (size_t)snprintf(ver_bad + nv, sizeof ver_bad - nv, "%s%d (%.31s)", nv ? ", " : "", p, e + sizeof(uint64_t));
    else if (hp != h0 && nc + 16 < sizeof cfg_bad)
      nc += (size_t)snprintf(cfg_bad + nc, sizeof cfg_bad - nc, "%s%d", nc ? ", " : "", p);
  }
  int rc = 0;
  if (nv)
    rc = sp_error_set(
        "distributed run refused: rank(s) %s run another spry version than rank 0 (%.31s); "
        "install the same build on every machine",
        ver_bad, v0);
  else if (nc) {
    /* Every rank takes rank 0's text (the same calls on all: each saw the
     * hashes); a rank that differs names the first key that does. */
    const char *text = config_text ? config_text : "";
    uint64_t len = strlen(text), h0;
    memcpy(&h0, all, sizeof h0);
    sp_dist_bcast(&len, sizeof len, "config check");
    char *zero = sp_xmalloc((size_t)len + 1);
    if (D.rank == 0) memcpy(zero, text, (size_t)len);
    sp_dist_bcast(zero, (size_t)len, "config check");
    zero[len] = '\0';
    char here[160] = "", there[160] = "", key[256] = "";
    int differs = mine.hash != h0 && sp_config_diff(text, zero, key, sizeof key, here, there, sizeof here);
    free(zero);
    if (differs)
      rc = sp_error_set(
          "distributed run refused: this rank's configuration differs from rank 0's at %s (here "
          "'%s', on rank 0 '%s'); %s",
          key[0] ? key : "a line", here, there,
          !strcmp(key, "resume") ? "start every rank with --resume, or none"
                                 : "give every rank the same config file and --set options");
    else
      rc = sp_error_set(
          "distributed run refused: rank(s) %s run a different configuration than rank 0 (each "
          "names the first key that differs); give every rank the same config file and --set options",
          cfg_bad);
  }
  free(all);
  return rc;
}

int sp_dist_ranks_differ(uint64_t mine, char *odd, size_t cap, double timeout_s) {
  if (cap) odd[0] = '\0';
  if (D.world < 2) return 0;
  sp_dist_beat();
  uint64_t *all = sp_xmalloc(sizeof mine * (size_t)D.world);
  MPI_Request req;
  sp_dist_check(MPI_Iallgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, D.grad, &req), "MPI_Iallgather",
                "data check");
  sp_dist_wait(&req, "data check", timeout_s);
  int n = 0;
  size_t len = 0;
  for (int p = 1; p < D.world; p++) {
    if (all[p] == all[0]) continue;
    n++;
    if (len + 16 < cap) len += (size_t)snprintf(odd + len, cap - len, "%s%d", len ? ", " : "", p);
  }
  free(all);
  return n;
}
#else
int sp_dist_compiled(void) { return 0; }
void sp_dist_beat(void) {}
int sp_dist_init(void) {
  D.inited = 1;
  return 0;
}
int sp_dist_bcast(void *buf, size_t bytes, const char *what) { return 0; }
int sp_dist_sum_f64(double *x, int n, const char *what) { return 0; }
int sp_dist_barrier(double timeout_s, const char *what) { return 0; }
static void bn_sum(void *user, double *x, int n) {}
int sp_dist_check_run(const char *config_text, const char *version) { return 0; }
int sp_dist_ranks_differ(uint64_t mine, char *odd, size_t cap, double timeout_s) {
  (void)mine, (void)timeout_s;
  if (cap) odd[0] = '\0';
  return 0;
}
#endif

/* Rank 0's values of the parameters (all, or only the buffers) packed into
 * one broadcast: one message instead of one per tensor. */
static int bcast_values(sp_graph *g, int buffers_only, const char *what) {
  if (D.world < 2) return 0;
  int n = sp_graph_param_count(g);
  size_t total = 0;
  for (int i = 0; i < n; i++)
    if (!buffers_only || (sp_graph_param_flags(g, i) & SP_PARAM_BUFFER))
      total += (size_t)sp_tensor_numel(sp_graph_param_value(g, i));
  float *buf = sp_xmalloc(sizeof(float) * (total ? total : 1)), *at = buf;
  for (int i = 0; i < n; i++) {
    if (buffers_only && !(sp_graph_param_flags(g, i) & SP_PARAM_BUFFER)) continue;
    sp_tensor *t = sp_graph_param_value(g, i);
    memcpy(at, t->data, sizeof(float) * (size_t)sp_tensor_numel(t));
    at += sp_tensor_numel(t);
  }
  sp_dist_bcast(buf, sizeof(float) * total, what);
  at = buf;
  for (int i = 0; i < n; i++) {
    if (buffers_only && !(sp_graph_param_flags(g, i) & SP_PARAM_BUFFER)) continue;
    sp_tensor *t = sp_graph_param_value(g, i);
    memcpy(t->data, at, sizeof(float) * (size_t)sp_tensor_numel(t));
    at += sp_tensor_numel(t);
  }
  free(buf);
  return 0;
}

int sp_dist_bcast_params(sp_graph *g) { return bcast_values(g, 0, "broadcast of the initial parameters"); }

int sp_dist_bcast_buffers(sp_graph *g) { return bcast_values(g, 1, "broadcast of rank 0's batch-norm statistics"); }

int sp_dist_bcast_optimizer(sp_optimizer *opt) {
  if (D.world < 2) return 0;
  int64_t steps = sp_optimizer_steps(opt);
  sp_dist_bcast(&steps, sizeof steps, "broadcast of the optimizer step count");
  sp_optimizer_set_steps(opt, steps);
  for (int i = 0; i < sp_optimizer_state_count(opt); i++) {
    sp_tensor t = sp_optimizer_state_tensor(opt, i);
    sp_dist_bcast(t.data, sizeof(float) * (size_t)sp_tensor_numel(&t), "broadcast of the optimizer state");
  }
  return 0;
}

void sp_dist_enable_sync_bn(sp_graph *g) { sp_graph_sync_batchnorm(g, bn_sum, NULL); }
