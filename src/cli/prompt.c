/* Text prompts for the CLI (see prompt.h). */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

fdy_status fdy_cli_open_tokenizer(const char *model_dir,
                                  const char *tokenizer_path,
                                  fdy_tokenizer **out, fdy_error *err) {
  return fdy_tokenizer_open(tokenizer_path ? tokenizer_path : model_dir, out,
                            err);
}

fdy_status fdy_cli_prompt_ids(fdy_tokenizer *tok, const char *text,
                              const char *path, int32_t **ids, uint32_t *count,
                              fdy_error *err) {
  *ids = NULL;
  *count = 0;
  char *file = NULL;
  size_t len = text ? strlen(text) : 0;
  fdy_tokens tokens = {0};
  fdy_status s = FDY_OK;
  if (fdy_tokenizer_bos(tok) < 0) {
    s = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                      "%s: the tokenizer has no beginning-of-text token",
                      fdy_tokenizer_source(tok));
    goto cleanup;
  }
  if (!text) {
    s = fdy_cli_read_file(path, &file, &len, err);
    text = file;
  }
  if (s == FDY_OK) {
    s = fdy_tokens_push(&tokens, fdy_tokenizer_bos(tok), err);
  }
  if (s == FDY_OK) {
    s = fdy_tokenizer_encode(tok, text, len, 0, &tokens, err);
  }
  if (s == FDY_OK && tokens.count > UINT32_MAX) {
    s = fdy_error_set(err, FDY_ERR_OVERFLOW, "the prompt has %zu ids",
                      tokens.count);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  *ids = tokens.ids;
  *count = (uint32_t)tokens.count;
  tokens = (fdy_tokens){0};
cleanup:
  fdy_tokens_free(&tokens);
  free(file);
  return s;
}

fdy_status fdy_cli_print_generated(const fdy_tokenizer *tok, const int32_t *ids,
                                   uint32_t count, FILE *out, fdy_error *err) {
  fdy_token_stream *stream = NULL;
  fdy_status s = fdy_token_stream_create(tok, &stream, err);
  const char *text = NULL;
  size_t len = 0;
  for (uint32_t i = 0; s == FDY_OK && i < count; i++) {
    if (fdy_tokenizer_is_special(tok, ids[i])) {
      continue;
    }
    s = fdy_token_stream_push(stream, ids[i], &text, &len, err);
    if (s == FDY_OK) {
      fwrite(text, 1, len, out);
    }
  }
  if (s == FDY_OK) {
    fdy_token_stream_finish(stream, &text, &len);
    fwrite(text, 1, len, out);
    fputc('\n', out);
  }
  fdy_token_stream_destroy(stream);
  return s;
}
