/* libFuzzer harness for the safetensors reader (and so the JSON parser).
 * Not a CTest test (no test_ prefix); build and run as described in
 * src/io/README.md. Any input must either be refused with an error or open
 * into tensors that lie inside the input; ASan reports any stray read. */
#include <stdint.h>
#include <string.h>

#include "spry/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sp_st_file *f = sp_st_open_buffer(data, size, "fuzz");
  if (!f) return 0;
  volatile unsigned sum = 0;
  for (int i = 0; i < sp_st_count(f); i++) {
    const sp_tensor *t = sp_st_get(f, sp_st_name(f, i));
    if (!t) __builtin_trap(); /* every listed name must be found */
    size_t n = sp_tensor_bytes(t);
    for (size_t k = 0; k < n; k++) sum += ((const unsigned char *)t->data)[k];
  }
  for (int i = 0; i < sp_st_meta_count(f); i++)
    if (!sp_st_meta(f, sp_st_meta_key(f, i))) __builtin_trap();
  sp_st_close(f);
  return 0;
}
