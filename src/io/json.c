/* Strict JSON parser and writer (see json.h for why it is strict). */
#include "io/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/common.h"

/* ------------------------------------------------------------------ parser */

typedef struct {
  const char *p;
  size_t len, pos;
  int depth;
} parser;

static int fail_at(size_t at, const char *what) { return sp_error_set("JSON: %s at byte %zu", what, at); }

static void free_contents(sp_json *v) {
  switch (v->type) {
    case SP_JSON_STRING: free(v->u.str.s); break;
    case SP_JSON_ARRAY:
      for (size_t i = 0; i < v->u.arr.n; i++) free_contents(&v->u.arr.items[i]);
      free(v->u.arr.items);
      break;
    case SP_JSON_OBJECT:
      for (size_t i = 0; i < v->u.obj.n; i++) {
        free(v->u.obj.keys[i]);
        free_contents(&v->u.obj.vals[i]);
      }
      free(v->u.obj.keys);
      free(v->u.obj.key_lens);
      free(v->u.obj.vals);
      break;
    default: break;
  }
  v->type = SP_JSON_NULL;
}

void sp_json_free(sp_json *v) {
  if (!v) return;
  free_contents(v);
  free(v);
}

static void skip_ws(parser *ps) {
  while (ps->pos < ps->len) {
    char c = ps->p[ps->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    ps->pos++;
  }
}

static int hex4(parser *ps, size_t at, unsigned *out) {
  if (ps->len - ps->pos < 4) return fail_at(at, "truncated \\u escape");
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = ps->p[ps->pos + (size_t)i];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      v |= (unsigned)(c - 'A' + 10);
    else
      return fail_at(at, "bad hex digit in \\u escape");
  }
  ps->pos += 4;
  *out = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes available), or 0.
 * Rejects overlong forms, surrogates and code points past U+10FFFF so that
 * names read from a file are valid text wherever they are printed. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  size_t k;
  unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (c >= 0xC2 && c <= 0xDF)
    k = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    k = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    k = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < k) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  return k;
}

int sp_utf8_valid(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    if (u[i] < 0x80) {
      i++;
      continue;
    }
    const size_t k = utf8_seq(u + i, n - i);
    if (!k) return 0;
    i += k;
  }
  return 1;
}

/* A \uXXXX escape (ps->pos just after the 'u'), surrogate pairs joined,
 * as UTF-8 into o; *n grows by its length. */
static int unicode_escape(parser *ps, size_t at, char *o, size_t *n) {
  unsigned cp;
  if (hex4(ps, at, &cp)) return -1;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return fail_at(at, "lone low surrogate in \\u escape");
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    unsigned lo;
    if (ps->len - ps->pos < 2 || ps->p[ps->pos] != '\\' || ps->p[ps->pos + 1] != 'u')
      return fail_at(at, "high surrogate not followed by a low one");
    ps->pos += 2;
    if (hex4(ps, at, &lo)) return -1;
    if (lo < 0xDC00 || lo > 0xDFFF) return fail_at(at, "high surrogate not followed by a low one");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  *n += put_utf8(o + *n, cp);
  return 0;
}

/* One escape (ps->pos just after the backslash) into o. */
static int escape(parser *ps, size_t at, char *o, size_t *n) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  char e = ps->p[ps->pos++];
  if (e == 'u') return unicode_escape(ps, at, o, n);
  const char *k = e ? strchr(from, e) : NULL;
  if (!k) return fail_at(at, "bad escape in string");
  o[(*n)++] = to[k - from];
  return 0;
}

/* One character or escape of a string at ps->pos into o; 0 or -1. */
static int string_char(parser *ps, size_t end, char *o, size_t *n) {
  unsigned char c = (unsigned char)ps->p[ps->pos];
  size_t at = ps->pos;
  if (c < 0x20) return fail_at(at, "control character in string");
  if (c >= 0x80) {
    size_t k = utf8_seq((const unsigned char *)ps->p + ps->pos, end - ps->pos);
    if (!k) return fail_at(at, "invalid UTF-8 in string");
    memcpy(o + *n, ps->p + ps->pos, k);
    *n += k;
    ps->pos += k;
    return 0;
  }
  ps->pos++;
  if (c != '\\') {
    o[(*n)++] = (char)c;
    return 0;
  }
  return escape(ps, at, o, n);
}

