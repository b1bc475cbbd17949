/* `spry predict --weights W [--box x,y,w,h] [--overlay out.png] IMAGE...`:
 * keypoints of new images as JSON lines, in original image pixels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "io/json.h"
#include "spry/plot.h"
#include "spry/train.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry predict --weights W.safetensors [--box x,y,w,h] [--overlay out.png] [--backend B] IMAGE...\n"
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
  const char *weights = NULL, *overlay = NULL, *backend = NULL;
  float box[4];
  int has_box = 0, n_images = 0;
  const char **images = calloc((size_t)argc, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(images), usage(stdout), 0;
    if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
    else if (!strcmp(argv[i], "--overlay") && i + 1 < argc) overlay = argv[++i];
    else if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend = argv[++i];
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
  sp_kp_predictor *p = sp_kp_predictor_open(weights, backend);
  if (!p) {
    fprintf(stderr, "spry predict: %s\n", sp_last_error());
    return free(images), 1;
  }
  int k = sp_kp_predictor_keypoints(p), failures = 0;
  float *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)k);
  for (int i = 0; i < n_images; i++) {
    sp_image im;
    if (sp_image_load(images[i], sp_kp_predictor_channels(p), &im) != 0 ||
        sp_kp_predict(p, &im, has_box ? box : NULL, pts) != 0) {
      fprintf(stderr, "spry predict: %s\n", sp_last_error());
      failures++;
      continue;
    }
    sp_json_buf b;
    sp_json_buf_init(&b);
    sp_json_obj_begin(&b);
    sp_json_key(&b, "image"), sp_json_str(&b, images[i]);
    sp_json_key(&b, "points"), sp_json_arr_begin(&b);
    for (int j = 0; j < k; j++) {
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
      if (sp_draw_keypoints_png(path, im.px, im.w, im.h, im.c, pts, NULL, k, 0, 0) != 0) {
        fprintf(stderr, "spry predict: %s\n", sp_last_error());
        failures++;
      }
    }
    sp_image_free(&im);
  }
  free(pts);
  sp_kp_predictor_close(p);
  free(images);
  sp_plot_release_caches();
  return failures ? 1 : 0;
}
