/* The foundry CLI's commands. Each one parses its own arguments (argv[0] is
 * the command name), prints its help with the *_help function, and returns
 * a process exit code: FDY_EXIT_OK, FDY_EXIT_FAILURE or FDY_EXIT_USAGE. */
#ifndef FOUNDRY_CLI_COMMANDS_H
#define FOUNDRY_CLI_COMMANDS_H

#include <stdio.h>

int fdy_cmd_plan(int argc, char **argv);
void fdy_cmd_plan_help(FILE *out);

int fdy_cmd_bench(int argc, char **argv);
void fdy_cmd_bench_help(FILE *out);

int fdy_cmd_inspect(int argc, char **argv);
void fdy_cmd_inspect_help(FILE *out);

int fdy_cmd_manifest(int argc, char **argv);
void fdy_cmd_manifest_help(FILE *out);

int fdy_cmd_make_model(int argc, char **argv);
void fdy_cmd_make_model_help(FILE *out);

int fdy_cmd_generate(int argc, char **argv);
void fdy_cmd_generate_help(FILE *out);

int fdy_cmd_chat(int argc, char **argv);
void fdy_cmd_chat_help(FILE *out);

int fdy_cmd_verify(int argc, char **argv);
void fdy_cmd_verify_help(FILE *out);

int fdy_cmd_infer_bench(int argc, char **argv);
void fdy_cmd_infer_bench_help(FILE *out);

int fdy_cmd_tokenize(int argc, char **argv);
void fdy_cmd_tokenize_help(FILE *out);

int fdy_cmd_detokenize(int argc, char **argv);
void fdy_cmd_detokenize_help(FILE *out);

/* Built with libmicrohttpd only (FOUNDRY_HAVE_SERVE). */
int fdy_cmd_serve(int argc, char **argv);
void fdy_cmd_serve_help(FILE *out);

#endif
