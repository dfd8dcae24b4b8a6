/* The op table (include/foundry/op_table.h): one row per op kind, each
 * kind's shape rule beside it, and fdy_op_check, which walks a row.
 *
 * fdy_op_check checks the operand counts, then each operand on its own
 * (dtype, rank, non-zero dims, byte size within 64 bits) in operand order,
 * then each parameter against its range, then the kind's shape rule: the
 * relations between operands. The sizes of a kind come from its
 * activations (x and the output); a failed relation is blamed on the
 * operand that disagrees with them (a weight whose rows differ from the
 * output's width, an output whose rows differ from x's). */
#include "foundry/op_table.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PARAMS_INDEX (-1) /* ids[0] of an error in the parameters */

/* The op being checked and its row. */
typedef struct check {
  const fdy_op *op;
  const fdy_op_row *row;
  fdy_error *err;
} check;

static check checking(const fdy_op *op, fdy_error *err) {
  return (check){op, fdy_op_row_of(op->kind), err};
}

/* Operand i: inputs[i] for i < input_count, then the outputs. */
static const fdy_tensor_view *operand(const check *c, uint32_t i) {
  return i < c->op->input_count ? &c->op->inputs[i]
                                : &c->op->outputs[i - c->op->input_count];
}

static const char *operand_name(const check *c, int64_t i) {
  return i == PARAMS_INDEX ? "params"
                           : fdy_op_operand_of(c->op, (uint32_t)i)->name;
}

/* Fails with kind on operand `index` (PARAMS_INDEX for a parameter). */
static fdy_status fail(const check *c, fdy_status kind, int64_t index,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status fail(const check *c, fdy_status kind, int64_t index,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(c->err, kind, c->row->name, 0, 0, fmt, ap);
  va_end(ap);
  fdy_error_prefix(c->err, "%s op: %s", c->row->name, operand_name(c, index));
  if (c->err != NULL) {
    c->err->ids[0] = index;
  }
  return kind;
}

/* Fails on an operand count: expected/actual set. */
static fdy_status fail_count(const check *c, uint32_t expected, uint32_t actual,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status fail_count(const check *c, uint32_t expected, uint32_t actual,
                             const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(c->err, FDY_ERR_INVALID_ARGUMENT, c->row->name, expected,
                  actual, fmt, ap);
  va_end(ap);
  fdy_error_prefix(c->err, "%s op", c->row->name);
  return FDY_ERR_INVALID_ARGUMENT;
}

/* dtype, rank, non-zero dims and a byte size that fits 64 bits. */
static fdy_status check_operand(const check *c, uint32_t i) {
  const fdy_tensor_view *v = operand(c, i);
  const fdy_op_operand *want = fdy_op_operand_of(c->op, i);
  if ((unsigned)v->dtype >= FDY_DTYPE_COUNT ||
      (want->dtypes & FDY_DTYPE_BIT(v->dtype)) == 0) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, i, "dtype %s is not allowed",
                fdy_dtype_name(v->dtype));
  }
  if (v->shape.rank != want->rank) {
    fdy_status st = fail(c, FDY_ERR_INVALID_ARGUMENT, i, "rank %u, expected %u",
                         v->shape.rank, want->rank);
    if (c->err != NULL) {
      c->err->expected = want->rank;
      c->err->actual = v->shape.rank;
    }
    return st;
  }
  for (uint32_t d = 0; d < v->shape.rank; d++) {
    if (v->shape.dims[d] == 0) {
      return fail(c, FDY_ERR_INVALID_ARGUMENT, i, "dimension %u is 0", d);
    }
  }
  uint64_t bytes = 0;
  if (fdy_tensor_bytes(v->dtype, v->shape, &bytes, NULL) != FDY_OK) {
    return fail(c, FDY_ERR_OVERFLOW, i, "its byte size overflows 64 bits");
  }
  return FDY_OK;
}

