/* The parametric 3-D face behind the synthetic data: a hand-made template in
 * the iBUG 300-W order, shaped by identity factors and expression, posed and
 * projected with weak perspective.
 *
 * Model units: half the jaw width (jaw points 0 and 16 at x = -1, +1 for an
 * average face); origin between the eyes; x to image right, y down, z toward
 * the camera. Only the image-left half is written by hand; the right half is
 * its exact mirror through the flip table, so mirrored faces are faces of the
 * same model (yaw, roll and gaze_x negated). Depths are kept moderate so the
 * jaw line stays the visible outline up to 40 degrees of yaw: real annotators
 * put far-side jaw points on the silhouette, not on the hidden jaw bone. */
#include <math.h>
#include <string.h>

#include "data/synth_faces_internal.h"

#define PI_F 3.14159265358979f

typedef float vec3[3];

static void set3(vec3 *m, int i, float x, float y, float z) {
  m[i][0] = x;
  m[i][1] = y;
  m[i][2] = z;
}

/* Point dst is the mirror image of point src. */
static void mirror3(vec3 *m, int dst, int src) { set3(m, dst, -m[src][0], m[src][1], m[src][2]); }

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The image-left eye's centre and half width, which the brows follow. */
static float eye_centre_x(const sp_synth_face_params *p) { return -0.41f * p->eye_spacing; }
static float eye_half_width(const sp_synth_face_params *p) { return 0.165f * p->eye_size; }

/* Jaw 0..16: a superellipse-like arc from the ear (i = 0) to the chin (i = 8).
 * The exponent makes it squarer or rounder; an open mouth drops the chin. */
static void template_jaw(const sp_synth_face_params *p, float open, vec3 *m) {
  const float fw = p->face_width, fl = p->face_length;
  const float chin = 1.52f * fl;
  const float ex = 0.8f * p->jaw_square;
  for (int i = 0; i <= 8; i++) {
    float u = PI_F * (float)i / 16.0f;
    float c = i == 8 ? 0.0f : cosf(u), s = sinf(u);
    float x = -fw * powf(c, ex);
    float y = chin * powf(s, 1.25f) + 0.2f * open * s * s * s;
    float z = 0.05f - 0.35f * powf(c, 1.2f);
    set3(m, i, x, y, z);
  }
  for (int i = 9; i <= 16; i++) mirror3(m, i, 16 - i);
}

/* Eyes (image-left eye 36..41: outer corner, two upper, inner corner, two lower). */
static void template_eyes(const sp_synth_face_params *p, float smile, vec3 *m) {
  const float ecx = eye_centre_x(p), ew = eye_half_width(p);
  const float blink = clampf(p->blink, 0, 1);
  const float up = 0.058f * p->eye_open * p->eye_size, lo = 0.046f * p->eye_open * p->eye_size * (1 - 0.35f * smile);
  const float shut = 0.35f * lo; /* where the lids meet when closed */
  const float yu = -up + (up + shut) * blink, yl = lo + (shut - lo) * blink;
  set3(m, 36, ecx - ew, 0.012f, 0.04f);
  set3(m, 37, ecx - 0.36f * ew, yu - 0.004f, 0.17f);
  set3(m, 38, ecx + 0.32f * ew, yu, 0.18f);
  set3(m, 39, ecx + ew, 0.016f, 0.13f);
  set3(m, 40, ecx + 0.34f * ew, yl, 0.17f);
  set3(m, 41, ecx - 0.36f * ew, yl * 0.95f, 0.15f);
  mirror3(m, 42, 39);
  mirror3(m, 43, 38);
  mirror3(m, 44, 37);
  mirror3(m, 45, 36);
  mirror3(m, 46, 41);
  mirror3(m, 47, 40);
}

