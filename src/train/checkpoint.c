/* Checkpoints: one safetensors file a run can resume from and other tools
 * (PyTorch's safetensors loader) can read. Tensor names are the graph's
 * parameter names, so a spry checkpoint maps onto the matching PyTorch
 * module's state_dict; optimizer state is kept apart under "optim.". */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/safetensors.h"
#include "spry/train.h"

#define FORMAT "spry-checkpoint-1"

int sp_checkpoint_save(const char *path, sp_graph *g, const sp_optimizer *opt, const sp_checkpoint_meta *meta) {
  sp_st_writer *w = sp_st_writer_new();
  int n_opt = opt ? sp_optimizer_state_count(opt) : 0;
  sp_tensor *opt_tensors = sp_xcalloc((size_t)(n_opt ? n_opt : 1), sizeof(sp_tensor));
  char name[600], num[32];
  int rc = 0;
  for (int i = 0; i < sp_graph_param_count(g) && rc == 0; i++)
    rc = sp_st_writer_add(w, sp_graph_param_name(g, i), sp_graph_param_value(g, i));
  for (int i = 0; i < n_opt && rc == 0; i++) {
    opt_tensors[i] = sp_optimizer_state_tensor(opt, i);
    snprintf(name, sizeof name, "optim.%s", sp_optimizer_state_name(opt, i));
    rc = sp_st_writer_add(w, name, &opt_tensors[i]);
  }
  if (rc == 0) {
    sp_st_writer_meta(w, "format", FORMAT);
    sp_st_writer_meta(w, "spry_version", SPRY_VERSION);
    if (meta) {
      snprintf(num, sizeof num, "%" PRId64, meta->epoch);
      sp_st_writer_meta(w, "epoch", num);
      snprintf(num, sizeof num, "%" PRId64, meta->iteration);
      sp_st_writer_meta(w, "iteration", num);
      snprintf(num, sizeof num, "%" PRIu64, meta->seed);
      sp_st_writer_meta(w, "seed", num);
      snprintf(num, sizeof num, "%" PRId64, meta->step_in_epoch);
      sp_st_writer_meta(w, "step_in_epoch", num);
      snprintf(num, sizeof num, "%.17g", meta->loss_sum);
      sp_st_writer_meta(w, "loss_sum", num);
      snprintf(num, sizeof num, "%.17g", meta->best);
      sp_st_writer_meta(w, "best", num);
      if (meta->config) sp_st_writer_meta(w, "config", meta->config);
      if (meta->model) sp_st_writer_meta(w, "model", meta->model);
      if (meta->box_source) sp_st_writer_meta(w, "box_source", meta->box_source);
    }
    if (opt) {
      snprintf(num, sizeof num, "%" PRId64, sp_optimizer_steps(opt));
      sp_st_writer_meta(w, "optimizer_steps", num);
      sp_st_writer_meta(w, "optimizer", sp_opt_kind_name(sp_optimizer_config(opt)->kind));
    }
    rc = sp_st_writer_save(w, path);
  }
  sp_st_writer_free(w);
  free(opt_tensors);
  return rc;
}

/* Counts in a checkpoint's metadata: epochs, steps, iterations. A file is
 * untrusted: each is an integer in [0, 2^53) (a negative epoch would run the
 * loop backwards; beyond 2^53 doubles that carry them lose units). */
static int parse_i64(const sp_st_file *f, const char *path, const char *key, int64_t *out) {
  const char *s = sp_st_meta(f, key);
  if (!s) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (*s == 0 || *end != 0 || errno) return sp_error_set("%s: metadata '%s' is not an integer: '%s'", path, key, s);
  if (v < 0 || v >= (1LL << 53)) return sp_error_set("%s: metadata '%s' is %lld, out of range", path, key, v);
  *out = v;
  return 0;
}

/* A parameter with NaN or infinite values (a diverged run, a damaged file)
 * would predict null points with exit 0: refused, naming it. */
