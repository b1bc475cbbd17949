/* The video trainer under `mpirun -np 2`: with synchronised batch norm, a
 * 2-rank TSM run (2 clips per rank) ends with the weights of the same config
 * trained by one process (4 clips per step): the loader gives rank r slice r
 * of every global batch and sampling is keyed by clip; so does a Multigrid
 * run (several graphs and plans on one gradient reducer); a 2-rank run
 * stopped mid-epoch resumes in one process. Only rank 0 writes. The ranks
 * share the validation (each scores its part of the set) and report what
 * one process scores with the checkpoint rank 0 wrote. Ranks that kept
 * different clips (a clip missing on one machine) are refused.
 * The one-process run is a `spry train` child with SPRY_MPI=0. SGD and no
 * dropout (dropout masks are keyed by the position in a rank's batch). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/dist.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "train/loop.h" /* sp_train_stop_after */
#include "spry/video.h"
#include "spry/video_train.h"
#include "dist_runs.h"
#include "spry/plot.h"
#include "testkit.h"

static char dir[256], cfg_path[300];

/* Trains the config (plus `extra` sets) on the ranks into DIR/NAME-two and
 * in one process into DIR/NAME-one, and compares the final weights. */
static void compare(const char *name, int n_extra, const char *const *extra, int epochs, double optim_tol) {
  char two[300], one[300], set_out[400], args[1024] = "";
  snprintf(two, sizeof two, "%s/%s-two", dir, name);
  snprintf(one, sizeof one, "%s/%s-one", dir, name);
  snprintf(set_out, sizeof set_out, "out=%s", two);
  char *sets[8] = {set_out};
  for (int i = 0; i < n_extra; i++) {
    sets[1 + i] = (char *)extra[i];
    snprintf(args + strlen(args), sizeof args - strlen(args), " --set %s", extra[i]);
  }
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(cfg_path, 1 + n_extra, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  sp_video_summary s;
  if (sp_video_train_run(&cfg, text, 0, &s) != 0) fail_msg("rank %d: %s", sp_dist_rank(), sp_last_error());
  free(text);
  assert_true(isfinite(s.train_loss));
  if (sp_dist_rank() == 0) {
    const char *bin = getenv("SPRY_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SPRY_MPI=0 %s train %s --set out=%s%s > /dev/null 2>&1", bin ? bin : "spry", cfg_path,
             one, args);
    assert_int_equal(system(cmd), 0);
  }
  sp_dist_barrier(600, "test: one-process run");
  dr_assert_close_weights(two, one, optim_tol);
  if (sp_dist_rank() == 0) { /* rank 0 wrote the run, and the validation in it */
    char p[400];
    snprintf(p, sizeof p, "%s/metrics.jsonl", two);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f)) lines++, assert_non_null(strstr(line, "\"val_top1\""));
    fclose(f);
    assert_int_equal(lines, epochs);
  }
}

static void two_ranks_match_one_process(void **state) {
  (void)state;
  compare("plain", 0, NULL, 2, 1e-3);
}

/* Multigrid: shapes of 2, 4 and 8 frames (one graph each, one plan per
 * shape, all hooked to the one reducer as they come). At 32 px every size
 * stays 32, so each global batch is a whole multiple of the ranks and the
 * split is exact. */
static void multigrid_two_ranks_match_one_process(void **state) {
  (void)state;
  const char *const mg[] = {"data.segments=8", "multigrid.long=true", "multigrid.short=true", "epochs=4"};
  compare("multigrid", 4, mg, 4, 0.1);
}

/* A 2-rank run stopped mid-epoch (every rank at the same step, as on
 * Ctrl-C) and resumed by one process ends where the one-process run of the
 * first test ended: the checkpoint counts global batches. */
