/* Boxes files: `image,x,y,w,h[,...]` CSV, one face per row, in source pixels
 * (the layout of youtube_faces_68/detector_boxes.csv; extra columns such as
 * `source` are ignored). Rows are found by image: the file's `image` value is
 * a file name or a relative path, matched against the end of the sample's
 * image path, so one table serves a folder wherever it lies. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

/* A boxes file for a dataset has one row per face: a million rows is far
 * beyond any real set, and bounds what a hostile file can make us allocate. */
#define MAX_ROWS 10000000
#define MAX_LINE 4096

typedef struct {
  char *image; /* as written in the file */
  float box[4];
  int line;
} box_row;

struct sp_box_table {
  char *path;
  box_row *rows;
  int n, cap;
  int *order; /* row indices sorted by base name, for lookups */
};

static const char *base_of(const char *p) {
  const char *s = strrchr(p, '/');
  return s ? s + 1 : p;
}

static int by_base(const void *a, const void *b, void *table) {
  const sp_box_table *t = table;
  const box_row *ra = &t->rows[*(const int *)a], *rb = &t->rows[*(const int *)b];
  int c = strcmp(base_of(ra->image), base_of(rb->image));
  return c ? c : ra->line - rb->line;
}

/* Splits a CSV line in place on commas (no quoting: image names with commas
 * are not supported and fail the column count). Returns the column count. */
static int split_cols(char *line, char **cols, int max) {
  int n = 0;
  for (char *p = line;;) {
    if (n < max) cols[n] = p;
    n++;
    char *c = strchr(p, ',');
    if (!c) break;
    *c = 0;
    p = c + 1;
  }
  return n;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
  return s;
}

static int parse_float(const char *s, float *v) {
  char *e;
  double d = strtod(s, &e);
  if (e == s || *trim(e)) return -1;
  *v = (float)d;
  return 0;
}

/* Reading state: the header's columns, line count, skips. */
typedef struct {
  sp_box_table *t;
  const char *path;
  int col[5], lineno, ncols, skipped;
} box_reader;

/* The header line: every one of image,x,y,w,h must be there. */
static int read_header(box_reader *br, char **cols, int n) {
  static const char *const names[5] = {"image", "x", "y", "w", "h"};
  br->ncols = n;
  for (int i = 0; i < n && i < 64; i++)
    for (int j = 0; j < 5; j++)
      if (!strcmp(trim(cols[i]), names[j])) br->col[j] = i;
  for (int j = 0; j < 5; j++)
    if (br->col[j] < 0)
      return sp_error_set("%s line 1: the header has no '%s' column (expected image,x,y,w,h)", br->path, names[j]);
  return 0;
}

/* One data row: skipped (with the file and line named) when a value is not
 * a number or the box has no area, is not finite or is absurdly large. */
static int read_row(box_reader *br, char *line, char **cols, int n) {
  if (!*trim(line) && n == 1) return 0;
  if (n != br->ncols) {
    fprintf(stderr, "spry data: skip %s line %d: %d columns, the header has %d\n", br->path, br->lineno, n, br->ncols);
    br->skipped++;
    return 0;
  }
  float b[4];
  int bad = 0;
  for (int j = 0; j < 4 && !bad; j++) bad = parse_float(cols[br->col[j + 1]], &b[j]) != 0;
  const char *image = trim(cols[br->col[0]]);
  if (bad || !*image) {
    fprintf(stderr, "spry data: skip %s line %d: %s\n", br->path, br->lineno,
            bad ? "a box value is not a number" : "no image name");
    br->skipped++;
    return 0;
  }
  if (!(isfinite(b[0]) && isfinite(b[1]) && isfinite(b[2]) && isfinite(b[3])) || !(b[2] > 0 && b[3] > 0) ||
      fabsf(b[0]) > 1e6f || fabsf(b[1]) > 1e6f || b[2] > 1e6f || b[3] > 1e6f) {
    fprintf(stderr, "spry data: skip %s line %d: box %g,%g,%gx%g has no area or is not finite\n", br->path, br->lineno,
            b[0], b[1], b[2], b[3]);
    br->skipped++;
    return 0;
  }
  sp_box_table *t = br->t;
  if (t->n == MAX_ROWS) return sp_error_set("%s: more than %d rows", br->path, MAX_ROWS);
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 256;
    t->rows = sp_xrealloc(t->rows, sizeof *t->rows * (size_t)t->cap);
  }
  box_row *r = &t->rows[t->n++];
  r->image = sp_xstrdup(image);
  memcpy(r->box, b, sizeof b);
  r->line = br->lineno;
  return 0;
}

