/* Face morphing geometry: Delaunay triangulation (Bowyer-Watson), the
 * piecewise-affine triangle warp, morph frames and the mean face.
 *
 * The triangulation decides every orientation and in-circle question exactly:
 * points are snapped to an integer grid (2^18 cells over their extent) and the
 * predicates are evaluated in 128-bit integers. Floating-point predicates go
 * wrong precisely on the inputs a morph always has — the frame's corners and
 * edge midpoints are collinear and cocircular — and a wrong answer there
 * leaves a hole or a flipped triangle. The bounds: super-triangle coordinates
 * stay within [-2^28, 3 * 2^28], so differences are < 2^30, each lifted term
 * < 2^61 and the in-circle determinant < 2^124. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spry/morph.h"

#define GRID_BITS 18
#define SUPER \
  (1LL << 28) /* 1024 grid extents: far enough that only hull triangles flatter than ~1/4096 of the extent are lost */

typedef struct {
  int64_t x, y;
} gpt;

typedef __int128 i128;

/* > 0 when d lies strictly inside the circumcircle of the positively oriented
 * triangle abc; 0 on the circle. */
static int incircle(gpt a, gpt b, gpt c, gpt d) {
  int64_t adx = a.x - d.x, ady = a.y - d.y, bdx = b.x - d.x, bdy = b.y - d.y, cdx = c.x - d.x, cdy = c.y - d.y;
  i128 al = (i128)adx * adx + (i128)ady * ady, bl = (i128)bdx * bdx + (i128)bdy * bdy,
       cl = (i128)cdx * cdx + (i128)cdy * cdy;
  i128 det = al * ((i128)bdx * cdy - (i128)cdx * bdy) + bl * ((i128)cdx * ady - (i128)adx * cdy) +
             cl * ((i128)adx * bdy - (i128)bdx * ady);
  return det > 0 ? 1 : det < 0 ? -1 : 0;
}

typedef struct {
  int v[3];
} tri;

typedef struct {
  int a, b;
} edge;

typedef struct {
  int64_t x, y;
  int idx;
} keyed;

static int cmp_keyed(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  if (a->x != b->x) return a->x < b->x ? -1 : 1;
  if (a->y != b->y) return a->y < b->y ? -1 : 1;
  return a->idx - b->idx;
}

/* The points' extent (the larger side of their bounding box) and its corner;
 * -1 with an error naming the first point that is not finite. */
static int point_extent(const float *pts, int n, double *minx, double *miny, double *extent) {
  double x0 = INFINITY, y0 = INFINITY, x1 = -INFINITY, y1 = -INFINITY;
  for (int i = 0; i < n; i++) {
    double x = pts[2 * i], y = pts[2 * i + 1];
    if (!isfinite(x) || !isfinite(y)) return sp_error_set("delaunay: point %d is not finite (%g, %g)", i, x, y);
    x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
  }
  *minx = x0, *miny = y0, *extent = fmax(x1 - x0, y1 - y0);
  return 0;
}

/* Snap, then drop duplicates (same cell), keeping the lowest index: the
 * points left, sorted by position; *m counts them. */
static keyed *snap_unique(const float *pts, int n, double minx, double miny, double extent, int *m) {
  keyed *k = sp_xmalloc(sizeof(keyed) * (size_t)n);
  const double scale = (double)(1 << GRID_BITS) / extent;
  for (int i = 0; i < n; i++) {
    k[i].x = llround((pts[2 * i] - minx) * scale);
    k[i].y = llround((pts[2 * i + 1] - miny) * scale);
    k[i].idx = i;
  }
  qsort(k, (size_t)n, sizeof(keyed), cmp_keyed);
  int u = 0;
  for (int i = 0; i < n; i++)
    if (u == 0 || k[i].x != k[u - 1].x || k[i].y != k[u - 1].y) k[u++] = k[i];
  *m = u;
  return k;
}

/* p[0..m) in input order (orig[j]: the input index of p[j]), then the
 * super-triangle's corners p[m..m+2]. Insertion in input order (k is sorted
 * by position) changes nothing for exact predicates but keeps results
 * independent of the sort. */
static void in_input_order(const keyed *k, int n, int m, gpt *p, int *orig) {
  int *by_index = sp_xmalloc(sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) by_index[i] = -1;
  for (int i = 0; i < m; i++) by_index[k[i].idx] = i;
  int j = 0;
  for (int i = 0; i < n; i++)
    if (by_index[i] >= 0) {
      p[j].x = k[by_index[i]].x, p[j].y = k[by_index[i]].y, orig[j] = i;
      j++;
    }
  free(by_index);
  p[m] = (gpt){-SUPER, -SUPER};
  p[m + 1] = (gpt){3 * SUPER, -SUPER};
  p[m + 2] = (gpt){-SUPER, 3 * SUPER};
}

