/* Op kinds: their names, the operand tables of include/foundry/ops.h as
 * checks (fdy_op_check), and the rope inverse frequency every backend uses.
 *
 * fdy_op_check first checks each operand on its own (dtype, rank, non-zero
 * dims, byte size within 64 bits) in operand order, then the relations
 * between operands. The sizes of a kind come from its activations (x and
 * the output); a failed relation is blamed on the operand that disagrees
 * with them (a weight whose rows differ from the output's width, an output
 * whose rows differ from x's). */
#include "foundry/ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[FDY_OP_KIND_COUNT] = {
    [FDY_OP_CHECKSUM] = "checksum",
    [FDY_OP_EMBED_Q4] = "embed_q4",
    [FDY_OP_RMSNORM] = "rmsnorm",
    [FDY_OP_MATMUL_Q4] = "matmul_q4",
    [FDY_OP_ROPE] = "rope",
    [FDY_OP_ATTENTION] = "attention",
    [FDY_OP_SWIGLU] = "swiglu",
    [FDY_OP_ADD] = "add",
    [FDY_OP_LAST_ROW] = "last_row",
    [FDY_OP_ARGMAX] = "argmax",
    [FDY_OP_NORM_MATMUL_Q4] = "norm_matmul_q4",
    [FDY_OP_NORM_SWIGLU_Q4] = "norm_swiglu_q4",
    [FDY_OP_MATMUL_ADD_Q4] = "matmul_add_q4",
    [FDY_OP_ROPE_ATTENTION] = "rope_attention",
};

const char *fdy_op_kind_name(fdy_op_kind kind) {
  if ((unsigned)kind >= FDY_OP_KIND_COUNT) {
    return "unknown";
  }
  return kind_names[kind];
}

fdy_status fdy_op_kind_parse(const char *name, fdy_op_kind *out,
                             fdy_error *err) {
  if (name != NULL) {
    for (unsigned i = 0; i < FDY_OP_KIND_COUNT; i++) {
      if (strcmp(name, kind_names[i]) == 0) {
        *out = (fdy_op_kind)i;
        return FDY_OK;
      }
    }
  }
  fdy_status st = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                                "unknown op kind '%s'", name ? name : "");
  if (err != NULL && name != NULL) {
    snprintf(err->name, sizeof err->name, "%s", name);
  }
  return st;
}

/* ---- operand tables ------------------------------------------------------ */

#define MAX_OPERANDS (FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS)
#define PARAM        (-1)

/* Dtype sets as bit masks. */
#define DT(d)  (1u << (d))
#define HALVES (DT(FDY_DTYPE_F16) | DT(FDY_DTYPE_BF16))
#define I32    DT(FDY_DTYPE_I32)
#define U32    DT(FDY_DTYPE_U32)
#define F32    DT(FDY_DTYPE_F32)

typedef struct kind_table {
  uint32_t min_inputs, max_inputs;
  const char *names[MAX_OPERANDS]; /* inputs, then the outputs */
  uint32_t dtypes[MAX_OPERANDS];   /* allowed dtypes (mask) */
  uint32_t ranks[MAX_OPERANDS];
} kind_table;

/* Operand order of every kind (ops.h). The optional CHECKSUM prev is input
 * 1 when present; its output then moves from index 1 to 2. Rows from
 * max_inputs on describe the outputs; a NORM_MATMUL_Q4 of k weights has
 * 3 + 3k inputs and k outputs. */