/* Every line of the text (split in place). */
static int read_lines(box_reader *br, char *text) {
  char *next = NULL;
  for (char *line = text; line && *line; line = next) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    next = nl ? nl + 1 : NULL;
    br->lineno++;
    if (strlen(line) > MAX_LINE)
      return sp_error_set("%s line %d: longer than %d characters", br->path, br->lineno, MAX_LINE);
    char *cols[64];
    int n = split_cols(line, cols, 64);
    int rc = br->ncols == 0 ? read_header(br, cols, n) : read_row(br, line, cols, n);
    if (rc) return rc;
  }
  return 0;
}

int sp_box_table_read(const char *csv_path, sp_box_table **out) {
  *out = NULL;
  uint8_t *buf;
  size_t len;
  if (sp_read_file(csv_path, &buf, &len) != 0) return -1;
  if (memchr(buf, 0, len)) {
    free(buf);
    return sp_error_set("%s: not a text file (it holds a NUL byte)", csv_path);
  }
  sp_box_table *t = sp_xcalloc(1, sizeof *t);
  t->path = sp_xstrdup(csv_path);
  box_reader br = {t, csv_path, {-1, -1, -1, -1, -1}, 0, 0, 0};
  char *text = (char *)buf;
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) text += 3; /* a spreadsheet's UTF-8 mark */
  int rc = read_lines(&br, text);
  free(buf);
  if (!rc && br.ncols == 0) rc = sp_error_set("%s: empty (expected a header image,x,y,w,h)", csv_path);
  if (!rc && t->n == 0) rc = sp_error_set("%s: no usable box rows (%d skipped)", csv_path, br.skipped);
  if (rc) {
    sp_box_table_free(t);
    return -1;
  }
  t->order = sp_xmalloc(sizeof(int) * (size_t)t->n);
  for (int i = 0; i < t->n; i++) t->order[i] = i;
  qsort_r(t->order, (size_t)t->n, sizeof(int), by_base, t); /* no shared state: tables may load in parallel */
  *out = t;
  return 0;
}

void sp_box_table_free(sp_box_table *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) free(t->rows[i].image);
  free(t->rows);
  free(t->order);
  free(t->path);
  free(t);
}

int sp_box_table_rows(const sp_box_table *t) { return t ? t->n : 0; }

/* `name` (as written in the file) names `path` when path ends with it at a
 * component boundary: "a.jpg" and "images/a.jpg" both name "data/images/a.jpg". */
static int names_path(const char *name, const char *path) {
  while (name[0] == '.' && name[1] == '/') name += 2;
  size_t a = strlen(name), b = strlen(path);
  if (a > b || strcmp(path + b - a, name)) return 0;
  return a == b || path[b - a - 1] == '/';
}

int sp_box_table_find(const sp_box_table *t, const char *image_path, int *rows, int max) {
  if (!t || !t->n) return 0;
  const char *base = base_of(image_path);
  /* Binary search for the first row with this base name. */
  int lo = 0, hi = t->n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (strcmp(base_of(t->rows[t->order[mid]].image), base) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  int found = 0;
  for (int i = lo; i < t->n && !strcmp(base_of(t->rows[t->order[i]].image), base); i++)
    if (names_path(t->rows[t->order[i]].image, image_path)) {
      if (found < max) rows[found] = t->order[i];
      found++;
    }
  return found;
}

const float *sp_box_table_box(const sp_box_table *t, int r) { return t->rows[r].box; }

const char *sp_box_table_where(const sp_box_table *t, int r, char *buf, size_t n) {
  snprintf(buf, n, "%s line %d", t->path, t->rows[r].line);
  return buf;
}
