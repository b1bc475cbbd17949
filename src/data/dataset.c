/* The keypoint-sample list: adding with validation, identities, path helpers
 * and the one-line skip report every reader uses. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"

void sp_data_skip(const char *file, const char *reason_fmt, ...) {
  char reason[512];
  va_list ap;
  va_start(ap, reason_fmt);
  vsnprintf(reason, sizeof reason, reason_fmt, ap);
  va_end(ap);
  /* Errors often start with the file name already: do not say it twice. */
  const char *r = reason;
  size_t fl = file ? strlen(file) : 0;
  if (fl && !strncmp(r, file, fl) && r[fl] == ':' && r[fl + 1] == ' ') r += fl + 2;
  /* One fprintf call so lines from parallel decoders do not interleave. */
  fprintf(stderr, "spry data: skip %s: %s\n", file ? file : "?", r);
}

char *sp_path_join(const char *dir, const char *name) {
  if (!dir || !*dir || name[0] == '/') return sp_xstrdup(name);
  size_t a = strlen(dir), b = strlen(name);
  char *p = sp_xmalloc(a + b + 2);
  memcpy(p, dir, a);
  size_t o = a;
  if (dir[a - 1] != '/') p[o++] = '/';
  memcpy(p + o, name, b + 1);
  return p;
}

char *sp_path_dirname(const char *path) {
  const char *s = strrchr(path, '/');
  if (!s) return sp_xstrdup(".");
  size_t n = (size_t)(s - path);
  char *d = sp_xmalloc(n + 2);
  memcpy(d, path, n ? n : 1);
  d[n ? n : 1] = 0;
  return d;
}

const char *sp_path_base(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

char *sp_path_with_ext(const char *path, const char *ext) {
  const char *base = sp_path_base(path);
  const char *dot = strrchr(base, '.');
  size_t n = dot ? (size_t)(dot - path) : strlen(path);
  size_t e = strlen(ext);
  char *p = sp_xmalloc(n + e + 1);
  memcpy(p, path, n);
  memcpy(p + n, ext, e + 1);
  return p;
}

int sp_file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Real images are at most a few thousand pixels; 1e5 catches garbage such as
 * a misplaced column or an uninitialised value without rejecting points that
 * lie slightly outside the image (those are legal). */
int sp_coord_ok(float v) { return isfinite(v) && fabsf(v) < 1e5f; }

void sp_dataset_init(sp_dataset *ds) { memset(ds, 0, sizeof *ds); }

void sp_kp_sample_free(sp_kp_sample *s) {
  if (!s) return;
  free(s->image);
  free(s->pts);
  free(s->vis);
  s->image = NULL;
  s->pts = NULL;
  s->vis = NULL;
}

void sp_dataset_free(sp_dataset *ds) {
  if (!ds) return;
  for (int i = 0; i < ds->n; i++) sp_kp_sample_free(&ds->s[i]);
  free(ds->s);
  for (int i = 0; i < ds->n_identities; i++) free(ds->identities[i]);
  free(ds->identities);
  free(ds->id_slots_);
  memset(ds, 0, sizeof *ds);
}

/* FNV-1a: a fixed hash, so a split never changes between runs or machines. */
static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* Open addressing over identity indices (-1 = empty), at most half full. A
 * file names an identity per row: a linear search made a CSV of a million
 * names quadratic. */
static int *id_slot(sp_dataset *ds, const char *name) {
  size_t mask = (size_t)ds->id_cap_ - 1;
  for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask)
    if (ds->id_slots_[i] < 0 || !strcmp(ds->identities[ds->id_slots_[i]], name)) return &ds->id_slots_[i];
}

static void id_rehash(sp_dataset *ds) {
  free(ds->id_slots_);
  ds->id_cap_ = ds->id_cap_ ? 2 * ds->id_cap_ : 64;
  ds->id_slots_ = sp_xmalloc(sizeof(int) * (size_t)ds->id_cap_);
  memset(ds->id_slots_, 0xff, sizeof(int) * (size_t)ds->id_cap_);
  for (int i = 0; i < ds->n_identities; i++) *id_slot(ds, ds->identities[i]) = i;
}

int sp_dataset_identity(sp_dataset *ds, const char *name) {
  if (2 * (ds->n_identities + 1) > ds->id_cap_) id_rehash(ds);
  int *slot = id_slot(ds, name);
  if (*slot >= 0) return *slot;
  ds->identities = sp_xrealloc(ds->identities, sizeof(char *) * (size_t)(ds->n_identities + 1));
  ds->identities[ds->n_identities] = sp_xstrdup(name);
  return *slot = ds->n_identities++;
}

