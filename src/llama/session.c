/* Sessions: the model's graph and plan (steps "prefill" and "decode") on an
 * executor, so that every computation is a backend op. Create builds and
 * uploads everything; a pass writes the step inputs (the count, then each
 * row's id, position and sequence slot) into the executor's staging, runs
 * a step and reads the logits and the drawn ids back, allocating nothing
 * (the last row of each slot's part samples with the slot's parameters
 * and its position as the counter; other rows are greedy). A
 * prompt chunk of one slot alone runs the prefill step; the decode step
 * carries up to step_rows rows of any slots: one row per decoding
 * sequence, consecutive rows for a prompt chunk (fdy_llama_session_step). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

static uint32_t default_context(const fdy_llama_config *c) {
  return c->max_position_embeddings < FDY_LLAMA_DEFAULT_CONTEXT
             ? c->max_position_embeddings
             : FDY_LLAMA_DEFAULT_CONTEXT;
}

/* The device memory of the backend: the default weight budget. */
static fdy_status device_memory(fdy_backend *b, uint64_t *out, fdy_error *err) {
  fdy_device_caps caps;
  memset(&caps, 0, sizeof caps);
  fdy_status st = b->ops->capabilities(b, &caps, err);
  *out = caps.total_memory;
  return st;
}

/* Refuses a plan whose KV cache (with the arena and io) does not fit the
 * device memory free beside its weights and slots: FDY_ERR_BUDGET, expected
 * = the bytes available to them, actual = the bytes they need. */
static fdy_status check_state_fits(const fdy_plan *plan, fdy_backend *b,
                                   uint32_t sequences, uint32_t context,
                                   fdy_error *err) {
  fdy_device_caps caps;
  memset(&caps, 0, sizeof caps);
  fdy_status st = b->ops->capabilities(b, &caps, err);
  if (st != FDY_OK) {
    return st;
  }
  uint64_t weights = 0, kv = 0, rest = 0;
  for (uint32_t i = 0; i < fdy_plan_buffer_count(plan); i++) {
    const fdy_plan_buffer *buf = fdy_plan_buffer_at(plan, i);
    bool weight =
        buf->cls == FDY_BUFFER_RESIDENT || buf->cls == FDY_BUFFER_SLOT;
    uint64_t *sum = weight                         ? &weights
                    : buf->cls == FDY_BUFFER_STATE ? &kv
                                                   : &rest;
    if (__builtin_add_overflow(*sum, buf->bytes, sum)) {
      *sum = UINT64_MAX;
    }
  }
  uint64_t device = caps.free_memory ? caps.free_memory : caps.total_memory;
  uint64_t available = device > weights ? device - weights : 0;
  uint64_t needed = 0;
  if (__builtin_add_overflow(kv, rest, &needed)) {
    needed = UINT64_MAX;
  }
  if (needed <= available) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_BUDGET,
                "the KV cache of %u sequences x %u positions needs %llu bytes "
                "(and activations and io %llu more), but %llu bytes of %s "
                "are available beside the weights and slots (%llu bytes): "
                "lower --max-sequences or --context, or use --kv-dtype f16",
                sequences, context, (unsigned long long)kv,
                (unsigned long long)rest, (unsigned long long)available,
                caps.name, (unsigned long long)weights);
  if (err) {
    err->expected = available;
    err->actual = needed;
  }
  return FDY_ERR_BUDGET;
}

