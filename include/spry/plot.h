/* spry plots and reports: PNG figures drawn with cairo and a self-contained
 * index.html that shows them (the trainer's report directory).
 *
 * Every function returns 0 on success and -1 on failure after sp_error_set()
 * with a message that names the output file and the reason (a cairo status
 * string or strerror). Output files are written atomically: the bytes go to a
 * temporary file next to the target ("<path>.tmp.XXXXXX"), which is synced and
 * renamed over <path>; a crash or a failed write leaves the previous file (or
 * none), never half of one, and no temporary file behind.
 *
 * Image conventions match spry/data.h: images are uint8, row-major HWC with
 * c = 1 (grey) or c = 3 (RGB); keypoints are float (x, y) pairs in pixels,
 * origin top-left, pixel centres at integers. A point whose x or y is not
 * finite is "missing" and is not drawn.
 *
 * Text uses cairo's toy font API ("sans-serif" through fontconfig), which
 * works headless; no display or X server is needed.
 *
 * Thread-safety: functions share no mutable state and may run concurrently on
 * different output paths. */
#ifndef SPRY_PLOT_H
#define SPRY_PLOT_H

#include <stdint.h>

#include "spry/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Colours used by the overlays, as 0xRRGGBB, so callers (and tests) can name
 * them, e.g. in report text. */
#define SP_PLOT_PRED_RGB 0xe8283cu /* predicted points: red */
#define SP_PLOT_GT_RGB 0x28d250u   /* ground-truth points: green */
#define SP_PLOT_LINK_RGB 0xffd21eu /* line from ground truth to prediction: yellow */

/* The colour of line-chart series i (0xRRGGBB). Ten distinct hues; series 10
 * and later repeat them with a dashed line. */
uint32_t sp_plot_series_rgb(int i);

/* ---- line charts ---- */

/* One curve. x and y hold n values each; n = 0 (x, y may be NULL) is an
 * empty series. A point with a non-finite x or y (or y <= 0 on a log axis) is
 * skipped and breaks the line, so gaps stay visible. label NULL or "" keeps the
 * series out of the legend. */
typedef struct {
  const char *label;
  const double *x, *y;
  int n;
} sp_series;

/* Line chart, w x h pixels (160..8192 x 120..8192): title, axis labels (any
 * may be NULL), ticks at 1-2-5 steps with numbers, a light grid, a legend in
 * the corner with the fewest points under it, and a distinct colour per
 * series. Series with at most 40 points also get a dot per point (per-epoch
 * validation curves). log_y != 0 makes the y axis logarithmic (ticks at 1, 2, 5
 * x 10^k over up to three decades, otherwise whole decades). With no drawable
 * point at all the axes are still drawn, with "no data" in the middle. Used
 * for loss and validation curves and for the CED plot. */
int sp_plot_lines(const char *png_path, int w, int h, const char *title, const char *xlabel, const char *ylabel,
                  int n_series, const sp_series *series, int log_y);

/* What sp_plot_lines_opt adds to a line chart; a zeroed struct is
 * sp_plot_lines' behaviour, so callers name only what they change, e.g.
 * (sp_plot_lines_options){.y_min = 0, .y_max = 1, .note = "3 faces above the plotted range"}. */
typedef struct {
  int log_y;           /* logarithmic y axis, as sp_plot_lines' log_y */
  double y_min, y_max; /* a fixed y range when y_min < y_max (both finite; > 0 on a log axis): points
                        * outside it are clipped; otherwise the range follows the data */
  const char *note;    /* NULL or "": none; else a last legend row, text only (e.g. what lies off
                        * the chart) */
} sp_plot_lines_options;

/* sp_plot_lines with options; o NULL is all defaults. */
int sp_plot_lines_opt(const char *png_path, int w, int h, const char *title, const char *xlabel, const char *ylabel,
                      int n_series, const sp_series *series, const sp_plot_lines_options *o);

/* ---- image files ---- */

#define SP_IMAGE_FILE_PNG 1
#define SP_IMAGE_FILE_JPEG 2

/* The format an output name asks for: SP_IMAGE_FILE_PNG for .png,
 * SP_IMAGE_FILE_JPEG for .jpg or .jpeg (any case), else -1 with an error
 * naming the file and the accepted extensions. Call it before any work, so a
 * bad name is refused at once. */
int sp_image_file_format(const char *path);

/* Writes a uint8 HWC image (c = 1 grey or 3 RGB) atomically in the format its
 * name says (PNG, or JPEG at quality 92 without chroma subsampling); other
 * names are refused as by sp_image_file_format. */
int sp_image_write(const char *path, const uint8_t *img, int w, int h, int c);

/* ---- keypoint overlays ---- */

#define SP_KP_LINKS 1u   /* a line from each ground-truth point to its prediction */
#define SP_KP_INDICES 2u /* the point's index next to each prediction (or gt when no pred) */

