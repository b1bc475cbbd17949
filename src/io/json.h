/* spry internal JSON: a small strict DOM parser and a line-oriented writer.
 *
 * The parser exists for safetensors headers and small config/metadata blobs
 * read from untrusted files, so it is strict (RFC 8259 only: no comments, no
 * trailing commas, no NaN, UTF-8 checked), bounded (caller-given size limit,
 * nesting depth 64) and reports the byte offset of the first problem.
 * Objects keep their key order (safetensors' tensor order is the header's).
 * Not a public header: only libspry and its tests include it. */
#ifndef SPRY_IO_JSON_H
#define SPRY_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#define SP_JSON_MAX_DEPTH 64

typedef enum { SP_JSON_NULL, SP_JSON_BOOL, SP_JSON_NUMBER, SP_JSON_STRING, SP_JSON_ARRAY, SP_JSON_OBJECT } sp_json_type;

typedef struct sp_json sp_json;
struct sp_json {
  sp_json_type type;
  size_t offset; /* byte offset of the value in the parsed text (for messages) */
  union {
    int boolean;
    struct {
      double d;
      int64_t i;  /* exact value when is_int */
      int is_int; /* literal had no fraction/exponent and fits int64 */
    } num;
    struct {
      char *s; /* NUL-terminated; may also contain NULs from \u0000 */
      size_t len;
    } str;
    struct {
      sp_json *items;
      size_t n;
    } arr;
    struct {
      char **keys; /* NUL-terminated, lengths in key_lens */
      size_t *key_lens;
      sp_json *vals;
      size_t n;
    } obj;
  } u;
};

/* Parses exactly one JSON value (surrounded by optional whitespace) from
 * text[0..len). text need not be NUL-terminated. Returns NULL when len >
 * max_bytes or the text is not valid JSON; sp_last_error() then reads like
 * "JSON: unterminated string at byte 17". Free the result with sp_json_free. */
sp_json *sp_json_parse(const char *text, size_t len, size_t max_bytes);
void sp_json_free(sp_json *v);

const char *sp_json_type_name(sp_json_type t);

/* 1 when s[0..n) is well-formed UTF-8 (the check the parser makes on its
 * strings: no overlong forms, surrogates or code points past U+10FFFF);
 * else 0. The YAML tree checks --set text with it. */
int sp_utf8_valid(const char *s, size_t n);

/* Lookups. All accept NULL and return NULL / 0 when the value has the wrong
 * type, so chains like sp_json_get(sp_json_get(doc, "a"), "b") are safe.
 * sp_json_get finds the first key equal to `key` (keys with embedded NULs
 * never match). */
const sp_json *sp_json_get(const sp_json *obj, const char *key);
size_t sp_json_len(const sp_json *v); /* items of an array, members of an object */
const sp_json *sp_json_at(const sp_json *arr, size_t i);
const char *sp_json_key_at(const sp_json *obj, size_t i);
const sp_json *sp_json_value_at(const sp_json *obj, size_t i);
const char *sp_json_as_string(const sp_json *v);
/* Integer literal in [lo, hi] -> 0 and *out; otherwise -1 with an error
 * ("expected an integer in [lo, hi], got 2.5 at byte N"). */
int sp_json_as_int64(const sp_json *v, int64_t lo, int64_t hi, int64_t *out);
/* Any number -> 0 and *out; otherwise -1 with an error. */
int sp_json_as_double(const sp_json *v, double *out);

/* ---- writer ----
 * A growable string. Values and keys insert the separating comma themselves
 * (decided from the last byte written), so callers write
 *   sp_json_obj_begin(b); sp_json_key(b, "loss"); sp_json_f64(b, x); ...
 * without tracking "first member" state. */
typedef struct {
  char *s; /* always NUL-terminated once anything was written */
  size_t len, cap;
} sp_json_buf;

void sp_json_buf_init(sp_json_buf *b);
void sp_json_buf_free(sp_json_buf *b);
void sp_json_buf_clear(sp_json_buf *b);                    /* keep the memory */
void sp_json_raw(sp_json_buf *b, const char *s, size_t n); /* verbatim bytes */
void sp_json_obj_begin(sp_json_buf *b);
void sp_json_obj_end(sp_json_buf *b);
void sp_json_arr_begin(sp_json_buf *b);
void sp_json_arr_end(sp_json_buf *b);
void sp_json_key(sp_json_buf *b, const char *key); /* ,"key": */
void sp_json_str(sp_json_buf *b, const char *s);   /* escaped string value */
void sp_json_strn(sp_json_buf *b, const char *s, size_t n);
void sp_json_int(sp_json_buf *b, int64_t v);
void sp_json_u64(sp_json_buf *b, uint64_t v);
/* Shortest decimal that reads back to the same float / double; NaN and
 * infinities (not representable in JSON) are written as null. */
void sp_json_f32(sp_json_buf *b, float v);
void sp_json_f64(sp_json_buf *b, double v);
void sp_json_bool(sp_json_buf *b, int v);
void sp_json_null(sp_json_buf *b);

#endif
