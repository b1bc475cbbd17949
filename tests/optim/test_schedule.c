/* Learning-rate schedules: closed form, PyTorch's schedulers stepped per
 * iteration, step decay, fractional warm-up, and continuity across a
 * Multigrid change of iterations per epoch. */
#include <math.h>
#include <string.h>

#include "spry/optim.h"
#include "spry/safetensors.h"
#include "testkit.h"

#define IPE 10 /* as in tools/fixtures/optim.py */

static sp_lr_schedule cosine(double warm, float start) {
  sp_lr_schedule s;
  memset(&s, 0, sizeof s);
  s.base_lr = 0.1f;
  s.warmup_epochs = warm;
  s.warmup_start_factor = start;
  s.decay = SP_LR_COSINE;
  s.total_epochs = 5;
  s.min_lr = 1e-4f;
  return s;
}

static sp_lr_schedule step_decay(void) {
  sp_lr_schedule s;
  memset(&s, 0, sizeof s);
  s.base_lr = 0.1f;
  s.warmup_epochs = 0.5;
  s.warmup_start_factor = 0.01f;
  s.decay = SP_LR_STEP;
  s.n_milestones = 2;
  s.milestones[0] = 2.0;
  s.milestones[1] = 3.5;
  s.gamma = 0.1f;
  return s;
}

/* Compares sp_lr_at per iteration with a recorded PyTorch lr sequence. */
static void against_fixture(const char *name, const sp_lr_schedule *s) {
  char path[1024];
  sp_st_file *f = sp_st_open(sp_test_fixture_path("optim/schedule.safetensors", path, sizeof path));
  if (!f) fail_msg("%s", sp_last_error());
  const sp_tensor *t = sp_st_get(f, name);
  if (!t) fail_msg("schedule fixture has no \"%s\"", name);
  int64_t n = sp_tensor_numel(t);
  const float *ref = t->data;
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double lr = sp_lr_at(s, i, IPE), err = fabs(lr - ref[i]);
    if (ref[i] != 0 && err / ref[i] > worst) worst = err / ref[i];
    /* The reference is stored as f32: 6e-8 relative is its own rounding. */
    if (!(err <= 1e-6 * ref[i] + 1e-12)) fail_msg("%s: iteration %lld: lr %.9g, PyTorch %.9g", name, (long long)i, lr, ref[i]);
  }
  print_message("%-20s %lld iterations, max rel err %.2g\n", name, (long long)n, worst);
  sp_st_close(f);
}

static void warmup_cosine_matches_pytorch(void **state) {
  (void)state;
  sp_lr_schedule s = cosine(0.5, 0.01f);
  assert_int_equal(sp_lr_schedule_check(&s), 0);
  against_fixture("cosine.sequential", &s); /* LinearLR then CosineAnnealingLR */
  against_fixture("cosine.lambda", &s);     /* LambdaLR, 10 iterations past the end */
}

static void warmup_cosine_closed_form(void **state) {
  (void)state;
  sp_lr_schedule s = cosine(0.5, 0.01f);
  const double base = 0.1, lo = 1e-4;
  /* Landmarks. */
  assert_true(fabs(sp_lr_at_epoch(&s, 0) - 0.01 * base) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 0.25) - (0.01 + 0.99 * 0.5) * base) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 0.5) - base) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 2.75) - (base + lo) / 2) < 1e-12); /* half-way through the cosine */
  assert_true(fabs(sp_lr_at_epoch(&s, 5) - lo) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 7) - lo) < 1e-12); /* held at min_lr, not rising again */
  assert_true(fabs(sp_lr_at_epoch(&s, -1) - 0.01 * base) < 1e-12);
  /* Every iteration of a run with an awkward iters_per_epoch. */
  const int64_t ipe = 37;
  for (int64_t i = 0; i <= 5 * ipe; i++) {
    double e = (double)i / ipe, want;
    if (e < 0.5)
      want = base * (0.01 + 0.99 * e / 0.5);
    else
      want = lo + (base - lo) * 0.5 * (1 + cos(M_PI * (e - 0.5) / 4.5));
    double got = sp_lr_at(&s, i, ipe);
    if (!(fabs(got - want) <= 1e-12 * base)) fail_msg("iteration %lld: %.17g vs %.17g", (long long)i, got, want);
    if ((double)(i - 1) / ipe >= 0.5) assert_true(got <= sp_lr_at(&s, i - 1, ipe)); /* monotone after warm-up */
  }
}

static void step_decay_matches_pytorch(void **state) {
  (void)state;
  sp_lr_schedule s = step_decay();
  assert_int_equal(sp_lr_schedule_check(&s), 0);
  against_fixture("step.chained", &s); /* ChainedScheduler(LinearLR, MultiStepLR) */
  /* The drop happens exactly at the milestone, not an iteration late. */
  assert_true(fabs(sp_lr_at_epoch(&s, 1.999999) - 0.1) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 2.0) - 0.01) < 1e-12);
  assert_true(fabs(sp_lr_at(&s, 35, 10) - 0.001) < 1e-12);
  assert_true(fabs(sp_lr_at(&s, 34, 10) - 0.01) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 100) - 0.001) < 1e-12);
  s.decay = SP_LR_CONSTANT;
  assert_true(fabs(sp_lr_at_epoch(&s, 100) - 0.1) < 1e-12);
  assert_true(fabs(sp_lr_at_epoch(&s, 0.25) - 0.1 * (0.01 + 0.99 * 0.5)) < 1e-12);
}

