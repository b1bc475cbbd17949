/* The safetensors reader (and so io/json.c): any input is refused with an
 * error, or opens into tensors that lie inside the input; ASan reports any
 * stray read. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "spry/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sp_st_file *f = sp_st_open_buffer(data, size, "fuzz");
  if (!f) return 0;
  for (int i = 0; i < sp_st_count(f); i++) {
    const sp_tensor *t = sp_st_get(f, sp_st_name(f, i));
    if (!t) FZ_ASSERT(0); /* every listed name must be found */
    size_t n = sp_tensor_bytes(t);
    for (size_t k = 0; k < n; k++) fz_sink += ((const unsigned char *)t->data)[k];
  }
  for (int i = 0; i < sp_st_meta_count(f); i++)
    FZ_ASSERT(sp_st_meta(f, sp_st_meta_key(f, i)));
  sp_st_close(f);
  return 0;
}
