/* Llama 3 inference through the engine over an open fdy_llama_model:
 * sessions (graph, plan and executor on a backend, with the KV cache),
 * greedy generation and verification against a reference (the format of
 * tests/data/<fixture>/expected.safetensors). */
#ifndef FOUNDRY_LLAMA_SESSION_H
#define FOUNDRY_LLAMA_SESSION_H

#include "foundry/llama.h"
#include "foundry/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sessions ------------------------------------------------------------ */

typedef struct fdy_llama_session fdy_llama_session;

/* Default KV cache positions: max_position_embeddings, capped here. */
#define FDY_LLAMA_DEFAULT_CONTEXT 4096u
/* Default tokens per prefill run, capped at the context: a prompt of up to
 * 512 tokens is one run of the prefill step. */
#define FDY_LLAMA_DEFAULT_PREFILL_ROWS 512u
/* Most sequences one session holds. */
#define FDY_LLAMA_MAX_SEQUENCES 1024u
/* Default slots for streamed weights (when the budget streams any). */
#define FDY_LLAMA_DEFAULT_BUFFERS 2u

typedef struct fdy_llama_session_options {
  fdy_backend *backend;   /* runs every op; required, outlives the session */
  uint32_t context;       /* KV cache positions; 0 = the model's
                             max_position_embeddings capped at
                             FDY_LLAMA_DEFAULT_CONTEXT */
  uint32_t prefill_rows;  /* tokens per prefill run; 0 = the smaller of
                             FDY_LLAMA_DEFAULT_PREFILL_ROWS and the
                             context */
  uint32_t max_sequences; /* sequences held at once (slots 0 to
                             max_sequences - 1), each with its own KV
                             region of `context` positions; 0 = 1 */
  uint32_t step_rows;     /* rows of one step of the batch
                             (fdy_llama_session_step): decode rows and
                             prompt chunks together, >= max_sequences;
                             0 = 1 for one sequence, else max_sequences +
                             prefill_rows */
  fdy_dtype kv_dtype;     /* F32 (the zero value) or F16 */
  bool all_logits;        /* prefill returns every row's logits (verify) */
  bool ids_only;          /* forward passes return only the next id: the
                             steps copy no logits back (generation); not
                             with all_logits */
  uint64_t weight_budget; /* device bytes for weights; 0 = the device's
                             memory (everything resident when it fits) */
  uint32_t buffers;       /* slots for streamed weights; 0 =
                             FDY_LLAMA_DEFAULT_BUFFERS */
  bool no_graphs;         /* run steps command by command even where the
                             backend can record them as graphs (CUDA) */
  bool collect_timings;   /* the executor times every command of each run
                             (fdy_llama_session_timings; traces): host work
                             per command, so not for measured runs */
  bool skip_packing;      /* stream layer units extent by extent from the
                             mapped checkpoint instead of from packed,
                             page-locked copies (fdy_executor_options) */
} fdy_llama_session_options;

/* A session: the model's graph, its plan (steps "prefill" and "decode")
 * and an executor on options->backend, with the KV cache of max_sequences
 * regions as plan state. Everything is allocated and the resident weights
 * uploaded here; a forward pass allocates nothing. The model must outlive
 * the session. Errors: a context above max_position_embeddings
 * (FDY_ERR_INVALID_ARGUMENT, expected = that limit, actual = the context),
 * more than FDY_LLAMA_MAX_SEQUENCES sequences (FDY_ERR_INVALID_ARGUMENT,
 * expected = that limit), no backend, and whatever the planner and executor
 * report (an impossible budget, an op the backend does not support, a
 * KV cache or other device allocation that does not fit: FDY_ERR_BUDGET
 * naming the bytes needed and available). A session is used by one thread
 * at a time; results do not depend on the backend's thread count. */
fdy_status fdy_llama_session_create(const fdy_llama_model *model,
                                    const fdy_llama_session_options *options,
                                    fdy_llama_session **out, fdy_error *err);
void fdy_llama_session_destroy(fdy_llama_session *session);
/* Positions used so far by slot 0 (the sequence of forward and
 * generate). */
