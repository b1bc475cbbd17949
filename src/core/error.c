/* Per-thread error messages and checked allocation (see include/spry/common.h). */
#define _GNU_SOURCE
#include "spry/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* Blocks of at least SP_HUGE_MIN bytes (a plan's arena, parameters,
 * gradients, optimizer state) start on a 2 MB boundary, fill whole 2 MB
 * pages and ask the kernel for transparent huge pages (Linux's default THP
 * mode, "madvise", gives them only to such regions). With 4 KB pages a
 * pass over a 25-100 MB activation takes a TLB miss every 64 cache lines:
 * huge pages made vgg-face f32 training 7-8% faster on the AMX machine
 * (bench/README_train.md, session 35). SPRY_HUGE_PAGES=0 turns it off. */
enum { SP_HUGE_PAGE = 2 << 20, SP_HUGE_MIN = 2 * SP_HUGE_PAGE };

static int huge_pages_wanted(void) {
  const char *e = getenv("SPRY_HUGE_PAGES"); /* read per call: such blocks are few */
  return !(e && e[0] == '0');
}

void *sp_aligned_alloc(size_t n) {
  void *p = NULL;
  size_t rounded = (n + 63) & ~(size_t)63;
#ifdef MADV_HUGEPAGE
  if (rounded >= SP_HUGE_MIN && huge_pages_wanted()) {
    rounded = (rounded + SP_HUGE_PAGE - 1) & ~(size_t)(SP_HUGE_PAGE - 1);
    if (posix_memalign(&p, SP_HUGE_PAGE, rounded) != 0) oom(n, __FILE__, __LINE__);
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: without THP, 4 KB pages as before */
    return p;
  }
#endif
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) oom(n, __FILE__, __LINE__);
  return p;
}

void sp_aligned_free(void *p) { free(p); }

double sp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
