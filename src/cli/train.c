/* `spry train CONFIG.yaml [--set key=value ...] [--resume DIR]` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_video.h"
#include "spry/plot.h"
#include "io/json.h"
#include "spry/config.h"
#include "spry/dist.h"
#include "spry/train.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry train CONFIG.yaml [--set key=value ...] [--resume DIR]\n"
          "  --set key=value  override a config key (dotted path), e.g. --set optimizer.lr=0.01\n"
          "  --resume DIR     continue the run in DIR (its last.safetensors) with the same config\n"
          "Writes DIR/metrics.jsonl, DIR/last.safetensors (every epoch), DIR/best.safetensors;\n"
          "DIR is the config's `out` key (or --set out=DIR). Ctrl-C saves and exits.\n");
}

int sp_cli_train(int argc, char **argv) {
  if (sp_cli_train_is_video(argc, argv)) return sp_cli_train_video(argc, argv); /* task: video */
  const char *config = NULL, *resume = NULL;
  char **sets = calloc((size_t)argc + 1, sizeof(char *));
  int n_sets = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      free(sets);
      return 0;
    } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      sets[n_sets++] = argv[++i];
    } else if (!strcmp(argv[i], "--resume") && i + 1 < argc) {
      resume = argv[++i];
    } else if (argv[i][0] != '-' && !config) {
      config = argv[i];
    } else {
      if (!strcmp(argv[i], "--set") || !strcmp(argv[i], "--resume"))
        fprintf(stderr, "spry train: %s needs a value (%s)\n", argv[i], !strcmp(argv[i], "--set") ? "key=value" : "the run folder");
      else fprintf(stderr, "spry train: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      free(sets);
      return 2;
    }
  }
  if (!config) {
    usage(stderr);
    free(sets);
    return 2;
  }
  /* --resume DIR trains into DIR, whatever `out` says. */
  char out_set[1100];
  if (resume) {
    snprintf(out_set, sizeof out_set, "out=%s", resume);
    sets[n_sets++] = out_set;
  }
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_load(config, n_sets, sets, &cfg, &text) != 0) {
    fprintf(stderr, "spry train: %s\n", sp_last_error());
    free(sets);
    return 2;
  }
  sp_train_summary s;
  int rc = sp_train_run(&cfg, text, resume != NULL, &s);
  if (rc == -1) fprintf(stderr, "spry train: %s\n", sp_last_error());
  else if (rc == 0 && sp_dist_rank() == 0) { /* one summary per job, from rank 0 */
    sp_json_buf b;
    sp_json_buf_init(&b);
    sp_json_obj_begin(&b);
    sp_json_key(&b, "out"), sp_json_str(&b, cfg.out);
    sp_json_key(&b, "train_loss"), sp_json_f64(&b, s.train_loss);
    sp_json_key(&b, "val_loss"), sp_json_f64(&b, s.val_loss);
    sp_json_key(&b, "val_mean_px"), sp_json_f64(&b, s.val.mean_px);
    sp_json_key(&b, "val_nme_io"), sp_json_f64(&b, s.val.nme_io);
    sp_json_key(&b, "best_mean_px"), sp_json_f64(&b, s.best_mean_px);
    sp_json_key(&b, "mean_shape_px"), sp_json_f64(&b, s.mean_shape_px);
    sp_json_obj_end(&b);
    printf("%s\n", b.s);
    sp_json_buf_free(&b);
  }
  free(text);
  free(sets);
  sp_plot_release_caches(); /* fontconfig's caches: leak-clean exits under ASan */
  return rc == -1 ? 1 : rc;
}
