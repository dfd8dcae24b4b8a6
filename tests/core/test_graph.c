/* Tests of the graph: structural validation, failed mutations leaving the
 * graph (and its name maps) unchanged, queries, typed ops and their operand
 * checks, weight views, state tensors, padding extents,
 * clone/fingerprint/same_structure, names at a scale where a linear search
 * would show, and a chain whose file-range weights describe far more bytes
 * than the process may allocate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "foundry/graph.h"

typedef struct snapshot {
  uint64_t fingerprint;
  size_t tensors, ops;
  uint64_t weight_bytes;
  int64_t producers[16];
} snapshot;

static snapshot take(const fdy_graph *g) {
  snapshot s;
  memset(&s, 0, sizeof(s));
  s.fingerprint = fdy_graph_fingerprint(g);
  s.tensors = fdy_graph_tensor_count(g);
  s.ops = fdy_graph_op_count(g);
  assert_int_equal(fdy_graph_weight_bytes(g, &s.weight_bytes, NULL), FDY_OK);
  for (size_t i = 0; i < s.tensors && i < 16; i++) {
    fdy_tensor_info info;
    assert_int_equal(
        fdy_graph_tensor(g, (fdy_tensor_id){(uint32_t)i}, &info, NULL), FDY_OK);
    s.producers[i] = info.producer;
  }
  return s;
}

static void assert_unchanged(const fdy_graph *g, snapshot before) {
  snapshot after = take(g);
  assert_true(after.fingerprint == before.fingerprint);
  assert_int_equal(after.tensors, before.tensors);
  assert_int_equal(after.ops, before.ops);
  assert_int_equal(after.weight_bytes, before.weight_bytes);
  assert_memory_equal(after.producers, before.producers,
                      sizeof(before.producers));
}

static void assert_no_tensor(const fdy_graph *g, const char *name) {
  fdy_tensor_id id = {77};
  fdy_error err;
  assert_int_equal(fdy_graph_find_tensor(g, name, &id, &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, name);
  assert_int_equal(id.v, 77);
}

static unsigned char host_bytes[4096];

/* w (weight U8 [128], host), x (input U64 [1]), a0 = op0 = checksum(w, x)
 * with 5 passes, a1 (U64 [1]) declared, not produced. */
typedef struct fixture {
  fdy_graph *g;
  fdy_tensor_id w, x, a0, a1;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(fdy_graph_create("t", &f->g, NULL), FDY_OK);
  fdy_extent e = {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 128};
  assert_int_equal(fdy_graph_add_weight(f->g, "w", FDY_DTYPE_U8, FDY_SHAPE(128),
                                        &e, 1, &f->w, NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(f->g, "x", FDY_DTYPE_U64, FDY_SHAPE(1), &f->x, NULL),
      FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "a0", FDY_DTYPE_U64,
                                            FDY_SHAPE(1), &f->a0, NULL),
                   FDY_OK);
  fdy_tensor_id reads[] = {f->w, f->x};
  fdy_op_desc op = {.name = "op0",
                    .kind = FDY_OP_CHECKSUM,
                    .params.checksum.passes = 5,
                    .reads = reads,
                    .read_count = 2,
                    .writes = &f->a0,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "a1", FDY_DTYPE_U64,
                                            FDY_SHAPE(1), &f->a1, NULL),
                   FDY_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  fdy_graph_destroy(f->g);
  free(f);
  return 0;
}

static void test_queries(void **state) {
  fixture *f = *state;
  fdy_error err;
  assert_string_equal(fdy_graph_name(f->g), "t");
  assert_int_equal(fdy_graph_tensor_count(f->g), 4);
  assert_int_equal(fdy_graph_op_count(f->g), 1);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(f->g, f->w, &t, &err), FDY_OK);
  assert_string_equal(t.name, "w");
  assert_int_equal(t.role, FDY_TENSOR_WEIGHT);
  assert_int_equal(t.dtype, FDY_DTYPE_U8);
  assert_int_equal(t.bytes, 128);
  assert_int_equal(t.extent_count, 1);
  assert_ptr_equal(t.extents[0].host, host_bytes);
  assert_int_equal(t.producer, -1);
  assert_int_equal(t.weight, -1);
  assert_int_equal(t.offset, 0);
  assert_int_equal(fdy_graph_tensor(f->g, f->a0, &t, &err), FDY_OK);
  assert_int_equal(t.role, FDY_TENSOR_ACTIVATION);
  assert_int_equal(t.producer, 0);
  assert_int_equal(fdy_graph_tensor(f->g, (fdy_tensor_id){4}, &t, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(err.kind, FDY_ERR_NOT_FOUND);
  fdy_op_info op;
  assert_int_equal(fdy_graph_op(f->g, (fdy_op_id){0}, &op, &err), FDY_OK);
  assert_string_equal(op.name, "op0");
  assert_int_equal(op.kind, FDY_OP_CHECKSUM);
  fdy_op_params want;
  memset(&want, 0, sizeof(want));
  want.checksum.passes = 5;
  assert_memory_equal(&op.params, &want, sizeof(want));
  assert_int_equal(op.read_count, 2);
  assert_int_equal(op.reads[0].v, f->w.v);
  assert_int_equal(op.reads[1].v, f->x.v);
  assert_int_equal(op.write_count, 1);
  assert_int_equal(op.writes[0].v, f->a0.v);
  assert_int_equal(fdy_graph_op(f->g, (fdy_op_id){1}, &op, &err),
                   FDY_ERR_NOT_FOUND);
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_find_tensor(f->g, "x", &id, &err), FDY_OK);
  assert_int_equal(id.v, f->x.v);
  assert_int_equal(fdy_graph_find_tensor(f->g, "a1", &id, &err), FDY_OK);
  assert_int_equal(id.v, f->a1.v);
  assert_no_tensor(f->g, "nope");
  /* Op names are not tensor names. */
  assert_no_tensor(f->g, "op0");
  uint64_t wb = 0;
  assert_int_equal(fdy_graph_weight_bytes(f->g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 128);
  assert_string_equal(fdy_tensor_role_name(FDY_TENSOR_INPUT), "input");
  assert_string_equal(fdy_tensor_role_name(FDY_TENSOR_WEIGHT_VIEW),
                      "weight_view");
  assert_string_equal(fdy_tensor_role_name(FDY_TENSOR_STATE), "state");
}

static void test_validate_unproduced_activation(void **state) {
  fixture *f = *state;
  fdy_error err;
  assert_int_equal(fdy_graph_validate(f->g, &err),
                   FDY_ERR_GRAPH_READ_BEFORE_WRITE);
  assert_int_equal(err.ids[0], f->a1.v);
  assert_string_equal(err.name, "a1");
  fdy_tensor_id reads[] = {f->w, f->a0};
  fdy_op_desc op = {.name = "op1",
                    .kind = FDY_OP_CHECKSUM,
                    .reads = reads,
                    .read_count = 2,
                    .writes = &f->a1,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, &err), FDY_OK);
  assert_int_equal(fdy_graph_validate(f->g, &err), FDY_OK);
}

/* Runs one failing add_op on g and checks its kind, ids[0] (when id >= -1;
 * an operand index for operand checks, -1 for a parameter) and that nothing
 * changed. Returns the error for further checks. */
