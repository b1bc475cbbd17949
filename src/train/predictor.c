/* Keypoints of new photos from a checkpoint: the library side of `spry
 * predict` and `spry morph`. The checkpoint carries its run's config, so the
 * model, input size, channels, normalisation and where its training boxes
 * came from come with it. A photo's faces are found the way that run found
 * them (the whole image, or the face detector), each is cut from the file by
 * the cache's own reader and resized by the evaluation's own path, so a new
 * photo reaches the network exactly as a validation face did. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/safetensors.h"
#include "spry/train.h"
#include "spry/video_train.h"
#include "train/trainer_internal.h"

struct sp_kp_predictor {
  sp_train_config cfg;
  sp_graph *g;
  sp_plan *plan;
  float scale, offset;
  int k;
  sp_box_mode mode;    /* how faces are found without a given box */
  char trained_on[16]; /* the run's box source ("unknown" for old checkpoints) */
  sp_cache one;        /* a one-sample cache: the crop, as the loader reads it */
  uint8_t *net_in;     /* [C][S][S] the network input */
  float *pts_buf;
  uint8_t flags[SP_MAX_KEYPOINTS];
  sp_image_reader *reader;
  sp_face_detector *det;
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
};

/* K from the model's head when the config predicts every annotated point.
 * A checkpoint is a file people share: K is bounded here, and every tensor
 * is checked against the graph the config builds when the weights load. */
static int keypoints_of(const sp_train_config *cfg, const char *weights) {
  if (cfg->data.n_keypoints) return cfg->data.n_keypoints;
  sp_st_file *f = sp_st_open(weights);
  if (!f) return -1;
  int64_t k = -1;
  const sp_tensor *t;
  if ((t = sp_st_get(f, "fc2.bias")) && t->shape.ndim == 1)
    k = t->shape.d[0] / 2; /* VGG: 2K outputs */
  else if ((t = sp_st_get(f, "head.bias")) && t->shape.ndim == 1)
    k = t->shape.d[0]; /* ResUNet: K heatmaps */
  sp_st_close(f);
  if (k <= 0) return sp_error_set("%s: cannot tell the number of keypoints from the checkpoint", weights);
  if (k > SP_MAX_KEYPOINTS)
    return sp_error_set("%s: the model's head has %lld keypoints, more than %d", weights, (long long)k,
                        SP_MAX_KEYPOINTS);
  return (int)k;
}

/* Models trained on the whole photo find the face there; every other run cut
 * its crops around face boxes, and a new photo's boxes come from the detector. */
static void choose_box_mode(sp_kp_predictor *p, const char *stored) {
  snprintf(p->trained_on, sizeof p->trained_on, "%s", stored && *stored ? stored : "unknown");
  sp_box_mode m = SP_BOX_AUTO;
  sp_box_mode_parse(p->cfg.data.box, &m);
  int image = m == SP_BOX_IMAGE || (m == SP_BOX_AUTO && (!stored || !strcmp(stored, "image")));
  p->mode = image ? SP_BOX_IMAGE : SP_BOX_DETECT;
}

static int build(sp_kp_predictor *p, const char *weights) {
  sp_backend be;
  if (sp_backend_parse(p->cfg.backend, &be) != 0) return -1;
  /* The graph wants a mean shape for its (unused here) structure loss. */
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  d.k = d.k_all = p->k;
  d.mean_shape = sp_xcalloc((size_t)p->k * 2, sizeof(float));
  for (int j = 0; j < p->k; j++) d.mean_shape[2 * j] = (float)j, d.mean_shape[2 * j + 1] = (float)(j * j % 7);
  p->g = sp_kp_build_graph(&p->cfg, &d, p->neighbours, &p->scale, &p->offset);
  free(d.mean_shape);
  if (!p->g || sp_checkpoint_load(weights, p->g, NULL, NULL, NULL, 0) != 0) return -1;
  const int S = p->cfg.data.size, C = p->cfg.data.channels, CS = p->cfg.data.crop_size;
  sp_input_shape in[2] = {{"image", sp_shape4(1, C, S, S)}, {"points", sp_shape3(1, p->k, 2)}};
  if (!(p->plan = sp_plan_new(p->g, 2, in, be, 0, SP_PLAN_FROZEN))) return -1; /* weights fixed once loaded */
  /* One crop at a time, through the loader's own unaugmented path. */
  p->one.n = 1, p->one.size = CS, p->one.channels = C, p->one.k = p->k;
  p->one.pixels = sp_xmalloc((size_t)CS * CS * C);
  p->one.points = sp_xcalloc((size_t)p->k * 2, sizeof(float));
  p->one.vis = sp_xcalloc((size_t)p->k, 1);
  p->net_in = sp_xmalloc((size_t)S * S * C);
  p->pts_buf = sp_xmalloc(sizeof(float) * 2 * (size_t)p->k);
  p->reader = sp_image_reader_new();
  return 0;
}

