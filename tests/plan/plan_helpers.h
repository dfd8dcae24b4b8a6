/* Shared helpers for the plan tests: command constructors, small graphs
 * (a chain of checksum ops, an RMSNorm/add block with a step input, views
 * and a state tensor) and plan editing (a plan rebuilt with one command
 * replaced or inserted). Everything is static inline so that a test file
 * uses what it needs. Graph builders assert with cmocka. */
#ifndef FOUNDRY_TEST_PLAN_HELPERS_H
#define FOUNDRY_TEST_PLAN_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "foundry/plan.h"

/* ---- commands ------------------------------------------------------------ */

static inline fdy_command c_alloc(uint32_t buffer) {
  fdy_command c = {.kind = FDY_CMD_ALLOCATE};
  c.u.allocate.buffer.v = buffer;
  return c;
}

static inline fdy_command c_release(uint32_t buffer) {
  fdy_command c = {.kind = FDY_CMD_RELEASE};
  c.u.release.buffer.v = buffer;
  return c;
}

static inline fdy_command c_prefetch(uint32_t weight, uint32_t buffer,
                                     uint64_t offset, uint32_t stream,
                                     uint32_t signal) {
  fdy_command c = {.kind = FDY_CMD_PREFETCH};
  c.u.prefetch.weight.v = weight;
  c.u.prefetch.buffer.v = buffer;
  c.u.prefetch.offset = offset;
  c.u.prefetch.stream.v = stream;
  c.u.prefetch.signal.v = signal;
  return c;
}

static inline fdy_command c_copy_in(uint32_t tensor, uint32_t stream,
                                    uint32_t signal) {
  fdy_command c = {.kind = FDY_CMD_COPY_INPUT};
  c.u.copy.tensor.v = tensor;
  c.u.copy.stream.v = stream;
  c.u.copy.signal.v = signal;
  return c;
}

static inline fdy_command c_copy_out(uint32_t tensor, uint32_t stream,
                                     uint32_t signal) {
  fdy_command c = c_copy_in(tensor, stream, signal);
  c.kind = FDY_CMD_COPY_OUTPUT;
  return c;
}

static inline fdy_command c_wait_stream(uint32_t event, uint32_t stream) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.stream.v = stream;
  return c;
}

static inline fdy_command c_wait_host(uint32_t event) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.host = true;
  return c;
}

/* A launch without bindings; add them with c_bind. */
static inline fdy_command c_launch(uint32_t op, uint32_t stream,
                                   uint32_t signal) {
  fdy_command c = {.kind = FDY_CMD_LAUNCH};
  c.u.launch.op.v = op;
  c.u.launch.stream.v = stream;
  c.u.launch.signal.v = signal;
  return c;
}

/* `launch` with one more binding (weight at buffer + offset). */
static inline fdy_command c_bind(fdy_command launch, uint32_t weight,
                                 uint32_t buffer, uint64_t offset) {
  assert_true(launch.u.launch.binding_count < FDY_MAX_BINDINGS);
  fdy_binding *b = &launch.u.launch.bindings[launch.u.launch.binding_count++];
  b->weight.v = weight;
  b->buffer.v = buffer;
  b->offset = offset;
  return launch;
}

/* A launch with one binding. */
static inline fdy_command c_launch1(uint32_t op, uint32_t stream,
                                    uint32_t signal, uint32_t weight,
                                    uint32_t buffer, uint64_t offset) {
  return c_bind(c_launch(op, stream, signal), weight, buffer, offset);
}

static inline void add(fdy_plan *plan, fdy_command c) {
  assert_int_equal(fdy_plan_append(plan, &c, NULL), FDY_OK);
}

static inline void section(fdy_plan *plan, const char *name) {
  assert_int_equal(fdy_plan_begin_section(plan, name, NULL), FDY_OK);
}

static inline void place(fdy_plan *plan, uint32_t tensor, uint32_t buffer,
                         uint64_t offset) {
  fdy_placement p = {{buffer}, offset};
  assert_int_equal(fdy_plan_place(plan, (fdy_tensor_id){tensor}, p, NULL),
                   FDY_OK);
}

/* ---- graphs -------------------------------------------------------------- */

#define TEST_W       256 /* bytes of a chain weight (U8 [TEST_W]) */
#define TEST_MAX_OPS 8
#define TEST_HIDDEN  128               /* the block's row width */
#define TEST_ROW     (TEST_HIDDEN * 4) /* bytes of an F32 [1, H] row */
#define TEST_NORM    (TEST_HIDDEN * 2) /* bytes of an F16 [H] norm view */

static inline uint32_t add_weight(fdy_graph *g, const char *name,
                                  fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_id id;
  assert_int_equal(
      fdy_graph_add_weight(g, name, dtype, shape, NULL, 0, &id, NULL), FDY_OK);
  return id.v;
}

static inline uint32_t add_view(fdy_graph *g, const char *name, uint32_t weight,
                                uint64_t offset, fdy_dtype dtype,
                                fdy_shape shape) {
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_add_weight_view(g, name, (fdy_tensor_id){weight},
                                             offset, dtype, shape, &id, NULL),
                   FDY_OK);
  return id.v;
}

