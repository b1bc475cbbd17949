/* io/json: strict parsing (valid and hostile documents) and the writer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "testkit.h"

#define BIG ((size_t)1 << 20)

static sp_json *parse(const char *s) { return sp_json_parse(s, strlen(s), BIG); }

static void valid_document_with_nesting_and_key_order(void **state) {
  (void)state;
  const char *doc =
      " {\"z\": 1, \"a\": [true, false, null, [], {}],\n"
      "  \"m\": {\"deep\": {\"er\": [1, [2, [3]]]}}, \"s\": \"x\"}\t\r\n";
  sp_json *v = parse(doc);
  assert_non_null(v);
  assert_int_equal(v->type, SP_JSON_OBJECT);
  assert_int_equal(sp_json_len(v), 4);
  /* Key order is the document's, not sorted. */
  assert_string_equal(sp_json_key_at(v, 0), "z");
  assert_string_equal(sp_json_key_at(v, 1), "a");
  assert_string_equal(sp_json_key_at(v, 2), "m");
  assert_string_equal(sp_json_key_at(v, 3), "s");
  const sp_json *a = sp_json_get(v, "a");
  assert_int_equal(sp_json_len(a), 5);
  assert_int_equal(sp_json_at(a, 0)->type, SP_JSON_BOOL);
  assert_true(sp_json_at(a, 0)->u.boolean);
  assert_false(sp_json_at(a, 1)->u.boolean);
  assert_int_equal(sp_json_at(a, 2)->type, SP_JSON_NULL);
  assert_int_equal(sp_json_at(a, 3)->type, SP_JSON_ARRAY);
  assert_int_equal(sp_json_len(sp_json_at(a, 3)), 0);
  assert_int_equal(sp_json_at(a, 4)->type, SP_JSON_OBJECT);
  assert_null(sp_json_at(a, 5));
  const sp_json *er = sp_json_get(sp_json_get(sp_json_get(v, "m"), "deep"), "er");
  int64_t three;
  assert_int_equal(sp_json_as_int64(sp_json_at(sp_json_at(sp_json_at(er, 1), 1), 0), 0, 10, &three), 0);
  assert_int_equal(three, 3);
  assert_string_equal(sp_json_as_string(sp_json_get(v, "s")), "x");
  assert_null(sp_json_get(v, "missing"));
  assert_null(sp_json_get(a, "z")); /* not an object */
  assert_null(sp_json_as_string(sp_json_get(v, "z")));
  /* Offsets point at the value in the text. */
  assert_int_equal(sp_json_get(v, "s")->offset, strstr(doc, "\"x\"") - doc);
  sp_json_free(v);
}

