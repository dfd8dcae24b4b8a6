/* Every op kind of the CPU backend against a straightforward float64
 * reference written here, on random non-zero data with outputs poisoned
 * (NaN) before each run, checked by relative error ||out - ref|| / ||ref||.
 * Every op runs on backends of 1, 2, 3 and 5 threads, whose outputs (and
 * in-place updated caches) must be bitwise identical; rows beyond the step
 * count stay poisoned. Also: argmax ties, the checksum chain, F16 KV
 * caches, a 1-row matmul equal to the same row of a 7-row one, step values
 * outside the table or cache, supports_op and the workspace contract. The
 * fused kinds must equal the sequences of single ops they replace bitwise
 * (ROPE_ATTENTION: its output and both caches). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define THREAD_COUNTS 4
static const uint32_t thread_counts[THREAD_COUNTS] = {1, 2, 3, 5};

typedef struct fixture {
  fdy_backend *backend[THREAD_COUNTS];
  fdy_backend_stream *stream[THREAD_COUNTS];
  fdy_backend_event *done[THREAD_COUNTS];
} fixture;

static fixture fx;

static int setup(void **state) {
  (void)state;
  for (int k = 0; k < THREAD_COUNTS; k++) {
    fdy_cpu_options opts = {.memory_bytes = 256u << 20,
                            .threads = thread_counts[k]};
    if (fdy_cpu_backend_create(&opts, &fx.backend[k], NULL) != FDY_OK) {
      return -1;
    }
    fdy_backend *b = fx.backend[k];
    if (b->ops->stream_create(b, &fx.stream[k], NULL) != FDY_OK ||
        b->ops->event_create(b, &fx.done[k], NULL) != FDY_OK) {
      return -1;
    }
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int k = 0; k < THREAD_COUNTS; k++) {
    fdy_backend_destroy(fx.backend[k]);
  }
  return 0;
}

/* ---- data ------------------------------------------------------------------
 */

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1], never 0. */
static float rand_float(void) {
  float f;
  do {
    f = (float)((int64_t)(next_u64() >> 40) - (1 << 23)) / (float)(1 << 23);
  } while (f == 0.0f);
  return f;
}

static float rand_range(float lo, float hi) {
  return lo + (hi - lo) * (rand_float() + 1.0f) / 2.0f;
}

static float *random_floats(uint64_t n) {
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = rand_float();
  }
  return p;
}

static uint32_t *random_words(uint64_t n) {
  uint32_t *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = (uint32_t)next_u64();
  }
  return p;
}

/* A quiet NaN with a payload, unlike the NaN the kernels write. */
static const uint32_t poison_bits = 0x7fc5a5a5u;

/* n 32-bit words of poison (NaN as a float). */
static void *poisoned(uint64_t words) {
  uint32_t *p = malloc(words * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < words; i++) {
    p[i] = poison_bits;
  }
  return p;
}

static bool is_poison(const void *p, uint64_t words) {
  const uint32_t *w = p;
  for (uint64_t i = 0; i < words; i++) {
    if (w[i] != poison_bits) {
      return false;
    }
  }
  return true;
}

/* Half values decoded independently of the backend. */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

static double bf16_value(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static double half_value(uint16_t h, fdy_dtype dtype) {
  return dtype == FDY_DTYPE_BF16 ? bf16_value(h) : f16_value(h);
}

/* Finite float to F16 bits, nearest even, through double arithmetic. */
static uint16_t f16_bits(float f) {
  double x = fabs((double)f);
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (x == 0.0) {
    return sign;
  }
  int e = 0;
  frexp(x, &e);
  int exponent = e - 1 < -14 ? -14 : e - 1;
  double quantum = ldexp(1.0, exponent - 10);
  double r = nearbyint(x / quantum) * quantum;
  if (r > 65504.0) {
    return sign | 0x7c00;
  }
  if (r < ldexp(1.0, -14)) {
    return sign | (uint16_t)(r / ldexp(1.0, -24));
  }
  frexp(r, &e);
  uint16_t mantissa = (uint16_t)((r / ldexp(1.0, e - 1) - 1.0) * 1024);
  return sign | (uint16_t)((e - 1 + 15) << 10) | mantissa;
}

static uint16_t half_bits(float f, fdy_dtype dtype) {
  if (dtype == FDY_DTYPE_BF16) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (uint16_t)(bits >> 16);
  }
  return f16_bits(f);
}

/* n halves in [lo, hi]. */
static uint16_t *random_halves(uint64_t n, fdy_dtype dtype, float lo,
                               float hi) {
  uint16_t *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = half_bits(rand_range(lo, hi), dtype);
  }
  return p;
}

/* n values of dtype (F32, F16 or BF16) in [lo, hi]. */
static void *random_values(uint64_t n, fdy_dtype dtype, float lo, float hi) {
  if (dtype != FDY_DTYPE_F32) {
    return random_halves(n, dtype, lo, hi);
  }
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = rand_range(lo, hi);
  }
  return p;
}

/* Element i of an F32, F16 or BF16 vector, decoded independently. */
static double value_of(const void *p, fdy_dtype dtype, uint64_t i) {
  return dtype == FDY_DTYPE_F32 ? ((const float *)p)[i]
                                : half_value(((const uint16_t *)p)[i], dtype);
}

/* ||got - ref|| / ||ref|| over n values. */
static double relative_error(const float *got, const double *ref, uint64_t n) {
  double diff = 0.0, norm = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)got[i] - ref[i];
    diff += d * d;
    norm += ref[i] * ref[i];
  }
  assert_true(norm > 0.0);
  return sqrt(diff / norm);
}

static void expect_close(const float *got, const double *ref, uint64_t n,
                         double bound) {
  double e = relative_error(got, ref, n);
  if (!(e <= bound)) {
    print_error("relative error %.3g above %.3g\n", e, bound);
    fail();
  }
}

static double *doubles(uint64_t n) {
  double *p = calloc(n, sizeof *p);
  assert_non_null(p);
  return p;
}

/* ---- running an op ----------------------------------------------------------
 */

static fdy_tensor_view view(fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_view v = {.dtype = dtype, .shape = shape};
  return v;
}

static uint64_t view_bytes(const fdy_tensor_view *v) {
  uint64_t bytes = 0;
  assert_int_equal(fdy_tensor_bytes(v->dtype, v->shape, &bytes, NULL), FDY_OK);
  return bytes;
}

static fdy_tensor_view *operand(fdy_op *op, uint32_t i) {
  return i < op->input_count ? &op->inputs[i]
                             : &op->outputs[i - op->input_count];
}

/* Runs op on backend k with every operand (inputs, then outputs) copied
 * from data[i] into one buffer at 256-byte aligned, non-zero offsets, the
 * workspace after them, and copied back afterwards (so caches updated in
 * place come back too). */
static void run_on(int k, const fdy_op *op_in, void **data) {
  fdy_backend *b = fx.backend[k];
  fdy_backend_stream *s = fx.stream[k];
  fdy_op op = *op_in;
  uint32_t n = op.input_count + op.output_count;
  uint64_t offsets[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  uint64_t at = 256;
  for (uint32_t i = 0; i < n; i++) {
    offsets[i] = at;
    at += (view_bytes(operand(&op, i)) + 255) / 256 * 256;
  }
  uint64_t need = b->ops->workspace_bytes(b, &op);
  uint64_t total = at + need;
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, total, &buf, NULL), FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    operand(&op, i)->buffer = buf;
    operand(&op, i)->offset = offsets[i];
    assert_int_equal(b->ops->copy_to_device(b, s, buf, offsets[i], data[i],
                                            view_bytes(operand(&op, i)), NULL),
                     FDY_OK);
  }
  if (need > 0) {
    op.workspace = (fdy_tensor_view){buf, at, FDY_DTYPE_U8, FDY_SHAPE(need)};
  }
  fdy_error err;
  fdy_status st = b->ops->launch(b, s, &op, &err);
  if (st != FDY_OK) {
    print_error("launch: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    assert_int_equal(b->ops->copy_to_host(b, s, data[i], buf, offsets[i],
                                          view_bytes(operand(&op, i)), NULL),
                     FDY_OK);
  }
  b->ops->buffer_release(b, buf); /* the queued work keeps it alive */
  assert_int_equal(b->ops->event_record(b, s, fx.done[k], NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, fx.done[k], NULL), FDY_OK);
}

/* Runs op on every backend from the same operands; data[] ends up with the
 * 1-thread results, and every other thread count must match them bitwise. */