/* The parameter within its range. */
static fdy_status check_param(const check *c, const fdy_op_param *p) {
  const unsigned char *at = (const unsigned char *)&c->op->params + p->offset;
  double value = 0.0;
  char shown[64] = "";
  if (p->type == FDY_OP_PARAM_U32) {
    uint32_t v;
    memcpy(&v, at, sizeof v);
    value = v;
    snprintf(shown, sizeof shown, "%u", v);
  } else if (p->type == FDY_OP_PARAM_F64) {
    memcpy(&value, at, sizeof value);
    snprintf(shown, sizeof shown, "%g", value);
  }
  const char *want = NULL;
  switch (p->range) {
  case FDY_OP_RANGE_ANY:
    return FDY_OK;
  case FDY_OP_RANGE_NON_NEGATIVE:
    want = isfinite(value) && value >= 0.0 ? NULL : "finite and >= 0";
    break;
  case FDY_OP_RANGE_POSITIVE:
    want = isfinite(value) && value > 0.0 ? NULL : "finite and > 0";
    break;
  case FDY_OP_RANGE_POSITIVE_EVEN:
    want = value > 0.0 && fmod(value, 2.0) == 0.0 ? NULL : "even and > 0";
    break;
  }
  if (want == NULL) {
    return FDY_OK;
  }
  return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAMS_INDEX, "%s %s must be %s",
              p->key, shown, want);
}

/* ---- the shape rules' helpers -------------------------------------------- */

/* Operand i must have dimension d equal to want. */
static fdy_status want_dim(const check *c, uint32_t i, uint32_t d,
                           uint64_t want) {
  uint64_t got = operand(c, i)->shape.dims[d];
  if (got == want) {
    return FDY_OK;
  }
  fdy_status st = fail(c, FDY_ERR_INVALID_ARGUMENT, i,
                       "dimension %u is %llu, expected %llu", d,
                       (unsigned long long)got, (unsigned long long)want);
  if (c->err != NULL) {
    c->err->expected = want;
    c->err->actual = got;
  }
  return st;
}

/* Operand i has the dtype and shape of operand j. */
static fdy_status want_like(const check *c, uint32_t i, uint32_t j) {
  const fdy_tensor_view *a = operand(c, i), *b = operand(c, j);
  if (a->dtype != b->dtype) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, i, "dtype %s differs from %s's %s",
                fdy_dtype_name(a->dtype), operand_name(c, j),
                fdy_dtype_name(b->dtype));
  }
  for (uint32_t d = 0; d < a->shape.rank; d++) {
    fdy_status st = want_dim(c, i, d, b->shape.dims[d]);
    if (st != FDY_OK) {
      return st;
    }
  }
  return FDY_OK;
}

/* The step tensor (operand 0) holds the count and the triples of `rows`
 * rows. */
static fdy_status want_step(const check *c, uint64_t rows) {
  uint64_t need = FDY_STEP_ELEMENTS(rows);
  uint64_t got = operand(c, 0)->shape.dims[0];
  if (got >= need) {
    return FDY_OK;
  }
  fdy_status st = fail(c, FDY_ERR_INVALID_ARGUMENT, 0,
                       "%llu elements, at least %llu needed",
                       (unsigned long long)got, (unsigned long long)need);
  if (c->err != NULL) {
    c->err->expected = need;
    c->err->actual = got;
  }
  return st;
}

/* Quantized rows of `features` values at `bits` bits (4 or 8): packed U32
 * [rows, features * bits / 32] at operand w, scales and biases S [rows,
 * features / group] at s and s + 1, group 32, 64 or 128. */
static fdy_status want_quantized(const check *c, uint32_t w, uint32_t s,
                                 uint64_t rows, uint64_t features,
                                 uint32_t bits) {
  const uint32_t per_word = 32 / bits;
  fdy_status st = want_dim(c, w, 0, rows);
  if (st == FDY_OK && features % per_word != 0) {
    st = fail(c, FDY_ERR_INVALID_ARGUMENT, w,
              "%llu features are not whole 32-bit words of %u-bit values",
              (unsigned long long)features, bits);
  }
  if (st == FDY_OK) {
    st = want_dim(c, w, 1, features / per_word);
  }
  if (st == FDY_OK) {
    st = want_dim(c, s, 0, rows);
  }
  if (st == FDY_OK) {
    uint64_t groups = operand(c, s)->shape.dims[1];
    uint64_t group = features / groups;
    if (features % groups != 0 ||
        (group != 32 && group != 64 && group != 128)) {
      st = fail(c, FDY_ERR_INVALID_ARGUMENT, s,
                "%llu groups over %llu features: the group size must be 32, "
                "64 or 128",
                (unsigned long long)groups, (unsigned long long)features);
    }
  }
  return st == FDY_OK ? want_like(c, s + 1, s) : st;
}

/* The norm prologue of a fused kind: step, x at 1 and its norm weight at
 * 2. */
static fdy_status want_norm(const check *c) {
  fdy_status st = want_step(c, 0);
  return st == FDY_OK ? want_dim(c, 2, 0, c->op->inputs[1].shape.dims[1]) : st;
}

/* Scales s share the dtype and group count of scales `first` (the weights
 * of one fused op share group size and scale dtype). */
