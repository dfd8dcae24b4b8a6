/* Tests of the op table (include/foundry/op_table.h): every row is whole,
 * normalisation keeps exactly a kind's fields, the flags name the kinds the
 * backends and the validator rely on, and docs/plan-format.md lists every
 * kind with exactly its row's parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/op_table.h"

#include <stdio.h>
#include <stdlib.h>
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

/* What the plan validator (state inputs), the backends (the Q4 matmul
 * kinds, the checksum's words) and infer-bench (the lookups) read from the
 * flags. */
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
    bool lookup = kind == FDY_OP_EMBED_Q4 || kind == FDY_OP_EMBED_Q8 ||
                  kind == FDY_OP_EMBED_DENSE;
    assert_int_equal((fdy_op_row_of(kind)->flags & FDY_OP_EMBEDDING) != 0,
                     lookup);
  }
}

/* ---- docs/plan-format.md ------------------------------------------------- */

/* The params cell docs/plan-format.md gives a row: "none", or each field as
 * `key` (type[, range]), joined by ", ". */
static void params_cell(const fdy_op_row *row, char *out, size_t cap) {
  static const char *const types[] = {[FDY_OP_PARAM_U32] = "integer",
                                      [FDY_OP_PARAM_F64] = "number",
                                      [FDY_OP_PARAM_BOOL] = "boolean"};
  static const char *const ranges[] = {[FDY_OP_RANGE_ANY] = "",
                                       [FDY_OP_RANGE_NON_NEGATIVE] = ", >= 0",
                                       [FDY_OP_RANGE_POSITIVE] = ", > 0",
                                       [FDY_OP_RANGE_POSITIVE_EVEN] =
                                           ", even, > 0"};
  size_t used =
      (size_t)snprintf(out, cap, "%s", row->param_count == 0 ? "none" : "");
  for (uint32_t i = 0; i < row->param_count; i++) {
    const fdy_op_param *p = &row->params[i];
    used += (size_t)snprintf(out + used, cap - used, "%s`%s` (%s%s)",
                             i > 0 ? ", " : "", p->key, types[p->type],
                             ranges[p->range]);
    assert_true(used < cap);
  }
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  assert_true(size >= 0);
  rewind(f);
  char *text = malloc((size_t)size + 1);
  assert_non_null(text);
  assert_int_equal(fread(text, 1, (size_t)size, f), (size_t)size);
  text[size] = '\0';
  fclose(f);
  return text;
}

/* The "| kind | params |" table of docs/plan-format.md has one row per
 * kind, in fdy_op_kind order, each with exactly its row's parameters. */
static void test_plan_format_lists_the_table(void **state) {
  (void)state;
  const char *root = getenv("FOUNDRY_SOURCE_DIR");
  if (root == NULL) {
    skip();
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/docs/plan-format.md", root);
  char *text = read_text(path);
  const char *header = "| kind | params |\n|------|--------|\n";
  char *line = strstr(text, header);
  assert_non_null(line);
  line += strlen(header);
  int kind = 0;
  while (strncmp(line, "| ", 2) == 0) {
    char *end = strchr(line, '\n');
    assert_non_null(end);
    *end = '\0';
    assert_true(kind < FDY_OP_KIND_COUNT);
    const fdy_op_row *row = fdy_op_row_of((fdy_op_kind)kind);
    char cell[1024], want[1200];
    params_cell(row, cell, sizeof cell);
    snprintf(want, sizeof want, "| `%s` | %s |", row->name, cell);
    assert_string_equal(line, want);
    kind++;
    line = end + 1;
  }
  assert_int_equal(kind, FDY_OP_KIND_COUNT);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_whole),
      cmocka_unit_test(test_params_normalized),
      cmocka_unit_test(test_flags),
      cmocka_unit_test(test_plan_format_lists_the_table),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
