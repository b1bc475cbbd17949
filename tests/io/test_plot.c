/* io/plot: figures are read back as pixels and checked for what a reader
 * would see (a line where the data is, the right colour at a keypoint, a
 * bright spot where a map peaks), and the report page for its content. */
#include <cairo.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spry/plot.h"
#include "testkit.h"

/* ---- helpers ---- */

typedef struct {
  char dir[512];
  char path[1024];
} tmp_t;

static const char *tmp_file(tmp_t *t, const char *name) {
  snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
  return t->path;
}

static int setup(void **state) {
  tmp_t *t = calloc(1, sizeof *t);
  assert_non_null(sp_test_tmpdir(t->dir, sizeof t->dir));
  *state = t;
  return 0;
}

static int teardown(void **state) {
  tmp_t *t = *state;
  sp_test_rmtree(t->dir);
  free(t);
  return 0;
}

static cairo_surface_t *load_png(const char *path) {
  cairo_surface_t *s = cairo_image_surface_create_from_png(path);
  if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS)
    fail_msg("%s: %s", path, cairo_status_to_string(cairo_surface_status(s)));
  cairo_surface_flush(s);
  return s;
}

static uint32_t pixel(cairo_surface_t *s, int x, int y) {
  assert_true(x >= 0 && y >= 0 && x < cairo_image_surface_get_width(s) && y < cairo_image_surface_get_height(s));
  const unsigned char *row = cairo_image_surface_get_data(s) + (size_t)y * cairo_image_surface_get_stride(s);
  uint32_t v;
  memcpy(&v, row + 4 * (size_t)x, 4);
  return v & 0xffffffu;
}

static int channel(uint32_t c, int i) { return (int)((c >> (16 - 8 * i)) & 255); }

static int colour_diff(uint32_t a, uint32_t b) {
  int d = 0;
  for (int i = 0; i < 3; i++) {
    int e = abs(channel(a, i) - channel(b, i));
    if (e > d) d = e;
  }
  return d;
}

static double luma(uint32_t c) { return 0.299 * channel(c, 0) + 0.587 * channel(c, 1) + 0.114 * channel(c, 2); }

static long count_colour(cairo_surface_t *s, uint32_t rgb, int tol) {
  long n = 0;
  for (int y = 0; y < cairo_image_surface_get_height(s); y++)
    for (int x = 0; x < cairo_image_surface_get_width(s); x++) n += colour_diff(pixel(s, x, y), rgb) <= tol;
  return n;
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = 0;
  fclose(f);
  return buf;
}

/* Only the expected files are left in dir: no "*.tmp.*" from atomic writes. */
static void assert_no_temporaries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, ".tmp.")) fail_msg("temporary file left behind: %s", e->d_name);
  closedir(d);
}

/* The pixels of series colour `rgb` form the straight segment from the
 * bottom-left to the top-right of their bounding box (a chart of y = x with
 * limits at the data's ends). Returns the box in *box (x0, y0, x1, y1). */
static void assert_diagonal(cairo_surface_t *s, uint32_t rgb, int box[4]) {
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  int x0 = w, y0 = h, x1 = -1, y1 = -1;
  long n = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      if (colour_diff(pixel(s, x, y), rgb) <= 60) {
        x0 = x < x0 ? x : x0;
        x1 = x > x1 ? x : x1;
        y0 = y < y0 ? y : y0;
        y1 = y > y1 ? y : y1;
        n++;
      }
  assert_true(n > 100);
  assert_true(x1 - x0 > w / 2);
  assert_true(y1 - y0 > h / 2);
  /* Every coloured pixel lies on the segment... */
  double dx = x1 - x0, dy = y1 - y0, len = sqrt(dx * dx + dy * dy);
  long off = 0;
  for (int y = y0; y <= y1; y++)
    for (int x = x0; x <= x1; x++)
      if (colour_diff(pixel(s, x, y), rgb) <= 60) {
        /* distance from (x, y) to the line through (x0, y1) and (x1, y0) */
        double d = fabs(dy * (x - x0) + dx * (y - y1)) / len;
        off += d > 4;
      }
  assert_true(off == 0);
  /* ...and the segment is drawn along its whole length. */
  for (int x = x0 + 3; x <= x1 - 3; x += 4) {
    int ey = (int)lround(y1 - (x - x0) * dy / dx), found = 0;
    for (int y = ey - 3; y <= ey + 3 && !found; y++) found = colour_diff(pixel(s, x, y), rgb) <= 60;
    if (!found) fail_msg("no line pixel near (%d, %d)", x, ey);
  }
  /* Far from the diagonal (the chart's top-left and bottom-right) is
   * background: white or a light grid line. */
  uint32_t tl = pixel(s, x0 + (int)(dx * 0.2), y0 + (int)(dy * 0.2));
  uint32_t br = pixel(s, x0 + (int)(dx * 0.8), y0 + (int)(dy * 0.8));
  assert_true(luma(tl) > 200 && colour_diff(tl, rgb) > 100);
  assert_true(luma(br) > 200 && colour_diff(br, rgb) > 100);
  box[0] = x0;
  box[1] = y0;
  box[2] = x1;
  box[3] = y1;
}