#define ANY_ID (-2)
static fdy_error expect_op_fails(fdy_graph *g, const fdy_op_desc *op,
                                 fdy_status kind, int64_t id) {
  fdy_error err;
  snapshot before = take(g);
  fdy_op_id out = {77};
  assert_int_equal(fdy_graph_add_op(g, op, &out, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(out.v, 77);
  if (id != ANY_ID) {
    assert_int_equal(err.ids[0], id);
  }
  assert_unchanged(g, before);
  return err;
}

static void test_add_op_errors(void **state) {
  fixture *f = *state;
  fdy_tensor_id unknown = {99};
  fdy_tensor_id reads_unknown[] = {f->w, unknown};
  fdy_op_desc op = {.name = "bad",
                    .kind = FDY_OP_CHECKSUM,
                    .reads = reads_unknown,
                    .read_count = 2,
                    .writes = &f->a1,
                    .write_count = 1};
  expect_op_fails(f->g, &op, FDY_ERR_GRAPH_UNKNOWN_TENSOR, 99);

  op.reads = &f->w;
  op.read_count = 1;
  op.writes = &unknown;
  expect_op_fails(f->g, &op, FDY_ERR_GRAPH_UNKNOWN_TENSOR, 99);

  /* a1 is read before any op produces it. */
  fdy_tensor_id reads_a1[] = {f->w, f->a1};
  op.reads = reads_a1;
  op.read_count = 2;
  op.writes = &f->a1;
  expect_op_fails(f->g, &op, FDY_ERR_GRAPH_READ_BEFORE_WRITE, f->a1.v);

  /* a0 already has op0 as producer; the valid write of a1 listed first must
   * not stick. */
  fdy_tensor_id writes_twice[] = {f->a1, f->a0};
  op.reads = &f->w;
  op.read_count = 1;
  op.writes = writes_twice;
  op.write_count = 2;
  fdy_error err =
      expect_op_fails(f->g, &op, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, f->a0.v);
  assert_int_equal(err.ids[1], 0);

  fdy_tensor_id same_twice[] = {f->a1, f->a1};
  op.writes = same_twice;
  expect_op_fails(f->g, &op, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, f->a1.v);

  op.write_count = 1;
  op.writes = &f->w;
  expect_op_fails(f->g, &op, FDY_ERR_GRAPH_ROLE, f->w.v);
  op.writes = &f->x;
  err = expect_op_fails(f->g, &op, FDY_ERR_GRAPH_ROLE, f->x.v);
  assert_string_equal(err.name, "x");

  op.writes = &f->a1;
  op.name = "op0";
  err = expect_op_fails(f->g, &op, FDY_ERR_GRAPH_DUPLICATE_NAME, ANY_ID);
  assert_int_equal(err.ids[1], 0);
  assert_string_equal(err.name, "op0");
  op.name = "";
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  op.name = NULL;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  op.name = "ok";
  op.kind = FDY_OP_KIND_COUNT;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  op.kind = FDY_OP_CHECKSUM;
  op.reads = NULL;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  expect_op_fails(f->g, NULL, FDY_ERR_INVALID_ARGUMENT, ANY_ID);

  /* After all those failures a valid op still succeeds, under a name every
   * failure above used. */
  fdy_tensor_id reads[] = {f->w, f->a0};
  op.reads = reads;
  op.read_count = 2;
  op.name = "bad";
  fdy_op_id id;
  assert_int_equal(fdy_graph_add_op(f->g, &op, &id, NULL), FDY_OK);
  assert_int_equal(id.v, 1);
  assert_int_equal(fdy_graph_validate(f->g, NULL), FDY_OK);
}

/* An op whose operands or params fail fdy_op_check is refused with the
 * check's error (ids[0] the operand index, -1 for a parameter; name the op)
 * and changes nothing. */
static void test_operand_checks(void **state) {
  fixture *f = *state;
  fdy_tensor_id odd, f32, pair, u32, step, a, narrow, norm_w, sum;
  assert_int_equal(fdy_graph_add_weight(f->g, "odd", FDY_DTYPE_U8,
                                        FDY_SHAPE(12), NULL, 0, &odd, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(f->g, "f32", FDY_DTYPE_F32,
                                        FDY_SHAPE(8), NULL, 0, &f32, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_input(f->g, "pair", FDY_DTYPE_U64,
                                       FDY_SHAPE(2), &pair, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "u32", FDY_DTYPE_U32,
                                            FDY_SHAPE(1), &u32, NULL),
                   FDY_OK);
  /* ADD and RMSNORM over T = 2 rows of n = 4. */
  assert_int_equal(fdy_graph_add_input(f->g, "step", FDY_DTYPE_I32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(2)), &step,
                                       NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(f->g, "a", FDY_DTYPE_F32, FDY_SHAPE(2, 4), &a, NULL),
      FDY_OK);
  assert_int_equal(fdy_graph_add_input(f->g, "narrow", FDY_DTYPE_F32,
                                       FDY_SHAPE(2, 3), &narrow, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(f->g, "norm_w", FDY_DTYPE_F16,
                                        FDY_SHAPE(4), NULL, 0, &norm_w, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "sum", FDY_DTYPE_F32,
                                            FDY_SHAPE(2, 4), &sum, NULL),
                   FDY_OK);

  fdy_tensor_id reads[FDY_OP_MAX_INPUTS + 1] = {odd};
  fdy_op_desc op = {.name = "bad",
                    .kind = FDY_OP_CHECKSUM,
                    .reads = reads,
                    .read_count = 1,
                    .writes = &f->a1,
                    .write_count = 1};
  /* 12 bytes are not a multiple of 8. */
  fdy_error err = expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, 0);
  assert_string_equal(err.name, "bad");
  reads[0] = f32;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, 0);
  /* prev must be U64 [1]. */
  reads[0] = f->w;
  reads[1] = pair;
  op.read_count = 2;
  err = expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, 1);
  assert_int_equal(err.expected, 1);
  assert_int_equal(err.actual, 2);
  /* The output (operand 2 after two inputs) must be U64. */
  reads[1] = f->x;
  op.writes = &u32;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, 2);
  /* Operand counts. */
  op.writes = &f->a1;
  reads[2] = f->x;
  op.read_count = 3;
  err = expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  assert_int_equal(err.actual, 3);
  op.read_count = FDY_OP_MAX_INPUTS + 1;
  for (size_t i = 0; i < op.read_count; i++) {
    reads[i] = f->w;
  }
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  op.read_count = 1;
  op.write_count = 0;
  err = expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);
  assert_int_equal(err.expected, 1);
  assert_int_equal(err.actual, 0);

  /* ADD: b narrower than a. */
  fdy_tensor_id add_reads[] = {step, a, narrow};
  op = (fdy_op_desc){.name = "bad",
                     .kind = FDY_OP_ADD,
                     .reads = add_reads,
                     .read_count = 3,
                     .writes = &sum,
                     .write_count = 1};
  err = expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, 2);
  assert_int_equal(err.expected, 4);
  assert_int_equal(err.actual, 3);
  /* ADD under a kind whose operands differ. */
  op.kind = FDY_OP_ARGMAX;
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, ANY_ID);

  /* RMSNORM: a negative eps is a parameter error. */
  fdy_tensor_id norm_reads[] = {step, a, norm_w};
  op = (fdy_op_desc){.name = "bad",
                     .kind = FDY_OP_RMSNORM,
                     .params.rmsnorm.eps = -1e-5,
                     .reads = norm_reads,
                     .read_count = 3,
                     .writes = &sum,
                     .write_count = 1};
  expect_op_fails(f->g, &op, FDY_ERR_INVALID_ARGUMENT, -1);

  /* The refused name and outputs are free: the same op with a valid eps
   * succeeds and produces sum. */
  op.params.rmsnorm.eps = 1e-5;
  fdy_op_id id;
  assert_int_equal(fdy_graph_add_op(f->g, &op, &id, NULL), FDY_OK);
  assert_int_equal(id.v, 1);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(f->g, sum, &t, NULL), FDY_OK);
  assert_int_equal(t.producer, 1);
}