/* Brows 17..21 (outer to inner) follow the eye, arched, raised together. */
static void template_brows(const sp_synth_face_params *p, vec3 *m) {
  const float ecx = eye_centre_x(p), ew = eye_half_width(p);
  const float by = -0.29f * p->brow_height - 0.1f * p->brow_raise;
  const float bx0 = ecx - 2.15f * ew, bx1 = ecx + 1.15f * ew;
  static const float arch[5] = {0.055f, -0.035f, -0.06f, -0.05f, -0.02f};
  for (int t = 0; t < 5; t++) {
    float f = (float)t / 4.0f;
    set3(m, 17 + t, bx0 + (bx1 - bx0) * f, by + arch[t] * (1 + 0.3f * p->brow_raise), 0.02f + 0.24f * f);
  }
  for (int t = 0; t < 5; t++) mirror3(m, 26 - t, 17 + t);
}

/* Nose: bridge 27..30 down the middle, lower edge 31..35. */
static void template_nose(const sp_synth_face_params *p, float mid, vec3 *m) {
  const float nl = p->nose_length * mid, nw = p->nose_width;
  static const float bridge_y[4] = {0.0f, 0.17f, 0.34f, 0.5f}, bridge_z[4] = {0.24f, 0.34f, 0.45f, 0.58f};
  for (int t = 0; t < 4; t++) set3(m, 27 + t, 0, bridge_y[t] * nl, bridge_z[t]);
  set3(m, 31, -0.17f * nw, 0.58f * nl, 0.27f);
  set3(m, 32, -0.085f * nw, 0.605f * nl, 0.37f);
  set3(m, 33, 0, 0.62f * nl, 0.43f);
  mirror3(m, 34, 32);
  mirror3(m, 35, 31);
}

/* Mouth: outer lip 48..59 clockwise from the image-left corner, inner lip
 * 60..67. A smile widens and lifts the corners; opening moves the lower lip. */
static void template_mouth(const sp_synth_face_params *p, float mid, float open, float smile, vec3 *m) {
  const float nl = p->nose_length * mid;
  const float my = 0.88f * mid + 0.04f * nl - 0.04f, mw = 0.34f * p->mouth_width * (1 + 0.16f * smile);
  const float ut = 0.085f * p->lip_thickness, lb = 0.11f * p->lip_thickness, o = 0.24f * open;
  const float lift = 0.07f * smile;
  const float zc = 0.36f;
#define LIPZ(xf) (zc - 0.2f * (xf) * (xf))
  set3(m, 48, -mw, my - lift + 0.01f, LIPZ(1.0f));
  set3(m, 49, -0.58f * mw, my - ut * 0.8f - 0.4f * lift, LIPZ(0.58f));
  set3(m, 50, -0.2f * mw, my - ut * 1.05f, LIPZ(0.2f));
  set3(m, 51, 0, my - ut * 0.88f, LIPZ(0.0f));
  mirror3(m, 52, 50);
  mirror3(m, 53, 49);
  mirror3(m, 54, 48);
  set3(m, 59, -0.56f * mw, my + o * 0.85f + lb * 0.8f - 0.3f * lift, LIPZ(0.56f) - 0.02f);
  set3(m, 58, -0.2f * mw, my + o + lb, LIPZ(0.2f) - 0.03f);
  set3(m, 57, 0, my + o + lb * 1.02f, LIPZ(0.0f) - 0.03f);
  mirror3(m, 56, 58);
  mirror3(m, 55, 59);
  set3(m, 60, -0.86f * mw, my - 0.9f * lift + 0.01f + 0.15f * o, LIPZ(0.86f) - 0.02f);
  set3(m, 61, -0.36f * mw, my - 0.012f - 0.1f * o, LIPZ(0.36f) - 0.02f);
  set3(m, 62, 0, my - 0.008f - 0.1f * o, LIPZ(0.0f) - 0.02f);
  mirror3(m, 63, 61);
  mirror3(m, 64, 60);
  set3(m, 67, -0.36f * mw, my + 0.9f * o + 0.002f, LIPZ(0.36f) - 0.03f);
  set3(m, 66, 0, my + o + 0.006f, LIPZ(0.0f) - 0.03f);
  mirror3(m, 65, 67);
#undef LIPZ
}

