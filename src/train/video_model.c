/* The video network of a run: graphs per frame count sharing parameters, and
 * a small table of plans per input shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "spry/data.h"
#include "spry/models.h"
#include "spry/safetensors.h"
#include "spry/dist.h"
#include "train/config_shared.h"
#include "train/video_internal.h"

int sp_video_cfg_frames(const sp_video_config *cfg) {
  return cfg->data.sampler == SP_SAMPLER_TSN ? cfg->data.segments : cfg->data.frames;
}

static sp_graph *build(const sp_vnet *n, int frames) {
  const sp_video_config *c = &n->cfg;
  int tsm = c->model[2] == 'm';
  sp_tsn_config tc = sp_tsn_config_default(atoi(c->model + 5), frames, n->num_classes, tsm);
  tc.width = c->base_width;
  if (tsm) tc.shift_back = c->shift_back, tc.shift_fwd = c->shift_fwd;
  tc.dropout = c->dropout;
  sp_graph *g = sp_graph_new(c->seed);
  sp_value x = sp_graph_input(g, "image", SP_F32, 3);
  sp_value y = sp_graph_input(g, "labels", SP_I32, -1);
  sp_value logits = sp_model_tsn(g, x, &tc);
  sp_graph_output(g, logits, "logits");
  sp_graph_loss(g, sp_cross_entropy(g, logits, y), 1.0f);
  if (sp_graph_error(g)) {
    sp_error_set("building %s with %d frames: %s", c->model, frames, sp_graph_error(g));
    sp_graph_free(g);
    return NULL;
  }
  /* Data parallel with dist.sync_bn: every graph (each frame count) normalises
   * with the global batch's statistics. */
  if (n->sync_bn) sp_dist_enable_sync_bn(g);
  return g;
}

int sp_vnet_init(sp_vnet *n, const sp_video_config *cfg, int num_classes) {
  memset(n, 0, sizeof *n);
  n->cfg = *cfg;
  n->num_classes = num_classes;
  if (sp_backend_parse(cfg->backend, &n->backend) != 0) return -1;
  n->plan_flags = sp_config_precision_flags(cfg->precision, n->backend);
  n->sync_bn = cfg->dist.sync_bn && sp_dist_world() > 1;
  int frames = sp_video_cfg_frames(cfg);
  sp_graph *g = build(n, frames);
  if (!g) return -1;
  n->graphs[0] = (sp_vnet_graph_slot){.frames = frames, .g = g};
  n->n_graphs = 1;
  return 0;
}

sp_graph *sp_vnet_graph(sp_vnet *n) { return n->graphs[0].g; }

/* A graph for another frame count whose parameters, gradients and BN
 * statistics are the main graph's memory: its tensors are pointed at the
 * main graph's before any plan is made from it, so every plan reads and
 * writes the one set of weights the optimizer updates. */
static sp_graph *graph_for(sp_vnet *n, int frames) {
  for (int i = 0; i < n->n_graphs; i++)
    if (n->graphs[i].frames == frames) return n->graphs[i].g;
  if (n->n_graphs == SP_VNET_GRAPHS) return sp_error_set("video net: more than %d frame counts", SP_VNET_GRAPHS), NULL;
  sp_graph *g = build(n, frames), *main = n->graphs[0].g;
  if (!g) return NULL;
  sp_vnet_graph_slot *e = &n->graphs[n->n_graphs];
  int np = sp_graph_param_count(g);
  *e = (sp_vnet_graph_slot){.frames = frames, .g = g, .n_params = np};
  e->own_value = sp_xcalloc((size_t)np, sizeof(void *));
  e->own_grad = sp_xcalloc((size_t)np, sizeof(void *));
  for (int p = 0; p < np; p++) {
    int q = sp_graph_param_find(main, sp_graph_param_name(g, p));
    sp_tensor *v = sp_graph_param_value(g, p), *mv = q >= 0 ? sp_graph_param_value(main, q) : NULL;
    /* Same id too: the gradient exchange names parameters by id, whichever
     * graph's plan reports them. */
    if (!mv || q != p || !sp_shape_equal(&v->shape, &mv->shape)) {
      /* Cannot happen: T changes no parameter. Refuse rather than train apart. */
      for (int k = 0; k < p; k++) {
        sp_graph_param_value(g, k)->data = e->own_value[k];
        if (e->own_grad[k]) sp_graph_param_grad(g, k)->data = e->own_grad[k];
      }
      free(e->own_value), free(e->own_grad);
      sp_graph_free(g);
      return sp_error_set("video net: parameter '%s' differs between frame counts", sp_graph_param_name(g, p)), NULL;
    }
    e->own_value[p] = v->data;
    v->data = mv->data;
    sp_tensor *gr = sp_graph_param_grad(g, p), *mg = sp_graph_param_grad(main, q);
    if (gr && mg) {
      e->own_grad[p] = gr->data;
      gr->data = mg->data;
    }
  }
  n->n_graphs++;
  return g;
}

