/* A keypoint checkpoint scored on its run's validation split or on any
 * annotated folder: the library side of `spry eval` (usable from C). The
 * config is the checkpoint's own (or a given file), with the caller's
 * overrides; faces are cut around the run's box source, never the true
 * points unless asked (and then the figure is called optimistic). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spry/plot.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "train/trainer_internal.h"

/* The overrides the options imply, then the caller's own --set pairs (the
 * user's last word wins). A box source asked for applies to the validation
 * cache, which is what eval scores. */
static char **overrides(const sp_kp_eval_options *o, int *n, char store[6][1100]) {
  char **sets = sp_xcalloc((size_t)o->n_sets * 2 + 8, sizeof(char *));
  int k = 0;
  if (o->data) {
    snprintf(store[0], sizeof store[0], "data.path=%s", o->data);
    sets[k++] = store[0];
    sets[k++] = "data.split=none";
  }
  if (o->format) snprintf(store[1], sizeof store[1], "data.format=%s", o->format), sets[k++] = store[1];
  if (o->backend) snprintf(store[2], sizeof store[2], "backend=%s", o->backend), sets[k++] = store[2];
  if (o->boxes) {
    snprintf(store[3], sizeof store[3], "data.boxes=%s", o->boxes);
    sets[k++] = "data.box=file", sets[k++] = "data.val_box=file", sets[k++] = store[3];
  }
  for (int i = 0; i < o->n_sets; i++) {
    sets[k++] = o->sets[i];
    if (!strncmp(o->sets[i], "data.box=", 9)) {
      snprintf(store[4], sizeof store[4], "data.val_box=%s", o->sets[i] + 9);
      sets[k++] = store[4];
    }
  }
  *n = k;
  return sets;
}

static int load_config(const char *weights, const sp_kp_eval_options *o, sp_train_config *cfg) {
  char store[6][1100];
  int n;
  char **sets = overrides(o, &n, store);
  int rc;
  if (o->config) {
    rc = sp_train_config_load(o->config, n, sets, cfg, NULL);
  } else {
    sp_st_file *f = sp_st_open(weights);
    const char *text = f ? sp_st_meta(f, "config") : NULL;
    if (f && !text) sp_error_set("%s: no config stored in the checkpoint; give the run's CONFIG", weights);
    rc = text ? sp_train_config_parse(text, weights, n, sets, cfg, NULL) : -1;
    sp_st_close(f);
  }
  free(sets);
  if (rc != 0) return -1;
  if (!strcmp(sp_kp_val_box(cfg), "points"))
    fprintf(stderr, "spry eval: boxes from the true points: the figure is optimistic (no user has those boxes)\n");
  else if (!strcmp(cfg->data.box, "points"))
    fprintf(stderr,
            "spry eval: the run cut its crops around the true points; scoring on %s boxes, what a user has "
            "(--set data.box=points gives the optimistic figure)\n",
            sp_kp_val_box(cfg));
  cfg->augment.flip = 0; /* no augmentation in evaluation: no flip table needed */
  cfg->data.cache_file = 0;
  return 0;
}

/* Each face's box and errors, for a look at the worst faces or to run
 * another tool on the same faces and boxes (bench/peers/dlib_landmarks.cc). */
