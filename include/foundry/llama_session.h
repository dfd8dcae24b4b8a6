/* Llama 3 float32 CPU inference over an open fdy_llama_model: sessions with
 * a KV cache, greedy generation and verification against a reference
 * (the format of tests/data/<fixture>/expected.safetensors). */
#ifndef FOUNDRY_LLAMA_SESSION_H
#define FOUNDRY_LLAMA_SESSION_H

#include "foundry/llama.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU inference ------------------------------------------------------ */

typedef struct fdy_llama_session fdy_llama_session;

typedef struct fdy_llama_session_options {
  uint32_t context; /* positions in the KV cache; 0 = 1024, or the model's
                       max_position_embeddings when that is smaller */
  uint32_t threads; /* worker threads; 0 = online CPUs */
} fdy_llama_session_options;

/* A float32 CPU inference session with its KV cache over an open model (the
 * model must outlive it). options may be NULL. Everything (KV cache, scratch,
 * worker threads) is allocated here; a forward pass never allocates. A
 * context above the model's max_position_embeddings (err->expected = that
 * limit, err->actual = the context) or more than 256 threads:
 * FDY_ERR_INVALID_ARGUMENT. Hidden, intermediate and heads * head_dim not
 * multiples of 64: FDY_ERR_UNSUPPORTED. A session is used by one thread at a
 * time; results do not depend on the thread count. */
fdy_status fdy_llama_session_create(const fdy_llama_model *model,
                                    const fdy_llama_session_options *options,
                                    fdy_llama_session **out, fdy_error *err);
void fdy_llama_session_destroy(fdy_llama_session *session);
/* Positions used so far. */
uint32_t fdy_llama_session_position(const fdy_llama_session *session);
/* The context (KV cache positions) and worker threads in use, defaults
 * resolved. */
uint32_t fdy_llama_session_context(const fdy_llama_session *session);
uint32_t fdy_llama_session_threads(const fdy_llama_session *session);
/* Forgets every position (the KV cache is overwritten as it refills). */
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
  int32_t *ids; /* generated ids (malloc'd; fdy_llama_generation_free) */
  uint32_t count;
  bool stopped_at_eos; /* the last id is an EOS id */
  double prefill_seconds, decode_seconds;
  /* prompt tokens / prefill_seconds; single-token passes after the prefill
   * (count - 1) / decode_seconds, 0 when there were none */
  double prefill_tokens_per_second, decode_tokens_per_second;
} fdy_llama_generation;

void fdy_llama_generation_free(fdy_llama_generation *generation);

/* Greedy generation: resets the session, prefills the prompt, then decodes
 * up to max_tokens ids (argmax, lowest id on ties), stopping after an EOS id
 * of the config unless ignore_eos. The positions used are prompt_count +
 * max_tokens - 1 (the last id is returned, never fed back; prompt_count
 * when max_tokens is 0). Before any work (session unchanged): an empty
 * prompt or an id outside the vocabulary FDY_ERR_INVALID_ARGUMENT, more
 * positions than the context FDY_ERR_CONTEXT (err->expected = the context,
 * err->actual = the positions needed). On success *out owns ids; on
 * failure *out is zeroed. */
fdy_status fdy_llama_generate(fdy_llama_session *session, const int32_t *prompt,
                              uint32_t prompt_count, uint32_t max_tokens,
                              bool ignore_eos, fdy_llama_generation *out,
                              fdy_error *err);

/* ---- reference verification --------------------------------------------- */

/* Relative logits error that the float32 CPU path meets. */
#define FDY_LLAMA_CPU_TOLERANCE 1e-4

typedef struct fdy_llama_verify_result {
  uint32_t prompt_tokens;
  uint32_t greedy_tokens;
  double logits_relative_error; /* ||logits - ref|| / ||ref|| over prompt */
  double greedy_relative_error; /* same over greedy_logits */
  uint32_t greedy_matches;      /* leading greedy ids equal to reference */
  bool passed;
} fdy_llama_verify_result;

/* Runs the reference's prompt_ids, compares prompt logits and the greedy
 * continuation with expected.safetensors (prompt_ids I32 [T], logits F32
 * [T, vocab], greedy_ids I32 [N], greedy_logits F32 [N, vocab]) against
 * tolerance (1e-4 for the CPU backend). The continuation is teacher-forced
 * with the reference's greedy ids so every row stays comparable;
 * greedy_matches counts the leading ids whose argmax agrees. passed: both
 * relative errors <= tolerance and all N ids agree. A reference whose
 * tensors, dtypes, shapes, vocab or ids do not match the model, or with
 * T = 0 or N = 0: FDY_ERR_SCHEMA (err->name = the tensor); T + N - 1 above the
 * context: FDY_ERR_CONTEXT; a negative or non-finite tolerance:
 * FDY_ERR_INVALID_ARGUMENT; all before any work. Outside the tolerance: FDY_OK
 * with passed = false. The session is reset and left after the last pass. */
fdy_status fdy_llama_verify(fdy_llama_session *session,
                            const char *reference_path, double tolerance,
                            fdy_llama_verify_result *out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
