/* Checkpoints as files people share: safetensors -> the stored run config ->
 * the graph it builds -> the weights checked against it -> a prediction
 * (train/predictor.c over train/checkpoint.c and io/), on the ref backend.
 *
 * A real checkpoint is mostly weights, which the fuzzer would spend its time
 * mutating. When the first byte is odd, the rest is a safetensors file cut
 * after its header, and the harness appends zero bytes up to the largest
 * data offset the header names (at most 64 MB): a 5 KB input stands for a
 * 2 MB model, and the mutations go to names, shapes, dtypes and the stored
 * config. When it is even, the rest is the whole file as it is. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/json.h"
#include "spry/train.h"

#define MAX_PAD ((size_t)64 << 20)

/* The largest data_offsets end in a safetensors header, or 0. */
static size_t data_end(const uint8_t *p, size_t n) {
  if (n < 8) return 0;
  uint64_t hl;
  memcpy(&hl, p, 8);
  if (hl > n - 8) return 0;
  sp_json *h = sp_json_parse((const char *)p + 8, (size_t)hl, (size_t)hl);
  if (!h) return 0;
  int64_t end = 0, e;
  for (size_t i = 0; i < sp_json_len(h); i++) {
    const sp_json *off = sp_json_get(sp_json_value_at(h, i), "data_offsets");
    if (sp_json_len(off) == 2 && sp_json_as_int64(sp_json_at(off, 1), 0, (int64_t)MAX_PAD, &e) == 0 && e > end) end = e;
  }
  sp_json_free(h);
  return (size_t)end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *file = data + 1;
  size_t len = size - 1;
  uint8_t *padded = NULL;
  if (data[0] & 1) {
    uint64_t hl = 0;
    if (len >= 8) memcpy(&hl, file, 8);
    size_t end = data_end(file, len), want = len >= 8 && hl <= len - 8 ? 8 + (size_t)hl + end : len;
    if (want > len) {
      padded = calloc(want, 1);
      if (!padded) return 0;
      memcpy(padded, file, len);
      file = padded, len = want;
    }
  }
  const char *path = fz_write("best.safetensors", file, len);
  free(padded);
  sp_kp_predictor *p = sp_kp_predictor_open(path, "ref");
  if (!p) return 0;
  const int c = sp_kp_predictor_channels(p), k = sp_kp_predictor_keypoints(p);
  FZ_ASSERT(k > 0 && k <= SP_MAX_KEYPOINTS && (c == 1 || c == 3));
  sp_image im = {40, 30, c, malloc((size_t)40 * 30 * c)};
  for (int i = 0; i < 40 * 30 * c; i++) im.px[i] = (uint8_t)(i * 7);
  const float box[4] = {5, 2, 24, 24};
  float *pts = malloc(sizeof(float) * 2 * (size_t)k);
  sp_kp_predict(p, &im, box, pts);
  free(pts);
  free(im.px);
  sp_kp_predictor_close(p);
  return 0;
}
