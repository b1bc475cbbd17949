/* `spry bench KIND ...`: every benchmark prints one JSON object per line. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_video.h"

int sp_cli_bench(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: spry bench train --model M [--backend ref] [--batch B] [--steps N] ...\n"
            "       spry bench data --dataset DIR [--size S] [--batch B] [--workers W] [--cache]\n"
            "       spry bench video --sampler tsn|dense [--segments 8 | --frames 32 --stride 2] FILES...\n"
            "       spry bench op tshift --shape NT,C,H,W --segments S --ratio R [--runs N]\n"
            "       spry bench peak [--threads T] [--runs N]   (fp32 FMA, bf16 dot, copy: this machine's limits)\n");
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "train")) return sp_cli_bench_train(argc - 1, argv + 1);
  if (!strcmp(argv[1], "data")) return sp_cli_bench_data(argc - 1, argv + 1);
  if (!strcmp(argv[1], "video")) return sp_cli_bench_video(argc - 1, argv + 1);
  if (!strcmp(argv[1], "op")) return sp_cli_bench_op(argc - 1, argv + 1);
  if (!strcmp(argv[1], "peak")) return sp_cli_bench_peak(argc - 1, argv + 1);
  fprintf(stderr, "spry bench: unknown benchmark '%s' (train, data, video, op, peak)\n", argv[1]);
  return 2;
}
