/* `spry video info FILE` and `spry video frames FILE --index ... --out DIR`:
 * the tools to check the reader by hand (and from tests): what the index
 * says about a file, and exactly which pixels a frame index gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/video.h"

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static int video_info(int argc, char **argv) {
  if (argc != 2 || !strcmp(argv[1], "--help")) {
    int help = argc >= 2 && !strcmp(argv[1], "--help");
    fprintf(help ? stdout : stderr, "usage: spry video info FILE|FRAME_DIR\n  prints one JSON object\n");
    return help ? 0 : 2;
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
  printf(
      ", \"width\": %d, \"height\": %d, \"frames\": %lld, \"header_frames\": %lld, \"fps\": %.6g, "
      "\"duration\": %.6g, \"seekable\": %s, \"keyframes\": [",
      in.width, in.height, (long long)in.frames, (long long)in.header_frames, in.fps, in.duration,
      in.seekable ? "true" : "false");
  for (int64_t i = 0; i < in.n_keyframes; i++) printf("%s%lld", i ? ", " : "", (long long)in.keyframes[i]);
  printf("]}\n");
  sp_video_close(v);
  return 0;
}

/* At most this many frames per run (80 MB of indices): more is a typo in a
 * range, and the frames would not fit on most disks anyway. */
#define MAX_FRAMES 10000000

/* One index of a list: digits only (no sign), range-checked. */
static int parse_index(const char *s, char **end, long long *out) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  *out = strtoll(s, end, 10);
  if (errno != ERANGE) return 0;
  fprintf(stderr, "spry video frames: --index %.*s is too large (frame numbers go up to %lld)\n", (int)(*end - s), s,
          (long long)INT64_MAX);
  return -2;
}

/* "0,17,250" or ranges "10-20"; appends to a growing array. On failure
 * prints why, naming the part of the list that is wrong. */
static int parse_indices(const char *s, int64_t **out, int *n) {
  int cap = 0;
  *n = 0;
  *out = NULL;
  while (*s) {
    char *end;
    long long a, b;
    int r = parse_index(s, &end, &a);
    b = a;
    if (r == 0 && *end == '-') r = parse_index(end + 1, &end, &b);
    if (r == -2) return -1; /* said why */
    if (r != 0) goto bad;
    if (b < a) {
      fprintf(stderr, "spry video frames: --index range %lld-%lld ends before it starts\n", a, b);
      return -1;
    }
    if (b - a >= MAX_FRAMES - *n) {
      fprintf(stderr, "spry video frames: --index asks for more than %d frames (the limit of one run)\n", MAX_FRAMES);
      return -1;
    }
    for (long long k = 0; k <= b - a; k++) { /* no a + k past b: b may be LLONG_MAX */
      if (*n == cap) {
        cap = cap ? 2 * cap : 64;
        *out = sp_xrealloc(*out, (size_t)cap * sizeof(int64_t));
      }
      (*out)[(*n)++] = a + k;
    }
    if (*end == ',')
      end++;
    else if (*end)
      goto bad;
    s = end;
  }
  if (*n > 0) return 0;
bad:
  fprintf(stderr, "spry video frames: bad --index at '%s' (want frame numbers, e.g. 0,17,250 or 10-20)\n", s);
  return -1;
}

static void usage_frames(FILE *f) {
  fprintf(f,
          "usage: spry video frames FILE --index 0,17,250 --out DIR [--size S]\n"
          "  Writes DIR/<index>.png (6 digits) for each requested display-order frame, at full\n"
          "  resolution unless --size gives a short side (at most %d). Indices may be ranges (10-20);\n"
          "  at most %d frames per run.\n",
          SP_VIDEO_MAX_SHORT_SIDE, MAX_FRAMES);
}

/* Fetches the frames in groups (sharing GOPs) and writes them as PNGs;
 * *wrote: how many files were written. 0 or -1 (error set). */
static int write_frames(sp_video *v, const sp_video_geom *g, const int64_t *idx, int n, const char *out, int h, int w,
                        int *wrote) {
  /* Up to 64 frames a group, but within 256 MB, so a big --size stays
   * bounded. */
  size_t fb = (size_t)h * w * 3, per = ((size_t)256 << 20) / fb;
  int group = per < 1 ? 1 : per > 64 ? 64 : (int)per;
  uint8_t *buf = sp_xmalloc(fb * (size_t)group);
  int rc = 0;
  *wrote = 0;
  for (int s = 0; s < n && rc == 0; s += group) {
    int k = n - s < group ? n - s : group;
    rc = sp_video_get_frames(v, idx + s, k, g, buf);
    for (int j = 0; j < k && rc == 0; j++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%06lld.png", out, (long long)idx[s + j]);
      if ((rc = sp_write_png(path, buf + (size_t)j * fb, h, w, 3)) == 0) ++*wrote;
    }
  }
  free(buf);
  return rc;
}

/* A failed run that made the output folder takes it away again, with the
 * frames it wrote there; a folder that was there already is left alone. */
static void undo_output(const char *out, const char *made, const int64_t *idx, int wrote) {
  if (!made) return;
  for (int i = 0; i < wrote; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%06lld.png", out, (long long)idx[i]);
    unlink(path);
  }
  sp_remove_empty_dirs(out, made);
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
      if (file) {
        fprintf(stderr, "spry video frames: one FILE at a time (got '%s' and '%s')\n", file, a);
        return 2;
      }
      file = a;
      continue;
    }
    if (strcmp(a, "--index") && strcmp(a, "--out") && strcmp(a, "--size")) {
      fprintf(stderr, "spry video frames: unknown option %s\n", a);
      usage_frames(stderr);
      return 2;
    }
    if (!v) {
      fprintf(stderr, "spry video frames: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--index"))
      index = v;
    else if (!strcmp(a, "--out"))
      out = v;
    else if (!strcmp(a, "--size")) {
      int64_t s;
      if (sp_parse_int64(v, 0, SP_VIDEO_MAX_SHORT_SIDE, &s) != 0) {
        fprintf(stderr, "spry video frames: --size wants a short side in [0, %d] px (0 = native), got '%s'\n",
                SP_VIDEO_MAX_SHORT_SIDE, v);
        return 2;
      }
      size = (int)s;
    } else {
      fprintf(stderr, "spry video frames: unknown option %s\n", a);
      usage_frames(stderr);
      return 2;
    }
    i++;
  }
  int64_t *idx = NULL;
  int n = 0;
  if (!file || !index || !out) {
    usage_frames(stderr);
    return 2;
  }
  if (parse_indices(index, &idx, &n) != 0) {
    free(idx);
    return 2;
  }
  /* The file and the geometry are checked before the output folder is made. */
  sp_video *v = sp_video_open(file);
  sp_video_geom g = sp_video_geom_native();
  g.short_side = size;
  int h, w, rc = 0, wrote = 0;
  char *made = NULL;
  if (!v || sp_video_out_size(v, &g, &h, &w) != 0) rc = -1;
  if (rc == 0) {
    made = sp_missing_dirs_top(out);
    rc = sp_make_dirs(out);
  }
  if (rc == 0) rc = write_frames(v, &g, idx, n, out, h, w, &wrote);
  if (rc != 0) {
    fprintf(stderr, "spry video frames: %s\n", sp_last_error());
    undo_output(out, made, idx, wrote);
  } else {
    fprintf(stderr, "spry video frames: wrote %d frames of %dx%d to %s\n", n, w, h, out);
  }
  free(made);
  free(idx);
  sp_video_close(v);
  return rc == 0 ? 0 : 1;
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