sp_kp_predictor *sp_kp_predictor_open(const char *weights, const char *backend) {
  sp_kp_predictor *p = sp_xcalloc(1, sizeof *p);
  sp_st_file *f = sp_st_open(weights);
  const char *text = f ? sp_st_meta(f, "config") : NULL;
  int video = text && sp_config_text_is_video(text);
  if (video)
    sp_error_set(
        "%s: a video model's checkpoint (task: video); predict and morph take keypoint checkpoints, "
        "`spry eval` scores video ones",
        weights);
  int rc = text && !video ? sp_train_config_parse(text, weights, 0, NULL, &p->cfg, NULL) : -1;
  if (f && !text) sp_error_set("%s: no run config stored in the checkpoint", weights);
  if (rc == 0) choose_box_mode(p, sp_st_meta(f, "box_source"));
  sp_st_close(f);
  if (rc == 0 && backend) snprintf(p->cfg.backend, sizeof p->cfg.backend, "%s", backend);
  if (rc == 0 && (p->k = keypoints_of(&p->cfg, weights)) <= 0) rc = -1;
  if (rc == 0) rc = build(p, weights);
  if (rc != 0) {
    sp_kp_predictor_close(p);
    return NULL;
  }
  return p;
}

int sp_kp_predictor_keypoints(const sp_kp_predictor *p) { return p->k; }
int sp_kp_predictor_channels(const sp_kp_predictor *p) { return p->cfg.data.channels; }
sp_box_mode sp_kp_predictor_box_mode(const sp_kp_predictor *p) { return p->mode; }
const char *sp_kp_predictor_trained_on(const sp_kp_predictor *p) { return p->trained_on; }

/* The crop in p->one.pixels (cut around rect) -> points in source pixels. */
static void run_crop(sp_kp_predictor *p, sp_crop_rect rect, float *pts) {
  const int S = p->cfg.data.size, C = p->cfg.data.channels, CS = p->one.size;
  sp_augment_config none = sp_augment_config_none(S);
  sp_augment_sample(&p->one, 0, &none, NULL, 0, p->net_in, p->pts_buf, p->flags);
  sp_normalize_u8(p->net_in, 1, C, (int64_t)S * S, p->cfg.data.mean, p->cfg.data.std, SP_F32,
                  sp_plan_input(p->plan, "image")->data);
  sp_plan_forward(p->plan);
  const float *u = sp_plan_output(p->plan, "points_out")->data;
  /* Network input pixels -> crop pixels (the unaugmented map is a zoom
   * about the centres, as in evaluation) -> source pixels. */
  const double zoom = (double)CS / S, cc = (CS - 1) * 0.5, cs = (S - 1) * 0.5;
  for (int j = 0; j < p->k; j++) {
    pts[2 * j] = (float)(((u[2 * j] - p->offset) / p->scale - cs) * zoom + cc);
    pts[2 * j + 1] = (float)(((u[2 * j + 1] - p->offset) / p->scale - cs) * zoom + cc);
    sp_crop_to_source(rect, CS, &pts[2 * j], &pts[2 * j + 1]);
  }
}

/* Detected faces (or the whole image, or the given box) as sp_kp_face rows
 * with room for their points; returns the count or -1. */
