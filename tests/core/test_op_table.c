/* Tests of the op table (include/foundry/op_table.h): every row is whole,
 * normalisation keeps exactly a kind's fields, and the flags name the kinds
 * the backends and the validator rely on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/op_table.h"

#include <string.h>

static size_t param_size(fdy_op_param_type type) {
  switch (type) {
  case FDY_OP_PARAM_U32:
    return sizeof(uint32_t);
  case FDY_OP_PARAM_F64:
    return sizeof(double);
  case FDY_OP_PARAM_BOOL:
    return sizeof(bool);
  }
  fail_msg("unknown parameter type %d", (int)type);
  return 0;
}

static uint32_t output_capacity(const fdy_op_row *row) {
  if (row->inputs_per_output == 0) {
    return 1;
  }
  uint32_t leading = row->min_inputs - row->inputs_per_output;
  return (row->max_inputs - leading) / row->inputs_per_output;
}

static void test_rows_whole(void **state) {
  (void)state;
  assert_null(fdy_op_row_of(FDY_OP_KIND_COUNT));
  assert_null(fdy_op_row_of((fdy_op_kind)-1));
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    const fdy_op_row *row = fdy_op_row_of((fdy_op_kind)k);
    assert_non_null(row);
    assert_non_null(row->name);
    assert_non_null(row->shape_rule);
    assert_string_equal(fdy_op_kind_name((fdy_op_kind)k), row->name);
    assert_true(row->param_count <= FDY_OP_MAX_PARAMS);
    for (uint32_t i = 0; i < row->param_count; i++) {
      const fdy_op_param *p = &row->params[i];
      assert_true(p->offset + param_size(p->type) <= sizeof(fdy_op_params));
      for (uint32_t j = 0; j < i; j++) {
        assert_string_not_equal(p->key, row->params[j].key);
      }
    }
    assert_true(row->min_inputs >= 1);
    assert_true(row->min_inputs <= row->max_inputs);
    assert_true(row->max_inputs <= FDY_OP_MAX_INPUTS);
    for (uint32_t i = 0; i < FDY_OP_MAX_INPUTS; i++) {
      const fdy_op_operand *in = &row->inputs[i];
      assert_int_equal(in->name != NULL, i < row->max_inputs);
      assert_int_equal(in->dtypes != 0 && in->rank != 0, i < row->max_inputs);
    }
    uint32_t outputs = output_capacity(row);
    assert_true(outputs >= 1 && outputs <= FDY_OP_MAX_OUTPUTS);
    for (uint32_t j = 0; j < FDY_OP_MAX_OUTPUTS; j++) {
      const fdy_op_operand *out = &row->outputs[j];
      assert_int_equal(out->name != NULL, j < outputs);
      assert_int_equal(out->flags, 0); /* state is an input's */
    }
  }
}

/* Normalised parameters hold the row's fields and zero elsewhere. */
static void test_params_normalized(void **state) {
  (void)state;
  fdy_op_params filled;
  memset(&filled, 0x5a, sizeof filled);
  for (int k = 0; k <= FDY_OP_KIND_COUNT; k++) {
    const fdy_op_row *row = fdy_op_row_of((fdy_op_kind)k);
    fdy_op_params n = fdy_op_params_normalized((fdy_op_kind)k, &filled);
    unsigned char kept[sizeof(fdy_op_params)] = {0};
    for (uint32_t i = 0; row != NULL && i < row->param_count; i++) {
      memset(kept + row->params[i].offset, 1, param_size(row->params[i].type));
    }
    const unsigned char *bytes = (const unsigned char *)&n;
    for (size_t b = 0; b < sizeof n; b++) {
      assert_int_equal(bytes[b], kept[b] ? 0x5a : 0);
    }
  }
}

static bool has_state_input(fdy_op_kind kind, uint32_t i) {
  return (fdy_op_row_of(kind)->inputs[i].flags & FDY_OPERAND_STATE) != 0;
}

/* What the plan validator (state inputs) and the backends (the Q4 matmul
 * kinds, the checksum's words) read from the flags. */
static void test_flags(void **state) {
  (void)state;
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    fdy_op_kind kind = (fdy_op_kind)k;
    bool attends = kind == FDY_OP_ATTENTION || kind == FDY_OP_ROPE_ATTENTION;
    for (uint32_t i = 0; i < FDY_OP_MAX_INPUTS; i++) {
      assert_int_equal(has_state_input(kind, i), attends && (i == 4 || i == 5));
      bool words = kind == FDY_OP_CHECKSUM && i == 0;
      assert_int_equal(
          (fdy_op_row_of(kind)->inputs[i].flags & FDY_OPERAND_WORDS) != 0,
          words);
    }
    bool q4 = kind == FDY_OP_MATMUL_Q4 || kind == FDY_OP_NORM_MATMUL_Q4 ||
              kind == FDY_OP_NORM_SWIGLU_Q4 || kind == FDY_OP_MATMUL_ADD_Q4;
    assert_int_equal((fdy_op_row_of(kind)->flags & FDY_OP_Q4_MATMUL) != 0, q4);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_whole),
      cmocka_unit_test(test_params_normalized),
      cmocka_unit_test(test_flags),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