static const kind_table tables[FDY_OP_KIND_COUNT] = {
    [FDY_OP_CHECKSUM] = {1,
                         2,
                         {"data", "prev", "out"},
                         {DT(FDY_DTYPE_U8), DT(FDY_DTYPE_U64),
                          DT(FDY_DTYPE_U64)},
                         {1, 1, 1}},
    [FDY_OP_EMBED_Q4] = {4,
                         4,
                         {"step", "table", "scales", "biases", "out"},
                         {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_U32), HALVES, HALVES,
                          DT(FDY_DTYPE_F32)},
                         {1, 2, 2, 2, 2}},
    [FDY_OP_RMSNORM] = {3,
                        3,
                        {"step", "x", "weight", "out"},
                        {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32), HALVES,
                         DT(FDY_DTYPE_F32)},
                        {1, 2, 1, 2}},
    [FDY_OP_MATMUL_Q4] = {5,
                          5,
                          {"step", "x", "weight", "scales", "biases", "out"},
                          {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32),
                           DT(FDY_DTYPE_U32), HALVES, HALVES,
                           DT(FDY_DTYPE_F32)},
                          {1, 2, 2, 2, 2, 2}},
    [FDY_OP_ROPE] = {2,
                     2,
                     {"step", "x", "out"},
                     {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32), DT(FDY_DTYPE_F32)},
                     {1, 2, 2}},
    [FDY_OP_ATTENTION] = {6,
                          6,
                          {"step", "q", "k", "v", "k_cache", "v_cache", "out"},
                          {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32),
                           DT(FDY_DTYPE_F32), DT(FDY_DTYPE_F32),
                           DT(FDY_DTYPE_F32) | DT(FDY_DTYPE_F16),
                           DT(FDY_DTYPE_F32) | DT(FDY_DTYPE_F16),
                           DT(FDY_DTYPE_F32)},
                          {1, 2, 2, 2, 3, 3, 2}},
    [FDY_OP_SWIGLU] = {3,
                       3,
                       {"step", "gate", "up", "out"},
                       {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32), DT(FDY_DTYPE_F32),
                        DT(FDY_DTYPE_F32)},
                       {1, 2, 2, 2}},
    [FDY_OP_ADD] = {3,
                    3,
                    {"step", "a", "b", "out"},
                    {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32), DT(FDY_DTYPE_F32),
                     DT(FDY_DTYPE_F32)},
                    {1, 2, 2, 2}},
    [FDY_OP_LAST_ROW] = {2,
                         2,
                         {"step", "x", "out"},
                         {DT(FDY_DTYPE_I32), DT(FDY_DTYPE_F32),
                          DT(FDY_DTYPE_F32)},
                         {1, 2, 2}},
    [FDY_OP_ARGMAX] =
        {1, 1, {"x", "out"}, {DT(FDY_DTYPE_F32), DT(FDY_DTYPE_I32)}, {2, 1}},
    [FDY_OP_NORM_MATMUL_Q4] = {6,
                               12,
                               {"step", "x", "norm", "weight0", "scales0",
                                "biases0", "weight1", "scales1", "biases1",
                                "weight2", "scales2", "biases2", "out0", "out1",
                                "out2"},
                               {I32, F32, HALVES, U32, HALVES, HALVES, U32,
                                HALVES, HALVES, U32, HALVES, HALVES, F32, F32,
                                F32},
                               {1, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}},
    [FDY_OP_NORM_SWIGLU_Q4] = {9,
                               9,
                               {"step", "x", "norm", "gate_weight",
                                "gate_scales", "gate_biases", "up_weight",
                                "up_scales", "up_biases", "out"},
                               {I32, F32, HALVES, U32, HALVES, HALVES, U32,
                                HALVES, HALVES, F32},
                               {1, 2, 1, 2, 2, 2, 2, 2, 2, 2}},
    [FDY_OP_MATMUL_ADD_Q4] = {6,
                              6,
                              {"step", "x", "weight", "scales", "biases",
                               "residual", "out"},
                              {I32, F32, U32, HALVES, HALVES, F32, F32},
                              {1, 2, 2, 2, 2, 2, 2}},
    [FDY_OP_ROPE_ATTENTION] = {6,
                               6,
                               {"step", "q", "k", "v", "k_cache", "v_cache",
                                "out"},
                               {I32, F32, F32, F32,
                                DT(FDY_DTYPE_F32) | DT(FDY_DTYPE_F16),
                                DT(FDY_DTYPE_F32) | DT(FDY_DTYPE_F16), F32},
                               {1, 2, 2, 2, 3, 3, 2}},
};

