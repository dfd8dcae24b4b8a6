/* Sessions: the model's graph and plan (steps "prefill" and "decode") on an
 * executor, so that every computation is a backend op. Create builds and
 * uploads everything; a forward pass writes the step inputs (count,
 * position, ids) into the executor's staging, runs a step and reads the
 * logits and the argmax back, allocating nothing. */
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
  fdy_llama_session *s = calloc(1, sizeof *s);
  if (!s) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  s->model = model;
  s->config = c;
  s->context = context;
  s->prefill_rows = options->prefill_rows ? options->prefill_rows
                    : context < FDY_LLAMA_DEFAULT_PREFILL_ROWS
                        ? context
                        : FDY_LLAMA_DEFAULT_PREFILL_ROWS;
  s->all_logits = options->all_logits;
  s->ids_only = options->ids_only;
  s->next = -1;
  fdy_llama_graph_options graph_options = {.context = context,
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
  free(s);
}

uint32_t fdy_llama_session_position(const fdy_llama_session *session) {
  return session ? session->position : 0;
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
  return session ? session->next : -1;
}

void fdy_llama_session_reset(fdy_llama_session *session) {
  if (session) {
    session->position = 0;
    session->next = -1;
  }
}

fdy_status fdy_llama_session_check(const fdy_llama_session *s,
                                   const int32_t *ids, uint32_t count,
                                   uint64_t extra, fdy_error *err) {
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
  uint64_t needed = (uint64_t)s->position + count + extra;
  if (needed > s->context) {
    fdy_error_set(err, FDY_ERR_CONTEXT,
                  "%llu positions are needed but the context holds %u "
                  "(%u already used)",
                  (unsigned long long)needed, s->context, s->position);
    if (err) {
      err->expected = s->context;
      err->actual = needed;
    }
    return FDY_ERR_CONTEXT;
  }
  return FDY_OK;
}

/* Runs one chunk of 1 to prefill_rows checked tokens at the position:
 * the decode step for one token, else the prefill step. */
static fdy_status run_chunk(fdy_llama_session *s, const int32_t *ids,
                            uint32_t count, float *all_logits,
                            float *last_logits, fdy_error *err) {
  bool decode = count == 1 && !all_logits;
  int32_t *in = decode ? s->decode_in : s->prefill_in;
  in[FDY_STEP_COUNT] = (int32_t)count;
  in[FDY_STEP_POSITION] = (int32_t)s->position;
  memcpy(in + FDY_STEP_IDS, ids, sizeof *ids * count);
  fdy_status st =
      fdy_executor_run(s->executor, decode ? s->decode : s->prefill, err);
  if (st != FDY_OK) {
    s->failed = true;
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
  s->next = next[0];
  s->position += count;
  return FDY_OK;
}

fdy_status fdy_llama_session_forward(fdy_llama_session *session,
                                     const int32_t *ids, uint32_t count,
                                     float *all_logits, float *last_logits,
                                     fdy_error *err) {
  if (!session || !ids || count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_forward needs a session and at "
                         "least one token id");
  }
  if (session->failed) {
    return fdy_error_set(err, FDY_ERR_BACKEND,
                         "the session failed earlier; create a new one");
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
  fdy_status st = fdy_llama_session_check(session, ids, count, 0, err);
  uint64_t vocab = session->config->vocab_size;
  for (uint32_t done = 0; st == FDY_OK && done < count;) {
    uint32_t n = count - done < session->prefill_rows ? count - done
                                                      : session->prefill_rows;
    bool last = done + n == count;
    st = run_chunk(session, ids + done, n,
                   all_logits ? all_logits + (uint64_t)done * vocab : NULL,
                   last ? last_logits : NULL, err);
    done += n;
  }
  return st;
}
