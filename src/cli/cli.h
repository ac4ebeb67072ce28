/* Shared pieces of the `mtf` command line: exit codes and the subcommand entry points. */
#ifndef MTF_CLI_CLI_H
#define MTF_CLI_CLI_H

#include <stdio.h>

/* Exit codes scripts can rely on (documented in the README). */
enum { MTF_EXIT_OK = 0, MTF_EXIT_FAILURE = 1, MTF_EXIT_USAGE = 2 };

void mtf_print_version(FILE *out);
/* `mtf --version [--set backend.KEY=VALUE ...]`: the version, then the backend's description (pjrt). */
int mtf_cmd_version(int argc, char **argv);
/* Where OpenBLAS does not know this CPU and loaded its generic kernels, runs mtf again (argv) with
 * OPENBLAS_CORETYPE naming the ones for its instructions (blas_kernels.c); returns where nothing is to be done. */
void mtf_cli_choose_blas_kernels(char **argv);

int mtf_cmd_layout(int argc, char **argv);
int mtf_cmd_commcheck(int argc, char **argv);
int mtf_cmd_train(int argc, char **argv);
int mtf_cmd_eval(int argc, char **argv);
int mtf_cmd_generate(int argc, char **argv);
int mtf_cmd_plan(int argc, char **argv);
int mtf_cmd_data(int argc, char **argv);
int mtf_cmd_ckpt(int argc, char **argv);

#endif