static int parse_string_raw(parser *ps, char **out, size_t *out_len) {
  size_t start = ps->pos; /* at the opening quote */
  ps->pos++;
  /* Find the closing quote first so the output is allocated once: decoding
   * never makes a string longer than its escaped form. */
  size_t end = ps->pos;
  while (end < ps->len && ps->p[end] != '"') end += (ps->p[end] == '\\') ? 2 : 1;
  if (end >= ps->len) return fail_at(start, "unterminated string");
  char *o = malloc(end - ps->pos + 1);
  if (!o) sp_panic("out of memory parsing JSON string");
  size_t n = 0;
  while (ps->pos < end)
    if (string_char(ps, end, o, &n) != 0) {
      free(o);
      return -1;
    }
  if (ps->pos != end) { /* an escape straddled the closing quote: \" at end */
    free(o);
    return fail_at(start, "unterminated string");
  }
  ps->pos = end + 1;
  o[n] = 0;
  *out = o;
  *out_len = n;
  return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *ps, sp_json *out) {
  size_t start = ps->pos, i = ps->pos;
  const char *p = ps->p;
  int integral = 1;
  if (i < ps->len && p[i] == '-') i++;
  if (i >= ps->len || !is_digit(p[i])) return fail_at(start, "invalid number");
  if (p[i] == '0') {
    i++;
    if (i < ps->len && is_digit(p[i])) return fail_at(start, "leading zero in number");
  } else {
    while (i < ps->len && is_digit(p[i])) i++;
  }
  if (i < ps->len && p[i] == '.') {
    integral = 0;
    i++;
    if (i >= ps->len || !is_digit(p[i])) return fail_at(start, "invalid number (digits must follow '.')");
    while (i < ps->len && is_digit(p[i])) i++;
  }
  if (i < ps->len && (p[i] == 'e' || p[i] == 'E')) {
    integral = 0;
    i++;
    if (i < ps->len && (p[i] == '+' || p[i] == '-')) i++;
    if (i >= ps->len || !is_digit(p[i])) return fail_at(start, "invalid number exponent");
    while (i < ps->len && is_digit(p[i])) i++;
  }
  size_t n = i - start;
  char small[64];
  char *tmp = n < sizeof small ? small : malloc(n + 1);
  if (!tmp) sp_panic("out of memory parsing JSON number");
  memcpy(tmp, p + start, n);
  tmp[n] = 0;
  out->type = SP_JSON_NUMBER;
  out->u.num.d = strtod(tmp, NULL);
  out->u.num.is_int = 0;
  out->u.num.i = 0;
  if (integral) {
    /* Accumulate negatively so INT64_MIN is representable. */
    int neg = tmp[0] == '-';
    int64_t acc = 0;
    int ok = 1;
    for (size_t k = (size_t)neg; k < n; k++) {
      int dgt = tmp[k] - '0';
      if (acc < (INT64_MIN + dgt) / 10) {
        ok = 0;
        break;
      }
      acc = acc * 10 - dgt;
    }
    if (ok && !neg && acc == INT64_MIN) ok = 0;
    if (ok) {
      out->u.num.is_int = 1;
      out->u.num.i = neg ? acc : -acc;
    }
  }
  if (tmp != small) free(tmp);
  ps->pos = i;
  return 0;
}

static int parse_value(parser *ps, sp_json *out);

static void grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return;
  size_t c = *cap ? *cap * 2 : 4;
  while (c < need) c *= 2;
  *p = sp_xrealloc(*p, c * elem);
  *cap = c;
}

/* At a container's opening bracket: steps in. 1 when it closes at once
 * (empty), 0 when items follow, -1 (error set) when nested too deep. */
static int open_container(parser *ps, char close) {
  if (++ps->depth > SP_JSON_MAX_DEPTH) return fail_at(ps->pos, "nesting deeper than 64 levels");
  ps->pos++;
  skip_ws(ps);
  if (ps->pos >= ps->len || ps->p[ps->pos] != close) return 0;
  ps->pos++;
  ps->depth--;
  return 1;
}

/* After an item of the container opened at `start`: 1 at its closing
 * bracket (stepped out), 0 at a comma, -1 (error set) otherwise. */
