/* Speculative decoding: a small draft model proposes ids, the target
 * verifies all of them in one pass, so that a target whose weights stream
 * over PCIe yields several ids per pass when the draft agrees with it.
 * Greedy, the output is exactly the target session's own greedy ids;
 * sampling, the rejection rule keeps the target's own distribution. */
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

/* Generation of target with draft proposing (both sessions on the same
 * vocabulary, slot 0 of each; the draft usually resident and small):
 * resets both (unless options->keep_context: then both must hold the
 * same positions, the conversation so far, and the prompt follows them),
 * prefills the prompt into both, then repeats: the draft
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
 * With options->sampling (not greedy) the target's slot 0 samples with it
 * and the draft's with it on another seed (seed ^ a constant); both sessions
 * must return logits (not ids_only). A proposal x is accepted when u q(x)
 * < p(x), p and q the target's and the draft's distributions there
 * (fdy_sample_probabilities), u a uniform draw of the seed's acceptance
 * stream at that position; the first rejected proposal is replaced by a
 * draw from max(0, p - q) normalized (another stream); when every one is
 * accepted, the target's own draw at its last row follows. Each emitted id
 * is thus distributed as the target's sampling draws it (not the same ids
 * as fdy_llama_generate's for the seed: other draws decide them). The
 * sessions' sampling stays set afterwards.
 *
 * Afterwards both sessions hold (what they held and) the prompt and every
 * id emitted but the last, as after fdy_llama_generate.
 *
 * The ids, stops (EOS ids, options->stop_ids, ignore_eos), on_token and
 * max_tokens behave as in fdy_llama_generate, whose greedy result this
 * equals for the target session: on the CPU backend bitwise; on CUDA a step of
 * several rows may round differently from the one-row decode of a session
 * of step_rows 1 (the batch invariance rule), so compare with the same
 * target session. Before any work: the errors of fdy_llama_generate, a
 * draft of another vocabulary (FDY_ERR_INVALID_ARGUMENT naming both
 * sizes, expected = the target's), K out of range or a target whose
 * step_rows is below max_draft_tokens + 1 (FDY_ERR_INVALID_ARGUMENT,
 * expected = the rows needed), sampling refused by fdy_llama_sampling_check
 * and sampling with an ids_only session (FDY_ERR_INVALID_ARGUMENT),
 * keep_context with sessions at different positions
 * (FDY_ERR_INVALID_ARGUMENT, expected = the target's, actual = the
 * draft's), the
 * prompt plus max_tokens beyond the draft's
 * context (FDY_ERR_CONTEXT). stats may be NULL. On failure *out is
 * zeroed. */
fdy_status fdy_llama_generate_speculative(
    fdy_llama_session *target, fdy_llama_session *draft, const int32_t *prompt,
    uint32_t prompt_count, const fdy_llama_generate_options *options,
    const fdy_llama_speculative_options *spec, fdy_llama_generation *out,
    fdy_llama_speculative_stats *stats, fdy_error *err);

/* ---- rounds driven by the caller -------------------------------------------
 * fdy_llama_generate_speculative's rounds one at a time, on any slot of
 * each session, for a caller that keeps the sequence itself (foundry
 * serve speculates for one of many slots). A round starts where the
 * target's slot and the draft's slot hold the same p positions: the
 * prompt and every id emitted but the last (t), which the round feeds
 * first. */

typedef struct fdy_llama_speculator fdy_llama_speculator;

/* A speculator of target and draft (both outlive it; the speculator owns
 * neither) for rounds of up to max_k drafted ids; logits: room for sampled
 * rounds, which read both models' logits (then neither session may be
 * ids_only). Errors: no sessions, a draft of another vocabulary
 * (FDY_ERR_INVALID_ARGUMENT naming both sizes, expected = the target's,
 * actual = the draft's), max_k 0 or above FDY_LLAMA_MAX_DRAFT_TOKENS, a
 * target whose step_rows is below max_k + 1 (expected = the rows needed),
 * logits with an ids_only session (FDY_ERR_INVALID_ARGUMENT);
 * FDY_ERR_OUT_OF_MEMORY. */
