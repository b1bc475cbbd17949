/* sp_synth_faces: a synthetic dataset folder in the youtube_faces_68 layout
 * (images/NAME.jpg + keypoints.csv), rendered by a few threads. Each image is a
 * pure function of (seed, identity, view), and the CSV is written in index
 * order after all workers finish, so the folder is byte-identical for a seed
 * whatever the thread count. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "data/data_internal.h"
#include "data/synth_faces_internal.h"

typedef struct {
  const char *images_dir;
  int count;
  uint64_t seed;
  sp_synth_face_options opt;
  float *pts; /* [count][136] */
  atomic_int next;
  atomic_int done;
  atomic_int failed;
  pthread_mutex_t lock; /* first error message, progress output */
  char error[512];
  double t0;
} job;

static void image_name(const sp_synth_face_options *o, int index, char *buf, size_t n) {
  int id = index / o->per_identity, view = index % o->per_identity;
  /* <v><f>: video digit(s) and a frame digit, as in the real names. */
  snprintf(buf, n, "Synth_Person_%04d_%d%d.jpg", id, view / 3, view % 3);
}

static int write_all(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return sp_error_set("%s: cannot create: %s", path, strerror(errno));
  size_t wr = fwrite(p, 1, n, f);
  int rc = fclose(f);
  if (wr != n || rc != 0) return sp_error_set("%s: write failed: %s", path, strerror(errno));
  return 0;
}

static int render_one(job *J, tjhandle tj, int index) {
  int per = J->opt.per_identity;
  sp_image im;
  sp_synth_face_info info;
  float *pts = J->pts + (size_t)index * 2 * SP_SYNTH_FACE_K;
  if (sp_synth_face_render(J->seed, index / per, index % per, &J->opt, &im, pts, &info) != 0) return -1;
  unsigned char *jpg = NULL;
  unsigned long len = 0;
  int rc =
      tjCompress2(tj, im.px, im.w, 0, im.h, TJPF_RGB, &jpg, &len, TJSAMP_420, info.jpeg_quality, TJFLAG_ACCURATEDCT);
  sp_image_free(&im);
  if (rc != 0) {
    tjFree(jpg);
    return sp_error_set("synth faces: JPEG encoding failed: %s", tjGetErrorStr2(tj));
  }
  char name[96];
  image_name(&J->opt, index, name, sizeof name);
  char *path = sp_path_join(J->images_dir, name);
  rc = write_all(path, jpg, len);
  free(path);
  tjFree(jpg);
  return rc;
}

static void progress(job *J, int done, int final) {
  if (!J->opt.progress || J->count < 200) return;
  double dt = sp_now() - J->t0;
  fprintf(stderr, "\rspry synth faces: %d/%d images (%.0f/s)%s", done, J->count, dt > 0 ? done / dt : 0.0,
          final ? "\n" : "");
  fflush(stderr);
}

static void *worker(void *arg) {
  job *J = arg;
  tjhandle tj = tjInitCompress();
  if (!tj) {
    pthread_mutex_lock(&J->lock);
    if (!J->failed++) snprintf(J->error, sizeof J->error, "synth faces: cannot start a JPEG encoder");
    pthread_mutex_unlock(&J->lock);
    return NULL;
  }
  int i;
  while (!atomic_load(&J->failed) && (i = atomic_fetch_add(&J->next, 1)) < J->count) {
    if (render_one(J, tj, i) != 0) {
      pthread_mutex_lock(&J->lock);
      if (!J->failed++) snprintf(J->error, sizeof J->error, "%s", sp_last_error());
      pthread_mutex_unlock(&J->lock);
      break;
    }
    int d = atomic_fetch_add(&J->done, 1) + 1;
    if (d % 100 == 0 && d < J->count) {
      pthread_mutex_lock(&J->lock);
      progress(J, d, 0);
      pthread_mutex_unlock(&J->lock);
    }
  }
  tjDestroy(tj);
  return NULL;
}

static int write_csv(const job *J, const char *out_dir) {
  char *path = sp_path_join(out_dir, "keypoints.csv");
  char *tmp = sp_path_join(out_dir, ".keypoints.csv.tmp");
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    sp_error_set("%s: cannot create: %s", tmp, strerror(errno));
    free(path);
    free(tmp);
    return -1;
  }
  /* Header ",0,1,...,135": the first cell (the name column) is empty. */
  for (int c = 0; c < 2 * SP_SYNTH_FACE_K; c++) fprintf(f, ",%d", c);
  fputc('\n', f);
  for (int i = 0; i < J->count; i++) {
    char name[96];
    image_name(&J->opt, i, name, sizeof name);
    fputs(name, f);
    const float *p = J->pts + (size_t)i * 2 * SP_SYNTH_FACE_K;
    for (int c = 0; c < 2 * SP_SYNTH_FACE_K; c++) fprintf(f, ",%.2f", p[c]);
    fputc('\n', f);
  }
  int bad = ferror(f) != 0;
  bad |= fclose(f) != 0;
  int rc = 0;
  if (bad || rename(tmp, path) != 0) {
    rc = sp_error_set("%s: write failed: %s", path, strerror(errno));
    remove(tmp);
  }
  free(path);
  free(tmp);
  return rc;
}

int sp_synth_faces(const char *out_dir, int count, uint64_t seed, const sp_synth_face_options *opt) {
  if (!out_dir || !*out_dir) return sp_error_set("synth faces: no output folder");
  if (count < 1) return sp_error_set("synth faces: count must be at least 1 (got %d)", count);
  job J;
  memset(&J, 0, sizeof J);
  J.opt = opt ? *opt : sp_synth_face_defaults();
  if (J.opt.per_identity < 1 || J.opt.per_identity > 30)
    return sp_error_set("synth faces: per_identity must be 1..30 (got %d)", J.opt.per_identity);
  if (J.opt.jpeg_min < 1 || J.opt.jpeg_max > 100 || J.opt.jpeg_min > J.opt.jpeg_max)
    return sp_error_set("synth faces: bad JPEG quality range %d..%d", J.opt.jpeg_min, J.opt.jpeg_max);
  char *images = sp_path_join(out_dir, "images");
  if (sp_make_dirs(images) != 0) {
    free(images);
    return -1;
  }
  J.images_dir = images;
  J.count = count;
  J.seed = seed;
  J.pts = sp_xmalloc(sizeof(float) * 2 * SP_SYNTH_FACE_K * (size_t)count);
  pthread_mutex_init(&J.lock, NULL);
  J.t0 = sp_now();
  int nt = J.opt.threads > 0 ? J.opt.threads : sp_default_threads();
  if (nt > count) nt = count;
  if (nt < 1) nt = 1;
  pthread_t *th = sp_xmalloc(sizeof(pthread_t) * (size_t)nt);
  int started = 0;
  for (; started < nt; started++)
    if (pthread_create(&th[started], NULL, worker, &J) != 0) break;
  if (started == 0) worker(&J); /* no threads at all: do it here */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  free(th);
  int rc = 0;
  if (J.failed)
    rc = sp_error_set("%s", J.error);
  else {
    progress(&J, count, 1);
    rc = write_csv(&J, out_dir);
  }
  pthread_mutex_destroy(&J.lock);
  free(J.pts);
  free(images);
  return rc;
}
