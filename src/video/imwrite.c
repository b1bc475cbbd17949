/* PNG and JPEG writers for frames (`spry video frames`, `spry prepare
 * frames`). Files are written to a temporary name and renamed, so a killed
 * run never leaves a half-written frame that a later reader would trust. */
#define _GNU_SOURCE
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "spry/video.h"

static char *tmp_name(const char *path) {
  size_t n = strlen(path) + 32;
  char *t = sp_xmalloc(n);
  snprintf(t, n, "%s.tmp%ld", path, (long)getpid());
  return t;
}

static int finish(FILE *f, char *tmp, const char *path, int ok) {
  if (fclose(f) != 0) ok = 0;
  if (ok && rename(tmp, path) != 0) {
    sp_error_set("%s: cannot rename into place (%s)", path, strerror(errno));
    ok = 0;
  } else if (!ok) {
    sp_error_push("%s", path);
  }
  if (!ok) unlink(tmp);
  free(tmp);
  return ok ? 0 : -1;
}

int sp_write_png(const char *path, const uint8_t *px, int h, int w, int c) {
  if (h <= 0 || w <= 0 || (c != 1 && c != 3)) return sp_error_set("%s: bad PNG size %dx%dx%d", path, w, h, c);
  char *tmp = tmp_name(path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    sp_error_set("%s: cannot create (%s)", path, strerror(errno));
    free(tmp);
    return -1;
  }
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    sp_error_set("libpng: out of memory");
    return finish(f, tmp, path, 0);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    sp_error_set("libpng failed while writing");
    return finish(f, tmp, path, 0);
  }
  png_init_io(png, f);
  /* Fast deflate: frames are for looking at and for tests, not archives. */
  png_set_compression_level(png, 3);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, c == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(px + (size_t)y * w * c));
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  return finish(f, tmp, path, 1);
}

int sp_write_jpeg(const char *path, const uint8_t *px, int h, int w, int c, int quality) {
  if (h <= 0 || w <= 0 || (c != 1 && c != 3)) return sp_error_set("%s: bad JPEG size %dx%dx%d", path, w, h, c);
  if (quality <= 0 || quality > 100) quality = 90;
  tjhandle tj = tjInitCompress();
  if (!tj) return sp_error_set("%s: cannot start TurboJPEG", path);
  unsigned char *jpg = NULL;
  unsigned long len = 0;
  int r = tjCompress2(tj, px, w, w * c, h, c == 3 ? TJPF_RGB : TJPF_GRAY, &jpg, &len, c == 3 ? TJSAMP_420 : TJSAMP_GRAY,
                      quality, TJFLAG_FASTDCT);
  if (r != 0) {
    sp_error_set("%s: JPEG encoding failed (%s)", path, tjGetErrorStr2(tj));
    tjFree(jpg);
    tjDestroy(tj);
    return -1;
  }
  tjDestroy(tj);
  char *tmp = tmp_name(path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    sp_error_set("%s: cannot create (%s)", path, strerror(errno));
    tjFree(jpg);
    free(tmp);
    return -1;
  }
  int ok = fwrite(jpg, 1, len, f) == len;
  if (!ok) sp_error_set("cannot write %lu bytes (%s)", len, strerror(errno));
  tjFree(jpg);
  return finish(f, tmp, path, ok);
}
