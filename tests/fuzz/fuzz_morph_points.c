/* Point files of `spry morph --points-a/-b` (train/morph_points.c): predict's
 * JSON, a bare [[x,y],...] array, IMM .dat/.asf, iBUG .pts; the first byte
 * picks the file name's extension. Accepted points are finite. */
#include <math.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "spry/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const char *const names[4] = {"a.json", "a.dat", "a.asf", "a.pts"};
  const char *path = fz_write(names[data[0] % 4], data + 1, size - 1);
  float *pts;
  int k;
  if (sp_morph_points_read(path, 640, 480, &pts, &k) != 0) return 0;
  FZ_ASSERT(k > 0 && k <= SP_MAX_KEYPOINTS);
  for (int i = 0; i < 2 * k; i++) FZ_ASSERT(isfinite(pts[i]));
  free(pts);
  return 0;
}
