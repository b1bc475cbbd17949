/* Preloading: decode every image once (in parallel), cut the crop around the
 * face's box (from data.box: the whole image, the annotation, a boxes file,
 * the face detector or the points), resize it to the working size and keep
 * uint8 crops + their points in RAM. Files are read through sp_image_reader,
 * which decodes JPEGs only over the crop's footprint, DCT-scaled. */
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
  sp_crop_config c = {224, 3, 0.25f, 0, SP_BOX_AUTO, NULL};
  return c;
}

typedef struct {
  const sp_dataset *ds;
  const sp_crop_config *cfg;
  sp_cache *c;
  uint8_t *ok;
  atomic_int next;
  atomic_int no_row; /* images skipped for want of a row in the boxes file */
  pthread_t main;
} build_job;

/* Per-thread state: the image reader (decoder and file buffer reused from
 * image to image) and, for data.box: detect, a face detector. */
typedef struct {
  sp_image_reader *rd;
  sp_face_detector *det;
} build_ctx;

/* The labelled face in an image the detector searched: the detection that
 * best overlaps its points, else a detector-like square from the points (the
 * procedure that made youtube_faces_68/detector_boxes.csv). */
static int detect_box(build_ctx *bc, const sp_kp_sample *s, const float pbox[4], float box[4], uint8_t *src) {
  if (!bc->det && !(bc->det = sp_face_detector_new())) return -1;
  sp_image im;
  if (sp_image_reader_decode(bc->rd, 3, &im) != 0) return -1;
  sp_face *faces;
  int n = sp_face_detect(bc->det, &im, SP_DETECT_MAX_UPSAMPLE, &faces);
  sp_image_free(&im);
  if (n < 0) return sp_error_push("%s", s->image);
  int m = sp_face_match(faces, n, pbox);
  if (m >= 0)
    memcpy(box, faces[m].box, sizeof(float) * 4), *src = SP_BOXSRC_DETECTOR;
  else
    sp_box_like_detector(pbox, box), *src = SP_BOXSRC_POINTS;
  free(faces);
  return 0;
}

/* The boxes file's row for this face: its only row, or the row that best
 * overlaps the points when the image has several faces. */
static int file_box(const sp_box_table *t, const sp_kp_sample *s, const float pbox[4], float box[4], int *row) {
  int rows[64], n = sp_box_table_find(t, s->image, rows, 64);
  if (n <= 0) return 1;
  int best = n == 1 ? rows[0] : -1;
  double best_iou = -1;
  for (int i = 0; n > 1 && i < n && i < 64; i++) {
    double iou = sp_box_iou(sp_box_table_box(t, rows[i]), pbox);
    if (iou >= SP_DETECT_MIN_IOU && iou > best_iou) best_iou = iou, best = rows[i];
  }
  if (best < 0) return sp_error_set("%d rows of the boxes file name this image, none overlaps the face's points", n);
  memcpy(box, sp_box_table_box(t, best), sizeof(float) * 4);
  *row = best;
  return 0;
}

