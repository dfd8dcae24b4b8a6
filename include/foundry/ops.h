/* Foundry ops: the fixed set of op kinds every backend implements, their
 * typed parameters, and the tensor views they read and write.
 *
 * An op is a kind, typed parameters and its operands: inputs and outputs,
 * each a view (buffer, byte offset, dtype, shape) of contiguous row-major
 * memory. The operand order of every kind is fixed (table below; its
 * one description in code is the op table, foundry/op_table.h) and
 * checked by fdy_op_check before anything runs; backends answer
 * supports_op for an op whose views carry no buffers yet.
 *
 * Row-wise kinds read the active row count and each row's token id,
 * position and sequence from a small I32 "step" tensor in device memory
 * (layout FDY_STEP_*: the count, then one (id, position, sequence) triple
 * per row), so one recorded launch serves any prompt chunk and any batch of
 * sequences: such an op processes min(step[FDY_STEP_COUNT], rows of its
 * output) rows and leaves the other rows untouched. Activations are F32.
 *
 * The KV caches hold S sequences (C [S, context, kv * d]); a row's
 * sequence picks its region.
 *
 * Step values are data, read when the op runs and never checked at launch:
 * a count below 0 counts as 0; a row whose token id lies outside the table
 * (EMBED_Q4, EMBED_Q8, EMBED_DENSE), or whose position lies outside the
 * context or sequence outside the S sequences of the cache (ATTENTION,
 * ROPE_ATTENTION, which then do not append it) is written as NaN. No step value
 * makes an op read or write outside its views.
 *
 * Kinds and operands (T rows, H hidden, I in features, O out features,
 * G = I / group quantization groups, S = F16 or BF16, W = F32, F16 or
 * BF16):
 *   CHECKSUM      in: data U8 [n] (n a multiple of 8), [prev U64 [1]]
 *                 out: U64 [1] = fdy_checksum(data) + prev * FDY_CHAIN_PRIME
 *                 (mod 2^64; prev = 0 when absent). params.checksum.
 *   EMBED_Q4      in: step, table U32 [V, H/8], scales S [V, H/g],
 *                 biases S [V, H/g]; out: F32 [T, H]: row t is the
 *                 dequantized row of id step[FDY_STEP_ID(t)].
 *   EMBED_Q8      in: step, table U32 [V, H/4], scales S [V, H/g],
 *                 biases S [V, H/g]; out: as EMBED_Q4's, the table's
 *                 values 8-bit (bytes of a word low first, the MLX affine
 *                 layout).
 *   EMBED_DENSE   in: step, table W [V, H]; out: as EMBED_Q4's, row t the
 *                 table row of id step[FDY_STEP_ID(t)] as F32.
 *   RMSNORM       in: step, x F32 [T, k n], weight W [n]; out F32
 *                 [T, k n]: each of the k segments of n values of a row
 *                 normalized on its own, y = x / sqrt(mean(x^2) + eps) *
 *                 weight (k = 1: the row; k heads: Qwen3's q and k per
 *                 head). params.rmsnorm.eps.
 *   MATMUL_Q4     in: step, x F32 [T, I], weight U32 [O, I/8],
 *                 scales S [O, G], biases S [O, G]; out: F32 [T, O],
 *                 y = x W^T with w = scale * q + bias per group of I/G
 *                 (32, 64 or 128), q the nibbles low first (the MLX
 *                 affine layout).
 *   MATMUL_Q8     in: step, x F32 [T, I], weight U32 [O, I/4],
 *                 scales S [O, G], biases S [O, G]; out: F32 [T, O], as
 *                 MATMUL_Q4's with 8-bit q (bytes of a word low first).
 *   MATMUL_DENSE  in: step, x F32 [T, I], weight W [O, I]; out: F32
 *                 [T, O] = x W^T.
 *   ROPE          in: step, x F32 [T, heads * head_dim]; out: the same
 *                 shape, rotated in split halves (pairs j, j + head_dim/2),
 *                 row t at position step[FDY_STEP_POSITION(t)]. params.rope.
 *   ATTENTION     in: step, q F32 [T, heads * d], k F32 [T, kv * d],
 *                 v F32 [T, kv * d], k_cache C [S, context, kv * d],
 *                 v_cache C [S, context, kv * d] (C = F32 or F16, both
 *                 alike); out: F32 [T, heads * d]. The rows are one chunk
 *                 of one sequence (a prompt's): row t is at position
 *                 p0 + t of sequence s, p0 and s row 0's
 *                 (step[FDY_STEP_POSITION(0)], step[FDY_STEP_SEQUENCE(0)];
 *                 the other rows' positions and sequences are not read).
 *                 Appends k and v at those positions of region s (the
 *                 caches are read and written in place), then causal
 *                 attention of each query row over positions 0..p0 + t of
 *                 region s with scale 1/sqrt(d); query head h reads kv
 *                 head h / (heads / kv). params.attention.
 *   SWIGLU        in: step, gate F32 [T, n], up F32 [T, n]; out F32 [T, n]
 *                 = silu(gate) * up.
 *   ADD           in: step, a F32 [T, n], b F32 [T, n]; out F32 [T, n].
 *   ADD_BIAS      in: step, x F32 [T, n], bias W [n]; out F32 [T, n]: row
 *                 t is x_t + bias (a linear's bias: Qwen2's q, k and v),
 *                 each sum of x and the bias as F32 rounded once.
 *   LAST_ROW      in: step, x F32 [T, n]; out: F32 [1, n] = row
 *                 min(step[FDY_STEP_COUNT], T) - 1 of x (nothing written
 *                 when the count is 0 or less).
 *   ARGMAX        in: x F32 [R, n]; out: I32 [R], the index of each row's
 *                 largest value, the lowest index on ties; NaN loses to
 *                 every number (index 0 when all are NaN).
 *   SAMPLE        in: step, x F32 [R, V] (logits), params U32
 *                 [R, FDY_SAMPLE_FIELDS] (a row's sampling parameters,
 *                 layout FDY_SAMPLE_*); out: I32 [R], the id drawn from
 *                 each of the first min(step[FDY_STEP_COUNT], R) rows (the
 *                 other rows untouched). Row r's id, with t, k, p, m, seed
 *                 and c its temperature, top_k, top_p, min_p, seed and
 *                 counter, and a = ARGMAX of the row:
 *                 - -1 when t is negative or not finite, p is neither 0
 *                   nor in (0, 1] or m not in [0, 1] (no id);
 *                 - a when t = 0 (greedy), k = 1 or x[a] is not finite;
 *                 - else a draw. In double: w_i = fdy_sample_exp((x_i -
 *                   x_a) / t) for finite x_i (0 otherwise), ranks by the
 *                   key (order-preserving bits of x_i << 32 | ~i: larger
 *                   logit, then lower id, first; 0 for a non-finite x_i).
 *                   Top-k keeps the k highest keys (k = 0 or k >= V: every
 *                   finite one); top-p then keeps the ids whose logit bits
 *                   are at least the smallest b such that the kept weight
 *                   of logits above b is < p * (the kept weight) (the
 *                   shortest run of highest logits holding p of the mass,
 *                   ties at its edge kept; off when p is 0 or 1); min-p then
 *                   keeps w_i >= m. A sum over the kept ids is the sum, in
 *                   chunk order, of the chunks' sums (FDY_SAMPLE_CHUNK ids
 *                   each, summed in id order), from 0. With S that sum and
 *                   u = fdy_sample_uniform(seed, c), the id is the first
 *                   kept id (id order) whose running sum (the preceding
 *                   chunks' sum plus its chunk's sum up to it) exceeds
 *                   u * S, the last kept id when none does.
 *                 A row's id depends only on that row's logits and
 *                 parameters, so equal on every backend and in any batch.
 *
 * Fused kinds (one launch where the unfused sequence takes several; each
 * gives bitwise the result of that sequence on the CPU backend). The
 * quantized weights of one fused op share their group size and scale
 * dtype:
 *   NORM_MATMUL_Q4  in: step, x F32 [T, I], norm S [I], then 1 to 3
 *                 weights, each as weight U32 [O_j, I/8], scales S [O_j, G],
 *                 biases S [O_j, G]; out: one F32 [T, O_j] per weight,
 *                 y_j = RMSNORM(x, norm) W_j^T (q, k and v of a layer from
 *                 its hidden state). params.rmsnorm.eps.
 *   NORM_SWIGLU_Q4  in: step, x F32 [T, I], norm S [I], gate weight,
 *                 scales, biases ([F, ...] as MATMUL_Q4's), up weight,
 *                 scales, biases (alike); out: F32 [T, F] =
 *                 SWIGLU(n W_gate^T, n W_up^T), n = RMSNORM(x, norm).
 *                 params.rmsnorm.eps.
 *   MATMUL_ADD_Q4 in: step, x F32 [T, I], weight, scales, biases (as
 *                 MATMUL_Q4's, [O, ...]), residual F32 [T, O]; out: F32
 *                 [T, O] = residual + x W^T (a layer's residual add).
 *   ROPE_ATTENTION in: as ATTENTION's (q and k not yet rotated); out: as
 *                 ATTENTION's. Each row has its own position
 *                 p = step[FDY_STEP_POSITION(t)] and sequence
 *                 s = step[FDY_STEP_SEQUENCE(t)] (the step of a batch:
 *                 decode rows of some sequences, chunks of consecutive
 *                 positions of others). First every row appends its
 *                 rotated k and its v at p of region s; then row t attends
 *                 positions 0..p of region s, as the one-row
 *                 ATTENTION(ROPE(q_t), ROPE(k_t), v_t) at p does. Rows
 *                 sharing a sequence have distinct positions (else the
 *                 values are unspecified, inside the views). One row is
 *                 bitwise the unfused sequence. params.rope_attention: the
 *                 rope's (head_dim equal to the attention's) and the
 *                 attention's.
 *
 * Determinism: a kind's result depends only on its operands' values and
 * shapes (and variant_rows, fdy_op): not on thread counts, on the memory
 * class a view lives in, or on which backend variant runs (chosen from
 * shapes and variant_rows only). No float atomics in reductions. */
