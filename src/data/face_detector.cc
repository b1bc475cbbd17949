// The face detector behind sp_face_detect (include/spry/data.h): dlib's HOG
// frontal face detector, the one landmark users pair with the 68-point scheme
// and the one that made youtube_faces_68/detector_boxes.csv. This is the only
// C++ file of spry; everything it exposes is the C API in data.h.
//
// Procedure: run the detector on the image, then on the image upsampled x2
// (dlib's pyramid_up), keeping the faces found there that the first pass did
// not find (IoU below SP_DETECT_SAME_IOU with each); while nothing is found,
// upsample x2 again (at most max_upsample times in all). Boxes are divided
// back to source pixels; dlib's rectangles are inclusive, so a box's width is
// right - left + 1.
//
// Why both levels: the detector's window is 80 px, so faces under ~80 px are
// found only upsampled (dlib's own examples always upsample once, and the
// boxes of dlib_faces_68's XML files are those). A face found at the first
// level keeps that level's box (unless that box is the window's minimum size
// and the upsampled pass found the face much smaller: see add_face), so for
// a face the first pass finds this is the procedure that made
// youtube_faces_68/detector_boxes.csv ("while it finds nothing, upsample").
#include <dlib/image_processing/frontal_face_detector.h>
#include <dlib/image_transforms.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <new>
#include <vector>

extern "C" {
#include "spry/common.h"
#include "spry/data.h"
}

struct sp_face_detector {
  dlib::frontal_face_detector det;
};

extern "C" sp_face_detector *sp_face_detector_new(void) {
  try {
    sp_face_detector *d = new sp_face_detector;
    d->det = dlib::get_frontal_face_detector();
    return d;
  } catch (const std::exception &e) {
    sp_error_set("face detector: %s", e.what());
    return nullptr;
  }
}

extern "C" void sp_face_detector_free(sp_face_detector *d) { delete d; }

// dlib's fHOG features use the strongest gradient over the colour channels,
// so the detector sees RGB as it is (a gray image gives other boxes).
// Upsampling stops where the image would pass this many pixels (a 12 MP
// photo's faces are large enough without it), and larger inputs are refused.
static const long kMaxUpsampledPixels = 8L * 1024 * 1024;
static const long kMaxPixels = 64L * 1024 * 1024;

// A face under the window's size is still found at the first level, in a box
// the window's size (~73 px): the upsampled pass sees it in a box of its
// true size. Such a first-level box yields to a much smaller second-level one.
static const float kWindowSide = 80.f, kMuchSmaller = 0.75f;

// Adds f unless an earlier level found the face; returns 1 when kept.
static int add_face(std::vector<sp_face> &faces, const sp_face &f, int level) {
  for (sp_face &g : faces) {
    if (sp_box_iou(g.box, f.box) < SP_DETECT_SAME_IOU) continue;
    if (level == 1 && g.box[2] < kWindowSide && f.box[2] < kMuchSmaller * g.box[2]) g = f;
    return 0;
  }
  faces.push_back(f);
  return 1;
}

template <typename Pixel>
static int run(sp_face_detector *d, dlib::array2d<Pixel> &img, int max_upsample, sp_face **faces) {
  std::vector<sp_face> kept;
  std::vector<dlib::rect_detection> found;
  for (int up = 0; up <= max_upsample; up++) {
    if (up > 1 && !kept.empty()) break; /* the second upsampling only while nothing is found */
    if (up > 0) {
      if ((long)img.nr() * img.nc() * 4 > kMaxUpsampledPixels) break;
      dlib::pyramid_up(img);
    }
    found.clear();
    d->det(img, found, 0.0);
    const double s = 1.0 / (1 << up);
    for (const dlib::rect_detection &x : found) {
      sp_face f;
      f.box[0] = static_cast<float>(x.rect.left() * s);
      f.box[1] = static_cast<float>(x.rect.top() * s);
      f.box[2] = static_cast<float>(x.rect.width() * s);
      f.box[3] = static_cast<float>(x.rect.height() * s);
      f.score = static_cast<float>(x.detection_confidence);
      add_face(kept, f, up);
    }
  }
  std::stable_sort(kept.begin(), kept.end(), [](const sp_face &a, const sp_face &b) { return a.score > b.score; });
  *faces = nullptr;
  if (kept.empty()) return 0;
  *faces = static_cast<sp_face *>(sp_xmalloc(sizeof(sp_face) * kept.size()));
  std::copy(kept.begin(), kept.end(), *faces);
  return static_cast<int>(kept.size());
}

extern "C" int sp_face_detect(sp_face_detector *d, const sp_image *im, int max_upsample, sp_face **faces) {
  *faces = nullptr;
  if (!d || !im || !im->px || im->w <= 0 || im->h <= 0 || (im->c != 1 && im->c != 3))
    return sp_error_set("face detector: bad image");
  if (max_upsample < 0) max_upsample = 0;
  if ((long)im->w * im->h > kMaxPixels)
    return sp_error_set("face detector: a %dx%d image is larger than %ld pixels", im->w, im->h, kMaxPixels);
  try {
    if (im->c == 3) {
      dlib::array2d<dlib::rgb_pixel> img(im->h, im->w);
      for (int y = 0; y < im->h; y++) {
        const uint8_t *row = im->px + (size_t)y * im->w * 3;
        for (int x = 0; x < im->w; x++) img[y][x] = dlib::rgb_pixel(row[3 * x], row[3 * x + 1], row[3 * x + 2]);
      }
      return run(d, img, max_upsample, faces);
    }
    dlib::array2d<unsigned char> img(im->h, im->w);
    for (int y = 0; y < im->h; y++)
      for (int x = 0; x < im->w; x++) img[y][x] = im->px[(size_t)y * im->w + x];
    return run(d, img, max_upsample, faces);
  } catch (const std::bad_alloc &) {
    return sp_error_set("face detector: out of memory on a %dx%d image", im->w, im->h);
  } catch (const std::exception &e) { return sp_error_set("face detector: %s", e.what()); }
}
