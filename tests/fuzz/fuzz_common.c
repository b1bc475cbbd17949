/* Shared harness helpers (fuzz_common.h). */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

volatile unsigned fz_sink;
static char scratch[256];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void fz_clear_dir(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void remove_scratch(void) {
  if (scratch[0]) fz_clear_dir(scratch);
}

void fz_init(void) {
  if (scratch[0]) return;
  /* Lower than libFuzzer's -malloc_limit_mb (default: its 2048 MB RSS
   * limit): whatever a file asks for beyond it must be refused by the
   * allocation policy (spry/common.h), and libFuzzer reports it otherwise. */
  setenv("SPRY_MAX_MEMORY_MB", "1024", 0);
  setenv("OMP_NUM_THREADS", "1", 0);
  struct stat st;
  const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                         ? "/dev/shm"
                         : (getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  snprintf(scratch, sizeof scratch, "%s/spry-fuzz-%ld", base, (long)getpid());
  fz_clear_dir(scratch); /* a dead process of the same pid may have left one */
  if (mkdir(scratch, 0700) != 0) __builtin_trap();
  atexit(remove_scratch);
}

const char *fz_dir(void) {
  fz_init();
  return scratch;
}

const char *fz_write(const char *name, const void *data, size_t size) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", fz_dir(), name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) __builtin_trap();
  const uint8_t *p = data;
  while (size) {
    ssize_t w = write(fd, p, size);
    if (w <= 0) __builtin_trap();
    p += w;
    size -= (size_t)w;
  }
  close(fd);
  return path;
}

void fz_clear(void) {
  DIR *d = opendir(fz_dir());
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
    fz_clear_dir(path);
  }
  closedir(d);
}

char *fz_text(const uint8_t *data, size_t size) {
  char *t = malloc(size + 1);
  if (!t) __builtin_trap();
  memcpy(t, data, size);
  t[size] = 0;
  return t;
}

int fz_split(const uint8_t *data, size_t size, const uint8_t **piece, size_t *len, int max) {
  int n = 0;
  size_t start = 0;
  for (size_t i = 0; i + 4 <= size && n < max - 1; i++)
    if (!memcmp(data + i, "@@@@", 4)) {
      piece[n] = data + start, len[n] = i - start, n++;
      start = i + 4;
      i += 3;
    }
  piece[n] = data + start, len[n] = size - start, n++;
  return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fz_init();
  return 0;
}
