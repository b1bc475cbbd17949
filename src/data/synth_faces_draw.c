/* Draws a posed synthetic face with cairo. Every landmark-bearing contour is
 * a Catmull-Rom spline *through* the landmarks (jaw outline, eyelids, lips),
 * so the reported points lie on the drawn features by construction; shading
 * and details are layered on top without moving those edges. */
#include <math.h>
#include <string.h>

#include "data/synth_faces_internal.h"

#define PI_F 3.14159265358979f

typedef float pt2[2];

static void rgb(cairo_t *cr, const float *c, float mul) {
  cairo_set_source_rgb(cr, fminf(1, c[0] * mul), fminf(1, c[1] * mul), fminf(1, c[2] * mul));
}

static void rgba(cairo_t *cr, const float *c, float mul, float a) {
  cairo_set_source_rgba(cr, fminf(1, c[0] * mul), fminf(1, c[1] * mul), fminf(1, c[2] * mul), a);
}

/* A disc of radius r around (x, y) in gray level `gray` whose opacity fades
 * from alpha at radius r0 to nothing at its rim: eye sockets, highlights. */
static void radial_disc(cairo_t *cr, double x, double y, double r0, double r, double gray, double alpha) {
  cairo_pattern_t *p = cairo_pattern_create_radial(x, y, r0, x, y, r);
  cairo_pattern_add_color_stop_rgba(p, 0, gray, gray, gray, alpha);
  cairo_pattern_add_color_stop_rgba(p, 1, gray, gray, gray, 0);
  cairo_set_source(cr, p);
  cairo_arc(cr, x, y, r, 0, 2 * PI_F);
  cairo_fill(cr);
  cairo_pattern_destroy(p);
}

static void lerp3(float *out, const float *a, const float *b, float t) {
  for (int i = 0; i < 3; i++) out[i] = a[i] + (b[i] - a[i]) * t;
}

void syn_path_spline(cairo_t *cr, const float (*p)[2], int n, int closed) {
  if (n < 2) return;
  cairo_move_to(cr, p[0][0], p[0][1]);
  int segs = closed ? n : n - 1;
  for (int i = 0; i < segs; i++) {
    /* Neighbours wrap when closed and repeat the end point when open. */
    int i0 = closed ? (i - 1 + n) % n : (i > 0 ? i - 1 : 0);
    int i1 = i, i2 = (i + 1) % n;
    int i3 = closed ? (i + 2) % n : (i + 2 < n ? i + 2 : n - 1);
    float c1x = p[i1][0] + (p[i2][0] - p[i0][0]) / 6, c1y = p[i1][1] + (p[i2][1] - p[i0][1]) / 6;
    float c2x = p[i2][0] - (p[i3][0] - p[i1][0]) / 6, c2y = p[i2][1] - (p[i3][1] - p[i1][1]) / 6;
    cairo_curve_to(cr, c1x, c1y, c2x, c2y, p[i2][0], p[i2][1]);
  }
  if (closed) cairo_close_path(cr);
}

static void gather(const syn_geom *g, const int *idx, int n, pt2 *out) {
  for (int i = 0; i < n; i++) {
    out[i][0] = g->lm[idx[i]][0];
    out[i][1] = g->lm[idx[i]][1];
  }
}