fdy_status fdy_llama_session_create(const fdy_llama_model *model,
                                    const fdy_llama_session_options *options,
                                    fdy_llama_session **out, fdy_error *err) {
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_create needs an output pointer");
  }
  *out = NULL;
  if (!model || !options || !options->backend) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_create needs a model and a "
                         "backend");
  }
  const fdy_llama_config *c = fdy_llama_model_config(model);
  uint32_t context = options->context ? options->context : default_context(c);
  if (context > c->max_position_embeddings) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "context %u is above the model's max_position_embeddings "
                  "%u",
                  context, c->max_position_embeddings);
    if (err) {
      err->expected = c->max_position_embeddings;
      err->actual = context;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  uint32_t sequences = options->max_sequences ? options->max_sequences : 1;
  if (sequences > FDY_LLAMA_MAX_SEQUENCES) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "max_sequences %u is above the %u a session holds", sequences,
                  FDY_LLAMA_MAX_SEQUENCES);
    if (err) {
      err->expected = FDY_LLAMA_MAX_SEQUENCES;
      err->actual = sequences;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  fdy_llama_session *s = calloc(1, sizeof *s);
  if (s) {
    s->positions = calloc(sequences, sizeof *s->positions);
    s->nexts = malloc(sizeof *s->nexts * sequences);
    s->active = calloc(sequences, sizeof *s->active);
    s->parts = malloc(sizeof *s->parts * sequences);
    s->sampling = calloc(sequences, sizeof *s->sampling);
  }
  if (!s || !s->positions || !s->nexts || !s->active || !s->parts ||
      !s->sampling) {
    fdy_llama_session_destroy(s);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  s->max_sequences = sequences;
  for (uint32_t i = 0; i < sequences; i++) {
    s->nexts[i] = -1;
  }
  s->model = model;
  s->config = c;
  s->context = context;
  s->prefill_rows = options->prefill_rows ? options->prefill_rows
                    : context < FDY_LLAMA_DEFAULT_PREFILL_ROWS
                        ? context
                        : FDY_LLAMA_DEFAULT_PREFILL_ROWS;
  s->step_rows = options->step_rows ? options->step_rows
                 : sequences == 1   ? 1
                                    : sequences + s->prefill_rows;
  s->all_logits = options->all_logits;
  s->ids_only = options->ids_only;
  fdy_llama_graph_options graph_options = {.context = context,
                                           .sequences = sequences,
                                           .step_rows = s->step_rows,
                                           .prefill_rows = s->prefill_rows,
                                           .kv_dtype = options->kv_dtype,
                                           .all_logits = options->all_logits,
                                           .ids_only = options->ids_only};
  uint64_t budget = options->weight_budget;
  fdy_status st =
      budget ? FDY_OK : device_memory(options->backend, &budget, err);
  if (st == FDY_OK) {
    st = fdy_llama_graph(model, &graph_options, &s->graph, &s->io, err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_plan(s->graph, &s->io, budget,
                        options->buffers ? options->buffers
                                         : FDY_LLAMA_DEFAULT_BUFFERS,
                        &s->plan, err);
  }
  if (st == FDY_OK) {
    st = check_state_fits(s->plan, options->backend, sequences, context, err);
  }
  if (st == FDY_OK) {
    fdy_executor_options executor_options = {
        .collect_timings = options->collect_timings,
        .no_graphs = options->no_graphs,
        .skip_packing = options->skip_packing};
    st = fdy_executor_create(s->plan, s->graph, options->backend,
                             &executor_options, &s->executor, err);
  }
  if (st == FDY_OK) {
    s->prefill = (size_t)fdy_executor_step(s->executor, "prefill");
    s->decode = (size_t)fdy_executor_step(s->executor, "decode");
    s->prefill_in = fdy_executor_input(s->executor, s->io.prefill_step, NULL);
    s->decode_in = fdy_executor_input(s->executor, s->io.decode_step, NULL);
    s->prefill_sampling_in =
        fdy_executor_input(s->executor, s->io.prefill_sampling, NULL);
    s->decode_sampling_in =
        fdy_executor_input(s->executor, s->io.decode_sampling, NULL);
  }
  if (st != FDY_OK) {
    fdy_llama_session_destroy(s);
    return st;
  }
  *out = s;
  return FDY_OK;
}

void fdy_llama_session_destroy(fdy_llama_session *s) {
  if (!s) {
    return;
  }
  fdy_executor_destroy(s->executor);
  fdy_plan_destroy(s->plan);
  fdy_graph_destroy(s->graph);
  free(s->positions);
  free(s->nexts);
  free(s->active);
  free(s->parts);
  free(s->sampling);
  free(s);
}

uint32_t fdy_llama_session_position(const fdy_llama_session *session) {
  return fdy_llama_session_slot_position(session, 0);
}

uint32_t fdy_llama_session_context(const fdy_llama_session *session) {
  return session ? session->context : 0;
}

fdy_executor_stats fdy_llama_session_stats(const fdy_llama_session *session) {
  return fdy_executor_get_stats(session ? session->executor : NULL);
}

const fdy_plan *fdy_llama_session_plan(const fdy_llama_session *session) {
  return session ? session->plan : NULL;
}

uint32_t fdy_llama_session_prefill_rows(const fdy_llama_session *session) {
  return session ? session->prefill_rows : 0;
}

const fdy_command_timing *
fdy_llama_session_timings(const fdy_llama_session *session, size_t *count) {
  return fdy_executor_timings(session ? session->executor : NULL, count);
}

int32_t fdy_llama_session_next(const fdy_llama_session *session) {
  return fdy_llama_session_slot_next(session, 0);
}

uint32_t fdy_llama_session_max_sequences(const fdy_llama_session *session) {
  return session ? session->max_sequences : 0;
}

uint32_t fdy_llama_session_step_rows(const fdy_llama_session *session) {
  return session ? session->step_rows : 0;
}

static bool in_range(const fdy_llama_session *s, uint32_t slot) {
  return s && slot < s->max_sequences;
}

uint32_t fdy_llama_session_slot_position(const fdy_llama_session *session,
                                         uint32_t slot) {
  return in_range(session, slot) ? session->positions[slot] : 0;
}

int32_t fdy_llama_session_slot_next(const fdy_llama_session *session,
                                    uint32_t slot) {
  return in_range(session, slot) ? session->nexts[slot] : -1;
}

bool fdy_llama_session_slot_active(const fdy_llama_session *session,
                                   uint32_t slot) {
  return in_range(session, slot) && session->active[slot];
}

static void free_slot(fdy_llama_session *s, uint32_t slot) {
  s->positions[slot] = 0;
  s->nexts[slot] = -1;
  s->active[slot] = false;
}

void fdy_llama_session_reset(fdy_llama_session *session) {
  for (uint32_t i = 0; session && i < session->max_sequences; i++) {
    free_slot(session, i);
  }
}

fdy_status fdy_llama_session_check(const fdy_llama_session *s,
                                   const int32_t *ids, uint32_t count,
                                   uint32_t start, uint64_t extra,
                                   fdy_error *err) {
  uint32_t vocab = s->config->vocab_size;
  for (uint32_t i = 0; i < count; i++) {
    if (ids[i] < 0 || (uint32_t)ids[i] >= vocab) {
      fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                    "token id %d at index %u is outside the vocabulary "
                    "(0 to %u)",
                    ids[i], i, vocab - 1);
      if (err) {
        err->ids[0] = i;
        err->ids[1] = ids[i];
        err->expected = vocab;
      }
      return FDY_ERR_INVALID_ARGUMENT;
    }
  }
  uint64_t needed = (uint64_t)start + count + extra;
  if (needed > s->context) {
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "%llu positions are needed but the context holds %u "
                  "(%u already used)",
                  (unsigned long long)needed, s->context, start);
    if (err) {
      err->expected = s->context;
      err->actual = needed;
    }
    return FDY_ERR_CONTEXT;
  }
  return FDY_OK;
}

