/* Multigrid schedules: the long cycle's four shapes, the short cycle per
 * iteration, sizes in multiples of 16, batches of constant cost, the
 * long-cycle linear-scaling lr rule, epochs
 * covered by whole batches, and a schedule that is continuous in progress. */
#include <math.h>

#include "spry/optim.h"
#include "spry/video_train.h"
#include "testkit.h"

static sp_multigrid mg(int lng, int shrt) {
  return (sp_multigrid){.long_cycle = lng, .short_cycle = shrt, .batch = 4, .frames = 8, .size = 224, .epochs = 16,
                        .entries = 100000};
}

static void long_cycle_stages(void **state) {
  (void)state;
  sp_multigrid m = mg(1, 0);
  /* 16 epochs: 4 per stage; [8N, T/4, H/sqrt2], [4N, T/2, H/sqrt2], [2N, T/2, H], [N, T, H]. */
  /* 4*8*224^2 / (2*160^2) = 31.4: the batch keeps the cost, not the 8x. */
  const int batch[4] = {31, 16, 8, 4}, frames[4] = {2, 4, 4, 8}, size[4] = {160, 160, 224, 224};
  for (int e = 0; e < 16; e++) {
    int st = sp_multigrid_stage(&m, e);
    assert_int_equal(st, e / 4);
    sp_video_shape s = sp_multigrid_shape(&m, e, 0);
    assert_int_equal(s.batch, batch[st]);
    assert_int_equal(s.frames, frames[st]);
    assert_int_equal(s.size, size[st]); /* 224/sqrt2 = 158 -> 160 */
    assert_int_equal(s.size % 16, 0);
    /* Each iteration costs about the same: N*T*H*W within rounding. */
    double cost = (double)s.batch * s.frames * s.size * s.size, base = 4.0 * 8 * 224 * 224;
    assert_true(cost / base > 0.9 && cost / base < 1.1);
    assert_true(fabs(sp_multigrid_lr_scale(&m, e) - batch[st] / 4.0) < 1e-12);
  }
  sp_multigrid off = mg(0, 0);
  for (int e = 0; e < 16; e++) {
    sp_video_shape s = sp_multigrid_shape(&off, e, e);
    assert_int_equal(s.batch, 4), assert_int_equal(s.frames, 8), assert_int_equal(s.size, 224);
  }
}

/* Several long cycles (PySlowFast: one per learning-rate step) over the
 * first 7/8 of training, then the base shape. */
static void repeated_long_cycles(void **state) {
  (void)state;
  sp_multigrid m = mg(1, 0);
  m.epochs = 32, m.cycles = 2; /* 28 epochs of cycles: 14 each, 3.5 per stage */
  const int want[32] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, /* cycle 1 */
                        0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, /* cycle 2 */
                        3, 3, 3, 3};                              /* final phase */
  for (int e = 0; e < 32; e++) assert_int_equal(sp_multigrid_stage(&m, e), want[e]);
  m.cycles = 1; /* one cycle spans all epochs, as before */
  for (int e = 0; e < 32; e++) assert_int_equal(sp_multigrid_stage(&m, e), e / 8);
  /* Boundaries that are not whole in floating point: 16 epochs, 3 cycles of
   * 14/3 epochs; epoch 7 is 1.5 cycles in: stage 2 of the second cycle. */
  m.epochs = 16, m.cycles = 3;
  const int want3[16] = {0, 0, 1, 2, 3, 0, 1, 2, 2, 3, 0, 1, 2, 3, 3, 3};
  for (int e = 0; e < 16; e++) assert_int_equal(sp_multigrid_stage(&m, e), want3[e]);
}

/* A batch capped at the epoch's clips scales the lr by what it really is. */
static void lr_follows_the_capped_batch(void **state) {
  (void)state;
  sp_multigrid m = mg(1, 0);
  m.batch = 16, m.entries = 64; /* stage 0 would want ~125 clips */
  assert_int_equal(sp_multigrid_shape(&m, 0, 0).batch, 64);
  assert_true(fabs(sp_multigrid_lr_scale(&m, 0) - 64.0 / 16) < 1e-12);
}

static void short_cycle_per_iteration(void **state) {
  (void)state;
  sp_multigrid m = mg(0, 1);
  /* H/2, H/sqrt2, H with batch x4, x2, x1, rotating by iteration (+ epoch);
   * the lr stays the stage's (the short cycle does not scale it). */
  for (int it = 0; it < 9; it++) {
    sp_video_shape s = sp_multigrid_shape(&m, 0, it);
    const int size[3] = {112, 160, 224}, batch[3] = {16, 8, 4}; /* 158 rounds to 160 */
    assert_true(fabs(sp_multigrid_lr_scale(&m, 0) - 1.0) < 1e-12);
    assert_int_equal(s.size, size[it % 3]);
    assert_int_equal(s.batch, batch[it % 3]);
    assert_int_equal(s.frames, 8);
  }
  /* The final 1/8 of training runs the base shape. */
  sp_video_shape last = sp_multigrid_shape(&m, 15, 0);
  assert_int_equal(last.size, 224), assert_int_equal(last.batch, 4);
}

static void epochs_are_covered(void **state) {
  (void)state;
  sp_multigrid m = mg(1, 1);
  m.entries = 1000;
  sp_video_shape s[2000];
  for (int e = 0; e < 16; e++) {
    int n = sp_multigrid_epoch_shapes(&m, e, 0, s, 2000), used = 0;
    for (int j = 0; j < n; j++) used += s[j].batch;
    assert_true(n > 0 && used <= 1000);
    /* Whatever is left is less than the next batch. */
    assert_true(1000 - used < sp_multigrid_shape(&m, e, n).batch);
    int np = sp_multigrid_epoch_shapes(&m, e, 1, s, 2000), all = 0;
    for (int j = 0; j < np; j++) all += s[j].batch;
    assert_int_equal(all, 1000);
  }
  /* Batches never exceed the epoch. */
  m.entries = 10;
  assert_true(sp_multigrid_shape(&m, 0, 0).batch <= 10);
}

static void schedule_is_continuous_in_progress(void **state) {
  (void)state;
  /* The trainer's progress is clips seen / clips per epoch: as the batch (and
   * the iteration count) changes between stages, the base lr never jumps. */
  sp_lr_schedule sch = {.base_lr = 0.1f, .decay = SP_LR_COSINE, .total_epochs = 16};
  sp_multigrid m = mg(1, 1);
  m.entries = 1000;
  sp_video_shape s[2000];
  double prev = sp_lr_at_epoch(&sch, 0);
  for (int e = 0; e < 16; e++) {
    int n = sp_multigrid_epoch_shapes(&m, e, 0, s, 2000);
    long done = 0;
    for (int j = 0; j < n; j++) {
      double lr = sp_lr_at_epoch(&sch, sp_epoch_progress(e, done, m.entries));
      assert_true(lr <= prev + 1e-12);     /* cosine only goes down */
      assert_true(prev - lr < 0.1 * 0.05); /* and never by a jump */
      prev = lr;
      done += s[j].batch;
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(long_cycle_stages),
      cmocka_unit_test(repeated_long_cycles),
      cmocka_unit_test(lr_follows_the_capped_batch),
      cmocka_unit_test(short_cycle_per_iteration),
      cmocka_unit_test(epochs_are_covered),
      cmocka_unit_test(schedule_is_continuous_in_progress),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
