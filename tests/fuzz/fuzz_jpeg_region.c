/* Region decoding (data/jpeg_crop.c, libjpeg-turbo's classic API) and the
 * image reader that cuts crops from a file (data/image_reader.c), as the
 * cache build and the predictor use them. The first 8 bytes pick channels,
 * scale and rectangle; the rest is the file. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "fuzz_common.h"

static sp_jpeg_dec *dec;
static sp_image_reader *reader;

static void region(const uint8_t *p, const uint8_t *buf, size_t len) {
  int w, h;
  if (sp_jpeg_dec_header(dec, buf, len, "fuzz.jpg", &w, &h) != 0) return;
  FZ_ASSERT(w > 0 && h > 0 && (int64_t)w * h <= SP_MAX_IMAGE_PIXELS);
  const int c = (p[0] & 1) ? 3 : 1, num = 1 + (p[1] & 7);
  const int sw = sp_jpeg_scaled_dim(w, num), sh = sp_jpeg_scaled_dim(h, num);
  const int x0 = p[2] % (sw + 1), y0 = p[3] % (sh + 1), x1 = x0 + 1 + p[4], y1 = y0 + 1 + p[5];
  sp_jpeg_region r;
  if (sp_jpeg_dec_region(dec, c, num, x0, y0, x1, y1, &r) != 0) return;
  FZ_ASSERT(r.w > 0 && r.h > 0 && r.c == c && r.sw == sw && r.sh == sh);
  for (size_t i = 0; i < (size_t)r.w * r.h * r.c; i++) fz_sink += r.px[i];
}

static void crop(const uint8_t *p, const uint8_t *buf, size_t len) {
  int w, h;
  if (sp_image_reader_open(reader, fz_write("face.jpg", buf, len), &w, &h) != 0) return;
  const int c = (p[0] & 2) ? 3 : 1, size = 8 + (p[6] & 31);
  sp_crop_rect rc = {(double)(int8_t)p[2], (double)(int8_t)p[3], 1.0 + p[4] + (p[7] & 3) * w, 1.0 + p[5] + h / 2};
  uint8_t *out = malloc((size_t)size * size * c);
  if (sp_image_reader_crop(reader, rc, size, c, out) == 0) {
    for (int i = 0; i < size * size * c; i++) fz_sink += out[i];
  }
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  if (!dec) dec = sp_jpeg_dec_new();
  if (!reader) reader = sp_image_reader_new();
  FZ_ASSERT(dec && reader);
  region(data, data + 8, size - 8);
  crop(data, data + 8, size - 8);
  return 0;
}
