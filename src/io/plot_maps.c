/* Heatmap panels (a keypoint's probability map over the face) and
 * first-layer filter tiles, plus the perceptual colour map they use. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/plot_internal.h"

/* CIE L*a*b* (D65 white) to linear sRGB. */
static void lab_to_linear_rgb(double L, double a, double b, double rgb[3]) {
  double fy = (L + 16) / 116, fx = fy + a / 500, fz = fy - b / 200;
  const double d = 6.0 / 29;
  double f[3] = {fx, fy, fz}, xyz[3];
  for (int i = 0; i < 3; i++) xyz[i] = f[i] > d ? f[i] * f[i] * f[i] : 3 * d * d * (f[i] - 4.0 / 29);
  double X = 0.95047 * xyz[0], Y = xyz[1], Z = 1.08883 * xyz[2];
  rgb[0] = 3.2406 * X - 1.5372 * Y - 0.4986 * Z;
  rgb[1] = -0.9689 * X + 1.8758 * Y + 0.0415 * Z;
  rgb[2] = 0.0557 * X - 0.2040 * Y + 1.0570 * Z;
}

static double srgb_encode(double v) {
  v = v < 0 ? 0 : v > 1 ? 1 : v;
  return v <= 0.0031308 ? 12.92 * v : 1.055 * pow(v, 1 / 2.4) - 0.055;
}

void sp_plot_colormap(double t, uint8_t out[3]) {
  if (!(t >= 0)) t = 0; /* NaN too */
  if (t > 1) t = 1;
  /* A path through LCh: lightness rises linearly (so equal steps in value
   * look like equal steps in brightness and the map survives greyscale
   * printing), hue turns from violet through red and orange to yellow, and
   * chroma peaks mid-way and fades at both ends. Where a colour falls outside
   * sRGB its chroma is reduced (never its lightness), keeping the ramp
   * monotonic. */
  double L = 5 + 91 * t;
  double hue = (290 + 170 * t) * M_PI / 180;
  double C = 16 + 64 * sin(M_PI * t * 0.85);
  double rgb[3], lo = 0, hi = C;
  lab_to_linear_rgb(L, C * cos(hue), C * sin(hue), rgb);
  int inside = rgb[0] >= 0 && rgb[0] <= 1 && rgb[1] >= 0 && rgb[1] <= 1 && rgb[2] >= 0 && rgb[2] <= 1;
  if (!inside) {
    for (int it = 0; it < 24; it++) { /* bisect the largest in-gamut chroma */
      double mid = (lo + hi) / 2;
      lab_to_linear_rgb(L, mid * cos(hue), mid * sin(hue), rgb);
      if (rgb[0] >= 0 && rgb[0] <= 1 && rgb[1] >= 0 && rgb[1] <= 1 && rgb[2] >= 0 && rgb[2] <= 1)
        lo = mid;
      else
        hi = mid;
    }
    lab_to_linear_rgb(L, lo * cos(hue), lo * sin(hue), rgb);
  }
  for (int i = 0; i < 3; i++) out[i] = (uint8_t)lround(srgb_encode(rgb[i]) * 255);
}

static uint32_t *surface_row(cairo_surface_t *s, int y) {
  return (uint32_t *)(void *)(cairo_image_surface_get_data(s) + (size_t)y * (size_t)cairo_image_surface_get_stride(s));
}

/* One panel at image resolution: dimmed grey face with the map on top. */
static cairo_surface_t *heat_surface(const char *path, const uint8_t *img, int w, int h, int c, const float *map,
                                     const uint8_t lut[256][3]) {
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
    sp_error_set("%s: cannot make a %dx%d image: %s", path, w, h, cairo_status_to_string(cairo_surface_status(s)));
    cairo_surface_destroy(s);
    return NULL;
  }
  float peak = 0;
  size_t npix = (size_t)w * (size_t)h;
  for (size_t i = 0; i < npix; i++)
    if (isfinite(map[i]) && map[i] > peak) peak = map[i];
  cairo_surface_flush(s);
  for (int y = 0; y < h; y++) {
    uint32_t *row = surface_row(s, y);
    for (int x = 0; x < w; x++) {
      size_t i = (size_t)y * w + x;
      const uint8_t *p = img + i * (size_t)c;
      /* Grey and dimmed, so the colour map is the only colour in the panel. */
      double grey = (c == 1 ? p[0] : 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]) * 0.55;
      double t = peak > 0 && isfinite(map[i]) && map[i] > 0 ? map[i] / peak : 0;
      /* Opacity grows with the square root: a softmax map is very peaked, and
       * its shoulders (the uncertainty a reader wants to see) would otherwise
       * be invisible. */
      double alpha = 0.9 * sqrt(t);
      const uint8_t *col = lut[(int)lround(t * 255)];
      uint32_t rgb = 0;
      for (int k = 0; k < 3; k++) {
        double v = grey * (1 - alpha) + col[k] * alpha;
        rgb = (rgb << 8) | (uint32_t)lround(v > 255 ? 255 : v);
      }
      row[x] = rgb;
    }
  }
  cairo_surface_mark_dirty(s);
  return s;
}

