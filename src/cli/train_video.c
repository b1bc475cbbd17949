/* `spry train CONFIG` and `spry eval` for configs with `task: video`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_video.h"
#include "io/json.h"
#include "spry/safetensors.h"
#include "spry/dist.h"
#include "spry/plot.h"
#include "spry/video_train.h"

static const char *config_arg(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') {
      if (i + 1 < argc && strcmp(argv[i], "--help") && strcmp(argv[i], "-h")) i++; /* its value */
      continue;
    }
    return argv[i];
  }
  return NULL;
}

int sp_cli_train_is_video(int argc, char **argv) {
  const char *c = config_arg(argc, argv);
  return c && sp_config_file_is_video(c);
}

static void put(sp_json_buf *b, const char *k, double v) {
  sp_json_key(b, k);
  if (isfinite(v)) sp_json_f64(b, v);
  else sp_json_null(b);
}

int sp_cli_train_video(int argc, char **argv) {
  const char *config = NULL, *resume = NULL;
  char **sets = calloc((size_t)argc + 2, sizeof(char *));
  int n_sets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--set") && i + 1 < argc) sets[n_sets++] = argv[++i];
    else if (!strcmp(argv[i], "--resume") && i + 1 < argc) resume = argv[++i];
    else if (argv[i][0] != '-' && !config) config = argv[i];
    else {
      fprintf(stderr, "spry train: unexpected argument '%s'\n", argv[i]);
      free(sets);
      return 2;
    }
  }
  char out_set[1100];
  if (resume) { /* --resume DIR trains into DIR, whatever `out` says */
    snprintf(out_set, sizeof out_set, "out=%s", resume);
    sets[n_sets++] = out_set;
  }
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(config, n_sets, sets, &cfg, &text) != 0) {
    fprintf(stderr, "spry train: %s\n", sp_last_error());
    free(sets);
    return 2;
  }
  sp_video_summary s;
  int rc = sp_video_train_run(&cfg, text, resume != NULL, &s);
  if (rc == -1) fprintf(stderr, "spry train: %s\n", sp_last_error());
  else if (rc == 0 && sp_dist_rank() == 0) { /* one summary per job, from rank 0 */
    sp_json_buf b;
    sp_json_buf_init(&b);
    sp_json_obj_begin(&b);
    sp_json_key(&b, "out"), sp_json_str(&b, cfg.out);
    put(&b, "train_loss", s.train_loss);
    put(&b, "val_loss", s.val_loss);
    put(&b, "top1", s.top1);
    put(&b, "top5", s.top5);
    put(&b, "best_top1", s.best_top1);
    put(&b, "train_s", s.train_s);
    sp_json_key(&b, "iterations"), sp_json_int(&b, s.iterations);
    sp_json_obj_end(&b);
    printf("%s\n", b.s);
    sp_json_buf_free(&b);
  }
  free(text);
  free(sets);
  sp_plot_release_caches(); /* the report's fontconfig caches: leak-clean exits under ASan */
  return rc == -1 ? 1 : rc;
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
    if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
    else if (argv[i][0] == '-' && i + 1 < argc) i++;
    else if (argv[i][0] != '-' && !config) config = argv[i];
  }
  if (config) return sp_config_file_is_video(config);
  if (!weights) return 0;
  char *text = stored_config(weights);
  int v = text && sp_config_text_is_video(text);
  free(text);
  return v;
}

int sp_cli_eval_video(int argc, char **argv) {
  const char *weights = NULL, *data = NULL, *config = NULL, *backend = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
    else if (!strcmp(argv[i], "--task") && i + 1 < argc) i++;
    else if (argv[i][0] != '-' && !config) config = argv[i];
    else {
      fprintf(stderr, "usage: spry eval --task video --weights W.safetensors [--data LIST] [--backend B] [CONFIG]\n"
                      "  top-1/top-5 over the videos of LIST (default: the run's data.val_list), the softmax of\n"
                      "  each video's test clips averaged; the last output line is JSON.\n");
      return 2;
    }
  }
  if (!weights) return fprintf(stderr, "spry eval: --weights is required\n"), 2;
  char *text = config ? NULL : stored_config(weights);
  if (!config && !text) return fprintf(stderr, "spry eval: %s has no stored config; give CONFIG\n", weights), 2;
  char set_backend[64];
  char *sets[1];
  int n_sets = 0;
  if (backend) {
    snprintf(set_backend, sizeof set_backend, "backend=%s", backend);
    sets[n_sets++] = set_backend;
  }
  sp_video_config cfg;
  int rc = config ? sp_video_config_load(config, n_sets, sets, &cfg, NULL)
                  : sp_video_config_parse(text, weights, n_sets, sets, &cfg, NULL);
  free(text);
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
