/* cuda_kernel_bench: times each op kernel of the CUDA backend alone at the
 * llama-3.2-3b shapes (hidden 3072, 24/8 heads of 128, ffn 8192, vocab
 * 128256, 4-bit group 64 F16 unless told otherwise): the MATMUL_Q4 of every
 * projection and the LM head, RMSNORM, ROPE (query and key widths),
 * ATTENTION over a context of 640 positions (F32 cache unless --cache
 * f16), SWIGLU, ADD, EMBED_Q4, ARGMAX (one row of vocab logits) and the
 * fused ops of a layer: NORM_MATMUL_Q4 (q, k, v), ROPE_ATTENTION (a decode
 * step of --rows sequences, each at the last position of a context of its
 * own), MATMUL_ADD_Q4 (o), NORM_SWIGLU_Q4 (gate, up) and MATMUL_ADD_Q4
 * (down), and the decode's final NORM_MATMUL_Q4 (the LM head, one row
 * only). --rows 1 (default) gives the decode shapes; --rows 512 the
 * prefill shapes (the last 512 tokens of the context of one sequence;
 * ARGMAX keeps one row).
 *
 * Each op is built as an fdy_op over device memory filled with random
 * non-zero values and enqueued with fdy_cuda_op_enqueue, the backend's own
 * launch path, on the backend's internal stream. After warm-up launches,
 * every timed launch is preceded by an untimed read of a 2 x L2 scratch
 * buffer (the checksum kernel: docs/tuning-log.md entry 1), so it finds
 * nothing in L2, and is timed with a pair of CUDA events; the median and
 * the fastest of the repeats are reported. With --chain N, a sample is
 * instead one replay of a CUDA graph of N launches of the op (programmatic
 * dependent launches for one row, as a decode step's graph), divided by N:
 * the cost of the op inside a chain of its own kind, its weights in L2
 * after the first launch when they fit; --l2 warm leaves out the flush
 * before each sample. Rates count the fewest bytes the
 * op must move (every operand read or written once; ATTENTION reads the
 * caches only up to its last position, ROPE_ATTENTION every row's region
 * up to its position, EMBED_Q4 only the rows it gathers)
 * against the device-to-device rate (read + write) measured in the same
 * run by fdy_cuda_measure_d2d; the matmul kinds also report GFLOP/s (2 x
 * rows x in x out over their weights), and with several rows every block
 * shape of the tensor-core kernel (matmul_q4_mma.cu) that runs the kind is
 * timed the same way, its first output compared with the op's own launch
 * (* marks the shape the op gets). A JSON report
 * (--report PATH, schema foundry.cuda_kernel_bench.v1) is written to a new file
 * only: an existing path is refused before anything is measured. Not a test:
 * timings never decide one.
 *
 * Usage: cuda_kernel_bench [--rows N] [--repeats N] [--warmup N]
 *        [--group 32|64|128] [--scales f16|bf16] [--context N]
 *        [--cache f32|f16] [--chain N] [--l2 flushed|warm]
 *        [--report PATH] */
#include "cuda_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HIDDEN   3072u
#define HEADS    24u
#define KV_HEADS 8u
#define HEAD_DIM 128u
#define FFN      8192u
#define VOCAB    128256u

typedef struct options {
  uint32_t rows, repeats, warmup, group, context;
  uint32_t chain; /* launches per sample, in one graph when above 1 */
  bool warm_l2;   /* no L2 flush before a sample */
  fdy_dtype scales;
  fdy_dtype cache; /* of ATTENTION and ROPE_ATTENTION */
  const char *report;
} options;

/* One op to time: the op (shapes, dtypes, parameters), host data for each
 * operand, and the bytes it must move. */
typedef struct bench_op {
  const char *name;
  fdy_op op;
  uint64_t bytes;
  double flops;         /* 0 unless a matmul kind */
  uint32_t bias_inputs; /* bit i: input i holds quantization biases */
  const char *shape;    /* described instead of the main input's, or NULL */
  bool one_row_only;    /* a decode op: not timed at --rows above 1 */
} bench_op;

#define MAX_BLOCK_SHAPES 8

/* A prefill MATMUL_Q4 with one of the tensor-core kernel's block shapes:
 * its times and ||y - y_op|| / ||y|| against the op's own launch (0 when
 * bitwise equal; -1 when y is not finite). */
typedef struct shape_result {
  const char *name;
  bool runs; /* the shape runs the op's kind (else nothing measured) */
  double median_s, min_s, difference;
} shape_result;

typedef struct result {
  char name[64];
  char shape[96];
  const char *kind;
  uint64_t bytes;
  double median_s, min_s, flops;
  unsigned int block_shapes; /* prefill MATMUL_Q4: every block shape */
  unsigned int chosen;       /* the one the op gets */
  shape_result by_shape[MAX_BLOCK_SHAPES];
} result;

