/* Tests of the op kinds (include/foundry/ops.h): names, fdy_op_check over
 * every kind's operand table (valid ops accepted, each kind of violation
 * refused with the offending operand in ids[0]) and the rope inverse
 * frequency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/ops.h"

#include <math.h>
#include <string.h>

#define PARAM (-1)

static fdy_tensor_view view(fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_view v = {.dtype = dtype, .shape = shape};
  return v;
}

static fdy_tensor_view step_view(uint64_t elements) {
  return view(FDY_DTYPE_I32, FDY_SHAPE(elements));
}

/* A valid op of each kind with small, typical shapes (T = 4 rows). */
static fdy_op valid_op(fdy_op_kind kind) {
  fdy_op op = {.kind = kind, .output_count = 1};
  switch (kind) {
  case FDY_OP_CHECKSUM:
    op.input_count = 2;
    op.inputs[0] = view(FDY_DTYPE_U8, FDY_SHAPE(64));
    op.inputs[1] = view(FDY_DTYPE_U64, FDY_SHAPE(1));
    op.outputs[0] = view(FDY_DTYPE_U64, FDY_SHAPE(1));
    op.params.checksum.passes = 2;
    break;
  case FDY_OP_EMBED_Q4:
    op.input_count = 4;
    op.inputs[0] = step_view(FDY_STEP_ELEMENTS(4));
    op.inputs[1] = view(FDY_DTYPE_U32, FDY_SHAPE(100, 256 / 8));
    op.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(100, 4));
    op.inputs[3] = view(FDY_DTYPE_F16, FDY_SHAPE(100, 4));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    break;
  case FDY_OP_RMSNORM:
    op.input_count = 3;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.inputs[2] = view(FDY_DTYPE_BF16, FDY_SHAPE(256));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.params.rmsnorm.eps = 1e-5;
    break;
  case FDY_OP_MATMUL_Q4:
    op.input_count = 5;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(96, 32));
    op.inputs[3] = view(FDY_DTYPE_F16, FDY_SHAPE(96, 8));
    op.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(96, 8));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 96));
    break;
  case FDY_OP_ROPE:
    op.input_count = 2;
    op.inputs[0] = step_view(FDY_STEP_ELEMENTS(4));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 8 * 64));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 8 * 64));
    op.params.rope.head_dim = 64;
    op.params.rope.theta = 500000.0;
    op.params.rope.llama3 = true;
    op.params.rope.factor = 32.0;
    op.params.rope.low_freq_factor = 1.0;
    op.params.rope.high_freq_factor = 4.0;
    op.params.rope.original_max_position = 8192;
    break;
  case FDY_OP_ATTENTION:
    op.input_count = 6;
    op.inputs[0] = step_view(FDY_STEP_ELEMENTS(4));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 8 * 64));
    op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 2 * 64));
    op.inputs[3] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 2 * 64));
    op.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(3, 128, 2 * 64));
    op.inputs[5] = view(FDY_DTYPE_F16, FDY_SHAPE(3, 128, 2 * 64));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 8 * 64));
    op.params.attention.heads = 8;
    op.params.attention.kv_heads = 2;
    op.params.attention.head_dim = 64;
    break;
  case FDY_OP_ROPE_ATTENTION: /* ATTENTION's operands, ROPE's rope */
    op = valid_op(FDY_OP_ATTENTION);
    op.kind = kind;
    op.params.rope_attention.attention =
        valid_op(FDY_OP_ATTENTION).params.attention;
    op.params.rope_attention.rope = valid_op(FDY_OP_ROPE).params.rope;
    break;
  case FDY_OP_SWIGLU:
  case FDY_OP_ADD:
    op.input_count = 3;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 100));
    op.inputs[2] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 100));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 100));
    break;
  case FDY_OP_LAST_ROW:
    op.input_count = 2;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 100));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(1, 100));
    break;
  case FDY_OP_ARGMAX:
    op.input_count = 1;
    op.inputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(3, 1000));
    op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(3));
    break;
  case FDY_OP_NORM_MATMUL_Q4: /* q, k and v: 96, 32 and 32 outputs */
    op.input_count = 12;
    op.output_count = 3;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.inputs[2] = view(FDY_DTYPE_BF16, FDY_SHAPE(256));
    for (uint32_t j = 0; j < 3; j++) {
      uint64_t rows = j == 0 ? 96 : 32;
      op.inputs[3 + 3 * j] = view(FDY_DTYPE_U32, FDY_SHAPE(rows, 32));
      op.inputs[4 + 3 * j] = view(FDY_DTYPE_F16, FDY_SHAPE(rows, 8));
      op.inputs[5 + 3 * j] = view(FDY_DTYPE_F16, FDY_SHAPE(rows, 8));
      op.outputs[j] = view(FDY_DTYPE_F32, FDY_SHAPE(4, rows));
    }
    op.params.rmsnorm.eps = 1e-5;
    break;
  case FDY_OP_NORM_SWIGLU_Q4:
    op.input_count = 9;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(256));
    for (uint32_t j = 0; j < 2; j++) {
      op.inputs[3 + 3 * j] = view(FDY_DTYPE_U32, FDY_SHAPE(80, 32));
      op.inputs[4 + 3 * j] = view(FDY_DTYPE_BF16, FDY_SHAPE(80, 4));
      op.inputs[5 + 3 * j] = view(FDY_DTYPE_BF16, FDY_SHAPE(80, 4));
    }
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 80));
    op.params.rmsnorm.eps = 1e-6;
    break;
  case FDY_OP_MATMUL_ADD_Q4:
    op.input_count = 6;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 256));
    op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(96, 32));
    op.inputs[3] = view(FDY_DTYPE_F16, FDY_SHAPE(96, 2));
    op.inputs[4] = view(FDY_DTYPE_F16, FDY_SHAPE(96, 2));
    op.inputs[5] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 96));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 96));
    break;
  case FDY_OP_SAMPLE:
    op.input_count = 3;
    op.inputs[0] = step_view(FDY_STEP_ELEMENTS(1));
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(3, 1000));
    op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(3, FDY_SAMPLE_FIELDS));
    op.outputs[0] = view(FDY_DTYPE_I32, FDY_SHAPE(3));
    break;
  case FDY_OP_EMBED_Q8: /* 4 bytes a word, groups of 64 */
    op = valid_op(FDY_OP_EMBED_Q4);
    op.kind = kind;
    op.inputs[1] = view(FDY_DTYPE_U32, FDY_SHAPE(100, 256 / 4));
    break;
  case FDY_OP_MATMUL_Q8: /* groups of 32 */
    op = valid_op(FDY_OP_MATMUL_Q4);
    op.kind = kind;
    op.inputs[2] = view(FDY_DTYPE_U32, FDY_SHAPE(96, 256 / 4));
    break;
  case FDY_OP_EMBED_DENSE:
    op.input_count = 2;
    op.inputs[0] = step_view(FDY_STEP_ELEMENTS(4));
    op.inputs[1] = view(FDY_DTYPE_BF16, FDY_SHAPE(100, 200));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 200));
    break;
  case FDY_OP_MATMUL_DENSE:
    op.input_count = 3;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 200));
    op.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(96, 200));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 96));
    break;
  case FDY_OP_ADD_BIAS: /* q of 14 heads of 64 */
    op.input_count = 3;
    op.inputs[0] = step_view(2);
    op.inputs[1] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 896));
    op.inputs[2] = view(FDY_DTYPE_BF16, FDY_SHAPE(896));
    op.outputs[0] = view(FDY_DTYPE_F32, FDY_SHAPE(4, 896));
    break;
  case FDY_OP_KIND_COUNT:
    fail();
  }
  return op;
}

