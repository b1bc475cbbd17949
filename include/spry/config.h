/* Run configuration: one YAML file (+ `--set key=value` overrides) describing a
 * keypoint training run. Unknown keys and bad values are errors naming the key
 * and its line. Every key and its default: configs/README.md. */
#ifndef SPRY_CONFIG_H
#define SPRY_CONFIG_H

#include <stdint.h>

#include "spry/dist.h"
#include "spry/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SP_LOSS_L1, SP_LOSS_L2, SP_LOSS_MSE, SP_LOSS_EUCLIDEAN } sp_loss_kind;

typedef struct {
  char model[32]; /* vgg-face, vgg-nose, resunet18, resunet50, ... */
  struct {        /* model switches, passed to sp_model_spec_set (variant_c, blurpool, base_width, ...) */
    char key[32], value[32];
  } model_options[16];
  int n_model_options;

  struct {
    char path[1024]; /* dataset folder (any format sp_dataset_open_dir reads) */
    char format[16]; /* auto (detected), csv, coco, dlib, imm, asf, pts */
    char split[16];  /* identity | list | none */
    double val_fraction;
    char val_list[1024];
    int keypoints[256];  /* optional subset of point indices (e.g. the nose tip) */
    int n_keypoints;     /* 0 = all */
    int flip_table[256]; /* user flip permutation over all annotated points (new[i] = old[flip[i]]) */
    int n_flip_table;    /* 0 = the scheme known for K (IMM-58, iBUG-68) */
    int crop_size;       /* cached working crop side */
    int size;            /* network input side */
    int channels;        /* 1 gray, 3 RGB */
    float margin;        /* crop context around the face box */
    char box[16];        /* where face boxes come from: auto | image | detect | file | points */
    char boxes[1024];    /* boxes file (CSV image,x,y,w,h) for box: file (and auto) */
    char val_box[16];    /* validation's box source; "" = data.box, except detect when data.box is points */
    int cache_file;      /* keep an mmap-able cache file in the run directory */
    float mean[3], std[3];
  } data;

  struct {
    float scale_min, scale_max, translate, rotate, flip;
    int ra_n, ra_m;
  } augment;

  struct {
    sp_loss_kind kind;
    float structure_weight;
    int neighbours;
  } loss;

  sp_opt_config optimizer;
  float lr;
  float clip_norm; /* 0 = off */

  sp_lr_schedule schedule; /* base_lr, total_epochs filled from lr/epochs */
  double warmup_fraction;  /* alternative to warmup_epochs: fraction of training */

  int epochs, batch, threads, workers;
  uint64_t seed;
  char precision[8]; /* f32 | bf16 */
  char backend[8];   /* ref | cpu */
  char out[1024];
  int eval_every; /* epochs between validation passes (1) */

  sp_dist_config dist; /* data parallel over MPI (used when launched by mpirun / srun) */
} sp_train_config;

/* Defaults, then the file, then each "key=value" of sets (in order). When
 * resolved is not NULL it receives the YAML text with the sets applied
 * (malloc'ed): checkpoints store it so eval can rebuild the run. */
int sp_train_config_load(const char *path, int n_sets, char *const *sets, sp_train_config *cfg, char **resolved);
/* Same from YAML text (label names it in messages). */
int sp_train_config_parse(const char *yaml, const char *label, int n_sets, char *const *sets, sp_train_config *cfg,
                          char **resolved);
sp_train_config sp_train_config_default(void);
const char *sp_loss_kind_name(sp_loss_kind k);

#ifdef __cplusplus
}
#endif
#endif