static int usage(const char *why) {
  fprintf(stderr,
          "cuda_kernel_bench: %s\nusage: cuda_kernel_bench [--rows N] "
          "[--repeats N] [--warmup N] [--group 32|64|128] [--scales "
          "f16|bf16] [--context N] [--cache f32|f16] [--chain N] [--l2 "
          "flushed|warm] [--report PATH]\n",
          why);
  return 2;
}

static bool parse_u32(const char *s, uint32_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0 || v == 0 ||
      v > UINT32_MAX) {
    return false;
  }
  *out = (uint32_t)v;
  return true;
}

static int parse_options(int argc, char **argv, options *o) {
  *o = (options){.rows = 1,
                 .repeats = 100,
                 .warmup = 10,
                 .group = 64,
                 .context = 640,
                 .chain = 1,
                 .scales = FDY_DTYPE_F16,
                 .cache = FDY_DTYPE_F32};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) {
      return usage("every option takes a value");
    }
    const char *v = argv[++i];
    bool ok = true;
    if (strcmp(a, "--rows") == 0) {
      ok = parse_u32(v, &o->rows);
    } else if (strcmp(a, "--repeats") == 0) {
      ok = parse_u32(v, &o->repeats);
    } else if (strcmp(a, "--warmup") == 0) {
      ok = parse_u32(v, &o->warmup);
    } else if (strcmp(a, "--context") == 0) {
      ok = parse_u32(v, &o->context);
    } else if (strcmp(a, "--group") == 0) {
      ok = parse_u32(v, &o->group) &&
           (o->group == 32 || o->group == 64 || o->group == 128);
    } else if (strcmp(a, "--scales") == 0) {
      ok = strcmp(v, "f16") == 0 || strcmp(v, "bf16") == 0;
      o->scales = strcmp(v, "bf16") == 0 ? FDY_DTYPE_BF16 : FDY_DTYPE_F16;
    } else if (strcmp(a, "--cache") == 0) {
      ok = strcmp(v, "f32") == 0 || strcmp(v, "f16") == 0;
      o->cache = strcmp(v, "f16") == 0 ? FDY_DTYPE_F16 : FDY_DTYPE_F32;
    } else if (strcmp(a, "--chain") == 0) {
      ok = parse_u32(v, &o->chain) && o->chain >= 1 && o->chain <= 1000;
    } else if (strcmp(a, "--l2") == 0) {
      ok = strcmp(v, "flushed") == 0 || strcmp(v, "warm") == 0;
      o->warm_l2 = strcmp(v, "warm") == 0;
    } else if (strcmp(a, "--report") == 0) {
      ok = v[0] != '\0';
      o->report = v;
    } else {
      return usage("unknown option");
    }
    if (!ok) {
      fprintf(stderr, "cuda_kernel_bench: bad value '%s' for %s\n", v, a);
      return 2;
    }
  }
  if (o->rows > o->context) {
    return usage("--rows must not exceed --context");
  }
  return 0;
}

static bool cuda_ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "cuda_kernel_bench: %s: %s\n", what, cudaGetErrorString(e));
  }
  return e == cudaSuccess;
}

/* ---- random operands --------------------------------------------------------
 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fills n elements of dtype at p: floats uniform in [-1, 1] and non-zero,
 * halves with a random mantissa in [2^e, 2^(e + 1)) (negative when e < -3:
 * the biases), words of random bits. The step tensor is filled by the
 * caller. */
static void fill(void *p, fdy_dtype dtype, uint64_t n, int e) {
  if (dtype == FDY_DTYPE_F32) {
    float *f = p;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t r = next_u64() >> 40;
      f[i] = (float)((int64_t)r - (1 << 23) + (r == (1u << 23))) /
             (float)(1 << 23);
    }
  } else if (dtype == FDY_DTYPE_F16 || dtype == FDY_DTYPE_BF16) {
    uint16_t *h = p, sign = e < -3 ? 0x8000u : 0;
    for (uint64_t i = 0; i < n; i++) {
      uint64_t r = next_u64();
      h[i] = dtype == FDY_DTYPE_BF16
                 ? (uint16_t)(sign | (uint16_t)(e + 127) << 7 | (r & 0x7fu))
                 : (uint16_t)(sign | (uint16_t)(e + 15) << 10 | (r & 0x3ffu));
    }
  } else {
    uint32_t *w = p;
    for (uint64_t i = 0; i < n; i++) {
      w[i] = (uint32_t)next_u64();
    }
  }
}

/* ---- the ops ----------------------------------------------------------------
 */

static fdy_tensor_view view(fdy_dtype dtype, fdy_shape shape) {
  return (fdy_tensor_view){.dtype = dtype, .shape = shape};
}

static uint64_t view_bytes(const fdy_tensor_view *v) {
  uint64_t bytes = 0;
  fdy_tensor_bytes(v->dtype, v->shape, &bytes, NULL);
  return bytes;
}