static int check_heatmap_args(const char *png_path, const uint8_t *img, int w, int h, int c, int n_maps,
                              const float *const *maps, int cell_px) {
  if (!png_path || !*png_path) return sp_error_set("plot: no output path given");
  if (sp_plot_check_image(png_path, img, w, h, c) != 0) return -1;
  if (n_maps < 1 || !maps) return sp_error_set("%s: no maps given", png_path);
  for (int i = 0; i < n_maps; i++)
    if (!maps[i]) return sp_error_set("%s: map %d is NULL", png_path, i);
  if (cell_px < 32 || cell_px > 2048) return sp_error_set("%s: cell size %d px outside 32..2048", png_path, cell_px);
  return 0;
}

/* Panels in a row, captions under them, the colour key on the right. */
typedef struct {
  int m, ph;               /* margin, panel height */
  double fs, cap_h, bar_w; /* font size, caption row height, key bar width */
  double key_h;            /* the marker key's row under the captions (0: none) */
  long ow, oh;             /* figure size */
} heat_layout;

static heat_layout heat_layout_for(int w, int h, int n_maps, int cell_px, int has_key) {
  heat_layout L;
  L.m = cell_px / 24 > 4 ? cell_px / 24 : 4;
  L.ph = (int)lround((double)cell_px * h / w);
  if (L.ph < 1) L.ph = 1;
  double fs = cell_px / 16.0;
  L.fs = fs < 10 ? 10 : fs > 15 ? 15 : fs;
  L.cap_h = L.fs * 1.8, L.bar_w = L.fs * 0.9;
  /* Room for the colour key right of the panels: bar plus "peak" label. */
  double key_w = L.m + L.bar_w + L.fs * 0.4 + L.fs * 2.6;
  L.ow = (long)ceil(L.m + (double)n_maps * (cell_px + L.m) + key_w);
  L.key_h = has_key ? L.fs * 1.8 : 0;
  L.oh = (long)ceil(L.m + L.ph + L.cap_h + L.key_h + L.m * 0.5);
  return L;
}

/* A crosshair with an open centre, so the map under the point (often its
 * peak) stays visible. */
static void draw_crosshair(cairo_t *cr, double px, double py, double r) {
  for (int q = 0; q < 4; q++) {
    double dx = q == 0 ? 1 : q == 1 ? -1 : 0, dy = q == 2 ? 1 : q == 3 ? -1 : 0;
    cairo_move_to(cr, px + dx * r * 0.6, py + dy * r * 0.6);
    cairo_line_to(cr, px + dx * r * 1.8, py + dy * r * 1.8);
  }
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  cairo_set_source_rgba(cr, 0, 0, 0, 0.7);
  cairo_set_line_width(cr, 3.5);
  cairo_stroke_preserve(cr);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_set_line_width(cr, 1.8);
  cairo_stroke(cr);
}

/* The true point: a ring in the overlays' ground-truth green (the map's
 * colours have no green), dark-edged to stand out on any of them. */
static void draw_truth_ring(cairo_t *cr, double px, double py, double r) {
  cairo_new_sub_path(cr);
  cairo_arc(cr, px, py, r * 1.2, 0, 2 * M_PI);
  cairo_set_source_rgba(cr, 0, 0, 0, 0.7);
  cairo_set_line_width(cr, 4);
  cairo_stroke_preserve(cr);
  sp_plot_set_rgb(cr, SP_PLOT_GT_RGB);
  cairo_set_line_width(cr, 2.2);
  cairo_stroke(cr);
}

