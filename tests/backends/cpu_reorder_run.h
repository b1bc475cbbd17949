/* One reorder through the helpers every cpu node uses (cpu_make_reorder,
 * cpu_bind_reorder, cpu_exec_run), with the own-kernel switches
 * (cpu_reorder_use_*) as the caller set them. Shared by the tests of the
 * reorders of our own (test_cpu_reorder_*.c). */
#ifndef SPRY_TEST_CPU_REORDER_RUN_H
#define SPRY_TEST_CPU_REORDER_RUN_H

#include "backend_compare.h"
#include "backends/cpu/cpu.h"

static const cpu_vt cpu_reorder_run_vt = {0};

/* src -> dst (added when accumulate) from `from` into `to`; *ran is the
 * execution as bound, whose .w16 / .lanes8 say which kernel ran. */
static inline void cpu_reorder_run(const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *dst, int accumulate,
                                   const void *from, void *to, cpu_exec *ran) {
  cpu_node *n = cpu_node_new(sizeof(cpu_node), &cpu_reorder_run_vt);
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  assert_int_equal(cpu_make_reorder(n, src, dst, accumulate, &pd, &prim), 0);
  char *scratch = malloc(cpu_scratchpad_bytes(pd) + 64);
  assert_int_equal(cpu_bind_reorder(ran, n, pd, prim, (void *)from, to, scratch), 0);
  cpu_exec_run(ran);
  DNNL_RUN(dnnl_stream_wait(cpu_stream()));
  free(scratch);
  cpu_node_free(n);
}

#endif