static void run_everywhere(const fdy_op *op_in, void **data) {
  fdy_op op = *op_in;
  uint32_t n = op.input_count + op.output_count;
  void *initial[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  void *work[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  uint64_t bytes[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  assert_true(fdy_op_check(&op, NULL) == FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    bytes[i] = view_bytes(operand(&op, i));
    initial[i] = malloc(bytes[i]);
    work[i] = malloc(bytes[i]);
    assert_non_null(initial[i]);
    assert_non_null(work[i]);
    memcpy(initial[i], data[i], bytes[i]);
  }
  for (int k = 0; k < THREAD_COUNTS; k++) {
    assert_true(fx.backend[k]->ops->supports_op(fx.backend[k], &op));
    for (uint32_t i = 0; i < n; i++) {
      memcpy(work[i], initial[i], bytes[i]);
    }
    run_on(k, &op, work);
    for (uint32_t i = 0; i < n; i++) {
      if (k == 0) {
        memcpy(data[i], work[i], bytes[i]);
      } else if (memcmp(data[i], work[i], bytes[i]) != 0) {
        print_error("operand %u differs with %u threads\n", i,
                    thread_counts[k]);
        fail();
      }
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    free(initial[i]);
    free(work[i]);
  }
}

/* A step tensor of `rows` rows (at least one) holding a chunk of sequence
 * 0: count, and row t at position position + t with id 0. */
static int32_t *make_step(int32_t count, int32_t position, uint32_t rows) {
  rows = rows ? rows : 1;
  int32_t *step = calloc(FDY_STEP_ELEMENTS(rows), sizeof *step);
  assert_non_null(step);
  step[FDY_STEP_COUNT] = count;
  for (uint32_t t = 0; t < rows; t++) {
    step[FDY_STEP_POSITION(t)] = position + (int32_t)t;
  }
  return step;
}

/* ---- checksum -------------------------------------------------------------
 */

static void test_checksum(void **state) {
  (void)state;
  const uint64_t sizes[] = {8, 4096, 3 * (512u << 10) + 24};
  for (size_t c = 0; c < 3; c++) {
    uint64_t n = sizes[c];
    uint32_t *data = random_words((n + 3) / 4);
    uint64_t prev = next_u64(), out = ~0ull;
    fdy_op op = {.kind = FDY_OP_CHECKSUM, .input_count = 2, .output_count = 1};
    op.inputs[0] = view(FDY_DTYPE_U8, FDY_SHAPE(n));
    op.inputs[1] = view(FDY_DTYPE_U64, FDY_SHAPE(1));
    op.outputs[0] = view(FDY_DTYPE_U64, FDY_SHAPE(1));
    op.params.checksum.passes = (uint32_t)c + 1;
    void *chain[] = {data, &prev, &out};
    run_everywhere(&op, chain);
    uint64_t expected = fdy_checksum(data, n) + prev * FDY_CHAIN_PRIME;
    assert_true(out == expected);
    assert_true(out != fdy_checksum(data, n));

    op.input_count = 1;
    op.outputs[0] = op.inputs[1];
    out = ~0ull;
    void *first[] = {data, &out};
    run_everywhere(&op, first);
    assert_true(out == fdy_checksum(data, n));
    free(data);
  }
}

/* ---- embedding ------------------------------------------------------------
 */

static void embed_case(uint32_t hidden, uint32_t group, fdy_dtype dtype) {
  const uint32_t vocab = 50, rows = 6;
  uint32_t groups = hidden / group;
  uint32_t *table = random_words((uint64_t)vocab * hidden / 8);
  uint16_t *scales =
      random_halves((uint64_t)vocab * groups, dtype, 0.01f, 0.02f);
  uint16_t *biases =
      random_halves((uint64_t)vocab * groups, dtype, -0.2f, -0.1f);
  int32_t *step = make_step(4, 0, rows);
  int32_t ids[6] = {7, 0, vocab - 1, 7, 3, 3};
  for (uint32_t t = 0; t < rows; t++) {
    step[FDY_STEP_ID(t)] = ids[t];
  }
  float *out = poisoned((uint64_t)rows * hidden);
  fdy_op op = {.kind = FDY_OP_EMBED_Q4, .input_count = 4, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.inputs[1] = view(FDY_DTYPE_U32, FDY_SHAPE(vocab, hidden / 8));
  op.inputs[2] = view(dtype, FDY_SHAPE(vocab, groups));
  op.inputs[3] = view(dtype, FDY_SHAPE(vocab, groups));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  void *data[] = {step, table, scales, biases, out};
  run_everywhere(&op, data);

  double *ref = doubles((uint64_t)4 * hidden);
  for (uint32_t t = 0; t < 4; t++) {
    uint64_t id = (uint64_t)ids[t];
    for (uint32_t i = 0; i < hidden; i++) {
      uint32_t q = (table[id * hidden / 8 + i / 8] >> (4 * (i % 8))) & 0xf;
      uint64_t g = id * groups + i / group;
      ref[(uint64_t)t * hidden + i] =
          half_value(scales[g], dtype) * q + half_value(biases[g], dtype);
    }
  }
  expect_close(out, ref, (uint64_t)4 * hidden, 1e-6);
  assert_true(is_poison(out + 4 * hidden, 2 * (uint64_t)hidden));

  /* ids outside the table give NaN rows */
  step[FDY_STEP_COUNT] = 3;
  step[FDY_STEP_ID(0)] = -1;
  step[FDY_STEP_ID(1)] = (int32_t)vocab;
  step[FDY_STEP_ID(2)] = 0;
  float *bad = poisoned((uint64_t)rows * hidden);
  data[4] = bad;
  run_everywhere(&op, data);
  for (uint32_t i = 0; i < 2 * hidden; i++) {
    assert_true(isnan(bad[i]));
    assert_false(is_poison(&bad[i], 1));
  }
  assert_memory_equal(bad + 2 * hidden, out + hidden, sizeof(float) * hidden);
  assert_true(is_poison(bad + 3 * hidden, 3 * (uint64_t)hidden));
  free(bad);
  free(ref);
  free(table);
  free(scales);
  free(biases);
  free(step);
  free(out);
}

static void test_embed(void **state) {
  (void)state;
  embed_case(256, 32, FDY_DTYPE_F16);
  embed_case(256, 64, FDY_DTYPE_BF16);
  embed_case(256, 128, FDY_DTYPE_F16);
  embed_case(96, 32, FDY_DTYPE_BF16);
}

/* ---- rmsnorm --------------------------------------------------------------
 */

static void rmsnorm_case(fdy_dtype dtype, int32_t count) {
  const uint32_t rows = 7, n = 320;
  const double eps = 1e-5;
  int32_t *step = make_step(count, 3, 0);
  float *x = random_floats((uint64_t)rows * n);
  void *weight = random_values(n, dtype, 0.5f, 1.5f);
  float *out = poisoned((uint64_t)rows * n);
  fdy_op op = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(dtype, FDY_SHAPE(n));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.params.rmsnorm.eps = eps;
  void *data[] = {step, x, weight, out};
  run_everywhere(&op, data);
  uint32_t active = count < 0                ? 0
                    : (uint32_t)count > rows ? rows
                                             : (uint32_t)count;
  double *ref = doubles((uint64_t)rows * n);
  for (uint32_t t = 0; t < active; t++) {
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
      sum += (double)x[t * n + i] * x[t * n + i];
    }
    double inv = 1.0 / sqrt(sum / n + eps);
    for (uint32_t i = 0; i < n; i++) {
      ref[t * n + i] = x[t * n + i] * inv * value_of(weight, dtype, i);
    }
  }
  if (active > 0) {
    expect_close(out, ref, (uint64_t)active * n, 1e-6);
  }
  assert_true(
      is_poison(out + (uint64_t)active * n, (uint64_t)(rows - active) * n));
  free(ref);
  free(step);
  free(x);
  free(weight);
  free(out);
}

/* RMSNORM of each n-wide segment (a head of Qwen3's q or k): heads
 * segments of d per row, each normalized on its own. */
static void head_rmsnorm_case(uint32_t heads, uint32_t d, fdy_dtype dtype,
                              int32_t count) {
  const uint32_t rows = 5, width = heads * d;
  const double eps = 1e-6;
  int32_t *step = make_step(count, 3, 0);
  float *x = random_floats((uint64_t)rows * width);
  void *weight = random_values(d, dtype, 0.5f, 1.5f);
  float *out = poisoned((uint64_t)rows * width);
  fdy_op op = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.inputs[2] = view(dtype, FDY_SHAPE(d));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.params.rmsnorm.eps = eps;
  void *data[] = {step, x, weight, out};
  run_everywhere(&op, data);
  uint32_t active = count < 0                ? 0
                    : (uint32_t)count > rows ? rows
                                             : (uint32_t)count;
  double *ref = doubles((uint64_t)rows * width);
  for (uint64_t s = 0; s < (uint64_t)active * heads; s++) {
    const float *xs = x + s * d;
    double sum = 0.0;
    for (uint32_t i = 0; i < d; i++) {
      sum += (double)xs[i] * xs[i];
    }
    double inv = 1.0 / sqrt(sum / d + eps);
    for (uint32_t i = 0; i < d; i++) {
      ref[s * d + i] = xs[i] * inv * value_of(weight, dtype, i);
    }
  }
  if (active > 0) {
    expect_close(out, ref, (uint64_t)active * width, 1e-6);
  }
  assert_true(is_poison(out + (uint64_t)active * width,
                        (uint64_t)(rows - active) * width));
  free(ref);
  free(step);
  free(x);
  free(weight);
  free(out);
}

static void test_rmsnorm(void **state) {
  (void)state;
  rmsnorm_case(FDY_DTYPE_F16, 5);
  rmsnorm_case(FDY_DTYPE_BF16, 7);
  rmsnorm_case(FDY_DTYPE_BF16, 100); /* clamped to the rows */
  rmsnorm_case(FDY_DTYPE_F16, 0);
  rmsnorm_case(FDY_DTYPE_F16, -3);
  rmsnorm_case(FDY_DTYPE_F32, 6); /* an unquantized F32 checkpoint's */
  head_rmsnorm_case(16, 128, FDY_DTYPE_BF16, 4); /* Qwen3 0.6B's q */
  head_rmsnorm_case(8, 128, FDY_DTYPE_F16, 5);   /* its k */
  head_rmsnorm_case(7, 64, FDY_DTYPE_F32, 100);
  head_rmsnorm_case(3, 36, FDY_DTYPE_BF16, 0);
  head_rmsnorm_case(1, 32, FDY_DTYPE_BF16, 2); /* one head: the row */
}

/* ---- matmul ---------------------------------------------------------------
 */

typedef struct matmul_data {
  uint32_t rows, in, out, group;
  fdy_dtype dtype;
  int32_t *step;
  float *x;
  uint32_t *weight;
  uint16_t *scales, *biases;
  float *y;
} matmul_data;

static fdy_op matmul_op(const matmul_data *m) {
  fdy_op op = {.kind = FDY_OP_MATMUL_Q4, .input_count = 5, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(m->rows, m->in));
  op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(m->out, m->in / 8));
  op.inputs[3] = view(m->dtype, FDY_SHAPE(m->out, m->in / m->group));
  op.inputs[4] = view(m->dtype, FDY_SHAPE(m->out, m->in / m->group));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(m->rows, m->out));
  return op;
}

static void matmul_run(matmul_data *m) {
  fdy_op op = matmul_op(m);
  void *data[] = {m->step, m->x, m->weight, m->scales, m->biases, m->y};
  run_everywhere(&op, data);
}

static void matmul_case(uint32_t in, uint32_t group, fdy_dtype dtype,
                        int32_t count) {
  const uint32_t rows = 7, out = 300;
  uint32_t groups = in / group;
  matmul_data m = {
      .rows = rows, .in = in, .out = out, .group = group, .dtype = dtype};
  m.step = make_step(count, 0, 0);
  m.x = random_floats((uint64_t)rows * in);
  m.weight = random_words((uint64_t)out * in / 8);
  /* MLX-like: w = scale * q + bias centred on zero */
  m.scales = random_halves((uint64_t)out * groups, dtype, 0.01f, 0.02f);
  m.biases = malloc((uint64_t)out * groups * sizeof *m.biases);
  assert_non_null(m.biases);
  for (uint64_t g = 0; g < (uint64_t)out * groups; g++) {
    float s = (float)half_value(m.scales[g], dtype);
    m.biases[g] = half_bits(-7.5f * s * rand_range(0.8f, 1.2f), dtype);
  }
  m.y = poisoned((uint64_t)rows * out);
  matmul_run(&m);

  uint32_t active = (uint32_t)count < rows ? (uint32_t)count : rows;
  double *ref = doubles((uint64_t)active * out);
  for (uint32_t o = 0; o < out; o++) {
    for (uint32_t i = 0; i < in; i++) {
      uint32_t q =
          (m.weight[(uint64_t)o * in / 8 + i / 8] >> (4 * (i % 8))) & 0xf;
      uint64_t g = (uint64_t)o * groups + i / group;
      double w =
          half_value(m.scales[g], dtype) * q + half_value(m.biases[g], dtype);
      for (uint32_t t = 0; t < active; t++) {
        ref[(uint64_t)t * out + o] += (double)m.x[(uint64_t)t * in + i] * w;
      }
    }
  }
  expect_close(m.y, ref, (uint64_t)active * out, 2e-6);
  assert_true(
      is_poison(m.y + (uint64_t)active * out, (uint64_t)(rows - active) * out));

  /* Each row alone (the packed one-row path) gives the same bits. */
  matmul_data one = m;
  one.rows = 1;
  one.step = make_step(1, 0, 0);
  one.y = poisoned(out);
  for (uint32_t t = 0; t < active; t++) {
    one.x = m.x + (uint64_t)t * in;
    matmul_run(&one);
    assert_memory_equal(one.y, m.y + (uint64_t)t * out, sizeof(float) * out);
  }
  free(one.step);
  free(one.y);
  free(ref);
  free(m.step);
  free(m.x);
  free(m.weight);
  free(m.scales);
  free(m.biases);
  free(m.y);
}

static void test_matmul(void **state) {
  (void)state;
  matmul_case(256, 32, FDY_DTYPE_F16, 7);
  matmul_case(256, 64, FDY_DTYPE_BF16, 7);
  matmul_case(512, 128, FDY_DTYPE_F16, 5);
  matmul_case(256, 64, FDY_DTYPE_F16, 1);
  matmul_case(96, 32, FDY_DTYPE_BF16, 6); /* a short last block */
  matmul_case(160, 32, FDY_DTYPE_F16, 7);
}

/* ---- 8-bit and unquantized embeddings and matmuls ------------------------
 */

/* A weight of `rows` rows of n values: 8-bit affine (scales and biases of
 * dtype, groups of `group`) when q8, else dense values of dtype. */
typedef struct linear_data {
  bool q8;
  fdy_dtype dtype;
  uint32_t rows, n, group;
  void *weight; /* U32 words (q8) or values */
  uint16_t *scales, *biases;
} linear_data;

static linear_data linear_make(bool q8, fdy_dtype dtype, uint32_t rows,
                               uint32_t n, uint32_t group) {
  linear_data l = {q8, dtype, rows, n, group, NULL, NULL, NULL};
  if (!q8) {
    l.weight = random_values((uint64_t)rows * n, dtype, -0.1f, 0.1f);
    return l;
  }
  uint64_t groups = (uint64_t)rows * (n / group);
  l.weight = random_words((uint64_t)rows * n / 4);
  /* MLX-like: w = scale * q + bias centred on zero */
  l.scales = random_halves(groups, dtype, 0.0005f, 0.001f);
  l.biases = malloc(groups * sizeof *l.biases);
  assert_non_null(l.biases);
  for (uint64_t g = 0; g < groups; g++) {
    float scale = (float)half_value(l.scales[g], dtype);
    l.biases[g] = half_bits(-127.5f * scale * rand_range(0.8f, 1.2f), dtype);
  }
  return l;
}

/* Value i of row r, dequantized in double. */
static double linear_value(const linear_data *l, uint64_t r, uint32_t i) {
  uint64_t at = r * l->n + i;
  if (!l->q8) {
    return value_of(l->weight, l->dtype, at);
  }
  uint32_t q = (((const uint32_t *)l->weight)[at / 4] >> (8 * (at % 4))) & 0xff;
  uint64_t g = r * (l->n / l->group) + i / l->group;
  return half_value(l->scales[g], l->dtype) * q +
         half_value(l->biases[g], l->dtype);
}

/* The weight's operands from op->inputs[first] (and data[first]) on;
 * returns how many. */
static uint32_t linear_operands(const linear_data *l, fdy_op *op, void **data,
                                uint32_t first) {
  if (!l->q8) {
    op->inputs[first] = view(l->dtype, FDY_SHAPE(l->rows, l->n));
    data[first] = l->weight;
    return 1;
  }
  op->inputs[first] = view(FDY_DTYPE_U32, FDY_SHAPE(l->rows, l->n / 4));
  op->inputs[first + 1] = view(l->dtype, FDY_SHAPE(l->rows, l->n / l->group));
  op->inputs[first + 2] = op->inputs[first + 1];
  data[first] = l->weight;
  data[first + 1] = l->scales;
  data[first + 2] = l->biases;
  return 3;
}

static void linear_free(linear_data *l) {
  free(l->weight);
  free(l->scales);
  free(l->biases);
}

static void embed_linear_case(bool q8, fdy_dtype dtype, uint32_t hidden,
                              uint32_t group) {
  const uint32_t vocab = 50, rows = 6;
  linear_data l = linear_make(q8, dtype, vocab, hidden, group);
  int32_t *step = make_step(4, 0, rows);
  int32_t ids[6] = {7, 0, vocab - 1, 7, 3, 3};
  for (uint32_t t = 0; t < rows; t++) {
    step[FDY_STEP_ID(t)] = ids[t];
  }
  float *out = poisoned((uint64_t)rows * hidden);
  fdy_op op = {.kind = q8 ? FDY_OP_EMBED_Q8 : FDY_OP_EMBED_DENSE,
               .output_count = 1};
  void *data[5] = {step};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.input_count = 1 + linear_operands(&l, &op, data, 1);
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  data[op.input_count] = out;
  run_everywhere(&op, data);

  double *ref = doubles((uint64_t)4 * hidden);
  for (uint32_t t = 0; t < 4; t++) {
    for (uint32_t i = 0; i < hidden; i++) {
      ref[(uint64_t)t * hidden + i] = linear_value(&l, (uint64_t)ids[t], i);
    }
  }
  expect_close(out, ref, (uint64_t)4 * hidden, 1e-6);
  assert_true(is_poison(out + 4 * hidden, 2 * (uint64_t)hidden));

  /* ids outside the table give NaN rows */
  step[FDY_STEP_COUNT] = 3;
  step[FDY_STEP_ID(0)] = -1;
  step[FDY_STEP_ID(1)] = (int32_t)vocab;
  step[FDY_STEP_ID(2)] = 0;
  float *bad = poisoned((uint64_t)rows * hidden);
  data[op.input_count] = bad;
  run_everywhere(&op, data);
  for (uint32_t i = 0; i < 2 * hidden; i++) {
    assert_true(isnan(bad[i]));
    assert_false(is_poison(&bad[i], 1));
  }
  assert_memory_equal(bad + 2 * hidden, out + hidden, sizeof(float) * hidden);
  assert_true(is_poison(bad + 3 * hidden, 3 * (uint64_t)hidden));
  free(bad);
  free(ref);
  free(step);
  free(out);
  linear_free(&l);
}

static void test_embed_q8_and_dense(void **state) {
  (void)state;
  embed_linear_case(true, FDY_DTYPE_F16, 256, 32);
  embed_linear_case(true, FDY_DTYPE_BF16, 256, 128);
  embed_linear_case(true, FDY_DTYPE_F16, 96, 32);
  embed_linear_case(false, FDY_DTYPE_F32, 200, 0);
  embed_linear_case(false, FDY_DTYPE_F16, 96, 0);
  embed_linear_case(false, FDY_DTYPE_BF16, 77, 0);
}

/* MATMUL_Q8 or MATMUL_DENSE of 7 rows of x, `count` of them active. */
static void matmul_linear_case(bool q8, fdy_dtype dtype, uint32_t in,
                               uint32_t group, int32_t count) {
  const uint32_t rows = 7, out = 131;
  linear_data l = linear_make(q8, dtype, out, in, group);
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * in);
  float *y = poisoned((uint64_t)rows * out);
  fdy_op op = {.kind = q8 ? FDY_OP_MATMUL_Q8 : FDY_OP_MATMUL_DENSE,
               .output_count = 1};
  void *data[6] = {step, x};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, in));
  op.input_count = 2 + linear_operands(&l, &op, data, 2);
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, out));
  data[op.input_count] = y;
  run_everywhere(&op, data);

  uint32_t active = count < 0                ? 0
                    : (uint32_t)count > rows ? rows
                                             : (uint32_t)count;
  double *ref = doubles((uint64_t)rows * out);
  for (uint32_t o = 0; o < out; o++) {
    for (uint32_t i = 0; i < in; i++) {
      double w = linear_value(&l, o, i);
      for (uint32_t t = 0; t < active; t++) {
        ref[(uint64_t)t * out + o] += (double)x[(uint64_t)t * in + i] * w;
      }
    }
  }
  if (active > 0) {
    expect_close(y, ref, (uint64_t)active * out, 2e-6);
  }
  assert_true(
      is_poison(y + (uint64_t)active * out, (uint64_t)(rows - active) * out));

  /* Each row alone gives the same bits. */
  int32_t *one_step = make_step(1, 0, 0);
  float *one = poisoned(out);
  op.inputs[1].shape.dims[0] = 1;
  op.outputs[0].shape.dims[0] = 1;
  data[0] = one_step;
  data[op.input_count] = one;
  for (uint32_t t = 0; t < active; t++) {
    data[1] = x + (uint64_t)t * in;
    run_everywhere(&op, data);
    assert_memory_equal(one, y + (uint64_t)t * out, sizeof(float) * out);
  }
  free(one_step);
  free(one);
  free(ref);
  free(step);
  free(x);
  free(y);
  linear_free(&l);
}

