/* The CPU backend's op kernels: which ops it runs, the workspace each needs,
 * and every kind of include/foundry/ops.h except MATMUL_Q4 (matmul_q4.c)
 * and the embeddings and the 8-bit and unquantized matmuls (linear.c).
 * The fused kinds run the tasks of the sequence they replace, in its order,
 * through workspace (RMSNORM's rows, then MATMUL_Q4 per weight, then
 * SWIGLU's or ADD's elements), so their results are bitwise those of the
 * unfused ops.
 *
 * The float arithmetic is the float32 forward pass's, unchanged, so the
 * engine reproduces it bitwise: RMSNorm sums squares in double and scales by
 * the float (float)(1 / sqrt(mean + eps)); rope angles are (double)pos * inv
 * with cos and sin rounded to float; attention dots with 8 accumulators,
 * exponentiates in float and sums the weights in double; SwiGLU is
 * g / (1 + exp(-g)) * up. Each op splits its work across the pool in items
 * whose results do not depend on which thread runs them: rows, (row, head)
 * pairs, fixed-size chunks of elements; reductions across chunks (checksum,
 * argmax) combine per-chunk results in chunk order. SAMPLE takes a row
 * per item: core's fdy_sample_draw_row, its definition (include/foundry/
 * ops.h) done literally with the arithmetic the CUDA backend shares.
 *
 * Step values are data: a count below 0 counts as 0 rows; a row whose token
 * id lies outside the table (the EMBED kinds) or whose position or sequence
 * lies outside the cache (ATTENTION, ROPE_ATTENTION) is written as NaN and
 * nothing is read or written out of bounds (the attention does not append
 * it). */
#include "kernels.h"

#include "foundry/checksum.h"
#include "foundry/op_table.h"

#include <math.h>
#include <string.h>

#define CHECKSUM_CHUNK_WORDS (1u << 16) /* 512 KiB per item */
#define ARGMAX_CHUNK         (1u << 14) /* values per item */
#define ELEMENT_CHUNK        (1u << 14) /* elements per item */
#define MAX_ELEMENTS         ((uint64_t)1 << 40)

/* One chunk's argmax (or a row's, once merged). */
typedef struct argmax_best {
  float value;
  uint32_t index;
} argmax_best;

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

/* Rows of `rows` an op processes: step[FDY_STEP_COUNT] clamped to [0, rows]. */
static uint32_t active_rows(const int32_t *step, uint64_t rows) {
  int32_t count = step[FDY_STEP_COUNT];
  if (count <= 0) {
    return 0;
  }
  return (uint64_t)count < rows ? (uint32_t)count : (uint32_t)rows;
}

static void fill_nan(float *out, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    out[i] = NAN;
  }
}

/* ---- which ops, and their workspace -------------------------------------- */

static const fdy_tensor_view *view_at(const fdy_op *op, uint32_t i) {
  return i < op->input_count ? &op->inputs[i]
                             : &op->outputs[i - op->input_count];
}

/* Float stride of one thread's attention scores, in bytes. */
static fdy_status score_stride(const fdy_op *op, uint64_t *out,
                               fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st =
      fdy_mul_u64(op->inputs[4].shape.dims[1], sizeof(float), &bytes, err);
  return st == FDY_OK ? fdy_align_up(bytes, FDY_CPU_WORKSPACE_ALIGN, out, err)
                      : st;
}

/* Workspace of a fused kind (bytes, FDY_CPU_WORKSPACE_ALIGN multiples):
 * the normalized rows of x, SwiGLU's gate and up rows, then the workspace
 * of its MATMUL_Q4 parts (alike for every weight of the op: same x, same
 * groups). */
typedef struct fused_layout {
  uint64_t normed, gate, up, matmul, total;
} fused_layout;

/* The MATMUL_Q4 op of the weight whose packed tensor is input w of fused
 * op `op`, reading x of op's input 1 shape into an output of `out`'s. */
static fdy_op matmul_part(const fdy_op *op, uint32_t w,
                          const fdy_tensor_view *out) {
  fdy_op m;
  memset(&m, 0, sizeof m);
  m.kind = FDY_OP_MATMUL_Q4;
  m.input_count = 5;
  m.output_count = 1;
  m.inputs[0] = op->inputs[0];
  m.inputs[1] = op->inputs[1];
  m.inputs[2] = op->inputs[w];
  m.inputs[3] = op->inputs[w + 1];
  m.inputs[4] = op->inputs[w + 2];
  m.outputs[0] = *out;
  return m;
}

/* Reserves `floats` floats at *at (rounded up to the workspace alignment);
 * *start is where they begin. */