static int after_item(parser *ps, size_t start, char close, const char *kind) {
  skip_ws(ps);
  if (ps->pos >= ps->len) return sp_error_set("JSON: unterminated %s at byte %zu", kind, start);
  char c = ps->p[ps->pos++];
  if (c == ',') return 0;
  if (c != close) return sp_error_set("JSON: expected ',' or '%c' in %s at byte %zu", close, kind, ps->pos - 1);
  ps->depth--;
  return 1;
}

static int parse_array(parser *ps, sp_json *out) {
  size_t start = ps->pos, cap = 0;
  out->type = SP_JSON_ARRAY;
  out->u.arr.items = NULL;
  out->u.arr.n = 0;
  int r = open_container(ps, ']');
  while (r == 0) {
    grow((void **)&out->u.arr.items, &cap, out->u.arr.n + 1, sizeof(sp_json));
    if (parse_value(ps, &out->u.arr.items[out->u.arr.n])) break;
    out->u.arr.n++;
    r = after_item(ps, start, ']', "array");
  }
  if (r > 0) return 0;
  free_contents(out);
  return -1;
}

/* One `"key": value` member of the object opened at `start` into its next
 * slot (the arrays grown to fit). */
static int parse_member(parser *ps, size_t start, sp_json *out, size_t caps[3]) {
  size_t n = out->u.obj.n;
  skip_ws(ps);
  if (ps->pos >= ps->len) return fail_at(start, "unterminated object");
  if (ps->p[ps->pos] != '"') return fail_at(ps->pos, "expected a string key in object");
  char *key;
  size_t klen;
  if (parse_string_raw(ps, &key, &klen)) return -1;
  skip_ws(ps);
  if (ps->pos >= ps->len || ps->p[ps->pos] != ':') {
    free(key);
    return fail_at(ps->pos, "expected ':' after object key");
  }
  ps->pos++;
  grow((void **)&out->u.obj.keys, &caps[0], n + 1, sizeof(char *));
  grow((void **)&out->u.obj.key_lens, &caps[1], n + 1, sizeof(size_t));
  grow((void **)&out->u.obj.vals, &caps[2], n + 1, sizeof(sp_json));
  if (parse_value(ps, &out->u.obj.vals[n])) {
    free(key);
    return -1;
  }
  out->u.obj.keys[n] = key;
  out->u.obj.key_lens[n] = klen;
  out->u.obj.n = n + 1;
  return 0;
}

static int parse_object(parser *ps, sp_json *out) {
  size_t start = ps->pos, caps[3] = {0, 0, 0};
  out->type = SP_JSON_OBJECT;
  memset(&out->u.obj, 0, sizeof out->u.obj);
  int r = open_container(ps, '}');
  while (r == 0) {
    if (parse_member(ps, start, out, caps)) break;
    r = after_item(ps, start, '}', "object");
  }
  if (r > 0) return 0;
  free_contents(out);
  return -1;
}

static int literal(parser *ps, const char *word) {
  size_t n = strlen(word);
  if (ps->len - ps->pos < n || memcmp(ps->p + ps->pos, word, n) != 0) return fail_at(ps->pos, "invalid literal");
  ps->pos += n;
  return 0;
}

/* On failure *out is left as a freed SP_JSON_NULL so callers only ever free
 * what was fully built. */
static int parse_value(parser *ps, sp_json *out) {
  out->type = SP_JSON_NULL;
  skip_ws(ps);
  if (ps->pos >= ps->len) return fail_at(ps->pos, "unexpected end of input");
  out->offset = ps->pos;
  char c = ps->p[ps->pos];
  switch (c) {
    case '{': return parse_object(ps, out);
    case '[': return parse_array(ps, out);
    case '"': {
      char *s;
      size_t n;
      if (parse_string_raw(ps, &s, &n)) return -1;
      out->type = SP_JSON_STRING;
      out->u.str.s = s;
      out->u.str.len = n;
      return 0;
    }
    case 't':
      if (literal(ps, "true")) return -1;
      out->type = SP_JSON_BOOL;
      out->u.boolean = 1;
      return 0;
    case 'f':
      if (literal(ps, "false")) return -1;
      out->type = SP_JSON_BOOL;
      out->u.boolean = 0;
      return 0;
    case 'n': return literal(ps, "null");
    default:
      if (c == '-' || is_digit(c)) return parse_number(ps, out);
      return fail_at(ps->pos, "unexpected character");
  }
}