static void string_escapes_and_unicode(void **state) {
  (void)state;
  sp_json *v = parse("[\"q\\\"b\\\\s\\/n\\nr\\rt\\tb\\bf\\f\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\","
                     " \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\", \"a\\u0000b\"]");
  assert_non_null(v);
  assert_string_equal(sp_json_as_string(sp_json_at(v, 0)), "q\"b\\s/n\nr\rt\tb\bf\f");
  assert_string_equal(sp_json_as_string(sp_json_at(v, 1)), "\xc3\xa9\xe2\x82\xac");
  assert_string_equal(sp_json_as_string(sp_json_at(v, 2)), "\xf0\x9f\x98\x80");
  assert_string_equal(sp_json_as_string(sp_json_at(v, 3)), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  const sp_json *nul = sp_json_at(v, 4);
  assert_int_equal(nul->u.str.len, 3);
  assert_memory_equal(nul->u.str.s, "a\0b", 3);
  sp_json_free(v);
}

static void numbers_keep_exact_integers(void **state) {
  (void)state;
  sp_json *v = parse("[0, -0, 123, -9223372036854775808, 9223372036854775807, 9223372036854775808,"
                     " 2.5, -1.5e3, 1E2, 0.0001, 1e400]");
  assert_non_null(v);
  const sp_json *n;
  int64_t i;
  n = sp_json_at(v, 2);
  assert_true(n->u.num.is_int);
  assert_int_equal(n->u.num.i, 123);
  n = sp_json_at(v, 3);
  assert_true(n->u.num.is_int);
  assert_true(n->u.num.i == INT64_MIN);
  n = sp_json_at(v, 4);
  assert_true(n->u.num.is_int);
  assert_true(n->u.num.i == INT64_MAX);
  n = sp_json_at(v, 5); /* 2^63 does not fit: a double, not an integer */
  assert_false(n->u.num.is_int);
  assert_true(n->u.num.d == 9223372036854775808.0);
  assert_int_equal(sp_json_as_int64(n, INT64_MIN, INT64_MAX, &i), -1);
  n = sp_json_at(v, 6);
  assert_false(n->u.num.is_int);
  assert_true(n->u.num.d == 2.5);
  assert_int_equal(sp_json_as_int64(n, 0, 10, &i), -1);
  assert_non_null(strstr(sp_last_error(), "2.5"));
  assert_true(sp_json_at(v, 7)->u.num.d == -1500.0);
  assert_false(sp_json_at(v, 8)->u.num.is_int); /* exponent form is not an integer literal */
  assert_true(sp_json_at(v, 8)->u.num.d == 100.0);
  assert_true(sp_json_at(v, 9)->u.num.d == 0.0001);
  assert_true(isinf(sp_json_at(v, 10)->u.num.d));
  /* Range checks. */
  assert_int_equal(sp_json_as_int64(sp_json_at(v, 2), 0, 100, &i), -1);
  assert_non_null(strstr(sp_last_error(), "[0, 100]"));
  assert_int_equal(sp_json_as_int64(sp_json_at(v, 2), 0, 123, &i), 0);
  assert_int_equal(i, 123);
  double d;
  assert_int_equal(sp_json_as_double(sp_json_at(v, 6), &d), 0);
  assert_true(d == 2.5);
  sp_json_free(v);

  sp_json *s = parse("\"7\"");
  assert_int_equal(sp_json_as_int64(s, 0, 10, &i), -1);
  assert_non_null(strstr(sp_last_error(), "string"));
  assert_int_equal(sp_json_as_double(s, &d), -1);
  sp_json_free(s);
}

static void depth_limit_is_64(void **state) {
  (void)state;
  char buf[2100];
  for (int depth = 63; depth <= 65; depth++) {
    int n = 0;
    for (int i = 0; i < depth; i++) buf[n++] = '[';
    for (int i = 0; i < depth; i++) buf[n++] = ']';
    sp_json *v = sp_json_parse(buf, (size_t)n, BIG);
    if (depth <= 64) {
      assert_non_null(v);
      sp_json_free(v);
    } else {
      assert_null(v);
      assert_non_null(strstr(sp_last_error(), "nesting"));
    }
  }
}

typedef struct {
  const char *text;
  size_t len; /* 0: strlen */
  const char *reason;
  long offset; /* expected "at byte N", -1 to skip */
} bad_doc;

static void invalid_documents_refused_with_offset(void **state) {
  (void)state;
  static const bad_doc bad[] = {
      {"[1,2,]", 0, "unexpected character", 5},
      {"{\"a\":1,}", 0, "expected a string key", 7},
      {"\"abc", 0, "unterminated string", 0},
      {"[\"abc\\\"]", 0, "unterminated string", 1},
      {"{\"a\":\"b", 0, "unterminated string", 5},
      {"\"\\x\"", 0, "bad escape", 1},
      {"\"\\u12G4\"", 0, "bad hex digit", 1},
      {"\"\\u12\"", 0, "\\u escape", 1},
      {"\"\\udc00\"", 0, "lone low surrogate", 1},
      {"\"\\ud800x\"", 0, "high surrogate", 1},
      {"\"\\ud800\\u0041\"", 0, "high surrogate", 1},
      {"{} x", 0, "unexpected data after", 3},
      {"1 2", 0, "unexpected data after", 2},
      {"[1] ]", 0, "unexpected data after", 4},
      {"", 0, "unexpected end of input", 0},
      {"   ", 0, "unexpected end of input", 3},
      {"[1,", 0, "unexpected end of input", 3},
      {"[1", 0, "unterminated array", 0},
      {"[1 2]", 0, "expected ',' or ']'", 3},
      {"{\"a\" 1}", 0, "expected ':'", 5},
      {"{\"a\":1 \"b\":2}", 0, "expected ',' or '}'", 7},
      {"{1:2}", 0, "expected a string key", 1},
      {"{'a':1}", 0, "expected a string key", 1},
      {"01", 0, "leading zero", 0},
      {"1.", 0, "digits must follow", 0},
      {".5", 0, "unexpected character", 0},
      {"+1", 0, "unexpected character", 0},
      {"-", 0, "invalid number", 0},
      {"1e", 0, "exponent", 0},
      {"NaN", 0, "unexpected character", 0},
      {"tru", 0, "invalid literal", 0},
      {"nul", 0, "invalid literal", 0},
      {"\"a\nb\"", 0, "control character", 2},
      {"\"\xff\"", 0, "invalid UTF-8", 1},
      {"\"\xc0\x80\"", 0, "invalid UTF-8", 1},       /* overlong NUL */
      {"\"\xed\xa0\x80\"", 0, "invalid UTF-8", 1},   /* encoded surrogate */
      {"\"\xf4\x90\x80\x80\"", 0, "invalid UTF-8", 1}, /* past U+10FFFF */
      {"\"\xe2\x82\"", 0, "invalid UTF-8", 1},       /* truncated sequence */
      {"[1]\0", 4, "unexpected data after", 3},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    const bad_doc *b = &bad[k];
    size_t n = b->len ? b->len : strlen(b->text);
    sp_error_clear();
    sp_json *v = sp_json_parse(b->text, n, BIG);
    if (v) fail_msg("accepted bad document #%zu: %s", k, b->text);
    const char *e = sp_last_error();
    if (!strstr(e, b->reason)) fail_msg("doc #%zu '%s': error '%s' lacks '%s'", k, b->text, e, b->reason);
    char at[48];
    snprintf(at, sizeof at, "at byte %ld", b->offset);
    if (b->offset >= 0 && !strstr(e, at)) fail_msg("doc #%zu '%s': error '%s' lacks '%s'", k, b->text, e, at);
  }
}

static void depth_1000_refused(void **state) {
  (void)state;
  char *s = malloc(6000); /* 1000 x "{\"a\":" */
  for (int i = 0; i < 1000; i++) {
    s[i] = '[';
    s[1000 + i] = ']';
  }
  assert_null(sp_json_parse(s, 2000, BIG));
  assert_non_null(strstr(sp_last_error(), "nesting deeper than 64"));
  assert_non_null(strstr(sp_last_error(), "at byte 64"));
  /* Objects count too. */
  int n = 0;
  for (int i = 0; i < 1000; i++) n += sprintf(s + n, "{\"a\":");
  assert_null(sp_json_parse(s, (size_t)n, BIG));
  assert_non_null(strstr(sp_last_error(), "nesting"));
  free(s);
}

static void size_limit_and_unterminated_buffers(void **state) {
  (void)state;
  const char *doc = "{\"a\": [1, 2, 3]}";
  assert_null(sp_json_parse(doc, strlen(doc), 8));
  assert_non_null(strstr(sp_last_error(), "limit"));
  sp_json *v = sp_json_parse(doc, strlen(doc), strlen(doc));
  assert_non_null(v);
  sp_json_free(v);
  /* The parser must stop at len even when the bytes after it would finish
   * the document: every prefix is refused and never read past. */
  for (size_t n = 0; n < strlen(doc); n++) {
    char *copy = malloc(n ? n : 1); /* exact size: ASan flags any over-read */
    memcpy(copy, doc, n);
    assert_null(sp_json_parse(copy, n, BIG));
    free(copy);
  }
}

static void writer_produces_parseable_compact_json(void **state) {
  (void)state;
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "a");
  sp_json_int(&b, 1);
  sp_json_key(&b, "b");
  sp_json_arr_begin(&b);
  sp_json_int(&b, 1);
  sp_json_int(&b, -2);
  sp_json_arr_begin(&b);
  sp_json_arr_end(&b);
  sp_json_arr_end(&b);
  sp_json_key(&b, "q\"k");
  sp_json_str(&b, "x\"y\\z\n\t\x01\xc3\xa9");
  sp_json_key(&b, "t");
  sp_json_bool(&b, 1);
  sp_json_key(&b, "n");
  sp_json_null(&b);
  sp_json_obj_end(&b);
  assert_string_equal(b.s, "{\"a\":1,\"b\":[1,-2,[]],\"q\\\"k\":\"x\\\"y\\\\z\\n\\t\\u0001\xc3\xa9\",\"t\":true,\"n\":null}");
  sp_json *v = sp_json_parse(b.s, b.len, BIG);
  assert_non_null(v);
  assert_string_equal(sp_json_as_string(sp_json_get(v, "q\"k")), "x\"y\\z\n\t\x01\xc3\xa9");
  sp_json_free(v);

  /* One object per line: a newline ends a document, no comma follows it. */
  sp_json_buf_clear(&b);
  sp_json_obj_begin(&b);
  sp_json_obj_end(&b);
  sp_json_raw(&b, "\n", 1);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "x");
  sp_json_int(&b, INT64_MIN);
  sp_json_key(&b, "u");
  sp_json_u64(&b, UINT64_MAX);
  sp_json_obj_end(&b);
  assert_string_equal(b.s, "{}\n{\"x\":-9223372036854775808,\"u\":18446744073709551615}");
  sp_json_buf_free(&b);
}