fdy_status fdy_llama_speculator_create(fdy_llama_session *target,
                                       fdy_llama_session *draft, uint32_t max_k,
                                       bool logits, fdy_llama_speculator **out,
                                       fdy_error *err);
/* NULL is a no-op. */
void fdy_llama_speculator_destroy(fdy_llama_speculator *speculator);

/* One round on the target's target_slot and the draft's draft_slot, which
 * hold the same p positions of one sequence whose last emitted id, not yet
 * fed, is last: sets both slots' sampling (the target's to sampling, NULL
 * greedy; the draft's to it on another seed when it is not greedy), the
 * draft proposes k ids (0 to max_k) one pass at a time, the target checks
 * them in one pass (fdy_llama_session_append_rows), and the rule of
 * fdy_llama_generate_speculative accepts a prefix of them (equality with
 * the target's ids, greedy; the rejection rule with the uniforms of the
 * seed at positions p + i, sampled). *ids (the speculator's, valid until
 * its next round) receives the accepted proposals and the target's id
 * after them, *count (1 to k + 1) how many. The sessions then hold the
 * proposals beyond p: fdy_llama_speculator_keep must follow before the
 * slots are used again. Before any work: k above max_k, a slot that holds
 * no sequence, slots at different positions (expected = the target's,
 * actual = the draft's), sampling refused by fdy_llama_sampling_check or
 * not greedy with a speculator made without logits
 * (FDY_ERR_INVALID_ARGUMENT), p + k + 1 beyond either context
 * (FDY_ERR_CONTEXT). A backend failure leaves the session failed. */
fdy_status fdy_llama_speculator_round(fdy_llama_speculator *speculator,
                                      uint32_t target_slot, uint32_t draft_slot,
                                      int32_t last, uint32_t k,
                                      const fdy_sample_params *sampling,
                                      const int32_t **ids, uint32_t *count,
                                      fdy_error *err);

/* Ends the latest round, of which the caller emitted the first `emitted`
 * ids (1 to its count; fewer when the sequence ended with them): both
 * slots go back to p + emitted positions (the round's last emitted id is
 * the next round's `last`), the draft feeding the last proposal when every
 * one was accepted and emitted. No round open or emitted out of range:
 * FDY_ERR_INVALID_ARGUMENT. */
fdy_status fdy_llama_speculator_keep(fdy_llama_speculator *speculator,
                                     uint32_t emitted, fdy_error *err);

/* The statistics of every round so far (zero for NULL). */
fdy_llama_speculative_stats
fdy_llama_speculator_stats(const fdy_llama_speculator *speculator);

/* K for the next round after one that proposed `proposed` ids with K = k
 * and accepted `accepted`: spec's draft_tokens when fixed; else the
 * accepted count + 1 after a rejection, and twice k (at most
 * max_draft_tokens, or draft_tokens when that is 0) after a round that
 * accepted everything. */
uint32_t fdy_llama_speculative_next_k(const fdy_llama_speculative_options *spec,
                                      uint32_t k, uint32_t proposed,
                                      uint32_t accepted);

/* Whether speculative generation with sampling reads both models' logits:
 * sampling that is not greedy (temperature above 0 and top_k not 1; NULL
 * is greedy). Then both sessions must be created without ids_only. */
bool fdy_llama_speculative_needs_logits(const fdy_sample_params *sampling);

/* The rejection rule of speculative sampling at one position: p and q the
 * target's and the draft's distributions over vocab ids (each summing to
 * 1), x the draft's proposal (drawn from q), u_accept and u_residual
 * independent uniforms in [0, 1). Returns x when u_accept q(x) < p(x)
 * (*accepted true); else (*accepted false) the draw of u_residual from
 * max(0, p - q) normalized, or from p where that is zero everywhere: the
 * first id whose running mass exceeds u_residual times the total. The id
 * returned is distributed as p. */
int32_t fdy_speculative_verdict(const double *p, const double *q,
                                uint32_t vocab, int32_t x, double u_accept,
                                double u_residual, bool *accepted);

#ifdef __cplusplus
}
#endif
#endif