#ifndef FOUNDRY_OPS_H
#define FOUNDRY_OPS_H

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fdy_op_kind {
  FDY_OP_CHECKSUM = 0,
  FDY_OP_EMBED_Q4,
  FDY_OP_RMSNORM,
  FDY_OP_MATMUL_Q4,
  FDY_OP_ROPE,
  FDY_OP_ATTENTION,
  FDY_OP_SWIGLU,
  FDY_OP_ADD,
  FDY_OP_LAST_ROW,
  FDY_OP_ARGMAX,
  FDY_OP_NORM_MATMUL_Q4,
  FDY_OP_NORM_SWIGLU_Q4,
  FDY_OP_MATMUL_ADD_Q4,
  FDY_OP_ROPE_ATTENTION,
  FDY_OP_SAMPLE,
  FDY_OP_EMBED_Q8,
  FDY_OP_MATMUL_Q8,
  FDY_OP_EMBED_DENSE,
  FDY_OP_MATMUL_DENSE,
  FDY_OP_ADD_BIAS,
  FDY_OP_KIND_COUNT
} fdy_op_kind;

/* Stable lowercase name ("matmul_q4"), "unknown" out of range. */
const char *fdy_op_kind_name(fdy_op_kind kind);
/* Inverse of fdy_op_kind_name; FDY_ERR_UNSUPPORTED for an unknown name. */
fdy_status fdy_op_kind_parse(const char *name, fdy_op_kind *out,
                             fdy_error *err);

