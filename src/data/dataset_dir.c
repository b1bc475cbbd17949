/* Opening a dataset folder: the layout is recognised from the files present
 * (see sp_dataset_open_dir in include/spry/data.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"

static int ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted entry names of dir (sorted so sample order is the same everywhere). */
static char **list_dir(const char *dir, int *n) {
  DIR *d = opendir(dir);
  *n = 0;
  if (!d) return NULL;
  char **names = sp_xmalloc(sizeof(char *)); /* non-NULL when empty: NULL means unreadable */
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    names = sp_xrealloc(names, sizeof(char *) * (size_t)(*n + 1));
    names[(*n)++] = sp_xstrdup(e->d_name);
  }
  closedir(d);
  if (*n) qsort(names, (size_t)*n, sizeof(char *), cmp_str);
  return names;
}

static void free_list(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* IMM names "01-1m": the person is the number before '-'. */
static void imm_identity(sp_dataset *ds, sp_kp_sample *s, const char *file) {
  const char *base = sp_path_base(file);
  char id[64];
  size_t i = 0;
  while (base[i] >= '0' && base[i] <= '9' && i < sizeof id - 1) {
    id[i] = base[i];
    i++;
  }
  id[i] = 0;
  s->identity = i && base[i] == '-' ? sp_dataset_identity(ds, id) : -1;
}

typedef int (*single_reader)(const char *, sp_kp_sample *);

/* One file, one sample, read before any is added: the folder's K is decided
 * by all of them (see majority_k), not by whichever file sorts first. */
typedef struct {
  char *path;
  sp_kp_sample s;
  int ok;
} file_sample;

/* The K most files have; a tie goes to a known scheme's K (68, 58), then to
 * the smaller K. An IMM folder with one 57-point file keeps its 58. (Readers
 * bound K by SP_MAX_KEYPOINTS, so the votes fit a table.) */
static int majority_k(const file_sample *fs, int n, int *votes) {
  int count[SP_MAX_KEYPOINTS + 1] = {0}, best = 0;
  for (int i = 0; i < n; i++)
    if (fs[i].ok && fs[i].s.k > 0 && fs[i].s.k <= SP_MAX_KEYPOINTS) count[fs[i].s.k]++;
  for (int k = 1; k <= SP_MAX_KEYPOINTS; k++) {
    int known = sp_scheme_for_k(k) != NULL, best_known = best && sp_scheme_for_k(best) != NULL;
    if (count[k] > count[best] || (count[k] && count[k] == count[best] && known > best_known)) best = k;
  }
  *votes = count[best];
  return best;
}

static int read_each(const char *dir, char **names, int n, const char *ext, single_reader rd, sp_dataset *ds) {
  file_sample *fs = sp_xcalloc((size_t)(n ? n : 1), sizeof *fs);
  int found = 0;
  for (int i = 0; i < n; i++) {
    if (!ends_with(names[i], ext)) continue;
    file_sample *f = &fs[found++];
    f->path = sp_path_join(dir, names[i]);
    f->ok = rd(f->path, &f->s) == 0;
    if (!f->ok) {
      sp_data_skip(f->path, "%s", sp_last_error());
      ds->skipped++;
    }
  }
  int votes, k = majority_k(fs, found, &votes);
  for (int i = 0; i < found; i++) {
    file_sample *f = &fs[i];
    if (f->ok && f->s.k != k) {
      sp_data_skip(f->path, "has %d points, where %d of the folder's %d %s files have %d", f->s.k, votes, found, ext,
                   k);
      ds->skipped++;
      sp_kp_sample_free(&f->s);
    } else if (f->ok) {
      imm_identity(ds, &f->s, f->path);
      sp_dataset_add(ds, &f->s, f->path);
    }
    free(f->path);
  }
  free(fs);
  return found;
}

int sp_dataset_open_dir(const char *dir, sp_dataset *ds) { return sp_dataset_open_dir_format(dir, "auto", ds); }

static int wants(const char *format, const char *name) { return !strcmp(format, "auto") || !strcmp(format, name); }

int sp_dataset_open_dir_format(const char *dir, const char *format, sp_dataset *ds) {
  static const char *const known[] = {"auto", "csv", "coco", "dlib", "imm", "asf", "pts"};
  int ok = 0;
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(format, known[i]);
  if (!ok) return sp_error_set("unknown annotation format '%s' (auto, csv, coco, dlib, imm, asf, pts)", format);
  sp_dataset_init(ds);
  int n;
  char **names = list_dir(dir, &n);
  if (!names) {
    struct stat st;
    if (stat(dir, &st) != 0) return sp_error_set("%s: no such folder (%s)", dir, strerror(errno));
    return sp_error_set(
        "%s: %s", dir,
        S_ISDIR(st.st_mode) ? "cannot list the folder" : "not a folder (data.path names the dataset folder)");
  }
  int rc = 0, handled = 0;
  char *csv = sp_path_join(dir, "keypoints.csv");
  if (wants(format, "csv") && sp_file_exists(csv)) {
    char *img = sp_path_join(dir, "images");
    rc = sp_read_keypoints_csv(csv, img, ds);
    free(img);
    handled = 1;
  }
  free(csv);
  for (int i = 0; i < n && !handled && wants(format, "coco"); i++) {
    if (!ends_with(names[i], ".json")) continue;
    char *p = sp_path_join(dir, names[i]);
    rc = sp_read_coco_keypoints(p, NULL, ds);
    free(p);
    handled = 1;
  }
  /* dlib: prefer the *_with_face_landmarks.xml files (the others hold boxes only). */
  for (int pass = 0; pass < 2 && !handled && wants(format, "dlib"); pass++) {
    for (int i = 0; i < n; i++) {
      if (!ends_with(names[i], pass == 0 ? "_with_face_landmarks.xml" : ".xml")) continue;
      char *p = sp_path_join(dir, names[i]);
      if (sp_read_dlib_xml(p, ds) != 0) rc = -1;
      free(p);
      handled = 1;
    }
  }
  if (!handled && wants(format, "imm")) handled = read_each(dir, names, n, ".dat", sp_read_imm_dat, ds) > 0;
  if (!handled && (wants(format, "asf") || !strcmp(format, "imm")))
    handled = read_each(dir, names, n, ".asf", sp_read_imm_asf, ds) > 0;
  if (!handled && wants(format, "pts")) handled = read_each(dir, names, n, ".pts", sp_read_pts, ds) > 0;
  free_list(names, n);
  if (!handled)
    return sp_error_set("%s: no annotations found (%s: keypoints.csv, .json, .xml, .dat, .asf or .pts)", dir, format);
  if (rc != 0) return -1;
  if (ds->n == 0) return sp_error_set("%s: no usable samples (%d skipped)", dir, ds->skipped);
  return 0;
}
