/* libFuzzer target for the tokenizer file parsers: the first byte picks
 * the tiktoken ranks parser (even) or the tokenizer.json parser (odd; the
 * rest splits at the first NUL into tokenizer.json and
 * tokenizer_config.json). Any input must load or fail with an error, never
 * crash or leak; a loaded tokenizer must round-trip a fixed text (valid
 * and invalid UTF-8) through encode and decode. The parsers read files, so
 * each input is written to a private temporary directory first. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "foundry/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void write_file(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
    abort(); /* the fuzzer's own temporary directory must work */
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) {
    return 0;
  }
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/fuzz_tokenizer_XXXXXX");
    if (!mkdtemp(dir)) {
      abort();
    }
  }
  char model[128], json[128], config[128];
  snprintf(model, sizeof model, "%s/tokenizer.model", dir);
  snprintf(json, sizeof json, "%s/tokenizer.json", dir);
  snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
  fdy_tokenizer *tok = NULL;
  fdy_error err;
  const uint8_t *rest = data + 1;
  size_t n = size - 1;
  if (data[0] % 2 == 0) {
    write_file(model, rest, n);
    (void)fdy_tokenizer_load_tiktoken(model, &tok, &err);
  } else {
    const uint8_t *nul = memchr(rest, 0, n);
    size_t first = nul ? (size_t)(nul - rest) : n;
    write_file(json, rest, first);
    write_file(config, nul ? nul + 1 : rest, nul ? n - first - 1 : 0);
    (void)fdy_tokenizer_load_hf(json, nul ? config : NULL, &tok, &err);
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
