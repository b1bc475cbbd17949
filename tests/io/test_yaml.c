/* The YAML tree under every config and every checkpoint's stored config:
 * hostile text is refused with a message naming the file and line, never
 * expanded without bound, and --set never ignores a key silently. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/yaml.h"
#include "spry/common.h"
#include "testkit.h"

/* Issue 19, C4: 310 bytes whose aliases expand to 10^8 nodes. Without the
 * refusal this test runs out of memory (or for minutes). */
static void aliases_are_refused(void **state) {
  (void)state;
  /* One alias is as much a refusal as a million (and checked first: before
   * the fix the bomb below would not come back). */
  assert_null(sp_yaml_load_string("a: &x 3\nb: *x\n", "one.yaml"));
  sp_assert_error_has("one.yaml:2:");
  char text[1024];
  int n = snprintf(text, sizeof text, "a: &a [x,x,x,x,x,x,x,x,x,x]\n");
  const char names[] = "abcdefgh";
  for (int i = 1; i < 8; i++) {
    n += snprintf(text + n, sizeof text - (size_t)n, "%c: &%c [", names[i], names[i]);
    for (int j = 0; j < 10; j++) n += snprintf(text + n, sizeof text - (size_t)n, "%s*%c", j ? "," : "", names[i - 1]);
    n += snprintf(text + n, sizeof text - (size_t)n, "]\n");
  }
  sp_yaml *y = sp_yaml_load_string(text, "bomb.yaml");
  assert_null(y);
  sp_assert_error_has("bomb.yaml:2:");
  sp_assert_error_has("alias");
  /* An anchor nobody refers to is harmless. */
  y = sp_yaml_load_string("a: &x 3\nb: 4\n", "anchor.yaml");
  assert_non_null(y);
  sp_yaml_free(y);
}

/* Issue 19, P8: `--set ...=1` set nothing and said nothing. */
static void set_with_empty_key_parts_is_refused(void **state) {
  (void)state;
  sp_yaml *y = sp_yaml_load_string("data:\n  size: 64\n", "c.yaml");
  assert_non_null(y);
  static const char *const bad[] = {"...=1", ".a=1", "a.=1", "data..size=1", "=1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(sp_yaml_set(y, bad[i]), -1);
    sp_assert_error_has("--set");
  }
  /* Found by fuzz_yaml_config: 40 dotted parts made a tree whose emitted
   * text (a checkpoint's config) did not load back (32 levels at most). */
  char deep[256] = "a";
  for (int i = 0; i < 39; i++) strcat(deep, ".b");
  strcat(deep, "=1");
  assert_int_equal(sp_yaml_set(y, deep), -1);
  sp_assert_error_has("40 parts");
  assert_int_equal(sp_yaml_set(y, "data.size=96"), 0);
  assert_string_equal(sp_yaml_get(sp_yaml_get(y, "data"), "size")->value, "96");
  sp_yaml_free(y);
}

/* Found by fuzz_yaml_config: `--set` with a byte that is not UTF-8 made a
 * tree whose emitted text (a checkpoint's config) did not load back; it is
 * refused. Characters YAML does not take raw (DEL, the C1 controls, U+FFFE,
 * CR, tab) are written as escapes and read back as they were. */
static void set_text_emits_what_loads_back(void **state) {
  (void)state;
  sp_yaml *y = sp_yaml_load_string("data:\n  size: 64\n", "c.yaml");
  assert_non_null(y);
  static const char *const bad[] = {"dat# =\xce", "a=\xff", "a\xc0\xaf=1", "a=\xed\xa0\x80"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(sp_yaml_set(y, bad[i]), -1);
    sp_assert_error_has("UTF-8");
  }
  static const char *const values[] = {"a\x7f",
                                       "b\xc2\x85"
                                       "c",
                                       "\xc2\x90",
                                       "x\xef\xbf\xbey",
                                       "\xef\xbf\xbf",
                                       "cr\rlf",
                                       "tab\tin",
                                       "caf\xc3\xa9 \xe2\x82\xac"};
  char set[64];
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    snprintf(set, sizeof set, "v%zu=%s", i, values[i]);
    assert_int_equal(sp_yaml_set(y, set), 0);
  }
  char *out = sp_yaml_emit(y);
  sp_yaml *back = sp_yaml_load_string(out, "emitted.yaml");
  if (!back) fail_msg("emitted text did not load: %s\n%s", sp_last_error(), out);
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    char key[8];
    snprintf(key, sizeof key, "v%zu", i);
    const sp_yaml *v = sp_yaml_get(back, key);
    assert_non_null(v);
    assert_string_equal(v->value, values[i]);
  }
  free(out);
  sp_yaml_free(back);
  sp_yaml_free(y);
}

/* 200 000 keys in one map (2 MB): the duplicate-key check alone was
 * quadratic (minutes); a config is a page of keys. */
static void huge_trees_are_refused(void **state) {
  (void)state;
  size_t cap = 200000 * 16, n = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  for (int i = 0; i < 200000; i++) n += (size_t)snprintf(text + n, cap - n, "k%d: %d\n", i, i);
  double t0 = sp_now();
  assert_null(sp_yaml_load_string(text, "wide.yaml"));
  sp_assert_error_has("more than 16384 values");
  assert_true(sp_now() - t0 < 20);
  free(text);
}

static void oversized_text_is_refused(void **state) {
  (void)state;
  size_t n = (size_t)17 << 20;
  char *big = malloc(n + 1);
  assert_non_null(big);
  memset(big, '#', n);
  big[n] = 0;
  assert_null(sp_yaml_load_string(big, "big.yaml"));
  sp_assert_error_has("big.yaml");
  free(big);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(aliases_are_refused),
      cmocka_unit_test(set_with_empty_key_parts_is_refused),
      cmocka_unit_test(set_text_emits_what_loads_back),
      cmocka_unit_test(huge_trees_are_refused),
      cmocka_unit_test(oversized_text_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
