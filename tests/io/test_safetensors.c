/* io/safetensors: round trips, hostile files, atomic saves. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spry/safetensors.h"
#include "testkit.h"

static char g_dir[256];

static int setup(void **state) {
  (void)state;
  return sp_test_tmpdir(g_dir, sizeof g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  sp_test_rmtree(g_dir);
  return 0;
}

static const char *tmp_path(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", g_dir, name);
  return buf;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (n) assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc((size_t)sz + 1);
  assert_int_equal(fread(p, 1, (size_t)sz, f), (size_t)sz);
  fclose(f);
  *n = (size_t)sz;
  return p;
}

/* A file with the given header length field, header text and zeroed data. */
static void write_st(const char *path, uint64_t hlen_field, const char *header, size_t data_bytes) {
  size_t h = strlen(header), n = 8 + h + data_bytes;
  unsigned char *p = calloc(1, n);
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(hlen_field >> (8 * i));
  memcpy(p + 8, header, h);
  write_bytes(path, p, n);
  free(p);
}

/* The file must be refused, naming the file and containing `reason`. */
static void expect_refused(const char *path, const char *reason) {
  sp_error_clear();
  sp_st_file *f = sp_st_open(path);
  if (f) {
    sp_st_close(f);
    fail_msg("%s was accepted (expected: %s)", path, reason);
  }
  const char *e = sp_last_error();
  if (!strstr(e, path) || !strstr(e, reason)) fail_msg("error '%s' should name %s and say '%s'", e, path, reason);
}

static void refuse_header(const char *name, const char *header, size_t data_bytes, const char *reason) {
  char p[512];
  tmp_path(name, p, sizeof p);
  write_st(p, strlen(header), header, data_bytes);
  expect_refused(p, reason);
}

