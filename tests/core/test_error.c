/* Error messages: a caller may wrap the previous message in its own context,
 * sp_error_set("%s: %s", path, sp_last_error()), without garbling it. */
#include <stdio.h>
#include <string.h>

#include "spry/common.h"
#include "testkit.h"

static void wrapping_the_last_error_keeps_it_whole(void **state) {
  (void)state;
  sp_error_set("JSON: unexpected end of input at byte %d", 0);
  sp_error_set("%s: %s", "points.json", sp_last_error());
  assert_string_equal(sp_last_error(), "points.json: JSON: unexpected end of input at byte 0");
  sp_error_push("spry morph");
  assert_string_equal(sp_last_error(), "spry morph: points.json: JSON: unexpected end of input at byte 0");
}

static void long_messages_are_cut_not_overrun(void **state) {
  (void)state;
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  sp_error_set("%s", big);
  sp_error_set("%s: %s", "file", sp_last_error());
  size_t n = strlen(sp_last_error());
  assert_true(n > 100 && n < sizeof big);
  assert_memory_equal(sp_last_error(), "file: xxx", 9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(wrapping_the_last_error_keeps_it_whole),
      cmocka_unit_test(long_messages_are_cut_not_overrun),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
