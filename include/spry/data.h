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
/* Larger images are refused with an error naming them (a 16k x 16k photo;
 * a hostile header may claim 65535 x 65535). */
#define SP_MAX_IMAGE_PIXELS ((int64_t)1 << 28)

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
/* Whole file, decoded exactly (accurate IDCT): photos for prediction and the
 * face detector. */
int sp_image_load(const char *path, int c, sp_image *out);
void sp_image_free(sp_image *im);
/* Whole file into memory (for decoding); caller frees *buf. */
int sp_read_file(const char *path, uint8_t **buf, size_t *len);

/* ------------------------------------------------------------------ crops
 * A crop is the source rectangle [x0, x0 + w) x [y0, y0 + h) (pixel edges)
 * resampled (bilinear, black outside) to size x size. Around a face box it is
 * a square; for the whole image (data.box: image) it keeps the image's aspect
 * nowhere: the photo is stretched to the square input, as the seed does.
 * Pixel centres map as u' = (u - x0 + 0.5) * size / w - 0.5 (likewise y). */
typedef struct {
  double x0, y0, w, h;
} sp_crop_rect;

/* The square around a face box (x, y, w, h): side max(w, h) * (1 + 2 margin),
 * same centre. */
sp_crop_rect sp_crop_rect_for_box(const float box[4], float margin);
/* The whole w x h image. */
sp_crop_rect sp_crop_rect_whole(int w, int h);
/* Resamples rect r of src to size x size, planar (CHW) or interleaved. */
void sp_image_crop(const sp_image *src, sp_crop_rect r, int size, int planar, uint8_t *out);
/* Crop pixel coordinates -> source pixel coordinates, and back. */
void sp_crop_to_source(sp_crop_rect r, int size, float *x, float *y);
void sp_source_to_crop(sp_crop_rect r, int size, float *x, float *y);

/* -------------------------------------------------------------- face boxes */

/* Where the face box of a sample comes from (config key data.box); the same
 * in training, evaluation, prediction and morphing. */
typedef enum {
  SP_BOX_AUTO = 0, /* a boxes file's row, else the annotation's box (dlib XML, COCO bbox), else the whole image */
  SP_BOX_IMAGE,    /* the whole image, stretched to the square input (the seed's parts 1 and 2) */
  SP_BOX_DETECT,   /* the built-in face detector */
  SP_BOX_FILE,     /* a boxes file (data.boxes) */
  SP_BOX_POINTS,   /* the true points' box + margin: for training crops; any figure measured on it is optimistic */
} sp_box_mode;

/* Where one sample's box actually came from. */
typedef enum {
  SP_BOXSRC_NONE = 0,
  SP_BOXSRC_IMAGE,
  SP_BOXSRC_ANNOTATION,
  SP_BOXSRC_FILE,
  SP_BOXSRC_DETECTOR,
  SP_BOXSRC_POINTS, /* data.box: points, or a detection that matched no detected face (see sp_box_like_detector) */
  SP_BOXSRC_COUNT
} sp_box_source;

const char *sp_box_mode_name(sp_box_mode m);
int sp_box_mode_parse(const char *s, sp_box_mode *m);
/* "image", "annotation", "file", "detector", "points". */
const char *sp_box_source_name(sp_box_source s);

/* A boxes file: CSV with a header naming at least the columns image, x, y, w,
 * h (any order; other columns ignored), one face per row, source pixels.
 * `image` is a file name or a path ending the image's path. Rows with a bad
 * number, or a zero, negative or non-finite size, are skipped with the file
 * and line named. */
typedef struct sp_box_table sp_box_table;
int sp_box_table_read(const char *csv_path, sp_box_table **out);
void sp_box_table_free(sp_box_table *t);
int sp_box_table_rows(const sp_box_table *t);
/* Rows for one image path: the count, and up to `max` of their indices. */
int sp_box_table_find(const sp_box_table *t, const char *image_path, int *rows, int max);
/* Row r's box, and "FILE line N" for messages. */
const float *sp_box_table_box(const sp_box_table *t, int r);
const char *sp_box_table_where(const sp_box_table *t, int r, char *buf, size_t n);

/* Intersection over union of two (x, y, w, h) boxes. */
double sp_box_iou(const float a[4], const float b[4]);
/* The box of a face's labelled points (their extent). 0, or -1 without any. */
int sp_points_box(const float *pts, const uint8_t *vis, int k, float box[4]);
/* A detector-sized square from the points' extent (side max(w, h), centred,
 * moved down by 0.1 side): what `detector_boxes.csv` gives a face the
 * detector missed, and what data.box: detect uses then. */
