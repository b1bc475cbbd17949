/* `spry morph --weights W A.jpg B.jpg --out DIR`: automatic face morphing.
 * The keypoints of both faces come from a trained checkpoint (or from given
 * point files), B is resized to A's size, and the morph is written as
 * frame_000.png ... frame_N.png, points.png (points + triangles) and an
 * animated morph.gif. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "io/json.h"
#include "spry/morph.h"
#include "spry/plot.h"
#include "spry/train.h"
#include "spry/video.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry morph (--weights W.safetensors | --points-a FILE --points-b FILE) A_IMAGE B_IMAGE --out DIR\n"
          "                  [--frames N] [--box-a x,y,w,h] [--box-b x,y,w,h] [--backend B]\n"
          "                  [--gif-size PX] [--delay CS]\n"
          "  Morphs face A into face B: the keypoints of both faces (predicted by the checkpoint, or read\n"
          "  from point files) are triangulated, both faces are warped to each intermediate shape and\n"
          "  cross-dissolved. B is resized to A's size first.\n"
          "  --frames N: N steps, N + 1 frames (default 24): DIR/frame_000.png ... frame_N.png\n"
          "  --box-a/--box-b: the face's box x,y,w,h for the model (as predict takes one); default: the largest\n"
          "         face found as `spry predict` finds faces (the whole photo or the face detector)\n"
          "  --points-a/--points-b: JSON from `spry predict` (first line; its largest face) or a bare\n"
          "         [[x,y],...] array,\n"
          "         or an annotation file: IMM .dat/.asf, iBUG .pts; these replace the model's points\n"
          "  --gif-size PX: longer side of DIR/morph.gif (default 360; 0 = full size)\n"
          "  --delay CS: GIF frame time in 1/100 s (default 8). The GIF plays A->B->A and loops.\n"
          "  Also writes DIR/points.png: both faces with their points and the triangles.\n");
}

/* The model's points for the largest face of a photo (or the face in box),
 * found as `spry predict` finds it. */
static int predict_points(sp_kp_predictor *p, const char *path, const float *box, float **pts, int *k) {
  sp_kp_face *faces;
  int n = sp_kp_predict_file(p, path, box, &faces), f = sp_kp_largest_face(faces, n);
  if (n < 0) return -1;
  *k = sp_kp_predictor_keypoints(p);
  *pts = NULL;
  if (f >= 0) {
    *pts = sp_xmalloc(sizeof(float) * 2 * (size_t)*k);
    memcpy(*pts, faces[f].pts, sizeof(float) * 2 * (size_t)*k);
  }
  sp_kp_faces_free(faces, n);
  return f >= 0 ? 0 : sp_error_set("%s: no face found (give its box with --box-a / --box-b)", path);
}

typedef struct {
  const char *weights, *backend, *out, *img[2], *points[2];
  int frames, gif_size, delay, has_box[2];
  float box[2][4];
} options;