static void fractional_warmup(void **state) {
  (void)state;
  /* 0.25 epoch = 2.5 iterations at 10 per epoch, from 0. */
  sp_lr_schedule s = cosine(0.25, 0.0f);
  assert_int_equal(sp_lr_schedule_check(&s), 0);
  against_fixture("cosine_frac.lambda", &s);
  assert_true(sp_lr_at(&s, 0, IPE) == 0.0);
  assert_true(fabs(sp_lr_at(&s, 2, IPE) - 0.1 * 0.8) < 1e-12); /* 2 of 2.5 iterations */
  assert_true(fabs(sp_lr_at(&s, 3, IPE) - sp_lr_at_epoch(&s, 0.3)) < 1e-15);
  /* "Warm up for 1/100 of training" at ImageNet-like iteration counts. */
  s = cosine(5.0 / 100, 0.0f);
  const int64_t ipe = 5005;
  int64_t end = (int64_t)ceil(0.05 * ipe); /* first iteration past warm-up */
  for (int64_t i = 0; i < end; i++) {
    double want = 0.1 * ((double)i / ipe) / 0.05;
    assert_true(fabs(sp_lr_at(&s, i, ipe) - want) < 1e-12);
  }
  assert_true(sp_lr_at(&s, end, ipe) <= 0.1 && sp_lr_at(&s, end, ipe) > 0.0999);
}

/* Multigrid: phases with different batch sizes, hence iterations per epoch.
 * Progress measured in epochs keeps the lr continuous; the lr never jumps
 * by more than the schedule's steepest slope times the progress made. */
static void multigrid_keeps_lr_continuous(void **state) {
  (void)state;
  sp_lr_schedule s = cosine(0.5, 0.01f);
  const double max_slope = fmax(0.1 * 0.99 / 0.5, (0.1 - 1e-4) * M_PI / (2 * 4.5)); /* lr per epoch */
  /* epoch ranges and iterations per epoch of each phase */
  const struct { int first, last, ipe; } phase[] = {{0, 1, 80}, {2, 2, 20}, {3, 3, 160}, {4, 4, 10}};
  double prev_lr = -1, prev_e = 0;
  int64_t global_it = 0, steps = 0;
  double naive_jump = 0;
  for (int p = 0; p < 4; p++)
    for (int ep = phase[p].first; ep <= phase[p].last; ep++)
      for (int it = 0; it < phase[p].ipe; it++, global_it++, steps++) {
        double e = sp_epoch_progress(ep, it, phase[p].ipe);
        double lr = sp_lr_at_epoch(&s, e);
        if (prev_lr >= 0) {
          assert_true(e > prev_e); /* progress only moves forward */
          double jump = fabs(lr - prev_lr), allowed = max_slope * (e - prev_e) * (1 + 1e-9) + 1e-15;
          if (!(jump <= allowed))
            fail_msg("phase %d epoch %d iteration %d: lr jumps %.3g over %.3g epochs", p, ep, it, jump, e - prev_e);
          /* What a schedule keyed on the global iteration count would do. */
          double naive = sp_lr_at(&s, global_it, phase[p].ipe);
          if (fabs(naive - lr) > naive_jump) naive_jump = fabs(naive - lr);
        }
        prev_lr = lr;
        prev_e = e;
      }
  assert_int_equal(steps, 2 * 80 + 20 + 160 + 10);
  /* The naive mapping is far off, which is why progress is tracked in epochs. */
  assert_true(naive_jump > 0.01);
  /* The end of training is where the schedule says, whatever the phases. */
  assert_true(fabs(sp_lr_at_epoch(&s, sp_epoch_progress(4, 10, 10)) - 1e-4) < 1e-12);
}

static void expect_bad(sp_lr_schedule s, const char *word) {
  sp_error_clear();
  assert_int_equal(sp_lr_schedule_check(&s), -1);
  if (!strstr(sp_last_error(), word)) fail_msg("error \"%s\" does not name %s", sp_last_error(), word);
}

static void bad_schedules_are_refused(void **state) {
  (void)state;
  sp_lr_schedule s = cosine(0.5, 0.01f);
  s.base_lr = -0.1f;
  expect_bad(s, "base_lr");
  s = cosine(0.5, 0.01f);
  s.total_epochs = 0.5;
  expect_bad(s, "total_epochs");
  s = cosine(0.5, 0.01f);
  s.min_lr = 1.0f;
  expect_bad(s, "min_lr");
  s = cosine(-1, 0.01f);
  expect_bad(s, "warmup_epochs");
  s = cosine(0.5, 1.5f);
  expect_bad(s, "warmup_start_factor");
  s = step_decay();
  s.milestones[1] = 1.0;
  expect_bad(s, "ascend");
  s = step_decay();
  s.n_milestones = 9;
  expect_bad(s, "milestones");
  s = step_decay();
  s.gamma = 0;
  expect_bad(s, "gamma");
  s.decay = (sp_lr_decay)9;
  expect_bad(s, "decay");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(warmup_cosine_matches_pytorch),
      cmocka_unit_test(warmup_cosine_closed_form),
      cmocka_unit_test(step_decay_matches_pytorch),
      cmocka_unit_test(fractional_warmup),
      cmocka_unit_test(multigrid_keeps_lr_continuous),
      cmocka_unit_test(bad_schedules_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