/* Errors of a call on a session before any check of its own. */
static fdy_status check_usable(const fdy_llama_session *s, const char *what,
                               fdy_error *err) {
  if (!s) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s needs a session",
                         what);
  }
  if (s->failed) {
    return fdy_error_set(err, FDY_ERR_BACKEND,
                         "the session failed earlier; create a new one");
  }
  return FDY_OK;
}

static fdy_status slot_error(const fdy_llama_session *s, uint32_t slot,
                             const char *why, fdy_error *err) {
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                "slot %u %s (the session has slots 0 to %u)", slot, why,
                s->max_sequences - 1);
  if (err) {
    err->ids[0] = slot;
    err->expected = s->max_sequences;
    err->actual = slot;
  }
  return FDY_ERR_INVALID_ARGUMENT;
}

/* check_usable, then slot must exist and hold a sequence. */
static fdy_status check_held_slot(const fdy_llama_session *s, const char *what,
                                  uint32_t slot, fdy_error *err) {
  fdy_status st = check_usable(s, what, err);
  if (st != FDY_OK) {
    return st;
  }
  if (slot >= s->max_sequences) {
    return slot_error(s, slot, "does not exist", err);
  }
  if (!s->active[slot]) {
    return slot_error(s, slot, "holds no sequence", err);
  }
  return FDY_OK;
}

/* Runs step `step` (already staged) and records a backend failure. */
static fdy_status run_step(fdy_llama_session *s, size_t step, fdy_error *err) {
  fdy_status st = fdy_executor_run(s->executor, step, err);
  if (st != FDY_OK) {
    s->failed = true;
  }
  return st;
}