/* Where sample i's face box comes from (cfg->box), and the crop around it. */
static int resolve_box(build_job *job, build_ctx *bc, const sp_kp_sample *s, const float *pts, int w, int h,
                       float box[4], uint8_t *src, sp_crop_rect *rect) {
  const sp_crop_config *cfg = job->cfg;
  float pbox[4] = {0, 0, (float)w, (float)h};
  const int have_points = sp_points_box(pts, s->vis, s->k, pbox) == 0;
  int row = -1, rc = 1;
  sp_box_mode mode = cfg->box;
  if ((mode == SP_BOX_FILE || mode == SP_BOX_AUTO) && cfg->boxes) {
    rc = file_box(cfg->boxes, s, pbox, box, &row);
    if (rc < 0) return -1;
    if (rc == 0) *src = SP_BOXSRC_FILE;
  }
  if (rc == 0) {
  } else if (mode == SP_BOX_FILE) {
    atomic_fetch_add(&job->no_row, 1);
    return sp_error_set("no row for this image in the boxes file%s", cfg->boxes ? "" : " (data.boxes is not set)");
  } else if (mode == SP_BOX_AUTO && s->has_box) {
    memcpy(box, s->box, sizeof(float) * 4), *src = SP_BOXSRC_ANNOTATION;
  } else if (mode == SP_BOX_AUTO || mode == SP_BOX_IMAGE) {
    box[0] = 0, box[1] = 0, box[2] = (float)w, box[3] = (float)h, *src = SP_BOXSRC_IMAGE;
    *rect = sp_crop_rect_whole(w, h);
    return 0;
  } else if (mode == SP_BOX_POINTS) {
    if (!have_points) return sp_error_set("no labelled point to take a box from");
    memcpy(box, pbox, sizeof(float) * 4), *src = SP_BOXSRC_POINTS;
  } else {
    if (!have_points) return sp_error_set("no labelled point to match a detection to");
    if (detect_box(bc, s, pbox, box, src) != 0) return -1;
  }
  if (sp_box_check(box, w, h) != 0) {
    char where[1200];
    if (row >= 0) return sp_error_push("%s", sp_box_table_where(cfg->boxes, row, where, sizeof where));
    return sp_error_push("%s box", sp_box_source_name((sp_box_source)*src));
  }
  *rect = sp_crop_rect_for_box(box, cfg->margin);
  return 0;
}

static int build_one(build_job *job, build_ctx *bc, int i) {
  const sp_kp_sample *s = &job->ds->s[i];
  const int S = job->cfg->size, ch = job->cfg->channels, k = job->ds->k;
  int w, h;
  if (!bc->rd) return sp_error_set("%s: no image reader (out of memory)", s->image);
  if (sp_image_reader_open(bc->rd, s->image, &w, &h) != 0) return -1;
  float pts[2 * SP_MAX_KEYPOINTS];
  for (int j = 0; j < k; j++) {
    pts[2 * j] = s->relative ? s->pts[2 * j] * (float)w : s->pts[2 * j];
    pts[2 * j + 1] = s->relative ? s->pts[2 * j + 1] * (float)h : s->pts[2 * j + 1];
  }
  float box[4];
  uint8_t src = SP_BOXSRC_NONE;
  sp_crop_rect rect;
  if (resolve_box(job, bc, s, pts, w, h, box, &src, &rect) != 0) return -1;
  uint8_t *dst = job->c->pixels + (size_t)i * S * S * ch;
  if (sp_image_reader_crop(bc->rd, rect, S, ch, dst) != 0) return -1;
  float *out = job->c->points + (size_t)i * k * 2;
  for (int j = 0; j < k; j++) {
    out[2 * j] = pts[2 * j], out[2 * j + 1] = pts[2 * j + 1];
    sp_source_to_crop(rect, S, &out[2 * j], &out[2 * j + 1]);
  }
  for (int j = 0; j < k; j++) job->c->vis[(size_t)i * k + j] = s->vis ? s->vis[j] : 1;
  job->c->source[i] = i;
  float *crop = job->c->crop + (size_t)i * 4;
  crop[0] = (float)rect.x0, crop[1] = (float)rect.y0, crop[2] = (float)rect.w, crop[3] = (float)rect.h;
  memcpy(job->c->box + (size_t)i * 4, box, sizeof box);
  job->c->box_src[i] = src;
  return 0;
}

/* The face detector takes tens of ms an image: a detecting build shows its
 * progress (from the calling thread only, on a terminal). */
static void progress(build_job *job, double *last) {
  if (job->cfg->box != SP_BOX_DETECT || !isatty(2)) return;
  double now = sp_now();
  if (now - *last < 0.5) return;
  *last = now;
  int done = atomic_load(&job->next);
  fprintf(stderr, "\rspry data: finding faces %d/%d ", done < job->ds->n ? done : job->ds->n, job->ds->n);
}

