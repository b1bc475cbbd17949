/* Clip classification metrics: the softmax of every test clip of a video is
 * averaged (multi-clip testing), then top-1/top-5 over videos. Shared by the
 * trainer's validation pass and `spry eval`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/dist.h"
#include "spry/train.h"
#include "train/video_internal.h"

/* Each rank scored its part of the clips (an eval_shard loader): the
 * per-video probability sums, clip counts, loss sum, undecodable clips and
 * failures summed over the ranks in one message, so every rank scores the
 * whole set. */
static void sum_over_ranks(double *prob, int *seen, int videos, int classes, double *loss_sum, int *clips, int *failed,
                           int *rc) {
  const size_t pv = (size_t)videos * classes, n = pv + (size_t)videos + 4;
  double *v = sp_xmalloc(sizeof(double) * n);
  memcpy(v, prob, sizeof(double) * pv);
  for (int i = 0; i < videos; i++) v[pv + i] = seen[i];
  v[n - 4] = *failed, v[n - 3] = *loss_sum, v[n - 2] = *clips, v[n - 1] = *rc != 0;
  if (*rc != 0) /* the other ranks only learn that this one failed */
    fprintf(stderr, "spry: rank %d: validation: %s\n", sp_dist_rank(), sp_last_error());
  sp_dist_sum_f64(v, (int)n, "validation");
  memcpy(prob, v, sizeof(double) * pv);
  for (int i = 0; i < videos; i++) seen[i] = (int)v[pv + i];
  *failed = (int)v[n - 4], *loss_sum = v[n - 3], *clips = (int)v[n - 2];
  if (v[n - 1] > 0 && *rc == 0) *rc = sp_error_set("validation failed on another rank (see its message)");
  free(v);
}

/* Adds the softmax of one clip's logits z[0..K) to pv and returns its
 * cross-entropy: scored per clip, since a batch may hold clips the loader
 * could not read, which must not count. */
static double score_clip(const float *z, int K, int label, double *pv) {
  double mx = z[0], sum = 0;
  for (int k = 1; k < K; k++) mx = fmax(mx, z[k]);
  for (int k = 0; k < K; k++) sum += exp(z[k] - mx);
  for (int k = 0; k < K; k++) pv[k] += exp(z[k] - mx) / sum;
  return mx + log(sum) - z[label];
}

int sp_video_evaluate(sp_vnet *n, sp_video_loader *loader, const sp_video_list *list, int64_t epoch, int over_ranks,
                      sp_video_eval_result *out) {
  const int K = n->num_classes;
  double *prob = sp_xcalloc((size_t)list->n * K + 1, sizeof(double));
  int *seen = sp_xcalloc((size_t)list->n + 1, sizeof(int));
  double loss_sum = 0, t0 = sp_now();
  int clips = 0, failed = 0, rc = 0;
  for (int v = 0; v < list->n && rc == 0; v++)
    if (list->label[v] < 0 || list->label[v] >= K)
      rc = sp_error_set("validation: clip %s has label %d, the model has %d classes", list->path[v], list->label[v], K);
  if (rc == 0) rc = sp_video_loader_start_epoch(loader, epoch);
  const sp_video_batch *b;
  while (rc == 0 && (b = sp_video_loader_next(loader))) {
    sp_plan *p = sp_vnet_plan(n, b->t, b->n, b->h, 0);
    if (!p) {
      rc = -1;
      continue; /* drain the epoch so the loader is idle afterwards */
    }
    sp_vnet_fill(n, p, b);
    sp_plan_forward(p);
    const float *logits = sp_plan_output(p, "logits")->data;
    for (int i = 0; i < b->n; i++) {
      if (b->bad[i]) { /* zeros, not the clip: scored as neither right nor wrong */
        failed++;
        continue;
      }
      loss_sum += score_clip(logits + (size_t)i * K, K, b->label[i], prob + (size_t)b->video[i] * K);
      seen[b->video[i]]++;
      clips++;
    }
  }
  if (over_ranks) sum_over_ranks(prob, seen, list->n, K, &loss_sum, &clips, &failed, &rc);
  /* Every test clip once, scored or counted as unreadable: a loader that is
   * not this rank's part (each rank scoring the whole set) would count each
   * clip W times. */
  int want = over_ranks ? sp_video_loader_entries_all(loader) : sp_video_loader_entries(loader);
  if (rc == 0 && clips + failed != want)
    rc = sp_error_set("validation scored %d and could not read %d of the %d clips (the loader must cover the set once)",
                      clips, failed, want);
  if (rc == 0 && failed > 0 && clips == 0)
    rc = sp_error_set("validation: none of the %d clips could be read (see the skip lines above)", failed);
  if (rc == 0 && failed > 0 && sp_dist_rank() == 0)
    fprintf(stderr, "spry: validation: %d of %d clips could not be read and are left out of the scores\n", failed,
            want);
  int videos = 0, hit1 = 0, hit5 = 0;
  for (int v = 0; rc == 0 && v < list->n; v++) {
    if (!seen[v]) continue;
    videos++;
    const double *pv = prob + (size_t)v * K;
    int label = list->label[v], better = 0;
    /* Rank of the true class: classes with a strictly higher mean probability
     * (ties count in the label's favour, as argmax picks the first). */
    for (int k = 0; k < K; k++) better += pv[k] > pv[label] || (pv[k] == pv[label] && k < label);
    hit1 += better == 0;
    hit5 += better < 5;
  }
  free(prob);
  free(seen);
  if (rc != 0) return -1;
  out->loss = clips ? loss_sum / clips : NAN;
  out->top1 = videos ? (double)hit1 / videos : NAN;
  out->top5 = videos ? (double)hit5 / videos : NAN;
  out->videos = videos;
  out->clips = clips;
  out->failed = failed;
  out->seconds = sp_now() - t0;
  return 0;
}

