/* safetensors reader and atomic writer (see include/spry/safetensors.h). */
#define _GNU_SOURCE
#include "spry/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"

/* Tensor bytes are stored little-endian and we hand out pointers straight
 * into the file, so a big-endian host would need a byte-swapping path. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "spry safetensors I/O assumes a little-endian host"
#endif

typedef struct {
  char *name;
  sp_tensor t;
  uint64_t begin, end; /* relative to the data buffer */
  void *copy;          /* aligned copy when the in-file bytes are misaligned */
} st_entry;

struct sp_st_file {
  char *label;
  unsigned char *base;
  size_t size;
  int mapped;
  st_entry *e;
  int n;
  st_entry **by_name; /* sorted by name for lookup and duplicate detection */
  char **meta_key, **meta_val;
  int n_meta;
};

/* Sets "<label>: <reason>" as the thread's error. */
static int st_fail(const sp_st_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int st_fail(const sp_st_file *f, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sp_error_set("%s: %s", f->label, msg);
}

void sp_st_close(sp_st_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) {
    free(f->e[i].name);
    if (f->e[i].copy) sp_aligned_free(f->e[i].copy);
  }
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->e);
  free(f->by_name);
  free(f->meta_key);
  free(f->meta_val);
  if (f->mapped)
    munmap(f->base, f->size);
  else
    free(f->base);
  free(f->label);
  free(f);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* A JSON number that is a non-negative integer; the message names `what`. */
static int get_count(const sp_st_file *f, const char *tname, const sp_json *v, const char *what, int64_t *out) {
  if (!v || v->type != SP_JSON_NUMBER || !v->u.num.is_int) {
    if (v && v->type == SP_JSON_NUMBER && v->u.num.d < 0)
      return st_fail(f, "tensor '%s': %s has negative entry %.17g", tname, what, v->u.num.d);
    return st_fail(f, "tensor '%s': %s must hold integers, got %s", tname, what,
                   v ? (v->type == SP_JSON_NUMBER ? "a non-integer or out-of-range number" : sp_json_type_name(v->type))
                     : "nothing");
  }
  if (v->u.num.i < 0) return st_fail(f, "tensor '%s': %s has negative entry %lld", tname, what, (long long)v->u.num.i);
  *out = v->u.num.i;
  return 0;
}

static int parse_metadata(sp_st_file *f, const sp_json *m) {
  if (m->type != SP_JSON_OBJECT)
    return st_fail(f, "__metadata__ must be an object of strings, got %s", sp_json_type_name(m->type));
  size_t n = sp_json_len(m);
  f->meta_key = sp_xcalloc(n ? n : 1, sizeof(char *));
  f->meta_val = sp_xcalloc(n ? n : 1, sizeof(char *));
  for (size_t i = 0; i < n; i++) {
    const char *k = sp_json_key_at(m, i);
    const sp_json *v = sp_json_value_at(m, i);
    if (v->type != SP_JSON_STRING)
      return st_fail(f, "__metadata__ value for '%s' is %s, not a string", k, sp_json_type_name(v->type));
    if (strlen(k) != m->u.obj.key_lens[i] || strlen(v->u.str.s) != v->u.str.len)
      return st_fail(f, "__metadata__ entry '%s' contains a NUL byte", k);
    for (int j = 0; j < f->n_meta; j++)
      if (!strcmp(f->meta_key[j], k)) return st_fail(f, "duplicate __metadata__ key '%s'", k);
    f->meta_key[f->n_meta] = sp_xstrdup(k);
    f->meta_val[f->n_meta] = sp_xstrdup(v->u.str.s);
    f->n_meta++;
  }
  return 0;
}