static void expect_weight_fails(fixture *f, const char *name, fdy_dtype dtype,
                                fdy_shape shape, const fdy_extent *e, size_t n,
                                fdy_status kind) {
  fdy_error err;
  snapshot before = take(f->g);
  fdy_tensor_id id = {77};
  assert_int_equal(
      fdy_graph_add_weight(f->g, name, dtype, shape, e, n, &id, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(id.v, 77);
  assert_unchanged(f->g, before);
}

static void test_add_weight_errors(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_extent e = {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 100};
  expect_weight_fails(f, "w2", FDY_DTYPE_F32, FDY_SHAPE(4, 8), &e, 1,
                      FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(fdy_graph_add_weight(f->g, "w2", FDY_DTYPE_F32,
                                        FDY_SHAPE(4, 8), &e, 1, NULL, &err),
                   FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 128);
  assert_int_equal(err.actual, 100);
  assert_string_equal(err.name, "w2");

  /* Same bytes, wrong dtype: BF16 [4, 8] is 64 bytes. */
  e.length = 128;
  assert_int_equal(fdy_graph_add_weight(f->g, "w2", FDY_DTYPE_BF16,
                                        FDY_SHAPE(4, 8), &e, 1, NULL, &err),
                   FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 64);
  assert_int_equal(err.actual, 128);

  /* Two extents summing to too much. */
  fdy_extent two[2] = {e, e};
  expect_weight_fails(f, "w2", FDY_DTYPE_F32, FDY_SHAPE(4, 8), two, 2,
                      FDY_ERR_GRAPH_WEIGHT_SIZE);
  /* Extent lengths whose sum wraps. */
  fdy_extent wrap[2] = {
      {.kind = FDY_EXTENT_FILE, .path = "f", .offset = 0, .length = UINT64_MAX},
      {.kind = FDY_EXTENT_FILE, .path = "f", .offset = 0, .length = 129},
  };
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), wrap, 2,
                      FDY_ERR_GRAPH_WEIGHT_SIZE);

  fdy_extent file = {.kind = FDY_EXTENT_FILE,
                     .path = "/nonexistent/model.bin",
                     .offset = UINT64_MAX - 10,
                     .length = 128};
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), &file, 1,
                      FDY_ERR_GRAPH_FILE_RANGE);
  file.offset = UINT64_MAX - 128;
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_add_weight(f->g, "edge", FDY_DTYPE_U8,
                                        FDY_SHAPE(128), &file, 1, &id, &err),
                   FDY_OK);
  file.offset = 0;
  file.path = NULL;
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), &file, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  file.path = "";
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), &file, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  fdy_extent nohost = {.kind = FDY_EXTENT_HOST, .host = NULL, .length = 128};
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), &nohost, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  fdy_extent zero_len[2] = {
      {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 128},
      {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 0},
  };
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), zero_len, 2,
                      FDY_ERR_INVALID_ARGUMENT);
  fdy_extent badkind = {
      .kind = (fdy_extent_kind)7, .host = host_bytes, .length = 128};
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), &badkind, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  expect_weight_fails(f, "w2", FDY_DTYPE_U8, FDY_SHAPE(128), NULL, 1,
                      FDY_ERR_INVALID_ARGUMENT);

  /* Names are unique across roles. */
  e.length = 128;
  expect_weight_fails(f, "x", FDY_DTYPE_U8, FDY_SHAPE(128), &e, 1,
                      FDY_ERR_GRAPH_DUPLICATE_NAME);
  expect_weight_fails(f, "", FDY_DTYPE_U8, FDY_SHAPE(128), &e, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  expect_weight_fails(f, NULL, FDY_DTYPE_U8, FDY_SHAPE(128), &e, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  expect_weight_fails(f, "w2", FDY_DTYPE_COUNT, FDY_SHAPE(128), &e, 1,
                      FDY_ERR_INVALID_ARGUMENT);
  expect_weight_fails(f, "w2", FDY_DTYPE_F32, FDY_SHAPE(UINT64_MAX / 2, 3),
                      NULL, 0, FDY_ERR_OVERFLOW);

  snapshot before = take(f->g);
  assert_int_equal(
      fdy_graph_add_input(f->g, "a0", FDY_DTYPE_F32, FDY_SHAPE(1), NULL, &err),
      FDY_ERR_GRAPH_DUPLICATE_NAME);
  assert_int_equal(err.ids[0], f->a0.v);
  assert_string_equal(err.name, "a0");
  assert_int_equal(fdy_graph_add_activation(f->g, "w", FDY_DTYPE_F32,
                                            FDY_SHAPE(1), NULL, &err),
                   FDY_ERR_GRAPH_DUPLICATE_NAME);
  assert_unchanged(f->g, before);

  /* None of the failures left its name behind. */
  assert_no_tensor(f->g, "w2");
  e.length = 128;
  assert_int_equal(fdy_graph_add_weight(f->g, "w2", FDY_DTYPE_F32,
                                        FDY_SHAPE(4, 8), &e, 1, &id, &err),
                   FDY_OK);
  fdy_tensor_id found;
  assert_int_equal(fdy_graph_find_tensor(f->g, "w2", &found, &err), FDY_OK);
  assert_int_equal(found.v, id.v);
}

static void test_gather_and_described_weights(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_extent parts[3] = {
      {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 1000},
      {.kind = FDY_EXTENT_FILE, .path = "m.bin", .offset = 4096, .length = 24},
      {.kind = FDY_EXTENT_HOST, .host = host_bytes + 2000, .length = 1000},
  };
  fdy_tensor_id gid, did;
  assert_int_equal(fdy_graph_add_weight(f->g, "layer", FDY_DTYPE_U32,
                                        FDY_SHAPE(506), parts, 3, &gid, &err),
                   FDY_OK);
  /* Described weight: no extents, any size. */
  assert_int_equal(fdy_graph_add_weight(f->g, "desc", FDY_DTYPE_BF16,
                                        FDY_SHAPE(1024, 1024), NULL, 0, &did,
                                        &err),
                   FDY_OK);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(f->g, gid, &t, &err), FDY_OK);
  assert_int_equal(t.bytes, 2024);
  assert_int_equal(t.extent_count, 3);
  assert_int_equal(t.extents[1].kind, FDY_EXTENT_FILE);
  assert_string_equal(t.extents[1].path, "m.bin");
  assert_ptr_not_equal(t.extents[1].path, parts[1].path);
  assert_int_equal(t.extents[1].offset, 4096);
  assert_ptr_equal(t.extents[2].host, host_bytes + 2000);
  assert_int_equal(fdy_graph_tensor(f->g, did, &t, &err), FDY_OK);
  assert_int_equal(t.extent_count, 0);
  assert_int_equal(t.bytes, 2 * FDY_MIB);
  uint64_t wb;
  assert_int_equal(fdy_graph_weight_bytes(f->g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 128 + 2024 + 2 * FDY_MIB);
}

static void test_weight_bytes_overflow(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_create("big", &g, &err), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "a", FDY_DTYPE_U8,
                                        FDY_SHAPE(UINT64_MAX), NULL, 0, NULL,
                                        &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "b", FDY_DTYPE_U8, FDY_SHAPE(1),
                                        NULL, 0, NULL, &err),
                   FDY_OK);
  uint64_t wb = 5;
  assert_int_equal(fdy_graph_weight_bytes(g, &wb, &err), FDY_ERR_OVERFLOW);
  assert_int_equal(err.kind, FDY_ERR_OVERFLOW);
  assert_int_equal(wb, 5);
  fdy_graph_destroy(g);
  fdy_graph_destroy(NULL);
}

