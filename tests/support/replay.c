/* The replay helpers (replay.h). */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char **sp_test_commands(const char *text, size_t len, const char *lead) {
  size_t cap = 8, n = 0, ll = strlen(lead);
  char **v = calloc(cap, sizeof *v);
  for (const char *p = text, *end = text + len; p < end;) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    const char *s = p;
    while (s < eol && (*s == ' ' || *s == '\t')) s++;
    if ((size_t)(eol - s) >= ll && !memcmp(s, lead, ll)) {
      size_t k = (size_t)(eol - s);
      char *c = malloc(k + 1);
      memcpy(c, s, k);
      c[k] = 0;
      char *hash = strstr(c, "  #"); /* a comment after the command */
      if (hash) *hash = 0;
      for (size_t e = strlen(c); e > 0 && (c[e - 1] == ' ' || c[e - 1] == '\r'); e--) c[e - 1] = 0;
      if (n + 1 >= cap) v = realloc(v, (cap *= 2) * sizeof *v);
      v[n++] = c;
      v[n] = NULL;
    }
    p = eol + 1;
  }
  return v;
}

void sp_test_commands_free(char **cmds) {
  for (size_t i = 0; cmds && cmds[i]; i++) free(cmds[i]);
  free(cmds);
}

int sp_test_replay(const char *cwd, const char *cmd, const char *extra, char *out, size_t n) {
  const char *bin = getenv("SPRY_BIN"), *rest = cmd;
  static const char spry[] = "build/spry";
  int is_spry = !strncmp(cmd, spry, sizeof spry - 1) && (cmd[sizeof spry - 1] == ' ' || !cmd[sizeof spry - 1]);
  if (is_spry) rest = cmd + sizeof spry - 1;
  size_t len = strlen(cwd) + strlen(cmd) + (bin ? strlen(bin) : 0) + (extra ? strlen(extra) : 0) + 64;
  char *full = malloc(len);
  snprintf(full, len, "cd '%s' && %s%s %s 2>&1", cwd, is_spry && bin ? bin : "", is_spry && bin ? rest : cmd,
           extra ? extra : "");
  FILE *p = popen(full, "r");
  free(full);
  if (!p) return -1;
  size_t got = fread(out, 1, n - 1, p);
  out[got] = 0;
  while (fgetc(p) != EOF) {
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}
