/* JPEG (TurboJPEG, with DCT-domain downscaling) and PNG (libpng) decoding
 * into interleaved uint8. The format comes from the magic bytes because real
 * datasets store PNG data under .jpg names. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "data/data_internal.h"

sp_image_format sp_image_sniff(const uint8_t *buf, size_t len) {
  if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return SP_IMG_JPEG;
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (len >= 8 && !memcmp(buf, png_magic, 8)) return SP_IMG_PNG;
  return SP_IMG_UNKNOWN;
}

int sp_read_file(const char *path, uint8_t **buf, size_t *len) {
  /* Through the regular-file check below: a folder given as an image must be
   * an error naming it, not a read of "size" LONG_MAX. */
  uint8_t *b = NULL;
  size_t cap = 0;
  if (sp_read_file_into(path, &b, &cap, len) != 0) {
    free(b);
    return -1;
  }
  *buf = b;
  return 0;
}

/* One open + fstat + read into a buffer the caller keeps: the cache build
 * reads hundreds of ~100 KB files per thread, and stdio's buffering plus a
 * fresh allocation per file are pure overhead there. */
int sp_read_file_into(const char *path, uint8_t **buf, size_t *cap, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sp_error_set("%s: cannot open (missing or unreadable)", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return sp_error_set("%s: not a regular file", path);
  }
  size_t n = (size_t)st.st_size;
  if (n + 1 > *cap) {
    size_t c = n + 1 > 2 * *cap ? n + 1 : 2 * *cap;
    free(*buf);
    *buf = sp_xmalloc(c);
    *cap = c;
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, *buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) return sp_error_set("%s: short read (%zu of %zu bytes)", path, got, n);
  (*buf)[n] = 0;
  *len = n;
  return 0;
}

/* ------------------------------------------------------------------ PNG */

typedef struct {
  const uint8_t *buf;
  size_t len, pos;
} png_mem;

static void png_read_mem(png_structp p, png_bytep out, png_size_t n) {
  png_mem *m = png_get_io_ptr(p);
  if (m->pos + n > m->len) png_error(p, "truncated PNG data");
  memcpy(out, m->buf + m->pos, n);
  m->pos += n;
}

static void png_on_error(png_structp p, png_const_charp msg) {
  char *dst = png_get_error_ptr(p);
  snprintf(dst, 200, "%s", msg);
  png_longjmp(p, 1);
}
static void png_on_warning(png_structp p, png_const_charp msg) {
  (void)p;
  (void)msg;
}