static fdy_status want_same_groups(const check *c, uint32_t s, uint32_t first) {
  const fdy_tensor_view *a = operand(c, s), *b = operand(c, first);
  if (a->dtype != b->dtype) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, s, "dtype %s differs from %s's %s",
                fdy_dtype_name(a->dtype), operand_name(c, first),
                fdy_dtype_name(b->dtype));
  }
  return want_dim(c, s, 1, b->shape.dims[1]);
}

/* llama3 frequency scaling, when the rope asks for it. */
static fdy_status want_llama3_scaling(const check *c,
                                      const fdy_rope_params *r) {
  if (r->llama3 &&
      (!(r->factor > 0.0) || !isfinite(r->factor) ||
       !(r->low_freq_factor > 0.0) ||
       !(r->high_freq_factor > r->low_freq_factor) ||
       !isfinite(r->high_freq_factor) || r->original_max_position == 0)) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAMS_INDEX,
                "llama3 scaling needs factor > 0, 0 < low_freq_factor < "
                "high_freq_factor and original_max_position > 0");
  }
  return FDY_OK;
}

/* ATTENTION's relations (also ROPE_ATTENTION's), a its parameters. */
static fdy_status want_attention(const check *c,
                                 const fdy_attention_params *a) {
  const fdy_op *op = c->op;
  uint32_t out = op->input_count;
  fdy_status st = FDY_OK;
  uint64_t d = a->head_dim;
  /* ATTENTION reads row 0's position and sequence, ROPE_ATTENTION every
   * row's */
  uint64_t t = op->inputs[1].shape.dims[0];
  if ((st = want_step(c, op->kind == FDY_OP_ATTENTION ? 1 : t)) != FDY_OK) {
    return st;
  }
  if (a->heads % a->kv_heads != 0) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAMS_INDEX,
                "heads %u, kv_heads %u and head_dim %llu must be non-zero, "
                "kv_heads dividing heads",
                a->heads, a->kv_heads, (unsigned long long)d);
  }
  if ((st = want_dim(c, 1, 1, a->heads * d)) != FDY_OK ||
      (st = want_dim(c, 2, 0, t)) != FDY_OK ||
      (st = want_dim(c, 2, 1, a->kv_heads * d)) != FDY_OK ||
      (st = want_like(c, 3, 2)) != FDY_OK ||
      (st = want_dim(c, 4, 2, a->kv_heads * d)) != FDY_OK ||
      (st = want_like(c, 5, 4)) != FDY_OK) {
    return st;
  }
  return want_like(c, out, 1);
}

/* ---- shape rules, one per kind (row kinds: T = dims[0] of the output) ---- */

static fdy_status checksum_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  if (op->inputs[0].shape.dims[0] % 8 != 0) {
    return fail(&c, FDY_ERR_INVALID_ARGUMENT, 0,
                "%llu bytes are not a multiple of 8",
                (unsigned long long)op->inputs[0].shape.dims[0]);
  }
  fdy_status st = FDY_OK;
  if (op->input_count == 2 && (st = want_dim(&c, 1, 0, 1)) != FDY_OK) {
    return st;
  }
  return want_dim(&c, op->input_count, 0, 1);
}

/* EMBED_Q4 and EMBED_Q8: a row per step row from a table of `bits`-bit
 * rows. */
static fdy_status embed_quantized_shapes(const fdy_op *op, uint32_t bits,
                                         fdy_error *err) {
  const check c = checking(op, err);
  const fdy_shape *o = &op->outputs[0].shape;
  fdy_status st = want_step(&c, o->dims[0]);
  return st == FDY_OK ? want_quantized(&c, 1, 2, op->inputs[1].shape.dims[0],
                                       o->dims[1], bits)
                      : st;
}

static fdy_status embed_q4_shapes(const fdy_op *op, fdy_error *err) {
  return embed_quantized_shapes(op, 4, err);
}

static fdy_status embed_q8_shapes(const fdy_op *op, fdy_error *err) {
  return embed_quantized_shapes(op, 8, err);
}

static fdy_status embed_dense_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  const fdy_shape *o = &op->outputs[0].shape;
  fdy_status st = want_step(&c, o->dims[0]);
  return st == FDY_OK ? want_dim(&c, 1, 1, o->dims[1]) : st;
}

/* RMSNORM: the weight's n values divide x's width (each n-wide segment of
 * a row is normalized on its own: a head of Qwen3's q or k), the output
 * like x. */
