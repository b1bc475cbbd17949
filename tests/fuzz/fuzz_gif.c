/* The GIF reader that checks `spry morph`'s morph.gif (io/morph_gif.c). */
#include <stdlib.h>

#include "fuzz_common.h"
#include "spry/morph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int w, h;
  uint8_t *rgb = NULL;
  int n = sp_gif_read(fz_write("morph.gif", data, size), &w, &h, &rgb);
  if (n > 0) {
    FZ_ASSERT(w > 0 && h > 0 && rgb);
    for (size_t i = 0; i < (size_t)n * w * h * 3; i++) fz_sink += rgb[i];
  }
  free(rgb);
  return 0;
}