/* ---- line charts ---- */

/* The rows of series colour `rgb` in the left half, away from the legend
 * (top, bottom; -1, -1 when absent). */
static void colour_rows(cairo_surface_t *s, uint32_t rgb, int *top, int *bottom) {
  *top = *bottom = -1;
  for (int y = 0; y < cairo_image_surface_get_height(s); y++)
    for (int x = 0; x < cairo_image_surface_get_width(s) / 2; x++)
      if (colour_diff(pixel(s, x, y), rgb) <= 60) {
        if (*top < 0) *top = y;
        *bottom = y;
      }
}

/* A CED where no face is within range is a flat line at 0: on the default
 * axis it sits mid-chart between -1 and 1; a fixed [0, 1] axis puts it on
 * the bottom edge, and the note adds a legend row. */
static void fixed_y_range_and_note(void **state) {
  tmp_t *t = *state;
  double x[21], y[21];
  for (int i = 0; i <= 20; i++) x[i] = i * 0.01, y[i] = 0;
  sp_series s = {"validation", x, y, 21};
  uint32_t rgb = sp_plot_series_rgb(0);
  int top, bottom;
  const char *path = tmp_file(t, "auto.png");
  assert_int_equal(sp_plot_lines(path, 640, 400, NULL, NULL, NULL, 1, &s, 0), 0);
  cairo_surface_t *img = load_png(path);
  colour_rows(img, rgb, &top, &bottom);
  assert_true(top > 120 && bottom < 280); /* today's default: centred */
  cairo_surface_destroy(img);

  path = tmp_file(t, "fixed.png");
  assert_int_equal(sp_plot_lines_opt(path, 640, 400, NULL, NULL, NULL, 1, &s,
                                     &(sp_plot_lines_options){.y_min = 0, .y_max = 1}),
                   0);
  img = load_png(path);
  colour_rows(img, rgb, &top, &bottom);
  assert_true(top > 300); /* on the bottom edge of the plot area */
  long dark_without = 0, dark_with = 0;
  for (int yy = 0; yy < 400; yy++)
    for (int xx = 0; xx < 640; xx++) dark_without += luma(pixel(img, xx, yy)) < 100;
  cairo_surface_destroy(img);

  path = tmp_file(t, "note.png");
  assert_int_equal(sp_plot_lines_opt(path, 640, 400, NULL, NULL, NULL, 1, &s,
                                     &(sp_plot_lines_options){.y_min = 0, .y_max = 1,
                                                              .note = "21 faces above the plotted range"}),
                   0);
  img = load_png(path);
  for (int yy = 0; yy < 400; yy++)
    for (int xx = 0; xx < 640; xx++) dark_with += luma(pixel(img, xx, yy)) < 100;
  cairo_surface_destroy(img);
  assert_true(dark_with > dark_without + 200); /* a line of text more */

  /* A fixed range that cannot be drawn is refused, naming the file. */
  assert_int_equal(sp_plot_lines_opt(path, 640, 400, NULL, NULL, NULL, 1, &s,
                                     &(sp_plot_lines_options){.log_y = 1, .y_min = 0, .y_max = 1}),
                   -1);
  assert_non_null(strstr(sp_last_error(), "note.png"));
}


static void line_chart_of_identity_is_the_diagonal(void **state) {
  tmp_t *t = *state;
  double x[101], y[101];
  for (int i = 0; i <= 100; i++) x[i] = y[i] = i * 0.1;
  sp_series s = {NULL, x, y, 101}; /* unlabelled: no legend to find */
  const char *path = tmp_file(t, "identity.png");
  assert_int_equal(sp_plot_lines(path, 640, 480, "y = x", "x", "y", 1, &s, 0), 0);
  cairo_surface_t *img = load_png(path);
  assert_int_equal(cairo_image_surface_get_width(img), 640);
  assert_int_equal(cairo_image_surface_get_height(img), 480);
  int box[4];
  assert_diagonal(img, sp_plot_series_rgb(0), box);
  /* Tick labels and the axis label were drawn (text works headless): dark
   * pixels left of the plot and below it. */
  long dark_left = 0, dark_below = 0;
  for (int y = 0; y < 480; y++)
    for (int x = 0; x < box[0] - 6; x++) dark_left += luma(pixel(img, x, y)) < 90;
  for (int y = box[3] + 6; y < 480; y++)
    for (int x = 0; x < 640; x++) dark_below += luma(pixel(img, x, y)) < 90;
  assert_true(dark_left > 50);
  assert_true(dark_below > 50);
  /* The data fill the plot: a margin, but not most of the figure. */
  assert_true(box[0] > 20 && box[0] < 120);
  assert_true(box[2] > 560);
  cairo_surface_destroy(img);
  assert_no_temporaries(t->dir);
}

