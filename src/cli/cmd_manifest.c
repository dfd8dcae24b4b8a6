/* `foundry manifest DIR [--out FILE]`: the SHA-256 and size of every file of
 * a checkpoint directory (include/foundry/manifest.h), as the manifest that
 * --manifest pins a run to; on stdout, or into FILE (never overwritten). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/manifest.h"
#include "foundry/new_file.h"

void fdy_cmd_manifest_help(FILE *out) {
  fprintf(out,
          "usage: foundry manifest DIR [--out FILE]\n"
          "\n"
          "Hashes every file of the checkpoint directory DIR (regular\n"
          "files, symbolic links followed, names not starting with '.')\n"
          "and prints the manifest: the JSON list of each file's name,\n"
          "size and SHA-256. generate, verify and infer-bench take it\n"
          "with --manifest FILE and refuse, before any work, a directory\n"
          "whose files differ from it.\n"
          "\n"
          "  --out FILE   write the manifest into FILE (never overwritten)\n"
          "               instead of standard output\n");
}

enum { OPT_OUT = 256 };

static const struct option options[] = {
    {"out", required_argument, NULL, OPT_OUT},
    {NULL, 0, NULL, 0},
};

static fdy_status parse_option(void *p, int opt, const char *arg, bool *handled,
                               fdy_error *err) {
  (void)err;
  const char **out_path = p;
  *handled = opt == OPT_OUT;
  if (*handled) {
    *out_path = arg;
  }
  return FDY_OK;
}

int fdy_cmd_manifest(int argc, char **argv) {
  const char *out_path = NULL;
  int operand = argc;
  int code = fdy_cli_parse_options("manifest", argc, argv, options,
                                   parse_option, &out_path, &operand);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (operand != argc - 1) {
    return fdy_cli_usage("manifest", "give exactly one DIR");
  }
  fdy_error err;
  if (out_path && fdy_new_file_check(out_path, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  fdy_manifest manifest;
  if (fdy_manifest_of_dir(argv[operand], &manifest, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  char *text = fdy_manifest_json(&manifest);
  fdy_manifest_free(&manifest);
  if (!text) {
    fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    return fdy_cli_fail(&err);
  }
  code = FDY_EXIT_OK;
  if (out_path) {
    if (fdy_write_new_text_file(out_path, text, &err) != FDY_OK) {
      code = fdy_cli_fail(&err);
    }
  } else {
    printf("%s\n", text);
  }
  free(text);
  return code;
}
