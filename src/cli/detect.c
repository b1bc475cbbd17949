/* `spry detect IMAGE...`: the faces of photos, one JSON line per image,
 * {"image":..., "faces":[{"box":[x,y,w,h],"score":s}, ...]} in source pixels,
 * most confident first. The detector is the one `spry predict` and
 * data.box: detect use (dlib's HOG frontal face detector; while it finds
 * nothing the photo is upsampled x2, at most --max-upsample times). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/faces_json.h"
#include "spry/data.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry detect [--max-upsample N] IMAGE...\n"
          "  Prints one JSON object per image: {\"image\":..., \"faces\":[{\"box\":[x,y,w,h],\"score\":s}, ...]}\n"
          "  in the image's pixels, most confident first; \"faces\":[] when there is none.\n"
          "  The face detector is dlib's HOG frontal face detector, the one spry predict uses.\n"
          "  --max-upsample N: while no face is found, upsample x2 and retry, at most N times (default %d)\n",
          SP_DETECT_MAX_UPSAMPLE);
}

static void print_faces(const char *image, const sp_face *faces, int n) {
  sp_json_buf b;
  faces_json_begin(&b, image);
  for (int f = 0; f < n; f++) {
    faces_json_face(&b, faces[f].box);
    sp_json_key(&b, "score"), sp_json_f32(&b, faces[f].score);
    faces_json_face_end(&b);
  }
  faces_json_print(&b);
}

int sp_cli_detect(int argc, char **argv) {
  int max_up = SP_DETECT_MAX_UPSAMPLE, n_images = 0, failures = 0;
  const char **images = sp_xcalloc((size_t)argc, sizeof(char *));
  for (int i = 1; i < argc; i++) {
    int r;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return free(images), usage(stdout), 0;
    if ((r = sp_arg_int(argc, argv, &i, "--max-upsample", 0, 4, &max_up))) {
      if (r < 0) return free(images), 2;
    } else if (argv[i][0] != '-')
      images[n_images++] = argv[i];
    else {
      fprintf(stderr, "spry detect: unexpected argument '%s'\n", argv[i]);
      return free(images), usage(stderr), 2;
    }
  }
  if (!n_images) return free(images), usage(stderr), 2;
  sp_face_detector *d = sp_face_detector_new();
  if (!d) {
    fprintf(stderr, "spry detect: %s\n", sp_last_error());
    return free(images), 1;
  }
  for (int i = 0; i < n_images; i++) {
    sp_image im;
    sp_face *faces = NULL;
    int n = -1;
    /* In colour: dlib's features take the strongest gradient over the channels. */
    if (sp_image_load(images[i], 3, &im) == 0) {
      n = sp_face_detect(d, &im, max_up, &faces);
      sp_image_free(&im);
    }
    if (n < 0) {
      fprintf(stderr, "spry detect: %s\n", sp_last_error());
      failures++;
      continue;
    }
    if (n == 0) fprintf(stderr, "spry detect: %s: no face found\n", images[i]);
    print_faces(images[i], faces, n);
    free(faces);
  }
  sp_face_detector_free(d);
  free(images);
  return failures ? 1 : 0;
}
