/* Everything around the synthetic face: cluttered backgrounds (so a network
 * cannot find the face by "the only thing in the picture") and the camera's
 * faults (blur, sensor noise, low resolution) applied to the finished image. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/synth_faces_internal.h"

#define PI_F 3.14159265358979f

static void random_rgb(sp_rng *r, double *c) {
  for (int i = 0; i < 3; i++) c[i] = sp_rng_uniform(r);
}

/* A striped or checked tile pattern in two random colours. */
static cairo_pattern_t *texture(sp_rng *r) {
  int cell = 2 + (int)sp_rng_below(r, 10), kind = (int)sp_rng_below(r, 2);
  cairo_surface_t *t = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 2 * cell, 2 * cell);
  cairo_t *c = cairo_create(t);
  double a[3], b[3];
  random_rgb(r, a);
  random_rgb(r, b);
  cairo_set_source_rgb(c, a[0], a[1], a[2]);
  cairo_paint(c);
  cairo_set_source_rgb(c, b[0], b[1], b[2]);
  if (kind == 0) {
    cairo_rectangle(c, 0, 0, cell, cell);
    cairo_rectangle(c, cell, cell, cell, cell);
  } else {
    cairo_rectangle(c, 0, 0, 2 * cell, cell);
  }
  cairo_fill(c);
  cairo_destroy(c);
  cairo_pattern_t *p = cairo_pattern_create_for_surface(t);
  cairo_surface_destroy(t);
  cairo_pattern_set_extend(p, CAIRO_EXTEND_REPEAT);
  cairo_matrix_t m;
  cairo_matrix_init_rotate(&m, sp_rng_range(r, 0, PI_F));
  cairo_pattern_set_matrix(p, &m);
  return p;
}

void syn_draw_background(cairo_t *cr, int w, int h, int clutter, sp_rng *r) {
  double a[3], b[3];
  random_rgb(r, a);
  random_rgb(r, b);
  float ang = sp_rng_range(r, 0, 2 * PI_F);
  cairo_pattern_t *g = cairo_pattern_create_linear(w / 2.0 - cosf(ang) * w, h / 2.0 - sinf(ang) * h,
                                                   w / 2.0 + cosf(ang) * w, h / 2.0 + sinf(ang) * h);
  cairo_pattern_add_color_stop_rgb(g, 0, a[0], a[1], a[2]);
  cairo_pattern_add_color_stop_rgb(g, 1, b[0], b[1], b[2]);
  cairo_set_source(cr, g);
  cairo_paint(cr);
  cairo_pattern_destroy(g);
  if (!clutter) return;
  int n = 6 + (int)sp_rng_below(r, 30);
  float side = (float)(w > h ? w : h);
  for (int i = 0; i < n; i++) {
    double c[3];
    random_rgb(r, c);
    float x = sp_rng_range(r, -0.1f, 1.1f) * (float)w, y = sp_rng_range(r, -0.1f, 1.1f) * (float)h;
    float sz = side * sp_rng_range(r, 0.03f, 0.5f);
    cairo_set_source_rgba(cr, c[0], c[1], c[2], sp_rng_range(r, 0.35f, 1.0f));
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, sp_rng_range(r, 0, PI_F));
    switch (sp_rng_below(r, 6)) {
      case 0:
        cairo_rectangle(cr, -sz / 2, -sz / 4, sz, sz * sp_rng_range(r, 0.1f, 1.0f));
        cairo_fill(cr);
        break;
      case 1:
        cairo_scale(cr, 1, sp_rng_range(r, 0.3f, 1.0f));
        cairo_arc(cr, 0, 0, sz / 2, 0, 2 * PI_F);
        cairo_fill(cr);
        break;
      case 2: /* lines: edges and thin structures, like furniture and frames */
        cairo_move_to(cr, -sz, 0);
        cairo_line_to(cr, sz, sp_rng_range(r, -sz, sz) * 0.3);
        cairo_set_line_width(cr, sp_rng_range(r, 0.5f, 0.03f * side));
        cairo_stroke(cr);
        break;
      case 3: {
        int k = 3 + (int)sp_rng_below(r, 4);
        for (int j = 0; j < k; j++) {
          float t = 2 * PI_F * (float)j / (float)k, rr = sz * sp_rng_range(r, 0.2f, 0.6f);
          if (j == 0)
            cairo_move_to(cr, rr * cosf(t), rr * sinf(t));
          else
            cairo_line_to(cr, rr * cosf(t), rr * sinf(t));
        }
        cairo_close_path(cr);
        cairo_fill(cr);
        break;
      }
      case 4: {
        cairo_pattern_t *p = texture(r);
        cairo_set_source(cr, p);
        cairo_rectangle(cr, -sz / 2, -sz / 2, sz, sz * sp_rng_range(r, 0.3f, 1.0f));
        cairo_fill(cr);
        cairo_pattern_destroy(p);
        break;
      }
      default: { /* soft blob of light or shadow */
        cairo_pattern_t *p = cairo_pattern_create_radial(0, 0, 0, 0, 0, sz);
        cairo_pattern_add_color_stop_rgba(p, 0, c[0], c[1], c[2], 0.7);
        cairo_pattern_add_color_stop_rgba(p, 1, c[0], c[1], c[2], 0);
        cairo_set_source(cr, p);
        cairo_paint(cr);
        cairo_pattern_destroy(p);
        break;
      }
    }
    cairo_restore(cr);
  }
}

