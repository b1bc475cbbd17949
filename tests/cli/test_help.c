/* One help convention: every subcommand's --help (and `spry help CMD`) exits
 * 0 with its usage on stdout, and every option the usage names is one the
 * command parses (the help never lists an option the parser calls unknown). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testkit.h"

static const char *const commands[] = {
    "train", "eval", "predict", "detect", "morph", "synth faces", "synth actions", "video info", "video frames",
    "prepare frames", "prepare list", "bench train", "bench data", "bench video", "bench op tshift", "bench peak",
};

static char out[1 << 16];

static int spry(const char *args) {
  int st = sp_test_run_cli(args, 0, out, sizeof out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void every_help_exits_0(void **state) {
  (void)state;
  char args[256];
  for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
    snprintf(args, sizeof args, "%s --help", commands[c]);
    if (spry(args) != 0 || !strstr(out, "usage")) fail_msg("spry %s: exit not 0 or no usage on stdout:\n%s", args, out);
    snprintf(args, sizeof args, "help %s", commands[c]);
    if (spry(args) != 0 || !strstr(out, "usage")) fail_msg("spry %s: exit not 0 or no usage:\n%s", args, out);
  }
  assert_int_equal(spry("help"), 0);
  assert_non_null(strstr(out, "usage: spry COMMAND"));
  assert_int_equal(spry("--help"), 0);
}

/* An option is parsed when, given it (alone or with one of a few kinds of
 * value), the command still reaches the --help after it. */
static int parses(const char *command, const char *option) {
  static const char *const values[] = {"", "1", "32", "a=1", "1,1,2,2", "tsn", "video", "x"};
  char args[512];
  for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
    snprintf(args, sizeof args, "%s %s %s --help", command, option, values[v]);
    if (spry(args) == 0 && strstr(out, "usage")) return 1;
  }
  return 0;
}

static void every_option_in_a_help_parses(void **state) {
  (void)state;
  char args[256];
  int checked = 0;
  for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++) {
    snprintf(args, sizeof args, "%s --help", commands[c]);
    assert_int_equal(spry(args), 0);
    char *help = strdup(out);
    for (const char *p = strstr(help, "--"); p; p = strstr(p + 2, "--")) {
      if (p > help && (isalnum((unsigned char)p[-1]) || p[-1] == '-')) continue;
      char opt[64];
      size_t n = 0;
      while (n < sizeof opt - 1 && (isalnum((unsigned char)p[n]) || p[n] == '-')) opt[n] = p[n], n++;
      opt[n] = 0;
      if (n < 3 || !strcmp(opt, "--help")) continue;
      if (!parses(commands[c], opt)) fail_msg("spry %s --help names %s, which the command does not parse", commands[c], opt);
      checked++;
    }
    free(help);
  }
  printf("# %d options checked\n", checked);
  assert_true(checked > 40);
}

int main(void) {
  if (!getenv("SPRY_BIN")) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_help_exits_0),
      cmocka_unit_test(every_option_in_a_help_parses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