/* The op being checked: operand i is inputs[i] for i < input_count, then
 * the output; table row t is operand i's entry (CHECKSUM without prev skips
 * row 1). */
typedef struct check {
  const fdy_op *op;
  const kind_table *table;
  fdy_error *err;
} check;

static const fdy_tensor_view *operand(const check *c, uint32_t i) {
  return i < c->op->input_count ? &c->op->inputs[i]
                                : &c->op->outputs[i - c->op->input_count];
}

static uint32_t table_row(const check *c, uint32_t i) {
  return i < c->op->input_count ? i
                                : c->table->max_inputs + i - c->op->input_count;
}

static const char *operand_name(const check *c, int64_t i) {
  return i == PARAM ? "params" : c->table->names[table_row(c, (uint32_t)i)];
}

/* Fails with kind on operand `index` (PARAM for a parameter). */
static fdy_status fail(const check *c, fdy_status kind, int64_t index,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status fail(const check *c, fdy_status kind, int64_t index,
                       const char *fmt, ...) {
  char detail[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  const char *kind_name = fdy_op_kind_name(c->op->kind);
  fdy_error_set(c->err, kind, "%s op: %s: %s", kind_name,
                operand_name(c, index), detail);
  if (c->err != NULL) {
    c->err->ids[0] = index;
    snprintf(c->err->name, sizeof c->err->name, "%s", kind_name);
  }
  return kind;
}

/* dtype, rank, non-zero dims and a byte size that fits 64 bits. */
static fdy_status check_operand(const check *c, uint32_t i) {
  const fdy_tensor_view *v = operand(c, i);
  uint32_t row = table_row(c, i);
  if ((unsigned)v->dtype >= FDY_DTYPE_COUNT ||
      (c->table->dtypes[row] & DT(v->dtype)) == 0) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, i, "dtype %s is not allowed",
                fdy_dtype_name(v->dtype));
  }
  if (v->shape.rank != c->table->ranks[row]) {
    fdy_status st = fail(c, FDY_ERR_INVALID_ARGUMENT, i, "rank %u, expected %u",
                         v->shape.rank, c->table->ranks[row]);
    if (c->err != NULL) {
      c->err->expected = c->table->ranks[row];
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

/* Quantized rows of `features` values: packed U32 [rows, features / 8] at
 * operand w, scales and biases S [rows, features / group] at s and s + 1,
 * group 32, 64 or 128. */
static fdy_status want_q4(const check *c, uint32_t w, uint32_t s, uint64_t rows,
                          uint64_t features) {
  fdy_status st = want_dim(c, w, 0, rows);
  if (st == FDY_OK && features % 8 != 0) {
    st = fail(c, FDY_ERR_INVALID_ARGUMENT, w,
              "%llu features are not whole 32-bit words of 4-bit values",
              (unsigned long long)features);
  }
  if (st == FDY_OK) {
    st = want_dim(c, w, 1, features / 8);
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

static fdy_status check_eps(const check *c) {
  double eps = c->op->params.rmsnorm.eps;
  if (!(eps >= 0.0) || !isfinite(eps)) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                "eps must be finite and >= 0");
  }
  return FDY_OK;
}

/* The norm prologue of a fused kind: step, x at 1 and its norm weight at
 * 2, eps. */
static fdy_status want_norm(const check *c) {
  fdy_status st = want_step(c, 0);
  if (st == FDY_OK) {
    st = want_dim(c, 2, 0, c->op->inputs[1].shape.dims[1]);
  }
  return st == FDY_OK ? check_eps(c) : st;
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

/* NORM_MATMUL_Q4: weight j at 3 + 3j against output j. */
static fdy_status check_norm_matmul(const check *c) {
  const fdy_op *op = c->op;
  fdy_status st = want_norm(c);
  uint64_t rows = op->inputs[1].shape.dims[0];
  uint64_t in = op->inputs[1].shape.dims[1];
  for (uint32_t j = 0; st == FDY_OK && j < op->output_count; j++) {
    uint32_t out = op->input_count + j;
    st = want_q4(c, 3 + 3 * j, 4 + 3 * j, op->outputs[j].shape.dims[1], in);
    if (st == FDY_OK && j > 0) {
      st = want_same_groups(c, 4 + 3 * j, 4);
    }
    if (st == FDY_OK) {
      st = want_dim(c, out, 0, rows);
    }
  }
  return st;
}

static fdy_status check_rope_params(const check *c) {
  const fdy_op_params params = fdy_rope_params_of(c->op);
  const fdy_op_params *p = &params;
  if (p->rope.head_dim == 0 || p->rope.head_dim % 2 != 0) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                "head_dim %u must be even and non-zero", p->rope.head_dim);
  }
  if (!(p->rope.theta > 0.0) || !isfinite(p->rope.theta)) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                "theta must be positive and finite");
  }
  if (p->rope.llama3 &&
      (!(p->rope.factor > 0.0) || !isfinite(p->rope.factor) ||
       !(p->rope.low_freq_factor > 0.0) ||
       !(p->rope.high_freq_factor > p->rope.low_freq_factor) ||
       !isfinite(p->rope.high_freq_factor) ||
       p->rope.original_max_position == 0)) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                "llama3 scaling needs factor > 0, 0 < low_freq_factor < "
                "high_freq_factor and original_max_position > 0");
  }
  return FDY_OK;
}

