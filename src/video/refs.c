/* Which packets hold a picture that no other picture references, read from a
 * few header bytes of each packet (no decoding), and which codecs make
 * skipping those exact.
 *
 * A picture nothing references can be left undecoded when it is not itself
 * requested: every other picture decodes to the same pixels. That is true by
 * the standard for
 *   - H.264: nal_ref_idc == 0 (7.4.1: "not used for inter prediction");
 *   - HEVC: sub-layer non-reference NAL types (TRAIL_N, RASL_N, ...) whose
 *     TemporalId is the stream's highest. A lower sub-layer's _N picture may
 *     still be referenced by a higher sub-layer, so those are kept;
 *   - MPEG-4 Part 2 and MPEG-1/2: B pictures, never references there.
 * Any other codec is decoded in full (the caller's fallback). A packet this
 * parser cannot read cleanly counts as referenced: a wrong "referenced" only
 * costs time, a wrong "unreferenced" would cost pixels.
 *
 * The decoder is asked to drop such a packet with skip_frame =
 * AVDISCARD_NONREF, which libavcodec's decoders for these codecs apply by the
 * same rule, so a parser error could not make it drop a referenced picture
 * either. */
#include <libavcodec/codec_id.h>
#include <string.h>

#include "video/video_internal.h"

/* Offset of the next 00 00 01 at or after i, or n. */
static size_t next_start_code(const uint8_t *p, size_t n, size_t i) {
  while (i + 3 <= n) {
    const uint8_t *z = memchr(p + i, 0, n - i - 2);
    if (!z) return n;
    i = (size_t)(z - p);
    if (p[i + 1] == 0 && p[i + 2] == 1) return i;
    i++;
  }
  return n;
}

typedef void (*nal_fn)(const uint8_t *nal, size_t size, void *ctx);

/* Calls fn for every NAL unit: length-prefixed (len_size 1..4, the mp4/mkv
 * form) or after Annex B start codes (len_size 0: MPEG-TS, raw streams).
 * -1 when a length runs past the packet. */
static int for_each_nal(const uint8_t *p, size_t n, int len_size, nal_fn fn, void *ctx) {
  if (len_size > 0) {
    size_t i = 0;
    while (i < n) {
      if (n - i < (size_t)len_size) return -1;
      size_t len = 0;
      for (int b = 0; b < len_size; b++) len = len << 8 | p[i + (size_t)b];
      i += (size_t)len_size;
      if (len > n - i) return -1;
      if (len > 0) fn(p + i, len, ctx);
      i += len;
    }
    return 0;
  }
  size_t i = next_start_code(p, n, 0);
  while (i < n) {
    size_t s = i + 3, e = next_start_code(p, n, s), end = e;
    while (end > s && p[end - 1] == 0) end--; /* a 4-byte start code's leading zero */
    if (end > s) fn(p + s, end - s, ctx);
    i = e;
  }
  return 0;
}

typedef struct {
  int vcl, ref, unknown, tid;
} nal_count;

static void h264_nal(const uint8_t *nal, size_t size, void *ctx) {
  nal_count *c = ctx;
  (void)size;
  int type = nal[0] & 0x1f, ref_idc = (nal[0] >> 5) & 3;
  if (type == 1 || type == 2 || type == 5) { /* slices and data partition A */
    c->vcl++;
    c->ref += ref_idc != 0;
  } else if (type == 20 || type == 21) {
    c->unknown++; /* MVC / 3D extension slices: other views may reference them */
  }
}

static void hevc_nal(const uint8_t *nal, size_t size, void *ctx) {
  nal_count *c = ctx;
  if (size < 2) {
    c->unknown++;
    return;
  }
  int type = (nal[0] >> 1) & 0x3f, layer = ((nal[0] & 1) << 5) | (nal[1] >> 3), tid = (nal[1] & 7) - 1;
  if (type > 31) return; /* parameter sets, SEI, AUD: not pictures */
  if (layer != 0 || tid < 0) {
    c->unknown++; /* other layers, or a forbidden TemporalId */
    return;
  }
  c->vcl++;
  /* Types 0..14 even: TRAIL_N, TSA_N, STSA_N, RADL_N, RASL_N, RSV_VCL_N10/12/14. */
  c->ref += !(type <= 14 && type % 2 == 0);
  if (tid > c->tid) c->tid = tid;
}

/* MPEG-4 Part 2 VOPs (00 00 01 B6) or MPEG-1/2 pictures (00 00 01 00): the
 * packet is unreferenced when every picture in it is a B picture. */