/* The triangulation while points are inserted (Bowyer-Watson). */
typedef struct {
  tri *t;
  int nt, cap;
  char *bad;   /* [cap]: triangles whose circumcircle holds the new point */
  edge *edges; /* the cavity's boundary */
  int ne, edge_cap;
} mesh;

/* m points plus the super-triangle, which is the only triangle at first. */
static void mesh_init(mesh *M, int m) {
  /* An n-point triangulation has < 2n + 1 triangles; a cavity's new triangles
   * fit in the slots freed plus 2. */
  M->cap = 2 * (m + 3) + 8;
  M->nt = 0;
  M->t = sp_xmalloc(sizeof(tri) * (size_t)M->cap);
  M->t[M->nt++] = (tri){{m, m + 1, m + 2}};
  M->edge_cap = 64;
  M->ne = 0;
  M->edges = sp_xmalloc(sizeof(edge) * (size_t)M->edge_cap);
  M->bad = sp_xmalloc((size_t)M->cap);
}

static void mesh_free(mesh *M) {
  free(M->edges);
  free(M->bad);
  free(M->t);
}

/* The cavity's boundary: edges of bad triangles whose twin (reversed edge)
 * is not in another bad triangle. With exact predicates the cavity is
 * star-shaped from the new point, so each boundary edge with it makes a
 * positively oriented triangle. */
static void cavity_boundary(mesh *M) {
  const tri *t = M->t;
  const char *bad = M->bad;
  int ne = 0;
  for (int j = 0; j < M->nt; j++) {
    if (!bad[j]) continue;
    for (int e = 0; e < 3; e++) {
      int a = t[j].v[e], b = t[j].v[(e + 1) % 3], shared = 0;
      for (int q = 0; q < M->nt && !shared; q++) {
        if (q == j || !bad[q]) continue;
        for (int f = 0; f < 3; f++)
          if (t[q].v[f] == b && t[q].v[(f + 1) % 3] == a) shared = 1;
      }
      if (shared) continue;
      if (ne == M->edge_cap) M->edges = sp_xrealloc(M->edges, sizeof(edge) * (size_t)(M->edge_cap *= 2));
      M->edges[ne++] = (edge){a, b};
    }
  }
  M->ne = ne;
}

/* Removes the bad triangles and fills the cavity with a fan around point i. */
static void fill_cavity(mesh *M, int i) {
  int w = 0;
  for (int j = 0; j < M->nt; j++)
    if (!M->bad[j]) M->t[w++] = M->t[j];
  M->nt = w;
  if (M->nt + M->ne > M->cap) {
    M->cap = 2 * (M->nt + M->ne);
    M->t = sp_xrealloc(M->t, sizeof(tri) * (size_t)M->cap);
    M->bad = sp_xrealloc(M->bad, (size_t)M->cap);
  }
  for (int e = 0; e < M->ne; e++) M->t[M->nt++] = (tri){{M->edges[e].a, M->edges[e].b, i}};
}

static void insert_point(mesh *M, const gpt *p, int i) {
  const tri *t = M->t;
  for (int j = 0; j < M->nt; j++) M->bad[j] = incircle(p[t[j].v[0]], p[t[j].v[1]], p[t[j].v[2]], p[i]) > 0;
  cavity_boundary(M);
  fill_cavity(M, i);
}

/* The triangles that do not touch the super-triangle, as input indices;
 * returns how many. */
static int collect_triangles(const mesh *M, int m, const int *orig, int **tris) {
  const tri *t = M->t;
  int count = 0;
  for (int j = 0; j < M->nt; j++)
    if (t[j].v[0] < m && t[j].v[1] < m && t[j].v[2] < m) count++;
  if (count) {
    *tris = sp_xmalloc(sizeof(int) * 3 * (size_t)count);
    int c = 0;
    for (int j = 0; j < M->nt; j++) {
      if (t[j].v[0] >= m || t[j].v[1] >= m || t[j].v[2] >= m) continue;
      /* The grid's y grows with image y, as in the contract's signed area. */
      for (int e = 0; e < 3; e++) (*tris)[3 * c + e] = orig[t[j].v[e]];
      c++;
    }
  }
  return count;
}

