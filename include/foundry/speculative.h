/* Speculative decoding: a small draft model proposes ids, the target
 * verifies all of them in one pass, so that a target whose weights stream
 * over PCIe yields several ids per pass when the draft agrees with it.
 * Greedy only: the output is exactly the target session's own greedy ids. */
#ifndef FOUNDRY_SPECULATIVE_H
#define FOUNDRY_SPECULATIVE_H

#include "foundry/llama_session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most ids a draft proposes for one target pass. */
#define FDY_LLAMA_MAX_DRAFT_TOKENS 64u

typedef struct fdy_llama_speculative_options {
  uint32_t draft_tokens;     /* K, 1 to FDY_LLAMA_MAX_DRAFT_TOKENS: the ids
                                proposed per target pass (the start when
                                adaptive); the target session's step_rows must
                                be at least max_draft_tokens + 1 */
  uint32_t max_draft_tokens; /* adaptive: K stays in [1, this]; 0 =
                                draft_tokens (then K never grows) */
  bool fixed;                /* K stays draft_tokens */
} fdy_llama_speculative_options;

typedef struct fdy_llama_speculative_stats {
  uint64_t target_passes; /* verification passes after the prompt */
  uint64_t draft_passes;  /* the draft's single-id passes */
  uint64_t proposed;      /* draft ids proposed */
  uint64_t accepted;      /* of them, equal to the target's */
  double target_seconds;  /* the verification passes */
  double draft_seconds;   /* the draft's passes and rewinds */
} fdy_llama_speculative_stats;

/* Greedy generation of target with draft proposing (both sessions on the
 * same vocabulary, slot 0 of each; the draft usually resident and small):
 * resets both, prefills the prompt into both, then repeats: the draft
 * proposes K ids one pass at a time from the last id; the target appends
 * the last id and the K proposals in one pass of its decode step
 * (fdy_llama_session_append_rows), which gives its own next id after each;
 * the proposals up to the first that differs from the target's are
 * accepted, followed by the target's id there, and both sessions rewind
 * to the accepted position (fdy_llama_session_rewind), so that no state
 * of a rejected id is ever read. Adaptive K (unless spec->fixed) doubles
 * after a pass that accepts everything and falls to the accepted count + 1
 * after a rejection, within [1, max_draft_tokens].
 *
 * Afterwards both sessions hold the prompt and every id emitted but the
 * last, as after fdy_llama_generate.
 *
 * The ids, stops (EOS ids, options->stop_ids, ignore_eos), on_token and
 * max_tokens behave as in fdy_llama_generate, whose result this equals for
 * the target session: on the CPU backend bitwise; on CUDA a step of
 * several rows may round differently from the one-row decode of a session
 * of step_rows 1 (the batch invariance rule), so compare with the same
 * target session. Before any work: the errors of fdy_llama_generate, a
 * draft of another vocabulary (FDY_ERR_INVALID_ARGUMENT naming both
 * sizes, expected = the target's), K out of range or a target whose
 * step_rows is below max_draft_tokens + 1 (FDY_ERR_INVALID_ARGUMENT,
 * expected = the rows needed), options->sampling other than greedy
 * (FDY_ERR_UNSUPPORTED), the prompt plus max_tokens beyond the draft's
 * context (FDY_ERR_CONTEXT). stats may be NULL. On failure *out is
 * zeroed. */
fdy_status fdy_llama_generate_speculative(
    fdy_llama_session *target, fdy_llama_session *draft, const int32_t *prompt,
    uint32_t prompt_count, const fdy_llama_generate_options *options,
    const fdy_llama_speculative_options *spec, fdy_llama_generation *out,
    fdy_llama_speculative_stats *stats, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
