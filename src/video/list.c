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
#include <unistd.h>

#include "spry/video.h"

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return sp_xstrdup(".");
  if (slash == path) return sp_xstrdup("/");
  char *d = sp_xstrdup(path);
  d[slash - path] = 0;
  return d;
}

/* An integer token s[0..n): 1 when it is one (*out set; *overflow when it
 * does not fit in a long long), 0 when it is not an integer at all. */
static int parse_int(const char *s, size_t n, long long *out, int *overflow) {
  char buf[32];
  *overflow = 0;
  if (n == 0) return 0;
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)s[i]) && !(i == 0 && (s[i] == '-' || s[i] == '+') && n > 1)) return 0;
  if (n >= sizeof buf) { /* all digits, but longer than any long long */
    *overflow = 1;
    *out = s[0] == '-' ? LLONG_MIN : LLONG_MAX;
    return 1;
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  errno = 0;
  *out = strtoll(buf, NULL, 10);
  *overflow = errno == ERANGE;
  return 1;
}

/* The label token of a list line: an integer in [0, SP_VIDEO_MAX_CLASSES),
 * else an error naming file:line and why. */
static int parse_label(const char *tok, size_t n, const char *list_path, size_t lineno, int *label) {
  long long v;
  int overflow;
  if (!parse_int(tok, n, &v, &overflow))
    return sp_error_set("%s:%zu: expected `path label`, the label '%.*s' is not an integer", list_path, lineno, (int)n,
                        tok);
  if (v < 0 && !overflow) return sp_error_set("%s:%zu: label %lld is negative", list_path, lineno, v);
  if (overflow || v >= SP_VIDEO_MAX_CLASSES)
    return sp_error_set("%s:%zu: label %.*s out of range (labels are class numbers 0..%d)", list_path, lineno, (int)n,
                        tok, SP_VIDEO_MAX_CLASSES - 1);
  *label = (int)v;
  return 0;
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
  free(l->line);
  memset(l, 0, sizeof *l);
}

int sp_video_list_read(const char *list_path, sp_video_list *out) {
  return sp_video_list_read_classes(list_path, NULL, NULL, out);
}

/* One list entry: the path (relative ones under base), label, frame count
 * (-1: not given) and line number. */
static void append_entry(sp_video_list *out, int *ncap, const char *base, const char *path, size_t plen, int label,
                         long long frames, size_t lineno) {
  if (out->n == *ncap) {
    *ncap = *ncap ? 2 * *ncap : 64;
    out->path = sp_xrealloc(out->path, (size_t)*ncap * sizeof(char *));
    out->label = sp_xrealloc(out->label, (size_t)*ncap * sizeof(int));
    out->frames = sp_xrealloc(out->frames, (size_t)*ncap * sizeof(int64_t));
    out->line = sp_xrealloc(out->line, (size_t)*ncap * sizeof(int));
  }
  char *p;
  if (path[0] == '/') {
    p = sp_xmalloc(plen + 1);
    memcpy(p, path, plen);
    p[plen] = 0;
  } else {
    size_t n = strlen(base) + plen + 2;
    p = sp_xmalloc(n);
    snprintf(p, n, "%s/%.*s", base, (int)plen, path);
  }
  out->path[out->n] = p;
  out->label[out->n] = label;
  out->frames[out->n] = frames;
  out->line[out->n] = lineno > INT_MAX ? INT_MAX : (int)lineno;
  out->n++;
}

