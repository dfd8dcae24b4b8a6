/* The foundry command-line tool: dispatches `foundry COMMAND ARGS...` to the
 * command implementations in cmd_*.c and handles --help, --version and
 * `foundry help COMMAND`. Exit codes: 0 success, 1 failure, 2 usage error. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/build_info.h"
#include "foundry/core.h"
#include "foundry/tokenizer.h"

typedef struct command_entry {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv);
  void (*help)(FILE *out);
} command_entry;

static const command_entry commands[] = {
    {"bench", "stream a synthetic workload through 1, 2 and 3 buffers",
     fdy_cmd_bench, fdy_cmd_bench_help},
    {"plan", "export or check an execution plan", fdy_cmd_plan,
     fdy_cmd_plan_help},
    {"inspect", "summarize a Llama MLX 4-bit checkpoint", fdy_cmd_inspect,
     fdy_cmd_inspect_help},
    {"manifest", "the SHA-256 of every file of a checkpoint", fdy_cmd_manifest,
     fdy_cmd_manifest_help},
    {"generate", "greedy Llama generation from a prompt", fdy_cmd_generate,
     fdy_cmd_generate_help},
    {"chat", "talk with a Llama 3 Instruct checkpoint", fdy_cmd_chat,
     fdy_cmd_chat_help},
    {"tokenize", "text to Llama 3 token ids", fdy_cmd_tokenize,
     fdy_cmd_tokenize_help},
    {"detokenize", "Llama 3 token ids to text", fdy_cmd_detokenize,
     fdy_cmd_detokenize_help},
    {"verify", "compare a model's outputs with a reference", fdy_cmd_verify,
     fdy_cmd_verify_help},
    {"infer-bench", "measure Llama inference end to end (report)",
     fdy_cmd_infer_bench, fdy_cmd_infer_bench_help},
    {"make-model", "write a random-weight Llama checkpoint", fdy_cmd_make_model,
     fdy_cmd_make_model_help},
#ifdef FOUNDRY_HAVE_SERVE
    {"serve", "an OpenAI-compatible HTTP server", fdy_cmd_serve,
     fdy_cmd_serve_help},
#endif
};

static const command_entry *find_command(const char *name) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(commands[i].name, name) == 0) {
      return &commands[i];
    }
  }
  return NULL;
}

static void print_usage(FILE *out) {
  fprintf(out, "usage: foundry COMMAND [ARGS...]\n"
               "\n"
               "Foundry streams workloads whose weights do not fit in device\n"
               "memory through a fixed device budget.\n"
               "\n"
               "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    fprintf(out, "  %-11s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf(out, "\n"
               "  foundry help COMMAND   help for one command\n"
               "  foundry --version      version and build provenance\n");
}

static void print_version(void) {
  const fdy_build_info *info = fdy_build_info_get();
  printf("foundry %s\n", fdy_version());
  printf("commit %s%s\n", info->git_commit, info->git_dirty ? " (dirty)" : "");
  printf("compiler %s, %s build, sanitizers %s, CUDA backend %s (%s)\n",
         info->compiler, info->build_type, info->sanitizers, info->cuda,
         info->cuda_note);
  printf("tokenizer NFC normalizer %s\n", fdy_tokenizer_nfc_available()
                                              ? "ON (ICU)"
                                              : "OFF (built without ICU)");
}

static void print_help_help(FILE *out) {
  fprintf(out, "usage: foundry help [COMMAND]\n"
               "\n"
               "Without COMMAND, lists the commands; with one, prints its\n"
               "help (the same as 'foundry COMMAND --help').\n");
}

/* `foundry help [COMMAND]`; argv[0] is "help". */
static int run_help(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stdout);
    return FDY_EXIT_OK;
  }
  if (argc > 2) {
    return fdy_cli_usage("help", "expected one command name");
  }
  if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    print_help_help(stdout);
    return FDY_EXIT_OK;
  }
  const command_entry *entry = find_command(argv[1]);
  if (!entry) {
    fprintf(stderr, "foundry: unknown command '%s'\n", argv[1]);
    print_usage(stderr);
    return FDY_EXIT_USAGE;
  }
  entry->help(stdout);
  return FDY_EXIT_OK;
}

/* Dispatches; every exit code goes through fdy_cli_finish_stdout. */
static int run(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return FDY_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
    print_usage(stdout);
    return FDY_EXIT_OK;
  }
  if (strcmp(name, "--version") == 0) {
    print_version();
    return FDY_EXIT_OK;
  }
  if (strcmp(name, "help") == 0) {
    return run_help(argc - 1, argv + 1);
  }
  const command_entry *entry = find_command(name);
  if (!entry) {
    fprintf(stderr, "foundry: unknown command '%s'\n", name);
    print_usage(stderr);
    return FDY_EXIT_USAGE;
  }
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      entry->help(stdout);
      return FDY_EXIT_OK;
    }
  }
  int code = fdy_cli_check_arguments(name, argc - 1, argv + 1);
  return code != FDY_EXIT_OK ? code : entry->run(argc - 1, argv + 1);
}

int main(int argc, char **argv) {
  /* A write past the file size limit (ulimit -f) then fails with EFBIG,
   * which every writer reports, removing its temporary, instead of the
   * process dying of SIGXFSZ with the temporary left behind. */
  signal(SIGXFSZ, SIG_IGN);
  return fdy_cli_finish_stdout(run(argc, argv));
}
