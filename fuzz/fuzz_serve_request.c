/* libFuzzer target for the request bodies of `foundry serve`
 * (src/cli/serve_request.h; seed corpus: fuzz/corpus/serve_request). Any
 * input, for either endpoint, must parse or be refused with an OpenAI
 * error (a status of 400, 404 or 500, a type and a message), never crash
 * or leak. A parsed request must hold what the server relies on: one
 * prompt form, ids inside the vocabulary, at most 4 non-empty stop
 * strings, max_tokens >= 1 when given; fitting it to a context either
 * gives a max_tokens that fits or refuses it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/serve_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const fdy_serve_request *r, bool chat) {
  bool ids = r->ids != NULL, text = r->text != NULL;
  if (r->chat != chat || (chat && (ids || !text)) ||
      (!chat && (ids == text || r->system)) || (ids && r->id_count == 0) ||
      r->stop_count > FDY_SERVE_MAX_STOP ||
      (r->max_tokens_given && r->max_tokens == 0)) {
    abort();
  }
  for (uint32_t i = 0; i < r->id_count; i++) {
    if (r->ids[i] < 0 || r->ids[i] >= 1000) {
      abort();
    }
  }
  for (uint32_t i = 0; i < r->stop_count; i++) {
    if (!r->stop[i] || r->stop[i][0] == '\0') {
      abort();
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const fdy_serve_limits limits = {
      .model_id = "micro",
      .vocab = 1000,
      .sampling = {.temperature = 1.0f, .top_p = 1.0f}};
  for (int chat = 0; chat < 2; chat++) {
    fdy_serve_request r;
    fdy_serve_error e;
    if (fdy_serve_request_parse((const char *)data, size, chat, &limits, &r,
                                &e) != FDY_OK) {
      if ((e.status != 400 && e.status != 404 && e.status != 500) || !e.type ||
          e.message[0] == '\0' || r.ids || r.text) {
        abort();
      }
      continue;
    }
    check(&r, chat);
    uint32_t prompt = r.ids ? r.id_count : 1 + (uint32_t)(size % 64);
    if (fdy_serve_request_fit(&r, prompt, 64, &e) == FDY_OK &&
        (r.max_tokens == 0 || (uint64_t)prompt + r.max_tokens - 1 > 64)) {
      abort();
    }
    fdy_serve_request_free(&r);
  }
  return 0;
}