static int parse_entry(sp_st_file *f, st_entry *e, const sp_json *v, uint64_t buf_size) {
  const char *name = e->name;
  if (v->type != SP_JSON_OBJECT)
    return st_fail(f, "tensor '%s': entry must be an object, got %s", name, sp_json_type_name(v->type));
  const char *dt = sp_json_as_string(sp_json_get(v, "dtype"));
  if (!dt) return st_fail(f, "tensor '%s': missing or non-string \"dtype\"", name);
  int found = 0;
  for (int k = 0; k < 4; k++) {
    /* Only the exact upper-case safetensors spelling is part of the format. */
    if (!strcmp(dt, sp_dtype_safetensors((sp_dtype)k))) {
      e->t.dtype = (sp_dtype)k;
      found = 1;
    }
  }
  if (!found) return st_fail(f, "tensor '%s': unsupported dtype '%s' (spry reads F32, BF16, U8, I32)", name, dt);
  size_t esz = sp_dtype_size(e->t.dtype);

  const sp_json *shape = sp_json_get(v, "shape");
  if (!shape || shape->type != SP_JSON_ARRAY) return st_fail(f, "tensor '%s': missing or non-array \"shape\"", name);
  size_t nd = sp_json_len(shape);
  if (nd > SP_MAX_DIMS)
    return st_fail(f, "tensor '%s': shape has %zu dimensions, at most %d supported", name, nd, SP_MAX_DIMS);
  e->t.shape.ndim = (int)nd;
  for (size_t d = 0; d < nd; d++)
    if (get_count(f, name, sp_json_at(shape, d), "shape", &e->t.shape.d[d])) return -1;

  const sp_json *off = sp_json_get(v, "data_offsets");
  if (!off || off->type != SP_JSON_ARRAY || sp_json_len(off) != 2)
    return st_fail(f, "tensor '%s': \"data_offsets\" must be an array [begin, end]", name);
  int64_t b, en;
  if (get_count(f, name, sp_json_at(off, 0), "data_offsets", &b) ||
      get_count(f, name, sp_json_at(off, 1), "data_offsets", &en))
    return -1;
  e->begin = (uint64_t)b;
  e->end = (uint64_t)en;

  char sh[160];
  sp_shape_str(&e->t.shape, sh, sizeof sh);
  uint64_t bytes = esz;
  for (int d = 0; d < e->t.shape.ndim; d++)
    if (__builtin_mul_overflow(bytes, (uint64_t)e->t.shape.d[d], &bytes))
      return st_fail(f, "tensor '%s': shape %s of %s overflows a 64-bit byte count", name, sh, dt);
  if (e->begin > e->end)
    return st_fail(f, "tensor '%s': data_offsets [%llu,%llu] begin after end", name, (unsigned long long)e->begin,
                   (unsigned long long)e->end);
  if (e->end > buf_size)
    return st_fail(f, "tensor '%s': data_offsets [%llu,%llu] run past the end of the data (%llu bytes)", name,
                   (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)buf_size);
  if (e->end - e->begin != bytes)
    return st_fail(f, "tensor '%s': data_offsets [%llu,%llu] do not match shape %s of %s (%llu bytes)", name,
                   (unsigned long long)e->begin, (unsigned long long)e->end, sh, dt, (unsigned long long)bytes);
  return 0;
}

/* The header's members: __metadata__ once, then one entry per tensor. */
static int read_entries(sp_st_file *f, const sp_json *doc, uint64_t buf_size) {
  size_t members = sp_json_len(doc);
  f->e = sp_xcalloc(members ? members : 1, sizeof(st_entry));
  int seen_meta = 0;
  for (size_t i = 0; i < members; i++) {
    const char *key = sp_json_key_at(doc, i);
    const sp_json *v = sp_json_value_at(doc, i);
    if (!strcmp(key, "__metadata__")) {
      if (seen_meta++) return st_fail(f, "duplicate __metadata__ entry");
      if (parse_metadata(f, v)) return -1;
      continue;
    }
    if (strlen(key) != doc->u.obj.key_lens[i]) return st_fail(f, "tensor name '%s...' contains a NUL byte", key);
    if (f->n == INT32_MAX) return st_fail(f, "too many tensors");
    st_entry *e = &f->e[f->n++];
    e->name = sp_xstrdup(key);
    if (parse_entry(f, e, v, buf_size)) return -1;
  }
  return 0;
}