static fdy_status rmsnorm_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  fdy_status st = want_step(&c, 0);
  if (st != FDY_OK) {
    return st;
  }
  uint64_t width = op->inputs[1].shape.dims[1];
  uint64_t n = op->inputs[2].shape.dims[0];
  if (width % n != 0) {
    st = fail(&c, FDY_ERR_INVALID_ARGUMENT, 2,
              "%llu values do not divide x's width %llu", (unsigned long long)n,
              (unsigned long long)width);
    if (c.err != NULL) {
      c.err->expected = width;
      c.err->actual = n;
    }
    return st;
  }
  return want_like(&c, op->input_count, 1);
}

/* MATMUL_Q4 and MATMUL_Q8 (and MATMUL_ADD_Q4's matmul): x [T, I] times
 * `bits`-bit weights [O, ...] into [T, O]. */
static fdy_status matmul_quantized_shapes(const fdy_op *op, uint32_t bits,
                                          fdy_error *err) {
  const check c = checking(op, err);
  const fdy_shape *x = &op->inputs[1].shape;
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_quantized(&c, 2, 3, op->outputs[0].shape.dims[1], x->dims[1],
                           bits)) != FDY_OK) {
    return st;
  }
  return want_dim(&c, op->input_count, 0, x->dims[0]);
}

static fdy_status matmul_q4_shapes(const fdy_op *op, fdy_error *err) {
  return matmul_quantized_shapes(op, 4, err);
}

static fdy_status matmul_q8_shapes(const fdy_op *op, fdy_error *err) {
  return matmul_quantized_shapes(op, 8, err);
}

static fdy_status matmul_dense_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  const fdy_shape *x = &op->inputs[1].shape;
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_dim(&c, 2, 0, op->outputs[0].shape.dims[1])) != FDY_OK ||
      (st = want_dim(&c, 2, 1, x->dims[1])) != FDY_OK) {
    return st;
  }
  return want_dim(&c, op->input_count, 0, x->dims[0]);
}

static fdy_status rope_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  const fdy_shape *x = &op->inputs[1].shape;
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, x->dims[0])) != FDY_OK ||
      (st = want_llama3_scaling(&c, &op->params.rope)) != FDY_OK) {
    return st;
  }
  if (x->dims[1] % op->params.rope.head_dim != 0) {
    return fail(&c, FDY_ERR_INVALID_ARGUMENT, 1,
                "width %llu is not a multiple of head_dim %u",
                (unsigned long long)x->dims[1], op->params.rope.head_dim);
  }
  return want_like(&c, op->input_count, 1);
}

static fdy_status attention_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  return want_attention(&c, &op->params.attention);
}

static fdy_status rope_attention_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  const fdy_rope_params *r = &op->params.rope_attention.rope;
  const fdy_attention_params *a = &op->params.rope_attention.attention;
  fdy_status st = want_llama3_scaling(&c, r);
  if (st != FDY_OK) {
    return st;
  }
  if (r->head_dim != a->head_dim) {
    return fail(&c, FDY_ERR_INVALID_ARGUMENT, PARAMS_INDEX,
                "rope head_dim %u differs from the attention's %u", r->head_dim,
                a->head_dim);
  }
  return want_attention(&c, a);
}

/* SWIGLU and ADD: two inputs and the output alike. */
static fdy_status binary_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_like(&c, 2, 1)) != FDY_OK) {
    return st;
  }
  return want_like(&c, op->input_count, 1);
}

/* ADD_BIAS: a bias as wide as x's rows, the output like x. */
static fdy_status add_bias_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_dim(&c, 2, 0, op->inputs[1].shape.dims[1])) != FDY_OK) {
    return st;
  }
  return want_like(&c, op->input_count, 1);
}

static fdy_status last_row_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  uint32_t out = op->input_count;
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_dim(&c, out, 0, 1)) != FDY_OK) {
    return st;
  }
  return want_dim(&c, out, 1, op->inputs[1].shape.dims[1]);
}

static fdy_status argmax_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  return want_dim(&c, op->input_count, 0, op->inputs[0].shape.dims[0]);
}

/* SAMPLE: a params row of FDY_SAMPLE_FIELDS words and an id per logits
 * row. */
static fdy_status sample_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  uint64_t rows = op->inputs[1].shape.dims[0];
  fdy_status st = FDY_OK;
  if ((st = want_step(&c, 0)) != FDY_OK ||
      (st = want_dim(&c, 2, 0, rows)) != FDY_OK ||
      (st = want_dim(&c, 2, 1, FDY_SAMPLE_FIELDS)) != FDY_OK) {
    return st;
  }
  return want_dim(&c, op->input_count, 0, rows);
}