int sp_video_eval_checkpoint(const sp_video_config *cfg, const char *weights, const char *list_override,
                             sp_video_summary *out) {
  const char *path = list_override ? list_override : cfg->data.val_list;
  if (!path[0]) return sp_error_set("no validation list (data.val_list or --data)");
  sp_video_list list = {0}, train = {0};
  int max_val, file_classes = 0;
  if (sp_video_list_open(cfg, path, &list, &max_val, &file_classes) != 0) return -1;
  int classes = cfg->data.num_classes;
  if (file_classes) {
    /* Sized as the run was: by its classes file, labels already checked. */
    classes = file_classes;
  } else if (!classes) {
    /* The run sized its classifier from the labels of its lists (clips
     * present or not): read the training list's labels only. */
    classes = max_val + 1;
    if (cfg->data.train_list[0] && sp_video_list_read(cfg->data.train_list, &train) == 0) {
      for (int i = 0; i < train.n; i++) classes = train.label[i] + 1 > classes ? train.label[i] + 1 : classes;
      sp_video_list_free(&train);
    }
  } else if (sp_video_list_check_labels(&list, path, classes) != 0) {
    sp_video_list_free(&list);
    return -1;
  }
  sp_vnet net;
  int rc = sp_vnet_init(&net, cfg, classes);
  char buf[1 << 16];
  sp_checkpoint_meta meta;
  if (rc == 0) rc = sp_checkpoint_load(weights, sp_vnet_graph(&net), NULL, &meta, buf, sizeof buf);
  sp_video_loader *loader = NULL;
  if (rc == 0) {
    sp_video_loader_config lc = sp_video_loader_config_default(cfg->batch, sp_video_cfg_frames(cfg), cfg->data.size);
    lc.sampler = cfg->data.sampler;
    lc.stride = cfg->data.stride;
    lc.short_side = cfg->data.short_side;
    lc.train = 0;
    lc.shuffle = 0;
    lc.drop_last = 0;
    lc.test_clips = cfg->data.test_clips;
    lc.workers = cfg->workers;
    lc.seed = cfg->seed;
    loader = sp_video_loader_create(&list, &lc);
    rc = loader ? 0 : -1;
  }
  sp_video_eval_result r = {0};
  if (rc == 0) rc = sp_video_evaluate(&net, loader, &list, 0, 0, &r);
  if (rc == 0 && out)
    *out = (sp_video_summary){
        .val_loss = r.loss, .top1 = r.top1, .top5 = r.top5, .val_clips = r.videos, .val_failed = r.failed};
  sp_video_loader_destroy(loader);
  sp_vnet_free(&net);
  sp_video_list_free(&list);
  return rc;
}