/* Names unique (sorted for lookups), and no two non-empty tensors sharing a
 * byte (empty tensors occupy none, so they cannot collide). */
static int check_names_and_overlaps(sp_st_file *f) {
  f->by_name = sp_xmalloc(sizeof(st_entry *) * (size_t)(f->n ? f->n : 1));
  for (int i = 0; i < f->n; i++) f->by_name[i] = &f->e[i];
  qsort(f->by_name, (size_t)f->n, sizeof(st_entry *), cmp_name);
  for (int i = 1; i < f->n; i++)
    if (!strcmp(f->by_name[i - 1]->name, f->by_name[i]->name))
      return st_fail(f, "duplicate tensor name '%s'", f->by_name[i]->name);
  st_entry **by_off = sp_xmalloc(sizeof(st_entry *) * (size_t)(f->n ? f->n : 1));
  int m = 0, rc = 0;
  for (int i = 0; i < f->n; i++)
    if (f->e[i].end > f->e[i].begin) by_off[m++] = &f->e[i];
  qsort(by_off, (size_t)m, sizeof(st_entry *), cmp_begin);
  for (int i = 1; i < m && rc == 0; i++)
    if (by_off[i - 1]->end > by_off[i]->begin)
      rc = st_fail(f, "tensors '%s' [%llu,%llu] and '%s' [%llu,%llu] overlap", by_off[i - 1]->name,
                   (unsigned long long)by_off[i - 1]->begin, (unsigned long long)by_off[i - 1]->end, by_off[i]->name,
                   (unsigned long long)by_off[i]->begin, (unsigned long long)by_off[i]->end);
  free(by_off);
  return rc;
}

/* Tensor data pointers into the buffer. Writers pack tensors back to back,
 * so an F32 after an odd-sized U8 tensor can be misaligned; one copy now
 * keeps every f32 load legal. */
static void point_at_data(sp_st_file *f, unsigned char *buf) {
  for (int i = 0; i < f->n; i++) {
    st_entry *e = &f->e[i];
    unsigned char *p = buf + e->begin;
    size_t bytes = (size_t)(e->end - e->begin);
    if (bytes && (uintptr_t)p % sp_dtype_size(e->t.dtype)) {
      e->copy = sp_aligned_alloc(bytes);
      memcpy(e->copy, p, bytes);
      p = e->copy;
    }
    e->t.data = p;
  }
}

/* Validates the loaded bytes and fills the tables; any failure leaves an
 * error and the caller closes f. */
static int load(sp_st_file *f) {
  if (f->size < 8) return st_fail(f, "file is %zu bytes, too short for the 8-byte header length", f->size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->base[i];
  if (hlen > f->size - 8)
    return st_fail(f, "header length %llu runs past the end of the file (%zu bytes)", (unsigned long long)hlen,
                   f->size);
  if (hlen > SP_ST_MAX_HEADER)
    return st_fail(f, "header length %llu exceeds the %zu byte limit", (unsigned long long)hlen, SP_ST_MAX_HEADER);
  sp_json *doc = sp_json_parse((const char *)f->base + 8, (size_t)hlen, SP_ST_MAX_HEADER);
  if (!doc) return sp_error_push("%s: bad JSON header (byte offsets count from file byte 8)", f->label);
  int rc = doc->type != SP_JSON_OBJECT
               ? st_fail(f, "header must be a JSON object, got %s", sp_json_type_name(doc->type))
               : read_entries(f, doc, f->size - 8 - hlen);
  if (rc == 0) rc = check_names_and_overlaps(f);
  if (rc == 0) point_at_data(f, f->base + 8 + hlen);
  sp_json_free(doc);
  return rc;
}

static sp_st_file *finish_open(sp_st_file *f) {
  if (load(f)) {
    sp_st_close(f);
    return NULL;
  }
  return f;
}

sp_st_file *sp_st_open(const char *path) {
  sp_st_file *f = sp_xcalloc(1, sizeof *f);
  f->label = sp_xstrdup(path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    st_fail(f, "cannot open: %s", strerror(errno));
    sp_st_close(f);
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    st_fail(f, "not a regular file");
    close(fd);
    sp_st_close(f);
    return NULL;
  }
  f->size = (size_t)st.st_size;
  if (f->size >= 8) {
    /* Private + writable: a stray write through a tensor pointer faults in a
     * private page instead of crashing or changing the checkpoint. */
    void *p = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      f->base = p;
      f->mapped = 1;
    }
  }
  if (!f->mapped) { /* tiny file, or a filesystem without mmap */
    f->base = sp_xmalloc(f->size ? f->size : 1);
    size_t got = 0;
    while (got < f->size) {
      ssize_t r = read(fd, f->base + got, f->size - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        f->size = got; /* a shrinking file is validated as what we got */
        break;
      }
      got += (size_t)r;
    }
  }
  close(fd);
  return finish_open(f);
}

