/* The `spry bench` command line: each benchmark prints one JSON object whose
 * fields the bench/ scripts and the README tables read. Speed is never
 * asserted here (timed tests on a shared machine are noise); only that the
 * figures are measured, finite, positive and mutually consistent. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"
#include "testkit.h"

/* Runs `spry ARGS` into out, expects exit 0 (skips where the binary cannot run). */
static void run_ok(const char *args, char *out, size_t size) {
  int rc = sp_test_run_cli(args, 0, out, size);
  if (rc == -1) skip();
  if (rc != 0) fail_msg("spry %s: exit status %d, output: %s", args, rc, out);
}

/* Runs `spry ARGS`, expects exit 0 and one JSON object on stdout. */
static sp_json *run_json(const char *args) {
  static char out[8192];
  run_ok(args, out, sizeof out);
  sp_json *j = sp_json_parse(out, strlen(out), sizeof out);
  if (!j || j->type != SP_JSON_OBJECT) fail_msg("spry %s: not one JSON object: %s", args, out);
  return j;
}

static double num(const sp_json *j, const char *key) {
  double v;
  if (sp_json_as_double(sp_json_get(j, key), &v) != 0) fail_msg("field %s missing or not a number", key);
  return v;
}

static void peak_reports_this_machine(void **state) {
  (void)state;
  sp_json *j = run_json("bench peak --threads 1 --runs 1 --copy-mb 8");
  assert_string_equal(sp_json_as_string(sp_json_get(j, "bench")), "peak");
  assert_int_equal((int)num(j, "threads"), 1);
  const char *isa = sp_json_as_string(sp_json_get(j, "isa"));
  assert_non_null(isa);
  /* Any machine that runs the suite copies faster than 0.1 GB/s. */
  assert_true(num(j, "copy_gb_per_s") > 0.1);
  if (strcmp(isa, "none") != 0) {
    /* One core of anything with AVX2 + FMA does well over 1 GFLOP/s. */
    double fp32 = num(j, "fp32_gflops_per_s");
    assert_true(fp32 > 1 && isfinite(fp32));
    const sp_json *bf = sp_json_get(j, "bf16_gflops_per_s");
    if (bf && bf->type != SP_JSON_NULL) {
      double ratio = num(j, "bf16_over_fp32");
      assert_true(fabs(ratio - num(j, "bf16_gflops_per_s") / fp32) < 1e-6 * ratio);
    }
    /* AMX tiles (null without them): a tile product does 16x16x32 bf16
     * multiply-adds, far above one core's fp32 FMAs even on a loaded host. */
    const sp_json *amx = sp_json_get(j, "amx_bf16_gflops_per_s");
    assert_non_null(amx);
    if (amx->type != SP_JSON_NULL) assert_true(num(j, "amx_bf16_gflops_per_s") > fp32);
  } else {
    assert_int_equal(sp_json_get(j, "fp32_gflops_per_s")->type, SP_JSON_NULL);
  }
  sp_json_free(j);
}

static void tshift_bench_checks_its_output(void **state) {
  (void)state;
  sp_json *j = run_json("bench op tshift --shape 4,16,8,8 --segments 2 --ratio 0.25 --runs 2 --threads 1");
  assert_string_equal(sp_json_as_string(sp_json_get(j, "bench")), "op_tshift");
  /* The fused kernel and the composed version computed the same tensor. */
  assert_true(sp_json_get(j, "same_output")->type == SP_JSON_BOOL && sp_json_get(j, "same_output")->u.boolean);
  double fused = num(j, "fwdbwd_ms"), composed = num(j, "composed_fwdbwd_ms");
  assert_true(fused > 0 && composed > 0);
  assert_true(fabs(num(j, "speedup_vs_composed") - composed / fused) < 1e-6 * composed / fused);
  sp_json_free(j);
}

/* --profile: a line per op kind, then the reorders (timed inside those ops),
 * the optimizer step and the clearing of gradients, and a last line with
 * what those account for of the mean step. */
