#define _GNU_SOURCE
#include "testkit.h"
#include "spry/safetensors.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

const char *sp_test_data_dir(void) {
  const char *d = getenv("SPRY_TEST_DATA");
  struct stat st;
  if (!d || stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
  return d;
}

const char *sp_test_data_path(const char *rel, char *buf, size_t n) {
  const char *d = sp_test_data_dir();
  if (!d) return NULL;
  snprintf(buf, n, "%s/%s", d, rel);
  return access(buf, R_OK) == 0 ? buf : NULL;
}

const char *sp_test_fixture_path(const char *rel, char *buf, size_t n) {
  const char *d = getenv("SPRY_FIXTURES");
  snprintf(buf, n, "%s/%s", d ? d : "tests/fixtures", rel);
  return buf;
}

const char *sp_test_tmpdir(char *buf, size_t n) {
  const char *t = getenv("TMPDIR");
  snprintf(buf, n, "%s/spry-test-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(buf)) return NULL;
  return buf;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(path);
}

void sp_test_rmtree(const char *dir) {
  if (dir && *dir) nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- skips that CTest can see ----
 * cmocka's skip() marks a test skipped, yet the executable exits 0 and CTest
 * reports "Passed": a clone without ../shared/data would show every data test
 * as passed without running it. Test executables link with
 * -Wl,--wrap=_skip,--wrap=_cmocka_run_group_tests (tests/CMakeLists.txt), so
 * cmocka's two entry points come through here: skips are counted, and a group
 * whose every test skipped exits 77, CTest's SKIP_RETURN_CODE ("Skipped").
 * A group with some tests skipped still passes, and says how many. */
static int skipped_in_group;

void __real__skip(const char *const file, const int line);
void __wrap__skip(const char *const file, const int line);
void __wrap__skip(const char *const file, const int line) {
  skipped_in_group++;
  __real__skip(file, line);
}

int __real__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown) {
  skipped_in_group = 0;
  int failed = __real__cmocka_run_group_tests(group_name, tests, num_tests, group_setup, group_teardown);
  if (failed || skipped_in_group == 0) return failed;
  fprintf(stderr, "spry tests: %d of %zu tests skipped in %s\n", skipped_in_group, num_tests, group_name);
  return (size_t)skipped_in_group >= num_tests ? 77 : 0;
}

int sp_test_sanitized(void) {
  const char *s = getenv("SPRY_SANITIZED");
  return s && *s && strcmp(s, "0");
}

uint64_t sp_test_rng_next(sp_test_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float sp_test_rng_uniform(sp_test_rng *r, float lo, float hi) {
  double u = (double)(sp_test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
  return (float)(lo + (hi - lo) * u);
}

void sp_test_fill_uniform(sp_test_rng *r, float *x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) x[i] = sp_test_rng_uniform(r, lo, hi);
}

double sp_test_close_ratio(const float *a, const float *b, int64_t n, double rtol, double atol, int64_t *worst) {
  double w = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    double r = d / (atol + rtol * fabs((double)b[i]));
    if (!(r <= w)) { /* catches NaN too */
      w = isnan(r) ? INFINITY : r;
      wi = i;
      if (isnan(r)) break;
    }
  }
  if (worst) *worst = wi;
  return w;
}

int sp_test_run_cli(const char *args, int with_stderr, char *out, size_t n) {
  const char *bin = getenv("SPRY_BIN");
  if (!bin) return -1;
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s %s", bin, args, with_stderr ? "2>&1" : "2>/dev/null");
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  return pclose(p);
}

int sp_test_cli_exit(const char *args, char *out, size_t n) {
  int st = sp_test_run_cli(args, 1, out, n);
  if (st == -1) fail_msg("spry %s: cannot run (is SPRY_BIN set?)", args);
  if (strstr(out, "Sanitizer") || strstr(out, "runtime error:")) fail_msg("spry %s: sanitizer report:\n%s", args, out);
  if (WIFSIGNALED(st)) fail_msg("spry %s: killed by signal %d:\n%s", args, WTERMSIG(st), out);
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (code < 0 || (code > 130 && code < 128 + 64)) fail_msg("spry %s: exit %d (a signal?):\n%s", args, code, out);
  return code;
}

char *sp_test_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (n < 0 || fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
  b[n] = 0;
  fclose(f);
  return b;
}

void sp_test_write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
}

void sp_test_assert_same_checkpoint(const char *dir_a, const char *dir_b) {
  char pa[1024], pb[1024];
  snprintf(pa, sizeof pa, "%s/last.safetensors", dir_a);
  snprintf(pb, sizeof pb, "%s/last.safetensors", dir_b);
  sp_st_file *fa = sp_st_open(pa), *fb = sp_st_open(pb);
  assert_non_null(fa);
  assert_non_null(fb);
  assert_int_equal(sp_st_count(fa), sp_st_count(fb));
  for (int i = 0; i < sp_st_count(fa); i++) {
    const sp_tensor *x = sp_st_get(fa, sp_st_name(fa, i)), *y = sp_st_get(fb, sp_st_name(fa, i));
    assert_non_null(y);
    assert_int_equal(sp_tensor_bytes(x), sp_tensor_bytes(y));
    if (memcmp(x->data, y->data, sp_tensor_bytes(x))) fail_msg("%s differs between %s and %s", sp_st_name(fa, i), pa, pb);
  }
  sp_st_close(fa);
  sp_st_close(fb);
}
