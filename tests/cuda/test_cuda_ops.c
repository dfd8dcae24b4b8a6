/* The CUDA backend's op kernels against the CPU backend's (the reference),
 * label gpu. Every op runs on both backends through the backend contract
 * (one buffer per op, operands copied in at 256-byte aligned offsets,
 * launch, everything copied back) from the same random non-zero operands,
 * with outputs poisoned (a NaN with a payload) before each run. Results are
 * compared by relative error ||gpu - cpu|| / ||cpu||: ELEMENT_BOUND for
 * element-wise kinds, REDUCTION_BOUND for RMSNorm, one-row MATMUL_Q4 and
 * ATTENTION of one row or a head_dim off the tensor cores, MMA_BOUND for
 * MATMUL_Q4 and ATTENTION of several rows (F16 tensor cores),
 * bitwise for EMBED_Q4, LAST_ROW, ARGMAX and the KV caches that
 * ATTENTION appends to. Rows at or beyond the step's count must stay
 * poisoned on the GPU; rows whose id or position lies outside the table or
 * cache must be NaN on both. Every comparison prints its measured error.
 *
 * Shapes: those of the four fixtures in tests/data (prefill of 64 rows and
 * decode of 1, positions > 0, F32 and F16 KV caches, group 32/64/128, F16
 * and BF16 scales), odd shapes (a count below and above the rows, widths
 * that are not multiples of 4 or of 64 outputs), and those of
 * llama-3.2-3b (hidden 3072, heads 24/8, head_dim 128, ffn 8192, the LM
 * head GEMV over vocab 128256; group 64 F16 and group 32 BF16), which
 * FOUNDRY_CUDA_OPS_SMALL=1 skips (for compute-sanitizer runs). The decode
 * GEMV alone at every llama-3.2-3b projection (LM head included) with
 * groups 32, 64 and 128 and F16 and BF16 scales, at widths around its
 * work item (FOUNDRY_CUDA_OPS_SMALL=1 keeps only the small ones), and with
 * x far outside F16's range, far below it, and all zero (zeros bitwise);
 * one 32-input chunk of x at 1e30 beside chunks near 1e-3, whose result
 * needs the per-chunk staging scale (test_gemv_chunk_scales).
 * ATTENTION's two variants also run over decode positions and prefill
 * counts (test_attention_positions: both sides of the decode chunks, the
 * cache's last position, a cache of 70,000 positions), the decode kernel's
 * block layouts (test_attention_decode_blocks: several blocks per kv head,
 * more slices than the stream's counters, caches of several lengths), and
 * its decode workspace is required (test_attention_workspace_refused);
 * chunks and decode rows in a region other than 0 of caches of several
 * sequences, and of a sequence outside them (test_attention_regions).
 * ROPE_ATTENTION (decode) against the CPU's rope, rope and attention
 * (test_rope_attention_decode: caches bitwise); of batches of 1 to 64
 * rows, each at its own position of its own sequence (ragged, shuffled
 * regions, rows outside the caches; test_rope_attention_batch: caches
 * bitwise), and a row's result bitwise the same in batches of 3 and 32
 * (test_rope_attention_batch_invariance, GPU alone); of steps whose rows
 * share a sequence, a prompt chunk beside decode rows of others, the
 * chunk's positions poisoned in the caches until appended
 * (test_rope_attention_mixed: caches bitwise, and each chunk row bitwise
 * the same when run alone in order on the GPU). ROPE of rows at positions
 * of their own (rope_case, ragged).
 * ARGMAX ties on both sides of the blocks a long row is cut into
 * (test_argmax_blocks).
 *
 * Prefill matmuls on their own: 1 to 512 rows (counts of 1, 7, 64, 65,
 * 511, 512) on the llama-3.2-3b projections (3072 x 3072, 1024 x 3072,
 * 8192 x 3072, 3072 x 8192) with group 32/64/128, F16 and BF16 scales;
 * FOUNDRY_CUDA_MMA_TIMING=1 also prints their TFLOP/s (timed with backend
 * events, never asserted). A prefill matmul launched without its workspace
 * fails with FDY_ERR_INVALID_ARGUMENT.
 *
 * EMBED_Q8, EMBED_DENSE (bitwise), MATMUL_Q8 and MATMUL_DENSE
 * (REDUCTION_BOUND) at odd shapes (test_linear_odd_shapes: outputs not a
 * multiple of 8, dense widths not a multiple of 32, counts of 0, below and
 * above the rows, every group size, F16/BF16 scales, F32/F16/BF16 values)
 * and llama-3.2-3b's (test_linear_3b_shapes: each projection at 1 and 61
 * of 64 rows, the LM head, the embedding); RMSNORM with F32 weights.
 *
 * The fused kinds (NORM_MATMUL_Q4 of 1 to 3 weights, NORM_SWIGLU_Q4,
 * MATMUL_ADD_Q4) at the llama-3.2-3b decode shapes and small ones, every
 * group size, both scale dtypes, a count of 0 (outputs untouched); at
 * prefill (several rows, the tensor cores, MMA_BOUND) on 512 rows of the
 * llama-3.2-3b layer and ragged shapes (odd outputs, a short last k-block,
 * the inputs split, counts below the rows: those rows untouched); and on
 * the GPU alone, bitwise equal to their unfused ops where both take the
 * same block shape and split (test_prefill_fused_bitwise). NORM_SWIGLU_Q4
 * of one row at in 64, 3072 and 8192, ragged outputs, every group size and
 * both scale dtypes, also bitwise equal on the GPU to NORM_MATMUL_Q4 of
 * gate and up then SWIGLU (test_decode_swiglu).
 *
 * End to end: fdy_llama_verify through a session on the CUDA backend for
 * every fixture (F32 and F16 KV caches within HALF_BOUND, greedy ids
 * identical), and the logits of CPU and CUDA sessions on a 64-token prompt
 * of the tiny fixture and 8 teacher-forced decode steps (within
 * HALF_BOUND; the device argmax must agree with the CPU's wherever the
 * CPU's top-2 margin exceeds twice the largest logit difference).
 *
 * Exits 77 (skipped) without a CUDA device unless FOUNDRY_REQUIRE_CUDA=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/cpu.h"
#include "foundry/cuda.h"
#include "foundry/llama_session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Float32 kernels on both sides; element-wise results differ at most by
 * expf's last bit, sums by their order. */
#define ELEMENT_BOUND   1e-5
#define REDUCTION_BOUND 1e-4
/* MATMUL_Q4 of several rows runs on the tensor cores with x and the
 * dequantized weights rounded to F16 (relative 2^-11 each): on
 * uncorrelated data the sum's relative error is about 0.8 x 2^-11 = 4e-4;
 * the bound leaves a factor of 5. */
#define MMA_BOUND 2e-3
/* End to end on CUDA, prefill goes through those F16 products: the GPU
 * tolerance of the fixtures (half-precision activations, 2e-2), for
 * fdy_llama_verify with either KV cache and for CUDA against the CPU. */
#define HALF_BOUND FDY_LLAMA_BACKEND_TOLERANCE

typedef struct side {
  const char *name;
  fdy_backend *b;
  fdy_backend_stream *s;
  fdy_backend_event *done;
} side;

static side cpu = {.name = "cpu"}, gpu = {.name = "cuda"};

static int setup(void **state) {
  (void)state;
  fdy_error err;
  fdy_cpu_options opts = {.memory_bytes = 2 * FDY_GIB};
  if (fdy_cpu_backend_create(&opts, &cpu.b, &err) != FDY_OK ||
      fdy_cuda_backend_create(NULL, &gpu.b, &err) != FDY_OK) {
    fprintf(stderr, "setup: %s\n", err.message);
    return -1;
  }
  side *sides[] = {&cpu, &gpu};
  for (int i = 0; i < 2; i++) {
    fdy_backend *b = sides[i]->b;
    if (b->ops->stream_create(b, &sides[i]->s, &err) != FDY_OK ||
        b->ops->event_create(b, &sides[i]->done, &err) != FDY_OK) {
      fprintf(stderr, "setup: %s\n", err.message);
      return -1;
    }
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fdy_backend_destroy(cpu.b);
  fdy_backend_destroy(gpu.b);
  return 0;
}

static bool small_shapes(void) {
  const char *v = getenv("FOUNDRY_CUDA_OPS_SMALL");
  return v != NULL && strcmp(v, "1") == 0;
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

static void *checked_malloc(uint64_t bytes) {
  void *p = malloc(bytes);
  assert_non_null(p);
  return p;
}

static float *random_floats(uint64_t n) {
  float *p = checked_malloc(n * sizeof *p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = rand_float();
  }
  return p;
}

static uint32_t *random_words(uint64_t n) {
  uint32_t *p = checked_malloc(n * sizeof *p);
  for (uint64_t i = 0; i < n; i++) {
    p[i] = (uint32_t)next_u64();
  }
  return p;
}

/* Halves of sign `negative` with a random mantissa in [2^e, 2^(e + 1)):
 * exact bit patterns, no float conversion needed. */
static uint16_t *random_halves(uint64_t n, fdy_dtype dtype, bool negative,
                               int e) {
  uint16_t *p = checked_malloc(n * sizeof *p);
  uint16_t sign = negative ? 0x8000u : 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t r = next_u64();
    p[i] = dtype == FDY_DTYPE_BF16
               ? (uint16_t)(sign | (uint16_t)(e + 127) << 7 | (r & 0x7fu))
               : (uint16_t)(sign | (uint16_t)(e + 15) << 10 | (r & 0x3ffu));
  }
  return p;
}

/* A quiet NaN with a payload, unlike the NaN either backend writes. */
static const uint32_t poison_bits = 0x7fc5a5a5u;

static void *poisoned(uint64_t words) {
  uint32_t *p = checked_malloc(words * sizeof *p);
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

/* Every value NaN and none the poison (written as NaN). */
static bool written_nan(const float *p, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    if (!isnan(p[i]) || is_poison(&p[i], 1)) {
      return false;
    }
  }
  return true;
}

/* A step of max(rows, 1) rows (so that every step view of up to
 * FDY_STEP_ELEMENTS(max(rows, 1)) elements reads set values): the count,
 * and row t at position `position` + t of sequence 0, id 0 (a chunk). */
static int32_t *make_step(int32_t count, int32_t position, uint32_t rows) {
  uint32_t n = rows > 0 ? rows : 1;
  int32_t *step = calloc(FDY_STEP_ELEMENTS(n), sizeof *step);
  assert_non_null(step);
  step[FDY_STEP_COUNT] = count;
  for (uint32_t t = 0; t < n; t++) {
    step[FDY_STEP_POSITION(t)] = position + (int32_t)t;
  }
  return step;
}

static uint32_t active_rows(int32_t count, uint32_t rows) {
  return count <= 0 ? 0 : (uint32_t)count < rows ? (uint32_t)count : rows;
}

/* ---- running an op on both backends ----------------------------------------
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

/* Runs op on side x with every operand copied from data[i] into one buffer
 * at 256-byte aligned offsets (the workspace after them), and copies every
 * operand back into data[i] (caches updated in place come back too). */
static void run_on(side *x, const fdy_op *op_in, void **data) {
  fdy_backend *b = x->b;
  fdy_op op = *op_in;
  uint32_t n = op.input_count + op.output_count;
  uint64_t offsets[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  uint64_t at = 256;
  for (uint32_t i = 0; i < n; i++) {
    offsets[i] = at;
    at += (view_bytes(operand(&op, i)) + 255) / 256 * 256;
  }
  if (!b->ops->supports_op(b, &op)) {
    print_error("%s does not support the %s op\n", x->name,
                fdy_op_kind_name(op.kind));
    fail();
  }
  uint64_t need = b->ops->workspace_bytes ? b->ops->workspace_bytes(b, &op) : 0;
  fdy_error err;
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, at + need, &buf, &err), FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    operand(&op, i)->buffer = buf;
    operand(&op, i)->offset = offsets[i];
    assert_int_equal(b->ops->copy_to_device(b, x->s, buf, offsets[i], data[i],
                                            view_bytes(operand(&op, i)), &err),
                     FDY_OK);
  }
  if (need > 0) {
    op.workspace = (fdy_tensor_view){buf, at, FDY_DTYPE_U8, FDY_SHAPE(need)};
  }
  fdy_status st = b->ops->launch(b, x->s, &op, &err);
  if (st != FDY_OK) {
    print_error("%s launch: %s\n", x->name, err.message);
  }
  assert_int_equal(st, FDY_OK);
  for (uint32_t i = 0; i < n; i++) {
    assert_int_equal(b->ops->copy_to_host(b, x->s, data[i], buf, offsets[i],
                                          view_bytes(operand(&op, i)), &err),
                     FDY_OK);
  }
  b->ops->buffer_release(b, buf); /* the queued work keeps it alive */
  assert_int_equal(b->ops->event_record(b, x->s, x->done, &err), FDY_OK);
  st = b->ops->host_wait(b, x->done, &err);
  if (st != FDY_OK) {
    print_error("%s: %s\n", x->name, err.message);
  }
  assert_int_equal(st, FDY_OK);
}

/* The operands of one op after a run on each backend. */
typedef struct results {
  uint32_t n;
  void *cpu[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
  void *gpu[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS];
} results;

static results run_both(const fdy_op *op_in, void **data) {
  fdy_op op = *op_in;
  results r = {.n = op.input_count + op.output_count};
  assert_int_equal(fdy_op_check(&op, NULL), FDY_OK);
  for (uint32_t i = 0; i < r.n; i++) {
    uint64_t bytes = view_bytes(operand(&op, i));
    r.cpu[i] = checked_malloc(bytes);
    r.gpu[i] = checked_malloc(bytes);
    memcpy(r.cpu[i], data[i], bytes);
    memcpy(r.gpu[i], data[i], bytes);
  }
  run_on(&cpu, &op, r.cpu);
  run_on(&gpu, &op, r.gpu);
  return r;
}

static void free_results(results *r) {
  for (uint32_t i = 0; i < r->n; i++) {
    free(r->cpu[i]);
    free(r->gpu[i]);
  }
}

/* ---- comparisons ------------------------------------------------------------
 */

/* ||gpu - cpu|| / ||cpu|| over n values, printed; fails above bound (or on
 * any NaN where the CPU has a number). */
static void expect_close(const char *what, const float *ref, const float *got,
                         uint64_t n, double bound) {
  double diff = 0.0, norm = 0.0, largest = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    double d = (double)got[i] - (double)ref[i];
    diff += d * d;
    norm += (double)ref[i] * ref[i];
    if (!(fabs(d) <= largest)) {
      largest = fabs(d);
    }
  }
  double e = sqrt(diff / norm);
  print_message("  %-58s rel %.3e max|d| %.3e (bound %.0e)\n", what, e, largest,
                bound);
  assert_true(norm > 0.0);
  if (!(e <= bound)) {
    print_error("%s: relative error %.3g above %.3g\n", what, e, bound);
    fail();
  }
}

/* Bitwise equal; prints the number of differing 32-bit words. */
static void expect_same(const char *what, const void *ref, const void *got,
                        uint64_t bytes) {
  const unsigned char *a = ref, *b = got;
  uint64_t differ = 0;
  for (uint64_t i = 0; i < bytes; i += 4) {
    differ += memcmp(a + i, b + i, bytes - i < 4 ? bytes - i : 4) != 0;
  }
  print_message("  %-58s %llu of %llu words differ (bound 0)\n", what,
                (unsigned long long)differ, (unsigned long long)(bytes / 4));
  assert_int_equal(differ, 0);
}

/* GPU rows [active, rows) of width n still poisoned (printed when there
 * are any). */
static void expect_untouched(const char *what, const float *got,
                             uint32_t active, uint32_t rows, uint64_t n) {
  if (active == rows) {
    return;
  }
  bool kept =
      is_poison(got + (uint64_t)active * n, (uint64_t)(rows - active) * n);
  print_message("  %-58s rows %u..%u %s\n", what, active, rows - 1,
                kept ? "untouched" : "WRITTEN");
  assert_true(kept);
}

/* ---- the shapes
 * ---------------------------------------------------------------
 */

typedef struct model_shape {
  const char *name;
  uint32_t hidden, heads, kv_heads, head_dim, ffn, vocab, group;
  fdy_dtype dtype;  /* scales, biases and norm weights */
  bool llama3;      /* rope scaling */
  uint32_t context; /* KV cache positions of the attention cases */
  int32_t prefill_position, decode_position;
} model_shape;

static const model_shape fixture_shapes[] = {
    {"llama3-micro", 256, 8, 2, 32, 512, 1024, 64, FDY_DTYPE_F16, true, 512, 37,
     300},
    {"llama3-tiny", 768, 6, 2, 128, 2048, 2048, 64, FDY_DTYPE_F16, true, 1024,
     100, 777},
    {"llama3-micro-untied-g32", 256, 8, 2, 32, 128, 512, 32, FDY_DTYPE_BF16,
     false, 512, 5, 400},
    {"llama3-micro-mha-g128", 256, 8, 8, 32, 128, 512, 128, FDY_DTYPE_F16, true,
     512, 64, 511},
};

/* The families' shapes: Qwen2.5 0.5B (14 heads of 64 over 2 kv heads: a
 * group of 7), Qwen3 0.6B (head_dim 128, 16 over 8, q wider than hidden),
 * Mistral 7B v0.3 and the mistral-micro fixture (head_dim 64 over 4 heads of
 * a 128 hidden); plain rope. */
static const model_shape family_shapes[] = {
    {"qwen2.5-0.5b", 896, 14, 2, 64, 4864, 151936, 64, FDY_DTYPE_BF16, false,
     4096, 200, 3000},
    {"qwen3-0.6b", 1024, 16, 8, 128, 3072, 151936, 64, FDY_DTYPE_BF16, false,
     4096, 100, 2500},
    {"mistral-7b-v0.3", 4096, 32, 8, 128, 14336, 32768, 64, FDY_DTYPE_BF16,
     false, 4096, 300, 4000},
    {"mistral-micro", 128, 4, 2, 64, 128, 256, 64, FDY_DTYPE_BF16, false, 512,
     5, 400},
};

static const model_shape llama32_3b = {
    "llama-3.2-3b", 3072, 24,   8,   128, 8192, 128256, 64,
    FDY_DTYPE_F16,  true, 4096, 200, 3000};

/* A 4-bit matrix of `out` rows of `in` features (MLX layout). */
typedef struct q4_matrix {
  uint32_t out, in, group;
  fdy_dtype dtype;
  uint32_t *words;
  uint16_t *scales, *biases;
} q4_matrix;

/* Scales in [2^-7, 2^-6), biases in (-2^-3, -2^-4]: w = s q + b spans
 * about [-0.12, 0.17], centred near 0 like MLX's. */
static q4_matrix q4_random(uint32_t out, uint32_t in, uint32_t group,
                           fdy_dtype dtype) {
  uint64_t groups = (uint64_t)out * (in / group);
  q4_matrix m = {out,
                 in,
                 group,
                 dtype,
                 random_words((uint64_t)out * in / 8),
                 random_halves(groups, dtype, false, -7),
                 random_halves(groups, dtype, true, -4)};
  return m;
}

