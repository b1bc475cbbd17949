/* Issue 19's findings in the data layer, each as it was found: a folder's K
 * is its majority's, a cut dlib XML or a CSV with a NUL byte says so, a
 * 1,000,000-point .dat says how many, a damaged crop cache is rebuilt, a
 * killed cache write's temporary is removed, COCO matching is not
 * quadratic, and the region decoder refuses what the whole-image decoder
 * refuses. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/data_internal.h"
#include "data_testutil.h"

/* Captures stderr around a call (the skip lines are the messages). */
typedef struct {
  int saved, fd;
  char path[600];
} capture;

static void capture_begin(capture *c, const char *dir) {
  snprintf(c->path, sizeof c->path, "%s/stderr.txt", dir);
  fflush(stderr);
  c->saved = dup(2);
  c->fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(c->fd >= 0);
  dup2(c->fd, 2);
}

static char *capture_end(capture *c) {
  fflush(stderr);
  dup2(c->saved, 2);
  close(c->saved);
  close(c->fd);
  return sp_test_slurp(c->path);
}

static void write_dat(const char *dir, int id, int k) {
  char path[600], text[4096];
  int n = 0;
  for (int i = 0; i < k; i++) n += snprintf(text + n, sizeof text - (size_t)n, "%d %d %d\n", i + 1, 10 + i, 20 + i);
  snprintf(path, sizeof path, "%s/%02d-1m.dat", dir, id);
  tu_write_text(path, text);
}

/* P3: one 57-point .dat that sorts first fixed K = 57 for the folder, and
 * every good file failed with "has 58 points, the dataset has 57". */
