/* EMBED_Q4, EMBED_Q8, MATMUL_Q8, EMBED_DENSE and MATMUL_DENSE on the CPU:
 * the reference kernels of 4-bit and 8-bit affine and unquantized (F32,
 * F16, BF16) weights, but the 4-bit matmuls (matmul_q4.c).
 *
 * A weight row is expanded to floats: w = scale * q + bias (rounded to
 * float after the product and after the sum, never contracted), q the
 * 4-bit or 8-bit values of the packed words, low bits first (as
 * fdy_llama_dequantize_row does), or the stored value converted
 * exactly. An embedding row is that row; a matmul output is its dot
 * product with an input row, summed in 8 interleaved float partial sums
 * that are combined in a fixed tree. Weight rows are split across the pool
 * and each output element is computed by one thread in the same order
 * whatever the number of rows of x, so results depend neither on the
 * thread count nor on the row count. The workspace of a matmul is one
 * expanded row per thread. */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* Weight rows per pool chunk. */
#define LINEAR_CHUNK 16

/* The weight matrix of an op: packed words (affine) or values (dense). */
typedef struct linear_weight {
  const unsigned char *data;
  const void *scales, *biases; /* affine only */
  fdy_dtype dtype;             /* the scales' (affine) or the values' */
  uint32_t bits;               /* of a quantized value: 4 or 8; 0: dense */
  uint32_t n;                  /* values per row */
  uint32_t groups;             /* per row (affine) */
} linear_weight;

static uint32_t bits_of(fdy_op_kind kind) {
  switch (kind) {
  case FDY_OP_EMBED_Q4:
    return 4;
  case FDY_OP_EMBED_Q8:
  case FDY_OP_MATMUL_Q8:
    return 8;
  default:
    return 0;
  }
}

/* The weight of op whose first tensor is input w (EMBED_*: 1, MATMUL_*:
 * 2), with args's data. */
static linear_weight weight_of(const fdy_cpu_args *args, uint32_t w,
                               uint32_t n) {
  const fdy_op *op = args->op;
  linear_weight lw = {
      .data = args->inputs[w], .bits = bits_of(op->kind), .n = n};
  if (lw.bits != 0) {
    lw.scales = args->inputs[w + 1];
    lw.biases = args->inputs[w + 2];
    lw.dtype = op->inputs[w + 1].dtype;
    lw.groups = (uint32_t)op->inputs[w + 1].shape.dims[1];
  } else {
    lw.dtype = op->inputs[w].dtype;
  }
  return lw;
}

/* Values [first, end) of the packed row q of `bits`-bit values (8: a
 * byte each; 4: two a byte, the low nibble first) as scale * q + bias
 * into out[first, end). */
static void dequantize(const unsigned char *q, uint32_t bits, uint32_t first,
                       uint32_t end, float scale, float bias, float *out) {
  if (bits == 8) {
    for (uint32_t i = first; i < end; i++) {
      out[i] = scale * (float)q[i] + bias;
    }
    return;
  }
  for (uint32_t i = first; i < end; i++) {
    out[i] = scale * (float)((q[i / 2] >> (4 * (i % 2))) & 0xfu) + bias;
  }
}

/* Row r of the weight as floats into out[0, n). */
static void expand_row(const linear_weight *lw, uint64_t r, float *out) {
  if (lw->bits == 0) {
    fdy_cpu_floats_of(lw->data, lw->dtype, r * lw->n, lw->n, out);
    return;
  }
  uint32_t group = lw->n / lw->groups;
  const unsigned char *q = lw->data + r * lw->n * lw->bits / 8;
  for (uint32_t g = 0; g < lw->groups; g++) {
    float scale = fdy_cpu_half_at(lw->scales, lw->dtype, r * lw->groups + g);
    float bias = fdy_cpu_half_at(lw->biases, lw->dtype, r * lw->groups + g);
    dequantize(q, lw->bits, g * group, (g + 1) * group, scale, bias, out);
  }
}