static void test_clone_fingerprint_structure(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_graph *c = NULL;
  assert_int_equal(fdy_graph_clone(f->g, &c, &err), FDY_OK);
  assert_true(fdy_graph_fingerprint(c) == fdy_graph_fingerprint(f->g));
  assert_true(fdy_graph_same_structure(c, f->g));
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(c, f->w, &t, &err), FDY_OK);
  assert_ptr_equal(t.extents[0].host, host_bytes);
  assert_int_equal(t.bytes, 128);

  /* The clone finds every name and refuses duplicates of them. */
  const char *names[] = {"w", "x", "a0", "a1"};
  for (uint32_t i = 0; i < 4; i++) {
    fdy_tensor_id id;
    assert_int_equal(fdy_graph_find_tensor(c, names[i], &id, &err), FDY_OK);
    assert_int_equal(id.v, i);
    assert_int_equal(fdy_graph_add_input(c, names[i], FDY_DTYPE_U8,
                                         FDY_SHAPE(8), NULL, &err),
                     FDY_ERR_GRAPH_DUPLICATE_NAME);
    assert_int_equal(err.ids[0], i);
  }
  fdy_tensor_id reads[] = {f->w, f->a0};
  fdy_op_desc op = {.name = "op0",
                    .kind = FDY_OP_CHECKSUM,
                    .reads = reads,
                    .read_count = 2,
                    .writes = &f->a1,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(c, &op, NULL, &err),
                   FDY_ERR_GRAPH_DUPLICATE_NAME);

  /* Mutating the clone does not touch the original. */
  snapshot before = take(f->g);
  op.name = "op1";
  assert_int_equal(fdy_graph_add_op(c, &op, NULL, &err), FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(c, "only", FDY_DTYPE_U8, FDY_SHAPE(8), NULL, &err),
      FDY_OK);
  assert_false(fdy_graph_same_structure(c, f->g));
  assert_true(fdy_graph_fingerprint(c) != fdy_graph_fingerprint(f->g));
  assert_unchanged(f->g, before);
  assert_no_tensor(f->g, "only");
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, &err), FDY_OK);
  assert_int_equal(fdy_graph_validate(c, &err), FDY_OK);
  fdy_graph_destroy(c);

  /* A described twin (no extents) has the same structure; a different param
   * or shape does not. */
  fdy_graph *twin = NULL, *other = NULL;
  fdy_extent e = {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 8};
  assert_int_equal(fdy_graph_create("s", &twin, NULL), FDY_OK);
  assert_int_equal(fdy_graph_create("s", &other, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(twin, "w", FDY_DTYPE_U8, FDY_SHAPE(8),
                                        NULL, 0, NULL, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(other, "w", FDY_DTYPE_U8, FDY_SHAPE(8),
                                        &e, 1, NULL, NULL),
                   FDY_OK);
  assert_true(fdy_graph_same_structure(twin, other));
  assert_true(fdy_graph_fingerprint(twin) == fdy_graph_fingerprint(other));
  assert_int_equal(
      fdy_graph_add_input(twin, "in", FDY_DTYPE_U8, FDY_SHAPE(2), NULL, NULL),
      FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(other, "in", FDY_DTYPE_U8, FDY_SHAPE(3), NULL, NULL),
      FDY_OK);
  assert_false(fdy_graph_same_structure(twin, other));
  assert_true(fdy_graph_fingerprint(twin) != fdy_graph_fingerprint(other));
  fdy_graph_destroy(twin);
  fdy_graph_destroy(other);

  fdy_graph *empty = NULL, *empty2 = NULL;
  assert_int_equal(fdy_graph_create("e", &empty, NULL), FDY_OK);
  assert_int_equal(fdy_graph_clone(empty, &empty2, NULL), FDY_OK);
  assert_true(fdy_graph_same_structure(empty, empty2));
  assert_int_equal(fdy_graph_validate(empty2, NULL), FDY_OK);
  fdy_graph_destroy(empty);
  fdy_graph_destroy(empty2);
}

/* Runs one failing add_weight_view on g and checks its kind, that *out and
 * the graph are unchanged and that the name was not taken. */
static fdy_error expect_view_fails(fdy_graph *g, const char *name,
                                   fdy_tensor_id weight, uint64_t offset,
                                   fdy_dtype dtype, fdy_shape shape,
                                   fdy_status kind) {
  fdy_error err;
  snapshot before = take(g);
  fdy_tensor_id id = {77};
  assert_int_equal(fdy_graph_add_weight_view(g, name, weight, offset, dtype,
                                             shape, &id, &err),
                   kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(id.v, 77);
  assert_unchanged(g, before);
  return err;
}

static void test_weight_views(void **state) {
  fixture *f = *state;
  fdy_error err;
  fdy_extent e = {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 1024};
  fdy_tensor_id layer, v0, v1, v2;
  assert_int_equal(fdy_graph_add_weight(f->g, "layer", FDY_DTYPE_U8,
                                        FDY_SHAPE(1024), &e, 1, &layer, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(f->g, "layer.a", layer, 0,
                                             FDY_DTYPE_U8, FDY_SHAPE(512), &v0,
                                             &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(f->g, "layer.b", layer, 512,
                                             FDY_DTYPE_F32, FDY_SHAPE(64), &v1,
                                             &err),
                   FDY_OK);
  /* Ending exactly at the weight's end is inside it. */
  assert_int_equal(fdy_graph_add_weight_view(f->g, "layer.c", layer, 768,
                                             FDY_DTYPE_U8, FDY_SHAPE(256), &v2,
                                             &err),
                   FDY_OK);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(f->g, v1, &t, &err), FDY_OK);
  assert_string_equal(t.name, "layer.b");
  assert_int_equal(t.role, FDY_TENSOR_WEIGHT_VIEW);
  assert_int_equal(t.dtype, FDY_DTYPE_F32);
  assert_int_equal(t.bytes, 256);
  assert_int_equal(t.weight, layer.v);
  assert_int_equal(t.offset, 512);
  assert_int_equal(t.extent_count, 0);
  assert_int_equal(t.producer, -1);
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_find_tensor(f->g, "layer.b", &id, &err), FDY_OK);
  assert_int_equal(id.v, v1.v);
  /* Views add no bytes of their own. */
  uint64_t wb = 0;
  assert_int_equal(fdy_graph_weight_bytes(f->g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 128 + 1024);

  err = expect_view_fails(f->g, "bad", layer, 100, FDY_DTYPE_U8, FDY_SHAPE(8),
                          FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "bad");
  err = expect_view_fails(f->g, "bad", layer, 256, FDY_DTYPE_U8,
                          FDY_SHAPE(1024), FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 1024);
  assert_int_equal(err.actual, 1280);
  err = expect_view_fails(f->g, "bad", layer, 1024, FDY_DTYPE_U8, FDY_SHAPE(1),
                          FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 1024);
  assert_int_equal(err.actual, 1025);
  /* offset + bytes wrapping 64 bits is out of range, not a small end. */
  err = expect_view_fails(f->g, "bad", layer, UINT64_MAX - 255, FDY_DTYPE_U8,
                          FDY_SHAPE(512), FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 1024);
  /* Only weights have views: not views, inputs or unknown ids. */
  err = expect_view_fails(f->g, "bad", v0, 0, FDY_DTYPE_U8, FDY_SHAPE(8),
                          FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], v0.v);
  expect_view_fails(f->g, "bad", f->x, 0, FDY_DTYPE_U8, FDY_SHAPE(8),
                    FDY_ERR_INVALID_ARGUMENT);
  expect_view_fails(f->g, "bad", (fdy_tensor_id){99}, 0, FDY_DTYPE_U8,
                    FDY_SHAPE(8), FDY_ERR_INVALID_ARGUMENT);
  expect_view_fails(f->g, "bad", layer, 0, FDY_DTYPE_COUNT, FDY_SHAPE(8),
                    FDY_ERR_INVALID_ARGUMENT);
  expect_view_fails(f->g, "", layer, 0, FDY_DTYPE_U8, FDY_SHAPE(8),
                    FDY_ERR_INVALID_ARGUMENT);
  expect_view_fails(f->g, NULL, layer, 0, FDY_DTYPE_U8, FDY_SHAPE(8),
                    FDY_ERR_INVALID_ARGUMENT);
  err = expect_view_fails(f->g, "w", layer, 0, FDY_DTYPE_U8, FDY_SHAPE(8),
                          FDY_ERR_GRAPH_DUPLICATE_NAME);
  assert_int_equal(err.ids[0], f->w.v);
  assert_no_tensor(f->g, "bad");

  /* A view is read like any tensor and never written. */
  fdy_op_desc op = {.name = "sum_a",
                    .kind = FDY_OP_CHECKSUM,
                    .reads = &f->w,
                    .read_count = 1,
                    .writes = &v2,
                    .write_count = 1};
  err = expect_op_fails(f->g, &op, FDY_ERR_GRAPH_ROLE, v2.v);
  assert_string_equal(err.name, "layer.c");
  op.reads = &v0;
  op.writes = &f->a1;
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, &err), FDY_OK);
  fdy_op_info info;
  assert_int_equal(fdy_graph_op(f->g, (fdy_op_id){1}, &info, &err), FDY_OK);
  assert_int_equal(info.reads[0].v, v0.v);
  assert_int_equal(fdy_graph_validate(f->g, &err), FDY_OK);
}

