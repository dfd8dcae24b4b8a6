/* Foundry's op table: one row per op kind of include/foundry/ops.h, the one
 * description of a kind that every module reads. A row gives the kind's
 * name, its parameter fields (where each lives in fdy_op_params, its type
 * and the values it may take), its operands (names, allowed dtypes, ranks,
 * and which inputs are state the op updates in place), its shape rule and
 * its flags.
 *
 * fdy_op_check checks an op against its row; the graph keeps only a
 * kind's parameter fields; the plan JSON reader and writer carry exactly
 * those fields under their keys; the plan validator treats state inputs as
 * written; backends ask the flags instead of listing kinds. Adding a kind
 * is adding its row (src/core/op_table.c) and its kernels.
 *
 * The table is constant data: every function here is thread-safe and
 * returns pointers into it that stay valid for the life of the process. */
#ifndef FOUNDRY_OP_TABLE_H
#define FOUNDRY_OP_TABLE_H

#include "foundry/ops.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a parameter is stored in fdy_op_params. */
typedef enum fdy_op_param_type {
  FDY_OP_PARAM_U32,  /* uint32_t; a JSON integer */
  FDY_OP_PARAM_F64,  /* double; a JSON number */
  FDY_OP_PARAM_BOOL, /* bool; true or false */
} fdy_op_param_type;

/* The values a parameter may take on its own; relations between
 * parameters (kv_heads dividing heads, ...) are the row's shape rule's. */
typedef enum fdy_op_param_range {
  FDY_OP_RANGE_ANY,           /* every value of its type */
  FDY_OP_RANGE_NON_NEGATIVE,  /* finite and >= 0 */
  FDY_OP_RANGE_POSITIVE,      /* finite and > 0 */
  FDY_OP_RANGE_POSITIVE_EVEN, /* even and > 0 (an integer) */
} fdy_op_param_range;

/* One parameter field of a kind. */
typedef struct fdy_op_param {
  const char *key; /* its name in plan JSON and in errors */
  fdy_op_param_type type;
  size_t offset; /* bytes from the start of fdy_op_params */
  fdy_op_param_range range;
} fdy_op_param;

/* The most parameter fields of one kind (ROPE_ATTENTION's). */
#define FDY_OP_MAX_PARAMS 10

/* Bit of dtype d in fdy_op_operand.dtypes. */
#define FDY_DTYPE_BIT(d) (1u << (d))

/* fdy_op_operand.flags */
/* An input the op also writes in place: state such as a KV cache. */
#define FDY_OPERAND_STATE (1u << 0)
/* Bytes read as 64-bit words: 8-byte aligned, and its one dimension is a
 * byte count, not an index (it may pass 2^31). */
#define FDY_OPERAND_WORDS (1u << 1)

/* One operand of a kind. */
typedef struct fdy_op_operand {
  const char *name; /* "x", "k_cache", "out0": named in errors */
  uint32_t dtypes;  /* the allowed dtypes, FDY_DTYPE_BIT of each */
  uint32_t rank;
  uint32_t flags; /* FDY_OPERAND_* */
} fdy_op_operand;

/* fdy_op_row.flags */
/* x (input 1, F32 [T, I]) times 4-bit quantized weights: MATMUL_Q4 and
 * the kinds fused around it. */
#define FDY_OP_Q4_MATMUL (1u << 0)
/* A lookup: each output row is one row of the table (input 1) chosen by
 * the step's id (EMBED_Q4, EMBED_Q8, EMBED_DENSE). */
#define FDY_OP_EMBEDDING (1u << 1)

/* A kind's shape rule: the relations between its operands' shapes (and
 * between its parameters) of an op whose operand counts, operands and
 * parameter ranges already passed their row. Fails as fdy_op_check does;
 * call fdy_op_check rather than a rule. */
typedef fdy_status (*fdy_op_shape_rule)(const fdy_op *op, fdy_error *err);

/* One op kind. An op has min_inputs to max_inputs inputs: the first ones
 * of `inputs` (CHECKSUM's prev is the optional second). It has one output
 * unless inputs_per_output is set: then the inputs past the first
 * (min_inputs - inputs_per_output) come in groups of inputs_per_output,
 * with one output per group (NORM_MATMUL_Q4's weights). */
typedef struct fdy_op_row {
  const char *name;           /* stable lowercase name, "matmul_q4" */
  uint32_t flags;             /* FDY_OP_Q4_MATMUL, FDY_OP_EMBEDDING */
  const fdy_op_param *params; /* param_count fields, in plan JSON order */
  uint32_t param_count;
  uint32_t min_inputs, max_inputs, inputs_per_output;
  fdy_op_operand inputs[FDY_OP_MAX_INPUTS];
  fdy_op_operand outputs[FDY_OP_MAX_OUTPUTS];
  fdy_op_shape_rule shape_rule;
} fdy_op_row;

/* The row of kind; NULL when kind is not one of the FDY_OP_KIND_COUNT. */
const fdy_op_row *fdy_op_row_of(fdy_op_kind kind);

/* The row entry of operand i (inputs first, then outputs) of an op that
 * passed fdy_op_check. */
const fdy_op_operand *fdy_op_operand_of(const fdy_op *op, uint32_t i);

/* params with every byte zero except the fields of kind's row (all zero
 * for an unknown kind): equal parameters compare equal bytewise. */
fdy_op_params fdy_op_params_normalized(fdy_op_kind kind,
                                       const fdy_op_params *params);

#ifdef __cplusplus
}
#endif
#endif