fdy_status fdy_llama_sampling_check(const fdy_sample_params *p,
                                    fdy_error *err) {
  if (!p) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "no sampling parameters");
  }
  const char *bad = NULL;
  double value = 0.0;
  if (!(p->temperature >= 0.0f && isfinite(p->temperature))) {
    bad = "temperature must be finite and >= 0";
    value = p->temperature;
  } else if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) {
    bad = "top_p must be in [0, 1]";
    value = p->top_p;
  } else if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) {
    bad = "min_p must be in [0, 1]";
    value = p->min_p;
  }
  if (bad) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "sampling: %s, got %g", bad,
                  value);
    if (err) {
      snprintf(err->name, sizeof err->name, "%.*s", (int)strcspn(bad, " "),
               bad);
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  return FDY_OK;
}

fdy_status fdy_llama_session_set_sampling(fdy_llama_session *session,
                                          uint32_t slot,
                                          const fdy_sample_params *sampling,
                                          fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_set_sampling", err);
  if (st != FDY_OK) {
    return st;
  }
  if (slot >= session->max_sequences) {
    return slot_error(session, slot, "does not exist", err);
  }
  fdy_sample_params greedy = FDY_LLAMA_GREEDY;
  st = fdy_llama_sampling_check(sampling ? sampling : &greedy, err);
  if (st == FDY_OK) {
    session->sampling[slot] = sampling ? *sampling : greedy;
  }
  return st;
}

/* Row t of a step's sampling parameters: slot's, drawing at `position`
 * (the row's), or greedy when not the last row of its part. */
static void set_sampling_row(const fdy_llama_session *s, uint32_t *params,
                             uint32_t t, uint32_t slot, uint32_t position,
                             bool last) {
  static const fdy_sample_params greedy = FDY_LLAMA_GREEDY;
  fdy_sample_set_row(params, t, last ? &s->sampling[slot] : &greedy, position);
}

/* Runs one chunk of 1 to prefill_rows checked tokens of slot at its
 * position: the decode step for one token, else the prefill step. */
static fdy_status run_chunk(fdy_llama_session *s, uint32_t slot,
                            const int32_t *ids, uint32_t count,
                            float *all_logits, float *last_logits,
                            fdy_error *err) {
  bool decode = count == 1 && !all_logits;
  int32_t *in = decode ? s->decode_in : s->prefill_in;
  fdy_step_set_chunk(in, ids, count, slot, s->positions[slot]);
  set_sampling_row(s, decode ? s->decode_sampling_in : s->prefill_sampling_in,
                   0, slot, s->positions[slot] + count - 1, true);
  fdy_status st = run_step(s, decode ? s->decode : s->prefill, err);
  if (st != FDY_OK) {
    return st;
  }
  uint64_t vocab = s->config->vocab_size;
  const float *logits = s->ids_only
                            ? NULL
                            : fdy_executor_output(s->executor,
                                                  decode ? s->io.decode_logits
                                                         : s->io.prefill_logits,
                                                  NULL);
  const int32_t *next = fdy_executor_output(
      s->executor, decode ? s->io.decode_next : s->io.prefill_next, NULL);
  bool rows = !decode && s->all_logits;
  if (all_logits) {
    memcpy(all_logits, logits, sizeof *logits * vocab * count);
  }
  if (last_logits) {
    memcpy(last_logits, logits + (rows ? (uint64_t)(count - 1) * vocab : 0),
           sizeof *logits * vocab);
  }
  s->nexts[slot] = next[0];
  s->positions[slot] += count;
  return FDY_OK;
}

fdy_status fdy_llama_session_append(fdy_llama_session *session, uint32_t slot,
                                    const int32_t *ids, uint32_t count,
                                    float *all_logits, float *last_logits,
                                    fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_append", err);
  if (st != FDY_OK) {
    return st;
  }
  if (!ids || count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "an append needs at least one token id");
  }
  if (slot >= session->max_sequences) {
    return slot_error(session, slot, "does not exist", err);
  }
  if (all_logits && !session->all_logits) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "every row's logits need a session created with "
                         "all_logits");
  }
  if (last_logits && session->ids_only) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the session was created ids_only: its forward "
                         "passes return no logits");
  }
  st = fdy_llama_session_check(session, ids, count, session->positions[slot], 0,
                               err);
  if (st == FDY_OK) {
    session->active[slot] = true;
  }
  uint64_t vocab = session->config->vocab_size;
  for (uint32_t done = 0; st == FDY_OK && done < count;) {
    uint32_t n = count - done < session->prefill_rows ? count - done
                                                      : session->prefill_rows;
    bool last = done + n == count;
    st = run_chunk(session, slot, ids + done, n,
                   all_logits ? all_logits + (uint64_t)done * vocab : NULL,
                   last ? last_logits : NULL, err);
    done += n;
  }
  return st;
}

