/* sp_aligned_alloc: small blocks 64-byte aligned; blocks from 4 MB start on a
 * 2 MB boundary and their mapping carries the kernel's huge-page advice
 * ("hg" in /proc/self/smaps' VmFlags); SPRY_HUGE_PAGES=0 takes the advice
 * away. Where /proc is absent (not Linux) the advice part reports SKIP. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"
#include "testkit.h"

/* 1 when the mapping holding p has "hg" in its VmFlags, 0 when it has not,
 * -1 when /proc/self/smaps cannot tell. */
static int advised_huge(const void *p) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int inside = 0, found = -1;
  const uintptr_t a = (uintptr_t)p;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && !strncmp(line, "VmFlags:", 8)) {
      found = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return found;
}

static void small_blocks_are_line_aligned(void **state) {
  (void)state;
  for (size_t n = 1; n < (1 << 20); n = n * 3 + 1) {
    char *p = sp_aligned_alloc(n);
    assert_int_equal((uintptr_t)p % 64, 0);
    memset(p, 1, n);
    sp_aligned_free(p);
  }
}

static void large_blocks_ask_for_huge_pages(void **state) {
  (void)state;
  const size_t n = (size_t)9 << 20; /* not a multiple of 2 MB */
  unsetenv("SPRY_HUGE_PAGES");
  char *p = sp_aligned_alloc(n);
  assert_int_equal((uintptr_t)p % (2u << 20), 0);
  memset(p, 1, n); /* every byte of the request is usable */
  const int hg = advised_huge(p);
  setenv("SPRY_HUGE_PAGES", "0", 1);
  char *q = sp_aligned_alloc(n);
  assert_int_equal((uintptr_t)q % 64, 0);
  memset(q, 2, n);
  const int hg_off = advised_huge(q);
  unsetenv("SPRY_HUGE_PAGES");
  assert_int_equal(p[n - 1], 1);
  sp_aligned_free(p);
  sp_aligned_free(q);
  if (hg < 0 || hg_off < 0) {
    printf("# /proc/self/smaps has no VmFlags here: the advice is not checked\n");
    skip();
  }
  assert_int_equal(hg, 1);
  assert_int_equal(hg_off, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(small_blocks_are_line_aligned),
      cmocka_unit_test(large_blocks_ask_for_huge_pages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
