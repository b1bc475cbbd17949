/* dlib / imglab XML (also the 300-W labels_ibug_300W_*.xml files): one sample
 * per <box> with its <part name=.. x=.. y=..> children. A tiny tag scanner is
 * enough: the format has no namespaces, CDATA or entities in attributes we use. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

/* Value of attribute `name` inside the tag text [tag, end); 0 if absent. */
static int attr(const char *tag, const char *end, const char *name, char *val, size_t n) {
  size_t L = strlen(name);
  for (const char *p = tag + 1; p + L < end; p++) {
    if (strncmp(p, name, L) || (p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n')) continue;
    const char *q = p + L;
    while (q < end && (*q == ' ' || *q == '\t')) q++;
    if (q >= end || *q != '=') continue;
    q++;
    while (q < end && (*q == ' ' || *q == '\t')) q++;
    if (q >= end || (*q != '\'' && *q != '"')) continue;
    char quote = *q++;
    const char *e = memchr(q, quote, (size_t)(end - q));
    if (!e) return 0;
    size_t len = (size_t)(e - q) < n - 1 ? (size_t)(e - q) : n - 1;
    memcpy(val, q, len);
    val[len] = 0;
    return 1;
  }
  return 0;
}

static int attr_float(const char *tag, const char *end, const char *name, float *v) {
  char buf[64], *e;
  if (!attr(tag, end, name, buf, sizeof buf)) return 0;
  *v = strtof(buf, &e);
  return e != buf;
}

typedef struct {
  float box[4];
  int ignore;
  float pts[2 * SP_MAX_KEYPOINTS];
  uint8_t seen[SP_MAX_KEYPOINTS];
  int max_idx, bad;
} box_acc;

static void finish_box(box_acc *b, const char *image, const char *xml, int box_no, sp_dataset *ds) {
  char what[1024];
  snprintf(what, sizeof what, "%s (box %d of %s)", image, box_no, sp_path_base(xml));
  if (b->ignore) return;
  if (b->bad) {
    sp_data_skip(what, "bad <part> element");
    ds->skipped++;
    return;
  }
  int k = b->max_idx + 1;
  if (k <= 0) {
    sp_data_skip(what, "box has no <part> points");
    ds->skipped++;
    return;
  }
  for (int i = 0; i < k; i++)
    if (!b->seen[i]) {
      sp_data_skip(what, "part %d missing", i);
      ds->skipped++;
      return;
    }
  sp_kp_sample s = {0};
  s.identity = -1;
  s.image = sp_xstrdup(image);
  s.has_box = 1;
  memcpy(s.box, b->box, sizeof s.box);
  s.k = k;
  s.pts = sp_xmalloc(sizeof(float) * 2 * (size_t)k);
  memcpy(s.pts, b->pts, sizeof(float) * 2 * (size_t)k);
  sp_dataset_add(ds, &s, what);
}

/* The scan's state between tags. */
typedef struct {
  const char *path;
  char *dir, *image;
  box_acc *box;
  int in_box, box_no, n_images;
  sp_dataset *ds;
} xml_scan;

static void on_image(xml_scan *x, const char *p, const char *te) {
  char file[1024];
  free(x->image);
  x->image = NULL;
  if (attr(p, te, "file", file, sizeof file)) x->image = sp_path_join(x->dir, file);
  x->n_images++;
  x->box_no = 0;
}

static void on_box(xml_scan *x, const char *p, const char *te) {
  box_acc *box = x->box;
  memset(box, 0, sizeof *box);
  box->max_idx = -1;
  float top = 0, left = 0, w = 0, h = 0, ig = 0;
  if (!attr_float(p, te, "top", &top) || !attr_float(p, te, "left", &left) || !attr_float(p, te, "width", &w) ||
      !attr_float(p, te, "height", &h))
    box->bad = 1;
  box->box[0] = left;
  box->box[1] = top;
  box->box[2] = w;
  box->box[3] = h;
  if (attr_float(p, te, "ignore", &ig) && ig != 0) box->ignore = 1;
  x->box_no++;
  x->in_box = 1;
  if (te[-1] == '/') { /* <box .../> : no parts */
    if (x->image) finish_box(box, x->image, x->path, x->box_no, x->ds);
    x->in_box = 0;
  }
}

static void on_part(xml_scan *x, const char *p, const char *te) {
  box_acc *box = x->box;
  char name[32];
  float px, py;
  if (!attr(p, te, "name", name, sizeof name) || !attr_float(p, te, "x", &px) || !attr_float(p, te, "y", &py)) {
    box->bad = 1;
    return;
  }
  char *end;
  long idx = strtol(name, &end, 10);
  if (end == name || *end || idx < 0 || idx >= SP_MAX_KEYPOINTS) {
    box->bad = 1;
    return;
  }
  box->pts[2 * idx] = px;
  box->pts[2 * idx + 1] = py;
  box->seen[idx] = 1;
  if (idx > box->max_idx) box->max_idx = (int)idx;
}

/* A file cut short (a copy stopped mid-way) ends inside a tag or a box: that
 * box is named as skipped, so the message says what happened instead of "no
 * usable samples (0 skipped)". */
static void on_cut(xml_scan *x, size_t at) {
  char what[1200];
  if (!x->in_box || !x->image) return;
  snprintf(what, sizeof what, "%s (box %d of %s)", x->image, x->box_no, sp_path_base(x->path));
  sp_data_skip(what, "the file ends inside this box at byte %zu (cut short?)", at);
  x->ds->skipped++;
  x->in_box = 0;
}

int sp_read_dlib_xml(const char *path, sp_dataset *ds) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(path, &buf, &len) != 0) return -1;
  const char *text = (const char *)buf, *end = text + len;
  const uint8_t *nul = memchr(buf, 0, len);
  if (nul) {
    size_t at = (size_t)(nul - buf);
    free(buf);
    return sp_error_set("%s: not a text file (a NUL byte at offset %zu)", path, at);
  }
  xml_scan x = {path, sp_path_dirname(path), NULL, sp_xmalloc(sizeof(box_acc)), 0, 0, 0, ds};
  const char *p = strchr(text, '<');
  for (; p && p < end; p = strchr(p + 1, '<')) {
    const char *te = strchr(p, '>');
    if (!te) break;
    if (!strncmp(p, "<image", 6) && (p[6] == ' ' || p[6] == '>'))
      on_image(&x, p, te);
    else if (!strncmp(p, "<box", 4) && (p[4] == ' ' || p[4] == '>'))
      on_box(&x, p, te);
    else if (!strncmp(p, "<part", 5) && x.in_box)
      on_part(&x, p, te);
    else if (!strncmp(p, "</box>", 6) && x.in_box) {
      if (x.image) finish_box(x.box, x.image, path, x.box_no, ds);
      x.in_box = 0;
    }
  }
  on_cut(&x, p ? (size_t)(p - text) : len);
  free(x.box);
  free(x.image);
  free(x.dir);
  free(buf);
  if (x.n_images == 0) return sp_error_set("%s: no <image> elements (not a dlib/imglab XML file?)", path);
  return 0;
}