int sp_delaunay(const float *pts, int n, int **tris) {
  *tris = NULL;
  if (n < 0) return sp_error_set("delaunay: negative point count %d", n);
  double minx = 0, miny = 0, extent = 0;
  if (point_extent(pts, n, &minx, &miny, &extent) != 0) return -1;
  if (n < 3 || !(extent > 0)) return 0;

  int m;
  keyed *k = snap_unique(pts, n, minx, miny, extent, &m);
  gpt *p = sp_xmalloc(sizeof(gpt) * (size_t)(m + 3));
  int *orig = sp_xmalloc(sizeof(int) * (size_t)m);
  in_input_order(k, n, m, p, orig);
  free(k);

  mesh M;
  mesh_init(&M, m);
  for (int i = 0; i < m; i++) insert_point(&M, p, i);
  int count = collect_triangles(&M, m, orig, tris);
  mesh_free(&M);
  free(p);
  free(orig);
  return count;
}

void sp_morph_frame_points(int w, int h, float out[2 * SP_MORPH_FRAME_POINTS]) {
  const float r = (float)(w - 1), b = (float)(h - 1);
  const float f[2 * SP_MORPH_FRAME_POINTS] = {0, 0, r, 0, r, b, 0, b, r / 2, 0, r, b / 2, r / 2, b, 0, b / 2};
  memcpy(out, f, sizeof f);
}

/* ---- warping ---- */

/* Bilinear sample at (x, y), the edge repeated outside. */
static inline void sample(const uint8_t *src, int w, int h, int c, double x, double y, double *out) {
  if (x < 0) x = 0;
  if (y < 0) y = 0;
  if (x > w - 1) x = w - 1;
  if (y > h - 1) y = h - 1;
  int x0 = (int)x, y0 = (int)y;
  int x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
  double fx = x - x0, fy = y - y0;
  const uint8_t *p00 = src + ((size_t)y0 * w + x0) * c, *p01 = src + ((size_t)y0 * w + x1) * c,
                *p10 = src + ((size_t)y1 * w + x0) * c, *p11 = src + ((size_t)y1 * w + x1) * c;
  for (int ch = 0; ch < c; ch++) {
    double top = p00[ch] + (p01[ch] - p00[ch]) * fx, bot = p10[ch] + (p11[ch] - p10[ch]) * fx;
    out[ch] = top + (bot - top) * fy;
  }
}

static inline uint8_t to_u8(double v) { return v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)(v + 0.5); }

int sp_warp_triangles(const uint8_t *src, int sw, int sh, int c, const float *src_pts, uint8_t *dst, int dw, int dh,
                      const float *dst_pts, const int *tris, int n_tris) {
  if (sw < 1 || sh < 1 || dw < 1 || dh < 1 || (c != 1 && c != 3))
    return sp_error_set("warp: bad image size %dx%dx%d -> %dx%d", sw, sh, c, dw, dh);
  memset(dst, 0, (size_t)dw * dh * c);
  for (int t = 0; t < n_tris; t++) {
    const int *v = tris + 3 * t;
    double dx[3], dy[3], sx[3], sy[3];
    for (int e = 0; e < 3; e++) {
      dx[e] = dst_pts[2 * v[e]], dy[e] = dst_pts[2 * v[e] + 1];
      sx[e] = src_pts[2 * v[e]], sy[e] = src_pts[2 * v[e] + 1];
    }
    double det = (dx[1] - dx[0]) * (dy[2] - dy[0]) - (dy[1] - dy[0]) * (dx[2] - dx[0]);
    if (!(fabs(det) > 1e-9)) continue;
    /* Barycentric weights are affine in (x, y): l_e = a_e x + b_e y + c_e.
     * A pixel centre on a shared edge is taken by both triangles (a small
     * tolerance keeps rounding from opening a seam); both give the same
     * sample there up to rounding. */
    double a[3], b[3], k[3];
    for (int e = 0; e < 3; e++) {
      int i = (e + 1) % 3, j = (e + 2) % 3;
      a[e] = (dy[i] - dy[j]) / det;
      b[e] = (dx[j] - dx[i]) / det;
      k[e] = (dx[i] * dy[j] - dx[j] * dy[i]) / det;
    }
    const double eps = 1e-9;
    int x0 = (int)ceil(fmin(dx[0], fmin(dx[1], dx[2])) - 1e-6), x1 = (int)floor(fmax(dx[0], fmax(dx[1], dx[2])) + 1e-6);
    int y0 = (int)ceil(fmin(dy[0], fmin(dy[1], dy[2])) - 1e-6), y1 = (int)floor(fmax(dy[0], fmax(dy[1], dy[2])) + 1e-6);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > dw - 1) x1 = dw - 1;
    if (y1 > dh - 1) y1 = dh - 1;
    double px[3];
    for (int y = y0; y <= y1; y++)
      for (int x = x0; x <= x1; x++) {
        double l0 = a[0] * x + b[0] * y + k[0], l1 = a[1] * x + b[1] * y + k[1], l2 = a[2] * x + b[2] * y + k[2];
        if (l0 < -eps || l1 < -eps || l2 < -eps) continue;
        sample(src, sw, sh, c, l0 * sx[0] + l1 * sx[1] + l2 * sx[2], l0 * sy[0] + l1 * sy[1] + l2 * sy[2], px);
        uint8_t *o = dst + ((size_t)y * dw + x) * c;
        for (int ch = 0; ch < c; ch++) o[ch] = to_u8(px[ch]);
      }
  }
  return 0;
}

