/* io/json.c, the JSON under checkpoint headers and point files, on the raw
 * bytes (it needs no terminator): whatever it accepts, its writer prints
 * back as JSON it accepts again. (data/json_mini.c, under COCO files, has
 * its own struct of the same name: fuzz_coco reaches it.) */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/json.h"

static void write_value(sp_json_buf *b, const sp_json *v) {
  switch (v->type) {
    case SP_JSON_NULL: sp_json_null(b); break;
    case SP_JSON_BOOL: sp_json_bool(b, v->u.boolean); break;
    case SP_JSON_NUMBER: sp_json_f64(b, v->u.num.d); break;
    case SP_JSON_STRING: sp_json_strn(b, v->u.str.s, v->u.str.len); break;
    case SP_JSON_ARRAY:
      sp_json_arr_begin(b);
      for (size_t i = 0; i < v->u.arr.n; i++) write_value(b, &v->u.arr.items[i]);
      sp_json_arr_end(b);
      break;
    case SP_JSON_OBJECT:
      sp_json_obj_begin(b);
      for (size_t i = 0; i < v->u.obj.n; i++) sp_json_key(b, v->u.obj.keys[i]), write_value(b, &v->u.obj.vals[i]);
      sp_json_obj_end(b);
      break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sp_json *v = sp_json_parse((const char *)data, size, 1u << 20);
  if (v) {
    sp_json_buf b;
    sp_json_buf_init(&b);
    write_value(&b, v);
    sp_json *back = sp_json_parse(b.s, b.len, 1u << 22);
    FZ_ASSERT(back);
    sp_json_free(back);
    sp_json_buf_free(&b);
    sp_json_free(v);
  }
  return 0;
}
