/* Rank 0's solo work told to every rank (trainer_internal.h). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spry/common.h"
#include "spry/dist.h"
#include "train/trainer_internal.h"

int sp_share_rank0(sp_rank0_state *st, double timeout_s, const char *what) {
  if (sp_dist_world() < 2) return st->rc;
  sp_dist_barrier(10 * timeout_s, what);
  sp_dist_bcast(st, sizeof *st, what);
  if (st->rc != 0 && sp_dist_rank() > 0) sp_error_set("rank 0 failed during %s (see its message)", what);
  return st->rc;
}

/* A checkpoint is written to NAME.safetensors.tmp.PID and renamed; a run
 * killed while writing (SIGKILL, a crash, mpirun's kill after Ctrl-C) leaves
 * that part behind. Parts whose writer is gone are removed; the previous
 * checkpoint was never touched. */
static void remove_stale_parts(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    const char *tag = strstr(e->d_name, ".safetensors.tmp.");
    if (!tag) continue;
    char *end;
    long pid = strtol(tag + strlen(".safetensors.tmp."), &end, 10);
    if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer may still run */
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) == 0)
      fprintf(stderr, "spry: removed %s, a checkpoint an interrupted run left half written\n", path);
  }
  closedir(d);
}

/* The outermost folder of the run folder that sp_check_run_folder made (NULL:
 * it was there before), for sp_run_folder_abandon. One run per process. */
static char *made_top;

int sp_check_run_folder(const char *dir, int resume, double timeout_s) {
  sp_rank0_state st = {0};
  free(made_top);
  made_top = NULL;
  if (sp_dist_rank() == 0) {
    made_top = sp_missing_dirs_top(dir);
    char path[1100];
    struct stat sb;
    snprintf(path, sizeof path, "%s/last.safetensors", dir);
    if (resume && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)))
      st.rc = sp_error_set("--resume %s: no last.safetensors there (nothing to resume; start without --resume)", dir);
    else if (stat(dir, &sb) == 0 && (!S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0))
      st.rc = sp_error_set("out %s: not a writable folder", dir);
    else if (sp_make_dirs(dir) != 0) /* rank 0 alone makes and writes the run folder */
      st.rc = sp_error_push("out %s", dir);
    else
      remove_stale_parts(dir);
  }
  return sp_share_rank0(&st, timeout_s, "checking the run folder");
}

/* What a run writes into its folder before its first checkpoint. */
static const char *const before_first_checkpoint[] = {"cache_train.bin", "cache_val.bin", "metrics.jsonl"};

void sp_run_folder_abandon(const char *dir) {
  if (!made_top || sp_dist_rank() != 0) return;
  char path[1100];
  snprintf(path, sizeof path, "%s/last.safetensors", dir);
  if (access(path, F_OK) == 0) return; /* it trained: the folder is worth resuming */
  for (size_t i = 0; i < sizeof before_first_checkpoint / sizeof before_first_checkpoint[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, before_first_checkpoint[i]);
    unlink(path);
  }
  remove_stale_parts(dir);
  sp_remove_empty_dirs(dir, made_top); /* only while empty: anything else a user put there stays */
  free(made_top);
  made_top = NULL;
}
