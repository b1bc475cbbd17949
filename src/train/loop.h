/* The one training loop (loop.c) and the task interface that keypoint and
 * video runs (kp_task.c, video_task.c) plug into. The loop owns what every
 * run shares: the run folder and its protection, data parallelism (run
 * identity, gradient exchange, rank 0 writes), the optimizer and its
 * schedule, resume (bit-exact, or refused when the config changed), Ctrl-C,
 * progress, metrics.jsonl, checkpoints and the "best" one. A task owns its
 * data, its network and its figures. A third task implements sp_task_ops. */
#ifndef SPRY_TRAIN_LOOP_H
#define SPRY_TRAIN_LOOP_H

#include <stdint.h>

#include "io/json.h"
#include "spry/dist.h"
#include "spry/graph.h"
#include "spry/optim.h"
#include "spry/train.h" /* SP_RUN_* */

/* Which way "best" goes: a keypoint run keeps its lowest validation error,
 * a video run its highest top-1. */
typedef enum { SP_BEST_LOWER, SP_BEST_HIGHER } sp_best_direction;

/* What the loop reads of a run's configuration (both config structs carry it). */
typedef struct {
  const char *out, *model;
  int epochs, batch, threads, eval_every;
  uint64_t seed;
  float clip_norm;
  const sp_opt_config *optimizer;
  const sp_lr_schedule *schedule;
  const sp_dist_config *dist;
} sp_loop_config;

/* The loop's view of a task config (sp_train_config, sp_video_config): both
 * name these fields alike, so one initialiser serves every task. */
#define SP_LOOP_CONFIG_OF(cfg)                       \
  ((sp_loop_config){.out = (cfg)->out,               \
                    .model = (cfg)->model,           \
                    .epochs = (cfg)->epochs,         \
                    .batch = (cfg)->batch,           \
                    .threads = (cfg)->threads,       \
                    .eval_every = (cfg)->eval_every, \
                    .seed = (cfg)->seed,             \
                    .clip_norm = (cfg)->clip_norm,   \
                    .optimizer = &(cfg)->optimizer,  \
                    .schedule = &(cfg)->schedule,    \
                    .dist = &(cfg)->dist})

/* One batch of this rank, as the task hands it to the loop. */
typedef struct {
  const void *data; /* the task's own batch */
  int n;            /* samples or clips in it */
  int failed;       /* of them, unreadable ones that went in as zeros */
} sp_loop_batch;

/* A validation pass: the loss, and the figure "best" follows. */
typedef struct {
  double loss, score;
} sp_loop_val;

typedef struct sp_loop sp_loop;

typedef struct {
  const char *unit;     /* progress and log unit: "img", "clips" */
  const char *rate_key; /* metrics.jsonl key of the throughput: "images_per_s" */
  sp_best_direction best;
  /* Reads the data, builds the network (sp_loop_set_graph) and sets
   * l->bucket_plan. Ranks fail together through sp_loop_refuse. */
  int (*setup)(void *task, sp_loop *l);
  /* Starts an epoch: the number of batches this rank takes, and the items
   * (samples, clips) of the whole job's epoch, which the schedule runs on. */
  int (*start_epoch)(void *task, int64_t epoch, int *steps, int64_t *items);
  int (*next)(void *task, sp_loop_batch *b); /* 1: a batch, 0: the epoch is done */
  /* The plan for batch b with its inputs filled; NULL with an error. */
  sp_plan *(*fill)(void *task, const sp_loop_batch *b);
  double (*lr_scale)(void *task, int64_t epoch); /* NULL: 1 (Multigrid scales it) */
  int (*can_validate)(void *task);
  int (*validate)(void *task, int64_t epoch, int over_ranks, sp_loop_val *out);
  /* The task's fields of an epoch's metrics.jsonl line and its log line. */
  void (*log_epoch)(void *task, sp_json_buf *b, int64_t epoch, int steps, int unreadable);
  void (*log_validation)(void *task, sp_json_buf *b);
  void (*print_validation)(void *task);
  int (*report)(void *task, const char *dir, int over_ranks); /* every rank calls it */
  void (*teardown)(void *task);
} sp_task_ops;

struct sp_loop {
  const sp_loop_config *cfg;
  const char *config_text;
  char dir[1024];
  int rank, world, local_batch;
  unsigned run_flags;
  int refused; /* every rank refused the run together: no rank waits */
  /* Set by the task's setup. */
  sp_graph *g;          /* the parameters (checkpoints, optimizer, exchange) */
  sp_plan *bucket_plan; /* backward order for the gradient buckets; NULL: by parameter id */
  /* The loop's own. */
  sp_opt_param *params;
  int n_params;
  sp_optimizer *opt;
  sp_grad_reducer *reducer; /* NULL in a world of one */
  int *slot_of;
  sp_plan *watched;       /* the plan last hooked to the reducer */
  const char *box_source; /* keypoint runs: recorded in checkpoints (predict finds faces alike) */
};

/* What a finished (or stopped) run leaves. */
typedef struct {
  double train_loss, best;
  double train_s;     /* the whole run's training time (metrics.jsonl, resumed parts too) */
  int64_t iterations; /* optimizer steps of the whole run */
  int validated;      /* a validation pass ran in this process */
} sp_loop_result;

/* Runs the task: 0, 130 when stopped by SIGINT/SIGTERM (after saving), or -1
 * with an error. */
int sp_loop_run(const sp_loop_config *cfg, const char *config_text, unsigned run_flags, const sp_task_ops *ops,
                void *task, sp_loop_result *out);
/* An error every rank meets alike (it depends only on what the ranks agreed
 * on): they fail together, each with the message, none waits. */
int sp_loop_refuse(sp_loop *l, int rc);

/* Tests stop a run exactly where Ctrl-C would, after `steps` optimizer steps
 * (0 = never). */
void sp_train_stop_after(int64_t steps);

#endif
