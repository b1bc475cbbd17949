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

/* images[] by id, for a binary search per annotation: a scan of every image
 * for every annotation took minutes on COCO's person_keypoints train2017. */
typedef struct {
  double id;
  int index;
} coco_image;

static int by_id(const void *a, const void *b) {
  const coco_image *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->index - y->index; /* equal ids: the first in the file wins, as before */
}

static coco_image *index_images(const sp_json *images, int *n) {
  coco_image *ids = sp_xmalloc(sizeof *ids * (size_t)(images->n ? images->n : 1));
  *n = 0;
  for (int i = 0; i < images->n; i++) {
    double id;
    if (num(sp_djson_get(&images->items[i], "id"), &id) && id == id) ids[(*n)++] = (coco_image){id, i};
  }
  qsort(ids, (size_t)*n, sizeof *ids, by_id);
  return ids;
}

/* The file_name of the first image with this id, or NULL. */
static const sp_json *image_file(const sp_json *images, const coco_image *ids, int n, double id) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (ids[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && ids[lo].id == id ? sp_djson_get(&images->items[ids[lo].index], "file_name") : NULL;
}

/* The points of one annotation into s; 1 = usable, 0 = nothing labelled (not
 * an error), -1 = skipped with a message. */
static int annotation_points(const sp_json *kp, const char *what, sp_kp_sample *s) {
  int k = kp->n / 3, labelled = 0;
  if (k > SP_MAX_KEYPOINTS) {
    sp_data_skip(what, "%d keypoints; a face has at most %d", k, SP_MAX_KEYPOINTS);
    return -1;
  }
  s->identity = -1;
  s->k = k;
  s->pts = sp_xmalloc(sizeof(float) * 2 * (size_t)(k ? k : 1));
  s->vis = sp_xmalloc((size_t)(k ? k : 1));
  for (int i = 0; i < k; i++) {
    double x, y, v;
    if (!num(&kp->items[3 * i], &x) || !num(&kp->items[3 * i + 1], &y) || !num(&kp->items[3 * i + 2], &v)) {
      sp_data_skip(what, "non-numeric keypoint value");
      sp_kp_sample_free(s);
      return -1;
    }
    s->pts[2 * i] = (float)x;
    s->pts[2 * i + 1] = (float)y;
    s->vis[i] = v > 0;
    labelled += v > 0;
  }
  if (labelled == 0) sp_kp_sample_free(s);
  return labelled > 0;
}

static void annotation_box(const sp_json *an, sp_kp_sample *s) {
  const sp_json *bb = sp_djson_get(an, "bbox");
  if (!bb || bb->type != SPJ_ARR || bb->n != 4) return;
  double b[4];
  int ok = 1;
  for (int i = 0; i < 4; i++) ok &= num(&bb->items[i], &b[i]);
  if (!ok || !(b[2] > 0 && b[3] > 0)) return;
  s->has_box = 1;
  for (int i = 0; i < 4; i++) s->box[i] = (float)b[i];
}

static void read_annotation(const sp_json *an, int a, const char *json_path, const char *dir, const sp_json *images,
                            const coco_image *ids, int n_ids, sp_dataset *ds) {
  char what[1200];
  snprintf(what, sizeof what, "%s (annotation %d)", sp_path_base(json_path), a);
  double image_id, crowd = 0;
  const sp_json *kp = sp_djson_get(an, "keypoints");
  if (!num(sp_djson_get(an, "image_id"), &image_id) || !kp || kp->type != SPJ_ARR || kp->n % 3) {
    sp_data_skip(what, "missing image_id or keypoints not a multiple of 3");
    ds->skipped++;
    return;
  }
  if (num(sp_djson_get(an, "iscrowd"), &crowd) && crowd != 0) return; /* crowds have no usable points */
  const sp_json *file = image_file(images, ids, n_ids, image_id);
  if (!file || file->type != SPJ_STR) {
    sp_data_skip(what, "image_id %.0f not in 'images'", image_id);
    ds->skipped++;
    return;
  }
  sp_kp_sample s = {0};
  int got = annotation_points(kp, what, &s);
  if (got < 0) ds->skipped++;
  if (got <= 0) return; /* no labelled points: nothing to learn, not an error */
  annotation_box(an, &s);
  s.image = sp_path_join(dir, file->str);
  sp_dataset_add(ds, &s, what);
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
  int n_ids;
  coco_image *ids = index_images(images, &n_ids);
  for (int a = 0; a < anns->n; a++) read_annotation(&anns->items[a], a, json_path, dir, images, ids, n_ids, ds);
  free(ids);
  free(dir);
  sp_djson_free(&root);
  return 0;
}