sp_plan *sp_vnet_plan(sp_vnet *n, int frames, int batch, int size, int training) {
  n->clock++;
  for (int i = 0; i < n->n_plans; i++) {
    sp_vnet_plan_slot *p = &n->plans[i];
    if (p->frames == frames && p->batch == batch && p->size == size && p->training == training) {
      p->last_use = n->clock;
      return p->plan;
    }
  }
  sp_graph *g = graph_for(n, frames);
  if (!g) return NULL;
  sp_input_shape in[2] = {{"image", sp_shape4((int64_t)batch * frames, 3, size, size)}, {"labels", sp_shape1(batch)}};
  sp_plan *plan = sp_plan_new(g, 2, in, n->backend, training, n->plan_flags | (training ? SP_PLAN_LOSS_ONLY : 0));
  if (!plan) return NULL;
  int slot = n->n_plans;
  if (slot == SP_VNET_PLANS) {
    /* Full: drop the least recently used shape (a rare partial batch). */
    slot = 0;
    for (int i = 1; i < n->n_plans; i++)
      if (n->plans[i].last_use < n->plans[slot].last_use) slot = i;
    sp_plan_free(n->plans[slot].plan);
  } else {
    n->n_plans++;
  }
  n->plans[slot] = (sp_vnet_plan_slot){frames, batch, size, training, plan, n->clock};
  return plan;
}

void sp_vnet_free(sp_vnet *n) {
  for (int i = 0; i < n->n_plans; i++) sp_plan_free(n->plans[i].plan);
  for (int i = n->n_graphs - 1; i >= 1; i--) {
    sp_vnet_graph_slot *e = &n->graphs[i];
    for (int p = 0; p < e->n_params; p++) {
      sp_graph_param_value(e->g, p)->data = e->own_value[p];
      if (e->own_grad[p]) sp_graph_param_grad(e->g, p)->data = e->own_grad[p];
    }
    free(e->own_value), free(e->own_grad);
    sp_graph_free(e->g);
  }
  if (n->n_graphs) sp_graph_free(n->graphs[0].g);
  memset(n, 0, sizeof *n);
}

void sp_vnet_fill(const sp_vnet *n, sp_plan *p, const sp_video_batch *b) {
  sp_normalize_u8(b->pixels, (int64_t)b->n * b->t, 3, (int64_t)b->h * b->w, n->cfg.data.mean, n->cfg.data.std, SP_F32,
                  sp_plan_input(p, "image")->data);
  memcpy(sp_plan_input(p, "labels")->data, b->label, sizeof(int32_t) * (size_t)b->n);
}

int sp_vnet_load_pretrained(sp_vnet *n, const char *path) {
  sp_st_file *f = sp_st_open(path);
  if (!f) return -1;
  sp_graph *g = sp_vnet_graph(n);
  int loaded = 0;
  for (int p = 0; p < sp_graph_param_count(g); p++) {
    const char *name = sp_graph_param_name(g, p);
    const sp_tensor *t = sp_st_get(f, name);
    /* The classifier has the new task's classes; everything else transfers. */
    if (!t || !strncmp(name, "fc.", 3) || !sp_shape_equal(&t->shape, &sp_graph_param_value(g, p)->shape)) continue;
    if (sp_st_read_into(f, name, sp_graph_param_value(g, p)) != 0) {
      sp_st_close(f);
      return -1;
    }
    loaded++;
  }
  sp_st_close(f);
  fprintf(stderr, "spry: %d of %d tensors from %s\n", loaded, sp_graph_param_count(g), path);
  return loaded ? 0 : sp_error_set("%s: no tensor matches the model's names and shapes", path);
}

/* data.root: the reader resolved relative paths against the list's folder;
 * data.root replaces that folder. */
static void apply_root(const sp_video_config *cfg, const char *path, sp_video_list *out) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  size_t dl = slash ? (size_t)(slash - dir) + 1 : 0;
  for (int i = 0; i < out->n; i++) {
    if (dl && strncmp(out->path[i], dir, dl)) continue; /* was absolute */
    char buf[2048];
    snprintf(buf, sizeof buf, "%s/%s", cfg->data.root, out->path[i] + dl);
    free(out->path[i]);
    out->path[i] = sp_xstrdup(buf);
  }
}

int sp_video_cfg_classes(const sp_video_config *cfg, sp_video_classes *out) {
  memset(out, 0, sizeof *out);
  if (cfg->data.classes[0]) return sp_video_classes_read(cfg->data.classes, out) == 0 ? 1 : -1;
  return cfg->data.train_list[0] ? sp_video_classes_beside(cfg->data.train_list, out) : 0;
}

int sp_video_list_open(const sp_video_config *cfg, const char *path, sp_video_list *out, int *max_label,
                       int *file_classes) {
  sp_video_classes cls;
  int have = sp_video_cfg_classes(cfg, &cls);
  if (have < 0) return -1;
  int rc = sp_video_list_read_classes(path, NULL, have ? &cls : NULL, out);
  if (file_classes) *file_classes = have ? cls.n : 0;
  sp_video_classes_free(&cls);
  if (rc != 0) return -1;
  /* The label space is the list's, missing clips included: a run and its
   * later eval size the classifier alike whatever is on disk. */
  if (max_label) {
    *max_label = -1;
    for (int i = 0; i < out->n; i++) *max_label = out->label[i] > *max_label ? out->label[i] : *max_label;
  }
  if (cfg->data.root[0]) apply_root(cfg, path, out);
  /* A clip that is not there would train and score as zero frames: leave it
   * out (every rank alike; rank 0 says which), so the counts are of clips. */
  if (sp_video_list_keep_usable(out, path, sp_dist_rank() == 0) < 0) {
    sp_video_list_free(out);
    return -1;
  }
  return 0;
}

int sp_video_list_check_labels(const sp_video_list *l, const char *path, int classes) {
  for (int i = 0; i < l->n; i++)
    if (l->label[i] < 0 || l->label[i] >= classes)
      return sp_error_set("%s:%d: label %d outside [0, data.num_classes = %d)", path, l->line ? l->line[i] : i + 1,
                          l->label[i], classes);
  return 0;
}