static int find_faces(sp_kp_predictor *p, const sp_image *im, int w, int h, const float *box, const char *what,
                      sp_kp_face **out) {
  *out = NULL;
  sp_face *found = NULL;
  int n = 1;
  if (box) {
    if (sp_box_check(box, w, h) != 0) return sp_error_push("%s: --box", what);
  } else if (p->mode == SP_BOX_DETECT) {
    if (!p->det && !(p->det = sp_face_detector_new())) return -1;
    if ((n = sp_face_detect(p->det, im, SP_DETECT_MAX_UPSAMPLE, &found)) < 0) return sp_error_push("%s", what);
  }
  sp_kp_face *faces = sp_xcalloc((size_t)(n ? n : 1), sizeof *faces);
  for (int i = 0; i < n; i++) {
    const float whole[4] = {0, 0, (float)w, (float)h};
    memcpy(faces[i].box, box ? box : found ? found[i].box : whole, sizeof faces[i].box);
    faces[i].score = found ? found[i].score : 0;
    faces[i].pts = sp_xmalloc(sizeof(float) * 2 * (size_t)p->k);
  }
  free(found);
  *out = faces;
  return n;
}

static sp_crop_rect rect_of(const sp_kp_predictor *p, const sp_kp_face *f, const float *box, int w, int h) {
  if (!box && p->mode == SP_BOX_IMAGE) return sp_crop_rect_whole(w, h);
  return sp_crop_rect_for_box(f->box, p->cfg.data.margin);
}

int sp_kp_predict_file(sp_kp_predictor *p, const char *path, const float *box, sp_kp_face **faces) {
  *faces = NULL;
  int w, h;
  if (!p->reader) return sp_error_set("%s: no image reader (out of memory)", path);
  if (sp_image_reader_open(p->reader, path, &w, &h) != 0) return -1;
  sp_image im = {0, 0, 0, NULL};
  /* dlib's features take the strongest gradient over the colour channels:
   * the detector sees the photo in colour whatever the model reads. */
  if (!box && p->mode == SP_BOX_DETECT && sp_image_reader_decode(p->reader, 3, &im) != 0) return -1;
  int n = find_faces(p, &im, w, h, box, path, faces);
  sp_image_free(&im);
  for (int i = 0; i < n; i++) {
    sp_crop_rect r = rect_of(p, &(*faces)[i], box, w, h);
    if (sp_image_reader_crop(p->reader, r, p->one.size, p->one.channels, p->one.pixels) != 0) {
      sp_kp_faces_free(*faces, n);
      *faces = NULL;
      return -1;
    }
    run_crop(p, r, (*faces)[i].pts);
  }
  return n;
}

int sp_kp_predict_image(sp_kp_predictor *p, const sp_image *im, const float *box, sp_kp_face **faces) {
  *faces = NULL;
  if (im->c != p->one.channels)
    return sp_error_set("predict: the model wants %d channel(s), the image has %d", p->one.channels, im->c);
  int n = find_faces(p, im, im->w, im->h, box, "predict", faces);
  for (int i = 0; i < n; i++) {
    sp_crop_rect r = rect_of(p, &(*faces)[i], box, im->w, im->h);
    sp_image_crop(im, r, p->one.size, 0, p->one.pixels);
    run_crop(p, r, (*faces)[i].pts);
  }
  return n;
}

void sp_kp_faces_free(sp_kp_face *faces, int n) {
  for (int i = 0; faces && i < n; i++) free(faces[i].pts);
  free(faces);
}

int sp_kp_largest_face(const sp_kp_face *faces, int n) {
  int best = -1;
  for (int i = 0; i < n; i++)
    if (best < 0 || (double)faces[i].box[2] * faces[i].box[3] > (double)faces[best].box[2] * faces[best].box[3])
      best = i;
  return best;
}

int sp_kp_predict(sp_kp_predictor *p, const sp_image *im, const float *box, float *pts) {
  sp_kp_face *faces;
  int n = sp_kp_predict_image(p, im, box, &faces);
  if (n < 0) return -1;
  int f = sp_kp_largest_face(faces, n);
  if (f >= 0) memcpy(pts, faces[f].pts, sizeof(float) * 2 * (size_t)p->k);
  sp_kp_faces_free(faces, n);
  return f >= 0 ? 0 : sp_error_set("predict: no face found in the %dx%d image", im->w, im->h);
}

void sp_kp_predictor_close(sp_kp_predictor *p) {
  if (!p) return;
  sp_plan_free(p->plan);
  sp_graph_free(p->g);
  free(p->one.pixels);
  free(p->one.points);
  free(p->one.vis);
  free(p->net_in);
  free(p->pts_buf);
  sp_image_reader_free(p->reader);
  sp_face_detector_free(p->det);
  free(p);
}
