/* dlib / imglab XML (data/ann_dlib_xml.c). */
#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("labels_with_face_landmarks.xml", data, size);
  sp_dataset ds;
  sp_dataset_init(&ds);
  if (sp_read_dlib_xml(path, &ds) == 0)
    for (int i = 0; i < ds.n; i++) FZ_ASSERT(ds.s[i].k == ds.k && ds.s[i].has_box);
  sp_dataset_free(&ds);
  return 0;
}
