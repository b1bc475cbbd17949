/* The synthetic action set: a textured shape on a textured background that
 * moves right, moves left, turns clockwise or turns counter-clockwise.
 *
 * Classes come in time-reversed pairs: a clip of class 1 is the class-0 clip
 * with the same content played backwards (likewise 3 and 2). Every frame of a
 * "left" clip is therefore also a frame of some "right" clip, and the average
 * over frames is identical, so a model that pools per-frame features (TSN)
 * can only guess the direction, while one that mixes time (TSM) can learn it.
 * Everything is a function of (seed, clip id), so sets are reproducible. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spry/rng.h"
#include "spry/video.h"

static const char *class_names[SP_SYNTH_CLASSES] = {"move_right", "move_left", "rotate_cw", "rotate_ccw"};

const char *sp_synth_class_name(int cls) { return cls >= 0 && cls < SP_SYNTH_CLASSES ? class_names[cls] : "?"; }

typedef struct {
  float base[3];
  float fx[3], fy[3], ph[3], amp[3]; /* three gratings, each tinting one channel most */
} texture;

typedef struct {
  texture bg, obj;
  int shape; /* 0 square, 1 triangle, 2 plus (none is rotation-symmetric at small angles) */
  float radius;
  float x0, y0;        /* centre at u = 0 */
  float vx;            /* pixels per frame (translation pair) */
  float theta0, omega; /* radians, radians per frame (rotation pair) */
} scene;

static void make_texture(sp_rng *r, texture *t, float lo, float hi) {
  for (int c = 0; c < 3; c++) {
    t->base[c] = sp_rng_range(r, lo, hi);
    float freq = sp_rng_range(r, 2.0f, 9.0f), ang = sp_rng_range(r, 0.0f, 6.2831853f);
    t->fx[c] = freq * cosf(ang);
    t->fy[c] = freq * sinf(ang);
    t->ph[c] = sp_rng_range(r, 0.0f, 6.2831853f);
    t->amp[c] = sp_rng_range(r, 20.0f, 50.0f);
  }
}

/* Texture value at (x, y) in units of the frame side. */
static void texel(const texture *t, float x, float y, float *rgb) {
  float g[3];
  for (int k = 0; k < 3; k++) g[k] = t->amp[k] * sinf(6.2831853f * (t->fx[k] * x + t->fy[k] * y) + t->ph[k]);
  for (int c = 0; c < 3; c++) rgb[c] = t->base[c] + g[c] + 0.4f * g[(c + 1) % 3];
}

static void make_scene(uint64_t seed, int64_t clip_id, int frames, int size, scene *s) {
  sp_rng r = sp_rng_make(sp_rng_key(seed, (uint64_t)clip_id, 0x5e7ce11ull));
  make_texture(&r, &s->bg, 50.0f, 120.0f);
  make_texture(&r, &s->obj, 150.0f, 215.0f);
  s->shape = (int)sp_rng_below(&r, 3);
  /* Large enough that a turn still shows at a quarter of the pixels
   * (Multigrid's H/2 at T/4 and 64-pixel clips trains on 32 pixels). */
  s->radius = size * sp_rng_range(&r, 0.2f, 0.28f);
  float travel = size * sp_rng_range(&r, 0.35f, 0.55f); /* total path of a moving shape */
  s->vx = frames > 1 ? travel / (frames - 1) : 0;
  float margin = s->radius + 1;
  s->x0 = sp_rng_range(&r, margin, size - margin - travel > margin ? size - margin - travel : margin);
  s->y0 = sp_rng_range(&r, margin, size - margin);
  s->theta0 = sp_rng_range(&r, 0.0f, 6.2831853f);
  /* Total turn 1.6..2.4 rad (92-138 degrees) whatever the length: 8 TSN
   * segments see steps of 12-20 degrees, under the square's 45-degree
   * ambiguity, and the orbit's arc is 1-1.4 radii (12-26 px at 64 px, 6-13 at
   * Multigrid's 32). The 2 segments of Multigrid's T/4 are 50-75 degrees
   * apart, past the square's (and near the triangle's 60-degree) ambiguity:
   * there the orbit alone tells the sense. With half this turn the turning
   * pair sat at chance for ~600 SGD steps before TSM learned it, and
   * Multigrid, which takes 3.6x fewer steps, never got there (bench/
   * README_video_train.md). */
  s->omega = frames > 1 ? sp_rng_range(&r, 1.6f, 2.4f) / (frames - 1) : 0;
}

/* Signed distance-like inside test in the shape's own frame (radius 1). */
static float inside(int shape, float x, float y) {
  switch (shape) {
    case 0: return 1.0f - fmaxf(fabsf(x), fabsf(y)) * 1.15f;
    case 1: { /* triangle pointing along +x */
      float a = -x * 0.5f - 0.5f, b = x * 0.5f - y * 0.866f - 0.5f, c = x * 0.5f + y * 0.866f - 0.5f;
      return -fmaxf(a, fmaxf(b, c)) * 2.0f;
    }
    default: /* a plus sign with one longer arm */
      return fmaxf(0.3f - fabsf(y), 0.0f) * (x > -0.7f && x < 1.0f) +
             fmaxf(0.3f - fabsf(x), 0.0f) * (y > -0.7f && y < 0.7f) - 0.001f;
  }
}