/* Operand i (inputs, then outputs). */
static fdy_tensor_view *operand(fdy_op *op, uint32_t i) {
  return i < op->input_count ? &op->inputs[i]
                             : &op->outputs[i - op->input_count];
}

static void expect_ok(const fdy_op *op) {
  fdy_error err;
  fdy_status st = fdy_op_check(op, &err);
  if (st != FDY_OK) {
    print_error("unexpected refusal: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
}

/* The op is refused with kind and ids[0] == index. */
static void expect_refused(const fdy_op *op, fdy_status kind, int64_t index) {
  fdy_error err;
  assert_int_equal(fdy_op_check(op, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(err.ids[0], index);
  assert_string_equal(err.name, fdy_op_kind_name(op->kind));
  assert_int_equal(fdy_op_check(op, NULL), kind);
}

static void test_kind_names(void **state) {
  (void)state;
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    const char *name = fdy_op_kind_name((fdy_op_kind)k);
    assert_string_not_equal(name, "unknown");
    fdy_op_kind parsed = FDY_OP_KIND_COUNT;
    assert_int_equal(fdy_op_kind_parse(name, &parsed, NULL), FDY_OK);
    assert_int_equal(parsed, k);
  }
  assert_string_equal(fdy_op_kind_name(FDY_OP_MATMUL_Q4), "matmul_q4");
  assert_string_equal(fdy_op_kind_name(FDY_OP_KIND_COUNT), "unknown");
  assert_string_equal(fdy_op_kind_name((fdy_op_kind)-1), "unknown");
  fdy_error err;
  fdy_op_kind parsed = FDY_OP_ADD;
  assert_int_equal(fdy_op_kind_parse("matmul", &parsed, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "matmul");
  assert_int_equal(parsed, FDY_OP_ADD);
  assert_int_equal(fdy_op_kind_parse(NULL, &parsed, &err), FDY_ERR_UNSUPPORTED);
}

static void test_valid_ops_accepted(void **state) {
  (void)state;
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    fdy_op op = valid_op((fdy_op_kind)k);
    expect_ok(&op);
  }
  /* checksum without prev */
  fdy_op op = valid_op(FDY_OP_CHECKSUM);
  op.input_count = 1;
  op.outputs[0] = op.inputs[1];
  expect_ok(&op);
  /* groups of 32, 64 and 128, F16 and BF16 scales */
  for (uint64_t group = 32; group <= 128; group *= 2) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
      fdy_dtype s = bf16 ? FDY_DTYPE_BF16 : FDY_DTYPE_F16;
      op = valid_op(FDY_OP_MATMUL_Q4);
      op.inputs[3] = view(s, FDY_SHAPE(96, 256 / group));
      op.inputs[4] = op.inputs[3];
      expect_ok(&op);
      op = valid_op(FDY_OP_EMBED_Q4);
      op.inputs[2] = view(s, FDY_SHAPE(100, 256 / group));
      op.inputs[3] = op.inputs[2];
      expect_ok(&op);
    }
  }
  /* an input width that is not a multiple of 64 (groups of 32) */
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[1].shape.dims[1] = 96;
  op.inputs[2].shape.dims[1] = 12;
  op.inputs[3].shape.dims[1] = 3;
  op.inputs[4].shape.dims[1] = 3;
  expect_ok(&op);
  /* the dense kinds take F32, F16 and BF16 weights */
  for (fdy_dtype d = FDY_DTYPE_F32; d <= FDY_DTYPE_BF16; d++) {
    op = valid_op(FDY_OP_MATMUL_DENSE);
    op.inputs[2].dtype = d;
    expect_ok(&op);
    op = valid_op(FDY_OP_EMBED_DENSE);
    op.inputs[1].dtype = d;
    expect_ok(&op);
  }
  /* F32 norm weights (an unquantized F32 checkpoint's) */
  op = valid_op(FDY_OP_RMSNORM);
  op.inputs[2].dtype = FDY_DTYPE_F32;
  expect_ok(&op);
  /* F16 norm weights, F32 caches, MHA, plain rope, eps 0, longer steps */
  op = valid_op(FDY_OP_RMSNORM);
  op.inputs[2].dtype = FDY_DTYPE_F16;
  op.params.rmsnorm.eps = 0.0;
  op.inputs[0] = step_view(70);
  expect_ok(&op);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[4].dtype = FDY_DTYPE_F32;
  op.inputs[5].dtype = FDY_DTYPE_F32;
  expect_ok(&op);
  op.params.attention.kv_heads = 8;
  for (uint32_t i = 2; i <= 3; i++) {
    op.inputs[i].shape.dims[1] = 8 * 64;
  }
  for (uint32_t i = 4; i <= 5; i++) {
    op.inputs[i].shape.dims[2] = 8 * 64;
  }
  expect_ok(&op);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.llama3 = false;
  op.params.rope.factor = 0.0; /* ignored without llama3 */
  expect_ok(&op);
  /* one row */
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[1].shape.dims[0] = 1;
  op.outputs[0].shape.dims[0] = 1;
  expect_ok(&op);
}

static void test_counts(void **state) {
  (void)state;
  fdy_error err;
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    fdy_op op = valid_op((fdy_op_kind)k);
    op.input_count = FDY_OP_MAX_INPUTS + 1;
    assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.ids[0], PARAM);
    assert_int_equal(err.actual, FDY_OP_MAX_INPUTS + 1);
    op = valid_op((fdy_op_kind)k);
    op.input_count = 0;
    assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.ids[0], PARAM);
    assert_int_equal(err.actual, 0);
    op = valid_op((fdy_op_kind)k);
    uint32_t outputs = op.output_count;
    op.output_count = 0;
    assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(err.expected, outputs);
    assert_int_equal(err.actual, 0);
    op.output_count = 2;
    assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  }
  /* NORM_MATMUL_Q4: whole weights, one output each */
  fdy_op fused = valid_op(FDY_OP_NORM_MATMUL_Q4);
  fused.input_count = 10;
  assert_int_equal(fdy_op_check(&fused, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], PARAM);
  assert_int_equal(err.actual, 10);
  assert_string_equal(err.name, "norm_matmul_q4");
  fused.input_count = 9; /* two weights, three outputs */
  assert_int_equal(fdy_op_check(&fused, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 2);
  assert_int_equal(err.actual, 3);
  fused.output_count = 2;
  expect_ok(&fused);
  fused.input_count = 6;
  fused.output_count = 1;
  expect_ok(&fused);
  fdy_op op = valid_op(FDY_OP_ADD);
  op.input_count = 2;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 3);
  op.kind = FDY_OP_KIND_COUNT;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], PARAM);
  assert_int_equal(fdy_op_check(NULL, &err), FDY_ERR_INVALID_ARGUMENT);
}