/* Landmarks 0..67 of the unposed face. */
static void template_landmarks(const sp_synth_face_params *p, vec3 *m) {
  const float mid = 0.5f + 0.5f * p->face_length; /* the mid-face grows less than the chin */
  const float open = clampf(p->mouth_open, 0, 1), smile = clampf(p->smile, -0.4f, 1);
  template_jaw(p, open, m);
  template_eyes(p, smile, m);
  template_brows(p, m);
  template_nose(p, mid, m);
  template_mouth(p, mid, open, smile, m);
}

typedef struct {
  float r[3][3];
  float s, cx, cy;
} pose;

static pose make_pose(const sp_synth_face_params *p) {
  const float d = PI_F / 180.0f;
  float cy = cosf(p->yaw * d), sy = sinf(p->yaw * d);
  float cp = cosf(p->pitch * d), spt = sinf(p->pitch * d);
  float cr = cosf(p->roll * d), sr = sinf(p->roll * d);
  /* R = Rz(roll) Rx(pitch) Ry(yaw): turn, then nod, then tilt in the image. */
  float ry[3][3] = {{cy, 0, sy}, {0, 1, 0}, {-sy, 0, cy}};
  float rx[3][3] = {{1, 0, 0}, {0, cp, -spt}, {0, spt, cp}};
  float rz[3][3] = {{cr, -sr, 0}, {sr, cr, 0}, {0, 0, 1}};
  float t[3][3];
  pose P;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      t[i][j] = 0;
      for (int k = 0; k < 3; k++) t[i][j] += rx[i][k] * ry[k][j];
    }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      P.r[i][j] = 0;
      for (int k = 0; k < 3; k++) P.r[i][j] += rz[i][k] * t[k][j];
    }
  P.s = p->scale;
  P.cx = p->cx;
  P.cy = p->cy;
  return P;
}

static void project(const pose *P, const float *v, float *xy, float *z) {
  xy[0] = P->cx + P->s * (P->r[0][0] * v[0] + P->r[0][1] * v[1] + P->r[0][2] * v[2]);
  xy[1] = P->cy + P->s * (P->r[1][0] * v[0] + P->r[1][1] * v[1] + P->r[1][2] * v[2]);
  if (z) *z = P->s * (P->r[2][0] * v[0] + P->r[2][1] * v[1] + P->r[2][2] * v[2]);
}

void sp_synth_face_landmarks(const sp_synth_face_params *p, float *pts) {
  vec3 m[SP_SYNTH_FACE_K];
  template_landmarks(p, m);
  pose P = make_pose(p);
  for (int i = 0; i < SP_SYNTH_FACE_K; i++) project(&P, m[i], pts + 2 * i, NULL);
}

sp_synth_face_params sp_synth_face_mirror(const sp_synth_face_params *p, int width) {
  sp_synth_face_params q = *p;
  q.yaw = -p->yaw;
  q.roll = -p->roll;
  q.gaze_x = -p->gaze_x;
  q.cx = (float)(width - 1) - p->cx;
  return q;
}

