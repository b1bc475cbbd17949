/* Video list files (video/list.c): `path label` and `dir n_frames label`
 * lines, the label checks, and, when the first byte is odd, the same bytes
 * as the labels csv of `spry prepare list`. */
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "spry/video.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *path = fz_write("train.list", data + 1, size - 1);
  char list[512], out[512], dir[512];
  snprintf(list, sizeof list, "%s", path);
  if (data[0] & 1) {
    snprintf(dir, sizeof dir, "%s/clips", fz_dir());
    mkdir(dir, 0700);
    snprintf(out, sizeof out, "%s/out.list", fz_dir());
    sp_video_list_build(dir, list, out);
    return 0;
  }
  sp_video_list l;
  if (sp_video_list_read(list, &l) != 0) return 0;
  for (int i = 0; i < l.n; i++) FZ_ASSERT(l.path[i] && l.label[i] >= 0 && l.label[i] < SP_VIDEO_MAX_CLASSES);
  sp_video_list_check_dense(&l, list, NULL, NULL);
  sp_video_list_keep_usable(&l, list, 0);
  sp_video_list_free(&l);
  return 0;
}
