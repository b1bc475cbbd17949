/* Helpers for the video tests: make clips with the library's own writer,
 * decode a whole file as the reference, and compare fetched frames with it.
 * Header-only (CMake builds test_*.c only). */
#ifndef SPRY_VIDEO_TESTUTIL_H
#define SPRY_VIDEO_TESTUTIL_H

#include <libavformat/avformat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/video.h"
#include "testkit.h"

/* A clip whose content changes every frame in a way that makes every frame
 * distinct (a moving bar plus a frame counter pattern), so a wrong frame can
 * never compare equal by accident. */
static inline void vt_frame(int t, int w, int h, uint8_t *rgb) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *p = rgb + ((size_t)y * w + x) * 3;
      int bar = ((x + 3 * t) % w) < w / 6;
      p[0] = (uint8_t)(bar ? 230 : 40 + (x * 3 + t * 7) % 60);
      p[1] = (uint8_t)(60 + ((y * 5 + t * 11) % 120));
      /* Bits of t as blocks along the top rows. */
      int bit = x / 8;
      p[2] = (uint8_t)((y < 8 && bit < 10) ? (((t >> bit) & 1) ? 255 : 0) : 90 + (x + y) % 40);
    }
}

static inline void vt_make_clip(const char *path, int frames, const sp_video_writer_config *cfg) {
  sp_video_writer *w = sp_video_writer_open(path, cfg);
  if (!w) fail_msg("writer: %s", sp_last_error());
  uint8_t *rgb = malloc((size_t)cfg->width * cfg->height * 3);
  for (int t = 0; t < frames; t++) {
    vt_frame(t, cfg->width, cfg->height, rgb);
    if (sp_video_writer_add(w, rgb) != 0) fail_msg("writer add: %s", sp_last_error());
  }
  free(rgb);
  if (sp_video_writer_close(w) != 0) fail_msg("writer close: %s", sp_last_error());
}

/* Packets whose pts is below an earlier packet's: B-frames were written. */
static inline int vt_reordered_packets(const char *path) {
  AVFormatContext *fmt = NULL;
  if (avformat_open_input(&fmt, path, NULL, NULL) < 0) return -1;
  int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
  AVPacket *pkt = av_packet_alloc();
  int64_t maxpts = INT64_MIN;
  int reordered = 0, nopts = 0;
  while (av_read_frame(fmt, pkt) >= 0) {
    if (pkt->stream_index == si) {
      if (pkt->pts == AV_NOPTS_VALUE) nopts++;
      else if (pkt->pts < maxpts) reordered++;
      else maxpts = pkt->pts;
    }
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  avformat_close_input(&fmt);
  /* AVI stores no pts: count B-frames by the decode/display mismatch there. */
  return reordered + (nopts > 0 ? -1000000 : 0);
}

/* The reference: every frame of a full sequential decode. */
typedef struct {
  uint8_t *px;
  int64_t n, cap;
  size_t fb;
} vt_ref;

static inline int vt_keep(int64_t i, const uint8_t *px, int h, int w, void *u) {
  vt_ref *r = u;
  if (i >= r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    r->px = realloc(r->px, (size_t)r->cap * r->fb);
  }
  memcpy(r->px + (size_t)i * r->fb, px, r->fb);
  r->n = i + 1;
  return 0;
}

static inline void vt_reference(const char *path, const sp_video_geom *g, vt_ref *r) {
  sp_video_options opt = {.threads = 1, .no_index_cache = 1};
  sp_video *v = sp_video_open_with(path, &opt);
  if (!v) fail_msg("open %s: %s", path, sp_last_error());
  int h, w;
  assert_int_equal(sp_video_out_size(v, g, &h, &w), 0);
  memset(r, 0, sizeof *r);
  r->fb = (size_t)h * w * 3;
  int64_t n = sp_video_decode_all(v, g, vt_keep, r);
  if (n < 0) fail_msg("decode_all %s: %s", path, sp_last_error());
  assert_int_equal(n, r->n);
  sp_video_close(v);
}

/* Fetches idx[0..n) through v and compares each with the reference. */
static inline void vt_check_fetch(sp_video *v, const vt_ref *r, const int64_t *idx, int n, const sp_video_geom *g,
                                  const char *what) {
  uint8_t *out = malloc(r->fb * (size_t)(n > 0 ? n : 1));
  if (sp_video_get_frames(v, idx, n, g, out) != 0) fail_msg("%s: get_frames: %s", what, sp_last_error());
  for (int j = 0; j < n; j++) {
    assert_true(idx[j] < r->n);
    if (memcmp(out + (size_t)j * r->fb, r->px + (size_t)idx[j] * r->fb, r->fb) != 0)
      fail_msg("%s: frame %lld (request position %d of %d) differs from the sequential decode", what,
               (long long)idx[j], j, n);
  }
  free(out);
}

/* Random sets with repeats, out of order, and the first and last frames. */
static inline void vt_check_random_sets(const char *path, const vt_ref *r, const sp_video_geom *g, int trials,
                                        uint64_t seed) {
  sp_video *v = sp_video_open(path);
  if (!v) fail_msg("open %s: %s", path, sp_last_error());
  assert_int_equal(sp_video_frame_count(v), r->n);
  sp_test_rng rng = {seed};
  int64_t idx[24];
  for (int t = 0; t < trials; t++) {
    int n = 1 + (int)(sp_test_rng_next(&rng) % 24);
    for (int j = 0; j < n; j++) idx[j] = (int64_t)(sp_test_rng_next(&rng) % (uint64_t)r->n);
    if (t % 3 == 0) idx[0] = r->n - 1;
    if (t % 4 == 1 && n > 2) idx[n - 1] = idx[1]; /* repeat */
    if (t % 5 == 2) idx[n / 2] = 0;
    vt_check_fetch(v, r, idx, n, g, path);
  }
  /* Every frame, backwards, in one request. */
  int64_t *all = malloc((size_t)r->n * sizeof(int64_t));
  for (int64_t i = 0; i < r->n; i++) all[i] = r->n - 1 - i;
  vt_check_fetch(v, r, all, (int)r->n, g, path);
  free(all);
  sp_video_close(v);
}

#endif
