/* refs.c on hand-made packets: which pictures it calls unreferenced, for
 * H.264 and HEVC (length-prefixed and Annex B), MPEG-4 Part 2 and MPEG-2,
 * and that anything it cannot read cleanly (lengths past the end, cut
 * headers, other layers, unknown codecs) counts as referenced. */
#include <libavcodec/codec_id.h>
#include <stdlib.h>
#include <string.h>

#include "testkit.h"
#include "video/video_internal.h"

static const uint8_t avcc[7] = {1, 0x64, 0, 0x1e, 0xff, 0xe1, 0}; /* 4-byte NAL lengths */
static const uint8_t hvcc[23] = {1, [21] = 0x0f};                 /* 4-byte NAL lengths */

/* A length-prefixed packet of NAL units given as header bytes (payload is
 * two filler bytes each). */
static int lp_packet(uint8_t *buf, const uint8_t (*hdr)[2], int hdr_len, int n) {
  int at = 0;
  for (int i = 0; i < n; i++) {
    int len = hdr_len + 2;
    buf[at++] = 0, buf[at++] = 0, buf[at++] = 0, buf[at++] = (uint8_t)len;
    for (int b = 0; b < hdr_len; b++) buf[at++] = hdr[i][b];
    buf[at++] = 0x88, buf[at++] = 0x80;
  }
  return at;
}

static int classify(const sp_vrefs *r, const uint8_t *p, int n) {
  int tid;
  return sp_vrefs_packet(r, p, n, &tid);
}

static void test_h264(void **state) {
  (void)state;
  sp_vrefs r;
  assert_int_equal(sp_vrefs_init(&r, AV_CODEC_ID_H264, avcc, sizeof avcc), SP_VREFS_H264);
  assert_int_equal(r.len_size, 4);
  uint8_t buf[64];
  /* SEI (ref_idc 0) + non-reference B slice (type 1, ref_idc 0) */
  const uint8_t nonref[2][2] = {{0x06, 0}, {0x01, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, nonref, 1, 2)), 1);
  /* reference P slice (ref_idc 2) */
  const uint8_t ref[1][2] = {{0x41, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, ref, 1, 1)), 0);
  /* IDR */
  const uint8_t idr[1][2] = {{0x65, 0}};
  int n = lp_packet(buf, idr, 1, 1);
  assert_int_equal(classify(&r, buf, n), 0);
  assert_int_equal(sp_vrefs_clean_start(&r, buf, n), 1);
  assert_int_equal(sp_vrefs_clean_start(&r, buf, lp_packet(buf, ref, 1, 1)), 0); /* an I/P that is no IDR */
  /* two slices of one picture, one referenced: referenced */
  const uint8_t mixed[2][2] = {{0x01, 0}, {0x21, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, mixed, 1, 2)), 0);
  /* no slice at all (parameter sets only): not a picture to skip */
  const uint8_t ps[2][2] = {{0x67, 0}, {0x68, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, ps, 1, 2)), 0);
  /* MVC extension slice: other views may reference it */
  const uint8_t mvc[2][2] = {{0x01, 0}, {0x14, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, mvc, 1, 2)), 0);
  /* a length running past the packet */
  n = lp_packet(buf, nonref, 1, 2);
  buf[3] = 60;
  assert_int_equal(classify(&r, buf, n), 0);
  assert_int_equal(classify(&r, buf, 3), 0); /* cut inside the length field */
  assert_int_equal(classify(&r, NULL, 0), 0);

  /* Annex B (no avcC): start codes, 3 and 4 bytes. */
  sp_vrefs rb;
  assert_int_equal(sp_vrefs_init(&rb, AV_CODEC_ID_H264, NULL, 0), SP_VREFS_H264);
  assert_int_equal(rb.len_size, 0);
  const uint8_t annexb_nonref[] = {0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x01, 0x9a, 0x20, 0, 0, 0};
  assert_int_equal(classify(&rb, annexb_nonref, sizeof annexb_nonref), 1);
  const uint8_t annexb_ref[] = {0, 0, 1, 0x01, 0x9a, 0, 0, 0, 1, 0x21, 0x9a};
  assert_int_equal(classify(&rb, annexb_ref, sizeof annexb_ref), 0);
}