static uint64_t op_bytes(const fdy_op *op) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < op->input_count; i++) {
    sum += view_bytes(&op->inputs[i]);
  }
  for (uint32_t j = 0; j < op->output_count; j++) {
    sum += view_bytes(&op->outputs[j]);
  }
  return sum;
}

/* Inputs first .. first + 2 of op: a quantized weight [out, in] (packed,
 * scales, biases); marks the biases in b. */
static void weight_inputs(bench_op *b, const options *o, uint32_t first,
                          uint32_t out, uint32_t in) {
  fdy_op *op = &b->op;
  op->inputs[first] = view(FDY_DTYPE_U32, FDY_SHAPE(out, in / 8));
  op->inputs[first + 1] = view(o->scales, FDY_SHAPE(out, in / o->group));
  op->inputs[first + 2] = op->inputs[first + 1];
  b->bias_inputs |= 1u << (first + 2);
  b->flops += 2.0 * o->rows * in * out;
}

/* The fused matmul kinds of a layer over o->rows rows of `in` inputs
 * (one: the decode step's GEMVs; several: the tensor-core kernel):
 * NORM_MATMUL_Q4 of q, k and v, NORM_SWIGLU_Q4 of gate and up (in HIDDEN),
 * MATMUL_ADD_Q4 of o (in HIDDEN) or down (in FFN). */
static bench_op fused(const char *name, fdy_op_kind kind, const options *o,
                      uint32_t in) {
  bench_op b = {.name = name};
  fdy_op *op = &b.op;
  *op = (fdy_op){.kind = kind};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, in));
  if (kind == FDY_OP_MATMUL_ADD_Q4) {
    weight_inputs(&b, o, 2, HIDDEN, in);
    op->inputs[5] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, HIDDEN));
    op->input_count = 6;
    op->output_count = 1;
    op->outputs[0] = op->inputs[5];
    b.shape = in == FFN ? "down 3072 x 8192 + res" : "o 3072 x 3072 + res";
  } else {
    op->inputs[2] = view(o->scales, FDY_SHAPE(in));
    op->params.rmsnorm.eps = 1e-5;
    const bool qkv = kind == FDY_OP_NORM_MATMUL_Q4;
    const uint32_t outs[3] = {qkv ? HEADS * HEAD_DIM : FFN,
                              qkv ? KV_HEADS * HEAD_DIM : FFN,
                              KV_HEADS * HEAD_DIM};
    const uint32_t weights = qkv ? 3 : 2;
    for (uint32_t j = 0; j < weights; j++) {
      weight_inputs(&b, o, 3 + 3 * j, outs[j], in);
    }
    op->input_count = 3 + 3 * weights;
    op->output_count = qkv ? 3 : 1;
    for (uint32_t j = 0; j < op->output_count; j++) {
      op->outputs[j] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, outs[j]));
    }
    b.shape = qkv ? "norm, 5120 x 3072" : "norm, 2 x 8192 x 3072";
  }
  b.bytes = op_bytes(op);
  return b;
}

/* The decode's final RMSNorm and LM head: NORM_MATMUL_Q4 of one weight (the
 * decode graph runs this instance, not the plain matmul_q4 lm_head's). */
static bench_op norm_head(const options *o) {
  bench_op b = {.name = "norm+lm_head",
                .shape = "norm, 128256 x 3072",
                .one_row_only = true};
  fdy_op *op = &b.op;
  *op = (fdy_op){
      .kind = FDY_OP_NORM_MATMUL_Q4, .input_count = 6, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, HIDDEN));
  op->inputs[2] = view(o->scales, FDY_SHAPE(HIDDEN));
  op->params.rmsnorm.eps = 1e-5;
  weight_inputs(&b, o, 3, VOCAB, HIDDEN);
  op->outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, VOCAB));
  b.bytes = op_bytes(op);
  return b;
}

static bench_op matmul(const char *name, const options *o, uint32_t out,
                       uint32_t in) {
  bench_op b = {.name = name};
  fdy_op *op = &b.op;
  *op = (fdy_op){.kind = FDY_OP_MATMUL_Q4, .input_count = 5, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, in));
  op->inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(out, in / 8));
  op->inputs[3] = view(o->scales, FDY_SHAPE(out, in / o->group));
  op->inputs[4] = op->inputs[3];
  op->outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, out));
  b.bytes = op_bytes(op);
  b.flops = 2.0 * o->rows * in * out;
  b.bias_inputs = 1u << 4;
  return b;
}

static bench_op rows_op(const char *name, fdy_op_kind kind, const options *o,
                        uint32_t n) {
  bench_op b = {.name = name};
  fdy_op *op = &b.op;
  *op = (fdy_op){.kind = kind, .input_count = 3, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(2));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, n));
  op->inputs[2] = op->inputs[1];
  op->outputs[0] = op->inputs[1];
  if (kind == FDY_OP_RMSNORM) {
    op->inputs[2] = view(o->scales, FDY_SHAPE(n));
    op->params.rmsnorm.eps = 1e-5;
  }
  b.bytes = op_bytes(op);
  return b;
}

