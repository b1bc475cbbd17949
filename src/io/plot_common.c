/* Shared plumbing for the plot_*.c files: atomic output, surfaces, colours
 * and text helpers. */
#define _GNU_SOURCE /* mkostemp */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/plot_internal.h"

int sp_plot_write_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx) {
  if (!path || !*path) return sp_error_set("plot: no output path given");
  size_t len = strlen(path) + 16;
  char *tmp = sp_xmalloc(len);
  snprintf(tmp, len, "%s.tmp.XXXXXX", path);
  /* mkostemp rather than "<path>.tmp.<pid>": two threads of one process may
   * write figures at the same time, and each needs its own temporary. */
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    sp_error_set("%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
    free(tmp);
    return -1;
  }
  /* mkostemp makes the file 0600; a report is meant to be read by others. */
  (void)fchmod(fd, 0644);
  FILE *f = fdopen(fd, "wb");
  if (!f) {
    sp_error_set("%s: cannot open %s: %s", path, tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
  }
  int rc = fill(f, ctx);
  if (rc == 0 && fflush(f) != 0) rc = sp_error_set("%s: writing %s: %s", path, tmp, strerror(errno));
  /* Synced before the rename so that after a power cut the name points at
   * either the old figure or the complete new one. */
  if (rc == 0 && fsync(fileno(f)) != 0) rc = sp_error_set("%s: syncing %s: %s", path, tmp, strerror(errno));
  if (fclose(f) != 0 && rc == 0) rc = sp_error_set("%s: closing %s: %s", path, tmp, strerror(errno));
  if (rc == 0 && rename(tmp, path) != 0)
    rc = sp_error_set("%s: renaming %s into place: %s", path, tmp, strerror(errno));
  if (rc != 0) unlink(tmp);
  free(tmp);
  return rc;
}

int sp_plot_begin(const char *path, int w, int h, cairo_surface_t **surface, cairo_t **cr) {
  *surface = NULL;
  *cr = NULL;
  if (w < 1 || h < 1 || w > SP_PLOT_MAX_SIDE || h > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: figure size %dx%d outside 1..%d", path ? path : "(null)", w, h, SP_PLOT_MAX_SIDE);
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  cairo_status_t st = cairo_surface_status(s);
  if (st != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    return sp_error_set("%s: cannot make a %dx%d image: %s", path, w, h, cairo_status_to_string(st));
  }
  cairo_t *c = cairo_create(s);
  st = cairo_status(c);
  if (st != CAIRO_STATUS_SUCCESS) {
    cairo_destroy(c);
    cairo_surface_destroy(s);
    return sp_error_set("%s: cannot draw: %s", path, cairo_status_to_string(st));
  }
  cairo_set_source_rgb(c, 1, 1, 1);
  cairo_paint(c);
  *surface = s;
  *cr = c;
  return 0;
}

typedef struct {
  cairo_surface_t *surface;
  const char *path;
} png_job;

static cairo_status_t png_write_chunk(void *closure, const unsigned char *data, unsigned int n) {
  FILE *f = closure;
  return fwrite(data, 1, n, f) == n ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_WRITE_ERROR;
}

static int png_fill(FILE *f, void *ctx) {
  png_job *job = ctx;
  errno = 0;
  cairo_status_t st = cairo_surface_write_to_png_stream(job->surface, png_write_chunk, f);
  if (st != CAIRO_STATUS_SUCCESS) {
    /* A short write is usually a full disk: say so rather than only
     * "error while writing to output stream". */
    if (st == CAIRO_STATUS_WRITE_ERROR && errno != 0)
      return sp_error_set("%s: writing PNG: %s (%s)", job->path, cairo_status_to_string(st), strerror(errno));
    return sp_error_set("%s: writing PNG: %s", job->path, cairo_status_to_string(st));
  }
  return 0;
}

int sp_plot_finish(const char *path, cairo_surface_t *surface, cairo_t *cr) {
  int rc = 0;
  cairo_status_t st = cairo_status(cr);
  if (st != CAIRO_STATUS_SUCCESS) rc = sp_error_set("%s: drawing failed: %s", path, cairo_status_to_string(st));
  cairo_destroy(cr);
  if (rc == 0) rc = sp_plot_write_surface(path, surface);
  cairo_surface_destroy(surface);
  return rc;
}

int sp_plot_write_surface(const char *path, cairo_surface_t *surface) {
  cairo_surface_flush(surface);
  if (sp_plot_format_of(path) != SP_IMAGE_FILE_JPEG) {
    png_job job = {surface, path};
    return sp_plot_write_atomic(path, png_fill, &job);
  }
  /* cairo has no JPEG writer: its xRGB pixels to packed RGB for TurboJPEG. */
  int w = cairo_image_surface_get_width(surface), h = cairo_image_surface_get_height(surface);
  int stride = cairo_image_surface_get_stride(surface);
  const unsigned char *data = cairo_image_surface_get_data(surface);
  uint8_t *rgb = sp_xmalloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint32_t v;
      memcpy(&v, data + (size_t)y * stride + 4 * (size_t)x, 4);
      uint8_t *o = rgb + ((size_t)y * w + x) * 3;
      o[0] = (uint8_t)(v >> 16), o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)v;
    }
  int rc = sp_plot_write_jpeg(path, rgb, w, h, 3);
  free(rgb);
  return rc;
}

