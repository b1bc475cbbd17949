/* The allocation policy for sizes a user or a file chose (see
 * include/spry/common.h): checked against this machine's memory before the
 * allocation, so a config's data.size, a frame folder's n_frames or a
 * checkpoint's stored config end in an error naming them, never in
 * "internal error: out of memory" and an abort that skips every cleanup. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "spry/common.h"

double sp_mem_limit(void) {
  /* 80% of the physical memory: the rest is the system's, and the page
   * cache's that the data loader lives on. */
  double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
  double limit = ram > 0 ? 0.8 * ram : 1e18;
  /* Tests and fuzzers lower it (libFuzzer treats a 2 GB malloc as a bug). */
  const char *env = getenv("SPRY_MAX_MEMORY_MB");
  if (env && *env) {
    char *end;
    double mb = strtod(env, &end);
    if (end != env && !*end && mb > 0 && mb * 1048576.0 < limit) limit = mb * 1048576.0;
  }
  return limit;
}

int sp_mem_check(double bytes, const char *what) {
  double limit = sp_mem_limit();
  if (bytes >= 0 && bytes <= limit) return 0;
  return sp_error_set("%s needs %.2f GB of memory, more than the %.2f GB this machine allows (80%% of its RAM%s)", what,
                      bytes / 1e9, limit / 1e9, getenv("SPRY_MAX_MEMORY_MB") ? ", or SPRY_MAX_MEMORY_MB" : "");
}
