/* `spry video info FILE` and `spry video frames FILE --index ... --out DIR`:
 * the tools to check the reader by hand (and from tests): what the index
 * says about a file, and exactly which pixels a frame index gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "spry/video.h"

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static int video_info(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fprintf(argc < 2 ? stderr : stdout, "usage: spry video info FILE|FRAME_DIR\n  prints one JSON object\n");
    return argc < 2 ? 2 : 0;
  }
  sp_video *v = sp_video_open(argv[1]);
  sp_video_info in;
  if (!v || sp_video_get_info(v, &in) != 0) {
    fprintf(stderr, "spry video info: %s\n", sp_last_error());
    sp_video_close(v);
    return 1;
  }
  printf("{\"file\": ");
  json_str(stdout, argv[1]);
  printf(", \"codec\": ");
  json_str(stdout, in.codec);
  printf(", \"container\": ");
  json_str(stdout, in.container);
  printf(", \"width\": %d, \"height\": %d, \"frames\": %lld, \"header_frames\": %lld, \"fps\": %.6g, "
         "\"duration\": %.6g, \"seekable\": %s, \"keyframes\": [",
         in.width, in.height, (long long)in.frames, (long long)in.header_frames, in.fps, in.duration,
         in.seekable ? "true" : "false");
  for (int64_t i = 0; i < in.n_keyframes; i++) printf("%s%lld", i ? ", " : "", (long long)in.keyframes[i]);
  printf("]}\n");
  sp_video_close(v);
  return 0;
}

/* "0,17,250" or ranges "10-20"; appends to a growing array. */
static int parse_indices(const char *s, int64_t **out, int *n) {
  int cap = 0;
  *n = 0;
  *out = NULL;
  while (*s) {
    char *end;
    long long a = strtoll(s, &end, 10), b = a;
    if (end == s || a < 0) return -1;
    if (*end == '-') {
      const char *s2 = end + 1;
      b = strtoll(s2, &end, 10);
      if (end == s2 || b < a || b - a > 10000000) return -1;
    }
    for (long long i = a; i <= b; i++) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 64;
        *out = sp_xrealloc(*out, (size_t)cap * sizeof(int64_t));
      }
      (*out)[(*n)++] = i;
    }
    if (*end == ',') end++;
    else if (*end) return -1;
    s = end;
  }
  return *n > 0 ? 0 : -1;
}

static void usage_frames(FILE *f) {
  fprintf(f,
          "usage: spry video frames FILE --index 0,17,250 --out DIR [--size S]\n"
          "  Writes DIR/<index>.png (6 digits) for each requested display-order frame, at full\n"
          "  resolution unless --size gives a short side. Indices may be ranges (10-20).\n");
}

static int video_frames(int argc, char **argv) {
  const char *file = NULL, *index = NULL, *out = NULL;
  int size = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage_frames(stdout);
      return 0;
    }
    if (a[0] != '-') {
      file = a;
      continue;
    }
    if (!v) {
      fprintf(stderr, "spry video frames: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--index")) index = v;
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--size")) size = atoi(v);
    else {
      fprintf(stderr, "spry video frames: unknown option %s\n", a);
      usage_frames(stderr);
      return 2;
    }
    i++;
  }
  int64_t *idx = NULL;
  int n = 0;
  if (!file || !index || !out || size < 0) {
    usage_frames(stderr);
    return 2;
  }
  if (parse_indices(index, &idx, &n) != 0) {
    fprintf(stderr, "spry video frames: bad --index '%s' (want e.g. 0,17,250 or 10-20)\n", index);
    free(idx);
    return 2;
  }
  if (sp_make_dirs(out) != 0) {
    fprintf(stderr, "spry video frames: %s\n", sp_last_error());
    free(idx);
    return 1;
  }
  sp_video *v = sp_video_open(file);
  sp_video_geom g = sp_video_geom_native();
  g.short_side = size;
  int h, w, rc = 0;
  if (!v || sp_video_out_size(v, &g, &h, &w) != 0) {
    fprintf(stderr, "spry video frames: %s\n", sp_last_error());
    sp_video_close(v);
    free(idx);
    return 1;
  }
  /* Batches of 64 keep memory bounded while still sharing GOPs. */
  size_t fb = (size_t)h * w * 3;
  uint8_t *buf = sp_xmalloc(fb * 64);
  for (int s = 0; s < n && rc == 0; s += 64) {
    int k = n - s < 64 ? n - s : 64;
    if (sp_video_get_frames(v, idx + s, k, &g, buf) != 0) {
      fprintf(stderr, "spry video frames: %s\n", sp_last_error());
      rc = 1;
      break;
    }
    for (int j = 0; j < k && rc == 0; j++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%06lld.png", out, (long long)idx[s + j]);
      if (sp_write_png(path, buf + (size_t)j * fb, h, w, 3) != 0) {
        fprintf(stderr, "spry video frames: %s\n", sp_last_error());
        rc = 1;
      }
    }
  }
  free(buf);
  free(idx);
  sp_video_close(v);
  if (rc == 0) fprintf(stderr, "spry video frames: wrote %d frames of %dx%d to %s\n", n, w, h, out);
  return rc;
}

int sp_cli_video(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: spry video info FILE\n"
            "       spry video frames FILE --index 0,17,250 --out DIR [--size S]\n");
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "info")) return video_info(argc - 1, argv + 1);
  if (!strcmp(argv[1], "frames")) return video_frames(argc - 1, argv + 1);
  fprintf(stderr, "spry video: unknown command '%s' (info, frames)\n", argv[1]);
  return 2;
}
