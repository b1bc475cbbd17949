/* The video run's report: its metrics.jsonl as figures a person can read at a
 * glance (loss, validation top-1 / top-5, learning rate, throughput, which
 * shows the Multigrid stages) and an index.html with the final figures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "spry/plot.h"
#include "spry/video_train.h"
#include "train/metrics_log.h"

enum { EPOCH, TRAIN_LOSS, VAL_LOSS, TOP1, TOP5, LR, CLIPS_S, EPOCH_S, N_COLS };

int sp_video_report(const char *dir, const char *model, int classes) {
  static const char *const keys[N_COLS] = {"epoch",    "train_loss", "val_loss",    "val_top1",
                                           "val_top5", "lr",         "clips_per_s", "epoch_s"};
  double *c[N_COLS];
  int n;
  if (sp_metrics_log_read(dir, N_COLS, keys, c, &n) != 0) return -1;
  char path[1200];
  int rc = 0, n_items = 0;
  sp_report_item items[4];
  const double *x = c[EPOCH];

  snprintf(path, sizeof path, "%s/loss.png", dir);
  sp_series loss[2] = {{"train", x, c[TRAIN_LOSS], n}, {"validation", x, c[VAL_LOSS], n}};
  rc |= sp_plot_lines(path, 800, 480, "Loss", "epoch", "cross-entropy", 2, loss, 1);
  items[n_items++] = (sp_report_item){"Loss", "loss.png", "Training loss (mean over the epoch) and validation loss."};

  snprintf(path, sizeof path, "%s/accuracy.png", dir);
  /* With 5 classes or fewer every label is in the top 5: a flat 1.0 line. */
  int show_top5 = classes > 5;
  sp_series acc[2] = {{"top-1", x, c[TOP1], n}, {"top-5", x, c[TOP5], n}};
  rc |= sp_plot_lines(path, 800, 480, "Validation accuracy", "epoch", "fraction of videos", show_top5 ? 2 : 1, acc, 0);
  items[n_items++] = (sp_report_item){
      "Validation accuracy", "accuracy.png",
      show_top5 ? "Per video: the mean softmax of its test clips, against its label."
                : "Per video: the mean softmax of its test clips, against its label (top-1 only: with 5 classes or "
                  "fewer, top-5 is always 1)."};

  snprintf(path, sizeof path, "%s/lr.png", dir);
  sp_series lr = {"learning rate", x, c[LR], n};
  rc |= sp_plot_lines(path, 800, 480, "Learning rate (end of each epoch)", "epoch", "learning rate", 1, &lr, 0);
  items[n_items++] = (sp_report_item){"Learning rate", "lr.png", NULL};

  snprintf(path, sizeof path, "%s/throughput.png", dir);
  sp_series speed = {"clips per second", x, c[CLIPS_S], n};
  rc |= sp_plot_lines(path, 800, 480, "Training throughput", "epoch", "clips / s", 1, &speed, 0);
  items[n_items++] = (sp_report_item){"Training throughput", "throughput.png",
                                      "Clips per second of each epoch; Multigrid's coarse stages run faster."};

  /* The table: the last epoch's figures, the best top-1 and the time. */
  double best = NAN, total_s = 0;
  int best_epoch = 0;
  for (int i = 0; i < n; i++) {
    if (isfinite(c[TOP1][i]) && !(c[TOP1][i] <= best)) best = c[TOP1][i], best_epoch = (int)x[i];
    if (isfinite(c[EPOCH_S][i])) total_s += c[EPOCH_S][i];
  }
  char v[6][64];
  const char *names[6] = {"epochs",
                          "validation top-1 (last epoch)",
                          "validation top-5 (last epoch)",
                          "best validation top-1",
                          "validation loss (last epoch)",
                          "training time"};
  const char *vals[6] = {v[0], v[1], v[2], v[3], v[4], v[5]};
  snprintf(v[0], 64, "%d", n);
  snprintf(v[1], 64, "%.4f", n ? c[TOP1][n - 1] : NAN);
  snprintf(v[2], 64, "%.4f", n ? c[TOP5][n - 1] : NAN);
  snprintf(v[3], 64, "%.4f (epoch %d)", best, best_epoch);
  snprintf(v[4], 64, "%.4f", n ? c[VAL_LOSS][n - 1] : NAN);
  snprintf(v[5], 64, "%.1f s", total_s);
  snprintf(path, sizeof path, "%s/index.html", dir);
  char title[256];
  snprintf(title, sizeof title, "spry video run: %s", model);
  if (!show_top5) /* the table without its top-5 row */
    for (int i = 2; i < 5; i++) names[i] = names[i + 1], vals[i] = vals[i + 1];
  rc |= sp_report_index_html(path, title, show_top5 ? 6 : 5, names, vals, n_items, items);
  for (int k = 0; k < N_COLS; k++) free(c[k]);
  return rc ? -1 : 0;
}
