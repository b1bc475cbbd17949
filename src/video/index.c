/* The keyframe index: one demux-only pass over a video's packets records each
 * packet's pts, decode position and keyframe flag. From it every display frame
 * gets the keyframe to start decoding at, which is what makes seeks frame
 * accurate. Indexes are cached per process by (path, size, mtime) so that a
 * loader reopening the same clip every epoch scans it once. */
#define _GNU_SOURCE
#include <libavformat/avformat.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "video/video_internal.h"

typedef struct {
  int64_t pts, dts;
  int32_t dec;
  uint8_t key, discard, unref, tid;
} packet_rec;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_rec_pts(const void *a, const void *b) {
  const packet_rec *x = a, *y = b;
  return x->pts < y->pts ? -1 : x->pts > y->pts ? 1 : (x->dec > y->dec) - (x->dec < y->dec);
}

/* Display frame i starts at the latest keyframe (decode order) that is not
 * after its packet and not after it in display order: an open-GOP keyframe's
 * leading B-frames reference the previous GOP, so they must start earlier. */
static int32_t start_for(const sp_vindex *ix, const int64_t *key_pts, int32_t dec, int64_t pts) {
  int64_t lo = 0, hi = ix->n_keys; /* first key with key_dec > dec */
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (ix->key_dec[mid] <= dec)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (int64_t k = lo - 1; k >= 0; k--)
    if (key_pts[k] <= pts) return ix->key_dec[k];
  return 0; /* no usable keyframe: decode from the first packet, as a full decode does */
}

/* Fills ix->pkt_skip / ref_before from the packets' parse (rec in decode
 * order). HEVC: only the highest sub-layer's non-reference pictures are
 * unreferenced by every other picture. */
static void mark_skippable(sp_vindex *ix, const packet_rec *rec, int64_t n, const sp_vrefs *refs, int max_tid) {
  int64_t skippable = 0;
  for (int64_t i = 0; i < n; i++) skippable += rec[i].unref && (refs->kind != SP_VREFS_HEVC || rec[i].tid == max_tid);
  if (refs->kind == SP_VREFS_NONE || skippable == 0) return;
  ix->skip_kind = refs->kind;
  ix->pkt_skip = sp_xmalloc((size_t)n);
  ix->ref_before = sp_xmalloc((size_t)(n + 1) * sizeof(int32_t));
  ix->ref_before[0] = 0;
  for (int64_t i = 0; i < n; i++) {
    ix->pkt_skip[i] = rec[i].unref && (refs->kind != SP_VREFS_HEVC || rec[i].tid == max_tid);
    ix->ref_before[i + 1] = ix->ref_before[i] + !ix->pkt_skip[i];
  }
}

static void index_free(sp_vindex *ix) {
  if (!ix) return;
  free(ix->pts);
  free(ix->dec);
  free(ix->start);
  free(ix->pkt_pts);
  free(ix->pkt_dec);
  free(ix->key_dec);
  free(ix->key_seek_ts);
  free(ix->key_dts);
  free(ix->key_disp);
  free(ix->pkt_skip);
  free(ix->ref_before);
  free(ix);
}

/* What one demux pass gathers: every packet of the stream, in decode order. */
typedef struct {
  packet_rec *rec;
  int64_t n, cap, nkeys;
  int all_pts, max_tid;
} packet_scan;

static void record_packet(packet_scan *s, const AVPacket *pkt, sp_vrefs *refs) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->rec = sp_xrealloc(s->rec, (size_t)s->cap * sizeof *s->rec);
  }
  packet_rec *p = &s->rec[s->n];
  p->pts = pkt->pts;
  p->dts = pkt->dts;
  p->dec = (int32_t)s->n;
  p->key = (pkt->flags & AV_PKT_FLAG_KEY) != 0;
  p->discard = (pkt->flags & AV_PKT_FLAG_DISCARD) != 0;
  int tid = 0;
  p->unref = refs->kind != SP_VREFS_NONE && sp_vrefs_packet(refs, pkt->data, pkt->size, &tid);
  p->tid = (uint8_t)tid;
  if (tid > s->max_tid) s->max_tid = tid;
  if (p->pts == AV_NOPTS_VALUE) s->all_pts = 0;
  s->nkeys += p->key;
  s->n++;
}

