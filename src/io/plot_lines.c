/* Line charts: loss and validation curves, CED plots. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/plot_internal.h"

#define MAX_TICKS 64

typedef struct {
  int log;
  double lo, hi; /* axis limits; positive when log */
  int n;
  double v[MAX_TICKS];
  char label[MAX_TICKS][32];
  int n_minor; /* unlabelled grid lines (log axes) */
  double minor[MAX_TICKS];
} axis;

static int usable(double x, double y, int log_y) { return isfinite(x) && isfinite(y) && (!log_y || y > 0); }

/* The smallest of 1, 2, 5 x 10^k that is >= raw. */
static double nice_step(double raw) {
  double p = pow(10.0, floor(log10(raw)));
  double m = raw / p;
  double s = m <= 1.0 + 1e-9 ? 1 : m <= 2.0 + 1e-9 ? 2 : m <= 5.0 + 1e-9 ? 5 : 10;
  return s * p;
}

/* "1e+06" -> "1e6", "2.5e-05" -> "2.5e-5": shorter labels, same meaning. */
static void compact_exponent(char *buf) {
  char *e = strchr(buf, 'e');
  if (!e) return;
  char *src = e + 1, *dst = e + 1;
  if (*src == '+')
    src++;
  else if (*src == '-')
    *dst++ = *src++;
  while (*src == '0' && src[1]) src++;
  memmove(dst, src, strlen(src) + 1);
}

static void format_tick(double v, char *buf, size_t n) {
  snprintf(buf, n, "%g", v);
  compact_exponent(buf);
}

static void format_linear(double v, double step, double maxabs, char *buf, size_t n) {
  if (v == 0) {
    snprintf(buf, n, "0");
  } else if (maxabs >= 1e6 || step < 1e-4) {
    /* Exponent form with just enough digits to tell neighbours apart. */
    int sig = (int)floor(log10(maxabs)) - (int)floor(log10(step)) + 1;
    sig = sig < 1 ? 1 : sig > 15 ? 15 : sig;
    snprintf(buf, n, "%.*g", sig, v);
    compact_exponent(buf);
  } else {
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-6);
    snprintf(buf, n, "%.*f", dec, v);
  }
}

static void axis_linear(axis *a, double lo, double hi, int target) {
  memset(a, 0, sizeof *a);
  double mag = fmax(fabs(lo), fabs(hi));
  if (!(hi - lo > mag * 1e-9)) { /* one value (or all equal): centre it */
    double d = mag > 0 ? mag * 0.1 : 1.0;
    lo -= d;
    hi += d;
  }
  double step = nice_step((hi - lo) / (target < 1 ? 1 : target));
  a->lo = floor(lo / step + 1e-9) * step;
  a->hi = ceil(hi / step - 1e-9) * step;
  if (!(a->hi > a->lo)) a->hi = a->lo + step;
  int count = (int)lround((a->hi - a->lo) / step) + 1;
  if (count > MAX_TICKS) count = MAX_TICKS;
  double maxabs = fmax(fabs(a->lo), fabs(a->hi));
  for (int i = 0; i < count; i++) {
    double v = a->lo + i * step;
    if (fabs(v) < step * 1e-6) v = 0; /* no "-0" or "1e-17" at the origin */
    a->v[i] = v;
    format_linear(v, step, maxabs, a->label[i], sizeof a->label[i]);
  }
  a->n = count;
}

static void axis_add(double *v, int *n, double x) {
  if (*n < MAX_TICKS) v[(*n)++] = x;
}

