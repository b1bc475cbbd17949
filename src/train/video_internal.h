/* Pieces of the video trainer shared by src/train/video_*.c and the CLI. */
#ifndef SPRY_VIDEO_INTERNAL_H
#define SPRY_VIDEO_INTERNAL_H

#include "spry/graph.h"
#include "spry/video_train.h"

/* The network of a run: one graph per frame count (TSM's shift and the
 * consensus need T at build time), all sharing the first graph's parameter
 * and gradient memory, and one plan per input shape (Multigrid), made on
 * first use and kept. */
#define SP_VNET_GRAPHS 4
#define SP_VNET_PLANS 24
typedef struct {
  int frames, batch, size, training;
  sp_plan *plan;
  uint64_t last_use;
} sp_vnet_plan_slot;

typedef struct {
  int frames;
  sp_graph *g;
  int n_params;
  void **own_value, **own_grad; /* the graph's own memory, restored before it is freed */
} sp_vnet_graph_slot;

typedef struct {
  sp_video_config cfg;
  int num_classes;
  sp_backend backend;
  unsigned plan_flags;
  int sync_bn; /* data parallel: batch norm over the global batch (set by init) */
  sp_vnet_graph_slot graphs[SP_VNET_GRAPHS];
  int n_graphs;
  sp_vnet_plan_slot plans[SP_VNET_PLANS];
  int n_plans;
  uint64_t clock;
} sp_vnet;

/* The main graph (frames = the run's T) is built here; others on demand. */
int sp_vnet_init(sp_vnet *n, const sp_video_config *cfg, int num_classes);
sp_graph *sp_vnet_graph(sp_vnet *n); /* the parameter owner */
/* Plan for [batch*frames, 3, size, size] + labels [batch]; NULL on error. */
sp_plan *sp_vnet_plan(sp_vnet *n, int frames, int batch, int size, int training);
void sp_vnet_free(sp_vnet *n);
/* Frames per clip of the run (segments for TSN sampling, frames for dense). */
int sp_video_cfg_frames(const sp_video_config *cfg);
/* Copies ResNet weights by name from a safetensors file (fc.* skipped). */
int sp_vnet_load_pretrained(sp_vnet *n, const char *path);

/* Normalises a batch into the plan's "image" and copies its labels. */
void sp_vnet_fill(const sp_vnet *n, sp_plan *p, const sp_video_batch *b);

/* The run's classes file: data.classes, else labels.txt beside the training
 * list when there is one. 1 when read into *out, 0 when there is none, -1
 * on error. */
int sp_video_cfg_classes(const sp_video_config *cfg, sp_video_classes *out);
/* Reads a list (through the run's classes file when it has one), applying
 * data.root, and leaves out (with a warning each) the clips that are not
 * there to read; an error when none is left. max_label (may be NULL): the
 * largest label of every entry read, left-out ones included (-1 for none),
 * which sizes the classifier. file_classes (may be NULL): the classes file's
 * class count, 0 without one. */
int sp_video_list_open(const sp_video_config *cfg, const char *path, sp_video_list *out, int *max_label,
                       int *file_classes);
/* Every label in [0, classes), else an error naming the list's line. */
int sp_video_list_check_labels(const sp_video_list *l, const char *path, int classes);

/* Validation: mean loss over clips; top-1/top-5 over videos after averaging
 * the softmax of each video's clips. Clips the loader could not decode are
 * counted in `failed` and left out of every metric (an error when no clip
 * is left). over_ranks: the loader is an eval_shard
 * one and every rank calls this together; each scores its part and all get
 * the result of the whole set. */
typedef struct {
  double loss, top1, top5;
  int videos, clips;
  int failed;     /* clips that could not be decoded: in none of the numbers above */
  double seconds; /* wall time of the pass (the ranks' shared one) */
} sp_video_eval_result;
int sp_video_evaluate(sp_vnet *n, sp_video_loader *loader, const sp_video_list *list, int64_t epoch, int over_ranks,
                      sp_video_eval_result *out);

#endif
