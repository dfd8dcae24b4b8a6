/* Private interface of the float32 CPU inference path (dequant.c, forward.c,
 * session.c, generate.c, verify.c): half-precision conversion, the worker
 * pool and the session layout. Not installed; nothing outside src/llama
 * includes it. */
#ifndef FOUNDRY_LLAMA_INFER_H
#define FOUNDRY_LLAMA_INFER_H

#include <stdatomic.h>

#include <pthread.h>

#include "foundry/llama_session.h"

/* Prompt tokens processed as one batch: every weight row is dequantized once
 * per batch. Longer prompts run in consecutive batches. */
#define FDY_LLAMA_MAX_BATCH 64

/* ---- dequant.c ---------------------------------------------------------- */

float fdy_llama_f16_to_float(uint16_t bits);
float fdy_llama_bf16_to_float(uint16_t bits);
/* Element i of an F16 or BF16 vector (possibly unaligned data). */
float fdy_llama_half_at(const void *data, fdy_dtype dtype, uint64_t i);
/* Elements [first, first + count) of an F16 or BF16 vector into out. */
void fdy_llama_halves_to_float(const void *data, fdy_dtype dtype,
                               uint64_t first, uint32_t count, float *out);

/* ---- forward.c: worker pool --------------------------------------------- */

/* fn processes items [begin, end) on worker `thread` (0 = caller). */
typedef void (*fdy_llama_task_fn)(void *ctx, uint32_t begin, uint32_t end,
                                  uint32_t thread);

/* A fixed set of threads - 1 workers plus the calling thread. Every item of
 * a parallel run is processed by exactly one thread with the same code, so
 * results do not depend on the thread count. */
typedef struct fdy_llama_pool fdy_llama_pool;

fdy_status fdy_llama_pool_create(uint32_t threads, fdy_llama_pool **out,
                                 fdy_error *err);
void fdy_llama_pool_destroy(fdy_llama_pool *pool);
/* Runs fn over items [0, count) in chunks of `chunk` items; returns when all
 * are done. Not reentrant. */
void fdy_llama_pool_run(fdy_llama_pool *pool, uint32_t count, uint32_t chunk,
                        fdy_llama_task_fn fn, void *ctx);

/* ---- session.c ---------------------------------------------------------- */

struct fdy_llama_session {
  const fdy_llama_model *model;
  const fdy_llama_config *config;
  uint32_t context;  /* positions in the KV cache */
  uint32_t threads;  /* pool threads, caller included */
  uint32_t position; /* positions used so far */
  uint32_t q_dim;    /* heads * head_dim */
  uint32_t kv_dim;   /* kv_heads * head_dim */
  fdy_llama_pool *pool;
  float *norms;    /* (layers, 2, hidden) input/post norm, then (hidden) */
  float *rope_cos; /* (context, head_dim / 2) */
  float *rope_sin; /* (context, head_dim / 2) */
  float *k_cache;  /* (layers, context, kv_heads, head_dim) */
  float *v_cache;  /* (layers, context, kv_heads, head_dim) */
  /* batch scratch, FDY_LLAMA_MAX_BATCH rows each */
  float *h;    /* (batch, hidden) residual stream */
  float *x;    /* (batch, hidden) normed input */
  float *q;    /* (batch, q_dim) */
  float *k;    /* (batch, kv_dim) */
  float *v;    /* (batch, kv_dim) */
  float *attn; /* (batch, q_dim) */
  float *gate; /* (batch, intermediate) */
  float *up;   /* (batch, intermediate) */
  /* per-thread scratch */
  float *xt;          /* (batch, max in_features) block-transposed input */
  float *xsum;        /* (batch, max groups) per-group sums of an input */
  float *row_scratch; /* (threads, row_stride): a row's scales, biases and
                         unpacked nibbles */
  uint32_t row_stride;
  float *score_scratch; /* (threads, context) attention scores */
};

/* Validates ids against the vocabulary (FDY_ERR_INVALID_ARGUMENT, ids[0] =
 * index, ids[1] = id, expected = vocab) and position + count against the
 * context (FDY_ERR_CONTEXT, expected = context, actual = needed). */
fdy_status fdy_llama_session_check(const fdy_llama_session *session,
                                   const int32_t *ids, uint32_t count,
                                   uint64_t extra, fdy_error *err);

/* ---- forward.c ---------------------------------------------------------- */

/* Runs 1 to FDY_LLAMA_MAX_BATCH already checked tokens at session->position
 * and advances it. Logits of every token go to all_logits (count * vocab)
 * and of the last one to last_logits, each when non-NULL; with both NULL the
 * LM head is skipped. Cannot fail. */
void fdy_llama_forward_batch(fdy_llama_session *session, const int32_t *ids,
                             uint32_t count, float *all_logits,
                             float *last_logits);

/* ---- generate.c --------------------------------------------------------- */

/* Index of the largest of n logits, the lowest one on ties. */
int32_t fdy_llama_argmax(const float *logits, uint32_t n);

#endif