void syn_sample_look(sp_rng *r, const sp_synth_face_options *opt, syn_look *L) {
  memset(L, 0, sizeof *L);
  /* Skin from very light to very dark, with a little hue jitter. */
  static const float tones[5][3] = {{0.96f, 0.84f, 0.75f},
                                    {0.89f, 0.71f, 0.58f},
                                    {0.76f, 0.56f, 0.42f},
                                    {0.55f, 0.37f, 0.26f},
                                    {0.36f, 0.24f, 0.17f}};
  float t = sp_rng_uniform(r) * 4;
  int k = (int)t;
  if (k > 3) k = 3;
  lerp3(L->skin, tones[k], tones[k + 1], t - (float)k);
  for (int i = 0; i < 3; i++) L->skin[i] *= sp_rng_range(r, 0.95f, 1.05f);
  /* Lips: the skin, redder and darker. */
  static const float red[3] = {0.72f, 0.3f, 0.33f};
  float lip[3] = {L->skin[0] * 0.85f, L->skin[1] * 0.55f, L->skin[2] * 0.6f};
  lerp3(L->lip, lip, red, sp_rng_range(r, 0.05f, 0.35f) * (t < 2.5f ? 1.0f : 0.4f));
  static const float hair[6][3] = {{0.08f, 0.07f, 0.06f}, {0.25f, 0.17f, 0.1f},  {0.45f, 0.31f, 0.18f},
                                   {0.75f, 0.62f, 0.4f},  {0.55f, 0.27f, 0.12f}, {0.62f, 0.62f, 0.6f}};
  int h = (int)sp_rng_below(r, t > 2.5f ? 2 : 6);
  memcpy(L->hair, hair[h], sizeof L->hair);
  for (int i = 0; i < 3; i++) L->brow[i] = L->hair[i] * (h >= 3 ? 0.6f : 0.9f);
  /* Irises: light eyes only on lighter skin (a dark iris on dark skin is the
   * common case, and keeps the eye darker than the cheek). */
  static const float iris[5][3] = {
      {0.3f, 0.19f, 0.1f}, {0.16f, 0.11f, 0.08f}, {0.3f, 0.42f, 0.58f}, {0.34f, 0.42f, 0.27f}, {0.42f, 0.33f, 0.18f}};
  memcpy(L->iris, iris[sp_rng_below(r, t > 2.0f ? 2 : 5)], sizeof L->iris);
  float a = sp_rng_range(r, 0, 2 * PI_F);
  L->light[0] = cosf(a);
  L->light[1] = sinf(a);
  L->light_strength = sp_rng_range(r, 0.1f, 0.7f);
  L->hair_style = 0;
  if (sp_rng_uniform(r) < opt->hair_prob) {
    float u = sp_rng_uniform(r);
    L->hair_style = u < 0.5f ? 1 : u < 0.85f ? 2 : 3;
  }
  L->hairline = sp_rng_uniform(r);
  L->ears = sp_rng_uniform(r) < opt->ear_prob;
  for (int i = 0; i < 3; i++) L->clothes[i] = sp_rng_range(r, 0.05f, 0.9f);
}

/* Unit vectors of the face's own "down" and "right" in the image. */
static void face_axes(const syn_geom *g, float *down, float *right) {
  float dx = g->lm[8][0] - g->lm[27][0], dy = g->lm[8][1] - g->lm[27][1];
  float n = sqrtf(dx * dx + dy * dy) + 1e-6f;
  down[0] = dx / n;
  down[1] = dy / n;
  right[0] = -down[1];
  right[1] = down[0];
}

/* Point p pushed away from the face centre c by f * scale. */
static void push_out(const float *p, const float *c, float f, float s, float *out) {
  float dx = p[0] - c[0], dy = p[1] - c[1], n = sqrtf(dx * dx + dy * dy) + 1e-6f;
  out[0] = p[0] + dx / n * f * s;
  out[1] = p[1] + dy / n * f * s;
}

static void face_centre(const syn_geom *g, float *c) {
  c[0] = 0.5f * (g->lm[27][0] + g->lm[57][0]);
  c[1] = 0.5f * (g->lm[27][1] + g->lm[57][1]);
}

static void path_face(cairo_t *cr, const syn_geom *g) {
  pt2 o[17 + SYN_FOREHEAD];
  for (int i = 0; i < 17; i++) memcpy(o[i], g->lm[i], sizeof(pt2));
  memcpy(o + 17, g->forehead, sizeof(pt2) * SYN_FOREHEAD);
  syn_path_spline(cr, (const float(*)[2])o, 17 + SYN_FOREHEAD, 1);
}

