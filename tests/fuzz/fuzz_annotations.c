/* The single-file annotation readers: IMM .asf / .dat and iBUG .pts (the
 * first byte picks one). What a reader accepts must be a sample
 * sp_dataset_add can judge: K points, an image path. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const char *const names[3] = {"01-1m.asf", "01-1m.dat", "face.pts"};
  int which = data[0] % 3;
  const char *path = fz_write(names[which], data + 1, size - 1);
  sp_kp_sample s;
  int rc = which == 0 ? sp_read_imm_asf(path, &s) : which == 1 ? sp_read_imm_dat(path, &s) : sp_read_pts(path, &s);
  if (rc == 0) {
    FZ_ASSERT(s.k > 0 && s.k <= SP_MAX_KEYPOINTS && s.pts && s.image);
    sp_dataset ds;
    sp_dataset_init(&ds);
    sp_dataset_add(&ds, &s, path);
    sp_dataset_free(&ds);
  }
  return 0;
}
