/* Preloading: decode every image once (in parallel), crop a square around the
 * face, resize to the working size and keep uint8 crops + their points in RAM.
 * JPEGs are decoded at 1/2, 1/4 or 1/8 scale in the DCT domain when the crop
 * is still at least the working size at that scale: decoding is the dominant
 * cost, and the reduced decode is 2-5x cheaper. */
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

static int build_one(build_job *job, void *tj, int i) {
  const sp_kp_sample *s = &job->ds->s[i];
  const int S = job->cfg->size, ch = job->cfg->channels, k = job->ds->k;
  uint8_t *buf;
  size_t len;
  if (sp_read_file(s->image, &buf, &len) != 0) return -1;
  int w, h;
  if (sp_image_probe_with(tj, buf, len, &w, &h) != 0) {
    sp_error_push("%s", s->image);
    free(buf);
    return -1;
  }
  float pts[2 * SP_MAX_KEYPOINTS];
  for (int j = 0; j < k; j++) {
    pts[2 * j] = s->relative ? s->pts[2 * j] * (float)w : s->pts[2 * j];
    pts[2 * j + 1] = s->relative ? s->pts[2 * j + 1] * (float)h : s->pts[2 * j + 1];
  }
  double x0, y0, side;
  crop_square(s, pts, job->cfg->margin, &x0, &y0, &side);
  int denom = 1;
  while (denom < 8 && side / (denom * 2) >= S) denom *= 2;
  sp_image im;
  int rc = sp_image_decode_with(tj, buf, len, ch, denom, s->image, &im);
  free(buf);
  if (rc != 0) return -1;
  /* Maps: source -> crop (forward, for the points) and crop -> decoded image
   * at 1/denom scale (for the warp). Pixel centres: u' = (u + 0.5) * r - 0.5. */
  double r = S / side;
  sp_affine fwd = {{r, 0, (0.5 - x0) * r - 0.5, 0, r, (0.5 - y0) * r - 0.5}};
  double dsx = (double)im.w / w, dsy = (double)im.h / h; /* exact scale of the reduced decode */
  sp_affine to_scaled = {{dsx, 0, 0.5 * dsx - 0.5, 0, dsy, 0.5 * dsy - 0.5}};
  sp_affine inv;
  if (sp_affine_invert(fwd, &inv) != 0) { sp_image_free(&im); return -1; }
  sp_affine crop_to_src = sp_affine_then(inv, to_scaled);
  sp_warp_affine_u8(im.px, im.w, im.h, ch, job->c->pixels + (size_t)i * S * S * ch, S, S, 0, &crop_to_src, 0);
  sp_image_free(&im);
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
  void *tj = sp_jpeg_decoder_new();
  for (;;) {
    int i = atomic_fetch_add(&job->next, 1);
    if (i >= job->ds->n) break;
    if (build_one(job, tj, i) == 0) {
      job->ok[i] = 1;
    } else {
      sp_data_skip(job->ds->s[i].image, "%s", sp_last_error());
      /* TurboJPEG 2.x leaves a handle unusable after some header errors (the
       * next good file then fails too): start from a fresh one. */
      sp_jpeg_decoder_free(tj);
      tj = sp_jpeg_decoder_new();
    }
  }
  sp_jpeg_decoder_free(tj);
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