uint32_t fdy_llama_session_position(const fdy_llama_session *session);
/* The context (KV cache positions of each sequence), default resolved. */
uint32_t fdy_llama_session_context(const fdy_llama_session *session);
/* What the executor allocated: device bytes per memory class (resident
 * weights, slots, activation arena, KV state, io) and setup times. */
fdy_executor_stats fdy_llama_session_stats(const fdy_llama_session *session);
/* The session's plan (e.g. to save it). */
const fdy_plan *fdy_llama_session_plan(const fdy_llama_session *session);
/* Tokens per prefill run, default resolved. */
uint32_t fdy_llama_session_prefill_rows(const fdy_llama_session *session);
/* The per-command timings of the session's latest executor run (one run of
 * the step "prefill" or "decode": a forward of up to prefill_rows tokens
 * is one run) for a session created with collect_timings, else NULL (and
 * *count 0). Valid until the next forward or destroy. */
const fdy_command_timing *
fdy_llama_session_timings(const fdy_llama_session *session, size_t *count);
/* Frees every slot and forgets every position (the KV cache is
 * overwritten as it refills). */
void fdy_llama_session_reset(fdy_llama_session *session);
/* Appends count tokens to slot 0's sequence: fdy_llama_session_append with
 * slot 0. */
fdy_status fdy_llama_session_forward(fdy_llama_session *session,
                                     const int32_t *ids, uint32_t count,
                                     float *all_logits, float *last_logits,
                                     fdy_error *err);
/* The id drawn on the backend (fdy_llama_session_set_sampling; greedy:
 * the argmax, lowest id on ties) from the last token's logits of slot 0's
 * latest pass; -1 before any. */
int32_t fdy_llama_session_next(const fdy_llama_session *session);

/* ---- sampling --------------------------------------------------------------
 * Each slot draws its next ids with its own parameters (fdy_sample_params
 * of foundry/ops.h; greedy until set): the SAMPLE op on the backend over
 * the last row of the slot's pass, with the slot's seed and, as the
 * counter, the position of that row in the sequence. So a seeded sequence
 * draws the same ids whatever else is in the batch and however its prompt
 * was cut into chunks (given the same logits: bitwise on the CPU backend,
 * on CUDA among batches of 2 rows or more). */

/* Greedy: temperature 0 (the argmax, lowest id on ties). */
#define FDY_LLAMA_GREEDY                                                       \
  ((fdy_sample_params){.temperature = 0.0f,                                    \
                       .top_k = 0,                                             \
                       .top_p = 1.0f,                                          \
                       .min_p = 0.0f,                                          \
                       .seed = 0})

/* Checks sampling parameters: temperature finite and >= 0, top_p in
 * [0, 1] (0 and 1: off), min_p in [0, 1]; else FDY_ERR_INVALID_ARGUMENT
 * with err->name the field ("temperature", "top_p", "min_p"). NULL is
 * refused likewise. */
fdy_status fdy_llama_sampling_check(const fdy_sample_params *sampling,
                                    fdy_error *err);

/* Sets the sampling of slot (NULL: greedy) for its later passes; kept
 * across release and reset. A slot out of range or parameters refused by
 * fdy_llama_sampling_check: FDY_ERR_INVALID_ARGUMENT, nothing changed. */
fdy_status fdy_llama_session_set_sampling(fdy_llama_session *session,
                                          uint32_t slot,
                                          const fdy_sample_params *sampling,
                                          fdy_error *err);

/* ---- sequences by slot ----------------------------------------------------
 * A session of max_sequences holds that many independent sequences, each in
 * a slot (0 to max_sequences - 1) with its own position and KV region. A
 * slot is active from its first append (or admit) until it is released or
 * the session reset. Every error below is reported before any work and
 * leaves the session unchanged; a backend failure leaves it failed (every
 * later call fails). */

/* Slots, default resolved. */
uint32_t fdy_llama_session_max_sequences(const fdy_llama_session *session);
/* Rows of one step of the batch, default resolved. */
uint32_t fdy_llama_session_step_rows(const fdy_llama_session *session);
/* Positions used by the sequence in slot (0 when free or out of range). */
uint32_t fdy_llama_session_slot_position(const fdy_llama_session *session,
                                         uint32_t slot);