static fdy_status reserve(uint64_t *at, uint64_t floats, uint64_t *start,
                          fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st = fdy_mul_u64(floats, sizeof(float), &bytes, err);
  if (st == FDY_OK) {
    st = fdy_align_up(bytes, FDY_CPU_WORKSPACE_ALIGN, &bytes, err);
  }
  if (st == FDY_OK) {
    *start = *at;
    st = fdy_add_u64(*at, bytes, at, err);
  }
  return st;
}

static fdy_status fused_layout_of(const fdy_op *op, uint32_t threads,
                                  fused_layout *out, fdy_error *err) {
  fused_layout l = {0};
  uint64_t at = 0;
  uint64_t rows = op->inputs[1].shape.dims[0];
  uint64_t x_floats = 0, y_floats = 0;
  fdy_status st =
      fdy_mul_u64(rows, op->inputs[1].shape.dims[1], &x_floats, err);
  if (st == FDY_OK) {
    st = fdy_mul_u64(rows, op->outputs[0].shape.dims[1], &y_floats, err);
  }
  if (st == FDY_OK && op->kind != FDY_OP_MATMUL_ADD_Q4) {
    st = reserve(&at, x_floats, &l.normed, err);
  }
  if (st == FDY_OK && op->kind == FDY_OP_NORM_SWIGLU_Q4) {
    st = reserve(&at, y_floats, &l.gate, err);
    if (st == FDY_OK) {
      st = reserve(&at, y_floats, &l.up, err);
    }
  }
  uint32_t weight = op->kind == FDY_OP_MATMUL_ADD_Q4 ? 2 : 3;
  fdy_op part = matmul_part(op, weight, &op->outputs[0]);
  fdy_cpu_matmul_layout m;
  if (st == FDY_OK) {
    st = fdy_cpu_matmul_layout_of(&part, threads, &m, err);
  }
  if (st == FDY_OK) {
    l.matmul = at;
    st = fdy_add_u64(at, m.total, &l.total, err);
  }
  if (st == FDY_OK) {
    *out = l;
  }
  return st;
}

/* Workspace of ROPE_ATTENTION (bytes, FDY_CPU_WORKSPACE_ALIGN multiples):
 * the rotated q rows, the rotated k rows, then ATTENTION's scores. */
typedef struct rope_attention_layout {
  uint64_t q, k, scores, total;
} rope_attention_layout;

static fdy_status rope_attention_layout_of(const fdy_op *op, uint32_t threads,
                                           rope_attention_layout *out,
                                           fdy_error *err) {
  rope_attention_layout l = {0};
  uint64_t at = 0, q_floats = 0, k_floats = 0, stride = 0, scores = 0;
  uint64_t rows = op->inputs[1].shape.dims[0];
  fdy_status st =
      fdy_mul_u64(rows, op->inputs[1].shape.dims[1], &q_floats, err);
  if (st == FDY_OK) {
    st = fdy_mul_u64(rows, op->inputs[2].shape.dims[1], &k_floats, err);
  }
  if (st == FDY_OK) {
    st = reserve(&at, q_floats, &l.q, err);
  }
  if (st == FDY_OK) {
    st = reserve(&at, k_floats, &l.k, err);
  }
  if (st == FDY_OK) {
    st = score_stride(op, &stride, err);
  }
  if (st == FDY_OK) {
    st = fdy_mul_u64(stride, threads, &scores, err);
  }
  if (st == FDY_OK) {
    l.scores = at;
    st = fdy_add_u64(at, scores, &l.total, err);
  }
  if (st == FDY_OK) {
    *out = l;
  }
  return st;
}

fdy_status fdy_cpu_op_workspace(const fdy_op *op, uint32_t threads,
                                uint64_t *out, fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st = FDY_OK;
  switch (op->kind) {
  case FDY_OP_NORM_MATMUL_Q4:
  case FDY_OP_NORM_SWIGLU_Q4:
  case FDY_OP_MATMUL_ADD_Q4: {
    fused_layout l;
    st = fused_layout_of(op, threads, &l, err);
    bytes = l.total;
    break;
  }
  case FDY_OP_CHECKSUM:
    bytes = ceil_div(op->inputs[0].shape.dims[0] / 8, CHECKSUM_CHUNK_WORDS) *
            sizeof(uint64_t);
    break;
  case FDY_OP_MATMUL_Q4: {
    fdy_cpu_matmul_layout l;
    st = fdy_cpu_matmul_layout_of(op, threads, &l, err);
    bytes = l.total;
    break;
  }
  case FDY_OP_MATMUL_Q8:
  case FDY_OP_MATMUL_DENSE:
    st = fdy_cpu_linear_workspace(op, threads, &bytes, err);
    break;
  case FDY_OP_ATTENTION: {
    uint64_t stride = 0;
    st = score_stride(op, &stride, err);
    if (st == FDY_OK) {
      st = fdy_mul_u64(stride, threads, &bytes, err);
    }
    break;
  }
  case FDY_OP_ROPE_ATTENTION: {
    rope_attention_layout l;
    st = rope_attention_layout_of(op, threads, &l, err);
    bytes = l.total;
    break;
  }
  case FDY_OP_ARGMAX:
    st = fdy_mul_u64(op->inputs[0].shape.dims[0],
                     ceil_div(op->inputs[0].shape.dims[1], ARGMAX_CHUNK) *
                         sizeof(argmax_best),
                     &bytes, err);
    break;
  default:
    break;
  }
  if (st == FDY_OK) {
    *out = bytes;
  }
  return st;
}