static float dot(const float *w, const float *x, uint32_t n) {
  float acc[8] = {0};
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (uint32_t j = 0; j < 8; j++) {
      acc[j] += w[i + j] * x[i + j];
    }
  }
  for (; i < n; i++) {
    acc[i % 8] += w[i] * x[i];
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
         ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* ---- embedding ------------------------------------------------------------
 */

typedef struct embed_job {
  linear_weight w;
  const int32_t *step;
  uint64_t vocab;
  float *out;
} embed_job;

static void embed_task(void *ctx, uint32_t begin, uint32_t end,
                       uint32_t thread) {
  (void)thread;
  const embed_job *job = ctx;
  for (uint32_t t = begin; t < end; t++) {
    int32_t id = job->step[FDY_STEP_ID(t)];
    float *out = job->out + (uint64_t)t * job->w.n;
    if (id < 0 || (uint64_t)id >= job->vocab) {
      for (uint32_t i = 0; i < job->w.n; i++) {
        out[i] = NAN;
      }
      continue;
    }
    expand_row(&job->w, (uint64_t)id, out);
  }
}

void fdy_cpu_embed_linear(fdy_pool *pool, const fdy_cpu_args *args,
                          uint32_t rows) {
  const fdy_op *op = args->op;
  embed_job job = {
      .w = weight_of(args, 1, (uint32_t)op->outputs[0].shape.dims[1]),
      .step = args->inputs[0],
      .vocab = op->inputs[1].shape.dims[0],
      .out = args->outputs[0],
  };
  fdy_pool_run(pool, rows, 1, embed_task, &job);
}

/* ---- matmul ---------------------------------------------------------------
 */

/* Bytes of one thread's expanded row, rounded to the workspace alignment. */
static fdy_status row_stride(const fdy_op *op, uint64_t *out, fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st =
      fdy_mul_u64(op->inputs[1].shape.dims[1], sizeof(float), &bytes, err);
  return st == FDY_OK ? fdy_align_up(bytes, FDY_CPU_WORKSPACE_ALIGN, out, err)
                      : st;
}

fdy_status fdy_cpu_linear_workspace(const fdy_op *op, uint32_t threads,
                                    uint64_t *out, fdy_error *err) {
  uint64_t stride = 0;
  fdy_status st = row_stride(op, &stride, err);
  return st == FDY_OK ? fdy_mul_u64(stride, threads, out, err) : st;
}

typedef struct matmul_job {
  linear_weight w;
  const float *x;
  uint32_t rows; /* rows of x to compute */
  uint32_t out;  /* output features: weight rows */
  float *y;
  unsigned char *scratch;
  uint64_t stride; /* bytes of a thread's scratch */
} matmul_job;

static void matmul_task(void *ctx, uint32_t begin, uint32_t end,
                        uint32_t thread) {
  const matmul_job *job = ctx;
  float *row = (float *)(job->scratch + thread * job->stride);
  for (uint32_t r = begin; r < end; r++) {
    expand_row(&job->w, r, row);
    for (uint32_t t = 0; t < job->rows; t++) {
      job->y[(uint64_t)t * job->out + r] =
          dot(row, job->x + (uint64_t)t * job->w.n, job->w.n);
    }
  }
}

void fdy_cpu_matmul_linear(fdy_pool *pool, const fdy_cpu_args *args,
                           uint32_t rows) {
  const fdy_op *op = args->op;
  matmul_job job = {
      .w = weight_of(args, 2, (uint32_t)op->inputs[1].shape.dims[1]),
      .x = args->inputs[1],
      .rows = rows,
      .out = (uint32_t)op->outputs[0].shape.dims[1],
      .y = args->outputs[0],
      .scratch = args->workspace,
  };
  /* The launch computed the workspace already; it cannot fail here. */
  row_stride(op, &job.stride, NULL);
  fdy_pool_run(pool, job.out, LINEAR_CHUNK, matmul_task, &job);
}
