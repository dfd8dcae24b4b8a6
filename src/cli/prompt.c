/* Text prompts for the CLI (see prompt.h). */
#include "prompt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_util.h"
#include "foundry/llama.h"

/* Refuses a tokenizer that can produce ids the model has no row for
 * (before any work: otherwise prefill runs and decoding fails on the
 * first such id). A missing or invalid config.json is left to the model's
 * loader. */
static fdy_status check_fits(const char *model_dir, const fdy_tokenizer *tok,
                             fdy_error *err) {
  size_t n = strlen(model_dir) + sizeof "/config.json";
  char *path = malloc(n);
  if (!path) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  snprintf(path, n, "%s/config.json", model_dir);
  char *json = NULL;
  size_t len = 0;
  fdy_llama_config config;
  fdy_error ignored;
  fdy_status s = FDY_OK;
  if (access(path, F_OK) == 0 &&
      fdy_cli_read_file(path, "config", &json, &len, &ignored) == FDY_OK &&
      fdy_llama_config_parse(json, len, path, &config, &ignored) == FDY_OK &&
      fdy_tokenizer_vocab_size(tok) > config.vocab_size) {
    s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "the tokenizer %s has %" PRIu32
                      " ids but the model's vocabulary (vocab_size in %s) "
                      "has %" PRIu32
                      ": it does not fit this model (give the model's own "
                      "tokenizer with --tokenizer FILE)",
                      fdy_tokenizer_source(tok), fdy_tokenizer_vocab_size(tok),
                      path, config.vocab_size);
    if (err) {
      err->expected = config.vocab_size;
      err->actual = fdy_tokenizer_vocab_size(tok);
    }
  }
  free(json);
  free(path);
  return s;
}

fdy_status fdy_cli_open_tokenizer(const char *model_dir,
                                  const char *tokenizer_path,
                                  fdy_tokenizer **out, fdy_error *err) {
  fdy_status s =
      fdy_tokenizer_open(tokenizer_path ? tokenizer_path : model_dir, out, err);
  if (s == FDY_OK && model_dir) {
    s = check_fits(model_dir, *out, err);
    if (s != FDY_OK) {
      fdy_tokenizer_destroy(*out);
      *out = NULL;
    }
  }
  return s;
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
  if (!text) {
    s = fdy_cli_read_file(path, "prompt file", &file, &len, err);
    text = file;
  }
  if (s == FDY_OK && fdy_tokenizer_add_bos(tok)) {
    s = fdy_tokens_push(&tokens, fdy_tokenizer_bos(tok), err);
  }
  if (s == FDY_OK) {
    s = fdy_tokenizer_encode(tok, text, len, 0, &tokens, err);
  }
  if (s == FDY_OK && tokens.count == 0) {
    s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "the prompt is empty and %s adds no beginning-of-text "
                      "token (add_bos_token): there is nothing to generate "
                      "from",
                      fdy_tokenizer_source(tok));
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

fdy_status fdy_cli_printer_init(fdy_cli_printer *p, const fdy_tokenizer *tok,
                                FILE *out, volatile sig_atomic_t *interrupt,
                                fdy_error *err) {
  *p = (fdy_cli_printer){.tok = tok, .out = out, .interrupt = interrupt};
  return fdy_token_stream_create(tok, &p->stream, err);
}

bool fdy_cli_printer_token(void *ctx, int32_t id) {
  fdy_cli_printer *p = ctx;
  if (!fdy_tokenizer_is_special(p->tok, id)) {
    const char *text = NULL;
    size_t len = 0;
    p->status = fdy_token_stream_push(p->stream, id, &text, &len, &p->err);
    if (p->status != FDY_OK) {
      return false;
    }
    if (len > 0) {
      fwrite(text, 1, len, p->out);
      fflush(p->out);
    }
  }
  if (p->interrupt && *p->interrupt) {
    *p->interrupt = 0;
    p->interrupted = true;
  }
  return !p->interrupted && !ferror(p->out);
}

fdy_status fdy_cli_printer_finish(fdy_cli_printer *p, fdy_error *err) {
  const char *text = NULL;
  size_t len = 0;
  fdy_token_stream_finish(p->stream, &text, &len);
  fwrite(text, 1, len, p->out);
  fputc('\n', p->out);
  fflush(p->out);
  fdy_status s = p->status;
  if (s != FDY_OK && err) {
    *err = p->err;
  }
  p->status = FDY_OK;
  p->interrupted = false;
  return s;
}

void fdy_cli_printer_destroy(fdy_cli_printer *p) {
  fdy_token_stream_destroy(p->stream);
  p->stream = NULL;
}
