/* The getopt_long loop of the CLI commands (cli_options.h). */
#include "cli_options.h"

#include <getopt.h>

int fdy_cli_parse_options(const char *command, int argc, char **argv,
                          const struct option *table, fdy_cli_option_fn fn,
                          void *options, int *operands) {
  const int repeated = fdy_cli_check_repeats(command, argc, argv, table);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", table, NULL)) != -1) {
    if (opt == ':') {
      return fdy_cli_usage(command, "%s needs a value", argv[optind - 1]);
    }
    fdy_error err;
    bool handled = false;
    fdy_status status = fn(options, opt, optarg, &handled, &err);
    if (!handled) {
      return fdy_cli_usage(command, "unknown option '%s'", argv[optind - 1]);
    }
    if (status != FDY_OK) {
      return fdy_cli_usage(command, "%s", err.message);
    }
  }
  if (operands) {
    *operands = optind;
  } else if (optind < argc) {
    return fdy_cli_usage(command, "unexpected argument '%s'", argv[optind]);
  }
  return FDY_EXIT_OK;
}

fdy_status fdy_cli_text_flag(int opt, const char *arg,
                             fdy_cli_text_flags *flags, bool *handled,
                             fdy_error *err) {
  *handled = true;
  switch (opt) {
  case FDY_CLI_OPT_TOKENIZER:
    flags->tokenizer = arg;
    return FDY_OK;
  case FDY_CLI_OPT_SYSTEM:
    flags->system = arg;
    return FDY_OK;
  case FDY_CLI_OPT_CHAT_TEMPLATE:
    fdy_cli_parse_chat_template(arg, &flags->template_kind,
                                &flags->template_file);
    return FDY_OK;
  case FDY_CLI_OPT_MAX_TOKENS:
    return fdy_cli_parse_uint("--max-tokens", arg, 1, UINT32_MAX,
                              &flags->max_tokens, err);
  default:
    *handled = false;
    return FDY_OK;
  }
}

fdy_status fdy_cli_shared_flag(int opt, const char *arg,
                               fdy_cli_session_flags *session,
                               fdy_cli_sampling_flags *sampling,
                               fdy_cli_draft_flags *draft,
                               fdy_cli_text_flags *text, bool *handled,
                               fdy_error *err) {
  fdy_status st = fdy_cli_session_flag(opt, arg, session, handled, err);
  if (!*handled && sampling) {
    st = fdy_cli_sampling_flag(opt, arg, sampling, handled, err);
  }
  if (!*handled && draft) {
    st = fdy_cli_draft_flag(opt, arg, draft, handled, err);
  }
  if (!*handled && text) {
    st = fdy_cli_text_flag(opt, arg, text, handled, err);
  }
  return st;
}
