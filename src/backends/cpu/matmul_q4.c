/* MATMUL_Q4 on the CPU: y = x W^T with MLX 4-bit affine weights, ported
 * from the float32 forward pass so that results are bitwise the same.
 *
 * A row is y = sum_g s_g * (q_g . x_g) + b_g * sum(x_g), with the nibbles q
 * converted to floats (exact small integers) and the per-group sums of x
 * computed once per op. Rows are read in blocks of 64 elements, 8 U32 words:
 * shifting the 8 words by 4j gives element 8k + j in lane k. The input is
 * stored once per op in that block-transposed order (xt), so a block costs 8
 * shift/mask/convert/multiply-add steps. For one row of x the nibbles are
 * unpacked in registers; for several a weight row is unpacked once into
 * scratch and dotted with four rows of x at a time. Every path sums in the
 * same order, so a result depends neither on how many rows of x an op has
 * nor on the thread count (weight rows are split across the pool, each
 * output element computed by one thread). When the input width is not a
 * multiple of 64 (only possible with groups of 32) the last block holds 4
 * words, padded with zeros (zero nibbles, zero inputs, a zero scale).
 *
 * The kernels use GCC/Clang vector extensions (8 floats); on x86-64 they
 * get an AVX2 clone picked at load time (not under sanitizers). Multiply
 * and add are never contracted (CMakeLists.txt), so both clones round
 * alike. */
#include "kernels.h"

#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* static helpers: no ABI exposed */
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));

/* No clones under sanitizers: their ifunc resolvers run before the
 * sanitizer runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) &&                                \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FDY_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FDY_KERNEL
#endif
#define FDY_INLINE static inline __attribute__((always_inline))

/* Weight rows per pool chunk. */
#define MATMUL_CHUNK 16