static int decode_png(const uint8_t *buf, size_t len, int c, const char *what, int probe_only, sp_image *out) {
  char errmsg[200] = "unknown libpng error";
  png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, errmsg, png_on_error, png_on_warning);
  if (!p) return sp_error_set("%s: cannot create PNG reader", what);
  png_infop info = png_create_info_struct(p);
  if (!info) {
    png_destroy_read_struct(&p, NULL, NULL);
    return sp_error_set("%s: cannot create PNG info", what);
  }
  png_mem m = {buf, len, 0};
  /* volatile: modified between setjmp and a possible longjmp. */
  uint8_t *volatile px = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(p))) {
    free(px);
    free(rows);
    png_destroy_read_struct(&p, &info, NULL);
    return sp_error_set("%s: corrupt PNG (%s)", what, errmsg);
  }
  png_set_read_fn(p, &m, png_read_mem);
  png_read_info(p, info);
  int w = (int)png_get_image_width(p, info), h = (int)png_get_image_height(p, info);
  if ((int64_t)w * h > SP_MAX_IMAGE_PIXELS) { /* the JPEG paths' limit: libpng alone allows 10^12 */
    png_destroy_read_struct(&p, &info, NULL);
    return sp_error_set("%s: a %dx%d PNG is larger than %lld pixels", what, w, h, (long long)SP_MAX_IMAGE_PIXELS);
  }
  if (probe_only) {
    out->w = w;
    out->h = h;
    out->c = 0;
    out->px = NULL;
    png_destroy_read_struct(&p, &info, NULL);
    return 0;
  }
  int ct = png_get_color_type(p, info);
  if (png_get_bit_depth(p, info) == 16) png_set_strip_16(p);
  if (ct == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(p);
  if (ct == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(p, info) < 8) png_set_expand_gray_1_2_4_to_8(p);
  if (png_get_valid(p, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(p);
  png_set_strip_alpha(p);
  int is_gray = !(ct & PNG_COLOR_MASK_COLOR) && ct != PNG_COLOR_TYPE_PALETTE;
  if (c == 3 && is_gray) png_set_gray_to_rgb(p);
  if (c == 1 && !is_gray) png_set_rgb_to_gray_fixed(p, 1, -1, -1);
  png_read_update_info(p, info);
  if ((int)png_get_channels(p, info) != c) png_error(p, "unexpected channel count after conversion");
  px = sp_xmalloc((size_t)w * h * c);
  rows = sp_xmalloc(sizeof(png_bytep) * (size_t)h);
  for (int y = 0; y < h; y++) rows[y] = px + (size_t)y * w * c;
  png_read_image(p, rows);
  png_read_end(p, NULL);
  free(rows);
  png_destroy_read_struct(&p, &info, NULL);
  out->w = w;
  out->h = h;
  out->c = c;
  out->px = px;
  return 0;
}

/* ----------------------------------------------------------------- JPEG */

int sp_image_probe(const uint8_t *buf, size_t len, int *w, int *h) { return sp_image_probe_with(NULL, buf, len, w, h); }

int sp_image_probe_with(void *handle, const uint8_t *buf, size_t len, int *w, int *h) {
  sp_image_format f = sp_image_sniff(buf, len);
  if (f == SP_IMG_PNG) {
    sp_image im;
    if (decode_png(buf, len, 3, "image", 1, &im) != 0) return -1;
    *w = im.w;
    *h = im.h;
    return 0;
  }
  if (f != SP_IMG_JPEG) return sp_error_set("not a JPEG or PNG file (unknown magic bytes)");
  tjhandle tj = handle ? handle : tjInitDecompress();
  if (!tj) return sp_error_set("cannot create TurboJPEG decoder");
  int sub, cs;
  *w = *h = 0;
  int rc = tjDecompressHeader3(tj, buf, (unsigned long)len, w, h, &sub, &cs);
  if (rc != 0)
    sp_error_set("bad JPEG header (%s)", tjGetErrorStr2(tj));
  else if (*w <= 0 || *h <= 0)
    rc = sp_error_set("JPEG has no image (tables only, or cut before its frame header)");
  /* The decoders refuse these: a probe that said yes would send a caller
   * off to plan for pixels it will never get (found by fuzz_image). */
  else if ((int64_t)*w * *h > SP_MAX_IMAGE_PIXELS)
    rc = sp_error_set("a %dx%d JPEG is larger than %lld pixels", *w, *h, (long long)SP_MAX_IMAGE_PIXELS);
  if (!handle) tjDestroy(tj);
  return rc == 0 ? 0 : -1;
}

/* exact: libjpeg's accurate integer IDCT, as PIL and dlib decode. The fast
 * IDCT moves pixels by a grey level or two, which is nothing to a network
 * but enough to move a HOG face detection by a few pixels. */
static int decode_jpeg(void *handle, const uint8_t *buf, size_t len, int c, int denom, int exact, const char *what,
                       sp_image *out) {
  tjhandle tj = handle;
  int w = 0, h = 0, sub, cs;
  if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &sub, &cs) != 0)
    return sp_error_set("%s: corrupt JPEG header (%s)", what, tjGetErrorStr2(tj));
  /* libjpeg-turbo 2.1 returns success on a tables-only stream (FF D8 ... FF
   * D9 with no frame) without writing the size. */
  if (w <= 0 || h <= 0)
    return sp_error_set("%s: JPEG has no image (tables only, or cut before its frame header)", what);
  if ((int64_t)w * h > SP_MAX_IMAGE_PIXELS)
    return sp_error_set("%s: a %dx%d JPEG is larger than %lld pixels", what, w, h, (long long)SP_MAX_IMAGE_PIXELS);
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8) denom = 1;
  tjscalingfactor sf = {1, denom};
  int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
  uint8_t *px = sp_xmalloc((size_t)sw * sh * c);
  int rc = tjDecompress2(tj, buf, (unsigned long)len, px, sw, 0, sh, c == 1 ? TJPF_GRAY : TJPF_RGB,
                         (exact ? 0 : TJFLAG_FASTDCT) | TJFLAG_STOPONWARNING);
  if (rc != 0) {
    /* A warning (e.g. premature end of data) means the pixels are partly
     * invented: a truncated file must be skipped, not trained on. */
    sp_error_set("%s: corrupt or truncated JPEG (%s)", what, tjGetErrorStr2(tj));
    free(px);
    return -1;
  }
  out->w = sw;
  out->h = sh;
  out->c = c;
  out->px = px;
  return 0;
}

/* A TurboJPEG handle per decoding thread: creating one per image costs as
 * much as decoding a small crop. */
void *sp_jpeg_decoder_new(void) { return tjInitDecompress(); }
void sp_jpeg_decoder_free(void *h) {
  if (h) tjDestroy(h);
}

static int decode_any(void *tj, const uint8_t *buf, size_t len, int c, int denom, int exact, const char *what,
                      sp_image *out) {
  if (c != 1 && c != 3) return sp_error_set("%s: channels must be 1 or 3, not %d", what, c);
  memset(out, 0, sizeof *out);
  switch (sp_image_sniff(buf, len)) {
    case SP_IMG_JPEG: {
      if (tj) return decode_jpeg(tj, buf, len, c, denom, exact, what, out);
      tjhandle own = tjInitDecompress();
      if (!own) return sp_error_set("%s: cannot create TurboJPEG decoder", what);
      int rc = decode_jpeg(own, buf, len, c, denom, exact, what, out);
      tjDestroy(own);
      return rc;
    }
    case SP_IMG_PNG: return decode_png(buf, len, c, what, 0, out);
    default: return sp_error_set("%s: not a JPEG or PNG file (unknown magic bytes)", what);
  }
}

int sp_image_decode_with(void *tj, const uint8_t *buf, size_t len, int c, int denom, const char *what, sp_image *out) {
  return decode_any(tj, buf, len, c, denom, 0, what, out);
}

int sp_image_decode_exact(const uint8_t *buf, size_t len, int c, const char *what, sp_image *out) {
  return decode_any(NULL, buf, len, c, 1, 1, what, out);
}

int sp_image_decode(const uint8_t *buf, size_t len, int c, int denom, const char *what, sp_image *out) {
  return sp_image_decode_with(NULL, buf, len, c, denom, what, out);
}

int sp_image_load(const char *path, int c, sp_image *out) {
  uint8_t *buf;
  size_t len;
  if (sp_read_file(path, &buf, &len) != 0) return -1;
  int rc = sp_image_decode_exact(buf, len, c, path, out);
  free(buf);
  return rc;
}

void sp_image_free(sp_image *im) {
  if (!im) return;
  free(im->px);
  im->px = NULL;
}
