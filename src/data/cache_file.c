/* The on-disk cache: one file, memory-mapped, so a second run skips decoding.
 *
 *   header (128 bytes): magic "SPRYCACH", version, fingerprint, n, size,
 *                       channels, k, skipped, section offsets, total length
 *   int32  source[n]        dataset index of each sample
 *   float  points[n][k][2]  crop coordinates
 *   uint8  vis[n][k]
 *   float  crop[n][4]       crop rectangle in the source image: x0, y0, w, h
 *   float  box[n][4]        the face box it was cut around: x, y, w, h
 *   uint8  box_src[n]       where that box came from (sp_box_source)
 *   uint8  pixels[n][size][size][channels]   (64-byte aligned)
 *
 * The fingerprint covers the crop settings (box source and boxes file
 * included) and, for every sample, the image path, its size and mtime, and
 * the annotation values: any change rebuilds. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data_internal.h"

#define CACHE_MAGIC "SPRYCACH"
#define CACHE_VERSION 3u
/* Bumped when the detector or its procedure changes (detections are cached). */
#define DETECTOR_VERSION 1u

typedef struct {
  char magic[8];
  uint32_t version, header_size;
  uint64_t fingerprint;
  int32_t n, size, channels, k, skipped, pad_;
  uint64_t off_source, off_points, off_vis, off_pixels, total, off_crop, off_box, off_box_src;
  uint8_t reserved[128 - 8 - 8 - 8 - 24 - 64];
} cache_header;
_Static_assert(sizeof(cache_header) == 128, "cache header is 128 bytes");

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

uint64_t sp_cache_fingerprint(const sp_dataset *ds, const sp_crop_config *cfg) {
  uint64_t h = 1469598103934665603ull;
  uint32_t v = CACHE_VERSION;
  h = fnv(h, &v, sizeof v);
  h = fnv(h, &cfg->size, sizeof cfg->size);
  h = fnv(h, &cfg->channels, sizeof cfg->channels);
  h = fnv(h, &cfg->margin, sizeof cfg->margin);
  uint32_t box = (uint32_t)cfg->box | (cfg->box == SP_BOX_DETECT ? DETECTOR_VERSION << 8 : 0);
  h = fnv(h, &box, sizeof box);
  /* The boxes file by its rows, so an edit rebuilds and a moved copy does not. */
  for (int r = 0; r < sp_box_table_rows(cfg->boxes); r++)
    h = fnv(h, sp_box_table_box(cfg->boxes, r), sizeof(float) * 4);
  h = fnv(h, &ds->n, sizeof ds->n);
  h = fnv(h, &ds->k, sizeof ds->k);
  for (int i = 0; i < ds->n; i++) {
    const sp_kp_sample *s = &ds->s[i];
    h = fnv(h, s->image, strlen(s->image) + 1);
    struct stat st;
    int64_t meta[3] = {-1, -1, -1};
    if (stat(s->image, &st) == 0) {
      meta[0] = (int64_t)st.st_size;
      meta[1] = (int64_t)st.st_mtim.tv_sec;
      meta[2] = (int64_t)st.st_mtim.tv_nsec;
    }
    h = fnv(h, meta, sizeof meta);
    h = fnv(h, &s->has_box, sizeof s->has_box);
    if (s->has_box) h = fnv(h, s->box, sizeof s->box);
    h = fnv(h, &s->relative, sizeof s->relative);
    h = fnv(h, s->pts, sizeof(float) * 2 * (size_t)s->k);
    if (s->vis) h = fnv(h, s->vis, (size_t)s->k);
  }
  return h;
}

static void layout(cache_header *hd) {
  uint64_t n = (uint64_t)hd->n, k = (uint64_t)hd->k;
  hd->off_source = sizeof(cache_header);
  hd->off_points = hd->off_source + 4 * n;
  hd->off_vis = hd->off_points + 8 * n * k;
  hd->off_crop = (hd->off_vis + n * k + 3) & ~(uint64_t)3;
  hd->off_box = hd->off_crop + 16 * n;
  hd->off_box_src = hd->off_box + 16 * n;
  hd->off_pixels = (hd->off_box_src + n + 63) & ~(uint64_t)63;
  hd->total = hd->off_pixels + n * (uint64_t)hd->size * (uint64_t)hd->size * (uint64_t)hd->channels;
}

static int write_all(int fd, const void *p, size_t n, const char *path) {
  const uint8_t *b = p;
  while (n) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return sp_error_set("%s: write failed (%s)", path, strerror(errno));
    b += w;
    n -= (size_t)w;
  }
  return 0;
}