static inline uint32_t add_activation(fdy_graph *g, const char *name,
                                      fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_add_activation(g, name, dtype, shape, &id, NULL),
                   FDY_OK);
  return id.v;
}

static inline uint32_t add_input(fdy_graph *g, const char *name,
                                 fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_add_input(g, name, dtype, shape, &id, NULL),
                   FDY_OK);
  return id.v;
}

static inline uint32_t add_state(fdy_graph *g, const char *name,
                                 fdy_dtype dtype, fdy_shape shape) {
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_add_state(g, name, dtype, shape, &id, NULL),
                   FDY_OK);
  return id.v;
}

/* Appends op `name` of `kind` reading reads[0..nr) and writing `out`. */
static inline uint32_t add_op(fdy_graph *g, const char *name, fdy_op_kind kind,
                              fdy_op_params params, const uint32_t *reads,
                              size_t nr, uint32_t out) {
  fdy_tensor_id r[FDY_OP_MAX_INPUTS];
  assert_true(nr <= FDY_OP_MAX_INPUTS);
  for (size_t i = 0; i < nr; i++) {
    r[i].v = reads[i];
  }
  fdy_tensor_id w = {out};
  fdy_op_desc d = {.name = name,
                   .kind = kind,
                   .params = params,
                   .reads = r,
                   .read_count = nr,
                   .writes = &w,
                   .write_count = 1};
  fdy_op_id id;
  fdy_error err;
  fdy_status st = fdy_graph_add_op(g, &d, &id, &err);
  if (st != FDY_OK) {
    fail_msg("adding op %s: %s", name, err.message);
  }
  return id.v;
}

/* A chain of n checksum ops: op i ("op<i>") reads weight "w<i>" (U8
 * [TEST_W]) and, when chained and i > 0, "out<i-1>" as prev; it writes
 * "out<i>" (U64 [1]). */
typedef struct test_chain {
  fdy_graph *graph;
  size_t n;
  uint32_t w[TEST_MAX_OPS];
  uint32_t out[TEST_MAX_OPS];
} test_chain;

static inline test_chain chain_make(size_t n, bool chained) {
  test_chain ch = {.n = n};
  assert_true(n <= TEST_MAX_OPS);
  assert_int_equal(fdy_graph_create("chain", &ch.graph, NULL), FDY_OK);
  for (size_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "w%zu", i);
    ch.w[i] = add_weight(ch.graph, name, FDY_DTYPE_U8, FDY_SHAPE(TEST_W));
    snprintf(name, sizeof name, "out%zu", i);
    ch.out[i] = add_activation(ch.graph, name, FDY_DTYPE_U64, FDY_SHAPE(1));
    uint32_t reads[2] = {ch.w[i], i > 0 ? ch.out[i - 1] : 0};
    snprintf(name, sizeof name, "op%zu", i);
    add_op(ch.graph, name, FDY_OP_CHECKSUM, (fdy_op_params){0}, reads,
           chained && i > 0 ? 2 : 1, ch.out[i]);
  }
  return ch;
}

/* A block of row-wise ops over T = 1 rows and H = TEST_HIDDEN:
 *   op 0 "norm_a":  a = rmsnorm(step, x, norm.a)
 *   op 1 "add_a":   c = add(step, a, cache)       (last reader of a)
 *   op 2 "norm_b":  b = rmsnorm(step, x, norm.b)  (independent of ops 0-1)
 *   op 3 "add_out": y = add(step, c, b)
 * "step" (I32 [3]) and "x" (F32 [1, H]) are inputs, "cache" (F32 [1, H])
 * is state, "norm" (F16 [2H]) is one weight with the views norm.a at 0
 * and norm.b at TEST_NORM. */
typedef struct test_block {
  fdy_graph *graph;
  uint32_t step, x, norm, norm_a, norm_b, cache; /* tensors */
  uint32_t a, c, b, y;                           /* activations */
} test_block;

enum { OP_NORM_A, OP_ADD_A, OP_NORM_B, OP_ADD_OUT };

