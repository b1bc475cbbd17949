/* spry data: keypoint samples, annotation readers, landmark schemes, the
 * RAM-resident uint8 crop cache (optionally an mmap-ed file), keypoint-aware
 * augmentation and the prefetching batch loader.
 *
 * Coordinates are pixels, origin top-left, pixel centres at integers; a point
 * on the centre of pixel (x, y) has coordinates (x, y). */
#ifndef SPRY_DATA_H
#define SPRY_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "spry/common.h"
#include "spry/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- images */

typedef enum { SP_IMG_UNKNOWN = 0, SP_IMG_JPEG, SP_IMG_PNG } sp_image_format;

/* Interleaved (HWC) uint8 image, c = 1 (gray) or 3 (RGB). */
typedef struct {
  int w, h, c;
  uint8_t *px;
} sp_image;

/* Format from the first bytes (never from the file name). */
sp_image_format sp_image_sniff(const uint8_t *buf, size_t len);
/* Width and height without decoding the pixels. */
int sp_image_probe(const uint8_t *buf, size_t len, int *w, int *h);
/* Decodes to c channels (1 or 3). JPEGs are decoded at 1/denom scale in the
 * DCT domain (denom 1, 2, 4 or 8); PNGs ignore denom. `what` names the file in
 * error messages. */
int sp_image_decode(const uint8_t *buf, size_t len, int c, int denom, const char *what, sp_image *out);
int sp_image_load(const char *path, int c, sp_image *out);
void sp_image_free(sp_image *im);
/* Whole file into memory (for decoding); caller frees *buf. */
int sp_read_file(const char *path, uint8_t **buf, size_t *len);

/* Square crops: the square (x0, y0, side) of src resampled (bilinear, black
 * outside) to size x size, planar (CHW) or interleaved; the same pixel-centre
 * convention as the cache, so a model sees new images as it saw training crops. */
void sp_image_crop_square(const sp_image *src, double x0, double y0, double side, int size, int planar, uint8_t *out);
/* Crop pixel coordinates -> source pixel coordinates for that square. */
void sp_crop_to_source(double x0, double y0, double side, int size, float *x, float *y);
/* The square the cache would cut around a face box (x, y, w, h) with margin. */
void sp_crop_square_for_box(const float box[4], float margin, double *x0, double *y0, double *side);

/* --------------------------------------------------------------- samples */

/* One face: an image, an optional face box, K points, optional visibility.
 * `relative` = 1 means points are fractions of the image size (IMM .asf) and
 * are turned into pixels once the image size is known. */
typedef struct {
  char *image;     /* path of the image file */
  int has_box;
  float box[4];    /* x, y, w, h in pixels */
  int k;
  float *pts;      /* [k][2] */
  uint8_t *vis;    /* [k] 1 = labelled/visible, 0 = not; NULL = all 1 */
  int relative;
  int identity;    /* index into sp_dataset.identities, -1 = unknown */
} sp_kp_sample;

/* A list of samples, all with the same K. Skipped inputs are counted. */
typedef struct {
  sp_kp_sample *s;
  int n, cap;
  int k;           /* 0 until the first sample is added */
  char **identities;
  int n_identities;
  int skipped;     /* annotations rejected while reading */
} sp_dataset;

void sp_dataset_init(sp_dataset *ds);
void sp_dataset_free(sp_dataset *ds);
/* Takes ownership of the sample's arrays on success; on a K mismatch or bad
 * coordinates the sample is freed, reported on stderr and counted. */
int sp_dataset_add(sp_dataset *ds, sp_kp_sample *s, const char *source);
/* Identity index for a name (added if new). */
int sp_dataset_identity(sp_dataset *ds, const char *name);
void sp_kp_sample_free(sp_kp_sample *s);
/* Reports one skipped input on stderr: "spry data: skip FILE: REASON". */
void sp_data_skip(const char *file, const char *reason_fmt, ...) __attribute__((format(printf, 2, 3)));

/* Single-file readers (fill one sample; image path is derived from the file). */
int sp_read_imm_asf(const char *path, sp_kp_sample *out);
int sp_read_imm_dat(const char *path, sp_kp_sample *out);
int sp_read_pts(const char *path, sp_kp_sample *out);
/* Multi-sample readers: append to ds (bad entries skipped and counted). */
int sp_read_dlib_xml(const char *path, sp_dataset *ds);
int sp_read_coco_keypoints(const char *json_path, const char *image_dir, sp_dataset *ds);
int sp_read_keypoints_csv(const char *csv_path, const char *image_dir, sp_dataset *ds);
/* A folder: keypoints.csv (+ images/), *.dat / *.asf (IMM), *.pts, a dlib XML
 * (*_with_face_landmarks.xml or the one .xml), or a COCO .json. Identities are
 * set for IMM (person number) and the CSV layout (name up to the last '_'). */
