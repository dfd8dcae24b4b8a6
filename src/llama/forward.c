/* The Llama 3 transformer forward pass in float32 on the CPU, and the worker
 * pool it runs on.
 *
 * One batch of tokens at consecutive positions: h = embed(ids); per layer
 * x = rmsnorm(h), q/k/v projections, rope (split halves: pairs j and
 * j + head_dim / 2) on q and k, k and v appended to the KV cache, causal
 * attention with scale 1 / sqrt(head_dim) where query head i reads kv head
 * i / (heads / kv_heads), h += o_proj(attn); x = rmsnorm(h),
 * h += down(silu(gate(x)) * up(x)); then rmsnorm and the LM head for the
 * rows that need logits.
 *
 * A projection runs over weight rows split across the pool: each thread
 * decodes a row's nibbles once per batch and dots them with every token
 * (see "projections" below). Every output element is computed by one thread
 * in a fixed order, so results are identical for any thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

/* ---- worker pool -------------------------------------------------------- */

typedef struct pool_worker {
  struct fdy_llama_pool *pool;
  uint32_t index;
} pool_worker;

struct fdy_llama_pool {
  uint32_t threads;
  uint32_t started;
  pthread_t *handles;
  pool_worker *workers;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  pthread_cond_t done;
  uint64_t generation;
  uint32_t busy;
  bool stop;
  fdy_llama_task_fn fn;
  void *ctx;
  uint32_t count;
  uint32_t chunk;
  atomic_uint next;
};

static void pool_drain(struct fdy_llama_pool *pool, uint32_t thread) {
  for (;;) {
    uint32_t begin = atomic_fetch_add(&pool->next, pool->chunk);
    if (begin >= pool->count) {
      return;
    }
    uint32_t end =
        pool->count - begin < pool->chunk ? pool->count : begin + pool->chunk;
    pool->fn(pool->ctx, begin, end, thread);
  }
}

static void *pool_main(void *arg) {
  pool_worker *worker = arg;
  struct fdy_llama_pool *pool = worker->pool;
  uint64_t seen = 0;
  for (;;) {
    pthread_mutex_lock(&pool->mutex);
    while (!pool->stop && pool->generation == seen) {
      pthread_cond_wait(&pool->wake, &pool->mutex);
    }
    if (pool->stop) {
      pthread_mutex_unlock(&pool->mutex);
      return NULL;
    }
    seen = pool->generation;
    pthread_mutex_unlock(&pool->mutex);
    pool_drain(pool, worker->index);
    pthread_mutex_lock(&pool->mutex);
    if (--pool->busy == 0) {
      pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->mutex);
  }
}

fdy_status fdy_llama_pool_create(uint32_t threads, fdy_llama_pool **out,
                                 fdy_error *err) {
  *out = NULL;
  if (threads == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a worker pool needs at least one thread");
  }
  struct fdy_llama_pool *pool = calloc(1, sizeof *pool);
  if (!pool) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  pool->threads = threads;
  atomic_init(&pool->next, 0);
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
  pthread_cond_init(&pool->done, NULL);
  if (threads > 1) {
    pool->handles = calloc(threads - 1, sizeof *pool->handles);
    pool->workers = calloc(threads - 1, sizeof *pool->workers);
    if (!pool->handles || !pool->workers) {
      fdy_llama_pool_destroy(pool);
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
  }
  for (uint32_t i = 0; i + 1 < threads; i++) {
    pool->workers[i] = (pool_worker){pool, i + 1};
    if (pthread_create(&pool->handles[i], NULL, pool_main, &pool->workers[i]) !=
        0) {
      fdy_llama_pool_destroy(pool);
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "could not start worker thread %u of %u", i + 1,
                           threads - 1);
    }
    pool->started++;
  }
  *out = pool;
  return FDY_OK;
}

void fdy_llama_pool_destroy(fdy_llama_pool *pool) {
  if (!pool) {
    return;
  }
  pthread_mutex_lock(&pool->mutex);
  pool->stop = true;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  for (uint32_t i = 0; i < pool->started; i++) {
    pthread_join(pool->handles[i], NULL);
  }
  pthread_mutex_destroy(&pool->mutex);
  pthread_cond_destroy(&pool->wake);
  pthread_cond_destroy(&pool->done);
  free(pool->handles);
  free(pool->workers);
  free(pool);
}