void syn_face_geometry(const sp_synth_face_params *p, syn_geom *g) {
  vec3 m[SP_SYNTH_FACE_K];
  template_landmarks(p, m);
  pose P = make_pose(p);
  memset(g, 0, sizeof *g);
  g->scale = p->scale;
  for (int i = 0; i < SP_SYNTH_FACE_K; i++) project(&P, m[i], g->lm[i], &g->lmz[i]);

  /* Forehead and skull outline from above jaw 16 over the top to above jaw 0. */
  const float fw = p->face_width, fh = 0.95f * p->forehead;
  for (int k = 1; k <= SYN_FOREHEAD; k++) {
    float v = PI_F * (float)k / (SYN_FOREHEAD + 1);
    float c = cosf(v), s = sinf(v);
    vec3 f = {fw * c * (1 - 0.06f * s), -fh * powf(s, 0.8f), -0.3f + 0.35f * s};
    project(&P, f, g->forehead[k - 1], NULL);
    vec3 h = {f[0] * 1.1f, f[1] * 1.12f - 0.1f, f[2]};
    project(&P, h, g->hair_top[k - 1], NULL);
  }
  /* Ears hang beside jaw points 0..3, behind the cheek. */
  static const float ear[4][3] = {
      {-0.97f, -0.06f, -0.3f}, {-1.14f, 0.16f, -0.42f}, {-0.98f, 0.5f, -0.28f}, {-0.9f, 0.22f, -0.22f}};
  for (int side = 0; side < 2; side++) {
    float sgn = side ? -1.0f : 1.0f, zsum = 0;
    for (int k = 0; k < 4; k++) {
      vec3 e = {sgn * ear[k][0] * fw, ear[k][1], ear[k][2]};
      float z;
      project(&P, e, g->ear[side][k], &z);
      zsum += z;
    }
    g->ear_z[side] = zsum / 4;
  }
  static const float neck[4][2] = {{-0.58f, 1.0f}, {-0.66f, 4.5f}, {0.66f, 4.5f}, {0.58f, 1.0f}};
  for (int k = 0; k < 4; k++) {
    vec3 n = {neck[k][0] * fw, neck[k][1] * p->face_length, -0.35f};
    project(&P, n, g->neck[k], NULL);
  }
  /* Irises sit on the eyeball, shifted by gaze. */
  const float ew = eye_half_width(p);
  for (int side = 0; side < 2; side++) {
    int b = side ? 42 : 36;
    vec3 c = {0, 0, 0.2f};
    for (int k = 0; k < 6; k++) {
      c[0] += m[b + k][0] / 6;
      c[1] += m[b + k][1] / 6;
    }
    c[0] += 0.3f * ew * p->gaze_x;
    c[1] += 0.012f * p->gaze_y;
    project(&P, c, g->iris[side], NULL);
  }
  g->iris_r = 0.42f * ew * p->scale;
  g->eye_half_w = ew * p->scale;
  g->nose_dir[0] = P.r[0][2];
  g->nose_dir[1] = P.r[1][2];
}

void syn_sample_shape(sp_rng *r, sp_synth_face_params *p) {
  /* Identity factors and their ranges, drawn in this order. */
  const struct {
    float *factor;
    float lo, hi;
  } ranges[] = {
      {&p->face_width, 0.9f, 1.1f},  {&p->face_length, 0.88f, 1.12f}, {&p->forehead, 0.85f, 1.15f},
      {&p->jaw_square, 0.8f, 1.25f}, {&p->eye_size, 0.85f, 1.15f},    {&p->eye_spacing, 0.9f, 1.1f},
      {&p->eye_open, 0.8f, 1.25f},   {&p->brow_height, 0.85f, 1.15f}, {&p->nose_length, 0.88f, 1.12f},
      {&p->nose_width, 0.85f, 1.2f}, {&p->mouth_width, 0.85f, 1.15f}, {&p->lip_thickness, 0.7f, 1.3f},
  };
  for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
    *ranges[i].factor = sp_rng_range(r, ranges[i].lo, ranges[i].hi);
}

void syn_sample_expression(sp_rng *r, float strength, sp_synth_face_params *p) {
  /* Mostly near-neutral faces, as in video frames; each expression sometimes strong. */
  p->mouth_open = strength * (sp_rng_uniform(r) < 0.35f ? sp_rng_range(r, 0.15f, 1.0f) : sp_rng_range(r, 0, 0.04f));
  p->smile = strength * (sp_rng_uniform(r) < 0.4f ? sp_rng_range(r, 0.2f, 1.0f) : sp_rng_range(r, -0.25f, 0.1f));
  p->brow_raise = strength * (sp_rng_uniform(r) < 0.35f ? sp_rng_range(r, -0.4f, 1.0f) : 0.0f);
  p->blink = strength * (sp_rng_uniform(r) < 0.12f ? sp_rng_range(r, 0.6f, 1.0f) : sp_rng_range(r, 0, 0.25f));
  p->gaze_x = sp_rng_range(r, -1, 1);
  p->gaze_y = sp_rng_range(r, -1, 1);
}