static void nan_points_leave_a_gap_and_empty_series_are_fine(void **state) {
  tmp_t *t = *state;
  double x[101], y[101], nan_only[3] = {NAN, NAN, NAN};
  for (int i = 0; i <= 100; i++) {
    x[i] = i * 0.1;
    y[i] = (i >= 40 && i <= 60) ? NAN : i * 0.1;
  }
  y[5] = INFINITY;
  sp_series s[3] = {{NULL, x, y, 101}, {"empty", NULL, NULL, 0}, {"all NaN", x, nan_only, 3}};
  const char *path = tmp_file(t, "nan.png");
  assert_int_equal(sp_plot_lines(path, 500, 400, "gaps", "x", "y", 3, s, 0), 0);
  cairo_surface_t *img = load_png(path);
  uint32_t c0 = sp_plot_series_rgb(0);
  int w = cairo_image_surface_get_width(img), h = cairo_image_surface_get_height(img);
  /* The data series is unlabelled, so its colour appears only on the line;
   * its extent spans x = 0..10. */
  int x0 = w, x1 = -1;
  for (int yy = 0; yy < h; yy++)
    for (int xx = 0; xx < w; xx++)
      if (colour_diff(pixel(img, xx, yy), c0) <= 60) {
        x0 = xx < x0 ? xx : x0;
        x1 = xx > x1 ? xx : x1;
      }
  assert_true(x1 - x0 > w / 2);
  /* x = 5 is in the NaN run (4..6): no line pixel in that column at all,
   * while the column at x = 3 has some. */
  int col_gap = (x0 + x1) / 2, col_3 = (int)lround(x0 + (x1 - x0) * 0.3);
  long gap = 0, at3 = 0;
  for (int yy = 0; yy < h; yy++) {
    gap += colour_diff(pixel(img, col_gap, yy), c0) <= 60;
    at3 += colour_diff(pixel(img, col_3, yy), c0) <= 60;
  }
  assert_true(at3 > 0);
  assert_int_equal(gap, 0);
  cairo_surface_destroy(img);

  /* Nothing drawable at all still gives a chart (axes, "no data"). */
  sp_series only_nan = {"nan", x, nan_only, 3};
  assert_int_equal(sp_plot_lines(tmp_file(t, "none.png"), 300, 200, NULL, NULL, NULL, 1, &only_nan, 0), 0);
  assert_int_equal(sp_plot_lines(tmp_file(t, "zero.png"), 300, 200, "zero series", NULL, NULL, 0, NULL, 0), 0);
  /* A single point and a constant series do not make a zero-width axis. */
  double one_x = 3, one_y = 7, cx[4] = {0, 1, 2, 3}, cy[4] = {2, 2, 2, 2};
  sp_series single[2] = {{"one", &one_x, &one_y, 1}, {"flat", cx, cy, 4}};
  assert_int_equal(sp_plot_lines(tmp_file(t, "single.png"), 300, 200, NULL, NULL, NULL, 1, single, 0), 0);
  img = load_png(t->path);
  assert_true(count_colour(img, sp_plot_series_rgb(0), 30) > 5); /* the lone point's dot */
  cairo_surface_destroy(img);
  assert_int_equal(sp_plot_lines(tmp_file(t, "flat.png"), 300, 200, NULL, NULL, NULL, 1, &single[1], 1), 0);
}

static void log_axis_straightens_powers_and_skips_nonpositive(void **state) {
  tmp_t *t = *state;
  /* y = 10^(x/2) over x in 0..6: a straight line on a log axis. */
  double x[61], y[61];
  for (int i = 0; i <= 60; i++) {
    x[i] = i * 0.1;
    y[i] = pow(10.0, x[i] / 2);
  }
  sp_series s = {NULL, x, y, 61};
  const char *path = tmp_file(t, "log.png");
  assert_int_equal(sp_plot_lines(path, 600, 450, "log", "x", "loss", 1, &s, 1), 0);
  cairo_surface_t *img = load_png(path);
  int box[4];
  assert_diagonal(img, sp_plot_series_rgb(0), box);
  cairo_surface_destroy(img);

  /* Zero and negative values cannot sit on a log axis: they are skipped. */
  double lx[7] = {0, 1, 2, 3, 4, 5, 6}, ly[7] = {-1, 0, 0.01, 0.1, 1, 10, 100};
  double neg[3] = {-3, 0, -1e-9};
  sp_series two[2] = {{"mixed", lx, ly, 7}, {"non-positive", lx, neg, 3}};
  assert_int_equal(sp_plot_lines(tmp_file(t, "logneg.png"), 400, 300, "log", NULL, NULL, 2, two, 1), 0);
  img = load_png(t->path);
  assert_true(count_colour(img, sp_plot_series_rgb(0), 40) > 50);
  cairo_surface_destroy(img);
  assert_int_equal(sp_plot_lines(tmp_file(t, "lognone.png"), 400, 300, "log", NULL, NULL, 1, &two[1], 1), 0);
  /* Many decades and a narrow range both work. */
  double wide[3] = {1e-12, 1, 1e12}, narrow[3] = {0.31, 0.35, 0.42};
  sp_series wn[2] = {{"wide", lx, wide, 3}, {"narrow", lx, narrow, 3}};
  assert_int_equal(sp_plot_lines(tmp_file(t, "wide.png"), 400, 300, NULL, NULL, NULL, 1, &wn[0], 1), 0);
  assert_int_equal(sp_plot_lines(tmp_file(t, "narrow.png"), 400, 300, NULL, NULL, NULL, 1, &wn[1], 1), 0);
}