static int count_tmp_files(void) {
  DIR *d = opendir(g_dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)))
    if (strstr(de->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

/* ---------------------------------------------------------------- round trip */

static void round_trip_all_dtypes_scalars_empty_and_metadata(void **state) {
  (void)state;
  sp_test_rng r = {7};
  sp_tensor f32 = sp_tensor_alloc(SP_F32, sp_shape2(2, 3));
  sp_test_fill_uniform(&r, f32.data, 6, -3, 3);
  sp_tensor bf = sp_tensor_alloc(SP_BF16, sp_shape1(5));
  for (int i = 0; i < 5; i++) ((uint16_t *)bf.data)[i] = sp_f32_to_bf16((float)i - 2.25f);
  /* 15 bytes: every later tensor lands at an odd offset in the buffer. */
  sp_tensor u8 = sp_tensor_alloc(SP_U8, sp_shape2(3, 5));
  for (int i = 0; i < 15; i++) ((uint8_t *)u8.data)[i] = (uint8_t)(i * 17);
  sp_tensor i32 = sp_tensor_alloc(SP_I32, sp_shape3(2, 1, 2));
  int32_t iv[4] = {INT32_MIN, -1, 0, INT32_MAX};
  memcpy(i32.data, iv, sizeof iv);
  float scalar_v = 6.5f;
  sp_tensor scalar = sp_tensor_view(SP_F32, sp_shape_make(0, NULL), &scalar_v);
  sp_tensor empty = sp_tensor_view(SP_F32, sp_shape2(0, 3), NULL);
  sp_tensor empty_u8 = sp_tensor_view(SP_U8, sp_shape1(0), NULL);

  sp_st_writer *w = sp_st_writer_new();
  assert_int_equal(sp_st_writer_add(w, "conv.weight", &f32), 0);
  assert_int_equal(sp_st_writer_add(w, "bn.gamma", &bf), 0);
  assert_int_equal(sp_st_writer_add(w, "lut", &u8), 0);
  assert_int_equal(sp_st_writer_add(w, "steps", &i32), 0);
  assert_int_equal(sp_st_writer_add(w, "scale", &scalar), 0);
  assert_int_equal(sp_st_writer_add(w, "empty", &empty), 0);
  assert_int_equal(sp_st_writer_add(w, "empty_u8", &empty_u8), 0);
  assert_int_equal(sp_st_writer_meta(w, "epoch", "3"), 0);
  assert_int_equal(sp_st_writer_meta(w, "config", "{\"lr\": 0.1, \"name\": \"r\\u00e9s\"}\n"), 0);
  assert_int_equal(sp_st_writer_meta(w, "epoch", "4"), 0); /* replaces */
  char path[512];
  tmp_path("model.safetensors", path, sizeof path);
  assert_int_equal(sp_st_writer_save(w, path), 0);
  sp_st_writer_free(w);
  assert_int_equal(count_tmp_files(), 0);

  /* Data starts 8-byte aligned in the file. */
  size_t n;
  unsigned char *raw = read_bytes(path, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
  assert_int_equal((8 + hlen) % 8, 0);
  assert_int_equal(n, 8 + hlen + 24 + 10 + 15 + 16 + 4);
  assert_int_equal(raw[8], '{');
  free(raw);

  sp_st_file *f = sp_st_open(path);
  if (!f) fail_msg("%s", sp_last_error());
  assert_int_equal(sp_st_count(f), 7);
  const char *order[] = {"conv.weight", "bn.gamma", "lut", "steps", "scale", "empty", "empty_u8"};
  for (int i = 0; i < 7; i++) assert_string_equal(sp_st_name(f, i), order[i]);
  assert_null(sp_st_name(f, 7));

  const sp_tensor *t = sp_st_get(f, "conv.weight");
  assert_non_null(t);
  assert_int_equal(t->dtype, SP_F32);
  assert_true(sp_shape_equal(&t->shape, &f32.shape));
  assert_memory_equal(t->data, f32.data, 24);
  t = sp_st_get(f, "bn.gamma");
  assert_int_equal(t->dtype, SP_BF16);
  assert_memory_equal(t->data, bf.data, 10);
  t = sp_st_get(f, "lut");
  assert_int_equal(t->dtype, SP_U8);
  assert_true(sp_shape_equal(&t->shape, &u8.shape));
  assert_memory_equal(t->data, u8.data, 15);
  t = sp_st_get(f, "steps");
  assert_int_equal(t->dtype, SP_I32);
  assert_true(sp_shape_equal(&t->shape, &i32.shape));
  assert_int_equal((uintptr_t)t->data % 4, 0); /* realigned copy */
  assert_memory_equal(t->data, iv, 16);
  t = sp_st_get(f, "scale");
  assert_int_equal(t->shape.ndim, 0);
  assert_int_equal((uintptr_t)t->data % 4, 0);
  assert_true(*(const float *)t->data == 6.5f);
  t = sp_st_get(f, "empty");
  assert_int_equal(t->shape.ndim, 2);
  assert_int_equal(t->shape.d[0], 0);
  assert_int_equal(t->shape.d[1], 3);
  assert_int_equal(sp_st_get(f, "empty_u8")->shape.d[0], 0);
  assert_null(sp_st_get(f, "nope"));

  assert_string_equal(sp_st_meta(f, "epoch"), "4");
  assert_string_equal(sp_st_meta(f, "config"), "{\"lr\": 0.1, \"name\": \"r\\u00e9s\"}\n");
  assert_null(sp_st_meta(f, "missing"));
  assert_int_equal(sp_st_meta_count(f), 2);
  assert_string_equal(sp_st_meta_key(f, 0), "epoch");

  /* read_into copies on an exact match and names both shapes otherwise. */
  sp_tensor dst = sp_tensor_alloc(SP_F32, sp_shape2(2, 3));
  assert_int_equal(sp_st_read_into(f, "conv.weight", &dst), 0);
  assert_memory_equal(dst.data, f32.data, 24);
  sp_tensor wrong = sp_tensor_alloc(SP_F32, sp_shape2(3, 2));
  assert_int_equal(sp_st_read_into(f, "conv.weight", &wrong), -1);
  assert_non_null(strstr(sp_last_error(), "[2,3]"));
  assert_non_null(strstr(sp_last_error(), "[3,2]"));
  sp_tensor wrong_dt = sp_tensor_alloc(SP_BF16, sp_shape2(2, 3));
  assert_int_equal(sp_st_read_into(f, "conv.weight", &wrong_dt), -1);
  assert_non_null(strstr(sp_last_error(), "BF16"));
  sp_tensor nodata = sp_tensor_view(SP_F32, sp_shape2(2, 3), NULL);
  assert_int_equal(sp_st_read_into(f, "conv.weight", &nodata), -1);
  assert_int_equal(sp_st_read_into(f, "nope", &dst), -1);
  assert_non_null(strstr(sp_last_error(), "nope"));
  sp_st_close(f);

  sp_tensor_free(&dst);
  sp_tensor_free(&wrong);
  sp_tensor_free(&wrong_dt);
  sp_tensor_free(&f32);
  sp_tensor_free(&bf);
  sp_tensor_free(&u8);
  sp_tensor_free(&i32);
}

static void empty_checkpoint_and_convenience_save(void **state) {
  (void)state;
  char path[512];
  tmp_path("empty.safetensors", path, sizeof path);
  sp_st_writer *w = sp_st_writer_new();
  assert_int_equal(sp_st_writer_save(w, path), 0);
  sp_st_writer_free(w);
  sp_st_file *f = sp_st_open(path);
  assert_non_null(f);
  assert_int_equal(sp_st_count(f), 0);
  assert_null(sp_st_get(f, "x"));
  sp_st_close(f);

  int32_t a[3] = {1, 2, 3};
  uint8_t b[2] = {9, 8};
  const char *names[] = {"a", "b"};
  sp_tensor ts[] = {sp_tensor_view(SP_I32, sp_shape1(3), a), sp_tensor_view(SP_U8, sp_shape2(1, 2), b)};
  tmp_path("conv.safetensors", path, sizeof path);
  assert_int_equal(sp_st_save_tensors(path, 2, names, ts, "{\"epoch\": \"7\", \"tag\": \"x\"}"), 0);
  f = sp_st_open(path);
  assert_non_null(f);
  assert_string_equal(sp_st_meta(f, "epoch"), "7");
  assert_memory_equal(sp_st_get(f, "a")->data, a, 12);
  assert_memory_equal(sp_st_get(f, "b")->data, b, 2);
  sp_st_close(f);
  assert_int_equal(sp_st_save_tensors(path, 2, names, ts, "{\"epoch\": 7}"), -1);
  assert_non_null(strstr(sp_last_error(), "object of strings"));
  assert_int_equal(sp_st_save_tensors(path, 2, names, ts, "[\"x\"]"), -1);
  assert_int_equal(sp_st_save_tensors(path, 2, names, ts, "{"), -1);
  const char *dup[] = {"a", "a"};
  assert_int_equal(sp_st_save_tensors(path, 2, dup, ts, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "duplicate"));
  assert_int_equal(count_tmp_files(), 0);
}

/* Whatever the header length, the data must start 8-byte aligned so mapped
 * tensors need no copy. */
static void header_is_padded_to_8_bytes(void **state) {
  (void)state;
  float x = 1.0f;
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(1), &x);
  char path[512], name[16] = "";
  tmp_path("pad.safetensors", path, sizeof path);
  for (int len = 1; len <= 8; len++) {
    strcat(name, "n");
    const char *names[] = {name};
    assert_int_equal(sp_st_save_tensors(path, 1, names, &t, NULL), 0);
    size_t n;
    unsigned char *raw = read_bytes(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    assert_int_equal((8 + hlen) % 8, 0);
    assert_int_equal(n, 8 + hlen + 4);
    free(raw);
    sp_st_file *f = sp_st_open(path);
    assert_non_null(f);
    assert_int_equal((uintptr_t)sp_st_get(f, name)->data % 8, 0); /* in the mapping, no copy needed */
    sp_st_close(f);
  }
}

static void writer_refuses_bad_tensors(void **state) {
  (void)state;
  float x[2] = {0};
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(2), x);
  sp_st_writer *w = sp_st_writer_new();
  assert_int_equal(sp_st_writer_add(w, "x", &t), 0);
  assert_int_equal(sp_st_writer_add(w, "x", &t), -1);
  assert_non_null(strstr(sp_last_error(), "duplicate tensor name 'x'"));
  assert_int_equal(sp_st_writer_add(w, "__metadata__", &t), -1);
  sp_tensor nodata = sp_tensor_view(SP_F32, sp_shape1(2), NULL);
  assert_int_equal(sp_st_writer_add(w, "y", &nodata), -1);
  sp_tensor neg = sp_tensor_view(SP_F32, sp_shape1(-1), x);
  assert_int_equal(sp_st_writer_add(w, "z", &neg), -1);
  sp_st_writer_free(w);
}

/* Python's safetensors writes no padding, so data may start unaligned. */
static void unaligned_foreign_file_is_realigned(void **state) {
  (void)state;
  char path[512];
  tmp_path("foreign.safetensors", path, sizeof path);
  const char *h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"__metadata__\":{\"format\":\"pt\"}}";
  size_t hl = strlen(h);
  assert_true((8 + hl) % 4 != 0);
  unsigned char buf[256] = {0};
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, h, hl);
  float v[2] = {1.5f, -2.0f};
  memcpy(buf + 8 + hl, v, 8);
  write_bytes(path, buf, 8 + hl + 8);
  sp_st_file *f = sp_st_open(path);
  if (!f) fail_msg("%s", sp_last_error());
  const sp_tensor *t = sp_st_get(f, "w");
  assert_int_equal((uintptr_t)t->data % 4, 0);
  assert_true(((const float *)t->data)[0] == 1.5f && ((const float *)t->data)[1] == -2.0f);
  assert_string_equal(sp_st_meta(f, "format"), "pt");
  sp_st_close(f);
}

/* ------------------------------------------------------------- hostile files */

static void truncated_files_refused(void **state) {
  (void)state;
  float x[16] = {1, 2, 3};
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape2(4, 4), x);
  char path[512], cut[512];
  tmp_path("whole.safetensors", path, sizeof path);
  const char *names[] = {"w"};
  assert_int_equal(sp_st_save_tensors(path, 1, names, &t, NULL), 0);
  size_t n;
  unsigned char *raw = read_bytes(path, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
  tmp_path("cut.safetensors", cut, sizeof cut);
  struct {
    size_t at;
    const char *reason;
  } cuts[] = {
      {0, "too short"},
      {4, "too short"},
      {7, "too short"},
      {8, "runs past the end of the file"},
      {20, "runs past the end of the file"},
      {8 + hlen - 1, "runs past the end of the file"},
      {8 + hlen, "past the end of the data"},
      {n - 4, "past the end of the data"},
      {n - 1, "past the end of the data"},
  };
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    write_bytes(cut, raw, cuts[k].at);
    expect_refused(cut, cuts[k].reason);
  }
  free(raw);
}

