/* Every annotation format and image format on real files (skipped when
 * ../shared/data is absent) and on synthetic files written to a temp dir. */
#include <math.h>

#include "data_testutil.h"

static void imm_dat_real(void **state) {
  (void)state;
  char buf[1024];
  const char *dat = sp_test_data_path("imm_face_db/01-1m.dat", buf, sizeof buf);
  if (!dat) skip();
  sp_kp_sample s;
  assert_int_equal(sp_read_imm_dat(dat, &s), 0);
  assert_int_equal(s.k, 58);
  assert_float_equal(s.pts[0], 228, 0);
  assert_float_equal(s.pts[1], 307, 0);
  assert_non_null(strstr(s.image, "01-1m.jpg"));
  sp_kp_sample_free(&s);

  char dir[1024];
  snprintf(dir, sizeof dir, "%s/imm_face_db", sp_test_data_dir());
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 240);
  assert_int_equal(ds.k, 58);
  assert_int_equal(ds.skipped, 0);
  assert_int_equal(ds.n_identities, 40);
  sp_dataset tr, va;
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_TRAIN, 0.2, &tr), 0);
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_VAL, 0.2, &va), 0);
  assert_int_equal(tr.n, 32 * 6); /* persons 1-32 */
  assert_int_equal(va.n, 8 * 6);  /* persons 33-40 */
  for (int i = 0; i < va.n; i++) assert_true(atoi(va.identities[va.s[i].identity]) >= 33);
  sp_dataset_free(&tr);
  sp_dataset_free(&va);
  sp_dataset_free(&ds);
}

static void imm_asf_synthetic(void **state) {
  (void)state;
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  /* The original IMM layout: comment header, count, 7-field point lines,
   * host image at the end; coordinates relative to the image size. */
  snprintf(path, sizeof path, "%s/07-2m.asf", dir);
  tu_write_text(path,
                "######################\n# AAM Shape File\n######################\n\n#\n# number of model points\n#\n3\n\n"
                "# model points\n# format: <path#> <type> <x rel.> <y rel.> <point#> <connects from> <connects to>\n"
                "0 0 0.25 0.5 0 2 1\n0 0 0.5 0.25 1 0 2\n0 0 0.75 0.75 2 1 0\n\n#\n# host image\n#\n07-2m.jpg\n");
  uint8_t *im = tu_face_image(64, 48, 16, 24, 1);
  snprintf(path, sizeof path, "%s/07-2m.jpg", dir);
  tu_write_jpeg(path, im, 64, 48, 95);
  free(im);
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 1);
  assert_int_equal(ds.k, 3);
  assert_true(ds.s[0].relative);
  assert_float_equal(ds.s[0].pts[2], 0.5, 1e-6);
  assert_string_equal(ds.identities[ds.s[0].identity], "07");
  /* Relative coordinates become pixels once the image size is known. */
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 32;
  cc.threads = 1;
  sp_cache *c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  /* Crop side = bbox max side (32 px: x 16..48) * 1.5 = 48 -> scale 32/48. */
  float cx = 0.5f * 64, ox = c->points[2] - c->points[0];
  assert_float_equal(ox, (cx - 16) * 32.f / 48.f, 0.05);
  sp_cache_free(c);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void pts_synthetic(void **state) {
  (void)state;
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/a.pts", dir);
  tu_write_text(path, "version: 1\nn_points:  3\n{\n10.5 20\n30 40.25\n50 60\n}\n");
  sp_kp_sample s;
  assert_int_equal(sp_read_pts(path, &s), 0);
  assert_int_equal(s.k, 3);
  assert_float_equal(s.pts[1], 20, 0);
  assert_float_equal(s.pts[3], 40.25, 0);
  sp_kp_sample_free(&s);
  tu_write_text(path, "version: 1\nn_points: 3\n{\n10 20\n30 40\n}\n"); /* one point short */
  assert_int_equal(sp_read_pts(path, &s), -1);
  assert_non_null(strstr(sp_last_error(), "a.pts"));
  tu_write_text(path, "version: 1\nn_points: 2\n{\n10 20\n30 40\n"); /* no closing brace */
  assert_int_equal(sp_read_pts(path, &s), -1);
  sp_test_rmtree(dir);
}