static void q4_free(q4_matrix *m) {
  free(m->words);
  free(m->scales);
  free(m->biases);
}

/* ---- embed ------------------------------------------------------------------
 */

static void embed_case(const char *label, const q4_matrix *table, uint32_t rows,
                       int32_t count) {
  uint32_t vocab = table->out, hidden = table->in;
  int32_t *step = make_step(count, 0, rows);
  for (uint32_t t = 0; t < rows; t++) {
    step[FDY_STEP_ID(t)] = (int32_t)(next_u64() % vocab);
  }
  step[FDY_STEP_ID(0)] = (int32_t)vocab - 1;
  uint32_t active = active_rows(count, rows);
  if (active >= 3) { /* rows 1 and 2: ids outside the table */
    step[FDY_STEP_ID(1)] = -1;
    step[FDY_STEP_ID(2)] = (int32_t)vocab;
  }
  float *out = poisoned((uint64_t)rows * hidden);
  fdy_op op = {.kind = FDY_OP_EMBED_Q4, .input_count = 4, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.inputs[1] = view(FDY_DTYPE_U32, FDY_SHAPE(vocab, hidden / 8));
  op.inputs[2] = view(table->dtype, FDY_SHAPE(vocab, hidden / table->group));
  op.inputs[3] = op.inputs[2];
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  void *data[] = {step, table->words, table->scales, table->biases, out};
  results r = run_both(&op, data);
  const float *c = r.cpu[4], *g = r.gpu[4];
  char what[160];
  snprintf(what, sizeof what, "embed %s [%u x %u] g%u %s, %u rows, count %d",
           label, vocab, hidden, table->group, fdy_dtype_name(table->dtype),
           rows, count);
  if (active >= 3) {
    /* NaN bits differ between the backends: compare the other rows */
    print_message("  %-58s rows 1..2 (ids -1, %u) NaN on both\n", what, vocab);
    assert_true(written_nan(g + hidden, 2 * (uint64_t)hidden));
    assert_true(written_nan(c + hidden, 2 * (uint64_t)hidden));
    memcpy((float *)r.gpu[4] + hidden, c + hidden, sizeof(float) * 2 * hidden);
  }
  if (active > 0) {
    expect_same(what, c, g, sizeof(float) * active * hidden);
  }
  expect_untouched(what, g, active, rows, hidden);
  free_results(&r);
  free(step);
  free(out);
}

/* ---- rmsnorm ----------------------------------------------------------------
 */

static void rmsnorm_case(const char *label, uint32_t rows, int32_t count,
                         uint32_t n, fdy_dtype dtype) {
  int32_t *step = make_step(count, 3, 0);
  float *x = random_floats((uint64_t)rows * n);
  void *weight = dtype == FDY_DTYPE_F32
                     ? (void *)random_floats(n)
                     : (void *)random_halves(n, dtype, false, -1);
  float *out = poisoned((uint64_t)rows * n);
  fdy_op op = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(dtype, FDY_SHAPE(n));
  op.outputs[0] = op.inputs[1];
  op.params.rmsnorm.eps = 1e-5;
  void *data[] = {step, x, weight, out};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "rmsnorm %s [%u x %u] %s, count %d", label, rows,
           n, fdy_dtype_name(dtype), count);
  if (active > 0) {
    expect_close(what, r.cpu[3], r.gpu[3], (uint64_t)active * n,
                 REDUCTION_BOUND);
  }
  expect_untouched(what, r.gpu[3], active, rows, n);
  free_results(&r);
  free(step);
  free(x);
  free(weight);
  free(out);
}

/* RMSNORM per head: `heads` segments of d per row (Qwen3's q and k). */
static void head_rmsnorm_case(const char *label, uint32_t rows, int32_t count,
                              uint32_t heads, uint32_t d, fdy_dtype dtype) {
  const uint32_t width = heads * d;
  int32_t *step = make_step(count, 3, 0);
  float *x = random_floats((uint64_t)rows * width);
  void *weight = dtype == FDY_DTYPE_F32
                     ? (void *)random_floats(d)
                     : (void *)random_halves(d, dtype, false, -1);
  float *out = poisoned((uint64_t)rows * width);
  fdy_op op = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.inputs[2] = view(dtype, FDY_SHAPE(d));
  op.outputs[0] = op.inputs[1];
  op.params.rmsnorm.eps = 1e-6;
  void *data[] = {step, x, weight, out};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "rmsnorm per head %s [%u x %u x %u] %s, count %d",
           label, rows, heads, d, fdy_dtype_name(dtype), count);
  if (active > 0) {
    expect_close(what, r.cpu[3], r.gpu[3], (uint64_t)active * width,
                 REDUCTION_BOUND);
  }
  expect_untouched(what, r.gpu[3], active, rows, width);
  free_results(&r);
  free(step);
  free(x);
  free(weight);
  free(out);
}

/* ---- matmul -----------------------------------------------------------------
 */

/* A MATMUL_Q4 op of x [rows, w->in] and w, unbound. */
static fdy_op matmul_unbound(const q4_matrix *w, uint32_t rows) {
  fdy_op op = {.kind = FDY_OP_MATMUL_Q4, .input_count = 5, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->in));
  op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(w->out, w->in / 8));
  op.inputs[3] = view(w->dtype, FDY_SHAPE(w->out, w->in / w->group));
  op.inputs[4] = op.inputs[3];
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->out));
  return op;
}

/* given_x: rows x in values of x (copied), or NULL for random ones. An x
 * of zeros must give zeros bitwise (s q . 0 + b 0). */
static void matmul_x_case(const char *label, const q4_matrix *w, uint32_t rows,
                          int32_t count, const float *given_x) {
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * w->in);
  bool zero = given_x != NULL;
  for (uint64_t i = 0; given_x != NULL && i < (uint64_t)rows * w->in; i++) {
    x[i] = given_x[i];
    zero = zero && given_x[i] == 0.0f;
  }
  float *y = poisoned((uint64_t)rows * w->out);
  fdy_op op = matmul_unbound(w, rows);
  void *data[] = {step, x, w->words, w->scales, w->biases, y};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "matmul_q4 %s [%u x %u] x [%u x %u]^T g%u %s, %d",
           label, rows, w->in, w->out, w->in, w->group,
           fdy_dtype_name(w->dtype), count);
  if (active > 0 && zero) {
    expect_same(what, r.cpu[5], r.gpu[5],
                sizeof(float) * (uint64_t)active * w->out);
  } else if (active > 0) {
    expect_close(what, r.cpu[5], r.gpu[5], (uint64_t)active * w->out,
                 rows > 1 ? MMA_BOUND : REDUCTION_BOUND);
  }
  expect_untouched(what, r.gpu[5], active, rows, w->out);
  free_results(&r);
  free(step);
  free(x);
  free(y);
}

static void matmul_case(const char *label, const q4_matrix *w, uint32_t rows,
                        int32_t count) {
  matmul_x_case(label, w, rows, count, NULL);
}

/* ---- prefill matmuls
 * ----------------------------------------------------------
 */

static bool mma_timing(void) {
  const char *v = getenv("FOUNDRY_CUDA_MMA_TIMING");
  return v != NULL && strcmp(v, "1") == 0;
}

/* The matmul op of x [rows, in] and w, its views at 256-byte aligned
 * offsets of one buffer (unbound when buf is NULL); *end: the bytes used. */
static fdy_op matmul_op(const q4_matrix *w, uint32_t rows,
                        fdy_backend_buffer *buf, uint64_t *end) {
  fdy_op op = matmul_unbound(w, rows);
  uint64_t at = 256;
  for (uint32_t i = 0; i < 6; i++) {
    operand(&op, i)->buffer = buf;
    operand(&op, i)->offset = at;
    at += (view_bytes(operand(&op, i)) + 255) / 256 * 256;
  }
  *end = at;
  return op;
}

/* Times `reps` launches of the matmul of rows x w on the GPU (after 3
 * untimed ones) with backend events and prints the TFLOP/s; random
 * non-zero operands, nothing asserted on the time. */
static void time_matmul(const char *label, const q4_matrix *w, uint32_t rows) {
  const int reps = 20;
  fdy_backend *b = gpu.b;
  fdy_error err;
  uint64_t end = 0;
  fdy_op op = matmul_op(w, rows, NULL, &end);
  uint64_t need = b->ops->workspace_bytes(b, &op);
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, end + need, &buf, &err), FDY_OK);
  op = matmul_op(w, rows, buf, &end);
  op.workspace = (fdy_tensor_view){buf, end, FDY_DTYPE_U8, FDY_SHAPE(need)};
  int32_t *step = make_step((int32_t)rows, 0, 0);
  float *x = random_floats((uint64_t)rows * w->in);
  const void *data[] = {step, x, w->words, w->scales, w->biases};
  for (uint32_t i = 0; i < 5; i++) {
    assert_int_equal(b->ops->copy_to_device(b, gpu.s, buf, op.inputs[i].offset,
                                            data[i], view_bytes(&op.inputs[i]),
                                            &err),
                     FDY_OK);
  }
  fdy_backend_event *start = NULL;
  assert_int_equal(b->ops->event_create(b, &start, &err), FDY_OK);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(b->ops->launch(b, gpu.s, &op, &err), FDY_OK);
  }
  assert_int_equal(b->ops->event_record(b, gpu.s, start, &err), FDY_OK);
  for (int i = 0; i < reps; i++) {
    assert_int_equal(b->ops->launch(b, gpu.s, &op, &err), FDY_OK);
  }
  assert_int_equal(b->ops->event_record(b, gpu.s, gpu.done, &err), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, gpu.done, &err), FDY_OK);
  int64_t t0 = 0, t1 = 0;
  assert_int_equal(b->ops->event_time(b, start, &t0, &err), FDY_OK);
  assert_int_equal(b->ops->event_time(b, gpu.done, &t1, &err), FDY_OK);
  double seconds = (double)(t1 - t0) * 1e-9 / reps;
  double flop = 2.0 * rows * (double)w->in * w->out;
  print_message("  timing matmul_q4 %s [%u x %u] x [%u x %u]^T g%u %s: "
                "%.1f us, %.1f TFLOP/s (mean of %d)\n",
                label, rows, w->in, w->out, w->in, w->group,
                fdy_dtype_name(w->dtype), seconds * 1e6, flop / seconds * 1e-12,
                reps);
  b->ops->event_destroy(b, start);
  b->ops->buffer_release(b, buf);
  free(step);
  free(x);
}

/* The llama-3.2-3b projections at 1 to 512 rows (counts below, at and
 * above the 128-row tiles), every group size and scale dtype. */
static void test_prefill_matmul(void **state) {
  (void)state;
  if (small_shapes()) {
    skip();
  }
  const struct {
    const char *name;
    uint32_t out, in;
  } shapes[] = {
      {"3b q/o", 3072, 3072},
      {"3b k/v", 1024, 3072},
      {"3b gate/up", 8192, 3072},
      {"3b down", 3072, 8192},
  };
  const struct {
    uint32_t group;
    fdy_dtype dtype;
  } formats[] = {
      {64, FDY_DTYPE_F16}, {32, FDY_DTYPE_BF16}, {128, FDY_DTYPE_F16}};
  const int32_t counts[] = {1, 7, 64, 65, 511, 512};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
      q4_matrix w = q4_random(shapes[i].out, shapes[i].in, formats[f].group,
                              formats[f].dtype);
      if (f == 0) {
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
          matmul_case(shapes[i].name, &w, 512, counts[c]);
        }
        matmul_case(shapes[i].name, &w, 7, 7);
        matmul_case(shapes[i].name, &w, 65, 65);
      } else {
        matmul_case(shapes[i].name, &w, 512, 512);
        matmul_case(shapes[i].name, &w, 64, 64);
      }
      if (mma_timing()) {
        time_matmul(shapes[i].name, &w, 512);
      }
      q4_free(&w);
    }
  }
}

/* Ragged shapes on each block shape of the tensor-core kernel (chosen by
 * matmul_q4_mma.cu from the shapes alone): 3001 outputs of 3040 inputs (an
 * odd output count, a last tile of 25 outputs of 96, a last k-block of 32
 * inputs, groups of 32) take the 128 x 96 tiles at 300 and 512 rows;
 * 2999 outputs at 64 rows the 128 x 64 tiles (a last tile of 55, the
 * inputs split 5 ways). */
static void test_prefill_matmul_ragged(void **state) {
  (void)state;
  if (small_shapes()) {
    skip();
  }
  const fdy_dtype dtypes[] = {FDY_DTYPE_F16, FDY_DTYPE_BF16};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    q4_matrix w = q4_random(3001, 3040, 32, dtypes[i]);
    matmul_case("ragged", &w, 512, 500);
    matmul_case("ragged", &w, 512, 512);
    matmul_case("ragged", &w, 300, 257);
    q4_free(&w);
    w = q4_random(2999, 3040, 32, dtypes[i]);
    matmul_case("ragged", &w, 64, 63);
    q4_free(&w);
  }
}

/* A prefill matmul launched without the workspace it asks for fails before
 * anything runs: FDY_ERR_INVALID_ARGUMENT with the bytes it needs. */
static void test_prefill_needs_workspace(void **state) {
  (void)state;
  fdy_backend *b = gpu.b;
  q4_matrix w = q4_random(300, 96, 32, FDY_DTYPE_BF16);
  uint64_t end = 0;
  fdy_op op = matmul_op(&w, 7, NULL, &end);
  uint64_t need = b->ops->workspace_bytes(b, &op);
  assert_true(need > 0);
  fdy_error err;
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, end, &buf, &err), FDY_OK);
  op = matmul_op(&w, 7, buf, &end);
  assert_int_equal(b->ops->launch(b, gpu.s, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, need);
  assert_int_equal(err.actual, 0);
  op.workspace = (fdy_tensor_view){buf, 0, FDY_DTYPE_U8, FDY_SHAPE(need - 1)};
  assert_int_equal(b->ops->launch(b, gpu.s, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, need);
  assert_int_equal(err.actual, need - 1);
  print_message("  matmul_q4 [7 x 96] without its %llu-byte workspace: %s\n",
                (unsigned long long)need, err.message);
  b->ops->buffer_release(b, buf);
  q4_free(&w);
}

/* ---- rope -------------------------------------------------------------------
 */

/* ROPE of rows at positions `position` + t, or (ragged) row t at a
 * position of its own (0 for every third row, else uniform below
 * 100,000). */
static void rope_case(const char *label, uint32_t rows, int32_t count,
                      int32_t position, uint32_t heads, uint32_t head_dim,
                      bool llama3, bool ragged) {
  uint32_t width = heads * head_dim;
  int32_t *step = make_step(count, position, rows);
  for (uint32_t t = 0; ragged && t < rows; t++) {
    step[FDY_STEP_POSITION(t)] =
        t % 3 == 0 ? 0 : (int32_t)(next_u64() % 100000);
  }
  float *x = random_floats((uint64_t)rows * width);
  float *out = poisoned((uint64_t)rows * width);
  fdy_op op = {.kind = FDY_OP_ROPE, .input_count = 2, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, width));
  op.outputs[0] = op.inputs[1];
  op.params.rope.head_dim = head_dim;
  op.params.rope.theta = 500000.0;
  op.params.rope.llama3 = llama3;
  op.params.rope.factor = 32.0;
  op.params.rope.low_freq_factor = 1.0;
  op.params.rope.high_freq_factor = 4.0;
  op.params.rope.original_max_position = 8192;
  void *data[] = {step, x, out};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "rope %s [%u x %u] d%u %s at %d%s, count %d",
           label, rows, width, head_dim, llama3 ? "llama3" : "plain", position,
           ragged ? " (ragged)" : "", count);
  if (active > 0) {
    expect_close(what, r.cpu[2], r.gpu[2], (uint64_t)active * width,
                 ELEMENT_BOUND);
  }
  expect_untouched(what, r.gpu[2], active, rows, width);
  free_results(&r);
  free(step);
  free(x);
  free(out);
}

/* ---- attention --------------------------------------------------------------
 */

/* An ATTENTION case: the rows are a chunk from `position` (ROPE_ATTENTION
 * cases have one row). */
typedef struct attention_case {
  uint32_t heads, kv_heads, d, context, rows;
  int32_t count, position;
  fdy_dtype cache;
} attention_case;

/* ROPE_ATTENTION's parameters in these tests: the llama3 rope (theta
 * 500000, factor 32, low 1, high 4, original 8192) of head_dim d. */
static fdy_op_params rope_attention_params(uint32_t heads, uint32_t kv_heads,
                                           uint32_t d) {
  fdy_op_params p;
  memset(&p, 0, sizeof p);
  p.rope_attention.rope = (fdy_rope_params){.head_dim = d,
                                            .theta = 500000.0,
                                            .llama3 = true,
                                            .factor = 32.0,
                                            .low_freq_factor = 1.0,
                                            .high_freq_factor = 4.0,
                                            .original_max_position = 8192};
  p.rope_attention.attention = (fdy_attention_params){heads, kv_heads, d};
  return p;
}

/* Elements [first, first + n) of a k and a v cache of dtype set to random
 * earlier tokens: F32 in [-1, 1], F16 halves in [-1, 1) built from bits,
 * the v half correlated with the k half. */
static void fill_caches(void *kc, void *vc, fdy_dtype dtype, uint64_t first,
                        uint64_t n) {
  for (uint64_t i = first; i < first + n; i++) {
    if (dtype == FDY_DTYPE_F16) {
      uint64_t r = next_u64();
      uint16_t h = (uint16_t)((r & 0x8000u) | (uint16_t)(10 + r % 5) << 10 |
                              ((r >> 16) & 0x3ffu));
      ((uint16_t *)kc)[i] = h;
      ((uint16_t *)vc)[i] = (uint16_t)(h ^ ((r >> 32) & 0x83ffu));
    } else {
      ((float *)kc)[i] = rand_float();
      ((float *)vc)[i] = rand_float();
    }
  }
}

/* ATTENTION, or ROPE_ATTENTION (rope: rope_attention_params) of case c
 * against the CPU backend, its rows of sequence `sequence` of caches of
 * `sequences` regions. The chunk's sequence holds random earlier tokens
 * before its position; every other cache element is poisoned (a NaN in
 * F32, half of them NaN in F16), so reading another region or a later
 * position shows. */