int sp_cache_write(const sp_cache *c, const char *path, const sp_dataset *ds, const sp_crop_config *cfg) {
  cache_header hd;
  memset(&hd, 0, sizeof hd);
  memcpy(hd.magic, CACHE_MAGIC, 8);
  hd.version = CACHE_VERSION;
  hd.header_size = sizeof hd;
  hd.fingerprint = sp_cache_fingerprint(ds, cfg);
  hd.n = c->n;
  hd.size = c->size;
  hd.channels = c->channels;
  hd.k = c->k;
  hd.skipped = c->skipped;
  layout(&hd);
  /* Write a temporary file and rename it: a reader never sees half a cache,
   * and two runs racing to build it both end with a complete file. */
  size_t L = strlen(path);
  char *tmp = sp_xmalloc(L + 32);
  snprintf(tmp, L + 32, "%s.tmp%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    sp_error_set("%s: cannot create cache file (%s)", tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  uint8_t zeros[64] = {0};
  size_t n = (size_t)c->n, k = (size_t)c->k;
  int rc = write_all(fd, &hd, sizeof hd, tmp);
  if (!rc) rc = write_all(fd, c->source, 4 * n, tmp);
  if (!rc) rc = write_all(fd, c->points, 8 * n * k, tmp);
  if (!rc) rc = write_all(fd, c->vis, n * k, tmp);
  if (!rc) rc = write_all(fd, zeros, (size_t)(hd.off_crop - (hd.off_vis + n * k)), tmp);
  if (!rc) rc = write_all(fd, c->crop, 16 * n, tmp);
  if (!rc) rc = write_all(fd, c->box, 16 * n, tmp);
  if (!rc) rc = write_all(fd, c->box_src, n, tmp);
  if (!rc) rc = write_all(fd, zeros, (size_t)(hd.off_pixels - (hd.off_box_src + n)), tmp);
  if (!rc) rc = write_all(fd, c->pixels, (size_t)(hd.total - hd.off_pixels), tmp);
  if (close(fd) != 0 && !rc) rc = sp_error_set("%s: close failed (%s)", tmp, strerror(errno));
  if (!rc && rename(tmp, path) != 0) rc = sp_error_set("%s: cannot rename to %s (%s)", tmp, path, strerror(errno));
  if (rc) unlink(tmp);
  free(tmp);
  return rc;
}

/* Whether a header describes the cache of ds + cfg, and a file of its size:
 * the sizes are the settings' own (so the section offsets cannot overflow)
 * and there are no more samples than the dataset has. */
static int header_matches(const cache_header *hd, uint64_t fp, const sp_crop_config *cfg, const sp_dataset *ds,
                          uint64_t file_size) {
  if (memcmp(hd->magic, CACHE_MAGIC, 8) || hd->version != CACHE_VERSION || hd->fingerprint != fp ||
      hd->size != cfg->size || hd->channels != cfg->channels || hd->k != ds->k || hd->k <= 0 || hd->n <= 0 ||
      hd->n > ds->n || hd->size <= 0 || hd->channels <= 0 || hd->skipped < 0)
    return 0;
  cache_header want = *hd;
  layout(&want);
  return want.total == hd->total && want.off_pixels == hd->off_pixels && want.off_crop == hd->off_crop &&
         want.off_box == hd->off_box && want.off_box_src == hd->off_box_src && want.off_points == hd->off_points &&
         want.off_vis == hd->off_vis && want.off_source == hd->off_source && file_size == hd->total;
}

static int finite4(const float *v) { return isfinite(v[0]) && isfinite(v[1]) && isfinite(v[2]) && isfinite(v[3]); }

/* What is wrong with sample i of a mapped cache (NULL: nothing). A damaged or
 * edited file must not train: NaN points ended as "learning rate too high?",
 * 1e30 points as a loss of 3e28 with exit 0. Crop points lie near the crop;
 * 1e6 px is far beyond any real one. */
static const char *bad_sample(const sp_cache *c, int i, int n_samples, char *why, size_t n) {
  if (c->source[i] < 0 || c->source[i] >= n_samples) {
    snprintf(why, n, "sample %d names dataset entry %d of %d", i, c->source[i], n_samples);
    return why;
  }
  for (int j = 0; j < c->k; j++) {
    const float *p = &c->points[((size_t)i * c->k + j) * 2];
    if (!isfinite(p[0]) || !isfinite(p[1]) || fabsf(p[0]) > 1e6f || fabsf(p[1]) > 1e6f) {
      snprintf(why, n, "sample %d point %d is (%g, %g)", i, j, (double)p[0], (double)p[1]);
      return why;
    }
    if (c->vis[(size_t)i * c->k + j] > 1) {
      snprintf(why, n, "sample %d point %d has visibility %d", i, j, c->vis[(size_t)i * c->k + j]);
      return why;
    }
  }
  const float *r = &c->crop[4 * (size_t)i], *b = &c->box[4 * (size_t)i];
  if (!finite4(r) || !(r[2] > 0 && r[3] > 0) || !finite4(b) || c->box_src[i] >= SP_BOXSRC_COUNT) {
    snprintf(why, n, "sample %d has crop %g,%g %gx%g, box %g,%g %gx%g from source %d", i, (double)r[0], (double)r[1],
             (double)r[2], (double)r[3], (double)b[0], (double)b[1], (double)b[2], (double)b[3], c->box_src[i]);
    return why;
  }
  return NULL;
}

static sp_cache *cache_of_map(uint8_t *b, const cache_header *hd) {
  sp_cache *c = sp_xcalloc(1, sizeof *c);
  c->n = hd->n;
  c->size = hd->size;
  c->channels = hd->channels;
  c->k = hd->k;
  c->skipped = hd->skipped;
  c->source = (int32_t *)(b + hd->off_source);
  c->points = (float *)(b + hd->off_points);
  c->vis = b + hd->off_vis;
  c->crop = (float *)(b + hd->off_crop);
  c->box = (float *)(b + hd->off_box);
  c->box_src = b + hd->off_box_src;
  c->pixels = b + hd->off_pixels;
  c->from_file = 1;
  c->map_ = b;
  c->map_len_ = (size_t)hd->total;
  return c;
}

int sp_cache_try_map(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, sp_cache **out) {
  *out = NULL;
  uint64_t fp = sp_cache_fingerprint(ds, cfg);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  struct stat st;
  cache_header hd;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pread(fd, &hd, sizeof hd, 0) != (ssize_t)sizeof hd ||
      !header_matches(&hd, fp, cfg, ds, (uint64_t)st.st_size)) {
    close(fd);
    return 1;
  }
  void *m = mmap(NULL, (size_t)hd.total, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return sp_error_set("%s: mmap failed (%s)", path, strerror(errno));
  sp_cache *c = cache_of_map(m, &hd);
  char why[256];
  for (int i = 0; i < c->n; i++)
    if (bad_sample(c, i, ds->n, why, sizeof why)) {
      fprintf(stderr, "spry data: %s is damaged (%s); building it again\n", path, why);
      sp_cache_free(c);
      return 1;
    }
  *out = c;
  return 0;
}

/* A cache write killed between its temporary and the rename leaves
 * PATH.tmpPID behind; those whose writer is gone are removed at the next
 * start (a live writer's, another run's build, is left alone). */
static void remove_stale_temps(const char *path) {
  char *dir = sp_path_dirname(path);
  const char *base = sp_path_base(path);
  size_t bl = strlen(base);
  DIR *d = opendir(dir);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strncmp(e->d_name, base, bl) || strncmp(e->d_name + bl, ".tmp", 4)) continue;
    char *end;
    long pid = strtol(e->d_name + bl + 4, &end, 10);
    if (end == e->d_name + bl + 4 || *end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char *p = sp_path_join(dir, e->d_name);
    if (unlink(p) == 0) fprintf(stderr, "spry data: removed %s, a cache an interrupted run left half written\n", p);
    free(p);
  }
  if (d) closedir(d);
  free(dir);
}

static sp_cache *open_cache(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, int *rebuilt,
                            int write) {
  if (write) remove_stale_temps(path);
  sp_cache *c = NULL;
  int rc = sp_cache_try_map(path, ds, cfg, &c);
  if (rc == 0) {
    if (rebuilt) *rebuilt = 0;
    fprintf(stderr, "spry data: mapped %d cached samples from %s\n", c->n, path);
    return c;
  }
  if (rc < 0) return NULL;
  if (rebuilt) *rebuilt = 1;
  c = sp_cache_build(ds, cfg);
  if (!c || !write) return c;
  if (sp_cache_write(c, path, ds, cfg) != 0) {
    /* The run can go on from RAM; only the next start will be slower. */
    fprintf(stderr, "spry data: warning: %s\n", sp_last_error());
  }
  return c;
}

sp_cache *sp_cache_open(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, int *rebuilt) {
  return open_cache(path, ds, cfg, rebuilt, 1);
}

sp_cache *sp_cache_open_readonly(const char *path, const sp_dataset *ds, const sp_crop_config *cfg, int *rebuilt) {
  return open_cache(path, ds, cfg, rebuilt, 0);
}