/* The image with keypoints: ground truth as green dots, predictions as smaller
 * red dots drawn on top (a red dot inside a green ring = a close hit). pred and
 * gt ([k][2] each) may be NULL. The image is scaled up by the integer factor
 * `upscale` (nearest neighbour, so crop pixels stay visible); upscale <= 0
 * picks one that makes the longer side about 384 px (1..8). Marker sizes are
 * in output pixels and do not grow with the factor. */
int sp_draw_keypoints_png(const char *png_path, const uint8_t *img, int w, int h, int c, const float *pred,
                          const float *gt, int k, int upscale, unsigned flags);

/* A photo with the faces a model found: each face's box as a yellow frame and
 * its points (prediction colour), dots sized by the face. boxes [n][4]
 * (x, y, w, h), pts[f] [k][2], in the image's pixels. Written in the format
 * the name says, as sp_image_write (other names are refused). */
int sp_draw_faces_png(const char *png_path, const uint8_t *img, int w, int h, int c, int n, const float *boxes,
                      const float *const *pts, int k);

/* One cell of a keypoint grid: an image with its points and a caption shown
 * under it (e.g. "err 3.2 px"; NULL for none, long captions are shortened with
 * "..."), and optionally the face box the model was given (x, y, w, h in the
 * image's pixels; NULL for none), drawn as a thin yellow frame. */
typedef struct {
  const uint8_t *img;
  int w, h, c;
  const float *pred, *gt;
  int k;
  const char *caption;
  const float *box;
} sp_grid_cell;

/* n cells in rows of `cols` (cols <= 0: about square), each image fitted into
 * a cell_px x cell_px square (aspect kept), a caption under each, and the
 * title with a colour key for ground truth / prediction on top. flags as for
 * sp_draw_keypoints_png. n = 0 draws the title and "(no images)". */
int sp_keypoint_grid_png(const char *png_path, const char *title, int cols, int n, const sp_grid_cell *cells,
                         int cell_px, unsigned flags);

/* ---- heatmaps ---- */

/* Maps the unit interval to a perceptual colour map (lightness rises
 * steadily from near-black through purple, red and orange to pale yellow),
 * computed in CIE LCh; t is clamped to [0, 1]. Writes 8-bit R, G, B. */
void sp_plot_colormap(double t, uint8_t rgb[3]);

/* n_maps probability maps over one image, side by side: each panel is the
 * image in dimmed grey with the map blended on top in sp_plot_colormap
 * colours (the map is scaled by its own maximum, so any scale works; the
 * colour's opacity follows the value, so the face shows through where the map
 * is low), an optional white crosshair, open in the middle so the map shows,
 * at points[i] (image pixels; NULL for none: the model's point), a ring in
 * SP_PLOT_GT_RGB at truth[i] (NULL for none: the true point, drawn under the
 * crosshair; a row under the captions then says which marker is which) and
 * captions[i] under it (captions or any entry may be NULL).
 * maps[i] is h x w floats (the image's size); non-finite entries count as 0.
 * Panels are cell_px wide (height by the image's aspect), laid out left to
 * right with a margin of max(4, cell_px / 24) px around and between them. */
int sp_heatmaps_png(const char *png_path, const uint8_t *img, int w, int h, int c, int n_maps, const float *const *maps,
                    const char *const *captions, const float *points, const float *truth, int cell_px);

/* ---- filters ---- */

/* First-layer convolution weights [cout][cin][kh][kw] as a grid of tiles, each
 * filter stretched to its own min..max (a constant filter is mid grey): RGB
 * for cin = 3 (channels in input order), grey for cin = 1, grey of the channel
 * mean otherwise. Tiles are tile_px square (a kh x kw filter is scaled by the
 * integer factor max(1, tile_px / max(kh, kw)) and centred), ceil(sqrt(cout))
 * per row, with a white gap of max(1, tile_px / 8) px around and between
 * them; tile i sits at column i % cols, row i / cols. */
int sp_filters_png(const char *png_path, const float *w, int cout, int cin, int kh, int kw, int tile_px);

/* ---- report page ---- */

/* One figure of the report: a heading, an image path relative to the HTML
 * file (NULL: text only) and a short text (NULL for none; a blank line starts
 * a new paragraph). */
typedef struct {
  const char *heading, *png, *text;
} sp_report_item;

/* Writes a self-contained index.html (inline CSS, no scripts, no external
 * assets): the title, a key/value table (n_rows rows; e.g. final metrics) and
 * each item as a section with its heading, text and image (the image links to
 * the full-size PNG). All text is HTML-escaped; image paths are
 * percent-encoded, so any file name works. Whether the PNGs exist is not
 * checked (a report may be written before its last figure). */
int sp_report_index_html(const char *html_path, const char *title, int n_rows, const char *const *keys,
                         const char *const *values, int n_items, const sp_report_item *items);

/* Frees the process-wide caches behind text drawing (cairo's font and
 * pattern caches, fontconfig's configuration), which otherwise show up as
 * leaks under LeakSanitizer/valgrind. Call at most once, at exit, when no
 * thread draws any more (tests and the CLI's main). */
void sp_plot_release_caches(void);

#ifdef __cplusplus
}
#endif
#endif
