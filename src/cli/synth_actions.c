/* `spry synth actions --count N --out DIR`: the synthetic motion-direction
 * clip set (see src/data/video_synth.c for why its classes need time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "spry/video.h"



static void usage(FILE *f) {
  fprintf(f,
          "usage: spry synth actions --count N --out DIR [--frames 32] [--size 112] [--seed 1]\n"
          "  Writes DIR/<class>/clip_NNNNN.mp4 for 4 classes (move_right, move_left, rotate_cw,\n"
          "  rotate_ccw; balanced), DIR/labels.txt (class names) and DIR/list.txt (`path label`).\n"
          "  Codec: %s. Same seed, same clips.\n",
          sp_video_writer_codec());
}

int sp_cli_synth_actions(int argc, char **argv) {
  const char *out = NULL;
  int count = 0, frames = 32, size = 112;
  unsigned long long seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "spry synth actions: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--count")) count = atoi(v);
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--frames")) frames = atoi(v);
    else if (!strcmp(a, "--size")) size = atoi(v);
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else {
      fprintf(stderr, "spry synth actions: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
    i++;
  }
  if (!out || count <= 0 || frames < 2 || size < 16 || size % 2) {
    usage(stderr);
    if (size % 2) fprintf(stderr, "spry synth actions: --size must be even (4:2:0 video)\n");
    return 2;
  }
  double t0 = sp_now();
  if (sp_synth_actions(out, count, frames, size, seed) != 0) {
    fprintf(stderr, "spry synth actions: %s\n", sp_last_error());
    return 1;
  }
  fprintf(stderr, "spry synth actions: %d clips of %d frames %dx%d (%s) in %s, %.1f s\n", count, frames, size, size,
          sp_video_writer_codec(), out, sp_now() - t0);
  return 0;
}
