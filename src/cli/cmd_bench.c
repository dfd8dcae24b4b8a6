/* Placeholder for `foundry bench`; replaced by its implementation. */
#include "cli_util.h"
#include "commands.h"

int fdy_cmd_bench(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "foundry: error: bench is not implemented yet\n");
  return FDY_EXIT_FAILURE;
}

void fdy_cmd_bench_help(FILE *out) {
  fprintf(out, "usage: foundry bench (not implemented yet)\n");
}
