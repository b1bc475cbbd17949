/* Square crops of whole images, with the pixel-centre convention of the cache
 * (u' = (u - x0 + 0.5) * size / side - 0.5): prediction on new images uses
 * exactly the geometry the model was trained on. */
#include "data/data_internal.h"

void sp_crop_square_for_box(const float box[4], float margin, double *x0, double *y0, double *side) {
  double cx = box[0] + box[2] * 0.5, cy = box[1] + box[3] * 0.5;
  *side = (box[2] > box[3] ? box[2] : box[3]) * (1.0 + 2.0 * margin);
  if (*side < 8) *side = 8;
  *x0 = cx - *side * 0.5;
  *y0 = cy - *side * 0.5;
}

void sp_image_crop_square(const sp_image *src, double x0, double y0, double side, int size, int planar, uint8_t *out) {
  double r = side / size;
  sp_affine to_src = {{r, 0, 0.5 * r - 0.5 + x0, 0, r, 0.5 * r - 0.5 + y0}};
  sp_warp_affine_u8(src->px, src->w, src->h, src->c, out, size, size, planar, &to_src, 0);
}

void sp_crop_to_source(double x0, double y0, double side, int size, float *x, float *y) {
  double r = side / size;
  *x = (float)((*x + 0.5) * r - 0.5 + x0);
  *y = (float)((*y + 0.5) * r - 0.5 + y0);
}
