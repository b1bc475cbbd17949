/* Image files as the cache reads them: one read of the bytes, the header,
 * then crops cut straight from the file. JPEGs are decoded only over a crop's
 * footprint (jpeg_crop.c), at the smallest DCT scale num/8 that keeps the crop
 * at least the working size: decoding is the dominant cost of preloading, and
 * both cut it several-fold. The predictor reads new photos through the same
 * code, so a model sees a new photo exactly as it saw its training crops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

struct sp_image_reader {
  sp_jpeg_dec *jd; /* NULL when it could not be made: JPEGs then fail with the reason */
  uint8_t *file;
  size_t cap, len;
  char *path;
  int jpeg, w, h;
};

sp_image_reader *sp_image_reader_new(void) {
  sp_image_reader *r = sp_xcalloc(1, sizeof *r);
  r->jd = sp_jpeg_dec_new();
  return r;
}

void sp_image_reader_free(sp_image_reader *r) {
  if (!r) return;
  sp_jpeg_dec_free(r->jd);
  free(r->file);
  free(r->path);
  free(r);
}

int sp_image_reader_open(sp_image_reader *r, const char *path, int *w, int *h) {
  free(r->path);
  r->path = sp_xstrdup(path);
  r->w = r->h = 0;
  if (sp_read_file_into(path, &r->file, &r->cap, &r->len) != 0) return -1;
  r->jpeg = sp_image_sniff(r->file, r->len) == SP_IMG_JPEG;
  if (r->jpeg && !r->jd) return sp_error_set("%s: no JPEG decoder (out of memory)", path);
  if (r->jpeg ? sp_jpeg_dec_header(r->jd, r->file, r->len, path, &r->w, &r->h) != 0
              : sp_image_probe_with(NULL, r->file, r->len, &r->w, &r->h) != 0) {
    if (!r->jpeg) sp_error_push("%s", path);
    return -1;
  }
  *w = r->w, *h = r->h;
  return 0;
}

int sp_image_reader_decode(sp_image_reader *r, int c, sp_image *out) {
  return sp_image_decode_exact(r->file, r->len, c, r->path, out);
}

/* The smallest DCT scale num/8 of 1/8, 2/8, 4/8, 8/8 at which the crop is
 * still at least the working size in both directions (so the warp only ever
 * downsamples). libjpeg-turbo also scales by 3/8, 5/8, 6/8, 7/8, but those
 * run plain-C IDCTs (and 10x10..14x14 ones for the chroma planes, which it
 * scales up in the IDCT instead of upsampling): measured on the IMM crops,
 * 6/8 and 7/8 cost more than the SIMD 8/8 decode, and 5/8 as much. */
static int pick_scale(double extent, int size) {
  int num = 1;
  while (num < 8 && extent * num / 8.0 < size) num *= 2;
  return num;
}

/* floor() of a coordinate, clamped into int range (crops of absurd but
 * finite boxes must not overflow the conversion). */
static int floor_clamped(double v) {
  if (!(v > -1e8)) return -100000000;
  if (v > 1e8) return 100000000;
  return (int)floor(v);
}

/* crop pixel -> source pixel, u = (u' + 0.5) * w / size - 0.5 + x0. */
static sp_affine crop_to_source(sp_crop_rect rc, int size) {
  double sx = rc.w / size, sy = rc.h / size;
  sp_affine a = {{sx, 0, 0.5 * sx - 0.5 + rc.x0, 0, sy, 0.5 * sy - 0.5 + rc.y0}};
  return a;
}

int sp_image_reader_crop(sp_image_reader *r, sp_crop_rect rc, int size, int c, uint8_t *out) {
  if (!(rc.w > 0 && rc.h > 0 && isfinite(rc.x0) && isfinite(rc.y0)))
    return sp_error_set("%s: degenerate crop", r->path);
  sp_affine inv = crop_to_source(rc, size);
  if (!r->jpeg) {
    sp_image im;
    if (sp_image_decode_with(NULL, r->file, r->len, c, 1, r->path, &im) != 0) return -1;
    sp_warp_affine_u8(im.px, im.w, im.h, c, out, size, size, 0, &inv, 0);
    sp_image_free(&im);
    return 0;
  }
  /* The decoder takes one region per header: read it again (cheap) so any
   * number of crops can come from one file. */
  int w, h;
  if (sp_jpeg_dec_header(r->jd, r->file, r->len, r->path, &w, &h) != 0) return -1;
  /* Decode only the crop's footprint, DCT-scaled by num/8. A scaled pixel
   * j covers source pixels [j, j+1) * 8/num, so its centre maps as
   * u_s = (u + 0.5) * num/8 - 0.5 (exactly; the rounded-up scaled size
   * only cuts the padding of the last block). */
  const int num = pick_scale(fmin(rc.w, rc.h), size);
  const double ks = num / 8.0;
  sp_affine to_scaled = {{ks, 0, 0.5 * ks - 0.5, 0, ks, 0.5 * ks - 0.5}};
  sp_affine crop_to_scaled = sp_affine_then(inv, to_scaled);
  /* The map is a pure scale + shift: its footprint is spanned by the first
   * and last crop pixel. Bilinear reads floor(u) and floor(u) + 1; one more
   * pixel each side absorbs the warp's fixed-point drift. */
  float ax = 0, ay = 0, bx = (float)(size - 1), by = (float)(size - 1);
  sp_affine_apply(&crop_to_scaled, &ax, &ay);
  sp_affine_apply(&crop_to_scaled, &bx, &by);
  int rx0 = floor_clamped(fmin(ax, bx)) - 1, rx1 = floor_clamped(fmax(ax, bx)) + 3;
  int ry0 = floor_clamped(fmin(ay, by)) - 1, ry1 = floor_clamped(fmax(ay, by)) + 3;
  sp_jpeg_region reg;
  if (sp_jpeg_dec_region(r->jd, c, num, rx0, ry0, rx1, ry1, &reg) != 0) return -1;
  sp_affine crop_to_reg = sp_affine_then(crop_to_scaled, sp_affine_translate(-reg.x0, -reg.y0));
  sp_warp_affine_u8(reg.px, reg.w, reg.h, c, out, size, size, 0, &crop_to_reg, 0);
  return 0;
}
