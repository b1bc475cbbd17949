/* Region decoding of JPEGs with the classic libjpeg API of libjpeg-turbo.
 *
 * The cache build only needs the face crop of each image, usually ~30% of
 * its area, at ~1.3x the working size. TurboJPEG's tjDecompress2 can only
 * decode the whole image at 1/2, 1/4 or 1/8; the classic API can also
 *   - scale by any M/8 in the DCT domain (the IDCT emits M x M pixels per
 *     block, and the chroma planes are scaled up in the IDCT instead of
 *     being upsampled), so the crop can be decoded just above working size;
 *   - skip the IDCT, upsampling and colour conversion of the columns left
 *     and right of the crop (jpeg_crop_scanline) and of the rows above it
 *     (jpeg_skip_scanlines), and stop after the crop's last row.
 * Only the entropy decoding of the rows down to the crop's bottom is left.
 *
 * One decoder per thread: creating a decompressor allocates its pools. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "data/data_internal.h"

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} err_mgr;

struct sp_jpeg_dec {
  struct jpeg_decompress_struct cinfo;
  err_mgr err;
  int have_header;    /* a header was read and the stream is not finished */
  int check_end;      /* no end marker seen: decode to the end to tell a cut from padding */
  const char *what;   /* file name for messages */
  const uint8_t *buf; /* the compressed bytes of the current image */
  size_t len;
  uint8_t *px; /* reused output buffer */
  size_t px_cap;
  JSAMPROW *rows; /* reused row pointers */
  size_t rows_cap;
  /* The current request, kept here so the setjmp frames hold no locals
   * that a longjmp could clobber. */
  int c, num, x0, y0, x1, y1, sw, sh;
  sp_jpeg_region *out;
};

/* libjpeg's default error_exit calls exit(): jump back to the caller
 * instead, keeping the formatted message. */
static void on_error(j_common_ptr c) {
  err_mgr *e = (err_mgr *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jump, 1);
}

/* Warnings (level -1) are fatal, as with TurboJPEG's TJFLAG_STOPONWARNING:
 * "premature end of data" and friends mean the decoder is inventing pixels,
 * and a damaged image must be skipped, not trained on. Trace messages
 * (level >= 0) are dropped. */
static void on_message(j_common_ptr c, int level) {
  if (level < 0) on_error(c);
}

sp_jpeg_dec *sp_jpeg_dec_new(void) {
  sp_jpeg_dec *volatile d = calloc(1, sizeof *d);
  if (!d) {
    sp_error_set("out of memory for a JPEG decoder");
    return NULL;
  }
  d->cinfo.err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = on_error;
  d->err.pub.emit_message = on_message;
  if (setjmp(d->err.jump)) {
    /* jpeg_create_decompress fails only when out of memory. */
    sp_error_set("cannot create a JPEG decoder (%s)", d->err.msg);
    jpeg_destroy_decompress(&d->cinfo);
    free(d);
    return NULL;
  }
  jpeg_create_decompress(&d->cinfo);
  return d;
}

void sp_jpeg_dec_free(sp_jpeg_dec *d) {
  if (!d) return;
  jpeg_destroy_decompress(&d->cinfo);
  free(d->px);
  free(d->rows);
  free(d);
}

int sp_jpeg_scaled_dim(int dim, int num) { return (int)(((long)dim * num + 7) / 8); }

/* Whether the last bytes hold an EOI marker. Decoding stops after the
 * crop's last row, so the decoder itself would never see a cut below the
 * crop; the old whole-image decode skipped such files, and so must this one.
 * Without the marker (a cut, or a file with a long trailer after EOI) the
 * region decode goes on to the end, where libjpeg tells the two apart. */
static int has_eoi(const uint8_t *buf, size_t len) {
  size_t stop = len > 64 ? len - 64 : 0;
  for (size_t i = len; i >= stop + 2; i--)
    if (buf[i - 2] == 0xFF && buf[i - 1] == 0xD9) return 1;
  return 0;
}

