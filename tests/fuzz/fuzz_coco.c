/* COCO keypoints JSON (data/ann_coco.c over data/json_mini.c). */
#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("person_keypoints.json", data, size);
  sp_dataset ds;
  sp_dataset_init(&ds);
  if (sp_read_coco_keypoints(path, "images", &ds) == 0)
    for (int i = 0; i < ds.n; i++) FZ_ASSERT(ds.s[i].k == ds.k && ds.s[i].image);
  sp_dataset_free(&ds);
  return 0;
}