/* The id drawn from the last token of the slot's latest pass (greedy: its
 * argmax); -1 before any, when free or out of range. */
int32_t fdy_llama_session_slot_next(const fdy_llama_session *session,
                                    uint32_t slot);
/* Whether the slot holds a sequence. */
bool fdy_llama_session_slot_active(const fdy_llama_session *session,
                                   uint32_t slot);

/* Appends count tokens to the sequence in slot at its position: runs of
 * the prefill step over chunks of up to prefill_rows tokens (a single
 * token runs the decode step with one row), which the slot's next id
 * follows. all_logits (count * vocab floats; only for sessions created
 * with all_logits) and last_logits (vocab floats; NULL for sessions
 * created ids_only: FDY_ERR_INVALID_ARGUMENT otherwise) may each be NULL.
 * A slot out of range or ids outside the vocabulary:
 * FDY_ERR_INVALID_ARGUMENT; exceeding the context: FDY_ERR_CONTEXT. */
fdy_status fdy_llama_session_append(fdy_llama_session *session, uint32_t slot,
                                    const int32_t *ids, uint32_t count,
                                    float *all_logits, float *last_logits,
                                    fdy_error *err);

/* Admits a prompt into the lowest free slot (*slot) and prefills it
 * (fdy_llama_session_append); its first generated id is then
 * fdy_llama_session_slot_next(session, *slot). Every slot in use:
 * FDY_ERR_INVALID_ARGUMENT (expected = max_sequences). */
fdy_status fdy_llama_session_admit(fdy_llama_session *session,
                                   const int32_t *ids, uint32_t count,
                                   uint32_t *slot, fdy_error *err);

/* One decode step for count sequences at once: row r feeds ids[r] to the
 * sequence in slots[r] at that slot's position; next[r] receives the row's
 * argmax (lowest id on ties), also the slot's next id; logits, when not
 * NULL, receives the rows' logits (count * vocab floats; NULL for
 * sessions created ids_only). Every streamed weight is copied once for
 * the whole step. A row's results do not depend on the other rows (on the
 * CPU backend bitwise for every count; on CUDA bitwise for every count of
 * 2 or more). Errors: count of 0 or above max_sequences, a slot out of
 * range, free or repeated, ids outside the vocabulary
 * (FDY_ERR_INVALID_ARGUMENT, ids[0] = the row), a slot whose context is
 * full (FDY_ERR_CONTEXT). */
fdy_status fdy_llama_session_decode(fdy_llama_session *session,
                                    const uint32_t *slots, const int32_t *ids,
                                    uint32_t count, int32_t *next,
                                    float *logits, fdy_error *err);

/* One part of a step of the batch: count ids appended to the sequence in
 * slot (one id: a decode row; more: a chunk of a prompt). */
typedef struct fdy_llama_step_part {
  uint32_t slot;
  const int32_t *ids;
  uint32_t count;
} fdy_llama_step_part;

/* One step of the batch: every part appends its ids to the sequence in its
 * slot at that slot's position (a free slot starts a sequence), all in one
 * pass of the decode step, so that every streamed weight is copied once
 * for decode rows and prompt chunks together. next[i] receives the argmax
 * of part i's last row (lowest id on ties), also the slot's next id;
 * logits, when not NULL, receives the logits of each part's last row
 * (part_count * vocab floats; NULL for sessions created ids_only). A row's
 * results do not depend on the other rows, as in fdy_llama_session_decode.
 * Errors: no parts, more rows in all than step_rows, a part without ids, a
 * slot out of range or repeated, ids outside the vocabulary
 * (FDY_ERR_INVALID_ARGUMENT, ids[0] = the part), a part beyond its slot's
 * context (FDY_ERR_CONTEXT, ids[0] = the part). */
fdy_status fdy_llama_session_step(fdy_llama_session *session,
                                  const fdy_llama_step_part *parts,
                                  uint32_t part_count, int32_t *next,
                                  float *logits, fdy_error *err);

