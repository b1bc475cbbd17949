/* Shapes, dtypes and bf16 conversion. */
#include "spry/tensor.h"

#include "core/bf16.h"

#include <stdio.h>
#include <string.h>

size_t sp_dtype_size(sp_dtype t) {
  switch (t) {
    case SP_F32: return 4;
    case SP_BF16: return 2;
    case SP_U8: return 1;
    case SP_I32: return 4;
  }
  return 0;
}

const char *sp_dtype_name(sp_dtype t) {
  static const char *names[] = {"f32", "bf16", "u8", "i32"};
  return (unsigned)t < 4 ? names[t] : "?";
}

const char *sp_dtype_safetensors(sp_dtype t) {
  static const char *names[] = {"F32", "BF16", "U8", "I32"};
  return (unsigned)t < 4 ? names[t] : "?";
}

int sp_dtype_parse(const char *name, sp_dtype *out) {
  for (int i = 0; i < 4; i++) {
    if (!strcmp(name, sp_dtype_name((sp_dtype)i)) || !strcmp(name, sp_dtype_safetensors((sp_dtype)i))) {
      *out = (sp_dtype)i;
      return 0;
    }
  }
  return sp_error_set("unknown dtype '%s' (expected f32, bf16, u8 or i32)", name);
}

sp_shape sp_shape_make(int ndim, const int64_t *dims) {
  sp_shape s = {0};
  SP_ASSERT(ndim >= 0 && ndim <= SP_MAX_DIMS);
  s.ndim = ndim;
  for (int i = 0; i < ndim; i++) s.d[i] = dims[i];
  return s;
}
sp_shape sp_shape1(int64_t a) { return sp_shape_make(1, (int64_t[]){a}); }
sp_shape sp_shape2(int64_t a, int64_t b) { return sp_shape_make(2, (int64_t[]){a, b}); }
sp_shape sp_shape3(int64_t a, int64_t b, int64_t c) { return sp_shape_make(3, (int64_t[]){a, b, c}); }
sp_shape sp_shape4(int64_t a, int64_t b, int64_t c, int64_t d) { return sp_shape_make(4, (int64_t[]){a, b, c, d}); }

int64_t sp_shape_numel(const sp_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->d[i];
  return n;
}

int sp_shape_equal(const sp_shape *a, const sp_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

const char *sp_shape_str(const sp_shape *s, char *buf, size_t n) {
  size_t used = 0;
  if (n == 0) return buf;
  buf[0] = 0;
  used += (size_t)snprintf(buf + used, n - used, "[");
  for (int i = 0; i < s->ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)s->d[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

int64_t sp_tensor_numel(const sp_tensor *t) { return sp_shape_numel(&t->shape); }
size_t sp_tensor_bytes(const sp_tensor *t) { return (size_t)sp_tensor_numel(t) * sp_dtype_size(t->dtype); }

sp_tensor sp_tensor_view(sp_dtype dtype, sp_shape shape, void *data) {
  sp_tensor t = {dtype, shape, data};
  return t;
}

sp_tensor sp_tensor_alloc(sp_dtype dtype, sp_shape shape) {
  sp_tensor t = {dtype, shape, NULL};
  size_t bytes = sp_tensor_bytes(&t);
  t.data = sp_aligned_alloc(bytes);
  memset(t.data, 0, bytes);
  return t;
}

void sp_tensor_free(sp_tensor *t) {
  sp_aligned_free(t->data);
  t->data = NULL;
}

uint16_t sp_f32_to_bf16(float f) { return sp_bf16_round(f); }

float sp_bf16_to_f32(uint16_t b) { return sp_bf16_widen(b); }