static void mpeg_pictures(const uint8_t *p, size_t n, int mpeg4, nal_count *c) {
  for (size_t i = next_start_code(p, n, 0); i < n; i = next_start_code(p, n, i + 3)) {
    if (mpeg4 && i + 4 < n && p[i + 3] == 0xb6) {
      c->vcl++;
      c->ref += (p[i + 4] >> 6) != 2; /* vop_coding_type: 0 I, 1 P, 2 B, 3 S(GMC) */
    } else if (!mpeg4 && i + 5 < n && p[i + 3] == 0x00) {
      c->vcl++;
      c->ref += ((p[i + 5] >> 3) & 7) != 3; /* picture_coding_type: 1 I, 2 P, 3 B, 4 D */
    } else if ((mpeg4 && i + 3 < n && p[i + 3] == 0xb6) || (!mpeg4 && i + 3 < n && p[i + 3] == 0x00)) {
      c->unknown++; /* a picture header cut short */
    }
  }
}

int sp_vrefs_init(sp_vrefs *r, int codec_id, const uint8_t *extradata, int size) {
  memset(r, 0, sizeof *r);
  const uint8_t *x = extradata;
  int annexb = size >= 3 && x[0] == 0 && x[1] == 0 && (x[2] == 1 || (size >= 4 && x[2] == 0 && x[3] == 1));
  switch (codec_id) {
    case AV_CODEC_ID_H264:
      r->kind = SP_VREFS_H264;
      /* avcC: version 1, lengthSizeMinusOne in byte 4; otherwise start codes. */
      r->len_size = !annexb && size >= 7 && x[0] == 1 ? (x[4] & 3) + 1 : 0;
      if (r->len_size == 3) r->kind = SP_VREFS_NONE; /* not allowed by the avcC spec: do not guess */
      break;
    case AV_CODEC_ID_HEVC:
      r->kind = SP_VREFS_HEVC;
      /* hvcC: lengthSizeMinusOne in byte 21. */
      r->len_size = !annexb && size >= 23 ? (x[21] & 3) + 1 : 0;
      if (r->len_size == 3) r->kind = SP_VREFS_NONE;
      break;
    case AV_CODEC_ID_MPEG4: r->kind = SP_VREFS_MPEG4; break;
    case AV_CODEC_ID_MPEG1VIDEO:
    case AV_CODEC_ID_MPEG2VIDEO: r->kind = SP_VREFS_MPEG12; break;
    default: r->kind = SP_VREFS_NONE;
  }
  return r->kind;
}

int sp_vrefs_packet(const sp_vrefs *r, const uint8_t *data, int size, int *tid) {
  nal_count c = {0, 0, 0, -1};
  *tid = 0;
  if (!data || size <= 0) return 0;
  switch (r->kind) {
    case SP_VREFS_H264:
      if (for_each_nal(data, (size_t)size, r->len_size, h264_nal, &c) != 0) return 0;
      break;
    case SP_VREFS_HEVC:
      if (for_each_nal(data, (size_t)size, r->len_size, hevc_nal, &c) != 0) return 0;
      *tid = c.tid < 0 ? 0 : c.tid;
      break;
    case SP_VREFS_MPEG4:
    case SP_VREFS_MPEG12: mpeg_pictures(data, (size_t)size, r->kind == SP_VREFS_MPEG4, &c); break;
    default: return 0;
  }
  return c.vcl > 0 && c.ref == 0 && c.unknown == 0;
}

static void h264_idr(const uint8_t *nal, size_t size, void *ctx) {
  (void)size;
  if ((nal[0] & 0x1f) == 5) ((nal_count *)ctx)->vcl++;
}

int sp_vrefs_clean_start(const sp_vrefs *r, const uint8_t *data, int size) {
  if (r->kind != SP_VREFS_H264) return 1;
  nal_count c = {0, 0, 0, -1};
  if (!data || size <= 0 || for_each_nal(data, (size_t)size, r->len_size, h264_idr, &c) != 0) return 0;
  return c.vcl > 0;
}

const char *sp_vrefs_name(int kind) {
  switch (kind) {
    case SP_VREFS_H264: return "h264 nal_ref_idc";
    case SP_VREFS_HEVC: return "hevc sub-layer non-reference";
    case SP_VREFS_MPEG4: return "mpeg4 B-VOP";
    case SP_VREFS_MPEG12: return "mpeg1/2 B picture";
    default: return "none";
  }
}
