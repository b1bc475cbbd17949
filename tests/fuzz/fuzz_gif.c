/* The GIF reader that checks `spry morph`'s morph.gif (io/morph_gif.c). */
#include <stdlib.h>

#include "fuzz_common.h"
#include "spry/morph.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The GIFs spry reads back are its own morph.gif: an 8 MB allocation
   * limit still drives every refusal path and keeps each input fast (at the
   * shared 1 GB a frame bomb ran at 3 inputs a second, at 64 MB at 200). */
  setenv("SPRY_MAX_MEMORY_MB", "8", 1);
  int w, h;
  uint8_t *rgb = NULL;
  int n = sp_gif_read(fz_write("morph.gif", data, size), &w, &h, &rgb);
  if (n > 0) {
    FZ_ASSERT(w > 0 && h > 0 && rgb);
    /* Every page of the frames and their last byte are read (ASan sees a
     * short buffer); summing each of up to 1 GB of bytes made a frame bomb
     * take 15 s, near libFuzzer's timeout. */
    size_t bytes = (size_t)n * w * h * 3;
    for (size_t i = 0; i < bytes; i += 4096) fz_sink += rgb[i];
    fz_sink += rgb[bytes - 1];
  }
  free(rgb);
  return 0;
}