static void test_matmul_q8_and_dense(void **state) {
  (void)state;
  matmul_linear_case(true, FDY_DTYPE_F16, 256, 32, 7);
  matmul_linear_case(true, FDY_DTYPE_BF16, 512, 128, 5);
  matmul_linear_case(true, FDY_DTYPE_F16, 384, 64, 1);
  matmul_linear_case(true, FDY_DTYPE_BF16, 96, 32, 0);
  matmul_linear_case(false, FDY_DTYPE_F32, 200, 0, 7);
  matmul_linear_case(false, FDY_DTYPE_F16, 333, 0, 4);
  matmul_linear_case(false, FDY_DTYPE_BF16, 64, 0, 100);
  matmul_linear_case(false, FDY_DTYPE_F32, 13, 0, -2);
}

/* ---- rope -----------------------------------------------------------------
 */

/* The inverse frequencies written out again from the llama3 rule. */
static double reference_inverse_frequency(const fdy_op_params *p, uint32_t j) {
  double inv = pow(p->rope.theta, -(2.0 * j) / p->rope.head_dim);
  if (!p->rope.llama3) {
    return inv;
  }
  double wavelen = 2.0 * M_PI / inv;
  double low = p->rope.original_max_position / p->rope.low_freq_factor;
  double high = p->rope.original_max_position / p->rope.high_freq_factor;
  if (wavelen < high) {
    return inv;
  }
  if (wavelen > low) {
    return inv / p->rope.factor;
  }
  double smooth =
      (p->rope.original_max_position / wavelen - p->rope.low_freq_factor) /
      (p->rope.high_freq_factor - p->rope.low_freq_factor);
  return (1.0 - smooth) * inv / p->rope.factor + smooth * inv;
}