int sp_dataset_add(sp_dataset *ds, sp_kp_sample *s, const char *source) {
  const char *what = source ? source : (s->image ? s->image : "?");
  if (s->k > SP_MAX_KEYPOINTS) {
    sp_data_skip(what, "has %d points, more than the %d a face may have", s->k, SP_MAX_KEYPOINTS);
    goto reject;
  }
  if (s->k <= 0 || !s->pts) {
    sp_data_skip(what, "no keypoints");
    goto reject;
  }
  if (ds->k && s->k != ds->k) {
    sp_data_skip(what, "has %d points, the dataset has %d", s->k, ds->k);
    goto reject;
  }
  for (int i = 0; i < 2 * s->k; i++) {
    float v = s->pts[i];
    if (!sp_coord_ok(v) || (s->relative && fabsf(v) > 10.f)) {
      sp_data_skip(what, "point %d has a bad coordinate (%g)", i / 2, (double)v);
      goto reject;
    }
  }
  if (s->has_box && !(s->box[2] > 0 && s->box[3] > 0 && sp_coord_ok(s->box[0]) && sp_coord_ok(s->box[1]) &&
                      sp_coord_ok(s->box[2]) && sp_coord_ok(s->box[3]))) {
    sp_data_skip(what, "bad face box");
    goto reject;
  }
  if (ds->n == ds->cap) {
    ds->cap = ds->cap ? 2 * ds->cap : 64;
    ds->s = sp_xrealloc(ds->s, sizeof *ds->s * (size_t)ds->cap);
  }
  ds->k = s->k;
  ds->s[ds->n++] = *s;
  memset(s, 0, sizeof *s);
  return 0;
reject:
  ds->skipped++;
  sp_kp_sample_free(s);
  return -1;
}

/* ------------------------------------------------------------------ splits */

void sp_dataset_add_copy(sp_dataset *out, const sp_dataset *ds, int i) {
  sp_kp_sample s = ds->s[i];
  s.image = sp_xstrdup(s.image);
  s.pts = sp_xmalloc(sizeof(float) * 2 * (size_t)s.k);
  memcpy(s.pts, ds->s[i].pts, sizeof(float) * 2 * (size_t)s.k);
  if (s.vis) {
    s.vis = sp_xmalloc((size_t)s.k);
    memcpy(s.vis, ds->s[i].vis, (size_t)s.k);
  }
  s.identity = s.identity >= 0 ? sp_dataset_identity(out, ds->identities[s.identity]) : -1;
  if (sp_dataset_add(out, &s, NULL) != 0) sp_panic("copying a validated sample failed");
}

static int all_numeric(const sp_dataset *ds, int *max_id) {
  *max_id = 0;
  for (int i = 0; i < ds->n_identities; i++) {
    char *end;
    long v = strtol(ds->identities[i], &end, 10);
    if (*end || end == ds->identities[i] || v < 0) return 0;
    if (v > *max_id) *max_id = (int)v;
  }
  return ds->n_identities > 0;
}

int sp_dataset_split_identity(const sp_dataset *ds, sp_split_part part, double val_fraction, sp_dataset *out) {
  SP_CHECK(val_fraction >= 0 && val_fraction <= 1, "split fraction %g outside [0,1]", val_fraction);
  sp_dataset_init(out);
  int max_id;
  int numeric = all_numeric(ds, &max_id);
  for (int i = 0; i < ds->n; i++) {
    int id = ds->s[i].identity;
    if (id < 0) continue; /* no identity: cannot be placed safely */
    int is_val;
    if (numeric) {
      /* Numbered persons (IMM 1..40): the last val_fraction of the numbers is
       * val, which gives the usual 1-32 / 33-40 split at 0.2. */
      long v = strtol(ds->identities[id], NULL, 10);
      is_val = v > (long)((1.0 - val_fraction) * max_id + 0.5);
    } else {
      is_val = (double)(name_hash(ds->identities[id]) % 100000) < val_fraction * 100000.0;
    }
    if (is_val == (part == SP_SPLIT_VAL)) sp_dataset_add_copy(out, ds, i);
  }
  return 0;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
  return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int in_sorted(char **names, int n, const char *key) {
  return n > 0 && bsearch(&key, names, (size_t)n, sizeof(char *), cmp_str) != NULL;
}

/* A list line matches a sample's full path, or its base name. Both sides are
 * looked up in sorted tables: a validation list of COCO's size against its
 * images was quadratic. */
int sp_dataset_split_list(const sp_dataset *ds, const char *list_path, sp_dataset *out) {
  FILE *f = fopen(list_path, "r");
  if (!f) return sp_error_set("%s: cannot open split list", list_path);
  char **names = NULL, **bases = NULL;
  int n = 0, cap = 0;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    char *t = trim(line);
    if (!*t || *t == '#') continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      names = sp_xrealloc(names, sizeof(char *) * (size_t)cap);
      bases = sp_xrealloc(bases, sizeof(char *) * (size_t)cap);
    }
    names[n] = sp_xstrdup(t);
    bases[n] = (char *)sp_path_base(names[n]);
    n++;
  }
  fclose(f);
  if (n) {
    qsort(names, (size_t)n, sizeof(char *), cmp_str);
    qsort(bases, (size_t)n, sizeof(char *), cmp_str);
  }
  sp_dataset_init(out);
  for (int i = 0; i < ds->n; i++) {
    const char *img = ds->s[i].image;
    if (in_sorted(names, n, img) || in_sorted(bases, n, sp_path_base(img))) sp_dataset_add_copy(out, ds, i);
  }
  for (int j = 0; j < n; j++) free(names[j]);
  free(names);
  free(bases);
  return 0;
}