/* Frees slot: its positions are forgotten and its KV region reused by the
 * next admit. A slot out of range or free: FDY_ERR_INVALID_ARGUMENT. */
fdy_status fdy_llama_session_release(fdy_llama_session *session, uint32_t slot,
                                     fdy_error *err);

/* Appends count ids to the sequence in slot (a free slot starts one) in one
 * pass of the decode step, and gives every row's next id: row_next[i] is
 * the id drawn after ids[0..i] (greedy: their argmax), as if each had been
 * fed alone (the rows of a step do not depend on one another): the
 * verification of drafted ids in speculative decoding. Only the last row
 * draws with the slot's sampling; the others give their argmax. logits,
 * when not NULL, receives every row's logits (count * vocab floats; NULL
 * for sessions created ids_only). count is at most step_rows. Errors as
 * fdy_llama_session_step's for one part of count ids, and a NULL row_next
 * (FDY_ERR_INVALID_ARGUMENT). */
fdy_status fdy_llama_session_append_rows(fdy_llama_session *session,
                                         uint32_t slot, const int32_t *ids,
                                         uint32_t count, int32_t *row_next,
                                         float *logits, fdy_error *err);

/* Takes the sequence in slot back to its first `position` positions: the
 * later ones are forgotten (their KV entries are never read again and are
 * overwritten by the next appends), and the slot's next id is -1 until its
 * next pass. A slot out of range or free, or a position beyond the slot's:
 * FDY_ERR_INVALID_ARGUMENT (expected = the slot's position), nothing
 * changed. */
fdy_status fdy_llama_session_rewind(fdy_llama_session *session, uint32_t slot,
                                    uint32_t position, fdy_error *err);

typedef struct fdy_llama_generation {
  int32_t *ids; /* generated ids (malloc'd; fdy_llama_generation_free) */
  uint32_t count;
  bool stopped_at_eos; /* the last id is a stop id (an EOS id of the config
                          or one of the options' stop_ids) */
  bool interrupted;    /* on_token returned false for the last id */
  double prefill_seconds, decode_seconds;
  /* prompt tokens / prefill_seconds; single-token passes after the prefill
   * (count - 1) / decode_seconds, 0 when there were none */
  double prefill_tokens_per_second, decode_tokens_per_second;
} fdy_llama_generation;

void fdy_llama_generation_free(fdy_llama_generation *generation);

/* Receives each generated id as soon as the backend has computed it, before
 * the next pass (so that a caller can print it while generation goes on);
 * returning false stops the generation after this id. */
typedef bool (*fdy_llama_token_fn)(void *ctx, int32_t id);

typedef struct fdy_llama_generate_options {
  uint32_t max_tokens; /* ids to generate at most */
  bool ignore_eos;     /* decode max_tokens ids even after a stop id */
  bool keep_context;   /* prefill at the session's position, after what it
                          holds (the next turn of a conversation), instead
                          of resetting the session first */
  /* ids to stop after besides config.json's eos_token_id list (a
   * tokenizer's <|eot_id|>: fdy_tokenizer_stop_ids); NULL when 0 */
  const int32_t *stop_ids;
  uint32_t stop_count;
  fdy_llama_token_fn on_token; /* may be NULL */
  void *ctx;                   /* passed to on_token */
  /* slot 0's sampling for this generation (set on the session); NULL =
   * greedy */
  const fdy_sample_params *sampling;
} fdy_llama_generate_options;

/* Generation: sets slot 0's sampling (options->sampling; greedy when
 * NULL: the argmax, lowest id on ties), resets the session (unless
 * keep_context), prefills the prompt, then decodes up to max_tokens ids,
 * stopping after a stop id (an EOS id of the config or of stop_ids) unless
 * ignore_eos, and after an id for which on_token returned false. The
 * positions used are prompt_count + max_tokens - 1 after the starting
 * position (0, or the session's with keep_context): the last id is returned,
 * never fed back (prompt_count when max_tokens is 0). Before any work
 * (session unchanged): no options, an empty prompt or an id outside the
 * vocabulary or sampling refused by fdy_llama_sampling_check
 * FDY_ERR_INVALID_ARGUMENT, more positions than the context
 * FDY_ERR_CONTEXT (err->expected = the context, err->actual = the positions
 * needed, the starting position included). On success *out owns ids; on
 * failure *out is zeroed (on_token may have seen ids by then). */
