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
  if (b->bad) { sp_data_skip(what, "bad <part> element"); ds->skipped++; return; }
  int k = b->max_idx + 1;
  if (k <= 0) { sp_data_skip(what, "box has no <part> points"); ds->skipped++; return; }
  for (int i = 0; i < k; i++)
    if (!b->seen[i]) { sp_data_skip(what, "part %d missing", i); ds->skipped++; return; }
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

int sp_read_dlib_xml(const char *path, sp_dataset *ds) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(path, &buf, &len) != 0) return -1;
  const char *text = (const char *)buf, *end = text + len;
  char *dir = sp_path_dirname(path);
  char *image = NULL;
  box_acc *box = sp_xmalloc(sizeof *box);
  int in_box = 0, box_no = 0, n_images = 0;
  for (const char *p = strchr(text, '<'); p && p < end; p = strchr(p + 1, '<')) {
    const char *te = strchr(p, '>');
    if (!te) break;
    if (!strncmp(p, "<image", 6) && (p[6] == ' ' || p[6] == '>')) {
      char file[1024];
      free(image);
      image = NULL;
      if (attr(p, te, "file", file, sizeof file)) image = sp_path_join(dir, file);
      n_images++;
      box_no = 0;
    } else if (!strncmp(p, "<box", 4) && (p[4] == ' ' || p[4] == '>')) {
      memset(box, 0, sizeof *box);
      box->max_idx = -1;
      float top = 0, left = 0, w = 0, h = 0, ig = 0;
      if (!attr_float(p, te, "top", &top) || !attr_float(p, te, "left", &left) ||
          !attr_float(p, te, "width", &w) || !attr_float(p, te, "height", &h))
        box->bad = 1;
      box->box[0] = left; box->box[1] = top; box->box[2] = w; box->box[3] = h;
      if (attr_float(p, te, "ignore", &ig) && ig != 0) box->ignore = 1;
      box_no++;
      in_box = 1;
      if (te[-1] == '/') { /* <box .../> : no parts */
        if (image) finish_box(box, image, path, box_no, ds);
        in_box = 0;
      }
    } else if (!strncmp(p, "<part", 5) && in_box) {
      char name[32];
      float x, y;
      if (!attr(p, te, "name", name, sizeof name) || !attr_float(p, te, "x", &x) || !attr_float(p, te, "y", &y)) {
        box->bad = 1;
        continue;
      }
      int idx = atoi(name);
      if (idx < 0 || idx >= SP_MAX_KEYPOINTS) { box->bad = 1; continue; }
      box->pts[2 * idx] = x;
      box->pts[2 * idx + 1] = y;
      box->seen[idx] = 1;
      if (idx > box->max_idx) box->max_idx = idx;
    } else if (!strncmp(p, "</box>", 6) && in_box) {
      if (image) finish_box(box, image, path, box_no, ds);
      in_box = 0;
    }
  }
  free(box);
  free(image);
  free(dir);
  free(buf);
  if (n_images == 0) return sp_error_set("%s: no <image> elements (not a dlib/imglab XML file?)", path);
  return 0;
}
