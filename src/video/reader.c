/* The FFmpeg backend of sp_video: frame-accurate batched fetches that decode
 * only what the requested frames need.
 *
 * A request is served in decode order: unique frames are sorted by the
 * keyframe they must start from (see index.c), the demuxer seeks only
 * forward to that keyframe when the decoder is not already past it (or when
 * continuing would decode more than seeking), and every frame the decoder
 * emits is matched to a requested index by its pts. So each GOP is decoded at
 * most once per request, and B-frames, open GOPs and variable frame rates
 * give exactly the frames a full decode gives. Within a run, packets whose
 * picture nothing references and that are not requested go to the decoder
 * marked AVDISCARD_NONREF, which drops them unparsed (refs.c says where that
 * is exact); a run ends by draining the decoder once the packets of its last
 * wanted frame are in, instead of decoding further pictures to push it out.
 *
 * Streams without usable pts (AVI with packed B-frames, raw elementary
 * streams) cannot be mapped that way; there the n-th frame the decoder emits
 * after a rewind is frame n, seeks always go back to the start, and every
 * picture is decoded.
 *
 * Every loop is bounded by the packets in the file: a request for a frame the
 * decoder never produces ends with an error naming the file and the frame. */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "video/video_internal.h"

typedef struct {
  AVFormatContext *fmt;
  AVCodecContext *dec;         /* the decoder of the current run: dec_one or dec_threads */
  AVCodecContext *dec_one;     /* single-threaded */
  AVCodecContext *dec_threads; /* frame threads (options.threads > 1), opened for the first long run */
  const AVCodec *decoder;
  AVPacket *pkt;
  AVFrame *frame;
  int si;
  int pending; /* pkt holds a peeked packet not yet sent */
  int fresh;   /* the demuxer is at the start, nothing read yet */
  sp_vindex *ix;
  int run_active;    /* decoder state is continuous since run_start */
  int64_t run_start; /* decode position the current run began at */
  int64_t next_dec;  /* decode position of the next packet to send */
  int64_t out_count; /* frames emitted since the run began (counting mode) */
  int last_skipped;  /* the last packet sent was marked for skipping */
  int run_fresh;     /* no packet of the current run sent yet */
  int run_clean;     /* the run may end by draining (sp_vrefs_clean_start) */
  sp_vrefs refs;
  int width, height;
  int64_t header_frames;
  char codec[32], container[32];
} ff_state;

static const char *averr(int r) {
  static _Thread_local char buf[AV_ERROR_MAX_STRING_SIZE];
  av_strerror(r, buf, sizeof buf);
  return buf;
}

static void quiet_ffmpeg_once(void) {
  /* FFmpeg's own logging would interleave with our JSON output; errors are
   * reported by us with the file name. SPRY_AV_LOG=1 turns it back on. */
  const char *e = getenv("SPRY_AV_LOG");
  av_log_set_level(e && *e == '1' ? AV_LOG_INFO : AV_LOG_QUIET);
}
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
void sp_video_quiet_ffmpeg(void) { pthread_once(&log_once, quiet_ffmpeg_once); }

static int is_still_image(const AVFormatContext *fmt) {
  const char *n = fmt->iformat->name;
  size_t len = strlen(n);
  return !strcmp(n, "image2") || (len > 5 && !strcmp(n + len - 5, "_pipe"));
}