/* Every operand of every kind: a wrong dtype, a wrong rank, a zero
 * dimension and a byte size beyond 64 bits (where the element size makes
 * one possible) are blamed on it. */
static void test_operand_violations(void **state) {
  (void)state;
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    fdy_op base = valid_op((fdy_op_kind)k);
    for (uint32_t i = 0; i < base.input_count + base.output_count; i++) {
      fdy_op op = base;
      operand(&op, i)->dtype = FDY_DTYPE_I8;
      expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, i);
      op = base;
      operand(&op, i)->dtype = FDY_DTYPE_COUNT;
      expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, i);

      op = base;
      fdy_shape *s = &operand(&op, i)->shape;
      s->dims[s->rank] = 1;
      s->rank++;
      fdy_error err;
      assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
      assert_int_equal(err.ids[0], i);
      assert_int_equal(err.expected, s->rank - 1);
      assert_int_equal(err.actual, s->rank);

      op = base;
      operand(&op, i)->shape.dims[0] = 0;
      expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, i);

      op = base;
      fdy_tensor_view *v = operand(&op, i);
      if (fdy_dtype_size(v->dtype) > 1) { /* else bytes = elements */
        v->shape.dims[v->shape.rank - 1] = UINT64_MAX / 2 + 1;
        expect_refused(&op, FDY_ERR_OVERFLOW, i);
      }
    }
  }
  /* dtypes that are valid elsewhere but not here */
  fdy_op op = valid_op(FDY_OP_RMSNORM);
  op.inputs[2].dtype = FDY_DTYPE_F64;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4); /* F32 norms only unfused */
  op.inputs[2].dtype = FDY_DTYPE_F32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[4].dtype = FDY_DTYPE_BF16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[1].dtype = FDY_DTYPE_F16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_CHECKSUM);
  op.inputs[0].dtype = FDY_DTYPE_U32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
}

