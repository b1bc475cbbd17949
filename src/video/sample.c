/* Clip samplers: which frame indices a training or test sample reads.
 * Pure functions of (n_frames, settings, seed, epoch, index), so a loader
 * worker can compute them anywhere and runs repeat exactly. */
#include <math.h>

#include "spry/rng.h"
#include "spry/video.h"

int sp_sample_tsn(int64_t n_frames, int segments, int train, uint64_t seed, int64_t epoch, int64_t index,
                  int64_t *out) {
  if (n_frames <= 0) return sp_error_set("TSN sampling: a clip with %lld frames", (long long)n_frames);
  if (segments <= 0) return sp_error_set("TSN sampling: %d segments", segments);
  sp_rng r = sp_rng_make(sp_rng_key(seed, (uint64_t)epoch, (uint64_t)index));
  for (int k = 0; k < segments; k++) {
    /* Segment k is [floor(k n / N), floor((k+1) n / N)); with fewer frames
     * than segments it is empty, and then holds its start frame alone. */
    int64_t lo = (int64_t)((double)k * n_frames / segments);
    int64_t hi = (int64_t)((double)(k + 1) * n_frames / segments);
    if (lo > n_frames - 1) lo = n_frames - 1;
    if (hi <= lo) hi = lo + 1;
    int64_t len = hi - lo;
    if (train)
      out[k] = lo + (int64_t)sp_rng_below(&r, (uint32_t)(len > UINT32_MAX ? UINT32_MAX : len));
    else
      out[k] = lo + len / 2;
  }
  return 0;
}

int sp_sample_dense(int64_t n_frames, int clip_len, int stride, int train, int clip, int n_clips, uint64_t seed,
                    int64_t epoch, int64_t index, int64_t *out) {
  if (n_frames <= 0) return sp_error_set("dense sampling: a clip with %lld frames", (long long)n_frames);
  if (clip_len <= 0 || stride <= 0) return sp_error_set("dense sampling: %d frames at stride %d", clip_len, stride);
  if (!train && (n_clips <= 0 || clip < 0 || clip >= n_clips))
    return sp_error_set("dense sampling: clip %d of %d", clip, n_clips);
  int64_t span = (int64_t)(clip_len - 1) * stride + 1;
  int64_t room = n_frames > span ? n_frames - span : 0; /* last valid start */
  int64_t start;
  if (train) {
    sp_rng r = sp_rng_make(sp_rng_key(seed, (uint64_t)epoch, (uint64_t)index));
    start = (int64_t)sp_rng_below(&r, (uint32_t)(room + 1 > UINT32_MAX ? UINT32_MAX : room + 1));
  } else if (n_clips == 1) {
    start = room / 2;
  } else {
    /* Evenly spaced starts from the first to the last valid one (SlowFast's
     * multi-view testing). */
    start = (int64_t)llround((double)room * clip / (n_clips - 1));
  }
  for (int t = 0; t < clip_len; t++) {
    int64_t f = start + (int64_t)t * stride;
    out[t] = f < n_frames ? f : n_frames - 1;
  }
  return 0;
}