static int parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->frames = 24, o->gif_size = 360, o->delay = 8;
  int n_img = 0;
  for (int i = 1; i < argc; i++) {
    int r;
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 1;
    if ((r = sp_arg_str(argc, argv, &i, "--weights", &o->weights)) ||
        (r = sp_arg_str(argc, argv, &i, "--backend", &o->backend)) ||
        (r = sp_arg_str(argc, argv, &i, "--out", &o->out)) ||
        (r = sp_arg_str(argc, argv, &i, "--points-a", &o->points[0])) ||
        (r = sp_arg_str(argc, argv, &i, "--points-b", &o->points[1])) ||
        (r = sp_arg_int(argc, argv, &i, "--frames", 1, 10000, &o->frames)) ||
        (r = sp_arg_int(argc, argv, &i, "--gif-size", 0, 8192, &o->gif_size)) ||
        (r = sp_arg_int(argc, argv, &i, "--delay", 0, 65535, &o->delay))) {
      if (r < 0) return 2;
      continue;
    }
    int which = !strcmp(argv[i], "--box-a") ? 0 : !strcmp(argv[i], "--box-b") ? 1 : -1;
    if (which >= 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "spry morph: %s needs a value x,y,w,h\n", argv[i]);
        return 2;
      }
      if (sp_parse_box(argv[i + 1], o->box[which]) != 0) {
        fprintf(stderr, "spry morph: %s: %s\n", argv[i], sp_last_error());
        return 2;
      }
      i++;
      o->has_box[which] = 1;
    } else if (argv[i][0] != '-' && n_img < 2)
      o->img[n_img++] = argv[i];
    else {
      fprintf(stderr, "spry morph: unexpected argument '%s'\n", argv[i]);
      return usage(stderr), 2;
    }
  }
  if (n_img != 2 || !o->out) return usage(stderr), 2;
  if (!o->weights && !(o->points[0] && o->points[1])) {
    fprintf(stderr, "spry morph: give --weights, or both --points-a and --points-b\n");
    return 2;
  }
  /* One point file with --weights mixes (that face's points from the file);
   * with both files the checkpoint would go unused. */
  if (o->weights && o->points[0] && o->points[1]) {
    fprintf(stderr, "spry morph: --weights with both --points-a and --points-b: the checkpoint would not be used\n");
    return 2;
  }
  return 0;
}

static int write_outputs(const options *o, const sp_morph *m, const sp_image *a, const sp_image *b, int k) {
  const int w = a->w, h = a->h, c = a->c, n_frames = o->frames + 1;
  char path[4200];
  int n, n_tris;
  const float *pa = sp_morph_points(m, 0, &n), *pb = sp_morph_points(m, 1, NULL);
  const int *tris = sp_morph_triangles(m, &n_tris);
  snprintf(path, sizeof path, "%s/points.png", o->out);
  if (sp_morph_points_png(path, a->px, b->px, w, h, c, pa, pb, n, k, tris, n_tris)) return -1;
  /* GIF frames are kept (at GIF size) while the PNGs are written. */
  const double gs =
      o->gif_size > 0 && (w > o->gif_size || h > o->gif_size) ? (double)o->gif_size / (w > h ? w : h) : 1.0;
  const int gw = gs < 1 ? (int)(w * gs + 0.5) : w, gh = gs < 1 ? (int)(h * gs + 0.5) : h;
  char what[96];
  snprintf(what, sizeof what, "--frames %d of %dx%d", o->frames, gw, gh);
  /* The GIF frames, and the GIF (A -> B -> A) as long again in memory. */
  if (sp_mem_check(2.0 * gw * gh * c * n_frames + (double)w * h * c, what) != 0) return -1;
  uint8_t *frame = sp_xmalloc((size_t)w * h * c), *small = sp_xmalloc((size_t)gw * gh * c * n_frames);
  int rc = 0;
  for (int f = 0; f < n_frames && !rc; f++) {
    double t = (double)f / o->frames;
    rc = sp_morph_render(m, t, t, frame);
    snprintf(path, sizeof path, "%s/frame_%03d.png", o->out, f);
    if (!rc) rc = sp_write_png(path, frame, h, w, c);
    if (!rc) sp_morph_resize(frame, w, h, c, small + (size_t)gw * gh * c * f, gw, gh, NULL, 0);
  }
  /* Frames of an earlier, longer morph into the same folder would look like
   * part of this one. */
  for (int f = n_frames; !rc; f++) {
    snprintf(path, sizeof path, "%s/frame_%03d.png", o->out, f);
    if (remove(path) != 0) break;
  }
  if (!rc) {
    /* A -> B -> A, the ends not repeated, so the loop has no stutter. */
    int n_gif = n_frames > 1 ? 2 * n_frames - 2 : 1;
    const uint8_t **seq = sp_xmalloc(sizeof(uint8_t *) * (size_t)n_gif);
    for (int i = 0; i < n_gif; i++) {
      int f = i < n_frames ? i : 2 * n_frames - 2 - i;
      seq[i] = small + (size_t)gw * gh * c * f;
    }
    snprintf(path, sizeof path, "%s/morph.gif", o->out);
    rc = sp_gif_write(path, seq, n_gif, gw, gh, c, o->delay);
    /* A failed write of the GIF (a full disk) reports only "GIF: short
     * write": name the file, as every other error here does. */
    if (rc && !strstr(sp_last_error(), path)) sp_error_push("%s", path);
    free(seq);
  }
  free(frame);
  free(small);
  return rc;
}