static void test_checksum_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_CHECKSUM);
  op.inputs[0].shape.dims[0] = 60;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op = valid_op(FDY_OP_CHECKSUM);
  op.inputs[1].shape.dims[0] = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_CHECKSUM);
  op.outputs[0].shape.dims[0] = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op.input_count = 1;
  op.outputs[0] = view(FDY_DTYPE_U64, FDY_SHAPE(2));
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
}

static void test_embed_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[0].shape.dims[0] = FDY_STEP_ELEMENTS(3); /* 4 rows needed */
  fdy_error err;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.expected, FDY_STEP_ELEMENTS(4));
  assert_int_equal(err.actual, FDY_STEP_ELEMENTS(3));
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[1].shape.dims[1] = 31;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.outputs[0].shape.dims[1] = 260; /* not whole words */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[2].shape.dims[0] = 99;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[2].shape.dims[1] = 16; /* groups of 16 */
  op.inputs[3].shape.dims[1] = 16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[2].shape.dims[1] = 1; /* a group of 256 */
  op.inputs[3].shape.dims[1] = 1;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[2].shape.dims[1] = 3; /* does not divide */
  op.inputs[3].shape.dims[1] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[3].dtype = FDY_DTYPE_BF16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_EMBED_Q4);
  op.inputs[3].shape.dims[1] = 8;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
}

