/* The op registry is true: every op of src/ops/registry.c has a row in
 * src/ops/README.md's table, and everything the row names is there: the
 * reference file defines the op, the cpu backend runs the kernel the row
 * says (or the adapter), the gradient check exists and calls
 * sp_opcheck_gradients on the op, each PyTorch fixture file exists and a
 * test in tests/ops opens it, and each cpu-vs-ref case is a CASE of
 * tests/backends/test_cpu_ops.c that the suite runs (training and
 * inference, f32 and bf16). Deleting a fixture, a test or a row fails here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "ops/ops.h"
#include "testkit.h"

static char root[1024];
static char *readme, *cpu_ops, *ops_tests;

static char *slurp_rel(const char *rel) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  char *s = sp_test_slurp(path);
  if (!s) fail_msg("cannot read %s", path);
  return s;
}

static int exists_rel(const char *rel) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  return access(path, R_OK) == 0;
}

/* The backticked words of one table cell, in order: n found. */
static int ticks(const char *cell, const char *end, char words[][96], int max) {
  int n = 0;
  for (const char *p = strchr(cell, '`'); p && p < end && n < max;) {
    const char *q = strchr(p + 1, '`');
    if (!q || q > end) break;
    snprintf(words[n++], 96, "%.*s", (int)(q - p - 1), p + 1);
    p = strchr(q + 1, '`');
  }
  return n;
}

/* The row of op `name`: its 6 cells as [start, end) pointers. */
static int find_row(const char *name, const char *cells[6], const char *ends[6]) {
  char key[96];
  snprintf(key, sizeof key, "\n| `%s` |", name);
  const char *row = strstr(readme, key);
  if (!row) return 0;
  const char *p = row + 2; /* after "\n|" */
  for (int i = 0; i < 6; i++) {
    const char *bar = strchr(p, '|');
    const char *nl = strchr(p, '\n');
    if (!bar || (nl && nl < bar)) return 0;
    cells[i] = p, ends[i] = bar;
    p = bar + 1;
  }
  return 1;
}

static void check_reference(const sp_op_def *op, const char *cell, const char *end) {
  char w[4][96], rel[200], def[160];
  if (ticks(cell, end, w, 4) < 1) fail_msg("%s: no reference file in its row", op->name);
  snprintf(rel, sizeof rel, "src/ops/%s", w[0]);
  char *src = slurp_rel(rel);
  snprintf(def, sizeof def, "const sp_op_def sp_op_%s =", op->name);
  if (!strstr(src, def)) fail_msg("%s: %s does not define sp_op_%s", op->name, rel, op->name);
  free(src);
}

static void check_cpu_kernel(const sp_op_def *op, const char *cell, const char *end) {
  char w[4][96], rel[200];
  int n = ticks(cell, end, w, 4);
  const int adapter = n == 0;
  for (int i = 0; i < n; i++) {
    snprintf(rel, sizeof rel, "src/%s", strncmp(w[i], "backends/", 9) ? "backends/cpu/" : "");
    strncat(rel, w[i], sizeof rel - strlen(rel) - 1);
    if (!exists_rel(rel)) fail_msg("%s: its row names the kernel file %s, which is not there", op->name, rel);
  }
  const sp_op_def *impl = sp_backend_op(SP_BACKEND_CPU, op);
  if (!impl) return; /* a build without oneDNN: nothing to compare with */
  char want[96];
  snprintf(want, sizeof want, "cpu.%s", op->name);
  if (adapter && strcmp(impl->name, "cpu.plain"))
    fail_msg("%s: the row says adapter, the cpu backend runs %s", op->name, impl->name);
  if (!adapter && strcmp(impl->name, want))
    fail_msg("%s: the row names a cpu kernel, the backend runs %s", op->name, impl->name);
}

/* "ops/test_x.c": "fn": the file has fn and runs gradient checks of the op. */
static void check_gradients(const sp_op_def *op, const char *cell, const char *end) {
  char w[4][96], rel[200], fn[160], ref[96];
  if (ticks(cell, end, w, 4) < 2) fail_msg("%s: no gradient check (`file`: `function`) in its row", op->name);
  snprintf(rel, sizeof rel, "tests/%s", w[0]);
  char *src = slurp_rel(rel);
  snprintf(fn, sizeof fn, "static void %s(void **", w[1]);
  snprintf(ref, sizeof ref, "&sp_op_%s", op->name);
  if (!strstr(src, fn)) fail_msg("%s: %s has no test %s", op->name, rel, w[1]);
  if (!strstr(src, "sp_opcheck_gradients(") || !strstr(src, ref))
    fail_msg("%s: %s runs no gradient check of sp_op_%s", op->name, rel, op->name);
  free(src);
}

