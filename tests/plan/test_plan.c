/* Plan tests: construction, every static validation rule (a hand-built plan
 * that breaks it, checked for kind, command_index and ids), the streaming
 * planner for N = 1..5 buffers and L = 0..10 layers, and its error cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan_helpers.h"

#define W       100 /* bytes per synthetic weight */
#define COPY    0
#define COMPUTE 1

/* A synthetic graph of two layers and the ids the tests need. */
typedef struct fixture {
  fdy_graph *graph;
  uint32_t w[2];   /* layer.<i>.weight */
  uint32_t out[2]; /* layer.<i>.out */
} fixture;

static uint32_t tensor_id(const fdy_graph *graph, const char *name) {
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_find_tensor(graph, name, &id, NULL), FDY_OK);
  return id.v;
}

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(fdy_synthetic_graph_create(2, W, NULL, &f->graph, NULL),
                   FDY_OK);
  f->w[0] = tensor_id(f->graph, "layer.0.weight");
  f->w[1] = tensor_id(f->graph, "layer.1.weight");
  f->out[0] = tensor_id(f->graph, "layer.0.out");
  f->out[1] = tensor_id(f->graph, "layer.1.out");
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  fdy_graph_destroy(f->graph);
  free(f);
  return 0;
}

static fdy_plan *new_plan(const fixture *f, uint64_t budget) {
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_plan_create(f->graph, budget, 2, 2, 8, &plan, NULL),
                   FDY_OK);
  return plan;
}

static void add(fdy_plan *plan, fdy_command c) {
  assert_int_equal(fdy_plan_append(plan, &c, NULL), FDY_OK);
}

/* The valid sequential plan most rule tests break (indices in comments). */
static fdy_plan *sequential_plan(const fixture *f) {
  fdy_plan *plan = new_plan(f, 1000);
  add(plan, c_alloc(0, W));                                /* 0 */
  add(plan, c_prefetch(f->w[0], 0, COPY, 0));              /* 1 */
  add(plan, c_wait_stream(0, COMPUTE));                    /* 2 */
  add(plan, c_launch(0, COMPUTE, 1, 1, f->w[0], 0, 0, 0)); /* 3 */
  add(plan, c_wait_host(1));                               /* 4 */
  add(plan, c_prefetch(f->w[1], 0, COPY, 2));              /* 5 */
  add(plan, c_wait_stream(2, COMPUTE));                    /* 6 */
  add(plan, c_launch(1, COMPUTE, 3, 1, f->w[1], 0, 0, 0)); /* 7 */
  add(plan, c_wait_host(3));                               /* 8 */
  add(plan, c_release(0));                                 /* 9 */
  return plan;
}

/* Replaces command `index` of plan with c. */
static void replace(fdy_plan *plan, size_t index, fdy_command c) {
  size_t n = fdy_plan_command_count(plan);
  fdy_command *rest = calloc(n, sizeof(*rest));
  assert_non_null(rest);
  for (size_t i = index + 1; i < n; i++) {
    rest[i] = *fdy_plan_command(plan, i);
  }
  while (fdy_plan_command_count(plan) > index) {
    assert_int_equal(fdy_plan_remove(plan, index, NULL), FDY_OK);
  }
  add(plan, c);
  for (size_t i = index + 1; i < n; i++) {
    add(plan, rest[i]);
  }
  free(rest);
}

/* Inserts c before command `index`. */
static void insert(fdy_plan *plan, size_t index, fdy_command c) {
  size_t n = fdy_plan_command_count(plan);
  fdy_command *rest = calloc(n + 1, sizeof(*rest));
  assert_non_null(rest);
  for (size_t i = index; i < n; i++) {
    rest[i] = *fdy_plan_command(plan, i);
  }
  while (fdy_plan_command_count(plan) > index) {
    assert_int_equal(fdy_plan_remove(plan, index, NULL), FDY_OK);
  }
  add(plan, c);
  for (size_t i = index; i < n; i++) {
    add(plan, rest[i]);
  }
  free(rest);
}