static void run_attention_in(const char *label, const attention_case *c,
                             bool rope, uint32_t sequences, int32_t sequence) {
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  uint64_t region = (uint64_t)c->context * kv_dim; /* elements */
  uint64_t cache_words = sequences * region * esize / 4;
  int32_t *step = make_step(c->count, c->position, c->rows);
  for (uint32_t t = 0; t < c->rows; t++) {
    step[FDY_STEP_SEQUENCE(t)] = sequence;
  }
  float *q = random_floats((uint64_t)c->rows * q_dim);
  float *k = random_floats((uint64_t)c->rows * kv_dim);
  float *v = random_floats((uint64_t)c->rows * kv_dim);
  void *kc = poisoned(cache_words), *vc = poisoned(cache_words);
  const bool in = sequence >= 0 && (uint32_t)sequence < sequences;
  uint64_t before = c->position > 0 ? (uint64_t)c->position * kv_dim : 0;
  if (before > region) {
    before = region;
  }
  if (in) {
    fill_caches(kc, vc, c->cache, (uint64_t)sequence * region, before);
  }
  float *out = poisoned((uint64_t)c->rows * q_dim);
  fdy_op op = {.kind = FDY_OP_ATTENTION, .input_count = 6, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(c->rows)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, q_dim));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, kv_dim));
  op.inputs[3] = op.inputs[2];
  op.inputs[4] = view(c->cache, FDY_SHAPE(sequences, c->context, kv_dim));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = op.inputs[1];
  if (rope) {
    assert_int_equal(c->rows, 1);
    op.kind = FDY_OP_ROPE_ATTENTION;
    op.params = rope_attention_params(c->heads, c->kv_heads, c->d);
  } else {
    op.params.attention.heads = c->heads;
    op.params.attention.kv_heads = c->kv_heads;
    op.params.attention.head_dim = c->d;
  }
  void *data[] = {step, q, k, v, kc, vc, out};
  results r = run_both(&op, data);

  uint32_t active = active_rows(c->count, c->rows);
  uint32_t valid = 0; /* rows whose position lies in the cache */
  while (in && valid < active &&
         (int64_t)c->position + valid < (int64_t)c->context) {
    valid++;
  }
  char what[200];
  snprintf(what, sizeof what,
           "%s %s %u/%u heads d%u, %s cache of %u x %u, [%u rows] at %d of "
           "sequence %d, count %d",
           rope ? "rope_attention" : "attention", label, c->heads, c->kv_heads,
           c->d, fdy_dtype_name(c->cache), sequences, c->context, c->rows,
           c->position, sequence, c->count);
  /* prefill with head_dim a multiple of 16 up to 128 runs on the tensor
   * cores: q, k, v and the weights rounded to F16 (2^-11 relative each;
   * src/backends/cuda/attention_prefill.cu works out ~3e-4 for these
   * operands, a lane-level emulation measured 2.6e-4 to 3e-4), so
   * MMA_BOUND */
  const bool mma = c->rows > 1 && c->d % 16 == 0 && c->d <= 128;
  if (valid > 0) {
    expect_close(what, r.cpu[6], r.gpu[6], (uint64_t)valid * q_dim,
                 mma ? MMA_BOUND : REDUCTION_BOUND);
  } else {
    print_message("  %-58s no row in the cache\n", what);
  }
  const float *g = r.gpu[6];
  assert_true(written_nan(g + (uint64_t)valid * q_dim,
                          (uint64_t)(active - valid) * q_dim));
  expect_untouched(what, g, active, c->rows, q_dim);
  snprintf(what, sizeof what, "  k cache after the append (%s)",
           fdy_dtype_name(c->cache));
  expect_same(what, r.cpu[4], r.gpu[4], cache_words * 4);
  snprintf(what, sizeof what, "  v cache after the append (%s)",
           fdy_dtype_name(c->cache));
  expect_same(what, r.cpu[5], r.gpu[5], cache_words * 4);
  if (valid == 0) { /* nothing appended */
    expect_same("  k cache as it was", kc, r.gpu[4], cache_words * 4);
    expect_same("  v cache as it was", vc, r.gpu[5], cache_words * 4);
  }
  free_results(&r);
  free(step);
  free(q);
  free(k);
  free(v);
  free(kc);
  free(vc);
  free(out);
}

static void run_attention_kind(const char *label, const attention_case *c,
                               bool rope) {
  run_attention_in(label, c, rope, 1, 0);
}

static void run_attention_case(const char *label, const attention_case *c) {
  run_attention_kind(label, c, false);
}

/* An attention case in a region of caches of several sequences. */
typedef struct region_case {
  attention_case c;
  uint32_t sequences;
  int32_t sequence;
} region_case;

/* Decode (one row) at positions that start, end and straddle the decode
 * chunks (64 positions from a cache of 4096) up to the cache's last, and
 * prefill (512 rows) of counts 1, 7, 64 and 512 from position 0 and from
 * mid-cache, both cache dtypes, in m's head shape. */
static void attention_sweep(const model_shape *m) {
  static const int32_t decode_positions[] = {0,  1,  15, 16,  31,
                                             32, 63, 64, 639, 4095};
  static const int32_t prefill_counts[] = {1, 7, 64, 512};
  static const int32_t prefill_positions[] = {0, 1000};
  const uint32_t context = 4096;
  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  for (int i = 0; i < 2; i++) {
    for (size_t p = 0; p < sizeof decode_positions / sizeof decode_positions[0];
         p++) {
      attention_case c = {
          m->heads, m->kv_heads, m->head_dim,         context,
          1,        1,           decode_positions[p], caches[i]};
      run_attention_case(m->name, &c);
    }
    for (size_t n = 0; n < sizeof prefill_counts / sizeof prefill_counts[0];
         n++) {
      for (size_t p = 0;
           p < sizeof prefill_positions / sizeof prefill_positions[0]; p++) {
        attention_case c = {
            m->heads, m->kv_heads,       m->head_dim,          context,
            512,      prefill_counts[n], prefill_positions[p], caches[i]};
        run_attention_case(m->name, &c);
      }
    }
  }
}

/* The two attention variants over the positions and counts of
 * attention_sweep: the fixtures' head shapes, then llama-3.2-3b's (24/8
 * heads, head_dim 128; skipped by FOUNDRY_CUDA_OPS_SMALL=1), then a
 * decode of the last position of a cache of 70,000 positions (above the
 * ~58,000 that the previous kernel's shared memory held). */
static void test_attention_positions(void **state) {
  (void)state;
  attention_sweep(&fixture_shapes[0]); /* 8/2 heads, head_dim 32 */
  attention_sweep(&fixture_shapes[1]); /* 6/2 heads, head_dim 128 */
  attention_sweep(&fixture_shapes[3]); /* MHA 8/8, head_dim 32 */
  if (small_shapes()) {
    return;
  }
  attention_sweep(&llama32_3b);
  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  for (int i = 0; i < 2; i++) {
    attention_case c = {llama32_3b.heads,
                        llama32_3b.kv_heads,
                        llama32_3b.head_dim,
                        70000,
                        1,
                        1,
                        69999,
                        caches[i]};
    run_attention_case("long cache", &c);
  }
}

/* The one-row ATTENTION is one kernel: the block that holds the chunk of
 * the step's position appends its kv head's k and v rows (slice 0 only
 * when a kv head's query heads span several blocks of DECODE_GROUP), and
 * the last block of each slice to finish combines its heads' chunks,
 * counting on one of the stream's 64 counters (several slices on each
 * when there are more than 64). Decode at positions across the chunks of
 * caches of several lengths, for head groups of 8 (two slices) and 10 (a
 * last slice of 2 heads), MHA of 80 heads (80 slices on 64 counters), a
 * cache of one chunk, and blocks that take several chunks in turn. Every
 * case runs after the others on one stream, so a counter left non-zero
 * would fail the next. */
static void test_attention_decode_blocks(void **state) {
  (void)state;
  const attention_case cases[] = {
      {16, 2, 64, 640, 1, 1, 639, FDY_DTYPE_F32},
      {16, 2, 64, 640, 1, 1, 0, FDY_DTYPE_F16},
      {16, 2, 64, 2048, 1, 1, 1000, FDY_DTYPE_F16},
      {40, 4, 32, 300, 1, 1, 17, FDY_DTYPE_F32},
      {40, 4, 32, 300, 1, 1, 299, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 511, FDY_DTYPE_F32},
      {80, 80, 32, 512, 1, 1, 200, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 512, FDY_DTYPE_F32}, /* outside: NaN */
      {8, 2, 64, 16, 1, 1, 15, FDY_DTYPE_F32},
      {8, 2, 64, 16, 1, 1, 3, FDY_DTYPE_F16},
      {24, 8, 128, 640, 1, 1, 639, FDY_DTYPE_F32},
      {24, 8, 128, 640, 1, 1, 639, FDY_DTYPE_F16},
      {24, 8, 128, 8192, 1, 1, 4100, FDY_DTYPE_F32},
      {24, 8, 128, 640, 1, 1, 624, FDY_DTYPE_F16},
      {24, 8, 128, 16384, 1, 1, 16000, FDY_DTYPE_F16},
      {80, 80, 32, 2048, 1, 1, 2047, FDY_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_attention_case("decode blocks", &cases[i]);
  }
}

/* ROPE_ATTENTION (decode only on CUDA: q rotated as the decode kernel
 * loads it, the step's k rotated before the append) against the CPU's
 * rope, rope and attention: outputs within REDUCTION_BOUND, caches
 * bitwise. llama-3.2-3b heads at positions 0, 1, 15, 16, 639, 4095 of a
 * 4096 cache and 69,999 of 70,000 (skipped by FOUNDRY_CUDA_OPS_SMALL=1);
 * group 8 (two slices: the second's q rotated too), MHA of 80 heads,
 * head_dim 36 (18 pairs: not a divisor of the block, elements not in
 * fours) and 64 at short caches; a position outside the cache (NaN, caches
 * untouched); both cache dtypes. The step's position inside the first
 * chunk of a block, whose first round of keys and values the kernel loads
 * before fdy_grid_wait: at the chunk's first slot, inside it and at its
 * last slot (chunk 1 of 64 positions, MHA of 80 heads: 64, 80, 95, 127;
 * llama-3.2-3b's chunk 9 of a 640 cache: 576, 608, 639; 323 and 340 of
 * a 4096 cache); blocks that take several chunks in turn (MHA of 80 heads
 * at 2047 of 2048; llama-3.2-3b at 16,000, the first slot of a
 * 128-position chunk, in its held round of 64, and 16,383 of 16,384, past
 * it). A row of region 2 or 1 of caches of 3 sequences, and a row whose
 * sequence lies outside them (3 and -1: NaN, caches untouched).
 * supports_op takes two rows (and needs no workspace for them) and
 * refuses a rope of 257 pairs. */
static void test_rope_attention_decode(void **state) {
  (void)state;
  const attention_case small[] = {
      {8, 2, 64, 640, 1, 1, 639, FDY_DTYPE_F32},
      {8, 2, 64, 640, 1, 1, 0, FDY_DTYPE_F16},
      {16, 2, 64, 2048, 1, 1, 1000, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 200, FDY_DTYPE_F32},
      {6, 2, 36, 100, 1, 1, 37, FDY_DTYPE_F32},
      {6, 2, 36, 100, 1, 1, 99, FDY_DTYPE_F16},
      {6, 2, 128, 64, 1, 1, 64, FDY_DTYPE_F16}, /* outside: NaN */
      {80, 80, 32, 512, 1, 1, 64, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 80, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 95, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 127, FDY_DTYPE_F16},
      {80, 80, 32, 512, 1, 1, 95, FDY_DTYPE_F32},
      {80, 80, 32, 2048, 1, 1, 2047, FDY_DTYPE_F16},
  };
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
    run_attention_kind("decode", &small[i], true);
  }
  /* llama-3.2-3b: context, position (F32 and F16 caches each) */
  const int32_t held[][2] = {{640, 576},    {640, 608},  {640, 639},
                             {4096, 323},   {4096, 340}, {16384, 16000},
                             {16384, 16383}};
  for (size_t i = 0; i < sizeof held / sizeof held[0] && !small_shapes(); i++) {
    for (int j = 0; j < 2; j++) {
      attention_case c = {llama32_3b.heads,
                          llama32_3b.kv_heads,
                          llama32_3b.head_dim,
                          (uint32_t)held[i][0],
                          1,
                          1,
                          held[i][1],
                          j == 0 ? FDY_DTYPE_F32 : FDY_DTYPE_F16};
      run_attention_kind("held chunk", &c, true);
    }
  }
  const int32_t positions[] = {0, 1, 15, 16, 639, 4095};
  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  for (int i = 0; i < 2 && !small_shapes(); i++) {
    for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++) {
      attention_case c = {llama32_3b.heads,
                          llama32_3b.kv_heads,
                          llama32_3b.head_dim,
                          4096,
                          1,
                          1,
                          positions[p],
                          caches[i]};
      run_attention_kind(llama32_3b.name, &c, true);
    }
    attention_case c = {llama32_3b.heads,
                        llama32_3b.kv_heads,
                        llama32_3b.head_dim,
                        70000,
                        1,
                        1,
                        69999,
                        caches[i]};
    run_attention_kind("long cache", &c, true);
  }
  /* a row of a region other than 0 of caches of 3 sequences, and rows of
   * a sequence outside them (NaN, nothing appended) */
  const region_case regions[] = {
      {{24, 8, 128, 640, 1, 1, 639, FDY_DTYPE_F16}, 3, 2},
      {{16, 2, 64, 700, 1, 1, 300, FDY_DTYPE_F32}, 3, 1},
      {{24, 8, 128, 640, 1, 1, 100, FDY_DTYPE_F16}, 3, 3},
      {{24, 8, 128, 640, 1, 1, 100, FDY_DTYPE_F32}, 3, -1},
  };
  for (size_t i = 0; i < sizeof regions / sizeof regions[0]; i++) {
    run_attention_in("decode", &regions[i].c, true, regions[i].sequences,
                     regions[i].sequence);
  }
  /* any row count (several on the batch kernel); a rope of more than 256
   * pairs is refused */
  fdy_op op = {
      .kind = FDY_OP_ROPE_ATTENTION, .input_count = 6, .output_count = 1};
  op.params = rope_attention_params(4, 2, 64);
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(2)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(2, 256));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(2, 128));
  op.inputs[3] = op.inputs[2];
  op.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(3, 100, 128));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = op.inputs[1];
  assert_int_equal(fdy_op_check(&op, NULL), FDY_OK);
  assert_true(gpu.b->ops->supports_op(gpu.b, &op));
  assert_int_equal(gpu.b->ops->workspace_bytes(gpu.b, &op), 0);
  op.params = rope_attention_params(1, 1, 514);
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(2, 514));
  op.inputs[2] = op.inputs[1];
  op.inputs[3] = op.inputs[1];
  op.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(3, 100, 514));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = op.inputs[1];
  assert_int_equal(fdy_op_check(&op, NULL), FDY_OK);
  assert_false(gpu.b->ops->supports_op(gpu.b, &op));
  assert_true(cpu.b->ops->supports_op(cpu.b, &op));
}

/* ATTENTION of a chunk of a sequence other than 0 of caches of 3
 * sequences: prefill on the tensor cores (head_dim 64) and in float
 * (head_dim 36), a chunk that runs past the context, one row (the decode
 * kernel); and chunks of a sequence outside the caches (3 and -1: every
 * row NaN, nothing appended). The other regions are poisoned, so a read
 * of one shows. */
static void test_attention_regions(void **state) {
  (void)state;
  const region_case cases[] = {
      {{8, 2, 64, 300, 40, 37, 100, FDY_DTYPE_F16}, 3, 1},
      {{8, 2, 64, 300, 40, 40, 280, FDY_DTYPE_F32}, 3, 2},
      {{4, 4, 36, 64, 7, 7, 10, FDY_DTYPE_F32}, 3, 2},
      {{4, 4, 36, 64, 7, 6, 3, FDY_DTYPE_F16}, 3, 1},
      {{24, 8, 128, 640, 1, 1, 639, FDY_DTYPE_F16}, 3, 2},
      {{16, 2, 64, 2048, 1, 1, 1000, FDY_DTYPE_F32}, 3, 1},
      {{8, 2, 64, 300, 40, 37, 100, FDY_DTYPE_F16}, 3, 3},
      {{8, 2, 64, 300, 40, 37, 100, FDY_DTYPE_F32}, 3, -1},
      {{4, 4, 36, 64, 7, 7, 10, FDY_DTYPE_F32}, 3, 3},
      {{24, 8, 128, 640, 1, 1, 100, FDY_DTYPE_F16}, 3, -1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_attention_in("regions", &cases[i].c, false, cases[i].sequences,
                     cases[i].sequence);
  }
}

/* ---- rope_attention of a batch of sequences -------------------------------
 */

/* ROPE_ATTENTION of `rows` rows of distinct sequences of caches of
 * `sequences` (>= rows) regions of `context` positions, every cache
 * element a random earlier token. With `outside`, row 1 lies past the
 * context, row 2 has sequence -1 and row 3 (when active) sequence
 * `sequences`. */
typedef struct batch_case {
  uint32_t heads, kv_heads, d, context, sequences, rows;
  int32_t count;
  fdy_dtype cache;
  bool outside;
} batch_case;

/* A batch's operands in operand order. */
typedef struct batch_data {
  int32_t *step;
  float *q, *k, *v;
  void *kc, *vc;
  float *out;
} batch_data;

static uint64_t batch_cache_words(const batch_case *c) {
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  return (uint64_t)c->sequences * c->context * c->kv_heads * c->d * esize / 4;
}

static fdy_op batch_op(const batch_case *c) {
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  fdy_op op = {
      .kind = FDY_OP_ROPE_ATTENTION, .input_count = 6, .output_count = 1};
  op.params = rope_attention_params(c->heads, c->kv_heads, c->d);
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(c->rows)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, q_dim));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(c->rows, kv_dim));
  op.inputs[3] = op.inputs[2];
  op.inputs[4] = view(c->cache, FDY_SHAPE(c->sequences, c->context, kv_dim));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = op.inputs[1];
  return op;
}

/* Random operands of case c. The step: row t of sequence perm[t] (a
 * shuffle of the sequences), at position 0 when t % 5 == 1, at the
 * context's last when t % 5 == 2, else uniform in the context (then
 * c->outside's rows); rows at or beyond the count hold values outside the
 * cache (never read). */