static void dlib_xml_real(void **state) {
  (void)state;
  char buf[1024];
  const char *xml = sp_test_data_path("dlib_faces_68/training_with_face_landmarks.xml", buf, sizeof buf);
  if (!xml) skip();
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_dlib_xml(xml, &ds), 0);
  assert_int_equal(ds.n, 18); /* 4 images, 18 faces */
  assert_int_equal(ds.k, 68);
  /* First face of 2007_007763.jpg: box top=90 left=194 37x37, part 00 = (201,107). */
  assert_non_null(strstr(ds.s[0].image, "2007_007763.jpg"));
  assert_true(ds.s[0].has_box);
  assert_float_equal(ds.s[0].box[0], 194, 0);
  assert_float_equal(ds.s[0].box[1], 90, 0);
  assert_float_equal(ds.s[0].box[2], 37, 0);
  assert_float_equal(ds.s[0].pts[0], 201, 0);
  assert_float_equal(ds.s[0].pts[1], 107, 0);
  sp_dataset_free(&ds);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/dlib_faces_68", sp_test_data_dir());
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 18 + 25);
  sp_crop_config cc = sp_crop_config_default();
  cc.box = SP_BOX_POINTS; /* crops around the points: the geometry these checks are about */
  cc.size = 64;
  sp_cache *c = sp_cache_build(&ds, &cc);
  assert_non_null(c);
  assert_int_equal(c->n, 43);
  sp_cache_free(c);
  sp_dataset_free(&ds);
}

static void dlib_xml_synthetic(void **state) {
  (void)state;
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/f.xml", dir);
  tu_write_text(path,
                "<?xml version='1.0'?>\n<dataset><images>\n"
                "<image file='x.jpg'>\n <box top='5' left='6' width='20' height=\"22\">\n"
                "  <part name='01' x='9' y='10'/>\n  <part name='00' x='7' y='8'/>\n </box>\n"
                " <box top='1' left='1' width='5' height='5' ignore='1'/>\n"
                " <box top='1' left='1' width='5' height='5'>\n  <part name='00' x='1' y='2'/>\n </box>\n"
                "</image>\n</images></dataset>\n");
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_dlib_xml(path, &ds), 0);
  assert_int_equal(ds.n, 1);          /* second face has 1 point, not 2: skipped */
  assert_int_equal(ds.skipped, 1);
  assert_float_equal(ds.s[0].pts[0], 7, 0); /* parts are placed by name, not order */
  assert_float_equal(ds.s[0].pts[2], 9, 0);
  assert_float_equal(ds.s[0].box[3], 22, 0);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void coco_synthetic(void **state) {
  (void)state;
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/person_keypoints.json", dir);
  tu_write_text(path,
                "{\"info\": {\"description\": \"t\\u0041\"}, \"images\": [{\"id\": 7, \"file_name\": \"a.jpg\", "
                "\"width\": 64, \"height\": 48}, {\"id\": 8, \"file_name\": \"b.png\"}],\n"
                " \"annotations\": [\n"
                "  {\"image_id\": 7, \"iscrowd\": 0, \"bbox\": [4, 5, 30.5, 20], \"num_keypoints\": 2,"
                "   \"keypoints\": [10, 11, 2, 0, 0, 0, 20.5, 21, 1]},\n"
                "  {\"image_id\": 8, \"iscrowd\": 1, \"keypoints\": [1, 1, 2, 1, 1, 2, 1, 1, 2]},\n"
                "  {\"image_id\": 99, \"keypoints\": [1, 1, 2, 1, 1, 2, 1, 1, 2]},\n"
                "  {\"image_id\": 8, \"keypoints\": [0, 0, 0, 0, 0, 0, 0, 0, 0]}\n"
                " ], \"categories\": [{\"id\": 1, \"name\": \"face\", \"keypoints\": [\"a\", \"b\", \"c\"], \"skeleton\": []}]}");
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_coco_keypoints(path, NULL, &ds), 0);
  assert_int_equal(ds.n, 1);       /* crowd ignored, unknown image skipped, unlabelled ignored */
  assert_int_equal(ds.skipped, 1);
  assert_int_equal(ds.k, 3);
  assert_true(ds.s[0].has_box);
  assert_float_equal(ds.s[0].box[2], 30.5, 0);
  assert_int_equal(ds.s[0].vis[0], 1);
  assert_int_equal(ds.s[0].vis[1], 0);
  assert_float_equal(ds.s[0].pts[4], 20.5, 0);
  assert_non_null(strstr(ds.s[0].image, "a.jpg"));
  sp_dataset_free(&ds);
  tu_write_text(path, "{\"images\": [1, 2,], \"annotations\": []}");
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_coco_keypoints(path, NULL, &ds), -1);
  assert_non_null(strstr(sp_last_error(), "invalid JSON"));
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void youtube_csv_real(void **state) {
  (void)state;
  char dir[1024];
  if (!sp_test_data_path("youtube_faces_68/keypoints.csv", dir, sizeof dir)) skip();
  snprintf(dir, sizeof dir, "%s/youtube_faces_68", sp_test_data_dir());
  sp_dataset ds;
  assert_int_equal(sp_dataset_open_dir(dir, &ds), 0);
  assert_int_equal(ds.n, 3167);
  assert_int_equal(ds.k, 68);
  assert_int_equal(ds.skipped, 0);
  assert_int_equal(ds.n_identities, 260);
  for (int i = 0; i < ds.n; i++) {
    const char *base = strrchr(ds.s[i].image, '/') + 1;
    const char *id = ds.identities[ds.s[i].identity];
    /* train_/test_ prefixes do not split a person in two. */
    assert_true(strncmp(id, "train_", 6) && strncmp(id, "test_", 5));
    assert_non_null(strstr(base, id));
  }
  sp_dataset tr, va;
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_TRAIN, 0.2, &tr), 0);
  assert_int_equal(sp_dataset_split_identity(&ds, SP_SPLIT_VAL, 0.2, &va), 0);
  assert_int_equal(tr.n + va.n, ds.n);
  assert_true(va.n > 300 && va.n < 1000);
  for (int i = 0; i < tr.n_identities; i++)
    for (int j = 0; j < va.n_identities; j++) assert_true(strcmp(tr.identities[i], va.identities[j]) != 0);
  sp_dataset_free(&tr);
  sp_dataset_free(&va);
  sp_dataset_free(&ds);
}

