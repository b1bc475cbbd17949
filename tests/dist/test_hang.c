/* A rank that hangs ends the job with a message naming it, instead of a
 * silent hang: rank 1 sleeps while rank 0 waits for the step's all-reduce;
 * past the step timeout rank 0 prints which rank never reached the step and
 * aborts the job. The process therefore never returns normally: CTest
 * passes it on the message (PASS_REGULAR_EXPRESSION in tests/CMakeLists.txt)
 * within a time limit far below the sleep. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "dist_testutil.h"

int main(void) {
  setenv("SPRY_DIST_TIMEOUT", "3", 1); /* read by sp_dist_init */
  if (sp_dist_init() != 0 || sp_dist_world() < 2) {
    printf("needs 2 MPI ranks: skipped\n");
    return 77;
  }
  sp_graph *g = dt_build();
  sp_grad_reducer *r = sp_grad_reducer_new(g, NULL, 1 << 20);
  if (sp_dist_rank() == 1) {
    sleep(60); /* hangs: never joins the step */
    printf("rank 1 was not stopped\n");
    return 1;
  }
  sp_grad_reducer_begin(r, NULL, 0);
  sp_grad_reducer_finish(r, NULL); /* must abort after ~3 s */
  printf("rank 0 returned from a step rank 1 never joined\n");
  return 1;
}
