/* spry morph: automatic face morphing from keypoints (the seed's "Bells &
 * Whistles"). Geometry and pixels only; the keypoints come from a trained
 * model (spry/train.h: sp_kp_predict) or from annotation files, and the CLI
 * (`spry morph`) ties the two together.
 *
 *   src/data/morph.c      Delaunay triangulation, piecewise-affine warp,
 *                         morph frames, mean face
 *   src/io/morph_gif.c    animated GIF89a writer (median-cut palette, LZW) and
 *                         a reader for checking what was written
 *   src/io/morph_plot.c   the points + triangulation figure (cairo)
 *
 * Images are uint8, row-major HWC, c = 1 or 3, as in spry/data.h; points are
 * float (x, y) pairs in pixels with pixel centres at integers, so a w x h
 * image spans [0, w-1] x [0, h-1]. Functions that can fail return 0 (or a
 * count) and -1 after sp_error_set(). Nothing here keeps global state. */
#ifndef SPRY_MORPH_H
#define SPRY_MORPH_H

#include <stdint.h>

#include "spry/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- triangulation ---- */

/* Delaunay triangulation of n points (pts[2n]) by Bowyer-Watson with exact
 * integer predicates: coordinates are snapped to a 2^20 grid over the points'
 * extent, so collinear and cocircular inputs are decided exactly (cocircular
 * ties give one of the valid triangulations). Points that snap to the same
 * grid cell as an earlier point are duplicates and get no triangles of their
 * own. Triangles are index triples with positive signed area
 * (bx-ax)(cy-ay) - (by-ay)(cx-ax) > 0 (clockwise as seen on screen, y down).
 * *tris gets 3 * count ints (free() it; NULL when
 * count is 0). Returns the count, or -1 (non-finite point, n < 0). Fewer than
 * three non-collinear distinct points give 0 triangles. The enclosing super
 * triangle is 1024 extents away, so a hull triangle flatter than that (a hull
 * point within ~1/4096 of the extent of the line through its neighbours) can
 * be left out; the morph avoids this by snapping near-border points onto the
 * frame. O(n^2): meant for face point sets (up to a few thousand points). */
int sp_delaunay(const float *pts, int n, int **tris);

/* The points added around every face so the triangles cover the whole frame:
 * the 4 corners and 4 edge midpoints of a w x h image, in this order:
 * (0,0) (w-1,0) (w-1,h-1) (0,h-1), then top, right, bottom, left midpoints. */
#define SP_MORPH_FRAME_POINTS 8
void sp_morph_frame_points(int w, int h, float out[2 * SP_MORPH_FRAME_POINTS]);

/* ---- warping ---- */

/* Piecewise-affine warp: for each triangle t of tris (indices into both point
 * sets), the part of dst inside dst_pts' triangle is sampled (inverse mapping,
 * bilinear) from src inside src_pts' triangle. src is sw x sh, dst is dw x dh,
 * both with c channels. A pixel that no triangle covers is set to 0; source
 * samples outside src repeat its edge. Triangles that are degenerate in
 * dst_pts cover nothing; overlapping (folded) triangles: the later one wins. */
int sp_warp_triangles(const uint8_t *src, int sw, int sh, int c, const float *src_pts, uint8_t *dst, int dw, int dh,
                      const float *dst_pts, const int *tris, int n_tris);

/* Bilinear resize (pixel centres kept aligned: x' = (x + 0.5) * dw / sw -
 * 0.5) that also maps k points in place (pts may be NULL). */
void sp_morph_resize(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh, float *pts, int k);

/* ---- morphing ---- */

/* A morph between two same-sized faces with k corresponding keypoints each.
 * The keypoints are clamped into the frame (those within 0.5 px + 0.2% of
 * the longer side of an edge go onto it), the frame points are appended
 * (n = k + SP_MORPH_FRAME_POINTS points per face) and the mean shape is
 * triangulated once; every frame reuses those triangles. The images are
 * copied. */
typedef struct sp_morph sp_morph;
sp_morph *sp_morph_new(const uint8_t *a, const float *pts_a, const uint8_t *b, const float *pts_b, int w, int h, int c,
                       int k);
/* One frame (w x h x c into out): the intermediate shape (1 - t_shape) A +
 * t_shape B, both faces warped to it and cross-dissolved with weight t_color
 * on B. t = 0 gives A exactly, t = 1 gives B exactly. Uses scratch space
 * inside m: render one frame of a given morph at a time. */
int sp_morph_render(const sp_morph *m, double t_shape, double t_color, uint8_t *out);
/* The n = k + SP_MORPH_FRAME_POINTS points of face 0 (A) or 1 (B), clamped,
 * frame points last; and the triangles (3 ints each). Valid until free. */
const float *sp_morph_points(const sp_morph *m, int face, int *n);
const int *sp_morph_triangles(const sp_morph *m, int *n_tris);
void sp_morph_free(sp_morph *m);

/* One-shot: sp_morph_new + sp_morph_render + sp_morph_free. */
int sp_morph_frame(const uint8_t *a, const float *pts_a, const uint8_t *b, const float *pts_b, int w, int h, int c,
                   int k, double t_shape, double t_color, uint8_t *out);

/* The mean face of n same-sized faces: their mean shape (written to
 * mean_pts[2k] unless NULL), each face warped to it, pixels averaged. */
int sp_mean_face(const uint8_t *const *imgs, const float *const *pts, int n, int w, int h, int c, int k, uint8_t *out,
                 float *mean_pts);

/* ---- output (src/io) ---- */

/* Animated GIF89a of n frames (each w x h x c, c = 1 or 3), delay_cs
 * hundredths of a second per frame, looping forever. One global palette:
 * grey images get the 256 greys; colour images a median-cut palette of up to
 * 256 colours over pixels sampled from all frames. Written atomically. */
int sp_gif_write(const char *path, const uint8_t *const *frames, int n, int w, int h, int c, int delay_cs);
/* Reads a GIF (full frames, as sp_gif_write makes them; frames smaller than
 * the screen are composed onto the previous one) into *rgb (n * h * w * 3
 * bytes, free() it). Returns the frame count, or -1 with an error. For tests
 * and tools; not a general-purpose decoder (no interlacing). */
int sp_gif_read(const char *path, int *w, int *h, uint8_t **rgb);

/* The figure of the two faces side by side, each with its triangulation
 * (thin lines) and points: keypoints red, frame points blue. pts_a, pts_b
 * hold n points each (the keypoints first, as sp_morph_points gives them);
 * the first k are keypoints. Written atomically. */
int sp_morph_points_png(const char *path, const uint8_t *a, const uint8_t *b, int w, int h, int c, const float *pts_a,
                        const float *pts_b, int n, int k, const int *tris, int n_tris);

#ifdef __cplusplus
}
#endif
#endif
