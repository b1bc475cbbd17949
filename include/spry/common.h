/* spry common: error reporting and checked allocation.
 *
 * Convention: functions that can fail return 0 on success and -1 on failure
 * (or NULL for constructors) after calling sp_error_set(). The message names
 * the file/object and the reason; sp_last_error() reads it back (per thread). */
#ifndef SPRY_COMMON_H
#define SPRY_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPRY_VERSION "0.1.0"

/* Records an error message for this thread (printf-style). Always returns -1
 * so it can be written `return sp_error_set(...)`. */
int sp_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepends context ("while loading X: ") to the current message. Returns -1. */
int sp_error_push(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *sp_last_error(void);
void sp_error_clear(void);

/* Checked allocation: abort with file:line on out-of-memory (there is no
 * sensible recovery inside a training step). Memory is zeroed for calloc. */
void *sp_xmalloc_at(size_t n, const char *file, int line);
void *sp_xcalloc_at(size_t count, size_t size, const char *file, int line);
void *sp_xrealloc_at(void *p, size_t n, const char *file, int line);
char *sp_xstrdup_at(const char *s, const char *file, int line);
#define sp_xmalloc(n) sp_xmalloc_at((n), __FILE__, __LINE__)
#define sp_xcalloc(c, s) sp_xcalloc_at((c), (s), __FILE__, __LINE__)
#define sp_xrealloc(p, n) sp_xrealloc_at((p), (n), __FILE__, __LINE__)
#define sp_xstrdup(s) sp_xstrdup_at((s), __FILE__, __LINE__)

/* One allocation policy: a size that a user or a file chose (a config's
 * data.size, a frame folder's n_frames, a checkpoint's shapes, --frames) is
 * checked before allocating and fails as a normal error naming it, never as
 * sp_xmalloc's "internal error: out of memory" (kept for real bugs). The
 * limit is 80% of the machine's RAM, or SPRY_MAX_MEMORY_MB when lower.
 * bytes is a double so that products of sizes cannot wrap around. */
double sp_mem_limit(void);
/* 0, or -1 with "WHAT needs N GB of memory, more than ...". */
int sp_mem_check(double bytes, const char *what);

/* mkdir -p: creates path and its missing parents (existing ones are fine);
 * on failure the error names the folder that could not be made and why. */
int sp_make_dirs(const char *path);
/* The outermost folder of path that does not exist yet (free it), or NULL
 * when path exists: what sp_make_dirs(path) is about to create. */
char *sp_missing_dirs_top(const char *path);
/* Undoes sp_make_dirs after a failure: removes path, then its parents up to
 * and including top, each only while it is empty (rmdir). */
void sp_remove_empty_dirs(const char *path, const char *top);
/* Writes data[0..n) to path through a temporary file beside it, renamed over
 * path only once every byte is written: a failure leaves an existing file as
 * it was and never a partial one. 0, or -1 with an error naming path. */
int sp_write_file_atomic(const char *path, const void *data, size_t n);

/* 64-byte aligned allocation (AVX-512 lines); from 4 MB on, 2 MB aligned in
 * whole 2 MB pages with transparent huge pages asked for (Linux;
 * SPRY_HUGE_PAGES=0: not). Free with sp_aligned_free. */
void *sp_aligned_alloc(size_t n);
void sp_aligned_free(void *p);

/* SP_CHECK(expr, "what was being done"): on failure (expr == 0 / false) sets
 * an error naming file:line and the action, and returns -1 from the caller. */
#define SP_CHECK(expr, ...)                                               \
  do {                                                                    \
    if (!(expr)) return sp_error_set_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
int sp_error_set_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fatal internal error (a bug, not bad input): prints and aborts. */
void sp_panic_at(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
#define sp_panic(...) sp_panic_at(__FILE__, __LINE__, __VA_ARGS__)
#define SP_ASSERT(expr)                                   \
  do {                                                    \
    if (!(expr)) sp_panic("assertion failed: %s", #expr); \
  } while (0)

/* Monotonic clock in seconds. */
double sp_now(void);

#ifdef __cplusplus
}
#endif
#endif