static void test_hevc(void **state) {
  (void)state;
  sp_vrefs r;
  assert_int_equal(sp_vrefs_init(&r, AV_CODEC_ID_HEVC, hvcc, sizeof hvcc), SP_VREFS_HEVC);
  assert_int_equal(r.len_size, 4);
  uint8_t buf[64];
  int tid;
  /* TRAIL_N (0), TemporalId 0 */
  const uint8_t trail_n[1][2] = {{0 << 1, 1}};
  int n = lp_packet(buf, trail_n, 2, 1);
  assert_int_equal(sp_vrefs_packet(&r, buf, n, &tid), 1);
  assert_int_equal(tid, 0);
  /* TSA_N (2) on TemporalId 2: unreferenced, and the caller learns its layer */
  const uint8_t tsa_n[1][2] = {{2 << 1, 3}};
  assert_int_equal(sp_vrefs_packet(&r, buf, lp_packet(buf, tsa_n, 2, 1), &tid), 1);
  assert_int_equal(tid, 2);
  /* TRAIL_R (1), CRA (21), IDR_W_RADL (19): referenced */
  const uint8_t refs[3][2] = {{1 << 1, 1}, {21 << 1, 1}, {19 << 1, 1}};
  for (int i = 0; i < 3; i++) assert_int_equal(classify(&r, buf, lp_packet(buf, &refs[i], 2, 1)), 0);
  /* prefix SEI (39) + RASL_N (8): unreferenced */
  const uint8_t sei_rasl[2][2] = {{39 << 1, 1}, {8 << 1, 1}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, sei_rasl, 2, 2)), 1);
  /* a picture of another layer (nuh_layer_id 1) */
  const uint8_t layer1[1][2] = {{0, (1 << 3) | 1}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, layer1, 2, 1)), 0);
  /* forbidden TemporalId (nuh_temporal_id_plus1 = 0) */
  const uint8_t tid0[1][2] = {{0, 0}};
  assert_int_equal(classify(&r, buf, lp_packet(buf, tid0, 2, 1)), 0);
  /* a one-byte NAL unit: cut header */
  const uint8_t cut[] = {0, 0, 0, 1, 0};
  assert_int_equal(classify(&r, cut, sizeof cut), 0);
}

static void test_mpeg(void **state) {
  (void)state;
  sp_vrefs r4, r2, none;
  assert_int_equal(sp_vrefs_init(&r4, AV_CODEC_ID_MPEG4, NULL, 0), SP_VREFS_MPEG4);
  assert_int_equal(sp_vrefs_init(&r2, AV_CODEC_ID_MPEG2VIDEO, NULL, 0), SP_VREFS_MPEG12);
  assert_int_equal(sp_vrefs_init(&none, AV_CODEC_ID_VP9, NULL, 0), SP_VREFS_NONE);
  /* MPEG-4: VOP start code, vop_coding_type in the top two bits */
  const uint8_t b_vop[] = {0, 0, 1, 0xb6, 0x80 | 0x12, 0x34};
  const uint8_t p_vop[] = {0, 0, 1, 0xb6, 0x40 | 0x12, 0x34};
  const uint8_t packed[] = {0, 0, 1, 0xb6, 0x40, 0x34, 0, 0, 1, 0xb6, 0x80, 0x11}; /* P + B (DivX packed) */
  const uint8_t cut4[] = {0, 0, 1, 0xb6};
  assert_int_equal(classify(&r4, b_vop, sizeof b_vop), 1);
  assert_int_equal(classify(&r4, p_vop, sizeof p_vop), 0);
  assert_int_equal(classify(&r4, packed, sizeof packed), 0);
  assert_int_equal(classify(&r4, cut4, sizeof cut4), 0);
  /* MPEG-2: sequence header then picture with picture_coding_type in bits 5..3 of byte 5 */
  const uint8_t b_pic[] = {0, 0, 1, 0xb3, 0x10, 0x20, 0, 0, 1, 0x00, 0x01, 3 << 3, 0xff, 0xf8};
  const uint8_t i_pic[] = {0, 0, 1, 0x00, 0x00, 1 << 3, 0xff, 0xf8};
  assert_int_equal(classify(&r2, b_pic, sizeof b_pic), 1);
  assert_int_equal(classify(&r2, i_pic, sizeof i_pic), 0);
  assert_int_equal(classify(&none, b_pic, sizeof b_pic), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_h264),
      cmocka_unit_test(test_hevc),
      cmocka_unit_test(test_mpeg),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
