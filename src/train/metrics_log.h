/* metrics.jsonl, the one-line-per-epoch log both trainers append to. */
#ifndef SPRY_TRAIN_METRICS_LOG_H
#define SPRY_TRAIN_METRICS_LOG_H

#include <stdint.h>

/* At the start of a run: keep the lines of epochs 1..done (the epochs the
 * resumed checkpoint completed; 0 for a fresh run), drop the rest, so a new
 * run into an old folder, or a run resumed from an older checkpoint, logs
 * each epoch once. Rewritten atomically; a missing file is fine. Returns 0,
 * or -1 with the error set. */
int sp_metrics_log_start(const char *dir, int64_t done);

/* The log as columns, one row per line: cols[k][row] is the number under
 * keys[k] (NaN where a line lacks it). The caller frees each column. Returns
 * 0, or -1 with the error set when the file cannot be read. */
int sp_metrics_log_read(const char *dir, int n_keys, const char *const *keys, double **cols, int *n_rows);

#endif
