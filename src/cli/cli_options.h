/* The one getopt_long loop of the CLI commands: each command's parse step
 * gives its option table and a function that parses one option into its
 * options struct; the loop refuses a flag given twice, a missing value,
 * an unknown option, a bad value and (unless the command takes them)
 * operands, each as the same usage error in every command. */
#ifndef FOUNDRY_CLI_OPTIONS_H
#define FOUNDRY_CLI_OPTIONS_H

#include <stdbool.h>

#include "cli_draft.h"
#include "cli_util.h"

struct option;

/* Parses option opt (its value arg, NULL for a flag without one) into
 * options; opt is '?' for one not in the table (argv[optind - 1]). Sets
 * *handled false for an option it does not know (the loop then reports it
 * as unknown). A bad value is an error in err, whose
 * message the loop prints as the usage error. */
typedef fdy_status (*fdy_cli_option_fn)(void *options, int opt, const char *arg,
                                        bool *handled, fdy_error *err);

/* Runs fdy_cli_check_repeats, then getopt_long over argv (":" as the short
 * options, opterr off) with table, calling fn for each option. Usage
 * errors of COMMAND (FDY_EXIT_USAGE): "--x needs a value", "unknown option
 * '--x'", the message of fn's error, and, when operands is NULL,
 * "unexpected argument 'A'" for the first operand. When operands is not
 * NULL, *operands is the index in argv of the first operand (argc when
 * none; getopt_long moves them to the end). Returns FDY_EXIT_OK when
 * every option parsed. */
int fdy_cli_parse_options(const char *command, int argc, char **argv,
                          const struct option *table, fdy_cli_option_fn fn,
                          void *options, int *operands);

/* The flags of text generation that generate and chat share, parsed once
 * here: --tokenizer FILE, --system TEXT, --chat-template VALUE
 * (fdy_cli_parse_chat_template) and --max-tokens N (1 to 2^32 - 1). */
typedef struct fdy_cli_text_flags {
  const char *tokenizer;           /* NULL: the model directory's */
  const char *system;              /* NULL: no system message */
  fdy_chat_template template_kind; /* AUTO unless given */
  const char *template_file;       /* a Jinja template file */
  uint64_t max_tokens;             /* 0: not given */
} fdy_cli_text_flags;

enum {
  FDY_CLI_OPT_TOKENIZER = 0x1300,
  FDY_CLI_OPT_SYSTEM,
  FDY_CLI_OPT_CHAT_TEMPLATE,
  FDY_CLI_OPT_MAX_TOKENS
};

/* clang-format off */
#define FDY_CLI_TEXT_OPTIONS                                                   \
  {"tokenizer", required_argument, NULL, FDY_CLI_OPT_TOKENIZER},               \
  {"system", required_argument, NULL, FDY_CLI_OPT_SYSTEM},                     \
  {"chat-template", required_argument, NULL, FDY_CLI_OPT_CHAT_TEMPLATE},       \
  {"max-tokens", required_argument, NULL, FDY_CLI_OPT_MAX_TOKENS}
/* clang-format on */

/* Parses option opt into flags when it is one of the text options
 * (*handled true), else leaves flags alone (*handled false). A bad
 * --max-tokens is FDY_ERR_INVALID_ARGUMENT naming it: a usage error. */
fdy_status fdy_cli_text_flag(int opt, const char *arg,
                             fdy_cli_text_flags *flags, bool *handled,
                             fdy_error *err);

/* The flags that the session commands share, in one place: opt through
 * fdy_cli_session_flag into session, then fdy_cli_sampling_flag into
 * sampling, fdy_cli_draft_flag into draft and fdy_cli_text_flag into text
 * (each skipped when NULL, for a command without those flags). *handled
 * false when none takes it. */
fdy_status fdy_cli_shared_flag(int opt, const char *arg,
                               fdy_cli_session_flags *session,
                               fdy_cli_sampling_flags *sampling,
                               fdy_cli_draft_flags *draft,
                               fdy_cli_text_flags *text, bool *handled,
                               fdy_error *err);

#endif