static void series_colours_are_distinct_and_legend_drawn(void **state) {
  tmp_t *t = *state;
  for (int i = 0; i < 10; i++)
    for (int j = i + 1; j < 10; j++) assert_true(colour_diff(sp_plot_series_rgb(i), sp_plot_series_rgb(j)) > 40);
  double x[50], a[50], b[50];
  for (int i = 0; i < 50; i++) {
    x[i] = i;
    a[i] = 1.0 / (1 + i);
    b[i] = 1.5 / (1 + i) + 0.1;
  }
  sp_series s[2] = {{"train loss", x, a, 50}, {"validation loss", x, b, 50}};
  const char *path = tmp_file(t, "loss.png");
  assert_int_equal(sp_plot_lines(path, 640, 400, "Loss", "epoch", "loss", 2, s, 0), 0);
  cairo_surface_t *img = load_png(path);
  assert_true(count_colour(img, sp_plot_series_rgb(0), 40) > 100);
  assert_true(count_colour(img, sp_plot_series_rgb(1), 40) > 100);
  cairo_surface_destroy(img);
}

static void bad_chart_arguments_are_refused(void **state) {
  tmp_t *t = *state;
  double v[2] = {0, 1};
  sp_series bad = {"broken", NULL, v, 2};
  const char *path = tmp_file(t, "bad.png");
  assert_int_equal(sp_plot_lines(path, 640, 480, NULL, NULL, NULL, 1, &bad, 0), -1);
  assert_non_null(strstr(sp_last_error(), "bad.png"));
  assert_non_null(strstr(sp_last_error(), "broken"));
  assert_int_equal(sp_plot_lines(path, 10, 10, NULL, NULL, NULL, 0, NULL, 0), -1);
  assert_non_null(strstr(sp_last_error(), "bad.png"));
  double huge[2] = {-1e308, 1e308};
  sp_series wide = {"huge", v, huge, 2};
  assert_int_equal(sp_plot_lines(path, 640, 480, NULL, NULL, NULL, 1, &wide, 0), -1);
  assert_non_null(strstr(sp_last_error(), "too wide"));
  struct stat st;
  assert_int_not_equal(stat(path, &st), 0); /* nothing written */
}

/* ---- keypoints ---- */

static void keypoint_overlay_puts_colours_at_the_points(void **state) {
  tmp_t *t = *state;
  uint8_t img[24 * 32];
  memset(img, 100, sizeof img);
  float pred[6] = {5, 5, NAN, 2, 30, 1};
  float gt[6] = {20, 15, 3, 3, 29, 22};
  const char *path = tmp_file(t, "kp.png");
  assert_int_equal(sp_draw_keypoints_png(path, img, 32, 24, 1, pred, gt, 3, 8, SP_KP_LINKS | SP_KP_INDICES), 0);
  cairo_surface_t *s = load_png(path);
  assert_int_equal(cairo_image_surface_get_width(s), 256);
  assert_int_equal(cairo_image_surface_get_height(s), 192);
  /* Point (x, y) covers output pixel ((x + 0.5) * 8, (y + 0.5) * 8). */
  assert_true(colour_diff(pixel(s, 44, 44), SP_PLOT_PRED_RGB) <= 3);
  assert_true(colour_diff(pixel(s, 164, 124), SP_PLOT_GT_RGB) <= 3);
  assert_true(colour_diff(pixel(s, 244, 12), SP_PLOT_PRED_RGB) <= 3);
  /* Ground truth whose prediction is missing is still drawn. */
  assert_true(colour_diff(pixel(s, 28, 28), SP_PLOT_GT_RGB) <= 3);
  /* Away from every point the image shows through unchanged. */
  assert_true(colour_diff(pixel(s, 120, 180), 0x646464) <= 1);
  /* The link from gt (20,15) to pred (5,5) passes its midpoint (12.5, 10). */
  int found = 0;
  for (int dy = -3; dy <= 3 && !found; dy++)
    for (int dx = -3; dx <= 3 && !found; dx++) found = colour_diff(pixel(s, 104 + dx, 84 + dy), SP_PLOT_LINK_RGB) <= 40;
  assert_true(found);
  cairo_surface_destroy(s);

  /* RGB image, automatic scale (48 px -> x8 = 384), no gt, points on edges. */
  uint8_t rgb[48 * 48 * 3];
  for (int i = 0; i < 48 * 48; i++) {
    rgb[3 * i] = 20;
    rgb[3 * i + 1] = 40;
    rgb[3 * i + 2] = 200;
  }
  float edge[4] = {0, 0, 47, 47};
  assert_int_equal(sp_draw_keypoints_png(path, rgb, 48, 48, 3, edge, NULL, 2, 0, SP_KP_INDICES), 0);
  s = load_png(path);
  assert_int_equal(cairo_image_surface_get_width(s), 384);
  assert_true(colour_diff(pixel(s, 4, 4), SP_PLOT_PRED_RGB) <= 3);
  assert_true(colour_diff(pixel(s, 380, 380), SP_PLOT_PRED_RGB) <= 3);
  assert_true(colour_diff(pixel(s, 200, 300), 0x1428c8) <= 1);
  cairo_surface_destroy(s);
  assert_int_equal(sp_draw_keypoints_png(path, rgb, 48, 48, 2, NULL, NULL, 0, 1, 0), -1);
  assert_non_null(strstr(sp_last_error(), "kp.png"));
}

