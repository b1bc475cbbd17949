/* `spry prepare frames|list`: dataset preparation for video training.
 *   frames: pre-decode a `path label` list into JPEG frame folders
 *   list:   build the `path label` list from class sub-folders or a csv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "spry/video.h"

static void usage_frames(FILE *f) {
  fprintf(f,
          "usage: spry prepare frames --list LIST --out DIR [--size S] [--quality Q] [--workers W]\n"
          "  decodes every clip of LIST to DIR/<name>/img_00001.jpg ... (+ n_frames) and writes\n"
          "  DIR/frames.list (`name n_frames label`); --size S resizes the short side first\n"
          "  (at most %d). A clip that fails leaves no folder, and the exit status is 1.\n",
          SP_VIDEO_MAX_SHORT_SIDE);
}

static void usage_list(FILE *f) {
  fprintf(f,
          "usage: spry prepare list DIR --out LIST [--labels FILE] [--split FILE]\n"
          "  one `path label` line per clip of DIR/<class>/, labels from 0, and labels.txt\n"
          "  beside LIST (line k names label k). The class order comes from --labels FILE: a\n"
          "  classes file, one name per line (labels.txt) or UCF-101's classInd.txt (`1 name`\n"
          "  lines, numbered from 1), or `relative_path,label` pairs from a csv; without it\n"
          "  from DIR/labels.txt when there is one (what `spry synth actions` writes), else\n"
          "  the class folders sorted by name.\n"
          "  --split FILE: only the clips a UCF-style split names (`Class/clip.avi` below DIR,\n"
          "  labelled in the classes file's numbering, as in trainlist01.txt, or unlabelled,\n"
          "  as in testlist01.txt: the class folder says), in its order; every label must\n"
          "  agree with its class folder. Needs a classes file.\n");
}

static void usage(FILE *f) {
  usage_frames(f);
  usage_list(f);
}

/* --name's value v as an integer in [lo, hi]; -1 after saying what is wrong. */
static int int_option(const char *name, const char *v, int lo, int hi, const char *what, int *out) {
  int64_t x;
  if (sp_parse_int64(v, lo, hi, &x) != 0) {
    fprintf(stderr, "spry prepare frames: %s wants an integer in [%d, %d]%s, got '%s'\n", name, lo, hi, what, v);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int prepare_frames(int argc, char **argv) {
  const char *list = NULL, *out = NULL;
  sp_prepare_config cfg = {0, 90, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage_frames(stdout);
      return 0;
    }
    if (!v) {
      fprintf(stderr, "spry prepare frames: %s needs a value\n", a);
      return 2;
    }
    /* Numbers are checked here, before anything is made on disk. */
    if (!strcmp(a, "--list"))
      list = v;
    else if (!strcmp(a, "--out"))
      out = v;
    else if (!strcmp(a, "--size")) {
      if (int_option(a, v, 0, SP_VIDEO_MAX_SHORT_SIDE, " (short side in px, 0 = native)", &cfg.short_side)) return 2;
    } else if (!strcmp(a, "--quality")) {
      if (int_option(a, v, 1, 100, "", &cfg.quality)) return 2;
    } else if (!strcmp(a, "--workers")) {
      if (int_option(a, v, 0, 1024, " (0 = one per core)", &cfg.workers)) return 2;
    } else {
      fprintf(stderr, "spry prepare frames: unknown option %s\n", a);
      usage_frames(stderr);
      return 2;
    }
    i++;
  }
  if (!list || !out) {
    usage_frames(stderr);
    return 2;
  }
  double t0 = sp_now();
  int done = sp_prepare_frames(list, out, &cfg);
  if (done < 0) {
    fprintf(stderr, "spry prepare frames: %s\n", sp_last_error());
    return 1;
  }
  fprintf(stderr, "spry prepare frames: %d clips to %s/frames.list in %.1f s\n", done, out, sp_now() - t0);
  return 0;
}

static int prepare_list(int argc, char **argv) {
  const char *dir = NULL, *out = NULL, *labels = NULL, *split = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage_list(stdout);
      return 0;
    }
    if (a[0] != '-') {
      dir = a;
      continue;
    }
    if (!v) {
      fprintf(stderr, "spry prepare list: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--out"))
      out = v;
    else if (!strcmp(a, "--labels"))
      labels = v;
    else if (!strcmp(a, "--split"))
      split = v;
    else {
      fprintf(stderr, "spry prepare list: unknown option %s\n", a);
      usage_list(stderr);
      return 2;
    }
    i++;
  }
  if (!dir || !out) {
    usage_list(stderr);
    return 2;
  }
  int n = sp_video_list_build_split(dir, labels, split, out);
  if (n < 0) {
    fprintf(stderr, "spry prepare list: %s\n", sp_last_error());
    return 1;
  }
  fprintf(stderr, "spry prepare list: %d clips in %s\n", n, out);
  return 0;
}

int sp_cli_prepare(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "frames")) return prepare_frames(argc - 1, argv + 1);
  if (!strcmp(argv[1], "list")) return prepare_list(argc - 1, argv + 1);
  fprintf(stderr, "spry prepare: unknown command '%s' (frames, list)\n", argv[1]);
  return 2;
}