static void csv_and_split_list_synthetic(void **state) {
  (void)state;
  char dir[512], path[1024], list[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/keypoints.csv", dir);
  tu_write_text(path, ",0,1,2,3\nA_B_01.jpg,1.0,2.0,3.0,4.0\ntrain_A_B_11.jpg,5,6,7,8\nC_D_00.jpg,1,2,3\n"
                      "E_F_00.jpg,nan,2,3,4\nG_H_00.jpg,1,2,3,4\n");
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_keypoints_csv(path, dir, &ds), 0);
  assert_int_equal(ds.n, 3);
  assert_int_equal(ds.skipped, 2); /* wrong count, NaN */
  assert_int_equal(ds.s[0].identity, ds.s[1].identity);
  assert_string_equal(ds.identities[ds.s[0].identity], "A_B");
  snprintf(list, sizeof list, "%s/val.txt", dir);
  tu_write_text(list, "# val\nG_H_00.jpg\n\n");
  sp_dataset va;
  assert_int_equal(sp_dataset_split_list(&ds, list, &va), 0);
  assert_int_equal(va.n, 1);
  assert_non_null(strstr(va.s[0].image, "G_H_00.jpg"));
  sp_dataset_free(&va);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static void image_formats_by_magic(void **state) {
  (void)state;
  char dir[512], path[1024];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  uint8_t *im = tu_face_image(40, 30, 10, 12, 2);
  /* PNG data under a .jpg name, as in real datasets. */
  snprintf(path, sizeof path, "%s/png_named.jpg", dir);
  tu_write_png(path, im, 40, 30);
  sp_image out;
  assert_int_equal(sp_image_load(path, 3, &out), 0);
  assert_int_equal(out.w, 40);
  assert_int_equal(out.h, 30);
  assert_memory_equal(out.px, im, 40 * 30 * 3); /* lossless */
  sp_image_free(&out);
  assert_int_equal(sp_image_load(path, 1, &out), 0);
  assert_int_equal(out.c, 1);
  assert_true(out.px[12 * 40 + 10] > 240); /* the white dot in gray */
  sp_image_free(&out);
  /* JPEG data under a .png name; reduced DCT decode halves the size. */
  snprintf(path, sizeof path, "%s/jpeg_named.png", dir);
  tu_write_jpeg(path, im, 40, 30, 95);
  assert_int_equal(sp_image_load(path, 3, &out), 0);
  assert_int_equal(out.w, 40);
  assert_true(abs((int)out.px[(12 * 40 + 10) * 3] - 250) < 12);
  sp_image_free(&out);
  uint8_t *buf;
  size_t len;
  assert_int_equal(sp_read_file(path, &buf, &len), 0);
  assert_int_equal(sp_image_sniff(buf, len), SP_IMG_JPEG);
  assert_int_equal(sp_image_decode(buf, len, 3, 2, "x", &out), 0);
  assert_int_equal(out.w, 20);
  assert_int_equal(out.h, 15);
  sp_image_free(&out);
  free(buf);
  snprintf(path, sizeof path, "%s/text.jpg", dir);
  tu_write_text(path, "GIF89a not really");
  assert_int_equal(sp_image_load(path, 3, &out), -1);
  assert_non_null(strstr(sp_last_error(), "unknown magic"));
  free(im);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(imm_dat_real),        cmocka_unit_test(imm_asf_synthetic),
      cmocka_unit_test(pts_synthetic),       cmocka_unit_test(dlib_xml_real),
      cmocka_unit_test(dlib_xml_synthetic),  cmocka_unit_test(coco_synthetic),
      cmocka_unit_test(youtube_csv_real),    cmocka_unit_test(csv_and_split_list_synthetic),
      cmocka_unit_test(image_formats_by_magic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
