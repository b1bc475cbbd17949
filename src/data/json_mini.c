/* A small strict JSON reader building a tree: enough for COCO keypoint files
 * (objects, arrays, numbers, strings with escapes). Kept inside data/ so the
 * layer has no dependency on io/. Depth is bounded to survive hostile input. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

typedef struct {
  const char *s, *end, *start;
  char *err;
  size_t errlen;
  int depth;
} parser;

static int fail(parser *p, const char *what) {
  if (p->err && !p->err[0]) snprintf(p->err, p->errlen, "%s at byte %ld", what, (long)(p->s - p->start));
  return -1;
}

static void skip_ws(parser *p) {
  while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t')) p->s++;
}

static int parse_value(parser *p, sp_json *out);

static int parse_string(parser *p, char **out) {
  if (p->s >= p->end || *p->s != '"') return fail(p, "expected string");
  p->s++;
  size_t cap = 16, n = 0;
  char *b = sp_xmalloc(cap);
  while (p->s < p->end && *p->s != '"') {
    char c = *p->s++;
    if (c == '\\') {
      if (p->s >= p->end) break;
      char e = *p->s++;
      switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u': {
          /* Non-ASCII escapes are rare in file names; keep ASCII, else '?'. */
          unsigned v = 0;
          for (int i = 0; i < 4; i++) {
            if (p->s >= p->end) {
              free(b);
              return fail(p, "short \\u escape");
            }
            char h = *p->s++, l = (char)(h | 32);
            if (!((h >= '0' && h <= '9') || (l >= 'a' && l <= 'f'))) {
              free(b);
              return fail(p, "bad \\u escape");
            }
            v = v * 16 + (unsigned)(h <= '9' ? h - '0' : l - 'a' + 10);
          }
          c = v < 128 ? (char)v : '?';
          break;
        }
        default: c = e;
      }
    }
    if (n + 2 > cap) b = sp_xrealloc(b, cap *= 2);
    b[n++] = c;
  }
  if (p->s >= p->end) {
    free(b);
    return fail(p, "unterminated string");
  }
  p->s++;
  b[n] = 0;
  *out = b;
  return 0;
}

static void push(sp_json *j, int *cap) {
  if (j->n == *cap) {
    *cap = *cap ? 2 * *cap : 4;
    j->items = sp_xrealloc(j->items, sizeof(sp_json) * (size_t)*cap);
    if (j->type == SPJ_OBJ) j->keys = sp_xrealloc(j->keys, sizeof(char *) * (size_t)*cap);
  }
}

static int parse_container(parser *p, sp_json *out, int is_obj) {
  char close = is_obj ? '}' : ']';
  out->type = is_obj ? SPJ_OBJ : SPJ_ARR;
  int cap = 0;
  p->s++;
  if (++p->depth > 64) return fail(p, "nesting too deep");
  skip_ws(p);
  if (p->s < p->end && *p->s == close) {
    p->s++;
    p->depth--;
    return 0;
  }
  for (;;) {
    skip_ws(p);
    char *key = NULL;
    if (is_obj) {
      if (parse_string(p, &key) != 0) return -1;
      skip_ws(p);
      if (p->s >= p->end || *p->s != ':') {
        free(key);
        return fail(p, "expected ':'");
      }
      p->s++;
    }
    push(out, &cap);
    if (is_obj) out->keys[out->n] = key;
    memset(&out->items[out->n], 0, sizeof(sp_json));
    out->n++; /* counted before parsing so a failure frees what was made */
    if (parse_value(p, &out->items[out->n - 1]) != 0) return -1;
    skip_ws(p);
    if (p->s < p->end && *p->s == ',') {
      p->s++;
      continue;
    }
    if (p->s < p->end && *p->s == close) {
      p->s++;
      p->depth--;
      return 0;
    }
    return fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int parse_value(parser *p, sp_json *out) {
  skip_ws(p);
  if (p->s >= p->end) return fail(p, "unexpected end");
  char c = *p->s;
  if (c == '{') return parse_container(p, out, 1);
  if (c == '[') return parse_container(p, out, 0);
  if (c == '"') {
    out->type = SPJ_STR;
    return parse_string(p, &out->str);
  }
  if (!strncmp(p->s, "true", 4) || !strncmp(p->s, "null", 4)) {
    out->type = c == 't' ? SPJ_BOOL : SPJ_NULL;
    out->num = c == 't';
    p->s += 4;
    return 0;
  }
  if (!strncmp(p->s, "false", 5)) {
    out->type = SPJ_BOOL;
    p->s += 5;
    return 0;
  }
  /* JSON numbers only: strtod alone would also take "nan", "inf", hex and
   * a leading '+' or '.', none of which is JSON. */
  const char *q = p->s;
  if (q < p->end && *q == '-') q++;
  if (q >= p->end || *q < '0' || *q > '9') return fail(p, "unexpected character");
  char *e;
  out->num = strtod(p->s, &e);
  if (e == p->s) return fail(p, "unexpected character");
  for (const char *c = p->s; c < e; c++)
    if (!strchr("+-.0123456789eE", *c)) return fail(p, "not a JSON number");
  out->type = SPJ_NUM;
  p->s = e;
  return 0;
}

int sp_djson_parse(const char *text, size_t len, sp_json *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (err && errlen) err[0] = 0;
  /* strtod needs a terminator: callers pass NUL-terminated buffers (sp_read_file). */
  parser p = {text, text + len, text, err, errlen, 0};
  if (parse_value(&p, out) != 0) {
    sp_djson_free(out);
    return -1;
  }
  skip_ws(&p);
  if (p.s != p.end) {
    fail(&p, "trailing characters");
    sp_djson_free(out);
    return -1;
  }
  return 0;
}

void sp_djson_free(sp_json *j) {
  if (!j) return;
  for (int i = 0; i < j->n; i++) {
    sp_djson_free(&j->items[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->items);
  free(j->keys);
  free(j->str);
  memset(j, 0, sizeof *j);
}

const sp_json *sp_djson_get(const sp_json *obj, const char *key) {
  if (!obj || obj->type != SPJ_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (!strcmp(obj->keys[i], key)) return &obj->items[i];
  return NULL;
}
