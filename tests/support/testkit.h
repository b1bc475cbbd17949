/* Helpers shared by every spry test: where the real data and fixtures are,
 * temporary directories, and small comparisons. Tests use cmocka. */
#ifndef SPRY_TESTKIT_H
#define SPRY_TESTKIT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "spry/tensor.h"

/* ../shared/data as seen from the build (env SPRY_TEST_DATA), or NULL when the
 * folder is absent (a user's fresh clone): tests that need it call skip(). */
const char *sp_test_data_dir(void);
/* Joins the data dir and a relative path into a static-per-call buffer; NULL
 * when the data dir is absent or the file does not exist. */
const char *sp_test_data_path(const char *rel, char *buf, size_t n);
/* tests/fixtures (env SPRY_FIXTURES). */
const char *sp_test_fixture_path(const char *rel, char *buf, size_t n);
/* A fresh directory under $TMPDIR (default /tmp) named spry-test-XXXXXX. */
const char *sp_test_tmpdir(char *buf, size_t n);
/* Removes a directory tree made by sp_test_tmpdir. */
void sp_test_rmtree(const char *dir);
/* True when built with sanitizers (env SPRY_SANITIZED): slow tests shrink. */
int sp_test_sanitized(void);

/* Runs `$SPRY_BIN ARGS` (the CLI under test) and captures its stdout (and
 * stderr when with_stderr) into out. Returns the wait status (0 = exit 0),
 * or -1 when SPRY_BIN is not set or the command cannot start. */
/* The whole file as a NUL-terminated string (free it), or NULL. */
char *sp_test_slurp(const char *path);
/* Writes text to path (a config, a list file); fails the test if it cannot. */
void sp_test_write_text(const char *path, const char *text);
/* Every tensor of DIR_A/last.safetensors equals DIR_B's bit for bit (weights,
 * buffers and optimizer state): what an exactly resumed run must give. */
void sp_test_assert_same_checkpoint(const char *dir_a, const char *dir_b);

int sp_test_run_cli(const char *args, int with_stderr, char *out, size_t n);

/* Runs `$SPRY_BIN ARGS 2>&1` into out and returns its exit code. Fails the
 * test, quoting the output, when spry did not exit by itself: killed by a
 * signal (also as the shell's 128+N; 130, Ctrl-C's code, is returned), a
 * sanitizer report, or no SPRY_BIN. A bare "exit status != 0" is satisfied
 * by a crash; this is not. */
int sp_test_cli_exit(const char *args, char *out, size_t n);

/* Fails, quoting the message, unless sp_last_error() holds `part`. */
#define sp_assert_error_has(part)                                                              \
  do {                                                                                         \
    if (!strstr(sp_last_error(), (part))) fail_msg("error \"%s\" lacks \"%s\"", sp_last_error(), (part)); \
  } while (0)

/* Deterministic pseudo-random numbers for tests. */
typedef struct { uint64_t s; } sp_test_rng;
uint64_t sp_test_rng_next(sp_test_rng *r);
float sp_test_rng_uniform(sp_test_rng *r, float lo, float hi);
void sp_test_fill_uniform(sp_test_rng *r, float *x, int64_t n, float lo, float hi);

/* Max |a-b| / (atol + rtol*|b|) over n elements; <= 1 means "close". Writes
 * the worst index to *worst when not NULL. */
double sp_test_close_ratio(const float *a, const float *b, int64_t n, double rtol, double atol, int64_t *worst);

#endif
