/* Per-sample augmentation on uint8: all geometry (zoom, shift, rotation,
 * flip, RandAugment's shear/translate/rotate) is composed into one affine
 * map, the cached crop is resampled once straight into the planar batch slot,
 * then RandAugment's pixel ops run in place. Points go through the same map,
 * and a flip re-indexes them with the scheme's table.
 *
 * RandAugment draws its n ops in torchvision's way (uniform, with
 * replacement, random sign for signed ops); the geometric ones are applied
 * before the pixel ones instead of interleaved. Pixel ops do not move pixels,
 * so the result differs from strict order only through the fill area's effect
 * on AutoContrast/Equalize/Contrast statistics. */
#include <math.h>
#include <string.h>

#include "data/data_internal.h"
#include "spry/rng.h"

sp_augment_config sp_augment_config_default(int out_size) {
  sp_augment_config c;
  memset(&c, 0, sizeof c);
  c.out_size = out_size;
  c.scale_min = 0.75f;
  c.scale_max = 4.f / 3.f;
  c.translate = 0.1f;
  c.rotate_deg = 10.f;
  c.flip_prob = 0.5f;
  c.ra_n = 2;
  c.ra_m = 7;
  return c;
}

sp_augment_config sp_augment_config_none(int out_size) {
  sp_augment_config c;
  memset(&c, 0, sizeof c);
  c.out_size = out_size;
  c.scale_min = c.scale_max = 1.f;
  return c;
}

static void map_points(const sp_affine *a, const float *src, int k, float *dst) {
  for (int i = 0; i < k; i++) {
    float x = src[2 * i], y = src[2 * i + 1];
    sp_affine_apply(a, &x, &y);
    dst[2 * i] = x;
    dst[2 * i + 1] = y;
  }
}

static void set_flags(const float *pts, const uint8_t *vis, int k, int s, uint8_t *flags) {
  for (int i = 0; i < k; i++) {
    float x = pts[2 * i], y = pts[2 * i + 1];
    uint8_t f = 0;
    if (!(x >= 0 && y >= 0 && x <= s - 1 && y <= s - 1)) f |= SP_PT_OUTSIDE;
    if (vis && !vis[i]) f |= SP_PT_UNLABELLED;
    flags[i] = f;
  }
}

/* new[i] = old[flip[i]]: the left eye of the mirrored face is the old right eye. */
static void reindex(const sp_scheme *sc, float *pts, uint8_t *flags) {
  float tmp[2 * SP_MAX_KEYPOINTS];
  uint8_t ftmp[SP_MAX_KEYPOINTS];
  memcpy(tmp, pts, sizeof(float) * 2 * (size_t)sc->k);
  memcpy(ftmp, flags, (size_t)sc->k);
  for (int i = 0; i < sc->k; i++) {
    pts[2 * i] = tmp[2 * sc->flip[i]];
    pts[2 * i + 1] = tmp[2 * sc->flip[i] + 1];
    flags[i] = ftmp[sc->flip[i]];
  }
}

void sp_augment_sample(const sp_cache *c, int i, const sp_augment_config *cfg, const sp_scheme *scheme, uint64_t key,
                       uint8_t *out_chw, float *out_pts, uint8_t *out_flags) {
  sp_rng r = sp_rng_make(key);
  const int S = cfg->out_size, C = c->size, k = c->k;
  /* Draw every random number in a fixed order, whether used or not, so that
   * changing one setting does not reshuffle the others. */
  float u_scale = sp_rng_uniform(&r), u_rot = sp_rng_uniform(&r);
  float u_tx = sp_rng_uniform(&r), u_ty = sp_rng_uniform(&r), u_flip = sp_rng_uniform(&r);
  float scale = cfg->scale_min + (cfg->scale_max - cfg->scale_min) * u_scale;
  float rot = cfg->rotate_deg * (2.f * u_rot - 1.f);
  float tx = cfg->translate * S * (2.f * u_tx - 1.f), ty = cfg->translate * S * (2.f * u_ty - 1.f);
  int flip = scheme && scheme->k == k && u_flip < cfg->flip_prob;

  /* Base map: cached crop centre -> output centre, zoom, rotate, shift, mirror. */
  double cc = (C - 1) * 0.5, cs = (S - 1) * 0.5;
  sp_affine a = sp_affine_translate(-cc, -cc);
  a = sp_affine_then(a, sp_affine_scale((double)scale * S / C, (double)scale * S / C));
  if (rot != 0.f) a = sp_affine_then(a, sp_affine_rotate_deg(rot));
  a = sp_affine_then(a, sp_affine_translate(cs + tx, cs + ty));
  if (flip) {
    sp_affine m = {{-1, 0, S - 1, 0, 1, 0}};
    a = sp_affine_then(a, m);
  }
  sp_ra_op color[8];
  float color_v[8];
  int n_color = 0;
  int n_ops = cfg->ra_n < 8 ? cfg->ra_n : 8;
  for (int j = 0; j < n_ops; j++) {
    sp_ra_op op = (sp_ra_op)sp_rng_below(&r, SP_RA_NUM_OPS);
    float v = sp_ra_magnitude(op, cfg->ra_m, S);
    float u_sign = sp_rng_uniform(&r);
    if (sp_ra_is_signed(op) && u_sign < 0.5f) v = -v;
    if (sp_ra_is_geometric(op)) {
      a = sp_affine_then(a, sp_ra_geometry(op, v, S));
    } else if (op != SP_RA_IDENTITY) {
      color[n_color] = op;
      color_v[n_color++] = v;
    }
  }
  sp_affine inv;
  if (sp_affine_invert(a, &inv) != 0) inv = sp_affine_identity(); /* cannot happen for these ranges */
  const uint8_t *src = c->pixels + (size_t)i * C * C * c->channels;
  sp_warp_affine_u8(src, C, C, c->channels, out_chw, S, S, 1, &inv, 0);
  for (int j = 0; j < n_color; j++) sp_color_op(color[j], out_chw, c->channels, S * S, S, color_v[j]);

  map_points(&a, c->points + (size_t)i * k * 2, k, out_pts);
  set_flags(out_pts, c->vis ? c->vis + (size_t)i * k : NULL, k, S, out_flags);
  if (flip) reindex(scheme, out_pts, out_flags); /* x was mirrored by the map */
}

void sp_augment_apply_ops(const uint8_t *src_hwc, int s, int c, const sp_ra_op *ops, const int *signs, int n_ops,
                          int magnitude, float *pts, int k, uint8_t *out_chw) {
  sp_affine a = sp_affine_identity();
  for (int j = 0; j < n_ops; j++) {
    if (!sp_ra_is_geometric(ops[j])) continue;
    float v = sp_ra_magnitude(ops[j], magnitude, s) * (signs && signs[j] < 0 ? -1.f : 1.f);
    a = sp_affine_then(a, sp_ra_geometry(ops[j], v, s));
  }
  sp_affine inv;
  if (sp_affine_invert(a, &inv) != 0) inv = sp_affine_identity();
  sp_warp_affine_u8(src_hwc, s, s, c, out_chw, s, s, 1, &inv, 0);
  for (int j = 0; j < n_ops; j++) {
    if (sp_ra_is_geometric(ops[j]) || ops[j] == SP_RA_IDENTITY) continue;
    float v = sp_ra_magnitude(ops[j], magnitude, s) * (signs && signs[j] < 0 ? -1.f : 1.f);
    sp_color_op(ops[j], out_chw, c, s * s, s, v);
  }
  for (int i = 0; i < k; i++) sp_affine_apply(&a, &pts[2 * i], &pts[2 * i + 1]);
}
