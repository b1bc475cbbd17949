/* `spry synth faces ...` renders a synthetic keypoint dataset;
 * `spry synth actions ...` is dispatched to synth_actions.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/common.h"
#include "spry/synth.h"

static void usage_faces(FILE *f) {
  fprintf(f,
          "usage: spry synth faces --count N --out DIR [--seed S] [--size MIN,MAX] [--per-identity P]\n"
          "                        [--threads T] [--plain] [--quiet]\n"
          "  Writes DIR/images/Synth_Person_<id>_<v><f>.jpg and DIR/keypoints.csv (the youtube_faces_68\n"
          "  layout, iBUG 68 points). Same seed, same bytes.\n"
          "  --size MIN,MAX   image side range in pixels (default 96,320)\n"
          "  --per-identity P images per synthetic person (default 12)\n"
          "  --plain          no background clutter, blur, noise, hair or ears (for debugging)\n");
}

static int parse_range(const char *s, int *lo, int *hi) {
  char *end;
  long a = strtol(s, &end, 10), b = a;
  if (*end == ',') b = strtol(end + 1, &end, 10);
  if (*end || a < 16 || b < a || b > 8192) return -1;
  *lo = (int)a;
  *hi = (int)b;
  return 0;
}

static int synth_faces(int argc, char **argv) {
  if (sp_arg_wants_help(argc, argv)) return usage_faces(stdout), 0;
  sp_synth_face_options opt = sp_synth_face_defaults();
  int count = 0, plain = 0, quiet = 0;
  const char *out = NULL, *seed_s = NULL, *size_s = NULL;
  for (int i = 1; i < argc; i++) {
    int r;
    if ((r = sp_arg_int(argc, argv, &i, "--count", 1, 10000000, &count)) ||
        (r = sp_arg_str(argc, argv, &i, "--out", &out)) || (r = sp_arg_str(argc, argv, &i, "--seed", &seed_s)) ||
        (r = sp_arg_str(argc, argv, &i, "--size", &size_s)) ||
        (r = sp_arg_int(argc, argv, &i, "--per-identity", 1, 30, &opt.per_identity)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 0, 1024, &opt.threads)) ||
        (r = sp_arg_flag(argv, i, "--plain", &plain)) || (r = sp_arg_flag(argv, i, "--quiet", &quiet))) {
      if (r < 0) return 2;
      continue;
    }
    fprintf(stderr, "spry synth faces: unknown option '%s'\n", argv[i]);
    usage_faces(stderr);
    return 2;
  }
  if (!count || !out) {
    fprintf(stderr, "spry synth faces: --count and --out are required\n");
    usage_faces(stderr);
    return 2;
  }
  uint64_t seed = 1;
  if (seed_s) {
    char *end;
    errno = 0;
    seed = strtoull(seed_s, &end, 10);
    if (!*seed_s || *end || seed_s[0] == '-' || errno == ERANGE) { /* strtoull wraps "-1" around */
      fprintf(stderr, "spry synth faces: --seed wants a non-negative integer, got '%s'\n", seed_s);
      return 2;
    }
  }
  if (size_s && parse_range(size_s, &opt.min_size, &opt.max_size) != 0) {
    fprintf(stderr, "spry synth faces: --size wants MIN,MAX with 16 <= MIN <= MAX <= 8192, got '%s'\n", size_s);
    return 2;
  }
  if (plain) {
    opt.clutter = 0;
    opt.blur_prob = 0;
    opt.noise_max = 0;
    opt.hair_prob = 0;
    opt.ear_prob = 0;
  }
  opt.progress = !quiet;
  double t0 = sp_now();
  if (sp_synth_faces(out, count, seed, &opt) != 0) {
    fprintf(stderr, "spry synth faces: %s\n", sp_last_error());
    return 1;
  }
  if (!quiet)
    fprintf(stderr, "spry synth faces: wrote %d images of %d people to %s in %.1f s\n", count,
            (count + opt.per_identity - 1) / opt.per_identity, out, sp_now() - t0);
  return 0;
}

int sp_cli_synth(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    FILE *f = argc < 2 ? stderr : stdout;
    usage_faces(f);
    char *help[2] = {"actions", "--help"};
    if (argc < 2)
      fprintf(f, "       spry synth actions --count N --out DIR ... (spry synth actions --help)\n");
    else
      sp_cli_synth_actions(2, help); /* its full usage, on stdout */
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "faces")) return synth_faces(argc - 1, argv + 1);
  if (!strcmp(argv[1], "actions")) return sp_cli_synth_actions(argc - 1, argv + 1);
  fprintf(stderr, "spry synth: unknown kind '%s' (faces, actions)\n", argv[1]);
  return 2;
}