/* Opens (or reopens, for a rewind) the demuxer. */
static int open_format(ff_state *s, const char *path, int first) {
  if (s->fmt) avformat_close_input(&s->fmt);
  int r = avformat_open_input(&s->fmt, path, NULL, NULL);
  if (r < 0) return sp_error_set("%s: not a readable video (%s)", path, averr(r));
  if (first) {
    /* The stream headers of mp4/avi/mkv/gif carry what the decoder needs;
     * probing by decoding (find_stream_info) is only for formats that do not. */
    int si = av_find_best_stream(s->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (si < 0 || s->fmt->streams[si]->codecpar->width <= 0 ||
        s->fmt->streams[si]->codecpar->codec_id == AV_CODEC_ID_NONE) {
      r = avformat_find_stream_info(s->fmt, NULL);
      if (r < 0) return sp_error_set("%s: cannot read stream information (%s)", path, averr(r));
    }
    si = av_find_best_stream(s->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (si < 0) return sp_error_set("%s: no video stream", path);
    if (s->fmt->streams[si]->disposition & AV_DISPOSITION_ATTACHED_PIC)
      return sp_error_set("%s: the only picture is cover art, not a video", path);
    if (is_still_image(s->fmt)) return sp_error_set("%s: a still image (%s), not a video", path, s->fmt->iformat->name);
    s->si = si;
  }
  if (s->si >= (int)s->fmt->nb_streams) return sp_error_set("%s: stream %d vanished on reopen", path, s->si);
  for (unsigned i = 0; i < s->fmt->nb_streams; i++)
    s->fmt->streams[i]->discard = (int)i == s->si ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
  s->pending = 0;
  s->fresh = 1;
  return 0;
}

static int ensure_index(sp_video *v) {
  ff_state *s = v->impl;
  if (s->ix) return 0;
  if (!v->opt.no_index_cache) s->ix = sp_vindex_cache_get(v->path);
  if (!s->ix) {
    /* The scan must start at the first packet wherever earlier reads left off. */
    if (!s->fresh && open_format(s, v->path, 0) != 0) return -1;
    s->ix = sp_vindex_scan(s->fmt, s->si, v->path);
    if (!s->ix) return -1;
    if (!v->opt.no_index_cache) sp_vindex_cache_put(v->path, s->ix);
    /* The scan left the demuxer at the end of the file. */
    if (open_format(s, v->path, 0) != 0) return -1;
    s->run_active = 0;
    s->next_dec = 0;
    s->run_start = 0;
    s->out_count = 0;
  }
  return 0;
}

static int open_decoder(sp_video *v, int threads, AVCodecContext **out) {
  ff_state *s = v->impl;
  AVStream *st = s->fmt->streams[s->si];
  AVCodecContext *d = avcodec_alloc_context3(s->decoder);
  if (!d) return sp_error_set("%s: out of memory for the decoder", v->path);
  int r = avcodec_parameters_to_context(d, st->codecpar);
  if (r < 0) {
    avcodec_free_context(&d);
    return sp_error_set("%s: bad codec parameters (%s)", v->path, averr(r));
  }
  d->thread_count = threads;
  /* Frame threads: slices are rare in the clips we read (x264 makes one per
   * frame unless told otherwise). */
  if (threads > 1) d->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
  d->pkt_timebase = st->time_base;
  r = avcodec_open2(d, s->decoder, NULL);
  if (r < 0) {
    avcodec_free_context(&d);
    return sp_error_set("%s: cannot open the %s decoder (%s)", v->path, s->decoder->name, averr(r));
  }
  *out = d;
  return 0;
}

/* Picks the decoder for the next run (none may be active), by how many
 * pictures it will decode. Frame threads pay a start-up and a drain of one
 * picture per thread, and a loader already decodes one clip per worker: so
 * they are used only when asked for (options.threads > 1) and only for runs
 * long enough to fill them. */
#define THREADED_RUN_PER_THREAD 16
static int choose_decoder(sp_video *v, int64_t work) {
  ff_state *s = v->impl;
  int threads = v->opt.threads;
  AVCodecContext *want = s->dec_one;
  if (threads > 1 && work >= (int64_t)THREADED_RUN_PER_THREAD * threads) {
    if (!s->dec_threads && open_decoder(v, threads, &s->dec_threads) != 0) return -1;
    want = s->dec_threads;
  }
  s->dec = want;
  return 0;
}

/* Reads the next packet of our stream into s->pkt; 0 at end of file. */
static int read_video_packet(ff_state *s) {
  if (s->pending) {
    s->pending = 0;
    return 1;
  }
  for (int tries = 0; tries < 1000000; tries++) {
    int r = av_read_frame(s->fmt, s->pkt);
    if (r < 0) return 0; /* EOF or unreadable tail: both end the stream */
    s->fresh = 0;
    if (s->pkt->stream_index == s->si && s->pkt->size > 0) return 1;
    av_packet_unref(s->pkt);
  }
  return 0;
}

/* Starts a new run from the beginning of the stream. */
static int rewind_start(sp_video *v) {
  ff_state *s = v->impl;
  v->stats.seeks++;
  avcodec_flush_buffers(s->dec);
  av_packet_unref(s->pkt);
  if (open_format(s, v->path, 0) != 0) return -1;
  s->run_active = 1;
  s->run_fresh = 1;
  s->run_start = 0;
  s->next_dec = 0;
  s->out_count = 0;
  return 0;
}

/* Seekable mode: positions the demuxer at a keyframe no later than decode
 * position `key_dec`, verifying where it landed by the first packet's pts. */
static int seek_to_key(sp_video *v, int64_t key_dec) {
  ff_state *s = v->impl;
  sp_vindex *ix = s->ix;
  int64_t k = -1;
  for (int64_t lo = 0, hi = ix->n_keys - 1; lo <= hi;) {
    int64_t mid = (lo + hi) / 2;
    if (ix->key_dec[mid] <= key_dec) {
      k = mid;
      lo = mid + 1;
    } else
      hi = mid - 1;
  }
  if (k < 0 || ix->key_dec[k] == 0) return rewind_start(v);
  v->stats.seeks++;
  /* Matroska indexes keyframes by pts, MP4 by (shifted) dts: seeking by pts
   * lands on the keyframe in both; dts is the second try. Landing on an
   * earlier keyframe is still right, only slower. */
  for (int attempt = 0; attempt < 2; attempt++) {
    int64_t ts = attempt == 0 ? ix->key_seek_ts[k] : ix->key_dts[k];
    if (attempt == 1 && ts == ix->key_seek_ts[k]) break;
    avcodec_flush_buffers(s->dec);
    av_packet_unref(s->pkt);
    s->pending = 0;
    int r = av_seek_frame(s->fmt, s->si, ts, AVSEEK_FLAG_BACKWARD);
    if (r < 0 || !read_video_packet(s)) continue;
    int64_t d = s->pkt->pts == AV_NOPTS_VALUE ? -1 : sp_vindex_dec_of_pts(ix, s->pkt->pts);
    if (d >= 0 && d <= key_dec && (s->pkt->flags & AV_PKT_FLAG_KEY)) {
      s->pending = 1;
      s->run_active = 1;
      s->run_fresh = 1;
      s->run_start = d;
      s->next_dec = d;
      return 0;
    }
  }
  /* The demuxer landed somewhere we cannot vouch for: start over, which is
   * slow but always right. */
  v->stats.seeks--;
  return rewind_start(v);
}

typedef int (*frame_cb)(sp_video *v, AVFrame *f, void *ctx);

/* ------------------------------------------------------------ a request */

typedef struct {
  const int64_t *idx;
  int n;
  int *order;  /* positions sorted by frame index */
  int64_t *uf; /* unique frames, ascending */
  int *first;  /* uf[k] fills order[first[k] .. first[k+1]) */
  uint8_t *done;
  int m;
  const sp_video_geom *g;
  uint8_t *out;
  size_t frame_bytes;
  int oh, ow;
  int skip; /* packets nothing references may be left undecoded */
} request;

static int64_t find_unique(const request *q, int64_t f) {
  int64_t lo = 0, hi = q->m - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    if (q->uf[mid] == f) return mid;
    if (q->uf[mid] < f)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* Whether the packet at decode position d (pts) may go undecoded: no picture
 * references it, and it is not a frame this run still has to deliver. */
static int may_skip(const ff_state *s, const request *q, int64_t d, int64_t pts) {
  const sp_vindex *ix = s->ix;
  if (!q || !q->skip || d < 0 || !ix->pkt_skip || !ix->pkt_skip[d]) return 0;
  int64_t f = sp_vindex_frame_of_pts(ix, pts);
  if (f < 0) return 1; /* a picture the decoder never outputs (discarded by the container) */
  int64_t k = find_unique(q, f);
  /* A wanted frame whose start keyframe is before this run's start cannot be
   * taken from this run (see capture): it comes from its own run later. */
  return k < 0 || q->done[k] || s->run_start > ix->start[f];
}

static int drain_frames(sp_video *v, frame_cb cb, void *ctx) {
  ff_state *s = v->impl;
  for (;;) {
    int r = avcodec_receive_frame(s->dec, s->frame);
    if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return 0;
    if (r < 0) return sp_error_set("%s: decoding failed (%s)", v->path, averr(r));
    v->stats.decoded++;
    int cr = cb ? cb(v, s->frame, ctx) : 0;
    av_frame_unref(s->frame);
    if (cr < 0) return -1;
  }
}

/* Ends the current run: the decoder hands out the pictures it still holds
 * (all decoded already; without this, getting the last wanted one out would
 * take decoding the next pictures), then forgets its state. */
static int finish_run(sp_video *v, frame_cb cb, void *ctx) {
  ff_state *s = v->impl;
  if (!s->run_active) return 0;
  s->run_active = 0;
  int r = avcodec_send_packet(s->dec, NULL);
  if (r < 0 && r != AVERROR_EOF) return sp_error_set("%s: cannot flush the decoder (%s)", v->path, averr(r));
  int rc = drain_frames(v, cb, ctx);
  avcodec_flush_buffers(s->dec);
  return rc;
}

/* Sends one packet (or, at end of file, the flush) and passes every frame
 * that comes out to cb. Returns 1 after a packet, 0 once the stream is fully
 * drained (the run then ends), -1 on error. A packet the decoder rejects is
 * skipped: its frame will be missing, which the caller reports. q (NULL for
 * a full decode) says which unreferenced packets may go undecoded. */
static int decode_step(sp_video *v, frame_cb cb, void *ctx, const request *q) {
  ff_state *s = v->impl;
  if (!read_video_packet(s)) {
    s->run_active = 1; /* so that finish_run flushes */
    return finish_run(v, cb, ctx) != 0 ? -1 : 0;
  }
  int64_t d = -1;
  if (s->ix && s->ix->seekable) {
    d = s->pkt->pts == AV_NOPTS_VALUE ? -1 : sp_vindex_dec_of_pts(s->ix, s->pkt->pts);
    if (d >= 0) s->next_dec = d + 1;
  } else {
    s->next_dec++;
  }
  v->stats.packets++;
  if (s->run_fresh) s->run_clean = sp_vrefs_clean_start(&s->refs, s->pkt->data, s->pkt->size);
  s->run_fresh = 0;
  /* AVDISCARD_NONREF drops the picture only when the decoder, by its own
   * reading of the header, also finds it unreferenced. */
  s->last_skipped = may_skip(s, q, d, s->pkt->pts);
  s->dec->skip_frame = s->last_skipped ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
  v->stats.skipped += s->last_skipped;
  for (int tries = 0; tries < 64; tries++) {
    int r = avcodec_send_packet(s->dec, s->pkt);
    if (r == AVERROR(EAGAIN)) {
      /* Output is full: take frames out, then resend. */
      if (drain_frames(v, cb, ctx) != 0) return -1;
      continue;
    }
    break; /* sent, or rejected as invalid data: skip it */
  }
  av_packet_unref(s->pkt);
  return drain_frames(v, cb, ctx) != 0 ? -1 : 1;
}

/* ------------------------------------------------------------ get_frames */

static int convert_frame(sp_video *v, AVFrame *f, const sp_video_geom *g, uint8_t *dst, int oh, int ow) {
  int rw, rh, ch, cw, cy, cx;
  if (sp_video_geom_resolve(g, f->width, f->height, &rw, &rh, &ch, &cw, &cy, &cx, v->path) != 0) return -1;
  if (ch != oh || cw != ow)
    return sp_error_set("%s: frame size changes mid-stream (%dx%d), output would not fit", v->path, f->width,
                        f->height);
  v->stats.converted++;
  v->conv.chroma_loc = f->chroma_location;
  return sp_vconv_run(&v->conv, (const uint8_t *const *)f->data, f->linesize, f->width, f->height, f->format,
                      f->colorspace, f->color_range, g, dst, v->path);
}

static int capture(sp_video *v, AVFrame *fr, void *ctx) {
  ff_state *s = v->impl;
  request *q = ctx;
  int64_t f;
  if (s->ix->seekable) {
    int64_t ts = fr->pts != AV_NOPTS_VALUE ? fr->pts : fr->best_effort_timestamp;
    f = ts == AV_NOPTS_VALUE ? -1 : sp_vindex_frame_of_pts(s->ix, ts);
    /* A frame decoded from a keyframe after its own start point (an open
     * GOP's leading B-frame) may be built on missing references: skip it. */
    if (f < 0 || s->run_start > s->ix->start[f]) return 0;
  } else {
    f = s->out_count++;
  }
  int64_t k = find_unique(q, f);
  if (k < 0 || q->done[k]) return 0;
  uint8_t *dst = q->out + (size_t)q->order[q->first[k]] * q->frame_bytes;
  if (convert_frame(v, fr, q->g, dst, q->oh, q->ow) != 0) return -1;
  for (int j = q->first[k] + 1; j < q->first[k + 1]; j++)
    memcpy(q->out + (size_t)q->order[j] * q->frame_bytes, dst, q->frame_bytes);
  q->done[k] = 1;
  return 0;
}

/* Whether the current run should go on to a frame starting at keyframe
 * position st, rather than seek there: it can (the run began no later) and it
 * is no more work (st is not ahead, or nothing between here and st has to be
 * decoded, so a seek would save nothing). */
static int run_reaches(const ff_state *s, const request *q, int64_t st) {
  if (!s->run_active || s->run_start > st) return 0;
  if (st <= s->next_dec) return 1;
  return q->skip && s->ix->ref_before && sp_vindex_work(s->ix, s->next_dec, st) == 0;
}

/* Whether a frame still to come (proc[p..]) needs packets this run has not
 * sent yet. When none does, the run stops here: what the decoder still holds
 * comes out by draining it, instead of by decoding further pictures. */
static int run_needs_more(const ff_state *s, const request *q, const int *proc, int p) {
  const sp_vindex *ix = s->ix;
  for (; p < q->m; p++) {
    int k = proc[p];
    int64_t f = q->uf[k];
    if (!q->done[k] && ix->dec[f] >= s->next_dec && run_reaches(s, q, ix->start[f])) return 1;
  }
  return 0;
}

/* Pictures the run that would start for proc[p] decodes: it goes on through
 * the frames after p for which that is no more work than a seek. */
static int64_t run_work(const ff_state *s, const request *q, const int *proc, int p) {
  const sp_vindex *ix = s->ix;
  int64_t st = ix->start[q->uf[proc[p]]], end = ix->dec[q->uf[proc[p]]] + 1;
  for (int j = p + 1; j < q->m; j++) {
    int64_t g = q->uf[proc[j]];
    if (ix->start[g] > end && !(q->skip && ix->ref_before && sp_vindex_work(ix, end, ix->start[g]) == 0)) break;
    if (ix->dec[g] + 1 > end) end = ix->dec[g] + 1;
  }
  return q->skip ? sp_vindex_work(ix, st, end) : end - st;
}

/* Seekable streams: the frames in processing order (start keyframe, then
 * decode position), each run from a keyframe decoding only what the
 * request's frames need. */
static int fetch_seekable(sp_video *v, request *q, const int *proc) {
  ff_state *s = v->impl;
  const sp_vindex *ix = s->ix;
  /* Frames can come out this many decoded pictures after their own packet
   * (reordering depth plus frame-thread latency); past that a frame is
   * declared lost. */
  int64_t slack = 48 + 2 * (int64_t)(s->dec->thread_count > 0 ? s->dec->thread_count : 1);
  for (int p = 0; p < q->m; p++) {
    int k = proc[p];
    if (q->done[k]) continue;
    int64_t f = q->uf[k];
    if (!run_reaches(s, q, ix->start[f])) {
      /* Wanted frames still inside the decoder come out first. */
      if (finish_run(v, capture, q) != 0) return -1;
      if (q->done[k]) continue;
      if (choose_decoder(v, run_work(s, q, proc, p)) != 0 || seek_to_key(v, ix->start[f]) != 0) return -1;
    }
    /* A decoder may refuse to output frames right after a keyframe it cannot
     * fully trust (FFmpeg's H.264 waits for a recovery point; the last open-GOP
     * keyframe of a Matroska file is such a case). Then try again: from the
     * same keyframe decoding every picture (should skipping be what lost
     * it), from the previous keyframe, and from the start. */
    int tried_prev = 0;
    int64_t from = ix->start[f], waited = 0;
    while (!q->done[k]) {
      int r;
      if (s->next_dec > ix->dec[f] && !run_needs_more(s, q, proc, p) && s->run_clean) {
        if (finish_run(v, capture, q) != 0) return -1;
        r = 0;
      } else {
        r = decode_step(v, capture, q, q);
        if (r < 0) return -1;
        if (r > 0 && s->next_dec > ix->dec[f] + 1 && !s->last_skipped) waited++;
      }
      if (q->done[k] || (r > 0 && waited <= slack)) continue;
      int again = 1;
      if (q->skip)
        q->skip = 0;
      else if (from > 0 && !tried_prev)
        from--, tried_prev = 1; /* seek_to_key finds the keyframe before */
      else if (from > 0)
        from = 0;
      else
        again = 0;
      if (again) {
        waited = 0;
        if (finish_run(v, capture, q) != 0) return -1;
        if (!q->done[k] && seek_to_key(v, from) != 0) return -1;
        continue;
      }
      if (r == 0)
        return sp_error_set("%s: frame %lld could not be decoded (truncated or corrupt data)", v->path, (long long)f);
      return sp_error_set("%s: the decoder never produced frame %lld (corrupt data)", v->path, (long long)f);
    }
  }
  return 0;
}

/* Streams without usable pts: frame i is the i-th the decoder outputs after
 * a rewind, so every run starts at the first packet and nothing is skipped. */
static int fetch_counting(sp_video *v, request *q) {
  ff_state *s = v->impl;
  for (int k = 0; k < q->m; k++) {
    if (q->done[k]) continue;
    if (!s->run_active && (choose_decoder(v, q->uf[q->m - 1] + 1) != 0 || rewind_start(v) != 0)) return -1;
    while (!q->done[k]) {
      int r = decode_step(v, capture, q, NULL);
      if (r < 0) return -1;
      if (r == 0 && !q->done[k])
        return sp_error_set("%s: frame %lld could not be decoded (truncated or corrupt data)", v->path,
                            (long long)q->uf[k]);
    }
  }
  return 0;
}

static int ff_get_frames(sp_video *v, const int64_t *idx, int n, const sp_video_geom *g, uint8_t *out) {
  ff_state *s = v->impl;
  if (ensure_index(v) != 0) return -1;
  sp_vindex *ix = s->ix;
  /* Each request starts from a clean decoder (an earlier one that failed
   * may have left it mid-run) and ends by draining it. */
  if (s->run_active) {
    avcodec_flush_buffers(s->dec);
    s->run_active = 0;
  }
  request q = {0};
  q.idx = idx;
  q.n = n;
  q.g = g;
  q.out = out;
  q.skip = ix->pkt_skip != NULL && !v->opt.no_skip;
  if (sp_video_out_size(v, g, &q.oh, &q.ow) != 0) return -1;
  q.frame_bytes = (size_t)q.oh * q.ow * 3;
  q.order = sp_xmalloc((size_t)n * sizeof(int));
  q.uf = sp_xmalloc((size_t)n * sizeof(int64_t));
  q.first = sp_xmalloc((size_t)(n + 1) * sizeof(int));
  q.done = sp_xcalloc((size_t)n, 1);
  sp_video_sort_by_key(idx, n, q.order);
  for (int j = 0; j < n; j++)
    if (j == 0 || idx[q.order[j]] != q.uf[q.m - 1]) {
      q.first[q.m] = j;
      q.uf[q.m++] = idx[q.order[j]];
    }
  q.first[q.m] = n;

  /* Processing order: by start keyframe, then decode position, so the
   * demuxer only moves forward and shares each GOP between its frames. */
  int *proc = sp_xmalloc((size_t)q.m * sizeof(int));
  int64_t *key = sp_xmalloc((size_t)q.m * sizeof(int64_t));
  for (int k = 0; k < q.m; k++)
    key[k] = ix->seekable ? ((int64_t)ix->start[q.uf[k]] << 32) | (uint32_t)ix->dec[q.uf[k]] : q.uf[k];
  sp_video_sort_by_key(key, q.m, proc);
  int rc = ix->seekable ? fetch_seekable(v, &q, proc) : fetch_counting(v, &q);
  /* Nothing past the last wanted frame is decoded; what the decoder holds
   * was decoded already and only needs handing out. */
  if (finish_run(v, rc == 0 ? capture : NULL, &q) != 0) rc = -1;
  s->dec->skip_frame = AVDISCARD_DEFAULT;
  free(proc);
  free(key);
  free(q.order);
  free(q.uf);
  free(q.first);
  free(q.done);
  return rc;
}

/* ------------------------------------------------------------- decode_all */

typedef struct {
  sp_video_frame_fn fn;
  void *user;
  const sp_video_geom *g;
  uint8_t *buf;
  int oh, ow;
  int64_t count;
  int stop;
} all_ctx;

static int all_cb(sp_video *v, AVFrame *fr, void *ctx) {
  all_ctx *a = ctx;
  if (a->stop) return 0;
  if (convert_frame(v, fr, a->g, a->buf, a->oh, a->ow) != 0) return -1;
  if (a->fn && a->fn(a->count, a->buf, a->oh, a->ow, a->user)) a->stop = 1;
  a->count++;
  return 0;
}

static int64_t ff_decode_all(sp_video *v, const sp_video_geom *g, sp_video_frame_fn fn, void *user) {
  all_ctx a = {fn, user, g, NULL, 0, 0, 0, 0};
  if (sp_video_out_size(v, g, &a.oh, &a.ow) != 0) return -1;
  if (finish_run(v, NULL, NULL) != 0 || choose_decoder(v, INT64_MAX) != 0) return -1;
  a.buf = sp_xmalloc((size_t)a.oh * a.ow * 3);
  int r = rewind_start(v);
  while (r == 0 && !a.stop) {
    int st = decode_step(v, all_cb, &a, NULL);
    if (st < 0) r = -1;
    if (st == 0) break;
  }
  /* The next fetch must not trust this run's position bookkeeping. */
  avcodec_flush_buffers(((ff_state *)v->impl)->dec);
  ((ff_state *)v->impl)->run_active = 0;
  free(a.buf);
  return r == 0 ? a.count : -1;
}

/* ------------------------------------------------------------------ misc */

static int ff_native_size(sp_video *v, int *h, int *w) {
  ff_state *s = v->impl;
  *h = s->height;
  *w = s->width;
  return 0;
}

static int ff_info(sp_video *v, sp_video_info *out) {
  ff_state *s = v->impl;
  if (ensure_index(v) != 0) return -1;
  snprintf(out->codec, sizeof out->codec, "%s", s->codec);
  snprintf(out->container, sizeof out->container, "%s", s->container);
  out->width = s->width;
  out->height = s->height;
  out->frames = s->ix->n_frames;
  out->header_frames = s->header_frames;
  out->fps = s->ix->fps;
  out->duration = s->ix->duration;
  out->n_keyframes = s->ix->n_keys_disp;
  out->keyframes = s->ix->key_disp;
  out->seekable = s->ix->seekable;
  out->skips_unreferenced = s->ix->pkt_skip != NULL && !v->opt.no_skip;
  return 0;
}

static void ff_close(sp_video *v) {
  ff_state *s = v->impl;
  if (!s) return;
  if (s->fmt) avformat_close_input(&s->fmt);
  avcodec_free_context(&s->dec_one);
  avcodec_free_context(&s->dec_threads);
  s->dec = NULL;
  av_packet_free(&s->pkt);
  av_frame_free(&s->frame);
  sp_vindex_release(s->ix);
  free(s);
  v->impl = NULL;
}

static const sp_video_ops ff_ops = {ff_info, ff_get_frames, ff_decode_all, ff_native_size, ff_close};

int sp_video_open_ffmpeg(sp_video *v) {
  sp_video_quiet_ffmpeg();
  ff_state *s = sp_xcalloc(1, sizeof *s);
  v->impl = s;
  v->ops = &ff_ops;
  if (open_format(s, v->path, 1) != 0) goto fail;
  AVStream *st = s->fmt->streams[s->si];
  const AVCodec *codec = avcodec_find_decoder(st->codecpar->codec_id);
  if (!codec) {
    sp_error_set("%s: no decoder for codec %s", v->path, avcodec_get_name(st->codecpar->codec_id));
    goto fail;
  }
  s->decoder = codec;
  s->pkt = av_packet_alloc();
  s->frame = av_frame_alloc();
  if (!s->pkt || !s->frame) {
    sp_error_set("%s: out of memory for the decoder", v->path);
    goto fail;
  }
  if (open_decoder(v, 1, &s->dec_one) != 0) goto fail;
  s->dec = s->dec_one;
  s->width = st->codecpar->width;
  s->height = st->codecpar->height;
  if (s->width <= 0 || s->height <= 0) {
    sp_error_set("%s: the video stream has no frame size", v->path);
    goto fail;
  }
  s->header_frames = st->nb_frames;
  sp_vrefs_init(&s->refs, st->codecpar->codec_id, st->codecpar->extradata, st->codecpar->extradata_size);
  snprintf(s->codec, sizeof s->codec, "%s", avcodec_get_name(st->codecpar->codec_id));
  snprintf(s->container, sizeof s->container, "%s", s->fmt->iformat->name);
  char *comma = strchr(s->container, ',');
  if (comma) *comma = 0;
  return 0;
fail:
  ff_close(v);
  return -1;
}