/* Hair behind the head: a cap (short) or a mane down to the shoulders (long). */
static void draw_hair_back(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  if (!L->hair_style) return;
  float c[2], down[2], right[2], s = g->scale;
  face_centre(g, c);
  face_axes(g, down, right);
  pt2 o[SYN_FOREHEAD + 8];
  int n = 0;
  memcpy(o + n, g->hair_top, sizeof(pt2) * SYN_FOREHEAD);
  n += SYN_FOREHEAD;
  float len = L->hair_style == 2 ? 1.1f : 0.05f;
  static const int side_l[3] = {1, 2, 4}, side_r[3] = {12, 14, 15};
  float out = L->hair_style == 2 ? 0.3f : 0.04f;
  for (int k = 0; k < 3; k++) {
    push_out(g->lm[side_l[k]], c, out + 0.04f * (float)k, s, o[n]);
    if (k == 2) {
      o[n][0] += down[0] * len * s;
      o[n][1] += down[1] * len * s;
    }
    n++;
    if (L->hair_style != 2) break;
  }
  /* Across behind the neck to the other side. */
  for (int k = (L->hair_style == 2 ? 2 : 0); k >= 0; k--) {
    push_out(g->lm[side_r[2 - k]], c, out + 0.04f * (float)k, s, o[n]);
    if (k == 2) {
      o[n][0] += down[0] * len * s;
      o[n][1] += down[1] * len * s;
    }
    n++;
  }
  syn_path_spline(cr, (const float(*)[2])o, n, 1);
  rgb(cr, L->hair, 0.8f);
  cairo_fill(cr);
}

static void draw_body(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  float down[2], right[2], s = g->scale;
  face_axes(g, down, right);
  /* Shoulders: a wide rounded shape starting a neck's length under the chin. */
  float base[2] = {g->lm[8][0] + down[0] * 0.65f * s, g->lm[8][1] + down[1] * 0.65f * s};
  static const float sh[7][2] = {{-0.5f, 0},   {-1.9f, 0.45f}, {-2.6f, 1.6f}, {0, 4.0f},
                                 {2.6f, 1.6f}, {1.9f, 0.45f},  {0.5f, 0}};
  pt2 o[7];
  for (int k = 0; k < 7; k++) {
    o[k][0] = base[0] + (right[0] * sh[k][0] + down[0] * sh[k][1]) * s;
    o[k][1] = base[1] + (right[1] * sh[k][0] + down[1] * sh[k][1]) * s;
  }
  syn_path_spline(cr, (const float(*)[2])o, 7, 1);
  rgb(cr, L->clothes, 1);
  cairo_fill(cr);
  /* Neck, in the chin's shadow at the top. */
  cairo_move_to(cr, g->neck[0][0], g->neck[0][1]);
  for (int k = 1; k < 4; k++) cairo_line_to(cr, g->neck[k][0], g->neck[k][1]);
  cairo_close_path(cr);
  rgb(cr, L->skin, 0.78f);
  cairo_fill_preserve(cr);
  cairo_pattern_t *pat = cairo_pattern_create_linear(g->lm[8][0], g->lm[8][1], base[0], base[1]);
  cairo_pattern_add_color_stop_rgba(pat, 0, 0, 0, 0, 0.45);
  cairo_pattern_add_color_stop_rgba(pat, 1, 0, 0, 0, 0.1);
  cairo_set_source(cr, pat);
  cairo_fill(cr);
  cairo_pattern_destroy(pat);
}

static void draw_ears(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  if (!L->ears) return;
  for (int side = 0; side < 2; side++) {
    syn_path_spline(cr, (const float(*)[2])g->ear[side], 4, 1);
    rgb(cr, L->skin, 0.9f);
    cairo_fill(cr);
    /* The inner fold: a darker arc a little inside the rim. */
    pt2 in[3];
    for (int k = 0; k < 3; k++) {
      in[k][0] = 0.65f * g->ear[side][k][0] + 0.35f * g->ear[side][3][0];
      in[k][1] = 0.65f * g->ear[side][k][1] + 0.35f * g->ear[side][3][1];
    }
    syn_path_spline(cr, (const float(*)[2])in, 3, 0);
    rgba(cr, L->skin, 0.55f, 0.7f);
    cairo_set_line_width(cr, 0.03 * g->scale);
    cairo_stroke(cr);
  }
}