void sp_morph_resize(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, float *pts, int k) {
  const double fx = (double)sw / dw, fy = (double)sh / dh;
  double px[3];
  for (int y = 0; y < dh; y++)
    for (int x = 0; x < dw; x++) {
      sample(src, sw, sh, c, (x + 0.5) * fx - 0.5, (y + 0.5) * fy - 0.5, px);
      for (int ch = 0; ch < c; ch++) dst[((size_t)y * dw + x) * c + ch] = to_u8(px[ch]);
    }
  for (int i = 0; pts && i < k; i++) {
    pts[2 * i] = (float)((pts[2 * i] + 0.5) / fx - 0.5);
    pts[2 * i + 1] = (float)((pts[2 * i + 1] + 0.5) / fy - 0.5);
  }
}

/* ---- morphing ---- */

struct sp_morph {
  int w, h, c, k, n, n_tris;
  uint8_t *a, *b, *wa, *wb;
  float *pa, *pb, *mid;
  int *tris;
};

/* Keypoints clamped into the frame, and those within `snap` px of an edge put
 * on it: the border then stays a run of exactly collinear points, so the
 * triangulation never leaves a hair-thin sliver along it (see SUPER). */
static void frame_shape(const float *pts, int k, int w, int h, float *out) {
  const float snap = 0.5f + 0.002f * (float)(w > h ? w : h);
  for (int i = 0; i < k; i++) {
    float x = pts[2 * i], y = pts[2 * i + 1];
    if (!isfinite(x)) x = (float)(w - 1) / 2;
    if (!isfinite(y)) y = (float)(h - 1) / 2;
    x = x < snap ? 0 : x > w - 1 - snap ? (float)(w - 1) : x;
    y = y < snap ? 0 : y > h - 1 - snap ? (float)(h - 1) : y;
    out[2 * i] = x, out[2 * i + 1] = y;
  }
  sp_morph_frame_points(w, h, out + 2 * k);
}

sp_morph *sp_morph_new(const uint8_t *a, const float *pts_a, const uint8_t *b, const float *pts_b, int w, int h, int c,
                       int k) {
  if (w < 2 || h < 2 || (c != 1 && c != 3) || k < 0) {
    sp_error_set("morph: bad image %dx%dx%d or keypoint count %d", w, h, c, k);
    return NULL;
  }
  sp_morph *m = sp_xcalloc(1, sizeof *m);
  m->w = w, m->h = h, m->c = c, m->k = k, m->n = k + SP_MORPH_FRAME_POINTS;
  size_t bytes = (size_t)w * h * c;
  m->a = sp_xmalloc(bytes), m->b = sp_xmalloc(bytes), m->wa = sp_xmalloc(bytes), m->wb = sp_xmalloc(bytes);
  memcpy(m->a, a, bytes);
  memcpy(m->b, b, bytes);
  m->pa = sp_xmalloc(sizeof(float) * 2 * (size_t)m->n);
  m->pb = sp_xmalloc(sizeof(float) * 2 * (size_t)m->n);
  m->mid = sp_xmalloc(sizeof(float) * 2 * (size_t)m->n);
  frame_shape(pts_a, k, w, h, m->pa);
  frame_shape(pts_b, k, w, h, m->pb);
  /* The mean shape's triangles suit both ends: triangulating A's shape would
   * fold more triangles as the shape moves towards B. */
  for (int i = 0; i < 2 * m->n; i++) m->mid[i] = 0.5f * (m->pa[i] + m->pb[i]);
  m->n_tris = sp_delaunay(m->mid, m->n, &m->tris);
  if (m->n_tris <= 0) {
    if (m->n_tris == 0) sp_error_set("morph: the mean shape gave no triangles");
    sp_morph_free(m);
    return NULL;
  }
  return m;
}

