/* Speculative decoding (include/foundry/speculative.h): the draft proposes
 * K ids one pass at a time, the target checks them all in one pass of its
 * decode step, both rewind to what was accepted. Positions: after the
 * prompt and each round, both sessions hold every accepted id but the last
 * one emitted (t), which the next round feeds first. A speculator runs the
 * rounds on a slot of each session; fdy_llama_generate_speculative is its
 * prefill and loop over slot 0 of both.
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

struct fdy_llama_speculator {
  fdy_llama_session *target, *draft;
  uint32_t max_k;
  int32_t *proposal; /* [1 + max_k]: t, then the draft's ids */
  int32_t *verdict;  /* [1 + max_k]: the target's next id after each */
  fdy_llama_speculative_stats stats;
  /* the round in progress (open until keep) */
  bool open;
  uint32_t target_slot, draft_slot, p, k, accepted;
  /* sampled rounds (logits; NULL when created without) */
  const fdy_sample_params *sampling; /* this round's; NULL: greedy */
  uint32_t vocab;
  float *draft_logits;     /* [max_k, vocab]: the draft's at each proposal */
  float *target_logits;    /* [1 + max_k, vocab]: the target's at each row */
  double *p_dist, *q_dist; /* [vocab]: the two distributions of one row */
};

/* The streams of the acceptance tests and of the draws after a rejection,
 * and the draft's own stream, derived from the sampling seed. */
#define ACCEPT_STREAM   0x5eed0001a55e1c7ull
#define RESIDUAL_STREAM 0x5eed0002d15c4a1ull
#define DRAFT_STREAM    0x5eed0003d4af7ull

bool fdy_llama_speculative_needs_logits(const fdy_sample_params *sampling) {
  return sampling && sampling->temperature > 0.0f && sampling->top_k != 1;
}

/* A draft of another vocabulary than the target's: refused naming both
 * sizes. */
static fdy_status check_vocab(const fdy_llama_session *target,
                              const fdy_llama_session *draft, fdy_error *err) {
  uint32_t vocab = target->config->vocab_size;
  if (draft->config->vocab_size == vocab) {
    return FDY_OK;
  }
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

/* A target whose steps cannot verify max_k drafted ids. */
static fdy_status check_rows(const fdy_llama_session *target, uint32_t max_k,
                             fdy_error *err) {
  if (target->step_rows >= max_k + 1) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                "the target's steps hold %u rows, but verifying %u drafted "
                "ids needs %u: create it with step_rows %u",
                target->step_rows, max_k, max_k + 1, max_k + 1);
  if (err) {
    err->expected = max_k + 1;
    err->actual = target->step_rows;
  }
  return FDY_ERR_INVALID_ARGUMENT;
}

static fdy_status logits_refused(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "speculative sampling reads both models' logits: "
                       "create the target and the draft sessions without "
                       "ids_only");
}

void fdy_llama_speculator_destroy(fdy_llama_speculator *s) {
  if (!s) {
    return;
  }
  free(s->proposal);
  free(s->verdict);
  free(s->draft_logits);
  free(s->target_logits);
  free(s->p_dist);
  free(s->q_dist);
  free(s);
}

