/* Writes the generated part of the seed corpora (tests/fuzz/corpus/NAME/
 * seed-*): small valid files of every format, made with the libraries spry
 * reads them with, plus hand-written text seeds. Inputs a campaign found
 * (crash-*, the issue's reproductions repro-*) are kept by hand beside them.
 * Usage: fuzz_make_seeds tests/fuzz/corpus (the files are committed; rerun
 * only when a format changes). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "spry/morph.h"
#include "spry/safetensors.h"
#include "spry/train.h"
#include "train/trainer_internal.h"

static const char *root;

static void put(const char *harness, const char *name, const void *head, size_t head_len, const void *data,
                size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", root, harness);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/%s/seed-%s", root, harness, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(head, 1, head_len, f) != head_len || (len && fwrite(data, 1, len, f) != len) || fclose(f)) {
    fprintf(stderr, "make_seeds: cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
}

static void put_text(const char *harness, const char *name, const char *text) {
  put(harness, name, text, strlen(text), NULL, 0);
}

/* The first byte picks a harness's mode: one seed per mode. */
static void put_mode(const char *harness, const char *name, uint8_t mode, const void *data, size_t len) {
  put(harness, name, &mode, 1, data, len);
}

static void put_mode_text(const char *harness, const char *name, uint8_t mode, const char *text) {
  put_mode(harness, name, mode, text, strlen(text));
}

/* A smooth test picture (gradients, a disc): compresses like a photo. */
static uint8_t *picture(int w, int h, int c) {
  uint8_t *px = malloc((size_t)w * h * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        double d = hypot(x - w / 2.0, y - h / 2.0) < h / 3.0 ? 80 : 0;
        px[((size_t)y * w + x) * c + k] = (uint8_t)((x * 255 / w + y * 128 / h + d + 60 * k) / 2);
      }
  return px;
}

static uint8_t *jpeg(int w, int h, int c, int samp, int flags, unsigned long *len) {
  tjhandle tj = tjInitCompress();
  uint8_t *px = picture(w, h, c), *out = NULL;
  if (tjCompress2(tj, px, w, 0, h, c == 1 ? TJPF_GRAY : TJPF_RGB, &out, len, samp, 85, flags) != 0) {
    fprintf(stderr, "make_seeds: %s\n", tjGetErrorStr2(tj));
    exit(1);
  }
  free(px);
  tjDestroy(tj);
  return out;
}

static void *png(int w, int h, png_uint_32 format, size_t *len) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  im.width = (png_uint_32)w;
  im.height = (png_uint_32)h;
  im.format = format;
  int c = (int)PNG_IMAGE_PIXEL_CHANNELS(format), comp = (int)PNG_IMAGE_PIXEL_COMPONENT_SIZE(format);
  uint8_t *px = picture(w, h * comp, c);
  png_alloc_size_t n = 0;
  png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL);
  void *out = malloc(n);
  if (!png_image_write_to_memory(&im, out, &n, 0, px, 0, NULL)) {
    fprintf(stderr, "make_seeds: PNG: %s\n", im.message);
    exit(1);
  }
  free(px);
  *len = n;
  return out;
}

static void images(void) {
  static const struct { const char *name; int w, h, c, samp, flags; } jp[] = {
      {"gray-16x8.jpg", 16, 8, 1, TJSAMP_GRAY, 0},          {"rgb444-17x9.jpg", 17, 9, 3, TJSAMP_444, 0},
      {"rgb420-40x30.jpg", 40, 30, 3, TJSAMP_420, 0},      {"rgb422-33x20.jpg", 33, 20, 3, TJSAMP_422, 0},
      {"progressive-32x24.jpg", 32, 24, 3, TJSAMP_420, TJFLAG_PROGRESSIVE},
      {"gray-progressive-9x31.jpg", 9, 31, 1, TJSAMP_GRAY, TJFLAG_PROGRESSIVE},
  };
  for (size_t i = 0; i < sizeof jp / sizeof jp[0]; i++) {
    unsigned long len;
    uint8_t *j = jpeg(jp[i].w, jp[i].h, jp[i].c, jp[i].samp, jp[i].flags, &len);
    put_mode("image", jp[i].name, (uint8_t)(i * 3), j, len);
    uint8_t params[8] = {(uint8_t)i, 3, 2, 1, 9, 7, (uint8_t)(i * 5), (uint8_t)i};
    put("jpeg_region", jp[i].name, params, 8, j, len);
    if (i == 2) {
      put_mode("image", "exact-rgb420.jpg", 9, j, len);
      put_mode("image", "cut-half.jpg", 1, j, len / 2);
      put("jpeg_region", "cut-half.jpg", params, 8, j, len / 2);
    }
    tjFree(j);
  }
  static const struct { const char *name; png_uint_32 format; } pn[] = {
      {"gray.png", PNG_FORMAT_GRAY},      {"rgb.png", PNG_FORMAT_RGB},        {"rgba.png", PNG_FORMAT_RGBA},
      {"gray-alpha.png", PNG_FORMAT_GA},  {"rgb16.png", PNG_FORMAT_LINEAR_RGB},
  };
  for (size_t i = 0; i < sizeof pn / sizeof pn[0]; i++) {
    size_t len;
    void *p = png(12, 7, pn[i].format, &len);
    put_mode("image", pn[i].name, (uint8_t)i, p, len);
    uint8_t params[8] = {(uint8_t)i, 1, 0, 0, 5, 5, 3, 0};
    put("jpeg_region", pn[i].name, params, 8, p, len);
    free(p);
  }
}

