/* The graph of a keypoint run: model, main loss and structure loss. */
#include <string.h>

#include "ops/ops.h"
#include "spry/models.h"
#include "train/trainer_internal.h"

sp_graph *sp_kp_build_graph(const sp_train_config *cfg, const sp_kp_data *d, int32_t *neighbours, float *scale,
                            float *offset) {
  int size = cfg->data.size;
  /* Regression heads learn best with targets of order 1; heatmap heads
   * produce pixel coordinates by construction (soft-argmax at input size). */
  int regression = !strncmp(cfg->model, "vgg", 3);
  *scale = regression ? 2.0f / (float)size : 1.0f;
  *offset = regression ? -1.0f : 0.0f;

  if (!strcmp(cfg->model, "vgg-nose") && d->k != 1) {
    sp_error_set(
        "model vgg-nose predicts one point (the nose tip), the data gives %d: choose it with "
        "data.keypoints: [N]%s",
        d->k,
        d->k == 68   ? " (30 in the 68-point layout)"
        : d->k == 58 ? " (IMM: 52)"
                     : "");
    return NULL;
  }
  sp_graph *g = sp_graph_new(cfg->seed);
  sp_value x = sp_graph_input(g, "image", SP_F32, cfg->data.channels);
  sp_value t = sp_graph_input(g, "points", SP_F32, d->k);
  sp_model_spec spec = {
      .name = cfg->model, .channels = cfg->data.channels, .height = size, .width = size, .keypoints = d->k};
  for (int i = 0; i < cfg->n_model_options; i++)
    if (sp_model_spec_set(&spec, cfg->model_options[i].key, cfg->model_options[i].value) != 0) {
      sp_graph_free(g);
      return NULL;
    }
  sp_value p = sp_model_build(g, &spec, x);
  sp_graph_output(g, p, "points_out");
  sp_value loss = -1;
  switch (cfg->loss.kind) {
    case SP_LOSS_L1: loss = sp_l1_loss(g, p, t); break;
    case SP_LOSS_L2: loss = sp_l2_loss(g, p, t); break;
    case SP_LOSS_MSE: loss = sp_mse_loss(g, p, t); break;
    case SP_LOSS_EUCLIDEAN: loss = sp_euclidean_loss(g, p, t); break;
  }
  sp_graph_loss(g, loss, 1.0f);
  if (cfg->loss.structure_weight > 0) {
    int nb = cfg->loss.neighbours < d->k ? cfg->loss.neighbours : d->k - 1;
    if (nb < 1) {
      sp_graph_fail(g, "loss.structure_weight needs at least 2 keypoints (the data has %d)", d->k);
    } else {
      sp_structure_neighbours(d->mean_shape, d->k, nb, neighbours);
      sp_graph_loss(g, sp_structure_loss(g, p, t, d->k, nb, neighbours), cfg->loss.structure_weight);
    }
  }
  if (sp_graph_error(g)) {
    sp_error_set("building the model: %s", sp_graph_error(g));
    sp_graph_free(g);
    return NULL;
  }
  return g;
}