static void test_rmsnorm_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_RMSNORM);
  op.inputs[0].shape.dims[0] = 0; /* not even the count */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op.inputs[0].shape.dims[0] = 1; /* the count is all it reads */
  expect_ok(&op);
  op = valid_op(FDY_OP_RMSNORM);
  op.inputs[2].shape.dims[0] = 255;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  /* a weight of n values normalizes each n-wide segment: per head (Qwen3's
   * q and k: 16 heads of 128, 7 of 64); n must divide the width */
  op = valid_op(FDY_OP_RMSNORM);
  op.inputs[1].shape = FDY_SHAPE(4, 16 * 128);
  op.outputs[0].shape = FDY_SHAPE(4, 16 * 128);
  op.inputs[2].shape.dims[0] = 128;
  expect_ok(&op);
  op.inputs[1].shape = FDY_SHAPE(4, 7 * 64);
  op.outputs[0].shape = FDY_SHAPE(4, 7 * 64);
  op.inputs[2].shape.dims[0] = 64;
  expect_ok(&op);
  op.inputs[2].shape.dims[0] = 96;
  fdy_error err;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, 7 * 64);
  assert_int_equal(err.actual, 96);
  op.inputs[2].shape.dims[0] = 7 * 64 * 2; /* longer than the row */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_RMSNORM);
  op.outputs[0].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_RMSNORM);
  op.params.rmsnorm.eps = -1e-6;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op.params.rmsnorm.eps = NAN;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op.params.rmsnorm.eps = INFINITY;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
}

static void test_matmul_relations(void **state) {
  (void)state;
  fdy_error err;
  fdy_op op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[2].shape.dims[0] = 95;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, 96);
  assert_int_equal(err.actual, 95);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[2].shape.dims[1] = 31;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[1].shape.dims[1] = 260;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[3].shape.dims[0] = 97;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[3].shape.dims[1] = 5;
  op.inputs[4].shape.dims[1] = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[3].shape.dims[1] = 16; /* groups of 16 */
  op.inputs[4].shape.dims[1] = 16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[4].shape.dims[0] = 95;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.inputs[4].dtype = FDY_DTYPE_BF16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_MATMUL_Q4);
  op.outputs[0].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
}

/* The 8-bit kinds: 4 values a word; the rest as the 4-bit kinds. */
static void test_q8_relations(void **state) {
  (void)state;
  fdy_error err;
  fdy_op op = valid_op(FDY_OP_MATMUL_Q8);
  op.inputs[2].shape.dims[1] = 32; /* a 4-bit row's words */
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, 64);
  assert_int_equal(err.actual, 32);
  op = valid_op(FDY_OP_MATMUL_Q8);
  op.inputs[1].shape.dims[1] = 258; /* not whole words of bytes */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_Q8);
  op.inputs[3].shape.dims[1] = 16; /* groups of 16 */
  op.inputs[4].shape.dims[1] = 16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_Q8);
  op.inputs[3].dtype = FDY_DTYPE_F32; /* scales are halves */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_Q8);
  op.outputs[0].shape.dims[1] = 95;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_Q8);
  op.inputs[1].shape.dims[1] = 32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_EMBED_Q8);
  op.inputs[0].shape.dims[0] = FDY_STEP_ELEMENTS(3);
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
}

/* The unquantized kinds: the weight's width is x's (the table's the
 * output's), its rows the outputs; no packed or integer weights. */
