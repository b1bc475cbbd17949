/* spry video: frame-accurate clip reading, clip sampling, pre-decoded frame
 * folders, list files and the synthetic action set.
 *
 * A frame index always means display order: frame i is the i-th frame a full
 * sequential decode of the file outputs. The reader maps indices to packet
 * timestamps (never to decode order), so B-frames, open GOPs and variable frame
 * rates give the same pixels as decoding the whole file from the start.
 *
 * One sp_video handle is not thread-safe; open one per worker thread (opening
 * is cheap after the first time: keyframe indexes are cached per process). */
#ifndef SPRY_VIDEO_H
#define SPRY_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "spry/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- reader */

typedef struct sp_video sp_video;

typedef struct {
  int threads;        /* decoder threads; 0 = 1 (loader workers parallelise across clips).
                         * More: frame threads, used for runs of at least 16 pictures per
                         * thread only; shorter runs decode on one thread */
  int no_index_cache; /* 1 = always rescan the file instead of the process-wide index cache */
  int no_skip;        /* 1 = decode every picture of a run, even those nothing references
                         * (what a reader without skipping does; for comparisons) */
} sp_video_options;

typedef struct {
  char codec[32];        /* "h264", "mpeg4", "gif", ..., or "jpeg" for a frame folder */
  char container[32];    /* demuxer name, or "frames" */
  int width, height;     /* native frame size */
  int64_t frames;        /* frames in display order, counted (not the header's claim) */
  int64_t header_frames; /* what the container says (0 = unknown); may be wrong */
  double fps;            /* average frame rate (0 = unknown) */
  double duration;       /* seconds (0 = unknown) */
  int64_t n_keyframes;
  const int64_t *keyframes; /* display indices of keyframes; valid until close */
  int seekable;             /* 0: timestamps are missing, every fetch decodes from frame 0 */
  int skips_unreferenced;   /* 1: a fetch leaves pictures no other picture references undecoded
                         * unless requested (H.264, HEVC, MPEG-4 Part 2, MPEG-1/2 with pts);
                         * 0: it decodes every picture from the keyframe on */
} sp_video_info;

typedef enum { SP_VIDEO_HWC = 0, SP_VIDEO_CHW = 1 } sp_video_layout;

/* The largest short side a resize may ask for, and the largest side a
 * resized frame may have (a thin clip resized to a big short side): one
 * frame past these is hundreds of MB, a typo rather than a wish. */
#define SP_VIDEO_MAX_SHORT_SIDE 8192
#define SP_VIDEO_MAX_SIDE 32768

/* Output geometry: resize so that the short side is `short_side` (0 = native
 * size), then take a crop_h x crop_w window (0 = the whole resized frame) whose
 * top-left corner is (crop_y, crop_x), -1 = centred. RGB uint8. */
typedef struct {
  int short_side;
  int crop_h, crop_w;
  int crop_y, crop_x;
  sp_video_layout layout;
} sp_video_geom;
/* Native size, whole frame, HWC. */
sp_video_geom sp_video_geom_native(void);
/* Short side `size`, centred size x size crop, given layout. */
sp_video_geom sp_video_geom_square(int size, sp_video_layout layout);

/* Opens a video file, or a frame folder (img_00001.jpg ...; see prepare). */
sp_video *sp_video_open(const char *path);
sp_video *sp_video_open_with(const char *path, const sp_video_options *opt);
void sp_video_close(sp_video *v);
/* Builds the keyframe index on first use; info points into v. */
int sp_video_get_info(sp_video *v, sp_video_info *out);
/* Display-order frame count, or -1 (error set). */
int64_t sp_video_frame_count(sp_video *v);
/* Output size of one frame for geometry g. */
int sp_video_out_size(sp_video *v, const sp_video_geom *g, int *h, int *w);

/* Writes frames idx[0..n) (any order, repeats allowed) into out, frame after
 * frame, each out_h * out_w * 3 bytes. Each needed GOP is decoded once: frames
 * are fetched in decode order, seeking only forward to the nearest keyframe
 * that precedes them; pictures that no other picture references are not
 * decoded unless requested (see skips_unreferenced), and decoding stops at
 * the last requested frame. Returns 0, or -1 with an error naming the file
 * and the frame (index out of range, undecodable data, truncated file). */
int sp_video_get_frames(sp_video *v, const int64_t *idx, int n, const sp_video_geom *g, uint8_t *out);

/* The reference path: decodes the whole file from the start and calls fn for
 * every output frame (index = output order). fn returns non-zero to stop.
 * Returns the number of frames seen, or -1. */
typedef int (*sp_video_frame_fn)(int64_t index, const uint8_t *px, int h, int w, void *user);
int64_t sp_video_decode_all(sp_video *v, const sp_video_geom *g, sp_video_frame_fn fn, void *user);

/* Work counters since open (tests check that each GOP is decoded once):
 * packets sent to the decoder, of which `skipped` were marked as pictures
 * nothing references (left undecoded); frames the decoder output (every
 * picture it decoded: each fetch ends by draining it); frames converted. */