static void keypoint_grid_shows_every_cell(void **state) {
  tmp_t *t = *state;
  uint8_t a[40 * 40], b[30 * 60 * 3];
  memset(a, 180, sizeof a);
  memset(b, 60, sizeof b);
  float pa[2] = {10, 10}, ga[2] = {30, 30}, pb[4] = {5, 5, 50, 25}, gb[4] = {6, 6, 48, 20};
  sp_grid_cell cells[3] = {{a, 40, 40, 1, pa, ga, 1, "err 28.3 px", NULL},
                           {b, 60, 30, 3, pb, gb, 2, "a caption far too long to fit under a small cell at all", NULL},
                           {a, 40, 40, 1, NULL, ga, 1, NULL, NULL}};
  const char *path = tmp_file(t, "grid.png");
  assert_int_equal(sp_keypoint_grid_png(path, "Worst validation images", 2, 3, cells, 120, SP_KP_LINKS), 0);
  cairo_surface_t *s = load_png(path);
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  assert_true(w >= 2 * 120 && w < 2 * 120 + 200);
  assert_true(h >= 2 * 120 && h < 2 * 120 + 250);
  /* Every cell's points are drawn; the 40x40 cells are grey 180 scaled x3,
   * the wide one grey 60 scaled x2. */
  assert_true(count_colour(s, SP_PLOT_PRED_RGB, 3) > 9);
  assert_true(count_colour(s, SP_PLOT_GT_RGB, 3) > 4 * 9);
  assert_true(count_colour(s, 0xb4b4b4, 1) > 2 * 100 * 100);
  assert_true(count_colour(s, 0x3c3c3c, 1) > 100 * 50);
  cairo_surface_destroy(s);

  assert_int_equal(sp_keypoint_grid_png(tmp_file(t, "empty.png"), "nothing", 0, 0, NULL, 96, 0), 0);
  cells[1].img = NULL;
  assert_int_equal(sp_keypoint_grid_png(tmp_file(t, "grid.png"), "broken", 0, 3, cells, 96, 0), -1);
  assert_non_null(strstr(sp_last_error(), "cell 1"));
  assert_non_null(strstr(sp_last_error(), "grid.png"));
}

/* ---- heatmaps and filters ---- */

static void colormap_rises_in_lightness(void **state) {
  (void)state;
  double prev = -1;
  for (int i = 0; i <= 64; i++) {
    uint8_t c[3];
    sp_plot_colormap(i / 64.0, c);
    /* Relative luminance (linear light), which CIE lightness follows. */
    double l = 0;
    const double wgt[3] = {0.2126, 0.7152, 0.0722};
    for (int k = 0; k < 3; k++) {
      double v = c[k] / 255.0;
      l += wgt[k] * (v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4));
    }
    assert_true(l > prev);
    prev = l;
  }
  uint8_t lo[3], hi[3], mid[3];
  sp_plot_colormap(0, lo);
  sp_plot_colormap(1, hi);
  sp_plot_colormap(0.5, mid);
  assert_true(lo[0] < 40 && lo[1] < 40 && lo[2] < 40);
  assert_true(hi[0] > 200 && hi[1] > 200);
  assert_true(mid[0] > mid[1] + 40); /* a warm, saturated middle, not grey */
}