static void header_length_fields_refused(void **state) {
  (void)state;
  char p[512];
  tmp_path("huge.safetensors", p, sizeof p);
  write_st(p, (uint64_t)1 << 63, "{}", 0);
  expect_refused(p, "header length 9223372036854775808 runs past the end");
  write_st(p, UINT64_MAX, "{}", 0);
  expect_refused(p, "header length");
  write_st(p, 100, "{}", 16);
  expect_refused(p, "header length 100 runs past the end of the file (26 bytes)");

  /* Over the 100 MB limit while inside the file: a sparse file keeps this cheap. */
  tmp_path("bighdr.safetensors", p, sizeof p);
  uint64_t big = SP_ST_MAX_HEADER + 1;
  write_st(p, big, "{}", 0);
  assert_int_equal(truncate(p, (off_t)(8 + big)), 0);
  expect_refused(p, "header length 100000001 exceeds the 100000000 byte limit");
}

static void bad_json_headers_refused(void **state) {
  (void)state;
  refuse_header("badjson.st", "{\"a\":", 0, "bad JSON header");
  refuse_header("trailing.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},}", 4, "bad JSON header");
  refuse_header("garbage.st", "{} x", 0, "unexpected data after");
  refuse_header("array.st", "[1,2]", 0, "header must be a JSON object");
  refuse_header("entry.st", "{\"a\":[1]}", 0, "entry must be an object");
}

