/* A small video writer on libavcodec/libavformat: RGB frames in, an H.264
 * (libx264 when libavcodec has it) or MPEG-4 Part 2 file out. The synthetic
 * action set and the reader tests use it to make clips with B-frames, open
 * GOPs and variable frame durations, the cases frame-accurate seeking must
 * get right. Single-threaded encoding, so a seed always gives the same file. */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <stdlib.h>
#include <string.h>

#include "video/video_internal.h"

struct sp_video_writer {
  AVFormatContext *fmt;
  AVCodecContext *enc;
  AVStream *st;
  AVFrame *frame;
  AVPacket *pkt;
  struct SwsContext *sws;
  sp_video_writer_config cfg;
  int64_t next_pts, count;
  int64_t *pts; /* pts of every frame sent, ascending (to give packets durations) */
  char *path;
};

static const char *averr(int r) {
  static _Thread_local char buf[AV_ERROR_MAX_STRING_SIZE];
  av_strerror(r, buf, sizeof buf);
  return buf;
}

sp_video_writer_config sp_video_writer_config_default(int width, int height) {
  sp_video_writer_config c = {width, height, 25, 12, 2, 0, 0, 0, 20, NULL, 0, NULL};
  return c;
}

const char *sp_video_writer_codec(void) {
  const AVCodec *c = avcodec_find_encoder(AV_CODEC_ID_H264);
  if (c) return !strcmp(c->name, "libx264") ? "h264 (libx264)" : "h264";
  return "mpeg4";
}

static void writer_free(sp_video_writer *w) {
  if (!w) return;
  if (w->fmt) {
    if (w->fmt->pb) avio_closep(&w->fmt->pb);
    avformat_free_context(w->fmt);
  }
  avcodec_free_context(&w->enc);
  av_frame_free(&w->frame);
  av_packet_free(&w->pkt);
  sws_freeContext(w->sws);
  free(w->pts);
  free(w->path);
  free(w);
}

/* The encoder asked for by name, else H.264 (unless MPEG-4 is forced), else
 * MPEG-4 Part 2; NULL with an error when there is none. */
static const AVCodec *pick_encoder(const char *path, const sp_video_writer_config *cfg) {
  const AVCodec *codec = NULL;
  if (cfg->encoder) {
    codec = avcodec_find_encoder_by_name(cfg->encoder);
    if (!codec) {
      sp_error_set("%s: libavcodec has no encoder named %s", path, cfg->encoder);
      return NULL;
    }
  }
  if (!codec && !cfg->force_mpeg4) codec = avcodec_find_encoder(AV_CODEC_ID_H264);
  if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
  if (!codec) sp_error_set("%s: libavcodec has neither an H.264 nor an MPEG-4 encoder", path);
  return codec;
}

/* Size, rate, GOP and the flags that make a seed give the same file. */
static void set_encoder_basics(sp_video_writer *w, const sp_video_writer_config *cfg) {
  AVCodecContext *e = w->enc;
  e->width = cfg->width;
  e->height = cfg->height;
  e->pix_fmt = AV_PIX_FMT_YUV420P;
  /* Variable frame rate needs a finer clock than one tick per frame. */
  e->time_base = (AVRational){1, cfg->vfr ? cfg->fps * 4 : cfg->fps};
  e->framerate = (AVRational){cfg->fps, 1};
  if (!cfg->encoder_defaults) {
    e->gop_size = cfg->gop > 0 ? cfg->gop : 12;
    e->max_b_frames = cfg->b_frames < 0 ? 0 : cfg->b_frames;
  }
  e->thread_count = 1;
  e->flags |= AV_CODEC_FLAG_BITEXACT;
  if (w->fmt->oformat->flags & AVFMT_GLOBALHEADER) e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
}

static int set_x264_options(const char *path, const sp_video_writer_config *cfg, AVCodecContext *e, int q) {
  char params[256];
  /* scenecut=0: keyframes exactly every gop frames, whatever the content. */
  snprintf(params, sizeof params, "scenecut=0:keyint-min=%d%s%s%s", e->gop_size < 2 ? 1 : e->gop_size / 2,
           cfg->open_gop ? ":open-gop=1" : "", cfg->params ? ":" : "", cfg->params ? cfg->params : "");
  if (av_opt_set(e->priv_data, "preset", "veryfast", 0) < 0 || av_opt_set_int(e->priv_data, "crf", q, 0) < 0 ||
      av_opt_set(e->priv_data, "x264-params", params, 0) < 0)
    return sp_error_set("%s: libx264 rejected its options", path);
  return 0;
}