static batch_data batch_random(const batch_case *c) {
  assert_true(c->sequences >= c->rows);
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  uint32_t *perm = checked_malloc(c->sequences * sizeof *perm);
  for (uint32_t i = 0; i < c->sequences; i++) {
    perm[i] = i;
  }
  for (uint32_t i = c->sequences - 1; i > 0; i--) {
    uint32_t j = (uint32_t)(next_u64() % (i + 1));
    uint32_t x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  batch_data b = {.step = make_step(c->count, 0, c->rows)};
  uint32_t active = active_rows(c->count, c->rows);
  for (uint32_t t = 0; t < c->rows; t++) {
    uint32_t p = t % 5 == 1   ? 0
                 : t % 5 == 2 ? c->context - 1
                              : (uint32_t)(next_u64() % c->context);
    fdy_step_set_row(b.step, t, 0, perm[t], p);
    if (t >= active) {
      b.step[FDY_STEP_POSITION(t)] = -7;
      b.step[FDY_STEP_SEQUENCE(t)] = INT32_MAX;
    }
  }
  free(perm);
  if (c->outside) {
    b.step[FDY_STEP_POSITION(1)] = (int32_t)c->context;
    b.step[FDY_STEP_SEQUENCE(2)] = -1;
    b.step[FDY_STEP_SEQUENCE(3)] = (int32_t)c->sequences;
  }
  b.q = random_floats((uint64_t)c->rows * q_dim);
  b.k = random_floats((uint64_t)c->rows * kv_dim);
  b.v = random_floats((uint64_t)c->rows * kv_dim);
  uint64_t words = batch_cache_words(c);
  b.kc = checked_malloc(words * 4);
  b.vc = checked_malloc(words * 4);
  fill_caches(b.kc, b.vc, c->cache, 0,
              (uint64_t)c->sequences * c->context * kv_dim);
  b.out = poisoned((uint64_t)c->rows * q_dim);
  return b;
}

static void batch_free(batch_data *b) {
  free(b->step);
  free(b->q);
  free(b->k);
  free(b->v);
  free(b->kc);
  free(b->vc);
  free(b->out);
}

/* Whether row t of a step lies in caches of `sequences` regions of
 * `context` positions. */
static bool batch_row_in(const int32_t *step, uint32_t t, uint32_t context,
                         uint32_t sequences) {
  int32_t p = step[FDY_STEP_POSITION(t)], s = step[FDY_STEP_SEQUENCE(t)];
  return p >= 0 && (uint32_t)p < context && s >= 0 && (uint32_t)s < sequences;
}

/* Case c against the CPU backend: the rows in the caches within
 * REDUCTION_BOUND, the others NaN on both, rows at or beyond the count
 * untouched, both caches bitwise the CPU's (the rotated k included). */
static void run_batch_case(const char *label, const batch_case *c) {
  batch_data b = batch_random(c);
  fdy_op op = batch_op(c);
  void *data[] = {b.step, b.q, b.k, b.v, b.kc, b.vc, b.out};
  results r = run_both(&op, data);
  uint32_t q_dim = c->heads * c->d;
  uint32_t active = active_rows(c->count, c->rows);
  float *cpu_out = r.cpu[6], *gpu_out = r.gpu[6];
  char what[200];
  snprintf(what, sizeof what,
           "rope_attention %s %u/%u heads d%u, %s caches of %u x %u, %u rows, "
           "count %d%s",
           label, c->heads, c->kv_heads, c->d, fdy_dtype_name(c->cache),
           c->sequences, c->context, c->rows, c->count,
           c->outside ? ", 3 outside" : "");
  for (uint32_t t = 0; t < active; t++) {
    if (!batch_row_in(b.step, t, c->context, c->sequences)) {
      /* NaN bits differ between the backends: compare the other rows */
      float *g = gpu_out + (uint64_t)t * q_dim,
            *p = cpu_out + (uint64_t)t * q_dim;
      assert_true(written_nan(g, q_dim));
      assert_true(written_nan(p, q_dim));
      memset(g, 0, sizeof(float) * q_dim);
      memset(p, 0, sizeof(float) * q_dim);
    }
  }
  expect_close(what, cpu_out, gpu_out, (uint64_t)active * q_dim,
               REDUCTION_BOUND);
  expect_untouched(what, gpu_out, active, c->rows, q_dim);
  uint64_t words = batch_cache_words(c);
  expect_same("  k cache after the appends", r.cpu[4], r.gpu[4], words * 4);
  expect_same("  v cache after the appends", r.cpu[5], r.gpu[5], words * 4);
  free_results(&r);
  batch_free(&b);
}

/* ROPE_ATTENTION of several rows (the batch kernel; one row: the decode
 * kernel) against the CPU backend, each row at its own position of its own
 * sequence (rows in shuffled regions of caches of more sequences than
 * rows; ragged positions, some 0, some the context's last; F32 and F16
 * caches): llama-3.2-3b heads (24/8 of 128) and llama-3.1-8b's (32/8) at
 * 1, 3, 32 and 64 rows over contexts of 1030 positions (up to 5 chunks
 * of 256; skipped by FOUNDRY_CUDA_OPS_SMALL=1), then small shapes: a
 * count below the rows, rows outside the caches (a position past the
 * context, sequences -1 and S: NaN, nothing appended), a group of 8 (two
 * slices of 4 heads), a group of 10 (a slice of 2), MHA (a slice of 1),
 * head_dim 36 (18 pairs, elements not in fours) and 256 (two float4s a
 * lane). */
static void test_rope_attention_batch(void **state) {
  (void)state;
  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  const uint32_t rows[] = {1, 3, 32, 64};
  for (int i = 0; i < 2 && !small_shapes(); i++) {
    for (size_t n = 0; n < sizeof rows / sizeof rows[0]; n++) {
      batch_case c3b = {
          24,        8,    128, 1030, rows[n] + 3, rows[n], (int32_t)rows[n],
          caches[i], false};
      run_batch_case("llama-3.2-3b", &c3b);
      batch_case c8b = {
          32,        8,    128, 1030, rows[n] + 5, rows[n], (int32_t)rows[n],
          caches[i], false};
      run_batch_case("llama-3.1-8b", &c8b);
    }
  }
  const batch_case small[] = {
      {24, 8, 128, 300, 12, 9, 6, FDY_DTYPE_F16, false},
      {24, 8, 128, 300, 12, 9, 9, FDY_DTYPE_F32, true},
      {24, 8, 128, 300, 12, 9, 9, FDY_DTYPE_F16, true},
      {16, 2, 64, 600, 5, 4, 4, FDY_DTYPE_F32, false},
      {40, 4, 32, 520, 7, 5, 5, FDY_DTYPE_F16, false},
      {8, 8, 32, 260, 4, 3, 3, FDY_DTYPE_F32, false},
      {6, 2, 36, 100, 6, 5, 5, FDY_DTYPE_F32, true},
      {6, 2, 36, 100, 6, 5, 4, FDY_DTYPE_F16, false},
      {4, 2, 256, 300, 4, 2, 2, FDY_DTYPE_F16, false},
      {4, 2, 256, 300, 4, 2, 2, FDY_DTYPE_F32, false},
  };
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
    run_batch_case("small", &small[i]);
  }
}

/* A row's result does not depend on its batch: rows 13 and 7 of a batch of
 * 32 (one at a random position, one at the context's last) computed again
 * in a batch of 3 as rows 0 and 1, beside a new row of another sequence
 * (row 0's of the 32), from the same caches, on the GPU alone: their
 * outputs and their sequences' regions after the op bitwise equal. F16
 * and F32 caches, llama-3.2-3b heads. */
static void test_rope_attention_batch_invariance(void **state) {
  (void)state;
  const fdy_dtype caches[] = {FDY_DTYPE_F16, FDY_DTYPE_F32};
  for (int i = 0; i < 2; i++) {
    const batch_case wide = {24, 8, 128, 700, 40, 32, 32, caches[i], false};
    const batch_case narrow = {24, 8, 128, 700, 40, 3, 3, caches[i], false};
    const uint32_t q_dim = wide.heads * wide.d, kv_dim = wide.kv_heads * wide.d;
    const uint32_t from[2] = {13, 7}; /* rows of the wide batch */
    batch_data w = batch_random(&wide);
    batch_data n = batch_random(&narrow);
    uint64_t words = batch_cache_words(&wide);
    memcpy(n.kc, w.kc, words * 4);
    memcpy(n.vc, w.vc, words * 4);
    for (uint32_t t = 0; t < 2; t++) {
      uint32_t f = from[t];
      fdy_step_set_row(n.step, t, 0, (uint32_t)w.step[FDY_STEP_SEQUENCE(f)],
                       (uint32_t)w.step[FDY_STEP_POSITION(f)]);
      memcpy(n.q + (uint64_t)t * q_dim, w.q + (uint64_t)f * q_dim,
             sizeof(float) * q_dim);
      memcpy(n.k + (uint64_t)t * kv_dim, w.k + (uint64_t)f * kv_dim,
             sizeof(float) * kv_dim);
      memcpy(n.v + (uint64_t)t * kv_dim, w.v + (uint64_t)f * kv_dim,
             sizeof(float) * kv_dim);
    }
    fdy_step_set_row(n.step, 2, 0, (uint32_t)w.step[FDY_STEP_SEQUENCE(0)], 123);
    fdy_op wide_op = batch_op(&wide), narrow_op = batch_op(&narrow);
    void *wide_data[] = {w.step, w.q, w.k, w.v, w.kc, w.vc, w.out};
    void *narrow_data[] = {n.step, n.q, n.k, n.v, n.kc, n.vc, n.out};
    run_on(&gpu, &wide_op, wide_data);
    run_on(&gpu, &narrow_op, narrow_data);
    uint64_t esize = caches[i] == FDY_DTYPE_F16 ? 2 : 4;
    uint64_t region = (uint64_t)wide.context * kv_dim * esize; /* bytes */
    for (uint32_t t = 0; t < 2; t++) {
      uint32_t f = from[t];
      char what[160];
      snprintf(what, sizeof what,
               "rope_attention %s: row %u of 32 as row %u of 3",
               fdy_dtype_name(caches[i]), f, t);
      expect_same(what, w.out + (uint64_t)f * q_dim,
                  n.out + (uint64_t)t * q_dim, sizeof(float) * q_dim);
      uint64_t at = (uint64_t)w.step[FDY_STEP_SEQUENCE(f)] * region;
      expect_same("  its k region after the op", (unsigned char *)w.kc + at,
                  (unsigned char *)n.kc + at, region);
      expect_same("  its v region after the op", (unsigned char *)w.vc + at,
                  (unsigned char *)n.vc + at, region);
    }
    batch_free(&w);
    batch_free(&n);
  }
}

/* ---- rope_attention of a chunk beside decode rows --------------------------
 */

#define MIXED_SEQUENCE 2 /* the chunk's */

/* ROPE_ATTENTION of a step that mixes `chunk` rows of sequence
 * MIXED_SEQUENCE at positions first .. first + chunk - 1 (a prompt chunk)
 * with decode rows of the other sequences, one each, in the context's
 * upper half (every fourth row at its last position); c.count of c.rows
 * active (c.outside false). The chunk is rows 1 .. chunk in position
 * order, or with `spread` its last position is row 0 and its others the
 * last rows in descending position order, so that the blocks of row 0
 * start long before those that append what they read. The caches hold
 * random earlier tokens, but region MIXED_SEQUENCE is poisoned from
 * position `first` on (NaN in F32, half of them NaN in F16): a read of a
 * position before its append shows. Rows at or beyond the count name
 * position first + chunk of MIXED_SEQUENCE (an append there would show). */
typedef struct mixed_case {
  batch_case c;
  uint32_t chunk;
  int32_t first;
  bool spread;
} mixed_case;

/* The row of the chunk's position first + i. */
static uint32_t mixed_chunk_row(const mixed_case *m, uint32_t i) {
  if (!m->spread) {
    return 1 + i;
  }
  return i == m->chunk - 1 ? 0 : m->c.rows - 1 - i;
}

/* Random operands of case m. */
static batch_data mixed_random(const mixed_case *m) {
  const batch_case *c = &m->c;
  uint32_t active = active_rows(c->count, c->rows);
  assert_true(m->chunk >= 2 && active > m->chunk);
  assert_true(!m->spread || active == c->rows);
  assert_true(c->sequences > MIXED_SEQUENCE &&
              c->sequences - 1 >= active - m->chunk);
  assert_true(m->first >= 0 &&
              (uint64_t)m->first + m->chunk < (uint64_t)c->context);
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  batch_data b = {.step = make_step(c->count, 0, c->rows)};
  bool *in_chunk = calloc(c->rows, sizeof *in_chunk);
  assert_non_null(in_chunk);
  for (uint32_t i = 0; i < m->chunk; i++) {
    uint32_t t = mixed_chunk_row(m, i);
    fdy_step_set_row(b.step, t, 0, MIXED_SEQUENCE, (uint32_t)m->first + i);
    in_chunk[t] = true;
  }
  /* the other sequences, shuffled, for the decode rows */
  uint32_t others = c->sequences - 1;
  uint32_t *perm = checked_malloc(others * sizeof *perm);
  for (uint32_t i = 0; i < others; i++) {
    perm[i] = i < MIXED_SEQUENCE ? i : i + 1;
  }
  for (uint32_t i = others - 1; i > 0; i--) {
    uint32_t j = (uint32_t)(next_u64() % (i + 1));
    uint32_t x = perm[i];
    perm[i] = perm[j];
    perm[j] = x;
  }
  uint32_t next = 0, upper = c->context / 2;
  for (uint32_t t = 0; t < c->rows; t++) {
    if (t >= active) {
      fdy_step_set_row(b.step, t, 0, MIXED_SEQUENCE,
                       (uint32_t)m->first + m->chunk);
    } else if (!in_chunk[t]) {
      uint32_t p = t % 4 == 3
                       ? c->context - 1
                       : upper + (uint32_t)(next_u64() % (c->context - upper));
      fdy_step_set_row(b.step, t, 0, perm[next++], p);
    }
  }
  free(perm);
  free(in_chunk);
  b.q = random_floats((uint64_t)c->rows * q_dim);
  b.k = random_floats((uint64_t)c->rows * kv_dim);
  b.v = random_floats((uint64_t)c->rows * kv_dim);
  uint64_t words = batch_cache_words(c);
  b.kc = checked_malloc(words * 4);
  b.vc = checked_malloc(words * 4);
  fill_caches(b.kc, b.vc, c->cache, 0,
              (uint64_t)c->sequences * c->context * kv_dim);
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  uint64_t from = ((uint64_t)MIXED_SEQUENCE * c->context + (uint64_t)m->first) *
                  kv_dim * esize / 4; /* words; kv_dim is even */
  uint64_t to =
      ((uint64_t)MIXED_SEQUENCE + 1) * c->context * kv_dim * esize / 4;
  for (uint64_t i = from; i < to; i++) {
    ((uint32_t *)b.kc)[i] = poison_bits;
    ((uint32_t *)b.vc)[i] = poison_bits;
  }
  b.out = poisoned((uint64_t)c->rows * q_dim);
  return b;
}

/* Case m against the CPU backend as run_batch_case (rows within
 * REDUCTION_BOUND, rows at or beyond the count untouched, both caches
 * bitwise the CPU's). Then on the GPU alone, each row of the chunk in
 * position order as the only active row (row 0, count 1) of an op of the
 * same shape, from the caches before the step, each run's appends kept for
 * the next: its output bitwise the step's row, and region MIXED_SEQUENCE
 * after the last bitwise the step's. */
static void run_mixed_case(const char *label, const mixed_case *m) {
  const batch_case *c = &m->c;
  batch_data b = mixed_random(m);
  fdy_op op = batch_op(c);
  void *data[] = {b.step, b.q, b.k, b.v, b.kc, b.vc, b.out};
  results r = run_both(&op, data);
  uint32_t q_dim = c->heads * c->d, kv_dim = c->kv_heads * c->d;
  uint32_t active = active_rows(c->count, c->rows);
  const float *gpu_out = r.gpu[6];
  char what[200];
  snprintf(what, sizeof what,
           "rope_attention %s %u/%u heads d%u, %s caches of %u x %u, %u rows, "
           "count %d, chunk %d..%d%s",
           label, c->heads, c->kv_heads, c->d, fdy_dtype_name(c->cache),
           c->sequences, c->context, c->rows, c->count, m->first,
           m->first + (int32_t)m->chunk - 1, m->spread ? " spread" : "");
  expect_close(what, r.cpu[6], gpu_out, (uint64_t)active * q_dim,
               REDUCTION_BOUND);
  expect_untouched(what, gpu_out, active, c->rows, q_dim);
  uint64_t words = batch_cache_words(c);
  expect_same("  k cache after the appends", r.cpu[4], r.gpu[4], words * 4);
  expect_same("  v cache after the appends", r.cpu[5], r.gpu[5], words * 4);

  batch_data one = {.step = make_step(1, 0, c->rows)};
  for (uint32_t t = 1; t < c->rows; t++) { /* never read */
    one.step[FDY_STEP_POSITION(t)] = -7;
    one.step[FDY_STEP_SEQUENCE(t)] = INT32_MAX;
  }
  one.q = checked_malloc(sizeof(float) * c->rows * q_dim);
  one.k = checked_malloc(sizeof(float) * c->rows * kv_dim);
  one.v = checked_malloc(sizeof(float) * c->rows * kv_dim);
  memcpy(one.q, b.q, sizeof(float) * c->rows * q_dim);
  memcpy(one.k, b.k, sizeof(float) * c->rows * kv_dim);
  memcpy(one.v, b.v, sizeof(float) * c->rows * kv_dim);
  one.kc = checked_malloc(words * 4);
  one.vc = checked_malloc(words * 4);
  memcpy(one.kc, b.kc, words * 4);
  memcpy(one.vc, b.vc, words * 4);
  one.out = poisoned((uint64_t)c->rows * q_dim);
  void *one_data[] = {one.step, one.q, one.k, one.v, one.kc, one.vc, one.out};
  for (uint32_t i = 0; i < m->chunk; i++) {
    uint32_t t = mixed_chunk_row(m, i);
    fdy_step_set_row(one.step, 0, 0, MIXED_SEQUENCE, (uint32_t)m->first + i);
    memcpy(one.q, b.q + (uint64_t)t * q_dim, sizeof(float) * q_dim);
    memcpy(one.k, b.k + (uint64_t)t * kv_dim, sizeof(float) * kv_dim);
    memcpy(one.v, b.v + (uint64_t)t * kv_dim, sizeof(float) * kv_dim);
    run_on(&gpu, &op, one_data);
    snprintf(what, sizeof what, "  position %d (row %u) alone in a step",
             m->first + (int32_t)i, t);
    expect_same(what, gpu_out + (uint64_t)t * q_dim, one.out,
                sizeof(float) * q_dim);
  }
  expect_untouched("  alone in a step", one.out, 1, c->rows, q_dim);
  uint64_t esize = c->cache == FDY_DTYPE_F16 ? 2 : 4;
  uint64_t region = (uint64_t)c->context * kv_dim * esize; /* bytes */
  uint64_t at = (uint64_t)MIXED_SEQUENCE * region;
  expect_same("  its k region after the rows alone",
              (unsigned char *)r.gpu[4] + at, (unsigned char *)one.kc + at,
              region);
  expect_same("  its v region after the rows alone",
              (unsigned char *)r.gpu[5] + at, (unsigned char *)one.vc + at,
              region);
  batch_free(&one);
  free_results(&r);
  batch_free(&b);
}

