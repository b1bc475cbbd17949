/* Boxes files (data/ann_boxes.c): the table, then lookups by image path. */
#include <math.h>
#include <stdio.h>

#include "fuzz_common.h"
#include "spry/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fz_write("detector_boxes.csv", data, size);
  sp_box_table *t;
  if (sp_box_table_read(path, &t) != 0) return 0;
  static const char *const images[] = {"a.jpg", "data/images/a.jpg", "/abs/b.png", "", "x/./y.jpg"};
  int rows[4];
  for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
    int n = sp_box_table_find(t, images[i], rows, 4);
    for (int j = 0; j < n && j < 4; j++) {
      const float *b = sp_box_table_box(t, rows[j]);
      FZ_ASSERT(isfinite(b[0]) && isfinite(b[1]) && b[2] > 0 && b[3] > 0);
      char where[600];
      sp_box_table_where(t, rows[j], where, sizeof where);
    }
  }
  FZ_ASSERT(sp_box_table_rows(t) > 0);
  sp_box_table_free(t);
  return 0;
}