fdy_status fdy_llama_speculator_create(fdy_llama_session *target,
                                       fdy_llama_session *draft, uint32_t max_k,
                                       bool logits, fdy_llama_speculator **out,
                                       fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_speculator_create needs an output");
  }
  *out = NULL;
  if (!target || !draft) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a speculator needs a target and a draft session");
  }
  fdy_status st = check_vocab(target, draft, err);
  if (st != FDY_OK) {
    return st;
  }
  if (max_k == 0 || max_k > FDY_LLAMA_MAX_DRAFT_TOKENS) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "a speculator proposes 1 to %u ids per round, not %u",
                  FDY_LLAMA_MAX_DRAFT_TOKENS, max_k);
    if (err) {
      err->expected = FDY_LLAMA_MAX_DRAFT_TOKENS;
      err->actual = max_k;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  st = check_rows(target, max_k, err);
  if (st != FDY_OK) {
    return st;
  }
  if (logits && (target->ids_only || draft->ids_only)) {
    return logits_refused(err);
  }
  fdy_llama_speculator *s = calloc(1, sizeof *s);
  if (s) {
    s->target = target;
    s->draft = draft;
    s->max_k = max_k;
    s->proposal = malloc(sizeof *s->proposal * (max_k + 1));
    s->verdict = malloc(sizeof *s->verdict * (max_k + 1));
  }
  bool allocated = s && s->proposal && s->verdict;
  if (allocated && logits) {
    uint32_t vocab = s->vocab = target->config->vocab_size;
    s->draft_logits = malloc(sizeof *s->draft_logits * max_k * vocab);
    s->target_logits = malloc(sizeof *s->target_logits * (max_k + 1) * vocab);
    s->p_dist = malloc(sizeof *s->p_dist * vocab);
    s->q_dist = malloc(sizeof *s->q_dist * vocab);
    allocated = s->draft_logits && s->target_logits && s->p_dist && s->q_dist;
  }
  if (!allocated) {
    fdy_llama_speculator_destroy(s);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  *out = s;
  return FDY_OK;
}

fdy_llama_speculative_stats
fdy_llama_speculator_stats(const fdy_llama_speculator *s) {
  fdy_llama_speculative_stats none = {0};
  return s ? s->stats : none;
}

uint32_t fdy_llama_speculative_next_k(const fdy_llama_speculative_options *spec,
                                      uint32_t k, uint32_t proposed,
                                      uint32_t accepted) {
  if (spec->fixed) {
    return spec->draft_tokens;
  }
  uint32_t max_k =
      spec->max_draft_tokens ? spec->max_draft_tokens : spec->draft_tokens;
  if (accepted < proposed) {
    return accepted + 1;
  }
  return 2 * k < max_k ? 2 * k : max_k;
}

/* The ids the draft proposes after s->proposal[0]: k passes, each feeding
 * the previous id; into proposal[1..k]. */
static fdy_status propose(fdy_llama_speculator *s, uint32_t k, fdy_error *err) {
  int64_t t0 = fdy_now_ns();
  fdy_status st = FDY_OK;
  for (uint32_t i = 0; st == FDY_OK && i < k; i++) {
    float *logits =
        s->sampling ? s->draft_logits + (uint64_t)i * s->vocab : NULL;
    st = fdy_llama_session_append(s->draft, s->draft_slot, &s->proposal[i], 1,
                                  NULL, logits, err);
    s->proposal[i + 1] = fdy_llama_session_slot_next(s->draft, s->draft_slot);
    s->stats.draft_passes++;
  }
  s->stats.draft_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
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
static uint32_t judge_sampled(fdy_llama_speculator *s, uint32_t p, uint32_t k) {
  uint64_t seed = s->sampling->seed;
  for (uint32_t i = 0; i < k; i++) {
    uint64_t row = (uint64_t)i * s->vocab;
    fdy_sample_probabilities(s->target_logits + row, s->vocab, s->sampling,
                             s->p_dist);
    fdy_sample_probabilities(s->draft_logits + row, s->vocab, s->sampling,
                             s->q_dist);
    bool accepted = false;
    s->verdict[i] = fdy_speculative_verdict(
        s->p_dist, s->q_dist, s->vocab, s->proposal[i + 1],
        fdy_sample_uniform(seed ^ ACCEPT_STREAM, p + i),
        fdy_sample_uniform(seed ^ RESIDUAL_STREAM, p + i), &accepted);
    if (!accepted) {
      return i;
    }
  }
  return k; /* verdict[k]: the target's own draw at its last row */
}

/* The checks of a round before any work. */
static fdy_status check_round(const fdy_llama_speculator *s,
                              uint32_t target_slot, uint32_t draft_slot,
                              uint32_t k, const fdy_sample_params *sampling,
                              fdy_error *err) {
  if (k > s->max_k) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "a round of %u drafted ids: the speculator was made for at "
                  "most %u",
                  k, s->max_k);
    if (err) {
      err->expected = s->max_k;
      err->actual = k;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (!fdy_llama_session_slot_active(s->target, target_slot) ||
      !fdy_llama_session_slot_active(s->draft, draft_slot)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a round needs the target's slot %u and the draft's "
                         "slot %u to hold the sequence",
                         target_slot, draft_slot);
  }
  uint32_t p = fdy_llama_session_slot_position(s->target, target_slot);
  uint32_t drafted = fdy_llama_session_slot_position(s->draft, draft_slot);
  if (drafted != p) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "the draft's slot holds %u positions, the target's %u: "
                  "both must hold the same sequence",
                  drafted, p);
    if (err) {
      err->expected = p;
      err->actual = drafted;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  uint32_t context = s->target->context < s->draft->context ? s->target->context
                                                            : s->draft->context;
  if ((uint64_t)p + k + 1 > context) {
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "a round of %u drafted ids at position %u needs %llu "
                  "positions; the contexts hold %u",
                  k, p, (unsigned long long)p + k + 1, context);
    if (err) {
      err->expected = context;
      err->actual = (uint64_t)p + k + 1;
    }
    return FDY_ERR_CONTEXT;
  }
  if (sampling) {
    fdy_status st = fdy_llama_sampling_check(sampling, err);
    if (st != FDY_OK) {
      return st;
    }
    if (fdy_llama_speculative_needs_logits(sampling) && !s->target_logits) {
      return logits_refused(err);
    }
  }
  return FDY_OK;
}