/* Skin, then light: a directional gradient, darker toward the silhouette
 * (centred on the projected skull centre, which shifts against the yaw), and
 * blush on the cheeks. */
static void draw_skin(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  float s = g->scale, c[2];
  face_centre(g, c);
  path_face(cr, g);
  rgb(cr, L->skin, 1);
  cairo_fill_preserve(cr);
  cairo_save(cr);
  cairo_clip(cr);
  float lx = L->light[0], ly = L->light[1], st = L->light_strength;
  cairo_pattern_t *lin = cairo_pattern_create_linear(c[0] + lx * 1.2f * s, c[1] + ly * 1.2f * s, c[0] - lx * 1.2f * s,
                                                     c[1] - ly * 1.2f * s);
  cairo_pattern_add_color_stop_rgba(lin, 0, 1, 1, 1, 0.18 * st);
  cairo_pattern_add_color_stop_rgba(lin, 0.45, 1, 1, 1, 0);
  cairo_pattern_add_color_stop_rgba(lin, 1, 0, 0, 0, 0.55 * st);
  cairo_set_source(cr, lin);
  cairo_paint(cr);
  cairo_pattern_destroy(lin);
  float sk[2] = {c[0] - g->nose_dir[0] * 0.5f * s, c[1] - g->nose_dir[1] * 0.5f * s};
  cairo_pattern_t *rad = cairo_pattern_create_radial(sk[0], sk[1], 0.55 * s, sk[0], sk[1], 1.6 * s);
  cairo_pattern_add_color_stop_rgba(rad, 0, 0, 0, 0, 0);
  cairo_pattern_add_color_stop_rgba(rad, 1, 0, 0, 0, 0.35);
  cairo_set_source(cr, rad);
  cairo_paint(cr);
  cairo_pattern_destroy(rad);
  for (int side = 0; side < 2; side++) {
    const float *e = g->lm[side ? 46 : 41], *m = g->lm[side ? 54 : 48];
    float ch[2] = {0.55f * e[0] + 0.45f * m[0], 0.55f * e[1] + 0.45f * m[1]};
    push_out(ch, c, 0.12f, s, ch);
    cairo_pattern_t *b = cairo_pattern_create_radial(ch[0], ch[1], 0, ch[0], ch[1], 0.3 * s);
    cairo_pattern_add_color_stop_rgba(b, 0, L->lip[0], L->lip[1], L->lip[2], 0.18);
    cairo_pattern_add_color_stop_rgba(b, 1, L->lip[0], L->lip[1], L->lip[2], 0);
    cairo_set_source(cr, b);
    cairo_paint(cr);
    cairo_pattern_destroy(b);
  }
  cairo_restore(cr);
  cairo_new_path(cr);
}

/* Brows: a band hanging under the landmark line (annotators mark the upper
 * edge), thick at the inner end and tapering outward. */
static void draw_brows(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  float down[2], right[2], s = g->scale;
  face_axes(g, down, right);
  for (int side = 0; side < 2; side++) {
    pt2 o[10];
    for (int t = 0; t < 5; t++) {
      int i = side ? 26 - t : 17 + t; /* outer to inner */
      float th = (0.035f + 0.045f * (float)t / 4) * s;
      o[t][0] = g->lm[i][0] - down[0] * 0.2f * th;
      o[t][1] = g->lm[i][1] - down[1] * 0.2f * th;
      o[9 - t][0] = g->lm[i][0] + down[0] * 0.8f * th;
      o[9 - t][1] = g->lm[i][1] + down[1] * 0.8f * th;
    }
    syn_path_spline(cr, (const float(*)[2])o, 10, 1);
    rgba(cr, L->brow, 1, 0.9f);
    cairo_fill(cr);
  }
}