/* Which marker is which, in a row under the captions, on a grey swatch so
 * the white crosshair shows. */
static void draw_marker_key(cairo_t *cr, const heat_layout *L, double r) {
  double y = L->m + L->ph + L->cap_h + L->key_h / 2, x = L->m, side = L->key_h * 0.95;
  const char *label[2] = {"model's point (soft-argmax)", "true point"};
  sp_plot_font(cr, L->fs * 0.9, 0);
  for (int i = 0; i < 2; i++) {
    cairo_rectangle(cr, x, y - side / 2, side, side);
    cairo_set_source_rgb(cr, 0.27, 0.27, 0.27);
    cairo_fill(cr);
    double kr = fmin(r, side / 4);
    if (i == 0)
      draw_crosshair(cr, x + side / 2, y, kr);
    else
      draw_truth_ring(cr, x + side / 2, y, kr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    sp_plot_text(cr, x + side + L->fs * 0.4, y, 0, 0.5, label[i]);
    x += side + L->fs * 0.4 + sp_plot_text_width(cr, label[i]) + L->fs * 1.5;
  }
}

/* Colour key: each map is scaled to its own peak, so the bar reads 0..peak. */
static void draw_colour_key(cairo_t *cr, const heat_layout *L, double bx) {
  const int m = L->m, ph = L->ph;
  const double fs = L->fs, bar_w = L->bar_w;
  cairo_pattern_t *grad = cairo_pattern_create_linear(0, m + ph, 0, m);
  for (int i = 0; i <= 16; i++) {
    uint8_t rgb[3];
    sp_plot_colormap(i / 16.0, rgb);
    cairo_pattern_add_color_stop_rgb(grad, i / 16.0, rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0);
  }
  cairo_rectangle(cr, bx, m, bar_w, ph);
  cairo_set_source(cr, grad);
  cairo_fill(cr);
  cairo_pattern_destroy(grad);
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  sp_plot_font(cr, fs * 0.85, 0);
  sp_plot_text(cr, bx + bar_w + fs * 0.3, m, 0, 0, "peak");
  sp_plot_text(cr, bx + bar_w + fs * 0.3, m + ph, 0, 1, "0");
}

int sp_heatmaps_png(const char *png_path, const uint8_t *img, int w, int h, int c, int n_maps, const float *const *maps,
                    const char *const *captions, const float *points, const float *truth, int cell_px) {
  if (check_heatmap_args(png_path, img, w, h, c, n_maps, maps, cell_px) != 0) return -1;
  const heat_layout L = heat_layout_for(w, h, n_maps, cell_px, truth != NULL);
  const int m = L.m, ph = L.ph;
  if (L.ow > SP_PLOT_MAX_SIDE || L.oh > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: %d panels of %d px make a %ldx%ld figure, over %d px", png_path, n_maps, cell_px, L.ow,
                        L.oh, SP_PLOT_MAX_SIDE);

  uint8_t lut[256][3];
  for (int i = 0; i < 256; i++) sp_plot_colormap(i / 255.0, lut[i]);

  cairo_surface_t *surface;
  cairo_t *cr;
  if (sp_plot_begin(png_path, (int)L.ow, (int)L.oh, &surface, &cr) != 0) return -1;
  double scale = (double)cell_px / w;
  char buf[256];
  for (int i = 0; i < n_maps; i++) {
    double x0 = m + i * (cell_px + m), y0 = m;
    cairo_surface_t *panel = heat_surface(png_path, img, w, h, c, maps[i], lut);
    if (!panel) {
      cairo_destroy(cr);
      cairo_surface_destroy(surface);
      return -1;
    }
    cairo_save(cr);
    cairo_rectangle(cr, x0, y0, cell_px, ph);
    cairo_clip(cr);
    sp_plot_paint_image(cr, panel, x0, y0, scale, 1);
    cairo_surface_destroy(panel);
    if (truth && isfinite(truth[2 * i]) && isfinite(truth[2 * i + 1]))
      draw_truth_ring(cr, x0 + (truth[2 * i] + 0.5) * scale, y0 + (truth[2 * i + 1] + 0.5) * scale,
                      fmax(4, cell_px / 36.0));
    /* The prediction on top: where the two meet, the crosshair sits in the ring. */
    if (points && isfinite(points[2 * i]) && isfinite(points[2 * i + 1]))
      draw_crosshair(cr, x0 + (points[2 * i] + 0.5) * scale, y0 + (points[2 * i + 1] + 0.5) * scale,
                     fmax(4, cell_px / 36.0));
    cairo_restore(cr);
    if (captions && captions[i] && *captions[i]) {
      cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
      sp_plot_font(cr, L.fs, 0);
      sp_plot_text(cr, x0 + cell_px / 2.0, y0 + ph + L.cap_h / 2, 0.5, 0.5,
                   sp_plot_text_fit(cr, captions[i], cell_px, buf, sizeof buf));
    }
  }
  draw_colour_key(cr, &L, m + (double)n_maps * (cell_px + m));
  if (truth) draw_marker_key(cr, &L, fmax(4, cell_px / 36.0));
  return sp_plot_finish(png_path, surface, cr);
}

int sp_filters_png(const char *png_path, const float *w, int cout, int cin, int kh, int kw, int tile_px) {
  if (!png_path || !*png_path) return sp_error_set("plot: no output path given");
  if (!w || cout < 1 || cin < 1 || kh < 1 || kw < 1)
    return sp_error_set("%s: bad filter shape [%d][%d][%d][%d]", png_path, cout, cin, kh, kw);
  int kmax = kh > kw ? kh : kw;
  if (tile_px < kmax || tile_px > 512)
    return sp_error_set("%s: tile size %d px outside %d..512 (the kernel is %dx%d)", png_path, tile_px, kmax, kh, kw);
  int cols = (int)ceil(sqrt((double)cout)), rows = (cout + cols - 1) / cols;
  int gap = tile_px / 8 > 1 ? tile_px / 8 : 1;
  long ow = gap + (long)cols * (tile_px + gap), oh = gap + (long)rows * (tile_px + gap);
  if (ow > SP_PLOT_MAX_SIDE || oh > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: %d tiles of %d px make a %ldx%ld figure, over %d px", png_path, cout, tile_px, ow, oh,
                        SP_PLOT_MAX_SIDE);
  cairo_surface_t *surface;
  cairo_t *cr;
  if (sp_plot_begin(png_path, (int)ow, (int)oh, &surface, &cr) != 0) return -1;
  cairo_surface_flush(surface);

  int f = tile_px / kmax;
  int rgb_mode = cin == 3;
  size_t per = (size_t)kh * kw;
  float *grey = rgb_mode ? NULL : sp_xmalloc(per * sizeof *grey);
  for (int o = 0; o < cout; o++) {
    const float *wf = w + (size_t)o * cin * per;
    const float *vals = wf;
    size_t nvals = (size_t)cin * per;
    if (!rgb_mode) {
      /* Grey: the channel mean (cin = 1 is the filter itself). */
      for (size_t p = 0; p < per; p++) {
        double sum = 0;
        for (int ci = 0; ci < cin; ci++) sum += wf[ci * per + p];
        grey[p] = (float)(sum / cin);
      }
      vals = grey;
      nvals = per;
    }
    /* Each filter to its own range: first-layer filters differ in scale by
     * orders of magnitude, and a shared range would show most as flat grey.
     * RGB channels share one range so the hue means something. */
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < nvals; i++)
      if (isfinite(vals[i])) {
        lo = fminf(lo, vals[i]);
        hi = fmaxf(hi, vals[i]);
      }
    double range = hi > lo ? hi - lo : 0;
    int tx = gap + (o % cols) * (tile_px + gap) + (tile_px - kw * f) / 2;
    int ty = gap + (o / cols) * (tile_px + gap) + (tile_px - kh * f) / 2;
    for (int y = 0; y < kh * f; y++) {
      uint32_t *row = surface_row(surface, ty + y);
      for (int x = 0; x < kw * f; x++) {
        size_t p = (size_t)(y / f) * kw + (size_t)(x / f);
        uint32_t px = 0;
        for (int ch = 0; ch < 3; ch++) {
          float v = rgb_mode ? vals[ch * per + p] : vals[p];
          double t = range > 0 && isfinite(v) ? (v - lo) / range : 0.5;
          px = (px << 8) | (uint32_t)lround(t * 255);
        }
        row[tx + x] = px;
      }
    }
  }
  free(grey);
  cairo_surface_mark_dirty(surface);
  return sp_plot_finish(png_path, surface, cr);
}
