/* The harnesses as plain programs (the CTest suite's fuzz.* tests, and the
 * sanitizer build): each argument, a file or a folder of files, is fed to
 * LLVMFuzzerTestOneInput once. Every seed and every input a campaign found
 * crashing (tests/fuzz/corpus/NAME/) runs on each `make test`, without
 * clang. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = n > 0 ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if ((long)got != n) {
    free(buf);
    fprintf(stderr, "replay: cannot read %s\n", path);
    return -1;
  }
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: no such file or folder\n", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) return (*count)++, run_file(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  int n = 0, rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    names = realloc(names, sizeof(char *) * (size_t)(n + 1));
    names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (n) qsort(names, (size_t)n, sizeof(char *), cmp_name);
  for (int i = 0; i < n; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, names[i]);
    if (run_path(p, count) != 0) rc = -1;
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  fz_init();
  int count = 0, rc = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0) rc = 1;
  fprintf(stderr, "replay: %d input(s) ran without a crash\n", count);
  return rc || count == 0;
}