static void axis_log(axis *a, double lo, double hi, int target) {
  memset(a, 0, sizeof *a);
  a->log = 1;
  double elo = floor(log10(lo) + 1e-12), ehi = ceil(log10(hi) - 1e-12);
  if (ehi <= elo) ehi = elo + 1;
  int decades = (int)(ehi - elo);
  static const double mant[3] = {1, 2, 5};
  if (decades <= 3) {
    /* Limits at the nearest 1-2-5 values around the data, not whole decades:
     * a loss between 0.3 and 0.9 should fill the plot. */
    double lower = 0, upper = 0;
    for (double e = elo - 1; e <= ehi; e++)
      for (int m = 0; m < 3; m++) {
        double c = mant[m] * pow(10.0, e);
        if (c <= lo * (1 + 1e-9)) lower = c;
        if (upper == 0 && c >= hi * (1 - 1e-9) && c > lower) upper = c;
      }
    if (upper <= lower) upper = lower * 2.5;
    a->lo = lower;
    a->hi = upper;
    int labelled = 0, multiples = 0;
    for (double e = elo - 1; e <= ehi; e++)
      for (int m = 1; m <= 9; m++) {
        double c = m * pow(10.0, e);
        if (c < lower * (1 - 1e-9) || c > upper * (1 + 1e-9)) continue;
        multiples++;
        labelled += m == 1 || m == 2 || m == 5;
      }
    /* Within about one decade 1-2-5 leaves two or three labels: label every
     * integer multiple then; over three decades, only the powers of ten. */
    int mode = labelled < 4 && multiples <= target + 2 ? 0 : labelled <= target + 2 ? 1 : 2;
    for (double e = elo - 1; e <= ehi; e++)
      for (int m = 1; m <= 9; m++) {
        double c = m * pow(10.0, e);
        if (c < lower * (1 - 1e-9) || c > upper * (1 + 1e-9)) continue;
        int main_tick = mode == 0 || m == 1 || (mode == 1 && (m == 2 || m == 5));
        if (main_tick && a->n < MAX_TICKS) {
          a->v[a->n] = c;
          format_tick(c, a->label[a->n], sizeof a->label[a->n]);
          a->n++;
        } else if (!main_tick) {
          axis_add(a->minor, &a->n_minor, c);
        }
      }
    return;
  }
  int k = (decades + target - 1) / (target < 1 ? 1 : target);
  if (k < 1) k = 1;
  ehi = elo + ceil((double)decades / k) * k;
  a->lo = pow(10.0, elo);
  a->hi = pow(10.0, ehi);
  for (double e = elo; e <= ehi; e++) {
    double c = pow(10.0, e);
    if (((int)(e - elo)) % k == 0) {
      if (a->n < MAX_TICKS) {
        a->v[a->n] = c;
        format_tick(c, a->label[a->n], sizeof a->label[a->n]);
        a->n++;
      }
    } else {
      axis_add(a->minor, &a->n_minor, c);
    }
    /* Over a few decades the 2..9 lines still help reading values. */
    if (k == 1 && decades <= 6 && e < ehi)
      for (int m = 2; m <= 9; m++) axis_add(a->minor, &a->n_minor, m * c);
  }
}

static double axis_frac(const axis *a, double v) {
  if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
  return (v - a->lo) / (a->hi - a->lo);
}

static double axis_widest(cairo_t *cr, const axis *a) {
  double w = 0;
  for (int i = 0; i < a->n; i++) w = fmax(w, sp_plot_text_width(cr, a->label[i]));
  return w;
}

typedef struct {
  double x0, y0, w, h; /* plot area in pixels */
  const axis *ax, *ay;
} frame;

static double px_x(const frame *f, double x) { return f->x0 + axis_frac(f->ax, x) * f->w; }
static double px_y(const frame *f, double y) { return f->y0 + (1 - axis_frac(f->ay, y)) * f->h; }

/* Pixel-centred coordinate so 1-px lines are crisp, not two grey rows. */
static double crisp(double v) { return floor(v) + 0.5; }

