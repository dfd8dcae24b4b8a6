/* Text prompts for the CLI: the tokenizer a command uses (an explicit file,
 * else the one in the model directory), a prompt turned into BOS + ids, and
 * generated ids written as text through the streaming decoder. */
#ifndef FOUNDRY_CLI_PROMPT_H
#define FOUNDRY_CLI_PROMPT_H

#include <stdint.h>
#include <stdio.h>

#include "foundry/tokenizer.h"

/* Opens tokenizer_path when not NULL, else the tokenizer in model_dir
 * (fdy_tokenizer_open). *out is owned by the caller. */
fdy_status fdy_cli_open_tokenizer(const char *model_dir,
                                  const char *tokenizer_path,
                                  fdy_tokenizer **out, fdy_error *err);

/* The ids of a prompt: BOS, then the encoded text (special-token spellings
 * are plain text). text is used when not NULL, else the raw bytes of the
 * file at path. A tokenizer without BOS is FDY_ERR_UNSUPPORTED, a prompt
 * of more than UINT32_MAX ids FDY_ERR_OVERFLOW. *ids (malloc'd, *count of
 * them) is owned by the caller; NULL on failure. */
fdy_status fdy_cli_prompt_ids(fdy_tokenizer *tok, const char *text,
                              const char *path, int32_t **ids, uint32_t *count,
                              fdy_error *err);

/* Writes the text of ids to out through a streaming decoder, leaving out
 * special tokens (EOS), then a newline. Write errors are left to the
 * caller (ferror on out). An id outside the vocabulary:
 * FDY_ERR_INVALID_ARGUMENT. */
fdy_status fdy_cli_print_generated(const fdy_tokenizer *tok, const int32_t *ids,
                                   uint32_t count, FILE *out, fdy_error *err);

#endif