/* Layout of the I32 step tensor of T rows (1 + 3 T elements): the active
 * row count, then per row t its token id, its position in its sequence and
 * its sequence (the KV cache region). */
#define FDY_STEP_COUNT          0
#define FDY_STEP_ID(t)          (1u + 3u * (t))
#define FDY_STEP_POSITION(t)    (2u + 3u * (t))
#define FDY_STEP_SEQUENCE(t)    (3u + 3u * (t))
#define FDY_STEP_ELEMENTS(rows) (1u + 3u * (rows))

/* Fills a step tensor for `count` rows that continue sequence `sequence`
 * from position `position` (a prompt chunk): row t gets ids[t], position
 * position + t and the sequence. */
void fdy_step_set_chunk(int32_t *step, const int32_t *ids, uint32_t count,
                        uint32_t sequence, uint32_t position);
/* Sets row t of a step tensor (the count is not changed). */
void fdy_step_set_row(int32_t *step, uint32_t t, int32_t id, uint32_t sequence,
                      uint32_t position);

/* Layout of SAMPLE's U32 params tensor [R, FDY_SAMPLE_FIELDS]: per row its
 * temperature, top_p and min_p (IEEE binary32 bits), top_k (0 = no limit),
 * the 64-bit seed (low word first) and the counter that picks the draw of
 * the seed's stream (a sequence's position). All zero is greedy. */