/* ATTENTION's relations (also ROPE_ATTENTION's), a its parameters. */
static fdy_status check_attention(const check *c,
                                  const fdy_attention_params *a) {
  const fdy_op *op = c->op;
  uint32_t out = op->input_count;
  fdy_status st = FDY_OK;
  uint32_t heads = a->heads;
  uint32_t kv = a->kv_heads;
  uint64_t d = a->head_dim;
  /* ATTENTION reads row 0's position and sequence, ROPE_ATTENTION every
   * row's */
  uint64_t t = op->inputs[1].shape.dims[0];
  if ((st = want_step(c, op->kind == FDY_OP_ATTENTION ? 1 : t)) != FDY_OK) {
    return st;
  }
  if (heads == 0 || kv == 0 || d == 0 || heads % kv != 0) {
    return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                "heads %u, kv_heads %u and head_dim %llu must be non-zero, "
                "kv_heads dividing heads",
                heads, kv, (unsigned long long)d);
  }
  if ((st = want_dim(c, 1, 1, heads * d)) != FDY_OK ||
      (st = want_dim(c, 2, 0, t)) != FDY_OK ||
      (st = want_dim(c, 2, 1, kv * d)) != FDY_OK ||
      (st = want_like(c, 3, 2)) != FDY_OK ||
      (st = want_dim(c, 4, 2, kv * d)) != FDY_OK ||
      (st = want_like(c, 5, 4)) != FDY_OK) {
    return st;
  }
  return want_like(c, out, 1);
}

/* The relations of each kind, once every operand passed check_operand. Row
 * kinds have T = dims[0] of their output. */
