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
#include <unistd.h>

#include "video/video_internal.h"

typedef struct {
  const char *dir;
  int quality, failed;
  int64_t written; /* frames saved so far (removed again if the clip fails) */
} save_ctx;

static int save_frame(int64_t i, const uint8_t *px, int h, int w, void *user) {
  save_ctx *c = user;
  char name[32], path[PATH_MAX];
  sp_frames_name(name, sizeof name, i);
  snprintf(path, sizeof path, "%s/%s", c->dir, name);
  /* A non-zero return stops the decode; the error stays set for the caller. */
  c->failed = sp_write_jpeg(path, px, h, w, 3, c->quality) != 0;
  if (!c->failed) c->written = i + 1;
  return c->failed;
}

/* A clip that failed leaves nothing behind in a folder this call made: its
 * frames go, then the folders up to `made`. */
static void undo_clip(const char *dir, const char *made, int64_t frames) {
  if (!made) return; /* the folder was there before: not ours to empty */
  char path[PATH_MAX], name[32];
  for (int64_t i = 0; i < frames; i++) {
    sp_frames_name(name, sizeof name, i);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/n_frames", dir);
  unlink(path);
  sp_remove_empty_dirs(dir, made);
}

static int64_t write_count(const char *dir, int64_t n) {
  char path[PATH_MAX], text[32];
  snprintf(path, sizeof path, "%s/n_frames", dir);
  int len = snprintf(text, sizeof text, "%lld\n", (long long)n);
  return sp_write_file_atomic(path, text, (size_t)len) == 0 ? n : -1;
}

int64_t sp_prepare_video_frames(const char *video, const char *dir, int short_side, int quality) {
  if (short_side < 0 || short_side > SP_VIDEO_MAX_SHORT_SIDE)
    return sp_error_set("%s: short side %d outside [0, %d]", video, short_side, SP_VIDEO_MAX_SHORT_SIDE);
  /* The clip opens before its folder is made: an unreadable one makes none. */
  sp_video *v = sp_video_open(video);
  if (!v) return -1;
  char *made = sp_missing_dirs_top(dir);
  if (sp_make_dirs(dir) != 0) {
    /* It may have made parents before failing (a name too long). */
    if (made) sp_remove_empty_dirs(dir, made);
    sp_video_close(v);
    free(made);
    return -1;
  }
  sp_video_geom g = sp_video_geom_native();
  g.short_side = short_side;
  save_ctx c = {dir, quality > 0 ? quality : 90, 0, 0};
  int64_t n = sp_video_decode_all(v, &g, save_frame, &c);
  sp_video_close(v);
  if (n == 0) n = sp_error_set("%s: no frame could be decoded", video);
  if (n > 0 && !c.failed) n = write_count(dir, n);
  if (n < 0 || c.failed) {
    undo_clip(dir, made, c.written);
    n = -1;
  }
  free(made);
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

/* frames.list: `NAME n_frames label` for every clip that was decoded. */
static int write_frames_list(const char *out_dir, const sp_video_list *l, char **names, const int64_t *frames) {
  char path[PATH_MAX], *buf = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/frames.list", out_dir);
  FILE *f = open_memstream(&buf, &len);
  for (int i = 0; i < l->n; i++)
    if (frames[i] > 0) fprintf(f, "%s %lld %d\n", names[i], (long long)frames[i], l->label[i]);
  fclose(f);
  int rc = sp_write_file_atomic(path, buf, len);
  free(buf);
  return rc;
}

int sp_prepare_frames(const char *list_path, const char *out_dir, const sp_prepare_config *cfg) {
  int short_side = cfg ? cfg->short_side : 0, quality = cfg && cfg->quality > 0 ? cfg->quality : 90;
  /* Checked before anything is made on disk. */
  if (short_side < 0 || short_side > SP_VIDEO_MAX_SHORT_SIDE)
    return sp_error_set("prepare: short side %d outside [0, %d] px", short_side, SP_VIDEO_MAX_SHORT_SIDE);
  if (quality > 100) return sp_error_set("prepare: JPEG quality %d outside 1..100", quality);
  sp_video_list l;
  if (sp_video_list_read(list_path, &l) != 0) return -1;
  if (l.n == 0) {
    sp_video_list_free(&l);
    return sp_error_set("%s: the list names no clips", list_path);
  }
  char *out_made = sp_missing_dirs_top(out_dir);
  if (sp_make_dirs(out_dir) != 0) {
    if (out_made) sp_remove_empty_dirs(out_dir, out_made); /* parents it made before failing */
    free(out_made);
    sp_video_list_free(&l);
    return -1;
  }
  char list_dir[PATH_MAX];
  snprintf(list_dir, sizeof list_dir, "%s", list_path);
  char *slash = strrchr(list_dir, '/');
  if (slash) *slash = 0;
  else snprintf(list_dir, sizeof list_dir, ".");
  const size_t cap = (size_t)(l.n > 0 ? l.n : 1);
  int64_t *frames = sp_xcalloc(cap, sizeof(int64_t));
  char **names = sp_xcalloc(cap, sizeof(char *)), **dirs = sp_xcalloc(cap, sizeof(char *));
  char **parent_made = sp_xcalloc(cap, sizeof(char *));
  /* Clips' parent folders (class sub-folders) are made here, one thread, so
   * that a failed clip's cleanup below can never remove a folder another
   * worker is about to fill. */
  int rc = 0;
  for (int i = 0; i < l.n && rc == 0; i++) {
    char name[PATH_MAX], dir[PATH_MAX];
    clip_name(l.path[i], list_dir, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", out_dir, name);
    names[i] = sp_xstrdup(name);
    dirs[i] = sp_xstrdup(dir);
    char *p = strrchr(dir, '/');
    *p = 0;
    parent_made[i] = sp_missing_dirs_top(dir);
    rc = sp_make_dirs(dir);
  }
  int workers = cfg && cfg->workers > 0 ? cfg->workers : 0;
  int done = 0, threads = workers > 0 ? workers : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : done)
  for (int i = 0; i < (rc == 0 ? l.n : 0); i++) {
    frames[i] = sp_prepare_video_frames(l.path[i], dirs[i], short_side, quality);
    if (frames[i] < 0) fprintf(stderr, "spry prepare: skip %s: %s\n", l.path[i], sp_last_error());
    else done++;
  }
  /* Class folders that only failed clips would have filled go again. */
  for (int i = l.n - 1; i >= 0; i--) {
    if (parent_made[i] && (rc != 0 || frames[i] < 0)) {
      char *p = sp_xstrdup(dirs[i]);
      *strrchr(p, '/') = 0;
      sp_remove_empty_dirs(p, parent_made[i]);
      free(p);
    }
    free(parent_made[i]);
  }
  if (rc == 0 && done > 0) rc = write_frames_list(out_dir, &l, names, frames);
  if (rc == 0 && done < l.n)
    rc = done ? sp_error_set("%d of %d clips failed (see the skip lines above); %s/frames.list lists the %d decoded",
                             l.n - done, l.n, out_dir, done)
              : sp_error_set("%s: none of its %d clips could be decoded (see the skip lines above)", list_path, l.n);
  if (done == 0) sp_remove_empty_dirs(out_dir, out_made);
  for (int i = 0; i < l.n; i++) free(names[i]), free(dirs[i]);
  free(names), free(dirs), free(parent_made), free(out_made);
  free(frames);
  sp_video_list_free(&l);
  return rc == 0 ? done : -1;
}
