/* Crop rectangles of source images, with the pixel-centre convention of the
 * cache (u' = (u - x0 + 0.5) * size / w - 0.5): prediction on new images uses
 * exactly the geometry the model was trained on. */
#include "data/data_internal.h"

sp_crop_rect sp_crop_rect_for_box(const float box[4], float margin) {
  double cx = box[0] + box[2] * 0.5, cy = box[1] + box[3] * 0.5;
  double side = (box[2] > box[3] ? box[2] : box[3]) * (1.0 + 2.0 * margin);
  if (side < 8) side = 8;
  sp_crop_rect r = {cx - side * 0.5, cy - side * 0.5, side, side};
  return r;
}

sp_crop_rect sp_crop_rect_whole(int w, int h) {
  sp_crop_rect r = {0, 0, w, h};
  return r;
}

/* crop pixel -> source pixel: u = (u' + 0.5) * w / size - 0.5 + x0. */
static sp_affine crop_to_source(sp_crop_rect r, int size) {
  double sx = r.w / size, sy = r.h / size;
  sp_affine a = {{sx, 0, 0.5 * sx - 0.5 + r.x0, 0, sy, 0.5 * sy - 0.5 + r.y0}};
  return a;
}

void sp_image_crop(const sp_image *src, sp_crop_rect r, int size, int planar, uint8_t *out) {
  sp_affine to_src = crop_to_source(r, size);
  sp_warp_affine_u8(src->px, src->w, src->h, src->c, out, size, size, planar, &to_src, 0);
}

void sp_crop_to_source(sp_crop_rect r, int size, float *x, float *y) {
  *x = (float)((*x + 0.5) * r.w / size - 0.5 + r.x0);
  *y = (float)((*y + 0.5) * r.h / size - 0.5 + r.y0);
}

void sp_source_to_crop(sp_crop_rect r, int size, float *x, float *y) {
  *x = (float)((*x - r.x0 + 0.5) * size / r.w - 0.5);
  *y = (float)((*y - r.y0 + 0.5) * size / r.h - 0.5);
}