static void rope_case(bool llama3, uint32_t heads, int32_t position) {
  const uint32_t rows = 5, d = 64;
  uint32_t width = heads * d;
  int32_t *step = make_step(4, position, rows);
  /* row 2 out of order: each row has its own position */
  step[FDY_STEP_POSITION(2)] = position + 40;
  float *x = random_floats((uint64_t)rows * width);
  float *out = poisoned((uint64_t)rows * width);
  fdy_op op = {.kind = FDY_OP_ROPE, .input_count = 2, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.params.rope.head_dim = d;
  op.params.rope.theta = 500000.0;
  op.params.rope.llama3 = llama3;
  op.params.rope.factor = 32.0;
  op.params.rope.low_freq_factor = 1.0;
  op.params.rope.high_freq_factor = 4.0;
  op.params.rope.original_max_position = 8192;
  void *data[] = {step, x, out};
  run_everywhere(&op, data);
  double *ref = doubles(4 * (uint64_t)width);
  for (uint32_t t = 0; t < 4; t++) {
    for (uint32_t j = 0; j < d / 2; j++) {
      double angle = step[FDY_STEP_POSITION(t)] *
                     reference_inverse_frequency(&op.params, j);
      for (uint32_t h = 0; h < heads; h++) {
        uint64_t at = (uint64_t)t * width + h * d + j;
        double x0 = x[at], x1 = x[at + d / 2];
        ref[at] = x0 * cos(angle) - x1 * sin(angle);
        ref[at + d / 2] = x1 * cos(angle) + x0 * sin(angle);
      }
    }
  }
  expect_close(out, ref, 4 * (uint64_t)width, 1e-6);
  assert_true(is_poison(out + 4 * (uint64_t)width, width));
  free(ref);
  free(step);
  free(x);
  free(out);
}

static void test_rope(void **state) {
  (void)state;
  rope_case(false, 4, 0);
  rope_case(false, 2, 37);
  rope_case(true, 8, 1000);
  rope_case(true, 2, 5);
}

/* ---- attention ------------------------------------------------------------
 */

typedef struct attention_case {
  uint32_t heads, kv_heads, d, context, rows;
  int32_t count, position;
  fdy_dtype cache;
} attention_case;

/* Sequences of the caches of the attention tests, and the one the chunk
 * of run_attention_case continues. */
#define CASE_SEQUENCES 3u
#define CASE_SEQUENCE  1u

/* Cache element i as a double. */
static double cache_value(const void *cache, fdy_dtype dtype, uint64_t i) {
  return dtype == FDY_DTYPE_F16 ? f16_value(((const uint16_t *)cache)[i])
                                : ((const float *)cache)[i];
}

/* Cache row r holds exactly src (F16: rounded to nearest even). */
static bool cache_row_is(const void *cache, fdy_dtype dtype, uint64_t r,
                         const float *src, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    bool same = dtype == FDY_DTYPE_F16
                    ? ((const uint16_t *)cache)[r * n + i] == f16_bits(src[i])
                    : memcmp((const float *)cache + r * n + i, &src[i],
                             sizeof(float)) == 0;
    if (!same) {
      return false;
    }
  }
  return true;
}

/* ATTENTION of a chunk of sequence CASE_SEQUENCE in caches of
 * CASE_SEQUENCES sequences: its region's earlier positions random, every
 * other byte poisoned and left so. */
static void run_attention_case(const attention_case *c) {
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  uint64_t region_words = (uint64_t)c->context * kv_dim * esize / 4;
  uint64_t cache_words = CASE_SEQUENCES * region_words;
  uint64_t region = CASE_SEQUENCE * region_words; /* words */
  int32_t *step = make_step(c->count, c->position, 1);
  step[FDY_STEP_SEQUENCE(0)] = CASE_SEQUENCE;
  float *q = random_floats((uint64_t)c->rows * q_dim);
  float *k = random_floats((uint64_t)c->rows * kv_dim);
  float *v = random_floats((uint64_t)c->rows * kv_dim);
  void *kc_all = poisoned(cache_words), *vc_all = poisoned(cache_words);
  void *kc = (uint32_t *)kc_all + region, *vc = (uint32_t *)vc_all + region;
  /* positions before the step's hold earlier tokens */
  for (uint64_t i = 0; i < (uint64_t)c->position * kv_dim; i++) {
    if (c->cache == FDY_DTYPE_F16) {
      ((uint16_t *)kc)[i] = f16_bits(rand_float());
      ((uint16_t *)vc)[i] = f16_bits(rand_float());
    } else {
      ((float *)kc)[i] = rand_float();
      ((float *)vc)[i] = rand_float();
    }
  }
  void *kc0 = malloc(region_words * 4);
  assert_non_null(kc0);
  memcpy(kc0, kc, region_words * 4);
  float *out = poisoned((uint64_t)c->rows * q_dim);
  fdy_op op = {.kind = FDY_OP_ATTENTION, .input_count = 6, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, q_dim));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, kv_dim));
  op.inputs[3] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, kv_dim));
  op.inputs[4] = view(c->cache, FDY_SHAPE(CASE_SEQUENCES, c->context, kv_dim));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, q_dim));
  op.params.attention.heads = c->heads;
  op.params.attention.kv_heads = c->kv_heads;
  op.params.attention.head_dim = c->d;
  void *data[] = {step, q, k, v, kc_all, vc_all, out};
  run_everywhere(&op, data);

  uint32_t active = (uint32_t)c->count;
  uint32_t valid = c->position + active <= c->context
                       ? active
                       : c->context - (uint32_t)c->position;
  /* the caches: earlier rows kept, new rows appended, the rest and the
   * other sequences' regions untouched */
  assert_true(is_poison((uint32_t *)kc_all, region));
  assert_true(is_poison((uint32_t *)vc_all, region));
  assert_memory_equal(kc, kc0, (uint64_t)c->position * kv_dim * esize);
  for (uint32_t t = 0; t < valid; t++) {
    uint64_t p = (uint64_t)c->position + t;
    assert_true(
        cache_row_is(kc, c->cache, p, k + (uint64_t)t * kv_dim, kv_dim));
    assert_true(
        cache_row_is(vc, c->cache, p, v + (uint64_t)t * kv_dim, kv_dim));
  }
  uint64_t end = ((uint64_t)c->position + valid) * kv_dim * esize / 4;
  assert_true(is_poison((uint32_t *)kc + end, cache_words - region - end));
  assert_true(is_poison((uint32_t *)vc + end, cache_words - region - end));

  double *ref = doubles((uint64_t)valid * q_dim);
  double *scores = doubles(c->context);
  for (uint32_t t = 0; t < valid; t++) {
    uint32_t last = (uint32_t)c->position + t;
    for (uint32_t h = 0; h < c->heads; h++) {
      uint64_t kv_at = (uint64_t)(h / (c->heads / c->kv_heads)) * c->d;
      const float *qh = q + (uint64_t)t * q_dim + (uint64_t)h * c->d;
      double max = -INFINITY, sum = 0.0;
      for (uint32_t p = 0; p <= last; p++) {
        double s = 0.0;
        for (uint32_t j = 0; j < c->d; j++) {
          s += qh[j] * cache_value(kc, c->cache, p * kv_dim + kv_at + j);
        }
        scores[p] = s / sqrt((double)c->d);
        max = scores[p] > max ? scores[p] : max;
      }
      for (uint32_t p = 0; p <= last; p++) {
        scores[p] = exp(scores[p] - max);
        sum += scores[p];
      }
      double *o = ref + (uint64_t)t * q_dim + (uint64_t)h * c->d;
      for (uint32_t p = 0; p <= last; p++) {
        for (uint32_t j = 0; j < c->d; j++) {
          o[j] += scores[p] / sum *
                  cache_value(vc, c->cache, p * kv_dim + kv_at + j);
        }
      }
    }
  }
  expect_close(out, ref, (uint64_t)valid * q_dim, 1e-6);
  /* rows beyond the cache are NaN, rows beyond the count untouched */
  for (uint64_t i = (uint64_t)valid * q_dim; i < (uint64_t)active * q_dim;
       i++) {
    assert_true(isnan(out[i]));
    assert_false(is_poison(&out[i], 1));
  }
  assert_true(is_poison(out + (uint64_t)active * q_dim,
                        (uint64_t)(c->rows - active) * q_dim));
  free(scores);
  free(ref);
  free(kc0);
  free(step);
  free(q);
  free(k);
  free(v);
  free(kc_all);
  free(vc_all);
  free(out);
}

