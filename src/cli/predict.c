/* `spry predict --weights W [--box x,y,w,h] [--overlay out.png|out.jpg] IMAGE...`:
 * the faces of new photos and their keypoints as JSON lines, in the photos'
 * pixels. Faces are found the way the model's run found them: the whole
 * photo for models trained with data.box: image, the face detector for models
 * trained on face boxes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/faces_json.h"
#include "spry/plot.h"
#include "spry/train.h"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: spry predict --weights W.safetensors [--box x,y,w,h] [--overlay OUT.png|OUT.jpg] [--backend B] IMAGE...\n"
      "  Prints one JSON object per image, in the image's pixels:\n"
      "    {\"image\":..., \"faces\":[{\"box\":[x,y,w,h],\"points\":[[x,y],...]}, ...]}\n"
      "  Faces are found as the model's training run found them: the whole photo for models trained\n"
      "  with data.box: image (IMM-style), else every face the face detector finds (most confident\n"
      "  first). A photo with no face gives \"faces\":[] and a note on stderr.\n"
      "  --box: one face in this box (x, y, w, h; as a face detector gives it); the crop adds the\n"
      "         run's margin.\n"
      "  --overlay: the photo in colour with each face's box and points, in the format the name\n"
      "         says: .png (PNG) or .jpg/.jpeg (JPEG), any case; other names are refused before\n"
      "         anything is loaded. Several images: OUT_1.png, OUT_2.png, ...\n");
}

static void overlay_path(const char *base, int i, int n, char *out, size_t size) {
  if (n == 1) {
    snprintf(out, size, "%s", base);
    return;
  }
  const char *dot = strrchr(base, '.');
  int stem = dot ? (int)(dot - base) : (int)strlen(base);
  snprintf(out, size, "%.*s_%d%s", stem, base, i + 1, dot ? dot : "");
}

static void print_faces(const char *image, const sp_kp_face *faces, int n, int k) {
  sp_json_buf b;
  faces_json_begin(&b, image);
  for (int f = 0; f < n; f++) {
    faces_json_face(&b, faces[f].box);
    sp_json_key(&b, "points"), sp_json_arr_begin(&b);
    for (int j = 0; j < k; j++) {
      sp_json_arr_begin(&b), sp_json_f32(&b, faces[f].pts[2 * j]), sp_json_f32(&b, faces[f].pts[2 * j + 1]);
      sp_json_arr_end(&b);
    }
    sp_json_arr_end(&b);
    faces_json_face_end(&b);
  }
  faces_json_print(&b);
}

/* The colour photo with every face's box and points. */
static int draw_overlay(const char *path, const char *image, const sp_kp_face *faces, int n, int k) {
  sp_image im;
  if (sp_image_load(image, 3, &im) != 0) return -1;
  float *boxes = sp_xmalloc(sizeof(float) * 4 * (size_t)(n ? n : 1));
  const float **pts = sp_xmalloc(sizeof(float *) * (size_t)(n ? n : 1));
  for (int f = 0; f < n; f++) memcpy(boxes + 4 * f, faces[f].box, sizeof(float) * 4), pts[f] = faces[f].pts;
  int rc = sp_draw_faces_png(path, im.px, im.w, im.h, im.c, n, boxes, pts, k);
  free(boxes);
  free(pts);
  sp_image_free(&im);
  return rc;
}

int sp_cli_predict(int argc, char **argv) {
  const char *weights = NULL, *overlay = NULL, *backend = NULL, *box_arg = NULL;
  float box[4];
  int n_images = 0;
  const char **images = sp_xcalloc((size_t)argc, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    int r;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(images), usage(stdout), 0;
    if ((r = sp_arg_str(argc, argv, &i, "--weights", &weights)) ||
        (r = sp_arg_str(argc, argv, &i, "--overlay", &overlay)) ||
        (r = sp_arg_str(argc, argv, &i, "--backend", &backend)) ||
        (r = sp_arg_str(argc, argv, &i, "--box", &box_arg))) {
      if (r < 0) return free(images), 2;
    } else if (argv[i][0] != '-')
      images[n_images++] = argv[i];
    else {
      fprintf(stderr, "spry predict: unexpected argument '%s'\n", argv[i]);
      return free(images), usage(stderr), 2;
    }
  }
  if (box_arg && sp_parse_box(box_arg, box) != 0) {
    fprintf(stderr, "spry predict: --box: %s\n", sp_last_error());
    return free(images), 2;
  }
  if (!weights || !n_images) return free(images), usage(stderr), 2;
  /* A name we cannot write is a command-line error: say so before the model loads. */
  if (overlay && sp_image_file_format(overlay) < 0) {
    fprintf(stderr, "spry predict: --overlay: %s\n", sp_last_error());
    return free(images), 2;
  }
  sp_kp_predictor *p = sp_kp_predictor_open(weights, backend);
  if (!p) {
    fprintf(stderr, "spry predict: %s\n", sp_last_error());
    return free(images), 1;
  }
  if (!box_arg && !strcmp(sp_kp_predictor_trained_on(p), "points"))
    fprintf(stderr,
            "spry predict: note: %s was trained on crops cut around the true points; on detector boxes it "
            "is less accurate than its training run said (train with data.box: detect or file)\n",
            weights);
  int k = sp_kp_predictor_keypoints(p), failures = 0;
  for (int i = 0; i < n_images; i++) {
    sp_kp_face *faces;
    int n = sp_kp_predict_file(p, images[i], box_arg ? box : NULL, &faces);
    if (n < 0) {
      fprintf(stderr, "spry predict: %s\n", sp_last_error());
      failures++;
      continue;
    }
    if (n == 0) fprintf(stderr, "spry predict: %s: no face found\n", images[i]);
    print_faces(images[i], faces, n, k);
    if (overlay) {
      char path[2048];
      overlay_path(overlay, i, n_images, path, sizeof path);
      if (draw_overlay(path, images[i], faces, n, k) != 0) {
        fprintf(stderr, "spry predict: %s\n", sp_last_error());
        failures++;
      }
    }
    sp_kp_faces_free(faces, n);
  }
  sp_kp_predictor_close(p);
  free(images);
  sp_plot_release_caches();
  return failures ? 1 : 0;
}