static int set_x265_options(const char *path, const sp_video_writer_config *cfg, AVCodecContext *e, int q) {
  char params[256];
  /* One thread and no thread pool: the same clip every time. */
  snprintf(params, sizeof params,
           "log-level=none:pools=none:frame-threads=1:scenecut=0:keyint=%d:min-keyint=%d:bframes=%d%s%s%s", e->gop_size,
           e->gop_size, e->max_b_frames, cfg->open_gop ? "" : ":open-gop=0", cfg->params ? ":" : "",
           cfg->params ? cfg->params : "");
  if (av_opt_set(e->priv_data, "preset", "ultrafast", 0) < 0 || av_opt_set_int(e->priv_data, "crf", q, 0) < 0 ||
      av_opt_set(e->priv_data, "x265-params", params, 0) < 0)
    return sp_error_set("%s: libx265 rejected its options", path);
  return 0;
}

/* Quality and the codec's private options: the caller's on top of the
 * encoder's defaults, or ours (fixed GOP, no scene cuts) per codec. */
static int set_encoder_quality(const char *path, const sp_video_writer_config *cfg, const AVCodec *codec,
                               AVCodecContext *e) {
  int q = cfg->quality > 0 ? cfg->quality : 20;
  const char *priv = !strcmp(codec->name, "libx264")   ? "x264-params"
                     : !strcmp(codec->name, "libx265") ? "x265-params"
                                                       : NULL;
  if (cfg->encoder_defaults) {
    /* Only what the caller asked for on top of the encoder's defaults. */
    if (cfg->params && (!priv || av_opt_set(e->priv_data, priv, cfg->params, 0) < 0))
      return sp_error_set("%s: %s rejected the options %s", path, codec->name, cfg->params);
  } else if (codec->id == AV_CODEC_ID_H264 && !strcmp(codec->name, "libx264")) {
    return set_x264_options(path, cfg, e, q);
  } else if (!strcmp(codec->name, "libx265")) {
    return set_x265_options(path, cfg, e, q);
  } else if (codec->id == AV_CODEC_ID_VP9 || codec->id == AV_CODEC_ID_VP8) {
    e->bit_rate = 0;
    if (av_opt_set_int(e->priv_data, "crf", q + 10, 0) < 0 || av_opt_set_int(e->priv_data, "cpu-used", 8, 0) < 0)
      return sp_error_set("%s: %s rejected its options", path, codec->name);
  } else {
    /* MPEG-4 Part 2 / MPEG-2: constant quantiser, roughly what crf 20 looks like. */
    e->flags |= AV_CODEC_FLAG_QSCALE;
    e->global_quality = FF_QP2LAMBDA * (q / 5 > 1 ? q / 5 : 2);
  }
  return 0;
}

/* Opens the encoder, adds its stream, creates the file and writes the header. */
static int open_stream(sp_video_writer *w, const char *path, const AVCodec *codec) {
  AVCodecContext *e = w->enc;
  int r = avcodec_open2(e, codec, NULL);
  if (r < 0) return sp_error_set("%s: cannot open the %s encoder (%s)", path, codec->name, averr(r));
  w->st = avformat_new_stream(w->fmt, NULL);
  if (!w->st) return sp_error_set("%s: cannot add a stream", path);
  w->st->time_base = e->time_base;
  r = avcodec_parameters_from_context(w->st->codecpar, e);
  if (r < 0) return sp_error_set("%s: cannot copy codec parameters (%s)", path, averr(r));
  r = avio_open(&w->fmt->pb, path, AVIO_FLAG_WRITE);
  if (r < 0) return sp_error_set("%s: cannot create (%s)", path, averr(r));
  r = avformat_write_header(w->fmt, NULL);
  if (r < 0) return sp_error_set("%s: cannot write the header (%s)", path, averr(r));
  return 0;
}

/* The YUV frame the encoder reads and the RGB -> YUV converter that fills it. */
static int alloc_frame_and_scaler(sp_video_writer *w, const char *path) {
  const AVCodecContext *e = w->enc;
  w->frame->format = e->pix_fmt;
  w->frame->width = e->width;
  w->frame->height = e->height;
  int r = av_frame_get_buffer(w->frame, 0);
  if (r < 0) return sp_error_set("%s: no memory for a frame (%s)", path, averr(r));
  w->sws = sws_getContext(e->width, e->height, AV_PIX_FMT_RGB24, e->width, e->height, e->pix_fmt,
                          SWS_BILINEAR | SWS_ACCURATE_RND, NULL, NULL, NULL);
  if (!w->sws) return sp_error_set("%s: libswscale cannot convert RGB to YUV", path);
  return 0;
}

