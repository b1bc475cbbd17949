/* Multigrid schedules (see include/spry/video_train.h for the rules).
 *
 * Everything is a pure function of (config, epoch, iteration), so a resumed
 * run and every data-parallel rank see the same shapes. */
#include <math.h>

#include "spry/video_train.h"

/* Multiples of 16, at least 32: a ResNet's five halvings still end at 1x1
 * or more, and 64-pixel clips get a real H/sqrt2 (48, not 32). */
static int round_size(double px) {
  int r = (int)lround(px / 16.0) * 16;
  return r < 32 ? 32 : r;
}

/* The batch that costs what the base shape costs: N T H^2 / (t h^2). */
static int64_t batch_for(const sp_multigrid *m, int frames, int size) {
  double b = (double)m->batch * m->frames * m->size * m->size / ((double)frames * size * size);
  int64_t r = (int64_t)llround(b);
  return r < 1 ? 1 : r;
}

/* The final 1/8 of training runs the base shape (the paper's fine-tuning
 * phase at the test shape, so BN statistics settle there). */
static int final_phase(const sp_multigrid *m, int64_t epoch) {
  return m->epochs > 0 && epoch * 8 >= (int64_t)m->epochs * 7;
}

int sp_multigrid_stage(const sp_multigrid *m, int64_t epoch) {
  if (!m->long_cycle || m->epochs <= 0 || epoch < 0) return 3;
  int cycles = m->cycles > 1 ? m->cycles : 1;
  if (cycles == 1) { /* one cycle over all epochs */
    int64_t s = epoch * 4 / m->epochs;
    return s > 3 ? 3 : (int)s;
  }
  /* Several cycles over the epochs before the final phase (7/8 of them), 4
   * stages each; in integers, so an epoch on a boundary is never rounded
   * into the stage before it. */
  if (final_phase(m, epoch)) return 3;
  int64_t span8 = 7 * (int64_t)m->epochs; /* a cycle is span8 / (8 cycles) epochs */
  int64_t s = (epoch * 8 * cycles % span8) * 4 / span8;
  return s > 3 ? 3 : (int)s;
}

/* Long cycle: frame divisor and spatial factor per stage (the batch follows
 * from the cost). */
static const int long_t[4] = {4, 2, 2, 1};
static const double long_s[4] = {M_SQRT1_2, M_SQRT1_2, 1.0, 1.0};

static sp_video_shape long_shape(const sp_multigrid *m, int st) {
  sp_video_shape s;
  s.frames = m->frames / long_t[st] > 0 ? m->frames / long_t[st] : 1;
  s.size = st >= 2 ? m->size : round_size(m->size * long_s[st]);
  if (s.size > m->size) s.size = m->size;
  int64_t b = batch_for(m, s.frames, s.size);
  if (m->entries > 0 && b > m->entries) b = m->entries; /* the lr scale follows the capped batch */
  s.batch = (int)b;
  return s;
}

sp_video_shape sp_multigrid_shape(const sp_multigrid *m, int64_t epoch, int64_t iter) {
  /* Short cycle: spatial factor of the stage's size. */
  static const double ss[3] = {0.5, M_SQRT1_2, 1.0};
  int st = sp_multigrid_stage(m, epoch);
  /* Offset by the epoch so that epochs of one or two iterations still cycle. */
  int sc = m->short_cycle && !final_phase(m, epoch) ? (int)((iter + epoch) % 3) : 2;
  sp_video_shape s = long_shape(m, st);
  if (sc < 2) s.size = round_size(s.size * ss[sc]);
  if (s.size > m->size) s.size = m->size;
  int64_t b = batch_for(m, s.frames, s.size);
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

double sp_multigrid_lr_scale(const sp_multigrid *m, int64_t epoch) {
  if (m->batch <= 0) return 1.0;
  return (double)long_shape(m, sp_multigrid_stage(m, epoch)).batch / m->batch;
}
