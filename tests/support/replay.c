/* The replay helpers (replay.h). */
#define _POSIX_C_SOURCE 200809L
#include "replay.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "spry/video.h"
#include "testkit.h"

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

/* UCF-style class names, in classInd's (alphabetical) order; the clips of
 * class k move as synth class k does. */
static const char *const names[] = {"MoveLeft", "MoveRight", "RotateCcw", "RotateCw"};
static const int motion[] = {1, 0, 3, 2};

static void ucf_clip(const char *path, int cls, int id) {
  sp_video_writer_config cfg = sp_video_writer_config_default(32, 32);
  cfg.gop = 8;
  sp_video_writer *w = sp_video_writer_open(path, &cfg);
  assert_non_null(w);
  uint8_t rgb[32 * 32 * 3];
  for (int t = 0; t < 8; t++) {
    sp_synth_render(7, id, motion[cls], t, 8, 32, rgb);
    assert_int_equal(sp_video_writer_add(w, rgb), 0);
  }
  assert_int_equal(sp_video_writer_close(w), 0);
}

/* data/UCF-101/<Class>/v_<Class>_gGG_c01.avi and data/ucfTrainTestlist/:
 * groups 8-10 train (labels 1..4), group 1 tests (no labels). */
void sp_test_ucf_tree(const char *tmp) {
  char p[1024], line[256];
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist", tmp);
  assert_int_equal(sp_make_dirs(p), 0);
  snprintf(p, sizeof p, "%s/configs", tmp);
  mkdir(p, 0777);
  char *cls_ind = calloc(1, 4096), *train = calloc(1, 8192), *test = calloc(1, 8192);
  int id = 0;
  for (int k = 0; k < 4; k++) {
    snprintf(p, sizeof p, "%s/data/UCF-101/%s", tmp, names[k]);
    assert_int_equal(sp_make_dirs(p), 0);
    snprintf(line, sizeof line, "%d %s\r\n", k + 1, names[k]);
    strcat(cls_ind, line);
    for (int g = 1; g <= 10; g++) {
      if (g > 1 && g < 8) continue;
      snprintf(p, sizeof p, "%s/data/UCF-101/%s/v_%s_g%02d_c01.avi", tmp, names[k], names[k], g);
      ucf_clip(p, k, id++);
      if (g == 1) snprintf(line, sizeof line, "%s/v_%s_g%02d_c01.avi\r\n", names[k], names[k], g);
      else snprintf(line, sizeof line, "%s/v_%s_g%02d_c01.avi %d\r\n", names[k], names[k], g, k + 1);
      strcat(g == 1 ? test : train, line);
    }
  }
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/classInd.txt", tmp);
  sp_test_write_text(p, cls_ind);
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/trainlist01.txt", tmp);
  sp_test_write_text(p, train);
  snprintf(p, sizeof p, "%s/data/ucfTrainTestlist/testlist01.txt", tmp);
  sp_test_write_text(p, test);
  free(cls_ind), free(train), free(test);
}