sp_video_writer *sp_video_writer_open(const char *path, const sp_video_writer_config *cfg) {
  if (cfg->width < 16 || cfg->height < 16 || cfg->width % 2 || cfg->height % 2 || cfg->fps <= 0) {
    sp_error_set("%s: cannot encode %dx%d at %d fps (even sizes >= 16 needed)", path, cfg->width, cfg->height,
                 cfg->fps);
    return NULL;
  }
  sp_video_quiet_ffmpeg();
  sp_video_writer *w = sp_xcalloc(1, sizeof *w);
  w->cfg = *cfg;
  w->path = sp_xstrdup(path);
  int r = avformat_alloc_output_context2(&w->fmt, NULL, NULL, path);
  if (r < 0 || !w->fmt) {
    sp_error_set("%s: no container for this file name (%s)", path, averr(r));
    goto fail;
  }
  w->fmt->flags |= AVFMT_FLAG_BITEXACT;
  const AVCodec *codec = pick_encoder(path, cfg);
  if (!codec) goto fail;
  w->enc = avcodec_alloc_context3(codec);
  w->frame = av_frame_alloc();
  w->pkt = av_packet_alloc();
  if (!w->enc || !w->frame || !w->pkt) {
    sp_error_set("%s: out of memory for the encoder", path);
    goto fail;
  }
  set_encoder_basics(w, cfg);
  if (set_encoder_quality(path, cfg, codec, w->enc) != 0 || open_stream(w, path, codec) != 0 ||
      alloc_frame_and_scaler(w, path) != 0)
    goto fail;
  return w;
fail:
  writer_free(w);
  return NULL;
}

/* Moves every packet the encoder has ready into the file. */
static int write_ready(sp_video_writer *w) {
  for (;;) {
    int r = avcodec_receive_packet(w->enc, w->pkt);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return 0;
    if (r < 0) return sp_error_set("%s: encoding failed (%s)", w->path, averr(r));
    /* Without a duration the mp4 muxer's edit list ends at the last frame's
     * start and demuxers then drop that frame: give each packet its own. */
    int64_t lo = 0, hi = w->count - 1;
    while (lo < hi) {
      int64_t mid = (lo + hi + 1) / 2;
      if (w->pts[mid] <= w->pkt->pts)
        lo = mid;
      else
        hi = mid - 1;
    }
    if (w->pkt->duration <= 0 && w->count > 0 && w->pts[lo] == w->pkt->pts)
      w->pkt->duration = (lo + 1 < w->count ? w->pts[lo + 1] : w->next_pts) - w->pts[lo];
    av_packet_rescale_ts(w->pkt, w->enc->time_base, w->st->time_base);
    w->pkt->stream_index = w->st->index;
    r = av_interleaved_write_frame(w->fmt, w->pkt);
    if (r < 0) return sp_error_set("%s: cannot write a packet (%s)", w->path, averr(r));
  }
}

int sp_video_writer_add(sp_video_writer *w, const uint8_t *rgb) {
  int r = av_frame_make_writable(w->frame);
  if (r < 0) return sp_error_set("%s: frame not writable (%s)", w->path, averr(r));
  const uint8_t *src[4] = {rgb, NULL, NULL, NULL};
  int stride[4] = {w->cfg.width * 3, 0, 0, 0};
  sws_scale(w->sws, src, stride, 0, w->cfg.height, w->frame->data, w->frame->linesize);
  w->frame->pts = w->next_pts;
  if ((w->count & (w->count - 1)) == 0)
    w->pts = sp_xrealloc(w->pts, (size_t)(w->count ? 2 * w->count : 1) * sizeof(int64_t));
  w->pts[w->count] = w->next_pts;
  /* Variable frame rate: durations of 2..6 ticks (quarter frames), mean 4. */
  static const int vfr_ticks[6] = {4, 2, 6, 4, 3, 5};
  w->next_pts += w->cfg.vfr ? vfr_ticks[w->count % 6] : 1;
  w->count++;
  r = avcodec_send_frame(w->enc, w->frame);
  if (r < 0) return sp_error_set("%s: encoder refused frame %lld (%s)", w->path, (long long)w->count - 1, averr(r));
  return write_ready(w);
}

int sp_video_writer_close(sp_video_writer *w) {
  if (!w) return -1;
  int rc = 0;
  int r = avcodec_send_frame(w->enc, NULL);
  if (r < 0 && r != AVERROR_EOF) rc = sp_error_set("%s: cannot flush the encoder (%s)", w->path, averr(r));
  if (rc == 0) rc = write_ready(w);
  if (rc == 0) {
    r = av_write_trailer(w->fmt);
    if (r < 0) rc = sp_error_set("%s: cannot write the trailer (%s)", w->path, averr(r));
  }
  writer_free(w);
  return rc;
}
