/* The keypoint trainer under `mpirun -np 2`: with synchronised batch norm a
 * 2-rank run ends with the weights of the same config trained by one process
 * (batch is the global batch; the loader gives rank r slice r of every global
 * batch); a 2-rank run stopped mid-epoch resumes in one process and ends
 * there too; only rank 0 writes; the ranks share the validation and report
 * what one process's `spry eval` gives for rank 0's checkpoint; ranks that read different
 * data (other annotations under the same paths) are refused. One-process
 * runs are `spry train` / `spry eval` children with SPRY_MPI=0. SGD, not Adam: a bias before batch norm has a gradient
 * of pure rounding noise, which Adam would blow up to full-size steps; MSE,
 * not L1: sign(residual) flips on rounding noise for residuals near 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/config.h"
#include "spry/dist.h"
#include "spry/safetensors.h"
#include "spry/synth.h"
#include "spry/train.h"
#include "train/loop.h" /* sp_train_stop_after */
#include "dist_runs.h"
#include "testkit.h"
#include "train/trainer_internal.h"

static char dir[256], cfg_path[300];

static void train_here(const char *out, int resume, int expect) {
  char set_out[400];
  snprintf(set_out, sizeof set_out, "out=%s", out);
  char *sets[1] = {set_out};
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_load(cfg_path, 1, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  assert_int_equal(sp_train_run(&cfg, text, resume, NULL), expect);
  free(text);
}

/* One process, as a user would start it, on rank 0 only. */
static void train_alone(const char *args) {
  if (sp_dist_rank() == 0) {
    const char *bin = getenv("SPRY_BIN");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SPRY_MPI=0 %s train %s %s > /dev/null 2>&1", bin ? bin : "spry", cfg_path, args);
    assert_int_equal(system(cmd), 0);
  }
  sp_dist_barrier(600, "test: one-process run");
}

static void two_ranks_match_one_process(void **state) {
  (void)state;
  char two[300], one[300], args[400];
  snprintf(two, sizeof two, "%s/two", dir);
  snprintf(one, sizeof one, "%s/one", dir);
  train_here(two, 0, 0);
  snprintf(args, sizeof args, "--set out=%s", one);
  train_alone(args);
  dr_assert_same_weights(two, one);
  /* Rank 0 alone wrote the run. */
  char p[400];
  snprintf(p, sizeof p, "%s/metrics.jsonl", two);
  assert_int_equal(access(p, F_OK), 0);
}

static void stopped_on_two_resumes_on_one(void **state) {
  (void)state;
  char part[300], one[300], args[400];
  snprintf(part, sizeof part, "%s/part", dir);
  snprintf(one, sizeof one, "%s/one", dir);
  sp_train_stop_after(5); /* 4 steps per epoch: mid second epoch */
  train_here(part, 0, 130);
  sp_train_stop_after(0);
  snprintf(args, sizeof args, "--resume %s", part);
  train_alone(args);
  dr_assert_same_weights(part, one);
}

/* Per-rank batch norm (each rank's running statistics its own): the ranks
 * validate 6 of the 12 validation faces each, with rank 0's statistics, and
 * the figures the run reports (metrics.jsonl, every rank's summary) are
 * those of `spry eval` on its checkpoint in one process. */
static void validation_shared_by_ranks_is_rank0s_model(void **state) {
  (void)state;
  char out[300], set_out[400];
  snprintf(out, sizeof out, "%s/val-split", dir);
  snprintf(set_out, sizeof set_out, "out=%s", out);
  char *sets[] = {set_out, "dist.sync_bn=false"};
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_load(cfg_path, 2, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  sp_train_summary s;
  assert_int_equal(sp_train_run(&cfg, text, 0, &s), 0);
  free(text);
  /* In step before any check: a failed one leaves no rank waiting. */
  sp_dist_barrier(600, "test: 2-rank run");
  double ours[2] = {s.val.mean_px, s.val.nme_io}, rank0[2] = {s.val.mean_px, s.val.nme_io};
  sp_dist_bcast(rank0, sizeof rank0, "test: rank 0's figures");
  assert_memory_equal(ours, rank0, sizeof ours); /* every rank has the whole set's figures */
  if (sp_dist_rank() == 0) {
    const char *bin = getenv("SPRY_BIN");
    char cmd[2048], p[400], line[2048] = "";
    snprintf(p, sizeof p, "%s/eval.json", out);
    snprintf(cmd, sizeof cmd, "SPRY_MPI=0 %s eval --weights %s/last.safetensors > %s 2>/dev/null", bin ? bin : "spry",
             out, p);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    const char *mp = strstr(line, "\"mean_px\":"), *nme = strstr(line, "\"nme_io\":"), *count = strstr(line, "\"count\":");
    const char *loss = strstr(line, "\"val_loss\":");
    assert_non_null(mp), assert_non_null(nme), assert_non_null(count), assert_non_null(loss);
    assert_int_equal(atoi(count + 8), 12);
    double one_px = strtod(mp + 10, NULL), one_nme = strtod(nme + 9, NULL);
    double run_px = dr_last_metric(out, "val_mean_px"), run_nme = dr_last_metric(out, "val_nme_io");
    if (fabs(run_px - one_px) > 1e-6 * one_px || fabs(s.val.mean_px - one_px) > 1e-6 * one_px)
      fail_msg("mean error: 2 ranks %.7g (summary %.7g), one process %.7g", run_px, s.val.mean_px, one_px);
    if (fabs(run_nme - one_nme) > 1e-6 * one_nme) fail_msg("NME: 2 ranks %.7g, one process %.7g", run_nme, one_nme);
    /* Each rank sums its own part's batches: rounding differs from one process's batches. */
    double one_loss = strtod(loss + 11, NULL), run_loss = dr_last_metric(out, "val_loss");
    if (fabs(run_loss - one_loss) > 1e-5 * one_loss) fail_msg("loss: 2 ranks %.8g, one process %.8g", run_loss, one_loss);
  }
}

/* Two "machines" whose copies of the dataset differ: each rank reads the same
 * relative data path from its own working folder, where one face of a
 * different image is missing from the annotations, so both have as many
 * faces and the config text is the same. Every rank must refuse the run,
 * before any step. */
static void ranks_that_read_different_data_are_refused(void **state) {
  (void)state;
  const int rank = sp_dist_rank();
  char node[300], here[1024], cmd[1200], line[8192];
  assert_non_null(getcwd(here, sizeof here));
  snprintf(node, sizeof node, "%s/node%d", dir, rank);
  snprintf(cmd, sizeof cmd, "mkdir -p %s/faces && ln -s %s/faces/images %s/faces/images", node, dir, node);
  assert_int_equal(system(cmd), 0);
  char csv_in[400], csv_out[400];
  snprintf(csv_in, sizeof csv_in, "%s/faces/keypoints.csv", dir);
  snprintf(csv_out, sizeof csv_out, "%s/faces/keypoints.csv", node);
  FILE *in = fopen(csv_in, "r"), *out = fopen(csv_out, "w");
  assert_non_null(in);
  assert_non_null(out);
  for (int i = 0; fgets(line, sizeof line, in); i++)
    if (i != 3 + rank) fputs(line, out); /* line 0 is the header */
  fclose(in);
  fclose(out);
  char out_dir[300], set_out[400];
  snprintf(out_dir, sizeof out_dir, "%s/data-differ", dir);
  snprintf(set_out, sizeof set_out, "out=%s", out_dir);
  char *sets[] = {set_out, "data.path=faces"};
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_load(cfg_path, 2, sets, &cfg, &text) != 0) fail_msg("%s", sp_last_error());
  assert_int_equal(chdir(node), 0);
  int rc = sp_train_run(&cfg, text, 0, NULL);
  assert_int_equal(chdir(here), 0);
  free(text);
  if (rc == 0) fail_msg("rank %d: a run whose ranks read different data was accepted", rank);
  if (!strstr(sp_last_error(), "rank(s) 1 read other images or annotations than rank 0"))
    fail_msg("rank %d: unexpected error: %s", rank, sp_last_error());
  char p[400];
  snprintf(p, sizeof p, "%s/last.safetensors", out_dir);
  assert_int_equal(access(p, F_OK), -1); /* refused before any step */
  sp_dist_barrier(600, "test: data check");
  /* The run made its folder and failed before its first checkpoint: rank 0
   * took the folder back (caches and all), so no empty run folder is left
   * for the user to wonder about. */
  if (rank == 0) {
    if (access(out_dir, F_OK) == 0) fail_msg("%s: a refused run left its folder behind", out_dir);
  }
  sp_dist_barrier(600, "test: cache check");
}

int main(void) {
  if (sp_dist_init() != 0) return 1;
  if (sp_dist_world() < 2) return 77; /* needs mpirun */
  if (sp_dist_rank() == 0) {
    if (!sp_test_tmpdir(dir, sizeof dir)) return 1;
    char faces[300];
    snprintf(faces, sizeof faces, "%s/faces", dir);
    sp_synth_face_options o = sp_synth_face_defaults();
    o.progress = 0;
    if (sp_synth_faces(faces, 50, 3, &o) != 0) return 1;
    snprintf(cfg_path, sizeof cfg_path, "%s/run.yaml", dir);
    FILE *f = fopen(cfg_path, "w");
    if (!f) return 1;
    fprintf(f, "model: vgg-face\ndata:\n  path: %s\n  val_fraction: 0.2\n  crop_size: 40\n  size: 32\n  channels: 1\n"
               "augment:\n  randaugment: [1, 5]\noptimizer:\n  type: sgd\n  momentum: 0.9\n  lr: 0.01\n"
               "loss:\n  type: mse\nepochs: 2\nbatch: 8\nseed: 5\n"
               "workers: 1\nthreads: 1\ndist:\n  sync_bn: true\n"
               "backend: ref\n", /* fixed summation order: 2 x B and 1 x 2B agree to rounding */
            faces);
    fclose(f);
  }
  sp_dist_bcast(dir, sizeof dir, "test setup");
  sp_dist_bcast(cfg_path, sizeof cfg_path, "test setup");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_ranks_match_one_process),
      cmocka_unit_test(stopped_on_two_resumes_on_one),
      cmocka_unit_test(validation_shared_by_ranks_is_rank0s_model),
      cmocka_unit_test(ranks_that_read_different_data_are_refused),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  sp_dist_barrier(600, "test end");
  if (sp_dist_rank() == 0) sp_test_rmtree(dir);
  return rc;
}