fdy_status fdy_llama_speculator_round(fdy_llama_speculator *s,
                                      uint32_t target_slot, uint32_t draft_slot,
                                      int32_t last, uint32_t k,
                                      const fdy_sample_params *sampling,
                                      const int32_t **ids, uint32_t *count,
                                      fdy_error *err) {
  if (!s || !ids || !count) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_speculator_round needs a speculator and "
                         "outputs");
  }
  *ids = NULL;
  *count = 0;
  s->open = false;
  fdy_status st = check_round(s, target_slot, draft_slot, k, sampling, err);
  fdy_sample_params draft_sampling = FDY_LLAMA_GREEDY;
  s->sampling = fdy_llama_speculative_needs_logits(sampling) ? sampling : NULL;
  if (s->sampling) {
    draft_sampling = *sampling;
    draft_sampling.seed ^= DRAFT_STREAM;
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(s->target, target_slot, sampling, err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(s->draft, draft_slot, &draft_sampling,
                                        err);
  }
  if (st != FDY_OK) {
    return st;
  }
  s->target_slot = target_slot;
  s->draft_slot = draft_slot;
  s->p = fdy_llama_session_slot_position(s->target, target_slot);
  s->k = k;
  s->proposal[0] = last;
  st = propose(s, k, err);
  int64_t t0 = fdy_now_ns();
  if (st == FDY_OK) {
    st = fdy_llama_session_append_rows(
        s->target, target_slot, s->proposal, k + 1, s->verdict,
        s->sampling ? s->target_logits : NULL, err);
    s->stats.target_passes++;
  }
  s->stats.target_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
  if (st != FDY_OK) {
    return st;
  }
  uint32_t j = s->sampling ? judge_sampled(s, s->p, k) : 0;
  while (!s->sampling && j < k && s->proposal[j + 1] == s->verdict[j]) {
    j++;
  }
  s->stats.proposed += k;
  s->stats.accepted += j;
  s->accepted = j;
  s->open = true;
  *ids = s->verdict;
  *count = j + 1;
  return FDY_OK;
}

fdy_status fdy_llama_speculator_keep(fdy_llama_speculator *s, uint32_t emitted,
                                     fdy_error *err) {
  if (!s || !s->open || emitted == 0 || emitted > s->accepted + 1) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_speculator_keep follows a round and keeps "
                         "1 to its count of ids");
  }
  s->open = false;
  /* fed: t and the proposals before the last emitted id */
  uint32_t keep = s->p + emitted;
  fdy_status st =
      fdy_llama_session_rewind(s->target, s->target_slot, keep, err);
  int64_t t0 = fdy_now_ns();
  uint32_t drafted = fdy_llama_session_slot_position(s->draft, s->draft_slot);
  if (st == FDY_OK && drafted > keep) {
    st = fdy_llama_session_rewind(s->draft, s->draft_slot, keep, err);
  } else if (st == FDY_OK && drafted < keep) {
    /* every proposal accepted: the draft never fed its last one (or t,
     * when k is 0) */
    st = fdy_llama_session_append(s->draft, s->draft_slot, &s->proposal[s->k],
                                  1, NULL, NULL, err);
    s->stats.draft_passes++;
  }
  s->stats.draft_seconds += (double)(fdy_now_ns() - t0) * 1e-9;
  return st;
}