sp_st_file *sp_st_open_buffer(const void *data, size_t size, const char *label) {
  sp_st_file *f = sp_xcalloc(1, sizeof *f);
  f->label = sp_xstrdup(label ? label : "<memory>");
  f->base = sp_xmalloc(size ? size : 1);
  if (size) memcpy(f->base, data, size);
  f->size = size;
  return finish_open(f);
}

int sp_st_count(const sp_st_file *f) { return f ? f->n : 0; }

const char *sp_st_name(const sp_st_file *f, int i) { return f && i >= 0 && i < f->n ? f->e[i].name : NULL; }

static st_entry *find(const sp_st_file *f, const char *name) {
  if (!f || !name || !f->n) return NULL;
  st_entry key = {.name = (char *)name}, *kp = &key;
  st_entry **hit = bsearch(&kp, f->by_name, (size_t)f->n, sizeof(st_entry *), cmp_name);
  return hit ? *hit : NULL;
}

const sp_tensor *sp_st_get(const sp_st_file *f, const char *name) {
  st_entry *e = find(f, name);
  return e ? &e->t : NULL;
}

int sp_st_read_into(const sp_st_file *f, const char *name, sp_tensor *dst) {
  st_entry *e = find(f, name);
  if (!e) return st_fail(f, "no tensor '%s'", name);
  if (e->t.dtype != dst->dtype || !sp_shape_equal(&e->t.shape, &dst->shape)) {
    char a[160], b[160];
    return st_fail(f, "tensor '%s' is %s %s but the destination is %s %s", name, sp_dtype_safetensors(e->t.dtype),
                   sp_shape_str(&e->t.shape, a, sizeof a), sp_dtype_safetensors(dst->dtype),
                   sp_shape_str(&dst->shape, b, sizeof b));
  }
  size_t bytes = (size_t)(e->end - e->begin);
  if (bytes && !dst->data) return st_fail(f, "tensor '%s': destination has no data", name);
  if (bytes) memcpy(dst->data, e->t.data, bytes);
  return 0;
}

const char *sp_st_meta(const sp_st_file *f, const char *key) {
  if (!f || !key) return NULL;
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->meta_key[i], key)) return f->meta_val[i];
  return NULL;
}

int sp_st_meta_count(const sp_st_file *f) { return f ? f->n_meta : 0; }

const char *sp_st_meta_key(const sp_st_file *f, int i) { return f && i >= 0 && i < f->n_meta ? f->meta_key[i] : NULL; }

/* ------------------------------------------------------------------ writer */

typedef struct {
  char *name;
  sp_tensor t;
} w_entry;

struct sp_st_writer {
  w_entry *e;
  int n, cap;
  char **mk, **mv;
  int nm, capm;
};

