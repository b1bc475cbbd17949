/* Frame folders (video/frames.c): the input's pieces (split at "@@@@") are
 * the folder's n_frames file (when the first byte's bit 0 is set) and its
 * frames img_00001.jpg...; the clip is opened, described and fetched at a
 * geometry the first byte picks, as the clip loader fetches. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "spry/video.h"

static void fetch(sp_video *v, uint8_t flags) {
  sp_video_info info;
  if (sp_video_get_info(v, &info) != 0) return;
  FZ_ASSERT(info.frames > 0 && info.width > 0 && info.height > 0);
  sp_video_geom g = (flags & 2) ? sp_video_geom_square(16, (flags & 4) ? SP_VIDEO_CHW : SP_VIDEO_HWC)
                                : sp_video_geom_native();
  int h, w;
  if (sp_video_out_size(v, &g, &h, &w) != 0) return;
  int64_t idx[3] = {0, info.frames - 1, info.frames / 2};
  uint8_t *out = malloc((size_t)h * w * 3 * 3);
  if (!out) return;
  sp_video_get_frames(v, idx, 3, &g, out);
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *piece[5];
  size_t len[5];
  int n = fz_split(data + 1, size - 1, piece, len, 5);
  char dir[512], name[64];
  snprintf(dir, sizeof dir, "%s/clip", fz_dir());
  fz_clear_dir(dir);
  mkdir(dir, 0700);
  int first = 0;
  if (data[0] & 1) fz_write("clip/n_frames", piece[first], len[first]), first++;
  for (int i = first; i < n; i++) {
    snprintf(name, sizeof name, "clip/img_%05d.jpg", i - first + 1);
    fz_write(name, piece[i], len[i]);
  }
  sp_video *v = sp_video_open(dir);
  if (!v) return 0;
  fetch(v, data[0]);
  sp_video_close(v);
  return 0;
}
