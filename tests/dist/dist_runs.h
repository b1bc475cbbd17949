/* Comparing the checkpoints of two training runs (a W-rank run and its
 * one-process twin), and reading a run's metrics, in the distributed trainer
 * tests. */
#ifndef SPRY_DIST_RUNS_H
#define SPRY_DIST_RUNS_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "spry/safetensors.h"
#include "testkit.h"

/* On rank 0: every f32 tensor of DIR_A/last.safetensors equals DIR_B's, per
 * tensor against its largest entry (1e-3): gradient-like buffers (SGD
 * momentum) hold sums with heavy cancellation, so single entries near 0
 * carry rounding noise of the tensor's scale, not their own. */
static inline void dr_assert_close_weights(const char *a, const char *b, double optim_tol);
static inline void dr_assert_same_weights(const char *a, const char *b) { dr_assert_close_weights(a, b, 1e-3); }

/* The same, with optimizer state (names `optim.*`: SGD momentum) compared at
 * optim_tol of its largest entry: over a Multigrid run's changing shapes the
 * last steps' batch-norm gradients are sums that cancel almost to zero, whose
 * rounding differs between 2 x B and 1 x 2B by a few percent of the tensor's
 * scale while the weights still agree at 1e-3. A missing or doubled gradient
 * differs by its whole size. */
static inline void dr_assert_close_weights(const char *a, const char *b, double optim_tol) {
  if (sp_dist_rank() != 0) return;
  char pa[400], pb[400];
  snprintf(pa, sizeof pa, "%s/last.safetensors", a);
  snprintf(pb, sizeof pb, "%s/last.safetensors", b);
  sp_st_file *fa = sp_st_open(pa), *fb = sp_st_open(pb);
  assert_non_null(fa);
  assert_non_null(fb);
  assert_int_equal(sp_st_count(fa), sp_st_count(fb));
  int compared = 0;
  for (int i = 0; i < sp_st_count(fa); i++) {
    const char *name = sp_st_name(fa, i);
    const sp_tensor *x = sp_st_get(fa, name), *y = sp_st_get(fb, name);
    assert_non_null(y);
    if (x->dtype != SP_F32) continue;
    const float *xa = x->data, *ya = y->data;
    double diff = 0, scale = 0;
    for (int64_t j = 0; j < sp_tensor_numel(x); j++) {
      diff = fmax(diff, fabs((double)xa[j] - ya[j]));
      scale = fmax(scale, fabs(ya[j]));
    }
    const double tol = strncmp(name, "optim.", 6) == 0 ? optim_tol : 1e-3;
    if (diff > tol * scale + 1e-6) fail_msg("%s: differs by %g (largest entry %g)", name, diff, scale);
    compared++;
  }
  assert_true(compared > 0);
  sp_st_close(fa);
  sp_st_close(fb);
}

/* The number after "KEY": in the last line of DIR/metrics.jsonl. */
static inline double dr_last_metric(const char *dir, const char *key) {
  char p[400], line[2048], last[2048] = "", k[64];
  snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  while (fgets(line, sizeof line, f)) memcpy(last, line, sizeof last);
  fclose(f);
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *at = strstr(last, k);
  if (!at) fail_msg("%s: no %s in its last line", p, key);
  return strtod(at + strlen(k), NULL);
}
#endif