static bench_op rope(const char *name, const options *o, uint32_t heads) {
  bench_op b = {.name = name};
  fdy_op *op = &b.op;
  *op = (fdy_op){.kind = FDY_OP_ROPE, .input_count = 2, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(o->rows)));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, heads * HEAD_DIM));
  op->outputs[0] = op->inputs[1];
  op->params.rope.head_dim = HEAD_DIM;
  op->params.rope.theta = 500000.0;
  op->params.rope.llama3 = true;
  op->params.rope.factor = 32.0;
  op->params.rope.low_freq_factor = 1.0;
  op->params.rope.high_freq_factor = 4.0;
  op->params.rope.original_max_position = 8192;
  b.bytes = op_bytes(op);
  return b;
}

/* ATTENTION of the last o->rows tokens of a context of o->context
 * positions (one sequence), or (fused) ROPE_ATTENTION of o->rows
 * sequences, each row at the last position of its sequence's context
 * (step_rows fills the step). */
static bench_op attention(const options *o, bool fused) {
  bench_op b = {.name = fused ? "rope_attention" : "attention"};
  fdy_op *op = &b.op;
  const uint32_t q = HEADS * HEAD_DIM, kv = KV_HEADS * HEAD_DIM;
  const uint32_t sequences = fused ? o->rows : 1;
  *op = (fdy_op){.kind = fused ? FDY_OP_ROPE_ATTENTION : FDY_OP_ATTENTION,
                 .input_count = 6,
                 .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(o->rows)));
  op->inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, q));
  op->inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, kv));
  op->inputs[3] = op->inputs[2];
  op->inputs[4] = view(o->cache, FDY_SHAPE(sequences, o->context, kv));
  op->inputs[5] = op->inputs[4];
  op->outputs[0] = op->inputs[1];
  const fdy_attention_params a = {HEADS, KV_HEADS, HEAD_DIM};
  if (fused) {
    op->params.rope_attention.rope = rope("rope", o, HEADS).op.params.rope;
    op->params.rope_attention.attention = a;
  } else {
    op->params.attention = a;
  }
  /* q, k, v and the output once, the appended rows written, and both
   * caches read up to the last position of each sequence */
  b.bytes = 2 * view_bytes(&op->inputs[1]) + 2 * view_bytes(&op->inputs[2]) +
            2ull * o->rows * kv * fdy_dtype_size(o->cache) +
            2ull * sequences * o->context * kv * fdy_dtype_size(o->cache);
  return b;
}

static bench_op embed(const options *o) {
  bench_op b = {.name = "embed"};
  fdy_op *op = &b.op;
  const uint32_t groups = HIDDEN / o->group;
  *op = (fdy_op){.kind = FDY_OP_EMBED_Q4, .input_count = 4, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(FDY_STEP_ELEMENTS(o->rows)));
  op->inputs[1] = view(FDY_DTYPE_U32, FDY_SHAPE(VOCAB, HIDDEN / 8));
  op->inputs[2] = view(o->scales, FDY_SHAPE(VOCAB, groups));
  op->inputs[3] = op->inputs[2];
  op->outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(o->rows, HIDDEN));
  b.bytes = (uint64_t)o->rows * (HIDDEN / 2 + 2 * 2 * groups + HIDDEN * 4);
  b.bias_inputs = 1u << 3;
  return b;
}

static bench_op argmax(void) {
  bench_op b = {.name = "argmax"};
  fdy_op *op = &b.op;
  *op = (fdy_op){.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  op->inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, VOCAB));
  op->outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(1));
  b.bytes = op_bytes(op);
  return b;
}

/* ---- timing -----------------------------------------------------------------
 */

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Enqueues the op of args: through fdy_cuda_op_enqueue (shape < 0), or a
 * prefill matmul kind with block shape `shape`. */
static cudaError_t enqueue(const fdy_cuda_op_args *args, int shape,
                           cudaStream_t stream) {
  return shape < 0 ? fdy_cuda_op_enqueue(args, stream)
                   : fdy_cuda_matmul_q4_mma_enqueue_shape(
                         args, (unsigned int)shape, stream);
}

/* A graph of o->chain launches of args' op (block shape `shape` as for
 * enqueue) on stream, dependent launches for one row like a decode step's
 * graph, in *exec. */
static bool chain_graph(const options *o, const fdy_cuda_op_args *args,
                        int shape, cudaStream_t stream, cudaGraphExec_t *exec) {
  cudaGraph_t graph = NULL;
  fdy_cuda_op_args chained = *args;
  chained.dependent = o->rows == 1;
  bool ok =
      cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
  for (uint32_t k = 0; ok && k < o->chain; k++) {
    ok = cuda_ok(enqueue(&chained, shape, stream), "captured launch");
  }
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ok = ok && cuda_ok(end, "cudaStreamEndCapture") &&
       cuda_ok(cudaGraphInstantiate(exec, graph, 0), "cudaGraphInstantiate");
  if (graph != NULL) {
    cudaGraphDestroy(graph);
  }
  return ok;
}

