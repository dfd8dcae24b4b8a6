/* Placeholder for `foundry generate`; replaced by its implementation. */
#include "cli_util.h"
#include "commands.h"

int fdy_cmd_generate(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "foundry: error: generate is not implemented yet\n");
  return FDY_EXIT_FAILURE;
}

void fdy_cmd_generate_help(FILE *out) {
  fprintf(out, "usage: foundry generate (not implemented yet)\n");
}