/* The checks of fdy_llama_generate_speculative's pair and options, before
 * any work. */
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
  fdy_status st = check_vocab(target, draft, err);
  if (st != FDY_OK) {
    return st;
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
  st = check_rows(target, *max_k, err);
  if (st != FDY_OK) {
    return st;
  }
  if (options->sampling) {
    st = fdy_llama_sampling_check(options->sampling, err);
    if (st != FDY_OK) {
      return st;
    }
    if (fdy_llama_speculative_needs_logits(options->sampling) &&
        (target->ids_only || draft->ids_only)) {
      return logits_refused(err);
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
  st = fdy_llama_session_check(target, prompt, prompt_count, start, extra, err);
  if (st == FDY_OK) {
    st =
        fdy_llama_session_check(draft, prompt, prompt_count, start, extra, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "the draft");
    }
  }
  return st;
}

/* One generation in progress. */
typedef struct spec_run {
  const fdy_llama_config *config;
  const fdy_llama_generate_options *options;
  int32_t *ids;    /* [max_tokens]: emitted */
  uint32_t count;  /* emitted so far */
  bool stop, more; /* the last id was a stop id; on_token wants more */
} spec_run;

/* Adds id to the output; false when the generation ends with it. */
static bool emit(spec_run *r, int32_t id) {
  const fdy_llama_generate_options *o = r->options;
  r->ids[r->count++] = id;
  r->stop = fdy_llama_is_stop(r->config, o->stop_ids, o->stop_count, id);
  r->more = !o->on_token || o->on_token(o->ctx, id);
  return r->more && r->count < o->max_tokens && (o->ignore_eos || !r->stop);
}

static uint32_t min_u32(uint32_t a, uint32_t b) {
  return a < b ? a : b;
}

/* The rounds after the prompt, which ends at position fed, until the
 * generation ends: each emits its ids up to the end and keeps them. */
static fdy_status decode(fdy_llama_speculator *s, spec_run *r, uint32_t fed,
                         const fdy_llama_speculative_options *spec,
                         fdy_error *err) {
  fdy_status st = FDY_OK;
  bool done = false;
  uint32_t k = spec->draft_tokens;
  uint32_t context = min_u32(s->target->context, s->draft->context);
  while (st == FDY_OK && !done) {
    uint32_t p = fed + r->count - 1;
    uint32_t n = min_u32(min_u32(k, r->options->max_tokens - r->count - 1),
                         context - p - 1);
    const int32_t *ids = NULL;
    uint32_t count = 0;
    st = fdy_llama_speculator_round(s, 0, 0, r->ids[r->count - 1], n,
                                    r->options->sampling, &ids, &count, err);
    uint32_t emitted = 0;
    while (st == FDY_OK && emitted < count && !done) {
      done = !emit(r, ids[emitted++]);
    }
    if (st == FDY_OK) {
      st = fdy_llama_speculator_keep(s, emitted, err);
      k = fdy_llama_speculative_next_k(spec, k, n, count - 1);
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
  spec_run r = {.config = target->config, .options = options, .more = true};
  fdy_llama_speculator *s = NULL;
  r.ids = malloc(sizeof *r.ids * (max_tokens ? max_tokens : 1));
  st = r.ids
           ? fdy_llama_speculator_create(
                 target, draft, max_k,
                 fdy_llama_speculative_needs_logits(options->sampling), &s, err)
           : fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  if (st == FDY_OK) {
    st = fdy_llama_session_set_sampling(target, 0, options->sampling, err);
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
    st = decode(s, &r, fed, spec, err);
  }
  int64_t t2 = fdy_now_ns();
  fdy_llama_speculative_stats done = fdy_llama_speculator_stats(s);
  fdy_llama_speculator_destroy(s);
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
    *stats = done;
  }
  return FDY_OK;
}