static void *build_worker(void *arg) {
  build_job *job = arg;
  const int main_thread = job->main == pthread_self();
  double last = sp_now();
  build_ctx bc = {sp_image_reader_new(), NULL};
  for (;;) {
    int i = atomic_fetch_add(&job->next, 1);
    if (i >= job->ds->n) break;
    if (main_thread) progress(job, &last);
    if (build_one(job, &bc, i) == 0)
      job->ok[i] = 1;
    else
      sp_data_skip(job->ds->s[i].image, "%s", sp_last_error());
  }
  sp_image_reader_free(bc.rd);
  sp_face_detector_free(bc.det);
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
  c->crop = sp_xmalloc(sizeof(float) * 4 * (size_t)ds->n);
  c->box = sp_xmalloc(sizeof(float) * 4 * (size_t)ds->n);
  c->box_src = sp_xcalloc((size_t)ds->n, 1);
  build_job job = {ds, cfg, c, sp_xcalloc((size_t)ds->n, 1), 0, 0, pthread_self()};
  int nt = cfg->threads > 0 ? cfg->threads : sp_default_threads();
  if (nt > ds->n) nt = ds->n;
  pthread_t *th = sp_xmalloc(sizeof(pthread_t) * (size_t)nt);
  int started = 0;
  for (int t = 1; t < nt; t++)
    if (pthread_create(&th[t], NULL, build_worker, &job) == 0)
      started = t;
    else
      break;
  build_worker(&job); /* the calling thread works too */
  for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
  free(th);
  if (cfg->box == SP_BOX_DETECT && isatty(2)) fprintf(stderr, "\r");
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
      memmove(c->crop + (size_t)n * 4, c->crop + (size_t)i * 4, sizeof(float) * 4);
      memmove(c->box + (size_t)n * 4, c->box + (size_t)i * 4, sizeof(float) * 4);
      c->box_src[n] = c->box_src[i];
    }
    n++;
  }
  free(job.ok);
  c->n = n;
  c->skipped = ds->n - n;
  int counts[SP_BOXSRC_COUNT];
  sp_cache_box_counts(c, counts);
  char boxes[256] = "";
  for (int b = 1, o = 0; b < SP_BOXSRC_COUNT; b++)
    if (counts[b] && o < (int)sizeof boxes)
      o += snprintf(boxes + o, sizeof boxes - (size_t)o, "%s%s %d", o ? ", " : "", sp_box_source_name((sp_box_source)b),
                    counts[b]);
  fprintf(
      stderr,
      "spry data: cached %d of %d samples at %dx%d (boxes: %s; %d images skipped, %d annotations skipped) in %.2f s\n",
      n, ds->n, cfg->size, cfg->size, n ? boxes : "none", c->skipped, ds->skipped, sp_now() - t0);
  if (n == 0) {
    /* Say why: images that decode but have no box row are not "undecodable". */
    const int no_row = atomic_load(&job.no_row);
    if (no_row == ds->n)
      sp_error_set("none of the %d images has a row in the boxes file (data.boxes)", ds->n);
    else if (no_row > 0)
      sp_error_set("no image could be used: %d have no row in the boxes file, %d could not be decoded or cropped",
                   no_row, ds->n - no_row);
    else
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
    free(c->box);
    free(c->box_src);
  }
  free(c);
}

sp_crop_rect sp_cache_crop_rect(const sp_cache *c, int i) {
  const float *r = c->crop + (size_t)i * 4;
  sp_crop_rect rc = {r[0], r[1], r[2], r[3]};
  return rc;
}

void sp_cache_crop_to_source(const sp_cache *c, int i, float *x, float *y) {
  sp_crop_to_source(sp_cache_crop_rect(c, i), c->size, x, y);
}

void sp_cache_box_counts(const sp_cache *c, int *counts) {
  memset(counts, 0, sizeof(int) * SP_BOXSRC_COUNT);
  for (int i = 0; i < c->n; i++) counts[c->box_src[i] < SP_BOXSRC_COUNT ? c->box_src[i] : 0]++;
}