static inline test_block block_make(void) {
  test_block k;
  fdy_shape row = FDY_SHAPE(1, TEST_HIDDEN);
  fdy_op_params norm = {.rmsnorm = {.eps = 1e-5}};
  fdy_op_params none = {0};
  assert_int_equal(fdy_graph_create("block", &k.graph, NULL), FDY_OK);
  k.step = add_input(k.graph, "step", FDY_DTYPE_I32,
                     FDY_SHAPE(FDY_STEP_ELEMENTS(1)));
  k.x = add_input(k.graph, "x", FDY_DTYPE_F32, row);
  k.norm =
      add_weight(k.graph, "norm", FDY_DTYPE_F16, FDY_SHAPE(2 * TEST_HIDDEN));
  k.norm_a = add_view(k.graph, "norm.a", k.norm, 0, FDY_DTYPE_F16,
                      FDY_SHAPE(TEST_HIDDEN));
  k.norm_b = add_view(k.graph, "norm.b", k.norm, TEST_NORM, FDY_DTYPE_F16,
                      FDY_SHAPE(TEST_HIDDEN));
  k.cache = add_state(k.graph, "cache", FDY_DTYPE_F32, row);
  k.a = add_activation(k.graph, "a", FDY_DTYPE_F32, row);
  k.c = add_activation(k.graph, "c", FDY_DTYPE_F32, row);
  k.b = add_activation(k.graph, "b", FDY_DTYPE_F32, row);
  k.y = add_activation(k.graph, "y", FDY_DTYPE_F32, row);
  add_op(k.graph, "norm_a", FDY_OP_RMSNORM, norm,
         (uint32_t[]){k.step, k.x, k.norm_a}, 3, k.a);
  add_op(k.graph, "add_a", FDY_OP_ADD, none, (uint32_t[]){k.step, k.a, k.cache},
         3, k.c);
  add_op(k.graph, "norm_b", FDY_OP_RMSNORM, norm,
         (uint32_t[]){k.step, k.x, k.norm_b}, 3, k.b);
  add_op(k.graph, "add_out", FDY_OP_ADD, none, (uint32_t[]){k.step, k.c, k.b},
         3, k.y);
  return k;
}

/* ---- plan editing -------------------------------------------------------- */

/* Absolute index of command `pos` of section `name`. */
static inline size_t at(const fdy_plan *plan, const char *name, size_t pos) {
  int64_t s = fdy_plan_find_section(plan, name);
  assert_true(s >= 0);
  return fdy_plan_section(plan, (size_t)s)->first + pos;
}

/* A copy of `plan` (graph, budget, streams, buffers, events, placements,
 * sections) in which `dropped` commands at position `pos` of section `sec` are
 * replaced by *c (nothing when c is NULL). Destroys `plan`. */
static inline fdy_plan *plan_splice(fdy_plan *plan, size_t sec, size_t pos,
                                    size_t dropped, const fdy_command *c) {
  uint32_t nb = fdy_plan_buffer_count(plan);
  fdy_plan_buffer *buffers = calloc(nb ? nb : 1, sizeof(*buffers));
  assert_non_null(buffers);
  for (uint32_t i = 0; i < nb; i++) {
    buffers[i] = *fdy_plan_buffer_at(plan, i);
  }
  const fdy_graph *g = fdy_plan_graph(plan);
  fdy_plan *out = NULL;
  assert_int_equal(fdy_plan_create(g, fdy_plan_budget(plan),
                                   fdy_plan_stream_count(plan), buffers, nb,
                                   fdy_plan_event_count(plan), &out, NULL),
                   FDY_OK);
  free(buffers);
  for (uint32_t t = 0; t < fdy_graph_tensor_count(g); t++) {
    fdy_placement p = fdy_plan_placement(plan, (fdy_tensor_id){t});
    if (p.buffer.v != FDY_NO_BUFFER) {
      assert_int_equal(fdy_plan_place(out, (fdy_tensor_id){t}, p, NULL),
                       FDY_OK);
    }
  }
  for (size_t s = 0; s < fdy_plan_section_count(plan); s++) {
    const fdy_section *src = fdy_plan_section(plan, s);
    if (s > 0) {
      section(out, src->name);
    }
    for (size_t i = 0; i <= src->count; i++) {
      if (s == sec && i == pos && c != NULL) {
        add(out, *c);
      }
      if (i < src->count && !(s == sec && i >= pos && i < pos + dropped)) {
        add(out, *fdy_plan_command(plan, src->first + i));
      }
    }
  }
  fdy_plan_destroy(plan);
  return out;
}

/* Section index and position of absolute command `index`. */
static inline void locate(const fdy_plan *plan, size_t index, size_t *sec,
                          size_t *pos) {
  for (size_t s = 0; s < fdy_plan_section_count(plan); s++) {
    const fdy_section *x = fdy_plan_section(plan, s);
    if (index >= x->first && index < x->first + x->count) {
      *sec = s;
      *pos = index - x->first;
      return;
    }
  }
  fail_msg("no command %zu", index);
}

/* `plan` with command `index` replaced by c (same section). */
static inline fdy_plan *replace(fdy_plan *plan, size_t index, fdy_command c) {
  size_t sec = 0, pos = 0;
  locate(plan, index, &sec, &pos);
  return plan_splice(plan, sec, pos, 1, &c);
}

/* `plan` with c inserted as command `pos` of section `name` (pos may be the
 * section's count: its end). */
static inline fdy_plan *insert(fdy_plan *plan, const char *name, size_t pos,
                               fdy_command c) {
  int64_t s = fdy_plan_find_section(plan, name);
  assert_true(s >= 0);
  return plan_splice(plan, (size_t)s, pos, 0, &c);
}

/* `plan` without command `index`. */
static inline fdy_plan *without(fdy_plan *plan, size_t index) {
  assert_int_equal(fdy_plan_remove(plan, index, NULL), FDY_OK);
  return plan;
}

#endif