void sp_box_like_detector(const float points_box[4], float box[4]);
/* A usable face box inside a w x h image: finite, positive size, overlapping
 * the image. 0 or -1 with the reason in the error. */
int sp_box_check(const float box[4], int w, int h);

/* The face detector: dlib's HOG frontal face detector, run on the image and on
 * the image upsampled x2 (faces under its 80 px window; a face found at both
 * levels keeps the first level's box), and while it finds nothing upsampled
 * x2 again, at most max_upsample times in all (see face_detector.cc). Boxes
 * are in source pixels, most confident first. One detector per thread. */
typedef struct {
  float box[4];
  float score;
} sp_face;
typedef struct sp_face_detector sp_face_detector;
sp_face_detector *sp_face_detector_new(void);
void sp_face_detector_free(sp_face_detector *d);
/* *faces is malloc'ed (NULL when none found); returns the count, or -1. */
int sp_face_detect(sp_face_detector *d, const sp_image *im, int max_upsample, sp_face **faces);
/* The upsampling the detection procedure allows (x2, twice). */
#define SP_DETECT_MAX_UPSAMPLE 2
/* Two detections at this IoU or more are one face. */
#define SP_DETECT_SAME_IOU 0.3
/* The detection matching a labelled face: the best IoU with its points' box,
 * if at least SP_DETECT_MIN_IOU; else -1. */
#define SP_DETECT_MIN_IOU 0.2
int sp_face_match(const sp_face *faces, int n, const float points_box[4]);

/* Image files as the cache reads them (and the predictor, so a new photo is
 * cut exactly as the training crops were). One reader per thread. */
typedef struct sp_image_reader sp_image_reader;
sp_image_reader *sp_image_reader_new(void);
void sp_image_reader_free(sp_image_reader *r);
/* Reads the file and its header: the image's size in *w, *h. */
int sp_image_reader_open(sp_image_reader *r, const char *path, int *w, int *h);
/* Rect rc of the open image resampled to size x size, c channels, HWC. JPEGs
 * are decoded only over the crop's footprint, DCT-scaled as far as keeps the
 * crop at least size pixels. Any number of crops per open file. */
int sp_image_reader_crop(sp_image_reader *r, sp_crop_rect rc, int size, int c, uint8_t *out_hwc);
/* The whole open image, c channels (for the face detector). */
int sp_image_reader_decode(sp_image_reader *r, int c, sp_image *out);

/* --------------------------------------------------------------- samples */

/* One face: an image, an optional face box, K points, optional visibility.
 * `relative` = 1 means points are fractions of the image size (IMM .asf) and
 * are turned into pixels once the image size is known. */
typedef struct {
  char *image; /* path of the image file */
  int has_box;
  float box[4]; /* x, y, w, h in pixels */
  int k;
  float *pts;   /* [k][2] */
  uint8_t *vis; /* [k] 1 = labelled/visible, 0 = not; NULL = all 1 */
  int relative;
  int identity; /* index into sp_dataset.identities, -1 = unknown */
} sp_kp_sample;

/* A list of samples, all with the same K. Skipped inputs are counted. */
typedef struct {
  sp_kp_sample *s;
  int n, cap;
  int k; /* 0 until the first sample is added */
  char **identities;
  int n_identities;
  int skipped;    /* annotations rejected while reading */
  int *id_slots_; /* internal: hash index of identities (a CSV row each: no linear search) */
  int id_cap_;
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
  int size;                  /* square working crop, pixels */
  int channels;              /* 1 or 3 */
  float margin;              /* context added on each side, fraction of the box side */
  int threads;               /* decode threads; 0 = cores */
  sp_box_mode box;           /* where each face's box comes from */
  const sp_box_table *boxes; /* SP_BOX_FILE (and AUTO, when set) */
} sp_crop_config;
sp_crop_config sp_crop_config_default(void);