static bool has_kernel(fdy_op_kind kind);

bool fdy_cpu_op_supported(const fdy_op *op, uint32_t threads) {
  if (fdy_op_check(op, NULL) != FDY_OK || !has_kernel(op->kind)) {
    return false;
  }
  for (uint32_t i = 0; i < op->input_count + op->output_count; i++) {
    const fdy_tensor_view *v = view_at(op, i);
    uint64_t elements = 0;
    fdy_shape_elements(v->shape, &elements, NULL);
    if (elements > MAX_ELEMENTS) {
      return false;
    }
    for (uint32_t d = 0; d < v->shape.rank; d++) {
      bool bytes = fdy_op_operand_of(op, i)->flags & FDY_OPERAND_WORDS;
      if (!bytes && v->shape.dims[d] > INT32_MAX) {
        return false;
      }
    }
  }
  if (op->kind == FDY_OP_ATTENTION &&
      op->inputs[1].shape.dims[0] * op->params.attention.heads > UINT32_MAX) {
    return false;
  }
  if (op->kind == FDY_OP_ROPE_ATTENTION &&
      op->inputs[1].shape.dims[0] * op->params.rope_attention.attention.heads >
          UINT32_MAX) {
    return false;
  }
  uint64_t bytes = 0;
  return fdy_cpu_op_workspace(op, threads, &bytes, NULL) == FDY_OK;
}

/* ---- checksum -------------------------------------------------------------
 */

typedef struct checksum_job {
  const uint64_t *words;
  uint64_t count;
  uint64_t *partial; /* one sum per item */
} checksum_job;

static void checksum_task(void *ctx, uint32_t begin, uint32_t end,
                          uint32_t thread) {
  (void)thread;
  const checksum_job *job = ctx;
  for (uint32_t item = begin; item < end; item++) {
    uint64_t first = (uint64_t)item * CHECKSUM_CHUNK_WORDS;
    uint64_t left = job->count - first;
    job->partial[item] = fdy_checksum_partial(
        job->words, first,
        left < CHECKSUM_CHUNK_WORDS ? left : CHECKSUM_CHUNK_WORDS);
  }
}

static void run_checksum(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  uint64_t n = op->inputs[0].shape.dims[0];
  checksum_job job = {a->inputs[0], n / 8, (uint64_t *)a->workspace};
  uint32_t items = (uint32_t)ceil_div(job.count, CHECKSUM_CHUNK_WORDS);
  uint32_t passes = op->params.checksum.passes ? op->params.checksum.passes : 1;
  for (uint32_t pass = 0; pass < passes; pass++) {
    fdy_pool_run(pool, items, 1, checksum_task, &job);
  }
  uint64_t sum = 0;
  for (uint32_t i = 0; i < items; i++) {
    sum += job.partial[i];
  }
  uint64_t prev = op->input_count == 2 ? *(const uint64_t *)a->inputs[1] : 0;
  *(uint64_t *)a->outputs[0] =
      fdy_checksum_finish(sum, n) + prev * FDY_CHAIN_PRIME;
}

/* ---- rmsnorm --------------------------------------------------------------
 */

typedef struct rmsnorm_job {
  const float *x;
  const void *weight;
  fdy_dtype dtype;
  uint32_t n;
  double eps;
  float *out;
} rmsnorm_job;

static void rmsnorm_task(void *ctx, uint32_t begin, uint32_t end,
                         uint32_t thread) {
  (void)thread;
  const rmsnorm_job *job = ctx;
  uint32_t n = job->n;
  for (uint32_t t = begin; t < end; t++) {
    const float *x = job->x + (uint64_t)t * n;
    float *out = job->out + (uint64_t)t * n;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
      sum += (double)x[i] * (double)x[i];
    }
    float inv = (float)(1.0 / sqrt(sum / n + job->eps));
    float weight[64];
    for (uint32_t i0 = 0; i0 < n; i0 += 64) {
      uint32_t count = n - i0 < 64 ? n - i0 : 64;
      fdy_cpu_floats_of(job->weight, job->dtype, i0, count, weight);
      for (uint32_t k = 0; k < count; k++) {
        out[i0 + k] = x[i0 + k] * inv * weight[k];
      }
    }
  }
}

