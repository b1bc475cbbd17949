/* spry: command-line entry point. Subcommands live in their own files. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "spry/common.h"

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *help;
} command;

static const command commands[] = {
    {"train", sp_cli_train, "train a keypoint or (task: video) video model from a YAML config"},
    {"eval", sp_cli_eval,
     "accuracy of a checkpoint: mean px, NME, FR, AUC, CED plot; video: top-1/top-5 (JSON last line)"},
    {"predict", sp_cli_predict, "faces and keypoints of new photos as JSON (original pixels), optional overlay PNG"},
    {"detect", sp_cli_detect, "face boxes of photos as JSON (the face detector predict uses)"},
    {"morph", sp_cli_morph, "face morph A -> B from predicted (or given) keypoints: frames, points.png, morph.gif"},
    {"synth", sp_cli_synth, "synthetic data: synth faces (68-point keypoints) | synth actions"},
    {"video", sp_cli_video, "inspect a video: video info FILE | video frames FILE --index ... --out DIR"},
    {"prepare", sp_cli_prepare, "video datasets: prepare frames (pre-decode to JPEG) | prepare list"},
    {"bench", sp_cli_bench, "measure speed (JSON lines): bench train | data | video | op tshift | peak"},
};

static void usage(FILE *f) {
  fprintf(f, "spry %s: fast facial-keypoint and video CNN training in C\n\nusage: spry COMMAND [args]\n\n",
          SPRY_VERSION);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\nRun `spry COMMAND --help` (or `spry help COMMAND`) for a command's options.\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("spry %s\n", SPRY_VERSION);
    return 0;
  }
  /* `spry help` and `spry help CMD [SUB]`: the same text as --help. */
  if (!strcmp(argv[1], "help")) {
    if (argc == 2) return usage(stdout), 0;
    char *help_argv[4] = {argv[2], argc > 3 ? argv[3] : "--help", argc > 3 ? "--help" : NULL, NULL};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(argv[2], commands[i].name)) return commands[i].run(argc > 3 ? 3 : 2, help_argv);
    fprintf(stderr, "spry: unknown command '%s'\n\n", argv[2]);
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "spry: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 2;
}
