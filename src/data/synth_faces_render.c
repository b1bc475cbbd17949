/* One synthetic face, start to finish: sample who (identity), where (video:
 * background, light) and how (frame: pose, expression, framing, camera
 * faults), fit the face in the picture, draw it, degrade it.
 *
 * Randomness comes from three keyed streams, so an identity keeps its shape
 * and colours in every image, the frames of one "video" share a background,
 * and nothing depends on which thread rendered which image. */
#include <math.h>
#include <string.h>

#include "data/synth_faces_internal.h"

sp_synth_face_options sp_synth_face_defaults(void) {
  return (sp_synth_face_options){.min_size = 96,
                                 .max_size = 320,
                                 .per_identity = 12,
                                 .max_yaw = 40,
                                 .max_pitch = 15,
                                 .max_roll = 25,
                                 .expression = 1,
                                 .hair_prob = 0.85f,
                                 .ear_prob = 0.8f,
                                 .clutter = 1,
                                 .blur_prob = 0.35f,
                                 .blur_max = 1.6f,
                                 .noise_max = 6,
                                 .jpeg_min = 40,
                                 .jpeg_max = 95,
                                 .threads = 0,
                                 .progress = 1};
}

/* Symmetric and peaked at 0: most video faces look roughly at the camera. */
static float triangular(sp_rng *r, float m) { return m * (sp_rng_uniform(r) + sp_rng_uniform(r) - 1.0f); }

static void bbox(const float *pts, float *b) {
  b[0] = b[2] = pts[0];
  b[1] = b[3] = pts[1];
  for (int i = 1; i < SP_SYNTH_FACE_K; i++) {
    b[0] = fminf(b[0], pts[2 * i]);
    b[2] = fmaxf(b[2], pts[2 * i]);
    b[1] = fminf(b[1], pts[2 * i + 1]);
    b[3] = fmaxf(b[3], pts[2 * i + 1]);
  }
}

/* Shrinks and shifts the face until every landmark is inside the picture,
 * with a small margin: like the real crops, points stay in view. */
static void fit_in_image(sp_synth_face_params *p, int w, int h) {
  float pts[2 * SP_SYNTH_FACE_K], b[4];
  const float margin = 2.0f;
  for (int it = 0; it < 4; it++) {
    sp_synth_face_landmarks(p, pts);
    bbox(pts, b);
    float bw = b[2] - b[0], bh = b[3] - b[1];
    float f = fminf((0.94f * (float)w) / bw, (0.9f * (float)h) / bh);
    if (f >= 1) break;
    p->scale *= f;
    p->cx = (float)w / 2 + (p->cx - (float)w / 2) * f;
    p->cy = (float)h / 2 + (p->cy - (float)h / 2) * f;
  }
  sp_synth_face_landmarks(p, pts);
  bbox(pts, b);
  if (b[0] < margin) p->cx += margin - b[0];
  if (b[2] > (float)w - 1 - margin) p->cx -= b[2] - ((float)w - 1 - margin);
  if (b[1] < margin) p->cy += margin - b[1];
  if (b[3] > (float)h - 1 - margin) p->cy -= b[3] - ((float)h - 1 - margin);
}

/* The light belongs to the video, not the person: direction and strength,
 * and the key of the video's background. */
static uint64_t sample_scene(sp_rng *where, syn_look *look) {
  float a = sp_rng_range(where, 0, 6.2831853f);
  look->light[0] = cosf(a);
  look->light[1] = sinf(a);
  look->light_strength = sp_rng_range(where, 0.1f, 0.7f);
  return sp_rng_u64(where);
}

/* Frame: size and aspect like the real crops (a bit taller than wide), then
 * expression, pose and where the face sits, fitted inside the picture. */
static void sample_frame(sp_rng *how, const sp_synth_face_options *opt, sp_synth_face_params *p, int *w_out,
                         int *h_out) {
  int w = opt->min_size + (int)sp_rng_below(how, (uint32_t)(opt->max_size - opt->min_size + 1));
  int h = (int)lroundf((float)w / sp_rng_range(how, 0.8f, 1.1f));
  if (h < opt->min_size) h = opt->min_size;
  if (h > opt->max_size) h = opt->max_size;
  syn_sample_expression(how, opt->expression, p);
  p->yaw = triangular(how, opt->max_yaw);
  p->pitch = triangular(how, opt->max_pitch);
  p->roll = triangular(how, opt->max_roll);
  p->scale = sp_rng_range(how, 0.38f, 0.6f) * (float)w / (2 * p->face_width);
  p->cx = (float)w * sp_rng_range(how, 0.42f, 0.58f);
  p->cy = (float)h * sp_rng_range(how, 0.36f, 0.48f);
  fit_in_image(p, w, h);
  *w_out = w;
  *h_out = h;
}