/* Graph "v": described weights p and q (U8 [1024]) and view "v" (F32 [64])
 * of p or q at offset. */
static fdy_graph *view_graph(bool of_q, uint64_t offset) {
  fdy_graph *g = NULL;
  fdy_tensor_id p, q;
  assert_int_equal(fdy_graph_create("v", &g, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "p", FDY_DTYPE_U8, FDY_SHAPE(1024),
                                        NULL, 0, &p, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "q", FDY_DTYPE_U8, FDY_SHAPE(1024),
                                        NULL, 0, &q, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(g, "v", of_q ? q : p, offset,
                                             FDY_DTYPE_F32, FDY_SHAPE(64), NULL,
                                             NULL),
                   FDY_OK);
  return g;
}

static void test_view_structure(void **state) {
  (void)state;
  fdy_graph *base = view_graph(false, 256), *same = view_graph(false, 256);
  fdy_graph *moved = view_graph(false, 512), *other = view_graph(true, 256);
  assert_true(fdy_graph_same_structure(base, same));
  assert_true(fdy_graph_fingerprint(base) == fdy_graph_fingerprint(same));
  assert_false(fdy_graph_same_structure(base, moved));
  assert_true(fdy_graph_fingerprint(base) != fdy_graph_fingerprint(moved));
  assert_false(fdy_graph_same_structure(base, other));
  assert_true(fdy_graph_fingerprint(base) != fdy_graph_fingerprint(other));

  fdy_graph *c = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_clone(base, &c, &err), FDY_OK);
  assert_true(fdy_graph_same_structure(base, c));
  assert_true(fdy_graph_fingerprint(base) == fdy_graph_fingerprint(c));
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_find_tensor(c, "v", &id, &err), FDY_OK);
  assert_int_equal(id.v, 2);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(c, id, &t, &err), FDY_OK);
  assert_int_equal(t.role, FDY_TENSOR_WEIGHT_VIEW);
  assert_int_equal(t.weight, 0);
  assert_int_equal(t.offset, 256);
  assert_int_equal(t.bytes, 256);
  assert_int_equal(fdy_graph_add_weight_view(c, "v", (fdy_tensor_id){0}, 0,
                                             FDY_DTYPE_U8, FDY_SHAPE(8), NULL,
                                             &err),
                   FDY_ERR_GRAPH_DUPLICATE_NAME);
  assert_int_equal(err.ids[0], 2);
  fdy_graph_destroy(c);
  fdy_graph_destroy(base);
  fdy_graph_destroy(same);
  fdy_graph_destroy(moved);
  fdy_graph_destroy(other);
}

/* Attention over T = 1 row, 2 query heads, 1 kv head of dim 4, reading its
 * KV caches as state tensors. */
