/* Training glue: the graph's parameters as optimizer parameters, and
 * checkpoints (safetensors: parameters, BN running statistics, optimizer
 * state, and JSON-ish metadata strings). */
#ifndef SPRY_TRAIN_H
#define SPRY_TRAIN_H

#include <stdint.h>

#include "spry/graph.h"
#include "spry/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The trainable parameters of g, flagged no_decay where the graph says so
 * (BN and biases). Returns a malloc'ed array of *n entries (free it). */
sp_opt_param *sp_train_opt_params(sp_graph *g, int *n);

typedef struct {
  int64_t epoch;           /* epochs completed */
  int64_t iteration;       /* optimizer steps taken */
  uint64_t seed;           /* run seed (all randomness derives from it) */
  const char *config;      /* the run's configuration text (YAML or JSON), may be NULL */
  const char *model;       /* model name, may be NULL */
  int64_t step_in_epoch;   /* > 0 when saved mid-epoch (Ctrl-C): batches already trained */
  double loss_sum;         /* training loss summed over those batches (exact resume of the epoch mean) */
  double best;             /* best validation mean error so far (INFINITY if none) */
} sp_checkpoint_meta;

/* Writes parameters and buffers under their graph names, the optimizer state
 * (when opt is not NULL) as "optim.<state name>", and meta as strings, to
 * path atomically (temporary file + rename). */
int sp_checkpoint_save(const char *path, sp_graph *g, const sp_optimizer *opt, const sp_checkpoint_meta *meta);

/* Loads a checkpoint into g (every parameter and buffer must be present with
 * the same shape) and into opt when not NULL (its state must match). Fills
 * *meta (strings copied into buf; config may be truncated to buf_size). */
int sp_checkpoint_load(const char *path, sp_graph *g, sp_optimizer *opt, sp_checkpoint_meta *meta, char *buf,
                       size_t buf_size);

/* ---- the keypoint trainer (train/trainer.c) ---- */
#include "spry/config.h"
#include "spry/metrics.h"

typedef struct {
  double train_loss, val_loss, best_mean_px;
  double mean_shape_px; /* validation error of predicting the training mean shape */
  sp_kp_metrics val; /* metrics of the last validation pass */
} sp_train_summary;

/* Trains cfg into cfg->out (metrics.jsonl, last.safetensors, best.safetensors).
 * config_text is stored in the checkpoints (so eval can rebuild the model).
 * resume: continue from cfg->out/last.safetensors. Returns 0, 130 when
 * stopped by SIGINT/SIGTERM (after saving), or -1 with an error. */
int sp_train_run(const sp_train_config *cfg, const char *config_text, int resume, sp_train_summary *summary);
/* ---- prediction on new images (train/predictor.c) ---- */
#include "spry/data.h"
typedef struct sp_kp_predictor sp_kp_predictor;
/* Loads a trained keypoint checkpoint (its run config is stored inside).
 * backend NULL keeps the run's backend. NULL with an error on failure. */
sp_kp_predictor *sp_kp_predictor_open(const char *weights, const char *backend);
int sp_kp_predictor_keypoints(const sp_kp_predictor *p);
int sp_kp_predictor_channels(const sp_kp_predictor *p); /* load images with this many channels */
/* Points [K][2] in im's pixels. box (x, y, w, h of the landmarks' box, as the
 * training crops were cut) or NULL for the whole image. */
int sp_kp_predict(sp_kp_predictor *p, const sp_image *im, const float *box, float *pts);
void sp_kp_predictor_close(sp_kp_predictor *p);

/* Makes the next runs (keypoint and video) stop, and save as on Ctrl-C,
 * once the optimizer has taken `steps` steps; 0 turns it off. For tests of
 * interrupted runs. */
void sp_train_stop_after(int64_t steps);

#ifdef __cplusplus
}
#endif
#endif