sp_json *sp_json_parse(const char *text, size_t len, size_t max_bytes) {
  if (len > max_bytes) {
    sp_error_set("JSON: document of %zu bytes exceeds the %zu byte limit", len, max_bytes);
    return NULL;
  }
  parser ps = {text, len, 0, 0};
  sp_json *v = sp_xcalloc(1, sizeof *v);
  if (parse_value(&ps, v)) {
    free(v);
    return NULL;
  }
  skip_ws(&ps);
  if (ps.pos != len) {
    fail_at(ps.pos, "unexpected data after the value");
    sp_json_free(v);
    return NULL;
  }
  return v;
}

/* ----------------------------------------------------------------- lookups */

const char *sp_json_type_name(sp_json_type t) {
  static const char *names[] = {"null", "bool", "number", "string", "array", "object"};
  return (unsigned)t < 6 ? names[t] : "?";
}

const sp_json *sp_json_get(const sp_json *obj, const char *key) {
  if (!obj || obj->type != SP_JSON_OBJECT || !key) return NULL;
  size_t kl = strlen(key);
  for (size_t i = 0; i < obj->u.obj.n; i++)
    if (obj->u.obj.key_lens[i] == kl && !memcmp(obj->u.obj.keys[i], key, kl)) return &obj->u.obj.vals[i];
  return NULL;
}

size_t sp_json_len(const sp_json *v) {
  if (!v) return 0;
  if (v->type == SP_JSON_ARRAY) return v->u.arr.n;
  if (v->type == SP_JSON_OBJECT) return v->u.obj.n;
  return 0;
}

const sp_json *sp_json_at(const sp_json *arr, size_t i) {
  if (!arr || arr->type != SP_JSON_ARRAY || i >= arr->u.arr.n) return NULL;
  return &arr->u.arr.items[i];
}

const char *sp_json_key_at(const sp_json *obj, size_t i) {
  if (!obj || obj->type != SP_JSON_OBJECT || i >= obj->u.obj.n) return NULL;
  return obj->u.obj.keys[i];
}

const sp_json *sp_json_value_at(const sp_json *obj, size_t i) {
  if (!obj || obj->type != SP_JSON_OBJECT || i >= obj->u.obj.n) return NULL;
  return &obj->u.obj.vals[i];
}

const char *sp_json_as_string(const sp_json *v) { return v && v->type == SP_JSON_STRING ? v->u.str.s : NULL; }

int sp_json_as_int64(const sp_json *v, int64_t lo, int64_t hi, int64_t *out) {
  if (!v) return sp_error_set("expected an integer, got nothing");
  if (v->type != SP_JSON_NUMBER)
    return sp_error_set("expected an integer, got %s at byte %zu", sp_json_type_name(v->type), v->offset);
  if (!v->u.num.is_int || v->u.num.i < lo || v->u.num.i > hi)
    return sp_error_set("expected an integer in [%lld, %lld], got %.17g at byte %zu", (long long)lo, (long long)hi,
                        v->u.num.d, v->offset);
  *out = v->u.num.i;
  return 0;
}

int sp_json_as_double(const sp_json *v, double *out) {
  if (!v) return sp_error_set("expected a number, got nothing");
  if (v->type != SP_JSON_NUMBER)
    return sp_error_set("expected a number, got %s at byte %zu", sp_json_type_name(v->type), v->offset);
  *out = v->u.num.d;
  return 0;
}

/* ------------------------------------------------------------------ writer */

void sp_json_buf_init(sp_json_buf *b) { memset(b, 0, sizeof *b); }

void sp_json_buf_free(sp_json_buf *b) {
  free(b->s);
  memset(b, 0, sizeof *b);
}

void sp_json_buf_clear(sp_json_buf *b) {
  b->len = 0;
  if (b->s) b->s[0] = 0;
}