static void draw_eyes(cairo_t *cr, const syn_geom *g, const syn_look *L, sp_rng *r) {
  static const int idx[2][6] = {{36, 37, 38, 39, 40, 41}, {42, 43, 44, 45, 46, 47}};
  float s = g->scale;
  const float white[3] = {0.93f, 0.9f, 0.86f}, lash[3] = {0.09f, 0.07f, 0.06f};
  for (int side = 0; side < 2; side++) {
    pt2 e[6];
    gather(g, idx[side], 6, e);
    float c[2] = {0, 0};
    for (int k = 0; k < 6; k++) {
      c[0] += e[k][0] / 6;
      c[1] += e[k][1] / 6;
    }
    /* Socket shadow around the eye. */
    radial_disc(cr, c[0], c[1], 0.1 * s, 0.32 * s, 0, 0.16);
    /* Lid crease above the upper lid. */
    pt2 crease[4];
    static const float lift[4] = {1.15f, 1.9f, 1.9f, 1.15f};
    for (int k = 0; k < 4; k++) {
      crease[k][0] = c[0] + (e[k][0] - c[0]) * lift[k];
      crease[k][1] = c[1] + (e[k][1] - c[1]) * lift[k] - 0.02f * s;
    }
    syn_path_spline(cr, (const float(*)[2])crease, 4, 0);
    rgba(cr, L->skin, 0.6f, 0.6f);
    cairo_set_line_width(cr, 0.014 * s);
    cairo_stroke(cr);
    /* White, iris, pupil, glint: all clipped to the lid opening. */
    cairo_save(cr);
    syn_path_spline(cr, (const float(*)[2])e, 6, 1);
    rgb(cr, white, 0.95f);
    cairo_fill_preserve(cr);
    cairo_clip(cr);
    const float *ic = g->iris[side];
    float ir = g->iris_r;
    rgb(cr, L->iris, 1);
    cairo_arc(cr, ic[0], ic[1], ir, 0, 2 * PI_F);
    cairo_fill(cr);
    rgba(cr, L->iris, 0.45f, 0.8f);
    cairo_set_line_width(cr, 0.18 * ir);
    cairo_arc(cr, ic[0], ic[1], ir * 0.92, 0, 2 * PI_F);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.03, 0.03, 0.03);
    cairo_arc(cr, ic[0], ic[1], ir * sp_rng_range(r, 0.38f, 0.5f), 0, 2 * PI_F);
    cairo_fill(cr);
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_arc(cr, ic[0] + 0.3 * ir, ic[1] - 0.35 * ir, 0.16 * ir, 0, 2 * PI_F);
    cairo_fill(cr);
    /* The upper lid shades the top of the eyeball. */
    cairo_pattern_t *lid = cairo_pattern_create_linear(c[0], c[1] - 0.08f * s, c[0], c[1] + 0.02f * s);
    cairo_pattern_add_color_stop_rgba(lid, 0, 0, 0, 0, 0.35);
    cairo_pattern_add_color_stop_rgba(lid, 1, 0, 0, 0, 0);
    cairo_set_source(cr, lid);
    cairo_paint(cr);
    cairo_pattern_destroy(lid);
    cairo_restore(cr);
    /* Lash line along the upper lid, a softer line along the lower one. */
    syn_path_spline(cr, (const float(*)[2])e, 4, 0);
    rgb(cr, lash, 1);
    cairo_set_line_width(cr, fmax(1.0, 0.028 * s));
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_stroke(cr);
    pt2 low[4] = {{e[3][0], e[3][1]}, {e[4][0], e[4][1]}, {e[5][0], e[5][1]}, {e[0][0], e[0][1]}};
    syn_path_spline(cr, (const float(*)[2])low, 4, 0);
    rgba(cr, L->skin, 0.5f, 0.8f);
    cairo_set_line_width(cr, fmax(0.6, 0.012 * s));
    cairo_stroke(cr);
  }
}

