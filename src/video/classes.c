/* Classes files: the one place a class number gets its name. Two forms are
 * read: labels.txt (one name per line, line k names label k, what spry
 * writes) and UCF-101's classInd.txt (`N name` lines, numbered as the file
 * numbers them: from 1 in UCF's). A list read with a classes file has its
 * labels in that file's numbering; lines without a label (UCF's testlists)
 * take the class of their first folder. The file decides the numbering, so
 * a 1-based list is never guessed at: without a classes file, labels are
 * class numbers from 0. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/video.h"

void sp_video_classes_free(sp_video_classes *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) free(c->name[i]);
  free(c->name);
  free(c->path);
  memset(c, 0, sizeof *c);
}

/* The leading `N ` of a classInd line: 1 and *num when there is one. */
static int numbered(const char *s, long *num, const char **rest) {
  const char *p = s;
  if (!isdigit((unsigned char)*p)) return 0;
  while (isdigit((unsigned char)*p)) p++;
  if (p - s > 6 || !isspace((unsigned char)*p)) return 0;
  *num = strtol(s, NULL, 10);
  while (isspace((unsigned char)*p)) p++;
  *rest = p;
  return *p != 0;
}

static int add_class(sp_video_classes *c, int *cap, const char *name, size_t len) {
  if (c->n == SP_VIDEO_MAX_CLASSES) return sp_error_set("%s: more than %d classes", c->path, SP_VIDEO_MAX_CLASSES);
  if (c->n == *cap) {
    *cap = *cap ? 2 * *cap : 64;
    c->name = sp_xrealloc(c->name, (size_t)*cap * sizeof(char *));
  }
  c->name[c->n] = sp_xmalloc(len + 1);
  memcpy(c->name[c->n], name, len);
  c->name[c->n][len] = 0;
  c->n++;
  return 0;
}

int sp_video_classes_read(const char *path, sp_video_classes *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (!f) return sp_error_set("%s: cannot open classes file (%s)", path, strerror(errno));
  out->path = sp_xstrdup(path);
  char *line = NULL;
  size_t lcap = 0, lineno = 0;
  int cap = 0, rc = 0, form = -1; /* 0: names, 1: `N name` */
  ssize_t got;
  while (rc == 0 && (got = getline(&line, &lcap, f)) >= 0) {
    lineno++;
    if (memchr(line, 0, (size_t)got)) {
      rc = sp_error_set("%s:%zu: a NUL byte (not a text file?)", path, lineno);
      break;
    }
    size_t e = (size_t)got;
    while (e > 0 && isspace((unsigned char)line[e - 1])) e--;
    line[e] = 0;
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    if (!*s) continue;
    long num;
    const char *name = s;
    int is_num = numbered(s, &num, &name);
    if (form < 0) {
      form = is_num;
      out->base = is_num ? (int)num : 0;
      if (is_num && num != 0 && num != 1)
        rc = sp_error_set("%s:%zu: classInd-style numbering must start at 0 or 1, not %ld", path, lineno, num);
    } else if (form != is_num) {
      rc = sp_error_set(
          "%s:%zu: '%s' %s, while the lines above %s: one form per file (`N name` lines as in UCF's "
          "classInd.txt, or one name per line as in labels.txt)",
          path, lineno, s, is_num ? "is numbered" : "has no number", form ? "are numbered" : "are not");
    } else if (is_num && num != out->base + out->n) {
      rc = sp_error_set("%s:%zu: class number %ld, expected %d (numbers must run on one by one)", path, lineno, num,
                        out->base + out->n);
    }
    if (rc) break;
    size_t len = strlen(name);
    if (sp_video_classes_find(out, name, len) >= 0) {
      rc = sp_error_set("%s:%zu: class '%s' is named twice", path, lineno, name);
      break;
    }
    rc = add_class(out, &cap, name, len);
  }
  free(line);
  fclose(f);
  if (rc == 0 && out->n == 0) rc = sp_error_set("%s: no class names in the classes file", path);
  if (rc != 0) sp_video_classes_free(out);
  return rc;
}

int sp_video_classes_find(const sp_video_classes *c, const char *name, size_t len) {
  for (int i = 0; c && i < c->n; i++)
    if (strlen(c->name[i]) == len && !memcmp(c->name[i], name, len)) return i;
  return -1;
}

int sp_video_classes_label(const sp_video_classes *c, const char *list_path, int lineno, const char *rel, size_t rlen,
                           long long given, int has_label, int *label) {
  /* The first folder of the entry's path, when it names a class. */
  const char *slash = memchr(rel, '/', rlen);
  int folder = slash ? sp_video_classes_find(c, rel, (size_t)(slash - rel)) : -1;
  if (!has_label) {
    if (folder < 0)
      return sp_error_set(
          "%s:%d: no label, and %s '%.*s' is not a class of %s (an unlabelled line, as in UCF's "
          "testlists, takes the class of its first folder)",
          list_path, lineno,
          slash ? "its folder" : "the path has no class folder:", slash ? (int)(slash - rel) : (int)rlen, rel, c->path);
    *label = folder;
    return 0;
  }
  if (given < c->base || given >= (long long)c->base + c->n)
    return sp_error_set("%s:%d: label %lld is not a class of %s (it numbers its %d classes %d..%d)", list_path, lineno,
                        given, c->path, c->n, c->base, c->base + c->n - 1);
  if (folder >= 0 && folder != given - c->base)
    return sp_error_set(
        "%s:%d: label %lld is '%s' in %s, but the clip is in the folder of '%s' (%d): the list and "
        "the classes file disagree (another class order, or %d-based labels?)",
        list_path, lineno, given, c->name[given - c->base], c->path, c->name[folder], folder + c->base,
        c->base ? 0 : 1);
  *label = (int)(given - c->base);
  return 0;
}

int sp_video_classes_write(const char *path, const sp_video_classes *c) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  for (int i = 0; i < c->n; i++) fprintf(f, "%s\n", c->name[i]);
  fclose(f);
  int rc = sp_write_file_atomic(path, buf, len);
  free(buf);
  return rc;
}

int sp_video_classes_beside(const char *list_path, sp_video_classes *out) {
  memset(out, 0, sizeof *out);
  const char *slash = strrchr(list_path, '/');
  size_t dl = slash ? (size_t)(slash - list_path) + 1 : 0, n = dl + sizeof "labels.txt";
  char *p = sp_xmalloc(n);
  memcpy(p, list_path, dl);
  memcpy(p + dl, "labels.txt", sizeof "labels.txt");
  FILE *f = fopen(p, "r");
  int rc = 0;
  if (f) {
    fclose(f);
    rc = sp_video_classes_read(p, out) == 0 ? 1 : -1;
  }
  free(p);
  return rc;
}
