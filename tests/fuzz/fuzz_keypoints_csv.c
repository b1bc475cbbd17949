/* keypoints.csv (youtube_faces_68 layout, data/ann_csv.c) and, after a
 * "@@@@" marker, a split list over what it read. */
#include <stdio.h>

#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *piece[2];
  size_t len[2];
  int n = fz_split(data, size, piece, len, 2);
  char list[512];
  snprintf(list, sizeof list, "%s", fz_write("val.txt", n > 1 ? piece[1] : NULL, n > 1 ? len[1] : 0));
  const char *path = fz_write("keypoints.csv", piece[0], len[0]);
  sp_dataset ds, val;
  sp_dataset_init(&ds);
  if (sp_read_keypoints_csv(path, NULL, &ds) == 0) {
    for (int i = 0; i < ds.n; i++) FZ_ASSERT(ds.s[i].k == ds.k && ds.s[i].identity >= 0);
    if (ds.n && sp_dataset_split_list(&ds, list, &val) == 0) sp_dataset_free(&val);
  }
  sp_dataset_free(&ds);
  return 0;
}
