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

/* Folds "." and "x/.." out of a relative path in place; 0 when a ".." would
 * climb above its start (or nothing is left). */
static int fold_relative(char *rel) {
  char *parts[PATH_MAX / 2];
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(rel, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (!strcmp(t, ".")) continue;
    if (!strcmp(t, "..")) {
      if (n == 0) return 0;
      n--;
      continue;
    }
    parts[n++] = t;
  }
  if (n == 0) return 0;
  char out[PATH_MAX];
  size_t o = 0;
  for (int i = 0; i < n; i++) o += (size_t)snprintf(out + o, sizeof out - o, "%s%s", i ? "/" : "", parts[i]);
  memcpy(rel, out, o + 1);
  return 1;
}

/* NAME for a clip: its path below the list's folder without the extension
 * (keeps class sub-folders apart), else its base name. A name never climbs
 * out of --out: "../x/clip.mp4" is not below the list's folder. */
static void clip_name(const char *path, const char *list_dir, char *out, size_t n) {
  size_t ld = strlen(list_dir);
  char rel[PATH_MAX];
  int below = !strncmp(path, list_dir, ld) && path[ld] == '/';
  snprintf(rel, sizeof rel, "%s", below ? path + ld + 1 : path);
  if (!below || path[ld + 1] == '/' || !fold_relative(rel)) {
    const char *slash = strrchr(path, '/');
    snprintf(rel, sizeof rel, "%s", slash ? slash + 1 : path);
  }
  snprintf(out, n, "%s", rel);
  char *dot = strrchr(out, '.'), *slash = strrchr(out, '/');
  if (dot && (!slash || dot > slash) && dot != out && (!slash || dot != slash + 1)) *dot = 0;
}

/* Two clips must not share a frame folder: their frames would mix, and the
 * list would give both folders' labels to one. Checked before anything is
 * written. */
static int distinct_names(char **names, const sp_video_list *l, const char *list_path) {
  for (int i = 0; i < l->n; i++) {
    if (!names[i][0] || !strcmp(names[i], ".") || !strcmp(names[i], ".."))
      return sp_error_set("%s:%d: %s gives no usable frame folder name", list_path, l->line ? l->line[i] : i + 1,
                          l->path[i]);
    for (int j = 0; j < i; j++)
      if (!strcmp(names[i], names[j]))
        return sp_error_set(
            "%s:%d: %s would share the frame folder '%s' with line %d (%s); give the clips "
            "distinct names, or keep them in sub-folders below the list's folder",
            list_path, l->line ? l->line[i] : i + 1, l->path[i], names[i], l->line ? l->line[j] : j + 1, l->path[j]);
  }
  return 0;
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

/* One prepare run: the list, each clip's folder name and path, and what the
 * run made on disk (to take back what failed). */
typedef struct {
  sp_video_list l;
  const char *list_path, *out_dir;
  char **names, **dirs, **parent_made, *out_made;
  int64_t *frames;
} prepare_run;

/* Every clip's folder name, checked before anything is made on disk. */
static int name_clips(prepare_run *r) {
  char list_dir[PATH_MAX];
  snprintf(list_dir, sizeof list_dir, "%s", r->list_path);
  char *slash = strrchr(list_dir, '/');
  if (slash)
    *slash = 0;
  else
    snprintf(list_dir, sizeof list_dir, ".");
  const size_t cap = (size_t)(r->l.n > 0 ? r->l.n : 1);
  r->frames = sp_xcalloc(cap, sizeof(int64_t));
  r->names = sp_xcalloc(cap, sizeof(char *));
  r->dirs = sp_xcalloc(cap, sizeof(char *));
  r->parent_made = sp_xcalloc(cap, sizeof(char *));
  for (int i = 0; i < r->l.n; i++) {
    char name[PATH_MAX], dir[PATH_MAX];
    clip_name(r->l.path[i], list_dir, name, sizeof name);
    snprintf(dir, sizeof dir, "%s/%s", r->out_dir, name);
    r->names[i] = sp_xstrdup(name);
    r->dirs[i] = sp_xstrdup(dir);
  }
  return distinct_names(r->names, &r->l, r->list_path);
}

/* Clips' parent folders (class sub-folders) are made here, one thread, so
 * that a failed clip's cleanup can never remove a folder another worker is
 * about to fill. */
static int make_parents(prepare_run *r) {
  int rc = 0;
  for (int i = 0; i < r->l.n && rc == 0; i++) {
    char *dir = sp_xstrdup(r->dirs[i]);
    *strrchr(dir, '/') = 0;
    r->parent_made[i] = sp_missing_dirs_top(dir);
    rc = sp_make_dirs(dir);
    free(dir);
  }
  return rc;
}

static int decode_clips(prepare_run *r, int short_side, int quality, int workers) {
  int done = 0, threads = workers > 0 ? workers : omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) num_threads(threads) reduction(+ : done)
  for (int i = 0; i < r->l.n; i++) {
    r->frames[i] = sp_prepare_video_frames(r->l.path[i], r->dirs[i], short_side, quality);
    if (r->frames[i] < 0)
      fprintf(stderr, "spry prepare: skip %s: %s\n", r->l.path[i], sp_last_error());
    else
      done++;
  }
  return done;
}

