/* Placeholder for `foundry make-model`; replaced by its implementation. */
#include "cli_util.h"
#include "commands.h"

int fdy_cmd_make_model(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "foundry: error: make-model is not implemented yet\n");
  return FDY_EXIT_FAILURE;
}

void fdy_cmd_make_model_help(FILE *out) {
  fprintf(out, "usage: foundry make-model (not implemented yet)\n");
}