#define FDY_SAMPLE_TEMPERATURE 0u
#define FDY_SAMPLE_TOP_K       1u
#define FDY_SAMPLE_TOP_P       2u
#define FDY_SAMPLE_MIN_P       3u
#define FDY_SAMPLE_SEED_LOW    4u
#define FDY_SAMPLE_SEED_HIGH   5u
#define FDY_SAMPLE_COUNTER     6u
#define FDY_SAMPLE_FIELDS      7u
/* Ids per chunk of SAMPLE's sums. */
#define FDY_SAMPLE_CHUNK 256u

/* One row's sampling parameters. */
typedef struct fdy_sample_params {
  float temperature; /* 0 = greedy (ARGMAX); else > 0 */
  uint32_t top_k;    /* keep the k most likely ids; 0 = every id */
  float top_p;       /* keep the most likely ids holding this much of the
                        probability, in (0, 1]; 0 or 1 = off */
  float min_p;       /* keep ids at least this fraction of the most likely
                        one's probability, in [0, 1]; 0 = off */
  uint64_t seed;     /* the random stream */
} fdy_sample_params;

/* Writes row t of a SAMPLE params tensor: p and the counter (the draw of
 * p->seed's stream this row takes). */
void fdy_sample_set_row(uint32_t *params, uint32_t t,
                        const fdy_sample_params *p, uint32_t counter);

/* Draw `counter` of the stream `seed`, uniform in [0, 1): the SplitMix64
 * output number counter + 1 of the generator seeded with seed (z = seed +
 * (counter + 1) * 0x9e3779b97f4a7c15, mixed), its top 53 bits * 2^-53. */
double fdy_sample_uniform(uint64_t seed, uint32_t counter);

/* SAMPLE's exponential of y <= 0 in double, the same bits on every
 * backend: 0 below -708, else 2^k * P(r) with k = floor(y log2(e) + 0.5),
 * r = y - k ln 2 (in two parts) and P the degree-13 Taylor polynomial of
 * e^r (Horner), basic operations each rounded once (no fused
 * multiply-add). Relative error below 1e-15. */
double fdy_sample_exp(double y);

/* SAMPLE's id for one row (the definition above) of n logits x with the
 * FDY_SAMPLE_FIELDS words of its parameters (-1 for values out of range):
 * the CPU backend's kernel. */
int32_t fdy_sample_draw_row(const float *x, uint64_t n, const uint32_t *words);

/* The distribution SAMPLE draws from for n >= 1 logits x and parameters
 * params: probs[i] = w_i / S for the kept ids (the definition above), 0
 * for the others; 1 at the argmax, 0 elsewhere, when greedy or when the
 * argmax's logit is not finite. false, probs untouched, when n is 0 or a
 * value is out of range (SAMPLE's -1). */
bool fdy_sample_probabilities(const float *x, uint64_t n,
                              const fdy_sample_params *params, double *probs);

/* Multiplier of the checksum chain (the 64-bit FNV prime). */
#define FDY_CHAIN_PRIME 0x100000001b3ull

