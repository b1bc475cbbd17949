/* The video clip loader: batch layout and labels, the same batches whatever
 * the worker count, test sampling fixed and training sampling varying by
 * epoch, per-batch shapes (Multigrid), shards that split an epoch, evaluation
 * shards that cover it, dense multi-clip entries, and frame folders giving the frames the video gives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spry/video_loader.h"
#include "testkit.h"

static char dir[512], list_path[600];
static sp_video_list list;

static int setup(void **state) {
  (void)state;
  sp_test_tmpdir(dir, sizeof dir);
  char out[600];
  snprintf(out, sizeof out, "%s/clips", dir);
  if (sp_synth_actions(out, 8, 12, 48, 5) != 0) return -1;
  snprintf(list_path, sizeof list_path, "%s/list.txt", out);
  return sp_video_list_read(list_path, &list);
}

static int teardown(void **state) {
  (void)state;
  sp_video_list_free(&list);
  sp_test_rmtree(dir);
  return 0;
}

static sp_video_loader_config cfg_of(int workers, int train) {
  sp_video_loader_config c = sp_video_loader_config_default(3, 4, 32);
  c.workers = workers;
  c.train = train;
  c.seed = 9;
  c.short_side = 40;
  c.shuffle = train;
  c.drop_last = train;
  return c;
}

/* All pixels and labels of an epoch, concatenated. */
static uint8_t *epoch_bytes(const sp_video_list *l, const sp_video_loader_config *c, int64_t epoch, size_t *len) {
  sp_video_loader *ld = sp_video_loader_create(l, c);
  assert_non_null(ld);
  assert_int_equal(sp_video_loader_start_epoch(ld, epoch), 0);
  uint8_t *all = NULL;
  size_t n = 0;
  const sp_video_batch *b;
  while ((b = sp_video_loader_next(ld))) {
    assert_int_equal(b->failed, 0);
    size_t px = (size_t)b->n * b->t * 3 * b->h * b->w;
    all = realloc(all, n + px + sizeof(int32_t) * b->n);
    memcpy(all + n, b->pixels, px);
    memcpy(all + n + px, b->label, sizeof(int32_t) * b->n);
    n += px + sizeof(int32_t) * b->n;
  }
  sp_video_loader_destroy(ld);
  *len = n;
  return all;
}

static void layout_and_labels(void **state) {
  (void)state;
  sp_video_loader_config c = cfg_of(2, 1);
  sp_video_loader *ld = sp_video_loader_create(&list, &c);
  assert_int_equal(sp_video_loader_batches_per_epoch(ld), 2); /* 8 clips, batch 3, drop last */
  sp_video_loader_start_epoch(ld, 0);
  const sp_video_batch *b;
  int batches = 0;
  while ((b = sp_video_loader_next(ld))) {
    assert_int_equal(b->n, 3), assert_int_equal(b->t, 4), assert_int_equal(b->h, 32), assert_int_equal(b->w, 32);
    for (int i = 0; i < b->n; i++) assert_int_equal(b->label[i], list.label[b->video[i]]);
    batches++;
  }
  assert_int_equal(batches, 2);
  sp_video_loader_destroy(ld);
}

static void worker_count_does_not_matter(void **state) {
  (void)state;
  size_t a_len, b_len;
  sp_video_loader_config one = cfg_of(1, 1), three = cfg_of(3, 1);
  uint8_t *a = epoch_bytes(&list, &one, 2, &a_len), *b = epoch_bytes(&list, &three, 2, &b_len);
  assert_int_equal(a_len, b_len);
  assert_memory_equal(a, b, a_len);
  /* Training randomness changes with the epoch... */
  size_t c_len;
  uint8_t *c = epoch_bytes(&list, &one, 3, &c_len);
  assert_true(c_len == a_len && memcmp(a, c, a_len) != 0);
  free(a), free(b), free(c);
  /* ...testing uses centre frames and crops: every epoch is the same. */
  sp_video_loader_config t = cfg_of(2, 0);
  uint8_t *d = epoch_bytes(&list, &t, 0, &a_len), *e = epoch_bytes(&list, &t, 5, &b_len);
  assert_int_equal(a_len, b_len);
  assert_memory_equal(d, e, a_len);
  free(d), free(e);
}

