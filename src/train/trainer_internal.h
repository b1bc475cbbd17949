/* Pieces of the keypoint trainer shared by the files of train/ and the CLI. */
#ifndef SPRY_TRAINER_INTERNAL_H
#define SPRY_TRAINER_INTERNAL_H

#include "spry/config.h"
#include "spry/data.h"
#include "spry/graph.h"
#include "spry/metrics.h"

/* Data for a keypoint run: caches hold every annotated point (crops are made
 * around the whole face); `subset` picks the points the model predicts. */
typedef struct {
  sp_dataset all, train, val;
  sp_cache *train_cache, *val_cache;
  const sp_scheme *scheme; /* flip table of the full point set, NULL = no flips */
  sp_scheme user_scheme;   /* data.flip_table, when given */
  int k_all, k;            /* annotated points, predicted points */
  int subset[SP_MAX_KEYPOINTS];
  float *mean_shape;   /* [k][2] training mean of the predicted points, crop pixels */
  sp_eye_points eyes;  /* in subset indices; n_left = 0 when the subset has no eyes */
  sp_box_table *boxes; /* data.boxes, when set */
} sp_kp_data;

/* Reads, splits and caches the data of cfg. cache_dir (may be NULL) holds the
 * mmap-able cache files; with write_cache 0 they are only read (mapped when
 * they match, else the crops are built in RAM), and cache_dir is not made. */
int sp_kp_data_open(const sp_train_config *cfg, const char *cache_dir, int write_cache, sp_kp_data *d);
void sp_kp_data_free(sp_kp_data *d);
/* Where most of a cache's boxes came from (checkpoints record it, so that
 * predict finds faces the way training did). */
sp_box_source sp_kp_box_source(const sp_cache *c);
/* The validation's box source (data.val_box; by default data.box, but
 * detect for runs that cut training crops around the true points). */
const char *sp_kp_val_box(const sp_train_config *cfg);
/* Copies the predicted points of a batch ([n][k_all][2] crop pixels) into
 * dst ([n][k][2]) in model units. */
void sp_kp_points_to_model(const sp_kp_data *d, const float *batch_pts, int n, float units_scale, float units_offset,
                           float *dst);

/* The keypoint model and its losses for cfg. Inputs "image" [N,C,S,S] and
 * "points" [N,K,2] (model units); output "points_out". Model units: the
 * regression models (vgg-*) predict (p - S/2) / (S/2), the heatmap models
 * (resunet*) predict pixels; *scale and *offset map pixels to model units
 * (u = p * scale + offset). */
sp_graph *sp_kp_build_graph(const sp_train_config *cfg, const sp_kp_data *d, int32_t *neighbours, float *scale,
                            float *offset);

/* Runs the model over every sample of `cache` (no augmentation) and returns
 * predictions and ground truth in pixels of the source images ([n][k][2],
 * row i for sample i, malloc'ed) and the mean loss. The loader must give
 * every sample once; with over_ranks its eval_shard part on each rank, every
 * rank calling together, and each gets the whole set's figures. Plans for
 * the full and the last partial batch are made on demand and kept in
 * *full / *tail. */
typedef struct {
  sp_graph *g;
  sp_backend backend;
  const sp_train_config *cfg;
  const sp_kp_data *data;
  float scale, offset; /* pixels -> model units */
  sp_plan *full, *tail;
} sp_kp_evaluator;
int sp_kp_evaluate(sp_kp_evaluator *e, const sp_cache *cache, sp_loader *loader, int64_t epoch, int over_ranks,
                   float **pred, float **gt, int *n, double *loss);
void sp_kp_evaluator_free(sp_kp_evaluator *e);
/* Mean error of predicting the training mean shape in each crop of cache. */
double sp_kp_mean_shape_error(const sp_kp_data *d, const sp_cache *cache);

/* Writes the run report (PNGs + index.html) into dir from dir/metrics.jsonl
 * and an evaluation of the validation set. over_ranks: every rank calls it
 * with its eval_shard loader; they share the evaluation, rank 0 writes. */
int sp_kp_report(const char *dir, sp_kp_evaluator *e, sp_loader *val_loader, int over_ranks);

/* Progress bar on stderr: "epoch 3/30 [=====>   ] 12/48 loss 0.123 310 img/s ETA 0:42". */
typedef struct {
  double start, last_draw;
  int enabled;
} sp_progress;
void sp_progress_begin(sp_progress *p);
void sp_progress_draw(sp_progress *p, int epoch, int epochs, int step, int steps, double loss, double img_per_s,
                      int force);
void sp_progress_end(sp_progress *p);

/* Rank 0's outcome of its solo work (resume, saving checkpoints), shared
 * by both trainers under mpirun. */
typedef struct {
  int rc;
  int64_t epoch, step;
  double loss_sum, best;
} sp_rank0_state;
/* After rank 0 worked alone, every rank learns how it went (a barrier with
 * 10 x timeout_s, a checkpoint of a large model may be slow to write, then a
 * broadcast of *st); returns
 * st->rc, and on the other ranks sets an error when rank 0 failed. A world
 * of one returns st->rc at once. */
int sp_share_rank0(sp_rank0_state *st, double timeout_s, const char *what);
/* Before a run makes any cache or epoch (every rank calls it; rank 0 looks):
 * --resume needs dir/last.safetensors, and an existing dir must be a
 * writable folder, else the first checkpoint would fail after an epoch. Rank
 * 0 then makes the folder (no other rank writes it); every rank fails
 * together when any of this fails. */
int sp_check_run_folder(const char *dir, int resume, double timeout_s);
/* A run that failed before its first checkpoint (a config or data error
 * found after the folder was made) leaves nothing behind: rank 0 removes
 * what it wrote there (caches, metrics.jsonl, half-written checkpoints) and
 * the folder, when sp_check_run_folder made it and it is then empty. */
void sp_run_folder_abandon(const char *dir);

#endif
