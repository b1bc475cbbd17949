/* Video list files, mmaction/PaddleVideo style: one `path label` line per
 * clip, or `frame_dir n_frames label` for pre-decoded frames. Reading
 * resolves relative paths against the list's own folder so a dataset folder
 * can be moved as a whole; building scans class sub-folders. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "spry/video.h"

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return sp_xstrdup(".");
  if (slash == path) return sp_xstrdup("/");
  char *d = sp_xstrdup(path);
  d[slash - path] = 0;
  return d;
}

static int parse_int(const char *s, size_t n, long long *out) {
  if (n == 0 || n > 18) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)s[i]) && !(i == 0 && s[i] == '-' && n > 1)) return 0;
  char buf[24];
  memcpy(buf, s, n);
  buf[n] = 0;
  *out = atoll(buf);
  return 1;
}

/* Splits off the last whitespace-separated token of line[0..*len). */
static int last_token(const char *line, size_t *len, const char **tok, size_t *tlen) {
  size_t e = *len;
  while (e > 0 && isspace((unsigned char)line[e - 1])) e--;
  size_t b = e;
  while (b > 0 && !isspace((unsigned char)line[b - 1])) b--;
  if (b == e) return 0;
  *tok = line + b;
  *tlen = e - b;
  while (b > 0 && isspace((unsigned char)line[b - 1])) b--;
  *len = b;
  return 1;
}

void sp_video_list_free(sp_video_list *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path);
  free(l->label);
  free(l->frames);
  memset(l, 0, sizeof *l);
}

int sp_video_list_read(const char *list_path, sp_video_list *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(list_path, "r");
  if (!f) return sp_error_set("%s: cannot open list (%s)", list_path, strerror(errno));
  char *base = dir_of(list_path);
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  int ncap = 0, rc = 0;
  ssize_t got;
  while ((got = getline(&line, &cap, f)) >= 0) {
    lineno++;
    size_t len = (size_t)got;
    size_t s = 0;
    while (s < len && isspace((unsigned char)line[s])) s++;
    if (s == len || line[s] == '#') continue;
    const char *tok;
    size_t tlen;
    long long label, frames = -1;
    if (!last_token(line, &len, &tok, &tlen) || !parse_int(tok, tlen, &label) || len <= s) {
      rc = sp_error_set("%s:%zu: expected `path label`", list_path, lineno);
      break;
    }
    size_t keep = len;
    if (last_token(line, &len, &tok, &tlen) && len > s && parse_int(tok, tlen, &frames)) {
      /* `dir n_frames label` */
    } else {
      len = keep;
      frames = -1;
    }
    if (out->n == ncap) {
      ncap = ncap ? 2 * ncap : 64;
      out->path = sp_xrealloc(out->path, (size_t)ncap * sizeof(char *));
      out->label = sp_xrealloc(out->label, (size_t)ncap * sizeof(int));
      out->frames = sp_xrealloc(out->frames, (size_t)ncap * sizeof(int64_t));
    }
    size_t plen = len - s;
    char *p;
    if (line[s] == '/') {
      p = sp_xmalloc(plen + 1);
      memcpy(p, line + s, plen);
      p[plen] = 0;
    } else {
      size_t n = strlen(base) + plen + 2;
      p = sp_xmalloc(n);
      snprintf(p, n, "%s/%.*s", base, (int)plen, line + s);
    }
    out->path[out->n] = p;
    out->label[out->n] = (int)label;
    out->frames[out->n] = frames;
    out->n++;
  }
  free(line);
  free(base);
  fclose(f);
  if (rc != 0) sp_video_list_free(out);
  return rc;
}

/* ------------------------------------------------------------------ build */

static int is_video_name(const char *name) {
  static const char *ext[] = {".mp4", ".avi", ".mkv", ".webm", ".mov", ".gif", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv"};
  const char *dot = strrchr(name, '.');
  if (!dot) return 0;
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (!strcasecmp(dot, ext[i])) return 1;
  return 0;
}

static int is_frame_dir(const char *path) {
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/img_00001.jpg", path);
  struct stat sb;
  return stat(p, &sb) == 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names of entries of dir (dirs_only: sub-folders; else clips). */
static char **list_dir(const char *dir, int dirs_only, int *n) {
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  char **names = NULL;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (stat(p, &sb) != 0) continue;
    int ok = dirs_only ? S_ISDIR(sb.st_mode) && !is_frame_dir(p)
                       : (S_ISREG(sb.st_mode) && is_video_name(e->d_name)) || (S_ISDIR(sb.st_mode) && is_frame_dir(p));
    if (!ok) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 32;
      names = sp_xrealloc(names, (size_t)cap * sizeof(char *));
    }
    names[(*n)++] = sp_xstrdup(e->d_name);
  }
  closedir(d);
  if (*n) qsort(names, (size_t)*n, sizeof(char *), cmp_str);
  return names;
}