static void per_batch_shapes(void **state) {
  (void)state;
  sp_video_loader_config c = cfg_of(2, 1);
  sp_video_loader *ld = sp_video_loader_create(&list, &c);
  sp_video_shape s[3] = {{4, 2, 32}, {2, 4, 64}, {1, 8, 32}};
  assert_int_equal(sp_video_loader_start_epoch_shapes(ld, 0, s, 3), 0);
  const sp_video_batch *b;
  int j = 0;
  while ((b = sp_video_loader_next(ld))) {
    assert_int_equal(b->n, s[j].batch), assert_int_equal(b->t, s[j].frames), assert_int_equal(b->h, s[j].size);
    j++;
  }
  assert_int_equal(j, 3);
  /* More clips than the epoch has is refused. */
  sp_video_shape big = {9, 2, 32};
  assert_int_equal(sp_video_loader_start_epoch_shapes(ld, 1, &big, 1), -1);
  sp_video_loader_destroy(ld);
}

static void shards_split_the_epoch(void **state) {
  (void)state;
  int seen[8] = {0};
  for (int rank = 0; rank < 2; rank++) {
    sp_video_loader_config c = cfg_of(1, 1);
    c.rank = rank, c.world = 2, c.batch = 4;
    sp_video_loader *ld = sp_video_loader_create(&list, &c);
    assert_int_equal(sp_video_loader_entries(ld), 4);
    sp_video_loader_start_epoch(ld, 1);
    const sp_video_batch *b;
    while ((b = sp_video_loader_next(ld)))
      for (int i = 0; i < b->n; i++) seen[b->video[i]]++;
    sp_video_loader_destroy(ld);
  }
  for (int i = 0; i < 8; i++) assert_int_equal(seen[i], 1);
  /* Batch j of rank r is slice r of one process's batch j at twice the
   * batch: W ranks train on the same global batches as one process. */
  int one[8], two[8];
  sp_video_loader_config c1 = cfg_of(1, 1);
  c1.batch = 4;
  sp_video_loader *ld = sp_video_loader_create(&list, &c1);
  sp_video_loader_start_epoch(ld, 1);
  const sp_video_batch *b;
  for (int k = 0; (b = sp_video_loader_next(ld));)
    for (int i = 0; i < b->n; i++) one[k++] = b->video[i];
  sp_video_loader_destroy(ld);
  for (int rank = 0; rank < 2; rank++) {
    sp_video_loader_config c = cfg_of(1, 1);
    c.rank = rank, c.world = 2, c.batch = 2;
    ld = sp_video_loader_create(&list, &c);
    sp_video_loader_start_epoch(ld, 1);
    for (int j = 0; (b = sp_video_loader_next(ld)); j++)
      for (int i = 0; i < b->n; i++) two[j * 4 + rank * 2 + i] = b->video[i];
    sp_video_loader_destroy(ld);
  }
  assert_memory_equal(one, two, sizeof one);
}

/* Evaluation shards (eval_shard): 3 ranks over 16 entries (8 videos x 2
 * test clips) take the contiguous parts 5, 5 and 6, and together give the
 * one-process pass clip for clip, pixels included. */