static void unsupported_dtypes_refused(void **state) {
  (void)state;
  const char *bad[] = {"F16", "F64", "I64", "BOOL", "f32", "F8_E4M3"};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    char h[256], reason[64];
    snprintf(h, sizeof h, "{\"w\":{\"dtype\":\"%s\",\"shape\":[2],\"data_offsets\":[0,8]}}", bad[k]);
    snprintf(reason, sizeof reason, "unsupported dtype '%s'", bad[k]);
    refuse_header("dtype.st", h, 8, reason);
  }
  refuse_header("nodtype.st", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"dtype\"");
  refuse_header("numdtype.st", "{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "\"dtype\"");
}

static void bad_shapes_refused(void **state) {
  (void)state;
  refuse_header("neg.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1,2],\"data_offsets\":[0,8]}}", 8, "negative");
  refuse_header("overflow.st",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,8]}}", 8,
                "overflow");
  refuse_header("overflow2.st",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 8,
                "overflow");
  refuse_header("sixd.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 8,
                "6 dimensions");
  refuse_header("frac.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[2.5],\"data_offsets\":[0,1]}}", 8, "integers");
  refuse_header("strdim.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}}", 8, "integers");
  refuse_header("noshape.st", "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,2]}}", 8, "\"shape\"");
  refuse_header("hugedim.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,2]}}",
                8, "integers");
}