int sp_video_list_read_classes(const char *list_path, const char *base_dir, const sp_video_classes *classes,
                               sp_video_list *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(list_path, "r");
  if (!f) return sp_error_set("%s: cannot open list (%s)", list_path, strerror(errno));
  char *base = base_dir ? sp_xstrdup(base_dir) : dir_of(list_path);
  char *line = NULL;
  size_t cap = 0, lineno = 0;
  int ncap = 0, rc = 0;
  ssize_t got;
  while ((got = getline(&line, &cap, f)) >= 0) {
    lineno++;
    size_t len = (size_t)got;
    /* Paths are C strings from here on: a NUL byte would cut one short. */
    if (memchr(line, 0, len)) {
      rc = sp_error_set("%s:%zu: a NUL byte (not a text list?)", list_path, lineno);
      break;
    }
    size_t s = 0;
    while (s < len && isspace((unsigned char)line[s])) s++;
    if (s == len || line[s] == '#') continue;
    const char *tok;
    size_t tlen;
    long long frames = -1, given = 0;
    int label, overflow;
    size_t whole = len;
    if (!last_token(line, &len, &tok, &tlen) || (len <= s && !classes)) {
      rc = sp_error_set("%s:%zu: expected `path label`%s", list_path, lineno,
                        len <= s ? " (a list without labels, like UCF's testlists, needs its classes file: "
                                   "data.classes, or --labels for prepare list)"
                                 : "");
      break;
    }
    if (classes) {
      /* In the classes file's numbering, or none: the folder's class. */
      int has = len > s && parse_int(tok, tlen, &given, &overflow) && !overflow;
      if (!has) len = whole;
      while (len > s && isspace((unsigned char)line[len - 1])) len--;
      if ((rc = sp_video_classes_label(classes, list_path, lineno > INT_MAX ? INT_MAX : (int)lineno, line + s, len - s,
                                       given, has, &label)) != 0)
        break;
    } else if ((rc = parse_label(tok, tlen, list_path, lineno, &label)) != 0) {
      break;
    }
    size_t keep = len;
    if (last_token(line, &len, &tok, &tlen) && len > s && parse_int(tok, tlen, &frames, &overflow)) {
      /* `dir n_frames label` */
      if (overflow || frames < 0 || frames > INT32_MAX) {
        rc = sp_error_set("%s:%zu: n_frames %.*s out of range", list_path, lineno, (int)tlen, tok);
        break;
      }
    } else {
      len = keep;
      frames = -1;
    }
    append_entry(out, &ncap, base, line + s, len - s, label, frames, lineno);
  }
  free(line);
  free(base);
  fclose(f);
  if (rc != 0) sp_video_list_free(out);
  return rc;
}

/* Why path cannot be a clip (a static string), or NULL when it can: a
 * readable regular file, or a frame folder whose first frame is one. */
static const char *unusable(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) return errno == ENOENT ? "no such file" : strerror(errno);
  if (S_ISDIR(sb.st_mode)) {
    char first[PATH_MAX];
    snprintf(first, sizeof first, "%s/img_00001.jpg", path);
    if (stat(first, &sb) != 0 || !S_ISREG(sb.st_mode)) return "a folder without img_00001.jpg frames";
    return access(first, R_OK) == 0 ? NULL : "its frames cannot be read (permission denied)";
  }
  if (!S_ISREG(sb.st_mode)) return "not a regular file";
  return access(path, R_OK) == 0 ? NULL : "cannot be read (permission denied)";
}