static void draw_grid_and_axes(cairo_t *cr, const frame *f, double fs) {
  double tick = fs * 0.4, gap = fs * 0.3;
  cairo_set_line_width(cr, 1.0);
  if (f->ay->n_minor > 0) {
    cairo_set_source_rgb(cr, 0.93, 0.93, 0.93);
    for (int i = 0; i < f->ay->n_minor; i++) {
      double y = crisp(px_y(f, f->ay->minor[i]));
      cairo_move_to(cr, f->x0, y);
      cairo_line_to(cr, f->x0 + f->w, y);
    }
    cairo_stroke(cr);
  }
  cairo_set_source_rgb(cr, 0.87, 0.87, 0.87);
  for (int i = 0; i < f->ax->n; i++) {
    double x = crisp(px_x(f, f->ax->v[i]));
    cairo_move_to(cr, x, f->y0);
    cairo_line_to(cr, x, f->y0 + f->h);
  }
  for (int i = 0; i < f->ay->n; i++) {
    double y = crisp(px_y(f, f->ay->v[i]));
    cairo_move_to(cr, f->x0, y);
    cairo_line_to(cr, f->x0 + f->w, y);
  }
  cairo_stroke(cr);

  cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
  cairo_rectangle(cr, crisp(f->x0), crisp(f->y0), floor(f->w), floor(f->h));
  for (int i = 0; i < f->ax->n; i++) {
    double x = crisp(px_x(f, f->ax->v[i]));
    cairo_move_to(cr, x, crisp(f->y0 + f->h));
    cairo_line_to(cr, x, crisp(f->y0 + f->h) + tick);
  }
  for (int i = 0; i < f->ay->n; i++) {
    double y = crisp(px_y(f, f->ay->v[i]));
    cairo_move_to(cr, crisp(f->x0), y);
    cairo_line_to(cr, crisp(f->x0) - tick, y);
  }
  cairo_stroke(cr);

  cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
  sp_plot_font(cr, fs, 0);
  for (int i = 0; i < f->ax->n; i++)
    sp_plot_text(cr, px_x(f, f->ax->v[i]), f->y0 + f->h + tick + gap, 0.5, 0, f->ax->label[i]);
  for (int i = 0; i < f->ay->n; i++)
    sp_plot_text(cr, f->x0 - tick - gap, px_y(f, f->ay->v[i]), 1, 0.5, f->ay->label[i]);
}

static void draw_series(cairo_t *cr, const frame *f, int idx, const sp_series *s, int log_y, double lw) {
  int finite = 0;
  for (int j = 0; j < s->n; j++) finite += usable(s->x[j], s->y[j], log_y);
  if (finite == 0) return;
  sp_plot_set_rgb(cr, sp_plot_series_rgb(idx));
  cairo_set_line_width(cr, lw);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  if (idx >= 10) {
    double dash[2] = {lw * 3, lw * 2};
    cairo_set_dash(cr, dash, 2, 0);
  }
  int pen_down = 0;
  for (int j = 0; j < s->n; j++) {
    if (!usable(s->x[j], s->y[j], log_y)) {
      pen_down = 0;
      continue;
    }
    double x = px_x(f, s->x[j]), y = px_y(f, s->y[j]);
    if (pen_down)
      cairo_line_to(cr, x, y);
    else
      cairo_move_to(cr, x, y);
    pen_down = 1;
  }
  cairo_stroke(cr);
  cairo_set_dash(cr, NULL, 0, 0);
  /* Dots where a reader wants to see individual values (few points), and on
   * isolated points, which a line alone would not show at all. */
  for (int j = 0; j < s->n; j++) {
    if (!usable(s->x[j], s->y[j], log_y)) continue;
    int prev = j > 0 && usable(s->x[j - 1], s->y[j - 1], log_y);
    int next = j + 1 < s->n && usable(s->x[j + 1], s->y[j + 1], log_y);
    if (finite > 40 && (prev || next)) continue;
    cairo_new_sub_path(cr);
    cairo_arc(cr, px_x(f, s->x[j]), px_y(f, s->y[j]), lw * 1.5, 0, 2 * M_PI);
  }
  cairo_fill(cr);
}

/* How many curve samples fall inside a box: used to put the legend where it
 * hides the least. Segments are sampled too, since a sparse curve crosses
 * boxes that hold none of its points. */
static long points_in_box(const frame *f, int n_series, const sp_series *series, int log_y, double bx, double by,
                          double bw, double bh) {
  long count = 0;
  for (int i = 0; i < n_series; i++) {
    const sp_series *s = &series[i];
    double px = 0, py = 0;
    int have_prev = 0;
    for (int j = 0; j < s->n; j++) {
      if (!usable(s->x[j], s->y[j], log_y)) {
        have_prev = 0;
        continue;
      }
      double x = px_x(f, s->x[j]), y = px_y(f, s->y[j]);
      int steps = have_prev ? 4 : 1;
      for (int t = 1; t <= steps; t++) {
        double u = (double)t / steps;
        double sx = have_prev ? px + (x - px) * u : x, sy = have_prev ? py + (y - py) * u : y;
        if (sx >= bx && sx <= bx + bw && sy >= by && sy <= by + bh) count++;
      }
      px = x;
      py = y;
      have_prev = 1;
    }
  }
  return count;
}

