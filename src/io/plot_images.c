/* Keypoint overlays: one image with predicted and ground-truth points, and a
 * captioned grid of them (best and worst validation samples). */
#include <math.h>
#include <stdio.h>

#include "io/plot_internal.h"

static int point_ok(const float *p, int i) { return p && isfinite(p[2 * i]) && isfinite(p[2 * i + 1]); }

/* Text readable on any image: a dark outline under a white fill. */
static void outlined_text(cairo_t *cr, double x, double y, const char *s, double size) {
  sp_plot_font(cr, size, 1);
  cairo_move_to(cr, x, y);
  cairo_text_path(cr, s);
  cairo_set_source_rgba(cr, 0, 0, 0, 0.8);
  cairo_set_line_width(cr, fmax(1.5, size / 5));
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_stroke_preserve(cr);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_fill(cr);
}

/* Draws on a context whose user space is output pixels: image point (x, y)
 * lands at (ox + (x + 0.5) * scale, oy + (y + 0.5) * scale) because data
 * coordinates put pixel centres at integers. r: ground-truth dot radius. */
static void draw_points(cairo_t *cr, double ox, double oy, double scale, const float *pred, const float *gt, int k,
                        double r, unsigned flags) {
#define PX(p, i) (ox + ((p)[2 * (i)] + 0.5) * scale)
#define PY(p, i) (oy + ((p)[2 * (i) + 1] + 0.5) * scale)
  if ((flags & SP_KP_LINKS) && pred && gt) {
    sp_plot_set_rgba(cr, SP_PLOT_LINK_RGB, 0.9);
    cairo_set_line_width(cr, fmax(1.0, r * 0.35));
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    for (int i = 0; i < k; i++) {
      if (!point_ok(pred, i) || !point_ok(gt, i)) continue;
      cairo_move_to(cr, PX(gt, i), PY(gt, i));
      cairo_line_to(cr, PX(pred, i), PY(pred, i));
    }
    cairo_stroke(cr);
  }
  /* Ground truth under, prediction on top and smaller: a hit shows as a red
   * dot in a green ring, a miss as two separate dots. The thin dark rims keep
   * both visible on pale skin and on saturated backgrounds. */
  const float *sets[2] = {gt, pred};
  const uint32_t colours[2] = {SP_PLOT_GT_RGB, SP_PLOT_PRED_RGB};
  const double radii[2] = {r, r * 0.62};
  for (int s = 0; s < 2; s++) {
    if (!sets[s]) continue;
    for (int i = 0; i < k; i++) {
      if (!point_ok(sets[s], i)) continue;
      cairo_new_sub_path(cr);
      cairo_arc(cr, PX(sets[s], i), PY(sets[s], i), radii[s], 0, 2 * M_PI);
    }
    sp_plot_set_rgb(cr, colours[s]);
    cairo_fill_preserve(cr);
    cairo_set_source_rgba(cr, 0, 0, 0, 0.55);
    cairo_set_line_width(cr, 1.0);
    /* The rim is drawn just outside the dot so the dot's own pixels keep
     * their pure colour (what a reader, and the tests, look at). */
    cairo_new_path(cr);
    for (int i = 0; i < k; i++) {
      if (!point_ok(sets[s], i)) continue;
      cairo_new_sub_path(cr);
      cairo_arc(cr, PX(sets[s], i), PY(sets[s], i), radii[s] + 0.5, 0, 2 * M_PI);
    }
    cairo_stroke(cr);
  }
  if (flags & SP_KP_INDICES) {
    const float *p = pred ? pred : gt;
    char num[16];
    for (int i = 0; p && i < k; i++) {
      if (!point_ok(p, i)) continue;
      snprintf(num, sizeof num, "%d", i);
      outlined_text(cr, PX(p, i) + r * 0.9, PY(p, i) - r * 0.9, num, fmax(9, r * 2.4));
    }
  }
#undef PX
#undef PY
}

static int check_points(const char *path, int k, const char *what) {
  if (k < 0) return sp_error_set("%s: %s: negative point count %d", path, what, k);
  return 0;
}

/* A figure of the image scaled by upscale, the image painted on it. */
static int begin_over_image(const char *png_path, const uint8_t *img, int w, int h, int c, int upscale,
                            cairo_surface_t **surface, cairo_t **cr) {
  cairo_surface_t *src = sp_plot_image_surface(png_path, img, w, h, c);
  if (!src) return -1;
  if (sp_plot_begin(png_path, w * upscale, h * upscale, surface, cr) != 0) {
    cairo_surface_destroy(src);
    return -1;
  }
  sp_plot_paint_image(*cr, src, 0, 0, upscale, 0);
  cairo_surface_destroy(src);
  return 0;
}

