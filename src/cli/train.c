/* `spry train CONFIG.yaml [--set key=value ...] [--resume DIR [--resume-changed]] [--overwrite]`:
 * a keypoint run, or a video run when the config says `task: video`. One
 * summary JSON line per job (rank 0's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "io/json.h"
#include "spry/config.h"
#include "spry/dist.h"
#include "spry/plot.h"
#include "spry/train.h"
#include "spry/video_train.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry train CONFIG.yaml [--set key=value ...] [--resume DIR [--resume-changed]] [--overwrite]\n"
          "  --set key=value   override a config key (dotted path), e.g. --set optimizer.lr=0.01\n"
          "  --resume DIR      continue the run in DIR (its last.safetensors) bit for bit; refused when\n"
          "                    the config differs from the one it was trained with (the first differing\n"
          "                    key is named)\n"
          "  --resume-changed  with --resume: continue with this config anyway, from the start of the\n"
          "                    interrupted epoch\n"
          "  --overwrite       a fresh run may replace another run's checkpoints in its folder (refused\n"
          "                    otherwise, naming the file)\n"
          "Writes DIR/metrics.jsonl, DIR/last.safetensors (every epoch), DIR/best.safetensors and the\n"
          "report DIR/index.html; DIR is the config's `out` key (or --set out=DIR). Ctrl-C saves and exits.\n"
          "Configs with `task: video` train a video model the same way (configs/README.md).\n");
}

/* The run's outcome: its error, or rank 0's one summary line of the job
 * {"out":..., key: value, ...} (null where a figure is not finite). */
static int finish(int rc, const char *out, int n, const char *const *keys, const double *vals) {
  if (rc == -1) fprintf(stderr, "spry train: %s\n", sp_last_error());
  if (rc != 0 || sp_dist_rank() != 0) return rc == -1 ? 1 : rc;
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "out"), sp_json_str(&b, out);
  for (int i = 0; i < n; i++) {
    sp_json_key(&b, keys[i]);
    if (isfinite(vals[i]))
      sp_json_f64(&b, vals[i]);
    else
      sp_json_null(&b);
  }
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
  return 0;
}

static int train_keypoints(const char *config, int n_sets, char **sets, int flags) {
  sp_train_config cfg;
  char *text = NULL;
  if (sp_train_config_load(config, n_sets, sets, &cfg, &text) != 0)
    return fprintf(stderr, "spry train: %s\n", sp_last_error()), 2;
  sp_train_summary s;
  int rc = sp_train_run(&cfg, text, flags, &s);
  free(text);
  static const char *const keys[] = {"train_loss", "val_loss",     "val_mean_px",
                                     "val_nme_io", "best_mean_px", "mean_shape_px"};
  const double vals[] = {s.train_loss, s.val_loss, s.val.mean_px, s.val.nme_io, s.best_mean_px, s.mean_shape_px};
  return finish(rc, cfg.out, 6, keys, vals);
}

static int train_video(const char *config, int n_sets, char **sets, int flags) {
  sp_video_config cfg;
  char *text = NULL;
  if (sp_video_config_load(config, n_sets, sets, &cfg, &text) != 0)
    return fprintf(stderr, "spry train: %s\n", sp_last_error()), 2;
  sp_video_summary s;
  int rc = sp_video_train_run(&cfg, text, flags, &s);
  free(text);
  static const char *const keys[] = {"train_loss", "val_loss", "top1", "top5", "best_top1", "train_s", "iterations"};
  const double vals[] = {s.train_loss, s.val_loss, s.top1, s.top5, s.best_top1, s.train_s, (double)s.iterations};
  return finish(rc, cfg.out, 7, keys, vals);
}

int sp_cli_train(int argc, char **argv) {
  if (sp_arg_wants_help(argc, argv)) return usage(stdout), 0;
  const char *config = NULL, *resume = NULL, *set = NULL;
  char **sets = sp_xcalloc((size_t)argc + 1, sizeof(char *));
  int n_sets = 0, changed = 0, overwrite = 0, rc = 2;
  for (int i = 1; i < argc; i++) {
    int r;
    if ((r = sp_arg_str(argc, argv, &i, "--set", &set)) || (r = sp_arg_str(argc, argv, &i, "--resume", &resume)) ||
        (r = sp_arg_flag(argv, i, "--resume-changed", &changed)) ||
        (r = sp_arg_flag(argv, i, "--overwrite", &overwrite))) {
      if (r < 0) goto done;
      if (set) sets[n_sets++] = (char *)set, set = NULL;
    } else if (argv[i][0] != '-' && !config) {
      config = argv[i];
    } else {
      fprintf(stderr, "spry train: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      goto done;
    }
  }
  if (!config || (changed && !resume)) {
    if (changed && !resume) fprintf(stderr, "spry train: --resume-changed goes with --resume DIR\n");
    usage(stderr);
    goto done;
  }
  /* --resume DIR trains into DIR, whatever `out` says. */
  char out_set[1100];
  if (resume) {
    snprintf(out_set, sizeof out_set, "out=%s", resume);
    sets[n_sets++] = out_set;
  }
  int flags = (resume ? SP_RUN_RESUME : 0) | (changed ? SP_RUN_RESUME_CHANGED : 0) | (overwrite ? SP_RUN_OVERWRITE : 0);
  rc = sp_config_file_is_video(config) ? train_video(config, n_sets, sets, flags)
                                       : train_keypoints(config, n_sets, sets, flags);
  sp_plot_release_caches(); /* fontconfig's caches: leak-clean exits under ASan */
done:
  free(sets);
  return rc;
}