static void test_state_tensors(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_create("s", &g, &err), FDY_OK);
  fdy_tensor_id step, q, k, v, kc, vc, out;
  assert_int_equal(fdy_graph_add_input(g, "step", FDY_DTYPE_I32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(1)), &step,
                                       &err),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "q", FDY_DTYPE_F32, FDY_SHAPE(1, 8), &q, &err),
      FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "k", FDY_DTYPE_F32, FDY_SHAPE(1, 4), &k, &err),
      FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "v", FDY_DTYPE_F32, FDY_SHAPE(1, 4), &v, &err),
      FDY_OK);
  assert_int_equal(fdy_graph_add_state(g, "k_cache", FDY_DTYPE_F32,
                                       FDY_SHAPE(1, 16, 4), &kc, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_state(g, "v_cache", FDY_DTYPE_F32,
                                       FDY_SHAPE(1, 16, 4), &vc, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "out", FDY_DTYPE_F32,
                                            FDY_SHAPE(1, 8), &out, &err),
                   FDY_OK);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(g, vc, &t, &err), FDY_OK);
  assert_string_equal(t.name, "v_cache");
  assert_int_equal(t.role, FDY_TENSOR_STATE);
  assert_int_equal(t.bytes, 256);
  assert_int_equal(t.producer, -1);
  assert_int_equal(t.weight, -1);
  assert_int_equal(t.extent_count, 0);
  fdy_tensor_id id;
  assert_int_equal(fdy_graph_find_tensor(g, "k_cache", &id, &err), FDY_OK);
  assert_int_equal(id.v, kc.v);
  /* State is not weight bytes. */
  uint64_t wb = 7;
  assert_int_equal(fdy_graph_weight_bytes(g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 0);

  snapshot before = take(g);
  assert_int_equal(
      fdy_graph_add_state(g, "q", FDY_DTYPE_F32, FDY_SHAPE(1), &id, &err),
      FDY_ERR_GRAPH_DUPLICATE_NAME);
  assert_int_equal(err.ids[0], q.v);
  assert_int_equal(
      fdy_graph_add_state(g, "bad", FDY_DTYPE_COUNT, FDY_SHAPE(1), &id, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_graph_add_state(g, "", FDY_DTYPE_F32, FDY_SHAPE(1), &id, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_unchanged(g, before);
  assert_no_tensor(g, "bad");

  fdy_tensor_id reads[] = {step, q, k, v, kc, vc};
  fdy_op_desc op = {
      .name = "attn",
      .kind = FDY_OP_ATTENTION,
      .params.attention = {.heads = 2, .kv_heads = 1, .head_dim = 4},
      .reads = reads,
      .read_count = 6,
      .writes = &kc,
      .write_count = 1};
  /* No op writes state, whatever its kind does in place. */
  fdy_error e = expect_op_fails(g, &op, FDY_ERR_GRAPH_ROLE, kc.v);
  assert_string_equal(e.name, "k_cache");
  op.kind = FDY_OP_CHECKSUM;
  op.read_count = 1;
  op.writes = &vc;
  expect_op_fails(g, &op, FDY_ERR_GRAPH_ROLE, vc.v);

  op.kind = FDY_OP_ATTENTION;
  op.read_count = 6;
  op.writes = &out;
  fdy_op_id oid;
  assert_int_equal(fdy_graph_add_op(g, &op, &oid, &err), FDY_OK);
  fdy_op_info info;
  assert_int_equal(fdy_graph_op(g, oid, &info, &err), FDY_OK);
  assert_int_equal(info.reads[4].v, kc.v);
  assert_int_equal(info.reads[5].v, vc.v);
  assert_int_equal(info.params.attention.heads, 2);
  /* State needs no producer. */
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
  assert_int_equal(fdy_graph_tensor(g, kc, &t, &err), FDY_OK);
  assert_int_equal(t.producer, -1);

  fdy_graph *c = NULL;
  assert_int_equal(fdy_graph_clone(g, &c, &err), FDY_OK);
  assert_true(fdy_graph_same_structure(g, c));
  assert_int_equal(fdy_graph_tensor(c, kc, &t, &err), FDY_OK);
  assert_int_equal(t.role, FDY_TENSOR_STATE);
  assert_int_equal(fdy_graph_validate(c, &err), FDY_OK);
  fdy_graph_destroy(c);
  fdy_graph_destroy(g);
}

static void test_padding_extents(void **state) {
  (void)state;
  fdy_graph *g = NULL, *c = NULL, *described = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_create("p", &g, &err), FDY_OK);
  /* 300 bytes, padding to 512, then 256 bytes: the second part is viewed at
   * an aligned offset. The padding has neither host nor path. */
  fdy_extent parts[3] = {
      {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 300},
      {.kind = FDY_EXTENT_PADDING, .length = 212},
      {.kind = FDY_EXTENT_FILE, .path = "m.bin", .offset = 64, .length = 256},
  };
  snapshot before = take(g);
  parts[1].length = 200;
  assert_int_equal(fdy_graph_add_weight(g, "layer", FDY_DTYPE_U8,
                                        FDY_SHAPE(768), parts, 3, NULL, &err),
                   FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, 768);
  assert_int_equal(err.actual, 756);
  parts[1].length = 0;
  assert_int_equal(fdy_graph_add_weight(g, "layer", FDY_DTYPE_U8,
                                        FDY_SHAPE(768), parts, 3, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_unchanged(g, before);
  assert_no_tensor(g, "layer");

  parts[1].length = 212;
  fdy_tensor_id layer, view;
  assert_int_equal(fdy_graph_add_weight(g, "layer", FDY_DTYPE_U8,
                                        FDY_SHAPE(768), parts, 3, &layer, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(g, "layer.b", layer, 512,
                                             FDY_DTYPE_U8, FDY_SHAPE(256),
                                             &view, &err),
                   FDY_OK);
  fdy_tensor_info t;
  assert_int_equal(fdy_graph_tensor(g, layer, &t, &err), FDY_OK);
  assert_int_equal(t.bytes, 768);
  assert_int_equal(t.extent_count, 3);
  assert_int_equal(t.extents[1].kind, FDY_EXTENT_PADDING);
  assert_int_equal(t.extents[1].length, 212);
  assert_null(t.extents[1].host);
  assert_null(t.extents[1].path);
  uint64_t wb = 0;
  assert_int_equal(fdy_graph_weight_bytes(g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 768);
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);

  assert_int_equal(fdy_graph_clone(g, &c, &err), FDY_OK);
  assert_int_equal(fdy_graph_tensor(c, layer, &t, &err), FDY_OK);
  assert_int_equal(t.extent_count, 3);
  assert_int_equal(t.extents[1].kind, FDY_EXTENT_PADDING);
  assert_int_equal(t.extents[1].length, 212);
  assert_null(t.extents[1].path);
  assert_string_equal(t.extents[2].path, "m.bin");
  assert_true(fdy_graph_same_structure(g, c));

  /* Extents, padding included, are not structure. */
  assert_int_equal(fdy_graph_create("p", &described, &err), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(described, "layer", FDY_DTYPE_U8,
                                        FDY_SHAPE(768), NULL, 0, &layer, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(described, "layer.b", layer, 512,
                                             FDY_DTYPE_U8, FDY_SHAPE(256), NULL,
                                             &err),
                   FDY_OK);
  assert_true(fdy_graph_same_structure(g, described));
  assert_true(fdy_graph_fingerprint(g) == fdy_graph_fingerprint(described));
  fdy_graph_destroy(described);
  fdy_graph_destroy(c);
  fdy_graph_destroy(g);
}

/* rmsnorm(eps) then llama3 rope(theta, factor) over T = 2 rows of 8. */
static fdy_graph *params_graph(double eps, double theta, double factor) {
  fdy_graph *g = NULL;
  fdy_tensor_id step, x, w, normed, roped;
  assert_int_equal(fdy_graph_create("n", &g, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_input(g, "step", FDY_DTYPE_I32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(2)), &step,
                                       NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "x", FDY_DTYPE_F32, FDY_SHAPE(2, 8), &x, NULL),
      FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "w", FDY_DTYPE_BF16, FDY_SHAPE(8),
                                        NULL, 0, &w, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "normed", FDY_DTYPE_F32,
                                            FDY_SHAPE(2, 8), &normed, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "roped", FDY_DTYPE_F32,
                                            FDY_SHAPE(2, 8), &roped, NULL),
                   FDY_OK);
  fdy_tensor_id norm_reads[] = {step, x, w};
  fdy_op_desc norm = {.name = "norm",
                      .kind = FDY_OP_RMSNORM,
                      .params.rmsnorm.eps = eps,
                      .reads = norm_reads,
                      .read_count = 3,
                      .writes = &normed,
                      .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &norm, NULL, NULL), FDY_OK);
  fdy_tensor_id rope_reads[] = {step, normed};
  fdy_op_desc rope = {.name = "rope",
                      .kind = FDY_OP_ROPE,
                      .params.rope = {.head_dim = 4,
                                      .theta = theta,
                                      .llama3 = true,
                                      .factor = factor,
                                      .low_freq_factor = 1.0,
                                      .high_freq_factor = 4.0,
                                      .original_max_position = 8192},
                      .reads = rope_reads,
                      .read_count = 2,
                      .writes = &roped,
                      .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &rope, NULL, NULL), FDY_OK);
  assert_int_equal(fdy_graph_validate(g, NULL), FDY_OK);
  return g;
}

/* One ADD over [1, 4]; params as given (ADD has none of its own). */
static fdy_graph *add_graph(fdy_op_params params) {
  fdy_graph *g = NULL;
  fdy_tensor_id step, a, out;
  assert_int_equal(fdy_graph_create("add", &g, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_input(g, "step", FDY_DTYPE_I32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(1)), &step,
                                       NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(g, "a", FDY_DTYPE_F32, FDY_SHAPE(1, 4), &a, NULL),
      FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "out", FDY_DTYPE_F32,
                                            FDY_SHAPE(1, 4), &out, NULL),
                   FDY_OK);
  fdy_tensor_id reads[] = {step, a, a};
  fdy_op_desc op = {.name = "add",
                    .kind = FDY_OP_ADD,
                    .params = params,
                    .reads = reads,
                    .read_count = 3,
                    .writes = &out,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(g, &op, NULL, NULL), FDY_OK);
  return g;
}

static void test_params_structure(void **state) {
  (void)state;
  fdy_graph *base = params_graph(1e-5, 500000.0, 8.0);
  fdy_graph *same = params_graph(1e-5, 500000.0, 8.0);
  fdy_graph *eps = params_graph(1e-6, 500000.0, 8.0);
  fdy_graph *theta = params_graph(1e-5, 10000.0, 8.0);
  fdy_graph *factor = params_graph(1e-5, 500000.0, 32.0);
  assert_true(fdy_graph_same_structure(base, same));
  assert_true(fdy_graph_fingerprint(base) == fdy_graph_fingerprint(same));
  fdy_graph *changed[] = {eps, theta, factor};
  for (size_t i = 0; i < 3; i++) {
    assert_false(fdy_graph_same_structure(base, changed[i]));
    assert_true(fdy_graph_fingerprint(base) !=
                fdy_graph_fingerprint(changed[i]));
  }
  fdy_op_info info;
  assert_int_equal(fdy_graph_op(theta, (fdy_op_id){1}, &info, NULL), FDY_OK);
  assert_int_equal(info.kind, FDY_OP_ROPE);
  assert_true(info.params.rope.theta == 10000.0);
  assert_true(info.params.rope.llama3);
  assert_int_equal(info.params.rope.original_max_position, 8192);
  assert_int_equal(fdy_graph_op(eps, (fdy_op_id){0}, &info, NULL), FDY_OK);
  assert_true(info.params.rmsnorm.eps == 1e-6);

  fdy_graph *c = NULL;
  assert_int_equal(fdy_graph_clone(theta, &c, NULL), FDY_OK);
  assert_true(fdy_graph_same_structure(theta, c));
  assert_true(fdy_graph_fingerprint(theta) == fdy_graph_fingerprint(c));
  fdy_graph_destroy(c);

  /* Members of other kinds are dropped: they neither change the structure
   * nor read back. */
  fdy_op_params zero, noise;
  memset(&zero, 0, sizeof(zero));
  noise = zero;
  noise.rope.theta = 123.0;
  noise.rope.head_dim = 6;
  fdy_graph *plain = add_graph(zero), *noisy = add_graph(noise);
  assert_true(fdy_graph_same_structure(plain, noisy));
  assert_true(fdy_graph_fingerprint(plain) == fdy_graph_fingerprint(noisy));
  assert_int_equal(fdy_graph_op(noisy, (fdy_op_id){0}, &info, NULL), FDY_OK);
  assert_memory_equal(&info.params, &zero, sizeof(zero));

  fdy_graph_destroy(plain);
  fdy_graph_destroy(noisy);
  fdy_graph_destroy(base);
  fdy_graph_destroy(same);
  fdy_graph_destroy(eps);
  fdy_graph_destroy(theta);
  fdy_graph_destroy(factor);
}

/* Checks that every tensor "w.i" / "a.i" (ids 2i, 2i + 1) and op "op.i"
 * (id i) of a many_names graph is found, and that adding any of them again
 * is refused with the holder's id. */
#define MANY_OPS 100000u
static void check_many_names(fdy_graph *g) {
  fdy_error err;
  char name[32];
  for (uint32_t i = 0; i < MANY_OPS; i++) {
    fdy_tensor_id id = {0}, w = {2 * i}, a = {2 * i + 1};
    snprintf(name, sizeof(name), "w.%u", i);
    assert_int_equal(fdy_graph_find_tensor(g, name, &id, &err), FDY_OK);
    assert_int_equal(id.v, w.v);
    assert_int_equal(
        fdy_graph_add_input(g, name, FDY_DTYPE_U8, FDY_SHAPE(8), NULL, &err),
        FDY_ERR_GRAPH_DUPLICATE_NAME);
    assert_int_equal(err.ids[0], w.v);
    snprintf(name, sizeof(name), "a.%u", i);
    assert_int_equal(fdy_graph_find_tensor(g, name, &id, &err), FDY_OK);
    assert_int_equal(id.v, a.v);
    assert_int_equal(
        fdy_graph_add_state(g, name, FDY_DTYPE_U8, FDY_SHAPE(8), NULL, &err),
        FDY_ERR_GRAPH_DUPLICATE_NAME);
    assert_int_equal(err.ids[0], a.v);
    snprintf(name, sizeof(name), "op.%u", i);
    fdy_op_desc op = {.name = name,
                      .kind = FDY_OP_CHECKSUM,
                      .reads = &w,
                      .read_count = 1,
                      .writes = &a,
                      .write_count = 1};
    assert_int_equal(fdy_graph_add_op(g, &op, NULL, &err),
                     FDY_ERR_GRAPH_DUPLICATE_NAME);
    assert_int_equal(err.ids[1], i);
  }
  assert_no_tensor(g, "w.100000");
  assert_no_tensor(g, "a.");
  assert_no_tensor(g, "op.0");
  assert_int_equal(fdy_graph_tensor_count(g), 2 * MANY_OPS);
  assert_int_equal(fdy_graph_op_count(g), MANY_OPS);
}

/* 200k tensors and 100k ops: names are kept in hash maps (a linear search
 * per add would take minutes at this size), correct at a scale where the
 * maps grew many times, and in the clone. */
static void test_many_names(void **state) {
  (void)state;
  fdy_graph *g = NULL, *c = NULL;
  fdy_error err;
  assert_int_equal(fdy_graph_create("many", &g, &err), FDY_OK);
  char name[32];
  for (uint32_t i = 0; i < MANY_OPS; i++) {
    fdy_tensor_id w, a;
    snprintf(name, sizeof(name), "w.%u", i);
    assert_int_equal(fdy_graph_add_weight(g, name, FDY_DTYPE_U8, FDY_SHAPE(8),
                                          NULL, 0, &w, &err),
                     FDY_OK);
    snprintf(name, sizeof(name), "a.%u", i);
    assert_int_equal(fdy_graph_add_activation(g, name, FDY_DTYPE_U64,
                                              FDY_SHAPE(1), &a, &err),
                     FDY_OK);
    snprintf(name, sizeof(name), "op.%u", i);
    fdy_op_desc op = {.name = name,
                      .kind = FDY_OP_CHECKSUM,
                      .reads = &w,
                      .read_count = 1,
                      .writes = &a,
                      .write_count = 1};
    assert_int_equal(fdy_graph_add_op(g, &op, NULL, &err), FDY_OK);
  }
  check_many_names(g);
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
  assert_int_equal(fdy_graph_clone(g, &c, &err), FDY_OK);
  check_many_names(c);
  assert_true(fdy_graph_same_structure(g, c));
  fdy_graph_destroy(c);
  fdy_graph_destroy(g);
}

#define BIG_LAYERS       48
#define BIG_WEIGHT_BYTES (450 * FDY_MIB)
#define BIG_PATH         "/nonexistent/foundry-test/weights-21600MiB.bin"

/* Describes a chain of 48 checksum layers whose weights are consecutive
 * 450 MiB ranges (path, offset, length) of one 21600 MiB file, which does not
 * exist and is never opened, then validates it, checks the recorded ranges
 * and clones it. True when all went well. */
static bool big_graph_ok(void) {
  fdy_graph *g = NULL, *copy = NULL;
  fdy_status s = fdy_graph_create("big", &g, NULL);
  fdy_tensor_id prev = {0}, weights[BIG_LAYERS];
  for (uint32_t i = 0; s == FDY_OK && i < BIG_LAYERS; i++) {
    char name[32];
    fdy_extent range = {.kind = FDY_EXTENT_FILE,
                        .path = BIG_PATH,
                        .offset = (uint64_t)i * BIG_WEIGHT_BYTES,
                        .length = BIG_WEIGHT_BYTES};
    fdy_tensor_id reads[2], out;
    snprintf(name, sizeof(name), "layer.%u.weight", i);
    s = fdy_graph_add_weight(g, name, FDY_DTYPE_U8, FDY_SHAPE(BIG_WEIGHT_BYTES),
                             &range, 1, &reads[0], NULL);
    if (s == FDY_OK) {
      snprintf(name, sizeof(name), "layer.%u.out", i);
      s = fdy_graph_add_activation(g, name, FDY_DTYPE_U64, FDY_SHAPE(1), &out,
                                   NULL);
    }
    if (s == FDY_OK) {
      weights[i] = reads[0];
      reads[1] = prev;
      snprintf(name, sizeof(name), "layer.%u", i);
      fdy_op_desc op = {.name = name,
                        .kind = FDY_OP_CHECKSUM,
                        .reads = reads,
                        .read_count = i == 0 ? 1 : 2,
                        .writes = &out,
                        .write_count = 1};
      s = fdy_graph_add_op(g, &op, NULL, NULL);
    }
    prev = out;
  }
  uint64_t wb = 0;
  if (s == FDY_OK) {
    s = fdy_graph_weight_bytes(g, &wb, NULL);
  }
  if (s == FDY_OK) {
    s = fdy_graph_validate(g, NULL);
  }
  if (s == FDY_OK) {
    s = fdy_graph_clone(g, &copy, NULL);
  }
  bool ok = s == FDY_OK && wb == BIG_LAYERS * BIG_WEIGHT_BYTES &&
            wb > 20 * FDY_GIB && fdy_graph_same_structure(g, copy);
  for (uint32_t i = 0; ok && i < BIG_LAYERS; i++) {
    fdy_tensor_info t;
    ok = fdy_graph_tensor(copy, weights[i], &t, NULL) == FDY_OK &&
         t.role == FDY_TENSOR_WEIGHT && t.bytes == BIG_WEIGHT_BYTES &&
         t.extent_count == 1 && t.extents[0].kind == FDY_EXTENT_FILE &&
         strcmp(t.extents[0].path, BIG_PATH) == 0 &&
         t.extents[0].offset == (uint64_t)i * BIG_WEIGHT_BYTES &&
         t.extents[0].length == BIG_WEIGHT_BYTES;
  }
  fdy_graph_destroy(copy);
  fdy_graph_destroy(g);
  return ok;
}

/* ASan and TSan reserve terabytes of address space for their shadow
 * memory, so an address-space limit cannot be set under them. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FOUNDRY_SHADOW_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FOUNDRY_SHADOW_MEMORY 1
#endif
#endif

/* More than 20 GiB of weights described as file ranges allocate nothing of
 * that size. Outside ASan and TSan the graph is built in a child limited to
 * 1 GiB of address space, where an allocation of three weights is shown to
 * fail first. */
/* Residency priorities: 0 until set, kept by clone, not part of the
 * structure; only weights have one (GRAPH_ROLE, UNKNOWN_TENSOR otherwise,
 * the graph unchanged). */
static void test_residency_priority(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  static uint8_t bytes[64];
  fdy_extent ext = {.kind = FDY_EXTENT_HOST, .host = bytes, .length = 64};
  fdy_tensor_id w, v, a;
  assert_int_equal(fdy_graph_add_weight(g, "w", FDY_DTYPE_U8, FDY_SHAPE(64),
                                        &ext, 1, &w, NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_weight_view(g, "v", w, 0, FDY_DTYPE_U8,
                                             FDY_SHAPE(8), &v, NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_activation(g, "a", FDY_DTYPE_U64, FDY_SHAPE(1), &a, NULL),
      FDY_OK);
  fdy_tensor_info info;
  assert_int_equal(fdy_graph_tensor(g, w, &info, NULL), FDY_OK);
  assert_int_equal(info.residency_priority, 0);
  uint64_t before = fdy_graph_fingerprint(g);
  fdy_graph *twin = NULL;
  assert_int_equal(fdy_graph_clone(g, &twin, NULL), FDY_OK);
  assert_int_equal(fdy_graph_set_residency_priority(g, w, 7, NULL), FDY_OK);
  assert_int_equal(fdy_graph_tensor(g, w, &info, NULL), FDY_OK);
  assert_int_equal(info.residency_priority, 7);
  assert_true(fdy_graph_fingerprint(g) == before);
  assert_true(fdy_graph_same_structure(g, twin));
  fdy_graph_destroy(twin);
  assert_int_equal(fdy_graph_clone(g, &twin, NULL), FDY_OK);
  assert_int_equal(fdy_graph_tensor(twin, w, &info, NULL), FDY_OK);
  assert_int_equal(info.residency_priority, 7);
  fdy_graph_destroy(twin);
  fdy_error err;
  assert_int_equal(fdy_graph_set_residency_priority(g, v, 1, &err),
                   FDY_ERR_GRAPH_ROLE);
  assert_int_equal(err.ids[0], v.v);
  assert_string_equal(err.name, "v");
  assert_int_equal(fdy_graph_set_residency_priority(g, a, 1, &err),
                   FDY_ERR_GRAPH_ROLE);
  assert_int_equal(
      fdy_graph_set_residency_priority(g, (fdy_tensor_id){99}, 1, &err),
      FDY_ERR_GRAPH_UNKNOWN_TENSOR);
  assert_int_equal(err.ids[0], 99);
  assert_int_equal(fdy_graph_set_residency_priority(NULL, w, 1, &err),
                   FDY_ERR_GRAPH_UNKNOWN_TENSOR);
  assert_int_equal(fdy_graph_tensor(g, v, &info, NULL), FDY_OK);
  assert_int_equal(info.residency_priority, 0);
  fdy_graph_destroy(g);
}

/* A declared step input (fdy_graph_set_step_rows): 0 until set, kept by
 * clone, not part of the structure; only an I32 input of
 * FDY_STEP_ELEMENTS(rows) elements is one (GRAPH_ROLE, INVALID_ARGUMENT,
 * UNKNOWN_TENSOR otherwise, the graph unchanged). */
static void test_step_rows(void **state) {
  (void)state;
  fdy_graph *g = NULL;
  assert_int_equal(fdy_graph_create("g", &g, NULL), FDY_OK);
  fdy_tensor_id step, other, a;
  assert_int_equal(fdy_graph_add_input(g, "step", FDY_DTYPE_I32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(6)), &step,
                                       NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_input(g, "other", FDY_DTYPE_U32,
                                       FDY_SHAPE(FDY_STEP_ELEMENTS(6)), &other,
                                       NULL),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "a", FDY_DTYPE_F32,
                                            FDY_SHAPE(6, 4), &a, NULL),
                   FDY_OK);
  fdy_tensor_info info;
  assert_int_equal(fdy_graph_tensor(g, step, &info, NULL), FDY_OK);
  assert_int_equal(info.step_rows, 0);
  uint64_t before = fdy_graph_fingerprint(g);
  fdy_error err;
  assert_int_equal(fdy_graph_set_step_rows(g, step, 5, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, FDY_STEP_ELEMENTS(5));
  assert_int_equal(err.actual, FDY_STEP_ELEMENTS(6));
  assert_int_equal(fdy_graph_set_step_rows(g, step, 0, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_graph_set_step_rows(g, other, 6, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_graph_set_step_rows(g, a, 6, &err), FDY_ERR_GRAPH_ROLE);
  assert_int_equal(err.ids[0], a.v);
  assert_int_equal(fdy_graph_set_step_rows(g, (fdy_tensor_id){99}, 6, &err),
                   FDY_ERR_GRAPH_UNKNOWN_TENSOR);
  assert_int_equal(fdy_graph_tensor(g, step, &info, NULL), FDY_OK);
  assert_int_equal(info.step_rows, 0);
  assert_int_equal(fdy_graph_set_step_rows(g, step, 6, &err), FDY_OK);
  assert_int_equal(fdy_graph_tensor(g, step, &info, NULL), FDY_OK);
  assert_int_equal(info.step_rows, 6);
  assert_true(fdy_graph_fingerprint(g) == before);
  fdy_graph *twin = NULL;
  assert_int_equal(fdy_graph_clone(g, &twin, NULL), FDY_OK);
  assert_int_equal(fdy_graph_tensor(twin, step, &info, NULL), FDY_OK);
  assert_int_equal(info.step_rows, 6);
  assert_true(fdy_graph_same_structure(g, twin));
  fdy_graph_destroy(twin);
  fdy_graph_destroy(g);
}

static void test_big_file_weights_allocate_nothing(void **state) {
  (void)state;
#ifdef FOUNDRY_SHADOW_MEMORY
  assert_true(big_graph_ok());
#else
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    struct rlimit lim = {.rlim_cur = FDY_GIB, .rlim_max = FDY_GIB};
    if (setrlimit(RLIMIT_AS, &lim) != 0) {
      _exit(2);
    }
    void *probe = malloc(BIG_WEIGHT_BYTES * 3);
    if (probe) {
      _exit(3);
    }
    _exit(big_graph_ok() ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_queries, setup, teardown),
      cmocka_unit_test_setup_teardown(test_validate_unproduced_activation,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_add_op_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_operand_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_add_weight_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather_and_described_weights, setup,
                                      teardown),
      cmocka_unit_test(test_weight_bytes_overflow),
      cmocka_unit_test_setup_teardown(test_clone_fingerprint_structure, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_weight_views, setup, teardown),
      cmocka_unit_test(test_view_structure),
      cmocka_unit_test(test_state_tensors),
      cmocka_unit_test(test_padding_extents),
      cmocka_unit_test(test_params_structure),
      cmocka_unit_test(test_many_names),
      cmocka_unit_test(test_big_file_weights_allocate_nothing),
      cmocka_unit_test(test_residency_priority),
      cmocka_unit_test(test_step_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