/* Each n-wide segment of the active rows (n the weight's length, a row
 * of x holding whole segments) is an item. */
static void run_rmsnorm(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  rmsnorm_job job = {
      .x = a->inputs[1],
      .weight = a->inputs[2],
      .dtype = op->inputs[2].dtype,
      .n = (uint32_t)op->inputs[2].shape.dims[0],
      .eps = op->params.rmsnorm.eps,
      .out = a->outputs[0],
  };
  uint32_t segments = (uint32_t)(op->inputs[1].shape.dims[1] / job.n);
  fdy_pool_run(
      pool, active_rows(a->inputs[0], op->inputs[1].shape.dims[0]) * segments,
      1, rmsnorm_task, &job);
}

/* ---- rope -------------------------------------------------------------------
 */

typedef struct rope_job {
  const fdy_op_params *params;
  const int32_t *step; /* row t's position: step[FDY_STEP_POSITION(t)] */
  const float *x;
  float *out;
  uint32_t width, heads, head_dim;
} rope_job;

static void rope_task(void *ctx, uint32_t begin, uint32_t end,
                      uint32_t thread) {
  (void)thread;
  const rope_job *job = ctx;
  uint32_t half = job->head_dim / 2;
  for (uint32_t t = begin; t < end; t++) {
    double position = (double)job->step[FDY_STEP_POSITION(t)];
    const float *x = job->x + (uint64_t)t * job->width;
    float *out = job->out + (uint64_t)t * job->width;
    for (uint32_t j = 0; j < half; j++) {
      double angle = position * fdy_rope_inverse_frequency(job->params, j);
      float c = (float)cos(angle);
      float s = (float)sin(angle);
      for (uint32_t h = 0; h < job->heads; h++) {
        uint64_t at = (uint64_t)h * job->head_dim + j;
        float x0 = x[at];
        float x1 = x[at + half];
        out[at] = x0 * c - x1 * s;
        out[at + half] = x1 * c + x0 * s;
      }
    }
  }
}

/* ROPE of rows x [rows, width] into out, each row at its position in the
 * step, with the rope parameters of params (a ROPE op's). */
static void rope_rows(fdy_pool *pool, const fdy_op_params *params,
                      const int32_t *step, const float *x, float *out,
                      uint64_t rows, uint64_t width) {
  rope_job job = {
      .params = params,
      .step = step,
      .x = x,
      .out = out,
      .width = (uint32_t)width,
      .head_dim = params->rope.head_dim,
  };
  job.heads = job.width / job.head_dim;
  fdy_pool_run(pool, active_rows(step, rows), 1, rope_task, &job);
}

static void run_rope(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  rope_rows(pool, &op->params, a->inputs[0], a->inputs[1], a->outputs[0],
            op->inputs[1].shape.dims[0], op->inputs[1].shape.dims[1]);
}

/* ---- attention ------------------------------------------------------------
 */

typedef struct attention_job {
  const float *q;
  const void *k_cache, *v_cache; /* float, or F16 bits */
  bool f16;
  const float *f16_table;
  float *out;
  uint32_t heads, group, d; /* group: query heads per kv head */
  uint64_t q_dim, kv_dim, context, sequences;
  const int32_t *step;
  bool chunk; /* ATTENTION: the rows continue row 0's sequence and
                 position; else (ROPE_ATTENTION) each row has its own */
  unsigned char *scores;
  uint64_t score_stride; /* bytes */
} attention_job;

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