/* One separable pass along rows (stride 3 per pixel) or columns. */
static void blur_pass(uint8_t *rgb, int w, int h, const float *k, int rad, int vertical, float *line) {
  int n = vertical ? h : w, m = vertical ? w : h;
  for (int j = 0; j < m; j++) {
    for (int ch = 0; ch < 3; ch++) {
      for (int i = 0; i < n; i++) {
        size_t at = vertical ? ((size_t)i * w + j) * 3 + ch : ((size_t)j * w + i) * 3 + ch;
        line[i] = rgb[at];
      }
      for (int i = 0; i < n; i++) {
        float acc = 0;
        for (int t = -rad; t <= rad; t++) {
          int q = i + t;
          q = q < 0 ? 0 : q >= n ? n - 1 : q; /* clamp: no dark border */
          acc += k[t + rad] * line[q];
        }
        size_t at = vertical ? ((size_t)i * w + j) * 3 + ch : ((size_t)j * w + i) * 3 + ch;
        rgb[at] = (uint8_t)fminf(255, acc + 0.5f);
      }
    }
  }
}

void syn_blur_rgb(uint8_t *rgb, int w, int h, float sigma, int box) {
  if (sigma <= 0) return;
  int rad = box ? (int)(sigma + 0.5f) : (int)ceilf(3 * sigma);
  if (rad < 1) rad = 1;
  float k[64], sum = 0;
  if (rad > 31) rad = 31;
  for (int t = -rad; t <= rad; t++) {
    k[t + rad] = box ? 1.0f : expf(-0.5f * (float)(t * t) / (sigma * sigma));
    sum += k[t + rad];
  }
  for (int t = 0; t <= 2 * rad; t++) k[t] /= sum;
  float *line = malloc(sizeof(float) * (size_t)(w > h ? w : h));
  if (!line) return;
  blur_pass(rgb, w, h, k, rad, 0, line);
  blur_pass(rgb, w, h, k, rad, 1, line);
  free(line);
}

void syn_noise_rgb(uint8_t *rgb, int w, int h, float sigma, sp_rng *r) {
  if (sigma <= 0) return;
  size_t n = (size_t)w * h * 3;
  for (size_t i = 0; i < n; i++) {
    float v = (float)rgb[i] + sigma * sp_rng_normal(r);
    rgb[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
  }
}

/* Averages factor x factor blocks and spreads them back: the look of an
 * upscaled low-resolution video frame. */
void syn_lowres_rgb(uint8_t *rgb, int w, int h, int factor) {
  if (factor < 2) return;
  for (int by = 0; by < h; by += factor)
    for (int bx = 0; bx < w; bx += factor) {
      int ey = by + factor < h ? by + factor : h, ex = bx + factor < w ? bx + factor : w;
      for (int ch = 0; ch < 3; ch++) {
        int sum = 0, cnt = 0;
        for (int y = by; y < ey; y++)
          for (int x = bx; x < ex; x++, cnt++) sum += rgb[((size_t)y * w + x) * 3 + ch];
        uint8_t v = (uint8_t)((sum + cnt / 2) / cnt);
        for (int y = by; y < ey; y++)
          for (int x = bx; x < ex; x++) rgb[((size_t)y * w + x) * 3 + ch] = v;
      }
    }
  /* Blocks alone look like mosaics; a light blur turns them into soft pixels. */
  syn_blur_rgb(rgb, w, h, 0.5f * (float)factor, 0);
}