static void test_attention(void **state) {
  (void)state;
  const attention_case cases[] = {
      /* GQA 8/2, prefill at position 9, one row beyond the count */
      {8, 2, 64, 64, 6, 5, 9, FDY_DTYPE_F32},
      {8, 2, 64, 64, 6, 5, 9, FDY_DTYPE_F16},
      /* MHA, prefill from 0, an odd head_dim */
      {4, 4, 36, 32, 7, 7, 0, FDY_DTYPE_F32},
      {4, 4, 36, 32, 7, 7, 0, FDY_DTYPE_F16},
      /* decode */
      {8, 2, 64, 64, 1, 1, 40, FDY_DTYPE_F32},
      {8, 2, 64, 64, 1, 1, 40, FDY_DTYPE_F16},
      /* the last two rows fall outside the cache */
      {4, 2, 32, 16, 5, 4, 14, FDY_DTYPE_F32},
      {4, 2, 32, 16, 5, 4, 14, FDY_DTYPE_F16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_attention_case(&cases[i]);
  }
}

/* ---- swiglu, add, last_row ------------------------------------------------
 */

static void test_swiglu_and_add(void **state) {
  (void)state;
  const uint32_t rows = 6, n = 5000;
  const uint32_t active = 5;
  fdy_op_kind kinds[] = {FDY_OP_SWIGLU, FDY_OP_ADD};
  for (int k = 0; k < 2; k++) {
    int32_t *step = make_step((int32_t)active, 0, 0);
    float *a = random_floats((uint64_t)rows * n);
    float *b = random_floats((uint64_t)rows * n);
    float *out = poisoned((uint64_t)rows * n);
    fdy_op op = {.kind = kinds[k], .input_count = 3, .output_count = 1};
    op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
    op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
    void *data[] = {step, a, b, out};
    run_everywhere(&op, data);
    double *ref = doubles((uint64_t)active * n);
    for (uint64_t i = 0; i < (uint64_t)active * n; i++) {
      double g = a[i];
      ref[i] = kinds[k] == FDY_OP_ADD ? g + b[i] : g / (1.0 + exp(-g)) * b[i];
    }
    expect_close(out, ref, (uint64_t)active * n, 1e-6);
    assert_true(is_poison(out + (uint64_t)active * n, n));
    free(ref);
    free(step);
    free(a);
    free(b);
    free(out);
  }
}

/* ADD_BIAS: x + bias per row, bias F32, F16 or BF16; widths that are not
 * multiples of 4 or 64 (14 heads of 64; 2 of 35). */
static void add_bias_case(uint32_t rows, uint32_t n, fdy_dtype dtype,
                          int32_t count) {
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * n);
  void *bias = random_values(n, dtype, -0.5f, 0.5f);
  float *out = poisoned((uint64_t)rows * n);
  fdy_op op = {.kind = FDY_OP_ADD_BIAS, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(dtype, FDY_SHAPE(n));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  void *data[] = {step, x, bias, out};
  run_everywhere(&op, data);
  uint32_t active = count < 0                ? 0
                    : (uint32_t)count > rows ? rows
                                             : (uint32_t)count;
  double *ref = doubles((uint64_t)rows * n);
  for (uint64_t i = 0; i < (uint64_t)active * n; i++) {
    ref[i] = (double)x[i] + value_of(bias, dtype, i % n);
  }
  if (active > 0) {
    expect_close(out, ref, (uint64_t)active * n, 1e-6);
  }
  assert_true(
      is_poison(out + (uint64_t)active * n, (uint64_t)(rows - active) * n));
  free(ref);
  free(step);
  free(x);
  free(bias);
  free(out);
}

static void test_add_bias(void **state) {
  (void)state;
  add_bias_case(5, 896, FDY_DTYPE_BF16, 4);
  add_bias_case(3, 128, FDY_DTYPE_F16, 3);
  add_bias_case(4, 70, FDY_DTYPE_F32, 100); /* clamped to the rows */
  add_bias_case(2, 64, FDY_DTYPE_F16, 0);
  add_bias_case(2, 64, FDY_DTYPE_BF16, -1);
}

static void test_last_row(void **state) {
  (void)state;
  const uint32_t rows = 6, n = 20000;
  const int32_t counts[] = {4, 1, 6, 9, 0, -2};
  float *x = random_floats((uint64_t)rows * n);
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    int32_t *step = make_step(counts[c], 7, 0);
    float *out = poisoned(n);
    fdy_op op = {.kind = FDY_OP_LAST_ROW, .input_count = 2, .output_count = 1};
    op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, n));
    void *data[] = {step, x, out};
    run_everywhere(&op, data);
    if (counts[c] <= 0) {
      assert_true(is_poison(out, n));
    } else {
      uint32_t last = (uint32_t)counts[c] < rows ? (uint32_t)counts[c] : rows;
      assert_memory_equal(out, x + (uint64_t)(last - 1) * n, sizeof(float) * n);
    }
    free(step);
    free(out);
  }
  free(x);
}

/* ---- argmax ---------------------------------------------------------------
 */

static void test_argmax(void **state) {
  (void)state;
  const uint32_t rows = 4, n = 40000;
  float *x = random_floats((uint64_t)rows * n);
  /* row 1: ties across chunks (the lowest index wins) */
  x[n + 20000] = 2.0f;
  x[n + 5000] = 2.0f;
  x[n + 39999] = 2.0f;
  /* row 2: NaN first, ties inside one chunk */
  x[2 * n + 0] = NAN;
  x[2 * n + 9] = 3.0f;
  x[2 * n + 7] = 3.0f;
  /* row 3: all equal */
  for (uint32_t i = 0; i < n; i++) {
    x[3 * n + i] = 0.5f;
  }
  int32_t *out = poisoned(rows);
  fdy_op op = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  void *data[] = {x, out};
  run_everywhere(&op, data);
  uint32_t best = 0;
  for (uint32_t i = 1; i < n; i++) {
    best = x[i] > x[best] ? i : best;
  }
  assert_int_equal(out[0], best);
  assert_int_equal(out[1], 5000);
  assert_int_equal(out[2], 7);
  assert_int_equal(out[3], 0);
  free(x);
  free(out);
}

/* ---- sample ---------------------------------------------------------------
 */

/* Runs SAMPLE on every thread count over rows of n logits (count active
 * rows; the ids of the others must stay poisoned); out receives the ids. */
static void sample_run(const float *x, const uint32_t *params, uint32_t rows,
                       uint32_t n, int32_t count, int32_t *out) {
  int32_t *step = make_step(count, 0, 1);
  float *logits = malloc(sizeof *logits * rows * n);
  uint32_t *words = malloc(sizeof *words * rows * FDY_SAMPLE_FIELDS);
  int32_t *ids = poisoned(rows);
  assert_non_null(logits);
  assert_non_null(words);
  memcpy(logits, x, sizeof *logits * rows * n);
  memcpy(words, params, sizeof *words * rows * FDY_SAMPLE_FIELDS);
  fdy_op op = {.kind = FDY_OP_SAMPLE, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(rows, FDY_SAMPLE_FIELDS));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  void *data[] = {step, logits, words, ids};
  run_everywhere(&op, data);
  uint32_t active = count < 0 ? 0 : (uint32_t)count;
  active = active < rows ? active : rows;
  assert_true(is_poison(ids + active, rows - active));
  memcpy(out, ids, sizeof *out * rows);
  free(step);
  free(logits);
  free(words);
  free(ids);
}

static fdy_sample_params sampling(float temperature, uint32_t top_k,
                                  float top_p, float min_p, uint64_t seed) {
  return (fdy_sample_params){temperature, top_k, top_p, min_p, seed};
}

/* Temperature 0, top_k 1 and a zeroed row are ARGMAX (ties, NaN); rows
 * past the count are untouched. */
static void test_sample_greedy(void **state) {
  (void)state;
  const uint32_t rows = 6, n = 40000;
  float *x = random_floats((uint64_t)rows * n);
  x[n + 20000] = 2.0f; /* ties: the lowest id */
  x[n + 5000] = 2.0f;
  x[2 * n] = NAN;
  x[2 * n + 9] = 3.0f;
  x[2 * n + 7] = 3.0f;
  for (uint32_t i = 0; i < n; i++) {
    x[3 * n + i] = 0.5f;
  }
  x[4 * n + 123] = INFINITY; /* a sampled row with +inf takes it */
  uint32_t *params = calloc(rows * FDY_SAMPLE_FIELDS, sizeof *params);
  assert_non_null(params);
  fdy_sample_params greedy = sampling(0.0f, 0, 1.0f, 0.0f, 99);
  fdy_sample_params top1 = sampling(1.5f, 1, 0.9f, 0.0f, 5);
  fdy_sample_params hot = sampling(1.0f, 0, 1.0f, 0.0f, 5);
  fdy_sample_set_row(params, 1, &greedy, 3);
  fdy_sample_set_row(params, 2, &top1, 4);
  fdy_sample_set_row(params, 3, &greedy, 0);
  fdy_sample_set_row(params, 4, &hot, 0);
  int32_t *ids = malloc(sizeof *ids * rows);
  int32_t *argmax = poisoned(rows);
  assert_non_null(ids);
  sample_run(x, params, rows, n, 5, ids);
  fdy_op op = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  void *data[] = {x, argmax};
  run_everywhere(&op, data);
  for (uint32_t r = 0; r < 4; r++) {
    assert_int_equal(ids[r], argmax[r]);
  }
  assert_int_equal(ids[1], 5000);
  assert_int_equal(ids[2], 7);
  assert_int_equal(ids[3], 0);
  assert_int_equal(ids[4], 123);
  free(x);
  free(params);
  free(ids);
  free(argmax);
}

