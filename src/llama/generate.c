/* Generation: every input is checked before any work, then the prompt is
 * prefilled and ids are decoded one at a time (the ids the backend's
 * SAMPLE op draws with slot 0's sampling; greedy: the argmax, lowest id on
 * ties) until max_tokens, a stop id (the
 * config's EOS ids and the caller's) or the caller's callback says stop.
 * Each id goes to the callback before the next pass. The last id is
 * returned without a pass of its own, so a generation uses prompt +
 * max_tokens - 1 positions. Prefill time covers the prompt's forward pass;
 * decode time the single-token passes after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

bool fdy_llama_is_stop(const fdy_llama_config *config, const int32_t *stop_ids,
                       uint32_t stop_count, int32_t id) {
  for (uint32_t i = 0; i < config->eos_count && i < FDY_LLAMA_MAX_EOS; i++) {
    if (config->eos_ids[i] == id) {
      return true;
    }
  }
  for (uint32_t i = 0; i < stop_count; i++) {
    if (stop_ids[i] == id) {
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

/* Hands id to the callback; false when it asks to stop. */
static bool deliver(const fdy_llama_generate_options *o, int32_t id) {
  return !o->on_token || o->on_token(o->ctx, id);
}

fdy_status fdy_llama_generate(fdy_llama_session *session, const int32_t *prompt,
                              uint32_t prompt_count,
                              const fdy_llama_generate_options *options,
                              fdy_llama_generation *out, fdy_error *err) {
  if (!session || !options || !out ||
      (options->stop_count > 0 && !options->stop_ids)) {
    if (out) {
      memset(out, 0, sizeof *out);
    }
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_generate needs a session, options (with "
                         "stop_ids when stop_count > 0) and an output");
  }
  memset(out, 0, sizeof *out);
  if (!prompt || prompt_count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the prompt is empty: give at least one token id");
  }
  uint32_t max_tokens = options->max_tokens;
  uint32_t start =
      options->keep_context ? fdy_llama_session_position(session) : 0;
  /* the prompt and every generated id but the last are fed */
  uint64_t needed =
      (uint64_t)start + prompt_count + (max_tokens ? max_tokens - 1 : 0);
  if (needed > session->context) {
    char used[48] = "";
    if (start) {
      snprintf(used, sizeof used, " after the %u positions in use", start);
    }
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "a prompt of %u ids%s and up to %u new ids need %llu "
                  "positions (every id but the last is fed back), but the "
                  "context holds %u",
                  prompt_count, used, max_tokens, (unsigned long long)needed,
                  session->context);
    if (err) {
      err->expected = session->context;
      err->actual = needed;
    }
    return FDY_ERR_CONTEXT;
  }
  fdy_status st =
      fdy_llama_session_check(session, prompt, prompt_count, start, 0, err);
  if (st == FDY_OK && options->sampling) {
    st = fdy_llama_sampling_check(options->sampling, err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(session, 0, options->sampling, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  int32_t *ids = malloc(sizeof *ids * (max_tokens ? max_tokens : 1));
  if (!ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }

  if (!options->keep_context) {
    fdy_llama_session_reset(session);
  }
  int64_t t0 = fdy_now_ns();
  st =
      fdy_llama_session_forward(session, prompt, prompt_count, NULL, NULL, err);
  int64_t t1 = fdy_now_ns();
  uint32_t count = 0;
  bool stop = false, more = true;
  uint32_t steps = 0;
  if (st == FDY_OK && max_tokens > 0) {
    ids[count++] = fdy_llama_session_next(session);
    stop = fdy_llama_is_stop(session->config, options->stop_ids,
                             options->stop_count, ids[0]);
    more = deliver(options, ids[0]);
    while (st == FDY_OK && more && count < max_tokens &&
           (options->ignore_eos || !stop)) {
      st = fdy_llama_session_forward(session, &ids[count - 1], 1, NULL, NULL,
                                     err);
      if (st == FDY_OK) {
        steps++;
        ids[count] = fdy_llama_session_next(session);
        stop = fdy_llama_is_stop(session->config, options->stop_ids,
                                 options->stop_count, ids[count]);
        more = deliver(options, ids[count]);
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
  out->stopped_at_eos = !options->ignore_eos && count > 0 && stop;
  out->interrupted = !more;
  out->prefill_seconds = (double)(t1 - t0) * 1e-9;
  out->decode_seconds = (double)(t2 - t1) * 1e-9;
  out->prefill_tokens_per_second =
      out->prefill_seconds > 0 ? prompt_count / out->prefill_seconds : 0.0;
  out->decode_tokens_per_second =
      out->decode_seconds > 0 && steps > 0 ? steps / out->decode_seconds : 0.0;
  return FDY_OK;
}
