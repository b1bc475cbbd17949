/* Landmark schemes: which point becomes which after a horizontal mirror. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "data/data_internal.h"

/* iBUG 300-W 68 points (0-based), as in shared/data/README.md. */
static const int FLIP_68[68] = {16, 15, 14, 13, 12, 11, 10, 9,  8,  7,  6,  5,  4,  3,  2,  1,  0,
                                26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 27, 28, 29, 30, 35, 34, 33,
                                32, 31, 45, 44, 43, 42, 47, 46, 39, 38, 37, 36, 41, 40, 54, 53, 52,
                                51, 50, 49, 48, 59, 58, 57, 56, 55, 64, 63, 62, 61, 60, 67, 66, 65};

/* IMM 58 points (0-based: the .dat index minus 1). Derived from the point
 * groups (0-12 jaw, 13-20 and 21-28 eyes, 29-33 and 34-38 brows, 39-46 mouth,
 * 47-57 nose) by mirroring the dataset's mean shape about its vertical axis
 * and pairing each point with its nearest mirrored neighbour; the test
 * data.schemes re-checks this on the real files. Both eye and brow contours
 * run in the same rotational sense, so 13<->21, 14<->22, ..., 29<->34, ... */
static const int FLIP_58[58] = {12, 11, 10, 9,  8,  7,  6,  5,  4,  3,  2,  1,  0,  21, 22, 23, 24, 25, 26, 27,
                                28, 13, 14, 15, 16, 17, 18, 19, 20, 34, 35, 36, 37, 38, 29, 30, 31, 32, 33, 43,
                                42, 41, 40, 39, 46, 45, 44, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47};

static sp_scheme make(const char *name, int k, const int *flip) {
  sp_scheme s;
  memset(&s, 0, sizeof s);
  snprintf(s.name, sizeof s.name, "%s", name);
  s.k = k;
  memcpy(s.flip, flip, sizeof(int) * (size_t)k);
  return s;
}

const sp_scheme *sp_scheme_ibug68(void) {
  static sp_scheme s;
  static int init;
  if (!__atomic_load_n(&init, __ATOMIC_ACQUIRE)) {
    sp_scheme t = make("ibug68", 68, FLIP_68);
    s = t; /* idempotent: racing initialisers write identical bytes */
    __atomic_store_n(&init, 1, __ATOMIC_RELEASE);
  }
  return &s;
}

const sp_scheme *sp_scheme_imm58(void) {
  static sp_scheme s;
  static int init;
  if (!__atomic_load_n(&init, __ATOMIC_ACQUIRE)) {
    sp_scheme t = make("imm58", 58, FLIP_58);
    s = t;
    __atomic_store_n(&init, 1, __ATOMIC_RELEASE);
  }
  return &s;
}

int sp_scheme_from_table(const char *name, int k, const int *flip, sp_scheme *out) {
  SP_CHECK(k > 0 && k <= SP_MAX_KEYPOINTS, "flip table for scheme '%s' has %d points (1..%d allowed)", name, k,
           SP_MAX_KEYPOINTS);
  for (int i = 0; i < k; i++) {
    SP_CHECK(flip[i] >= 0 && flip[i] < k, "flip table '%s': entry %d = %d is out of range", name, i, flip[i]);
    /* Mirroring twice must give the original order back. */
    SP_CHECK(flip[flip[i]] == i, "flip table '%s': entry %d -> %d -> %d is not a pairing", name, i, flip[i],
             flip[flip[i]]);
  }
  *out = make(name, k, flip);
  return 0;
}

const sp_scheme *sp_scheme_for_k(int k) {
  if (k == 68) return sp_scheme_ibug68();
  if (k == 58) return sp_scheme_imm58();
  return NULL;
}

void sp_scheme_flip_points(const sp_scheme *sc, float *pts, uint8_t *flags, float w) {
  float tmp[2 * SP_MAX_KEYPOINTS];
  uint8_t ftmp[SP_MAX_KEYPOINTS];
  int k = sc->k;
  for (int i = 0; i < k; i++) {
    tmp[2 * i] = w - 1 - pts[2 * i];
    tmp[2 * i + 1] = pts[2 * i + 1];
    if (flags) ftmp[i] = flags[i];
  }
  for (int i = 0; i < k; i++) {
    pts[2 * i] = tmp[2 * sc->flip[i]];
    pts[2 * i + 1] = tmp[2 * sc->flip[i] + 1];
    if (flags) flags[i] = ftmp[sc->flip[i]];
  }
}
