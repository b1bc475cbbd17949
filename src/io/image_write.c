/* Images written in the format their file name says: PNG through cairo (as
 * every figure), JPEG through TurboJPEG. Writes are atomic, as for figures. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <turbojpeg.h>

#include "io/plot_internal.h"

int sp_plot_format_of(const char *path) {
  if (!path) return 0;
  /* The extension of the file's own name, not of a folder above it. */
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  const char *dot = strrchr(base, '.');
  if (dot && !strcasecmp(dot, ".png")) return SP_IMAGE_FILE_PNG;
  if (dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"))) return SP_IMAGE_FILE_JPEG;
  return 0;
}

int sp_image_file_format(const char *path) {
  if (!path || !*path) return sp_error_set("image: no output path given");
  int format = sp_plot_format_of(path);
  if (format) return format;
  return sp_error_set("%s: the name does not say a format spry writes (accepted: .png, .jpg, .jpeg, any case)", path);
}

typedef struct {
  const unsigned char *bytes;
  unsigned long n;
  const char *path;
} bytes_job;

static int bytes_fill(FILE *f, void *ctx) {
  const bytes_job *job = ctx;
  if (fwrite(job->bytes, 1, job->n, f) != job->n) return sp_error_set("%s: writing JPEG failed", job->path);
  return 0;
}

int sp_plot_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c) {
  if (sp_plot_check_image(path, px, w, h, c) != 0) return -1;
  tjhandle tj = tjInitCompress();
  if (!tj) return sp_error_set("%s: cannot start the JPEG encoder: %s", path, tjGetErrorStr2(NULL));
  unsigned char *jpeg = NULL;
  unsigned long n = 0;
  /* Quality 92, no chroma subsampling: overlays are thin coloured lines on
   * a photo, which 4:2:0 would smear. */
  int rc = tjCompress2(tj, px, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg, &n, c == 1 ? TJSAMP_GRAY : TJSAMP_444, 92,
                       TJFLAG_ACCURATEDCT);
  if (rc != 0) {
    rc = sp_error_set("%s: encoding JPEG: %s", path, tjGetErrorStr2(tj));
  } else {
    bytes_job job = {jpeg, n, path};
    rc = sp_plot_write_atomic(path, bytes_fill, &job);
  }
  tjFree(jpeg);
  tjDestroy(tj);
  return rc;
}

int sp_image_write(const char *path, const uint8_t *img, int w, int h, int c) {
  int format = sp_image_file_format(path);
  if (format < 0) return -1;
  if (format == SP_IMAGE_FILE_JPEG) return sp_plot_write_jpeg(path, img, w, h, c);
  cairo_surface_t *s = sp_plot_image_surface(path, img, w, h, c);
  if (!s) return -1;
  int rc = sp_plot_write_surface(path, s);
  cairo_surface_destroy(s);
  return rc;
}