/* o->warmup launches of the op of args, then o->repeats timed samples,
 * each after an L2 flush unless o->warm_l2: one launch, or a graph of
 * o->chain launches: t (o->repeats seconds per launch) sorted, *median_s,
 * *min_s. */
static bool time_launches(fdy_cuda_ctx *ctx, const options *o,
                          const fdy_cuda_op_args *args, int shape, void *flush,
                          uint64_t flush_bytes, cudaEvent_t e0, cudaEvent_t e1,
                          double *t, double *median_s, double *min_s) {
  bool ok = true;
  for (uint32_t k = 0; ok && k < o->warmup; k++) {
    ok = cuda_ok(enqueue(args, shape, ctx->internal), "warm-up launch");
  }
  cudaGraphExec_t exec = NULL;
  ok = ok &&
       (o->chain == 1 || chain_graph(o, args, shape, ctx->internal, &exec));
  for (uint32_t k = 0; ok && k < o->repeats; k++) {
    float ms = 0;
    ok = (o->warm_l2 || cuda_ok(fdy_cuda_checksum_enqueue(
                                    flush, flush_bytes, 1, ctx->max_blocks,
                                    ctx->internal_words, NULL,
                                    ctx->internal_sink, ctx->internal),
                                "L2 flush")) &&
         cuda_ok(cudaEventRecord(e0, ctx->internal), "cudaEventRecord") &&
         (exec != NULL
              ? cuda_ok(cudaGraphLaunch(exec, ctx->internal), "graph launch")
              : cuda_ok(enqueue(args, shape, ctx->internal), "launch")) &&
         cuda_ok(cudaEventRecord(e1, ctx->internal), "cudaEventRecord") &&
         cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize") &&
         cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    t[k] = ms / 1e3 / o->chain;
  }
  if (exec != NULL) {
    cudaGraphExecDestroy(exec);
  }
  if (ok) {
    qsort(t, o->repeats, sizeof *t, compare_double);
    *median_s = o->repeats % 2 != 0
                    ? t[o->repeats / 2]
                    : (t[o->repeats / 2 - 1] + t[o->repeats / 2]) / 2;
    *min_s = t[0];
  }
  return ok;
}

/* ||y - ref|| / ||ref|| over n floats: 0 when bitwise equal, -1 when y
 * is not finite. */
