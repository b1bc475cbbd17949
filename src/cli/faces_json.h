/* The JSON line `spry detect` and `spry predict` print per image:
 * {"image":..., "faces":[{"box":[x,y,w,h], ...}, ...]}. Written in one place
 * so the two commands cannot drift apart; each adds its own per-face keys
 * ("score", "points") between faces_json_face and faces_json_face_end. */
#ifndef SPRY_CLI_FACES_JSON_H
#define SPRY_CLI_FACES_JSON_H

#include "io/json.h"

void faces_json_begin(sp_json_buf *b, const char *image);
/* Opens one face and writes its "box". */
void faces_json_face(sp_json_buf *b, const float box[4]);
void faces_json_face_end(sp_json_buf *b);
/* Closes the line, prints it to stdout (flushed: a caller may be reading
 * line by line) and frees the buffer. */
void faces_json_print(sp_json_buf *b);

#endif