int sp_draw_keypoints_png(const char *png_path, const uint8_t *img, int w, int h, int c, const float *pred,
                          const float *gt, int k, int upscale, unsigned flags) {
  if (!png_path || !*png_path) return sp_error_set("plot: no output path given");
  if (sp_plot_check_image(png_path, img, w, h, c) != 0) return -1;
  if (check_points(png_path, k, "keypoints") != 0) return -1;
  int longer = w > h ? w : h;
  if (upscale <= 0) {
    upscale = 384 / longer;
    upscale = upscale < 1 ? 1 : upscale > 8 ? 8 : upscale;
  }
  if ((long)w * upscale > SP_PLOT_MAX_SIDE || (long)h * upscale > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: %dx%d image scaled by %d exceeds %d px", png_path, w, h, upscale, SP_PLOT_MAX_SIDE);
  int ow = w * upscale, oh = h * upscale;
  cairo_surface_t *surface;
  cairo_t *cr;
  if (begin_over_image(png_path, img, w, h, c, upscale, &surface, &cr) != 0) return -1;
  double r = (ow > oh ? ow : oh) / 110.0;
  r = r < 3 ? 3 : r > 7 ? 7 : r;
  draw_points(cr, 0, 0, upscale, pred, gt, k, r, flags);
  return sp_plot_finish(png_path, surface, cr);
}

int sp_draw_faces_png(const char *png_path, const uint8_t *img, int w, int h, int c, int n, const float *boxes,
                      const float *const *pts, int k) {
  if (sp_image_file_format(png_path) < 0) return -1;
  if (sp_plot_check_image(png_path, img, w, h, c) != 0) return -1;
  if (check_points(png_path, k, "keypoints") != 0) return -1;
  if (n < 0 || (n > 0 && (!boxes || !pts))) return sp_error_set("%s: bad face list (%d faces)", png_path, n);
  int longer = w > h ? w : h, upscale = 384 / longer;
  upscale = upscale < 1 ? 1 : upscale > 8 ? 8 : upscale;
  int ow = w * upscale, oh = h * upscale;
  if (ow > SP_PLOT_MAX_SIDE || oh > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: %dx%d image exceeds %d px", png_path, w, h, SP_PLOT_MAX_SIDE);
  cairo_surface_t *surface;
  cairo_t *cr;
  if (begin_over_image(png_path, img, w, h, c, upscale, &surface, &cr) != 0) return -1;
  for (int f = 0; f < n; f++) {
    const float *b = boxes + 4 * (size_t)f;
    /* Dots sized by the face, so a crowd of small faces stays readable. */
    double side = fmax(b[2], b[3]) * upscale, r = fmin(fmax(side / 45.0, 1.5), 6.0);
    cairo_rectangle(cr, b[0] * upscale, b[1] * upscale, b[2] * upscale, b[3] * upscale);
    cairo_set_source_rgba(cr, 1.0, 0.85, 0.1, 0.9);
    cairo_set_line_width(cr, fmax(1.0, r * 0.4));
    cairo_stroke(cr);
    draw_points(cr, 0, 0, upscale, pts[f], NULL, k, r / 0.62, 0);
  }
  return sp_plot_finish(png_path, surface, cr);
}

/* The "green = ground truth, red = prediction" key above a grid. */
static double draw_key(cairo_t *cr, double x, double y, double fs) {
  const char *names[2] = {"ground truth", "prediction"};
  const uint32_t colours[2] = {SP_PLOT_GT_RGB, SP_PLOT_PRED_RGB};
  sp_plot_font(cr, fs, 0);
  for (int i = 0; i < 2; i++) {
    cairo_new_sub_path(cr);
    cairo_arc(cr, x + fs * 0.4, y + fs * 0.6, fs * (i == 0 ? 0.38 : 0.26), 0, 2 * M_PI);
    sp_plot_set_rgb(cr, colours[i]);
    cairo_fill_preserve(cr);
    cairo_set_source_rgba(cr, 0, 0, 0, 0.55);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    sp_plot_text(cr, x + fs * 1.1, y + fs * 0.6, 0, 0.5, names[i]);
    x += fs * 1.1 + sp_plot_text_width(cr, names[i]) + fs * 1.2;
  }
  return x;
}

static int check_grid_args(const char *png_path, int n, const sp_grid_cell *cells, int cell_px) {
  if (!png_path || !*png_path) return sp_error_set("plot: no output path given");
  if (n < 0 || (n > 0 && !cells)) return sp_error_set("%s: bad cell list (%d cells)", png_path, n);
  if (cell_px < 32 || cell_px > 2048) return sp_error_set("%s: cell size %d px outside 32..2048", png_path, cell_px);
  for (int i = 0; i < n; i++) {
    if (sp_plot_check_image(png_path, cells[i].img, cells[i].w, cells[i].h, cells[i].c) != 0)
      return sp_error_push("cell %d", i);
    if (check_points(png_path, cells[i].k, "cell") != 0) return -1;
  }
  return 0;
}

/* Title and key on top, then rows of captioned cells. */
typedef struct {
  int cols, rows, cell_px;
  double fs, pad, cap_h, header, cell_h;
  long ow, oh;
} grid_layout;

static grid_layout grid_layout_for(int cols, int n, int cell_px) {
  grid_layout L;
  if (cols <= 0) cols = (int)ceil(sqrt((double)n));
  if (cols > n) cols = n;
  if (cols < 1) cols = 1;
  L.cols = cols;
  L.rows = n > 0 ? (n + cols - 1) / cols : 0;
  L.cell_px = cell_px;

  double fs = cell_px / 14.0;
  fs = fs < 10 ? 10 : fs > 15 ? 15 : fs;
  double pad = fs * 0.8;
  L.fs = fs;
  L.pad = pad;
  L.cap_h = fs * 1.7;
  L.header = pad + fs * 1.3 * 1.2 + fs * 0.5 + fs * 1.2 + pad * 0.6;
  L.cell_h = cell_px + L.cap_h;
  L.ow = (long)ceil(pad + cols * (cell_px + pad));
  L.oh = (long)ceil(L.header + L.rows * (L.cell_h + pad) + (n == 0 ? fs * 3 : 0));
  if (L.ow < 360) L.ow = 360; /* room for the title and key on a one-cell grid */
  return L;
}

static void draw_grid_header(cairo_t *cr, const grid_layout *L, const char *title, int n) {
  const double fs = L->fs, pad = L->pad;
  char buf[512];
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  double y = pad;
  if (title && *title) {
    sp_plot_font(cr, fs * 1.3, 1);
    sp_plot_text(cr, pad, y, 0, 0, sp_plot_text_fit(cr, title, L->ow - 2 * pad, buf, sizeof buf));
  }
  y += fs * 1.3 * 1.2 + fs * 0.5;
  draw_key(cr, pad, y, fs);
  if (n == 0) {
    cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
    sp_plot_font(cr, fs, 0);
    sp_plot_text(cr, pad, L->header + fs, 0, 0, "(no images)");
  }
}

/* Cell i: the image fitted into its square, box and points over it, caption
 * under it. r: ground-truth dot radius. */
static int draw_grid_cell(cairo_t *cr, const char *png_path, const grid_layout *L, int i, const sp_grid_cell *cell,
                          double r, unsigned flags) {
  const int cell_px = L->cell_px;
  const double pad = L->pad;
  char buf[512];
  double cx = pad + (i % L->cols) * (cell_px + pad), cy = L->header + (i / L->cols) * (L->cell_h + pad);
  cairo_rectangle(cr, cx, cy, cell_px, cell_px);
  cairo_set_source_rgb(cr, 0.93, 0.93, 0.93);
  cairo_fill(cr);
  cairo_surface_t *src = sp_plot_image_surface(png_path, cell->img, cell->w, cell->h, cell->c);
  if (!src) return sp_error_push("cell %d", i);
  double s = fmin((double)cell_px / cell->w, (double)cell_px / cell->h);
  double ix = cx + (cell_px - cell->w * s) / 2, iy = cy + (cell_px - cell->h * s) / 2;
  sp_plot_paint_image(cr, src, ix, iy, s, 0);
  cairo_surface_destroy(src);
  cairo_save(cr);
  cairo_rectangle(cr, cx, cy, cell_px, cell_px);
  cairo_clip(cr);
  if (cell->box) {
    /* Box x, y name the first pixel inside it, whose left edge is x. */
    cairo_rectangle(cr, ix + cell->box[0] * s, iy + cell->box[1] * s, cell->box[2] * s, cell->box[3] * s);
    cairo_set_source_rgba(cr, 1.0, 0.85, 0.1, 0.9);
    cairo_set_line_width(cr, r * 0.5);
    cairo_stroke(cr);
  }
  draw_points(cr, ix, iy, s, cell->pred, cell->gt, cell->k, r, flags);
  cairo_restore(cr);
  if (cell->caption && *cell->caption) {
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    sp_plot_font(cr, L->fs, 0);
    sp_plot_text(cr, cx + cell_px / 2.0, cy + cell_px + L->cap_h / 2, 0.5, 0.5,
                 sp_plot_text_fit(cr, cell->caption, cell_px, buf, sizeof buf));
  }
  return 0;
}

int sp_keypoint_grid_png(const char *png_path, const char *title, int cols, int n, const sp_grid_cell *cells,
                         int cell_px, unsigned flags) {
  if (check_grid_args(png_path, n, cells, cell_px) != 0) return -1;
  const grid_layout L = grid_layout_for(cols, n, cell_px);
  if (L.ow > SP_PLOT_MAX_SIDE || L.oh > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: a grid of %d cells in %d columns of %d px is %ldx%ld, over %d px", png_path, n, L.cols,
                        cell_px, L.ow, L.oh, SP_PLOT_MAX_SIDE);

  cairo_surface_t *surface;
  cairo_t *cr;
  if (sp_plot_begin(png_path, (int)L.ow, (int)L.oh, &surface, &cr) != 0) return -1;
  draw_grid_header(cr, &L, title, n);

  double r = cell_px / 60.0;
  r = r < 2.5 ? 2.5 : r > 6 ? 6 : r;
  for (int i = 0; i < n; i++) {
    if (draw_grid_cell(cr, png_path, &L, i, &cells[i], r, flags) != 0) {
      cairo_destroy(cr);
      cairo_surface_destroy(surface);
      return -1;
    }
  }
  return sp_plot_finish(png_path, surface, cr);
}