int sp_cli_morph(int argc, char **argv) {
  options o;
  int prc = parse(argc, argv, &o);
  if (prc) return prc == 1 ? 0 : prc;
  sp_image im[2] = {{0}};
  float *pts[2] = {NULL, NULL};
  int k[2] = {0, 0}, rc = 1;
  sp_kp_predictor *p = NULL;
  sp_morph *m = NULL;
  char *made = sp_missing_dirs_top(o.out); /* removed again, with its files, if this run fails */
  if (sp_make_dirs(o.out)) goto fail;
  for (int f = 0; f < 2; f++)
    if (sp_image_load(o.img[f], 3, &im[f])) goto fail;
  if (!(o.points[0] && o.points[1]) && !(p = sp_kp_predictor_open(o.weights, o.backend))) goto fail;
  for (int f = 0; f < 2; f++) {
    int r = o.points[f] ? sp_morph_points_read(o.points[f], im[f].w, im[f].h, &pts[f], &k[f])
                        : predict_points(p, o.img[f], o.has_box[f] ? o.box[f] : NULL, &pts[f], &k[f]);
    if (r) goto fail;
  }
  if (k[0] != k[1]) {
    sp_error_set("face A has %d points and face B %d: they must correspond one to one", k[0], k[1]);
    goto fail;
  }
  if (im[1].w != im[0].w || im[1].h != im[0].h) {
    sp_image b = {im[0].w, im[0].h, 3, sp_xmalloc((size_t)im[0].w * im[0].h * 3)};
    sp_morph_resize(im[1].px, im[1].w, im[1].h, 3, b.px, b.w, b.h, pts[1], k[1]);
    sp_image_free(&im[1]);
    im[1] = b;
  }
  m = sp_morph_new(im[0].px, pts[0], im[1].px, pts[1], im[0].w, im[0].h, 3, k[0]);
  if (!m || write_outputs(&o, m, &im[0], &im[1], k[0])) goto fail;
  int n_tris;
  sp_morph_triangles(m, &n_tris);
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "out"), sp_json_str(&b, o.out);
  sp_json_key(&b, "frames"), sp_json_int(&b, o.frames + 1);
  sp_json_key(&b, "keypoints"), sp_json_int(&b, k[0]);
  sp_json_key(&b, "triangles"), sp_json_int(&b, n_tris);
  sp_json_key(&b, "width"), sp_json_int(&b, im[0].w);
  sp_json_key(&b, "height"), sp_json_int(&b, im[0].h);
  sp_json_key(&b, "points_from"), sp_json_str(&b, o.points[0] && o.points[1]   ? "files"
                                                  : o.points[0] || o.points[1] ? "mixed"
                                                                               : "model");
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
  rc = 0;
fail:
  if (rc) fprintf(stderr, "spry morph: %s\n", sp_last_error());
  if (rc && made) { /* a folder this run made: take back what it wrote, then the folder */
    char path[4200];
    for (int f = 0; f <= o.frames; f++) {
      snprintf(path, sizeof path, "%s/frame_%03d.png", o.out, f);
      remove(path);
    }
    snprintf(path, sizeof path, "%s/points.png", o.out);
    remove(path);
    snprintf(path, sizeof path, "%s/morph.gif", o.out);
    remove(path);
    sp_remove_empty_dirs(o.out, made);
  }
  free(made);
  sp_morph_free(m);
  sp_kp_predictor_close(p);
  for (int f = 0; f < 2; f++) free(pts[f]), sp_image_free(&im[f]);
  sp_plot_release_caches();
  return rc;
}