fdy_status fdy_llama_generate(fdy_llama_session *session, const int32_t *prompt,
                              uint32_t prompt_count,
                              const fdy_llama_generate_options *options,
                              fdy_llama_generation *out, fdy_error *err);

/* ---- continuous batching ------------------------------------------------
 * fdy_llama_generate over many prompts at once on one session: each in a
 * slot of its own, decoded together one step at a time, a finished
 * sequence's slot refilled with the next waiting prompt. */

/* One prompt of a batch; the caller owns ids. */
typedef struct fdy_llama_batch_prompt {
  const int32_t *ids;  /* the prompt, at least one id */
  uint32_t count;      /* ids */
  uint32_t max_tokens; /* ids to generate at most; 0: checked, not run */
} fdy_llama_batch_prompt;

/* Receives generated id `id` of prompt `index` as soon as the backend has
 * computed it, before the next pass; returning false stops that prompt
 * after this id (the others go on). */
typedef bool (*fdy_llama_batch_token_fn)(void *ctx, uint32_t index, int32_t id);

typedef struct fdy_llama_batch_options {
  bool ignore_eos; /* decode max_tokens ids even after a stop id */
  /* ids to stop after besides config.json's eos_token_id list, for every
   * prompt; NULL when 0 */
  const int32_t *stop_ids;
  uint32_t stop_count;
  fdy_llama_batch_token_fn on_token; /* may be NULL */
  void *ctx;                         /* passed to on_token */
  /* every slot's sampling for this generation (set on the session); NULL
   * = greedy */
  const fdy_sample_params *sampling;
} fdy_llama_batch_options;

/* What one prompt generated. */
typedef struct fdy_llama_batch_sequence {
  int32_t *ids; /* generated ids (malloc'd; freed with the generation) */
  uint32_t count;
  bool stopped_at_eos; /* the last id is a stop id */
  bool interrupted;    /* on_token returned false for the last id */
} fdy_llama_batch_sequence;

typedef struct fdy_llama_batch_generation {
  fdy_llama_batch_sequence *sequences; /* [count], in the prompts' order */
  uint32_t count;
  uint32_t max_rows;       /* most sequences decoded in one step */
  uint64_t prefill_tokens; /* prompt ids fed (admitted alone or in chunks) */
  uint64_t chunked_tokens; /* of them, fed as chunks in steps of the batch
                              beside decode rows */
  uint64_t decode_steps;   /* steps of the batch run */
  uint64_t decode_tokens;  /* decode rows of every step: the ids generated
                              after each prompt's first */
  double prefill_seconds;  /* the prompts admitted alone */
  double decode_seconds;   /* every step of the batch (decode rows and the
                              chunks beside them) */
  /* decode_tokens / decode_seconds, 0 when there were none */
  double decode_tokens_per_second;
} fdy_llama_batch_generation;

/* Frees the sequences' ids and the array and zeroes *generation; NULL is a
 * no-op. */
void fdy_llama_batch_generation_free(fdy_llama_batch_generation *generation);