typedef struct {
  int64_t seeks, packets, decoded, converted;
  int64_t skipped;
} sp_video_stats;
sp_video_stats sp_video_get_stats(const sp_video *v);

/* -------------------------------------------------------------- sampling */

/* TSN segment sampling: n_frames split into `segments` equal spans; training
 * picks one uniformly random frame per span from sp_rng_key(seed, epoch,
 * index), testing takes each span's centre. Spans shorter than one frame
 * repeat frames in order. Writes `segments` indices; 0 or -1. */
int sp_sample_tsn(int64_t n_frames, int segments, int train, uint64_t seed, int64_t epoch, int64_t index, int64_t *out);
/* Dense sampling: `clip_len` frames at `stride` from a start that is random in
 * training and, in testing, clip `clip` of `n_clips` evenly spaced starts
 * (n_clips = 1: the centred clip). Indices past the end are clamped to the
 * last frame. Writes clip_len indices; 0 or -1. */
int sp_sample_dense(int64_t n_frames, int clip_len, int stride, int train, int clip, int n_clips, uint64_t seed,
                    int64_t epoch, int64_t index, int64_t *out);

/* ------------------------------------------------------------ list files */

/* Labels are class numbers in [0, SP_VIDEO_MAX_CLASSES): a bound well past
 * any real label set, so a typo cannot size a classifier that does not fit
 * in memory. */
#define SP_VIDEO_MAX_CLASSES 100000

/* A `path label` list (mmaction / PaddleVideo style); a frames list may also
 * hold `dir n_frames label`. Relative paths are taken from the list's folder.
 * A label that is not an integer, negative or too large is an error naming
 * the list's file and line. */
typedef struct {
  int n;
  char **path; /* resolved paths */
  int *label;
  int64_t *frames; /* n_frames column, or -1 when absent */
  int *line;       /* the entry's line in the list file (1-based), for messages */
} sp_video_list;
int sp_video_list_read(const char *list_path, sp_video_list *out);
void sp_video_list_free(sp_video_list *l);

/* A classes file, the one source of class numbers: labels.txt (one name per
 * line, line k names label k; `spry synth actions` and `spry prepare list`
 * write it) or UCF-101's classInd.txt (`N name` lines, numbered from 1 there;
 * the file's first number, 0 or 1, is `base`). Mixed forms, numbers that do
 * not run on one by one, and a name given twice are refused (file:line). */
typedef struct {
  int n, base;
  char **name; /* name[k]: the class of 0-based label k */
  char *path;  /* for messages */
} sp_video_classes;
int sp_video_classes_read(const char *path, sp_video_classes *out);
void sp_video_classes_free(sp_video_classes *c);
/* The 0-based label of the class called name[0..len), or -1. */
int sp_video_classes_find(const sp_video_classes *c, const char *name, size_t len);
/* labels.txt in the folder of list_path: 1 when there is one and it was
 * read into *out, 0 when there is none, -1 on error. */
int sp_video_classes_beside(const char *list_path, sp_video_classes *out);
/* Writes the names one per line (labels.txt form, 0-based); atomic. */
int sp_video_classes_write(const char *path, const sp_video_classes *c);
/* The 0-based label of one list entry (rel: its path as the list gives it):
 * `given` is in the classes file's numbering (has_label); without a label the
 * class of the path's first folder. A label outside the file's numbers, or a
 * first folder naming another class than the label, is refused with a message
 * naming the list, its line and the classes file. */
int sp_video_classes_label(const sp_video_classes *c, const char *list_path, int lineno, const char *rel, size_t rlen,
                           long long given, int has_label, int *label);
/* sp_video_list_read with a classes file (NULL: as sp_video_list_read):
 * labels are in its numbering (UCF's 1-based trainlists with classInd.txt)
 * and come out 0-based, unlabelled lines (UCF's testlists) take their
 * folder's class, and every entry whose first folder is a class must carry
 * that class's label. base_dir (NULL: the list's folder) is where relative
 * paths start. */
int sp_video_list_read_classes(const char *list_path, const char *base_dir, const sp_video_classes *classes,
                               sp_video_list *out);
/* Without data.num_classes the classes are one past the largest label: a
 * largest label far above the others (more than half of the numbers below it
 * unused, over both lists) is refused as a likely typo, naming its line. */
int sp_video_list_check_dense(const sp_video_list *train, const char *train_path, const sp_video_list *val,
                              const char *val_path);
/* Leaves out the entries whose path is not a readable regular file (nor a
 * frame folder with a readable img_00001.jpg), with one line each on stderr
 * when warn is set (list file, line, path, why). Returns how many were left
 * out, or -1 (error naming the list) when none is left. */