/* Weight j at 3 + 3j against output j. */
static fdy_status norm_matmul_q4_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  fdy_status st = want_norm(&c);
  uint64_t rows = op->inputs[1].shape.dims[0];
  uint64_t in = op->inputs[1].shape.dims[1];
  for (uint32_t j = 0; st == FDY_OK && j < op->output_count; j++) {
    st = want_quantized(&c, 3 + 3 * j, 4 + 3 * j, op->outputs[j].shape.dims[1],
                        in, 4);
    if (st == FDY_OK && j > 0) {
      st = want_same_groups(&c, 4 + 3 * j, 4);
    }
    if (st == FDY_OK) {
      st = want_dim(&c, op->input_count + j, 0, rows);
    }
  }
  return st;
}

static fdy_status norm_swiglu_q4_shapes(const fdy_op *op, fdy_error *err) {
  const check c = checking(op, err);
  uint64_t in = op->inputs[1].shape.dims[1];
  uint64_t out = op->outputs[0].shape.dims[1];
  fdy_status st = FDY_OK;
  if ((st = want_norm(&c)) != FDY_OK ||
      (st = want_quantized(&c, 3, 4, out, in, 4)) != FDY_OK ||
      (st = want_quantized(&c, 6, 7, out, in, 4)) != FDY_OK ||
      (st = want_same_groups(&c, 7, 4)) != FDY_OK) {
    return st;
  }
  return want_dim(&c, op->input_count, 0, op->inputs[1].shape.dims[0]);
}

static fdy_status matmul_add_q4_shapes(const fdy_op *op, fdy_error *err) {
  fdy_status st = matmul_q4_shapes(op, err);
  if (st != FDY_OK) {
    return st;
  }
  const check c = checking(op, err);
  return want_like(&c, 5, op->input_count);
}

/* ---- the table ----------------------------------------------------------- */

