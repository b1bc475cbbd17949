/* Helpers shared by the plot_*.c files (not part of the public API). */
#ifndef SPRY_IO_PLOT_INTERNAL_H
#define SPRY_IO_PLOT_INTERNAL_H

#include <cairo.h>
#include <stdint.h>
#include <stdio.h>

#include "spry/plot.h"

/* Largest side we agree to draw: well under cairo's 32767 limit and keeps a
 * figure under 256 MiB of pixels. */
#define SP_PLOT_MAX_SIDE 8192

/* Writes `path` atomically: fill(f, ctx) writes the content to a temporary
 * file in the same directory, which is synced and renamed over path. fill
 * returns 0, or -1 after setting the error (the temporary file is removed). */
int sp_plot_write_atomic(const char *path, int (*fill)(FILE *f, void *ctx), void *ctx);

/* New white w x h RGB24 surface and its context; -1 with an error naming path
 * when cairo cannot make them (sizes outside 1..SP_PLOT_MAX_SIDE included). */
int sp_plot_begin(const char *path, int w, int h, cairo_surface_t **surface, cairo_t **cr);
/* Checks the drawing status, writes the figure atomically and frees both:
 * JPEG when the name ends in .jpg or .jpeg (any case), else PNG. */
int sp_plot_finish(const char *path, cairo_surface_t *surface, cairo_t *cr);
/* The surface's pixels to path, atomically, in the format sp_plot_finish
 * picks. */
int sp_plot_write_surface(const char *path, cairo_surface_t *surface);
/* SP_IMAGE_FILE_PNG or _JPEG by the name's extension, 0 for any other (no
 * error set: figures with other names are PNG). */
int sp_plot_format_of(const char *path);
/* uint8 HWC (c = 1 or 3) as a JPEG file, atomically (image_write.c). */
int sp_plot_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c);

/* uint8 HWC (c = 1 or 3) image as an RGB24 surface; NULL with an error naming
 * path when the arguments are bad or cairo fails. */
cairo_surface_t *sp_plot_image_surface(const char *path, const uint8_t *img, int w, int h, int c);
/* Checks image arguments; -1 with an error naming path. */
int sp_plot_check_image(const char *path, const uint8_t *img, int w, int h, int c);

/* Paints img with its top-left at (x, y), scaled by s: nearest neighbour for
 * integer factors unless smooth, filtered otherwise. */
void sp_plot_paint_image(cairo_t *cr, cairo_surface_t *img, double x, double y, double s, int smooth);

void sp_plot_set_rgb(cairo_t *cr, uint32_t rgb);
void sp_plot_set_rgba(cairo_t *cr, uint32_t rgb, double alpha);

/* Text: "sans-serif" at `size` px. Alignment: ha 0 = left, 0.5 = centre,
 * 1 = right edge at x; va 0 = top of the font's ascent at y, 0.5 = middle,
 * 1 = bottom of the descent at y. */
void sp_plot_font(cairo_t *cr, double size, int bold);
double sp_plot_text_width(cairo_t *cr, const char *s);
void sp_plot_text(cairo_t *cr, double x, double y, double ha, double va, const char *s);
/* Copies s into buf, shortened with "..." at a UTF-8 boundary so that it is
 * at most max_w wide in the current font; returns buf. */
const char *sp_plot_text_fit(cairo_t *cr, const char *s, double max_w, char *buf, size_t n);

#endif
