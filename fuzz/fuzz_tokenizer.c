/* libFuzzer target for the tokenizer file parsers: the first byte picks
 * the tiktoken ranks parser (even) or the tokenizer.json parser (odd; the
 * rest splits at the first NUL into tokenizer.json and
 * tokenizer_config.json). Any input must load or fail with an error, never
 * crash or leak; a loaded tiktoken file must round-trip a fixed text (valid
 * and invalid UTF-8) through encode and decode. A tokenizer.json need not
 * (Hugging Face's normalizers, Removed splits, lstrip/rstrip and missing
 * bytes lose text): its ids must decode, and encoding may fail only with
 * FDY_ERR_UNSUPPORTED (a regex at PCRE2's limits). The parsers read files, so
 * each input is written to a private temporary directory first. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/tokenizer.h"
#include "fuzz_common.h"

#define TARGET "fuzz_tokenizer"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) {
    return 0;
  }
  char model[512], json[512], config[512];
  snprintf(model, sizeof model, "%s", fuzz_path(TARGET, "tokenizer.model"));
  snprintf(json, sizeof json, "%s", fuzz_path(TARGET, "tokenizer.json"));
  snprintf(config, sizeof config, "%s",
           fuzz_path(TARGET, "tokenizer_config.json"));
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  const uint8_t *rest = data + 1;
  size_t n = size - 1;
  if (data[0] % 2 == 0) {
    fuzz_write_file(model, rest, n);
    (void)fdy_tokenizer_load_tiktoken(model, &tok, &err);
  } else {
    const uint8_t *nul = memchr(rest, 0, n);
    size_t first = nul ? (size_t)(nul - rest) : n;
    fuzz_write_file(json, rest, first);
    fuzz_write_file(config, nul ? nul + 1 : rest, nul ? n - first - 1 : 0);
    (void)fdy_tokenizer_load_hf(json, nul ? config : NULL, &tok, &err);
  }
  if (tok && data[0] % 2 == 1) {
    static const char text[] = "Hello, world! 123 \xe4\xb8\xad\xff\r\n  x";
    fdy_tokens ids = {0};
    char *back = NULL;
    size_t len = 0;
    fdy_status s = fdy_tokenizer_encode(tok, text, sizeof text - 1,
                                        FDY_ENCODE_SPECIAL, &ids, &err);
    if ((s != FDY_OK && s != FDY_ERR_UNSUPPORTED) ||
        (s == FDY_OK && fdy_tokenizer_decode(tok, ids.ids, ids.count, &back,
                                             &len, &err) != FDY_OK)) {
      abort(); /* a loaded tokenizer must encode and decode */
    }
    free(back);
    fdy_tokens_free(&ids);
    fdy_tokenizer_destroy(tok);
    tok = NULL;
  }
  if (tok) {
    static const char text[] = "Hello, world! 123 \xe4\xb8\xad\xff\r\n  x";
    fdy_tokens ids = {0};
    char *back = NULL;
    size_t len = 0;
    if (fdy_tokenizer_encode(tok, text, sizeof text - 1, FDY_ENCODE_SPECIAL,
                             &ids, &err) != FDY_OK ||
        fdy_tokenizer_decode(tok, ids.ids, ids.count, &back, &len, &err) !=
            FDY_OK ||
        len != sizeof text - 1 || memcmp(back, text, len) != 0) {
      abort(); /* a loaded tokenizer that does not round-trip is a bug */
    }
    free(back);
    fdy_tokens_free(&ids);
    fdy_tokenizer_destroy(tok);
  }
  return 0;
}
