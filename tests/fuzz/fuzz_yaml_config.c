/* Run configs: the YAML tree (io/yaml.c), --set overrides and both typed
 * readers (keypoint and video runs). Lines "#set KEY=VALUE" of the input
 * (comments to YAML) become --set arguments. A config that reads must emit
 * a resolved text that reads back to the same text. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/yaml.h"
#include "spry/config.h"
#include "spry/video_train.h"

#define MAX_SETS 8

static int sets_of(char *text, char **sets) {
  int n = 0;
  for (char *p = strstr(text, "#set "); p && n < MAX_SETS; p = strstr(p + 1, "#set ")) {
    char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p - 5) : strlen(p + 5);
    sets[n] = malloc(len + 1);
    memcpy(sets[n], p + 5, len);
    sets[n++][len] = 0;
  }
  return n;
}

static void parse_run(const char *text, int n, char **sets) {
  char *resolved = NULL, *again = NULL;
  if (sp_config_text_is_video(text)) {
    sp_video_config *c = malloc(sizeof *c);
    if (sp_video_config_parse(text, "fuzz.yaml", n, sets, c, &resolved) == 0) {
      FZ_ASSERT(resolved && sp_video_config_parse(resolved, "resolved.yaml", 0, NULL, c, &again) == 0);
      FZ_ASSERT(!strcmp(resolved, again));
    }
    free(c);
  } else {
    sp_train_config *c = malloc(sizeof *c);
    if (sp_train_config_parse(text, "fuzz.yaml", n, sets, c, &resolved) == 0) {
      FZ_ASSERT(resolved && sp_train_config_parse(resolved, "resolved.yaml", 0, NULL, c, &again) == 0);
      FZ_ASSERT(!strcmp(resolved, again));
    }
    free(c);
  }
  free(resolved);
  free(again);
}

/* The generic tree: whatever loads emits text that loads again. */
static void tree_round_trip(const char *text, int n, char **sets) {
  sp_yaml *y = sp_yaml_load_string(text, "fuzz.yaml");
  if (!y) return;
  for (int i = 0; i < n; i++) sp_yaml_set(y, sets[i]);
  char *out = sp_yaml_emit(y);
  sp_yaml *back = sp_yaml_load_string(out, "emitted.yaml");
  FZ_ASSERT(back);
  char *out2 = sp_yaml_emit(back);
  FZ_ASSERT(!strcmp(out, out2));
  free(out2);
  free(out);
  sp_yaml_free(back);
  sp_yaml_free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fz_text(data, size);
  char *sets[MAX_SETS];
  int n = sets_of(text, sets);
  tree_round_trip(text, n, sets);
  parse_run(text, n, sets);
  for (int i = 0; i < n; i++) free(sets[i]);
  free(text);
  return 0;
}
