/* Llama 3 float32 CPU inference over an open fdy_llama_model: sessions with
 * a KV cache, greedy generation and verification against a reference
 * (the format of tests/data/<fixture>/expected.safetensors). */
#ifndef FOUNDRY_LLAMA_SESSION_H
#define FOUNDRY_LLAMA_SESSION_H

#include "foundry/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU inference ---------------------------------------------------------- */

typedef struct fdy_llama_session fdy_llama_session;

typedef struct fdy_llama_session_options {
  uint32_t context; /* positions in the KV cache; 0 = 1024 */
  uint32_t threads; /* worker threads; 0 = online CPUs */
} fdy_llama_session_options;

/* A float32 CPU inference session with its KV cache over an open model (the
 * model must outlive it). options may be NULL. */
fdy_status fdy_llama_session_create(const fdy_llama_model *model,
                                    const fdy_llama_session_options *options,
                                    fdy_llama_session **out, fdy_error *err);
void fdy_llama_session_destroy(fdy_llama_session *session);
/* Positions used so far. */
uint32_t fdy_llama_session_position(const fdy_llama_session *session);
void fdy_llama_session_reset(fdy_llama_session *session);
/* Appends count tokens at the current position (prefill when count > 1).
 * all_logits (count * vocab floats) and last_logits (vocab floats) may each
 * be NULL. Ids outside the vocabulary: FDY_ERR_INVALID_ARGUMENT; exceeding
 * the context: FDY_ERR_CONTEXT; the session is unchanged on error. */
fdy_status fdy_llama_session_forward(fdy_llama_session *session,
                                     const int32_t *ids, uint32_t count,
                                     float *all_logits, float *last_logits,
                                     fdy_error *err);

typedef struct fdy_llama_generation {
  int32_t *ids;        /* generated ids (malloc'd; fdy_llama_generation_free) */
  uint32_t count;
  bool stopped_at_eos; /* the last id is an EOS id */
  double prefill_seconds, decode_seconds;
  double prefill_tokens_per_second, decode_tokens_per_second;
} fdy_llama_generation;

void fdy_llama_generation_free(fdy_llama_generation *generation);

/* Greedy generation from a reset session: prefill the prompt, then decode up
 * to max_tokens ids, stopping after an EOS id unless ignore_eos. Checks ids,
 * an empty prompt and prompt + max_tokens against the context before any
 * work. */
fdy_status fdy_llama_generate(fdy_llama_session *session, const int32_t *prompt,
                              uint32_t prompt_count, uint32_t max_tokens,
                              bool ignore_eos, fdy_llama_generation *out,
                              fdy_error *err);

/* ---- reference verification ------------------------------------------------- */

typedef struct fdy_llama_verify_result {
  uint32_t prompt_tokens;
  uint32_t greedy_tokens;
  double logits_relative_error;  /* ||logits - ref|| / ||ref|| over prompt */
  double greedy_relative_error;  /* same over greedy_logits */
  uint32_t greedy_matches;       /* leading greedy ids equal to reference */
  bool passed;
} fdy_llama_verify_result;

/* Runs the reference's prompt_ids, compares prompt logits and the greedy
 * continuation with expected.safetensors (prompt_ids, logits, greedy_ids,
 * greedy_logits) against tolerance (1e-4 for the CPU backend). A reference
 * whose vocab or tensors do not match the model: FDY_ERR_SCHEMA. Outside the
 * tolerance: returns FDY_OK with passed = false. */
fdy_status fdy_llama_verify(fdy_llama_session *session,
                            const char *reference_path, double tolerance,
                            fdy_llama_verify_result *out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
