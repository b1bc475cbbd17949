/* `spry synth actions --count N --out DIR`: the synthetic motion-direction
 * clip set (see src/video/synth.c for why its classes need time). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
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
  if (sp_arg_wants_help(argc, argv)) return usage(stdout), 0;
  const char *out = NULL;
  int count = 0, frames = 32, size = 112;
  int64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    /* Each option names itself and its range when its value is wrong. */
    const char *seed_s = NULL;
    int r;
    if ((r = sp_arg_int(argc, argv, &i, "--count", 1, 10000000, &count)) ||
        (r = sp_arg_str(argc, argv, &i, "--out", &out)) ||
        (r = sp_arg_int(argc, argv, &i, "--frames", 2, 10000, &frames)) ||
        (r = sp_arg_int(argc, argv, &i, "--size", 16, 4096, &size)) ||
        (r = sp_arg_str(argc, argv, &i, "--seed", &seed_s))) {
      if (r < 0) return 2;
      if (seed_s && sp_parse_int64(seed_s, 0, INT64_MAX, &seed) != 0) {
        fprintf(stderr, "spry synth actions: --seed wants a non-negative integer, got '%s'\n", seed_s);
        return 2;
      }
      continue;
    }
    fprintf(stderr, "spry synth actions: unknown option %s\n", argv[i]);
    usage(stderr);
    return 2;
  }
  if (!out || !count) {
    fprintf(stderr, "spry synth actions: --count and --out are required\n");
    usage(stderr);
    return 2;
  }
  if (size % 2) {
    fprintf(stderr, "spry synth actions: --size %d must be even (4:2:0 video)\n", size);
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