static void draw_legend(cairo_t *cr, const frame *f, int n_series, const sp_series *series, int log_y, const char *note,
                        double fs, double lw) {
  double lfs = fs * 0.92, row = lfs * 1.45, pad = lfs * 0.6, swatch = lfs * 2.2;
  sp_plot_font(cr, lfs, 0);
  int rows = 0;
  double text_w = 0, max_text = f->w * 0.6;
  char buf[256];
  for (int i = 0; i < n_series; i++) {
    if (!series[i].label || !*series[i].label) continue;
    rows++;
    sp_plot_text_fit(cr, series[i].label, max_text, buf, sizeof buf);
    text_w = fmax(text_w, sp_plot_text_width(cr, buf));
  }
  /* The note is a last row without a swatch: it is about the chart, not a series. */
  int has_note = note && *note;
  if (has_note) {
    sp_plot_text_fit(cr, note, max_text + swatch + pad, buf, sizeof buf);
    text_w = fmax(text_w, sp_plot_text_width(cr, buf) - swatch - pad);
    rows++;
  }
  int fit_rows = (int)((f->h - 2 * pad) / row);
  if (rows > fit_rows) rows = fit_rows;
  if (rows <= 0) return;
  double bw = pad * 2 + swatch + pad + text_w, bh = pad * 2 + rows * row - (row - lfs * 1.2);
  double inset = fs * 0.6;
  /* Top-right first on ties: where readers look for a legend. */
  double cx[4] = {f->x0 + f->w - inset - bw, f->x0 + inset, f->x0 + f->w - inset - bw, f->x0 + inset};
  double cy[4] = {f->y0 + inset, f->y0 + inset, f->y0 + f->h - inset - bh, f->y0 + f->h - inset - bh};
  int best = 0;
  long best_count = -1;
  for (int c = 0; c < 4; c++) {
    long n = points_in_box(f, n_series, series, log_y, cx[c], cy[c], bw, bh);
    if (best_count < 0 || n < best_count) {
      best = c;
      best_count = n;
    }
  }
  double bx = crisp(cx[best]), by = crisp(cy[best]);
  cairo_rectangle(cr, bx, by, floor(bw), floor(bh));
  cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
  cairo_fill_preserve(cr);
  cairo_set_source_rgb(cr, 0.75, 0.75, 0.75);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  int r = 0, series_rows = has_note ? rows - 1 : rows;
  for (int i = 0; i < n_series && r < series_rows; i++) {
    if (!series[i].label || !*series[i].label) continue;
    double y = by + pad + r * row + lfs * 0.6;
    sp_plot_set_rgb(cr, sp_plot_series_rgb(i));
    cairo_set_line_width(cr, lw);
    if (i >= 10) {
      double dash[2] = {lw * 3, lw * 2};
      cairo_set_dash(cr, dash, 2, 0);
    }
    cairo_move_to(cr, bx + pad, y);
    cairo_line_to(cr, bx + pad + swatch, y);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    sp_plot_text_fit(cr, series[i].label, max_text, buf, sizeof buf);
    sp_plot_text(cr, bx + pad * 2 + swatch, y, 0, 0.5, buf);
    r++;
  }
  if (has_note) {
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    sp_plot_text_fit(cr, note, max_text + swatch + pad, buf, sizeof buf);
    sp_plot_text(cr, bx + pad, by + pad + r * row + lfs * 0.6, 0, 0.5, buf);
  }
}

static int check_chart_args(const char *png_path, const char *path, int w, int h, int n_series,
                            const sp_series *series) {
  if (!png_path || !*png_path) return sp_error_set("plot: no output path given");
  if (w < 160 || h < 120 || w > SP_PLOT_MAX_SIDE || h > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: chart size %dx%d outside 160..%d x 120..%d", path, w, h, SP_PLOT_MAX_SIDE,
                        SP_PLOT_MAX_SIDE);
  if (n_series < 0 || (n_series > 0 && !series)) return sp_error_set("%s: bad series list (%d series)", path, n_series);
  for (int i = 0; i < n_series; i++) {
    if (series[i].n < 0 || (series[i].n > 0 && (!series[i].x || !series[i].y)))
      return sp_error_set("%s: series %d (%s) has n = %d but no data", path, i,
                          series[i].label ? series[i].label : "unlabelled", series[i].n);
  }
  return 0;
}