/* ROPE_ATTENTION of a step whose rows share a sequence: a prompt chunk of
 * one sequence beside decode rows of others (mixed_case), F32 and F16
 * caches. llama-3.2-3b heads with a chunk of 5 at positions 7..11 beside 4
 * decode rows; llama-3.1-8b's with a chunk across the attention's first
 * chunk of 256 positions (254..258) and a row past the count; a chunk of
 * 8 from position 0; a group of 10 (slices of 4, 4 and 2) at head_dim 36
 * (18 pairs, elements not in fours); and a chunk spread around 91 decode
 * rows (8 attention blocks a row; the 728 of the decode rows are more than
 * a GPU of 132 multiprocessors holds at once, 4 a multiprocessor, so that
 * under a kernel that appended and attended in one launch row 0 would
 * read the poison that the last rows have not yet appended). */
static void test_rope_attention_mixed(void **state) {
  (void)state;
  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  const mixed_case cases[] = {
      {{24, 8, 128, 300, 6, 9, 9, FDY_DTYPE_F32, false}, 5, 7, false},
      {{32, 8, 128, 600, 9, 12, 11, FDY_DTYPE_F32, false}, 5, 254, false},
      {{8, 2, 64, 64, 4, 10, 10, FDY_DTYPE_F32, false}, 8, 0, false},
      {{20, 2, 36, 100, 4, 7, 7, FDY_DTYPE_F32, false}, 5, 7, false},
      {{32, 8, 64, 512, 93, 96, 96, FDY_DTYPE_F32, false}, 5, 7, true},
  };
  for (int i = 0; i < 2; i++) {
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
      mixed_case m = cases[n];
      m.c.cache = caches[i];
      run_mixed_case("mixed", &m);
    }
  }
}

/* The one-row ATTENTION needs its workspace: without one, or with one too
 * small, the launch fails with FDY_ERR_INVALID_ARGUMENT naming it, and
 * queues nothing. A prefill whose tiles do not fit a block's shared memory
 * (head_dim 1024) is not supported, and its launch says so. */
static void test_attention_workspace_refused(void **state) {
  (void)state;
  fdy_backend *b = gpu.b;
  fdy_op op = {.kind = FDY_OP_ATTENTION, .input_count = 6, .output_count = 1};
  op.params.attention.heads = 4;
  op.params.attention.kv_heads = 2;
  op.params.attention.head_dim = 64;
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 256));
  op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 128));
  op.inputs[3] = op.inputs[2];
  op.inputs[4] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 100, 128));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = op.inputs[1];
  uint64_t need = b->ops->workspace_bytes(b, &op);
  /* 2 chunks of 64 positions x 4 heads: (m, l), then 64 floats */
  assert_int_equal(need,
                   2 * 4 * 2 * sizeof(float) + 2 * 4 * 64 * sizeof(float));
  fdy_error err;
  fdy_backend_buffer *buf = NULL;
  const uint64_t bytes = 1 << 20;
  assert_int_equal(b->ops->buffer_alloc(b, bytes, &buf, &err), FDY_OK);
  for (uint32_t i = 0; i < 7; i++) { /* 64 KiB apart, the workspace after */
    operand(&op, i)->buffer = buf;
    operand(&op, i)->offset = (uint64_t)i << 16;
  }
  assert_int_equal(b->ops->launch(b, gpu.s, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "workspace");
  assert_int_equal(err.ids[0], 7);
  assert_int_equal(err.expected, need);
  assert_int_equal(err.actual, 0);
  print_message("  no workspace: %s\n", err.message);
  op.workspace =
      (fdy_tensor_view){buf, 7 << 16, FDY_DTYPE_U8, FDY_SHAPE(need - 4)};
  assert_int_equal(b->ops->launch(b, gpu.s, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.actual, need - 4);
  op.workspace.shape = FDY_SHAPE(need);
  op.workspace.offset = bytes - 256; /* reaches past the buffer */
  assert_int_equal(b->ops->launch(b, gpu.s, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "workspace");
  b->ops->buffer_release(b, buf);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);

  fdy_op wide = op;
  wide.params.attention.head_dim = 1024;
  wide.workspace = (fdy_tensor_view){0};
  wide.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(8, 4096));
  wide.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(8, 2048));
  wide.inputs[3] = wide.inputs[2];
  wide.inputs[4] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 100, 2048));
  wide.inputs[5] = wide.inputs[4];
  wide.outputs[0] = wide.inputs[1];
  assert_int_equal(fdy_op_check(&wide, NULL), FDY_OK);
  assert_false(b->ops->supports_op(b, &wide));
  assert_int_equal(b->ops->workspace_bytes(b, &wide), UINT64_MAX);
  assert_int_equal(b->ops->launch(b, gpu.s, &wide, &err), FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "attention");
}

/* ---- swiglu, add, last_row, argmax ------------------------------------------
 */

static void binary_case(fdy_op_kind kind, const char *label, uint32_t rows,
                        int32_t count, uint32_t n) {
  int32_t *step = make_step(count, 0, 0);
  float *a = random_floats((uint64_t)rows * n);
  float *b = random_floats((uint64_t)rows * n);
  for (uint64_t i = 0; i < (uint64_t)rows * n; i++) {
    a[i] *= 8.0f; /* gate values over the whole range of silu */
  }
  float *out = poisoned((uint64_t)rows * n);
  fdy_op op = {.kind = kind, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = op.inputs[1];
  op.outputs[0] = op.inputs[1];
  void *data[] = {step, a, b, out};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "%s %s [%u x %u], count %d",
           fdy_op_kind_name(kind), label, rows, n, count);
  if (active > 0) {
    expect_close(what, r.cpu[3], r.gpu[3], (uint64_t)active * n, ELEMENT_BOUND);
  }
  if (kind == FDY_OP_ADD && active > 0) {
    expect_same(what, r.cpu[3], r.gpu[3], sizeof(float) * active * n);
  }
  expect_untouched(what, r.gpu[3], active, rows, n);
  free_results(&r);
  free(step);
  free(a);
  free(b);
  free(out);
}

/* ADD_BIAS: x + bias (F32, F16 or BF16) per row; one F32 add, so bitwise
 * the CPU's. */
static void add_bias_case(const char *label, uint32_t rows, int32_t count,
                          uint32_t n, fdy_dtype dtype) {
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * n);
  void *bias = dtype == FDY_DTYPE_F32
                   ? (void *)random_floats(n)
                   : (void *)random_halves(n, dtype, true, -2);
  float *out = poisoned((uint64_t)rows * n);
  fdy_op op = {.kind = FDY_OP_ADD_BIAS, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(dtype, FDY_SHAPE(n));
  op.outputs[0] = op.inputs[1];
  void *data[] = {step, x, bias, out};
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160];
  snprintf(what, sizeof what, "add_bias %s [%u x %u] %s, count %d", label, rows,
           n, fdy_dtype_name(dtype), count);
  if (active > 0) {
    expect_close(what, r.cpu[3], r.gpu[3], (uint64_t)active * n, ELEMENT_BOUND);
    expect_same(what, r.cpu[3], r.gpu[3], sizeof(float) * active * n);
  }
  expect_untouched(what, r.gpu[3], active, rows, n);
  free_results(&r);
  free(step);
  free(x);
  free(bias);
  free(out);
}

static void last_row_case(const char *label, uint32_t rows, int32_t count,
                          uint32_t n) {
  int32_t *step = make_step(count, 7, 0);
  float *x = random_floats((uint64_t)rows * n);
  float *out = poisoned(n);
  fdy_op op = {.kind = FDY_OP_LAST_ROW, .input_count = 2, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, n));
  void *data[] = {step, x, out};
  results r = run_both(&op, data);
  char what[160];
  snprintf(what, sizeof what, "last_row %s [%u x %u], count %d", label, rows, n,
           count);
  uint32_t active = active_rows(count, rows);
  expect_same(what, r.cpu[2], r.gpu[2], sizeof(float) * n);
  if (active == 0) {
    assert_true(is_poison(r.gpu[2], n));
  } else {
    assert_memory_equal(r.gpu[2], x + (uint64_t)(active - 1) * n,
                        sizeof(float) * n);
  }
  free_results(&r);
  free(step);
  free(x);
  free(out);
}

/* Row 0 random; row 1 ties across the row (lowest index wins); row 2 NaN
 * first and ties; row 3 all equal; row 4 all NaN; row 5 +0 and -0 ties
 * below NaNs and -inf; further rows random. */
static void argmax_case(const char *label, uint32_t rows, uint32_t n) {
  float *x = random_floats((uint64_t)rows * n);
  if (rows >= 6) {
    x[n + n / 2] = 2.0f;
    x[n + n / 7] = 2.0f;
    x[n + n - 1] = 2.0f;
    x[2 * n + 0] = NAN;
    x[2 * n + n - 2] = 3.0f;
    x[2 * n + 9] = 3.0f;
    for (uint32_t i = 0; i < n; i++) {
      x[3 * n + i] = 0.5f;
      x[4 * n + i] = NAN;
      x[5 * n + i] = i % 3 == 0 ? NAN : -INFINITY;
    }
    x[5 * n + n / 3 + 1] = -0.0f;
    x[5 * n + n - 1] = 0.0f;
  }
  int32_t *out = poisoned(rows);
  fdy_op op = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  void *data[] = {x, out};
  results r = run_both(&op, data);
  char what[160];
  snprintf(what, sizeof what, "argmax %s [%u x %u]", label, rows, n);
  expect_same(what, r.cpu[1], r.gpu[1], sizeof(int32_t) * rows);
  if (rows >= 6) {
    const int32_t *g = r.gpu[1];
    assert_int_equal(g[1], n / 7);
    assert_int_equal(g[2], 9);
    assert_int_equal(g[3], 0);
    assert_int_equal(g[4], 0);
    assert_int_equal(g[5], n / 3 + 1);
  }
  free_results(&r);
  free(x);
  free(out);
}

/* The device splits a long row between blocks of ARGMAX_SPAN_ELEMENTS
 * (1024 16-byte loads) and the last block to finish reduces their winners
 * (ops_kernels.cu). Rows of `rows` x n with the maximum 4.0 placed at every
 * index of `at` in row r (equal values, so the lowest index must win
 * wherever the blocks that hold them finish), the rest random in [-1, 1);
 * each run also checks that the stream's block counter was left at zero by
 * the previous one (a wrong count would skip or repeat the final stage). */
#define ARGMAX_SPAN_ELEMENTS 4096

static void argmax_ties(const char *label, uint32_t rows, uint32_t n,
                        const uint32_t *at, uint32_t at_count) {
  float *x = random_floats((uint64_t)rows * n);
  int32_t *expected = checked_malloc(sizeof(int32_t) * rows);
  for (uint32_t r = 0; r < rows; r++) {
    expected[r] = INT32_MAX;
    for (uint32_t k = 0; k < at_count; k++) {
      uint32_t i = (at[k] + r) % n; /* a different tie in every row */
      x[(uint64_t)r * n + i] = 4.0f;
      expected[r] = (int32_t)i < expected[r] ? (int32_t)i : expected[r];
    }
  }
  int32_t *out = poisoned(rows);
  fdy_op op = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  void *data[] = {x, out};
  results r = run_both(&op, data);
  char what[160];
  snprintf(what, sizeof what, "argmax ties %s [%u x %u]", label, rows, n);
  expect_same(what, r.cpu[1], r.gpu[1], sizeof(int32_t) * rows);
  for (uint32_t i = 0; i < rows; i++) {
    assert_int_equal(((const int32_t *)r.gpu[1])[i], expected[i]);
  }
  free_results(&r);
  free(x);
  free(expected);
  free(out);
}

/* Ties on both sides of block boundaries: the last element of one block
 * and the first of the next, in the first and the last block of a row, in
 * llama-3.2-3b's vocabulary (32 blocks a row), in a row cut into the most
 * blocks (64) that each take two spans, in rows whose width is not a
 * multiple of 4 (one float per load), and more rows (20) than the final
 * stage's warps; then one block a row (short rows). */
static void test_argmax_blocks(void **state) {
  (void)state;
  const uint32_t s = ARGMAX_SPAN_ELEMENTS;
  const uint32_t vocab_ties[] = {31 * s + 5, 8 * s, 8 * s - 1, 128255, s};
  argmax_ties("vocab", 3, 128256, vocab_ties, 5);
  argmax_ties("vocab", 1, 128256, vocab_ties + 3, 2);
  const uint32_t wide_ties[] = {64 * s + 17, 127 * s, 100 * s + 3, 64 * s + 18};
  argmax_ties("two spans a block", 2, 128 * s, wide_ties, 4);
  const uint32_t odd_ties[] = {40000, 1024, 1023, 3 * 1024 + 7};
  argmax_ties("not a multiple of 4", 2, 40001, odd_ties, 4);
  const uint32_t many_ties[] = {s - 1, s, 2 * s - 1};
  argmax_ties("rows > warps", 20, 2 * s + 3 * 4, many_ties, 3);
  const uint32_t short_ties[] = {3, 1000, 4095};
  argmax_ties("one block", 9, s, short_ties, 3);
}

/* ---- sample ---------------------------------------------------------------
 */

/* SAMPLE on random logits ([rows x n], count active rows, the output
 * poisoned) with parameters cycling through greedy, top_k 1, plain
 * temperatures, top_k, top_p, min_p, their mix and invalid values: the
 * device ids equal the CPU's, rows past the count stay poisoned. Several
 * rounds of counters. */
static void sample_case(const char *label, uint32_t rows, int32_t count,
                        uint32_t n) {
  static const fdy_sample_params kinds[] = {
      {0.0f, 0, 1.0f, 0.0f, 1},    {1.0f, 1, 1.0f, 0.0f, 2},
      {1.0f, 0, 1.0f, 0.0f, 3},    {0.6f, 0, 0.0f, 0.0f, 4},
      {1.2f, 50, 1.0f, 0.0f, 5},   {1.0f, 0, 0.9f, 0.0f, 6},
      {0.8f, 0, 1.0f, 0.05f, 7},   {1.1f, 40, 0.95f, 0.02f, 8},
      {2.0f, 3000, 0.5f, 0.0f, 9}, {-1.0f, 0, 1.0f, 0.0f, 10},
      {1.0f, 0, 1.5f, 0.0f, 11},   {5.0f, 0, 0.99f, 0.0f, 12},
  };
  const uint32_t kind_count = sizeof kinds / sizeof kinds[0];
  float *x = random_floats((uint64_t)rows * n);
  for (uint64_t i = 0; i < (uint64_t)rows * n; i += 97) {
    x[i] = x[i + 1 < (uint64_t)rows * n ? i + 1 : i]; /* some ties */
  }
  uint32_t *params =
      checked_malloc(sizeof(uint32_t) * rows * FDY_SAMPLE_FIELDS);
  int32_t *step = make_step(count, 0, 1);
  int32_t *out = poisoned(rows);
  fdy_op op = {.kind = FDY_OP_SAMPLE, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(rows, FDY_SAMPLE_FIELDS));
  op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(rows));
  for (uint32_t round = 0; round < 3; round++) {
    for (uint32_t r = 0; r < rows; r++) {
      fdy_sample_set_row(params, r, &kinds[(r + round) % kind_count],
                         round * 1000 + r);
    }
    void *data[] = {step, x, params, out};
    results res = run_both(&op, data);
    char what[160];
    snprintf(what, sizeof what, "sample %s [%u x %u] round %u", label, rows, n,
             round);
    uint32_t active = active_rows(count, rows);
    expect_same(what, res.cpu[3], res.gpu[3], sizeof(int32_t) * active);
    assert_true(is_poison((const int32_t *)res.gpu[3] + active, rows - active));
    free_results(&res);
  }
  free(x);
  free(params);
  free(step);
  free(out);
}

/* Short rows, rows not a multiple of a chunk, a vocabulary's rows (one
 * and a decode batch), and a count below the rows. */
static void test_sample_equals_cpu(void **state) {
  (void)state;
  sample_case("short", 12, 12, 7);
  sample_case("odd", 13, 10, 40001);
  sample_case("vocab", 1, 1, 128256);
  sample_case("vocab batch", 12, 12, 128256);
}

/* ---- every op on one model's shapes
 * -------------------------------------------
 */

/* Prefill (64 rows, 50 active, and all 64) and decode (1 row) of every op
 * of a decoder layer and the head; matmuls with group `group` and `dtype`
 * (the model's unless overridden). */
static void model_ops(const model_shape *m, bool lm_head_prefill) {
  const uint32_t prefill = 64;
  const int32_t partial = 50;
  print_message("%s: hidden %u, heads %u/%u, head_dim %u, ffn %u, vocab %u, "
                "g%u %s\n",
                m->name, m->hidden, m->heads, m->kv_heads, m->head_dim, m->ffn,
                m->vocab, m->group, fdy_dtype_name(m->dtype));
  uint32_t q_dim = m->heads * m->head_dim, kv_dim = m->kv_heads * m->head_dim;

  q4_matrix embed = q4_random(m->vocab, m->hidden, m->group, m->dtype);
  embed_case(m->name, &embed, prefill, partial);
  embed_case(m->name, &embed, 1, 1);
  rmsnorm_case(m->name, prefill, partial, m->hidden, m->dtype);
  rmsnorm_case(m->name, 1, 1, m->hidden, m->dtype);

  const struct {
    const char *name;
    uint32_t out, in;
  } projections[] = {
      {"q", q_dim, m->hidden},     {"k/v", kv_dim, m->hidden},
      {"o", m->hidden, q_dim},     {"gate/up", m->ffn, m->hidden},
      {"down", m->hidden, m->ffn},
  };
  for (size_t i = 0; i < sizeof projections / sizeof projections[0]; i++) {
    q4_matrix w =
        q4_random(projections[i].out, projections[i].in, m->group, m->dtype);
    char label[96];
    snprintf(label, sizeof label, "%s %s", m->name, projections[i].name);
    matmul_case(label, &w, prefill, partial);
    matmul_case(label, &w, 1, 1);
    q4_free(&w);
  }
  char head[96];
  snprintf(head, sizeof head, "%s lm_head (the tied embedding)", m->name);
  matmul_case(head, &embed, 1, 1);
  if (lm_head_prefill) {
    matmul_case(head, &embed, prefill, prefill);
  }
  q4_free(&embed);

  rope_case(m->name, prefill, partial, m->prefill_position, m->heads,
            m->head_dim, m->llama3, false);
  rope_case(m->name, prefill, partial, m->prefill_position, m->kv_heads,
            m->head_dim, m->llama3, false);
  rope_case(m->name, prefill, partial, 0, m->kv_heads, m->head_dim, m->llama3,
            true);
  rope_case(m->name, 1, 1, m->decode_position, m->heads, m->head_dim, m->llama3,
            false);

  const fdy_dtype caches[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  for (int i = 0; i < 2; i++) {
    attention_case prefill_case = {
        m->heads, m->kv_heads, m->head_dim,         m->context,
        prefill,  partial,     m->prefill_position, caches[i]};
    attention_case decode_case = {m->heads,           m->kv_heads, m->head_dim,
                                  m->context,         1,           1,
                                  m->decode_position, caches[i]};
    run_attention_case(m->name, &prefill_case);
    run_attention_case(m->name, &decode_case);
  }

  binary_case(FDY_OP_SWIGLU, m->name, prefill, partial, m->ffn);
  binary_case(FDY_OP_SWIGLU, m->name, 1, 1, m->ffn);
  binary_case(FDY_OP_ADD, m->name, prefill, partial, m->hidden);
  binary_case(FDY_OP_ADD, m->name, 1, 1, m->hidden);
  last_row_case(m->name, prefill, partial, m->hidden);
  last_row_case(m->name, prefill, partial, m->vocab);
  argmax_case(m->name, 1, m->vocab);
  argmax_case(m->name, 6, m->vocab);
}

static void test_fixture_shapes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof fixture_shapes / sizeof fixture_shapes[0];
       i++) {
    model_ops(&fixture_shapes[i], true);
  }
}