/* Decoded crops (HWC uint8) and their points, in RAM or mmap-ed from a file. */
typedef struct sp_cache {
  int n, size, channels, k;
  uint8_t *pixels;  /* [n][size][size][channels] */
  float *points;    /* [n][k][2], crop pixel coordinates */
  uint8_t *vis;     /* [n][k] */
  int32_t *source;  /* [n] index of the dataset sample */
  float *crop;      /* [n][4] the crop rectangle in the source image: x0, y0, w, h (pixels) */
  float *box;       /* [n][4] the face box the crop was cut around (source pixels) */
  uint8_t *box_src; /* [n] sp_box_source */
  int skipped;      /* images that failed to decode */
  int from_file;    /* 1 when mapped from a cache file */
  void *map_;       /* internal */
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
/* Sample i's crop rectangle in the source image. */
sp_crop_rect sp_cache_crop_rect(const sp_cache *c, int i);
/* Crop pixel coordinates of sample i -> source image pixel coordinates. */
void sp_cache_crop_to_source(const sp_cache *c, int i, float *x, float *y);
/* How many samples' boxes came from each source, counts[SP_BOXSRC_COUNT]. */
void sp_cache_box_counts(const sp_cache *c, int *counts);

/* ----------------------------------------------------------- augmentation */

typedef struct {
  int out_size;               /* square output side (<= cache size is typical) */
  float scale_min, scale_max; /* zoom, default 3/4 .. 4/3 */
  float translate;            /* max shift, fraction of out_size */
  float rotate_deg;           /* max |rotation| */
  float flip_prob;            /* horizontal flip (needs a scheme) */
  int ra_n, ra_m;             /* RandAugment: n ops, magnitude m of 0..30; n=0 off */
} sp_augment_config;
sp_augment_config sp_augment_config_default(int out_size);
/* No randomness at all: centre crop resized to out_size. */
sp_augment_config sp_augment_config_none(int out_size);

/* RandAugment's 14 ops, in torchvision's order. */
typedef enum {
  SP_RA_IDENTITY = 0,
  SP_RA_SHEAR_X,
  SP_RA_SHEAR_Y,
  SP_RA_TRANSLATE_X,
  SP_RA_TRANSLATE_Y,
  SP_RA_ROTATE,
  SP_RA_BRIGHTNESS,
  SP_RA_COLOR,
  SP_RA_CONTRAST,
  SP_RA_SHARPNESS,
  SP_RA_POSTERIZE,
  SP_RA_SOLARIZE,
  SP_RA_AUTOCONTRAST,
  SP_RA_EQUALIZE,
  SP_RA_NUM_OPS
} sp_ra_op;
const char *sp_ra_op_name(sp_ra_op op);
/* The op's value at magnitude bin m (0..30) for an image of side `size`:
 * torchvision's table (shear 0..0.3, translate 0..150/331 of the side,
 * rotate 0..30 deg, enhance 0..0.9, posterize bits 8..4, solarize 255..0). */
float sp_ra_magnitude(sp_ra_op op, int m, int size);

/* Point flags in a batch. */
#define SP_PT_OUTSIDE 1u /* left the output crop (coordinates kept) */
#define SP_PT_UNLABELLED 2u

/* Augments one cached sample into planar (CHW) output + points + flags.
 * Randomness comes only from `key` (use sp_rng_key(seed, epoch, index)). */
void sp_augment_sample(const sp_cache *c, int i, const sp_augment_config *cfg, const sp_scheme *scheme, uint64_t key,
                       uint8_t *out_chw, float *out_pts, uint8_t *out_flags);
/* Applies exactly the listed ops (forced signs +1/-1) to an HWC image of size
 * s x s: used by tests to check each op moves points like pixels. */
void sp_augment_apply_ops(const uint8_t *src_hwc, int s, int c, const sp_ra_op *ops, const int *signs, int n_ops,
                          int magnitude, float *pts, int k, uint8_t *out_chw);

/* ----------------------------------------------------------------- loader */

typedef struct {
  int n; /* samples in this batch (== batch unless last, partial) */
  int c, h, w, k;
  uint8_t *pixels; /* [n][c][h][w] contiguous, planar */
  float *points;   /* [n][k][2] output pixel coordinates */
  uint8_t *flags;  /* [n][k] SP_PT_* */
  int32_t *index;  /* [n] cache index of each sample */
  int64_t epoch, step;
} sp_batch;

typedef struct {
  int batch;
  int workers;  /* 0 = number of cores */
  int prefetch; /* ring depth in batches; 0 = 2 * workers */
  uint64_t seed;
  int shuffle;     /* reshuffle every epoch */
  int drop_last;   /* drop the final partial batch */
  int rank, world; /* sharding: rank takes a disjoint slice of each epoch */
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
