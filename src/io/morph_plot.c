/* The morph's points figure: both faces side by side with the shared
 * triangulation drawn over each, so one can see at a glance whether the
 * corresponding points (and so the triangles) really match. */
#include <math.h>

#include "io/plot_internal.h"
#include "spry/morph.h"

#define PANEL_PX 480.0 /* longer side of each face in the figure */
#define GAP_PX 8.0

static void draw_panel(cairo_t *cr, cairo_surface_t *img, double x0, double s, const float *pts, int n, int k,
                       const int *tris, int n_tris) {
  sp_plot_paint_image(cr, img, x0, GAP_PX, s, 1);
  /* Pixel centres sit at integer coordinates, the image's top-left pixel
   * covers [-0.5, 0.5]: shift by half a pixel to land on the centres. */
#define PX(i) (x0 + (pts[2 * (i)] + 0.5) * s)
#define PY(i) (GAP_PX + (pts[2 * (i) + 1] + 0.5) * s)
  cairo_set_line_width(cr, 1.0);
  sp_plot_set_rgba(cr, 0xffd21e, 0.75);
  for (int t = 0; t < n_tris; t++) {
    const int *v = tris + 3 * t;
    cairo_move_to(cr, PX(v[0]), PY(v[0]));
    cairo_line_to(cr, PX(v[1]), PY(v[1]));
    cairo_line_to(cr, PX(v[2]), PY(v[2]));
    cairo_close_path(cr);
  }
  cairo_stroke(cr);
  for (int i = 0; i < n; i++) {
    if (!isfinite(pts[2 * i]) || !isfinite(pts[2 * i + 1])) continue;
    cairo_new_sub_path(cr);
    cairo_arc(cr, PX(i), PY(i), i < k ? 2.5 : 3.5, 0, 2 * M_PI);
    sp_plot_set_rgb(cr, i < k ? SP_PLOT_PRED_RGB : 0x1f63b4);
    cairo_fill(cr);
  }
#undef PX
#undef PY
}

int sp_morph_points_png(const char *path, const uint8_t *a, const uint8_t *b, int w, int h, int c, const float *pts_a,
                        const float *pts_b, int n, int k, const int *tris, int n_tris) {
  if (sp_plot_check_image(path, a, w, h, c) || sp_plot_check_image(path, b, w, h, c)) return -1;
  if (n < 0 || k < 0 || k > n || n_tris < 0) return sp_error_set("%s: bad point counts (%d, %d)", path, n, k);
  for (int i = 0; i < 3 * n_tris; i++)
    if (tris[i] < 0 || tris[i] >= n) return sp_error_set("%s: triangle index %d out of range", path, tris[i]);
  const double s = PANEL_PX / (w > h ? w : h);
  const int fig_w = (int)ceil(2 * w * s + 3 * GAP_PX), fig_h = (int)ceil(h * s + 2 * GAP_PX);
  cairo_surface_t *sa = sp_plot_image_surface(path, a, w, h, c),
                  *sb = sa ? sp_plot_image_surface(path, b, w, h, c) : NULL;
  cairo_surface_t *surface;
  cairo_t *cr;
  int rc = -1;
  if (sa && sb && sp_plot_begin(path, fig_w, fig_h, &surface, &cr) == 0) {
    draw_panel(cr, sa, GAP_PX, s, pts_a, n, k, tris, n_tris);
    draw_panel(cr, sb, 2 * GAP_PX + w * s, s, pts_b, n, k, tris, n_tris);
    rc = sp_plot_finish(path, surface, cr);
  }
  if (sa) cairo_surface_destroy(sa);
  if (sb) cairo_surface_destroy(sb);
  return rc;
}
