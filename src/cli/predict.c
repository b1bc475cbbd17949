/* `spry predict --weights W [--box x,y,w,h] [--overlay out.png] IMAGE...`:
 * keypoints of new images as JSON lines, in original image pixels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/json.h"
#include "spry/data.h"
#include "spry/plot.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "train/trainer_internal.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry predict --weights W.safetensors [--box x,y,w,h] [--overlay out.png] IMAGE...\n"
          "  Prints one JSON object per image: {\"image\":..., \"points\": [[x,y],...]} in the image's pixels.\n"
          "  --box: the face's box (as the training crops were cut: the box of the landmarks); the\n"
          "         crop adds the run's margin. Without it the whole image is the face crop.\n"
          "  --overlay: draw the points (several images: out_1.png, out_2.png, ...).\n");
}

static void overlay_path(const char *base, int i, int n, char *out, size_t size) {
  if (n == 1) {
    snprintf(out, size, "%s", base);
    return;
  }
  const char *dot = strrchr(base, '.');
  int stem = dot ? (int)(dot - base) : (int)strlen(base);
  snprintf(out, size, "%.*s_%d%s", stem, base, i + 1, dot ? dot : ".png");
}

int sp_cli_predict(int argc, char **argv) {
  const char *weights = NULL, *overlay = NULL;
  float box[4];
  int has_box = 0, n_images = 0;
  const char **images = calloc((size_t)argc, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(images), usage(stdout), 0;
    if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
    else if (!strcmp(argv[i], "--overlay") && i + 1 < argc) overlay = argv[++i];
    else if (!strcmp(argv[i], "--box") && i + 1 < argc) {
      if (sscanf(argv[++i], "%f,%f,%f,%f", &box[0], &box[1], &box[2], &box[3]) != 4 || box[2] <= 0 || box[3] <= 0) {
        fprintf(stderr, "spry predict: --box wants x,y,w,h with w, h > 0, got '%s'\n", argv[i]);
        return free(images), 2;
      }
      has_box = 1;
    } else if (argv[i][0] != '-') images[n_images++] = argv[i];
    else {
      fprintf(stderr, "spry predict: unexpected argument '%s'\n", argv[i]);
      return free(images), usage(stderr), 2;
    }
  }
  if (!weights || !n_images) return free(images), usage(stderr), 2;

  sp_st_file *f = sp_st_open(weights);
  const char *text = f ? sp_st_meta(f, "config") : NULL;
  sp_train_config cfg;
  int rc = text ? sp_train_config_parse(text, weights, 0, NULL, &cfg, NULL) : -1;
  if (f && !text) sp_error_set("%s: no config stored in the checkpoint", weights);
  sp_st_close(f);
  if (rc != 0) {
    fprintf(stderr, "spry predict: %s\n", sp_last_error());
    return free(images), 2;
  }
  /* The graph needs K and a mean shape only for the (unused) losses. */
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  sp_st_file *wf = sp_st_open(weights);
  const sp_tensor *fc = NULL;
  int k = cfg.data.n_keypoints;
  d.k = k ? k : 0;
  if (!k) {
    /* K from the head: the model's last layer outputs 2K values or K heatmaps. */
    const char *heads[] = {"fc2.bias", "head.bias", "out.bias"};
    for (int i = 0; i < 3 && wf && !fc; i++) fc = sp_st_get(wf, heads[i]);
    d.k = fc ? (int)(strncmp(cfg.model, "vgg", 3) ? fc->shape.d[0] : fc->shape.d[0] / 2) : 0;
  }
  sp_st_close(wf);
  if (d.k <= 0) {
    fprintf(stderr, "spry predict: %s: cannot tell the number of keypoints\n", weights);
    return free(images), 1;
  }
  d.mean_shape = sp_xcalloc((size_t)d.k * 2, sizeof(float));
  for (int j = 0; j < d.k; j++) d.mean_shape[2 * j] = (float)j, d.mean_shape[2 * j + 1] = (float)(j * j % 7);
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_backend be;
  sp_graph *g = NULL;
  sp_plan *p = NULL;
  int S = cfg.data.size, C = cfg.data.channels;
  if (sp_backend_parse(cfg.backend, &be) == 0 && (g = sp_kp_build_graph(&cfg, &d, neighbours, &scale, &offset)) &&
      sp_checkpoint_load(weights, g, NULL, NULL, NULL, 0) == 0) {
    sp_input_shape in[2] = {{"image", sp_shape4(1, C, S, S)}, {"points", sp_shape3(1, d.k, 2)}};
    p = sp_plan_new(g, 2, in, be, 0, 0);
  }
  if (!p) {
    fprintf(stderr, "spry predict: %s\n", sp_last_error());
    sp_graph_free(g);
    free(d.mean_shape);
    return free(images), 1;
  }
  uint8_t *crop = sp_xmalloc((size_t)S * S * C);
  float *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)d.k);
  int failures = 0;
  for (int i = 0; i < n_images; i++) {
    sp_image im;
    if (sp_image_load(images[i], C, &im) != 0) {
      fprintf(stderr, "spry predict: %s\n", sp_last_error());
      failures++;
      continue;
    }
    double x0, y0, side;
    if (has_box) sp_crop_square_for_box(box, cfg.data.margin, &x0, &y0, &side);
    else {
      side = im.w > im.h ? im.w : im.h;
      x0 = (im.w - side) * 0.5, y0 = (im.h - side) * 0.5;
    }
    sp_image_crop_square(&im, x0, y0, side, S, 1, crop);
    sp_normalize_u8(crop, 1, C, (int64_t)S * S, cfg.data.mean, cfg.data.std, SP_F32, sp_plan_input(p, "image")->data);
    sp_plan_forward(p);
    const float *u = sp_plan_output(p, "points_out")->data;
    sp_json_buf b;
    sp_json_buf_init(&b);
    sp_json_obj_begin(&b);
    sp_json_key(&b, "image"), sp_json_str(&b, images[i]);
    sp_json_key(&b, "points"), sp_json_arr_begin(&b);
    for (int j = 0; j < d.k; j++) {
      pts[2 * j] = (u[2 * j] - offset) / scale;
      pts[2 * j + 1] = (u[2 * j + 1] - offset) / scale;
      sp_crop_to_source(x0, y0, side, S, &pts[2 * j], &pts[2 * j + 1]);
      sp_json_arr_begin(&b), sp_json_f32(&b, pts[2 * j]), sp_json_f32(&b, pts[2 * j + 1]), sp_json_arr_end(&b);
    }
    sp_json_arr_end(&b);
    sp_json_obj_end(&b);
    printf("%s\n", b.s);
    fflush(stdout);
    sp_json_buf_free(&b);
    if (overlay) {
      char path[2048];
      overlay_path(overlay, i, n_images, path, sizeof path);
      if (sp_draw_keypoints_png(path, im.px, im.w, im.h, im.c, pts, NULL, d.k, 0, 0) != 0) {
        fprintf(stderr, "spry predict: %s\n", sp_last_error());
        failures++;
      }
    }
    sp_image_free(&im);
  }
  free(crop);
  free(pts);
  sp_plan_free(p);
  sp_graph_free(g);
  free(d.mean_shape);
  free(images);
  sp_plot_release_caches();
  return failures ? 1 : 0;
}
