/* Video commands (src/cli/eval_video.c, bench_op.c), kept out of cli.h so
 * that the video work touches the shared CLI files by one call each. */
#ifndef SPRY_CLI_VIDEO_H
#define SPRY_CLI_VIDEO_H

/* 1 when `spry eval` is about video: --task video, a CONFIG with task: video,
 * or --weights whose stored config has it. */
int sp_cli_eval_is_video(int argc, char **argv);
int sp_cli_eval_video(int argc, char **argv);
/* `spry bench op tshift ...` */
int sp_cli_bench_op(int argc, char **argv);

#endif