static int write_per_face(const char *path, const sp_kp_data *d, const float *pred, const float *gt,
                          const double *nme) {
  const sp_cache *c = d->val_cache;
  FILE *f = fopen(path, "w");
  if (!f) return sp_error_set("%s: cannot create it", path);
  fprintf(f, "image,box_source,x,y,w,h,mean_px,nme_io\n");
  /* split: none caches the training list once for both (kp_data.c). */
  const sp_dataset *ds = d->val_cache == d->train_cache ? &d->train : &d->val;
  for (int i = 0; i < c->n; i++) {
    double px = 0;
    for (int j = 0; j < d->k; j++) {
      const float *p = pred + ((size_t)i * d->k + j) * 2, *g = gt + ((size_t)i * d->k + j) * 2;
      px += hypot(p[0] - g[0], p[1] - g[1]);
    }
    const float *b = c->box + (size_t)4 * i;
    fprintf(f, "%s,%s,%.9g,%.9g,%.9g,%.9g,%.6f,", ds->s[c->source[i]].image,
            sp_box_source_name((sp_box_source)c->box_src[i]), b[0], b[1], b[2], b[3], px / d->k);
    if (d->eyes.n_left)
      fprintf(f, "%.6f\n", nme[i]);
    else
      fprintf(f, "\n");
  }
  if (fclose(f) != 0) return sp_error_set("%s: write failed", path);
  return 0;
}

/* The model on the validation cache: metrics, and the files asked for. */
static int score(const sp_kp_eval_options *o, sp_kp_evaluator *e, const sp_kp_data *d, sp_kp_eval_result *r) {
  const sp_train_config *cfg = e->cfg;
  sp_loader_config lc = sp_loader_config_default(cfg->batch, cfg->data.size);
  lc.workers = cfg->workers;
  lc.shuffle = 0;
  lc.drop_last = 0;
  lc.aug = sp_augment_config_none(cfg->data.size);
  sp_loader *loader = sp_loader_create(d->val_cache, NULL, &lc);
  float *pred = NULL, *gt = NULL;
  int n = 0;
  int rc = loader ? sp_kp_evaluate(e, d->val_cache, loader, 0, 0, &pred, &gt, &n, &r->val_loss) : -1;
  double *per_face = sp_xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  if (rc == 0) rc = sp_kp_metrics_compute(pred, gt, n, d->k, d->eyes.n_left ? &d->eyes : NULL, &r->m, per_face);
  if (rc == 0 && o->per_face_csv && write_per_face(o->per_face_csv, d, pred, gt, per_face) != 0) rc = -1;
  if (rc == 0 && o->ced_png && sp_ced_png(o->ced_png, 720, 480, per_face, n, d->eyes.n_left > 0) != 0) rc = -1;
  r->count = n;
  r->mean_shape_px = rc == 0 ? sp_kp_mean_shape_error(d, d->val_cache) : NAN;
  free(per_face);
  free(pred);
  free(gt);
  sp_loader_destroy(loader);
  return rc;
}

int sp_kp_eval_checkpoint(const char *weights, const sp_kp_eval_options *o, sp_kp_eval_result *r) {
  memset(r, 0, sizeof *r);
  r->val_loss = r->mean_shape_px = NAN;
  sp_train_config cfg;
  if (load_config(weights, o, &cfg) != 0) return -2;
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  int32_t neighbours[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_graph *g = NULL;
  sp_backend be;
  int data_ok = 0, rc = -1;
  if (sp_backend_parse(cfg.backend, &be) == 0 && (data_ok = sp_kp_data_open(&cfg, NULL, 0, &d) == 0) &&
      (g = sp_kp_build_graph(&cfg, &d, neighbours, &scale, &offset)) &&
      sp_checkpoint_load(weights, g, NULL, NULL, NULL, 0) == 0) {
    sp_kp_evaluator e = {g, be, &cfg, &d, scale, offset, NULL, NULL};
    rc = score(o, &e, &d, r);
    sp_kp_evaluator_free(&e);
    sp_cache_box_counts(d.val_cache, r->box_counts);
    snprintf(r->box, sizeof r->box, "%s", sp_box_source_name(sp_kp_box_source(d.val_cache)));
  } else if (o->data && data_ok && g) {
    /* Other data than the run's: most often another point layout. */
    sp_error_set("the model of %s does not fit the %d-point faces of %s (%s)", weights, d.k, o->data, sp_last_error());
  }
  sp_graph_free(g);
  sp_kp_data_free(&d);
  return rc;
}
