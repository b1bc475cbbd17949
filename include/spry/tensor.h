/* spry tensors: a dtype, a shape of up to 5 dimensions (N, C, T, H, W) and a
 * pointer to contiguous row-major data. A tensor never owns its data unless it
 * was made by sp_tensor_alloc; graphs and plans hand out views into arenas. */
#ifndef SPRY_TENSOR_H
#define SPRY_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "spry/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SP_MAX_DIMS 5

typedef enum { SP_F32 = 0, SP_BF16 = 1, SP_U8 = 2, SP_I32 = 3 } sp_dtype;

typedef struct {
  int ndim;
  int64_t d[SP_MAX_DIMS];
} sp_shape;

typedef struct {
  sp_dtype dtype;
  sp_shape shape;
  void *data;
} sp_tensor;

size_t sp_dtype_size(sp_dtype t);
const char *sp_dtype_name(sp_dtype t);               /* "f32", "bf16", "u8", "i32" */
const char *sp_dtype_safetensors(sp_dtype t);        /* "F32", "BF16", "U8", "I32" */
int sp_dtype_parse(const char *name, sp_dtype *out); /* accepts either spelling */

sp_shape sp_shape_make(int ndim, const int64_t *dims);
sp_shape sp_shape1(int64_t a);
sp_shape sp_shape2(int64_t a, int64_t b);
sp_shape sp_shape3(int64_t a, int64_t b, int64_t c);
sp_shape sp_shape4(int64_t a, int64_t b, int64_t c, int64_t d);
int64_t sp_shape_numel(const sp_shape *s);
int sp_shape_equal(const sp_shape *a, const sp_shape *b);
/* Writes "[2,3,224,224]" into buf; returns buf (for use in messages). */
const char *sp_shape_str(const sp_shape *s, char *buf, size_t n);

size_t sp_tensor_bytes(const sp_tensor *t);
int64_t sp_tensor_numel(const sp_tensor *t);
sp_tensor sp_tensor_view(sp_dtype dtype, sp_shape shape, void *data);
/* Owning allocation (64-byte aligned, zeroed); release with sp_tensor_free. */
sp_tensor sp_tensor_alloc(sp_dtype dtype, sp_shape shape);
void sp_tensor_free(sp_tensor *t);

/* bfloat16 conversion: round-to-nearest-even, NaN kept quiet. */
uint16_t sp_f32_to_bf16(float f);
float sp_bf16_to_f32(uint16_t b);

#ifdef __cplusplus
}
#endif
#endif