/* Generation of prompt_count prompts with continuous batching, every slot
 * sampling with options->sampling (greedy when NULL). Resets the session,
 * then takes the prompts in order into its free slots.
 * While no sequence is in the session, the next prompt is admitted alone
 * (fdy_llama_session_admit: a prefill whose argmax is its first id).
 * Otherwise each step of the batch (fdy_llama_session_step) carries a
 * decode row for every sequence whose prompt is in, feeding its last id,
 * and fills the step's other rows with prompt chunks (of prompts begun,
 * then of waiting prompts taking free slots), so that a new prompt never
 * stalls the running sequences for more than a step; the step feeding a
 * prompt's last id gives its first id. A sequence ends at its max_tokens,
 * after a stop id (an EOS id of the config or of stop_ids) unless
 * ignore_eos, or after an id for which on_token returned false; its slot is
 * released for the next step, so that up to max_sequences prompts run at
 * once and the others wait. As in fdy_llama_generate the last id is never
 * fed back: a prompt uses count + max_tokens - 1 positions of its slot.
 * Each prompt's ids equal fdy_llama_generate's for that prompt alone (a
 * row does not depend on the others). Before any work (session unchanged): no
 * options or output, no prompts, stop_ids NULL with stop_count > 0,
 * sampling refused by fdy_llama_sampling_check (FDY_ERR_INVALID_ARGUMENT); and
 * checked for every prompt, err->ids[0] = its index: an empty prompt or an id
 * outside the vocabulary (FDY_ERR_INVALID_ARGUMENT; err->ids[1] = the id's
 * index in the prompt), more positions than the context (FDY_ERR_CONTEXT,
 * err->expected = the context, err->actual = the positions needed). On success
 * *out owns everything and every slot is free; on failure *out is zeroed
 * (on_token may have seen ids by then). */
fdy_status fdy_llama_generate_batch(fdy_llama_session *session,
                                    const fdy_llama_batch_prompt *prompts,
                                    uint32_t prompt_count,
                                    const fdy_llama_batch_options *options,
                                    fdy_llama_batch_generation *out,
                                    fdy_error *err);

/* ---- reference verification --------------------------------------------- */

/* Relative logits error that the float32 CPU backend meets. */
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
 * FDY_ERR_INVALID_ARGUMENT; all before any work. A reference truncated (or
 * whose storage fails) while verify runs: FDY_ERR_IO (err->name = its
 * path), the session unharmed. Outside the tolerance: FDY_OK with passed =
 * false. The session is reset and left after the last pass. */
fdy_status fdy_llama_verify(fdy_llama_session *session,
                            const char *reference_path, double tolerance,
                            fdy_llama_verify_result *out, fdy_error *err);

/* ---- backend against backend -------------------------------------------- */

/* Relative logits error allowed between two backends (issue #10's
 * criterion for the CUDA backend against the CPU backend). */
#define FDY_LLAMA_BACKEND_TOLERANCE 2e-2

/* One teacher-forced step of fdy_llama_compare. */
typedef struct fdy_llama_compare_step {
  int32_t reference_id; /* the reference's argmax (fed to both next) */
  int32_t id;           /* the session's argmax (fdy_llama_session_next) */
  double margin;        /* reference top-1 minus top-2 logit */
  double max_abs_diff;  /* largest |logit - reference logit| */
  bool must_agree;      /* margin > 2 * max_abs_diff */
} fdy_llama_compare_step;

typedef struct fdy_llama_compare_result {
  uint32_t prompt_tokens;
  double logits_relative_error; /* ||logits - ref|| / ||ref|| over the
                                   prompt's rows */
  uint32_t step_count;
  fdy_llama_compare_step *steps; /* malloc'd; fdy_llama_compare_free */
  double max_abs_diff;           /* over every step */
  bool logits_ok;                /* relative error <= tolerance */
  bool steps_ok;                 /* every step that must agree does */
} fdy_llama_compare_result;

void fdy_llama_compare_free(fdy_llama_compare_result *result);

/* Runs the prompt on both sessions (each created with all_logits, on the
 * same model or two of the same shape) and compares every prompt row's
 * logits, then `steps` greedy steps teacher-forced with the reference's
 * ids: step 0 is the prompt's last row, step k the pass over the
 * reference's id of step k - 1. Both sessions are reset first. Errors:
 * sessions without all_logits or of different vocabularies, an empty
 * prompt, a negative or non-finite tolerance (FDY_ERR_INVALID_ARGUMENT),
 * prompt + steps - 1 above a context (FDY_ERR_CONTEXT), and the sessions'
 * failures. On failure *out is zeroed. */
fdy_status fdy_llama_compare(fdy_llama_session *session,
                             fdy_llama_session *reference,
                             const int32_t *prompt, uint32_t prompt_count,
                             uint32_t steps, double tolerance,
                             fdy_llama_compare_result *out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