int sp_video_list_keep_usable(sp_video_list *l, const char *list_path, int warn) {
  int kept = 0;
  for (int i = 0; i < l->n; i++) {
    const char *why = unusable(l->path[i]);
    if (why) {
      if (warn) fprintf(stderr, "spry: %s:%d: skip %s: %s\n", list_path, l->line ? l->line[i] : i + 1, l->path[i], why);
      free(l->path[i]);
      continue;
    }
    l->path[kept] = l->path[i];
    l->label[kept] = l->label[i];
    l->frames[kept] = l->frames[i];
    if (l->line) l->line[kept] = l->line[i];
    kept++;
  }
  int dropped = l->n - kept;
  l->n = kept;
  if (kept == 0)
    return dropped ? sp_error_set("%s: none of its %d clips is there to read (see the skip lines above)", list_path,
                                  dropped)
                   : sp_error_set("%s: the list has no clips", list_path);
  return dropped;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Distinct labels of a and b together, and the entry holding the largest. */
static int distinct_labels(const sp_video_list *a, const sp_video_list *b, int *max, const sp_video_list **at,
                           int *at_i) {
  int n = a->n + (b ? b->n : 0), d = 0;
  int *v = sp_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
  *max = -1;
  for (int w = 0; w < 2; w++) {
    const sp_video_list *l = w ? b : a;
    for (int i = 0; l && i < l->n; i++) {
      v[d++] = l->label[i];
      if (l->label[i] > *max) *max = l->label[i], *at = l, *at_i = i;
    }
  }
  qsort(v, (size_t)n, sizeof(int), cmp_int);
  int distinct = 0;
  for (int i = 0; i < n; i++) distinct += i == 0 || v[i] != v[i - 1];
  free(v);
  return distinct;
}

int sp_video_list_check_dense(const sp_video_list *train, const char *train_path, const sp_video_list *val,
                              const char *val_path) {
  int max = -1, at_i = 0;
  const sp_video_list *at = NULL;
  int distinct = distinct_labels(train, val, &max, &at, &at_i);
  /* Classes are numbered 0..N-1: when most numbers up to the largest label
   * are unused, the largest is a typo far more often than a real class (a
   * 99999 in a 4-class list would build a 100000-class model). */
  if (!at || max + 1 <= 2 * distinct + 2) return 0;
  return sp_error_set(
      "%s:%d: label %d is far above the others (%d distinct labels in all): a typo? The model "
      "would have %d classes; set data.num_classes to train that many",
      at == train ? train_path : val_path, at->line ? at->line[at_i] : at_i + 1, max, distinct, max + 1);
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

/* `path,label` lines of a labels csv into the list f; header and class-name
 * lines (no integer after the last comma) are passed over. *pairs tells
 * whether any pair was found. Returns the entries written or -1. */
static int csv_pairs(const char *labels_csv, const char *prefix, FILE *f, int *pairs) {
  FILE *c = fopen(labels_csv, "r");
  if (!c) return sp_error_set("%s: cannot open labels (%s)", labels_csv, strerror(errno));
  char *line = NULL;
  size_t lcap = 0, lineno = 0;
  int count = 0, rc = 0;
  ssize_t got;
  *pairs = 0;
  while (rc == 0 && (got = getline(&line, &lcap, c)) >= 0) {
    lineno++;
    if (memchr(line, 0, (size_t)got)) {
      rc = sp_error_set("%s:%zu: a NUL byte (not a text file?)", labels_csv, lineno);
      break;
    }
    line[strcspn(line, "\r\n")] = 0;
    char *comma = strrchr(line, ',');
    long long v;
    int overflow, lab;
    if (!comma || !parse_int(comma + 1, strlen(comma + 1), &v, &overflow)) continue; /* header or class-name line */
    if ((rc = parse_label(comma + 1, strlen(comma + 1), labels_csv, lineno, &lab)) != 0) break;
    *pairs = 1;
    *comma = 0;
    fprintf(f, "%s%s%s %d\n", prefix, *prefix ? "/" : "", line, lab);
    count++;
  }
  free(line);
  fclose(c);
  return rc == 0 ? count : -1;
}

/* One list line: the clip's path below the list's folder (prefix) and its
 * 0-based label. */
static void put_entry(FILE *f, const char *prefix, const char *rel, int label) {
  fprintf(f, "%s%s%s %d\n", prefix, *prefix ? "/" : "", rel, label);
}

/* The clips of class folders rdir/CLASS/ into f, labelled by cls (class
 * folders it does not name are passed over, with a line each); without cls,
 * the folders sorted by name number the classes and fill *made. Returns the
 * entries written. */
static int class_folders(const char *rdir, const sp_video_classes *cls, const char *prefix, FILE *f,
                         sp_video_classes *made) {
  int nc = 0, count = 0;
  char **classes = list_dir(rdir, 1, &nc);
  if (!cls) {
    made->n = nc;
    made->name = nc ? sp_xmalloc((size_t)nc * sizeof(char *)) : NULL;
    for (int k = 0; k < nc; k++) made->name[k] = sp_xstrdup(classes[k]);
  }
  for (int k = 0; k < nc; k++) {
    int label = cls ? sp_video_classes_find(cls, classes[k], strlen(classes[k])) : k;
    if (label < 0) {
      fprintf(stderr, "spry prepare list: skip %s/%s: not a class of %s\n", rdir, classes[k], cls->path);
      continue;
    }
    char sub[PATH_MAX], rel[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/%s", rdir, classes[k]);
    int nv = 0;
    char **clips = list_dir(sub, 0, &nv);
    for (int i = 0; i < nv; i++) {
      snprintf(rel, sizeof rel, "%s/%s", classes[k], clips[i]);
      put_entry(f, prefix, rel, label);
      count++;
    }
    free_names(clips, nv);
  }
  free_names(classes, nc);
  return count;
}

/* The clips a split file names (UCF's trainlist/testlist: `Class/clip.avi`
 * below rdir, labelled in cls's numbering or not at all), in its order;
 * those not in rdir are left out with a line each. Returns the entries
 * written or -1. */
static int split_entries(const char *rdir, const char *split, const sp_video_classes *cls, const char *prefix,
                         FILE *f) {
  sp_video_list l;
  if (sp_video_list_read_classes(split, rdir, cls, &l) != 0) return -1;
  int total = l.n;
  if (sp_video_list_keep_usable(&l, split, 1) < 0) {
    sp_video_list_free(&l);
    return sp_error_set("%s: none of its %d clips is in %s (the split's paths are taken from that folder)", split,
                        total, rdir);
  }
  size_t rl = strlen(rdir);
  for (int i = 0; i < l.n; i++) {
    const char *p = l.path[i];
    put_entry(f, prefix, !strncmp(p, rdir, rl) && p[rl] == '/' ? p + rl + 1 : p, l.label[i]);
  }
  int n = l.n;
  sp_video_list_free(&l);
  return n;
}

/* `path,label` pairs name no classes: an older labels.txt beside the list
 * would contradict the new labels (unless it is the list itself). */
static void remove_old_classes(const char *list_out, const char *cpath) {
  char *real_list = realpath(list_out, NULL), *real_classes = real_list ? realpath(cpath, NULL) : NULL;
  if (real_classes && strcmp(real_list, real_classes) && unlink(cpath) == 0)
    fprintf(stderr, "spry prepare list: removed %s (the csv's labels have no class names)\n", cpath);
  free(real_list);
  free(real_classes);
}

/* The classes file of a build: labels when given (unless it is a csv of
 * pairs: *pairs), else rdir/labels.txt when there is one. 1 when one was
 * read into *cls, 0 when there is none, -1 on error. */
static int build_classes(const char *rdir, const char *labels, int pairs, sp_video_classes *cls) {
  char own[PATH_MAX];
  if (labels && pairs) return 0;
  if (!labels) {
    snprintf(own, sizeof own, "%s/labels.txt", rdir);
    if (access(own, F_OK) != 0) return 0;
    fprintf(stderr, "spry prepare list: classes numbered as %s says (give --labels to use another file)\n", own);
    labels = own;
  }
  return sp_video_classes_read(labels, cls) == 0 ? 1 : -1;
}

int sp_video_list_build(const char *dir, const char *labels_csv, const char *list_out) {
  return sp_video_list_build_split(dir, labels_csv, NULL, list_out);
}

int sp_video_list_build_split(const char *dir, const char *labels, const char *split, const char *list_out) {
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
  if (!strcmp(rdir, rout))
    prefix = "";
  else if (!strncmp(rdir, rout, ol) && rdir[ol] == '/')
    prefix = rdir + ol + 1;

  /* The list and labels.txt are made in memory and written (each through a
   * temporary and a rename) only once the scan found clips: a failed run
   * leaves the files of an earlier one as they were, never empty ones. */
  char *lbuf = NULL;
  size_t llen = 0;
  FILE *f = open_memstream(&lbuf, &llen);
  char cpath[PATH_MAX];
  snprintf(cpath, sizeof cpath, "%s/labels.txt", rout);
  sp_video_classes cls = {0}, made = {0};
  int pairs = 0, count = labels && !split ? csv_pairs(labels, prefix, f, &pairs) : 0;
  int have = count < 0 ? -1 : build_classes(rdir, labels, pairs, &cls);
  if (have < 0)
    count = -1;
  else if (split && !have)
    count = sp_error_set(
        "%s: a split file needs the classes file that numbers its labels and names its class "
        "folders (--labels classInd.txt, or %s/labels.txt)",
        split, dir);
  else if (split)
    count = split_entries(rdir, split, &cls, prefix, f);
  else if (!pairs)
    count = class_folders(rdir, have ? &cls : NULL, prefix, f, &made);
  fclose(f);
  int rc = count < 0 ? -1 : 0;
  if (rc == 0 && count == 0)
    rc = sp_error_set("%s: no videos found (expected CLASS/clip.mp4 sub-folders or a `path,label` csv)", dir);
  /* The list first: if labels.txt then fails, the error says so and the
   * labels in the list stand on their own. */
  if (rc == 0) { rc = sp_write_file_atomic(list_out, lbuf, llen); }
  if (rc == 0 && !pairs) {
    /* labels.txt names the list's 0-based labels; a classes file that is
     * that very file stays as it is. */
    char *src = have ? realpath(cls.path, NULL) : NULL, *dst = realpath(cpath, NULL);
    if (!src || !dst || strcmp(src, dst))
      rc = sp_video_classes_write(cpath, have ? &cls : &made);
    else if (cls.base != 0)
      rc = sp_error_set(
          "%s: numbers its classes from %d, but the list beside it is written from 0; write the list "
          "in another folder",
          cpath, cls.base);
    free(src);
    free(dst);
  }
  if (rc == 0 && pairs) remove_old_classes(list_out, cpath);
  free(lbuf);
  sp_video_classes_free(&cls);
  sp_video_classes_free(&made);
  return rc == 0 ? count : -1;
}