static void folder_k_is_the_majority(void **state) {
  (void)state;
  char dir[512];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  write_dat(dir, 1, 57);
  for (int id = 2; id <= 5; id++) write_dat(dir, id, 58);
  capture cap;
  capture_begin(&cap, dir);
  sp_dataset ds;
  int rc = sp_dataset_open_dir(dir, &ds);
  char *err = capture_end(&cap);
  assert_int_equal(rc, 0);
  assert_int_equal(ds.k, 58);
  assert_int_equal(ds.n, 4);
  assert_int_equal(ds.skipped, 1);
  /* The odd file is named, with what the others have. */
  assert_non_null(strstr(err, "01-1m.dat: has 57 points, where 4 of the folder's 5 .dat files have 58"));
  free(err);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* P8: a .dat with 1,000,000 points said "no keypoints". */
static void huge_point_count_is_named(void **state) {
  (void)state;
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/a.dat", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 1000000; i++) fprintf(f, "%d 1 2\n", i + 1);
  fclose(f);
  sp_kp_sample s;
  assert_int_equal(sp_read_imm_dat(path, &s), -1);
  sp_assert_error_has("more than 256 points");
  sp_test_rmtree(dir);
}

/* P8: a dlib XML cut mid-box said "DIR: no usable samples (0 skipped)". */
static void cut_dlib_xml_names_the_box(void **state) {
  (void)state;
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/labels_with_face_landmarks.xml", dir);
  tu_write_text(path, "<dataset><images>\n<image file='a.jpg'>\n<box top='1' left='2' width='30' height='40'>\n"
                      "<part name='00' x='3' y='4'/>\n<part name='01' x='5' y='6'/>\n<par");
  capture cap;
  capture_begin(&cap, dir);
  sp_dataset ds;
  int rc = sp_dataset_open_dir(dir, &ds);
  char *err = capture_end(&cap);
  assert_int_equal(rc, -1);
  sp_assert_error_has("(1 skipped)");
  assert_non_null(strstr(err, "the file ends inside this box"));
  free(err);
  sp_test_rmtree(dir);
}

/* P8: a CSV with a NUL byte was silently cut short there. */
static void csv_with_nul_is_refused(void **state) {
  (void)state;
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/keypoints.csv", dir);
  const char text[] = "name,x0,y0\na_1.jpg,1,2\nb_1.jpg,3,4\0c_1.jpg,5,6\n";
  tu_write_bytes(path, text, sizeof text - 1);
  sp_dataset ds;
  sp_dataset_init(&ds);
  assert_int_equal(sp_read_keypoints_csv(path, dir, &ds), -1);
  sp_assert_error_has("keypoints.csv: not a text file (a NUL byte at offset 34)");
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* P7: every annotation scanned every image: 4.4 s at 20 k each. */
static void coco_matching_is_not_quadratic(void **state) {
  (void)state;
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/person_keypoints.json", dir);
  const int n = sp_test_sanitized() ? 20000 : 60000;
  FILE *f = fopen(path, "w");
  fprintf(f, "{\"images\":[");
  for (int i = 0; i < n; i++) fprintf(f, "%s{\"id\":%d,\"file_name\":\"%d.jpg\"}", i ? "," : "", (i * 7919) % n, i);
  fprintf(f, "],\"annotations\":[");
  for (int i = 0; i < n; i++) fprintf(f, "%s{\"image_id\":%d,\"keypoints\":[1,2,2,3,4,2]}", i ? "," : "", i);
  fprintf(f, "]}");
  fclose(f);
  sp_dataset ds;
  sp_dataset_init(&ds);
  double t0 = sp_now();
  assert_int_equal(sp_read_coco_keypoints(path, dir, &ds), 0);
  double s = sp_now() - t0;
  assert_int_equal(ds.n, n);
  /* Annotation i names image id i, which is the file of the entry j with
   * j * 7919 % n == i. */
  for (int i = 0; i < n; i += 997) {
    int j = 0;
    while ((j * 7919) % n != i) j++;
    char want[32];
    snprintf(want, sizeof want, "/%d.jpg", j);
    assert_non_null(strstr(ds.s[i].image, want));
  }
  /* Quadratic matching took minutes at 60 k; sorted, it is parsing-bound. */
  assert_true(s < (sp_test_sanitized() ? 60 : 10));
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* Identities (one per CSV row) and split lists were found by linear search:
 * 100 000 rows of distinct people against a list of all of them took
 * minutes. */
static void identities_and_split_lists_scale(void **state) {
  (void)state;
  char dir[512], csv[600], list[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(csv, sizeof csv, "%s/keypoints.csv", dir);
  snprintf(list, sizeof list, "%s/val.txt", dir);
  const int n = sp_test_sanitized() ? 30000 : 100000;
  FILE *f = fopen(csv, "w"), *l = fopen(list, "w");
  fprintf(f, "name,x0,y0\n");
  for (int i = 0; i < n; i++) {
    fprintf(f, "person%d_0.jpg,%d,%d\n", i, i % 50, i % 70);
    if (i % 2) fprintf(l, "images/person%d_0.jpg\n", i);
  }
  fclose(f);
  fclose(l);
  sp_dataset ds, val;
  sp_dataset_init(&ds);
  double t0 = sp_now();
  assert_int_equal(sp_read_keypoints_csv(csv, dir, &ds), 0);
  assert_int_equal(ds.n, n);
  assert_int_equal(ds.n_identities, n);
  assert_int_equal(sp_dataset_identity(&ds, "person77"), ds.s[77].identity);
  assert_int_equal(sp_dataset_split_list(&ds, list, &val), 0);
  assert_int_equal(val.n, n / 2);
  assert_true(strstr(val.s[0].image, "person1_0.jpg") != NULL);
  double s = sp_now() - t0;
  if (s > (sp_test_sanitized() ? 60 : 10)) fail_msg("%d rows took %.1f s", n, s);
  sp_dataset_free(&val);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

/* C2: the region decoder (cache builds, predict) refuses a header claiming
 * 40000 x 40000, as the whole-image decoder does, before allocating. */
static void region_decoder_refuses_huge_headers(void **state) {
  (void)state;
  uint8_t *rgb = tu_face_image(16, 16, 8, 8, 2);
  unsigned long len = 0;
  uint8_t *jpg = NULL;
  tjhandle tj = tjInitCompress();
  assert_int_equal(tjCompress2(tj, rgb, 16, 0, 16, TJPF_RGB, &jpg, &len, TJSAMP_420, 90, 0), 0);
  tjDestroy(tj);
  /* The SOF0 frame header: FF C0, length, precision, height, width. */
  size_t sof = 0;
  for (size_t i = 0; i + 9 < len && !sof; i++)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) sof = i;
  assert_true(sof > 0);
  /* 40000 x 40000: inside libjpeg's 65500, far above SP_MAX_IMAGE_PIXELS. */
  jpg[sof + 5] = jpg[sof + 7] = 0x9C;
  jpg[sof + 6] = jpg[sof + 8] = 0x40;
  sp_jpeg_dec *d = sp_jpeg_dec_new();
  int w, h;
  assert_int_equal(sp_jpeg_dec_header(d, jpg, len, "huge.jpg", &w, &h), -1);
  sp_assert_error_has("huge.jpg: a 40000x40000 JPEG");
  /* Cut before the frame header: no image at all. */
  static const uint8_t cut[4] = {0xFF, 0xD8, 0xFF, 0xD9};
  assert_int_equal(sp_jpeg_dec_header(d, cut, 4, "cut.jpg", &w, &h), -1);
  sp_assert_error_has("cut.jpg");
  sp_jpeg_dec_free(d);
  tjFree(jpg);
  free(rgb);
}

/* A dataset of n fake samples (no images: caches here are written by hand). */
static void fake_dataset(sp_dataset *ds, int n, int k) {
  sp_dataset_init(ds);
  for (int i = 0; i < n; i++) {
    sp_kp_sample s = {0};
    char name[32];
    snprintf(name, sizeof name, "/nonexistent/%d.jpg", i);
    s.image = sp_xstrdup(name);
    s.k = k;
    s.pts = sp_xcalloc(2 * (size_t)k, sizeof(float));
    s.identity = -1;
    assert_int_equal(sp_dataset_add(ds, &s, "test"), 0);
  }
}

/* P6: NaN points in a cache ended as "learning rate too high?", 1e30 points
 * trained to a loss of 3e28 with exit 0. A damaged cache is rebuilt. */
static void damaged_cache_is_not_used(void **state) {
  (void)state;
  char dir[512], path[600];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/cache_train.bin", dir);
  sp_dataset ds;
  fake_dataset(&ds, 2, 3);
  sp_crop_config cfg = sp_crop_config_default();
  cfg.size = 16, cfg.channels = 1;
  static const float bad[3] = {NAN, 1e30f, -INFINITY};
  for (int b = 0; b < 3; b++) {
    sp_cache *c = tu_cache_alloc(2, 16, 3);
    c->channels = 1;
    for (int i = 0; i < 2 * 3 * 2; i++) c->points[i] = 1;
    for (int i = 0; i < 2; i++) {
      c->source[i] = i;
      c->crop[4 * i + 2] = c->crop[4 * i + 3] = 10;
    }
    c->points[5] = bad[b];
    assert_int_equal(sp_cache_write(c, path, &ds, &cfg), 0);
    sp_cache *m = NULL;
    assert_int_equal(sp_cache_try_map(path, &ds, &cfg, &m), 1);
    assert_null(m);
    c->points[5] = 3; /* the same file with a sane point maps */
    assert_int_equal(sp_cache_write(c, path, &ds, &cfg), 0);
    assert_int_equal(sp_cache_try_map(path, &ds, &cfg, &m), 0);
    assert_non_null(m);
    sp_cache_free(m);
    sp_cache_free(c);
  }
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

static int count_entries(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
  if (d) closedir(d);
  return n;
}

/* Leftovers: a kill during the cache write left cache_*.bin.tmpPID forever. */
static void killed_cache_write_is_cleaned_up(void **state) {
  (void)state;
  char dir[512], path[600], stale[700], live[700];
  assert_non_null(sp_test_tmpdir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/cache_train.bin", dir);
  /* A writer that is gone: a child that exited. */
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  snprintf(stale, sizeof stale, "%s.tmp%ld", path, (long)pid);
  tu_write_text(stale, "half a cache");
  /* A writer that still runs (this process) keeps its temporary. */
  snprintf(live, sizeof live, "%s.tmp%ld", path, (long)getpid());
  tu_write_text(live, "being written");
  sp_dataset ds;
  fake_dataset(&ds, 1, 2);
  sp_crop_config cfg = sp_crop_config_default();
  cfg.size = 16;
  cfg.threads = 1;
  int rebuilt = 0;
  sp_cache *c = sp_cache_open(path, &ds, &cfg, &rebuilt);
  assert_int_equal(access(stale, F_OK), -1);
  assert_int_equal(access(live, F_OK), 0);
  assert_int_equal(count_entries(dir, ".tmp"), 1);
  sp_cache_free(c);
  sp_dataset_free(&ds);
  sp_test_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(folder_k_is_the_majority),
      cmocka_unit_test(huge_point_count_is_named),
      cmocka_unit_test(cut_dlib_xml_names_the_box),
      cmocka_unit_test(csv_with_nul_is_refused),
      cmocka_unit_test(coco_matching_is_not_quadratic),
      cmocka_unit_test(identities_and_split_lists_scale),
      cmocka_unit_test(region_decoder_refuses_huge_headers),
      cmocka_unit_test(damaged_cache_is_not_used),
      cmocka_unit_test(killed_cache_write_is_cleaned_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
