/* Preloading: decode every image once (in parallel), crop a square around the
 * face, resize to the working size and keep uint8 crops + their points in RAM.
 * JPEGs are decoded only over the crop's footprint (jpeg_crop.c), at the
 * smallest DCT scale num/8 that keeps the crop at least the working size:
 * decoding is the dominant cost, and both cut it several-fold. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/data_internal.h"

sp_crop_config sp_crop_config_default(void) {
  sp_crop_config c = {224, 3, 0.25f, 0};
  return c;
}

/* Square crop (x0, y0, side) in source pixels around the box or the points. */
static void crop_square(const sp_kp_sample *s, const float *pts, float margin, double *x0, double *y0,
                        double *side) {
  double bx, by, bw, bh;
  if (s->has_box) {
    bx = s->box[0]; by = s->box[1]; bw = s->box[2]; bh = s->box[3];
  } else {
    double lx = 1e30, ly = 1e30, hx = -1e30, hy = -1e30;
    for (int i = 0; i < s->k; i++) {
      if (s->vis && !s->vis[i]) continue;
      lx = fmin(lx, pts[2 * i]); hx = fmax(hx, pts[2 * i]);
      ly = fmin(ly, pts[2 * i + 1]); hy = fmax(hy, pts[2 * i + 1]);
    }
    bx = lx; by = ly; bw = fmax(hx - lx, 1); bh = fmax(hy - ly, 1);
  }
  double cx = bx + bw * 0.5, cy = by + bh * 0.5;
  *side = fmax(bw, bh) * (1.0 + 2.0 * margin);
  if (*side < 8) *side = 8;
  *x0 = cx - *side * 0.5;
  *y0 = cy - *side * 0.5;
}

typedef struct {
  const sp_dataset *ds;
  const sp_crop_config *cfg;
  sp_cache *c;
  uint8_t *ok;
  atomic_int next;
} build_job;

/* Per-thread decoding state: the JPEG decoder and the file buffer are
 * reused from image to image. */
typedef struct {
  sp_jpeg_dec *jd;
  uint8_t *file;
  size_t file_cap;
} build_ctx;

/* The smallest DCT scale num/8 of 1/8, 2/8, 4/8, 8/8 at which the crop is
 * still at least the working size (so the warp only ever downsamples).
 * libjpeg-turbo also scales by 3/8, 5/8, 6/8, 7/8, but those run plain-C
 * IDCTs (and 10x10..14x14 ones for the chroma planes, which it scales up
 * in the IDCT instead of upsampling): measured on the IMM crops, 6/8 and
 * 7/8 cost more than the SIMD 8/8 decode, and 5/8 as much. */
static int pick_scale(double side, int size) {
  int num = 1;
  while (num < 8 && side * num / 8.0 < size) num *= 2;
  return num;
}

/* floor() of a coordinate, clamped into int range (crops of absurd but
 * finite points must not overflow the conversion). */
static int floor_clamped(double v) {
  if (!(v > -1e8)) return -100000000;
  if (v > 1e8) return 100000000;
  return (int)floor(v);
}