void sp_json_raw(sp_json_buf *b, const char *s, size_t n) {
  if (b->len + n + 1 > b->cap) {
    size_t c = b->cap ? b->cap : 64;
    while (c < b->len + n + 1) c *= 2;
    b->s = sp_xrealloc(b->s, c);
    b->cap = c;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}

static void put(sp_json_buf *b, const char *s) { sp_json_raw(b, s, strlen(s)); }

/* A new value or key needs a comma unless it opens a container, follows a
 * key, or starts a new line (one JSON document per line). */
static void sep(sp_json_buf *b) {
  if (!b->len) return;
  char last = b->s[b->len - 1];
  if (last != '{' && last != '[' && last != ':' && last != ',' && last != '\n') put(b, ",");
}

void sp_json_obj_begin(sp_json_buf *b) {
  sep(b);
  put(b, "{");
}
void sp_json_obj_end(sp_json_buf *b) { put(b, "}"); }
void sp_json_arr_begin(sp_json_buf *b) {
  sep(b);
  put(b, "[");
}
void sp_json_arr_end(sp_json_buf *b) { put(b, "]"); }

static void escaped(sp_json_buf *b, const char *s, size_t n) {
  put(b, "\"");
  size_t run = 0; /* copy unescaped stretches in one go */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *e = NULL;
    char u[8];
    switch (c) {
      case '"': e = "\\\""; break;
      case '\\': e = "\\\\"; break;
      case '\n': e = "\\n"; break;
      case '\r': e = "\\r"; break;
      case '\t': e = "\\t"; break;
      case '\b': e = "\\b"; break;
      case '\f': e = "\\f"; break;
      default:
        if (c < 0x20) {
          snprintf(u, sizeof u, "\\u%04x", c);
          e = u;
        }
    }
    if (!e) continue;
    sp_json_raw(b, s + run, i - run);
    put(b, e);
    run = i + 1;
  }
  sp_json_raw(b, s + run, n - run);
  put(b, "\"");
}

void sp_json_key(sp_json_buf *b, const char *key) {
  sep(b);
  escaped(b, key, strlen(key));
  put(b, ":");
}

void sp_json_str(sp_json_buf *b, const char *s) { sp_json_strn(b, s, strlen(s)); }
void sp_json_strn(sp_json_buf *b, const char *s, size_t n) {
  sep(b);
  escaped(b, s, n);
}

void sp_json_int(sp_json_buf *b, int64_t v) {
  char t[32];
  snprintf(t, sizeof t, "%lld", (long long)v);
  sep(b);
  put(b, t);
}

void sp_json_u64(sp_json_buf *b, uint64_t v) {
  char t[32];
  snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  sep(b);
  put(b, t);
}

/* printf honours LC_NUMERIC; JSON always wants '.'. */
static void c_locale_point(char *t) {
  for (; *t; t++)
    if (*t == ',') *t = '.';
}

/* The shortest %g of an ordinary number can be "3.3e+02" (330 to two
 * digits): the same digits in plain notation read better and parse the same. */
static void plain_if_short(char *t, size_t n, double v, int digits) {
  if (!strchr(t, 'e') || !(fabs(v) >= 1e-4 && fabs(v) < 1e15)) return;
  int decimals = digits - 1 - (int)floor(log10(fabs(v)));
  snprintf(t, n, "%.*f", decimals > 0 ? decimals : 0, v);
  c_locale_point(t);
}

void sp_json_f32(sp_json_buf *b, float v) {
  if (!isfinite(v)) {
    sp_json_null(b);
    return;
  }
  char t[48];
  int p = 1;
  for (; p <= 9; p++) { /* 9 digits always round-trip a float */
    snprintf(t, sizeof t, "%.*g", p, (double)v);
    c_locale_point(t);
    if ((float)strtod(t, NULL) == v) break;
  }
  plain_if_short(t, sizeof t, v, p);
  sep(b);
  put(b, t);
}

void sp_json_f64(sp_json_buf *b, double v) {
  if (!isfinite(v)) {
    sp_json_null(b);
    return;
  }
  char t[48];
  int p = 1;
  for (; p <= 17; p++) { /* 17 digits always round-trip a double */
    snprintf(t, sizeof t, "%.*g", p, v);
    c_locale_point(t);
    if (strtod(t, NULL) == v) break;
  }
  plain_if_short(t, sizeof t, v, p);
  sep(b);
  put(b, t);
}

void sp_json_bool(sp_json_buf *b, int v) {
  sep(b);
  put(b, v ? "true" : "false");
}
void sp_json_null(sp_json_buf *b) {
  sep(b);
  put(b, "null");
}