void fdy_llama_pool_run(fdy_llama_pool *pool, uint32_t count, uint32_t chunk,
                        fdy_llama_task_fn fn, void *ctx) {
  if (count == 0) {
    return;
  }
  if (pool->started == 0 || count <= chunk) {
    fn(ctx, 0, count, 0);
    return;
  }
  pthread_mutex_lock(&pool->mutex);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->count = count;
  pool->chunk = chunk;
  atomic_store(&pool->next, 0);
  pool->busy = pool->started;
  pool->generation++;
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  pool_drain(pool, 0);
  pthread_mutex_lock(&pool->mutex);
  while (pool->busy != 0) {
    pthread_cond_wait(&pool->done, &pool->mutex);
  }
  pthread_mutex_unlock(&pool->mutex);
}

/* ---- kernels ------------------------------------------------------------ */

static float dot(const float *a, const float *b, uint32_t n) {
  float acc[8] = {0};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (uint32_t j = 0; j < 8; j++) {
      acc[j] += a[i + j] * b[i + j];
    }
  }
  for (; i < n; i++) {
    acc[0] += a[i] * b[i];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void rmsnorm(float *out, const float *x, const float *weight, uint32_t n,
                    double eps) {
  double sum = 0.0;
  for (uint32_t i = 0; i < n; i++) {
    sum += (double)x[i] * (double)x[i];
  }
  float inv = (float)(1.0 / sqrt(sum / n + eps));
  for (uint32_t i = 0; i < n; i++) {
    out[i] = x[i] * inv * weight[i];
  }
}

static void rope(float *x, uint32_t heads, uint32_t head_dim,
                 const float *cos_row, const float *sin_row) {
  uint32_t half = head_dim / 2;
  for (uint32_t h = 0; h < heads; h++) {
    float *v = x + (uint64_t)h * head_dim;
    for (uint32_t j = 0; j < half; j++) {
      float x0 = v[j];
      float x1 = v[j + half];
      v[j] = x0 * cos_row[j] - x1 * sin_row[j];
      v[j + half] = x1 * cos_row[j] + x0 * sin_row[j];
    }
  }
}

/* ---- projections -------------------------------------------------------- */

/* A projection row is y = sum_g s_g * (q_g . x_g) + b_g * sum(x_g), with the
 * nibbles q converted to floats (exact small integers) and the per-group
 * sums of x computed once per projection.
 *
 * Rows are read in blocks of 64 elements, 8 U32 words: shifting the 8 words
 * by 4j gives element 8k + j in lane k. The input is stored once per
 * projection in that block-transposed order (xt), so a block costs 8
 * shift/mask/convert/multiply-add steps. For one token the nibbles are
 * unpacked in registers; for a batch a row is unpacked once into scratch
 * and dotted with four tokens at a time. Every path sums in the same order,
 * so a token's result does not depend on its batch or the thread count.
 * The kernels use GCC/Clang vector extensions (8 floats); on x86-64 they get
 * an AVX2 clone picked at load time. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* static helpers: no ABI exposed */
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define FDY_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FDY_KERNEL
#endif
#define FDY_INLINE static inline __attribute__((always_inline))

FDY_INLINE v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* 8 little-endian words of a block. */
FDY_INLINE v8u load_block(const unsigned char *p) {
  v8u w;
  memcpy(&w, p, sizeof w);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (int k = 0; k < 8; k++) {
    w[k] = __builtin_bswap32(w[k]);
  }
#endif
  return w;
}

FDY_INLINE v8f nibbles(v8u w, int j) {
  return __builtin_convertvector((v8i)((w >> (4 * j)) & 0xfu), v8f);
}

FDY_INLINE float hsum8(v8f v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

/* Lane k of block b belongs to group (64 b + 8 k) / group. */
FDY_INLINE v8f block_scale(const float *scale, uint32_t b, uint32_t group) {
  if (group == 32) {
    float s0 = scale[2 * b], s1 = scale[2 * b + 1];
    return (v8f){s0, s0, s0, s0, s1, s1, s1, s1};
  }
  return (v8f){0} + scale[(uint64_t)b * 64 / group];
}

FDY_INLINE float bias_term(const float *bias, const float *xsum,
                           uint32_t groups) {
  float sum = 0.0f;
  for (uint32_t g = 0; g < groups; g++) {
    sum += bias[g] * xsum[g];
  }
  return sum;
}

/* One token, nibbles unpacked from the packed row. */
FDY_INLINE float dot_packed(const unsigned char *words, const float *xt,
                            const float *xsum, const float *scale,
                            const float *bias, uint32_t in, uint32_t group) {
  v8f acc = {0};
  for (uint32_t b = 0; b < in / 64; b++) {
    v8u w = load_block(words + (uint64_t)b * 32);
    const float *x = xt + (uint64_t)b * 64;
    v8f d0 = nibbles(w, 0) * load8(x);
    v8f d1 = nibbles(w, 1) * load8(x + 8);
    d0 += nibbles(w, 2) * load8(x + 16);
    d1 += nibbles(w, 3) * load8(x + 24);
    d0 += nibbles(w, 4) * load8(x + 32);
    d1 += nibbles(w, 5) * load8(x + 40);
    d0 += nibbles(w, 6) * load8(x + 48);
    d1 += nibbles(w, 7) * load8(x + 56);
    acc += (d0 + d1) * block_scale(scale, b, group);
  }
  return hsum8(acc) + bias_term(bias, xsum, in / group);
}

/* The same for one token from unpacked nibbles qf (block-transposed). */
FDY_INLINE float dot_unpacked(const float *qf, const float *xt,
                              const float *xsum, const float *scale,
                              const float *bias, uint32_t in, uint32_t group) {
  v8f acc = {0};
  for (uint32_t b = 0; b < in / 64; b++) {
    const float *q = qf + (uint64_t)b * 64;
    const float *x = xt + (uint64_t)b * 64;
    v8f d0 = load8(q) * load8(x);
    v8f d1 = load8(q + 8) * load8(x + 8);
    for (uint32_t j = 16; j < 64; j += 16) {
      d0 += load8(q + j) * load8(x + j);
      d1 += load8(q + j + 8) * load8(x + j + 8);
    }
    acc += (d0 + d1) * block_scale(scale, b, group);
  }
  return hsum8(acc) + bias_term(bias, xsum, in / group);
}

/* Four tokens (xt rows `in` apart, xsum rows `groups` apart) sharing the
 * loads of qf; each token's arithmetic is exactly dot_unpacked's. */
FDY_INLINE void dot_unpacked4(const float *qf, const float *xt,
                              const float *xsum, const float *scale,
                              const float *bias, uint32_t in, uint32_t group,
                              float out[4]) {
  v8f acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
  const float *x0 = xt, *x1 = xt + in, *x2 = xt + 2 * (uint64_t)in,
              *x3 = xt + 3 * (uint64_t)in;
  for (uint32_t b = 0; b < in / 64; b++) {
    uint64_t o = (uint64_t)b * 64;
    const float *q = qf + o;
    v8f q0 = load8(q), q1 = load8(q + 8);
    v8f d00 = q0 * load8(x0 + o), d01 = q1 * load8(x0 + o + 8);
    v8f d10 = q0 * load8(x1 + o), d11 = q1 * load8(x1 + o + 8);
    v8f d20 = q0 * load8(x2 + o), d21 = q1 * load8(x2 + o + 8);
    v8f d30 = q0 * load8(x3 + o), d31 = q1 * load8(x3 + o + 8);
    for (uint32_t j = 16; j < 64; j += 16) {
      q0 = load8(q + j);
      q1 = load8(q + j + 8);
      d00 += q0 * load8(x0 + o + j);
      d01 += q1 * load8(x0 + o + j + 8);
      d10 += q0 * load8(x1 + o + j);
      d11 += q1 * load8(x1 + o + j + 8);
      d20 += q0 * load8(x2 + o + j);
      d21 += q1 * load8(x2 + o + j + 8);
      d30 += q0 * load8(x3 + o + j);
      d31 += q1 * load8(x3 + o + j + 8);
    }
    v8f sv = block_scale(scale, b, group);
    acc0 += (d00 + d01) * sv;
    acc1 += (d10 + d11) * sv;
    acc2 += (d20 + d21) * sv;
    acc3 += (d30 + d31) * sv;
  }
  uint32_t groups = in / group;
  out[0] = hsum8(acc0) + bias_term(bias, xsum, groups);
  out[1] = hsum8(acc1) + bias_term(bias, xsum + groups, groups);
  out[2] = hsum8(acc2) + bias_term(bias, xsum + 2 * (uint64_t)groups, groups);
  out[3] = hsum8(acc3) + bias_term(bias, xsum + 3 * (uint64_t)groups, groups);
}

/* Up to three linears sharing one input: y_p[t * ld_p + row] for every token
 * t of the input. Items are the rows of all parts, concatenated. */
typedef struct matmul_part {
  const fdy_llama_qlinear *linear;
  float *y;
  uint32_t ld;
} matmul_part;

typedef struct matmul_job {
  fdy_llama_session *session;
  const float *x; /* (tokens, in) */
  uint32_t tokens;
  uint32_t in;
  uint32_t group;
  uint32_t parts;
  matmul_part part[3];
  uint32_t first[4]; /* first item of each part; first[parts] = total */
} matmul_job;

FDY_KERNEL
static void matmul_rows(const matmul_job *job, const matmul_part *part,
                        uint32_t begin, uint32_t end, float *scratch) {
  const fdy_llama_session *s = job->session;
  const fdy_llama_qlinear *linear = part->linear;
  fdy_dtype dtype = s->config->scale_dtype;
  uint32_t in = job->in;
  uint32_t group = job->group;
  uint32_t groups = in / group;
  float *scale = scratch;
  float *bias = scale + groups;
  float *qf = bias + groups;
  for (uint32_t r = begin; r < end; r++) {
    const unsigned char *words =
        (const unsigned char *)linear->weight->data + (uint64_t)r * (in / 2);
    fdy_llama_halves_to_float(linear->scales->data, dtype, (uint64_t)r * groups,
                              groups, scale);
    fdy_llama_halves_to_float(linear->biases->data, dtype, (uint64_t)r * groups,
                              groups, bias);
    if (job->tokens == 1) {
      part->y[r] = dot_packed(words, s->xt, s->xsum, scale, bias, in, group);
      continue;
    }
    for (uint32_t b = 0; b < in / 64; b++) {
      v8u w = load_block(words + (uint64_t)b * 32);
      for (int j = 0; j < 8; j++) {
        v8f q = nibbles(w, j);
        memcpy(qf + (uint64_t)b * 64 + 8 * j, &q, sizeof q);
      }
    }
    uint32_t t = 0;
    for (; t + 4 <= job->tokens; t += 4) {
      float out[4];
      dot_unpacked4(qf, s->xt + (uint64_t)t * in,
                    s->xsum + (uint64_t)t * groups, scale, bias, in, group,
                    out);
      for (uint32_t j = 0; j < 4; j++) {
        part->y[(uint64_t)(t + j) * part->ld + r] = out[j];
      }
    }
    for (; t < job->tokens; t++) {
      part->y[(uint64_t)t * part->ld + r] =
          dot_unpacked(qf, s->xt + (uint64_t)t * in,
                       s->xsum + (uint64_t)t * groups, scale, bias, in, group);
    }
  }
}

static void matmul_task(void *ctx, uint32_t begin, uint32_t end,
                        uint32_t thread) {
  matmul_job *job = ctx;
  fdy_llama_session *s = job->session;
  float *scratch = s->row_scratch + (uint64_t)thread * s->row_stride;
  uint32_t p = 0;
  while (begin < end) {
    while (begin >= job->first[p + 1]) {
      p++;
    }
    uint32_t stop = end < job->first[p + 1] ? end : job->first[p + 1];
    matmul_rows(job, &job->part[p], begin - job->first[p], stop - job->first[p],
                scratch);
    begin = stop;
  }
}

static void matmul_add(matmul_job *job, const fdy_llama_qlinear *linear,
                       float *y, uint32_t ld) {
  job->part[job->parts] = (matmul_part){linear, y, ld};
  job->first[job->parts + 1] = job->first[job->parts] + linear->out_features;
  job->parts++;
}

/* Stores the input block-transposed and its per-group sums (every part
 * shares in and the group size), then runs the rows on the pool. */
static void matmul_run(matmul_job *job) {
  fdy_llama_session *s = job->session;
  const fdy_llama_qlinear *linear = job->part[0].linear;
  uint32_t in = linear->in_features;
  uint32_t groups = (uint32_t)linear->scales->shape.dims[1];
  uint32_t group = in / groups;
  job->in = in;
  job->group = group;
  for (uint32_t t = 0; t < job->tokens; t++) {
    const float *x = job->x + (uint64_t)t * in;
    float *xt = s->xt + (uint64_t)t * in;
    for (uint32_t b = 0; b < in; b += 64) {
      for (uint32_t j = 0; j < 8; j++) {
        for (uint32_t k = 0; k < 8; k++) {
          xt[b + 8 * j + k] = x[b + 8 * k + j];
        }
      }
    }
    for (uint32_t g = 0; g < groups; g++) {
      float sum = 0.0f;
      for (uint32_t i = 0; i < group; i++) {
        sum += x[(uint64_t)g * group + i];
      }
      s->xsum[(uint64_t)t * groups + g] = sum;
    }
  }
  fdy_llama_pool_run(s->pool, job->first[job->parts], 16, matmul_task, job);
}

/* ---- attention ---------------------------------------------------------- */

typedef struct attention_job {
  fdy_llama_session *session;
  uint32_t layer;
  uint32_t start; /* position of the batch's first token */
} attention_job;

static void attention_task(void *ctx, uint32_t begin, uint32_t end,
                           uint32_t thread) {
  attention_job *job = ctx;
  fdy_llama_session *s = job->session;
  const fdy_llama_config *c = s->config;
  uint32_t d = c->head_dim;
  uint32_t group = c->num_heads / c->num_kv_heads;
  float scale = (float)(1.0 / sqrt((double)d));
  float *scores = s->score_scratch + (uint64_t)thread * s->context;
  uint64_t layer_base = (uint64_t)job->layer * s->context * s->kv_dim;
  for (uint32_t item = begin; item < end; item++) {
    uint32_t t = item / c->num_heads;
    uint32_t head = item % c->num_heads;
    uint32_t kv_head = head / group;
    uint32_t last = job->start + t; /* attends to positions 0..last */
    const float *q = s->q + (uint64_t)t * s->q_dim + (uint64_t)head * d;
    const float *k = s->k_cache + layer_base + (uint64_t)kv_head * d;
    const float *v = s->v_cache + layer_base + (uint64_t)kv_head * d;
    float max = -INFINITY;
    for (uint32_t p = 0; p <= last; p++) {
      scores[p] = dot(q, k + (uint64_t)p * s->kv_dim, d) * scale;
      max = scores[p] > max ? scores[p] : max;
    }
    double sum = 0.0;
    for (uint32_t p = 0; p <= last; p++) {
      scores[p] = expf(scores[p] - max);
      sum += scores[p];
    }
    float inv = (float)(1.0 / sum);
    float *out = s->attn + (uint64_t)t * s->q_dim + (uint64_t)head * d;
    memset(out, 0, sizeof *out * d);
    for (uint32_t p = 0; p <= last; p++) {
      const float *vp = v + (uint64_t)p * s->kv_dim;
      float w = scores[p] * inv;
      for (uint32_t j = 0; j < d; j++) {
        out[j] += w * vp[j];
      }
    }
  }
}

/* ---- the forward pass --------------------------------------------------- */

static void head_logits(fdy_llama_session *s, const float *x, uint32_t tokens,
                        float *logits) {
  const fdy_llama_config *c = s->config;
  const float *final_norm =
      s->norms + (uint64_t)c->num_layers * 2 * c->hidden_size;
  for (uint32_t t = 0; t < tokens; t++) {
    rmsnorm(s->x + (uint64_t)t * c->hidden_size,
            x + (uint64_t)t * c->hidden_size, final_norm, c->hidden_size,
            c->rms_norm_eps);
  }
  matmul_job job = {.session = s, .x = s->x, .tokens = tokens};
  matmul_add(&job, fdy_llama_lm_head(s->model), logits, c->vocab_size);
  matmul_run(&job);
}

void fdy_llama_forward_batch(fdy_llama_session *s, const int32_t *ids,
                             uint32_t count, float *all_logits,
                             float *last_logits) {
  const fdy_llama_config *c = s->config;
  uint32_t hidden = c->hidden_size;
  uint32_t ffn = c->intermediate_size;
  uint32_t half = c->head_dim / 2;
  uint32_t start = s->position;
  const fdy_llama_qlinear *embed = fdy_llama_embedding(s->model);

  for (uint32_t t = 0; t < count; t++) {
    fdy_llama_dequantize_row(embed, c->scale_dtype, (uint32_t)ids[t],
                             s->h + (uint64_t)t * hidden);
  }
  for (uint32_t l = 0; l < c->num_layers; l++) {
    const fdy_llama_layer_weights *w = fdy_llama_layer(s->model, l);
    const float *input_norm = s->norms + (uint64_t)l * 2 * hidden;
    const float *post_norm = input_norm + hidden;

    for (uint32_t t = 0; t < count; t++) {
      rmsnorm(s->x + (uint64_t)t * hidden, s->h + (uint64_t)t * hidden,
              input_norm, hidden, c->rms_norm_eps);
    }
    matmul_job qkv = {.session = s, .x = s->x, .tokens = count};
    matmul_add(&qkv, &w->q, s->q, s->q_dim);
    matmul_add(&qkv, &w->k, s->k, s->kv_dim);
    matmul_add(&qkv, &w->v, s->v, s->kv_dim);
    matmul_run(&qkv);

    uint64_t layer_base = (uint64_t)l * s->context * s->kv_dim;
    for (uint32_t t = 0; t < count; t++) {
      uint64_t pos = start + t;
      const float *cos_row = s->rope_cos + pos * half;
      const float *sin_row = s->rope_sin + pos * half;
      float *q = s->q + (uint64_t)t * s->q_dim;
      float *k = s->k + (uint64_t)t * s->kv_dim;
      rope(q, c->num_heads, c->head_dim, cos_row, sin_row);
      rope(k, c->num_kv_heads, c->head_dim, cos_row, sin_row);
      uint64_t at = layer_base + pos * s->kv_dim;
      memcpy(s->k_cache + at, k, sizeof *k * s->kv_dim);
      memcpy(s->v_cache + at, s->v + (uint64_t)t * s->kv_dim,
             sizeof(float) * s->kv_dim);
    }
    attention_job attention = {s, l, start};
    fdy_llama_pool_run(s->pool, count * c->num_heads, 1, attention_task,
                       &attention);

    matmul_job o = {.session = s, .x = s->attn, .tokens = count};
    matmul_add(&o, &w->o, s->x, hidden);
    matmul_run(&o);
    for (uint64_t i = 0; i < (uint64_t)count * hidden; i++) {
      s->h[i] += s->x[i];
    }

    for (uint32_t t = 0; t < count; t++) {
      rmsnorm(s->x + (uint64_t)t * hidden, s->h + (uint64_t)t * hidden,
              post_norm, hidden, c->rms_norm_eps);
    }
    matmul_job gate_up = {.session = s, .x = s->x, .tokens = count};
    matmul_add(&gate_up, &w->gate, s->gate, ffn);
    matmul_add(&gate_up, &w->up, s->up, ffn);
    matmul_run(&gate_up);
    for (uint64_t i = 0; i < (uint64_t)count * ffn; i++) {
      float g = s->gate[i];
      s->gate[i] = g / (1.0f + expf(-g)) * s->up[i];
    }
    matmul_job down = {.session = s, .x = s->gate, .tokens = count};
    matmul_add(&down, &w->down, s->x, hidden);
    matmul_run(&down);
    for (uint64_t i = 0; i < (uint64_t)count * hidden; i++) {
      s->h[i] += s->x[i];
    }
  }

  if (all_logits) {
    head_logits(s, s->h, count, all_logits);
    if (last_logits) {
      memcpy(last_logits, all_logits + (uint64_t)(count - 1) * c->vocab_size,
             sizeof *last_logits * c->vocab_size);
    }
  } else if (last_logits) {
    head_logits(s, s->h + (uint64_t)(count - 1) * hidden, 1, last_logits);
  }
  s->position = start + count;
}
