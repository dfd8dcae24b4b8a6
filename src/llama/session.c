/* Float32 CPU inference sessions: the KV cache, rope tables, float copies
 * of the norm weights, batch and per-thread scratch, and the worker pool,
 * all allocated at creation so that a forward pass never allocates and
 * never fails after its checks. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "infer.h"

#define DEFAULT_CONTEXT 1024u
#define MAX_THREADS     256u

/* Allocates count floats (checked), zeroed. */
static fdy_status alloc_floats(float **out, uint64_t count, const char *what,
                               fdy_error *err) {
  uint64_t bytes = 0;
  if (fdy_mul_u64(count, sizeof(float), &bytes, err) != FDY_OK ||
      bytes > SIZE_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "the %s of a session does not fit in memory", what);
  }
  *out = calloc(1, bytes ? (size_t)bytes : 1);
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory allocating the %s (%llu bytes)", what,
                         (unsigned long long)bytes);
  }
  return FDY_OK;
}

static fdy_status mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out,
                       fdy_error *err) {
  uint64_t ab = 0;
  fdy_status st = fdy_mul_u64(a, b, &ab, err);
  return st != FDY_OK ? st : fdy_mul_u64(ab, c, out, err);
}

/* The loader has checked that a norm is a vector of n elements in the
 * scales' dtype (F16 or BF16, as MLX writes them). */
static void convert_norm(const fdy_st_tensor *tensor, fdy_dtype dtype,
                         uint32_t n, float *out) {
  fdy_llama_halves_to_float(tensor->data, dtype, 0, n, out);
}

/* Rope inverse frequencies, with llama3 scaling when configured (the
 * transformers rule: long wavelengths divided by factor, short ones kept,
 * the band in between interpolated). */
static double inverse_frequency(const fdy_llama_config *c, uint32_t j) {
  double inv = 1.0 / pow(c->rope_theta, (2.0 * j) / c->head_dim);
  if (!c->rope_llama3) {
    return inv;
  }
  double old = (double)c->rope_original_max_position;
  double low_wavelen = old / c->rope_low_freq_factor;
  double high_wavelen = old / c->rope_high_freq_factor;
  double wavelen = 2.0 * M_PI / inv;
  if (wavelen < high_wavelen) {
    return inv;
  }
  if (wavelen > low_wavelen) {
    return inv / c->rope_factor;
  }
  double smooth = (old / wavelen - c->rope_low_freq_factor) /
                  (c->rope_high_freq_factor - c->rope_low_freq_factor);
  return (1.0 - smooth) * inv / c->rope_factor + smooth * inv;
}

/* fdy_llama_open has validated the config (sizes, head ratio, 4-bit groups
 * of 32, 64 or 128, F16 or BF16 scales); the kernels also need whole blocks
 * of 64 inputs. */
static fdy_status check_config(const fdy_llama_config *c, fdy_error *err) {
  uint32_t q_dim = c->num_heads * c->head_dim;
  if (c->hidden_size % 64 != 0 || c->intermediate_size % 64 != 0 ||
      q_dim % 64 != 0) {
    return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                         "unsupported shape: hidden %u, intermediate %u and "
                         "heads * head_dim %u must be multiples of 64",
                         c->hidden_size, c->intermediate_size, q_dim);
  }
  return FDY_OK;
}