static void check_fixtures(const sp_op_def *op, const char *cell, const char *end) {
  char w[16][96], rel[200], quoted[160];
  int n = ticks(cell, end, w, 16);
  if (n < 1) fail_msg("%s: no PyTorch fixture in its row", op->name);
  for (int i = 0; i < n; i++) {
    snprintf(rel, sizeof rel, "tests/fixtures/ops/%s.safetensors", w[i]);
    if (!exists_rel(rel)) fail_msg("%s: fixture %s is missing (tools/make_fixtures.py makes it)", op->name, rel);
    snprintf(quoted, sizeof quoted, "\"ops/%s.safetensors\"", w[i]);
    if (!strstr(ops_tests, quoted)) fail_msg("%s: no test in tests/ops compares with %s", op->name, rel);
  }
}

static void check_cpu_cases(const sp_op_def *op, const char *cell, const char *end) {
  char w[16][96], def[160], def2[160], reg[160];
  int n = ticks(cell, end, w, 16);
  if (n < 1) fail_msg("%s: no cpu-vs-ref case in its row", op->name);
  for (int i = 0; i < n; i++) {
    snprintf(def, sizeof def, "CASE(%s,", w[i]);
    snprintf(def2, sizeof def2, "CASE_CLASSES(%s,", w[i]);
    snprintf(reg, sizeof reg, "cmocka_unit_test(%s)", w[i]);
    if (!strstr(cpu_ops, def) && !strstr(cpu_ops, def2))
      fail_msg("%s: case %s is not a CASE of tests/backends/test_cpu_ops.c", op->name, w[i]);
    if (!strstr(cpu_ops, reg)) fail_msg("%s: case %s is never run (no cmocka_unit_test)", op->name, w[i]);
  }
}

static void every_op_has_its_row(void **state) {
  (void)state;
  for (int i = 0; i < sp_ops_count; i++) {
    const sp_op_def *op = sp_ops_all[i];
    const char *cells[6], *ends[6];
    if (!find_row(op->name, cells, ends)) fail_msg("op %s has no row in src/ops/README.md's registry", op->name);
    check_reference(op, cells[1], ends[1]);
    check_cpu_kernel(op, cells[2], ends[2]);
    check_gradients(op, cells[3], ends[3]);
    check_fixtures(op, cells[4], ends[4]);
    check_cpu_cases(op, cells[5], ends[5]);
  }
  printf("# %d ops: reference, kernel, gradient check, fixtures and cpu-vs-ref cases all there\n", sp_ops_count);
}

/* Each CASE runs the four modes: a CASE that stopped doing so would leave the
 * table's promise empty. */
static void cases_run_training_inference_f32_bf16(void **state) {
  (void)state;
  const char *macro = strstr(cpu_ops, "#define CASE_CLASSES(");
  assert_non_null(macro);
  const char *stop = strstr(macro, "\n\n");
  assert_non_null(stop);
  int runs = 0;
  for (const char *p = strstr(macro, "cmp_run(&k)"); p && p < stop; p = strstr(p + 1, "cmp_run(&k)")) runs++;
  char body[4096];
  snprintf(body, sizeof body, "%.*s", (int)(stop - macro), macro);
  if (runs != 4 || !strstr(body, "k.training = 0") || !strstr(body, "k.training = 1") || !strstr(body, "SP_PLAN_BF16"))
    fail_msg("the CASE macro no longer runs training and inference in f32 and bf16:\n%s", body);
}

/* No row for an op that is not in the registry (a removed op's row). */
static void no_row_without_an_op(void **state) {
  (void)state;
  const char *table = strstr(readme, "| op | reference |");
  assert_non_null(table);
  for (const char *p = strstr(table, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
    char name[96];
    if (sscanf(p, "\n| `%95[a-z0-9_]`", name) != 1) continue;
    int known = 0;
    for (int i = 0; i < sp_ops_count && !known; i++) known = !strcmp(sp_ops_all[i]->name, name);
    if (!known) fail_msg("src/ops/README.md has a row for '%s', which registry.c does not list", name);
  }
}

static int setup(void **state) {
  (void)state;
  const char *src = getenv("SPRY_SOURCE_DIR");
  if (!src) return -1;
  snprintf(root, sizeof root, "%s", src);
  readme = slurp_rel("src/ops/README.md");
  cpu_ops = slurp_rel("tests/backends/test_cpu_ops.c");
  /* Every op test's text, to find the fixtures they open. */
  static const char *const files[] = {"activation", "batchnorm", "conv", "linear", "losses",
                                      "pool",       "softargmax", "structure", "tshift"};
  size_t cap = 1, len = 0;
  ops_tests = calloc(1, 1);
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char rel[200];
    snprintf(rel, sizeof rel, "tests/ops/test_%s.c", files[i]);
    char *t = slurp_rel(rel);
    size_t n = strlen(t);
    ops_tests = realloc(ops_tests, cap += n + 1);
    memcpy(ops_tests + len, t, n + 1);
    len += n;
    free(t);
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  free(readme), free(cpu_ops), free(ops_tests);
  return 0;
}

int main(void) {
  if (!getenv("SPRY_SOURCE_DIR")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_op_has_its_row),
      cmocka_unit_test(cases_run_training_inference_f32_bf16),
      cmocka_unit_test(no_row_without_an_op),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
