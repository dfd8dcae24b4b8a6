/* Placeholder for `foundry verify`; replaced by its implementation. */
#include "cli_util.h"
#include "commands.h"

int fdy_cmd_verify(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "foundry: error: verify is not implemented yet\n");
  return FDY_EXIT_FAILURE;
}

void fdy_cmd_verify_help(FILE *out) {
  fprintf(out, "usage: foundry verify (not implemented yet)\n");
}