static fdy_status check_relations(const check *c) {
  const fdy_op *op = c->op;
  uint32_t out = op->input_count;
  const fdy_shape *o = &op->outputs[0].shape;
  fdy_status st = FDY_OK;
  switch (op->kind) {
  case FDY_OP_CHECKSUM:
    if (op->inputs[0].shape.dims[0] % 8 != 0) {
      return fail(c, FDY_ERR_INVALID_ARGUMENT, 0,
                  "%llu bytes are not a multiple of 8",
                  (unsigned long long)op->inputs[0].shape.dims[0]);
    }
    if (op->input_count == 2 && (st = want_dim(c, 1, 0, 1)) != FDY_OK) {
      return st;
    }
    return want_dim(c, out, 0, 1);
  case FDY_OP_EMBED_Q4:
    if ((st = want_step(c, o->dims[0])) != FDY_OK) {
      return st;
    }
    return want_q4(c, 1, 2, op->inputs[1].shape.dims[0], o->dims[1]);
  case FDY_OP_RMSNORM:
    if ((st = want_step(c, 0)) != FDY_OK ||
        (st = want_dim(c, 2, 0, op->inputs[1].shape.dims[1])) != FDY_OK) {
      return st;
    }
    if ((st = check_eps(c)) != FDY_OK) {
      return st;
    }
    return want_like(c, out, 1);
  case FDY_OP_MATMUL_Q4:
    if ((st = want_step(c, 0)) != FDY_OK ||
        (st = want_q4(c, 2, 3, o->dims[1], op->inputs[1].shape.dims[1])) !=
            FDY_OK) {
      return st;
    }
    return want_dim(c, out, 0, op->inputs[1].shape.dims[0]);
  case FDY_OP_ROPE:
    if ((st = want_step(c, op->inputs[1].shape.dims[0])) != FDY_OK ||
        (st = check_rope_params(c)) != FDY_OK) {
      return st;
    }
    if (op->inputs[1].shape.dims[1] % op->params.rope.head_dim != 0) {
      return fail(c, FDY_ERR_INVALID_ARGUMENT, 1,
                  "width %llu is not a multiple of head_dim %u",
                  (unsigned long long)op->inputs[1].shape.dims[1],
                  op->params.rope.head_dim);
    }
    return want_like(c, out, 1);
  case FDY_OP_ATTENTION:
    return check_attention(c, &op->params.attention);
  case FDY_OP_ROPE_ATTENTION: {
    const fdy_attention_params *a = &op->params.rope_attention.attention;
    if ((st = check_rope_params(c)) != FDY_OK) {
      return st;
    }
    if (op->params.rope_attention.rope.head_dim != a->head_dim) {
      return fail(c, FDY_ERR_INVALID_ARGUMENT, PARAM,
                  "rope head_dim %u differs from the attention's %u",
                  op->params.rope_attention.rope.head_dim, a->head_dim);
    }
    return check_attention(c, a);
  }
  case FDY_OP_SWIGLU:
  case FDY_OP_ADD:
    if ((st = want_step(c, 0)) != FDY_OK ||
        (st = want_like(c, 2, 1)) != FDY_OK) {
      return st;
    }
    return want_like(c, out, 1);
  case FDY_OP_LAST_ROW:
    if ((st = want_step(c, 0)) != FDY_OK ||
        (st = want_dim(c, out, 0, 1)) != FDY_OK) {
      return st;
    }
    return want_dim(c, out, 1, op->inputs[1].shape.dims[1]);
  case FDY_OP_ARGMAX:
    return want_dim(c, out, 0, op->inputs[0].shape.dims[0]);
  case FDY_OP_NORM_MATMUL_Q4:
    return check_norm_matmul(c);
  case FDY_OP_NORM_SWIGLU_Q4: {
    uint64_t in = op->inputs[1].shape.dims[1];
    if ((st = want_norm(c)) != FDY_OK ||
        (st = want_q4(c, 3, 4, o->dims[1], in)) != FDY_OK ||
        (st = want_q4(c, 6, 7, o->dims[1], in)) != FDY_OK ||
        (st = want_same_groups(c, 7, 4)) != FDY_OK) {
      return st;
    }
    return want_dim(c, out, 0, op->inputs[1].shape.dims[0]);
  }
  case FDY_OP_MATMUL_ADD_Q4:
    if ((st = want_step(c, 0)) != FDY_OK ||
        (st = want_q4(c, 2, 3, o->dims[1], op->inputs[1].shape.dims[1])) !=
            FDY_OK ||
        (st = want_dim(c, out, 0, op->inputs[1].shape.dims[0])) != FDY_OK) {
      return st;
    }
    return want_like(c, 5, out);
  case FDY_OP_KIND_COUNT:
    break;
  }
  return FDY_OK;
}