int sp_video_list_keep_usable(sp_video_list *l, const char *list_path, int warn);
/* Scans dir/CLASS/ * for videos (and frame folders): the classes come from
 * `labels_csv` (a classes file, sp_video_classes, or lines
 * `relative_path,label`), else dir/labels.txt when there is one (what
 * `spry synth actions` wrote), else the class folders sorted by name. Writes
 * the list (paths relative to the list's folder when possible) and, for class
 * sub-folders, labels.txt beside it (line k names label k; a csv of pairs
 * names no classes, so an older labels.txt is removed). Each file is
 * replaced atomically, the list first, and only once every entry was read. Returns the number of entries or -1. */
int sp_video_list_build(const char *dir, const char *labels_csv, const char *list_out);
/* sp_video_list_build with a split file (NULL: every clip of dir): the clips
 * a UCF-style split names (`Class/clip.avi` relative to dir, with a label in
 * the classes file's numbering or none), in its order. The classes come from
 * labels (a classes file: labels.txt or classInd.txt), else dir/labels.txt
 * when there is one, else the sorted class folders; the list is written with
 * 0-based labels and labels.txt beside it names them. A split needs a
 * classes file. Clips missing from dir are left out with a line each. */
int sp_video_list_build_split(const char *dir, const char *labels, const char *split, const char *list_out);

/* ----------------------------------------------------- pre-decoded frames */

typedef struct {
  int short_side; /* resize before saving; 0 = native */
  int quality;    /* JPEG quality, default 90 */
  int workers;    /* parallel videos; 0 = cores */
} sp_prepare_config;
/* Decodes every video of list_path to out_dir/<name>/img_00001.jpg ... and
 * writes out_dir/frames.list (`name n_frames label`) and a per-folder
 * n_frames file. short_side is checked (at most SP_VIDEO_MAX_SHORT_SIDE)
 * before anything is made. A bad video is reported on stderr and leaves no
 * folder; frames.list then lists the others, and the call returns -1 with
 * an error saying how many of how many failed. Returns videos done or -1. */
int sp_prepare_frames(const char *list_path, const char *out_dir, const sp_prepare_config *cfg);
/* One video to one folder; returns the frame count, or -1 after removing
 * what it wrote (and the folders it made). */
int64_t sp_prepare_video_frames(const char *video, const char *dir, int short_side, int quality);

/* ------------------------------------------------------- image writers */

/* RGB (c=3) or gray (c=1) HWC uint8 to a PNG / JPEG file; 0 or -1. */
int sp_write_png(const char *path, const uint8_t *px, int h, int w, int c);
int sp_write_jpeg(const char *path, const uint8_t *px, int h, int w, int c, int quality);

/* -------------------------------------------------- encoder + synth set */

typedef struct sp_video_writer sp_video_writer;
typedef struct {
  int width, height;
  int fps;              /* nominal rate, time base 1/fps unless vfr */
  int gop;              /* keyframe interval (default 12) */
  int b_frames;         /* max consecutive B-frames (default 2; 0 = none) */
  int open_gop;         /* H.264 only: non-IDR keyframes with leading B-frames */
  int vfr;              /* frame durations vary (time base 1/(fps*4)) */
  int force_mpeg4;      /* MPEG-4 Part 2 even when H.264 is available */
  int quality;          /* crf-like quantiser, default 20 */
  const char *encoder;  /* a libavcodec encoder by name ("libx265", "mpeg2video", "libvpx-vp9", ...);
                       * NULL = H.264, or MPEG-4 Part 2 (reader tests of other codecs) */
  int encoder_defaults; /* 1 = the encoder's own settings (libx264: preset medium, keyint 250,
                       * scene cuts, b-pyramid): only size and rate are set */
  const char *params;   /* libx264 / libx265 private options ("key=value:..."), appended */
} sp_video_writer_config;
sp_video_writer_config sp_video_writer_config_default(int width, int height);
/* Container from the extension (.mp4, .avi, .mkv). */
sp_video_writer *sp_video_writer_open(const char *path, const sp_video_writer_config *cfg);
/* Adds one RGB HWC frame. */
int sp_video_writer_add(sp_video_writer *w, const uint8_t *rgb);
/* Flushes and writes the trailer; frees w either way. */
int sp_video_writer_close(sp_video_writer *w);
/* "h264 (libx264)" or "mpeg4"; what the writer uses by default. */
const char *sp_video_writer_codec(void);

#define SP_SYNTH_CLASSES 4
/* move_right, move_left, rotate_cw, rotate_ccw. Left is right played
 * backwards and ccw is cw played backwards (same content per clip), so the
 * frame-averaged image says nothing about the class: only motion does. */
const char *sp_synth_class_name(int cls);
/* Renders frame t of clip (seed, clip_id) of class cls: size x size RGB HWC. */
void sp_synth_render(uint64_t seed, int64_t clip_id, int cls, int t, int frames, int size, uint8_t *rgb);
/* Writes count clips to out_dir/<class>/clip_NNNNN.mp4, labels.txt (class
 * names) and list.txt (`path label`). Classes cycle, so counts are balanced.
 * Returns 0 or -1. */
int sp_synth_actions(const char *out_dir, int count, int frames, int size, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