static int check_finite(const char *path, const char *name, const sp_tensor *t) {
  if (t->dtype != SP_F32) return 0;
  const float *v = t->data;
  int64_t n = sp_tensor_numel(t), bad = 0, first = -1;
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(v[i])) bad++, first = first < 0 ? i : first;
  if (!bad) return 0;
  return sp_error_set(
      "%s: '%s' holds %lld NaN or infinite value(s) (the first at %lld): a diverged run or a "
      "damaged file",
      path, name, (long long)bad, (long long)first);
}

static const char *copy_into(const char *s, char **buf, size_t *left) {
  if (!s || *left == 0) return NULL;
  char *dst = *buf;
  size_t n = strlen(s);
  if (n >= *left) n = *left - 1;
  memcpy(dst, s, n);
  dst[n] = 0;
  *buf += n + 1;
  *left -= n + 1;
  return dst;
}

int sp_checkpoint_load(const char *path, sp_graph *g, sp_optimizer *opt, sp_checkpoint_meta *meta, char *buf,
                       size_t buf_size) {
  sp_st_file *f = sp_st_open(path);
  if (!f) return -1;
  const char *format = sp_st_meta(f, "format");
  int rc = 0;
  if (!format || strcmp(format, FORMAT)) {
    rc = sp_error_set("%s: not a spry checkpoint (metadata format is '%s', expected '%s')", path,
                      format ? format : "missing", FORMAT);
  }
  for (int i = 0; i < sp_graph_param_count(g) && rc == 0; i++) {
    const char *name = sp_graph_param_name(g, i);
    if (!sp_st_get(f, name))
      rc = sp_error_set("%s: parameter '%s' is missing", path, name);
    else if (sp_st_read_into(f, name, sp_graph_param_value(g, i)) != 0)
      rc = -1;
    else
      rc = check_finite(path, name, sp_graph_param_value(g, i));
  }
  if (rc == 0 && opt) {
    char name[600];
    for (int i = 0; i < sp_optimizer_state_count(opt) && rc == 0; i++) {
      snprintf(name, sizeof name, "optim.%s", sp_optimizer_state_name(opt, i));
      sp_tensor t = sp_optimizer_state_tensor(opt, i);
      if (!sp_st_get(f, name))
        rc = sp_error_set("%s: optimizer state '%s' is missing (saved with another optimizer?)", path, name);
      else if (sp_st_read_into(f, name, &t) != 0)
        rc = -1;
      else
        rc = check_finite(path, name, &t);
    }
    int64_t steps = 0;
    if (rc == 0 && (rc = parse_i64(f, path, "optimizer_steps", &steps)) == 0) sp_optimizer_set_steps(opt, steps);
  }
  if (rc == 0 && meta) {
    memset(meta, 0, sizeof *meta);
    rc = parse_i64(f, path, "epoch", &meta->epoch);
    if (rc == 0) rc = parse_i64(f, path, "iteration", &meta->iteration);
    const char *seed = sp_st_meta(f, "seed");
    if (rc == 0 && seed) {
      char *end;
      meta->seed = strtoull(seed, &end, 10);
      if (*seed == 0 || *end != 0) rc = sp_error_set("%s: metadata 'seed' is not an integer: '%s'", path, seed);
    }
    if (rc == 0) rc = parse_i64(f, path, "step_in_epoch", &meta->step_in_epoch);
    meta->best = INFINITY;
    const char *d = sp_st_meta(f, "loss_sum");
    if (d) meta->loss_sum = strtod(d, NULL);
    if ((d = sp_st_meta(f, "best"))) meta->best = strtod(d, NULL);
    char *cursor = buf;
    size_t left = buf ? buf_size : 0;
    meta->model = copy_into(sp_st_meta(f, "model"), &cursor, &left);
    meta->config = copy_into(sp_st_meta(f, "config"), &cursor, &left);
  }
  sp_st_close(f);
  return rc;
}
