/* The frame-folder backend of sp_video: a clip pre-decoded to JPEG files
 * img_00001.jpg, img_00002.jpg, ... (mmaction's and PaddleVideo's "frames"
 * layout; frame index i is file i+1). Every frame is a keyframe, so a fetch
 * is one JPEG decode per requested frame; when the output is much smaller than
 * the stored frames, TurboJPEG decodes at 1/2, 1/4 or 1/8 scale in the DCT
 * domain first, which is most of the speed of this path. */
#include <libavutil/pixfmt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "video/video_internal.h"
#include "spry/data.h"

typedef struct {
  tjhandle tj;
  int64_t n;
  int width, height; /* of the stored frames */
  uint8_t *rgb;      /* one decoded frame */
  size_t rgb_cap;
  int64_t *keys;
} frames_state;

void sp_frames_name(char *buf, size_t n, int64_t index) { snprintf(buf, n, "img_%05lld.jpg", (long long)index + 1); }

static char *frame_path(const sp_video *v, int64_t i) {
  char name[32];
  sp_frames_name(name, sizeof name, i);
  size_t len = strlen(v->path) + strlen(name) + 2;
  char *p = sp_xmalloc(len);
  snprintf(p, len, "%s/%s", v->path, name);
  return p;
}

static int file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The run of consecutive img_ files from img_00001.jpg on. */
static int64_t count_files(const sp_video *v) {
  int64_t c = 0;
  for (;; c++) {
    char *fp = frame_path(v, c);
    int ok = file_exists(fp);
    free(fp);
    if (!ok) break;
  }
  return c;
}

/* Frame count: the n_frames file written by prepare when present (one stat
 * instead of thousands), else the run of consecutive img_ files. The file is
 * only believed when its last frame is there: a count of 10^12 would
 * otherwise size the keyframe table, and a stale one would sample frames
 * that do not exist. (Frames past it may be left from an earlier, longer
 * preparation: the file says which belong.) -1 with an error naming it. */
static int64_t count_frames(const sp_video *v) {
  size_t len = strlen(v->path) + 16;
  char *p = sp_xmalloc(len);
  snprintf(p, len, "%s/n_frames", v->path);
  FILE *f = fopen(p, "r");
  long long n = -1;
  char extra;
  int bad = 0;
  if (f) {
    bad = fscanf(f, "%lld %c", &n, &extra) != 1 || n < 1;
    fclose(f);
  }
  if (!f) {
    free(p);
    return count_files(v);
  }
  if (!bad) {
    char *last = frame_path(v, n - 1);
    bad = !file_exists(last);
    free(last);
  }
  if (bad) {
    int64_t files = count_files(v);
    sp_error_set(
        "%s: says %lld frames, the folder holds %lld (img_00001.jpg on, consecutive); "
        "prepare the clip again or remove the file",
        p, n, (long long)files);
    free(p);
    return -1;
  }
  free(p);
  return n;
}

/* TurboJPEG 2.x handles are not reliable after some errors (src/data/README):
 * a failed frame gets the next one a fresh handle. */
static void renew_handle(frames_state *s) {
  tjhandle fresh = tjInitDecompress();
  if (!fresh) return; /* keep the old one: the next decode reports any trouble */
  tjDestroy(s->tj);
  s->tj = fresh;
}

/* Decodes frame i at the smallest DCT scale whose short side still covers
 * `want_short` (0 = full size) into s->rgb. */
static int decode_frame(sp_video *v, int64_t i, int want_short, int *w, int *h) {
  frames_state *s = v->impl;
  char *p = frame_path(v, i);
  uint8_t *buf = NULL;
  size_t len = 0;
  if (sp_read_file(p, &buf, &len) != 0) {
    sp_error_set("%s: frame %lld: cannot read %s", v->path, (long long)i, p);
    free(p);
    return -1;
  }
  int fw = 0, fh = 0, sub, cs;
  const char *why = NULL;
  if (tjDecompressHeader3(s->tj, buf, (unsigned long)len, &fw, &fh, &sub, &cs) != 0) why = tjGetErrorStr2(s->tj);
  /* libjpeg-turbo 2.1 accepts a stream cut before its frame header (even
   * FF D8 FF D9) without writing the size. */
  else if (fw <= 0 || fh <= 0)
    why = "no image in it: tables only, or cut before its frame header";
  else if ((int64_t)fw * fh > SP_MAX_IMAGE_PIXELS)
    why = "larger than SP_MAX_IMAGE_PIXELS";
  if (why) {
    sp_error_set("%s: frame %lld: %s is not a usable JPEG (%s)", v->path, (long long)i, p, why);
    renew_handle(s);
    free(buf);
    free(p);
    return -1;
  }
  int denom = 1;
  if (want_short > 0)
    for (int d = 8; d > 1; d /= 2) {
      int sw = (fw + d - 1) / d, sh = (fh + d - 1) / d;
      if ((sw < sh ? sw : sh) >= want_short) {
        denom = d;
        break;
      }
    }
  *w = (fw + denom - 1) / denom;
  *h = (fh + denom - 1) / denom;
  size_t need = (size_t)*w * *h * 3;
  if (s->rgb_cap < need) {
    free(s->rgb);
    s->rgb = sp_xmalloc(need);
    s->rgb_cap = need;
  }
  /* Warnings are failures too: "premature end of data" means a half-written
   * frame, whose missing rows libjpeg would fill with invented pixels. */
  int r = tjDecompress2(s->tj, buf, (unsigned long)len, s->rgb, *w, *w * 3, *h, TJPF_RGB,
                        TJFLAG_FASTDCT | TJFLAG_STOPONWARNING);
  free(buf);
  if (r != 0) {
    sp_error_set("%s: frame %lld: cannot decode %s (%s)", v->path, (long long)i, p, tjGetErrorStr2(s->tj));
    renew_handle(s);
    free(p);
    return -1;
  }
  free(p);
  return 0;
}