typedef struct {
  double xlo, xhi, ylo, yhi;
  long n_points; /* usable points over all series */
} data_range;

/* The limits of the usable points; [0, 1] x [0, 1] (log: [1, 10]) when there
 * are none. -1 when the span cannot be mapped to pixels. */
static int find_data_range(const char *path, int n_series, const sp_series *series, int log_y, data_range *d) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  long n_points = 0;
  for (int i = 0; i < n_series; i++)
    for (int j = 0; j < series[i].n; j++) {
      double x = series[i].x[j], y = series[i].y[j];
      if (!usable(x, y, log_y)) continue;
      xlo = fmin(xlo, x);
      xhi = fmax(xhi, x);
      ylo = fmin(ylo, y);
      yhi = fmax(yhi, y);
      n_points++;
    }
  /* Spans beyond double range (-1e308..1e308) cannot be mapped to pixels. */
  if (n_points > 0 && (!isfinite(xhi - xlo) || !isfinite(yhi - ylo)))
    return sp_error_set("%s: data range too wide to plot (x %g..%g, y %g..%g)", path, xlo, xhi, ylo, yhi);
  if (n_points == 0) {
    xlo = 0;
    xhi = 1;
    ylo = log_y ? 1 : 0;
    yhi = log_y ? 10 : 1;
  }
  *d = (data_range){xlo, xhi, ylo, yhi, n_points};
  return 0;
}

/* Sizes of one chart, all measured in font sizes. */
typedef struct {
  int w, h;
  double fs, pad, tick, gap, lw;
  int has_title, has_xl, has_yl;
} chart_style;

static chart_style chart_style_for(int w, int h, const char *title, const char *xlabel, const char *ylabel) {
  /* Font size follows the figure's area so a thumbnail and a full-page chart
   * both stay readable; everything else is measured in font sizes. */
  double fs = sqrt((double)w * h) / 48;
  fs = fs < 9 ? 9 : fs > 18 ? 18 : fs;
  double pad = fs * 0.8, tick = fs * 0.4, gap = fs * 0.3, lw = fmax(1.5, fs / 7);
  int has_title = title && *title, has_xl = xlabel && *xlabel, has_yl = ylabel && *ylabel;
  return (chart_style){w, h, fs, pad, tick, gap, lw, has_title, has_xl, has_yl};
}

/* Both axes and the plot area between the margins their labels need. */
static frame layout_frame(cairo_t *cr, const chart_style *st, const data_range *d, int log_y, axis *ax, axis *ay) {
  const double fs = st->fs, pad = st->pad, tick = st->tick, gap = st->gap;
  double top = pad + (st->has_title ? fs * 1.25 * 1.2 + fs * 0.7 : fs * 0.4);
  double bottom = pad + tick + gap + fs * 1.2 + (st->has_xl ? fs * 1.5 : 0);
  double ph = st->h - top - bottom;

  int ty = (int)(ph / (fs * 2.8));
  ty = ty < 2 ? 2 : ty > 10 ? 10 : ty;
  sp_plot_font(cr, fs, 0);
  if (log_y)
    axis_log(ay, d->ylo, d->yhi, ty);
  else
    axis_linear(ay, d->ylo, d->yhi, ty);
  double left = pad + (st->has_yl ? fs * 1.6 : 0) + axis_widest(cr, ay) + gap + tick;
  double right = pad + fs * 1.5;
  double pw = st->w - left - right;
  int tx = (int)(pw / (fs * 5));
  tx = tx < 2 ? 2 : tx > 12 ? 12 : tx;
  for (;;) { /* fewer x ticks until their labels do not collide */
    axis_linear(ax, d->xlo, d->xhi, tx);
    if (tx <= 2 || (axis_widest(cr, ax) + fs * 2) * (ax->n - 1) <= pw) break;
    tx--;
  }
  return (frame){left, top, pw, ph, ax, ay};
}

