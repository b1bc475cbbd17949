/* A dataset folder as sp_dataset_open_dir finds it: the input's pieces
 * (split at "@@@@") become up to 6 files whose kind the first byte picks
 * (IMM .dat / .asf, .pts, keypoints.csv, COCO .json, dlib .xml), so the
 * format detection, the majority K of a folder of single-file annotations
 * and the splits all see hostile files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static const char *const ext[6] = {".dat", ".asf", ".pts", ".csv", ".json", ".xml"};
  int kind = data[0] % 6;
  const uint8_t *piece[6];
  size_t len[6];
  int n = fz_split(data + 1, size - 1, piece, len, 6);
  char dir[512], name[64];
  snprintf(dir, sizeof dir, "%s/set", fz_dir());
  fz_clear_dir(dir);
  mkdir(dir, 0700);
  for (int i = 0; i < n; i++) {
    if (kind == 3) snprintf(name, sizeof name, "set/%s", i ? "val.txt" : "keypoints.csv");
    else snprintf(name, sizeof name, "set/%02d-1m%s", i + 1, ext[kind]);
    fz_write(name, piece[i], len[i]);
  }
  sp_dataset ds, part;
  if (sp_dataset_open_dir(dir, &ds) == 0) {
    FZ_ASSERT(ds.n > 0 && ds.k > 0 && ds.k <= SP_MAX_KEYPOINTS);
    for (int i = 0; i < ds.n; i++) FZ_ASSERT(ds.s[i].k == ds.k);
    if (sp_dataset_split_identity(&ds, SP_SPLIT_VAL, 0.25, &part) == 0) sp_dataset_free(&part);
    snprintf(name, sizeof name, "%s/val.txt", dir);
    if (sp_dataset_split_list(&ds, name, &part) == 0) sp_dataset_free(&part);
  }
  sp_dataset_free(&ds);
  return 0;
}