/* Reads every packet of stream si (demux only); 0, or -1 when none could be read. */
static int read_packets(AVFormatContext *fmt, int si, const char *what, sp_vrefs *refs, packet_scan *s) {
  AVPacket *pkt = av_packet_alloc();
  if (!pkt) return sp_error_set("%s: out of memory for a packet", what);
  int read_errors = 0;
  for (;;) {
    int r = av_read_frame(fmt, pkt);
    if (r == AVERROR(EAGAIN) && ++read_errors < 1000) continue;
    if (r < 0) break; /* EOF, or a truncated/corrupt tail: keep what was read */
    /* Empty packets (AVI's dropped-frame chunks) are never sent to the
     * decoder: a zero-size packet would mean "flush". */
    if (pkt->stream_index == si && pkt->size > 0 && s->n < INT32_MAX) record_packet(s, pkt, refs);
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  if (s->n == 0) {
    free(s->rec);
    return sp_error_set("%s: no video packets could be read", what);
  }
  return 0;
}

/* The keyframes in decode order; returns their pts (malloc'ed, for start_for). */
static int64_t *index_keyframes(sp_vindex *ix, const packet_scan *s) {
  const int64_t nkeys = s->nkeys;
  ix->key_dec = sp_xmalloc((size_t)(nkeys + 1) * sizeof(int32_t));
  ix->key_seek_ts = sp_xmalloc((size_t)(nkeys + 1) * sizeof(int64_t));
  ix->key_dts = sp_xmalloc((size_t)(nkeys + 1) * sizeof(int64_t));
  ix->key_disp = sp_xmalloc((size_t)(nkeys + 1) * sizeof(int64_t));
  int64_t *key_pts = sp_xmalloc((size_t)(nkeys + 1) * sizeof(int64_t));
  const packet_rec *rec = s->rec;
  for (int64_t i = 0; i < s->n; i++)
    if (rec[i].key) {
      ix->key_dec[ix->n_keys] = rec[i].dec;
      ix->key_seek_ts[ix->n_keys] = rec[i].pts != AV_NOPTS_VALUE ? rec[i].pts : rec[i].dts;
      ix->key_dts[ix->n_keys] = rec[i].dts != AV_NOPTS_VALUE ? rec[i].dts : rec[i].pts;
      key_pts[ix->n_keys] = rec[i].pts;
      ix->n_keys++;
    }
  return key_pts;
}

/* Sorts rec by pts and sets ix->seekable. Seekable when every packet has a
 * distinct pts: then pts alone names a frame, whatever order the decoder
 * emits them in. */
static void sort_and_check_seekable(sp_vindex *ix, packet_rec *rec, int64_t n, int all_pts) {
  qsort(rec, (size_t)n, sizeof *rec, cmp_rec_pts);
  if (all_pts)
    for (int64_t i = 1; i < n; i++)
      if (rec[i].pts == rec[i - 1].pts) all_pts = 0;
  ix->seekable = all_pts;
  if (!ix->seekable) {
    /* Without pts a frame is named by how many frames came out before it,
     * which a skipped picture would change: decode everything. */
    free(ix->pkt_skip);
    free(ix->ref_before);
    ix->pkt_skip = NULL;
    ix->ref_before = NULL;
    ix->skip_kind = SP_VREFS_NONE;
  }
}

/* Seekable streams: packets and display frames by pts (rec sorted by pts),
 * each frame's starting keyframe, keyframes in display terms, the rate. */
static void index_frames_by_pts(sp_vindex *ix, const packet_rec *rec, int64_t n, const int64_t *key_pts,
                                const AVStream *st) {
  const int64_t nf = ix->n_frames;
  ix->pkt_pts = sp_xmalloc((size_t)n * sizeof(int64_t));
  ix->pkt_dec = sp_xmalloc((size_t)n * sizeof(int32_t));
  ix->pts = sp_xmalloc((size_t)nf * sizeof(int64_t));
  ix->dec = sp_xmalloc((size_t)nf * sizeof(int32_t));
  ix->start = sp_xmalloc((size_t)nf * sizeof(int32_t));
  int64_t f = 0;
  for (int64_t i = 0; i < n; i++) {
    ix->pkt_pts[i] = rec[i].pts;
    ix->pkt_dec[i] = rec[i].dec;
    if (rec[i].discard) continue;
    ix->pts[f] = rec[i].pts;
    ix->dec[f] = rec[i].dec;
    ix->start[f] = start_for(ix, key_pts, rec[i].dec, rec[i].pts);
    f++;
  }
  /* Keyframes in display terms, for `spry video info`. */
  int64_t nk = 0;
  for (int64_t k = 0; k < ix->n_keys; k++) {
    int64_t d = sp_vindex_frame_of_pts(ix, key_pts[k]);
    if (d >= 0) ix->key_disp[nk++] = d;
  }
  qsort(ix->key_disp, (size_t)nk, sizeof(int64_t), cmp_i64);
  ix->n_keys_disp = nk;
  double tb = av_q2d(st->time_base);
  if (nf > 1 && ix->pts[nf - 1] > ix->pts[0])
    ix->fps = (double)(nf - 1) / ((double)(ix->pts[nf - 1] - ix->pts[0]) * tb);
}

sp_vindex *sp_vindex_scan(AVFormatContext *fmt, int si, const char *what) {
  AVStream *st = fmt->streams[si];
  packet_scan s = {.all_pts = 1};
  sp_vrefs refs;
  sp_vrefs_init(&refs, st->codecpar->codec_id, st->codecpar->extradata, st->codecpar->extradata_size);
  if (read_packets(fmt, si, what, &refs, &s) != 0) return NULL;
  packet_rec *rec = s.rec;
  const int64_t n = s.n;

  sp_vindex *ix = sp_xcalloc(1, sizeof *ix);
  ix->refs = 1;
  ix->n_packets = n;
  int64_t *key_pts = index_keyframes(ix, &s);

  mark_skippable(ix, rec, n, &refs, s.max_tid);
  sort_and_check_seekable(ix, rec, n, s.all_pts);

  int64_t nf = 0;
  for (int64_t i = 0; i < n; i++) nf += !rec[i].discard;
  ix->n_frames = nf;
  if (ix->seekable) {
    index_frames_by_pts(ix, rec, n, key_pts, st);
  } else {
    /* Without pts the decoder's output order is the only truth: keyframe
     * display positions are not knowable without decoding, so report the
     * first frame only (every fetch decodes from there). */
    ix->key_disp[0] = 0;
    ix->n_keys_disp = 1;
  }
  if (ix->fps <= 0 && st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) ix->fps = av_q2d(st->avg_frame_rate);
  if (ix->fps > 0) ix->duration = (double)nf / ix->fps;
  free(key_pts);
  free(rec);
  return ix;
}

int64_t sp_vindex_frame_of_pts(const sp_vindex *ix, int64_t pts) {
  if (!ix->seekable) return -1;
  int64_t lo = 0, hi = ix->n_frames - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    if (ix->pts[mid] == pts) return mid;
    if (ix->pts[mid] < pts)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

int64_t sp_vindex_dec_of_pts(const sp_vindex *ix, int64_t pts) {
  if (!ix->seekable) return -1;
  int64_t lo = 0, hi = ix->n_packets - 1;
  while (lo <= hi) {
    int64_t mid = (lo + hi) / 2;
    if (ix->pkt_pts[mid] == pts) return ix->pkt_dec[mid];
    if (ix->pkt_pts[mid] < pts)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* ------------------------------------------------------------- the cache */

#define CACHE_SLOTS 512

typedef struct {
  char *path;
  int64_t size, mtime_ns, used;
  sp_vindex *ix;
} cache_slot;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_slot cache[CACHE_SLOTS];
static int64_t cache_clock;

static int file_key(const char *path, int64_t *size, int64_t *mtime_ns) {
  struct stat sb;
  if (stat(path, &sb) != 0) return -1;
  *size = (int64_t)sb.st_size;
  *mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
  return 0;
}

void sp_vindex_release(sp_vindex *ix) {
  if (!ix) return;
  pthread_mutex_lock(&cache_lock);
  int last = --ix->refs == 0;
  pthread_mutex_unlock(&cache_lock);
  if (last) index_free(ix);
}

sp_vindex *sp_vindex_cache_get(const char *path) {
  int64_t size, mt;
  if (file_key(path, &size, &mt) != 0) return NULL;
  sp_vindex *found = NULL;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (cache[i].ix && cache[i].size == size && cache[i].mtime_ns == mt && !strcmp(cache[i].path, path)) {
      found = cache[i].ix;
      found->refs++;
      cache[i].used = ++cache_clock;
      break;
    }
  pthread_mutex_unlock(&cache_lock);
  return found;
}

void sp_vindex_cache_put(const char *path, sp_vindex *ix) {
  int64_t size, mt;
  if (file_key(path, &size, &mt) != 0) return;
  sp_vindex *evicted = NULL;
  pthread_mutex_lock(&cache_lock);
  int slot = 0;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    if (!cache[i].ix) {
      slot = i;
      break;
    }
    if (cache[i].used < cache[slot].used) slot = i;
  }
  if (cache[slot].ix) {
    evicted = cache[slot].ix;
    free(cache[slot].path);
  }
  cache[slot].path = sp_xstrdup(path);
  cache[slot].size = size;
  cache[slot].mtime_ns = mt;
  cache[slot].used = ++cache_clock;
  cache[slot].ix = ix;
  ix->refs++;
  pthread_mutex_unlock(&cache_lock);
  if (evicted) sp_vindex_release(evicted);
}