int sp_plot_check_image(const char *path, const uint8_t *img, int w, int h, int c) {
  if (!img) return sp_error_set("%s: no image given", path);
  if (c != 1 && c != 3) return sp_error_set("%s: image has %d channels; 1 or 3 expected", path, c);
  if (w < 1 || h < 1 || w > SP_PLOT_MAX_SIDE || h > SP_PLOT_MAX_SIDE)
    return sp_error_set("%s: image size %dx%d outside 1..%d", path, w, h, SP_PLOT_MAX_SIDE);
  return 0;
}

cairo_surface_t *sp_plot_image_surface(const char *path, const uint8_t *img, int w, int h, int c) {
  if (sp_plot_check_image(path, img, w, h, c) != 0) return NULL;
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  cairo_status_t st = cairo_surface_status(s);
  if (st != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(s);
    sp_error_set("%s: cannot make a %dx%d image: %s", path, w, h, cairo_status_to_string(st));
    return NULL;
  }
  cairo_surface_flush(s);
  unsigned char *base = cairo_image_surface_get_data(s);
  int stride = cairo_image_surface_get_stride(s);
  for (int y = 0; y < h; y++) {
    uint32_t *row = (uint32_t *)(void *)(base + (size_t)y * (size_t)stride);
    const uint8_t *src = img + (size_t)y * (size_t)w * (size_t)c;
    for (int x = 0; x < w; x++) {
      uint32_t r, g, b;
      if (c == 1) {
        r = g = b = src[x];
      } else {
        r = src[3 * x];
        g = src[3 * x + 1];
        b = src[3 * x + 2];
      }
      row[x] = (r << 16) | (g << 8) | b; /* RGB24: native-endian xRGB words */
    }
  }
  cairo_surface_mark_dirty(s);
  return s;
}

void sp_plot_paint_image(cairo_t *cr, cairo_surface_t *img, double x, double y, double s, int smooth) {
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_scale(cr, s, s);
  cairo_set_source_surface(cr, img, 0, 0);
  /* Integer factors use nearest neighbour so crop pixels stay sharp squares
   * (what one wants when judging a point to the pixel); other factors
   * (fitting a grid cell, shrinking) and smooth maps filter properly. */
  int integer = s >= 1 && fabs(s - round(s)) < 1e-9;
  cairo_pattern_set_filter(cairo_get_source(cr), integer && !smooth ? CAIRO_FILTER_NEAREST : CAIRO_FILTER_GOOD);
  /* PAD so that filtering at the border does not fade to black. */
  cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);
  cairo_rectangle(cr, 0, 0, cairo_image_surface_get_width(img), cairo_image_surface_get_height(img));
  cairo_fill(cr);
  cairo_restore(cr);
}

uint32_t sp_plot_series_rgb(int i) {
  /* Ten hues far apart that stay distinguishable on white and for the common
   * forms of colour blindness: blue and orange first, since most charts have
   * one or two series. */
  static const uint32_t palette[10] = {0x1f63b4, 0xf07d0a, 0x2b9c3a, 0xd02a2c, 0x8a5cc0,
                                       0x8c5232, 0xdc6cbc, 0x707070, 0xa8a81c, 0x14b0c4};
  if (i < 0) i = -i;
  return palette[i % 10];
}

void sp_plot_set_rgba(cairo_t *cr, uint32_t rgb, double alpha) {
  cairo_set_source_rgba(cr, ((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0, alpha);
}

void sp_plot_set_rgb(cairo_t *cr, uint32_t rgb) { sp_plot_set_rgba(cr, rgb, 1.0); }

void sp_plot_font(cairo_t *cr, double size, int bold) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double sp_plot_text_width(cairo_t *cr, const char *s) {
  if (!s || !*s) return 0;
  cairo_text_extents_t te;
  cairo_text_extents(cr, s, &te);
  return te.x_advance;
}

void sp_plot_text(cairo_t *cr, double x, double y, double ha, double va, const char *s) {
  if (!s || !*s) return;
  cairo_font_extents_t fe;
  cairo_font_extents(cr, &fe);
  double width = sp_plot_text_width(cr, s);
  /* Vertical placement from the font's ascent/descent rather than the ink
   * extents, so labels of one row share a baseline whatever their letters. */
  double top = y - va * (fe.ascent + fe.descent);
  cairo_move_to(cr, x - ha * width, top + fe.ascent);
  cairo_show_text(cr, s);
  cairo_new_path(cr);
}

const char *sp_plot_text_fit(cairo_t *cr, const char *s, double max_w, char *buf, size_t n) {
  if (n == 0) return buf;
  buf[0] = 0;
  if (!s) return buf;
  snprintf(buf, n, "%s", s);
  if (sp_plot_text_width(cr, buf) <= max_w) return buf;
  size_t len = strlen(buf);
  while (len > 0) {
    len--;
    /* Step back over UTF-8 continuation bytes so no character is cut. */
    while (len > 0 && ((unsigned char)buf[len] & 0xC0) == 0x80) len--;
    if (len + 4 > n) continue;
    memcpy(buf + len, "...", 4);
    if (sp_plot_text_width(cr, buf) <= max_w) return buf;
  }
  snprintf(buf, n, "%s", sp_plot_text_width(cr, "...") <= max_w ? "..." : "");
  return buf;
}

void sp_plot_release_caches(void) {
  cairo_debug_reset_static_data();
  /* FcFini is looked up at run time: fontconfig is cairo's dependency, not
   * one spry links, and a cairo built without it simply has none. */
  void (*fc_fini)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "FcFini");
  if (fc_fini) fc_fini();
}