static void heatmap_is_bright_where_the_map_peaks(void **state) {
  tmp_t *t = *state;
  enum { W = 40, H = 30 };
  uint8_t img[W * H * 3];
  memset(img, 128, sizeof img);
  float map[W * H], flat[W * H];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      map[y * W + x] = 1e-3f * expf(-((x - 30) * (x - 30) + (y - 8) * (y - 8)) / 8.0f);
      flat[y * W + x] = 0;
    }
  const float *maps[2] = {map, flat};
  const char *caps[2] = {"left eye", NULL};
  float points[4] = {10, 20, NAN, NAN};
  const char *path = tmp_file(t, "heat.png");
  assert_int_equal(sp_heatmaps_png(path, img, W, H, 3, 2, maps, caps, points, NULL, 160), 0);
  cairo_surface_t *s = load_png(path);
  /* Panel 0 at (m, m) with m = max(4, 160 / 24) = 6, scale 160 / 40 = 4. */
  uint32_t peak = pixel(s, 6 + 30 * 4 + 2, 6 + 8 * 4 + 2);
  uint32_t far = pixel(s, 6 + 5 * 4 + 2, 6 + 25 * 4 + 2);
  assert_true(luma(peak) > luma(far) + 100);
  assert_true(channel(peak, 0) > channel(peak, 2) + 40); /* coloured, not white */
  assert_true(colour_diff(far, 0x464646) <= 2);          /* dimmed grey face */
  /* The crosshair's arms at (10, 20) are white. */
  int found = 0;
  for (int dx = -12; dx <= 12 && !found; dx++) found = luma(pixel(s, 6 + 42 + dx, 6 + 82)) > 180;
  assert_true(found);
  /* An all-zero map leaves its panel (panel 1 at x = 6 + 166) plain grey. */
  assert_true(colour_diff(pixel(s, 6 + 166 + 122, 6 + 34), 0x464646) <= 2);
  cairo_surface_destroy(s);
  assert_int_equal(sp_heatmaps_png(path, img, W, H, 3, 0, maps, NULL, NULL, NULL, 160), -1);
  assert_non_null(strstr(sp_last_error(), "heat.png"));
}

/* Green-dominant pixels (the ground-truth ring; neither the face, dimmed to
 * grey, nor the colour map has any) within r of (cx, cy); r < 0: anywhere. */
static long green_pixels(cairo_surface_t *s, int cx, int cy, int r) {
  long n = 0;
  for (int y = 0; y < cairo_image_surface_get_height(s); y++)
    for (int x = 0; x < cairo_image_surface_get_width(s); x++) {
      if (r >= 0 && (abs(x - cx) > r || abs(y - cy) > r)) continue;
      uint32_t p = pixel(s, x, y);
      n += channel(p, 1) > channel(p, 0) + 60 && channel(p, 1) > channel(p, 2) + 60;
    }
  return n;
}

static void heatmap_marks_the_true_point(void **state) {
  tmp_t *t = *state;
  enum { W = 40, H = 30 };
  uint8_t img[W * H * 3];
  memset(img, 128, sizeof img);
  float map[W * H];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) map[y * W + x] = expf(-((x - 12) * (x - 12) + (y - 20) * (y - 20)) / 8.0f);
  const float *maps[1] = {map};
  float pred[2] = {12, 20}, truth[2] = {25, 10};
  const char *path = tmp_file(t, "truth.png");
  assert_int_equal(sp_heatmaps_png(path, img, W, H, 3, 1, maps, NULL, pred, truth, 160), 0);
  cairo_surface_t *s = load_png(path);
  /* Panel at (6, 6), scale 4: the truth's centre is (6 + 25.5 * 4, 6 + 10.5 * 4). */
  int cx = 6 + 102, cy = 6 + 42;
  assert_true(green_pixels(s, cx, cy, 10) > 20);
  assert_true(colour_diff(pixel(s, cx, cy), 0x464646) <= 2); /* a ring: the face shows in it */
  /* The ring is the true point's alone: none by the prediction... */
  assert_int_equal(green_pixels(s, 6 + 50, 6 + 82, 12), 0);
  /* ...and the key under the panel names both markers: a green sample there. */
  int panel_bottom = 6 + 120;
  long key = 0;
  for (int y = panel_bottom; y < cairo_image_surface_get_height(s); y++)
    for (int x = 0; x < cairo_image_surface_get_width(s); x++) {
      uint32_t p = pixel(s, x, y);
      key += channel(p, 1) > channel(p, 0) + 60 && channel(p, 1) > channel(p, 2) + 60;
    }
  assert_true(key > 5);
  int with_h = cairo_image_surface_get_height(s);
  cairo_surface_destroy(s);
  /* Without truth (predict-time use): no ring, no key row. */
  assert_int_equal(sp_heatmaps_png(path, img, W, H, 3, 1, maps, NULL, pred, NULL, 160), 0);
  s = load_png(path);
  assert_int_equal(green_pixels(s, 0, 0, -1), 0);
  assert_true(cairo_image_surface_get_height(s) < with_h);
  cairo_surface_destroy(s);
}