sp_st_writer *sp_st_writer_new(void) { return sp_xcalloc(1, sizeof(sp_st_writer)); }

void sp_st_writer_free(sp_st_writer *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) free(w->e[i].name);
  for (int i = 0; i < w->nm; i++) {
    free(w->mk[i]);
    free(w->mv[i]);
  }
  free(w->e);
  free(w->mk);
  free(w->mv);
  free(w);
}

int sp_st_writer_add(sp_st_writer *w, const char *name, const sp_tensor *t) {
  if (!name) return sp_error_set("safetensors writer: tensor name is NULL");
  if (!strcmp(name, "__metadata__")) return sp_error_set("safetensors writer: '__metadata__' is reserved");
  if ((unsigned)t->dtype > SP_I32) return sp_error_set("safetensors writer: tensor '%s': bad dtype %d", name, t->dtype);
  if (t->shape.ndim < 0 || t->shape.ndim > SP_MAX_DIMS)
    return sp_error_set("safetensors writer: tensor '%s': %d dimensions", name, t->shape.ndim);
  uint64_t bytes = sp_dtype_size(t->dtype);
  for (int d = 0; d < t->shape.ndim; d++) {
    if (t->shape.d[d] < 0)
      return sp_error_set("safetensors writer: tensor '%s': negative dimension %lld", name, (long long)t->shape.d[d]);
    if (__builtin_mul_overflow(bytes, (uint64_t)t->shape.d[d], &bytes))
      return sp_error_set("safetensors writer: tensor '%s': size overflows", name);
  }
  if (bytes && !t->data) return sp_error_set("safetensors writer: tensor '%s' has no data", name);
  for (int i = 0; i < w->n; i++)
    if (!strcmp(w->e[i].name, name)) return sp_error_set("safetensors writer: duplicate tensor name '%s'", name);
  if (w->n == w->cap) {
    w->cap = w->cap ? w->cap * 2 : 16;
    w->e = sp_xrealloc(w->e, sizeof(w_entry) * (size_t)w->cap);
  }
  w->e[w->n].name = sp_xstrdup(name);
  w->e[w->n].t = *t;
  w->n++;
  return 0;
}

int sp_st_writer_meta(sp_st_writer *w, const char *key, const char *value) {
  if (!key || !value) return sp_error_set("safetensors writer: metadata key and value must not be NULL");
  for (int i = 0; i < w->nm; i++)
    if (!strcmp(w->mk[i], key)) {
      free(w->mv[i]);
      w->mv[i] = sp_xstrdup(value);
      return 0;
    }
  if (w->nm == w->capm) {
    w->capm = w->capm ? w->capm * 2 : 8;
    w->mk = sp_xrealloc(w->mk, sizeof(char *) * (size_t)w->capm);
    w->mv = sp_xrealloc(w->mv, sizeof(char *) * (size_t)w->capm);
  }
  w->mk[w->nm] = sp_xstrdup(key);
  w->mv[w->nm] = sp_xstrdup(value);
  w->nm++;
  return 0;
}

static void build_header(const sp_st_writer *w, sp_json_buf *b) {
  sp_json_obj_begin(b);
  if (w->nm) {
    sp_json_key(b, "__metadata__");
    sp_json_obj_begin(b);
    for (int i = 0; i < w->nm; i++) {
      sp_json_key(b, w->mk[i]);
      sp_json_str(b, w->mv[i]);
    }
    sp_json_obj_end(b);
  }
  uint64_t off = 0;
  for (int i = 0; i < w->n; i++) {
    const sp_tensor *t = &w->e[i].t;
    uint64_t bytes = sp_tensor_bytes(t);
    sp_json_key(b, w->e[i].name);
    sp_json_obj_begin(b);
    sp_json_key(b, "dtype");
    sp_json_str(b, sp_dtype_safetensors(t->dtype));
    sp_json_key(b, "shape");
    sp_json_arr_begin(b);
    for (int d = 0; d < t->shape.ndim; d++) sp_json_int(b, t->shape.d[d]);
    sp_json_arr_end(b);
    sp_json_key(b, "data_offsets");
    sp_json_arr_begin(b);
    sp_json_u64(b, off);
    sp_json_u64(b, off + bytes);
    sp_json_arr_end(b);
    sp_json_obj_end(b);
    off += bytes;
  }
  sp_json_obj_end(b);
  /* Pad so the data buffer starts 8-byte aligned in the file (and thus in a
   * page-aligned mapping); spaces keep the header valid JSON. */
  while ((8 + b->len) % 8) sp_json_raw(b, " ", 1);
}

