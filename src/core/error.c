/* Per-thread error messages and checked allocation (see include/spry/common.h). */
#define _GNU_SOURCE
#include "spry/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SP_ERR_LEN 1024
static _Thread_local char err_buf[SP_ERR_LEN];

int sp_error_set(const char *fmt, ...) {
  /* Formatted apart first: callers wrap the previous message,
   * sp_error_set("%s: %s", path, sp_last_error()), whose text is err_buf. */
  char msg[SP_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  memcpy(err_buf, msg, sizeof err_buf);
  return -1;
}

int sp_error_set_at(const char *file, int line, const char *fmt, ...) {
  char msg[SP_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  /* Keep only the file's base name: messages must not carry build paths. */
  const char *base = strrchr(file, '/');
  snprintf(err_buf, sizeof err_buf, "%s (%s:%d)", msg, base ? base + 1 : file, line);
  return -1;
}

int sp_error_push(const char *fmt, ...) {
  char ctx[SP_ERR_LEN], old[SP_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
  memcpy(old, err_buf, sizeof old);
  snprintf(err_buf, sizeof err_buf, "%s: %s", ctx, old);
  return -1;
}

const char *sp_last_error(void) { return err_buf[0] ? err_buf : "no error recorded"; }
void sp_error_clear(void) { err_buf[0] = 0; }

void sp_panic_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  const char *base = strrchr(file, '/');
  fprintf(stderr, "spry: internal error at %s:%d: ", base ? base + 1 : file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

static void oom(size_t n, const char *file, int line) {
  sp_panic_at(file, line, "out of memory allocating %zu bytes", n);
}

void *sp_xmalloc_at(size_t n, const char *file, int line) {
  void *p = malloc(n ? n : 1);
  if (!p) oom(n, file, line);
  return p;
}

void *sp_xcalloc_at(size_t count, size_t size, const char *file, int line) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (!p) oom(count * size, file, line);
  return p;
}

void *sp_xrealloc_at(void *p, size_t n, const char *file, int line) {
  void *q = realloc(p, n ? n : 1);
  if (!q) oom(n, file, line);
  return q;
}

char *sp_xstrdup_at(const char *s, const char *file, int line) {
  size_t n = strlen(s) + 1;
  char *d = sp_xmalloc_at(n, file, line);
  memcpy(d, s, n);
  return d;
}

void *sp_aligned_alloc(size_t n) {
  void *p = NULL;
  size_t rounded = (n + 63) & ~(size_t)63;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n, __FILE__, __LINE__);
  return p;
}

void sp_aligned_free(void *p) { free(p); }

double sp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