int sp_morph_render(const sp_morph *m, double t_shape, double t_color, uint8_t *out) {
  sp_morph *mm = (sp_morph *)m; /* the scratch images are not part of the morph's state */
  const double ts = t_shape, tc = t_color < 0 ? 0 : t_color > 1 ? 1 : t_color;
  for (int i = 0; i < 2 * m->n; i++) mm->mid[i] = (float)((1 - ts) * m->pa[i] + ts * m->pb[i]);
  size_t bytes = (size_t)m->w * m->h * m->c;
  /* An end of the dissolve needs only one warp (and t = 0 / 1 stays exact). */
  if (tc < 1 && sp_warp_triangles(m->a, m->w, m->h, m->c, m->pa, mm->wa, m->w, m->h, m->mid, m->tris, m->n_tris))
    return -1;
  if (tc > 0 && sp_warp_triangles(m->b, m->w, m->h, m->c, m->pb, mm->wb, m->w, m->h, m->mid, m->tris, m->n_tris))
    return -1;
  if (tc <= 0)
    memcpy(out, m->wa, bytes);
  else if (tc >= 1)
    memcpy(out, m->wb, bytes);
  else
    for (size_t i = 0; i < bytes; i++) out[i] = to_u8((1 - tc) * m->wa[i] + tc * m->wb[i]);
  return 0;
}

const float *sp_morph_points(const sp_morph *m, int face, int *n) {
  if (n) *n = m->n;
  return face ? m->pb : m->pa;
}

const int *sp_morph_triangles(const sp_morph *m, int *n_tris) {
  if (n_tris) *n_tris = m->n_tris;
  return m->tris;
}

void sp_morph_free(sp_morph *m) {
  if (!m) return;
  free(m->a), free(m->b), free(m->wa), free(m->wb);
  free(m->pa), free(m->pb), free(m->mid), free(m->tris);
  free(m);
}

int sp_morph_frame(const uint8_t *a, const float *pts_a, const uint8_t *b, const float *pts_b, int w, int h, int c,
                   int k, double t_shape, double t_color, uint8_t *out) {
  sp_morph *m = sp_morph_new(a, pts_a, b, pts_b, w, h, c, k);
  if (!m) return -1;
  int rc = sp_morph_render(m, t_shape, t_color, out);
  sp_morph_free(m);
  return rc;
}

int sp_mean_face(const uint8_t *const *imgs, const float *const *pts, int n, int w, int h, int c, int k, uint8_t *out,
                 float *mean_pts) {
  if (n < 1 || w < 2 || h < 2 || (c != 1 && c != 3) || k < 0)
    return sp_error_set("mean face: bad input (%d faces of %dx%dx%d, %d points)", n, w, h, c, k);
  const int np = k + SP_MORPH_FRAME_POINTS;
  float *shapes = sp_xmalloc(sizeof(float) * 2 * (size_t)np * n), *mean = sp_xcalloc(2 * (size_t)np, sizeof(float));
  for (int f = 0; f < n; f++) {
    frame_shape(pts[f], k, w, h, shapes + (size_t)2 * np * f);
    for (int i = 0; i < 2 * np; i++) mean[i] += shapes[(size_t)2 * np * f + i] / (float)n;
  }
  int *tris = NULL, n_tris = sp_delaunay(mean, np, &tris), rc = 0;
  size_t bytes = (size_t)w * h * c;
  uint8_t *warped = sp_xmalloc(bytes);
  uint32_t *sum = sp_xcalloc(bytes, sizeof(uint32_t));
  if (n_tris <= 0) rc = n_tris == 0 ? sp_error_set("mean face: the mean shape gave no triangles") : -1;
  for (int f = 0; f < n && !rc; f++) {
    rc = sp_warp_triangles(imgs[f], w, h, c, shapes + (size_t)2 * np * f, warped, w, h, mean, tris, n_tris);
    for (size_t i = 0; i < bytes && !rc; i++) sum[i] += warped[i];
  }
  if (!rc) {
    for (size_t i = 0; i < bytes; i++) out[i] = (uint8_t)((sum[i] + (uint32_t)n / 2) / (uint32_t)n);
    if (mean_pts) memcpy(mean_pts, mean, sizeof(float) * 2 * (size_t)k);
  }
  free(shapes), free(mean), free(tris), free(warped), free(sum);
  return rc;
}
