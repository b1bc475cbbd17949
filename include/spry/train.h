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
  int64_t epoch;          /* epochs completed */
  int64_t iteration;      /* optimizer steps taken */
  uint64_t seed;          /* run seed (all randomness derives from it) */
  const char *config;     /* the run's configuration text (YAML or JSON), may be NULL */
  const char *model;      /* model name, may be NULL */
  int64_t step_in_epoch;  /* > 0 when saved mid-epoch (Ctrl-C): batches already trained */
  double loss_sum;        /* training loss summed over those batches (exact resume of the epoch mean) */
  double best;            /* best validation mean error so far (INFINITY if none) */
  const char *box_source; /* keypoint runs: where most training boxes came from (sp_box_source_name), may be NULL */
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
  sp_kp_metrics val;    /* metrics of the last validation pass */
} sp_train_summary;

/* A run's options beyond its config (sp_train_run, sp_video_train_run). */
enum {
  SP_RUN_RESUME = 1,         /* continue out/last.safetensors, bit for bit; refused if the config changed */
  SP_RUN_RESUME_CHANGED = 2, /* with SP_RUN_RESUME: the config may differ; the interrupted epoch starts again */
  SP_RUN_OVERWRITE = 4,      /* a fresh run may replace the checkpoints of another run in out */
};

/* Trains cfg into cfg->out (metrics.jsonl, last.safetensors, best.safetensors).
 * config_text is stored in the checkpoints (so eval can rebuild the model).
 * run_flags: SP_RUN_*. A fresh run into a folder that holds another run's
 * checkpoint is refused unless SP_RUN_OVERWRITE. Returns 0, 130 when stopped
 * by SIGINT/SIGTERM (after saving), or -1 with an error.
 * While it runs, SIGINT and SIGTERM are blocked in the calling thread and
 * its OpenMP threads and taken by a thread of the library's own (a second
 * SIGINT ends the process at once, status 130); the caller's handlers and
 * mask come back when it returns. A program that
 * handles other signals should block them in threads that compute, or give
 * its handlers an alternate stack (sigaltstack, SA_ONSTACK): oneDNN 2.6's
 * f32 gemm kernels point the stack pointer into the heap while they run, so
 * a signal frame pushed there corrupts it. */
int sp_train_run(const sp_train_config *cfg, const char *config_text, int run_flags, sp_train_summary *summary);
/* ---- scoring a checkpoint (train/kp_eval.c): `spry eval` ---- */
#include "spry/data.h"
typedef struct {
  const char *config; /* the run's config file; NULL: the one stored in the checkpoint */
  const char *data;   /* score every image of this folder instead of the run's validation split */
  const char *format; /* its annotation format (auto, csv, coco, dlib, imm, asf, pts) */
  const char *boxes;  /* a boxes file: data.box = file */
  const char *backend;
  char *const *sets; /* key=value overrides, after the above */
  int n_sets;
  const char *per_face_csv; /* write each face's box source, box and errors here (NULL: no) */
  const char *ced_png;      /* write the CED plot here (NULL: no) */
} sp_kp_eval_options;

typedef struct {
  sp_kp_metrics m;
  double val_loss, mean_shape_px;
  int count;
  char box[16];                    /* where most boxes came from */
  int box_counts[SP_BOXSRC_COUNT]; /* per sp_box_source */
} sp_kp_eval_result;

/* Scores the checkpoint: 0; -1 with an error; -2 when the config (or an
 * override) is wrong. A run trained on points-boxes is scored on the
 * detector's boxes unless the options ask for points (then a note says the
 * figure is optimistic). */
int sp_kp_eval_checkpoint(const char *weights, const sp_kp_eval_options *o, sp_kp_eval_result *r);

/* ---- prediction on new images (train/predictor.c) ---- */
typedef struct sp_kp_predictor sp_kp_predictor;
/* Loads a trained keypoint checkpoint (its run config is stored inside).
 * backend NULL keeps the run's backend. NULL with an error on failure. */
sp_kp_predictor *sp_kp_predictor_open(const char *weights, const char *backend);
int sp_kp_predictor_keypoints(const sp_kp_predictor *p);
int sp_kp_predictor_channels(const sp_kp_predictor *p); /* load images with this many channels */
/* How the model finds faces it is not given a box for: SP_BOX_IMAGE (the
 * whole photo is the face, for models trained with data.box: image) or
 * SP_BOX_DETECT (the face detector, for models trained on face boxes). */
sp_box_mode sp_kp_predictor_box_mode(const sp_kp_predictor *p);
/* Where the model's training boxes came from ("image", "detector", "file",
 * "annotation", "points"; "unknown" for checkpoints that do not say). */
const char *sp_kp_predictor_trained_on(const sp_kp_predictor *p);

/* One face of a photo: its box and points, in the photo's pixels. */
typedef struct {
  float box[4]; /* x, y, w, h */
  float score;  /* the detector's confidence; 0 for a given box or the whole image */
  float *pts;   /* [K][2] */
} sp_kp_face;
/* Every face of an image file, found as the model's run found them
 * (sp_kp_predictor_box_mode): the whole image, or each face the detector
 * finds (most confident first). box (x, y, w, h) forces one face there.
 * The file is cut exactly as the training crops were. *faces is malloc'ed
 * (sp_kp_faces_free); returns the count (0: no face found) or -1. */
int sp_kp_predict_file(sp_kp_predictor *p, const char *path, const float *box, sp_kp_face **faces);
/* The same on decoded pixels (im must have sp_kp_predictor_channels). */
int sp_kp_predict_image(sp_kp_predictor *p, const sp_image *im, const float *box, sp_kp_face **faces);
void sp_kp_faces_free(sp_kp_face *faces, int n);
/* The largest of n faces (morphing takes it), or -1 when n = 0. */
int sp_kp_largest_face(const sp_kp_face *faces, int n);
/* Points [K][2] in im's pixels of one face: in box (x, y, w, h), else the
 * largest face found as sp_kp_predict_image finds them (an error when none). */
int sp_kp_predict(sp_kp_predictor *p, const sp_image *im, const float *box, float *pts);
void sp_kp_predictor_close(sp_kp_predictor *p);
/* A face's points from a file for `spry morph --points-a/-b`: `spry
 * predict`'s JSON (first line, largest face), a bare [[x,y],...] array, or an
 * IMM .dat/.asf (.asf fractions times im_w, im_h) or iBUG .pts file. Every
 * point must be finite (|v| <= 1e6 px). *pts is malloc'ed [K][2]. 0 or -1
 * with an error naming the file. */
int sp_morph_points_read(const char *path, int im_w, int im_h, float **pts, int *k);

#ifdef __cplusplus
}
#endif
#endif