/* The ops the families add at their shapes (ADD_BIAS on q, k and v,
 * RMSNORM of q and k per head), prefill (64 rows, 50 active) and decode (1
 * row). */
static void family_ops(const model_shape *m) {
  uint32_t q_dim = m->heads * m->head_dim, kv_dim = m->kv_heads * m->head_dim;
  add_bias_case(m->name, 64, 50, q_dim, m->dtype);
  add_bias_case(m->name, 64, 50, kv_dim, m->dtype);
  add_bias_case(m->name, 1, 1, q_dim, m->dtype);
  add_bias_case(m->name, 1, 1, kv_dim, m->dtype);
  head_rmsnorm_case(m->name, 64, 50, m->heads, m->head_dim, m->dtype);
  head_rmsnorm_case(m->name, 64, 50, m->kv_heads, m->head_dim, m->dtype);
  head_rmsnorm_case(m->name, 1, 1, m->heads, m->head_dim, m->dtype);
  head_rmsnorm_case(m->name, 1, 1, m->kv_heads, m->head_dim, m->dtype);
}

/* Every op at the families' shapes (the LM head as a GEMV only), then the
 * families' own ops; ADD_BIAS and per-head RMSNORM also at odd widths and
 * counts and with F16 and F32 weights. */
static void test_family_shapes(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof family_shapes / sizeof family_shapes[0]; i++) {
    model_ops(&family_shapes[i], false);
    family_ops(&family_shapes[i]);
  }
  add_bias_case("odd", 7, 5, 321, FDY_DTYPE_F16);
  add_bias_case("odd", 7, 100, 70, FDY_DTYPE_F32);
  add_bias_case("odd", 7, 0, 64, FDY_DTYPE_BF16);
  add_bias_case("odd", 7, -2, 64, FDY_DTYPE_BF16);
  head_rmsnorm_case("odd", 7, 5, 3, 36, FDY_DTYPE_F16); /* not vec4 */
  head_rmsnorm_case("odd", 7, 100, 5, 40, FDY_DTYPE_F32);
  head_rmsnorm_case("odd", 7, 0, 4, 64, FDY_DTYPE_BF16);
  head_rmsnorm_case("odd", 3, 2, 2, 4100, FDY_DTYPE_BF16); /* long heads */
}

/* llama-3.2-3b: every op as above (the LM head as a GEMV only), then the
 * projections again with group 32 BF16 scales. */
static void test_llama32_3b_shapes(void **state) {
  (void)state;
  if (small_shapes()) {
    skip();
  }
  model_ops(&llama32_3b, false);
  const model_shape *m = &llama32_3b;
  q4_matrix q =
      q4_random(m->heads * m->head_dim, m->hidden, 32, FDY_DTYPE_BF16);
  matmul_case("llama-3.2-3b q", &q, 64, 64);
  matmul_case("llama-3.2-3b q", &q, 1, 1);
  q4_free(&q);
  q4_matrix down = q4_random(m->hidden, m->ffn, 32, FDY_DTYPE_BF16);
  matmul_case("llama-3.2-3b down", &down, 64, 64);
  matmul_case("llama-3.2-3b down", &down, 1, 1);
  q4_free(&down);
  q4_matrix head = q4_random(m->vocab, m->hidden, 32, FDY_DTYPE_BF16);
  matmul_case("llama-3.2-3b lm_head", &head, 1, 1);
  embed_case("llama-3.2-3b", &head, 8, 8);
  q4_free(&head);
}

/* The decode GEMV (one row of x) at every projection shape of
 * llama-3.2-3b (q/o, k/v, gate/up, down, the LM head) with every group size
 * and both scale dtypes; at widths around its items (a part of a row is
 * 2048 inputs with 2 rows per warp, 1024 with 4): one chunk past 4096, a
 * single chunk, fewer rows than warps; with 4 rows per warp (16384 rows and
 * more) and a last group of 3 rows; and the widest one-row x that
 * supports_op accepts. */
static void test_gemv_shapes(void **state) {
  (void)state;
  const struct {
    const char *name;
    uint32_t out, in;
    bool large; /* skipped with FOUNDRY_CUDA_OPS_SMALL=1 */
  } shapes[] = {
      {"llama-3.2-3b q/o", 3072, 3072, true},
      {"llama-3.2-3b k/v", 1024, 3072, true},
      {"llama-3.2-3b gate/up", 8192, 3072, true},
      {"llama-3.2-3b down", 3072, 8192, true},
      {"llama-3.2-3b lm_head", 128256, 3072, true},
      {"in 4224 out 1000", 1000, 4224, false},
      {"in 4096 out 3", 3, 4096, false},
      {"in 128 out 1", 1, 128, false},
      {"in 256 out 16387", 16387, 256, false},
      /* the last launch of 16-warp blocks and the first of 8 (gemv_warps) */
      {"in 1024 out 6144 (384 tiles)", 6144, 1024, false},
      {"in 1024 out 6160 (385 tiles)", 6160, 1024, false},
  };
  const uint32_t groups[] = {32, 64, 128};
  const fdy_dtype dtypes[] = {FDY_DTYPE_F16, FDY_DTYPE_BF16};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    if (shapes[i].large && small_shapes()) {
      continue;
    }
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
      for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        q4_matrix w =
            q4_random(shapes[i].out, shapes[i].in, groups[g], dtypes[d]);
        matmul_case(shapes[i].name, &w, 1, 1);
        q4_free(&w);
      }
    }
  }
  /* x of one row lives in shared memory, 4.625 bytes per input (227 KiB a
   * block on an H200: about 50,000 inputs); the tiled kernel has no such
   * limit */
  fdy_op wide = {.kind = FDY_OP_MATMUL_Q4, .input_count = 5, .output_count = 1};
  wide.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  wide.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 65536));
  wide.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(16, 65536 / 8));
  wide.inputs[3] = view(FDY_DTYPE_F16, FDY_SHAPE(16, 65536 / 64));
  wide.inputs[4] = wide.inputs[3];
  wide.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 16));
  assert_false(gpu.b->ops->supports_op(gpu.b, &wide));
  wide.inputs[1].shape = FDY_SHAPE(2, 65536);
  wide.outputs[0].shape = FDY_SHAPE(2, 16);
  assert_true(gpu.b->ops->supports_op(gpu.b, &wide));
  wide.inputs[1].shape = FDY_SHAPE(1, 40960);
  wide.inputs[2].shape = FDY_SHAPE(16, 40960 / 8);
  wide.inputs[3].shape = FDY_SHAPE(16, 40960 / 64);
  wide.inputs[4] = wide.inputs[3];
  wide.outputs[0].shape = FDY_SHAPE(1, 16);
  assert_true(gpu.b->ops->supports_op(gpu.b, &wide));

  q4_matrix one_chunk = q4_random(70, 32, 32, FDY_DTYPE_BF16);
  matmul_case("in 32 out 70", &one_chunk, 1, 1);
  matmul_case("in 32 out 70", &one_chunk, 1, -3);
  q4_free(&one_chunk);

  /* The one-row kernel scales x by a power of two and splits it into F16
   * hi + lo: x far above F16's range (and tiny values beside it), x far
   * below it, x beyond 65504 only, and x of zeros (zeros out, bitwise) */
  q4_matrix range = q4_random(100, 512, 64, FDY_DTYPE_F16);
  float *x = random_floats(512);
  x[3] = 1e30f;
  x[100] = -3e29f;
  x[200] = 1e-30f;
  x[300] = 7e-38f;
  matmul_x_case("x up to 1e30", &range, 1, 1, x);
  for (int i = 0; i < 512; i++) {
    x[i] = (float)((i % 7) - 3) * 1e-20f + (float)(i % 5) * 3e-21f;
  }
  matmul_x_case("x about 1e-20", &range, 1, 1, x);
  for (int i = 0; i < 512; i++) {
    x[i] = (float)((i * 37) % 101 - 50) * 4000.0f;
  }
  matmul_x_case("x up to 2e5", &range, 1, 1, x);
  memset(x, 0, 512 * sizeof(float));
  matmul_x_case("x of zeros", &range, 1, 1, x);
  free(x);
  q4_free(&range);
}

/* ---- fused decode kinds -----------------------------------------------------
 */

/* A NORM_SWIGLU_Q4 op of x [rows, w->in] (norm weights of w's dtype) with
 * gate and up shaped like w, unbound. */
static fdy_op norm_swiglu_unbound(const q4_matrix *w, uint32_t rows) {
  fdy_op op = {
      .kind = FDY_OP_NORM_SWIGLU_Q4, .input_count = 9, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->in));
  op.inputs[2] = view(w->dtype, FDY_SHAPE(w->in));
  op.params.rmsnorm.eps = 1e-5;
  for (uint32_t j = 0; j < 2; j++) {
    op.inputs[3 + 3 * j] = view(FDY_DTYPE_U32, FDY_SHAPE(w->out, w->in / 8));
    op.inputs[4 + 3 * j] = view(w->dtype, FDY_SHAPE(w->out, w->in / w->group));
    op.inputs[5 + 3 * j] = op.inputs[4 + 3 * j];
  }
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->out));
  return op;
}

/* A NORM_MATMUL_Q4 op of x [rows, w->in] (norm weights of w's dtype) and
 * the one weight w, unbound. */
static fdy_op norm_matmul_unbound(const q4_matrix *w, uint32_t rows) {
  fdy_op op = {
      .kind = FDY_OP_NORM_MATMUL_Q4, .input_count = 6, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->in));
  op.inputs[2] = view(w->dtype, FDY_SHAPE(w->in));
  op.inputs[3] = view(FDY_DTYPE_U32, FDY_SHAPE(w->out, w->in / 8));
  op.inputs[4] = view(w->dtype, FDY_SHAPE(w->out, w->in / w->group));
  op.inputs[5] = op.inputs[4];
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->out));
  op.params.rmsnorm.eps = 1e-5;
  return op;
}

/* x of `rows` rows and its norm weight, q4 matrices a (for NORM_MATMUL_Q4
 * and MATMUL_ADD_Q4), b and c of one shape (b, c as gate and up), all over
 * `in` inputs; a residual shaped like a's output. One row runs on the
 * GEMV (REDUCTION_BOUND), several on the tensor cores (MMA_BOUND). */
static void fused_case(const char *label, uint32_t rows, uint32_t in,
                       uint32_t out_a, uint32_t out_bc, uint32_t group,
                       fdy_dtype dtype, int32_t count) {
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * in);
  uint16_t *norm = random_halves(in, dtype, false, -1);
  float *residual = random_floats((uint64_t)rows * out_a);
  q4_matrix m[3] = {q4_random(out_a, in, group, dtype),
                    q4_random(out_bc, in, group, dtype),
                    q4_random(out_bc, in, group, dtype)};
  uint32_t active = active_rows(count, rows);
  double bound = rows > 1 ? MMA_BOUND : REDUCTION_BOUND;
  char what[160];
  /* NORM_MATMUL_Q4 of 3 and of 1 weights */
  const uint32_t weight_counts[2] = {3, 1};
  for (size_t w = 0; w < 2; w++) {
    uint32_t weights = weight_counts[w];
    fdy_op op = {.kind = FDY_OP_NORM_MATMUL_Q4,
                 .input_count = 3 + 3 * weights,
                 .output_count = weights};
    void *data[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {step, x, norm};
    op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, in));
    op.inputs[2] = view(dtype, FDY_SHAPE(in));
    op.params.rmsnorm.eps = 1e-5;
    for (uint32_t j = 0; j < weights; j++) {
      op.inputs[3 + 3 * j] = view(FDY_DTYPE_U32, FDY_SHAPE(m[j].out, in / 8));
      op.inputs[4 + 3 * j] = view(dtype, FDY_SHAPE(m[j].out, in / group));
      op.inputs[5 + 3 * j] = op.inputs[4 + 3 * j];
      op.outputs[j] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, m[j].out));
      data[3 + 3 * j] = m[j].words;
      data[4 + 3 * j] = m[j].scales;
      data[5 + 3 * j] = m[j].biases;
      data[op.input_count + j] = poisoned((uint64_t)rows * m[j].out);
    }
    results r = run_both(&op, data);
    for (uint32_t j = 0; j < weights; j++) {
      uint32_t o = op.input_count + j;
      snprintf(what, sizeof what,
               "norm_matmul_q4 %s [%u x %u] out%u %u g%u %s, %d", label, rows,
               in, j, m[j].out, group, fdy_dtype_name(dtype), count);
      if (active > 0) {
        expect_close(what, r.cpu[o], r.gpu[o], (uint64_t)active * m[j].out,
                     bound);
      }
      expect_untouched(what, r.gpu[o], active, rows, m[j].out);
      free(data[o]);
    }
    free_results(&r);
  }
  /* NORM_SWIGLU_Q4: b and c as gate and up */
  fdy_op op = norm_swiglu_unbound(&m[1], rows);
  float *act = poisoned((uint64_t)rows * out_bc);
  void *swiglu_data[] = {step,        x,           norm,       m[1].words,
                         m[1].scales, m[1].biases, m[2].words, m[2].scales,
                         m[2].biases, act};
  results r = run_both(&op, swiglu_data);
  snprintf(what, sizeof what, "norm_swiglu_q4 %s [%u x %u] out %u g%u %s, %d",
           label, rows, in, out_bc, group, fdy_dtype_name(dtype), count);
  if (active > 0) {
    expect_close(what, r.cpu[9], r.gpu[9], (uint64_t)active * out_bc, bound);
  }
  expect_untouched(what, r.gpu[9], active, rows, out_bc);
  free_results(&r);
  /* MATMUL_ADD_Q4: residual + x A^T */
  op = (fdy_op){
      .kind = FDY_OP_MATMUL_ADD_Q4, .input_count = 6, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, in));
  op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(out_a, in / 8));
  op.inputs[3] = view(dtype, FDY_SHAPE(out_a, in / group));
  op.inputs[4] = op.inputs[3];
  op.inputs[5] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, out_a));
  op.outputs[0] = op.inputs[5];
  float *sum = poisoned((uint64_t)rows * out_a);
  void *add_data[] = {step,        x,        m[0].words, m[0].scales,
                      m[0].biases, residual, sum};
  r = run_both(&op, add_data);
  snprintf(what, sizeof what, "matmul_add_q4 %s [%u x %u] out %u g%u %s, %d",
           label, rows, in, out_a, group, fdy_dtype_name(dtype), count);
  if (active > 0) {
    expect_close(what, r.cpu[6], r.gpu[6], (uint64_t)active * out_a, bound);
  }
  expect_untouched(what, r.gpu[6], active, rows, out_a);
  free_results(&r);
  for (uint32_t j = 0; j < 3; j++) {
    q4_free(&m[j]);
  }
  free(step);
  free(x);
  free(norm);
  free(residual);
  free(act);
  free(sum);
}

/* llama-3.2-3b's decode layer (q 3072 with k, v 1024 from hidden 3072;
 * gate/up 8192; down 8192 -> 3072 and o 3072 -> 3072 with the residual),
 * the fixtures' widths, a short last block (in 96, group 32); odd row
 * counts, where a warp's group of 2 or 4 rows ends past the last row or
 * spans two matrices, with 2 rows per warp (37 + 5 + 5) and with 4 (16385
 * and 16387 rows: every fused flag); the final norm with the LM head
 * (128256 rows) and 33805 rows (a partial last tile), many tiles a block. */
static void test_fused_shapes(void **state) {
  (void)state;
  const uint32_t groups[] = {32, 64, 128};
  const fdy_dtype dtypes[] = {FDY_DTYPE_F16, FDY_DTYPE_BF16};
  for (size_t g = 0; g < 3; g++) {
    for (size_t d = 0; d < 2; d++) {
      if (!small_shapes()) {
        fused_case("llama-3.2-3b attention", 1, 3072, 3072, 1024, groups[g],
                   dtypes[d], 1);
        fused_case("llama-3.2-3b mlp", 1, 3072, 3072, 8192, groups[g],
                   dtypes[d], 1);
        fused_case("llama-3.2-3b down", 1, 8192, 3072, 3072, groups[g],
                   dtypes[d], 1);
      }
      fused_case("fixture", 1, 256, 256, 64, groups[g], dtypes[d], 1);
    }
  }
  fused_case("short block", 1, 96, 40, 24, 32, FDY_DTYPE_BF16, 1);
  fused_case("count 0", 1, 256, 256, 64, 64, FDY_DTYPE_F16, 0);
  fused_case("odd rows", 1, 96, 37, 5, 32, FDY_DTYPE_F16, 1);
  fused_case("wide a", 1, 128, 16385, 3, 32, FDY_DTYPE_BF16, 1);
  fused_case("wide gate/up", 1, 64, 5, 16387, 64, FDY_DTYPE_F16, 1);
  if (!small_shapes()) {
    fused_case("llama-3.2-3b final norm + lm_head", 1, 3072, 128256, 64, 64,
               FDY_DTYPE_F16, 1);
    fused_case("many tiles, odd rows", 1, 3072, 33805, 40, 32, FDY_DTYPE_BF16,
               1);
  }
}

/* The fused kinds at prefill: 512 rows of the llama-3.2-3b layer (q, k,
 * v with the norm; o and down with the residual; gate and up with the
 * norm and SwiGLU) at counts 512 and 500, group 64 F16, 32 BF16 and 128
 * F16; ragged shapes: 3040 inputs (a last k-block of 32), odd outputs
 * (3001, 2999: last tiles partly past the outputs, gate's and up's last 8
 * rows partly missing) at 300 rows with a count of 257; 70 rows with
 * outputs 37, 43 and 1056 inputs (the inputs split 4 ways: the partial
 * sums of three matrices, and of gate and up interleaved); 7 rows; a count
 * of 0 (outputs untouched). */
