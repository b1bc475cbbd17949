/* Pre-decoding videos into frame folders (the seed's "frames" format):
 * each clip becomes NAME/img_00001.jpg ... plus NAME/n_frames, and the whole
 * set gets frames.list (`NAME n_frames label`). Training from frames trades
 * disk for decode time: a JPEG decode per sampled frame instead of a GOP. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/video_internal.h"

typedef struct {
  const char *dir;
  int quality, failed;
} save_ctx;

static int save_frame(int64_t i, const uint8_t *px, int h, int w, void *user) {
  save_ctx *c = user;
  char name[32], path[PATH_MAX];
  sp_frames_name(name, sizeof name, i);
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  /* A non-zero return stops the decode; the error stays set for the caller. */
  c->failed = sp_write_jpeg(path, px, h, w, 3, c->quality) != 0;
  return c->failed;
}

int64_t sp_prepare_video_frames(const char *video, const char *dir, int short_side, int quality) {
  if (sp_make_dirs(dir) != 0) return -1;
  sp_video *v = sp_video_open(video);
  if (!v) return -1;
  sp_video_geom g = sp_video_geom_native();
  g.short_side = short_side > 0 ? short_side : 0;
  save_ctx c = {dir, quality > 0 ? quality : 90, 0};
  int64_t n = sp_video_decode_all(v, &g, save_frame, &c);
  sp_video_close(v);
  if (n < 0 || c.failed) return -1;
  if (n == 0) return sp_error_set("%s: no frame could be decoded", video);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/n_frames", dir);
  FILE *f = fopen(path, "w");
  if (!f) return sp_error_set("%s: cannot create (%s)", path, strerror(errno));
  fprintf(f, "%lld\n", (long long)n);
  if (fclose(f) != 0) return sp_error_set("%s: cannot write", path);
  return n;
}

/* NAME for a clip: its path below the list's folder without the extension
 * (keeps class sub-folders apart), else its base name. */
static void clip_name(const char *path, const char *list_dir, char *out, size_t n) {
  size_t ld = strlen(list_dir);
  const char *rel = (!strncmp(path, list_dir, ld) && path[ld] == '/') ? path + ld + 1 : strrchr(path, '/');
  if (!rel) rel = path;
  if (*rel == '/') rel++;
  snprintf(out, n, "%s", rel);
  char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
  if (dot && (!slash || dot > slash)) *dot = 0;
}

int sp_prepare_frames(const char *list_path, const char *out_dir, const sp_prepare_config *cfg) {
  sp_video_list l;
  if (sp_video_list_read(list_path, &l) != 0) return -1;
  if (sp_make_dirs(out_dir) != 0) {
    sp_video_list_free(&l);
    return -1;
  }
  char list_dir[PATH_MAX];
  snprintf(list_dir, sizeof list_dir, "%s", list_path);
  char *slash = strrchr(list_dir, '/');
  if (slash) *slash = 0;
  else snprintf(list_dir, sizeof list_dir, ".");
  int64_t *frames = sp_xcalloc((size_t)(l.n > 0 ? l.n : 1), sizeof(int64_t));
  char **names = sp_xcalloc((size_t)(l.n > 0 ? l.n : 1), sizeof(char *));
  int workers = cfg && cfg->workers > 0 ? cfg->workers : 0;
  int short_side = cfg ? cfg->short_side : 0, quality = cfg && cfg->quality > 0 ? cfg->quality : 90;
  int done = 0, threads = workers > 0 ? workers : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : done)
  for (int i = 0; i < l.n; i++) {
    char name[PATH_MAX], dir[PATH_MAX];
    clip_name(l.path[i], list_dir, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", out_dir, name);
    names[i] = sp_xstrdup(name);
    frames[i] = sp_prepare_video_frames(l.path[i], dir, short_side, quality);
    if (frames[i] < 0) fprintf(stderr, "spry prepare: skip %s: %s\n", l.path[i], sp_last_error());
    else done++;
  }
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/frames.list", out_dir);
  FILE *f = fopen(path, "w");
  int rc = f ? 0 : sp_error_set("%s: cannot create (%s)", path, strerror(errno));
  for (int i = 0; f && i < l.n; i++)
    if (frames[i] > 0) fprintf(f, "%s %lld %d\n", names[i], (long long)frames[i], l.label[i]);
  if (f && fclose(f) != 0) rc = sp_error_set("%s: cannot write", path);
  for (int i = 0; i < l.n; i++) free(names[i]);
  free(names);
  free(frames);
  sp_video_list_free(&l);
  return rc == 0 ? done : -1;
}
