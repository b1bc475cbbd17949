/* Multigrid schedules (see include/spry/video_train.h for the rules).
 *
 * Everything is a pure function of (config, epoch, iteration), so a resumed
 * run and every data-parallel rank see the same shapes. */
#include <math.h>

#include "spry/video_train.h"

/* Multiples of 32 keep every ResNet stage's map whole (5 halvings). */
static int round32(double px) {
  int r = (int)lround(px / 32.0) * 32;
  return r < 32 ? 32 : r;
}

int sp_multigrid_stage(const sp_multigrid *m, int64_t epoch) {
  if (!m->long_cycle || m->epochs <= 0) return 3;
  int64_t s = epoch * 4 / m->epochs;
  return s < 0 ? 0 : s > 3 ? 3 : (int)s;
}

sp_video_shape sp_multigrid_shape(const sp_multigrid *m, int64_t epoch, int64_t iter) {
  /* Long cycle: batch factor, frame divisor, spatial factor per stage. */
  static const int lb[4] = {8, 4, 2, 1}, lt[4] = {4, 2, 2, 1};
  static const double ls[4] = {M_SQRT1_2, M_SQRT1_2, 1.0, 1.0};
  /* Short cycle: spatial factor and batch factor (its inverse square). */
  static const double ss[3] = {0.5, M_SQRT1_2, 1.0};
  static const int sb[3] = {4, 2, 1};
  int st = sp_multigrid_stage(m, epoch);
  /* The final 1/8 of training runs the plain stage shape (the paper's final
   * phase at the base shape). */
  int final_phase = m->epochs > 0 && epoch * 8 >= (int64_t)m->epochs * 7;
  /* Offset by the epoch so that epochs of one or two iterations still cycle. */
  int sc = m->short_cycle && !final_phase ? (int)((iter + epoch) % 3) : 2;
  sp_video_shape s;
  s.frames = m->frames / lt[st] > 0 ? m->frames / lt[st] : 1;
  s.size = st == 3 && sc == 2 ? m->size : round32(m->size * ls[st] * ss[sc]);
  if (s.size > m->size) s.size = m->size;
  int64_t b = (int64_t)m->batch * lb[st] * sb[sc];
  if (m->entries > 0 && b > m->entries) b = m->entries;
  s.batch = (int)(b < 1 ? 1 : b);
  return s;
}

int sp_multigrid_epoch_shapes(const sp_multigrid *m, int64_t epoch, int keep_partial, sp_video_shape *out, int cap) {
  int n = 0;
  int64_t used = 0;
  for (int64_t it = 0; n < cap; it++) {
    sp_video_shape s = sp_multigrid_shape(m, epoch, it);
    int64_t left = m->entries - used;
    if (left <= 0) break;
    if (s.batch > left) {
      if (!keep_partial) break;
      s.batch = (int)left;
    }
    out[n++] = s;
    used += s.batch;
  }
  return n;
}

double sp_multigrid_lr_scale(const sp_multigrid *m, const sp_video_shape *s) {
  return m->batch > 0 ? (double)s->batch / m->batch : 1.0;
}
