/* The spry command line: one function per (sub)command, each in its own file.
 * main.c only dispatches on the first words. */
#ifndef SPRY_CLI_H
#define SPRY_CLI_H

int sp_cli_bench(int argc, char **argv);         /* bench.c: dispatches below */
int sp_cli_bench_train(int argc, char **argv);   /* bench_train.c */
int sp_cli_bench_data(int argc, char **argv);    /* bench_data.c */
int sp_cli_bench_peak(int argc, char **argv);    /* bench_peak.c */
int sp_cli_train(int argc, char **argv);         /* train.c */
int sp_cli_eval(int argc, char **argv);          /* eval.c */
int sp_cli_predict(int argc, char **argv);       /* predict.c */
int sp_cli_detect(int argc, char **argv);        /* detect.c */
int sp_cli_morph(int argc, char **argv);         /* morph.c */
int sp_cli_synth(int argc, char **argv);         /* synth.c: faces | actions */
int sp_cli_synth_actions(int argc, char **argv); /* synth_actions.c */

int sp_cli_video(int argc, char **argv);       /* video.c: info | frames */
int sp_cli_prepare(int argc, char **argv);     /* prepare.c: frames | list */
int sp_cli_bench_video(int argc, char **argv); /* bench_video.c */
#endif
