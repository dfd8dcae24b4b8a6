/* Text prompts for the CLI: the tokenizer a command uses (an explicit file,
 * else the one in the model directory), a prompt turned into ids, and
 * generated ids written as text, through the streaming decoder, while they
 * are generated. */
#ifndef FOUNDRY_CLI_PROMPT_H
#define FOUNDRY_CLI_PROMPT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "foundry/tokenizer.h"

/* Opens tokenizer_path when not NULL, else the tokenizer in model_dir
 * (fdy_tokenizer_open). When model_dir is not NULL and its config.json
 * parses, a tokenizer with more ids than its vocab_size is refused
 * (FDY_ERR_INVALID_ARGUMENT naming both files and both sizes; expected =
 * vocab_size, actual = the tokenizer's ids). *out is owned by the caller. */
fdy_status fdy_cli_open_tokenizer(const char *model_dir,
                                  const char *tokenizer_path,
                                  fdy_tokenizer **out, fdy_error *err);

/* The ids of a prompt: the BOS when the tokenizer adds one
 * (fdy_tokenizer_add_bos: tokenizer_config.json's add_bos_token, as Hugging
 * Face's encode does), then the encoded text (special-token spellings are
 * plain text). text is used when not NULL, else the raw bytes of the file
 * at path. An empty prompt without BOS is FDY_ERR_INVALID_ARGUMENT, a
 * prompt of more than UINT32_MAX ids FDY_ERR_OVERFLOW. *ids (malloc'd, *count
 * of them) is owned by the caller; NULL on failure. */
fdy_status fdy_cli_prompt_ids(fdy_tokenizer *tok, const char *text,
                              const char *path, int32_t **ids, uint32_t *count,
                              fdy_error *err);

/* Writes generated ids as text while they are generated: the token
 * callback fdy_cli_printer_token decodes each id through a streaming
 * decoder, leaving out special ids (EOS, <|eot_id|>), writes the bytes that
 * complete UTF-8 characters at once and flushes. It asks generation to stop
 * when writing fails (left to ferror(out) and fdy_cli_finish_stdout), when
 * an id is outside the tokenizer's vocabulary (kept in status and err), or
 * when *interrupt is set (a signal handler's flag; cleared then). */
typedef struct fdy_cli_printer {
  const fdy_tokenizer *tok;
  fdy_token_stream *stream;
  FILE *out;
  volatile sig_atomic_t *interrupt; /* may be NULL */
  bool interrupted;                 /* stopped for *interrupt */
  fdy_status status;                /* the first decoding failure */
  fdy_error err;
} fdy_cli_printer;

/* Starts a printer on out; interrupt may be NULL. Destroy it with
 * fdy_cli_printer_destroy (also after a failure). */
fdy_status fdy_cli_printer_init(fdy_cli_printer *p, const fdy_tokenizer *tok,
                                FILE *out, volatile sig_atomic_t *interrupt,
                                fdy_error *err);
/* A fdy_llama_token_fn; ctx is the printer. */
bool fdy_cli_printer_token(void *ctx, int32_t id);
/* Ends a text: writes what the decoder held back and a newline, flushes,
 * and makes the printer ready for the next text. Returns the first
 * decoding failure (copied to err) or FDY_OK; write failures are left to
 * ferror(out). */
fdy_status fdy_cli_printer_finish(fdy_cli_printer *p, fdy_error *err);
void fdy_cli_printer_destroy(fdy_cli_printer *p);

#endif
