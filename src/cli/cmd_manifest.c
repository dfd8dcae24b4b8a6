/* `foundry manifest DIR [--out FILE]`: the SHA-256 and size of every file of
 * a checkpoint directory (include/foundry/manifest.h), as the manifest that
 * --manifest pins a run to; on stdout, or into FILE (never overwritten). */
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

/* The command's options, as parsed. */
typedef struct manifest_args {
  const char *out; /* NULL: standard output */
} manifest_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("out", manifest_args, out)},
    {FDY_CLI_END},
};

int fdy_cmd_manifest(int argc, char **argv) {
  manifest_args a = {.out = NULL};
  int operand = argc;
  int code = fdy_cli_parse_flags("manifest", argc, argv, flags, &a, &operand);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (operand != argc - 1) {
    return fdy_cli_usage("manifest", "give exactly one DIR");
  }
  fdy_error err;
  if (a.out && fdy_new_file_check(a.out, &err) != FDY_OK) {
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
  if (a.out) {
    if (fdy_write_new_text_file(a.out, text, &err) != FDY_OK) {
      code = fdy_cli_fail(&err);
    }
  } else {
    printf("%s\n", text);
  }
  free(text);
  return code;
}