/* The reference's kept ids of one row of n logits (1 = kept), from the
 * definition with a sort: top_k by (logit desc, id asc), then top_p over
 * those (the mass above each id), then min_p; the weights
 * fdy_sample_exp((x - max) / t). Returns the kept weight's sum; w gets the
 * weights. Borderline top-p decisions (within 1e-9 of the limit) are
 * marked 2: either answer is right. */
static double sample_reference(const float *x, uint32_t n,
                               const fdy_sample_params *p, double *w,
                               int *kept) {
  uint32_t *order = malloc(sizeof *order * n);
  assert_non_null(order);
  for (uint32_t i = 0; i < n; i++) {
    order[i] = i;
  }
  for (uint32_t i = 1; i < n; i++) { /* insertion sort: n is small */
    uint32_t v = order[i], j = i;
    while (j > 0 && (x[order[j - 1]] < x[v] ||
                     (x[order[j - 1]] == x[v] && order[j - 1] > v))) {
      order[j] = order[j - 1];
      j--;
    }
    order[j] = v;
  }
  double m = x[order[0]];
  uint32_t k = p->top_k == 0 || p->top_k > n ? n : p->top_k;
  double mass = 0.0;
  for (uint32_t i = 0; i < n; i++) {
    w[i] = fdy_sample_exp(((double)x[i] - m) / (double)p->temperature);
    kept[i] = 0;
  }
  for (uint32_t r = 0; r < k; r++) {
    mass += w[order[r]];
  }
  /* above: the mass of the top-k logits strictly above the current one */
  double above = 0.0, group = 0.0, sum = 0.0;
  double limit =
      p->top_p > 0.0f && p->top_p < 1.0f ? p->top_p * mass : 2.0 * mass;
  for (uint32_t r = 0; r < k; r++) {
    uint32_t i = order[r];
    if (r > 0 && x[order[r - 1]] != x[i]) {
      above += group;
      group = 0.0;
    }
    group += w[i];
    int in = above < limit ? 1 : 0;
    if (fabs(above - limit) <= 1e-9 * mass) {
      in = 2;
    }
    if (in && w[i] >= p->min_p) {
      kept[i] = in;
      sum += w[i];
    }
  }
  free(order);
  return sum;
}

/* Chi-square of counts against probabilities prob over n categories
 * (those of probability 0 must have count 0). */
static double chi_square(const uint32_t *counts, const double *prob, uint32_t n,
                         uint32_t draws) {
  double chi = 0.0;
  for (uint32_t i = 0; i < n; i++) {
    if (prob[i] == 0.0) {
      assert_int_equal(counts[i], 0);
      continue;
    }
    double e = prob[i] * draws;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

/* Over many draws (counters 0, 1, ...) from fixed logits the frequencies
 * match the target distribution: a chi-square test at a fixed seed with
 * the 0.1% critical value of its degrees of freedom; excluded ids are
 * never drawn. */
static void test_sample_distribution(void **state) {
  (void)state;
  enum { N = 8, ROWS = 1000, RUNS = 20 };
  static const float logits[N] = {1.0f, 0.5f,  0.0f,  -0.5f,
                                  2.0f, -1.0f, 0.25f, 1.5f};
  /* plain softmax at 0.8 (7 degrees of freedom: 24.32); top_k 5 with
   * top_p 0.9 (logits 2, 1.5, 1, 0.5: 3 dof, 16.27); min_p 0.2 (the same
   * four) */
  const fdy_sample_params cases[3] = {sampling(0.8f, 0, 1.0f, 0.0f, 11),
                                      sampling(1.0f, 5, 0.9f, 0.0f, 12),
                                      sampling(1.0f, 0, 1.0f, 0.2f, 13)};
  const double critical[3] = {24.32, 16.27, 16.27};
  const uint32_t kept_count[3] = {8, 4, 4};
  float *x = malloc(sizeof *x * ROWS * N);
  uint32_t *params = malloc(sizeof *params * ROWS * FDY_SAMPLE_FIELDS);
  int32_t *ids = malloc(sizeof *ids * ROWS);
  assert_non_null(x);
  assert_non_null(params);
  assert_non_null(ids);
  for (uint32_t r = 0; r < ROWS; r++) {
    memcpy(x + r * N, logits, sizeof logits);
  }
  for (int c = 0; c < 3; c++) {
    double w[N];
    int kept[N];
    double sum = sample_reference(logits, N, &cases[c], w, kept);
    double prob[N];
    uint32_t kept_ids = 0, counts[N] = {0};
    for (uint32_t i = 0; i < N; i++) {
      assert_true(kept[i] != 2);
      prob[i] = kept[i] ? w[i] / sum : 0.0;
      kept_ids += kept[i] != 0;
    }
    assert_int_equal(kept_ids, kept_count[c]);
    for (uint32_t run = 0; run < RUNS; run++) {
      for (uint32_t r = 0; r < ROWS; r++) {
        fdy_sample_set_row(params, r, &cases[c], run * ROWS + r);
      }
      sample_run(x, params, ROWS, N, ROWS, ids);
      for (uint32_t r = 0; r < ROWS; r++) {
        assert_true(ids[r] >= 0 && ids[r] < N);
        counts[ids[r]]++;
      }
    }
    double chi = chi_square(counts, prob, N, ROWS * RUNS);
    if (!(chi < critical[c])) {
      print_error("case %d: chi-square %g, critical %g\n", c, chi, critical[c]);
      fail();
    }
  }
  free(x);
  free(params);
  free(ids);
}

/* On random logits with ties, every drawn id passes top_k, top_p and
 * min_p by the reference; invalid values give -1. */
static void test_sample_filters(void **state) {
  (void)state;
  enum { N = 700, ROWS = 48 };
  float *x = malloc(sizeof *x * ROWS * N);
  uint32_t *params = malloc(sizeof *params * ROWS * FDY_SAMPLE_FIELDS);
  int32_t *ids = malloc(sizeof *ids * ROWS);
  fdy_sample_params *p = calloc(ROWS, sizeof *p);
  assert_non_null(x);
  assert_non_null(params);
  assert_non_null(ids);
  assert_non_null(p);
  for (uint32_t i = 0; i < ROWS * N; i++) {
    x[i] = (float)(int)(rand_range(-8.0f, 8.0f) * 4.0f) / 4.0f; /* ties */
  }
  const float temperatures[4] = {0.5f, 1.0f, 2.0f, 7.0f};
  const uint32_t top_ks[4] = {0, 2, 40, 699};
  const float top_ps[4] = {1.0f, 0.1f, 0.5f, 0.95f};
  const float min_ps[3] = {0.0f, 0.05f, 0.5f};
  for (uint32_t r = 0; r < ROWS - 4; r++) {
    p[r] = sampling(temperatures[r % 4], top_ks[(r / 4) % 4],
                    top_ps[(r / 2) % 4], min_ps[r % 3], 1000 + r);
    fdy_sample_set_row(params, r, &p[r], r);
  }
  const fdy_sample_params bad[4] = {
      sampling(-1.0f, 0, 1.0f, 0.0f, 1), sampling(NAN, 0, 1.0f, 0.0f, 1),
      sampling(1.0f, 0, 1.5f, 0.0f, 1), sampling(1.0f, 0, 1.0f, -0.1f, 1)};
  for (uint32_t b = 0; b < 4; b++) {
    fdy_sample_set_row(params, ROWS - 4 + b, &bad[b], 0);
  }
  for (uint32_t round = 0; round < 5; round++) {
    for (uint32_t r = 0; r < ROWS - 4; r++) {
      params[r * FDY_SAMPLE_FIELDS + FDY_SAMPLE_COUNTER] = round;
    }
    sample_run(x, params, ROWS, N, ROWS, ids);
    for (uint32_t r = 0; r < ROWS - 4; r++) {
      double w[N];
      int kept[N];
      sample_reference(x + r * N, N, &p[r], w, kept);
      assert_true(ids[r] >= 0 && ids[r] < N);
      if (!kept[ids[r]]) {
        print_error("row %u drew excluded id %d\n", r, ids[r]);
        fail();
      }
    }
    for (uint32_t b = 0; b < 4; b++) {
      assert_int_equal(ids[ROWS - 4 + b], -1);
    }
  }
  free(x);
  free(params);
  free(ids);
  free(p);
}

/* The same (logits, parameters, counter) gives the same id whatever the
 * other rows, their number and the row's place; another seed or counter
 * draws another stream. */
static void test_sample_batch_invariant(void **state) {
  (void)state;
  enum { N = 3000, ROWS = 7, DRAWS = 40 };
  float *x = random_floats((uint64_t)ROWS * N);
  float *one = random_floats(N);
  uint32_t *params = calloc(ROWS * FDY_SAMPLE_FIELDS, sizeof *params);
  uint32_t words[FDY_SAMPLE_FIELDS];
  int32_t ids[ROWS], alone = 0;
  assert_non_null(params);
  const fdy_sample_params target = sampling(1.3f, 100, 0.9f, 0.01f, 77);
  const fdy_sample_params other = sampling(0.7f, 0, 0.8f, 0.0f, 5);
  uint32_t differ_seed = 0, distinct = 0;
  int32_t first = -1;
  for (uint32_t c = 0; c < DRAWS; c++) {
    fdy_sample_set_row(words, 0, &target, c);
    sample_run(one, words, 1, N, 1, &alone);
    first = c == 0 ? alone : first;
    distinct += alone != first;
    uint32_t place = c % ROWS;
    for (uint32_t r = 0; r < ROWS; r++) {
      fdy_sample_set_row(params, r, r == place ? &target : &other,
                         r == place ? c : c + 17 * r + 1000);
    }
    memcpy(x + (uint64_t)place * N, one, sizeof *one * N);
    sample_run(x, params, ROWS, N, ROWS, ids);
    assert_int_equal(ids[place], alone);
    fdy_sample_params reseeded = target;
    reseeded.seed = 78;
    fdy_sample_set_row(words, 0, &reseeded, c);
    int32_t id = 0;
    sample_run(one, words, 1, N, 1, &id);
    differ_seed += id != alone;
  }
  assert_true(differ_seed > 0);
  assert_true(distinct > 0);
  free(x);
  free(one);
  free(params);
}

/* ---- supports_op and workspace --------------------------------------------
 */

static void test_supports_op(void **state) {
  (void)state;
  fdy_backend *b = fx.backend[0];
  matmul_data m = {
      .rows = 1, .in = 256, .out = 64, .group = 64, .dtype = FDY_DTYPE_F16};
  fdy_op op = matmul_op(&m);
  assert_true(b->ops->supports_op(b, &op));
  op.inputs[1].dtype = FDY_DTYPE_F16;
  assert_false(b->ops->supports_op(b, &op));
  op = matmul_op(&m);
  op.inputs[3].dtype = FDY_DTYPE_F32;
  op.inputs[4].dtype = FDY_DTYPE_F32;
  assert_false(b->ops->supports_op(b, &op));
  assert_int_equal(b->ops->workspace_bytes(b, &op), UINT64_MAX);

  fdy_op norm = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  norm.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  norm.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  norm.inputs[2] = view(FDY_DTYPE_F64, FDY_SHAPE(64));
  norm.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 64));
  assert_false(b->ops->supports_op(b, &norm));
  norm.inputs[2].dtype = FDY_DTYPE_BF16;
  assert_true(b->ops->supports_op(b, &norm));
  norm.inputs[2].dtype = FDY_DTYPE_F32;
  assert_true(b->ops->supports_op(b, &norm));

  fdy_op sum = {.kind = FDY_OP_CHECKSUM, .input_count = 1, .output_count = 1};
  sum.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(16));
  sum.outputs[0] = view(FDY_DTYPE_U64, FDY_SHAPE(1));
  assert_false(b->ops->supports_op(b, &sum));
  sum.inputs[0] = view(FDY_DTYPE_U8, FDY_SHAPE((uint64_t)1 << 33));
  assert_true(b->ops->supports_op(b, &sum)); /* bytes beyond 2^31 are fine */

  fdy_op top = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  top.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, (uint64_t)1 << 31));
  top.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(1));
  assert_false(b->ops->supports_op(b, &top));
  assert_false(b->ops->supports_op(b, NULL));
}

