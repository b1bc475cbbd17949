/* Animated GIF89a: a writer for morph sequences and a small reader that
 * checks what the writer made (tests, tools).
 *
 * Palette: one global table for all frames, so a morph does not flicker as
 * per-frame palettes change. Grey frames use the 256 greys exactly; colour
 * frames get a median-cut palette over pixels sampled from every frame (the
 * box to split is the one with the largest longest-side x pixel count, so
 * big smooth areas such as skin get colours before rare outliers). No
 * dithering: dither noise changes from frame to frame and costs LZW size.
 *
 * LZW follows the GIF rules: minimum code size 8, clear = 256, end = 257,
 * codes grow from 9 to 12 bits when the next free code reaches 2^bits, and a
 * clear code restarts the table once code 4095 is taken. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/plot_internal.h"
#include "spry/morph.h"

/* ---- byte buffer ---- */

typedef struct {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void put(bytes *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    while (b->n + n > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
    b->p = sp_xrealloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void put1(bytes *b, int v) {
  uint8_t x = (uint8_t)v;
  put(b, &x, 1);
}

static void put2(bytes *b, int v) {
  put1(b, v & 255);
  put1(b, (v >> 8) & 255);
}

/* ---- median-cut palette ---- */

typedef struct {
  int lo, hi; /* samples [lo, hi) */
  int axis, range;
} box;

static void box_measure(const uint8_t *s, box *bx) {
  int mn[3] = {255, 255, 255}, mx[3] = {0, 0, 0};
  for (int i = bx->lo; i < bx->hi; i++)
    for (int ch = 0; ch < 3; ch++) {
      int v = s[3 * i + ch];
      mn[ch] = v < mn[ch] ? v : mn[ch];
      mx[ch] = v > mx[ch] ? v : mx[ch];
    }
  bx->axis = 0, bx->range = -1;
  for (int ch = 0; ch < 3; ch++)
    if (mx[ch] - mn[ch] > bx->range) bx->range = mx[ch] - mn[ch], bx->axis = ch;
}

/* Reorders the box's samples by the value on its axis (counting sort: values
 * are bytes) and splits it at the median. */
static int box_split(uint8_t *s, uint8_t *tmp, box *bx, box *right) {
  int count[257] = {0}, n = bx->hi - bx->lo, ax = bx->axis;
  for (int i = bx->lo; i < bx->hi; i++) count[s[3 * i + ax] + 1]++;
  for (int v = 0; v < 256; v++) count[v + 1] += count[v];
  for (int i = bx->lo; i < bx->hi; i++) memcpy(tmp + 3 * (size_t)count[s[3 * i + ax]]++, s + 3 * (size_t)i, 3);
  memcpy(s + 3 * (size_t)bx->lo, tmp, 3 * (size_t)n);
  /* Move the cut off the median to the nearest value change, so equal
   * colours never straddle two boxes. */
  int mid = bx->lo + n / 2;
  while (mid < bx->hi && mid > bx->lo && s[3 * mid + ax] == s[3 * (mid - 1) + ax]) mid++;
  if (mid >= bx->hi) {
    mid = bx->lo + n / 2;
    while (mid > bx->lo && s[3 * mid + ax] == s[3 * (mid - 1) + ax]) mid--;
  }
  if (mid <= bx->lo || mid >= bx->hi) return 0;
  right->lo = mid, right->hi = bx->hi;
  bx->hi = mid;
  box_measure(s, bx);
  box_measure(s, right);
  return 1;
}

static int median_cut(const uint8_t *const *frames, int n, size_t pixels, uint8_t pal[256][3]) {
  const size_t want = 1u << 16, total = pixels * (size_t)n;
  size_t step = total / want + 1;
  int ns = (int)((total + step - 1) / step);
  uint8_t *s = sp_xmalloc(3 * (size_t)ns), *tmp = sp_xmalloc(3 * (size_t)ns);
  for (int i = 0; i < ns; i++) {
    size_t g = (size_t)i * step;
    memcpy(s + 3 * (size_t)i, frames[g / pixels] + 3 * (g % pixels), 3);
  }
  box boxes[256];
  int nb = 1;
  boxes[0] = (box){0, ns, 0, 0};
  box_measure(s, &boxes[0]);
  while (nb < 256) {
    int best = -1;
    double best_score = 0;
    for (int i = 0; i < nb; i++) {
      double score = (double)boxes[i].range * (boxes[i].hi - boxes[i].lo);
      if (boxes[i].range > 0 && score > best_score) best_score = score, best = i;
    }
    if (best < 0 || !box_split(s, tmp, &boxes[best], &boxes[nb])) break;
    nb++;
  }
  for (int i = 0; i < nb; i++) {
    double sum[3] = {0, 0, 0};
    for (int j = boxes[i].lo; j < boxes[i].hi; j++)
      for (int ch = 0; ch < 3; ch++) sum[ch] += s[3 * j + ch];
    for (int ch = 0; ch < 3; ch++) pal[i][ch] = (uint8_t)(sum[ch] / (boxes[i].hi - boxes[i].lo) + 0.5);
  }
  free(s);
  free(tmp);
  return nb;
}

/* Nearest palette entry per 6-bit-per-channel cell, filled on first use:
 * 262144 cells instead of 256 distance tests per pixel. */
typedef struct {
  const uint8_t (*pal)[3];
  int n;
  int16_t *cell;
} nearest;

static int nearest_index(nearest *q, const uint8_t *px) {
  int key = (px[0] >> 2) << 12 | (px[1] >> 2) << 6 | px[2] >> 2;
  if (q->cell[key] >= 0) return q->cell[key];
  int r = (px[0] & ~3) + 2, g = (px[1] & ~3) + 2, b = (px[2] & ~3) + 2, best = 0, best_d = 1 << 30;
  for (int i = 0; i < q->n; i++) {
    int dr = r - q->pal[i][0], dg = g - q->pal[i][1], db = b - q->pal[i][2];
    /* Weighted towards green as the eye is: fewer visible steps on skin. */
    int d = 2 * dr * dr + 4 * dg * dg + 3 * db * db;
    if (d < best_d) best_d = d, best = i;
  }
  q->cell[key] = (int16_t)best;
  return best;
}

/* ---- LZW ---- */

typedef struct {
  bytes *out;
  uint8_t block[255];
  int block_n;
  uint32_t acc;
  int acc_bits;
} bit_writer;

static void flush_block(bit_writer *w) {
  if (!w->block_n) return;
  put1(w->out, w->block_n);
  put(w->out, w->block, (size_t)w->block_n);
  w->block_n = 0;
}

static void put_code(bit_writer *w, int code, int bits) {
  w->acc |= (uint32_t)code << w->acc_bits;
  w->acc_bits += bits;
  while (w->acc_bits >= 8) {
    w->block[w->block_n++] = (uint8_t)(w->acc & 255);
    if (w->block_n == 255) flush_block(w);
    w->acc >>= 8;
    w->acc_bits -= 8;
  }
}

#define HASH_SIZE 8192 /* power of two, over twice the 4096 codes */

static void lzw_encode(bytes *out, const uint8_t *idx, size_t n) {
  enum { MIN = 8, CLEAR = 256, END = 257 };
  int32_t *keys = sp_xmalloc(sizeof(int32_t) * HASH_SIZE);
  int16_t *codes = sp_xmalloc(sizeof(int16_t) * HASH_SIZE);
  bit_writer w = {.out = out};
  put1(out, MIN);
  int bits = MIN + 1, next = END + 1;
  for (int i = 0; i < HASH_SIZE; i++) keys[i] = -1;
  put_code(&w, CLEAR, bits);
  int prefix = n ? idx[0] : -1;
  for (size_t i = 1; i < n; i++) {
    int k = idx[i];
    int32_t key = prefix << 8 | k;
    uint32_t h = ((uint32_t)key * 2654435761u) >> 19; /* top 13 bits */
    while (keys[h] >= 0 && keys[h] != key) h = (h + 1) & (HASH_SIZE - 1);
    if (keys[h] == key) {
      prefix = codes[h];
      continue;
    }
    put_code(&w, prefix, bits);
    if (next < 4096) {
      keys[h] = key, codes[h] = (int16_t)next;
      /* The reader adds each entry one code later than we do, so it widens
       * exactly when we have just handed out code 2^bits. */
      if (next == (1 << bits) && bits < 12) bits++;
      next++;
    } else {
      put_code(&w, CLEAR, bits);
      for (int j = 0; j < HASH_SIZE; j++) keys[j] = -1;
      bits = MIN + 1, next = END + 1;
    }
    prefix = k;
  }
  if (prefix >= 0) put_code(&w, prefix, bits);
  put_code(&w, END, bits);
  if (w.acc_bits > 0) put_code(&w, 0, 8 - w.acc_bits);
  flush_block(&w);
  put1(out, 0); /* block terminator */
  free(keys);
  free(codes);
}

/* ---- writer ---- */

static int fill_bytes(FILE *f, void *ctx) {
  const bytes *b = ctx;
  if (fwrite(b->p, 1, b->n, f) != b->n) return sp_error_set("GIF: short write");
  return 0;
}

int sp_gif_write(const char *path, const uint8_t *const *frames, int n, int w, int h, int c, int delay_cs) {
  if (n < 1 || w < 1 || h < 1 || w > 65535 || h > 65535 || (c != 1 && c != 3))
    return sp_error_set("%s: cannot write a GIF of %d frames of %dx%dx%d", path, n, w, h, c);
  if (delay_cs < 0 || delay_cs > 65535) return sp_error_set("%s: GIF frame delay %d out of range", path, delay_cs);
  uint8_t pal[256][3] = {{0}};
  int n_pal = 256;
  size_t pixels = (size_t)w * h;
  if (c == 1)
    for (int i = 0; i < 256; i++) pal[i][0] = pal[i][1] = pal[i][2] = (uint8_t)i;
  else
    n_pal = median_cut(frames, n, pixels, pal);

  bytes b = {0};
  put(&b, "GIF89a", 6);
  put2(&b, w), put2(&b, h);
  put1(&b, 0xF7); /* global table of 2^(7+1) entries, 8-bit colour resolution */
  put1(&b, 0), put1(&b, 0);
  put(&b, pal, sizeof pal);
  /* NETSCAPE2.0 loop extension: repeat forever. */
  put1(&b, 0x21), put1(&b, 0xFF), put1(&b, 11);
  put(&b, "NETSCAPE2.0", 11);
  put1(&b, 3), put1(&b, 1), put2(&b, 0), put1(&b, 0);

  nearest q = {.pal = (const uint8_t(*)[3])pal, .n = n_pal, .cell = NULL};
  if (c == 3) {
    q.cell = sp_xmalloc(sizeof(int16_t) << 18);
    memset(q.cell, 0xff, sizeof(int16_t) << 18);
  }
  uint8_t *idx = sp_xmalloc(pixels);
  for (int f = 0; f < n; f++) {
    /* Graphic control: disposal 1 (leave in place), no transparency. */
    put1(&b, 0x21), put1(&b, 0xF9), put1(&b, 4), put1(&b, 1 << 2), put2(&b, delay_cs), put1(&b, 0), put1(&b, 0);
    put1(&b, 0x2C), put2(&b, 0), put2(&b, 0), put2(&b, w), put2(&b, h), put1(&b, 0);
    if (c == 1)
      memcpy(idx, frames[f], pixels);
    else
      for (size_t i = 0; i < pixels; i++) idx[i] = (uint8_t)nearest_index(&q, frames[f] + 3 * i);
    lzw_encode(&b, idx, pixels);
  }
  put1(&b, 0x3B);
  free(idx);
  free(q.cell);
  int rc = sp_plot_write_atomic(path, fill_bytes, &b);
  free(b.p);
  return rc;
}

/* ---- reader ---- */

typedef struct {
  const uint8_t *p;
  size_t n, at;
} reader;

static int get1(reader *r) { return r->at < r->n ? r->p[r->at++] : -1; }
static int get2(reader *r) {
  int a = get1(r), b = get1(r);
  return a < 0 || b < 0 ? -1 : a | b << 8;
}

/* Concatenates the data sub-blocks that start at r->at. */
static int get_blocks(reader *r, bytes *out) {
  for (;;) {
    int len = get1(r);
    if (len < 0 || r->at + (size_t)len > r->n) return -1;
    if (len == 0) return 0;
    if (out) put(out, r->p + r->at, (size_t)len);
    r->at += (size_t)len;
  }
}

/* Decodes one image's LZW data into n palette indices. */
static int lzw_decode(const uint8_t *data, size_t len, int min, uint8_t *idx, size_t n) {
  if (min < 2 || min > 8) return -1;
  const int clear = 1 << min, end = clear + 1;
  uint16_t prefix[4096];
  uint8_t suffix[4096], first[4096], stack[4097];
  for (int i = 0; i < clear; i++) prefix[i] = 0xFFFF, suffix[i] = first[i] = (uint8_t)i;
  int bits = min + 1, next = end + 1, prev = -1;
  size_t bitpos = 0, got = 0;
  for (;;) {
    if (bitpos + (size_t)bits > 8 * len) return got == n ? 0 : -1; /* no end code: accept a full image */
    int code = 0;
    for (int i = 0; i < bits; i++, bitpos++) code |= ((data[bitpos >> 3] >> (bitpos & 7)) & 1) << i;
    if (code == clear) {
      bits = min + 1, next = end + 1, prev = -1;
      continue;
    }
    if (code == end) return got == n ? 0 : -1;
    if (code > next || (code == next && prev < 0)) return -1;
    int c = code, sp = 0;
    if (code == next) { /* the KwKwK case: the entry being defined right now */
      stack[sp++] = first[prev];
      c = prev;
    }
    while (c >= clear) {
      if (sp >= 4096) return -1;
      stack[sp++] = suffix[c];
      c = prefix[c];
    }
    stack[sp++] = (uint8_t)c;
    if (prev >= 0 && next < 4096) {
      prefix[next] = (uint16_t)prev, suffix[next] = (uint8_t)c, first[next] = first[prev];
      next++;
      if (next == (1 << bits) && bits < 12) bits++;
    }
    while (sp > 0) {
      if (got >= n) return -1;
      idx[got++] = stack[--sp];
    }
    prev = code;
  }
}

/* The state of one sp_gif_read. */
typedef struct {
  const char *path;
  reader r;
  int w, h, n_frames;
  uint8_t gpal[256][3], lpal[256][3], *canvas, *idx;
  bytes frames, lzw;
} gif_in;

static int read_whole(const char *path, uint8_t **file, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return sp_error_set("%s: cannot open", path);
  uint8_t chunk[65536];
  size_t k;
  bytes all = {0};
  while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) put(&all, chunk, k);
  fclose(f);
  *file = all.p, *len = all.n;
  return 0;
}

/* Header, screen and global palette; the canvas, once its size is known to
 * fit (a 13-byte header may claim 65535 x 65535: 12.9 GB). */
static int read_screen(gif_in *g) {
  reader *r = &g->r;
  if (r->n < 13 || (memcmp(r->p, "GIF89a", 6) && memcmp(r->p, "GIF87a", 6)))
    return sp_error_set("%s: not a GIF", g->path);
  r->at = 6;
  g->w = get2(r), g->h = get2(r);
  int flags = get1(r);
  get1(r), get1(r);
  if (g->w < 1 || g->h < 1) return sp_error_set("%s: bad GIF screen size", g->path);
  int n_gpal = flags & 0x80 ? 2 << (flags & 7) : 0;
  memset(g->gpal, 0, sizeof g->gpal);
  if (r->at + 3 * (size_t)n_gpal > r->n) return 1;
  memcpy(g->gpal, r->p + r->at, 3 * (size_t)n_gpal);
  r->at += 3 * (size_t)n_gpal;
  char what[600];
  snprintf(what, sizeof what, "%s: a %dx%d GIF screen", g->path, g->w, g->h);
  if (sp_mem_check(3.0 * g->w * g->h, what) != 0) return -1;
  g->canvas = sp_xcalloc((size_t)g->w * g->h, 3);
  return 0;
}

/* One image descriptor onwards: its palette, LZW data, and the composed
 * frame appended. 0, 1 (truncated) or -1 (error set). */
static int read_frame(gif_in *g) {
  reader *r = &g->r;
  int x0 = get2(r), y0 = get2(r), fw = get2(r), fh = get2(r), fl = get1(r);
  if (fl < 0) return 1;
  if (fl & 0x40) return sp_error_set("%s: interlaced GIF frames are not supported", g->path);
  if (fw < 1 || fh < 1 || x0 + fw > g->w || y0 + fh > g->h)
    return sp_error_set("%s: GIF frame %d lies outside the screen", g->path, g->n_frames);
  const uint8_t(*pal)[3] = (const uint8_t(*)[3])g->gpal;
  if (fl & 0x80) {
    int nl = 2 << (fl & 7);
    if (r->at + 3 * (size_t)nl > r->n) return 1;
    memset(g->lpal, 0, sizeof g->lpal);
    memcpy(g->lpal, r->p + r->at, 3 * (size_t)nl);
    r->at += 3 * (size_t)nl;
    pal = (const uint8_t(*)[3])g->lpal;
  }
  int min = get1(r);
  g->lzw.n = 0;
  if (min < 0 || get_blocks(r, &g->lzw)) return 1;
  /* Every frame is a whole screen in the output: a few bytes per 1x1 frame
   * on a large screen must not add up past memory. */
  char what[600];
  snprintf(what, sizeof what, "%s: %d frames of a %dx%d GIF", g->path, g->n_frames + 1, g->w, g->h);
  if (sp_mem_check(3.0 * g->w * g->h * (g->n_frames + 1) + (double)fw * fh, what) != 0) return -1;
  g->idx = sp_xrealloc(g->idx, (size_t)fw * fh);
  if (lzw_decode(g->lzw.p, g->lzw.n, min, g->idx, (size_t)fw * fh))
    return sp_error_set("%s: bad LZW data in GIF frame %d", g->path, g->n_frames);
  for (int y = 0; y < fh; y++)
    for (int x = 0; x < fw; x++)
      memcpy(g->canvas + 3 * ((size_t)(y0 + y) * g->w + x0 + x), pal[g->idx[(size_t)y * fw + x]], 3);
  put(&g->frames, g->canvas, 3 * (size_t)g->w * g->h);
  g->n_frames++;
  return 0;
}

int sp_gif_read(const char *path, int *w_out, int *h_out, uint8_t **rgb) {
  *rgb = NULL;
  uint8_t *file = NULL;
  size_t len = 0;
  if (read_whole(path, &file, &len) != 0) return -1;
  gif_in g;
  memset(&g, 0, sizeof g);
  g.path = path;
  g.r = (reader){file, len, 0};
  int rc = read_screen(&g);
  while (rc == 0) {
    int tag = get1(&g.r);
    if (tag == 0x3B) break;
    if (tag == 0x21)
      rc = get1(&g.r) < 0 || get_blocks(&g.r, NULL) ? 1 : 0;
    else if (tag == 0x2C)
      rc = read_frame(&g);
    else
      rc = 1;
  }
  if (rc > 0) rc = sp_error_set("%s: truncated or malformed GIF at byte %zu", path, g.r.at);
  if (rc == 0) {
    *w_out = g.w, *h_out = g.h, *rgb = g.frames.p, g.frames.p = NULL;
    rc = g.n_frames;
  }
  free(file), free(g.canvas), free(g.idx), free(g.frames.p), free(g.lzw.p);
  return rc;
}