void sp_synth_render(uint64_t seed, int64_t clip_id, int cls, int t, int frames, int size, uint8_t *rgb) {
  scene s;
  make_scene(seed, clip_id, frames, size, &s);
  /* The reversed class plays the same scene from the other end. */
  int u = (cls % 2) ? frames - 1 - t : t;
  int rotating = cls >= 2;
  float th = rotating ? s.theta0 + s.omega * u : s.theta0; /* image y points down: +omega turns clockwise */
  /* A turning shape also orbits the middle of its path, so the sense of
   * rotation is a direction of motion too, visible at a few pixels. */
  float orbit = rotating ? 0.6f * s.radius : 0.0f;
  float cx = (rotating ? s.x0 + 0.5f * s.vx * (frames - 1) : s.x0 + s.vx * u) + orbit * cosf(th);
  float cy = s.y0 + orbit * sinf(th);
  float ct = cosf(th), st = sinf(th), inv_r = 1.0f / s.radius, inv_size = 1.0f / size;
  for (int y = 0; y < size; y++)
    for (int x = 0; x < size; x++) {
      float px = x + 0.5f - cx, py = y + 0.5f - cy;
      /* Into the shape's frame: rotate by -theta, scale to unit radius. */
      float ox = (ct * px + st * py) * inv_r, oy = (-st * px + ct * py) * inv_r;
      float bg[3], ob[3], a = 0;
      texel(&s.bg, x * inv_size, y * inv_size, bg);
      if (fabsf(ox) < 1.5f && fabsf(oy) < 1.5f) {
        float d = inside(s.shape, ox, oy) * s.radius; /* about pixels from the edge */
        a = d >= 0.5f ? 1.0f : d <= -0.5f ? 0.0f : d + 0.5f;
        if (a > 0) texel(&s.obj, ox * 0.5f, oy * 0.5f, ob);
      }
      for (int c = 0; c < 3; c++) {
        float v = a > 0 ? a * ob[c] + (1 - a) * bg[c] : bg[c];
        rgb[((size_t)y * size + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
      }
    }
}

static int write_clip(const char *path, uint64_t seed, int64_t id, int cls, int frames, int size) {
  sp_video_writer_config cfg = sp_video_writer_config_default(size, size);
  cfg.gop = 16;
  cfg.b_frames = 2;
  sp_video_writer *w = sp_video_writer_open(path, &cfg);
  if (!w) return -1;
  uint8_t *rgb = sp_xmalloc((size_t)size * size * 3);
  int rc = 0;
  for (int t = 0; t < frames && rc == 0; t++) {
    sp_synth_render(seed, id, cls, t, frames, size, rgb);
    rc = sp_video_writer_add(w, rgb);
  }
  free(rgb);
  if (sp_video_writer_close(w) != 0) rc = -1;
  return rc;
}

int sp_synth_actions(const char *out_dir, int count, int frames, int size, uint64_t seed) {
  if (count <= 0 || frames < 2 || size < 16 || size % 2)
    return sp_error_set("synth actions: need count > 0, frames >= 2 and an even size >= 16 (got %d, %d, %d)", count,
                        frames, size);
  if (sp_make_dirs(out_dir) != 0) return -1;
  size_t plen = strlen(out_dir) + 64;
  char *p = sp_xmalloc(plen);
  for (int c = 0; c < SP_SYNTH_CLASSES; c++) {
    snprintf(p, plen, "%s/%s", out_dir, class_names[c]);
    if (sp_make_dirs(p) != 0) {
      free(p);
      return -1;
    }
  }
  int failed = 0;
  char first_err[512] = "";
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < count; i++) {
    char path[4096];
    int cls = i % SP_SYNTH_CLASSES;
    snprintf(path, sizeof path, "%s/%s/clip_%05d.mp4", out_dir, class_names[cls], i);
    if (write_clip(path, seed, i, cls, frames, size) != 0) {
#pragma omp critical
      {
        if (!failed) snprintf(first_err, sizeof first_err, "%s", sp_last_error());
        failed = 1;
      }
    }
  }
  if (failed) {
    free(p);
    return sp_error_set("%s", first_err);
  }
  snprintf(p, plen, "%s/labels.txt", out_dir);
  FILE *f = fopen(p, "w");
  if (!f) {
    sp_error_set("%s: cannot create (%s)", p, strerror(errno));
    free(p);
    return -1;
  }
  for (int c = 0; c < SP_SYNTH_CLASSES; c++) fprintf(f, "%s\n", class_names[c]);
  int ok = fclose(f) == 0;
  snprintf(p, plen, "%s/list.txt", out_dir);
  f = ok ? fopen(p, "w") : NULL;
  if (f) {
    for (int i = 0; i < count; i++)
      fprintf(f, "%s/clip_%05d.mp4 %d\n", class_names[i % SP_SYNTH_CLASSES], i, i % SP_SYNTH_CLASSES);
    ok = fclose(f) == 0;
  } else {
    ok = 0;
  }
  if (!ok) sp_error_set("%s: cannot write (%s)", p, strerror(errno));
  free(p);
  return ok ? 0 : -1;
}