fdy_status fdy_op_check(const fdy_op *op, fdy_error *err) {
  if (op == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "the op is NULL");
  }
  if ((unsigned)op->kind >= FDY_OP_KIND_COUNT) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "op kind %d is not one of the %d kinds", (int)op->kind,
                         FDY_OP_KIND_COUNT);
  }
  check c = {op, &tables[op->kind], err};
  if (op->input_count < c.table->min_inputs ||
      op->input_count > c.table->max_inputs) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "%s op: %u inputs, expected %u", fdy_op_kind_name(op->kind),
                  op->input_count, c.table->min_inputs);
    if (err != NULL) {
      err->expected = c.table->min_inputs;
      err->actual = op->input_count;
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (op->kind == FDY_OP_NORM_MATMUL_Q4 && (op->input_count - 3) % 3 != 0) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "%s op: %u inputs, expected 6, 9 or 12 (step, x, norm and "
                  "1 to 3 weights of 3 tensors)",
                  fdy_op_kind_name(op->kind), op->input_count);
    if (err != NULL) {
      err->expected = c.table->min_inputs;
      err->actual = op->input_count;
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  uint32_t outputs =
      op->kind == FDY_OP_NORM_MATMUL_Q4 ? (op->input_count - 3) / 3 : 1;
  if (op->output_count != outputs) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "%s op: %u outputs, expected %u", fdy_op_kind_name(op->kind),
                  op->output_count, outputs);
    if (err != NULL) {
      err->expected = outputs;
      err->actual = op->output_count;
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  for (uint32_t i = 0; i < op->input_count + op->output_count; i++) {
    fdy_status st = check_operand(&c, i);
    if (st != FDY_OK) {
      return st;
    }
  }
  return check_relations(&c);
}

/* Ported from the Llama session's rope tables (the transformers rule for
 * llama3: long wavelengths divided by factor, short ones kept, the band in
 * between interpolated); the double arithmetic is unchanged. */
double fdy_rope_inverse_frequency(const fdy_op_params *params, uint32_t j) {
  double inv = 1.0 / pow(params->rope.theta, (2.0 * j) / params->rope.head_dim);
  if (!params->rope.llama3) {
    return inv;
  }
  double old = (double)params->rope.original_max_position;
  double low_wavelen = old / params->rope.low_freq_factor;
  double high_wavelen = old / params->rope.high_freq_factor;
  double wavelen = 2.0 * M_PI / inv;
  if (wavelen < high_wavelen) {
    return inv;
  }
  if (wavelen > low_wavelen) {
    return inv / params->rope.factor;
  }
  double smooth =
      (old / wavelen - params->rope.low_freq_factor) /
      (params->rope.high_freq_factor - params->rope.low_freq_factor);
  return (1.0 - smooth) * inv / params->rope.factor + smooth * inv;
}

fdy_op_params fdy_rope_params_of(const fdy_op *op) {
  fdy_op_params p;
  memset(&p, 0, sizeof p);
  if (op->kind == FDY_OP_ROPE) {
    p.rope = op->params.rope;
  } else if (op->kind == FDY_OP_ROPE_ATTENTION) {
    p.rope = op->params.rope_attention.rope;
  }
  return p;
}

void fdy_step_set_row(int32_t *step, uint32_t t, int32_t id, uint32_t sequence,
                      uint32_t position) {
  step[FDY_STEP_ID(t)] = id;
  step[FDY_STEP_POSITION(t)] = (int32_t)position;
  step[FDY_STEP_SEQUENCE(t)] = (int32_t)sequence;
}

void fdy_step_set_chunk(int32_t *step, const int32_t *ids, uint32_t count,
                        uint32_t sequence, uint32_t position) {
  step[FDY_STEP_COUNT] = (int32_t)count;
  for (uint32_t t = 0; t < count; t++) {
    fdy_step_set_row(step, t, ids[t], sequence, position + t);
  }
}
