/* Folder creation shared by every command that writes output (see
 * include/spry/common.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
      rc = sp_error_set("%s: cannot create folder (%s)", p, errno == EEXIST ? "a file of that name exists" : strerror(errno));
      break;
    }
    if (!(*s = c)) break;
  }
  free(p);
  return rc;
}