int sp_dataset_open_dir(const char *dir, sp_dataset *ds);
/* Same, reading only the given format: auto, csv, coco, dlib, imm (.dat or
 * .asf), asf or pts. */
int sp_dataset_open_dir_format(const char *dir, const char *format, sp_dataset *ds);

/* Splits: `take` is 1 for samples to keep. */
typedef enum { SP_SPLIT_TRAIN, SP_SPLIT_VAL } sp_split_part;
/* By identity: a fixed hash of the identity name sends val_fraction of the
 * identities to val (IMM's numeric persons: 1-32 train, 33-40 val). */
int sp_dataset_split_identity(const sp_dataset *ds, sp_split_part part, double val_fraction, sp_dataset *out);
/* By list file: one image base name (or path) per line. */
int sp_dataset_split_list(const sp_dataset *ds, const char *list_path, sp_dataset *out);
/* Appends a copy of sample i of ds (identity names carried over). */
void sp_dataset_add_copy(sp_dataset *out, const sp_dataset *ds, int i);

/* ------------------------------------------------------- landmark schemes */

#define SP_MAX_KEYPOINTS 256
typedef struct {
  char name[32];
  int k;
  int flip[SP_MAX_KEYPOINTS]; /* after mirroring: new[i] = old[flip[i]] */
} sp_scheme;

const sp_scheme *sp_scheme_ibug68(void);
const sp_scheme *sp_scheme_imm58(void);
/* User table; must be a permutation that is its own inverse. */
int sp_scheme_from_table(const char *name, int k, const int *flip, sp_scheme *out);
/* ibug68 for K=68, imm58 for K=58, else NULL (no flipping). */
const sp_scheme *sp_scheme_for_k(int k);
/* Mirrors points of an image of width w in place: x' = w-1-x, re-indexed. */
void sp_scheme_flip_points(const sp_scheme *sc, float *pts, uint8_t *flags, float w);

/* ------------------------------------------------------------------ cache */

typedef struct {
  int size;        /* square working crop, pixels */
  int channels;    /* 1 or 3 */
  float margin;    /* context added on each side, fraction of the box side */
  int threads;     /* decode threads; 0 = cores */
} sp_crop_config;
sp_crop_config sp_crop_config_default(void);

/* Decoded crops (HWC uint8) and their points, in RAM or mmap-ed from a file. */
typedef struct sp_cache {
  int n, size, channels, k;
  uint8_t *pixels;    /* [n][size][size][channels] */
  float *points;      /* [n][k][2], crop pixel coordinates */
  uint8_t *vis;       /* [n][k] */
  int32_t *source;    /* [n] index of the dataset sample */
  float *crop;        /* [n][3] the crop square in the source image: x0, y0, side (pixels) */
  int skipped;        /* images that failed to decode */
  int from_file;      /* 1 when mapped from a cache file */
  void *map_;         /* internal */
  size_t map_len_;
} sp_cache;

/* Decodes, crops and resizes every sample in parallel. Bad images are skipped
 * (one line each) and a summary line is printed. NULL only on a setup error. */
sp_cache *sp_cache_build(const sp_dataset *ds, const sp_crop_config *cfg);
/* Maps `path` if it matches ds + cfg (sizes, mtimes, annotations, settings),
 * else builds and writes it (atomically). *rebuilt tells which happened. */
sp_cache *sp_cache_open(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, int *rebuilt);
/* The same without writing: maps `path` if it matches, else builds in RAM
 * (the ranks of a data-parallel run other than rank 0 read rank 0's cache
 * file but never write the run folder). */
sp_cache *sp_cache_open_readonly(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, int *rebuilt);
int sp_cache_write(const sp_cache *c, const char *path, const sp_dataset *ds, const sp_crop_config *cfg);
void sp_cache_free(sp_cache *c);
/* Side of sample i's crop square in source pixels (errors in crop pixels
 * times side / size are errors in the original image). */
double sp_cache_crop_side(const sp_cache *c, int i);
/* Crop pixel coordinates of sample i -> source image pixel coordinates. */
void sp_cache_crop_to_source(const sp_cache *c, int i, float *x, float *y);

/* ----------------------------------------------------------- augmentation */

typedef struct {
  int out_size;        /* square output side (<= cache size is typical) */
  float scale_min, scale_max; /* zoom, default 3/4 .. 4/3 */
  float translate;     /* max shift, fraction of out_size */
  float rotate_deg;    /* max |rotation| */
  float flip_prob;     /* horizontal flip (needs a scheme) */
  int ra_n, ra_m;      /* RandAugment: n ops, magnitude m of 0..30; n=0 off */
} sp_augment_config;
sp_augment_config sp_augment_config_default(int out_size);
/* No randomness at all: centre crop resized to out_size. */
sp_augment_config sp_augment_config_none(int out_size);