fdy_status fdy_llama_session_forward(fdy_llama_session *session,
                                     const int32_t *ids, uint32_t count,
                                     float *all_logits, float *last_logits,
                                     fdy_error *err) {
  return fdy_llama_session_append(session, 0, ids, count, all_logits,
                                  last_logits, err);
}

fdy_status fdy_llama_session_admit(fdy_llama_session *session,
                                   const int32_t *ids, uint32_t count,
                                   uint32_t *slot, fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_admit", err);
  if (st != FDY_OK) {
    return st;
  }
  if (!slot) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_admit needs a slot output");
  }
  uint32_t free = 0;
  while (free < session->max_sequences && session->active[free]) {
    free++;
  }
  if (free == session->max_sequences) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "all %u sequences of the session are in use: release one "
                  "first (or create the session with more max_sequences)",
                  session->max_sequences);
    if (err) {
      err->expected = session->max_sequences;
      err->actual = session->max_sequences + 1;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  st = fdy_llama_session_append(session, free, ids, count, NULL, NULL, err);
  if (st == FDY_OK) {
    *slot = free;
  }
  return st;
}

/* The rows of a step: 1 to limit, with ids and a next-id output; logits
 * only when the session copies them out. */
static fdy_status check_rows(const fdy_llama_session *s, const void *rows,
                             uint32_t count, uint32_t limit, const char *what,
                             const int32_t *next, const float *logits,
                             fdy_error *err) {
  if (!rows || !next || count == 0 || count > limit) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "a %s takes 1 to %u rows with a next-id output; got %u "
                  "rows",
                  what, limit, count);
    if (err) {
      err->expected = limit;
      err->actual = count;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (logits && s->ids_only) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the session was created ids_only: its steps return "
                         "no logits");
  }
  return FDY_OK;
}

/* The checks of the parts of a step: slots in range and distinct, ids in
 * the vocabulary and positions in the context (active: the slots must hold
 * a sequence); err->ids[0] = the part. */
static fdy_status check_parts(const fdy_llama_session *s,
                              const fdy_llama_step_part *parts, uint32_t count,
                              bool active, fdy_error *err) {
  uint64_t rows = 0;
  for (uint32_t i = 0; i < count; i++) {
    const fdy_llama_step_part *part = &parts[i];
    uint32_t slot = part->slot;
    fdy_status st = FDY_OK;
    if (!part->ids || part->count == 0) {
      st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "part %u of the step has no ids", i);
    } else if (slot >= s->max_sequences) {
      st = slot_error(s, slot, "does not exist", err);
    } else if (active && !s->active[slot]) {
      st = slot_error(s, slot, "holds no sequence (admit one first)", err);
    } else {
      for (uint32_t q = 0; q < i && st == FDY_OK; q++) {
        if (parts[q].slot == slot) {
          st = slot_error(s, slot, "appears twice in one step", err);
        }
      }
    }
    if (st == FDY_OK) {
      st = fdy_llama_session_check(s, part->ids, part->count,
                                   s->positions[slot], 0, err);
    }
    if (st != FDY_OK) {
      if (err) {
        err->ids[0] = i;
      }
      return st;
    }
    rows += part->count;
  }
  if (rows > s->step_rows) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "the step's parts hold %llu rows, but a step of the "
                  "session holds %u (step_rows)",
                  (unsigned long long)rows, s->step_rows);
    if (err) {
      err->expected = s->step_rows;
      err->actual = rows;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  return FDY_OK;
}

/* Runs the decode step over checked parts: their rows in order, each at
 * its slot's next position; then each part's last row's next id (and
 * logits) out and the slots advanced. */
