/* Whole-image decoding (data/image_decode.c): the format from the magic
 * bytes, TurboJPEG at every DCT scale, the exact IDCT, libpng, the probe.
 * The first byte picks channels and scale. A decoded image has the size
 * the probe announced (scaled). */
#include <stdlib.h>

#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int c = (data[0] & 1) ? 3 : 1, denom = 1 << ((data[0] >> 1) & 3), exact = (data[0] >> 3) & 1;
  const uint8_t *buf = data + 1;
  size_t len = size - 1;
  int w = 0, h = 0;
  int probed = sp_image_probe(buf, len, &w, &h) == 0;
  if (probed) FZ_ASSERT(w > 0 && h > 0 && (int64_t)w * h <= SP_MAX_IMAGE_PIXELS);
  sp_image im;
  int rc = exact ? sp_image_load(fz_write("photo.jpg", buf, len), c, &im)
                 : sp_image_decode(buf, len, c, denom, "fuzz", &im);
  if (rc == 0) {
    FZ_ASSERT(im.w > 0 && im.h > 0 && im.c == c && im.px);
    for (size_t i = 0; i < (size_t)im.w * im.h * im.c; i++) fz_sink += im.px[i];
    sp_image_free(&im);
  }
  return 0;
}