static void train_profile_accounts_for_the_step(void **state) {
  (void)state;
#ifndef SPRY_HAVE_DNNL
  skip(); /* the reorders are the cpu backend's */
#endif
  static char out[16384];
  const char *args =
      "bench train --model vgg-face --backend cpu --batch 2 --size 32 --steps 2 --warmup 1 --threads 1 --profile";
  run_ok(args, out, sizeof out);
  double ops_fwd = 0, ops_bwd = 0, reo_fwd = -1, reo_bwd = -1, optimizer = -1, zero = -1, share = -1;
  int lines = 0, conv = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), lines++) {
    sp_json *j = sp_json_parse(line, strlen(line), strlen(line) + 1);
    if (!j) fail_msg("not JSON: %s", line);
    const char *bench = sp_json_as_string(sp_json_get(j, "bench"));
    if (!strcmp(bench, "train_profile_total")) {
      share = num(j, "profile_over_step");
      sp_json_free(j);
      continue;
    }
    assert_string_equal(bench, lines == 0 ? "train" : "train_profile");
    if (lines > 0) {
      const char *op = sp_json_as_string(sp_json_get(j, "op"));
      double f = num(j, "fwd_ms_per_step"), b = num(j, "bwd_ms_per_step");
      assert_true(f >= 0 && b >= 0 && isfinite(f) && isfinite(b));
      if (!strcmp(op, "reorders"))
        reo_fwd = f, reo_bwd = b;
      else if (!strcmp(op, "optimizer"))
        optimizer = b, assert_true(f == 0);
      else if (!strcmp(op, "zero_grad"))
        zero = f, assert_true(b == 0);
      else
        ops_fwd += f, ops_bwd += b, conv += !strcmp(op, "conv2d");
    }
    sp_json_free(j);
  }
  assert_true(conv == 1);
  /* Every step reorders the updated weights into the conv layout. */
  assert_true(reo_fwd > 0 && reo_bwd >= 0);
  /* Reorders run inside the ops, so they can only be part of the ops' time. */
  assert_true(reo_fwd <= ops_fwd && reo_bwd <= ops_bwd);
  assert_true(optimizer > 0 && zero >= 0);
  /* Timed inside the step: at most all of it (and most of it). */
  assert_true(share > 0.3 && share <= 1.0 + 1e-9);
}

/* --infer with --batch: that batch alone, one infer line. */
static void infer_batch_measures_that_batch(void **state) {
  (void)state;
  static char out[4096];
  const char *args =
      "bench train --model vgg-face --backend ref --size 32 --steps 1 --warmup 0 --threads 1 --infer --batch 3";
  run_ok(args, out, sizeof out);
  int lines = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    sp_json *j = sp_json_parse(line, strlen(line), strlen(line) + 1);
    if (!j) fail_msg("not JSON: %s", line);
    assert_string_equal(sp_json_as_string(sp_json_get(j, "bench")), "infer");
    assert_int_equal((int)num(j, "batch"), 3);
    assert_true(num(j, "images_per_s") > 0);
    sp_json_free(j);
    lines++;
  }
  assert_int_equal(lines, 1);
}

/* --infer --profile: per batch (1, then 64), the infer line, a line per op
 * kind with forward time only, the reorders among them, and the total. */
static void infer_profile_accounts_for_the_forward(void **state) {
  (void)state;
#ifndef SPRY_HAVE_DNNL
  skip();
#endif
  static char out[16384];
  const char *args =
      "bench train --model vgg-face --backend cpu --size 32 --steps 2 --warmup 1 --threads 1 --infer "
      "--profile";
  run_ok(args, out, sizeof out);
  int batch = 0, infer_lines = 0, totals = 0, conv = 0;
  double ops = 0, reorders = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    sp_json *j = sp_json_parse(line, strlen(line), strlen(line) + 1);
    if (!j) fail_msg("not JSON: %s", line);
    const char *bench = sp_json_as_string(sp_json_get(j, "bench"));
    if (!strcmp(bench, "infer")) {
      batch = (int)num(j, "batch"), infer_lines++, ops = 0, reorders = 0;
      assert_int_equal(batch, infer_lines == 1 ? 1 : 64);
    } else if (!strcmp(bench, "infer_profile")) {
      assert_int_equal((int)num(j, "batch"), batch);
      const char *op = sp_json_as_string(sp_json_get(j, "op"));
      double f = num(j, "fwd_ms_per_step");
      assert_true(f >= 0 && isfinite(f) && num(j, "bwd_ms_per_step") == 0);
      assert_true(strcmp(op, "optimizer") && strcmp(op, "zero_grad")); /* training only */
      if (!strcmp(op, "reorders"))
        reorders = f;
      else
        ops += f, conv += !strcmp(op, "conv2d");
    } else {
      assert_string_equal(bench, "infer_profile_total");
      assert_int_equal((int)num(j, "batch"), batch);
      totals++;
      assert_true(reorders <= ops);
      assert_true(fabs(num(j, "profile_ms_per_step") - ops) < 1e-6 * ops + 1e-9);
      const double share = num(j, "profile_over_step");
      assert_true(share > 0.3 && share <= 1.0 + 1e-9);
    }
    sp_json_free(j);
  }
  assert_int_equal(infer_lines, 2);
  assert_int_equal(totals, 2);
  assert_int_equal(conv, 2);
}