static void draw_nose(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  float s = g->scale, down[2], right[2];
  face_axes(g, down, right);
  /* Shadow down the side of the bridge away from the light. */
  int shade_left = L->light[0] * right[0] + L->light[1] * right[1] > 0;
  const float *a = g->lm[27], *b = g->lm[shade_left ? 31 : 35];
  float off = (shade_left ? -1.0f : 1.0f) * 0.07f * s;
  cairo_move_to(cr, a[0] + right[0] * off * 0.6f, a[1] + right[1] * off * 0.6f);
  cairo_curve_to(cr, g->lm[29][0] + right[0] * off, g->lm[29][1] + right[1] * off, b[0], b[1] - 0.1f * s * down[1],
                 b[0] - down[0] * 0.05f * s, b[1] - down[1] * 0.05f * s);
  rgba(cr, L->skin, 0.55f, 0.12f + 0.2f * L->light_strength);
  cairo_set_line_width(cr, 0.09 * s);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  cairo_stroke(cr);
  /* Shadow under the nose, nostrils, the wings' lower edge, a highlight on the tip. */
  cairo_save(cr);
  cairo_translate(cr, g->lm[33][0] + down[0] * 0.07f * s, g->lm[33][1] + down[1] * 0.07f * s);
  cairo_scale(cr, 0.16 * s, 0.05 * s);
  cairo_arc(cr, 0, 0, 1, 0, 2 * PI_F);
  cairo_restore(cr);
  rgba(cr, L->skin, 0.4f, 0.25f);
  cairo_fill(cr);
  for (int side = 0; side < 2; side++) {
    const float *p = g->lm[side ? 34 : 32], *q = g->lm[side ? 35 : 31];
    float nx = 0.55f * p[0] + 0.45f * q[0] - down[0] * 0.025f * s,
          ny = 0.55f * p[1] + 0.45f * q[1] - down[1] * 0.025f * s;
    cairo_save(cr);
    cairo_translate(cr, nx, ny);
    cairo_rotate(cr, atan2(right[1], right[0]));
    cairo_scale(cr, 0.05 * s, 0.025 * s);
    cairo_arc(cr, 0, 0, 1, 0, 2 * PI_F);
    cairo_restore(cr);
    rgba(cr, L->skin, 0.3f, 0.85f);
    cairo_fill(cr);
  }
  static const int lower[5] = {31, 32, 33, 34, 35};
  pt2 o[5];
  gather(g, lower, 5, o);
  syn_path_spline(cr, (const float(*)[2])o, 5, 0);
  rgba(cr, L->skin, 0.55f, 0.55f);
  cairo_set_line_width(cr, 0.02 * s);
  cairo_stroke(cr);
  for (int side = 0; side < 2; side++) {
    const float *w = g->lm[side ? 35 : 31];
    float sg = side ? 1.0f : -1.0f;
    cairo_move_to(cr, w[0], w[1]);
    cairo_curve_to(cr, w[0] + right[0] * sg * 0.05f * s, w[1] + right[1] * sg * 0.05f * s,
                   w[0] + (right[0] * sg * 0.03f - down[0] * 0.1f) * s,
                   w[1] + (right[1] * sg * 0.03f - down[1] * 0.1f) * s, w[0] - down[0] * 0.13f * s,
                   w[1] - down[1] * 0.13f * s);
    rgba(cr, L->skin, 0.55f, 0.45f);
    cairo_set_line_width(cr, 0.016 * s);
    cairo_stroke(cr);
  }
  const float *tip = g->lm[30];
  radial_disc(cr, tip[0], tip[1], 0, 0.08 * s, 1, 0.25);
}

