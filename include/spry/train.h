/* Training glue: the graph's parameters as optimizer parameters, and
 * checkpoints (safetensors: parameters, BN running statistics, optimizer
 * state, and JSON-ish metadata strings). */
#ifndef SPRY_TRAIN_H
#define SPRY_TRAIN_H

#include <stdint.h>

#include "spry/graph.h"
#include "spry/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The trainable parameters of g, flagged no_decay where the graph says so
 * (BN and biases). Returns a malloc'ed array of *n entries (free it). */
sp_opt_param *sp_train_opt_params(sp_graph *g, int *n);

typedef struct {
  int64_t epoch;           /* epochs completed */
  int64_t iteration;       /* optimizer steps taken */
  uint64_t seed;           /* run seed (all randomness derives from it) */
  const char *config;      /* the run's configuration text (YAML or JSON), may be NULL */
  const char *model;       /* model name, may be NULL */
} sp_checkpoint_meta;

/* Writes parameters and buffers under their graph names, the optimizer state
 * (when opt is not NULL) as "optim.<state name>", and meta as strings, to
 * path atomically (temporary file + rename). */
int sp_checkpoint_save(const char *path, sp_graph *g, const sp_optimizer *opt, const sp_checkpoint_meta *meta);

/* Loads a checkpoint into g (every parameter and buffer must be present with
 * the same shape) and into opt when not NULL (its state must match). Fills
 * *meta (strings copied into buf; config may be truncated to buf_size). */
int sp_checkpoint_load(const char *path, sp_graph *g, sp_optimizer *opt, sp_checkpoint_meta *meta, char *buf,
                       size_t buf_size);

#ifdef __cplusplus
}
#endif
#endif