static void eval_shards_cover_every_entry_once(void **state) {
  (void)state;
  sp_video_loader_config c = cfg_of(1, 0);
  c.sampler = SP_SAMPLER_DENSE, c.frames = 3, c.stride = 2, c.test_clips = 2, c.batch = 1;
  size_t one_len;
  uint8_t *one = epoch_bytes(&list, &c, 0, &one_len);
  uint8_t *parts = malloc(one_len);
  size_t at = 0;
  const int sizes[3] = {5, 5, 6};
  for (int rank = 0; rank < 3; rank++) {
    sp_video_loader_config s = c;
    s.rank = rank, s.world = 3, s.eval_shard = 1;
    sp_video_loader *ld = sp_video_loader_create(&list, &s);
    assert_non_null(ld);
    assert_int_equal(sp_video_loader_entries(ld), sizes[rank]);
    assert_int_equal(sp_video_loader_batches_per_epoch(ld), sizes[rank]);
    sp_video_loader_destroy(ld);
    size_t len;
    uint8_t *part = epoch_bytes(&list, &s, 0, &len);
    assert_true(at + len <= one_len);
    memcpy(parts + at, part, len);
    at += len;
    free(part);
  }
  assert_int_equal(at, one_len);
  assert_memory_equal(parts, one, one_len);
  free(one), free(parts);
  /* More ranks than entries: the extra ranks have nothing to do. */
  sp_video_loader_config s = c;
  s.rank = 0, s.world = 17, s.eval_shard = 1; /* [0, 16 / 17) */
  sp_video_loader *ld = sp_video_loader_create(&list, &s);
  assert_int_equal(sp_video_loader_entries(ld), 0);
  assert_int_equal(sp_video_loader_start_epoch(ld, 0), 0);
  assert_null(sp_video_loader_next(ld));
  sp_video_loader_destroy(ld);
}

static void dense_multi_clip_entries(void **state) {
  (void)state;
  sp_video_loader_config c = cfg_of(2, 0);
  c.sampler = SP_SAMPLER_DENSE, c.frames = 3, c.stride = 2, c.test_clips = 2, c.batch = 4;
  sp_video_loader *ld = sp_video_loader_create(&list, &c);
  assert_int_equal(sp_video_loader_entries(ld), 16);
  sp_video_loader_start_epoch(ld, 0);
  const sp_video_batch *b;
  int n = 0;
  while ((b = sp_video_loader_next(ld)))
    for (int i = 0; i < b->n; i++, n++) {
      /* A video's clips are adjacent, in order. */
      assert_int_equal(b->video[i], n / 2);
      assert_int_equal(b->clip[i], n % 2);
    }
  assert_int_equal(n, 16);
  sp_video_loader_destroy(ld);
}

static void frame_folders_match_video(void **state) {
  (void)state;
  char frames_dir[600], frames_list[700];
  snprintf(frames_dir, sizeof frames_dir, "%s/frames", dir);
  sp_prepare_config pc = {.short_side = 0, .quality = 95, .workers = 2};
  assert_int_equal(sp_prepare_frames(list_path, frames_dir, &pc), 8);
  snprintf(frames_list, sizeof frames_list, "%s/frames.list", frames_dir);
  sp_video_list fl;
  assert_int_equal(sp_video_list_read(frames_list, &fl), 0);
  assert_int_equal(fl.n, 8);
  sp_video_loader_config c = cfg_of(2, 1); /* training: random frames and crops must agree too */
  c.shuffle = 0;
  size_t a_len, b_len;
  uint8_t *a = epoch_bytes(&list, &c, 1, &a_len), *b = epoch_bytes(&fl, &c, 1, &b_len);
  assert_int_equal(a_len, b_len);
  /* Other frames of the same clips (the next epoch's draw) as the yardstick
   * of what a wrong frame looks like. */
  size_t o_len;
  uint8_t *o = epoch_bytes(&list, &c, 2, &o_len);
  double diff = 0, other = 0;
  for (size_t i = 0; i < a_len; i++) diff += abs((int)a[i] - (int)b[i]), other += abs((int)a[i] - (int)o[i]);
  diff /= (double)a_len, other /= (double)a_len;
  /* JPEG (quality 95, 4:2:0 chroma) costs a few levels per pixel on these
   * sharp-edged 48 px shapes; a wrong frame or crop costs far more. */
  assert_true(diff < 6.0);
  assert_true(diff < other / 3);
  free(o);
  free(a), free(b);
  sp_video_list_free(&fl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(layout_and_labels),         cmocka_unit_test(worker_count_does_not_matter),
      cmocka_unit_test(per_batch_shapes),          cmocka_unit_test(shards_split_the_epoch),
      cmocka_unit_test(dense_multi_clip_entries),  cmocka_unit_test(frame_folders_match_video),
      cmocka_unit_test(eval_shards_cover_every_entry_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