/* --profile-nodes: the op-kind lines, then a line per node that ran,
 * slowest first, named, whose times add up to the op kinds'; layers with
 * products also give their forward GFLOP and rate. */
static void profile_nodes_add_up(void **state) {
  (void)state;
  static char out[65536];
  const char *args =
      "bench train --model vgg-face --batch 2 --size 32 --steps 2 --warmup 1 --threads 1 --profile-nodes";
  run_ok(args, out, sizeof out);
  double kinds = 0, nodes = 0, last = INFINITY;
  int n_nodes = 0, fc1 = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    sp_json *j = sp_json_parse(line, strlen(line), strlen(line) + 1);
    if (!j) fail_msg("not JSON: %s", line);
    const char *bench = sp_json_as_string(sp_json_get(j, "bench")), *op = sp_json_as_string(sp_json_get(j, "op"));
    if (!strcmp(bench, "train_profile") && strcmp(op, "reorders") && strcmp(op, "optimizer") && strcmp(op, "zero_grad"))
      kinds += num(j, "fwd_ms_per_step") + num(j, "bwd_ms_per_step");
    if (!strcmp(bench, "train_profile_node")) {
      const double t = num(j, "fwd_ms_per_step") + num(j, "bwd_ms_per_step");
      assert_true(t > 0 && t <= last);
      last = t, nodes += t, n_nodes++;
      const char *name = sp_json_as_string(sp_json_get(j, "name"));
      assert_non_null(name);
      if (!strcmp(name, "fc1")) {
        fc1++;
        assert_string_equal(op, "linear");
        assert_string_equal(sp_json_as_string(sp_json_get(j, "out")), "[2,1024]");
        /* 2 rows x 128 inputs (32 px: 1x1 after five halvings) x 1024, 2 a multiply-add */
        assert_true(fabs(num(j, "fwd_gflop") - 2e-9 * 2 * 128 * 1024) <= 1e-12);
        assert_true(num(j, "fwd_gflops_per_s") > 0);
      }
      if (!strcmp(op, "batchnorm") || !strcmp(op, "reshape"))
        assert_null(sp_json_get(j, "fwd_gflop")); /* no products */
    }
    sp_json_free(j);
  }
  assert_true(n_nodes > 5);
  assert_int_equal(fc1, 1);
  assert_true(fabs(nodes - kinds) <= 1e-6 * kinds + 1e-9);
}

/* Under mpirun (when the build has MPI): rank 0 alone prints, one line whose
 * images_per_s counts both ranks, and each step all-reduces every gradient
 * once (bytes = parameter bytes); --sync-only meets once per step and sends
 * none. The ranks' output is read through a pipe. */
static sp_json *run_mpi_json(const char *args) {
  const char *mpiexec = getenv("SPRY_MPIEXEC"), *bin = getenv("SPRY_BIN");
  if (!mpiexec || !*mpiexec || !bin) skip(); /* no MPI in this build */
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
           "OMPI_MCA_btl_vader_single_copy_mechanism=none ASAN_OPTIONS=detect_leaks=0 "
           "%s -np 2 --oversubscribe -x OMP_NUM_THREADS=1 %s %s 2>/dev/null",
           mpiexec, bin, args);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  static char out[8192];
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = 0;
  int rc = pclose(f);
  if (rc != 0) fail_msg("%s: exit status %d, output: %s", cmd, rc, out);
  const char *nl = strchr(out, '\n');
  if (!nl || nl[1]) fail_msg("expected one line (rank 0's), got: %s", out);
  sp_json *j = sp_json_parse(out, strlen(out), sizeof out);
  if (!j || j->type != SP_JSON_OBJECT) fail_msg("not one JSON object: %s", out);
  return j;
}