static void frames(void) {
  unsigned long a, b;
  uint8_t *j1 = jpeg(24, 16, 3, TJSAMP_420, 0, &a), *j2 = jpeg(20, 14, 3, TJSAMP_444, 0, &b);
  size_t n = 0;
  uint8_t *buf = malloc(64 + 2 * a + b);
  memcpy(buf + n, "3\n@@@@", 6), n += 6;
  memcpy(buf + n, j1, a), n += a;
  memcpy(buf + n, "@@@@", 4), n += 4;
  memcpy(buf + n, j1, a), n += a;
  memcpy(buf + n, "@@@@", 4), n += 4;
  memcpy(buf + n, j2, b), n += b;
  put_mode("frame_folder", "n_frames-3", 1 | 2, buf, n);
  put_mode("frame_folder", "counted-2", 2 | 4, buf + 6, a + 4 + a);
  put_mode("frame_folder", "native-1", 0, j1, a);
  tjFree(j1);
  tjFree(j2);
  free(buf);
}

static void safetensors(void) {
  float f[6] = {1, 2, 3, 4, 5, 6};
  uint8_t u[3] = {1, 2, 3};
  int32_t i32[2] = {7, -7};
  uint16_t bf[2] = {0x3f80, 0x4000};
  sp_tensor t[5] = {{SP_F32, sp_shape2(2, 3), f}, {SP_U8, sp_shape1(3), u}, {SP_I32, sp_shape1(2), i32},
                    {SP_BF16, sp_shape1(2), bf}, {SP_F32, sp_shape1(0), NULL}};
  const char *names[5] = {"w", "mask", "idx", "half", "empty"};
  char path[1024];
  snprintf(path, sizeof path, "%s/safetensors/seed-five.safetensors", root);
  snprintf(path, sizeof path, "%s/safetensors", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/safetensors/seed-five.safetensors", root);
  if (sp_st_save_tensors(path, 5, names, t, "{\"format\":\"spry-checkpoint-1\",\"epoch\":\"3\"}") != 0) {
    fprintf(stderr, "make_seeds: %s\n", sp_last_error());
    exit(1);
  }
}

/* A checkpoint of the graph a config builds, cut after its header (the
 * fuzz_checkpoint harness pads the weights back in). */
static void checkpoint(const char *name, const char *config, int k) {
  sp_train_config cfg;
  if (sp_train_config_parse(config, name, 0, NULL, &cfg, NULL) != 0) {
    fprintf(stderr, "make_seeds: %s\n", sp_last_error());
    exit(1);
  }
  sp_kp_data d;
  memset(&d, 0, sizeof d);
  d.k = d.k_all = k;
  d.mean_shape = calloc((size_t)k * 2, sizeof(float));
  for (int j = 0; j < k; j++) d.mean_shape[2 * j] = (float)j, d.mean_shape[2 * j + 1] = (float)(j * j % 7);
  int32_t nb[SP_MAX_KEYPOINTS * 8];
  float scale, offset;
  sp_graph *g = sp_kp_build_graph(&cfg, &d, nb, &scale, &offset);
  free(d.mean_shape);
  if (!g) {
    fprintf(stderr, "make_seeds: %s\n", sp_last_error());
    exit(1);
  }
  char tmp[] = "/tmp/spry-seed-XXXXXX";
  int fd = mkstemp(tmp);
  sp_checkpoint_meta meta = {.epoch = 1, .config = config, .model = cfg.model, .box_source = "image"};
  if (fd < 0 || sp_checkpoint_save(tmp, g, NULL, &meta) != 0) exit(1);
  sp_graph_free(g);
  FILE *f = fopen(tmp, "rb");
  uint64_t hl;
  if (fread(&hl, 8, 1, f) != 1) exit(1);
  uint8_t *head = malloc(8 + hl);
  memcpy(head, &hl, 8);
  if (fread(head + 8, 1, hl, f) != hl) exit(1);
  fclose(f);
  remove(tmp);
  put_mode("checkpoint", name, 1, head, 8 + hl);
  free(head);
}

static void checkpoints(void) {
  checkpoint("vgg-nose-32.safetensors",
             "model: vgg-nose\nbackend: ref\ndata:\n  size: 32\n  crop_size: 32\n  channels: 1\n  keypoints: [0]\n", 1);
  checkpoint("vgg-face-32-structure.safetensors",
             "model: vgg-face\nbackend: ref\ndata:\n  size: 32\n  crop_size: 40\n  channels: 3\n"
             "loss:\n  structure_weight: 1\n  neighbours: 2\n",
             5);
}

static void cache(void) {
  /* The fuzz_cache_file harness's dataset: 3 samples, K = 2, 8x8 gray. */
  enum { N = 3, K = 2, S = 8 };
  sp_cache c;
  memset(&c, 0, sizeof c);
  c.n = N, c.size = S, c.channels = 1, c.k = K;
  uint8_t pixels[N * S * S];
  float points[N * K * 2], crop[N * 4], box[N * 4];
  uint8_t vis[N * K], box_src[N];
  int32_t source[N];
  for (int i = 0; i < N * S * S; i++) pixels[i] = (uint8_t)(i * 3);
  for (int i = 0; i < N * K * 2; i++) points[i] = (float)(i % 8);
  for (int i = 0; i < N * K; i++) vis[i] = 1;
  for (int i = 0; i < N; i++) {
    source[i] = i, box_src[i] = SP_BOXSRC_ANNOTATION;
    crop[4 * i] = 1, crop[4 * i + 1] = 2, crop[4 * i + 2] = 30, crop[4 * i + 3] = 30;
    box[4 * i] = 5, box[4 * i + 1] = 6, box[4 * i + 2] = 20, box[4 * i + 3] = 20;
  }
  c.pixels = pixels, c.points = points, c.vis = vis, c.source = source, c.crop = crop, c.box = box;
  c.box_src = box_src;
  sp_dataset ds;
  sp_dataset_init(&ds);
  for (int i = 0; i < N; i++) {
    sp_kp_sample s = {0};
    s.image = strdup("/nonexistent/a.jpg");
    s.k = K;
    s.pts = calloc(2 * K, sizeof(float));
    sp_dataset_add(&ds, &s, "seed");
  }
  sp_crop_config cfg = sp_crop_config_default();
  cfg.size = S, cfg.channels = 1;
  char path[1024];
  snprintf(path, sizeof path, "%s/cache_file", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/cache_file/seed-3x8x8", root);
  if (sp_cache_write(&c, path, &ds, &cfg) != 0) exit(1);
  sp_dataset_free(&ds);
}

static void gif(void) {
  uint8_t *a = picture(6, 4, 3), *b = picture(6, 4, 3), *g = picture(5, 3, 1);
  for (int i = 0; i < 6 * 4 * 3; i++) b[i] = (uint8_t)(255 - b[i]);
  const uint8_t *seq[2] = {a, b}, *gray[1] = {g};
  char path[1024];
  snprintf(path, sizeof path, "%s/gif", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/gif/seed-rgb-2.gif", root);
  if (sp_gif_write(path, seq, 2, 6, 4, 3, 8) != 0) exit(1);
  snprintf(path, sizeof path, "%s/gif/seed-gray-1.gif", root);
  if (sp_gif_write(path, gray, 1, 5, 3, 1, 0) != 0) exit(1);
  free(a), free(b), free(g);
}

static void text_seeds(void) {
  const char *asf = "# IMM\n3\n0 0 0.10 0.20 0 2 1\n0 0 0.30 0.40 1 0 2\n0 0 0.50 0.60 2 1 0\n01-1m.jpg\n";
  const char *dat = "1 10.5 20\n2 30 40\n3 50 60.25\n";
  const char *pts = "version: 1\nn_points: 3\n{\n10 20\n30 40\n50 60\n}\n";
  put_mode_text("annotations", "asf", 0, asf);
  put_mode_text("annotations", "dat", 1, dat);
  put_mode_text("annotations", "pts", 2, pts);
  put_mode_text("dataset_dir", "dat-3", 0, "1 1 2\n2 3 4\n@@@@1 5 6\n2 7 8\n@@@@1 9 9\n");
  put_mode_text("dataset_dir", "asf-2", 1, "2\n0 0 .1 .2 0 1 1\n0 0 .3 .4 1 0 0\n@@@@2\n0 0 .1 .2 0 1 1\n0 0 .3 .4 1 0 0\n");
  put_mode_text("dataset_dir", "pts-1", 2, pts);
  const char *csv = "name,x0,y0,x1,y1\ntrain_ann_01.jpg,1,2,3,4\ntest_bob_02.jpg,5,6,7,8\n@@@@train_ann_01.jpg\n";
  put_mode_text("dataset_dir", "csv", 3, csv);
  const char *coco = "{\"images\":[{\"id\":1,\"file_name\":\"a.jpg\"},{\"id\":2,\"file_name\":\"b.jpg\"}],"
                     "\"annotations\":[{\"image_id\":2,\"keypoints\":[1,2,2,3,4,1,0,0,0],\"bbox\":[0,0,9,9],"
                     "\"iscrowd\":0},{\"image_id\":1,\"keypoints\":[5,6,2,7,8,2,9,9,2]}]}";
  put_mode_text("dataset_dir", "coco", 4, coco);
  put_text("coco", "two", coco);
  const char *xml = "<?xml version='1.0'?>\n<dataset><images>\n<image file='a.jpg'>\n"
                    "<box top='10' left='20' width='30' height='40'>\n<part name='00' x='21' y='11'/>\n"
                    "<part name='01' x='25' y='15'/>\n</box>\n<box top='1' left='2' width='3' height='4' "
                    "ignore='1'/>\n</image>\n</images></dataset>\n";
  put_mode_text("dataset_dir", "xml", 5, xml);
  put_text("dlib_xml", "one", xml);
  put_text("keypoints_csv", "two", csv);
  put_text("boxes_csv", "detector",
           "image,x,y,w,h,source\na.jpg,1,2,30,40,detector\ndata/images/a.jpg,5,5,10,10,points\n/abs/b.png,0,0,1,1,x\n");
  put_text("boxes_csv", "reordered", "\xEF\xBB\xBFh,w,image,y,x\n10,20,x/./y.jpg,1,2\n");
  put_mode_text("video_list", "paths", 0, "a/clip1.mp4 0\nb/clip 2.avi 1\n# comment\n/abs/c.gif 2\n");
  put_mode_text("video_list", "frames", 0, "frames/clip1 120 0\nframes/clip2 7 3\n");
  put_mode_text("video_list", "labels-csv", 1, "path,label\nx/a.mp4,0\ny/b.mp4,1\n");
  put_mode_text("video_list", "class-names", 1, "walk\nrun\n");
  const char *pred = "{\"image\":\"a.jpg\",\"faces\":[{\"box\":[1,2,30,40],\"points\":[[1,2],[3,4],[5,6]]},"
                     "{\"box\":[0,0,5,5],\"points\":[[7,8],[9,1],[2,3]]}]}\n{\"image\":\"b.jpg\",\"faces\":[]}\n";
  put_mode_text("morph_points", "predict.json", 0, pred);
  put_mode_text("morph_points", "array.json", 0, "[[1.5,2],[3,4e2],[-5,6]]");
  put_mode_text("morph_points", "a.dat", 1, dat);
  put_mode_text("morph_points", "a.asf", 2, asf);
  put_mode_text("morph_points", "a.pts", 3, pts);
  put_text("json", "object", "{\"a\":[1,2.5e-3,-0,true,false,null],\"b\":{\"c\":\"\\u00e9\\n\\ud83d\\ude00\"}}");
  put_text("json", "number", "-12345678901234567890.5e+300");
  put_text("json", "nested", "[[[[[[[[[[{\"x\":[]}]]]]]]]]]]");
}

static void configs(void) {
  put_text("yaml_config", "keypoints",
           "model: vgg-face\ndata:\n  path: faces\n  size: 64\n  keypoints: [30, 31]\naugment:\n  scale: [0.75, 1.33]\n"
           "  randaugment: [2, 7]\nloss:\n  type: l1\n  structure_weight: 0.2\noptimizer:\n  type: adamw\n  lr: 1e-3\n"
           "schedule:\n  warmup_epochs: 1\n  decay: cosine\nepochs: 3\nbatch: 8\n#set data.size=96\n#set seed=7\n");
  put_text("yaml_config", "video",
           "task: video\nmodel: tsm-r18\ndata:\n  train_list: train.list\n  val_list: val.list\n  segments: 8\n"
           "  size: 112\nmultigrid:\n  enabled: true\nepochs: 2\nbatch: 4\n#set optimizer.lr=0.01\n");
  put_text("yaml_config", "flow", "{model: resunet18, data: {size: 128, mean: [0.5, 0.5, 0.5]}, \"epochs\": 1}\n");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_make_seeds tests/fuzz/corpus\n");
    return 2;
  }
  root = argv[1];
  mkdir(root, 0755);
  images();
  frames();
  safetensors();
  checkpoints();
  cache();
  gif();
  text_seeds();
  configs();
  fprintf(stderr, "make_seeds: wrote the generated seeds under %s\n", root);
  return 0;
}
