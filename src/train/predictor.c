/* Keypoints of new images from a checkpoint: the library side of `spry
 * predict` and `spry morph`. The checkpoint carries its run's config, so the
 * model, input size, channels and normalisation come with it. */
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
  uint8_t *crop;
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
};

/* K from the model's head when the config predicts every annotated point. */
static int keypoints_of(const sp_train_config *cfg, const char *weights) {
  if (cfg->data.n_keypoints) return cfg->data.n_keypoints;
  sp_st_file *f = sp_st_open(weights);
  if (!f) return -1;
  int k = -1;
  const sp_tensor *t;
  if ((t = sp_st_get(f, "fc2.bias"))) k = (int)t->shape.d[0] / 2; /* VGG: 2K outputs */
  else if ((t = sp_st_get(f, "head.bias"))) k = (int)t->shape.d[0]; /* ResUNet: K heatmaps */
  sp_st_close(f);
  if (k <= 0) sp_error_set("%s: cannot tell the number of keypoints from the checkpoint", weights);
  return k;
}

sp_kp_predictor *sp_kp_predictor_open(const char *weights, const char *backend) {
  sp_kp_predictor *p = sp_xcalloc(1, sizeof *p);
  sp_st_file *f = sp_st_open(weights);
  const char *text = f ? sp_st_meta(f, "config") : NULL;
  int video = text && sp_config_text_is_video(text);
  if (video)
    sp_error_set("%s: a video model's checkpoint (task: video); predict and morph take keypoint checkpoints, "
                 "`spry eval` scores video ones", weights);
  int rc = text && !video ? sp_train_config_parse(text, weights, 0, NULL, &p->cfg, NULL) : -1;
  if (f && !text) sp_error_set("%s: no run config stored in the checkpoint", weights);
  sp_st_close(f);
  if (rc == 0 && backend) snprintf(p->cfg.backend, sizeof p->cfg.backend, "%s", backend);
  if (rc == 0 && (p->k = keypoints_of(&p->cfg, weights)) <= 0) rc = -1;
  sp_backend be;
  if (rc == 0 && sp_backend_parse(p->cfg.backend, &be) != 0) rc = -1;
  if (rc == 0) {
    /* The graph wants a mean shape for its (unused here) structure loss. */
    sp_kp_data d;
    memset(&d, 0, sizeof d);
    d.k = d.k_all = p->k;
    d.mean_shape = sp_xcalloc((size_t)p->k * 2, sizeof(float));
    for (int j = 0; j < p->k; j++) d.mean_shape[2 * j] = (float)j, d.mean_shape[2 * j + 1] = (float)(j * j % 7);
    p->g = sp_kp_build_graph(&p->cfg, &d, p->neighbours, &p->scale, &p->offset);
    free(d.mean_shape);
    if (!p->g || sp_checkpoint_load(weights, p->g, NULL, NULL, NULL, 0) != 0) rc = -1;
  }
  if (rc == 0) {
    int S = p->cfg.data.size, C = p->cfg.data.channels;
    sp_input_shape in[2] = {{"image", sp_shape4(1, C, S, S)}, {"points", sp_shape3(1, p->k, 2)}};
    if (!(p->plan = sp_plan_new(p->g, 2, in, be, 0, SP_PLAN_FROZEN))) rc = -1; /* weights fixed once loaded */
    p->crop = sp_xmalloc((size_t)S * S * C);
  }
  if (rc != 0) {
    sp_kp_predictor_close(p);
    return NULL;
  }
  return p;
}

int sp_kp_predictor_keypoints(const sp_kp_predictor *p) { return p->k; }
int sp_kp_predictor_channels(const sp_kp_predictor *p) { return p->cfg.data.channels; }

int sp_kp_predict(sp_kp_predictor *p, const sp_image *im, const float *box, float *pts) {
  int S = p->cfg.data.size, C = p->cfg.data.channels;
  if (im->c != C) return sp_error_set("predict: the model wants %d channel(s), the image has %d", C, im->c);
  double x0, y0, side;
  /* A box that misses the image would "predict" a face in the padding. */
  if (box && !(box[0] < im->w && box[1] < im->h && box[0] + box[2] > 0 && box[1] + box[3] > 0))
    return sp_error_set("predict: the box %g,%g,%gx%g lies outside the %dx%d image", box[0], box[1], box[2], box[3],
                        im->w, im->h);
  if (box) sp_crop_square_for_box(box, p->cfg.data.margin, &x0, &y0, &side);
  else {
    side = im->w > im->h ? im->w : im->h;
    x0 = (im->w - side) * 0.5, y0 = (im->h - side) * 0.5;
  }
  sp_image_crop_square(im, x0, y0, side, S, 1, p->crop);
  sp_normalize_u8(p->crop, 1, C, (int64_t)S * S, p->cfg.data.mean, p->cfg.data.std, SP_F32,
                  sp_plan_input(p->plan, "image")->data);
  sp_plan_forward(p->plan);
  const float *u = sp_plan_output(p->plan, "points_out")->data;
  for (int j = 0; j < p->k; j++) {
    pts[2 * j] = (u[2 * j] - p->offset) / p->scale;
    pts[2 * j + 1] = (u[2 * j + 1] - p->offset) / p->scale;
    sp_crop_to_source(x0, y0, side, S, &pts[2 * j], &pts[2 * j + 1]);
  }
  return 0;
}

void sp_kp_predictor_close(sp_kp_predictor *p) {
  if (!p) return;
  sp_plan_free(p->plan);
  sp_graph_free(p->g);
  free(p->crop);
  free(p);
}