static void draw_mouth(cairo_t *cr, const syn_geom *g, const syn_look *L) {
  static const int outer[12] = {48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59};
  static const int inner[8] = {60, 61, 62, 63, 64, 65, 66, 67};
  static const int line[7] = {48, 60, 61, 62, 63, 64, 54};
  float s = g->scale, down[2], right[2];
  face_axes(g, down, right);
  pt2 o[12], in[8], ln[7];
  gather(g, outer, 12, o);
  gather(g, inner, 8, in);
  gather(g, line, 7, ln);
  syn_path_spline(cr, (const float(*)[2])o, 12, 1);
  rgb(cr, L->lip, 1);
  cairo_fill(cr);
  float gap = hypotf(g->lm[66][0] - g->lm[62][0], g->lm[66][1] - g->lm[62][1]);
  if (gap > 0.02f * s) {
    /* Open mouth: dark inside, upper teeth under the upper lip. */
    cairo_save(cr);
    syn_path_spline(cr, (const float(*)[2])in, 8, 1);
    cairo_set_source_rgb(cr, 0.16, 0.05, 0.05);
    cairo_fill_preserve(cr);
    cairo_clip(cr);
    float tw = 0.5f * hypotf(g->lm[64][0] - g->lm[60][0], g->lm[64][1] - g->lm[60][1]);
    float tc[2] = {g->lm[62][0], g->lm[62][1]};
    cairo_save(cr);
    cairo_translate(cr, tc[0], tc[1]);
    cairo_rotate(cr, atan2(right[1], right[0]));
    cairo_rectangle(cr, -0.8 * tw, -0.05 * s, 1.6 * tw, 0.05 * s + fminf(0.06f * s, 0.45f * gap));
    cairo_restore(cr);
    cairo_set_source_rgb(cr, 0.9, 0.88, 0.82);
    cairo_fill(cr);
    cairo_restore(cr);
  } else {
    syn_path_spline(cr, (const float(*)[2])ln, 7, 0);
    rgba(cr, L->lip, 0.45f, 0.9f);
    cairo_set_line_width(cr, fmax(0.8, 0.018 * s));
    cairo_stroke(cr);
  }
  float hx = 0.5f * (g->lm[57][0] + g->lm[66][0]), hy = 0.5f * (g->lm[57][1] + g->lm[66][1]);
  radial_disc(cr, hx, hy, 0, 0.07 * s, 1, 0.15);
}

/* Fringe: from the top of the hair down to a hairline that never reaches the
 * brows (the points there must stay visible). */
static void draw_hair_front(cairo_t *cr, const syn_geom *g, const syn_look *L, sp_rng *r) {
  if (!L->hair_style) return;
  float c[2], s = g->scale;
  face_centre(g, c);
  float depth = L->hair_style == 3 ? -0.05f : 0.05f + 0.28f * L->hairline;
  pt2 o[2 * SYN_FOREHEAD + 2];
  int n = 0;
  for (int k = 0; k < SYN_FOREHEAD; k++) memcpy(o[n++], g->hair_top[k], sizeof(pt2));
  push_out(g->lm[0], c, 0.08f, s, o[n++]);
  for (int k = SYN_FOREHEAD - 1; k >= 0; k--) {
    float v = PI_F * (float)(k + 1) / (SYN_FOREHEAD + 1), w = sinf(v) * sinf(v);
    float a = depth * w;
    o[n][0] = g->forehead[k][0] + a * (g->lm[27][0] - g->forehead[k][0]);
    o[n][1] = g->forehead[k][1] + a * (g->lm[27][1] - g->forehead[k][1]);
    n++;
  }
  push_out(g->lm[16], c, 0.08f, s, o[n++]);
  syn_path_spline(cr, (const float(*)[2])o, n, 1);
  rgb(cr, L->hair, 1);
  cairo_fill(cr);
  /* A few strands for texture. */
  cairo_set_line_width(cr, fmax(0.5, 0.012 * s));
  for (int k = 0; k < 14; k++) {
    int a = (int)sp_rng_below(r, SYN_FOREHEAD);
    float t = sp_rng_range(r, 0.3f, 0.9f);
    const float *p = g->hair_top[a], *q = g->forehead[a];
    cairo_move_to(cr, p[0], p[1]);
    cairo_line_to(cr, p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t);
    rgba(cr, L->hair, sp_rng_range(r, 0.6f, 1.5f), 0.5f);
    cairo_stroke(cr);
  }
}

void syn_draw_face(cairo_t *cr, const syn_geom *g, const syn_look *L, sp_rng *r) {
  draw_hair_back(cr, g, L);
  draw_body(cr, g, L);
  draw_ears(cr, g, L);
  draw_skin(cr, g, L);
  draw_brows(cr, g, L);
  draw_eyes(cr, g, L, r);
  draw_nose(cr, g, L);
  draw_mouth(cr, g, L);
  draw_hair_front(cr, g, L, r);
}
