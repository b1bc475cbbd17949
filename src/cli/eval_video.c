/* `spry eval` for video checkpoints and configs (`task: video`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_video.h"
#include "io/json.h"
#include "spry/safetensors.h"
#include "spry/dist.h"
#include "spry/plot.h"
#include "spry/video_train.h"

static void put(sp_json_buf *b, const char *k, double v) {
  sp_json_key(b, k);
  if (isfinite(v))
    sp_json_f64(b, v);
  else
    sp_json_null(b);
}

static char *stored_config(const char *weights) {
  sp_st_file *f = sp_st_open(weights);
  if (!f) return NULL;
  const char *c = sp_st_meta(f, "config");
  char *copy = c ? sp_xstrdup(c) : NULL;
  sp_st_close(f);
  return copy;
}

int sp_cli_eval_is_video(int argc, char **argv) {
  const char *weights = NULL, *config = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--task") && i + 1 < argc) return !strcmp(argv[i + 1], "video");
    if (!strcmp(argv[i], "--weights") && i + 1 < argc)
      weights = argv[++i];
    else if (argv[i][0] == '-' && i + 1 < argc)
      i++;
    else if (argv[i][0] != '-' && !config)
      config = argv[i];
  }
  if (config) return sp_config_file_is_video(config);
  if (!weights) return 0;
  char *text = stored_config(weights);
  int v = text && sp_config_text_is_video(text);
  free(text);
  return v;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry eval --task video --weights W.safetensors [--data LIST] [--backend B] [--set key=value ...]\n"
          "       [CONFIG]\n"
          "  top-1/top-5 over the videos of LIST (default: the run's data.val_list), the softmax of\n"
          "  each video's test clips averaged; the last output line is JSON: top1, top5, val_loss,\n"
          "  videos, unreadable_clips. --task video is implied by a video checkpoint or CONFIG.\n"
          "  --set changes CONFIG (or the stored config) as `spry train --set` does.\n");
}

int sp_cli_eval_video(int argc, char **argv) {
  const char *weights = NULL, *data = NULL, *config = NULL, *backend = NULL, *task = NULL, *set = NULL;
  /* --backend B is one more --set, after the others. */
  char **sets = sp_xmalloc(sizeof(char *) * (size_t)(argc + 1));
  int n_sets = 0;
  for (int i = 1; i < argc; i++) {
    int r;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(sets), usage(stdout), 0;
    if ((r = sp_arg_str(argc, argv, &i, "--weights", &weights)) || (r = sp_arg_str(argc, argv, &i, "--data", &data)) ||
        (r = sp_arg_str(argc, argv, &i, "--backend", &backend)) || (r = sp_arg_str(argc, argv, &i, "--task", &task)) ||
        (r = sp_arg_str(argc, argv, &i, "--set", &set))) {
      if (r < 0) return free(sets), 2;
      if (set && !strchr(set, '=')) {
        fprintf(stderr, "spry eval: --set wants key=value, got '%s'\n", set);
        return free(sets), 2;
      }
      if (set) sets[n_sets++] = (char *)set, set = NULL;
    } else if (argv[i][0] != '-' && !config) {
      config = argv[i];
    } else {
      fprintf(stderr, "spry eval: unexpected argument '%s'\n", argv[i]);
      return free(sets), usage(stderr), 2;
    }
  }
  if (!weights) return free(sets), fprintf(stderr, "spry eval: --weights is required\n"), 2;
  char *text = config ? NULL : stored_config(weights);
  if (!config && !text)
    return free(sets), fprintf(stderr, "spry eval: %s has no stored config; give CONFIG\n", weights), 2;
  char set_backend[64];
  if (backend) {
    snprintf(set_backend, sizeof set_backend, "backend=%s", backend);
    sets[n_sets++] = set_backend;
  }
  sp_video_config cfg;
  int rc = config ? sp_video_config_load(config, n_sets, sets, &cfg, NULL)
                  : sp_video_config_parse(text, weights, n_sets, sets, &cfg, NULL);
  free(text);
  free(sets);
  sp_video_summary s;
  if (rc == 0) rc = sp_video_eval_checkpoint(&cfg, weights, data, &s);
  if (rc != 0) return fprintf(stderr, "spry eval: %s\n", sp_last_error()), 1;
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  put(&b, "top1", s.top1);
  put(&b, "top5", s.top5);
  put(&b, "val_loss", s.val_loss);
  sp_json_key(&b, "videos"), sp_json_int(&b, s.val_clips);
  sp_json_key(&b, "unreadable_clips"), sp_json_int(&b, s.val_failed);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
  return 0;
}