static double difference(const float *y, const float *ref, uint64_t n) {
  if (memcmp(y, ref, n * sizeof *y) == 0) {
    return 0.0;
  }
  double num = 0.0, den = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    if (!isfinite(y[i])) {
      return -1.0;
    }
    num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
    den += (double)ref[i] * ref[i];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* A prefill matmul kind (in args, first output y of n floats, whose launch
 * by the op just wrote y) with every block shape of the tensor-core kernel
 * that runs its kind: each timed as the op is and its first output
 * (poisoned first) compared with the op's. */
static bool time_block_shapes(fdy_cuda_ctx *ctx, const options *o,
                              const fdy_cuda_op_args *args, void *flush,
                              uint64_t flush_bytes, cudaEvent_t e0,
                              cudaEvent_t e1, double *t, result *r) {
  const uint64_t n = view_bytes(&args->op->outputs[0]) / sizeof(float);
  float *ref = malloc(n * sizeof *ref), *y = malloc(n * sizeof *y);
  bool ok = ref != NULL && y != NULL &&
            cuda_ok(cudaMemcpy(ref, args->out, n * sizeof *ref,
                               cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
  r->chosen = fdy_cuda_matmul_q4_mma_shape_of(args->op);
  r->block_shapes = fdy_cuda_matmul_q4_mma_shapes();
  if (r->block_shapes > MAX_BLOCK_SHAPES) {
    r->block_shapes = MAX_BLOCK_SHAPES;
  }
  for (unsigned int c = 0; ok && c < r->block_shapes; c++) {
    shape_result *s = &r->by_shape[c];
    s->name = fdy_cuda_matmul_q4_mma_shape_name(c);
    s->runs = fdy_cuda_matmul_q4_mma_shape_runs(args->op, c);
    if (!s->runs) {
      s->median_s = s->min_s = s->difference = 0.0;
      continue;
    }
    ok =
        cuda_ok(cudaMemset(args->out, 0xff, n * sizeof *y), "cudaMemset") &&
        time_launches(ctx, o, args, (int)c, flush, flush_bytes, e0, e1, t,
                      &s->median_s, &s->min_s) &&
        cuda_ok(cudaMemcpy(y, args->out, n * sizeof *y, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
    if (ok) {
      s->difference = difference(y, ref, n);
    }
  }
  free(ref);
  free(y);
  return ok;
}

/* A step of `elements` values for o->rows rows: the count, then random
 * ids, and rows at the last o->rows positions of sequence 0's context (a
 * prompt chunk), or (batch) each row t at the last position of sequence
 * t's. */
static void step_rows(const options *o, bool batch, int32_t *step,
                      uint64_t elements) {
  memset(step, 0, elements * sizeof *step);
  step[FDY_STEP_COUNT] = (int32_t)o->rows;
  for (uint32_t t = 0; t < o->rows && FDY_STEP_SEQUENCE(t) < elements; t++) {
    fdy_step_set_row(step, t, (int32_t)(next_u64() % VOCAB), batch ? t : 0,
                     batch ? o->context - 1 : o->context - o->rows + t);
  }
}

/* Allocates and fills every operand of b->op on the device, times the op
 * (time_launches) and fills r with the time per launch; a prefill matmul
 * kind also with every block shape. Returns 0, or 1 with the failure
 * printed. */
static int time_op(fdy_cuda_ctx *ctx, const options *o, const bench_op *b,
                   void *flush, uint64_t flush_bytes, result *r) {
  const fdy_op *op = &b->op;
  if (fdy_op_check(op, NULL) != FDY_OK || !fdy_cuda_op_supported(ctx, op)) {
    fprintf(stderr, "cuda_kernel_bench: %s: not supported\n", b->name);
    return 1;
  }
  const uint32_t n = op->input_count + op->output_count;
  void *dev[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {NULL};
  double *t = calloc(o->repeats, sizeof *t);
  cudaEvent_t e0 = NULL, e1 = NULL;
  bool ok = t != NULL && cuda_ok(cudaEventCreate(&e0), "cudaEventCreate") &&
            cuda_ok(cudaEventCreate(&e1), "cudaEventCreate");
  for (uint32_t i = 0; ok && i < n; i++) {
    const fdy_tensor_view *v = i < op->input_count
                                   ? &op->inputs[i]
                                   : &op->outputs[i - op->input_count];
    uint64_t bytes = view_bytes(v), count = bytes / fdy_dtype_size(v->dtype);
    void *host = malloc(bytes);
    ok = host != NULL;
    if (ok && i == 0 && v->dtype == FDY_DTYPE_I32) {
      step_rows(o, op->kind == FDY_OP_ROPE_ATTENTION, host, count);
    } else if (ok) {
      /* norm weights near 1, scales near 2^-7, biases near -2^-4 */
      bool is_bias = i < 32 && (b->bias_inputs >> i & 1u) != 0;
      bool is_norm = v->shape.rank == 1 && v->dtype != FDY_DTYPE_I32;
      int e = is_norm ? -1 : is_bias ? -4 : -7;
      fill(host, v->dtype, count, e);
    }
    ok = ok && cuda_ok(cudaMalloc(&dev[i], bytes), "cudaMalloc") &&
         cuda_ok(cudaMemcpy(dev[i], host, bytes, cudaMemcpyHostToDevice),
                 "cudaMemcpy");
    free(host);
  }
  fdy_cuda_op_args args = {.op = op,
                           .sm_count = ctx->sm_count,
                           .counters = &ctx->internal_words->op_counters[0]};
  const bool shapes =
      (op->kind == FDY_OP_MATMUL_Q4 || op->kind == FDY_OP_NORM_MATMUL_Q4 ||
       op->kind == FDY_OP_NORM_SWIGLU_Q4 || op->kind == FDY_OP_MATMUL_ADD_Q4) &&
      op->inputs[1].shape.dims[0] > 1;
  uint64_t workspace_bytes = fdy_cuda_op_workspace_bytes(op);
  for (unsigned int c = 0; shapes && c < fdy_cuda_matmul_q4_mma_shapes(); c++) {
    if (!fdy_cuda_matmul_q4_mma_shape_runs(op, c)) {
      continue;
    }
    const uint64_t bytes = fdy_cuda_matmul_q4_mma_shape_workspace_bytes(op, c);
    workspace_bytes = bytes > workspace_bytes ? bytes : workspace_bytes;
  }
  void *workspace = NULL;
  ok = ok && (workspace_bytes == 0 ||
              cuda_ok(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc"));
  args.workspace = workspace;
  for (uint32_t i = 0; i < op->input_count; i++) {
    args.in[i] = dev[i];
  }
  for (uint32_t j = 0; j < op->output_count; j++) {
    args.outputs[j] = dev[op->input_count + j];
  }
  args.out = args.outputs[0];
  r->block_shapes = 0;
  ok = ok && time_launches(ctx, o, &args, -1, flush, flush_bytes, e0, e1, t,
                           &r->median_s, &r->min_s);
  ok = ok && (!shapes || time_block_shapes(ctx, o, &args, flush, flush_bytes,
                                           e0, e1, t, r));
  if (ok) {
    snprintf(r->name, sizeof r->name, "%s", b->name);
    r->kind = fdy_op_kind_name(op->kind);
    const fdy_tensor_view *main_in =
        op->kind == FDY_OP_MATMUL_Q4 || op->kind == FDY_OP_EMBED_Q4
            ? &op->inputs[op->kind == FDY_OP_MATMUL_Q4 ? 2 : 1]
            : &op->inputs[op->kind == FDY_OP_ARGMAX ? 0 : 1];
    if (b->shape != NULL) {
      snprintf(r->shape, sizeof r->shape, "%s", b->shape);
    } else {
      snprintf(r->shape, sizeof r->shape, "%llu x %llu%s",
               (unsigned long long)main_in->shape.dims[0],
               (unsigned long long)main_in->shape.dims[1] *
                   (main_in->dtype == FDY_DTYPE_U32 ? 8 : 1),
               op->kind == FDY_OP_MATMUL_Q4 ? " (out x in)" : "");
    }
    r->bytes = b->bytes;
    r->flops = b->flops;
  }
  if (e0 != NULL) {
    cudaEventDestroy(e0);
  }
  if (e1 != NULL) {
    cudaEventDestroy(e1);
  }
  cudaStreamSynchronize(ctx->internal);
  cudaFree(workspace);
  for (uint32_t i = 0; i < n; i++) {
    cudaFree(dev[i]);
  }
  free(t);
  return ok ? 0 : 1;
}

/* ---- report -----------------------------------------------------------------
 */

static int write_report(FILE *f, const options *o, const char *device,
                        double d2d, const result *r, size_t count) {
  json_t *ops = json_array();
  for (size_t i = 0; i < count; i++) {
    double rate = (double)r[i].bytes / r[i].median_s;
    json_t *e = json_pack(
        "{s:s, s:s, s:s, s:I, s:f, s:f, s:f, s:f}", "name", r[i].name, "kind",
        r[i].kind, "shape", r[i].shape, "bytes", (json_int_t)r[i].bytes,
        "median_us", r[i].median_s * 1e6, "min_us", r[i].min_s * 1e6,
        "bytes_per_second", rate, "fraction_of_d2d", rate / d2d);
    if (r[i].flops > 0) {
      json_object_set_new(e, "flops_per_second",
                          json_real(r[i].flops / r[i].median_s));
    }
    if (r[i].block_shapes > 0) {
      json_t *shapes = json_array();
      for (unsigned int c = 0; c < r[i].block_shapes; c++) {
        const shape_result *b = &r[i].by_shape[c];
        json_array_append_new(
            shapes, json_pack("{s:s, s:b, s:f, s:f, s:b, s:f}", "name", b->name,
                              "runs", b->runs, "median_us", b->median_s * 1e6,
                              "min_us", b->min_s * 1e6, "chosen",
                              c == r[i].chosen, "difference", b->difference));
      }
      json_object_set_new(e, "block_shapes", shapes);
    }
    json_array_append_new(ops, e);
  }
  json_t *root = json_pack(
      "{s:s, s:s, s:{s:s, s:i, s:i, s:i, s:s, s:s, s:i, s:i, s:i, s:b}, s:f, "
      "s:o}",
      "schema", "foundry.cuda_kernel_bench.v1", "device", device, "options",
      "model", "llama-3.2-3b", "rows", (int)o->rows, "context", (int)o->context,
      "group", (int)o->group, "scales", fdy_dtype_name(o->scales), "cache",
      fdy_dtype_name(o->cache), "repeats", (int)o->repeats, "warmup",
      (int)o->warmup, "chain", (int)o->chain, "l2_warm", o->warm_l2,
      "d2d_bytes_per_second", d2d, "ops", ops);
  int rc = root == NULL || json_dumpf(root, f, JSON_INDENT(2)) != 0 ||
           fputc('\n', f) == EOF;
  json_decref(root);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  int rc = parse_options(argc, argv, &o);
  if (rc != 0) {
    return rc;
  }
  if (fdy_cuda_device_count() == 0) {
    fprintf(stderr, "cuda_kernel_bench: no CUDA device\n");
    return 1;
  }
  FILE *report = NULL;
  if (o.report != NULL && (report = fopen(o.report, "wx")) == NULL) {
    fprintf(stderr, "cuda_kernel_bench: cannot create %s: %s\n", o.report,
            strerror(errno));
    return 1;
  }
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_cuda_ctx *ctx = NULL;
  void *flush = NULL;
  double d2d = 0;
  rc = 1;
  if (fdy_cuda_backend_create(NULL, &b, &err) != FDY_OK ||
      fdy_cuda_ctx_of(b, "cuda_kernel_bench", &ctx, &err) != FDY_OK ||
      fdy_cuda_measure_d2d(b, FDY_GIB, 20, &d2d, &err) != FDY_OK) {
    fprintf(stderr, "cuda_kernel_bench: %s\n", err.message);
    goto cleanup;
  }
  const uint64_t flush_bytes = 2 * ctx->l2_bytes;
  struct cudaDeviceProp prop;
  if (!cuda_ok(cudaGetDeviceProperties(&prop, ctx->device),
               "cudaGetDeviceProperties") ||
      !cuda_ok(cudaMalloc(&flush, flush_bytes), "cudaMalloc") ||
      !cuda_ok(cudaMemset(flush, 1, flush_bytes), "cudaMemset")) {
    goto cleanup;
  }
  const bench_op ops[] = {
      matmul("matmul_q4 q/o", &o, HEADS * HEAD_DIM, HIDDEN),
      matmul("matmul_q4 k/v", &o, KV_HEADS * HEAD_DIM, HIDDEN),
      matmul("matmul_q4 gate/up", &o, FFN, HIDDEN),
      matmul("matmul_q4 down", &o, HIDDEN, FFN),
      matmul("matmul_q4 lm_head", &o, VOCAB, HIDDEN),
      rows_op("rmsnorm", FDY_OP_RMSNORM, &o, HIDDEN),
      rope("rope q", &o, HEADS),
      rope("rope k", &o, KV_HEADS),
      attention(&o, false),
      rows_op("swiglu", FDY_OP_SWIGLU, &o, FFN),
      rows_op("add", FDY_OP_ADD, &o, HIDDEN),
      embed(&o),
      argmax(),
      /* last: the fused kinds (the LM head of one row only) */
      fused("norm+q/k/v", FDY_OP_NORM_MATMUL_Q4, &o, HIDDEN),
      attention(&o, true),
      fused("o+residual", FDY_OP_MATMUL_ADD_Q4, &o, HIDDEN),
      fused("norm+gate/up+swiglu", FDY_OP_NORM_SWIGLU_Q4, &o, HIDDEN),
      fused("down+residual", FDY_OP_MATMUL_ADD_Q4, &o, FFN),
      norm_head(&o),
  };
  size_t count = 0;
  result results[sizeof ops / sizeof ops[0]];
  printf("%s, %d SMs, L2 %llu MiB; rows %u, context %u, group %u %s; "
         "median of %u (after %u warm-up) samples of %u launch%s, L2 %s "
         "before each\n",
         prop.name, ctx->sm_count, (unsigned long long)(ctx->l2_bytes >> 20),
         o.rows, o.context, o.group, fdy_dtype_name(o.scales), o.repeats,
         o.warmup, o.chain, o.chain == 1 ? "" : "es in a graph",
         o.warm_l2 ? "not flushed" : "flushed");
  printf("device-to-device (read + write, 1 GiB): %.1f GB/s\n", d2d / 1e9);
  printf("%-20s %-24s %12s %10s %10s %10s %7s %10s\n", "op", "shape", "bytes",
         "median us", "min us", "GB/s", "of d2d", "GFLOP/s");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (o.rows > 1 && ops[i].one_row_only) {
      continue;
    }
    if (time_op(ctx, &o, &ops[i], flush, flush_bytes, &results[count]) != 0) {
      goto cleanup;
    }
    const result *r = &results[count++];
    double rate = (double)r->bytes / r->median_s;
    printf("%-20s %-24s %12llu %10.2f %10.2f %10.1f %6.1f%%", r->name, r->shape,
           (unsigned long long)r->bytes, r->median_s * 1e6, r->min_s * 1e6,
           rate / 1e9, 100.0 * rate / d2d);
    if (r->flops > 0) {
      printf(" %10.1f", r->flops / r->median_s / 1e9);
    }
    printf("\n");
    for (unsigned int c = 0; c < r->block_shapes; c++) {
      const shape_result *s = &r->by_shape[c];
      char diff[48];
      if (!s->runs) {
        printf("    block shape %u: %-45s does not run %s\n", c, s->name,
               r->kind);
        continue;
      }
      if (s->difference == 0.0) {
        snprintf(diff, sizeof diff, "bitwise the op's");
      } else if (s->difference < 0.0) {
        snprintf(diff, sizeof diff, "NOT FINITE");
      } else {
        snprintf(diff, sizeof diff, "%.1e from the op's", s->difference);
      }
      printf("  %c block shape %u: %-45s %10.2f %10.2f  %s\n",
             c == r->chosen ? '*' : ' ', c, s->name, s->median_s * 1e6,
             s->min_s * 1e6, diff);
    }
  }
  if (report != NULL) {
    if (write_report(report, &o, prop.name, d2d, results, count) != 0) {
      fprintf(stderr, "cuda_kernel_bench: writing %s failed\n", o.report);
      goto cleanup;
    }
    printf("report: %s\n", o.report);
  }
  rc = 0;

cleanup:
  cudaFree(flush);
  fdy_backend_destroy(b);
  if (report != NULL && fclose(report) != 0) {
    fprintf(stderr, "cuda_kernel_bench: closing %s: %s\n", o.report,
            strerror(errno));
    rc = 1;
  }
  if (report != NULL && rc != 0) {
    remove(o.report);
  }
  return rc;
}