static void test_dense_relations(void **state) {
  (void)state;
  fdy_error err;
  fdy_op op = valid_op(FDY_OP_MATMUL_DENSE);
  op.inputs[2].shape.dims[1] = 199;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, 200);
  assert_int_equal(err.actual, 199);
  op = valid_op(FDY_OP_MATMUL_DENSE);
  op.inputs[2].shape.dims[0] = 95;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_DENSE);
  op.outputs[0].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_MATMUL_DENSE);
  op.inputs[2].dtype = FDY_DTYPE_U32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_DENSE);
  op.inputs[2].dtype = FDY_DTYPE_F64;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_EMBED_DENSE);
  op.inputs[1].shape.dims[1] = 201;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_EMBED_DENSE);
  op.inputs[0].shape.dims[0] = FDY_STEP_ELEMENTS(3);
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op = valid_op(FDY_OP_EMBED_DENSE);
  op.inputs[1].shape.rank = 1;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
}

/* ADD_BIAS: a bias of F32, F16 or BF16 as wide as x, the output like x. */
static void test_add_bias_relations(void **state) {
  (void)state;
  for (fdy_dtype d = FDY_DTYPE_F32; d <= FDY_DTYPE_BF16; d++) {
    fdy_op op = valid_op(FDY_OP_ADD_BIAS);
    op.inputs[2].dtype = d;
    expect_ok(&op);
  }
  fdy_error err;
  fdy_op op = valid_op(FDY_OP_ADD_BIAS);
  op.inputs[2].shape.dims[0] = 895;
  assert_int_equal(fdy_op_check(&op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, 896);
  assert_int_equal(err.actual, 895);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.inputs[2].dtype = FDY_DTYPE_U32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.inputs[2] = view(FDY_DTYPE_F16, FDY_SHAPE(1, 896));
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.outputs[0].shape.dims[1] = 897;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.outputs[0].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.inputs[1].dtype = FDY_DTYPE_F16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_ADD_BIAS);
  op.input_count = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
}

static void test_rope_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_ROPE);
  op.params.rope.head_dim = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op.params.rope.head_dim = 63;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.head_dim = 96; /* 512 is not a multiple */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.theta = 0.0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op.params.rope.theta = NAN;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.factor = 0.0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.low_freq_factor = 0.0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.high_freq_factor = op.params.rope.low_freq_factor;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.params.rope.original_max_position = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE);
  op.outputs[0].shape.dims[1] = 8 * 64 + 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
}

static void test_attention_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_ATTENTION);
  op.params.attention.heads = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ATTENTION);
  op.params.attention.kv_heads = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ATTENTION);
  op.params.attention.head_dim = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ATTENTION);
  op.params.attention.head_dim = 32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[2].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[2].shape.dims[1] = 4 * 64;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[3].shape.dims[0] = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[4].shape.dims[2] = 64;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[4].shape = FDY_SHAPE(128, 2 * 64); /* caches are [S, context, .] */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[5].shape.dims[0] = 2; /* other sequences than k_cache's */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  /* ATTENTION reads row 0's position and sequence, ROPE_ATTENTION every
   * row's */
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[0] = step_view(FDY_STEP_ELEMENTS(1));
  expect_ok(&op);
  op.inputs[0] = step_view(FDY_STEP_ELEMENTS(1) - 1);
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.inputs[0] = step_view(FDY_STEP_ELEMENTS(3));
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[5].dtype = FDY_DTYPE_F32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  op = valid_op(FDY_OP_ATTENTION);
  op.inputs[5].shape.dims[0] = 127;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  op = valid_op(FDY_OP_ATTENTION);
  op.outputs[0].shape.dims[0] = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 6);
}

/* ROPE_ATTENTION: ATTENTION's relations on its attention parameters, ROPE's
 * checks on its rope, the two head_dim equal. */