static void bad_offsets_refused(void **state) {
  (void)state;
  refuse_header("past.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}", 16,
                "data_offsets [0,64] run past the end of the data (16 bytes)");
  char p[512];
  tmp_path("ckpt.safetensors", p, sizeof p);
  const char *h = "{\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[10,20],\"data_offsets\":[0,400]}}";
  write_st(p, strlen(h), h, 800);
  expect_refused(p, "tensor 'fc.weight': data_offsets [0,400] do not match shape [10,20] of F32 (800 bytes)");
  refuse_header("backwards.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
                "begin after end");
  refuse_header("one.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4]}}", 8, "data_offsets");
  refuse_header("three.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4,8]}}", 8, "data_offsets");
  refuse_header("negoff.st", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-4,0]}}", 8, "negative");
  refuse_header("bigoff.st",
                "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[18446744073709551615,18446744073709551615]}}",
                8, "data_offsets");
}

static void overlapping_and_duplicate_tensors_refused(void **state) {
  (void)state;
  refuse_header("overlap.st",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
                24, "overlap");
  refuse_header("same.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]},"
                "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                12, "overlap");
  refuse_header("dup.st",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                8, "duplicate tensor name 'a'");
  /* Empty tensors take no bytes, so sharing an offset is fine; gaps are fine. */
  char p[512];
  tmp_path("ok.st", p, sizeof p);
  const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                  "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[2,2]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}";
  write_st(p, strlen(h), h, 12);
  sp_st_file *f = sp_st_open(p);
  if (!f) fail_msg("%s", sp_last_error());
  assert_int_equal(sp_st_count(f), 3);
  sp_st_close(f);
}

static void bad_metadata_refused(void **state) {
  (void)state;
  refuse_header("metanum.st", "{\"__metadata__\":{\"epoch\":3}}", 0, "__metadata__ value for 'epoch' is number, not a string");
  refuse_header("metaobj.st", "{\"__metadata__\":{\"cfg\":{\"a\":\"b\"}}}", 0, "not a string");
  refuse_header("metaarr.st", "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ must be an object");
  refuse_header("metadup.st", "{\"__metadata__\":{\"a\":\"1\",\"a\":\"2\"}}", 0, "duplicate __metadata__ key 'a'");
  refuse_header("metatwice.st", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate __metadata__");
  refuse_header("metanul.st", "{\"__metadata__\":{\"a\":\"x\\u0000y\"}}", 0, "NUL");
  refuse_header("namenul.st", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "NUL");
}

static void missing_and_non_regular_files_refused(void **state) {
  (void)state;
  char p[512];
  expect_refused(tmp_path("does-not-exist.safetensors", p, sizeof p), "cannot open");
  expect_refused(g_dir, "not a regular file");
}

/* Random byte flips of a valid file: every outcome is a clean refusal or a
 * file whose tensors lie inside it (ASan checks the reads below). */
static void mutated_files_never_read_out_of_bounds(void **state) {
  (void)state;
  uint8_t a[6] = {1, 2, 3, 4, 5, 6};
  float b[3] = {1, 2, 3};
  const char *names[] = {"a", "b"};
  sp_tensor ts[] = {sp_tensor_view(SP_U8, sp_shape2(2, 3), a), sp_tensor_view(SP_F32, sp_shape1(3), b)};
  char p[512];
  tmp_path("base.safetensors", p, sizeof p);
  assert_int_equal(sp_st_save_tensors(p, 2, names, ts, "{\"k\":\"v\"}"), 0);
  size_t n;
  unsigned char *raw = read_bytes(p, &n);
  sp_test_rng r = {99};
  int iters = sp_test_sanitized() ? 3000 : 20000, opened = 0;
  for (int it = 0; it < iters; it++) {
    size_t len = n;
    unsigned char *m = malloc(n);
    memcpy(m, raw, n);
    int flips = 1 + (int)(sp_test_rng_next(&r) % 3);
    for (int k = 0; k < flips; k++) {
      size_t at = sp_test_rng_next(&r) % n;
      m[at] = (sp_test_rng_next(&r) & 1) ? (unsigned char)sp_test_rng_next(&r) : (unsigned char)("0123456789[]{},:\"-"[sp_test_rng_next(&r) % 18]);
    }
    if (sp_test_rng_next(&r) % 4 == 0) len = sp_test_rng_next(&r) % (n + 1);
    sp_st_file *f = sp_st_open_buffer(m, len, "mutant");
    free(m);
    if (!f) {
      assert_non_null(strstr(sp_last_error(), "mutant: "));
      continue;
    }
    opened++;
    unsigned sum = 0;
    for (int i = 0; i < sp_st_count(f); i++) {
      const sp_tensor *t = sp_st_get(f, sp_st_name(f, i));
      assert_non_null(t);
      size_t bytes = sp_tensor_bytes(t);
      for (size_t k = 0; k < bytes; k++) sum += ((const unsigned char *)t->data)[k];
    }
    (void)sum;
    sp_st_close(f);
  }
  assert_true(opened > 0); /* flips in the data section keep the file valid */
  free(raw);
}

/* ----------------------------------------------------------------- atomic save */

static void save_original(const char *path, float fill) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = fill;
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(64), x);
  const char *names[] = {"w"};
  assert_int_equal(sp_st_save_tensors(path, 1, names, &t, NULL), 0);
}