static void writer_floats_are_shortest_round_trip(void **state) {
  (void)state;
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_f32(&b, 0.1f);
  assert_string_equal(b.s, "0.1");
  sp_json_buf_clear(&b);
  sp_json_f64(&b, 0.1);
  assert_string_equal(b.s, "0.1");
  sp_json_buf_clear(&b);
  sp_json_f64(&b, 1.0 / 3.0);
  assert_string_equal(b.s, "0.3333333333333333");
  sp_json_buf_clear(&b);
  sp_json_f32(&b, 1.0f / 3.0f);
  assert_string_equal(b.s, "0.33333334");
  sp_json_buf_clear(&b);
  sp_json_f32(&b, NAN);
  sp_json_f64(&b, -INFINITY);
  sp_json_f32(&b, 2.0f);
  assert_string_equal(b.s, "null,null,2");
  sp_json_buf_free(&b);

  /* Random bit patterns read back bit-exactly through our own parser. */
  sp_test_rng r = {42};
  for (int k = 0; k < 5000; k++) {
    uint64_t bits = sp_test_rng_next(&r);
    uint32_t fb = (uint32_t)bits;
    float f;
    double d;
    memcpy(&f, &fb, 4);
    memcpy(&d, &bits, 8);
    if (!isfinite(f) || !isfinite(d)) continue;
    sp_json_buf_init(&b);
    sp_json_arr_begin(&b);
    sp_json_f32(&b, f);
    sp_json_f64(&b, d);
    sp_json_arr_end(&b);
    sp_json *v = sp_json_parse(b.s, b.len, BIG);
    assert_non_null(v);
    float f2 = (float)sp_json_at(v, 0)->u.num.d;
    double d2 = sp_json_at(v, 1)->u.num.d;
    if (memcmp(&f2, &f, 4) || memcmp(&d2, &d, 8)) fail_msg("round trip failed: %s", b.s);
    sp_json_free(v);
    sp_json_buf_free(&b);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_document_with_nesting_and_key_order),
      cmocka_unit_test(string_escapes_and_unicode),
      cmocka_unit_test(numbers_keep_exact_integers),
      cmocka_unit_test(depth_limit_is_64),
      cmocka_unit_test(invalid_documents_refused_with_offset),
      cmocka_unit_test(depth_1000_refused),
      cmocka_unit_test(size_limit_and_unterminated_buffers),
      cmocka_unit_test(writer_produces_parseable_compact_json),
      cmocka_unit_test(writer_floats_are_shortest_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
