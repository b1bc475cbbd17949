/* COCO keypoints JSON: images[{id, file_name}], annotations[{image_id,
 * keypoints [x,y,v]*K, num_keypoints, bbox [x,y,w,h], iscrowd}]. One sample
 * per annotation with labelled points; v = 0 means "not labelled". */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

static int num(const sp_json *j, double *v) {
  if (!j || j->type != SPJ_NUM) return 0;
  *v = j->num;
  return 1;
}

int sp_read_coco_keypoints(const char *json_path, const char *image_dir, sp_dataset *ds) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(json_path, &buf, &len) != 0) return -1;
  sp_json root;
  char err[160];
  int rc = sp_djson_parse((const char *)buf, len, &root, err, sizeof err);
  free(buf);
  if (rc != 0) return sp_error_set("%s: invalid JSON (%s)", json_path, err);
  const sp_json *images = sp_djson_get(&root, "images"), *anns = sp_djson_get(&root, "annotations");
  if (!images || images->type != SPJ_ARR || !anns || anns->type != SPJ_ARR) {
    sp_djson_free(&root);
    return sp_error_set("%s: not a COCO file (needs 'images' and 'annotations' arrays)", json_path);
  }
  char *dir = image_dir ? sp_xstrdup(image_dir) : sp_path_dirname(json_path);
  for (int a = 0; a < anns->n; a++) {
    const sp_json *an = &anns->items[a];
    char what[1200];
    snprintf(what, sizeof what, "%s (annotation %d)", sp_path_base(json_path), a);
    double image_id, crowd = 0;
    const sp_json *kp = sp_djson_get(an, "keypoints");
    if (!num(sp_djson_get(an, "image_id"), &image_id) || !kp || kp->type != SPJ_ARR || kp->n % 3) {
      sp_data_skip(what, "missing image_id or keypoints not a multiple of 3");
      ds->skipped++;
      continue;
    }
    if (num(sp_djson_get(an, "iscrowd"), &crowd) && crowd != 0) continue; /* crowds have no usable points */
    const sp_json *file = NULL;
    for (int i = 0; i < images->n && !file; i++) {
      double id;
      if (num(sp_djson_get(&images->items[i], "id"), &id) && id == image_id) {
        file = sp_djson_get(&images->items[i], "file_name");
      }
    }
    if (!file || file->type != SPJ_STR) {
      sp_data_skip(what, "image_id %.0f not in 'images'", image_id);
      ds->skipped++;
      continue;
    }
    int k = kp->n / 3, labelled = 0, bad = 0;
    sp_kp_sample s = {0};
    s.identity = -1;
    s.k = k;
    s.pts = sp_xmalloc(sizeof(float) * 2 * (size_t)(k ? k : 1));
    s.vis = sp_xmalloc((size_t)(k ? k : 1));
    for (int i = 0; i < k; i++) {
      double x, y, v;
      if (!num(&kp->items[3 * i], &x) || !num(&kp->items[3 * i + 1], &y) || !num(&kp->items[3 * i + 2], &v)) bad = 1;
      else {
        s.pts[2 * i] = (float)x;
        s.pts[2 * i + 1] = (float)y;
        s.vis[i] = v > 0;
        labelled += v > 0;
      }
    }
    if (bad || labelled == 0) {
      if (bad) { sp_data_skip(what, "non-numeric keypoint value"); ds->skipped++; }
      sp_kp_sample_free(&s);
      continue; /* no labelled points: nothing to learn, not an error */
    }
    const sp_json *bb = sp_djson_get(an, "bbox");
    if (bb && bb->type == SPJ_ARR && bb->n == 4) {
      double b[4];
      int ok = 1;
      for (int i = 0; i < 4; i++) ok &= num(&bb->items[i], &b[i]);
      if (ok && b[2] > 0 && b[3] > 0) {
        s.has_box = 1;
        for (int i = 0; i < 4; i++) s.box[i] = (float)b[i];
      }
    }
    s.image = sp_path_join(dir, file->str);
    sp_dataset_add(ds, &s, what);
  }
  free(dir);
  sp_djson_free(&root);
  return 0;
}