int sp_jpeg_dec_header(sp_jpeg_dec *d, const uint8_t *buf, size_t len, const char *what, int *w, int *h) {
  j_decompress_ptr ci = &d->cinfo;
  /* Any previous image may have been left mid-stream (decoding stops after
   * the crop, or an error jumped out): reset, keeping the allocated pools. */
  jpeg_abort_decompress(ci);
  d->have_header = 0;
  d->what = what;
  d->buf = buf;
  d->len = len;
  if (len < 4 || len > (size_t)0xFFFFFFFFu) return sp_error_set("%s: not a JPEG (size %zu)", what, len);
  d->check_end = !has_eoi(buf, len);
  if (setjmp(d->err.jump)) {
    jpeg_abort_decompress(ci);
    return sp_error_set("%s: corrupt JPEG header (%s)", what, d->err.msg);
  }
  jpeg_mem_src(ci, buf, (unsigned long)len);
  if (jpeg_read_header(ci, TRUE) != JPEG_HEADER_OK) {
    jpeg_abort_decompress(ci);
    return sp_error_set("%s: JPEG has no image (tables only)", what);
  }
  /* The region decode allocates rows of the whole width and, for a
   * progressive file, coefficients of the whole image: a hostile header's
   * 65535 x 65535 is refused here, as the whole-image decoders refuse it. */
  if (ci->image_width == 0 || ci->image_height == 0 ||
      (int64_t)ci->image_width * ci->image_height > SP_MAX_IMAGE_PIXELS) {
    int rc = sp_error_set("%s: a %ux%u JPEG (at most %lld pixels)", what, ci->image_width, ci->image_height,
                          (long long)SP_MAX_IMAGE_PIXELS);
    jpeg_abort_decompress(ci);
    return rc;
  }
  *w = (int)ci->image_width;
  *h = (int)ci->image_height;
  d->have_header = 1;
  return 0;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The libjpeg calls of a region decode; errors longjmp to the caller. */
static int region_body(sp_jpeg_dec *d) {
  j_decompress_ptr ci = &d->cinfo;
  const int c = d->c, sw = d->sw, sh = d->sh, y0 = d->y0, y1 = d->y1;
  /* Partial-width decoding treats the first and last decoded columns like
   * image edges in the fancy chroma upsampling, so they may differ from the
   * full decode (libjpeg.txt, "Partial image decompression"); very narrow
   * crops (one chroma column) differ everywhere. Two more columns each side
   * and at least 16 columns keep every requested pixel identical to the
   * full decode (checked by tests/data/test_decode_crop.c). */
  int ca = d->x0 - 2 > 0 ? d->x0 - 2 : 0, cb = d->x1 + 2 < sw ? d->x1 + 2 : sw;
  if (cb - ca < 16) {
    cb = ca + 16 < sw ? ca + 16 : sw;
    ca = cb - 16 > 0 ? cb - 16 : 0;
  }
  JDIMENSION cx = (JDIMENSION)ca, cw = (JDIMENSION)(cb - ca);
  ci->out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  ci->scale_num = (unsigned)d->num;
  ci->scale_denom = 8;
  /* The fast integer IDCT, as TurboJPEG's TJFLAG_FASTDCT did (used only at
   * 8/8; the scaled IDCTs have one implementation each). */
  ci->dct_method = JDCT_IFAST;
  jpeg_start_decompress(ci);
  if ((int)ci->output_width != sw || (int)ci->output_height != sh || ci->output_components != c)
    return sp_error_set("%s: JPEG scaled to %ux%ux%d, expected %dx%dx%d", d->what, ci->output_width, ci->output_height,
                        ci->output_components, sw, sh, c);
  if (cx > 0 || cw < (JDIMENSION)sw) jpeg_crop_scanline(ci, &cx, &cw); /* may move cx left (iMCU) */
  const int ow = (int)ci->output_width, oh = y1 - y0;
  /* One spare row: the end check below reads the image's last row. */
  size_t need = (size_t)ow * (size_t)(oh + 1) * (size_t)c;
  if (need > d->px_cap) {
    free(d->px);
    d->px = malloc(need);
    d->px_cap = d->px ? need : 0;
  }
  if ((size_t)oh > d->rows_cap) {
    free(d->rows);
    d->rows = malloc(sizeof(JSAMPROW) * (size_t)oh);
    d->rows_cap = d->rows ? (size_t)oh : 0;
  }
  if (!d->px || !d->rows) return sp_error_set("%s: out of memory for a %dx%d JPEG region", d->what, ow, oh);
  for (int r = 0; r < oh; r++) d->rows[r] = d->px + (size_t)r * ow * c;
  if (y0 > 0 && jpeg_skip_scanlines(ci, (JDIMENSION)y0) != (JDIMENSION)y0)
    return sp_error_set("%s: JPEG ended before row %d", d->what, y0);
  for (int got = 0; got < oh;) {
    JDIMENSION n = jpeg_read_scanlines(ci, d->rows + got, (JDIMENSION)(oh - got));
    if (n == 0) return sp_error_set("%s: JPEG decoder returned no rows at row %d", d->what, y0 + got);
    got += (int)n;
  }
  if (d->check_end) {
    /* Entropy-decode the rest (warnings are fatal: a cut file fails here)
     * and read up to the end marker. */
    /* Skipping to the very bottom decodes nothing (libjpeg-turbo just marks
     * the input done), so skip all but the last row and read that one. */
    JDIMENSION left = ci->output_height - ci->output_scanline;
    if (left > 1 && jpeg_skip_scanlines(ci, left - 1) != left - 1)
      return sp_error_set("%s: truncated JPEG (image data ends early)", d->what);
    if (left > 0) {
      JSAMPROW spare = d->px + (size_t)ow * oh * c;
      if (jpeg_read_scanlines(ci, &spare, 1) != 1) return sp_error_set("%s: truncated JPEG (no last row)", d->what);
    }
    jpeg_finish_decompress(ci);
  }
  sp_jpeg_region *out = d->out;
  out->px = d->px;
  out->w = ow;
  out->h = oh;
  out->c = c;
  out->x0 = (int)cx;
  out->y0 = y0;
  out->sw = sw;
  out->sh = sh;
  return 0;
}

static int region_guarded(sp_jpeg_dec *d) {
  if (setjmp(d->err.jump)) {
    jpeg_abort_decompress(&d->cinfo);
    return sp_error_set("%s: corrupt or truncated JPEG (%s)", d->what, d->err.msg);
  }
  int rc = region_body(d);
  /* Success or not, the rows below the crop are not needed: stop here
   * (jpeg_finish_decompress would insist on reading them). */
  jpeg_abort_decompress(&d->cinfo);
  return rc;
}

int sp_jpeg_dec_region(sp_jpeg_dec *d, int c, int num, int x0, int y0, int x1, int y1, sp_jpeg_region *out) {
  memset(out, 0, sizeof *out);
  if (!d->what) d->what = "image";
  if (!d->have_header) return sp_error_set("%s: JPEG region decode without a header", d->what);
  d->have_header = 0; /* one region per header */
  if (c != 1 && c != 3) return sp_error_set("%s: channels must be 1 or 3, not %d", d->what, c);
  if (num < 1 || num > 8) return sp_error_set("%s: JPEG scale %d/8 out of range (1..8)", d->what, num);
  const int sw = sp_jpeg_scaled_dim((int)d->cinfo.image_width, num);
  const int sh = sp_jpeg_scaled_dim((int)d->cinfo.image_height, num);
  /* The requested rectangle, clamped to the scaled image and at least one
   * pixel (a crop entirely outside the image still yields a valid region). */
  d->x0 = clampi(x0, 0, sw - 1);
  d->y0 = clampi(y0, 0, sh - 1);
  d->x1 = clampi(x1, d->x0 + 1, sw);
  d->y1 = clampi(y1, d->y0 + 1, sh);
  d->c = c;
  d->num = num;
  d->sw = sw;
  d->sh = sh;
  d->out = out;
  return region_guarded(d);
}
