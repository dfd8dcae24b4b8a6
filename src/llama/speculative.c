/* Speculative decoding (include/foundry/speculative.h): the draft proposes
 * K ids one pass at a time, the target checks them all in one pass of its
 * decode step, both rewind to what was accepted. Positions: after the
 * prompt and each round, both sessions hold every accepted id but the last
 * one emitted (t), which the next round feeds first.
 *
 * Sampling follows the rejection rule of Leviathan et al. and Chen et al.
 * (2023): with p and q the target's and the draft's distributions at a
 * position (SAMPLE's, fdy_sample_probabilities, from the logits of the
 * passes), a proposal x is accepted when u q(x) < p(x) for a uniform u;
 * the first rejected one is replaced by a draw from max(0, p - q)
 * normalized; after K acceptances the target's own draw at the last row
 * follows. Every emitted id is then distributed as the target's sampling
 * alone would draw it. */
#include <stdlib.h>
#include <string.h>

#include "foundry/speculative.h"
#include "infer.h"

/* One generation in progress. */
typedef struct spec_run {
  fdy_llama_session *target, *draft;
  const fdy_llama_generate_options *options;
  int32_t *ids;      /* [max_tokens]: emitted */
  uint32_t count;    /* emitted so far */
  bool stop, more;   /* the last id was a stop id; on_token wants more */
  int32_t *proposal; /* [1 + max K]: t, then the draft's ids */
  int32_t *verdict;  /* [1 + max K]: the target's next id after each */
  fdy_llama_speculative_stats stats;
  /* sampling (NULL: greedy, and nothing below is allocated) */
  const fdy_sample_params *sampling;
  uint32_t vocab;
  float *draft_logits;  /* [max K, vocab]: the draft's at each proposal */
  float *target_logits; /* [1 + max K, vocab]: the target's at each row */
  double *p, *q;        /* [vocab]: the two distributions of one row */
} spec_run;

/* The streams of the acceptance tests and of the draws after a rejection,
 * and the draft's own stream, derived from the sampling seed. */
#define ACCEPT_STREAM   0x5eed0001a55e1c7ull
#define RESIDUAL_STREAM 0x5eed0002d15c4a1ull
#define DRAFT_STREAM    0x5eed0003d4af7ull

/* Adds id to the output; false when the generation ends with it. */
static bool emit(spec_run *r, int32_t id) {
  const fdy_llama_generate_options *o = r->options;
  r->ids[r->count++] = id;
  r->stop =
      fdy_llama_is_stop(r->target->config, o->stop_ids, o->stop_count, id);
  r->more = !o->on_token || o->on_token(o->ctx, id);
  return r->more && r->count < o->max_tokens && (o->ignore_eos || !r->stop);
}

bool fdy_llama_speculative_needs_logits(const fdy_sample_params *sampling) {
  return sampling && sampling->temperature > 0.0f && sampling->top_k != 1;
}