static void train_under_mpirun_counts_every_rank(void **state) {
  (void)state;
  const char *args = "bench train --model vgg-face --batch 2 --size 32 --steps 3 --warmup 1 --threads 1";
  sp_json *j = run_mpi_json(args);
  assert_int_equal((int)num(j, "ranks"), 2);
  assert_int_equal((int)num(j, "batch"), 2); /* per rank */
  /* Both ranks' images over rank 0's step time. */
  assert_true(fabs(num(j, "images_per_s") - 2 * 2 / (num(j, "ms_per_step") * 1e-3)) < 1e-6 * num(j, "images_per_s"));
  assert_true(num(j, "param_bytes") > 0);
  assert_true(num(j, "allreduce_bytes_per_step") == num(j, "param_bytes"));
  assert_true(num(j, "allreduce_buckets") >= 1);
  assert_false(sp_json_get(j, "sync_only")->u.boolean);
  sp_json_free(j);
  char more[512];
  snprintf(more, sizeof more, "%s --sync-only", args);
  j = run_mpi_json(more);
  assert_int_equal((int)num(j, "ranks"), 2);
  assert_true(num(j, "allreduce_bytes_per_step") == 0);
  assert_true(sp_json_get(j, "sync_only")->type == SP_JSON_BOOL && sp_json_get(j, "sync_only")->u.boolean);
  sp_json_free(j);
}

static void bad_options_are_refused(void **state) {
  (void)state;
  char out[4096];
  int rc = sp_test_run_cli("bench peak --threads 0", 1, out, sizeof out);
  if (rc == -1) skip();
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "--threads"));
  /* A shift whose two groups outgrow C, and a shape no machine holds: refused, not a crash. */
  rc = sp_test_run_cli("bench op tshift --shape 8,16,8,8 --segments 4 --ratio 0.9", 1, out, sizeof out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "--ratio must be in [0, 0.5]"));
  rc = sp_test_run_cli("bench op tshift --shape 100000,100000,100000,100000 --segments 2", 1, out, sizeof out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "needs about"));
  /* An out-of-range value names its option and the range. */
  rc = sp_test_run_cli("bench data --dataset nowhere --size 3", 1, out, sizeof out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "--size wants an integer in [8, 4096], got '3'"));
  rc = sp_test_run_cli("bench video --sampler tsn --segments 0 a.mp4", 1, out, sizeof out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "--segments wants an integer in [1, 1024], got '0'"));
  rc = sp_test_run_cli("bench nosuch", 1, out, sizeof out);
  assert_int_not_equal(rc, 0);
  assert_non_null(strstr(out, "unknown benchmark 'nosuch'"));
}

/* bench data --cache without --cache-file builds its cache file in the
 * temp folder and removes it at the end: nothing is left there. */
static void data_cache_leaves_nothing_behind(void **state) {
  (void)state;
  char dir[512], faces[700], args[2048], out[8192];
  if (!sp_test_tmpdir(dir, sizeof dir)) fail_msg("no temp dir");
  snprintf(faces, sizeof faces, "%s/faces", dir);
  snprintf(args, sizeof args, "synth faces --count 6 --size 64,64 --quiet --out %s", faces);
  int rc = sp_test_run_cli(args, 1, out, sizeof out);
  if (rc == -1) skip();
  if (rc != 0) fail_msg("spry %s: %s", args, out);
  char tmpdir[700];
  snprintf(tmpdir, sizeof tmpdir, "%s/tmp", dir);
  mkdir(tmpdir, 0777);
  char *old = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  setenv("TMPDIR", tmpdir, 1);
  snprintf(args, sizeof args, "bench data --dataset %s --cache --runs 1 --images 8 --batch 4 --size 32 --workers 1",
           faces);
  rc = sp_test_run_cli(args, 0, out, sizeof out);
  if (old)
    setenv("TMPDIR", old, 1), free(old);
  else
    unsetenv("TMPDIR");
  if (rc != 0) fail_msg("spry %s: exit status %d: %s", args, rc, out);
  if (!strstr(out, "\"cache\":\"mmap\"")) fail_msg("spry %s: no cached stage in %s", args, out);
  DIR *d = opendir(tmpdir);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') fail_msg("%s/%s left behind", tmpdir, e->d_name);
  closedir(d);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(peak_reports_this_machine),
      cmocka_unit_test(tshift_bench_checks_its_output),
      cmocka_unit_test(train_profile_accounts_for_the_step),
      cmocka_unit_test(infer_batch_measures_that_batch),
      cmocka_unit_test(infer_profile_accounts_for_the_forward),
      cmocka_unit_test(profile_nodes_add_up),
      cmocka_unit_test(train_under_mpirun_counts_every_rank),
      cmocka_unit_test(bad_options_are_refused),
      cmocka_unit_test(data_cache_leaves_nothing_behind),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