static int fr_get_frames(sp_video *v, const int64_t *idx, int n, const sp_video_geom *g, uint8_t *out) {
  frames_state *s = v->impl;
  int oh, ow, rw, rh, cy, cx;
  if (sp_video_geom_resolve(g, s->width, s->height, &rw, &rh, &oh, &ow, &cy, &cx, v->path) != 0) return -1;
  size_t fb = (size_t)oh * ow * 3;
  for (int j = 0; j < n; j++) {
    /* Repeated indices are copied, not decoded again. */
    int prev = -1;
    for (int k = j - 1; k >= 0 && k >= j - 8; k--)
      if (idx[k] == idx[j]) {
        prev = k;
        break;
      }
    if (prev >= 0) {
      memcpy(out + (size_t)j * fb, out + (size_t)prev * fb, fb);
      continue;
    }
    int w, h;
    if (decode_frame(v, idx[j], g->short_side > 0 ? g->short_side : 0, &w, &h) != 0) return -1;
    v->stats.decoded++;
    /* Geometry comes from the stored size, so a DCT-scaled decode (whose
     * size rounds up) lands on exactly the same output as a full one. */
    const uint8_t *src[4] = {s->rgb, NULL, NULL, NULL};
    int stride[4] = {w * 3, 0, 0, 0};
    if (sp_vconv_scale(&v->conv, src, stride, w, h, AV_PIX_FMT_RGB24, AVCOL_SPC_RGB, AVCOL_RANGE_JPEG, rw, rh, oh, ow,
                       cy, cx, g->layout == SP_VIDEO_CHW, out + (size_t)j * fb, v->path) != 0)
      return -1;
    v->stats.converted++;
  }
  return 0;
}

static int64_t fr_decode_all(sp_video *v, const sp_video_geom *g, sp_video_frame_fn fn, void *user) {
  frames_state *s = v->impl;
  int oh, ow;
  if (sp_video_out_size(v, g, &oh, &ow) != 0) return -1;
  uint8_t *buf = sp_xmalloc((size_t)oh * ow * 3);
  int64_t i = 0;
  for (; i < s->n; i++) {
    if (fr_get_frames(v, &i, 1, g, buf) != 0) {
      free(buf);
      return -1;
    }
    if (fn && fn(i, buf, oh, ow, user)) {
      i++;
      break;
    }
  }
  free(buf);
  return i;
}

static int fr_native_size(sp_video *v, int *h, int *w) {
  frames_state *s = v->impl;
  *h = s->height;
  *w = s->width;
  return 0;
}

static int fr_info(sp_video *v, sp_video_info *out) {
  frames_state *s = v->impl;
  snprintf(out->codec, sizeof out->codec, "jpeg");
  snprintf(out->container, sizeof out->container, "frames");
  out->width = s->width;
  out->height = s->height;
  out->frames = s->n;
  out->header_frames = s->n;
  if (!s->keys) {
    s->keys = sp_xmalloc((size_t)(s->n > 0 ? s->n : 1) * sizeof(int64_t));
    for (int64_t i = 0; i < s->n; i++) s->keys[i] = i;
  }
  out->n_keyframes = s->n;
  out->keyframes = s->keys;
  out->seekable = 1;
  return 0;
}

static void fr_close(sp_video *v) {
  frames_state *s = v->impl;
  if (!s) return;
  if (s->tj) tjDestroy(s->tj);
  free(s->rgb);
  free(s->keys);
  free(s);
  v->impl = NULL;
}

static const sp_video_ops fr_ops = {fr_info, fr_get_frames, fr_decode_all, fr_native_size, fr_close};

int sp_video_open_frames(sp_video *v) {
  frames_state *s = sp_xcalloc(1, sizeof *s);
  v->impl = s;
  v->ops = &fr_ops;
  s->tj = tjInitDecompress();
  if (!s->tj) {
    sp_error_set("%s: cannot start TurboJPEG", v->path);
    fr_close(v);
    return -1;
  }
  s->n = count_frames(v);
  if (s->n <= 0) {
    if (s->n == 0) sp_error_set("%s: a folder without img_00001.jpg frames", v->path);
    fr_close(v);
    return -1;
  }
  int w, h;
  if (decode_frame(v, 0, 0, &w, &h) != 0) {
    fr_close(v);
    return -1;
  }
  s->width = w;
  s->height = h;
  return 0;
}
