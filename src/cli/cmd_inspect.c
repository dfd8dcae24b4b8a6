/* Placeholder for `foundry inspect`; replaced by its implementation. */
#include "cli_util.h"
#include "commands.h"

int fdy_cmd_inspect(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "foundry: error: inspect is not implemented yet\n");
  return FDY_EXIT_FAILURE;
}

void fdy_cmd_inspect_help(FILE *out) {
  fprintf(out, "usage: foundry inspect (not implemented yet)\n");
}