/* The checks of the pair and the options, before any work. */
static fdy_status check_pair(const fdy_llama_session *target,
                             const fdy_llama_session *draft,
                             const int32_t *prompt, uint32_t prompt_count,
                             const fdy_llama_generate_options *options,
                             const fdy_llama_speculative_options *spec,
                             uint32_t *max_k, fdy_error *err) {
  if (!target || !draft || !options || !spec ||
      (options->stop_count > 0 && !options->stop_ids)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_generate_speculative needs a target, a "
                         "draft, options (with stop_ids when stop_count > 0) "
                         "and speculative options");
  }
  uint32_t vocab = target->config->vocab_size;
  if (draft->config->vocab_size != vocab) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "the draft's vocabulary has %u ids, the target's %u: a "
                  "draft must share the target's vocabulary",
                  draft->config->vocab_size, vocab);
    if (err) {
      err->expected = vocab;
      err->actual = draft->config->vocab_size;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  uint32_t k = spec->draft_tokens;
  *max_k =
      spec->fixed || spec->max_draft_tokens == 0 ? k : spec->max_draft_tokens;
  if (k == 0 || *max_k > FDY_LLAMA_MAX_DRAFT_TOKENS || *max_k < k) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "draft tokens %u (at most %u) must be 1 to %u, and at most "
                  "the adaptive bound",
                  k, *max_k, FDY_LLAMA_MAX_DRAFT_TOKENS);
    if (err) {
      err->expected = FDY_LLAMA_MAX_DRAFT_TOKENS;
      err->actual = *max_k > k ? *max_k : k;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (target->step_rows < *max_k + 1) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "the target's steps hold %u rows, but verifying %u drafted "
                  "ids needs %u: create it with step_rows %u",
                  target->step_rows, *max_k, *max_k + 1, *max_k + 1);
    if (err) {
      err->expected = *max_k + 1;
      err->actual = target->step_rows;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (options->sampling) {
    fdy_status st = fdy_llama_sampling_check(options->sampling, err);
    if (st != FDY_OK) {
      return st;
    }
    if (fdy_llama_speculative_needs_logits(options->sampling) &&
        (target->ids_only || draft->ids_only)) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "speculative sampling reads both models' logits: "
                           "create the target and the draft sessions "
                           "without ids_only");
    }
  }
  uint32_t start = 0;
  if (options->keep_context) {
    start = fdy_llama_session_position(target);
    if (fdy_llama_session_position(draft) != start) {
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                    "keep_context: the draft holds %u positions, the target "
                    "%u: both must hold the same conversation",
                    fdy_llama_session_position(draft), start);
      if (err) {
        err->expected = start;
        err->actual = fdy_llama_session_position(draft);
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
  }
  if (!prompt || prompt_count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the prompt is empty: give at least one token id");
  }
  /* the prompt and every emitted id but the last are fed to both */
  uint64_t extra = options->max_tokens ? options->max_tokens - 1 : 0;
  fdy_status st =
      fdy_llama_session_check(target, prompt, prompt_count, start, extra, err);
  if (st == FDY_OK) {
    st =
        fdy_llama_session_check(draft, prompt, prompt_count, start, extra, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "the draft");
    }
  }
  return st;
}

/* The ids the draft proposes after r->proposal[0]: k passes, each feeding
 * the previous id; into proposal[1..k]. */
static fdy_status propose(spec_run *r, uint32_t k, fdy_error *err) {
  int64_t t0 = fdy_now_ns();
  fdy_status st = FDY_OK;
  for (uint32_t i = 0; st == FDY_OK && i < k; i++) {
    float *logits =
        r->sampling ? r->draft_logits + (uint64_t)i * r->vocab : NULL;
    st = fdy_llama_session_append(r->draft, 0, &r->proposal[i], 1, NULL, logits,
                                  err);
    r->proposal[i + 1] = fdy_llama_session_slot_next(r->draft, 0);
    r->stats.draft_passes++;
  }
  r->stats.draft_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
  return st;
}

int32_t fdy_speculative_verdict(const double *p, const double *q,
                                uint32_t vocab, int32_t x, double u_accept,
                                double u_residual, bool *accepted) {
  *accepted = q[x] > 0.0 && u_accept * q[x] < p[x];
  if (*accepted) {
    return x;
  }
  double total = 0.0;
  for (uint32_t i = 0; i < vocab; i++) {
    total += p[i] > q[i] ? p[i] - q[i] : 0.0;
  }
  bool plain = !(total > 0.0);
  double target = u_residual * (plain ? 1.0 : total), run = 0.0;
  int32_t last = -1;
  for (uint32_t i = 0; i < vocab; i++) {
    double mass = plain ? p[i] : (p[i] > q[i] ? p[i] - q[i] : 0.0);
    if (mass > 0.0) {
      run += mass;
      last = (int32_t)i;
      if (run > target) {
        break;
      }
    }
  }
  return last;
}

/* The rejection rule over the k proposals of a round from position p (row
 * i fed proposal[i] at position p + i; its logits gave the target's p and
 * the draft's q for proposal[i + 1]): the proposals accepted (the count is
 * returned) and, in verdict[that count], the id that follows them. */
