/* Video classification training (TSN / TSM) with optional Multigrid.
 *
 * A run is one YAML file with `task: video` (keys and defaults:
 * configs/README_video.md, or sp_video_config_default): model, data (train
 * and validation lists, sampler, segments or frames/stride, size), optimizer,
 * schedule, multigrid, epochs, batch, threads, workers, seed, backend, out,
 * dist (data parallel under mpirun, as the keypoint trainer).
 * Outputs as the keypoint trainer: out/metrics.jsonl, last.safetensors (every
 * epoch; resume), best.safetensors (best top-1). */
#ifndef SPRY_VIDEO_TRAIN_H
#define SPRY_VIDEO_TRAIN_H

#include <stdint.h>

#include "spry/dist.h"
#include "spry/graph.h"
#include "spry/train.h" /* SP_RUN_* */
#include "spry/optim.h"
#include "spry/video_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Multigrid (Wu et al., CVPR 2020) ------------------------------------
 * Long cycle: training split into 4 equal stages of epochs with shapes
 * [8N, T/4, H/sqrt2], [4N, T/2, H/sqrt2], [2N, T/2, H], [N, T, H].
 * Short cycle: iteration i of an epoch uses the stage's H/2, H/sqrt2, H for
 * (i + epoch) % 3 = 0, 1, 2; the last 1/8 of training runs the plain stage
 * shape (the paper's final phase at the base shape, so BN statistics settle
 * at the test shape). Sizes round to multiples of 16 (at least 32), frames
 * to at least 1; every batch is the one that costs what [N, T, H] costs
 * (N T H^2 / (t h^2): 8N, 4N, 2N when sizes are exact; 4x, 2x, 1x in the
 * short cycle), capped at the clips of an epoch. Learning rate, as the
 * authors' PySlowFast: the schedule's value at the epoch progress (clips
 * seen / clips per epoch, so it stays continuous while the iterations per
 * epoch change) times the long-cycle stage's batch / N (linear scaling); the
 * short cycle's larger batches keep the stage's rate. */
typedef struct {
  int long_cycle, short_cycle;
  int batch, frames, size; /* the base shape N, T, H (= W) */
  int epochs;
  int entries; /* clips per epoch (caps the batch) */
  int cycles;  /* long cycles before the final phase (0 = 1) */
} sp_multigrid;

/* Long-cycle stage (0..3; 3 when the long cycle is off) of an epoch. */
int sp_multigrid_stage(const sp_multigrid *m, int64_t epoch);
/* Shape of iteration `iter` (of the epoch) in stage `stage`. */
sp_video_shape sp_multigrid_shape(const sp_multigrid *m, int64_t epoch, int64_t iter);
/* The epoch's batch shapes, in order, using at most m->entries clips (a last
 * partial batch only when keep_partial). Returns the count (<= cap). */
int sp_multigrid_epoch_shapes(const sp_multigrid *m, int64_t epoch, int keep_partial, sp_video_shape *out, int cap);
/* lr multiplier during an epoch: its long-cycle stage's batch / N. */
double sp_multigrid_lr_scale(const sp_multigrid *m, int64_t epoch);

/* ---- configuration --------------------------------------------------------- */
typedef struct {
  char model[32];              /* tsn-r18 | tsn-r50 | tsm-r18 | tsm-r50 */
  int base_width;              /* 0 = 64 */
  float shift_back, shift_fwd; /* TSM; default 1/8 each */
  float dropout;
  char pretrained[1024]; /* optional safetensors with torchvision-named ResNet weights (fc skipped) */
  struct {
    char train_list[1024], val_list[1024];
    char root[1024];    /* when set, relative list paths are taken from here, not the list's folder */
    char classes[1024]; /* classes file (labels.txt or classInd.txt) numbering the lists' labels;
                             * "" = labels.txt beside the training list when there is one */
    sp_sampler_kind sampler;
    int segments;       /* TSN sampler: frames per clip */
    int frames, stride; /* dense sampler */
    int size, short_side;
    int test_clips;
    float flip;
    int num_classes; /* 0 = 1 + the largest label in the training list */
    float mean[3], std[3];
  } data;
  sp_opt_config optimizer;
  float lr;
  float clip_norm;
  sp_lr_schedule schedule;
  struct {
    int long_cycle, short_cycle;
    int cycles; /* long cycles (PySlowFast runs one per learning-rate step) */
  } multigrid;
  int epochs, batch, threads, workers;
  uint64_t seed;
  char backend[8];
  char precision[8];
  char out[1024];
  int eval_every;
  sp_dist_config dist; /* data parallel under mpirun / srun, as the keypoint trainer */
} sp_video_config;

sp_video_config sp_video_config_default(void);
/* Defaults, then the file (or text), then each "key=value" of sets. resolved
 * (may be NULL) gets the YAML with the sets applied, for checkpoints. Unknown
 * keys and bad values are errors naming the key and the line. */
int sp_video_config_load(const char *path, int n_sets, char *const *sets, sp_video_config *cfg, char **resolved);
int sp_video_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_video_config *cfg,
                          char **resolved);
/* 1 when the YAML file or text has `task: video`. */
int sp_config_file_is_video(const char *path);
int sp_config_text_is_video(const char *yaml);

/* ---- training and evaluation ---------------------------------------------- */
typedef struct {
  double train_loss, val_loss, top1, top5, best_top1;
  double train_s; /* wall-clock of the training epochs (validation excluded) */
  int64_t iterations;
  int val_clips;  /* videos evaluated */
  int val_failed; /* test clips that could not be read (left out of the scores) */
} sp_video_summary;

/* Trains cfg into cfg->out; run_flags and signals as for sp_train_run (SP_RUN_*, spry/train.h).
 * 0, 130 when stopped by SIGINT/SIGTERM (after saving), or -1 with an error. */
int sp_video_train_run(const sp_video_config *cfg, const char *config_text, int run_flags, sp_video_summary *summary);
/* The run's report from its metrics.jsonl: loss.png, accuracy.png, lr.png,
 * throughput.png and index.html in dir (the trainer writes it at the end). */
/* classes: the model's class count; with 5 or fewer, top-5 is always 1 and
 * is left out of the figure and the table. */
int sp_video_report(const char *dir, const char *model, int classes);
/* Top-1/top-5 of a checkpoint on cfg's validation list (multi-clip averaged). */
int sp_video_eval_checkpoint(const sp_video_config *cfg, const char *weights, const char *list_override,
                             sp_video_summary *out);

#ifdef __cplusplus
}
#endif
#endif