/* Cairo's xRGB words -> RGB bytes of a new w x h image. */
static void surface_to_rgb(cairo_surface_t *surf, int w, int h, sp_image *out) {
  out->w = w;
  out->h = h;
  out->c = 3;
  out->px = sp_xmalloc((size_t)w * h * 3);
  const uint8_t *src = cairo_image_surface_get_data(surf);
  int stride = cairo_image_surface_get_stride(surf);
  for (int y = 0; y < h; y++) {
    const uint32_t *row = (const uint32_t *)(src + (size_t)y * stride);
    uint8_t *d = out->px + (size_t)y * w * 3;
    for (int x = 0; x < w; x++) {
      d[3 * x + 0] = (uint8_t)(row[x] >> 16);
      d[3 * x + 1] = (uint8_t)(row[x] >> 8);
      d[3 * x + 2] = (uint8_t)row[x];
    }
  }
}

/* Background, then the posed face, drawn with cairo into out (RGB). */
static int draw_picture(const sp_synth_face_params *p, const syn_look *look, int w, int h, int clutter,
                        uint64_t background_key, sp_rng *how, sp_image *out) {
  cairo_surface_t *surf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  if (cairo_surface_status(surf) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(surf);
    return sp_error_set("synth faces: cannot create a %dx%d cairo surface", w, h);
  }
  cairo_t *cr = cairo_create(surf);
  sp_rng bg = sp_rng_make(background_key);
  syn_draw_background(cr, w, h, clutter, &bg);
  /* Landmarks put pixel centres at integers; cairo puts them at +0.5. */
  cairo_translate(cr, 0.5, 0.5);
  syn_geom g;
  syn_face_geometry(p, &g);
  syn_draw_face(cr, &g, look, how);
  cairo_destroy(cr);
  cairo_surface_flush(surf);
  surface_to_rgb(surf, w, h, out);
  cairo_surface_destroy(surf);
  return 0;
}

/* What the camera did to a picture, and the JPEG quality it will be written with. */
typedef struct {
  int jpeg_quality;
  float blur_sigma, noise_sigma;
} camera_faults;

/* Camera faults, each drawn whether used or not so streams stay aligned. */
static camera_faults degrade(sp_rng *how, const sp_synth_face_options *opt, sp_image *out) {
  const int w = out->w, h = out->h;
  float u_blur = sp_rng_uniform(how), sigma = sp_rng_range(how, 0.4f, fmaxf(0.4f, opt->blur_max));
  int box = sp_rng_uniform(how) < 0.3f;
  float u_low = sp_rng_uniform(how);
  float noise = sp_rng_range(how, 0, opt->noise_max);
  int q = opt->jpeg_min + (int)sp_rng_below(how, (uint32_t)(opt->jpeg_max - opt->jpeg_min + 1));
  int lowres = u_low < 0.5f * opt->blur_prob;
  if (lowres) syn_lowres_rgb(out->px, w, h, 2);
  if (u_blur < opt->blur_prob)
    syn_blur_rgb(out->px, w, h, sigma, box);
  else
    sigma = 0;
  if (lowres) sigma = fmaxf(sigma, 1.0f); /* the 2x mosaic + blur acts like sigma ~1 */
  syn_noise_rgb(out->px, w, h, noise, how);
  return (camera_faults){q, sigma, noise};
}

static void fill_info(sp_synth_face_info *info, const sp_synth_face_params *p, const syn_look *look,
                      const camera_faults *f) {
  memset(info, 0, sizeof *info);
  info->params = *p;
  for (int i = 0; i < 3; i++) {
    info->skin[i] = (uint8_t)lroundf(255 * fminf(1, look->skin[i]));
    info->lip[i] = (uint8_t)lroundf(255 * fminf(1, look->lip[i]));
  }
  info->jpeg_quality = f->jpeg_quality;
  info->blur_sigma = f->blur_sigma;
  info->noise_sigma = f->noise_sigma;
  info->hair = look->hair_style != 0;
  info->ears = look->ears;
}

int sp_synth_face_render(uint64_t seed, int identity, int view, const sp_synth_face_options *opt_in, sp_image *out,
                         float *pts, sp_synth_face_info *info) {
  sp_synth_face_options opt = opt_in ? *opt_in : sp_synth_face_defaults();
  if (opt.min_size < 16 || opt.max_size < opt.min_size || opt.max_size > 8192)
    return sp_error_set("synth faces: bad size range %d,%d (16 <= min <= max <= 8192)", opt.min_size, opt.max_size);
  if (identity < 0 || view < 0) return sp_error_set("synth faces: negative identity %d or view %d", identity, view);
  memset(out, 0, sizeof *out);
  const uint64_t id = (uint64_t)identity;
  sp_rng who = sp_rng_make(sp_rng_key(seed, 4 * id + 0, 0));
  sp_rng where = sp_rng_make(sp_rng_key(seed, 4 * id + 1, (uint64_t)(view / 3)));
  sp_rng how = sp_rng_make(sp_rng_key(seed, 4 * id + 2, (uint64_t)view));

  sp_synth_face_params p;
  memset(&p, 0, sizeof p);
  syn_sample_shape(&who, &p);
  syn_look look;
  syn_sample_look(&who, &opt, &look);
  uint64_t background_key = sample_scene(&where, &look);
  int w, h;
  sample_frame(&how, &opt, &p, &w, &h);
  sp_synth_face_landmarks(&p, pts);

  if (draw_picture(&p, &look, w, h, opt.clutter, background_key, &how, out) != 0) return -1;
  camera_faults faults = degrade(&how, &opt, out);
  if (info) fill_info(info, &p, &look, &faults);
  return 0;
}
