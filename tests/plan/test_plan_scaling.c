/* The plan validator's work grows near linearly with the plan (issue #31),
 * measured without a clock: fdy_plan_validate_counted (src/plan) counts
 * the access-log records a validation visits. A chain of N checksum ops,
 * op i reading weight i and a prev operand, is planned by the planner and
 * validated for N = 256 .. 4096:
 * - all resident: one resident buffer holds N weights, and every upload
 *   and every binding check searches its log;
 * - streamed through 3 slots;
 * - with one input that every op reads as prev, so that its bytes carry
 *   a read per op.
 * Searching a whole log per access (what validation did before) visits
 * about N^2 / 2 records, N / 2 per op: 16x as many per op at 4096 ops as
 * at 256. The records visited per op may grow only as the depth of a
 * balanced tree (log N): at most 2.5x from 256 to 4096 ops (the treap's
 * priorities are random, so the counts vary a little from run to run; 40
 * runs gave at most 1.72x). */
#include "plan_helpers.h"
#include "plan_internal.h"

enum { SHAPE_RESIDENT, SHAPE_STREAMED, SHAPE_SHARED_INPUT, SHAPE_COUNT };
static const char *const shape_names[SHAPE_COUNT] = {
    "resident", "streamed through 3 slots", "one input read by every op"};

/* Builds, plans and validates the chain of n ops; returns the records
 * visited. */
static uint64_t visits_for(size_t n, int shape) {
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("scaling", &g, NULL), FDY_OK);
  fdy_op_id *ops = calloc(n, sizeof(*ops));
  assert_non_null(ops);
  uint32_t shared = 0;
  if (shape == SHAPE_SHARED_INPUT) {
    shared = add_input(g, "x", FDY_DTYPE_U64, FDY_SHAPE(1));
  }
  uint32_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "w%zu", i);
    uint32_t w = add_weight(g, name, FDY_DTYPE_U8, FDY_SHAPE(TEST_W));
    snprintf(name, sizeof name, "out%zu", i);
    uint32_t out = add_activation(g, name, FDY_DTYPE_U64, FDY_SHAPE(1));
    uint32_t reads[2] = {w, shape == SHAPE_SHARED_INPUT ? shared : prev};
    snprintf(name, sizeof name, "op%zu", i);
    ops[i].v = add_op(g, name, FDY_OP_CHECKSUM, (fdy_op_params){0}, reads,
                      shape == SHAPE_SHARED_INPUT || i > 0 ? 2 : 1, out);
    prev = out;
  }
  fdy_tensor_id last = {prev};
  fdy_plan_step step = {"decode", ops, n, &last, 1};
  fdy_planner_options o = {
      shape == SHAPE_STREAMED ? 3 * TEST_W : (uint64_t)n * TEST_W, 3, 0};
  fdy_plan *p = NULL;
  fdy_error err;
  fdy_status st = fdy_plan_build(g, &step, 1, &o, &p, &err);
  if (st != FDY_OK) {
    fail_msg("planning %zu ops (%s): %s", n, shape_names[shape], err.message);
  }
  fdy_plan_summary summary;
  uint64_t visits = 0;
  st = fdy_plan_validate_counted(p, &summary, &visits, &err);
  if (st != FDY_OK) {
    fail_msg("validating %zu ops (%s): %s", n, shape_names[shape], err.message);
  }
  assert_int_equal(summary.ops, n);
  uint64_t streamed = summary.step_transfer_bytes;
  assert_true(shape == SHAPE_STREAMED ? streamed > 0 : streamed == 0);
  fdy_plan_destroy(p);
  fdy_graph_destroy(g);
  free(ops);
  return visits;
}

static void test_visits_grow_near_linearly(void **state) {
  (void)state;
  for (int shape = 0; shape < SHAPE_COUNT; shape++) {
    double first_per_op = 0;
    for (size_t n = 256; n <= 4096; n *= 2) {
      uint64_t visits = visits_for(n, shape);
      double per_op = (double)visits / (double)n;
      print_message("%s: %zu ops, %llu log records visited (%.1f per op)\n",
                    shape_names[shape], n, (unsigned long long)visits, per_op);
      if (n == 256) {
        first_per_op = per_op;
      } else if (per_op > 2.5 * first_per_op) {
        fail_msg("%s: %.1f log records visited per op at %zu ops, %.1f at "
                 "256: validation grows faster than n log n",
                 shape_names[shape], per_op, n, first_per_op);
      }
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_visits_grow_near_linearly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