/* RandAugment's 14 ops, in torchvision's order. */
typedef enum {
  SP_RA_IDENTITY = 0, SP_RA_SHEAR_X, SP_RA_SHEAR_Y, SP_RA_TRANSLATE_X, SP_RA_TRANSLATE_Y,
  SP_RA_ROTATE, SP_RA_BRIGHTNESS, SP_RA_COLOR, SP_RA_CONTRAST, SP_RA_SHARPNESS,
  SP_RA_POSTERIZE, SP_RA_SOLARIZE, SP_RA_AUTOCONTRAST, SP_RA_EQUALIZE, SP_RA_NUM_OPS
} sp_ra_op;
const char *sp_ra_op_name(sp_ra_op op);
/* The op's value at magnitude bin m (0..30) for an image of side `size`:
 * torchvision's table (shear 0..0.3, translate 0..150/331 of the side,
 * rotate 0..30 deg, enhance 0..0.9, posterize bits 8..4, solarize 255..0). */
float sp_ra_magnitude(sp_ra_op op, int m, int size);

/* Point flags in a batch. */
#define SP_PT_OUTSIDE 1u   /* left the output crop (coordinates kept) */
#define SP_PT_UNLABELLED 2u

/* Augments one cached sample into planar (CHW) output + points + flags.
 * Randomness comes only from `key` (use sp_rng_key(seed, epoch, index)). */
void sp_augment_sample(const sp_cache *c, int i, const sp_augment_config *cfg, const sp_scheme *scheme,
                       uint64_t key, uint8_t *out_chw, float *out_pts, uint8_t *out_flags);
/* Applies exactly the listed ops (forced signs +1/-1) to an HWC image of size
 * s x s: used by tests to check each op moves points like pixels. */
void sp_augment_apply_ops(const uint8_t *src_hwc, int s, int c, const sp_ra_op *ops, const int *signs, int n_ops,
                          int magnitude, float *pts, int k, uint8_t *out_chw);

/* ----------------------------------------------------------------- loader */

typedef struct {
  int n;              /* samples in this batch (== batch unless last, partial) */
  int c, h, w, k;
  uint8_t *pixels;    /* [n][c][h][w] contiguous, planar */
  float *points;      /* [n][k][2] output pixel coordinates */
  uint8_t *flags;     /* [n][k] SP_PT_* */
  int32_t *index;     /* [n] cache index of each sample */
  int64_t epoch, step;
} sp_batch;

typedef struct {
  int batch;
  int workers;        /* 0 = number of cores */
  int prefetch;       /* ring depth in batches; 0 = 2 * workers */
  uint64_t seed;
  int shuffle;        /* reshuffle every epoch */
  int drop_last;      /* drop the final partial batch */
  int rank, world;    /* sharding: rank takes a disjoint slice of each epoch */
  /* Evaluation sharding instead (world > 1): rank r takes the contiguous
   * samples [r n / W, (r+1) n / W) of the epoch's order, so the ranks cover
   * all n between them, in parts that differ by at most one. Ranks then take
   * different numbers of batches: for passes with no collective inside
   * (evaluation), not training. */
  int eval_shard;
  sp_augment_config aug;
} sp_loader_config;
sp_loader_config sp_loader_config_default(int batch, int out_size);

typedef struct sp_loader sp_loader;
/* `scheme` may be NULL (then flips are off). The cache must outlive it. */
sp_loader *sp_loader_create(const sp_cache *cache, const sp_scheme *scheme, const sp_loader_config *cfg);
/* Begins (or restarts, cancelling the current one) an epoch. */
int sp_loader_start_epoch(sp_loader *l, int64_t epoch);
/* Batches this rank gets per epoch. */
int sp_loader_batches_per_epoch(const sp_loader *l);
/* Next batch of the epoch in order, or NULL when the epoch is done. The batch
 * stays valid until the next call of next/start_epoch/destroy. */
const sp_batch *sp_loader_next(sp_loader *l);
void sp_loader_destroy(sp_loader *l);

/* One batched pass u8 -> (x/255 - mean[c]) / std[c], into f32 or bf16 NCHW. */
int sp_batch_normalize(const sp_batch *b, const float *mean, const float *std, sp_dtype dtype, void *out);
/* Same on raw planar data: n images of c planes of hw pixels. */
int sp_normalize_u8(const uint8_t *src, int64_t n, int c, int64_t hw, const float *mean, const float *std,
                    sp_dtype dtype, void *out);

#ifdef __cplusplus
}
#endif
#endif
