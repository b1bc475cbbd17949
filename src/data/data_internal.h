/* Internal helpers shared by the files of src/data (not public API). */
#ifndef SPRY_DATA_INTERNAL_H
#define SPRY_DATA_INTERNAL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "spry/data.h"

/* image_decode.c: one TurboJPEG handle per decoding thread. */
void *sp_jpeg_decoder_new(void);
void sp_jpeg_decoder_free(void *h);
int sp_image_probe_with(void *tj, const uint8_t *buf, size_t len, int *w, int *h);
int sp_image_decode_with(void *tj, const uint8_t *buf, size_t len, int c, int denom, const char *what, sp_image *out);
/* Whole image with the accurate IDCT (PIL's and dlib's): what the face
 * detector sees, so its boxes match theirs (sp_image_load decodes so too). */
int sp_image_decode_exact(const uint8_t *buf, size_t len, int c, const char *what, sp_image *out);
/* Reads a whole file into *buf (grown as needed, capacity *cap, reused
 * across calls by one thread); *len = its size. */
int sp_read_file_into(const char *path, uint8_t **buf, size_t *cap, size_t *len);

/* jpeg_crop.c: JPEG region decoding (libjpeg-turbo's classic API) at any
 * DCT scale num/8, one decoder per thread. Usage: sp_jpeg_dec_header, then
 * at most one sp_jpeg_dec_region; buf must stay valid in between. */
typedef struct sp_jpeg_dec sp_jpeg_dec;
typedef struct {
  const uint8_t *px; /* interleaved, w * c bytes per row; owned by the decoder, valid until its next call */
  int w, h, c;
  int x0, y0; /* position of px's first pixel in the scaled image */
  int sw, sh; /* size of the whole scaled image: ceil(size * num / 8) */
} sp_jpeg_region;
sp_jpeg_dec *sp_jpeg_dec_new(void);
void sp_jpeg_dec_free(sp_jpeg_dec *d);
int sp_jpeg_scaled_dim(int dim, int num);
/* Parses the header (size in *w, *h). A file without an end marker in its
 * last bytes is decoded to its end by the region call, so a cut fails. */
int sp_jpeg_dec_header(sp_jpeg_dec *d, const uint8_t *buf, size_t len, const char *what, int *w, int *h);
/* Decodes the rectangle [x0,x1) x [y0,y1) of the image scaled by num/8
 * (1..8; scaled pixel coordinates, clamped to the image, at least 1 pixel)
 * into c = 1 (gray) or 3 (RGB) channels. Every pixel of the rectangle equals
 * the whole image decoded at that scale; the region may extend further left
 * and right (iMCU alignment), where pixels may differ slightly. Scaled pixel
 * centres map to the source as u_scaled = (u + 0.5) * num / 8 - 0.5. */
int sp_jpeg_dec_region(sp_jpeg_dec *d, int c, int num, int x0, int y0, int x1, int y1, sp_jpeg_region *out);

/* warp.c: 2x3 affine map p' = A p + t, stored row-major {a, b, tx, c, d, ty}. */
typedef struct {
  double m[6];
} sp_affine;
sp_affine sp_affine_identity(void);
/* a then b (b applied after a): returns b * a. */
sp_affine sp_affine_then(sp_affine a, sp_affine b);
int sp_affine_invert(sp_affine a, sp_affine *inv);
void sp_affine_apply(const sp_affine *a, float *x, float *y);
sp_affine sp_affine_translate(double tx, double ty);
sp_affine sp_affine_scale(double sx, double sy);
sp_affine sp_affine_rotate_deg(double deg);
/* Resamples src (HWC, c channels) into a dst_w x dst_h image: dst pixel (x,y)
 * takes src at inv(x,y) (bilinear; outside = fill). Output is planar (CHW)
 * when planar is 1, else interleaved. */
void sp_warp_affine_u8(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, int planar,
                       const sp_affine *dst_to_src, uint8_t fill);
/* 0: the warp's inner spans run the scalar loop only (tests compare the
 * AVX2 paths with it: the same bytes). */
extern int sp_warp_simd;

/* color_ops.c: RandAugment's pixel ops on a planar image in place. */
void sp_color_op(sp_ra_op op, uint8_t *chw, int c, int hw, int w, float magnitude_value);
int sp_ra_is_signed(sp_ra_op op);
int sp_ra_is_geometric(sp_ra_op op);
/* The forward map of one geometric op on an s x s image (signed magnitude). */
sp_affine sp_ra_geometry(sp_ra_op op, float value, int s);

/* text.c: tiny parsing helpers. */
char *sp_path_join(const char *dir, const char *name);
char *sp_path_dirname(const char *path);
const char *sp_path_base(const char *path);
/* Replaces the extension (from the last '.') of path; returns a new string. */
char *sp_path_with_ext(const char *path, const char *ext);
int sp_file_exists(const char *path);
/* Finite and within a sane range for pixel coordinates. */
int sp_coord_ok(float v);

/* ann_common.c: a line-based annotation reader's start. sp_ann_open zeroes
 * *out (no identity) and opens path, or returns NULL with the error set.
 * sp_ann_alloc_points allocates out->pts (zeroed) for count points, or
 * refuses a count over SP_MAX_KEYPOINTS with -1 and an error (naming the
 * file's key for it, or "N points" when key is NULL). */
FILE *sp_ann_open(const char *path, sp_kp_sample *out);
int sp_ann_alloc_points(sp_kp_sample *out, long count, const char *path, const char *key);

/* json_mini.c: a small JSON tree (enough for COCO annotation files). */
typedef enum { SPJ_NULL, SPJ_BOOL, SPJ_NUM, SPJ_STR, SPJ_ARR, SPJ_OBJ } sp_djson_type;
typedef struct sp_json {
  sp_djson_type type;
  double num;
  char *str;             /* SPJ_STR value */
  struct sp_json *items; /* SPJ_ARR / SPJ_OBJ children */
  char **keys;           /* SPJ_OBJ keys */
  int n;
} sp_json;
int sp_djson_parse(const char *text, size_t len, sp_json *out, char *err, size_t errlen);
void sp_djson_free(sp_json *j);
const sp_json *sp_djson_get(const sp_json *obj, const char *key);

/* cache_build.c: online cores (default thread count). */
int sp_default_threads(void);

/* fingerprint of a dataset + crop settings (cache invalidation). */
uint64_t sp_cache_fingerprint(const sp_dataset *ds, const sp_crop_config *cfg);
/* cache_file.c: maps path when it is a complete cache of ds + cfg whose
 * every sample checks out (points finite and near the crop, indices in
 * range); 1 = absent, stale or damaged (rebuild), 0 = mapped, -1 = error. */
int sp_cache_try_map(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, sp_cache **out);

#endif