/* Class folders that only failed clips would have filled go again. */
static void remove_unfilled_parents(prepare_run *r, int failed) {
  for (int i = r->l.n - 1; i >= 0; i--)
    if (r->parent_made && r->parent_made[i] && (failed || r->frames[i] < 0)) {
      char *p = sp_xstrdup(r->dirs[i]);
      *strrchr(p, '/') = 0;
      sp_remove_empty_dirs(p, r->parent_made[i]);
      free(p);
    }
}

static void prepare_run_free(prepare_run *r) {
  for (int i = 0; r->names && i < r->l.n; i++) {
    free(r->names[i]);
    free(r->dirs[i]);
    free(r->parent_made[i]);
  }
  free(r->names), free(r->dirs), free(r->parent_made), free(r->out_made);
  free(r->frames);
  sp_video_list_free(&r->l);
}

int sp_prepare_frames(const char *list_path, const char *out_dir, const sp_prepare_config *cfg) {
  int short_side = cfg ? cfg->short_side : 0, quality = cfg && cfg->quality > 0 ? cfg->quality : 90;
  /* Checked before anything is made on disk. */
  if (short_side < 0 || short_side > SP_VIDEO_MAX_SHORT_SIDE)
    return sp_error_set("prepare: short side %d outside [0, %d] px", short_side, SP_VIDEO_MAX_SHORT_SIDE);
  if (quality > 100) return sp_error_set("prepare: JPEG quality %d outside 1..100", quality);
  prepare_run r = {.list_path = list_path, .out_dir = out_dir};
  /* The list's labels.txt (its class order) is checked against it and goes
   * beside frames.list, so the frames keep their class names. */
  sp_video_classes cls;
  int have = sp_video_classes_beside(list_path, &cls);
  if (have < 0 || sp_video_list_read_classes(list_path, NULL, have ? &cls : NULL, &r.l) != 0) {
    sp_video_classes_free(&cls);
    return -1;
  }
  int rc = r.l.n == 0 ? sp_error_set("%s: the list names no clips", list_path) : name_clips(&r);
  if (rc == 0) {
    r.out_made = sp_missing_dirs_top(out_dir);
    rc = sp_make_dirs(out_dir);
  }
  if (rc == 0) rc = make_parents(&r);
  int done = rc == 0 ? decode_clips(&r, short_side, quality, cfg ? cfg->workers : 0) : 0;
  remove_unfilled_parents(&r, rc != 0);
  if (rc == 0 && done > 0) rc = write_frames_list(out_dir, &r.l, r.names, r.frames);
  if (rc == 0 && done > 0 && have) {
    char cpath[PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s/labels.txt", out_dir);
    rc = sp_video_classes_write(cpath, &cls);
  }
  sp_video_classes_free(&cls);
  if (rc == 0 && done < r.l.n)
    rc = done ? sp_error_set("%d of %d clips failed (see the skip lines above); %s/frames.list lists the %d decoded",
                             r.l.n - done, r.l.n, out_dir, done)
              : sp_error_set("%s: none of its %d clips could be decoded (see the skip lines above)", list_path, r.l.n);
  /* Parents it made before failing, or a folder no clip filled. */
  if (done == 0 && r.out_made) sp_remove_empty_dirs(out_dir, r.out_made);
  prepare_run_free(&r);
  return rc == 0 ? done : -1;
}