static int build_one(build_job *job, build_ctx *bc, int i) {
  const sp_kp_sample *s = &job->ds->s[i];
  const int S = job->cfg->size, ch = job->cfg->channels, k = job->ds->k;
  size_t len;
  if (sp_read_file_into(s->image, &bc->file, &bc->file_cap, &len) != 0) return -1;
  const uint8_t *buf = bc->file;
  const int jpeg = sp_image_sniff(buf, len) == SP_IMG_JPEG;
  /* No decoder (out of memory at thread start): JPEGs are skipped with the
   * reason from sp_jpeg_dec_new. */
  if (jpeg && !bc->jd) return sp_error_set("%s: no JPEG decoder (out of memory)", s->image);
  int w, h;
  if (jpeg ? sp_jpeg_dec_header(bc->jd, buf, len, s->image, &w, &h) != 0
           : sp_image_probe_with(NULL, buf, len, &w, &h) != 0) {
    if (!jpeg) sp_error_push("%s", s->image);
    return -1;
  }
  float pts[2 * SP_MAX_KEYPOINTS];
  for (int j = 0; j < k; j++) {
    pts[2 * j] = s->relative ? s->pts[2 * j] * (float)w : s->pts[2 * j];
    pts[2 * j + 1] = s->relative ? s->pts[2 * j + 1] * (float)h : s->pts[2 * j + 1];
  }
  double x0, y0, side;
  crop_square(s, pts, job->cfg->margin, &x0, &y0, &side);
  /* Source -> crop (forward, for the points). Pixel centres:
   * u' = (u + 0.5) * r - 0.5 - (x0 * r). */
  double r = S / side;
  sp_affine fwd = {{r, 0, (0.5 - x0) * r - 0.5, 0, r, (0.5 - y0) * r - 0.5}};
  sp_affine inv;
  if (sp_affine_invert(fwd, &inv) != 0) return sp_error_set("%s: degenerate crop", s->image);
  uint8_t *dst = job->c->pixels + (size_t)i * S * S * ch;
  if (jpeg) {
    /* Decode only the crop's footprint, DCT-scaled by num/8. A scaled pixel
     * j covers source pixels [j, j+1) * 8/num, so its centre maps as
     * u_s = (u + 0.5) * num/8 - 0.5 (exactly; the rounded-up scaled size
     * only cuts the padding of the last block). */
    const int num = pick_scale(side, S);
    const double ks = num / 8.0;
    sp_affine to_scaled = {{ks, 0, 0.5 * ks - 0.5, 0, ks, 0.5 * ks - 0.5}};
    sp_affine crop_to_scaled = sp_affine_then(inv, to_scaled);
    /* The map is a pure scale + shift: its footprint is spanned by the
     * first and last crop pixel. Bilinear reads floor(u) and floor(u) + 1;
     * one more pixel each side absorbs the warp's fixed-point drift. */
    float ax = 0, ay = 0, bx = (float)(S - 1), by = (float)(S - 1);
    sp_affine_apply(&crop_to_scaled, &ax, &ay);
    sp_affine_apply(&crop_to_scaled, &bx, &by);
    int rx0 = floor_clamped(fmin(ax, bx)) - 1, rx1 = floor_clamped(fmax(ax, bx)) + 3;
    int ry0 = floor_clamped(fmin(ay, by)) - 1, ry1 = floor_clamped(fmax(ay, by)) + 3;
    sp_jpeg_region reg;
    if (sp_jpeg_dec_region(bc->jd, ch, num, rx0, ry0, rx1, ry1, &reg) != 0) return -1;
    sp_affine crop_to_reg = sp_affine_then(crop_to_scaled, sp_affine_translate(-reg.x0, -reg.y0));
    sp_warp_affine_u8(reg.px, reg.w, reg.h, ch, dst, S, S, 0, &crop_to_reg, 0);
  } else {
    sp_image im;
    if (sp_image_decode_with(NULL, buf, len, ch, 1, s->image, &im) != 0) return -1;
    sp_warp_affine_u8(im.px, im.w, im.h, ch, dst, S, S, 0, &inv, 0);
    sp_image_free(&im);
  }
  float *out = job->c->points + (size_t)i * k * 2;
  for (int j = 0; j < k; j++) {
    out[2 * j] = pts[2 * j];
    out[2 * j + 1] = pts[2 * j + 1];
    sp_affine_apply(&fwd, &out[2 * j], &out[2 * j + 1]);
  }
  for (int j = 0; j < k; j++) job->c->vis[(size_t)i * k + j] = s->vis ? s->vis[j] : 1;
  job->c->source[i] = i;
  float *crop = job->c->crop + (size_t)i * 3;
  crop[0] = (float)x0, crop[1] = (float)y0, crop[2] = (float)side;
  return 0;
}

static void *build_worker(void *arg) {
  build_job *job = arg;
  build_ctx bc = {sp_jpeg_dec_new(), NULL, 0};
  for (;;) {
    int i = atomic_fetch_add(&job->next, 1);
    if (i >= job->ds->n) break;
    if (build_one(job, &bc, i) == 0)
      job->ok[i] = 1;
    else
      sp_data_skip(job->ds->s[i].image, "%s", sp_last_error());
  }
  sp_jpeg_dec_free(bc.jd);
  free(bc.file);
  return NULL;
}


