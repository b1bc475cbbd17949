#include <stdio.h>
#include "cli/cli.h"
int sp_cli_bench_data(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "not yet\n"); return 1; }