fdy_status fdy_llama_session_create(const fdy_llama_model *model,
                                    const fdy_llama_session_options *options,
                                    fdy_llama_session **out, fdy_error *err) {
  fdy_status st = FDY_OK;
  fdy_llama_session *s = NULL;
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_create needs an output pointer");
  }
  *out = NULL;
  if (!model) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_create needs a model");
  }
  const fdy_llama_config *c = fdy_llama_model_config(model);
  st = check_config(c, err);
  if (st != FDY_OK) {
    return st;
  }
  uint32_t context = options ? options->context : 0;
  if (context == 0) {
    context = c->max_position_embeddings < DEFAULT_CONTEXT
                  ? c->max_position_embeddings
                  : DEFAULT_CONTEXT;
  }
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
  uint32_t threads = options ? options->threads : 0;
  if (threads == 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    threads = online < 1             ? 1
              : online > MAX_THREADS ? MAX_THREADS
                                     : (uint32_t)online;
  }
  if (threads > MAX_THREADS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "threads must be at most %u, got %u", MAX_THREADS,
                         threads);
  }

  s = calloc(1, sizeof *s);
  if (!s) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  s->model = model;
  s->config = c;
  s->context = context;
  s->threads = threads;
  s->q_dim = c->num_heads * c->head_dim;
  s->kv_dim = c->num_kv_heads * c->head_dim;
  uint32_t hidden = c->hidden_size;
  uint32_t half = c->head_dim / 2;
  uint64_t batch =
      context < FDY_LLAMA_MAX_BATCH ? context : FDY_LLAMA_MAX_BATCH;
  uint32_t widest = hidden;
  widest = c->intermediate_size > widest ? c->intermediate_size : widest;
  widest = s->q_dim > widest ? s->q_dim : widest;
  /* scales, biases (group >= 32) and the unpacked row, 64-byte multiples */
  s->row_stride = (widest + 2 * (widest / 32) + 15) / 16 * 16;

  uint64_t n_norms = 0, n_rope = 0, n_cache = 0;
  st = mul3((uint64_t)c->num_layers * 2 + 1, hidden, 1, &n_norms, err);
  if (st == FDY_OK) {
    st = mul3(context, half, 1, &n_rope, err);
  }
  if (st == FDY_OK) {
    st = mul3(c->num_layers, context, s->kv_dim, &n_cache, err);
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  struct {
    float **ptr;
    uint64_t count;
    const char *what;
  } buffers[] = {
      {&s->norms, n_norms, "norm weights"},
      {&s->rope_cos, n_rope, "rope table"},
      {&s->rope_sin, n_rope, "rope table"},
      {&s->k_cache, n_cache, "key cache"},
      {&s->v_cache, n_cache, "value cache"},
      {&s->h, batch * hidden, "batch scratch"},
      {&s->x, batch * hidden, "batch scratch"},
      {&s->q, batch * s->q_dim, "batch scratch"},
      {&s->k, batch * s->kv_dim, "batch scratch"},
      {&s->v, batch * s->kv_dim, "batch scratch"},
      {&s->attn, batch * s->q_dim, "batch scratch"},
      {&s->gate, batch * c->intermediate_size, "batch scratch"},
      {&s->up, batch * c->intermediate_size, "batch scratch"},
      {&s->xt, batch * widest, "batch scratch"},
      {&s->xsum, batch * (widest / 32), "batch scratch"},
      {&s->row_scratch, (uint64_t)threads * s->row_stride, "row scratch"},
      {&s->score_scratch, (uint64_t)threads * context, "score scratch"},
  };
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
    st = alloc_floats(buffers[i].ptr, buffers[i].count, buffers[i].what, err);
    if (st != FDY_OK) {
      goto cleanup;
    }
  }

  for (uint32_t l = 0; l < c->num_layers; l++) {
    const fdy_llama_layer_weights *w = fdy_llama_layer(model, l);
    float *dst = s->norms + (uint64_t)l * 2 * hidden;
    convert_norm(w->input_norm, c->scale_dtype, hidden, dst);
    convert_norm(w->post_norm, c->scale_dtype, hidden, dst + hidden);
  }
  convert_norm(fdy_llama_final_norm(model), c->scale_dtype, hidden,
               s->norms + (uint64_t)c->num_layers * 2 * hidden);

  for (uint32_t j = 0; j < half; j++) {
    double inv = inverse_frequency(c, j);
    for (uint32_t p = 0; p < context; p++) {
      double angle = (double)p * inv;
      s->rope_cos[(uint64_t)p * half + j] = (float)cos(angle);
      s->rope_sin[(uint64_t)p * half + j] = (float)sin(angle);
    }
  }

  st = fdy_llama_pool_create(threads, &s->pool, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = s;
  s = NULL;

cleanup:
  fdy_llama_session_destroy(s);
  return st;
}

void fdy_llama_session_destroy(fdy_llama_session *s) {
  if (!s) {
    return;
  }
  fdy_llama_pool_destroy(s->pool);
  free(s->norms);
  free(s->rope_cos);
  free(s->rope_sin);
  free(s->k_cache);
  free(s->v_cache);
  free(s->h);
  free(s->x);
  free(s->q);
  free(s->k);
  free(s->v);
  free(s->attn);
  free(s->gate);
  free(s->up);
  free(s->xt);
  free(s->xsum);
  free(s->row_scratch);
  free(s->score_scratch);
  free(s);
}

uint32_t fdy_llama_session_position(const fdy_llama_session *session) {
  return session ? session->position : 0;
}

uint32_t fdy_llama_session_context(const fdy_llama_session *session) {
  return session ? session->context : 0;
}

uint32_t fdy_llama_session_threads(const fdy_llama_session *session) {
  return session ? session->threads : 0;
}

void fdy_llama_session_reset(fdy_llama_session *session) {
  if (session) {
    session->position = 0;
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

fdy_status fdy_llama_session_forward(fdy_llama_session *session,
                                     const int32_t *ids, uint32_t count,
                                     float *all_logits, float *last_logits,
                                     fdy_error *err) {
  if (!session || !ids || count == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fdy_llama_session_forward needs a session and at "
                         "least one token id");
  }
  fdy_status st = fdy_llama_session_check(session, ids, count, 0, err);
  if (st != FDY_OK) {
    return st;
  }
  uint32_t vocab = session->config->vocab_size;
  for (uint32_t done = 0; done < count;) {
    uint32_t n =
        count - done < FDY_LLAMA_MAX_BATCH ? count - done : FDY_LLAMA_MAX_BATCH;
    bool last = done + n == count;
    fdy_llama_forward_batch(session, ids + done, n,
                            all_logits ? all_logits + (uint64_t)done * vocab
                                       : NULL,
                            last ? last_logits : NULL);
    done += n;
  }
  return FDY_OK;
}