FDY_INLINE v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* The words of a block (8, or 4 for a short last block; the rest zero). */
FDY_INLINE v8u load_words(const unsigned char *p, uint32_t words) {
  v8u w = {0};
  memcpy(&w, p, 4 * (size_t)words);
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

/* The unscaled products of a packed block with its 64 inputs. */
FDY_INLINE v8f packed_block(v8u w, const float *x) {
  v8f d0 = nibbles(w, 0) * load8(x);
  v8f d1 = nibbles(w, 1) * load8(x + 8);
  d0 += nibbles(w, 2) * load8(x + 16);
  d1 += nibbles(w, 3) * load8(x + 24);
  d0 += nibbles(w, 4) * load8(x + 32);
  d1 += nibbles(w, 5) * load8(x + 40);
  d0 += nibbles(w, 6) * load8(x + 48);
  d1 += nibbles(w, 7) * load8(x + 56);
  return d0 + d1;
}

/* The shape of one op's rows. */
typedef struct matmul_dims {
  uint32_t in;     /* input features */
  uint32_t group;  /* inputs per scale */
  uint32_t groups; /* in / group */
  uint32_t blocks; /* blocks of 64 inputs, the last one maybe short */
  uint32_t full;   /* blocks of 8 words */
} matmul_dims;

/* One row of x, nibbles unpacked from the packed row. */
FDY_INLINE float dot_packed(const unsigned char *words, const float *xt,
                            const float *xsum, const float *scale,
                            const float *bias, const matmul_dims *d) {
  v8f acc = {0};
  uint32_t b = 0;
  for (; b < d->full; b++) {
    v8u w = load_words(words + (uint64_t)b * 32, 8);
    acc += packed_block(w, xt + (uint64_t)b * 64) *
           block_scale(scale, b, d->group);
  }
  if (b < d->blocks) {
    v8u w = load_words(words + (uint64_t)b * 32, 4);
    acc += packed_block(w, xt + (uint64_t)b * 64) *
           block_scale(scale, b, d->group);
  }
  return hsum8(acc) + bias_term(bias, xsum, d->groups);
}

/* The same for one row of x from unpacked nibbles qf (block-transposed). */
FDY_INLINE float dot_unpacked(const float *qf, const float *xt,
                              const float *xsum, const float *scale,
                              const float *bias, const matmul_dims *d) {
  v8f acc = {0};
  for (uint32_t b = 0; b < d->blocks; b++) {
    const float *q = qf + (uint64_t)b * 64;
    const float *x = xt + (uint64_t)b * 64;
    v8f d0 = load8(q) * load8(x);
    v8f d1 = load8(q + 8) * load8(x + 8);
    for (uint32_t j = 16; j < 64; j += 16) {
      d0 += load8(q + j) * load8(x + j);
      d1 += load8(q + j + 8) * load8(x + j + 8);
    }
    acc += (d0 + d1) * block_scale(scale, b, d->group);
  }
  return hsum8(acc) + bias_term(bias, xsum, d->groups);
}

/* Four rows of x (xt rows `stride` apart, xsum rows `groups` apart) sharing
 * the loads of qf; each row's arithmetic is exactly dot_unpacked's. */
FDY_INLINE void dot_unpacked4(const float *qf, const float *xt,
                              const float *xsum, const float *scale,
                              const float *bias, const matmul_dims *d,
                              float out[4]) {
  v8f acc0 = {0}, acc1 = {0}, acc2 = {0}, acc3 = {0};
  uint64_t stride = (uint64_t)d->blocks * 64;
  const float *x0 = xt, *x1 = xt + stride, *x2 = xt + 2 * stride,
              *x3 = xt + 3 * stride;
  for (uint32_t b = 0; b < d->blocks; b++) {
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
    v8f sv = block_scale(scale, b, d->group);
    acc0 += (d00 + d01) * sv;
    acc1 += (d10 + d11) * sv;
    acc2 += (d20 + d21) * sv;
    acc3 += (d30 + d31) * sv;
  }
  uint32_t groups = d->groups;
  out[0] = hsum8(acc0) + bias_term(bias, xsum, groups);
  out[1] = hsum8(acc1) + bias_term(bias, xsum + groups, groups);
  out[2] = hsum8(acc2) + bias_term(bias, xsum + 2 * (uint64_t)groups, groups);
  out[3] = hsum8(acc3) + bias_term(bias, xsum + 3 * (uint64_t)groups, groups);
}

typedef struct matmul_job {
  matmul_dims d;
  uint32_t rows; /* rows of x to compute */
  uint32_t out;  /* output features: weight rows */
  const float *x;
  const unsigned char *weight;
  const void *scales, *biases;
  fdy_dtype scale_dtype;
  float *y;
  float *xt;
  float *xsum;
  unsigned char *row_scratch;
  uint64_t row_stride; /* bytes */
} matmul_job;

/* Scales padded to whole blocks: a short last block reads one more scale. */
static uint32_t padded_groups(const matmul_dims *d) {
  return d->blocks * 64 / d->group;
}

FDY_KERNEL
static void matmul_rows(const matmul_job *job, uint32_t begin, uint32_t end,
                        float *scratch) {
  const matmul_dims *d = &job->d;
  uint32_t groups = d->groups;
  float *scale = scratch;
  float *bias = scale + padded_groups(d);
  float *qf = bias + groups;
  for (uint32_t g = groups; g < padded_groups(d); g++) {
    scale[g] = 0.0f;
  }
  for (uint32_t r = begin; r < end; r++) {
    const unsigned char *words = job->weight + (uint64_t)r * (d->in / 2);
    fdy_cpu_halves_to_float(job->scales, job->scale_dtype, (uint64_t)r * groups,
                            groups, scale);
    fdy_cpu_halves_to_float(job->biases, job->scale_dtype, (uint64_t)r * groups,
                            groups, bias);
    if (job->rows == 1) {
      job->y[r] = dot_packed(words, job->xt, job->xsum, scale, bias, d);
      continue;
    }
    for (uint32_t b = 0; b < d->blocks; b++) {
      const unsigned char *p = words + (uint64_t)b * 32;
      v8u w = b < d->full ? load_words(p, 8) : load_words(p, 4);
      for (int j = 0; j < 8; j++) {
        v8f q = nibbles(w, j);
        memcpy(qf + (uint64_t)b * 64 + 8 * j, &q, sizeof q);
      }
    }
    uint64_t stride = (uint64_t)d->blocks * 64;
    uint32_t t = 0;
    for (; t + 4 <= job->rows; t += 4) {
      float out[4];
      dot_unpacked4(qf, job->xt + (uint64_t)t * stride,
                    job->xsum + (uint64_t)t * groups, scale, bias, d, out);
      for (uint32_t j = 0; j < 4; j++) {
        job->y[(uint64_t)(t + j) * job->out + r] = out[j];
      }
    }
    for (; t < job->rows; t++) {
      job->y[(uint64_t)t * job->out + r] =
          dot_unpacked(qf, job->xt + (uint64_t)t * stride,
                       job->xsum + (uint64_t)t * groups, scale, bias, d);
    }
  }
}

static void matmul_task(void *ctx, uint32_t begin, uint32_t end,
                        uint32_t thread) {
  const matmul_job *job = ctx;
  matmul_rows(job, begin, end,
              (float *)(job->row_scratch + thread * job->row_stride));
}

/* Stores rows of x block-transposed (zero padded) with their group sums. */
static void prepare_task(void *ctx, uint32_t begin, uint32_t end,
                         uint32_t thread) {
  (void)thread;
  const matmul_job *job = ctx;
  const matmul_dims *d = &job->d;
  uint64_t stride = (uint64_t)d->blocks * 64;
  for (uint32_t t = begin; t < end; t++) {
    const float *x = job->x + (uint64_t)t * d->in;
    float *xt = job->xt + (uint64_t)t * stride;
    for (uint32_t b = 0; b < stride; b += 64) {
      for (uint32_t j = 0; j < 8; j++) {
        for (uint32_t k = 0; k < 8; k++) {
          uint32_t i = b + 8 * k + j;
          xt[b + 8 * j + k] = i < d->in ? x[i] : 0.0f;
        }
      }
    }
    for (uint32_t g = 0; g < d->groups; g++) {
      float sum = 0.0f;
      for (uint32_t i = 0; i < d->group; i++) {
        sum += x[(uint64_t)g * d->group + i];
      }
      job->xsum[(uint64_t)t * d->groups + g] = sum;
    }
  }
}

static matmul_dims dims_of(const fdy_op *op) {
  matmul_dims d;
  d.in = (uint32_t)op->inputs[1].shape.dims[1];
  d.groups = (uint32_t)op->inputs[3].shape.dims[1];
  d.group = d.in / d.groups;
  d.blocks = (d.in + 63) / 64;
  d.full = d.in / 64;
  return d;
}

/* Reserves count * size bytes at *at (rounded up to the workspace
 * alignment); *start is where they begin. */
static fdy_status take(uint64_t *at, uint64_t count, uint64_t size,
                       uint64_t *start, fdy_error *err) {
  uint64_t bytes = 0;
  fdy_status st = fdy_mul_u64(count, size, &bytes, err);
  if (st == FDY_OK) {
    st = fdy_align_up(bytes, FDY_CPU_WORKSPACE_ALIGN, &bytes, err);
  }
  if (st == FDY_OK) {
    *start = *at;
    st = fdy_add_u64(*at, bytes, at, err);
  }
  return st;
}

fdy_status fdy_cpu_matmul_layout_of(const fdy_op *op, uint32_t threads,
                                    fdy_cpu_matmul_layout *out,
                                    fdy_error *err) {
  matmul_dims d = dims_of(op);
  uint64_t rows = op->inputs[1].shape.dims[0];
  uint64_t stride = (uint64_t)d.blocks * 64;
  /* a thread's padded scales, biases and unpacked row (all below 2^33) */
  uint64_t row_floats = padded_groups(&d) + (uint64_t)d.groups + stride;
  fdy_cpu_matmul_layout l = {0};
  uint64_t at = 0, zero = 0, xt_floats = 0, xsum_floats = 0;
  fdy_status st = take(&l.row_stride, row_floats, sizeof(float), &zero, err);
  if (st == FDY_OK) {
    st = fdy_mul_u64(rows, stride, &xt_floats, err);
  }
  if (st == FDY_OK) {
    st = fdy_mul_u64(rows, d.groups, &xsum_floats, err);
  }
  if (st == FDY_OK) {
    st = take(&at, xt_floats, sizeof(float), &l.xt, err);
  }
  if (st == FDY_OK) {
    st = take(&at, xsum_floats, sizeof(float), &l.xsum, err);
  }
  if (st == FDY_OK) {
    st = take(&at, threads, l.row_stride, &l.rows, err);
  }
  if (st == FDY_OK) {
    l.total = at;
    *out = l;
  }
  return st;
}

void fdy_cpu_matmul_q4(fdy_pool *pool, const fdy_cpu_args *args,
                       uint32_t rows) {
  const fdy_op *op = args->op;
  fdy_cpu_matmul_layout l;
  /* The launch computed the same layout; it cannot fail here. */
  fdy_cpu_matmul_layout_of(op, fdy_pool_threads(pool), &l, NULL);
  matmul_job job = {
      .d = dims_of(op),
      .rows = rows,
      .out = (uint32_t)op->outputs[0].shape.dims[1],
      .x = args->inputs[1],
      .weight = args->inputs[2],
      .scales = args->inputs[3],
      .biases = args->inputs[4],
      .scale_dtype = op->inputs[3].dtype,
      .y = args->outputs[0],
      .xt = (float *)(args->workspace + l.xt),
      .xsum = (float *)(args->workspace + l.xsum),
      .row_scratch = args->workspace + l.rows,
      .row_stride = l.row_stride,
  };
  fdy_pool_run(pool, rows, 1, prepare_task, &job);
  fdy_pool_run(pool, job.out, MATMUL_CHUNK, matmul_task, &job);
}