static void expect_error(const fdy_plan *plan, fdy_status kind, int64_t index,
                         int64_t id0, int64_t id1) {
  fdy_error err;
  fdy_plan_summary summary;
  assert_int_equal(fdy_plan_validate(plan, &summary, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(err.command_index, index);
  assert_int_equal(err.ids[0], id0);
  assert_int_equal(err.ids[1], id1);
  assert_true(strlen(err.message) > 0);
}

static void expect_valid(const fdy_plan *plan, fdy_plan_summary *summary) {
  fdy_error err;
  fdy_status st = fdy_plan_validate(plan, summary, &err);
  if (st != FDY_OK) {
    fail_msg("validation failed: %s", err.message);
  }
}

/* ---- construction ------------------------------------------------------- */

static void test_create_and_accessors(void **state) {
  fixture *f = *state;
  fdy_plan *plan = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_create(f->graph, 1234, 3, 4, 5, &plan, &err),
                   FDY_OK);
  assert_int_equal(fdy_plan_budget(plan), 1234);
  assert_int_equal(fdy_plan_stream_count(plan), 3);
  assert_int_equal(fdy_plan_slot_count(plan), 4);
  assert_int_equal(fdy_plan_event_count(plan), 5);
  assert_int_equal(fdy_plan_command_count(plan), 0);
  assert_null(fdy_plan_command(plan, 0));
  assert_true(fdy_graph_same_structure(fdy_plan_graph(plan), f->graph));
  assert_ptr_not_equal(fdy_plan_graph(plan), f->graph);
  assert_int_equal(fdy_plan_check_graph(plan, f->graph, &err), FDY_OK);
  fdy_plan_destroy(plan);
  fdy_plan_destroy(NULL);
}

static void test_create_rejects_bad_counts(void **state) {
  fixture *f = *state;
  fdy_plan *plan = (fdy_plan *)&plan;
  fdy_error err;
  assert_int_equal(fdy_plan_create(f->graph, 1, 0, 1, 1, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(plan);
  assert_int_equal(
      fdy_plan_create(f->graph, 1, FDY_PLAN_MAX_STREAMS + 1, 1, 1, &plan, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_plan_create(f->graph, 1, 1, FDY_PLAN_MAX_SLOTS + 1, 1, &plan, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_plan_create(f->graph, 1, 1, 1, FDY_PLAN_MAX_EVENTS + 1, &plan, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_create(NULL, 1, 1, 1, 1, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(plan);
}

static void test_append_remove(void **state) {
  fixture *f = *state;
  fdy_plan *plan = new_plan(f, 1000);
  fdy_error err;
  fdy_command bad = c_launch(0, 0, 0, FDY_MAX_BINDINGS + 1, 0, 0, 0, 0);
  assert_int_equal(fdy_plan_append(plan, &bad, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_command unknown = {.kind = (fdy_command_kind)42};
  assert_int_equal(fdy_plan_append(plan, &unknown, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_command_count(plan), 0);
  for (uint32_t i = 0; i < 40; i++) {
    add(plan, c_alloc(i % 2, 1 + i));
  }
  assert_int_equal(fdy_plan_command_count(plan), 40);
  assert_int_equal(fdy_plan_remove(plan, 0, &err), FDY_OK);
  assert_int_equal(fdy_plan_command(plan, 0)->u.allocate.bytes, 2);
  assert_int_equal(fdy_plan_remove(plan, 39, &err), FDY_ERR_NOT_FOUND);
  assert_int_equal(err.command_index, 39);
  assert_int_equal(fdy_plan_command_count(plan), 39);
  /* Appending canonicalizes: a host wait forgets its stream. */
  fdy_command w = c_wait_host(3);
  w.u.wait.stream.v = 7;
  add(plan, w);
  fdy_command expect = c_wait_host(3);
  assert_true(fdy_command_equal(fdy_plan_command(plan, 39), &expect));
  assert_int_equal(fdy_plan_command(plan, 39)->u.wait.stream.v, 0);
  assert_string_equal(fdy_command_kind_name(FDY_CMD_PREFETCH), "prefetch");
  fdy_plan_destroy(plan);
}

static void test_check_graph_rejects_other_graph(void **state) {
  fixture *f = *state;
  fdy_plan *plan = new_plan(f, 1000);
  fdy_graph *other = NULL;
  fdy_error err;
  assert_int_equal(fdy_synthetic_graph_create(3, W, NULL, &other, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_check_graph(plan, other, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "graph");
  assert_int_equal(err.expected, fdy_graph_fingerprint(f->graph));
  assert_int_equal(err.actual, fdy_graph_fingerprint(other));
  fdy_graph_destroy(other);
  fdy_plan_destroy(plan);
}

/* ---- validation: valid plans -------------------------------------------- */

static void test_sequential_plan_valid(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  fdy_plan_summary s;
  expect_valid(plan, &s);
  assert_int_equal(s.commands, 10);
  assert_int_equal(s.ops, 2);
  assert_int_equal(s.slots, 1);
  assert_int_equal(s.peak_bytes, W);
  assert_int_equal(s.transfer_bytes, 2 * W);
  assert_int_equal(s.streams, 2);
  fdy_plan_destroy(plan);
}

static void test_empty_plan_over_empty_graph_valid(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  fdy_plan_summary s;
  assert_int_equal(fdy_synthetic_graph_create(0, W, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_create(g, 0, 1, 0, 0, &plan, NULL), FDY_OK);
  expect_valid(plan, &s);
  assert_int_equal(s.commands, 0);
  assert_int_equal(s.slots, 0);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

/* Completion is transitive: a stream wait carries everything the waited
 * event's stream had observed, and the host's final wait on the last launch
 * covers every earlier event. */
static void test_transitive_ordering_valid(void **state) {
  fixture *f = *state;
  fdy_plan *plan = new_plan(f, 2 * W);
  add(plan, c_alloc(0, W));
  add(plan, c_alloc(1, W));
  add(plan, c_prefetch(f->w[0], 0, COPY, 0));
  add(plan, c_prefetch(f->w[1], 1, COPY, 1));
  add(plan, c_wait_stream(0, COMPUTE));
  add(plan, c_launch(0, COMPUTE, 2, 1, f->w[0], 0, 0, 0));
  /* op 1 runs on the copy stream: its transfer is earlier on that stream,
   * its producer is awaited through a stream wait. */
  add(plan, c_wait_stream(2, COPY));
  add(plan, c_launch(1, COPY, 3, 1, f->w[1], 1, 0, 0));
  add(plan, c_wait_host(3));
  add(plan, c_release(0));
  add(plan, c_release(1));
  fdy_plan_summary s;
  expect_valid(plan, &s);
  assert_int_equal(s.slots, 2);
  assert_int_equal(s.peak_bytes, 2 * W);
  fdy_plan_destroy(plan);
}

/* ---- validation: one test per rule -------------------------------------- */

static void test_rule_unknown_id(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  fdy_error err;
  replace(plan, 0, c_alloc(5, W));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_UNKNOWN_ID);
  assert_int_equal(err.command_index, 0);
  assert_int_equal(err.ids[0], 5);
  assert_string_equal(err.name, "slot");
  assert_int_equal(err.expected, 2);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 1, c_prefetch(f->w[0], 0, 9, 0));
  expect_error(plan, FDY_ERR_PLAN_UNKNOWN_ID, 1, 9, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 8, 1, f->w[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_UNKNOWN_ID, 3, 8, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 3, c_launch(7, COMPUTE, 1, 1, f->w[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_UNKNOWN_ID, 3, 7, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 1, 1, 99, 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_UNKNOWN_ID, 3, 99, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 2, c_wait_stream(0, 4));
  expect_error(plan, FDY_ERR_PLAN_UNKNOWN_ID, 2, 4, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_zero_allocation(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 0, c_alloc(0, 0));
  expect_error(plan, FDY_ERR_PLAN_ZERO_ALLOCATION, 0, 0, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_double_allocation(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  insert(plan, 1, c_alloc(0, W));
  expect_error(plan, FDY_ERR_PLAN_DOUBLE_ALLOCATION, 1, 0, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_budget_exceeded(void **state) {
  fixture *f = *state;
  fdy_plan *plan = new_plan(f, 150);
  fdy_error err;
  add(plan, c_alloc(0, W));
  add(plan, c_alloc(1, W));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_BUDGET_EXCEEDED);
  assert_int_equal(err.command_index, 1);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 150);
  assert_int_equal(err.actual, 200);
  fdy_plan_destroy(plan);

  /* Live bytes that would wrap 64 bits are an error, never a wrap. */
  plan = new_plan(f, UINT64_MAX);
  add(plan, c_alloc(0, UINT64_MAX - 10));
  add(plan, c_alloc(1, 20));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_BUDGET_EXCEEDED);
  assert_int_equal(err.command_index, 1);
  assert_int_equal(err.expected, UINT64_MAX);
  assert_int_equal(err.actual, UINT64_MAX);
  fdy_plan_destroy(plan);

  /* Released bytes return to the budget: exactly at the budget is fine. */
  plan = new_plan(f, W);
  add(plan, c_alloc(0, W));
  add(plan, c_release(0));
  add(plan, c_alloc(1, W));
  add(plan, c_release(1));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_INCOMPLETE);
  fdy_plan_destroy(plan);
}

static void test_rule_slot_too_small(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 0, c_alloc(0, W - 1));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_SLOT_TOO_SMALL);
  assert_int_equal(err.command_index, 1);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.ids[1], f->w[0]);
  assert_int_equal(err.expected, W - 1);
  assert_int_equal(err.actual, W);
  assert_string_equal(err.name, "layer.0.weight");
  fdy_plan_destroy(plan);
}

static void test_rule_not_a_weight(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 1, c_prefetch(f->out[0], 0, COPY, 0));
  expect_error(plan, FDY_ERR_PLAN_NOT_A_WEIGHT, 1, f->out[0], -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 7, c_launch(1, COMPUTE, 3, 1, f->out[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_NOT_A_WEIGHT, 7, f->out[0], 1);
  fdy_plan_destroy(plan);
}

static void test_rule_slot_not_allocated(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 1, c_prefetch(f->w[0], 1, COPY, 0));
  expect_error(plan, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, 1, 1, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 9, c_release(1));
  expect_error(plan, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, 9, 1, -1);
  fdy_plan_destroy(plan);

  /* Use after release. */
  plan = sequential_plan(f);
  insert(plan, 5, c_release(0));
  expect_error(plan, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, 6, 0, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_slot_busy(void **state) {
  fixture *f = *state;
  /* Refill before the host observed the first launch that read the slot. */
  fdy_plan *plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 4, NULL), FDY_OK);
  expect_error(plan, FDY_ERR_PLAN_SLOT_BUSY, 4, 0, 0);
  fdy_plan_destroy(plan);

  /* Observing the transfer is not enough: the reader must be observed. */
  plan = sequential_plan(f);
  replace(plan, 4, c_wait_host(0));
  expect_error(plan, FDY_ERR_PLAN_SLOT_BUSY, 5, 0, 1);
  fdy_plan_destroy(plan);

  /* A stream-side order does not make the slot idle for the host. */
  plan = sequential_plan(f);
  replace(plan, 4, c_wait_stream(1, COPY));
  expect_error(plan, FDY_ERR_PLAN_SLOT_BUSY, 5, 0, 0);
  fdy_plan_destroy(plan);

  /* Release before the last reader was observed. */
  plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 8, NULL), FDY_OK);
  expect_error(plan, FDY_ERR_PLAN_SLOT_BUSY, 8, 0, 2);
  fdy_plan_destroy(plan);
}

static void test_rule_event_reused(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 0, 1, f->w[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_EVENT_REUSED, 3, 0, -1);
  fdy_plan_destroy(plan);

  plan = sequential_plan(f);
  replace(plan, 5, c_prefetch(f->w[1], 0, COPY, 1));
  expect_error(plan, FDY_ERR_PLAN_EVENT_REUSED, 5, 1, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_event_not_signalled(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 2, c_wait_stream(5, COMPUTE));
  expect_error(plan, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, 2, 5, -1);
  fdy_plan_destroy(plan);

  /* Waiting before the signalling command counts as not signalled. */
  plan = sequential_plan(f);
  insert(plan, 1, c_wait_host(0));
  expect_error(plan, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, 1, 0, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_op_order(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 3, c_launch(1, COMPUTE, 1, 1, f->w[1], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_OP_ORDER, 3, 1, 0);
  fdy_plan_destroy(plan);

  /* Launching op 0 a second time. */
  plan = sequential_plan(f);
  replace(plan, 7, c_launch(0, COMPUTE, 3, 1, f->w[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_OP_ORDER, 7, 0, 1);
  fdy_plan_destroy(plan);

  /* Launching after every op launched. */
  plan = sequential_plan(f);
  insert(plan, 9, c_launch(1, COMPUTE, 4, 1, f->w[1], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_OP_ORDER, 9, 1, -1);
  fdy_plan_destroy(plan);
}

static void test_rule_binding_mismatch(void **state) {
  fixture *f = *state;
  fdy_error err;
  /* Missing binding. */
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 1, 0, 0, 0, 0, 0));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_BINDING_MISMATCH);
  assert_int_equal(err.command_index, 3);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.ids[1], f->w[0]);
  assert_int_equal(err.expected, 1);
  assert_int_equal(err.actual, 0);
  fdy_plan_destroy(plan);

  /* A weight the op does not read. */
  plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 1, 1, f->w[1], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_BINDING_MISMATCH, 3, 0, f->w[1]);
  fdy_plan_destroy(plan);

  /* The same weight twice. */
  plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 1, 2, f->w[0], 0, f->w[0], 0));
  expect_error(plan, FDY_ERR_PLAN_BINDING_MISMATCH, 3, 0, f->w[0]);
  fdy_plan_destroy(plan);

  /* Bound to a slot whose latest transfer was of another weight. */
  plan = new_plan(f, 1000);
  add(plan, c_alloc(0, W));
  add(plan, c_alloc(1, W));
  add(plan, c_prefetch(f->w[0], 0, COPY, 0));
  add(plan, c_prefetch(f->w[1], 1, COPY, 1));
  add(plan, c_wait_host(1));
  add(plan, c_launch(0, COMPUTE, 2, 1, f->w[0], 1, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_BINDING_MISMATCH, 5, 0, f->w[0]);
  fdy_plan_destroy(plan);

  /* Bound to a live slot that never received a transfer. */
  plan = sequential_plan(f);
  insert(plan, 0, c_alloc(1, W));
  replace(plan, 4, c_launch(0, COMPUTE, 1, 1, f->w[0], 1, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_BINDING_MISMATCH, 4, 0, f->w[0]);
  fdy_plan_destroy(plan);

  /* Bound to a dead slot. */
  plan = sequential_plan(f);
  replace(plan, 3, c_launch(0, COMPUTE, 1, 1, f->w[0], 1, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, 3, 1, f->w[0]);
  fdy_plan_destroy(plan);
}

static void test_rule_transfer_not_awaited(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 2, NULL), FDY_OK);
  expect_error(plan, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, 2, 0, 0);
  fdy_plan_destroy(plan);

  /* Waiting for the wrong event does not help. */
  plan = sequential_plan(f);
  replace(plan, 6, c_wait_stream(1, COMPUTE));
  expect_error(plan, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, 7, 0, 2);
  fdy_plan_destroy(plan);
}

static void test_rule_producer_not_awaited(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_plan *plan = new_plan(f, 2 * W);
  add(plan, c_alloc(0, W));
  add(plan, c_alloc(1, W));
  add(plan, c_prefetch(f->w[0], 0, COPY, 0));
  add(plan, c_prefetch(f->w[1], 1, COPY, 1));
  add(plan, c_wait_stream(0, COMPUTE));
  add(plan, c_launch(0, COMPUTE, 2, 1, f->w[0], 0, 0, 0));
  add(plan, c_launch(1, COPY, 3, 1, f->w[1], 1, 0, 0));
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_PRODUCER_NOT_AWAITED);
  assert_int_equal(err.command_index, 6);
  assert_int_equal(err.ids[0], f->out[0]);
  assert_int_equal(err.ids[1], 0);
  assert_string_equal(err.name, "layer.0.out");
  fdy_plan_destroy(plan);
}

static void test_rule_incomplete(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_plan *plan = sequential_plan(f);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(fdy_plan_remove(plan, 5, NULL), FDY_OK);
  }
  assert_int_equal(fdy_plan_command_count(plan), 6);
  assert_int_equal(fdy_plan_validate(plan, NULL, &err),
                   FDY_ERR_PLAN_INCOMPLETE);
  assert_int_equal(err.command_index, 6);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 2);
  assert_int_equal(err.actual, 1);
  fdy_plan_destroy(plan);
}

static void test_rule_unsynchronized_end(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_tensor_id x, y;
  fdy_op_id op;
  assert_int_equal(fdy_graph_create("noweights", &g, NULL), FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(4), &x, NULL),
      FDY_OK);
  assert_int_equal(
      fdy_graph_add_activation(g, "y", FDY_DTYPE_F32, FDY_SHAPE(4), &y, NULL),
      FDY_OK);
  fdy_op_desc desc = {.name = "op",
                      .kind = FDY_OP_SYNTHETIC_CHECKSUM,
                      .reads = &x,
                      .read_count = 1,
                      .writes = &y,
                      .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &desc, &op, NULL), FDY_OK);
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_plan_create(g, 0, 2, 0, 2, &plan, NULL), FDY_OK);
  add(plan, c_launch(0, 1, 1, 0, 0, 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_UNSYNCHRONIZED_END, 1, 1, -1);
  /* A stream wait is not a host observation. */
  add(plan, c_wait_stream(1, 0));
  expect_error(plan, FDY_ERR_PLAN_UNSYNCHRONIZED_END, 2, 1, -1);
  add(plan, c_wait_host(1));
  expect_valid(plan, NULL);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

static void test_rule_unreleased_end(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 9, NULL), FDY_OK);
  expect_error(plan, FDY_ERR_PLAN_UNRELEASED_END, 9, 0, -1);
  fdy_plan_destroy(plan);
}

/* The first error in command order wins over later ones. */
static void test_first_error_in_command_order(void **state) {
  fixture *f = *state;
  fdy_plan *plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 9, NULL), FDY_OK); /* unreleased */
  replace(plan, 6, c_wait_stream(6, COMPUTE));              /* not signalled */
  replace(plan, 2, c_wait_stream(1, COMPUTE));              /* not signalled */
  expect_error(plan, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, 2, 1, -1);
  fdy_plan_destroy(plan);
}

/* Within one command the checks run in the order of docs/plan-format.md's
 * table: for a launch, op order before everything else and the reused-event
 * check last. */
static void test_checks_within_a_command_in_table_order(void **state) {
  fixture *f = *state;
  /* Op 0 again (op 1 is next), signalling event 1 of the first launch, bound
   * to a slot that now holds weight 1. */
  fdy_plan *plan = sequential_plan(f);
  replace(plan, 7, c_launch(0, COMPUTE, 1, 1, f->w[0], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_OP_ORDER, 7, 0, 1);
  fdy_plan_destroy(plan);

  /* The right op, not ordered after its transfer, reusing event 1. */
  plan = sequential_plan(f);
  assert_int_equal(fdy_plan_remove(plan, 6, NULL), FDY_OK);
  replace(plan, 6, c_launch(1, COMPUTE, 1, 1, f->w[1], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, 6, 0, 2);
  fdy_plan_destroy(plan);

  /* A released slot whose latest transfer was of another weight: the slot is
   * not live, reported before the binding mismatch. */
  plan = sequential_plan(f);
  insert(plan, 5, c_release(0));
  insert(plan, 6, c_alloc(1, W));
  replace(plan, 7, c_prefetch(f->w[1], 1, COPY, 2));
  replace(plan, 9, c_launch(1, COMPUTE, 3, 1, f->w[1], 0, 0, 0));
  expect_error(plan, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, 9, 0, f->w[1]);
  fdy_plan_destroy(plan);
}

/* ---- planner --------------------------------------------------------------
 */

static size_t find_prefetch(const fdy_plan *plan, uint32_t weight) {
  for (size_t i = 0; i < fdy_plan_command_count(plan); i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_PREFETCH && c->u.prefetch.weight.v == weight) {
      return i;
    }
  }
  fail_msg("no prefetch of weight %u", weight);
  return SIZE_MAX;
}

static size_t find_launch(const fdy_plan *plan, uint32_t op) {
  for (size_t i = 0; i < fdy_plan_command_count(plan); i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_LAUNCH && c->u.launch.op.v == op) {
      return i;
    }
  }
  fail_msg("no launch of op %u", op);
  return SIZE_MAX;
}

/* Index of the first host wait on `event`, or SIZE_MAX. */
static size_t find_host_wait(const fdy_plan *plan, uint32_t event) {
  for (size_t i = 0; i < fdy_plan_command_count(plan); i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_WAIT && c->u.wait.host &&
        c->u.wait.event.v == event) {
      return i;
    }
  }
  return SIZE_MAX;
}

static void check_streaming(uint32_t layers, uint32_t buffers) {
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  fdy_error err;
  fdy_plan_summary s;
  assert_int_equal(fdy_synthetic_graph_create(layers, W, NULL, &g, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, 10 * 128, buffers, 64, &plan, &err),
                   FDY_OK);
  uint32_t slots = buffers < layers ? buffers : layers;
  assert_int_equal(fdy_plan_slot_count(plan), slots);
  assert_int_equal(fdy_plan_stream_count(plan), 2);
  if (fdy_plan_validate(plan, &s, &err) != FDY_OK) {
    fail_msg("L=%u N=%u: %s", layers, buffers, err.message);
  }
  assert_int_equal(s.ops, layers);
  assert_int_equal(s.slots, slots);
  assert_int_equal(s.peak_bytes, (uint64_t)slots * 128);
  assert_int_equal(s.transfer_bytes, (uint64_t)layers * W);
  if (layers == 0) {
    assert_int_equal(fdy_plan_command_count(plan), 0);
  }
  for (uint32_t k = 0; k < layers; k++) {
    char name[64];
    snprintf(name, sizeof(name), "layer.%u.weight", k);
    uint32_t wk = tensor_id(g, name);
    size_t p = find_prefetch(plan, wk);
    size_t l = find_launch(plan, k);
    const fdy_command *pc = fdy_plan_command(plan, p);
    const fdy_command *lc = fdy_plan_command(plan, l);
    /* Copies on the copy stream, compute on the compute stream. */
    assert_int_equal(pc->u.prefetch.stream.v, FDY_STREAM_COPY.v);
    assert_int_equal(lc->u.launch.stream.v, FDY_STREAM_COMPUTE.v);
    assert_int_equal(pc->u.prefetch.slot.v, k % slots);
    /* SIZE_MAX: the host observes launch k only through a later event. */
    size_t host_wait = find_host_wait(plan, lc->u.launch.signal.v);
    assert_true(host_wait == SIZE_MAX || host_wait > l);
    uint32_t ahead = k + slots - 1;
    if (slots >= 2 && ahead < layers) {
      /* Overlap: the transfer of weight k+N-1 is issued before the host
       * waits for launch k, so it runs while op k computes. */
      snprintf(name, sizeof(name), "layer.%u.weight", ahead);
      size_t pa = find_prefetch(plan, tensor_id(g, name));
      assert_true(pa < host_wait);
      /* A refill is issued once op k is queued, keeping compute fed. */
      assert_true(pa > l || ahead < slots);
    }
    if (slots == 1 && k + 1 < layers) {
      /* Sequential: the next transfer follows this launch's completion. */
      snprintf(name, sizeof(name), "layer.%u.weight", k + 1);
      assert_true(find_prefetch(plan, tensor_id(g, name)) > host_wait);
    }
  }
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

static void test_planner_layers_and_buffers(void **state) {
  (void)state;
  static const uint32_t layers[] = {0, 1, 2, 3, 10};
  for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
    for (uint32_t n = 1; n <= 5; n++) {
      check_streaming(layers[i], n);
    }
  }
}

static void test_planner_default_workload(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  fdy_plan_summary s;
  fdy_error err;
  assert_int_equal(
      fdy_synthetic_graph_create(48, 450 * FDY_MIB, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, 4 * FDY_GIB, 3, 256, &plan, &err),
                   FDY_OK);
  expect_valid(plan, &s);
  assert_int_equal(s.ops, 48);
  assert_int_equal(s.slots, 3);
  assert_int_equal(s.peak_bytes, 3 * 450 * FDY_MIB);
  assert_int_equal(s.transfer_bytes, 48 * 450 * FDY_MIB);

  /* Removing one release fails validation naming that slot. */
  size_t n = fdy_plan_command_count(plan);
  size_t last_release = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    if (fdy_plan_command(plan, i)->kind == FDY_CMD_RELEASE) {
      last_release = i;
    }
  }
  assert_true(last_release != SIZE_MAX);
  uint32_t slot = fdy_plan_command(plan, last_release)->u.release.slot.v;
  assert_int_equal(fdy_plan_remove(plan, last_release, NULL), FDY_OK);
  expect_error(plan, FDY_ERR_PLAN_UNRELEASED_END, (int64_t)n - 1, slot, -1);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

static void test_planner_errors(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *plan = (fdy_plan *)&plan;
  fdy_error err;
  assert_int_equal(fdy_synthetic_graph_create(3, W, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, 1000, 0, 1, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(plan);
  assert_int_equal(fdy_plan_streaming(g, 1000, 2, 3, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_streaming(g, 1000, 2, 0, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* The alignment is checked up front, even when no slot needs it. */
  fdy_graph *empty = NULL;
  assert_int_equal(fdy_synthetic_graph_create(0, W, NULL, &empty, NULL),
                   FDY_OK);
  assert_int_equal(fdy_plan_streaming(empty, 0, 2, 3, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(plan);
  assert_int_equal(fdy_plan_streaming(empty, 0, 2, 0, &plan, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_plan_streaming(empty, 0, 2, 1, &plan, &err), FDY_OK);
  assert_int_equal(fdy_plan_command_count(plan), 0);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(empty);
  /* Budget too small for the slots. */
  assert_int_equal(fdy_plan_streaming(g, 299, 3, 1, &plan, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.expected, 299);
  assert_int_equal(err.actual, 300);
  assert_null(plan);
  /* Alignment counts: 3 slots of 128 bytes. */
  assert_int_equal(fdy_plan_streaming(g, 383, 3, 128, &plan, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.actual, 384);
  assert_int_equal(fdy_plan_streaming(g, 384, 3, 128, &plan, &err), FDY_OK);
  fdy_plan_destroy(plan);
  /* A slot size that overflows when rounded up. */
  fdy_graph_destroy(g);
  assert_int_equal(
      fdy_synthetic_graph_create(1, UINT64_MAX - 2, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, UINT64_MAX, 1, 64, &plan, &err),
                   FDY_ERR_OVERFLOW);
  /* Slot count times slot size overflows. */
  fdy_graph_destroy(g);
  assert_int_equal(
      fdy_synthetic_graph_create(2, (uint64_t)1 << 63, NULL, &g, NULL), FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, UINT64_MAX, 2, 1, &plan, &err),
                   FDY_ERR_OVERFLOW);
  fdy_graph_destroy(g);
}

static void test_planner_rejects_two_weights_per_op(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_plan *plan = NULL;
  fdy_error err;
  fdy_tensor_id t[3];
  fdy_op_id op;
  assert_int_equal(fdy_graph_create("two", &g, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "a", FDY_DTYPE_U8, FDY_SHAPE(8),
                                        NULL, 0, &t[0], NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "b", FDY_DTYPE_U8, FDY_SHAPE(8),
                                        NULL, 0, &t[1], NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "y", FDY_DTYPE_U64, FDY_SHAPE(1),
                                            &t[2], NULL),
                   FDY_OK);
  fdy_op_desc desc = {.name = "op",
                      .kind = FDY_OP_SYNTHETIC_CHECKSUM,
                      .reads = t,
                      .read_count = 2,
                      .writes = &t[2],
                      .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &desc, &op, NULL), FDY_OK);
  assert_int_equal(fdy_plan_streaming(g, 1000, 2, 1, &plan, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "op");
  assert_null(plan);

  /* A hand plan binding both weights is valid (bindings in any order). */
  assert_int_equal(fdy_plan_create(g, 16, 2, 2, 3, &plan, NULL), FDY_OK);
  add(plan, c_alloc(0, 8));
  add(plan, c_alloc(1, 8));
  add(plan, c_prefetch(t[0].v, 0, 0, 0));
  add(plan, c_prefetch(t[1].v, 1, 0, 1));
  add(plan, c_wait_stream(1, 1));
  add(plan, c_launch(0, 1, 2, 2, t[1].v, 1, t[0].v, 0));
  add(plan, c_wait_host(2));
  add(plan, c_release(1));
  add(plan, c_release(0));
  expect_valid(plan, NULL);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_create_and_accessors, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_create_rejects_bad_counts, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_append_remove, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_graph_rejects_other_graph,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_sequential_plan_valid, setup,
                                      teardown),
      cmocka_unit_test(test_empty_plan_over_empty_graph_valid),
      cmocka_unit_test_setup_teardown(test_transitive_ordering_valid, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_unknown_id, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rule_zero_allocation, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_double_allocation, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_budget_exceeded, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_slot_too_small, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_not_a_weight, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rule_slot_not_allocated, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_slot_busy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rule_event_reused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rule_event_not_signalled, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_op_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rule_binding_mismatch, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_transfer_not_awaited, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_producer_not_awaited, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_rule_incomplete, setup, teardown),
      cmocka_unit_test(test_rule_unsynchronized_end),
      cmocka_unit_test_setup_teardown(test_rule_unreleased_end, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_first_error_in_command_order, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          test_checks_within_a_command_in_table_order, setup, teardown),
      cmocka_unit_test(test_planner_layers_and_buffers),
      cmocka_unit_test(test_planner_default_workload),
      cmocka_unit_test(test_planner_errors),
      cmocka_unit_test(test_planner_rejects_two_weights_per_op),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
