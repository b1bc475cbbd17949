/* Internal pieces of the synthetic-face renderer (src/data/synth_faces*.c). */
#ifndef SPRY_SYNTH_FACES_INTERNAL_H
#define SPRY_SYNTH_FACES_INTERNAL_H

#include <cairo.h>
#include <stdint.h>

#include "spry/rng.h"
#include "spry/synth.h"

/* Forehead outline points between jaw point 16 and jaw point 0 (over the top). */
#define SYN_FOREHEAD 11

/* The posed, projected face: landmarks plus the extra points only drawing
 * needs. Image coordinates (pixel centres at integers); z grows toward the
 * camera, in pixels. */
typedef struct {
  float lm[SP_SYNTH_FACE_K][2];
  float lmz[SP_SYNTH_FACE_K];
  float forehead[SYN_FOREHEAD][2];
  float ear[2][4][2]; /* [image-left, image-right][top, outer, bottom, inner] */
  float ear_z[2];
  float neck[4][2];                /* left top, left bottom, right bottom, right top */
  float iris[2][2];                /* iris centres */
  float iris_r;                    /* pixels */
  float eye_half_w;                /* pixels, before foreshortening */
  float hair_top[SYN_FOREHEAD][2]; /* forehead outline pushed out (hair volume) */
  float nose_dir[2];               /* image direction the nose points (unit-free) */
  float scale;
} syn_geom;

/* synth_faces_model.c */
void syn_face_geometry(const sp_synth_face_params *p, syn_geom *g);
/* Random identity shape, expression and pose (placement is left to the caller). */
void syn_sample_shape(sp_rng *r, sp_synth_face_params *p);
void syn_sample_expression(sp_rng *r, float strength, sp_synth_face_params *p);

/* synth_faces_draw.c: colours and the face itself. */
typedef struct {
  float skin[3], lip[3], hair[3], iris[3], brow[3];
  float light[2];       /* image direction light comes from (unit) */
  float light_strength; /* 0..1 how strong the side shading is */
  int hair_style;       /* 0 none, 1 short, 2 long, 3 bald-ish (fringe only at the sides) */
  float hairline;       /* 0..1 how low the fringe reaches */
  int ears;
  float clothes[3];
} syn_look;
void syn_sample_look(sp_rng *r, const sp_synth_face_options *opt, syn_look *look);
/* Catmull-Rom spline through pts (closed or open), as cairo path segments. */
void syn_path_spline(cairo_t *cr, const float (*pts)[2], int n, int closed);
/* Hair behind, neck, ears, face, features, fringe, in that order. */
void syn_draw_face(cairo_t *cr, const syn_geom *g, const syn_look *look, sp_rng *r);

/* synth_faces_scene.c: background clutter and camera effects. */
void syn_draw_background(cairo_t *cr, int w, int h, int clutter, sp_rng *r);
/* In place on an RGB image. */
void syn_blur_rgb(uint8_t *rgb, int w, int h, float sigma, int box);
void syn_noise_rgb(uint8_t *rgb, int w, int h, float sigma, sp_rng *r);
void syn_lowres_rgb(uint8_t *rgb, int w, int h, int factor);

#endif