static void stopped_on_two_resumes_on_one(void **state) {
  (void)state;
  char part[300], one[300], set_out[400];
  snprintf(part, sizeof part, "%s/part", dir);
  snprintf(one, sizeof one, "%s/plain-one", dir);
  snprintf(set_out, sizeof set_out, "out=%s", part);
  char *sets[] = {set_out};
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(cfg_path, 1, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  sp_video_summary s;
  sp_train_stop_after(3); /* 2 steps per epoch: mid second epoch */
  int rc = sp_video_train_run(&cfg, text, 0, &s);
  sp_train_stop_after(0);
  free(text);
  if (rc != 130) fail_msg("rank %d: the stopped run returned %d: %s", sp_dist_rank(), rc, sp_last_error());
  if (sp_dist_rank() == 0) {
    const char *bin = getenv("SPRY_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SPRY_MPI=0 %s train %s --resume %s > /dev/null 2>&1", bin ? bin : "spry", cfg_path, part);
    assert_int_equal(system(cmd), 0);
  }
  sp_dist_barrier(600, "test: one-process resume");
  dr_assert_same_weights(part, one);
}

/* Per-rank batch norm (each rank's running statistics its own) and 2 test
 * clips of each of 5 videos: the ranks score 5 entries each, video 2's two
 * clips on different ranks. The validation the 2-rank run reports is the one
 * process's `spry eval` of the checkpoint rank 0 wrote: the ranks validate
 * with rank 0's statistics and sum their scores. */
static void validation_shared_by_ranks_is_rank0s_model(void **state) {
  (void)state;
  char out[300], set_out[400];
  snprintf(out, sizeof out, "%s/val-split", dir);
  snprintf(set_out, sizeof set_out, "out=%s", out);
  char *sets[] = {set_out, "dist.sync_bn=false", "data.test_clips=2"};
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(cfg_path, 3, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  sp_video_summary s;
  if (sp_video_train_run(&cfg, text, 0, &s) != 0) fail_msg("rank %d: %s", sp_dist_rank(), sp_last_error());
  free(text);
  /* In step before any check: a failed one leaves no rank waiting. */
  sp_dist_barrier(600, "test: 2-rank run");
  /* Every rank ends with the whole set's figures. */
  assert_int_equal(s.val_clips, 5);
  if (sp_dist_rank() == 0) {
    char weights[400];
    snprintf(weights, sizeof weights, "%s/last.safetensors", out);
    sp_video_summary one;
    if (sp_video_eval_checkpoint(&cfg, weights, NULL, &one) != 0) fail_msg("%s", sp_last_error());
    assert_int_equal(one.val_clips, 5);
    double loss = dr_last_metric(out, "val_loss");
    if (fabs(loss - one.val_loss) > 1e-5 * fabs(one.val_loss))
      fail_msg("val_loss: 2 ranks %.9g, one process %.9g", loss, one.val_loss);
    assert_true(fabs(dr_last_metric(out, "val_top1") - one.top1) < 1e-12);
    assert_true(fabs(dr_last_metric(out, "val_top5") - one.top5) < 1e-12);
    assert_true(fabs(s.val_loss - one.val_loss) <= 1e-5 * fabs(one.val_loss));
  }
}

/* Two "machines" that lost different clips of the training set: each rank
 * reads the same relative list path from its own working folder (as nodes
 * mounting different copies of a dataset), where a clip of a different class
 * is missing. The config text is the same on both and each rank keeps 7 of
 * the 8 clips, so only the hash of the kept clips can tell; every rank must
 * refuse the run, before any step. */
static void ranks_that_kept_different_clips_are_refused(void **state) {
  (void)state;
  const int rank = sp_dist_rank();
  char node[300], here[1024], line[600], path[300], label[32];
  assert_non_null(getcwd(here, sizeof here));
  snprintf(node, sizeof node, "%s/node%d/train", dir, rank);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", node);
  assert_int_equal(system(cmd), 0);
  char list_in[400], list_out[400];
  snprintf(list_in, sizeof list_in, "%s/train/list.txt", dir);
  snprintf(list_out, sizeof list_out, "%s/list.txt", node);
  FILE *in = fopen(list_in, "r"), *out = fopen(list_out, "w");
  assert_non_null(in);
  assert_non_null(out);
  for (int i = 0; fgets(line, sizeof line, in); i++) {
    fputs(line, out); /* every rank lists all 8 clips */
    assert_int_equal(sscanf(line, "%299s %31s", path, label), 2);
    if (i == 1 + rank) continue; /* rank 0 lacks clip 1, rank 1 clip 2 */
    char from[700], to[700];
    snprintf(from, sizeof from, "%s/train/%s", dir, path);
    snprintf(to, sizeof to, "%s/%s", node, path);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname %s)\" && ln -s %s %s", to, from, to);
    assert_int_equal(system(cmd), 0);
  }
  fclose(in);
  fclose(out);
  char out_dir[300], set_out[400];
  snprintf(out_dir, sizeof out_dir, "%s/kept-differ", dir);
  snprintf(set_out, sizeof set_out, "out=%s", out_dir);
  char *sets[] = {set_out, "data.train_list=train/list.txt"};
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(cfg_path, 2, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  snprintf(node, sizeof node, "%s/node%d", dir, rank);
  assert_int_equal(chdir(node), 0);
  sp_video_summary s;
  int rc = sp_video_train_run(&cfg, text, 0, &s);
  assert_int_equal(chdir(here), 0);
  free(text);
  if (rc == 0) fail_msg("rank %d: a run whose ranks kept different clips was accepted", rank);
  if (!strstr(sp_last_error(), "rank(s) 1 kept other clips than rank 0"))
    fail_msg("rank %d: unexpected error: %s", rank, sp_last_error());
  snprintf(path, sizeof path, "%s/last.safetensors", out_dir);
  assert_int_equal(access(path, F_OK), -1); /* refused before any step */
  sp_dist_barrier(600, "test: kept-clip check");
}

int main(void) {
  if (sp_dist_init() != 0) return 1;
  if (sp_dist_world() < 2) return 77; /* needs mpirun */
  if (sp_dist_rank() == 0) {
    if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
    char p[400];
    snprintf(p, sizeof p, "%s/train", dir);
    if (sp_synth_actions(p, 8, 8, 32, 1) != 0) return 1;
    snprintf(p, sizeof p, "%s/val", dir);
    if (sp_synth_actions(p, 5, 8, 32, 2) != 0) return 1;
    snprintf(cfg_path, sizeof cfg_path, "%s/run.yaml", dir);
    FILE *f = fopen(cfg_path, "w");
    if (!f) return 1;
    fprintf(f,
            "task: video\nmodel: tsm-r18\nmodel_options: {base_width: 8}\n"
            "data: {train_list: %s/train/list.txt, val_list: %s/val/list.txt, segments: 4, size: 32, short_side: 32,"
            " flip: 0.5, mean: 0.5, std: 0.25}\n"
            "optimizer: {type: sgd, lr: 0.0125, momentum: 0.9, weight_decay: 0.0001}\n"
            "schedule: {decay: cosine, warmup_epochs: 1}\n"
            "epochs: 2\nbatch: 4\nworkers: 1\nthreads: 1\nseed: 3\ndist: {sync_bn: true}\n"
            "backend: ref\n" /* fixed summation order: 2 x B and 1 x 2B agree to rounding */,
            dir, dir);
    fclose(f);
  }
  sp_dist_bcast(dir, sizeof dir, "test setup");
  sp_dist_bcast(cfg_path, sizeof cfg_path, "test setup");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_ranks_match_one_process),
      cmocka_unit_test(multigrid_two_ranks_match_one_process),
      cmocka_unit_test(stopped_on_two_resumes_on_one),
      cmocka_unit_test(validation_shared_by_ranks_is_rank0s_model),
      cmocka_unit_test(ranks_that_kept_different_clips_are_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_plot_release_caches(); /* rank 0's run reports use fontconfig; its caches look like leaks */
  sp_dist_barrier(600, "test end");
  if (sp_dist_rank() == 0) sp_test_rmtree(dir);
  return rc;
}
