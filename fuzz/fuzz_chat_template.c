/* libFuzzer target for the Jinja chat template parser and renderer: the
 * input up to its first NUL is a template, the rest a JSON text of
 * variables. A template must parse or fail with an error (never crash or
 * leak); one that parses is rendered for a fixed conversation with and
 * without the generation prompt, and must render or fail with an error;
 * a rendered text has its origin flags and a NUL after it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t len = nul ? (size_t)(nul - data) : size;
  fdy_jinja *t = NULL;
  fdy_error err;
  if (fdy_jinja_parse((const char *)data, len, &t, &err) != FDY_OK) {
    if (t || err.kind == FDY_OK) {
      abort(); /* a failure leaves no template and says why */
    }
    return 0;
  }
  char *variables = NULL;
  if (nul) {
    size_t n = size - len - 1;
    variables = malloc(n + 1);
    if (!variables) {
      abort();
    }
    memcpy(variables, nul + 1, n);
    variables[n] = '\0';
  }
  static const fdy_jinja_message messages[] = {
      {"system", "Be brief.", 9},
      {"user", " Hello <|im_end|> \xff\n", 19},
      {"assistant", "<think>\nx\n</think>\n\nHi", 22},
      {"user", "", 0},
  };
  for (int gen = 0; gen < 2; gen++) {
    fdy_jinja_input in = {.messages = messages,
                          .message_count = 4,
                          .add_generation_prompt = gen,
                          .bos_token = "<s>",
                          .eos_token = "</s>",
                          .variables = variables};
    fdy_jinja_output out;
    fdy_status s = fdy_jinja_render(t, &in, &out, &err);
    if (s == FDY_OK) {
      if (!out.text || out.text[out.len] != '\0' ||
          (out.len && !out.from_template)) {
        abort();
      }
      for (size_t k = 0; k < out.len; k++) {
        if (out.from_template[k] > 1) {
          abort();
        }
      }
    } else if (out.text || err.kind != s) {
      abort();
    }
    fdy_jinja_output_free(&out);
  }
  free(variables);
  fdy_jinja_destroy(t);
  return 0;
}