static void test_rope_attention_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_ROPE_ATTENTION);
  expect_ok(&op);
  op.params.rope_attention.attention.heads = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.attention.kv_heads = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.rope.head_dim = 32; /* differs from 64 */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.rope.head_dim = 63; /* odd */
  op.params.rope_attention.attention.head_dim = 63;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.rope.theta = 0.0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.rope.high_freq_factor = 0.5; /* below low */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.params.rope_attention.rope.head_dim = 32;
  op.params.rope_attention.attention.head_dim = 32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1); /* q is 8 x 64 wide */
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.inputs[2].shape.dims[1] = 4 * 64;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.inputs[4].dtype = FDY_DTYPE_BF16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 4);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.inputs[5].dtype = FDY_DTYPE_F32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.outputs[0].shape.dims[0] = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 6);
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  op.input_count = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, -1);
  /* the rope's parameters of the op, as a ROPE op's */
  op = valid_op(FDY_OP_ROPE_ATTENTION);
  fdy_op_params rope = fdy_rope_params_of(&op);
  assert_int_equal(rope.rope.head_dim, 64);
  assert_true(rope.rope.theta == 500000.0);
  assert_true(rope.rope.llama3);
  assert_int_equal(rope.rope.original_max_position, 8192);
  for (uint32_t j = 0; j < 32; j++) {
    fdy_op r = valid_op(FDY_OP_ROPE);
    assert_true(fdy_rope_inverse_frequency(&rope, j) ==
                fdy_rope_inverse_frequency(&r.params, j));
  }
}

static void test_row_kind_relations(void **state) {
  (void)state;
  fdy_op_kind kinds[] = {FDY_OP_SWIGLU, FDY_OP_ADD};
  for (size_t k = 0; k < 2; k++) {
    fdy_op op = valid_op(kinds[k]);
    op.inputs[2].shape.dims[1] = 99;
    expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
    op = valid_op(kinds[k]);
    op.inputs[2].shape.dims[0] = 5;
    expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
    op = valid_op(kinds[k]);
    op.outputs[0].shape.dims[1] = 101;
    expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
    op = valid_op(kinds[k]);
    op.inputs[0].shape.dims[0] = 0;
    expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  }
  fdy_op op = valid_op(FDY_OP_LAST_ROW);
  op.outputs[0].shape.dims[0] = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_LAST_ROW);
  op.outputs[0].shape.dims[1] = 99;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_ARGMAX);
  op.outputs[0].shape.dims[0] = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
}

/* SAMPLE: a params row of FDY_SAMPLE_FIELDS U32 words per logits row, I32
 * ids, the step holding at least the count. */
static void test_sample_relations(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_SAMPLE);
  expect_ok(&op);
  op.inputs[2].shape.dims[1] = FDY_SAMPLE_FIELDS - 1;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_SAMPLE);
  op.inputs[2].shape.dims[0] = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_SAMPLE);
  op.inputs[2].dtype = FDY_DTYPE_F32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_SAMPLE);
  op.outputs[0].shape.dims[0] = 4;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_SAMPLE);
  op.outputs[0].dtype = FDY_DTYPE_U32;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_SAMPLE);
  op.inputs[1].dtype = FDY_DTYPE_F16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 1);
  op = valid_op(FDY_OP_SAMPLE);
  op.input_count = 2;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
}

/* The shared arithmetic: a uniform draw in [0, 1) that depends on the
 * seed and the counter, and an exponential within 1e-15 of the C
 * library's. */
static void test_sample_math(void **state) {
  (void)state;
  double first = fdy_sample_uniform(42, 0);
  assert_true(first >= 0.0 && first < 1.0);
  assert_true(first == fdy_sample_uniform(42, 0));
  assert_true(first != fdy_sample_uniform(42, 1));
  assert_true(first != fdy_sample_uniform(43, 0));
  double mean = 0.0;
  for (uint32_t c = 0; c < 10000; c++) {
    double u = fdy_sample_uniform(7, c);
    assert_true(u >= 0.0 && u < 1.0);
    mean += u / 10000;
  }
  assert_true(fabs(mean - 0.5) < 0.01);
  assert_true(fdy_sample_exp(0.0) == 1.0);
  assert_true(fdy_sample_exp(-709.0) == 0.0);
  for (double y = -700.0; y <= 0.0; y += 0.37) {
    double want = exp(y);
    assert_true(fabs(fdy_sample_exp(y) - want) <= 1e-15 * want);
  }
}