/* dot with b stored as F16 bits, converted exactly through table. */
static float dot_f16(const float *a, const uint16_t *b, uint32_t n,
                     const float *table) {
  float acc[8] = {0};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (uint32_t j = 0; j < 8; j++) {
      acc[j] += a[i + j] * table[b[i + j]];
    }
  }
  for (; i < n; i++) {
    acc[0] += a[i] * table[b[i]];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* The cache row of row t (its sequence's region, its position), or false
 * when the position or the sequence lies outside the cache. */
static bool cache_row(const attention_job *job, uint32_t t, uint64_t *row,
                      uint32_t *position) {
  uint32_t r = job->chunk ? 0 : t;
  int64_t p = (int64_t)job->step[FDY_STEP_POSITION(r)] + (job->chunk ? t : 0);
  int64_t s = job->step[FDY_STEP_SEQUENCE(r)];
  if (p < 0 || (uint64_t)p >= job->context || s < 0 ||
      (uint64_t)s >= job->sequences) {
    return false;
  }
  *row = (uint64_t)s * job->context + (uint64_t)p;
  *position = (uint32_t)p;
  return true;
}

/* Query head `head` of row t over positions 0..its position of its
 * sequence's region of the cache. */
static void attend(const attention_job *job, uint32_t t, uint32_t head,
                   float *scores) {
  uint32_t d = job->d;
  float *out = job->out + (uint64_t)t * job->q_dim + (uint64_t)head * d;
  uint64_t row = 0;
  uint32_t last = 0;
  if (!cache_row(job, t, &row, &last)) {
    fill_nan(out, d);
    return;
  }
  uint64_t kv_at =
      (row - last) * job->kv_dim + (uint64_t)(head / job->group) * d;
  float scale = (float)(1.0 / sqrt((double)d));
  const float *q = job->q + (uint64_t)t * job->q_dim + (uint64_t)head * d;
  float max = -INFINITY;
  for (uint32_t p = 0; p <= last; p++) {
    uint64_t at = kv_at + (uint64_t)p * job->kv_dim;
    float s = job->f16 ? dot_f16(q, (const uint16_t *)job->k_cache + at, d,
                                 job->f16_table)
                       : dot(q, (const float *)job->k_cache + at, d);
    scores[p] = s * scale;
    max = scores[p] > max ? scores[p] : max;
  }
  double sum = 0.0;
  for (uint32_t p = 0; p <= last; p++) {
    scores[p] = expf(scores[p] - max);
    sum += scores[p];
  }
  float inv = (float)(1.0 / sum);
  memset(out, 0, sizeof *out * d);
  for (uint32_t p = 0; p <= last; p++) {
    uint64_t at = kv_at + (uint64_t)p * job->kv_dim;
    float w = scores[p] * inv;
    if (job->f16) {
      const uint16_t *vp = (const uint16_t *)job->v_cache + at;
      for (uint32_t j = 0; j < d; j++) {
        out[j] += w * job->f16_table[vp[j]];
      }
    } else {
      const float *vp = (const float *)job->v_cache + at;
      for (uint32_t j = 0; j < d; j++) {
        out[j] += w * vp[j];
      }
    }
  }
}

static void attention_task(void *ctx, uint32_t begin, uint32_t end,
                           uint32_t thread) {
  const attention_job *job = ctx;
  float *scores = (float *)(job->scores + thread * job->score_stride);
  for (uint32_t item = begin; item < end; item++) {
    attend(job, item / job->heads, item % job->heads, scores);
  }
}

/* Stores row src of n values into cache row `row` (F16: rounded). */
static void append(void *cache, bool f16, uint64_t row, const float *src,
                   uint64_t n) {
  if (f16) {
    uint16_t *dst = (uint16_t *)cache + row * n;
    for (uint64_t i = 0; i < n; i++) {
      dst[i] = fdy_float_to_f16(src[i]);
    }
  } else {
    memcpy((float *)cache + row * n, src, sizeof(float) * n);
  }
}

/* ATTENTION of chunk rows, or (chunk false) of independent rows: every
 * row's k and v appended, then each row's attention. */
static void attention_rows(fdy_pool *pool, const fdy_cpu_args *a, bool chunk) {
  const fdy_op *op = a->op;
  const int32_t *step = a->inputs[0];
  uint32_t rows = active_rows(step, op->inputs[1].shape.dims[0]);
  attention_job job = {
      .q = a->inputs[1],
      .k_cache = a->inputs[4],
      .v_cache = a->inputs[5],
      .f16 = op->inputs[4].dtype == FDY_DTYPE_F16,
      .out = a->outputs[0],
      .heads = op->params.attention.heads,
      .group = op->params.attention.heads / op->params.attention.kv_heads,
      .d = op->params.attention.head_dim,
      .q_dim = op->inputs[1].shape.dims[1],
      .kv_dim = op->inputs[2].shape.dims[1],
      .context = op->inputs[4].shape.dims[1],
      .sequences = op->inputs[4].shape.dims[0],
      .step = step,
      .chunk = chunk,
      .scores = a->workspace,
  };
  if (job.f16) {
    job.f16_table = fdy_cpu_f16_table();
  }
  /* The launch computed the stride already; it cannot fail here. */
  score_stride(op, &job.score_stride, NULL);
  for (uint32_t t = 0; t < rows; t++) {
    uint64_t row = 0;
    uint32_t position = 0;
    if (cache_row(&job, t, &row, &position)) {
      const float *k = (const float *)a->inputs[2] + (uint64_t)t * job.kv_dim;
      const float *v = (const float *)a->inputs[3] + (uint64_t)t * job.kv_dim;
      append(a->inputs[4], job.f16, row, k, job.kv_dim);
      append(a->inputs[5], job.f16, row, v, job.kv_dim);
    }
  }
  fdy_pool_run(pool, rows * job.heads, 1, attention_task, &job);
}

static void run_attention(fdy_pool *pool, const fdy_cpu_args *a) {
  attention_rows(pool, a, true);
}

/* ROPE_ATTENTION: the rope of q and of k into the workspace, then the
 * attention of the rotated rows, each at its own position and sequence
 * (for one row the unfused sequence's kernels). */
static void run_rope_attention(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  rope_attention_layout l;
  /* The launch computed the same layout; it cannot fail here. */
  rope_attention_layout_of(op, fdy_pool_threads(pool), &l, NULL);
  float *q = (float *)(a->workspace + l.q);
  float *k = (float *)(a->workspace + l.k);
  const fdy_op_params rope = fdy_rope_params_of(op);
  uint64_t rows = op->inputs[1].shape.dims[0];
  rope_rows(pool, &rope, a->inputs[0], a->inputs[1], q, rows,
            op->inputs[1].shape.dims[1]);
  rope_rows(pool, &rope, a->inputs[0], a->inputs[2], k, rows,
            op->inputs[2].shape.dims[1]);
  fdy_op attention = *op;
  attention.kind = FDY_OP_ATTENTION;
  memset(&attention.params, 0, sizeof attention.params);
  attention.params.attention = op->params.rope_attention.attention;
  fdy_cpu_args args = *a;
  args.op = &attention;
  args.inputs[1] = q;
  args.inputs[2] = k;
  args.workspace = a->workspace + l.scores;
  attention_rows(pool, &args, false);
}

/* ---- element-wise kinds -----------------------------------------------------
 */

typedef struct elementwise_job {
  fdy_op_kind kind;
  const float *a, *b; /* b: SWIGLU's up, ADD's b; unused by LAST_ROW */
  float *out;
  uint64_t count;
} elementwise_job;

static void elementwise_task(void *ctx, uint32_t begin, uint32_t end,
                             uint32_t thread) {
  (void)thread;
  const elementwise_job *job = ctx;
  uint64_t first = (uint64_t)begin * ELEMENT_CHUNK;
  uint64_t stop = (uint64_t)end * ELEMENT_CHUNK;
  stop = stop < job->count ? stop : job->count;
  switch (job->kind) {
  case FDY_OP_SWIGLU:
    for (uint64_t i = first; i < stop; i++) {
      float g = job->a[i];
      job->out[i] = g / (1.0f + expf(-g)) * job->b[i];
    }
    break;
  case FDY_OP_ADD:
    for (uint64_t i = first; i < stop; i++) {
      job->out[i] = job->a[i] + job->b[i];
    }
    break;
  default: /* LAST_ROW: a copy */
    memcpy(job->out + first, job->a + first, sizeof(float) * (stop - first));
    break;
  }
}

static void run_elementwise(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  uint64_t n = op->inputs[1].shape.dims[1];
  uint32_t rows = active_rows(a->inputs[0], op->inputs[1].shape.dims[0]);
  elementwise_job job = {op->kind, a->inputs[1], NULL, a->outputs[0], 0};
  if (op->kind == FDY_OP_LAST_ROW) {
    if (rows == 0) {
      return;
    }
    job.a += (uint64_t)(rows - 1) * n;
    job.count = n;
  } else {
    job.b = a->inputs[2];
    job.count = rows * n;
  }
  fdy_pool_run(pool, (uint32_t)ceil_div(job.count, ELEMENT_CHUNK), 1,
               elementwise_task, &job);
}

/* ---- add_bias ---------------------------------------------------------------
 */

typedef struct add_bias_job {
  const float *x;
  const void *bias;
  fdy_dtype dtype;
  uint32_t n;
  float *out;
} add_bias_job;

static void add_bias_task(void *ctx, uint32_t begin, uint32_t end,
                          uint32_t thread) {
  (void)thread;
  const add_bias_job *job = ctx;
  uint32_t n = job->n;
  float bias[64];
  for (uint32_t t = begin; t < end; t++) {
    const float *x = job->x + (uint64_t)t * n;
    float *out = job->out + (uint64_t)t * n;
    for (uint32_t i0 = 0; i0 < n; i0 += 64) {
      uint32_t count = n - i0 < 64 ? n - i0 : 64;
      fdy_cpu_floats_of(job->bias, job->dtype, i0, count, bias);
      for (uint32_t k = 0; k < count; k++) {
        out[i0 + k] = x[i0 + k] + bias[k];
      }
    }
  }
}

static void run_add_bias(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  add_bias_job job = {
      .x = a->inputs[1],
      .bias = a->inputs[2],
      .dtype = op->inputs[2].dtype,
      .n = (uint32_t)op->inputs[1].shape.dims[1],
      .out = a->outputs[0],
  };
  fdy_pool_run(pool, active_rows(a->inputs[0], op->inputs[1].shape.dims[0]), 1,
               add_bias_task, &job);
}

/* ---- argmax -----------------------------------------------------------------
 */

typedef struct argmax_job {
  const float *x;
  uint64_t n;
  uint32_t chunks; /* per row */
  argmax_best *best;
} argmax_job;

/* Whether value a beats the best value b: larger, and NaN loses to any
 * number. Ties keep the earlier index. */
static bool beats(float a, float b) {
  return a > b || (isnan(b) && !isnan(a));
}

static void argmax_task(void *ctx, uint32_t begin, uint32_t end,
                        uint32_t thread) {
  (void)thread;
  const argmax_job *job = ctx;
  for (uint32_t item = begin; item < end; item++) {
    uint64_t row = item / job->chunks;
    uint64_t first = (uint64_t)(item % job->chunks) * ARGMAX_CHUNK;
    uint64_t stop =
        first + ARGMAX_CHUNK < job->n ? first + ARGMAX_CHUNK : job->n;
    const float *x = job->x + row * job->n;
    uint64_t best = first;
    for (uint64_t i = first + 1; i < stop; i++) {
      if (beats(x[i], x[best])) {
        best = i;
      }
    }
    job->best[item] = (argmax_best){x[best], (uint32_t)best};
  }
}

static void run_argmax(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  uint64_t rows = op->inputs[0].shape.dims[0];
  argmax_job job = {
      .x = a->inputs[0],
      .n = op->inputs[0].shape.dims[1],
      .best = (argmax_best *)a->workspace,
  };
  job.chunks = (uint32_t)ceil_div(job.n, ARGMAX_CHUNK);
  fdy_pool_run(pool, (uint32_t)(rows * job.chunks), 1, argmax_task, &job);
  int32_t *out = a->outputs[0];
  for (uint64_t r = 0; r < rows; r++) {
    argmax_best best = job.best[r * job.chunks];
    for (uint32_t c = 1; c < job.chunks; c++) {
      argmax_best next = job.best[r * job.chunks + c];
      if (beats(next.value, best.value)) {
        best = next;
      }
    }
    out[r] = (int32_t)best.index;
  }
}

/* ---- sample -----------------------------------------------------------------
 */

typedef struct sample_job {
  const float *x;
  const uint32_t *params;
  uint64_t n;
  int32_t *out;
} sample_job;

static void sample_task(void *ctx, uint32_t begin, uint32_t end,
                        uint32_t thread) {
  (void)thread;
  const sample_job *job = ctx;
  for (uint32_t row = begin; row < end; row++) {
    job->out[row] =
        fdy_sample_draw_row(job->x + (uint64_t)row * job->n, job->n,
                            job->params + (uint64_t)row * FDY_SAMPLE_FIELDS);
  }
}

static void run_sample(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  sample_job job = {.x = a->inputs[1],
                    .params = a->inputs[2],
                    .n = op->inputs[1].shape.dims[1],
                    .out = a->outputs[0]};
  fdy_pool_run(pool, active_rows(a->inputs[0], op->inputs[1].shape.dims[0]), 1,
               sample_task, &job);
}

/* ---- fused kinds -----------------------------------------------------------
 */

/* y = x W^T for the first `rows` rows of x, W the weight at input w of the
 * fused op of args, y of out's shape. */
static void matmul_into(fdy_pool *pool, const fdy_cpu_args *args, uint32_t w,
                        const fdy_tensor_view *out, const float *x, float *y,
                        unsigned char *workspace, uint32_t rows) {
  fdy_op part = matmul_part(args->op, w, out);
  fdy_cpu_args part_args = {.op = &part, .workspace = workspace};
  part_args.inputs[0] = args->inputs[0];
  part_args.inputs[1] = (void *)x;
  part_args.inputs[2] = args->inputs[w];
  part_args.inputs[3] = args->inputs[w + 1];
  part_args.inputs[4] = args->inputs[w + 2];
  part_args.outputs[0] = y;
  fdy_cpu_matmul_q4(pool, &part_args, rows);
}

/* SWIGLU (out = silu(a) * b) or ADD (out = a + b) over count elements. */
static void elementwise(fdy_pool *pool, fdy_op_kind kind, const float *a,
                        const float *b, float *out, uint64_t count) {
  elementwise_job job = {kind, a, b, out, count};
  fdy_pool_run(pool, (uint32_t)ceil_div(count, ELEMENT_CHUNK), 1,
               elementwise_task, &job);
}

static void run_fused(fdy_pool *pool, const fdy_cpu_args *a) {
  const fdy_op *op = a->op;
  fused_layout l;
  /* The launch computed the same layout; it cannot fail here. */
  fused_layout_of(op, fdy_pool_threads(pool), &l, NULL);
  unsigned char *matmul_workspace = a->workspace + l.matmul;
  uint32_t rows = active_rows(a->inputs[0], op->inputs[1].shape.dims[0]);
  uint64_t width = op->outputs[0].shape.dims[1];
  const float *x = a->inputs[1];
  if (op->kind != FDY_OP_MATMUL_ADD_Q4) {
    float *normed = (float *)(a->workspace + l.normed);
    rmsnorm_job job = {
        .x = x,
        .weight = a->inputs[2],
        .dtype = op->inputs[2].dtype,
        .n = (uint32_t)op->inputs[1].shape.dims[1],
        .eps = op->params.rmsnorm.eps,
        .out = normed,
    };
    fdy_pool_run(pool, rows, 1, rmsnorm_task, &job);
    x = normed;
  }
  switch (op->kind) {
  case FDY_OP_NORM_MATMUL_Q4:
    for (uint32_t j = 0; j < op->output_count; j++) {
      matmul_into(pool, a, 3 + 3 * j, &op->outputs[j], x, a->outputs[j],
                  matmul_workspace, rows);
    }
    break;
  case FDY_OP_NORM_SWIGLU_Q4: {
    float *gate = (float *)(a->workspace + l.gate);
    float *up = (float *)(a->workspace + l.up);
    matmul_into(pool, a, 3, &op->outputs[0], x, gate, matmul_workspace, rows);
    matmul_into(pool, a, 6, &op->outputs[0], x, up, matmul_workspace, rows);
    elementwise(pool, FDY_OP_SWIGLU, gate, up, a->outputs[0], rows * width);
    break;
  }
  default: { /* MATMUL_ADD_Q4: out = residual + x W^T, ADD's operand order */
    float *out = a->outputs[0];
    matmul_into(pool, a, 2, &op->outputs[0], x, out, matmul_workspace, rows);
    elementwise(pool, FDY_OP_ADD, a->inputs[5], out, out, rows * width);
    break;
  }
  }
}

/* The kinds whose kernel lives in another file, over the active rows. */

static void run_matmul_q4(fdy_pool *pool, const fdy_cpu_args *a) {
  fdy_cpu_matmul_q4(pool, a,
                    active_rows(a->inputs[0], a->op->inputs[1].shape.dims[0]));
}

static void run_embed_linear(fdy_pool *pool, const fdy_cpu_args *a) {
  fdy_cpu_embed_linear(
      pool, a, active_rows(a->inputs[0], a->op->outputs[0].shape.dims[0]));
}

static void run_matmul_linear(fdy_pool *pool, const fdy_cpu_args *a) {
  fdy_cpu_matmul_linear(
      pool, a, active_rows(a->inputs[0], a->op->inputs[1].shape.dims[0]));
}

/* The kernel of each kind. */
static void (*const kernel_of[FDY_OP_KIND_COUNT])(fdy_pool *,
                                                  const fdy_cpu_args *) = {
    [FDY_OP_CHECKSUM] = run_checksum,
    [FDY_OP_EMBED_Q4] = run_embed_linear,
    [FDY_OP_RMSNORM] = run_rmsnorm,
    [FDY_OP_MATMUL_Q4] = run_matmul_q4,
    [FDY_OP_ROPE] = run_rope,
    [FDY_OP_ATTENTION] = run_attention,
    [FDY_OP_SWIGLU] = run_elementwise,
    [FDY_OP_ADD] = run_elementwise,
    [FDY_OP_LAST_ROW] = run_elementwise,
    [FDY_OP_ARGMAX] = run_argmax,
    [FDY_OP_NORM_MATMUL_Q4] = run_fused,
    [FDY_OP_NORM_SWIGLU_Q4] = run_fused,
    [FDY_OP_MATMUL_ADD_Q4] = run_fused,
    [FDY_OP_ROPE_ATTENTION] = run_rope_attention,
    [FDY_OP_SAMPLE] = run_sample,
    [FDY_OP_EMBED_Q8] = run_embed_linear,
    [FDY_OP_MATMUL_Q8] = run_matmul_linear,
    [FDY_OP_EMBED_DENSE] = run_embed_linear,
    [FDY_OP_MATMUL_DENSE] = run_matmul_linear,
    [FDY_OP_ADD_BIAS] = run_add_bias,
};

static bool has_kernel(fdy_op_kind kind) {
  return kernel_of[kind] != NULL;
}

void fdy_cpu_op_run(fdy_pool *pool, const fdy_cpu_args *args) {
  kernel_of[args->op->kind](pool, args);
}