#define FIELD(key, type, offset, range)                                        \
  { key, FDY_OP_PARAM_##type, offset, range }
#define PARAM(part, member, type, range)                                       \
  FIELD(#member, type, offsetof(fdy_op_params, part.member), range)
#define ROPE_ATTENTION(key, part, member, type, range)                         \
  FIELD(key, type, offsetof(fdy_op_params, rope_attention.part.member), range)

static const fdy_op_param checksum_params[] = {
    PARAM(checksum, passes, U32, FDY_OP_RANGE_ANY),
};
/* RMSNORM's, NORM_MATMUL_Q4's and NORM_SWIGLU_Q4's */
static const fdy_op_param rmsnorm_params[] = {
    PARAM(rmsnorm, eps, F64, FDY_OP_RANGE_NON_NEGATIVE),
};
static const fdy_op_param rope_params[] = {
    PARAM(rope, head_dim, U32, FDY_OP_RANGE_POSITIVE_EVEN),
    PARAM(rope, theta, F64, FDY_OP_RANGE_POSITIVE),
    PARAM(rope, llama3, BOOL, FDY_OP_RANGE_ANY),
    PARAM(rope, factor, F64, FDY_OP_RANGE_ANY),
    PARAM(rope, low_freq_factor, F64, FDY_OP_RANGE_ANY),
    PARAM(rope, high_freq_factor, F64, FDY_OP_RANGE_ANY),
    PARAM(rope, original_max_position, U32, FDY_OP_RANGE_ANY),
};
static const fdy_op_param attention_params[] = {
    PARAM(attention, heads, U32, FDY_OP_RANGE_POSITIVE),
    PARAM(attention, kv_heads, U32, FDY_OP_RANGE_POSITIVE),
    PARAM(attention, head_dim, U32, FDY_OP_RANGE_POSITIVE),
};
/* The rope's head_dim, equal to the attention's, is "rope_head_dim". */
static const fdy_op_param rope_attention_params[] = {
    ROPE_ATTENTION("rope_head_dim", rope, head_dim, U32,
                   FDY_OP_RANGE_POSITIVE_EVEN),
    ROPE_ATTENTION("theta", rope, theta, F64, FDY_OP_RANGE_POSITIVE),
    ROPE_ATTENTION("llama3", rope, llama3, BOOL, FDY_OP_RANGE_ANY),
    ROPE_ATTENTION("factor", rope, factor, F64, FDY_OP_RANGE_ANY),
    ROPE_ATTENTION("low_freq_factor", rope, low_freq_factor, F64,
                   FDY_OP_RANGE_ANY),
    ROPE_ATTENTION("high_freq_factor", rope, high_freq_factor, F64,
                   FDY_OP_RANGE_ANY),
    ROPE_ATTENTION("original_max_position", rope, original_max_position, U32,
                   FDY_OP_RANGE_ANY),
    ROPE_ATTENTION("heads", attention, heads, U32, FDY_OP_RANGE_POSITIVE),
    ROPE_ATTENTION("kv_heads", attention, kv_heads, U32, FDY_OP_RANGE_POSITIVE),
    ROPE_ATTENTION("head_dim", attention, head_dim, U32, FDY_OP_RANGE_POSITIVE),
};

#define PARAMS(a) .params = (a), .param_count = sizeof(a) / sizeof((a)[0])
#define INPUTS(n) .min_inputs = (n), .max_inputs = (n)

/* Dtype sets. */
#define F32    FDY_DTYPE_BIT(FDY_DTYPE_F32)
#define HALVES (FDY_DTYPE_BIT(FDY_DTYPE_F16) | FDY_DTYPE_BIT(FDY_DTYPE_BF16))
#define FLOATS (F32 | HALVES)
#define CACHE  (F32 | FDY_DTYPE_BIT(FDY_DTYPE_F16))

#define OPERAND(name, dtypes, rank, flags)                                     \
  { name, dtypes, rank, flags }
/* The step tensor, an F32 activation of rank 2, a KV cache, the three
 * tensors of an affine quantized matrix (4- or 8-bit: the kind says), and
 * an unquantized matrix. */
#define STEP           OPERAND("step", FDY_DTYPE_BIT(FDY_DTYPE_I32), 1, 0)
#define ROWS(name)     OPERAND(name, F32, 2, 0)
#define CACHE_OF(name) OPERAND(name, CACHE, 3, FDY_OPERAND_STATE)
#define AFFINE(weight, scales, biases)                                         \
  OPERAND(weight, FDY_DTYPE_BIT(FDY_DTYPE_U32), 2, 0),                         \
      OPERAND(scales, HALVES, 2, 0), OPERAND(biases, HALVES, 2, 0)
#define DENSE(name) OPERAND(name, FLOATS, 2, 0)
#define ATTENTION_INPUTS                                                       \
  STEP, ROWS("q"), ROWS("k"), ROWS("v"), CACHE_OF("k_cache"),                  \
      CACHE_OF("v_cache")

static const fdy_op_row kind_rows[FDY_OP_KIND_COUNT] = {
    [FDY_OP_CHECKSUM] =
        {.name = "checksum",
         PARAMS(checksum_params),
         .min_inputs = 1,
         .max_inputs = 2,
         .inputs = {OPERAND("data", FDY_DTYPE_BIT(FDY_DTYPE_U8), 1,
                            FDY_OPERAND_WORDS),
                    OPERAND("prev", FDY_DTYPE_BIT(FDY_DTYPE_U64), 1, 0)},
         .outputs = {OPERAND("out", FDY_DTYPE_BIT(FDY_DTYPE_U64), 1, 0)},
         .shape_rule = checksum_shapes},
    [FDY_OP_EMBED_Q4] = {.name = "embed_q4",
                         .flags = FDY_OP_EMBEDDING,
                         INPUTS(4),
                         .inputs = {STEP, AFFINE("table", "scales", "biases")},
                         .outputs = {ROWS("out")},
                         .shape_rule = embed_q4_shapes},
    [FDY_OP_RMSNORM] = {.name = "rmsnorm",
                        PARAMS(rmsnorm_params),
                        INPUTS(3),
                        .inputs = {STEP, ROWS("x"),
                                   OPERAND("weight", FLOATS, 1, 0)},
                        .outputs = {ROWS("out")},
                        .shape_rule = rmsnorm_shapes},
    [FDY_OP_MATMUL_Q4] = {.name = "matmul_q4",
                          .flags = FDY_OP_Q4_MATMUL,
                          INPUTS(5),
                          .inputs = {STEP, ROWS("x"),
                                     AFFINE("weight", "scales", "biases")},
                          .outputs = {ROWS("out")},
                          .shape_rule = matmul_q4_shapes},
    [FDY_OP_ROPE] = {.name = "rope",
                     PARAMS(rope_params),
                     INPUTS(2),
                     .inputs = {STEP, ROWS("x")},
                     .outputs = {ROWS("out")},
                     .shape_rule = rope_shapes},
    [FDY_OP_ATTENTION] = {.name = "attention",
                          PARAMS(attention_params),
                          INPUTS(6),
                          .inputs = {ATTENTION_INPUTS},
                          .outputs = {ROWS("out")},
                          .shape_rule = attention_shapes},
    [FDY_OP_SWIGLU] = {.name = "swiglu",
                       INPUTS(3),
                       .inputs = {STEP, ROWS("gate"), ROWS("up")},
                       .outputs = {ROWS("out")},
                       .shape_rule = binary_shapes},
    [FDY_OP_ADD] = {.name = "add",
                    INPUTS(3),
                    .inputs = {STEP, ROWS("a"), ROWS("b")},
                    .outputs = {ROWS("out")},
                    .shape_rule = binary_shapes},
    [FDY_OP_LAST_ROW] = {.name = "last_row",
                         INPUTS(2),
                         .inputs = {STEP, ROWS("x")},
                         .outputs = {ROWS("out")},
                         .shape_rule = last_row_shapes},
    [FDY_OP_ARGMAX] = {.name = "argmax",
                       INPUTS(1),
                       .inputs = {ROWS("x")},
                       .outputs = {OPERAND("out", FDY_DTYPE_BIT(FDY_DTYPE_I32),
                                           1, 0)},
                       .shape_rule = argmax_shapes},
    [FDY_OP_NORM_MATMUL_Q4] =
        {.name = "norm_matmul_q4",
         .flags = FDY_OP_Q4_MATMUL,
         PARAMS(rmsnorm_params),
         .min_inputs = 6,
         .max_inputs = 12,
         .inputs_per_output = 3,
         .inputs = {STEP, ROWS("x"), OPERAND("norm", HALVES, 1, 0),
                    AFFINE("weight0", "scales0", "biases0"),
                    AFFINE("weight1", "scales1", "biases1"),
                    AFFINE("weight2", "scales2", "biases2")},
         .outputs = {ROWS("out0"), ROWS("out1"), ROWS("out2")},
         .shape_rule = norm_matmul_q4_shapes},
    [FDY_OP_NORM_SWIGLU_Q4] =
        {.name = "norm_swiglu_q4",
         .flags = FDY_OP_Q4_MATMUL,
         PARAMS(rmsnorm_params),
         INPUTS(9),
         .inputs = {STEP, ROWS("x"), OPERAND("norm", HALVES, 1, 0),
                    AFFINE("gate_weight", "gate_scales", "gate_biases"),
                    AFFINE("up_weight", "up_scales", "up_biases")},
         .outputs = {ROWS("out")},
         .shape_rule = norm_swiglu_q4_shapes},
    [FDY_OP_MATMUL_ADD_Q4] = {.name = "matmul_add_q4",
                              .flags = FDY_OP_Q4_MATMUL,
                              INPUTS(6),
                              .inputs = {STEP, ROWS("x"),
                                         AFFINE("weight", "scales", "biases"),
                                         ROWS("residual")},
                              .outputs = {ROWS("out")},
                              .shape_rule = matmul_add_q4_shapes},
    [FDY_OP_ROPE_ATTENTION] = {.name = "rope_attention",
                               PARAMS(rope_attention_params),
                               INPUTS(6),
                               .inputs = {ATTENTION_INPUTS},
                               .outputs = {ROWS("out")},
                               .shape_rule = rope_attention_shapes},
    [FDY_OP_SAMPLE] =
        {.name = "sample",
         INPUTS(3),
         .inputs = {STEP, ROWS("x"),
                    OPERAND("params", FDY_DTYPE_BIT(FDY_DTYPE_U32), 2, 0)},
         .outputs = {OPERAND("out", FDY_DTYPE_BIT(FDY_DTYPE_I32), 1, 0)},
         .shape_rule = sample_shapes},
    [FDY_OP_EMBED_Q8] = {.name = "embed_q8",
                         .flags = FDY_OP_EMBEDDING,
                         INPUTS(4),
                         .inputs = {STEP, AFFINE("table", "scales", "biases")},
                         .outputs = {ROWS("out")},
                         .shape_rule = embed_q8_shapes},
    [FDY_OP_MATMUL_Q8] = {.name = "matmul_q8",
                          INPUTS(5),
                          .inputs = {STEP, ROWS("x"),
                                     AFFINE("weight", "scales", "biases")},
                          .outputs = {ROWS("out")},
                          .shape_rule = matmul_q8_shapes},
    [FDY_OP_EMBED_DENSE] = {.name = "embed_dense",
                            .flags = FDY_OP_EMBEDDING,
                            INPUTS(2),
                            .inputs = {STEP, DENSE("table")},
                            .outputs = {ROWS("out")},
                            .shape_rule = embed_dense_shapes},
    [FDY_OP_MATMUL_DENSE] = {.name = "matmul_dense",
                             INPUTS(3),
                             .inputs = {STEP, ROWS("x"), DENSE("weight")},
                             .outputs = {ROWS("out")},
                             .shape_rule = matmul_dense_shapes},
    [FDY_OP_ADD_BIAS] = {.name = "add_bias",
                         INPUTS(3),
                         .inputs = {STEP, ROWS("x"),
                                    OPERAND("bias", FLOATS, 1, 0)},
                         .outputs = {ROWS("out")},
                         .shape_rule = add_bias_shapes},
};

/* ---- reading the table --------------------------------------------------- */

const fdy_op_row *fdy_op_row_of(fdy_op_kind kind) {
  return (unsigned)kind < FDY_OP_KIND_COUNT ? &kind_rows[kind] : NULL;
}

const fdy_op_operand *fdy_op_operand_of(const fdy_op *op, uint32_t i) {
  const fdy_op_row *row = &kind_rows[op->kind];
  return i < op->input_count ? &row->inputs[i]
                             : &row->outputs[i - op->input_count];
}

fdy_op_params fdy_op_params_normalized(fdy_op_kind kind,
                                       const fdy_op_params *params) {
  static const size_t sizes[] = {[FDY_OP_PARAM_U32] = sizeof(uint32_t),
                                 [FDY_OP_PARAM_F64] = sizeof(double),
                                 [FDY_OP_PARAM_BOOL] = sizeof(bool)};
  fdy_op_params normalized;
  memset(&normalized, 0, sizeof normalized);
  const fdy_op_row *row = fdy_op_row_of(kind);
  for (uint32_t i = 0; row != NULL && i < row->param_count; i++) {
    const fdy_op_param *p = &row->params[i];
    memcpy((unsigned char *)&normalized + p->offset,
           (const unsigned char *)params + p->offset, sizes[p->type]);
  }
  return normalized;
}

const char *fdy_op_kind_name(fdy_op_kind kind) {
  const fdy_op_row *row = fdy_op_row_of(kind);
  return row != NULL ? row->name : "unknown";
}

fdy_status fdy_op_kind_parse(const char *name, fdy_op_kind *out,
                             fdy_error *err) {
  for (unsigned i = 0; name != NULL && i < FDY_OP_KIND_COUNT; i++) {
    if (strcmp(name, kind_rows[i].name) == 0) {
      *out = (fdy_op_kind)i;
      return FDY_OK;
    }
  }
  fdy_status st = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                                "unknown op kind '%s'", name ? name : "");
  if (err != NULL && name != NULL) {
    snprintf(err->name, sizeof err->name, "%s", name);
  }
  return st;
}

/* The operand counts of the op against its row. */
static fdy_status check_counts(const check *c) {
  const fdy_op *op = c->op;
  const fdy_op_row *row = c->row;
  if (op->input_count < row->min_inputs || op->input_count > row->max_inputs) {
    return fail_count(c, row->min_inputs, op->input_count,
                      "%u inputs, expected %u", op->input_count,
                      row->min_inputs);
  }
  uint32_t outputs = 1;
  if (row->inputs_per_output != 0) {
    uint32_t leading = row->min_inputs - row->inputs_per_output;
    if ((op->input_count - leading) % row->inputs_per_output != 0) {
      return fail_count(c, row->min_inputs, op->input_count,
                        "%u inputs, expected %u to %u in steps of %u",
                        op->input_count, row->min_inputs, row->max_inputs,
                        row->inputs_per_output);
    }
    outputs = (op->input_count - leading) / row->inputs_per_output;
  }
  if (op->output_count != outputs) {
    return fail_count(c, outputs, op->output_count, "%u outputs, expected %u",
                      op->output_count, outputs);
  }
  return FDY_OK;
}

fdy_status fdy_op_check(const fdy_op *op, fdy_error *err) {
  if (op == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "the op is NULL");
  }
  if (fdy_op_row_of(op->kind) == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "op kind %d is not one of the %d kinds", (int)op->kind,
                         FDY_OP_KIND_COUNT);
  }
  const check c = checking(op, err);
  fdy_status st = check_counts(&c);
  for (uint32_t i = 0; st == FDY_OK && i < op->input_count + op->output_count;
       i++) {
    st = check_operand(&c, i);
  }
  for (uint32_t i = 0; st == FDY_OK && i < c.row->param_count; i++) {
    st = check_param(&c, &c.row->params[i]);
  }
  return st == FDY_OK ? c.row->shape_rule(op, err) : st;
}
