/* Folder creation and atomic file writes shared by every command that
 * writes output (see include/spry/common.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spry/common.h"

int sp_make_dirs(const char *path) {
  if (!path || !*path) return sp_error_set("cannot create a folder with an empty name");
  char *p = sp_xstrdup(path);
  int rc = 0;
  /* Every prefix ending at a '/', then the whole path; folders that already
   * exist are fine, anything else names the part that failed. */
  for (char *s = p + 1;; s++) {
    if (*s && *s != '/') continue;
    char c = *s;
    *s = 0;
    struct stat st;
    if (mkdir(p, 0777) != 0 && (errno != EEXIST || stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
      rc = sp_error_set("%s: cannot create folder (%s)", p,
                        errno == EEXIST ? "a file of that name exists" : strerror(errno));
      break;
    }
    if (!(*s = c)) break;
  }
  free(p);
  return rc;
}

char *sp_missing_dirs_top(const char *path) {
  if (!path || !*path) return NULL;
  char *p = sp_xstrdup(path), *top = NULL;
  /* Walk up while the folder is missing; the last missing one is the top. */
  for (;;) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    struct stat st;
    if (stat(p, &st) == 0) break;
    free(top);
    top = sp_xstrdup(p);
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) break;
    *slash = 0;
  }
  free(p);
  return top;
}

void sp_remove_empty_dirs(const char *path, const char *top) {
  if (!path || !top) return;
  char *p = sp_xstrdup(path);
  size_t tl = strlen(top);
  /* Only folders at or below top: never a parent someone else made. */
  while (!strncmp(p, top, tl) && (p[tl] == 0 || p[tl] == '/')) {
    /* ENAMETOOLONG: a last part sp_make_dirs could not make is not there
     * either; its parents may still be ours to remove. */
    if (rmdir(p) != 0 && errno != ENOENT && errno != ENAMETOOLONG) break;
    if (p[tl] == 0) break;
    char *slash = strrchr(p, '/');
    if (!slash) break;
    *slash = 0;
  }
  free(p);
}

int sp_write_file_atomic(const char *path, const void *data, size_t n) {
  if (!path || !*path) return sp_error_set("cannot write a file with an empty name");
  size_t len = strlen(path) + 48;
  char *tmp = sp_xmalloc(len);
  /* A unique temporary in the same folder (rename does not cross file
   * systems), so two writers of one name never share it; created 0666 so
   * the umask applies as it would to the file itself (mkstemp gives 0600). */
  static _Atomic unsigned serial;
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 100; tries++) {
    snprintf(tmp, len, "%s.tmp.%ld.%u", path, (long)getpid(), serial++);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    int rc = sp_error_set("%s: cannot create (%s)", path, strerror(errno));
    free(tmp);
    return rc;
  }
  int rc = 0;
  const char *b = data;
  while (rc == 0 && n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      rc = sp_error_set("%s: cannot write (%s)", path, w < 0 ? strerror(errno) : "no space written");
    else
      b += w, n -= (size_t)w;
  }
  if (close(fd) != 0 && rc == 0) rc = sp_error_set("%s: cannot write (%s)", path, strerror(errno));
  if (rc == 0 && rename(tmp, path) != 0) rc = sp_error_set("%s: cannot rename into place (%s)", path, strerror(errno));
  if (rc != 0) unlink(tmp);
  free(tmp);
  return rc;
}