static void test_prefill_fused(void **state) {
  (void)state;
  if (!small_shapes()) {
    fused_case("3b attention", 512, 3072, 3072, 1024, 64, FDY_DTYPE_F16, 512);
    fused_case("3b attention", 512, 3072, 3072, 1024, 64, FDY_DTYPE_F16, 500);
    fused_case("3b attention", 512, 3072, 3072, 1024, 32, FDY_DTYPE_BF16, 512);
    fused_case("3b attention", 512, 3072, 3072, 1024, 128, FDY_DTYPE_F16, 65);
    fused_case("3b mlp", 512, 3072, 3072, 8192, 64, FDY_DTYPE_F16, 512);
    fused_case("3b mlp", 512, 3072, 3072, 8192, 32, FDY_DTYPE_BF16, 500);
    fused_case("3b down", 512, 8192, 3072, 3072, 64, FDY_DTYPE_F16, 512);
    fused_case("3b down", 512, 8192, 3072, 3072, 128, FDY_DTYPE_F16, 511);
    fused_case("ragged", 300, 3040, 3001, 2999, 32, FDY_DTYPE_BF16, 257);
  }
  fused_case("split", 70, 1056, 37, 43, 32, FDY_DTYPE_BF16, 70);
  fused_case("split", 70, 1024, 37, 43, 128, FDY_DTYPE_F16, 69);
  fused_case("odd rows", 70, 96, 37, 5, 32, FDY_DTYPE_F16, 69);
  fused_case("7 rows", 7, 256, 256, 64, 64, FDY_DTYPE_F16, 7);
  fused_case("count 0", 64, 256, 256, 64, 64, FDY_DTYPE_F16, 0);
}

/* An element-wise op (ADD or SWIGLU) of [rows, n] operands, unbound. */
static fdy_op binary_unbound(fdy_op_kind kind, uint32_t rows, uint32_t n) {
  fdy_op op = {.kind = kind, .input_count = 3, .output_count = 1};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, n));
  op.inputs[2] = op.inputs[1];
  op.outputs[0] = op.inputs[1];
  return op;
}

/* On the GPU the fused kinds of several rows give the unfused ops' bits
 * where both take the same block shape and split (512 rows of
 * llama-3.2-3b, count 500): NORM_MATMUL_Q4 of q = RMSNORM then MATMUL_Q4
 * (the normed row is RMSNORM's, then the same F16 conversion and sums);
 * NORM_SWIGLU_Q4 = RMSNORM, MATMUL_Q4 of gate and of up, SWIGLU (gate's
 * 8192 rows and the 16384 interleaved tile rows both take the 128 x 64
 * tiles, one split); MATMUL_ADD_Q4 of down = MATMUL_Q4 then ADD. */
static void test_prefill_fused_bitwise(void **state) {
  (void)state;
  if (small_shapes()) {
    skip();
  }
  const uint32_t rows = 512, hidden = 3072, ffn = 8192;
  const int32_t count = 500;
  const uint64_t active = 500;
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * hidden);
  float *h = random_floats((uint64_t)rows * ffn);
  float *residual = random_floats((uint64_t)rows * hidden);
  uint16_t *norm = random_halves(hidden, FDY_DTYPE_F16, false, -1);
  q4_matrix q = q4_random(hidden, hidden, 64, FDY_DTYPE_F16);
  q4_matrix gate = q4_random(ffn, hidden, 64, FDY_DTYPE_F16);
  q4_matrix up = q4_random(ffn, hidden, 64, FDY_DTYPE_F16);
  q4_matrix down = q4_random(hidden, ffn, 64, FDY_DTYPE_F16);
  float *normed = poisoned((uint64_t)rows * hidden);
  float *ref = poisoned((uint64_t)rows * ffn);
  float *ref_up = poisoned((uint64_t)rows * ffn);
  float *got = poisoned((uint64_t)rows * ffn);

  fdy_op op = {.kind = FDY_OP_RMSNORM, .input_count = 3, .output_count = 1};
  op.params.rmsnorm.eps = 1e-5;
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  op.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(hidden));
  op.outputs[0] = op.inputs[1];
  void *norm_data[] = {step, x, norm, normed};
  run_on(&gpu, &op, norm_data);

  /* q */
  op = matmul_unbound(&q, rows);
  void *q_data[] = {step, normed, q.words, q.scales, q.biases, ref};
  run_on(&gpu, &op, q_data);
  fdy_op fused = {
      .kind = FDY_OP_NORM_MATMUL_Q4, .input_count = 6, .output_count = 1};
  fused.params.rmsnorm.eps = 1e-5;
  fused.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  fused.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  fused.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(hidden));
  fused.inputs[3] = op.inputs[2];
  fused.inputs[4] = op.inputs[3];
  fused.inputs[5] = op.inputs[4];
  fused.outputs[0] = op.outputs[0];
  void *fq_data[] = {step, x, norm, q.words, q.scales, q.biases, got};
  run_on(&gpu, &fused, fq_data);
  expect_same("norm_matmul_q4 q = rmsnorm, matmul_q4 (gpu, 500 of 512 rows)",
              ref, got, sizeof(float) * active * hidden);

  /* gate, up, swiglu */
  op = matmul_unbound(&gate, rows);
  void *gate_data[] = {step, normed, gate.words, gate.scales, gate.biases, ref};
  run_on(&gpu, &op, gate_data);
  void *up_data[] = {step, normed, up.words, up.scales, up.biases, ref_up};
  run_on(&gpu, &op, up_data);
  op = binary_unbound(FDY_OP_SWIGLU, rows, ffn);
  void *swiglu_data[] = {step, ref, ref_up, ref};
  run_on(&gpu, &op, swiglu_data);
  fused.kind = FDY_OP_NORM_SWIGLU_Q4;
  fused.input_count = 9;
  fused.inputs[3] = view(FDY_DTYPE_U32, FDY_SHAPE(ffn, hidden / 8));
  fused.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(ffn, hidden / 64));
  fused.inputs[5] = fused.inputs[4];
  fused.inputs[6] = fused.inputs[3];
  fused.inputs[7] = fused.inputs[4];
  fused.inputs[8] = fused.inputs[4];
  fused.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, ffn));
  void *fs_data[] = {step,        x,        norm,      gate.words, gate.scales,
                     gate.biases, up.words, up.scales, up.biases,  got};
  run_on(&gpu, &fused, fs_data);
  expect_same("norm_swiglu_q4 = rmsnorm, gate, up, swiglu (gpu)", ref, got,
              sizeof(float) * active * ffn);

  /* down + residual */
  op = matmul_unbound(&down, rows);
  void *down_data[] = {step, h, down.words, down.scales, down.biases, ref};
  run_on(&gpu, &op, down_data);
  op = binary_unbound(FDY_OP_ADD, rows, hidden);
  void *add_data[] = {step, residual, ref, ref};
  run_on(&gpu, &op, add_data);
  fdy_op add = matmul_unbound(&down, rows);
  add.kind = FDY_OP_MATMUL_ADD_Q4;
  add.input_count = 6;
  add.inputs[5] = add.outputs[0];
  void *fa_data[] = {step,        h,        down.words, down.scales,
                     down.biases, residual, got};
  run_on(&gpu, &add, fa_data);
  expect_same("matmul_add_q4 down = matmul_q4, add (gpu)", ref, got,
              sizeof(float) * active * hidden);

  q4_free(&q);
  q4_free(&gate);
  q4_free(&up);
  q4_free(&down);
  free(step);
  free(x);
  free(h);
  free(residual);
  free(norm);
  free(normed);
  free(ref);
  free(ref_up);
  free(got);
}

/* NORM_SWIGLU_Q4 of one row (the GEMV's items of gate and up together)
 * with gate and up of `out` rows over `in` inputs: against the CPU, and on
 * the GPU alone bitwise equal to NORM_MATMUL_Q4 of gate and up (the same
 * norm prologue, warps and order of every sum) then SWIGLU. */
static void decode_swiglu_case(uint32_t in, uint32_t out, uint32_t group,
                               fdy_dtype dtype) {
  int32_t *step = make_step(1, 0, 0);
  float *x = random_floats(in);
  uint16_t *norm = random_halves(in, dtype, false, -1);
  q4_matrix gate = q4_random(out, in, group, dtype);
  q4_matrix up = q4_random(out, in, group, dtype);
  float *act = poisoned(out);
  float *g = poisoned(out);
  float *u = poisoned(out);
  float *ref = poisoned(out);
  char what[160];
  snprintf(what, sizeof what, "norm_swiglu_q4 decode [1 x %u] out %u g%u %s",
           in, out, group, fdy_dtype_name(dtype));

  fdy_op op = norm_swiglu_unbound(&gate, 1);
  void *data[] = {step,        x,        norm,      gate.words, gate.scales,
                  gate.biases, up.words, up.scales, up.biases,  act};
  results r = run_both(&op, data);
  expect_close(what, r.cpu[9], r.gpu[9], out, REDUCTION_BOUND);

  fdy_op two = op;
  two.kind = FDY_OP_NORM_MATMUL_Q4;
  two.output_count = 2;
  two.outputs[1] = two.outputs[0];
  assert_int_equal(fdy_op_check(&two, NULL), FDY_OK);
  void *two_data[] = {step,        x,           norm,     gate.words,
                      gate.scales, gate.biases, up.words, up.scales,
                      up.biases,   g,           u};
  run_on(&gpu, &two, two_data);
  fdy_op act_op = binary_unbound(FDY_OP_SWIGLU, 1, out);
  assert_int_equal(fdy_op_check(&act_op, NULL), FDY_OK);
  void *act_data[] = {step, g, u, ref};
  run_on(&gpu, &act_op, act_data);
  snprintf(what, sizeof what,
           "norm_swiglu_q4 decode out %u g%u %s = norm_matmul_q4, swiglu", out,
           group, fdy_dtype_name(dtype));
  expect_same(what, ref, r.gpu[9], sizeof(float) * out);

  free_results(&r);
  q4_free(&gate);
  q4_free(&up);
  free(step);
  free(x);
  free(norm);
  free(act);
  free(g);
  free(u);
  free(ref);
}

/* NORM_SWIGLU_Q4 of one row: in 64 (one column step: warps without one),
 * 3072 (3 steps a warp of 8, odd; 2 or 1 a warp of 16) and 8192 (8; 4);
 * every group size and both scale dtypes; ragged outputs (a last tile of
 * 5, 8, 9 or 14 rows: rows g + 8 or g missing) on blocks of 16 warps (up
 * to 192 tiles: 5, 200, 1000 outputs) and of 8 (3077, 8190 and 9001
 * outputs: up to 3 tiles a block on 132 SMs). */
static void test_decode_swiglu(void **state) {
  (void)state;
  const uint32_t groups[] = {32, 64, 128};
  const fdy_dtype dtypes[] = {FDY_DTYPE_F16, FDY_DTYPE_BF16};
  for (size_t d = 0; d < 2; d++) {
    for (size_t g = 0; g < 3; g++) {
      if (groups[g] <= 64) {
        decode_swiglu_case(64, 5, groups[g], dtypes[d]);
        decode_swiglu_case(64, 9001, groups[g], dtypes[d]);
      }
      decode_swiglu_case(3072, 1000, groups[g], dtypes[d]);
      decode_swiglu_case(8192, 200, groups[g], dtypes[d]);
      if (!small_shapes()) {
        decode_swiglu_case(3072, 8190, groups[g], dtypes[d]);
        decode_swiglu_case(8192, 3077, groups[g], dtypes[d]);
      }
    }
  }
}

/* One row of x whose first 32 inputs are `huge` in magnitude and the rest
 * about 1e-3, against a matrix whose first group's scales and biases are
 * zero: the result is the small inputs' alone. The GEMV stages x with a
 * power-of-two scale per 32-input chunk (docs/tuning-log.md entry 47), so
 * the small chunks keep their precision beside the huge one; one scale
 * for the whole of x would flush them to zero in F16 (relative error 1).
 * MATMUL_Q4, and NORM_MATMUL_Q4 (RMSNorm first: the small chunks become
 * ~1e-3 / huge, still exact to the bound). */
static void chunk_scale_case(const char *label, uint32_t in, uint32_t out,
                             fdy_dtype dtype, float huge, bool norm) {
  const uint32_t group = 32;
  int32_t *step = make_step(1, 0, 0);
  float *x = random_floats(in);
  for (uint32_t i = 0; i < in; i++) {
    x[i] *= i < group ? huge : 1e-3f;
  }
  uint16_t *norm_weight = random_halves(in, dtype, false, -1);
  q4_matrix w = q4_random(out, in, group, dtype);
  for (uint32_t r = 0; r < out; r++) {
    w.scales[(uint64_t)r * (in / group)] = 0;
    w.biases[(uint64_t)r * (in / group)] = 0;
  }
  float *y = poisoned(out);
  const fdy_op op = norm ? norm_matmul_unbound(&w, 1) : matmul_unbound(&w, 1);
  void *plain[] = {step, x, w.words, w.scales, w.biases, y};
  void *normed[] = {step, x, norm_weight, w.words, w.scales, w.biases, y};
  results r = run_both(&op, norm ? normed : plain);
  const uint32_t o = op.input_count;
  char what[160];
  snprintf(what, sizeof what, "%s %s [1 x %u] out %u, chunk 0 %.0e %s",
           norm ? "norm_matmul_q4" : "matmul_q4", label, in, out, (double)huge,
           fdy_dtype_name(dtype));
  expect_close(what, r.cpu[o], r.gpu[o], out, REDUCTION_BOUND);
  free_results(&r);
  q4_free(&w);
  free(step);
  free(x);
  free(norm_weight);
  free(y);
}

/* chunk_scale_case on 16-warp (in 3072, out 64) and 8-warp blocks (in
 * 3072, out 8192: 512 tiles), both scale dtypes; x's largest chunk at
 * 1e30 (MATMUL_Q4) and 1e15 (NORM_MATMUL_Q4, whose float sum of squares
 * must stay finite). */
static void test_gemv_chunk_scales(void **state) {
  (void)state;
  const fdy_dtype dtypes[] = {FDY_DTYPE_F16, FDY_DTYPE_BF16};
  for (size_t d = 0; d < 2; d++) {
    chunk_scale_case("wide", 3072, 64, dtypes[d], 1e30f, false);
    chunk_scale_case("wide", 3072, 64, dtypes[d], 1e15f, true);
    chunk_scale_case("narrow", 3072, 8192, dtypes[d], 1e30f, false);
    chunk_scale_case("narrow", 3072, 8192, dtypes[d], 1e15f, true);
  }
}

/* Shapes off the models' grid: counts of 0, below 0 and above the rows,
 * widths that are not multiples of 4, outputs not a multiple of 64, inputs
 * not a multiple of 64 (group 32, also split over the inputs), a single-row
 * GEMV with a count of 0, attention over a cache whose end cuts the step, odd
 * head_dim. */
