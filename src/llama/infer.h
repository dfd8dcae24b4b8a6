/* Private interface of the inference side of src/llama (session.c,
 * generate.c, verify.c): the session layout and its input checks. Not
 * installed; nothing outside src/llama includes it. */
#ifndef FOUNDRY_LLAMA_INFER_H
#define FOUNDRY_LLAMA_INFER_H

#include "foundry/llama_session.h"

struct fdy_llama_session {
  const fdy_llama_model *model;
  const fdy_llama_config *config;
  uint32_t context;           /* positions in the KV cache */
  uint32_t prefill_rows;      /* tokens per prefill run */
  bool all_logits;            /* prefill copies out every row's logits */
  bool ids_only;              /* the steps copy out only the next id */
  uint32_t max_sequences;     /* slots: KV regions */
  uint32_t step_rows;         /* rows of the decode step */
  fdy_llama_step_part *parts; /* [max_sequences]: a decode step's parts */
  uint32_t *positions;        /* [max_sequences]: positions used by each slot */
  int32_t *nexts;             /* [max_sequences]: the id drawn from each
                                 slot's latest pass, or -1 */
  bool *active;               /* [max_sequences]: the slot holds a sequence */
  fdy_sample_params *sampling; /* [max_sequences]: each slot's sampling */
  bool failed;                 /* a backend failure ended the executor */
  fdy_graph *graph;
  fdy_llama_graph_io io;
  fdy_plan *plan;
  fdy_executor *executor;
  size_t prefill, decode;        /* step sections */
  int32_t *prefill_in;           /* staging of io.prefill_step */
  int32_t *decode_in;            /* staging of io.decode_step */
  uint32_t *prefill_sampling_in; /* staging of io.prefill_sampling */
  uint32_t *decode_sampling_in;  /* staging of io.decode_sampling */
};

/* Validates ids against the vocabulary (FDY_ERR_INVALID_ARGUMENT, ids[0] =
 * index, ids[1] = id, expected = vocab) and start + count + extra
 * positions against the context (FDY_ERR_CONTEXT, expected = context,
 * actual = needed; the message says `start` positions are in use). */
fdy_status fdy_llama_session_check(const fdy_llama_session *session,
                                   const int32_t *ids, uint32_t count,
                                   uint32_t start, uint64_t extra,
                                   fdy_error *err);

/* Whether id ends a generation: one of the config's EOS ids or of the
 * caller's stop ids (count of them; stop_ids may be NULL when 0). */
bool fdy_llama_is_stop(const fdy_llama_config *config, const int32_t *stop_ids,
                       uint32_t stop_count, int32_t id);

#endif