static void filter_tiles_follow_the_weights(void **state) {
  tmp_t *t = *state;
  /* Filter 0: +1 left column, 0 middle, -1 right; filter 1 constant. */
  float w[2 * 9] = {1, 0, -1, 1, 0, -1, 1, 0, -1, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f};
  const char *path = tmp_file(t, "filters.png");
  assert_int_equal(sp_filters_png(path, w, 2, 1, 3, 3, 24), 0);
  cairo_surface_t *s = load_png(path);
  /* gap 3, 8x8 px per weight, two tiles in a row. */
  assert_int_equal(cairo_image_surface_get_width(s), 3 + 2 * 27);
  assert_int_equal(cairo_image_surface_get_height(s), 3 + 27);
  assert_true(luma(pixel(s, 3 + 4, 3 + 12)) > 250);
  assert_true(luma(pixel(s, 3 + 20, 3 + 12)) < 5);
  assert_true(fabs(luma(pixel(s, 3 + 12, 3 + 12)) - 127.5) < 2);
  assert_true(fabs(luma(pixel(s, 30 + 12, 3 + 12)) - 127.5) < 2);
  cairo_surface_destroy(s);

  /* RGB: a filter that only weights the red input is a red tile; one that
   * weights blue top and nothing below goes blue to black. */
  float c[2 * 3 * 4] = {0};
  for (int i = 0; i < 4; i++) c[i] = 0.5f;      /* filter 0, red */
  c[12 + 8 + 0] = c[12 + 8 + 1] = 2.0f;         /* filter 1, blue, top row */
  assert_int_equal(sp_filters_png(path, c, 2, 3, 2, 2, 16), 0);
  s = load_png(path);
  assert_true(colour_diff(pixel(s, 2 + 8, 2 + 8), 0xff0000) <= 1);
  assert_true(colour_diff(pixel(s, 2 + 18 + 8, 2 + 4), 0x0000ff) <= 1);
  assert_true(colour_diff(pixel(s, 2 + 18 + 8, 2 + 12), 0x000000) <= 1);
  cairo_surface_destroy(s);
  assert_int_equal(sp_filters_png(path, w, 2, 1, 3, 3, 2), -1);
  assert_non_null(strstr(sp_last_error(), "filters.png"));
}

/* ---- report page ---- */

static const char *const void_tags[] = {"meta", "img", "br", "!DOCTYPE", NULL};

/* Every opened element is closed in order (void elements excepted). */
static void assert_balanced_html(const char *html) {
  char stack[64][16];
  int depth = 0;
  for (const char *p = strchr(html, '<'); p; p = strchr(p + 1, '<')) {
    int closing = p[1] == '/';
    const char *name = p + 1 + closing;
    size_t n = strcspn(name, " >\n");
    assert_true(n > 0 && n < 16);
    char tag[16];
    memcpy(tag, name, n);
    tag[n] = 0;
    int is_void = 0;
    for (int i = 0; void_tags[i]; i++) is_void |= strcmp(tag, void_tags[i]) == 0;
    if (is_void) continue;
    if (!closing) {
      assert_true(depth < 64);
      strcpy(stack[depth++], tag);
    } else {
      if (depth == 0 || strcmp(stack[depth - 1], tag) != 0)
        fail_msg("</%s> closes <%s>", tag, depth ? stack[depth - 1] : "(nothing)");
      depth--;
    }
  }
  assert_int_equal(depth, 0);
}

static void report_page_lists_figures_and_metrics(void **state) {
  tmp_t *t = *state;
  const char *keys[3] = {"mean_px", "nme_io", "a<b & \"c\""};
  const char *values[3] = {"3.21", "0.0412", "<script>alert(1)</script>"};
  sp_report_item items[4] = {
      {"Loss", "loss.png", "Training and validation loss per epoch."},
      {"CED", "ced plot#1.png", "Cumulative error distribution.\n\nNME by inter-ocular distance."},
      {"Worst & best", "grid.png", NULL},
      {"Notes", NULL, "text only"},
  };
  const char *path = tmp_file(t, "index.html");
  assert_int_equal(sp_report_index_html(path, "Run <imm-nose>", 3, keys, values, 4, items), 0);
  char *html = read_text(path);
  assert_true(strncmp(html, "<!DOCTYPE html>", 15) == 0);
  assert_non_null(strstr(html, "<meta charset=\"utf-8\">"));
  assert_non_null(strstr(html, "src=\"loss.png\""));
  assert_non_null(strstr(html, "src=\"ced%20plot%231.png\""));
  assert_non_null(strstr(html, "src=\"grid.png\""));
  assert_non_null(strstr(html, "3.21"));
  assert_non_null(strstr(html, "0.0412"));
  assert_non_null(strstr(html, "mean_px"));
  assert_non_null(strstr(html, "Run &lt;imm-nose&gt;"));
  assert_non_null(strstr(html, "a&lt;b &amp; &quot;c&quot;"));
  assert_non_null(strstr(html, "Worst &amp; best"));
  assert_null(strstr(html, "<script")); /* values are text, never markup */
  assert_null(strstr(html, "http"));    /* self-contained: nothing fetched */
  assert_non_null(strstr(html, "</p>\n<p>NME by"));
  assert_balanced_html(html);
  free(html);
  assert_no_temporaries(t->dir);
  assert_int_equal(sp_report_index_html(path, NULL, 1, keys, NULL, 0, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "index.html"));
}