static void assert_original(const char *path, float fill) {
  sp_st_file *f = sp_st_open(path);
  if (!f) fail_msg("old checkpoint damaged: %s", sp_last_error());
  const sp_tensor *t = sp_st_get(f, "w");
  assert_non_null(t);
  assert_int_equal(t->shape.d[0], 64);
  for (int i = 0; i < 64; i++) assert_true(((const float *)t->data)[i] == fill);
  sp_st_close(f);
}

static void atomic_save_replaces_and_leaves_no_tmp(void **state) {
  (void)state;
  char p[512];
  tmp_path("atomic.safetensors", p, sizeof p);
  save_original(p, 1.0f);
  /* A reader holding the old file keeps seeing the old bytes after the
   * rename: the new file is a new inode. */
  sp_st_file *old = sp_st_open(p);
  assert_non_null(old);
  save_original(p, 2.0f);
  assert_original(p, 2.0f);
  assert_true(((const float *)sp_st_get(old, "w")->data)[0] == 1.0f);
  sp_st_close(old);
  assert_int_equal(count_tmp_files(), 0);
}

static void failed_save_keeps_old_file(void **state) {
  (void)state;
  char p[512], tmp[600];
  tmp_path("keep.safetensors", p, sizeof p);
  save_original(p, 3.0f);
  float y[64] = {0};
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(64), y);
  const char *names[] = {"w"};

  /* 1: the temporary file cannot be created (a directory is in the way). */
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
  assert_int_equal(mkdir(tmp, 0755), 0);
  assert_int_equal(sp_st_save_tensors(p, 1, names, &t, NULL), -1);
  assert_non_null(strstr(sp_last_error(), p));
  assert_int_equal(rmdir(tmp), 0);
  assert_original(p, 3.0f);

  /* 2: the disk "fills up" half way through the data. */
  struct rlimit old_lim, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_lim), 0);
  void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
  float big[4096] = {0};
  sp_tensor tb = sp_tensor_view(SP_F32, sp_shape1(4096), big);
  lim = old_lim;
  lim.rlim_cur = 4096;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int rc = sp_st_save_tensors(p, 1, names, &tb, NULL);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_lim), 0);
  signal(SIGXFSZ, old_sig);
  assert_int_equal(rc, -1);
  assert_non_null(strstr(sp_last_error(), "writing"));
  assert_original(p, 3.0f);
  assert_int_equal(count_tmp_files(), 0);

  /* 3: the final rename fails (the target is a non-empty directory). */
  char dirp[512], inner[600];
  tmp_path("isdir.safetensors", dirp, sizeof dirp);
  assert_int_equal(mkdir(dirp, 0755), 0);
  snprintf(inner, sizeof inner, "%s/x", dirp);
  write_bytes(inner, "x", 1);
  assert_int_equal(sp_st_save_tensors(dirp, 1, names, &t, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "renaming"));
  assert_int_equal(count_tmp_files(), 0);

  /* 4: a directory that does not exist. */
  char missing[600];
  snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", g_dir);
  assert_int_equal(sp_st_save_tensors(missing, 1, names, &t, NULL), -1);
  assert_non_null(strstr(sp_last_error(), "cannot create"));
}