int sp_default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

sp_cache *sp_cache_build(const sp_dataset *ds, const sp_crop_config *cfg) {
  if (cfg->size < 8 || cfg->size > 4096 || (cfg->channels != 1 && cfg->channels != 3)) {
    sp_error_set("crop settings: size %d (8..4096) and channels %d (1 or 3)", cfg->size, cfg->channels);
    return NULL;
  }
  if (ds->n <= 0 || ds->k <= 0) {
    sp_error_set("dataset is empty");
    return NULL;
  }
  double t0 = sp_now();
  const size_t S = (size_t)cfg->size, img = S * S * (size_t)cfg->channels;
  sp_cache *c = sp_xcalloc(1, sizeof *c);
  c->size = cfg->size;
  c->channels = cfg->channels;
  c->k = ds->k;
  c->pixels = sp_aligned_alloc(img * (size_t)ds->n);
  c->points = sp_xmalloc(sizeof(float) * 2 * (size_t)ds->k * (size_t)ds->n);
  c->vis = sp_xmalloc((size_t)ds->k * (size_t)ds->n);
  c->source = sp_xmalloc(sizeof(int32_t) * (size_t)ds->n);
  c->crop = sp_xmalloc(sizeof(float) * 3 * (size_t)ds->n);
  build_job job = {ds, cfg, c, sp_xcalloc((size_t)ds->n, 1), 0};
  int nt = cfg->threads > 0 ? cfg->threads : sp_default_threads();
  if (nt > ds->n) nt = ds->n;
  pthread_t *th = sp_xmalloc(sizeof(pthread_t) * (size_t)nt);
  int started = 0;
  for (int t = 1; t < nt; t++)
    if (pthread_create(&th[t], NULL, build_worker, &job) == 0) started = t; else break;
  build_worker(&job); /* the calling thread works too */
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  free(th);
  /* Compact: pixels, points, visibility and source move together, so a
   * skipped image can never shift one sample's points onto another image. */
  int n = 0;
  for (int i = 0; i < ds->n; i++) {
    if (!job.ok[i]) continue;
    if (n != i) {
      memmove(c->pixels + (size_t)n * img, c->pixels + (size_t)i * img, img);
      memmove(c->points + (size_t)n * 2 * c->k, c->points + (size_t)i * 2 * c->k, sizeof(float) * 2 * (size_t)c->k);
      memmove(c->vis + (size_t)n * c->k, c->vis + (size_t)i * c->k, (size_t)c->k);
      c->source[n] = c->source[i];
      memmove(c->crop + (size_t)n * 3, c->crop + (size_t)i * 3, sizeof(float) * 3);
    }
    n++;
  }
  free(job.ok);
  c->n = n;
  c->skipped = ds->n - n;
  fprintf(stderr, "spry data: cached %d of %d samples at %dx%d (%d images skipped, %d annotations skipped) in %.2f s\n",
          n, ds->n, cfg->size, cfg->size, c->skipped, ds->skipped, sp_now() - t0);
  if (n == 0) {
    sp_error_set("no image could be decoded (%d skipped)", ds->n);
    sp_cache_free(c);
    return NULL;
  }
  return c;
}

void sp_cache_free(sp_cache *c) {
  if (!c) return;
  if (c->from_file) {
    munmap(c->map_, c->map_len_);
  } else {
    sp_aligned_free(c->pixels);
    free(c->points);
    free(c->vis);
    free(c->source);
    free(c->crop);
  }
  free(c);
}

double sp_cache_crop_side(const sp_cache *c, int i) { return c->crop[(size_t)i * 3 + 2]; }

void sp_cache_crop_to_source(const sp_cache *c, int i, float *x, float *y) {
  /* Inverse of the build's source -> crop map u' = (u - x0 + 0.5) * S / side - 0.5. */
  const float *crop = c->crop + (size_t)i * 3;
  double r = crop[2] / c->size;
  *x = (float)((*x + 0.5) * r - 0.5 + crop[0]);
  *y = (float)((*y + 0.5) * r - 0.5 + crop[1]);
}