static void test_fused_relations(void **state) {
  (void)state;
  /* NORM_MATMUL_Q4: the norm's width, each weight against its output, the
   * weights' shared groups and scale dtype, eps */
  fdy_op op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[2].shape.dims[0] = 255;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[0].shape.dims[0] = 0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 0);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.params.rmsnorm.eps = NAN;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op.params.rmsnorm.eps = -1.0;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[6].shape.dims[0] = 33; /* k's weight against its 32 outputs */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 6);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.outputs[2].shape.dims[1] = 31;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 9);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.outputs[1].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 13);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[10].shape.dims[1] = 4; /* v in groups of 64, q in 32 */
  op.inputs[11].shape.dims[1] = 4;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 10);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[7].dtype = FDY_DTYPE_BF16;
  op.inputs[8].dtype = FDY_DTYPE_BF16;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 7);
  op = valid_op(FDY_OP_NORM_MATMUL_Q4);
  op.inputs[5].dtype = FDY_DTYPE_BF16; /* biases unlike their scales */
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  /* NORM_SWIGLU_Q4: gate and up both of the output's width, alike */
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.inputs[2].shape.dims[0] = 128;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.inputs[3].shape.dims[0] = 81;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 3);
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.inputs[6].shape.dims[0] = 79;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 6);
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.inputs[7].shape.dims[1] = 8;
  op.inputs[8].shape.dims[1] = 8;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 7);
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.outputs[0].shape.dims[0] = 5;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 9);
  op = valid_op(FDY_OP_NORM_SWIGLU_Q4);
  op.params.rmsnorm.eps = INFINITY;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, PARAM);
  /* MATMUL_ADD_Q4: the residual is shaped like the output */
  op = valid_op(FDY_OP_MATMUL_ADD_Q4);
  op.inputs[5].shape.dims[1] = 95;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  op = valid_op(FDY_OP_MATMUL_ADD_Q4);
  op.inputs[5].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 5);
  op = valid_op(FDY_OP_MATMUL_ADD_Q4);
  op.inputs[2].shape.dims[0] = 95;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 2);
  op = valid_op(FDY_OP_MATMUL_ADD_Q4);
  op.outputs[0].shape.dims[0] = 3;
  expect_refused(&op, FDY_ERR_INVALID_ARGUMENT, 6);
}

/* Plain rope: theta^(-2j/d). llama3: short wavelengths kept, long ones
 * divided by factor, the band between interpolated. */
static void test_rope_inverse_frequency(void **state) {
  (void)state;
  fdy_op op = valid_op(FDY_OP_ROPE);
  fdy_op_params plain = op.params;
  plain.rope.llama3 = false;
  const fdy_op_params *scaled = &op.params;
  double old = scaled->rope.original_max_position;
  int kept = 0, divided = 0, between = 0;
  for (uint32_t j = 0; j < 32; j++) {
    double inv = 1.0 / pow(500000.0, (2.0 * j) / 64);
    assert_true(fdy_rope_inverse_frequency(&plain, j) == inv);
    double got = fdy_rope_inverse_frequency(scaled, j);
    double wavelen = 2.0 * M_PI / inv;
    if (wavelen < old / 4.0) {
      assert_true(got == inv);
      kept++;
    } else if (wavelen > old / 1.0) {
      assert_true(got == inv / 32.0);
      divided++;
    } else {
      assert_true(got > inv / 32.0 && got < inv);
      between++;
    }
  }
  assert_true(kept > 0 && divided > 0 && between > 0);
  assert_true(fdy_rope_inverse_frequency(&plain, 0) == 1.0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kind_names),
      cmocka_unit_test(test_valid_ops_accepted),
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_operand_violations),
      cmocka_unit_test(test_checksum_relations),
      cmocka_unit_test(test_embed_relations),
      cmocka_unit_test(test_rmsnorm_relations),
      cmocka_unit_test(test_matmul_relations),
      cmocka_unit_test(test_q8_relations),
      cmocka_unit_test(test_dense_relations),
      cmocka_unit_test(test_add_bias_relations),
      cmocka_unit_test(test_rope_relations),
      cmocka_unit_test(test_attention_relations),
      cmocka_unit_test(test_rope_attention_relations),
      cmocka_unit_test(test_row_kind_relations),
      cmocka_unit_test(test_fused_relations),
      cmocka_unit_test(test_sample_relations),
      cmocka_unit_test(test_sample_math),
      cmocka_unit_test(test_rope_inverse_frequency),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