static void unwritable_directory_keeps_old_file(void **state) {
  (void)state;
  if (geteuid() == 0) skip(); /* root writes anywhere */
  char sub[512], p[600];
  tmp_path("ro", sub, sizeof sub);
  assert_int_equal(mkdir(sub, 0755), 0);
  snprintf(p, sizeof p, "%s/ckpt.safetensors", sub);
  save_original(p, 5.0f);
  assert_int_equal(chmod(sub, 0555), 0);
  float y[64] = {0};
  sp_tensor t = sp_tensor_view(SP_F32, sp_shape1(64), y);
  const char *names[] = {"w"};
  int rc = sp_st_save_tensors(p, 1, names, &t, NULL);
  chmod(sub, 0755);
  assert_int_equal(rc, -1);
  assert_original(p, 5.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip_all_dtypes_scalars_empty_and_metadata),
      cmocka_unit_test(empty_checkpoint_and_convenience_save),
      cmocka_unit_test(header_is_padded_to_8_bytes),
      cmocka_unit_test(writer_refuses_bad_tensors),
      cmocka_unit_test(unaligned_foreign_file_is_realigned),
      cmocka_unit_test(truncated_files_refused),
      cmocka_unit_test(header_length_fields_refused),
      cmocka_unit_test(bad_json_headers_refused),
      cmocka_unit_test(unsupported_dtypes_refused),
      cmocka_unit_test(bad_shapes_refused),
      cmocka_unit_test(bad_offsets_refused),
      cmocka_unit_test(overlapping_and_duplicate_tensors_refused),
      cmocka_unit_test(bad_metadata_refused),
      cmocka_unit_test(missing_and_non_regular_files_refused),
      cmocka_unit_test(mutated_files_never_read_out_of_bounds),
      cmocka_unit_test(atomic_save_replaces_and_leaves_no_tmp),
      cmocka_unit_test(failed_save_keeps_old_file),
      cmocka_unit_test(unwritable_directory_keeps_old_file),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
