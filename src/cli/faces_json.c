#include "cli/faces_json.h"

#include <stdio.h>

void faces_json_begin(sp_json_buf *b, const char *image) {
  sp_json_buf_init(b);
  sp_json_obj_begin(b);
  sp_json_key(b, "image"), sp_json_str(b, image);
  sp_json_key(b, "faces"), sp_json_arr_begin(b);
}

void faces_json_face(sp_json_buf *b, const float box[4]) {
  sp_json_obj_begin(b);
  sp_json_key(b, "box"), sp_json_arr_begin(b);
  for (int i = 0; i < 4; i++) sp_json_f32(b, box[i]);
  sp_json_arr_end(b);
}

void faces_json_face_end(sp_json_buf *b) { sp_json_obj_end(b); }

void faces_json_print(sp_json_buf *b) {
  sp_json_arr_end(b);
  sp_json_obj_end(b);
  printf("%s\n", b->s);
  fflush(stdout);
  sp_json_buf_free(b);
}
