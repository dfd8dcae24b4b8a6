/* Greedy generation: every input is checked before any work, then the
 * prompt is prefilled and ids are decoded one at a time (the argmax the
 * backend computes, lowest id on ties) until max_tokens or an EOS id. The last
 * id is returned without a pass of its own, so a generation uses prompt +
 * max_tokens - 1 positions. Prefill time covers the prompt's forward pass;
 * decode time the single-token passes after it. */
#include <stdlib.h>
#include <string.h>

#include "infer.h"

static bool is_eos(const fdy_llama_config *c, int32_t id) {
  for (uint32_t i = 0; i < c->eos_count && i < FDY_LLAMA_MAX_EOS; i++) {
    if (c->eos_ids[i] == id) {
      return true;
    }
  }
  return false;
}

void fdy_llama_generation_free(fdy_llama_generation *generation) {
  if (generation) {
    free(generation->ids);
    memset(generation, 0, sizeof *generation);
  }
}

fdy_status fdy_llama_generate(fdy_llama_session *session, const int32_t *prompt,
                              uint32_t prompt_count, uint32_t max_tokens,
                              bool ignore_eos, fdy_llama_generation *out,
                              fdy_error *err) {
  if (!session || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_generate needs a session and an output");
  }
  memset(out, 0, sizeof *out);
  if (!prompt || prompt_count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the prompt is empty: give at least one token id");
  }
  /* the prompt and every generated id but the last are fed */
  uint64_t needed = (uint64_t)prompt_count + (max_tokens ? max_tokens - 1 : 0);
  if (needed > session->context) {
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "a prompt of %u ids and up to %u new ids need %llu "
                  "positions (every id but the last is fed back), but the "
                  "context holds %u",
                  prompt_count, max_tokens, (unsigned long long)needed,
                  session->context);
    if (err) {
      err->expected = session->context;
      err->actual = needed;
    }
    return FDY_ERR_CONTEXT;
  }
  uint32_t saved = session->position;
  session->position = 0;
  fdy_status st =
      fdy_llama_session_check(session, prompt, prompt_count, 0, err);
  session->position = saved;
  if (st != FDY_OK) {
    return st;
  }
  int32_t *ids = malloc(sizeof *ids * (max_tokens ? max_tokens : 1));
  if (!ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }

  fdy_llama_session_reset(session);
  int64_t t0 = fdy_now_ns();
  st =
      fdy_llama_session_forward(session, prompt, prompt_count, NULL, NULL, err);
  int64_t t1 = fdy_now_ns();
  uint32_t count = 0;
  bool eos = false;
  uint32_t steps = 0;
  if (st == FDY_OK && max_tokens > 0) {
    ids[count++] = fdy_llama_session_next(session);
    eos = is_eos(session->config, ids[0]);
    while (st == FDY_OK && count < max_tokens && (ignore_eos || !eos)) {
      st = fdy_llama_session_forward(session, &ids[count - 1], 1, NULL, NULL,
                                     err);
      if (st == FDY_OK) {
        steps++;
        ids[count] = fdy_llama_session_next(session);
        eos = is_eos(session->config, ids[count]);
        count++;
      }
    }
  }
  int64_t t2 = fdy_now_ns();
  if (st != FDY_OK) {
    free(ids);
    return st;
  }
  out->ids = ids;
  out->count = count;
  out->stopped_at_eos = !ignore_eos && count > 0 && eos;
  out->prefill_seconds = (double)(t1 - t0) * 1e-9;
  out->decode_seconds = (double)(t2 - t1) * 1e-9;
  out->prefill_tokens_per_second =
      out->prefill_seconds > 0 ? prompt_count / out->prefill_seconds : 0.0;
  out->decode_tokens_per_second =
      out->decode_seconds > 0 && steps > 0 ? steps / out->decode_seconds : 0.0;
  return FDY_OK;
}
