/* Tiny option parsing shared by the subcommands: "--name value" pairs. */
#ifndef SPRY_CLI_ARGS_H
#define SPRY_CLI_ARGS_H

#include <stdint.h>

/* Each returns 1 when argv[*i] is the option (consuming its value), 0 when it
 * is not, and -1 (after printing a message naming the option) when the value
 * is missing or malformed. */
int sp_arg_int(int argc, char **argv, int *i, const char *name, int64_t lo, int64_t hi, int *out);
int sp_arg_str(int argc, char **argv, int *i, const char *name, const char **out);
int sp_arg_flag(char **argv, int i, const char *name, int *out);
/* 1 when any argument is --help or -h: the one help convention (help wins
 * over every other argument, and the usage goes to stdout with exit 0). */
int sp_arg_wants_help(int argc, char **argv);
/* A whole-string decimal integer in [lo, hi] (overflow is out of range):
 * 0, or -1 when s is not one. */
int sp_parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* "224" or "160x192" into h, w. */
int sp_parse_size(const char *s, int *h, int *w);
/* "x,y,w,h": four finite numbers (|v| <= 1e6), w and h > 0. 0, or -1 with
 * the reason in the error. */
int sp_parse_box(const char *s, float box[4]);
/* What a subcommand's own parse_args returns: ARGS_PARSED, or the exit
 * status (ARGS_HELP_SHOWN after --help, ARGS_BAD after a message). */
enum { ARGS_PARSED = -1, ARGS_HELP_SHOWN = 0, ARGS_BAD = 2 };
/* Median of n doubles (sorts in place). */
double sp_median(double *v, int n);

#endif