static fdy_status run_parts(fdy_llama_session *s,
                            const fdy_llama_step_part *parts, uint32_t count,
                            int32_t *next, float *logits, fdy_error *err) {
  int32_t *in = s->decode_in;
  uint32_t rows = 0;
  for (uint32_t i = 0; i < count; i++) {
    for (uint32_t k = 0; k < parts[i].count; k++) {
      uint32_t position = s->positions[parts[i].slot] + k;
      set_sampling_row(s, s->decode_sampling_in, rows, parts[i].slot, position,
                       k + 1 == parts[i].count);
      fdy_step_set_row(in, rows++, parts[i].ids[k], parts[i].slot, position);
    }
  }
  in[FDY_STEP_COUNT] = (int32_t)rows;
  fdy_status st = run_step(s, s->decode, err);
  if (st != FDY_OK) {
    return st;
  }
  const int32_t *out =
      fdy_executor_output(s->executor, s->io.decode_next, NULL);
  const float *all =
      logits ? fdy_executor_output(s->executor, s->io.decode_logits, NULL)
             : NULL;
  uint64_t vocab = s->config->vocab_size;
  uint32_t last = 0;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t slot = parts[i].slot;
    last += parts[i].count;
    next[i] = out[last - 1];
    s->nexts[slot] = out[last - 1];
    s->positions[slot] += parts[i].count;
    s->active[slot] = true;
    if (logits) {
      memcpy(logits + i * vocab, all + (uint64_t)(last - 1) * vocab,
             sizeof *logits * vocab);
    }
  }
  return FDY_OK;
}

fdy_status fdy_llama_session_step(fdy_llama_session *session,
                                  const fdy_llama_step_part *parts,
                                  uint32_t part_count, int32_t *next,
                                  float *logits, fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_step", err);
  if (st == FDY_OK) {
    st = check_rows(session, parts, part_count, session->step_rows, "step",
                    next, logits, err);
  }
  if (st == FDY_OK) {
    st = check_parts(session, parts, part_count, false, err);
  }
  return st == FDY_OK ? run_parts(session, parts, part_count, next, logits, err)
                      : st;
}

fdy_status fdy_llama_session_decode(fdy_llama_session *session,
                                    const uint32_t *slots, const int32_t *ids,
                                    uint32_t count, int32_t *next,
                                    float *logits, fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_decode", err);
  if (st == FDY_OK) {
    st = check_rows(session, slots, count, session->max_sequences,
                    "decode step", next, logits, err);
  }
  if (st == FDY_OK && !ids) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "a decode step needs one id per row");
  }
  if (st != FDY_OK) {
    return st;
  }
  fdy_llama_step_part *parts = session->parts;
  for (uint32_t r = 0; r < count; r++) {
    parts[r] =
        (fdy_llama_step_part){.slot = slots[r], .ids = &ids[r], .count = 1};
  }
  st = check_parts(session, parts, count, true, err);
  return st == FDY_OK ? run_parts(session, parts, count, next, logits, err)
                      : st;
}

fdy_status fdy_llama_session_release(fdy_llama_session *session, uint32_t slot,
                                     fdy_error *err) {
  fdy_status st =
      check_held_slot(session, "fdy_llama_session_release", slot, err);
  if (st != FDY_OK) {
    return st;
  }
  free_slot(session, slot);
  return FDY_OK;
}

fdy_status fdy_llama_session_append_rows(fdy_llama_session *session,
                                         uint32_t slot, const int32_t *ids,
                                         uint32_t count, int32_t *row_next,
                                         float *logits, fdy_error *err) {
  fdy_status st = check_usable(session, "fdy_llama_session_append_rows", err);
  fdy_llama_step_part part = {.slot = slot, .ids = ids, .count = count};
  int32_t last = -1;
  if (st == FDY_OK) {
    st = check_rows(session, ids, count, session->step_rows, "step", row_next,
                    logits, err);
  }
  if (st == FDY_OK) {
    st = check_parts(session, &part, 1, false, err);
  }
  if (st == FDY_OK) {
    st = run_parts(session, &part, 1, &last, NULL, err);
  }
  if (st == FDY_OK) {
    memcpy(
        row_next,
        fdy_executor_output(session->executor, session->io.decode_next, NULL),
        sizeof *row_next * count);
  }
  if (st == FDY_OK && logits) {
    memcpy(
        logits,
        fdy_executor_output(session->executor, session->io.decode_logits, NULL),
        sizeof *logits * count * session->config->vocab_size);
  }
  return st;
}

fdy_status fdy_llama_session_rewind(fdy_llama_session *session, uint32_t slot,
                                    uint32_t position, fdy_error *err) {
  fdy_status st =
      check_held_slot(session, "fdy_llama_session_rewind", slot, err);
  if (st != FDY_OK) {
    return st;
  }
  if (position > session->positions[slot]) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "slot %u cannot rewind to position %u: it holds %u", slot,
                  position, session->positions[slot]);
    if (err) {
      err->expected = session->positions[slot];
      err->actual = position;
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  session->positions[slot] = position;
  session->nexts[slot] = -1;
  return FDY_OK;
}
