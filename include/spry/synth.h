/* spry synth: synthetic faces with known iBUG 68-point landmarks, for tests
 * and the demo where the real data is absent.
 *
 * A hand-made parametric 3-D face (identity shape + expression) is posed
 * (yaw, pitch, roll), projected with weak perspective and drawn with cairo
 * through the very points it reports, over a cluttered background, then
 * blurred, noised and (when written) JPEG-compressed. Everything is a pure
 * function of (seed, identity, view): same seed, same bytes, any thread count.
 *
 * Points use the data layer's convention: pixels, origin top-left, pixel
 * centres at integers. The model is mirror-symmetric: mirroring an image and
 * re-indexing with sp_scheme_ibug68()'s flip table gives the face rendered
 * from sp_synth_face_mirror()'s parameters. */
#ifndef SPRY_SYNTH_H
#define SPRY_SYNTH_H

#include <stdint.h>

#include "spry/data.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SP_SYNTH_FACE_K 68

/* What to vary and how much. sp_synth_face_defaults() gives the values in
 * brackets; tests switch parts off to check landmarks against clean pixels. */
typedef struct {
  int min_size, max_size;             /* image side range in pixels [96, 320] */
  int per_identity;                   /* images per synthetic person [12]: videos of 3 frames */
  float max_yaw, max_pitch, max_roll; /* degrees, symmetric ranges [40, 15, 25] */
  float expression;                   /* 0..1 scale of mouth open/smile/brow/blink [1] */
  float hair_prob, ear_prob;          /* chance of hair, of visible ears [0.85, 0.8] */
  int clutter;                        /* background shapes and textures [1]; 0 = plain gradient */
  float blur_prob, blur_max;          /* chance of a blur; largest gaussian sigma, px [0.35, 1.6] */
  float noise_max;                    /* largest sensor-noise std-dev, grey levels [6] */
  int jpeg_min, jpeg_max;             /* JPEG quality range when written [40, 95] */
  int threads;                        /* sp_synth_faces workers; 0 = online cores [0] */
  int progress;                       /* sp_synth_faces: progress line on stderr [1] */
} sp_synth_face_options;

sp_synth_face_options sp_synth_face_defaults(void);

/* One face's model parameters. Shape factors are multipliers of the template
 * (about 0.85..1.15); expression terms 0..1 (smile may be slightly negative);
 * pose in degrees: yaw > 0 turns the nose toward image right, pitch > 0 up,
 * roll > 0 turns the face clockwise on screen. */
typedef struct {
  float face_width, face_length, forehead, jaw_square;
  float eye_size, eye_spacing, eye_open, brow_height;
  float nose_length, nose_width, mouth_width, lip_thickness;
  float mouth_open, smile, brow_raise, blink, gaze_x, gaze_y;
  float yaw, pitch, roll;
  float scale;  /* pixels per model unit (half the jaw width) */
  float cx, cy; /* image position of the model origin (between the eyes) */
} sp_synth_face_params;

/* The 68 landmarks of a parameter set, pts[2*i], pts[2*i+1]. */
void sp_synth_face_landmarks(const sp_synth_face_params *p, float *pts);
/* Parameters of the mirror image in an image `width` pixels wide. */
sp_synth_face_params sp_synth_face_mirror(const sp_synth_face_params *p, int width);

/* What a render chose (tests compare pixels against it). */
typedef struct {
  sp_synth_face_params params;
  uint8_t skin[3], lip[3]; /* base colours before lighting */
  int jpeg_quality;        /* quality sp_synth_faces writes this image with */
  float blur_sigma;        /* 0 = not blurred */
  float noise_sigma;
  int hair, ears; /* whether drawn */
} sp_synth_face_info;

/* Renders view `view` of person `identity` into out (RGB, caller frees with
 * sp_image_free) and its 68 points into pts[136]; info may be NULL. No JPEG
 * step here: sp_synth_faces adds it when writing. */
int sp_synth_face_render(uint64_t seed, int identity, int view, const sp_synth_face_options *opt, sp_image *out,
                         float *pts, sp_synth_face_info *info);

/* Writes out_dir/images/Synth_Person_<id>_<v><f>.jpg and out_dir/keypoints.csv
 * in the youtube_faces_68 layout: `count` images, opt->per_identity per person
 * (video v, frame f). opt may be NULL (defaults). */
int sp_synth_faces(const char *out_dir, int count, uint64_t seed, const sp_synth_face_options *opt);

#ifdef __cplusplus
}
#endif
#endif