static uint32_t judge_sampled(spec_run *r, uint32_t p, uint32_t k) {
  uint64_t seed = r->sampling->seed;
  for (uint32_t i = 0; i < k; i++) {
    uint64_t row = (uint64_t)i * r->vocab;
    fdy_sample_probabilities(r->target_logits + row, r->vocab, r->sampling,
                             r->p);
    fdy_sample_probabilities(r->draft_logits + row, r->vocab, r->sampling,
                             r->q);
    bool accepted = false;
    r->verdict[i] = fdy_speculative_verdict(
        r->p, r->q, r->vocab, r->proposal[i + 1],
        fdy_sample_uniform(seed ^ ACCEPT_STREAM, p + i),
        fdy_sample_uniform(seed ^ RESIDUAL_STREAM, p + i), &accepted);
    if (!accepted) {
      return i;
    }
  }
  return k; /* verdict[k]: the target's own draw at its last row */
}

/* One round from position p (both sessions hold p positions; t =
 * proposal[0] is fed now) with k proposals: verify, accept, emit, and both
 * sessions back to t and the ids emitted but the last (p + the ids
 * emitted). *accepted = the proposals accepted; *done when the generation
 * ended. */
static fdy_status round_of(spec_run *r, uint32_t p, uint32_t k,
                           uint32_t *accepted, bool *done, fdy_error *err) {
  fdy_status st = propose(r, k, err);
  int64_t t0 = fdy_now_ns();
  if (st == FDY_OK) {
    st = fdy_llama_session_append_rows(r->target, 0, r->proposal, k + 1,
                                       r->verdict, r->target_logits, err);
    r->stats.target_passes++;
  }
  r->stats.target_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
  if (st != FDY_OK) {
    return st;
  }
  uint32_t j = r->sampling ? judge_sampled(r, p, k) : 0;
  while (!r->sampling && j < k && r->proposal[j + 1] == r->verdict[j]) {
    j++;
  }
  r->stats.proposed += k;
  r->stats.accepted += j;
  *accepted = j;
  *done = false;
  uint32_t emitted = 0;
  while (emitted <= j && !*done) {
    *done = !emit(r, r->verdict[emitted++]);
  }
  /* fed: t and the proposals before the last emitted id */
  uint32_t keep = p + emitted;
  st = fdy_llama_session_rewind(r->target, 0, keep, err);
  t0 = fdy_now_ns();
  uint32_t drafted = fdy_llama_session_slot_position(r->draft, 0);
  if (st == FDY_OK && drafted > keep) {
    st = fdy_llama_session_rewind(r->draft, 0, keep, err);
  } else if (st == FDY_OK && drafted < keep) {
    /* every proposal accepted: the draft never fed its last one (or t,
     * when k is 0) */
    st = fdy_llama_session_append(r->draft, 0, &r->proposal[k], 1, NULL, NULL,
                                  err);
    r->stats.draft_passes++;
  }
  r->stats.draft_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
  r->proposal[0] = r->verdict[emitted - 1];
  return st;
}

static uint32_t min_u32(uint32_t a, uint32_t b) {
  return a < b ? a : b;
}

/* The rounds after the prompt, which ends at position fed, until the
 * generation ends. */
static fdy_status decode(spec_run *r, uint32_t fed, uint32_t k, uint32_t max_k,
                         bool fixed, fdy_error *err) {
  fdy_status st = FDY_OK;
  bool done = false;
  while (st == FDY_OK && !done) {
    uint32_t p = fed + r->count - 1;
    uint32_t room = min_u32(r->target->context, r->draft->context) - p - 1;
    uint32_t n =
        min_u32(min_u32(k, r->options->max_tokens - r->count - 1), room);
    uint32_t accepted = 0;
    st = round_of(r, p, n, &accepted, &done, err);
    if (!fixed) {
      k = accepted == n ? min_u32(2 * k, max_k) : accepted + 1;
    }
  }
  return st;
}