/* ROPE's parameters (also ROPE_ATTENTION's rope). */
typedef struct fdy_rope_params {
  uint32_t head_dim;
  double theta;
  bool llama3; /* llama3 frequency scaling with the fields below */
  double factor, low_freq_factor, high_freq_factor;
  uint32_t original_max_position;
} fdy_rope_params;

/* ATTENTION's parameters (also ROPE_ATTENTION's attention). */
typedef struct fdy_attention_params {
  uint32_t heads, kv_heads, head_dim;
} fdy_attention_params;

/* Typed parameters; only the member of the op's kind is meaningful. */
typedef union fdy_op_params {
  struct {
    uint32_t passes; /* reads of data per launch (result unchanged); 0 = 1 */
  } checksum;
  struct {
    double eps;
  } rmsnorm; /* also NORM_MATMUL_Q4's and NORM_SWIGLU_Q4's */
  fdy_rope_params rope;
  fdy_attention_params attention;
  struct {
    fdy_rope_params rope;
    fdy_attention_params attention;
  } rope_attention;
} fdy_op_params;

#define FDY_OP_MAX_INPUTS  12 /* NORM_MATMUL_Q4 of 3 weights */
#define FDY_OP_MAX_OUTPUTS 3
/* Weights of one NORM_MATMUL_Q4 op. */
#define FDY_NORM_MATMUL_MAX_WEIGHTS 3

typedef struct fdy_backend_buffer fdy_backend_buffer;

/* A contiguous row-major tensor in a backend buffer. */
typedef struct fdy_tensor_view {
  fdy_backend_buffer *buffer; /* NULL while only the shape is known */
  uint64_t offset;            /* bytes from the buffer's start */
  fdy_dtype dtype;
  fdy_shape shape;
} fdy_tensor_view;

/* One op ready to launch. workspace is scratch the backend asked for
 * (workspace_bytes); its contents are undefined between launches. */
typedef struct fdy_op {
  fdy_op_kind kind;
  fdy_op_params params;
  uint32_t input_count, output_count;
  fdy_tensor_view inputs[FDY_OP_MAX_INPUTS];
  fdy_tensor_view outputs[FDY_OP_MAX_OUTPUTS];
  fdy_tensor_view workspace; /* U8 [bytes]; buffer NULL when none */
  /* 0, or for an op of 2 or more rows (the leading dimension of its
   * row-wise operands) more rows than its own: a backend whose choice of
   * kernel variant (a block shape, a split of a sum) follows the row count
   * chooses as for an op of this many rows, so that the op computes each
   * row bitwise as that larger op does. One-row ops ignore it (their
   * one-row variants may round differently). The executor sets it on the
   * launches of a step narrowed to a batch-size bucket of 2 or more rows
   * (runtime.h) to the step's full rows. It never changes which rows are
   * computed. */
  uint64_t variant_rows;
} fdy_op;

/* Checks an op against its kind's row of the op table (foundry/op_table.h):
 * operand counts, dtypes, ranks, non-zero dimensions, its parameters'
 * ranges and the shape relations above (group 32/64/128, head counts
 * dividing, ...). Buffers and offsets are not looked at. Errors:
 * FDY_ERR_INVALID_ARGUMENT with ids[0] = the operand index (inputs first,
 * then outputs) or -1 for a parameter or an operand count (expected/actual
 * = the counts), name = the kind's name, and a message naming the kind and
 * the operand; FDY_ERR_OVERFLOW (ids[0] set) when an operand's byte size
 * does not fit 64 bits. */
fdy_status fdy_op_check(const fdy_op *op, fdy_error *err);

/* Rope inverse frequency of pair j (llama3 scaling when params say so):
 * the one definition every backend uses. params is a ROPE op's; for a
 * ROPE_ATTENTION op pass fdy_rope_params_of(op). */
double fdy_rope_inverse_frequency(const fdy_op_params *params, uint32_t j);

/* The parameters of a ROPE op equal to the rope of op (a ROPE or
 * ROPE_ATTENTION op; all zero for another kind). */
fdy_op_params fdy_rope_params_of(const fdy_op *op);

#ifdef __cplusplus
}
#endif
#endif