static void test_odd_shapes(void **state) {
  (void)state;
  q4_matrix w96 = q4_random(300, 96, 32, FDY_DTYPE_BF16);
  matmul_case("in 96 out 300", &w96, 7, 6);
  matmul_case("in 96 out 300", &w96, 7, 100);
  matmul_case("in 96 out 300", &w96, 1, 1);
  matmul_case("in 96 out 300", &w96, 7, 0);
  matmul_case("in 96 out 300", &w96, 1, 0);
  q4_free(&w96);
  q4_matrix w160 = q4_random(77, 160, 32, FDY_DTYPE_F16);
  matmul_case("in 160 out 77", &w160, 65, 65);
  matmul_case("in 160 out 77", &w160, 130, 129);
  matmul_case("in 160 out 77", &w160, 1, 1);
  q4_free(&w160);
  q4_matrix w512 = q4_random(130, 512, 128, FDY_DTYPE_F16);
  matmul_case("in 512 out 130 g128", &w512, 3, 2);
  matmul_case("in 512 out 130 g128", &w512, 1, 1);
  q4_free(&w512);
  /* 8 uneven splits of 33 k-blocks, the last one half past the inputs */
  q4_matrix w2080 = q4_random(77, 2080, 32, FDY_DTYPE_BF16);
  matmul_case("in 2080 out 77", &w2080, 65, 65);
  matmul_case("in 2080 out 77", &w2080, 7, 5);
  q4_free(&w2080);

  q4_matrix table = q4_random(50, 96, 32, FDY_DTYPE_F16);
  embed_case("vocab 50", &table, 6, 4);
  embed_case("vocab 50", &table, 6, -1);
  q4_free(&table);

  rmsnorm_case("odd", 7, 5, 321, FDY_DTYPE_BF16);
  rmsnorm_case("odd", 7, 100, 320, FDY_DTYPE_F16);
  rmsnorm_case("odd", 7, 0, 320, FDY_DTYPE_F16);
  /* rows longer than the 4096 values a block keeps in registers */
  rmsnorm_case("long", 3, 2, 8196, FDY_DTYPE_BF16);
  rmsnorm_case("long", 2, 2, 4100, FDY_DTYPE_F16);
  /* F32 norm weights (unquantized F32 checkpoints) */
  rmsnorm_case("f32 weight", 7, 5, 320, FDY_DTYPE_F32);
  rmsnorm_case("f32 weight", 7, 6, 321, FDY_DTYPE_F32);
  rmsnorm_case("f32 weight long", 3, 2, 8196, FDY_DTYPE_F32);
  rope_case("odd", 5, 4, 0, 3, 36, false, false);
  rope_case("odd", 5, 9, 37, 2, 64, true, false);
  rope_case("odd", 7, 6, 0, 3, 36, false, true);
  binary_case(FDY_OP_SWIGLU, "odd", 6, 5, 4999);
  binary_case(FDY_OP_ADD, "odd", 6, 5, 4999);
  binary_case(FDY_OP_ADD, "odd", 6, -2, 5000);
  last_row_case("odd", 6, 4, 20001);
  last_row_case("odd", 6, 9, 20000);
  last_row_case("odd", 6, 0, 20000);
  argmax_case("odd", 6, 40001);
  argmax_case("odd", 3, 7);

  const attention_case cases[] = {
      /* MHA, an odd head_dim, prefill from 0 */
      {4, 4, 36, 32, 7, 7, 0, FDY_DTYPE_F32},
      {4, 4, 36, 32, 7, 7, 0, FDY_DTYPE_F16},
      /* the last two rows fall outside the cache */
      {4, 2, 32, 16, 5, 4, 14, FDY_DTYPE_F32},
      {4, 2, 32, 16, 5, 4, 14, FDY_DTYPE_F16},
      /* head_dim above the block's threads */
      {2, 1, 256, 40, 3, 3, 30, FDY_DTYPE_F32},
      /* a count of 0 */
      {8, 2, 64, 64, 6, 0, 9, FDY_DTYPE_F32},
      /* the tensor-core prefill at head_dim 16, 48 and 80, query tiles of
       * 16 rows cut by the count and by the cache's end */
      {4, 2, 16, 300, 130, 129, 100, FDY_DTYPE_F32},
      {6, 3, 48, 200, 70, 70, 150, FDY_DTYPE_F16},
      {4, 1, 80, 1000, 100, 77, 930, FDY_DTYPE_F32},
      {3, 3, 128, 700, 200, 200, 513, FDY_DTYPE_F16},
      /* the tensor-core blocks of a kv head's group: 5 (two blocks of 3
       * heads, one idle), 8 (two of 4), 16 (four of 4); pairs of query
       * tiles of 16 rows cut at 33 rows (a pair with a tile of 1 row, the
       * middle tile alone) and 31, and by the cache's end */
      {10, 2, 64, 300, 40, 33, 200, FDY_DTYPE_F32},
      {10, 2, 64, 300, 40, 33, 200, FDY_DTYPE_F16},
      {8, 1, 128, 500, 64, 31, 450, FDY_DTYPE_F16},
      {16, 1, 32, 100, 70, 70, 40, FDY_DTYPE_F32},
      /* 52 key/value tiles through the two stages */
      {6, 2, 128, 3300, 96, 96, 3200, FDY_DTYPE_F32},
      {6, 2, 128, 3300, 96, 96, 3200, FDY_DTYPE_F16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_attention_case("odd", &cases[i]);
  }
}

/* ---- 8-bit and unquantized embeddings and matmuls -------------------------
 */

/* A matrix of `out` rows of `in` values: 8-bit affine (scales and biases of
 * dtype, groups of `group`) when q8, else dense values of dtype. */
typedef struct linear_matrix {
  bool q8;
  uint32_t out, in, group;
  fdy_dtype dtype;
  void *values; /* U32 words (q8) or F32/F16/BF16 values */
  uint16_t *scales, *biases;
} linear_matrix;

/* 8-bit: scales in [2^-10, 2^-9), biases in (-2^-2, -2^-3]: w = s q + b
 * spans about [-0.25, 0.25]. Dense: values in [-1, 1] (F32) or of
 * magnitude in [2^-4, 2^-3) with random signs (halves). */
static linear_matrix linear_random(bool q8, uint32_t out, uint32_t in,
                                   uint32_t group, fdy_dtype dtype) {
  linear_matrix m = {q8, out, in, group, dtype, NULL, NULL, NULL};
  uint64_t n = (uint64_t)out * in;
  if (q8) {
    uint64_t groups = (uint64_t)out * (in / group);
    m.values = random_words(n / 4);
    m.scales = random_halves(groups, dtype, false, -10);
    m.biases = random_halves(groups, dtype, true, -3);
  } else if (dtype == FDY_DTYPE_F32) {
    m.values = random_floats(n);
  } else {
    uint16_t *h = random_halves(n, dtype, false, -4);
    for (uint64_t i = 0; i < n; i++) {
      h[i] ^= (uint16_t)((next_u64() & 1) << 15);
    }
    m.values = h;
  }
  return m;
}

static void linear_free(linear_matrix *m) {
  free(m->values);
  free(m->scales);
  free(m->biases);
}

/* The matrix's operands from op->inputs[first] (data[first]) on; returns
 * how many. */
static uint32_t linear_operands(const linear_matrix *m, fdy_op *op, void **data,
                                uint32_t first) {
  data[first] = m->values;
  if (!m->q8) {
    op->inputs[first] = view(m->dtype, FDY_SHAPE(m->out, m->in));
    return 1;
  }
  op->inputs[first] = view(FDY_DTYPE_U32, FDY_SHAPE(m->out, m->in / 4));
  op->inputs[first + 1] = view(m->dtype, FDY_SHAPE(m->out, m->in / m->group));
  op->inputs[first + 2] = op->inputs[first + 1];
  data[first + 1] = m->scales;
  data[first + 2] = m->biases;
  return 3;
}

static const char *linear_name(const linear_matrix *m, char *buf, size_t cap) {
  if (m->q8) {
    snprintf(buf, cap, "q8 g%u %s", m->group, fdy_dtype_name(m->dtype));
  } else {
    snprintf(buf, cap, "dense %s", fdy_dtype_name(m->dtype));
  }
  return buf;
}

/* EMBED_Q8 or EMBED_DENSE of `rows` rows from table: bitwise the CPU's;
 * ids outside the table NaN on both. */
static void embed_linear_case(const char *label, const linear_matrix *table,
                              uint32_t rows, int32_t count) {
  uint32_t vocab = table->out, hidden = table->in;
  int32_t *step = make_step(count, 0, rows);
  for (uint32_t t = 0; t < rows; t++) {
    step[FDY_STEP_ID(t)] = (int32_t)(next_u64() % vocab);
  }
  step[FDY_STEP_ID(0)] = (int32_t)vocab - 1;
  uint32_t active = active_rows(count, rows);
  if (active >= 3) { /* rows 1 and 2: ids outside the table */
    step[FDY_STEP_ID(1)] = -1;
    step[FDY_STEP_ID(2)] = (int32_t)vocab;
  }
  float *out = poisoned((uint64_t)rows * hidden);
  fdy_op op = {.kind = table->q8 ? FDY_OP_EMBED_Q8 : FDY_OP_EMBED_DENSE,
               .output_count = 1};
  void *data[5] = {step};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(rows)));
  op.input_count = 1 + linear_operands(table, &op, data, 1);
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, hidden));
  data[op.input_count] = out;
  results r = run_both(&op, data);
  const float *c = r.cpu[op.input_count], *g = r.gpu[op.input_count];
  char what[160], kind[48];
  snprintf(what, sizeof what, "embed %s [%u x %u] %s, %u rows, count %d", label,
           vocab, hidden, linear_name(table, kind, sizeof kind), rows, count);
  if (active >= 3) {
    print_message("  %-58s rows 1..2 (ids -1, %u) NaN on both\n", what, vocab);
    assert_true(written_nan(g + hidden, 2 * (uint64_t)hidden));
    assert_true(written_nan(c + hidden, 2 * (uint64_t)hidden));
    memcpy((float *)g + hidden, c + hidden, sizeof(float) * 2 * hidden);
  }
  if (active > 0) {
    expect_same(what, c, g, sizeof(float) * active * hidden);
  }
  expect_untouched(what, g, active, rows, hidden);
  free_results(&r);
  free(step);
  free(out);
}

/* MATMUL_Q8 or MATMUL_DENSE of x [rows, w->in], `count` rows active. */
static void matmul_linear_case(const char *label, const linear_matrix *w,
                               uint32_t rows, int32_t count) {
  int32_t *step = make_step(count, 0, 0);
  float *x = random_floats((uint64_t)rows * w->in);
  float *y = poisoned((uint64_t)rows * w->out);
  fdy_op op = {.kind = w->q8 ? FDY_OP_MATMUL_Q8 : FDY_OP_MATMUL_DENSE,
               .output_count = 1};
  void *data[6] = {step, x};
  op.inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->in));
  op.input_count = 2 + linear_operands(w, &op, data, 2);
  op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(rows, w->out));
  data[op.input_count] = y;
  results r = run_both(&op, data);
  uint32_t active = active_rows(count, rows);
  char what[160], kind[48];
  snprintf(what, sizeof what, "matmul %s [%u x %u] %s, %u rows, count %d",
           label, w->out, w->in, linear_name(w, kind, sizeof kind), rows,
           count);
  if (active > 0) {
    expect_close(what, r.cpu[op.input_count], r.gpu[op.input_count],
                 (uint64_t)active * w->out, REDUCTION_BOUND);
  }
  expect_untouched(what, r.gpu[op.input_count], active, rows, w->out);
  free_results(&r);
  free(step);
  free(x);
  free(y);
}

/* Odd shapes: widths that are not multiples of 32 (dense), outputs that
 * are not multiples of the block's 8 warps, counts of 0, below and above
 * the rows; every group size and dtype. */
static void test_linear_odd_shapes(void **state) {
  (void)state;
  const struct {
    bool q8;
    uint32_t out, in, group;
    fdy_dtype dtype;
  } shapes[] = {
      {true, 37, 96, 32, FDY_DTYPE_F16},
      {true, 300, 256, 128, FDY_DTYPE_BF16},
      {true, 9, 512, 64, FDY_DTYPE_F16},
      {false, 37, 13, 0, FDY_DTYPE_F32},
      {false, 131, 333, 0, FDY_DTYPE_F16},
      {false, 9, 200, 0, FDY_DTYPE_BF16},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    linear_matrix w = linear_random(shapes[i].q8, shapes[i].out, shapes[i].in,
                                    shapes[i].group, shapes[i].dtype);
    matmul_linear_case("odd", &w, 7, 5);
    matmul_linear_case("odd", &w, 7, 100);
    matmul_linear_case("odd", &w, 1, 1);
    matmul_linear_case("odd", &w, 7, 0);
    embed_linear_case("odd", &w, 6, 4);
    embed_linear_case("odd", &w, 6, -1);
    linear_free(&w);
  }
}

/* llama-3.2-3b's projections (q/o 3072 x 3072, k/v 1024 x 3072, gate/up
 * 8192 x 3072, down 3072 x 8192) as decode (1 row) and prefill (61 of 64
 * rows), the LM head (128256 x 3072) of one row and the embedding of 64
 * ids: 8-bit with groups of 64 (F16) and 32 (BF16), dense BF16 and F16
 * (FOUNDRY_CUDA_OPS_SMALL=1 skips them). */
static void test_linear_3b_shapes(void **state) {
  (void)state;
  if (small_shapes()) {
    skip();
  }
  const struct {
    bool q8;
    uint32_t group;
    fdy_dtype dtype;
  } formats[] = {{true, 64, FDY_DTYPE_F16},
                 {true, 32, FDY_DTYPE_BF16},
                 {false, 0, FDY_DTYPE_BF16},
                 {false, 0, FDY_DTYPE_F16}};
  const uint32_t projections[4][2] = {
      {3072, 3072}, {1024, 3072}, {8192, 3072}, {3072, 8192}};
  for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
    for (size_t p = 0; p < 4; p++) {
      linear_matrix w =
          linear_random(formats[f].q8, projections[p][0], projections[p][1],
                        formats[f].group, formats[f].dtype);
      matmul_linear_case("3b", &w, 1, 1);
      matmul_linear_case("3b", &w, 64, 61);
      linear_free(&w);
    }
    linear_matrix head = linear_random(formats[f].q8, 128256, 3072,
                                       formats[f].group, formats[f].dtype);
    matmul_linear_case("3b lm head", &head, 1, 1);
    embed_linear_case("3b", &head, 64, 64);
    linear_free(&head);
  }
}

/* ---- end to end
 * ----------------------------------------------------------------
 */

static const char *const fixtures[] = {
    "llama3-micro",          "llama3-tiny",         "llama3-micro-untied-g32",
    "llama3-micro-mha-g128", "llama3-micro-q8-g32", "llama3-micro-bf16",
    "llama3-micro-f32",      "llama3-micro-mixed",  "mistral-micro",
    "qwen2-micro",           "qwen3-micro"};

static void fixture_path(char *buf, size_t cap, const char *fixture,
                         const char *leaf) {
  const char *dir = getenv("FOUNDRY_TEST_DATA");
  snprintf(buf, cap, "%s/%s/%s", dir ? dir : "tests/data", fixture, leaf);
}

static fdy_llama_model *open_fixture(const char *fixture) {
  char dir[512];
  fixture_path(dir, sizeof dir, fixture, "model");
  fdy_llama_model *model = NULL;
  fdy_error err;
  fdy_status st = fdy_llama_open(dir, &model, &err);
  if (st != FDY_OK) {
    print_error("open %s: %s\n", dir, err.message);
  }
  assert_int_equal(st, FDY_OK);
  return model;
}

static fdy_llama_session *make_session(const fdy_llama_model *model,
                                       const fdy_llama_session_options *o) {
  fdy_llama_session *session = NULL;
  fdy_error err;
  fdy_status st = fdy_llama_session_create(model, o, &session, &err);
  if (st != FDY_OK) {
    print_error("session: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  return session;
}

static void test_verify_fixtures(void **state) {
  (void)state;
  const fdy_dtype kv[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  const double bound[] = {HALF_BOUND, HALF_BOUND};
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    fdy_llama_model *model = open_fixture(fixtures[f]);
    char path[512];
    fixture_path(path, sizeof path, fixtures[f], "expected.safetensors");
    for (int k = 0; k < 2; k++) {
      fdy_llama_session_options o = {
          .backend = gpu.b, .kv_dtype = kv[k], .all_logits = true};
      fdy_llama_session *session = make_session(model, &o);
      fdy_llama_verify_result res;
      fdy_error err;
      fdy_status st = fdy_llama_verify(session, path, bound[k], &res, &err);
      if (st != FDY_OK) {
        print_error("verify %s: %s\n", fixtures[f], err.message);
      }
      assert_int_equal(st, FDY_OK);
      print_message("  verify %-26s cuda, %s KV: logits %.3e greedy %.3e "
                    "agreement %u/%u (bound %.0e)\n",
                    fixtures[f], fdy_dtype_name(kv[k]),
                    res.logits_relative_error, res.greedy_relative_error,
                    res.greedy_matches, res.greedy_tokens, bound[k]);
      assert_true(res.prompt_tokens > 0 && res.greedy_tokens > 0);
      assert_true(res.logits_relative_error <= bound[k]);
      assert_true(res.greedy_relative_error <= bound[k]);
      assert_int_equal(res.greedy_matches, res.greedy_tokens);
      assert_true(res.passed);
      fdy_llama_session_destroy(session);
    }
    fdy_llama_close(model);
  }
}

/* The largest and second largest logits of a row. */
static double top2_margin(const float *row, uint32_t n, int32_t *best) {
  uint32_t a = 0;
  for (uint32_t i = 1; i < n; i++) {
    a = row[i] > row[a] ? i : a;
  }
  double second = -INFINITY;
  for (uint32_t i = 0; i < n; i++) {
    if (i != a && row[i] > second) {
      second = row[i];
    }
  }
  *best = (int32_t)a;
  return (double)row[a] - second;
}

static double max_abs_diff(const float *a, const float *b, uint64_t n) {
  double m = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    m = d > m || isnan(d) ? d : m;
  }
  return m;
}

/* The tiny fixture on a 64-token prompt (one prefill run of 64 rows), then
 * 8 decode steps teacher-forced with the CPU's greedy ids: every logit row
 * of CUDA within HALF_BOUND of the CPU's, and the device argmax equal
 * to the CPU's wherever the CPU's top-2 margin exceeds twice the largest
 * logit difference. */
static void test_logits_against_cpu(void **state) {
  (void)state;
  const uint32_t prompt = 64, steps = 8;
  fdy_llama_model *model = open_fixture("llama3-tiny");
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  int32_t ids[64];
  for (uint32_t i = 0; i < prompt; i++) {
    ids[i] = (int32_t)(next_u64() % vocab);
  }
  fdy_llama_session_options o = {
      .backend = cpu.b, .context = 256, .all_logits = true};
  fdy_llama_session *on_cpu = make_session(model, &o);
  o.backend = gpu.b;
  fdy_llama_session *on_gpu = make_session(model, &o);
  uint64_t total = (uint64_t)prompt * vocab;
  float *a = poisoned(total), *b = poisoned(total);
  fdy_error err;
  assert_int_equal(
      fdy_llama_session_forward(on_cpu, ids, prompt, a, NULL, &err), FDY_OK);
  assert_int_equal(
      fdy_llama_session_forward(on_gpu, ids, prompt, b, NULL, &err), FDY_OK);
  expect_close("llama3-tiny, 64-token prompt: every row's logits", a, b, total,
               HALF_BOUND);
  uint32_t rows_same = 0;
  for (uint32_t t = 0; t < prompt; t++) {
    int32_t ca = 0, cb = 0;
    top2_margin(a + (uint64_t)t * vocab, vocab, &ca);
    top2_margin(b + (uint64_t)t * vocab, vocab, &cb);
    rows_same += ca == cb;
  }
  print_message("  rows whose argmax agrees: %u/%u\n", rows_same, prompt);
  for (uint32_t s = 0; s < steps; s++) {
    int32_t next = fdy_llama_session_next(on_cpu);
    int32_t next_gpu = fdy_llama_session_next(on_gpu);
    const float *row_a = s == 0 ? a + (uint64_t)(prompt - 1) * vocab : a;
    const float *row_b = s == 0 ? b + (uint64_t)(prompt - 1) * vocab : b;
    int32_t best = 0;
    double margin = top2_margin(row_a, vocab, &best);
    double diff = max_abs_diff(row_a, row_b, vocab);
    print_message("  step %u: cpu id %d, cuda id %d, cpu top-2 margin %.3e, "
                  "max|d| %.3e\n",
                  s, next, next_gpu, margin, diff);
    assert_int_equal(next, best);
    if (margin > 2.0 * diff) {
      assert_int_equal(next_gpu, next);
    }
    assert_int_equal(fdy_llama_session_forward(on_cpu, &next, 1, NULL, a, &err),
                     FDY_OK);
    assert_int_equal(fdy_llama_session_forward(on_gpu, &next, 1, NULL, b, &err),
                     FDY_OK);
    char what[96];
    snprintf(what, sizeof what, "llama3-tiny, decode step %u at position %u", s,
             prompt + s);
    expect_close(what, a, b, vocab, HALF_BOUND);
  }
  fdy_llama_session_destroy(on_cpu);
  fdy_llama_session_destroy(on_gpu);
  free(a);
  free(b);
  fdy_llama_close(model);
}

int main(void) {
  if (fdy_cuda_device_count() == 0) {
    const char *req = getenv("FOUNDRY_REQUIRE_CUDA");
    if (req != NULL && strcmp(req, "1") == 0) {
      fprintf(stderr,
              "test_cuda_ops: FOUNDRY_REQUIRE_CUDA=1 but no CUDA device\n");
      return 1;
    }
    fprintf(stderr, "test_cuda_ops: no CUDA device, skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_odd_shapes),
      cmocka_unit_test(test_linear_odd_shapes),
      cmocka_unit_test(test_linear_3b_shapes),
      cmocka_unit_test(test_argmax_blocks),
      cmocka_unit_test(test_sample_equals_cpu),
      cmocka_unit_test(test_gemv_shapes),
      cmocka_unit_test(test_attention_workspace_refused),
      cmocka_unit_test(test_attention_positions),
      cmocka_unit_test(test_attention_decode_blocks),
      cmocka_unit_test(test_rope_attention_decode),
      cmocka_unit_test(test_attention_regions),
      cmocka_unit_test(test_rope_attention_batch),
      cmocka_unit_test(test_rope_attention_batch_invariance),
      cmocka_unit_test(test_rope_attention_mixed),
      cmocka_unit_test(test_prefill_needs_workspace),
      cmocka_unit_test(test_prefill_matmul),
      cmocka_unit_test(test_prefill_matmul_ragged),
      cmocka_unit_test(test_fused_shapes),
      cmocka_unit_test(test_prefill_fused),
      cmocka_unit_test(test_prefill_fused_bitwise),
      cmocka_unit_test(test_fixture_shapes),
      cmocka_unit_test(test_llama32_3b_shapes),
      cmocka_unit_test(test_verify_fixtures),
      cmocka_unit_test(test_logits_against_cpu),
      /* last: the tests above keep the random numbers they drew before */
      cmocka_unit_test(test_decode_swiglu),
      cmocka_unit_test(test_gemv_chunk_scales),
      cmocka_unit_test(test_family_shapes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