/* The curves, clipped to the plot area, then the legend (or "no data"). */
static void draw_plot_area(cairo_t *cr, const frame *f, const chart_style *st, int n_series, const sp_series *series,
                           int log_y, const char *note, long n_points) {
  const double lw = st->lw;
  cairo_save(cr);
  /* A little slack so dots on the limits are not cut in half. */
  cairo_rectangle(cr, f->x0 - lw * 2, f->y0 - lw * 2, f->w + lw * 4, f->h + lw * 4);
  cairo_clip(cr);
  for (int i = 0; i < n_series; i++) draw_series(cr, f, i, &series[i], log_y, lw);
  cairo_restore(cr);

  if (n_points == 0) {
    cairo_set_source_rgb(cr, 0.55, 0.55, 0.55);
    sp_plot_font(cr, st->fs * 1.2, 0);
    sp_plot_text(cr, f->x0 + f->w / 2, f->y0 + f->h / 2, 0.5, 0.5, "no data");
  } else {
    draw_legend(cr, f, n_series, series, log_y, note, st->fs, lw);
  }
}

/* Title over the plot area, x label under it, y label turned along it. */
static void draw_titles(cairo_t *cr, const frame *f, const chart_style *st, const char *title, const char *xlabel,
                        const char *ylabel) {
  const double fs = st->fs, pad = st->pad;
  const int w = st->w, h = st->h;
  char buf[512];
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  if (st->has_title) {
    sp_plot_font(cr, fs * 1.25, 1);
    sp_plot_text_fit(cr, title, w - 2 * pad, buf, sizeof buf);
    double tw = sp_plot_text_width(cr, buf);
    /* Centred over the plot area, pulled back inside the figure if long. */
    double cx = f->x0 + f->w / 2;
    if (cx - tw / 2 < pad) cx = pad + tw / 2;
    if (cx + tw / 2 > w - pad) cx = w - pad - tw / 2;
    sp_plot_text(cr, cx, pad, 0.5, 0, buf);
  }
  sp_plot_font(cr, fs, 0);
  if (st->has_xl) {
    sp_plot_text_fit(cr, xlabel, f->w, buf, sizeof buf);
    sp_plot_text(cr, f->x0 + f->w / 2, h - pad, 0.5, 1, buf);
  }
  if (st->has_yl) {
    sp_plot_text_fit(cr, ylabel, f->h, buf, sizeof buf);
    cairo_save(cr);
    cairo_translate(cr, pad, f->y0 + f->h / 2);
    cairo_rotate(cr, -M_PI / 2);
    sp_plot_text(cr, 0, 0, 0.5, 0, buf);
    cairo_restore(cr);
  }
}

int sp_plot_lines(const char *png_path, int w, int h, const char *title, const char *xlabel, const char *ylabel,
                  int n_series, const sp_series *series, int log_y) {
  return sp_plot_lines_opt(png_path, w, h, title, xlabel, ylabel, n_series, series,
                           &(sp_plot_lines_options){.log_y = log_y});
}

int sp_plot_lines_opt(const char *png_path, int w, int h, const char *title, const char *xlabel, const char *ylabel,
                      int n_series, const sp_series *series, const sp_plot_lines_options *o) {
  const char *path = png_path ? png_path : "(null)";
  const sp_plot_lines_options none = {0};
  if (!o) o = &none;
  const int log_y = o->log_y != 0;
  if (check_chart_args(png_path, path, w, h, n_series, series) != 0) return -1;
  const int fixed_y = o->y_min < o->y_max;
  if (fixed_y && (!isfinite(o->y_min) || !isfinite(o->y_max) || (log_y && o->y_min <= 0)))
    return sp_error_set("%s: y range %g..%g cannot be drawn%s", path, o->y_min, o->y_max,
                        log_y ? " on a log axis" : "");
  data_range d = {0};
  if (find_data_range(path, n_series, series, log_y, &d) != 0) return -1;
  /* A fixed range (fractions in [0, 1], say) means the same thing on every
   * chart, whatever this run's data spans. */
  if (fixed_y) d.ylo = o->y_min, d.yhi = o->y_max;

  cairo_surface_t *surface;
  cairo_t *cr;
  if (sp_plot_begin(path, w, h, &surface, &cr) != 0) return -1;
  chart_style st = chart_style_for(w, h, title, xlabel, ylabel);
  axis ay, ax;
  frame f = layout_frame(cr, &st, &d, log_y, &ax, &ay);
  draw_grid_and_axes(cr, &f, st.fs);
  draw_plot_area(cr, &f, &st, n_series, series, log_y, o->note, d.n_points);
  draw_titles(cr, &f, &st, title, xlabel, ylabel);
  return sp_plot_finish(path, surface, cr);
}
