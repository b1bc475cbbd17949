/* `spry bench op tshift --shape NT,C,H,W --segments S --ratio R [--runs N]`
 *
 * The fused temporal shift against the composed version the seed's Python
 * builds from framework ops and a parallel memcpy of the same bytes; the
 * measuring is sp_bench_tshift (train/bench_op.c, spry/bench.h), this file
 * parses and prints. One JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_video.h"
#include "io/json.h"
#include "spry/bench.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: spry bench op tshift --shape NT,C,H,W --segments S --ratio R [--runs N] [--threads T]\n"
          "  the fused temporal shift (the cpu backend's kernel in nChw16c, and the reference op)\n"
          "  against the seed's composed version (pad, three slices, concat; and their backward)\n"
          "  and a parallel memcpy of the same bytes; one JSON line. --ratio: 0.125 or 1/8\n");
}

/* Options into *o (the shape as typed into *shape_s, for the JSON line).
 * ARGS_PARSED, or the exit status: ARGS_HELP_SHOWN after --help, ARGS_BAD after a
 * message. */
static int parse_args(int argc, char **argv, sp_bench_tshift_options *o, const char **shape_s) {
  for (int i = 2; i < argc; i++) {
    int r;
    const char *rs = NULL;
    if ((r = sp_arg_str(argc, argv, &i, "--shape", shape_s)) ||
        (r = sp_arg_int(argc, argv, &i, "--segments", 1, 4096, &o->segments)) ||
        (r = sp_arg_int(argc, argv, &i, "--runs", 1, 100000, &o->runs)) ||
        (r = sp_arg_int(argc, argv, &i, "--threads", 1, 1024, &o->threads)) ||
        (r = sp_arg_str(argc, argv, &i, "--ratio", &rs))) {
      if (r < 0) return ARGS_BAD;
      if (rs) {
        /* "1/8" or "0.125" */
        int a, b;
        o->ratio = sscanf(rs, "%d/%d", &a, &b) == 2 && b ? (float)a / b : (float)atof(rs);
      }
      continue;
    }
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), ARGS_HELP_SHOWN;
    fprintf(stderr, "spry bench op: unknown option %s\n", argv[i]);
    usage(stderr);
    return ARGS_BAD;
  }
  long long d[4];
  if (sscanf(*shape_s, "%lld,%lld,%lld,%lld", &d[0], &d[1], &d[2], &d[3]) != 4 || d[0] % o->segments || d[0] < 1 ||
      d[1] < 1 || d[2] < 1 || d[3] < 1) {
    fprintf(stderr, "spry bench op: --shape must be NT,C,H,W with NT a multiple of --segments\n");
    return ARGS_BAD;
  }
  for (int k = 0; k < 4; k++) o->shape[k] = d[k];
  /* Two shifted groups of ratio * C channels each must fit in C. */
  if (!(o->ratio >= 0 && o->ratio <= 0.5f)) {
    fprintf(stderr,
            "spry bench op: --ratio must be in [0, 0.5] (each of the two shifted groups is ratio * C channels)\n");
    return ARGS_BAD;
  }
  double need, have;
  if (!sp_bench_tshift_fits(o, &need, &have)) {
    fprintf(stderr, "spry bench op: --shape %s needs about %.1f GB, this machine has %.1f GB\n", *shape_s, need / 1e9,
            have / 1e9);
    return ARGS_BAD;
  }
  return ARGS_PARSED;
}

static void print_result(const sp_bench_tshift_options *o, const char *shape_s, const sp_bench_tshift_result *r) {
  sp_json_buf b;
  sp_json_buf_init(&b);
  sp_json_obj_begin(&b);
  sp_json_key(&b, "bench"), sp_json_str(&b, "op_tshift");
  sp_json_key(&b, "shape"), sp_json_str(&b, shape_s);
  sp_json_key(&b, "segments"), sp_json_int(&b, o->segments);
  sp_json_key(&b, "ratio"), sp_json_f64(&b, o->ratio);
  sp_json_key(&b, "threads"), sp_json_int(&b, r->threads);
  sp_json_key(&b, "runs"), sp_json_int(&b, o->runs);
  sp_json_key(&b, "kernel"), sp_json_str(&b, r->kernel);
  sp_json_key(&b, "fwd_ms"), sp_json_f64(&b, r->fwd_ms);
  sp_json_key(&b, "fwdbwd_ms"), sp_json_f64(&b, r->fwdbwd_ms);
  sp_json_key(&b, "ref_fwd_ms"), sp_json_f64(&b, r->ref_fwd_ms);
  sp_json_key(&b, "ref_fwdbwd_ms"), sp_json_f64(&b, r->ref_fwdbwd_ms);
  sp_json_key(&b, "composed_fwd_ms"), sp_json_f64(&b, r->composed_fwd_ms);
  sp_json_key(&b, "composed_fwdbwd_ms"), sp_json_f64(&b, r->composed_fwdbwd_ms);
  sp_json_key(&b, "memcpy_ms"), sp_json_f64(&b, r->memcpy_ms);
  sp_json_key(&b, "speedup_vs_composed"), sp_json_f64(&b, r->composed_fwdbwd_ms / r->fwdbwd_ms);
  sp_json_key(&b, "speedup_vs_composed_fwd"), sp_json_f64(&b, r->composed_fwd_ms / r->fwd_ms);
  sp_json_key(&b, "fwd_vs_memcpy"), sp_json_f64(&b, r->fwd_ms / r->memcpy_ms);
  sp_json_key(&b, "same_output"), sp_json_bool(&b, r->same_output);
  sp_json_obj_end(&b);
  printf("%s\n", b.s);
  sp_json_buf_free(&b);
}

int sp_cli_bench_op(int argc, char **argv) {
  int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
  if (help || argc < 2 || strcmp(argv[1], "tshift")) {
    usage(help ? stdout : stderr);
    return help ? 0 : 2;
  }
  sp_bench_tshift_options o = sp_bench_tshift_options_default();
  const char *shape_s = "32,16,32,32";
  int rc = parse_args(argc, argv, &o, &shape_s);
  if (rc != ARGS_PARSED) return rc;
  sp_bench_tshift_result r;
  if (sp_bench_tshift(&o, &r) != 0) {
    fprintf(stderr, "spry bench op: %s\n", sp_last_error());
    return 2;
  }
  print_result(&o, shape_s, &r);
  return 0;
}
