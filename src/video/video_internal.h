/* Internal pieces of the video reader shared by the files of src/video. */
#ifndef SPRY_VIDEO_INTERNAL_H
#define SPRY_VIDEO_INTERNAL_H

#include <stdint.h>

#include "spry/video.h"

/* ------------------------------------------------------------ index
 * One scan of the packets (demux only, no decoding) gives everything a
 * frame-accurate seek needs. Decode position = packet order in the file. */
typedef struct sp_vindex {
  int64_t n_frames;  /* display-order frames */
  int64_t n_packets; /* video packets, decode order (includes discarded ones) */
  int seekable;      /* every packet had a distinct pts */
  /* per display frame i (seekable mode): */
  int64_t *pts;   /* ascending */
  int32_t *dec;   /* decode position of frame i's packet */
  int32_t *start; /* decode position of the keyframe to start decoding at */
  /* per packet, sorted by pts (seekable mode): pts -> decode position */
  int64_t *pkt_pts;
  int32_t *pkt_dec;
  /* per keyframe, decode order */
  int64_t n_keys;
  int32_t *key_dec;
  int64_t *key_seek_ts; /* timestamps to try with av_seek_frame: the pts, */
  int64_t *key_dts;     /* then the dts (demuxers index one or the other) */
  int64_t *key_disp;    /* display indices of keyframes, ascending */
  int64_t n_keys_disp;
  double fps, duration;
  /* Skipping unreferenced pictures (refs.c): per packet in decode order, 1
   * when no other picture references it and leaving it undecoded is exact;
   * ref_before[d] counts the packets before d that must be decoded (so a
   * stretch's decode work is one subtraction). NULL when nothing can be
   * skipped: the codec has no parser, or the stream is not seekable. */
  uint8_t *pkt_skip;
  int32_t *ref_before; /* n_packets + 1 entries */
  int skip_kind;       /* SP_VREFS_*, or SP_VREFS_NONE when pkt_skip is NULL */
  int refs;            /* owned by the cache under its lock */
} sp_vindex;

struct AVFormatContext;
/* Scans fmt's stream si from the current position (the file start). */
sp_vindex *sp_vindex_scan(struct AVFormatContext *fmt, int si, const char *what);
void sp_vindex_release(sp_vindex *ix);
/* Process-wide cache keyed by (path, size, mtime); NULL when absent. */
sp_vindex *sp_vindex_cache_get(const char *path);
void sp_vindex_cache_put(const char *path, sp_vindex *ix);
/* Display index of the frame with this pts (binary search), or -1. */
int64_t sp_vindex_frame_of_pts(const sp_vindex *ix, int64_t pts);
/* Decode position of the packet with this pts, or -1. */
int64_t sp_vindex_dec_of_pts(const sp_vindex *ix, int64_t pts);

/* Packets doing the decode work in [a, b) (decode positions): every packet
 * when nothing can be skipped. */
static inline int64_t sp_vindex_work(const sp_vindex *ix, int64_t a, int64_t b) {
  if (b <= a) return 0;
  return ix->ref_before ? (int64_t)ix->ref_before[b] - ix->ref_before[a] : b - a;
}

/* ------------------------------------------------ unreferenced pictures */
enum { SP_VREFS_NONE = 0, SP_VREFS_H264, SP_VREFS_HEVC, SP_VREFS_MPEG4, SP_VREFS_MPEG12 };
typedef struct {
  int kind;     /* SP_VREFS_* */
  int len_size; /* H.264/HEVC: NAL length field bytes (mp4, mkv), 0 = Annex B start codes */
} sp_vrefs;
/* Picks the parser for a codec (AVCodecID) and its extradata; returns kind. */
int sp_vrefs_init(sp_vrefs *r, int codec_id, const uint8_t *extradata, int size);
/* 1 when the packet's picture is one nothing references (for HEVC, *tid is
 * its TemporalId: only the highest sub-layer's are unreferenced), else 0. */