static int write_all(int fd, const void *p, size_t n) {
  const unsigned char *c = p;
  while (n) {
    ssize_t r = write(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Makes the rename itself durable; failure here is not worth failing the
 * save over (the data is already synced), so errors are ignored. */
static void sync_parent_dir(const char *path) {
  char *dir = sp_xstrdup(path);
  char *slash = strrchr(dir, '/');
  const char *d = ".";
  if (slash == dir)
    d = "/";
  else if (slash) {
    *slash = 0;
    d = dir;
  }
  int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

int sp_st_writer_save(sp_st_writer *w, const char *path) {
  sp_json_buf hdr;
  sp_json_buf_init(&hdr);
  build_header(w, &hdr);
  size_t tlen = strlen(path) + 32;
  char *tmp = sp_xmalloc(tlen);
  snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  int rc = -1;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    sp_error_set("%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
    goto out;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
  int ok = write_all(fd, len8, 8) == 0 && write_all(fd, hdr.s, hdr.len) == 0;
  for (int i = 0; ok && i < w->n; i++) {
    size_t bytes = sp_tensor_bytes(&w->e[i].t);
    if (bytes) ok = write_all(fd, w->e[i].t.data, bytes) == 0;
  }
  if (!ok)
    sp_error_set("%s: writing %s: %s", path, tmp, strerror(errno));
  else if (fsync(fd) != 0) {
    sp_error_set("%s: syncing %s: %s", path, tmp, strerror(errno));
    ok = 0;
  }
  if (close(fd) != 0 && ok) {
    sp_error_set("%s: closing %s: %s", path, tmp, strerror(errno));
    ok = 0;
  }
  if (ok && rename(tmp, path) != 0) {
    sp_error_set("%s: renaming %s into place: %s", path, tmp, strerror(errno));
    ok = 0;
  }
  if (!ok) {
    unlink(tmp);
    goto out;
  }
  sync_parent_dir(path);
  rc = 0;
out:
  free(tmp);
  sp_json_buf_free(&hdr);
  return rc;
}

int sp_st_save_tensors(const char *path, int n, const char *const names[], const sp_tensor tensors[],
                       const char *meta_json) {
  sp_st_writer *w = sp_st_writer_new();
  int rc = -1;
  for (int i = 0; i < n; i++)
    if (sp_st_writer_add(w, names[i], &tensors[i])) goto out;
  if (meta_json) {
    sp_json *m = sp_json_parse(meta_json, strlen(meta_json), SP_ST_MAX_HEADER);
    if (!m) {
      sp_error_push("%s: metadata", path);
      goto out;
    }
    int bad = m->type != SP_JSON_OBJECT;
    for (size_t i = 0; !bad && i < sp_json_len(m); i++) {
      const char *v = sp_json_as_string(sp_json_value_at(m, i));
      if (!v)
        bad = 1;
      else
        sp_st_writer_meta(w, sp_json_key_at(m, i), v);
    }
    if (bad) {
      sp_error_set("%s: metadata must be a JSON object of strings", path);
      sp_json_free(m);
      goto out;
    }
    sp_json_free(m);
  }
  rc = sp_st_writer_save(w, path);
out:
  sp_st_writer_free(w);
  return rc;
}
