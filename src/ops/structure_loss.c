/* Structure loss (seed 001): an L1 on difference vectors between each
 * keypoint and its fixed neighbours,
 *   mean over N*K*n_neighbours*2 of |(p_i - p_j) - (t_i - t_j)|  (x and y),
 * so it is zero whenever pred == target and never moves the optimum, but
 * pulls predictions towards the target's local geometry. The neighbour table
 * is fixed for a run: by default the n nearest points on the training mean
 * shape (sp_structure_neighbours). Gradient at an exact 0 is 0, as L1. */
#include <math.h>
#include <stdio.h>

#include "ops/ops.h"

static int structure_loss_infer(const void *attr, int n_in, const sp_shape *in, int n_param, const sp_shape *param,
                                sp_shape *out, char *err, size_t errlen) {
  (void)param;
  const sp_structure_loss_attr *at = attr;
  char a[64], b[64];
  if (n_in != 2 || n_param != 0) {
    snprintf(err, errlen, "structure_loss: expects 2 inputs (pred, target) and no params, got %d inputs, %d params",
             n_in, n_param);
    return -1;
  }
  if (in[0].ndim != 3 || in[0].d[2] != 2 || in[0].d[0] < 1 || !sp_shape_equal(&in[0], &in[1])) {
    snprintf(err, errlen, "structure_loss: pred %s and target %s must both be points [N,K,2]",
             sp_shape_str(&in[0], a, sizeof a), sp_shape_str(&in[1], b, sizeof b));
    return -1;
  }
  if (!at || at->n_neighbours < 1 || !at->neighbours || at->n_points != in[0].d[1]) {
    snprintf(err, errlen,
             "structure_loss: attr needs n_points == K (%lld in %s), n_neighbours >= 1 and a neighbour table "
             "(got n_points=%d, n_neighbours=%d, table %s)",
             (long long)in[0].d[1], sp_shape_str(&in[0], a, sizeof a), at ? at->n_points : 0, at ? at->n_neighbours : 0,
             at && at->neighbours ? "set" : "NULL");
    return -1;
  }
  /* A bad index would read out of bounds in every step: reject it once here. */
  for (int64_t i = 0; i < (int64_t)at->n_points * at->n_neighbours; i++) {
    if (at->neighbours[i] < 0 || at->neighbours[i] >= at->n_points) {
      snprintf(err, errlen, "structure_loss: neighbours[%lld] = %d is not a point index in [0,%d)", (long long)i,
               (int)at->neighbours[i], at->n_points);
      return -1;
    }
  }
  *out = sp_shape1(1);
  return 0;
}

static void structure_loss_forward(const sp_op_args *a) {
  const sp_structure_loss_attr *at = a->attr;
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  const int64_t n = a->in[0]->shape.d[0], k = at->n_points, nn = at->n_neighbours;
  double s = 0.0;
  for (int64_t b = 0; b < n; b++) {
    const float *pb = p + b * k * 2, *tb = t + b * k * 2;
    for (int64_t i = 0; i < k; i++)
      for (int64_t m = 0; m < nn; m++) {
        const int64_t j = at->neighbours[i * nn + m];
        for (int c = 0; c < 2; c++)
          s += fabs(((double)pb[2 * i + c] - pb[2 * j + c]) - ((double)tb[2 * i + c] - tb[2 * j + c]));
      }
  }
  ((float *)a->out->data)[0] = (float)(s / (double)(n * k * nn * 2));
}

static void structure_loss_backward(const sp_op_args *a) {
  const sp_structure_loss_attr *at = a->attr;
  const float *p = a->in[0]->data, *t = a->in[1]->data;
  float *dp = a->d_in[0] ? a->d_in[0]->data : NULL;
  float *dt = a->d_in[1] ? a->d_in[1]->data : NULL;
  const int64_t n = a->in[0]->shape.d[0], k = at->n_points, nn = at->n_neighbours;
  const float w = (float)((double)((const float *)a->d_out->data)[0] / (double)(n * k * nn * 2));
  for (int64_t b = 0; b < n; b++) {
    const float *pb = p + b * k * 2, *tb = t + b * k * 2;
    for (int64_t i = 0; i < k; i++)
      for (int64_t m = 0; m < nn; m++) {
        const int64_t j = at->neighbours[i * nn + m];
        for (int c = 0; c < 2; c++) {
          const double e = ((double)pb[2 * i + c] - pb[2 * j + c]) - ((double)tb[2 * i + c] - tb[2 * j + c]);
          const float g = e > 0.0 ? w : (e < 0.0 ? -w : 0.0f);
          if (dp) {
            dp[b * k * 2 + 2 * i + c] += g;
            dp[b * k * 2 + 2 * j + c] -= g;
          }
          if (dt) {
            dt[b * k * 2 + 2 * i + c] -= g;
            dt[b * k * 2 + 2 * j + c] += g;
          }
        }
      }
  }
}

/* Candidates are ranked by (squared distance, index); each pass takes the
 * smallest one ranked after the previous pick, so ties go to the lower index
 * and no "taken" table is needed. O(K^2 n), trivial for K <= a few hundred. */
void sp_structure_neighbours(const float *mean_shape, int k, int n, int32_t *out) {
  for (int i = 0; i < k; i++) {
    double last_d = -1.0;
    int last_j = -1;
    for (int m = 0; m < n; m++) {
      double best_d = INFINITY;
      int best_j = -1;
      for (int j = 0; j < k; j++) {
        if (j == i) continue;
        const double dx = (double)mean_shape[2 * j] - mean_shape[2 * i];
        const double dy = (double)mean_shape[2 * j + 1] - mean_shape[2 * i + 1];
        const double d = dx * dx + dy * dy;
        const int after_last = d > last_d || (d == last_d && j > last_j);
        if (after_last && (d < best_d || (d == best_d && j < best_j))) {
          best_d = d;
          best_j = j;
        }
      }
      /* fewer than n other points: pad with the point itself, whose
       * difference term is always 0 */
      if (best_j < 0) {
        out[i * n + m] = i;
        continue;
      }
      out[i * n + m] = best_j;
      last_d = best_d;
      last_j = best_j;
    }
  }
}

const sp_op_def sp_op_structure_loss = {
    .name = "structure_loss",
    .flags = SP_OP_IS_LOSS | SP_OP_BWD_NEEDS_INPUT,
    .infer = structure_loss_infer,
    .saved_bytes = NULL,
    .forward = structure_loss_forward,
    .backward = structure_loss_backward,
};