static void free_names(char **v, int n) {
  for (int i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* Class names from a labels file: one name per line (labels.txt style). */
static char **read_class_names(const char *path, int *n) {
  *n = 0;
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char **names = NULL;
  int cap = 0;
  char *line = NULL;
  size_t lcap = 0;
  while (getline(&line, &lcap, f) >= 0) {
    line[strcspn(line, "\r\n")] = 0;
    if (!*line) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      names = sp_xrealloc(names, (size_t)cap * sizeof(char *));
    }
    names[(*n)++] = sp_xstrdup(line);
  }
  free(line);
  fclose(f);
  return names;
}

int sp_video_list_build(const char *dir, const char *labels_csv, const char *list_out) {
  char rdir[PATH_MAX], rout[PATH_MAX];
  if (!realpath(dir, rdir)) return sp_error_set("%s: no such folder", dir);
  char *odir = dir_of(list_out);
  if (!realpath(odir, rout)) {
    free(odir);
    return sp_error_set("%s: the list's folder does not exist", list_out);
  }
  free(odir);
  /* Paths relative to the list's folder when the data is inside it. */
  size_t ol = strlen(rout);
  const char *prefix = rdir;
  if (!strcmp(rdir, rout)) prefix = "";
  else if (!strncmp(rdir, rout, ol) && rdir[ol] == '/') prefix = rdir + ol + 1;

  FILE *f = fopen(list_out, "w");
  if (!f) return sp_error_set("%s: cannot create (%s)", list_out, strerror(errno));
  int count = 0, rc = 0;
  int has_csv_pairs = 0;
  if (labels_csv) {
    FILE *c = fopen(labels_csv, "r");
    if (!c) {
      fclose(f);
      return sp_error_set("%s: cannot open labels (%s)", labels_csv, strerror(errno));
    }
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, c) >= 0) {
      line[strcspn(line, "\r\n")] = 0;
      char *comma = strrchr(line, ',');
      long long lab;
      if (!comma || !parse_int(comma + 1, strlen(comma + 1), &lab)) continue; /* header or class-name line */
      has_csv_pairs = 1;
      *comma = 0;
      fprintf(f, "%s%s%s %lld\n", prefix, *prefix ? "/" : "", line, lab);
      count++;
    }
    free(line);
    fclose(c);
  }
  if (!has_csv_pairs) {
    int nc = 0, nlab = 0;
    char **classes = list_dir(rdir, 1, &nc);
    char **labels = labels_csv ? read_class_names(labels_csv, &nlab) : NULL;
    char cpath[PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s/classes.txt", rout);
    FILE *cf = labels ? NULL : fopen(cpath, "w");
    for (int k = 0; k < nc && rc == 0; k++) {
      int label = k;
      if (labels) {
        label = -1;
        for (int j = 0; j < nlab; j++)
          if (!strcmp(labels[j], classes[k])) label = j;
        if (label < 0) {
          fprintf(stderr, "spry prepare list: skip %s/%s: not in %s\n", rdir, classes[k], labels_csv);
          continue;
        }
      }
      if (cf) fprintf(cf, "%s\n", classes[k]);
      char sub[PATH_MAX];
      snprintf(sub, sizeof sub, "%s/%s", rdir, classes[k]);
      int nv = 0;
      char **clips = list_dir(sub, 0, &nv);
      for (int i = 0; i < nv; i++) {
        fprintf(f, "%s%s%s/%s %d\n", prefix, *prefix ? "/" : "", classes[k], clips[i], label);
        count++;
      }
      free_names(clips, nv);
    }
    if (cf && fclose(cf) != 0) rc = sp_error_set("%s: cannot write", cpath);
    free_names(classes, nc);
    free_names(labels, nlab);
  }
  if (fclose(f) != 0 && rc == 0) rc = sp_error_set("%s: cannot write (%s)", list_out, strerror(errno));
  if (rc == 0 && count == 0)
    rc = sp_error_set("%s: no videos found (expected CLASS/clip.mp4 sub-folders or a `path,label` csv)", dir);
  return rc == 0 ? count : -1;
}
