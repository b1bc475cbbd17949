/* sp_video: the public handle. Picks the backend (a video file through
 * FFmpeg, or a folder of pre-decoded JPEG frames), checks arguments once, and
 * leaves decoding to the backend. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "video/video_internal.h"

sp_video *sp_video_open(const char *path) { return sp_video_open_with(path, NULL); }

sp_video *sp_video_open_with(const char *path, const sp_video_options *opt) {
  if (!path || !*path) {
    sp_error_set("video: empty path");
    return NULL;
  }
  struct stat sb;
  if (stat(path, &sb) != 0) {
    sp_error_set("%s: cannot open (no such file or directory)", path);
    return NULL;
  }
  sp_video *v = sp_xcalloc(1, sizeof *v);
  v->path = sp_xstrdup(path);
  if (opt) v->opt = *opt;
  int r = S_ISDIR(sb.st_mode) ? sp_video_open_frames(v) : sp_video_open_ffmpeg(v);
  if (r != 0) {
    free(v->path);
    free(v);
    return NULL;
  }
  return v;
}

void sp_video_close(sp_video *v) {
  if (!v) return;
  if (v->ops && v->ops->close) v->ops->close(v);
  sp_vconv_free(&v->conv);
  free(v->path);
  free(v);
}

int sp_video_get_info(sp_video *v, sp_video_info *out) {
  memset(out, 0, sizeof *out);
  return v->ops->info(v, out);
}

int64_t sp_video_frame_count(sp_video *v) {
  sp_video_info info;
  if (sp_video_get_info(v, &info) != 0) return -1;
  return info.frames;
}

int sp_video_out_size(sp_video *v, const sp_video_geom *g, int *h, int *w) {
  int nh, nw, rw, rh, cy, cx;
  if (v->ops->native_size(v, &nh, &nw) != 0) return -1;
  return sp_video_geom_resolve(g, nw, nh, &rw, &rh, h, w, &cy, &cx, v->path);
}

int sp_video_get_frames(sp_video *v, const int64_t *idx, int n, const sp_video_geom *g, uint8_t *out) {
  if (n < 0 || (n > 0 && (!idx || !out))) return sp_error_set("%s: bad frame request", v->path);
  if (n == 0) return 0;
  int64_t nf = sp_video_frame_count(v);
  if (nf < 0) return -1;
  for (int i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= nf)
      return sp_error_set("%s: frame %lld out of range (the video has %lld frames)", v->path, (long long)idx[i],
                          (long long)nf);
  return v->ops->get_frames(v, idx, n, g, out);
}

int64_t sp_video_decode_all(sp_video *v, const sp_video_geom *g, sp_video_frame_fn fn, void *user) {
  return v->ops->decode_all(v, g, fn, user);
}

sp_video_stats sp_video_get_stats(const sp_video *v) { return v->stats; }

/* Stable order of positions by key: a merge sort, since qsort has no context
 * argument in C11 and requests are short. */
void sp_video_sort_by_key(const int64_t *key, int n, int *order) {
  for (int i = 0; i < n; i++) order[i] = i;
  int *tmp = sp_xmalloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  for (int width = 1; width < n; width *= 2) {
    for (int lo = 0; lo < n; lo += 2 * width) {
      int mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int a = lo, b = mid, k = lo;
      while (a < mid && b < hi) tmp[k++] = key[order[b]] < key[order[a]] ? order[b++] : order[a++];
      while (a < mid) tmp[k++] = order[a++];
      while (b < hi) tmp[k++] = order[b++];
    }
    memcpy(order, tmp, (size_t)n * sizeof(int));
  }
  free(tmp);
}