fdy_status fdy_llama_generate_speculative(
    fdy_llama_session *target, fdy_llama_session *draft, const int32_t *prompt,
    uint32_t prompt_count, const fdy_llama_generate_options *options,
    const fdy_llama_speculative_options *spec, fdy_llama_generation *out,
    fdy_llama_speculative_stats *stats, fdy_error *err) {
  if (out) {
    memset(out, 0, sizeof *out);
  }
  if (stats) {
    memset(stats, 0, sizeof *stats);
  }
  uint32_t max_k = 0;
  fdy_status st = out ? check_pair(target, draft, prompt, prompt_count, options,
                                   spec, &max_k, err)
                      : fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                                      "fdy_llama_generate_speculative needs "
                                      "an output");
  if (st != FDY_OK) {
    return st;
  }
  uint32_t max_tokens = options->max_tokens;
  spec_run r = {
      .target = target, .draft = draft, .options = options, .more = true};
  r.ids = malloc(sizeof *r.ids * (max_tokens ? max_tokens : 1));
  r.proposal = malloc(sizeof *r.proposal * (max_k + 1));
  r.verdict = malloc(sizeof *r.verdict * (max_k + 1));
  bool allocated = r.ids && r.proposal && r.verdict;
  if (allocated && fdy_llama_speculative_needs_logits(options->sampling)) {
    r.sampling = options->sampling;
    r.vocab = target->config->vocab_size;
    r.draft_logits = malloc(sizeof *r.draft_logits * max_k * r.vocab);
    r.target_logits = malloc(sizeof *r.target_logits * (max_k + 1) * r.vocab);
    r.p = malloc(sizeof *r.p * r.vocab);
    r.q = malloc(sizeof *r.q * r.vocab);
    allocated = r.draft_logits && r.target_logits && r.p && r.q;
  }
  if (!allocated) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_sample_params draft_sampling = FDY_LLAMA_GREEDY;
  if (r.sampling) {
    draft_sampling = *r.sampling;
    draft_sampling.seed ^= DRAFT_STREAM;
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(target, 0, options->sampling, err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(draft, 0, &draft_sampling, err);
  }
  int64_t t0 = fdy_now_ns(), t1 = t0;
  if (st == FDY_OK && !options->keep_context) {
    fdy_llama_session_reset(target);
    fdy_llama_session_reset(draft);
  }
  uint32_t fed = fdy_llama_session_position(target) + prompt_count;
  if (st == FDY_OK) {
    st = fdy_llama_session_append(target, 0, prompt, prompt_count, NULL, NULL,
                                  err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_append(draft, 0, prompt, prompt_count, NULL, NULL,
                                  err);
    t1 = fdy_now_ns();
  }
  if (st == FDY_OK && max_tokens > 0 &&
      emit(&r, fdy_llama_session_slot_next(target, 0))) {
    r.proposal[0] = r.ids[0];
    st = decode(&r, fed, spec->draft_tokens, max_k, spec->fixed, err);
  }
  int64_t t2 = fdy_now_ns();
  free(r.proposal);
  free(r.verdict);
  free(r.draft_logits);
  free(r.target_logits);
  free(r.p);
  free(r.q);
  if (st != FDY_OK) {
    free(r.ids);
    return st;
  }
  out->ids = r.ids;
  out->count = r.count;
  out->stopped_at_eos = !options->ignore_eos && r.count > 0 && r.stop;
  out->interrupted = !r.more;
  out->prefill_seconds = (double)(t1 - t0) * 1e-9;
  out->decode_seconds = (double)(t2 - t1) * 1e-9;
  out->prefill_tokens_per_second =
      out->prefill_seconds > 0 ? prompt_count / out->prefill_seconds : 0.0;
  out->decode_tokens_per_second =
      r.count > 1 && out->decode_seconds > 0
          ? (double)(r.count - 1) / out->decode_seconds
          : 0.0;
  if (stats) {
    *stats = r.stats;
  }
  return FDY_OK;
}