/* ---- failures ---- */

static void unwritable_paths_give_errors_naming_them(void **state) {
  tmp_t *t = *state;
  const char *missing = "/nonexistent-spry-dir/out.png";
  double v[2] = {0, 1};
  sp_series s = {"s", v, v, 2};
  uint8_t img[16 * 16] = {0};
  float pt[2] = {3, 3}, map[16 * 16] = {0}, wts[9] = {0};
  const float *maps[1] = {map};
  sp_grid_cell cell = {img, 16, 16, 1, pt, pt, 1, "c", NULL};
  assert_int_equal(sp_plot_lines(missing, 400, 300, "t", NULL, NULL, 1, &s, 0), -1);
  assert_non_null(strstr(sp_last_error(), missing));
  assert_int_equal(sp_draw_keypoints_png(missing, img, 16, 16, 1, pt, pt, 1, 2, 0), -1);
  assert_non_null(strstr(sp_last_error(), missing));
  assert_int_equal(sp_keypoint_grid_png(missing, "t", 1, 1, &cell, 64, 0), -1);
  assert_non_null(strstr(sp_last_error(), missing));
  assert_int_equal(sp_heatmaps_png(missing, img, 16, 16, 1, 1, maps, NULL, NULL, NULL, 64), -1);
  assert_non_null(strstr(sp_last_error(), missing));
  assert_int_equal(sp_filters_png(missing, wts, 1, 1, 3, 3, 12), -1);
  assert_non_null(strstr(sp_last_error(), missing));
  assert_int_equal(sp_report_index_html("/nonexistent-spry-dir/index.html", "t", 0, NULL, NULL, 0, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "/nonexistent-spry-dir/index.html"));

  /* A directory in the way: the rename fails, the directory is untouched and
   * no temporary file is left next to it. */
  const char *dir_path = tmp_file(t, "taken.png");
  assert_int_equal(mkdir(dir_path, 0755), 0);
  assert_int_equal(sp_plot_lines(dir_path, 400, 300, "t", NULL, NULL, 1, &s, 0), -1);
  assert_non_null(strstr(sp_last_error(), "taken.png"));
  struct stat st;
  assert_int_equal(stat(dir_path, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_no_temporaries(t->dir);

  /* Writing over an existing figure replaces it whole. */
  const char *again = tmp_file(t, "again.png");
  assert_int_equal(sp_plot_lines(again, 400, 300, "first", NULL, NULL, 1, &s, 0), 0);
  assert_int_equal(sp_plot_lines(again, 500, 300, "second", NULL, NULL, 1, &s, 0), 0);
  cairo_surface_t *png = load_png(again);
  assert_int_equal(cairo_image_surface_get_width(png), 500);
  cairo_surface_destroy(png);
  assert_no_temporaries(t->dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(line_chart_of_identity_is_the_diagonal, setup, teardown),
      cmocka_unit_test_setup_teardown(nan_points_leave_a_gap_and_empty_series_are_fine, setup, teardown),
      cmocka_unit_test_setup_teardown(log_axis_straightens_powers_and_skips_nonpositive, setup, teardown),
      cmocka_unit_test_setup_teardown(series_colours_are_distinct_and_legend_drawn, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_chart_arguments_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(keypoint_overlay_puts_colours_at_the_points, setup, teardown),
      cmocka_unit_test_setup_teardown(keypoint_grid_shows_every_cell, setup, teardown),
      cmocka_unit_test(colormap_rises_in_lightness),
      cmocka_unit_test_setup_teardown(fixed_y_range_and_note, setup, teardown),
      cmocka_unit_test_setup_teardown(heatmap_is_bright_where_the_map_peaks, setup, teardown),
      cmocka_unit_test_setup_teardown(heatmap_marks_the_true_point, setup, teardown),
      cmocka_unit_test_setup_teardown(filter_tiles_follow_the_weights, setup, teardown),
      cmocka_unit_test_setup_teardown(report_page_lists_figures_and_metrics, setup, teardown),
      cmocka_unit_test_setup_teardown(unwritable_paths_give_errors_naming_them, setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  /* Font caches would otherwise read as leaks under make asan. */
  sp_plot_release_caches();
  return rc;
}