static void test_workspace(void **state) {
  (void)state;
  matmul_data m = {
      .rows = 4, .in = 256, .out = 64, .group = 64, .dtype = FDY_DTYPE_F16};
  fdy_op op = matmul_op(&m);
  uint64_t one = fx.backend[0]->ops->workspace_bytes(fx.backend[0], &op);
  uint64_t five = fx.backend[3]->ops->workspace_bytes(fx.backend[3], &op);
  assert_true(one > 0);
  assert_true(five > one); /* per-thread row scratch */

  fdy_op add = {.kind = FDY_OP_ADD, .input_count = 3, .output_count = 1};
  add.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  add.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(2, 8));
  add.inputs[2] = add.inputs[1];
  add.outputs[0] = add.inputs[1];
  assert_int_equal(fx.backend[0]->ops->workspace_bytes(fx.backend[0], &add), 0);

  /* A launch with a workspace one byte short, or none, is refused. */
  fdy_backend *b = fx.backend[1];
  uint64_t need = b->ops->workspace_bytes(b, &op);
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, 1 << 20, &buf, NULL), FDY_OK);
  uint64_t at = 0;
  for (uint32_t i = 0; i < op.input_count + op.output_count; i++) {
    operand(&op, i)->buffer = buf;
    operand(&op, i)->offset = at;
    at += (view_bytes(operand(&op, i)) + 255) / 256 * 256;
  }
  op.workspace = (fdy_tensor_view){buf, at, FDY_DTYPE_U8, FDY_SHAPE(need - 1)};
  fdy_error err;
  assert_int_equal(b->ops->launch(b, fx.stream[1], &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, need);
  assert_int_equal(err.actual, need - 1);
  assert_string_equal(err.backend_op, "launch");
  op.workspace = (fdy_tensor_view){0};
  assert_int_equal(b->ops->launch(b, fx.stream[1], &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, need);
  assert_int_equal(err.actual, 0);
  /* enough, but past the buffer's end, or misaligned */
  uint64_t late = ((1 << 20) - need + 64) / 64 * 64;
  op.workspace = (fdy_tensor_view){buf, late, FDY_DTYPE_U8, FDY_SHAPE(need)};
  assert_int_equal(b->ops->launch(b, fx.stream[1], &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1 << 20);
  op.workspace = (fdy_tensor_view){buf, at + 8, FDY_DTYPE_U8, FDY_SHAPE(need)};
  assert_int_equal(b->ops->launch(b, fx.stream[1], &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 64);
  assert_int_equal(err.actual, at + 8);
  b->ops->buffer_release(b, buf);
}

/* ---- fused kinds -----------------------------------------------------------
 */

/* Operands of the fused cases: x with its norm weight, three quantized
 * weights (the second and third alike in shape, as gate and up), and a
 * residual shaped like the first weight's output. */
typedef struct fused_data {
  uint32_t rows, in, group;
  int32_t count;
  fdy_dtype dtype;
  int32_t *step;
  float *x, *residual;
  uint16_t *norm;
  uint32_t out[3];
  uint32_t *weight[3];
  uint16_t *scales[3], *biases[3];
} fused_data;

/* An op of kind over step and x of f, with room for more operands. */
static fdy_op fused_base(fdy_op_kind kind, const fused_data *f,
                         const fdy_tensor_view *x) {
  fdy_op op = {.kind = kind, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = x ? *x : view(FDY_DTYPE_F32, FDY_SHAPE(f->rows, f->in));
  op.params.rmsnorm.eps = 1e-5;
  return op;
}

/* Weight j of f as inputs at, at + 1, at + 2 (data alike). */
static void put_weight(fdy_op *op, void **data, uint32_t at,
                       const fused_data *f, uint32_t j) {
  op->inputs[at] = view(FDY_DTYPE_U32, FDY_SHAPE(f->out[j], f->in / 8));
  op->inputs[at + 1] = view(f->dtype, FDY_SHAPE(f->out[j], f->in / f->group));
  op->inputs[at + 2] = op->inputs[at + 1];
  data[at] = f->weight[j];
  data[at + 1] = f->scales[j];
  data[at + 2] = f->biases[j];
}

static fdy_tensor_view rows_view(const fused_data *f, uint32_t width) {
  return view(FDY_DTYPE_F32, FDY_SHAPE(f->rows, width));
}

/* y = x W_j^T by MATMUL_Q4 (x of f's shape). */
static float *single_matmul(const fused_data *f, const float *x, uint32_t j) {
  float *y = poisoned((uint64_t)f->rows * f->out[j]);
  fdy_op op = fused_base(FDY_OP_MATMUL_Q4, f, NULL);
  void *data[6] = {f->step, (void *)x};
  op.input_count = 5;
  put_weight(&op, data, 2, f, j);
  op.outputs[0] = rows_view(f, f->out[j]);
  data[5] = y;
  run_everywhere(&op, data);
  return y;
}

/* SWIGLU (a, b) or ADD (a + b) of two [rows, width] tensors. */
static float *single_binary(const fused_data *f, fdy_op_kind kind,
                            const float *a, const float *b, uint32_t width) {
  float *out = poisoned((uint64_t)f->rows * width);
  fdy_tensor_view v = rows_view(f, width);
  fdy_op op = fused_base(kind, f, &v);
  op.input_count = 3;
  op.inputs[2] = v;
  op.outputs[0] = v;
  void *data[4] = {f->step, (void *)a, (void *)b, out};
  run_everywhere(&op, data);
  return out;
}

static void expect_same_bits(const float *a, const float *b, uint64_t n) {
  if (memcmp(a, b, n * sizeof *a) != 0) {
    print_error("the fused op differs from the single ops\n");
    fail();
  }
}

static void fused_case(uint32_t rows, int32_t count, uint32_t in,
                       uint32_t group, fdy_dtype dtype, const uint32_t out[3]) {
  fused_data f = {
      .rows = rows, .in = in, .group = group, .count = count, .dtype = dtype};
  f.step = make_step(count, 0, 0);
  f.x = random_floats((uint64_t)rows * in);
  f.residual = random_floats((uint64_t)rows * out[0]);
  f.norm = random_halves(in, dtype, 0.5f, 1.5f);
  for (uint32_t j = 0; j < 3; j++) {
    f.out[j] = out[j];
    f.weight[j] = random_words((uint64_t)out[j] * in / 8);
    f.scales[j] =
        random_halves((uint64_t)out[j] * in / group, dtype, 0.001f, 0.02f);
    f.biases[j] =
        random_halves((uint64_t)out[j] * in / group, dtype, -0.1f, -0.01f);
  }
  /* the single ops */
  float *normed = poisoned((uint64_t)rows * in);
  fdy_op norm = fused_base(FDY_OP_RMSNORM, &f, NULL);
  norm.input_count = 3;
  norm.inputs[2] = view(dtype, FDY_SHAPE(in));
  norm.outputs[0] = rows_view(&f, in);
  void *norm_data[4] = {f.step, f.x, f.norm, normed};
  run_everywhere(&norm, norm_data);
  float *y[3];
  for (uint32_t j = 0; j < 3; j++) {
    y[j] = single_matmul(&f, normed, j);
  }
  float *act = single_binary(&f, FDY_OP_SWIGLU, y[1], y[2], out[1]);
  float *projected = single_matmul(&f, f.x, 0);
  float *sum = single_binary(&f, FDY_OP_ADD, f.residual, projected, out[0]);

  /* NORM_MATMUL_Q4 of 1, 2 and 3 weights */
  for (uint32_t weights = 1; weights <= 3; weights++) {
    fdy_op op = fused_base(FDY_OP_NORM_MATMUL_Q4, &f, NULL);
    void *data[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {f.step, f.x, f.norm};
    op.input_count = 3 + 3 * weights;
    op.output_count = weights;
    op.inputs[2] = view(dtype, FDY_SHAPE(in));
    for (uint32_t j = 0; j < weights; j++) {
      put_weight(&op, data, 3 + 3 * j, &f, j);
      op.outputs[j] = rows_view(&f, out[j]);
      data[op.input_count + j] = poisoned((uint64_t)rows * out[j]);
    }
    run_everywhere(&op, data);
    for (uint32_t j = 0; j < weights; j++) {
      expect_same_bits(data[op.input_count + j], y[j], (uint64_t)rows * out[j]);
      free(data[op.input_count + j]);
    }
  }
  /* NORM_SWIGLU_Q4: weights 1 and 2 as gate and up */
  fdy_op op = fused_base(FDY_OP_NORM_SWIGLU_Q4, &f, NULL);
  void *data[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {f.step, f.x, f.norm};
  op.input_count = 9;
  op.inputs[2] = view(dtype, FDY_SHAPE(in));
  put_weight(&op, data, 3, &f, 1);
  put_weight(&op, data, 6, &f, 2);
  op.outputs[0] = rows_view(&f, out[1]);
  data[9] = poisoned((uint64_t)rows * out[1]);
  run_everywhere(&op, data);
  expect_same_bits(data[9], act, (uint64_t)rows * out[1]);
  free(data[9]);
  /* MATMUL_ADD_Q4: x W_0^T + residual */
  op = fused_base(FDY_OP_MATMUL_ADD_Q4, &f, NULL);
  data[0] = f.step;
  data[1] = f.x;
  op.input_count = 6;
  put_weight(&op, data, 2, &f, 0);
  op.inputs[5] = rows_view(&f, out[0]);
  op.outputs[0] = rows_view(&f, out[0]);
  data[5] = f.residual;
  data[6] = poisoned((uint64_t)rows * out[0]);
  run_everywhere(&op, data);
  expect_same_bits(data[6], sum, (uint64_t)rows * out[0]);
  free(data[6]);

  free(normed);
  for (uint32_t j = 0; j < 3; j++) {
    free(y[j]);
    free(f.weight[j]);
    free(f.scales[j]);
    free(f.biases[j]);
  }
  free(act);
  free(projected);
  free(sum);
  free(f.step);
  free(f.x);
  free(f.residual);
  free(f.norm);
}

/* The decode shape (one row), several rows with the count below them (the
 * rows past it stay poisoned alike), groups of 32 (a short last block), 64
 * and 128, F16 and BF16. */
/* ROPE_ATTENTION of independent rows equals, row by row, ROPE(q), ROPE(k)
 * and a one-row ATTENTION of that row alone, bitwise: the output and both
 * caches. Row t is at position (position + 7 t) mod (context + 2) (so
 * some rows fall outside the cache) of sequence rows - t in caches of
 * rows + 1 sequences (region 0 stays poisoned); each region's positions before
 * its row's are random, the rest poisoned. */
static void rope_attention_case(const attention_case *c, bool llama3) {
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  uint32_t sequences = c->rows + 1;
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  uint64_t region = (uint64_t)c->context * kv_dim; /* elements */
  uint64_t cache_words = sequences * region * esize / 4;
  uint64_t cache_bytes = cache_words * 4;
  int32_t *step = make_step(c->count, 0, c->rows);
  for (uint32_t t = 0; t < c->rows; t++) {
    step[FDY_STEP_POSITION(t)] =
        (int32_t)(((uint32_t)c->position + 7 * t) % (c->context + 2));
    step[FDY_STEP_SEQUENCE(t)] = (int32_t)(c->rows - t);
  }
  float *q = random_floats((uint64_t)c->rows * q_dim);
  float *k = random_floats((uint64_t)c->rows * kv_dim);
  float *v = random_floats((uint64_t)c->rows * kv_dim);
  void *kc = poisoned(cache_words), *vc = poisoned(cache_words);
  for (uint32_t t = 0; t < c->rows; t++) {
    uint32_t p = (uint32_t)step[FDY_STEP_POSITION(t)];
    uint64_t at = (uint64_t)step[FDY_STEP_SEQUENCE(t)] * region;
    for (uint64_t i = at; i < at + (uint64_t)(p < c->context ? p : 0) * kv_dim;
         i++) {
      if (c->cache == FDY_DTYPE_F16) {
        ((uint16_t *)kc)[i] = f16_bits(rand_float());
        ((uint16_t *)vc)[i] = f16_bits(rand_float());
      } else {
        ((float *)kc)[i] = rand_float();
        ((float *)vc)[i] = rand_float();
      }
    }
  }
  void *kc1 = malloc(cache_bytes), *vc1 = malloc(cache_bytes);
  assert_non_null(kc1);
  assert_non_null(vc1);
  memcpy(kc1, kc, cache_bytes);
  memcpy(vc1, vc, cache_bytes);
  fdy_rope_params rope = {.head_dim = c->d,
                          .theta = 500000.0,
                          .llama3 = llama3,
                          .factor = 32.0,
                          .low_freq_factor = 1.0,
                          .high_freq_factor = 4.0,
                          .original_max_position = 8192};
  fdy_attention_params attention = {c->heads, c->kv_heads, c->d};
  fdy_tensor_view caches =
      view(c->cache, FDY_SHAPE(sequences, c->context, kv_dim));

  /* each active row alone through the unfused sequence */
  float *out1 = poisoned((uint64_t)c->rows * q_dim);
  for (uint32_t t = 0; t < (uint32_t)c->count; t++) {
    int32_t *one = make_step(1, step[FDY_STEP_POSITION(t)], 1);
    one[FDY_STEP_SEQUENCE(0)] = step[FDY_STEP_SEQUENCE(t)];
    float *qr = poisoned(q_dim), *kr = poisoned(kv_dim);
    fdy_op op = {.kind = FDY_OP_ROPE, .input_count = 2, .output_count = 1};
    op.params.rope = rope;
    op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, q_dim));
    op.outputs[0] = op.inputs[1];
    void *rope_q[] = {one, q + (uint64_t)t * q_dim, qr};
    run_everywhere(&op, rope_q);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, kv_dim));
    op.outputs[0] = op.inputs[1];
    void *rope_k[] = {one, k + (uint64_t)t * kv_dim, kr};
    run_everywhere(&op, rope_k);
    op =
        (fdy_op){.kind = FDY_OP_ATTENTION, .input_count = 6, .output_count = 1};
    op.params.attention = attention;
    op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, q_dim));
    op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(1, kv_dim));
    op.inputs[3] = op.inputs[2];
    op.inputs[4] = caches;
    op.inputs[5] = caches;
    op.outputs[0] = op.inputs[1];
    void *single[] = {one,
                      qr,
                      kr,
                      v + (uint64_t)t * kv_dim,
                      kc1,
                      vc1,
                      out1 + (uint64_t)t * q_dim};
    run_everywhere(&op, single);
    free(one);
    free(qr);
    free(kr);
  }

  /* the fused op over every row at once */
  float *out = poisoned((uint64_t)c->rows * q_dim);
  fdy_op op = {
      .kind = FDY_OP_ROPE_ATTENTION, .input_count = 6, .output_count = 1};
  op.params.rope_attention.rope = rope;
  op.params.rope_attention.attention = attention;
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(c->rows)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, q_dim));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, kv_dim));
  op.inputs[3] = op.inputs[2];
  op.inputs[4] = caches;
  op.inputs[5] = caches;
  op.outputs[0] = op.inputs[1];
  void *fused[] = {step, q, k, v, kc, vc, out};
  run_everywhere(&op, fused);
  expect_same_bits(out, out1, (uint64_t)c->rows * q_dim);
  assert_memory_equal(kc, kc1, cache_bytes);
  assert_memory_equal(vc, vc1, cache_bytes);
  free(step);
  free(q);
  free(k);
  free(v);
  free(kc);
  free(vc);
  free(kc1);
  free(vc1);
  free(out1);
  free(out);
}