int sp_vrefs_packet(const sp_vrefs *r, const uint8_t *data, int size, int *tid);
const char *sp_vrefs_name(int kind);
/* Whether a run starting at this keyframe packet may end by draining the
 * decoder. Not after an H.264 keyframe that is no IDR (an open GOP's I-frame,
 * a recovery point): FFmpeg marks the pictures after it as recovered only as
 * it outputs them in turn, and drops the unmarked ones a drain hands out. */
int sp_vrefs_clean_start(const sp_vrefs *r, const uint8_t *data, int size);

/* ------------------------------------------------------- conversion */
struct SwsContext;
struct sp_vconv_yuv;
typedef struct {
  struct SwsContext *sws;
  uint8_t *tmp; /* resized full frame before cropping */
  size_t tmp_cap;
  struct sp_vconv_yuv *yuv; /* convert_yuv.c's tables for the last geometry */
  int chroma_loc;           /* AVChromaLocation of the next picture (the caller sets it) */
  int use_swscale;          /* 1 = always libswscale (comparisons) */
} sp_vconv;

/* Resolves geometry for a w x h source: resized size and crop window. */
int sp_video_geom_resolve(const sp_video_geom *g, int w, int h, int *rw, int *rh, int *ch, int *cw, int *cy, int *cx,
                          const char *what);
/* Converts one picture (any libavutil pixel format) into out per g. cs/range
 * are AVColorSpace / AVColorRange values of the source. */
int sp_vconv_run(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                 int range, const sp_video_geom *g, uint8_t *out, const char *what);
/* Same with the geometry already resolved: scale w x h to rw x rh, keep the
 * ch x cw window at (cy, cx); planar = CHW output. */
int sp_vconv_scale(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                   int range, int rw, int rh, int ch, int cw, int cy, int cx, int planar, uint8_t *out,
                   const char *what);
void sp_vconv_free(sp_vconv *c);
/* convert_yuv.c: whether the own path takes this picture (8-bit planar YUV,
 * downscale at most 2x), and the conversion itself (arguments as above). */
int sp_vconv_yuv_supports(int pix_fmt, int w, int h, int rw, int rh);
int sp_vconv_yuv(sp_vconv *c, const uint8_t *const src[4], const int stride[4], int w, int h, int pix_fmt, int cs,
                 int range, int rw, int rh, int ch, int cw, int cy, int cx, int planar, uint8_t *out);
void sp_vconv_yuv_free(struct sp_vconv_yuv *t);

/* --------------------------------------------------------- backends */
typedef struct sp_video_ops {
  int (*info)(sp_video *v, sp_video_info *out);
  int (*get_frames)(sp_video *v, const int64_t *idx, int n, const sp_video_geom *g, uint8_t *out);
  int64_t (*decode_all)(sp_video *v, const sp_video_geom *g, sp_video_frame_fn fn, void *user);
  int (*native_size)(sp_video *v, int *h, int *w);
  void (*close)(sp_video *v);
} sp_video_ops;

struct sp_video {
  const sp_video_ops *ops;
  char *path;
  sp_video_options opt;
  sp_video_stats stats;
  sp_vconv conv;
  void *impl; /* backend state */
};

/* reader.c / frames.c: fill v->ops and v->impl, or return -1. */
int sp_video_open_ffmpeg(sp_video *v);
int sp_video_open_frames(sp_video *v);
/* frames.c: the frame file name convention, 0-based index -> img_%05d.jpg. */
void sp_frames_name(char *buf, size_t n, int64_t index);

/* Sets FFmpeg's log level once per process (quiet unless SPRY_AV_LOG=1). */
void sp_video_quiet_ffmpeg(void);

/* Sort helper: indices of idx[0..n) ordered by key[] then by position. */
void sp_video_sort_by_key(const int64_t *key, int n, int *order);

#endif