static void test_rope_attention_equal_single_ops(void **state) {
  (void)state;
  const attention_case cases[] = {
      /* decode, GQA 8/2 */
      {8, 2, 64, 64, 1, 1, 40, FDY_DTYPE_F32},
      {8, 2, 64, 64, 1, 1, 40, FDY_DTYPE_F16},
      /* decode at position 0, llama-3.2-3b heads */
      {24, 8, 128, 32, 1, 1, 0, FDY_DTYPE_F32},
      /* a batch of 6 sequences, one row beyond the count */
      {8, 2, 64, 64, 6, 5, 9, FDY_DTYPE_F16},
      /* MHA, odd pairs count (head_dim 36: 18 pairs) */
      {4, 4, 36, 32, 7, 7, 0, FDY_DTYPE_F32},
      /* rows outside the cache */
      {4, 2, 32, 16, 5, 4, 14, FDY_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rope_attention_case(&cases[i], i % 2 == 0);
  }
}

static void test_fused_equal_single_ops(void **state) {
  (void)state;
  fused_case(1, 1, 256, 64, FDY_DTYPE_BF16, (const uint32_t[]){96, 32, 32});
  fused_case(3, 2, 96, 32, FDY_DTYPE_F16, (const uint32_t[]){40, 24, 24});
  fused_case(5, 5, 384, 128, FDY_DTYPE_F16, (const uint32_t[]){64, 48, 48});
  fused_case(2, 0, 128, 32, FDY_DTYPE_BF16, (const uint32_t[]){16, 8, 8});
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checksum),
      cmocka_unit_test(test_embed),
      cmocka_unit_test(test_rmsnorm),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_embed_q8_and_dense),
      cmocka_unit_test(test_matmul_q8_and_dense),
      cmocka_unit_test(test_rope),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_swiglu_and_add),
      cmocka_unit_test(test_add_bias),
      cmocka_unit_test(test_last_row),
      cmocka_unit_test(test_argmax),
      cmocka_unit_test(test_sample_greedy),
      cmocka_unit_test(test_sample_distribution),
      cmocka_unit_test(test_sample_filters),
      cmocka_unit_test(test_sample_batch_invariant),
      cmocka_unit_test(test_supports_op),
      cmocka_unit_test(test_workspace),
      cmocka_unit_test(test_fused_equal_single_ops),
      cmocka_unit_test(test_rope_attention_equal_single_ops),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
