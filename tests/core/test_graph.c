/* Tests of the graph: structural validation, failed mutations leaving the
 * graph unchanged, queries, clone/fingerprint/same_structure, the synthetic
 * chain, and a chain whose file-range weights describe far more bytes than
 * the process may allocate. */
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

static unsigned char host_bytes[4096];

/* w (F32 [4, 8] = 128 bytes, host), x (input), a0 = op0(w, x), a1
 * declared, not produced. */
typedef struct fixture {
  fdy_graph *g;
  fdy_tensor_id w, x, a0, a1;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(fdy_graph_create("t", &f->g, NULL), FDY_OK);
  fdy_extent e = {.kind = FDY_EXTENT_HOST, .host = host_bytes, .length = 128};
  assert_int_equal(fdy_graph_add_weight(f->g, "w", FDY_DTYPE_F32,
                                        FDY_SHAPE(4, 8), &e, 1, &f->w, NULL),
                   FDY_OK);
  assert_int_equal(
      fdy_graph_add_input(f->g, "x", FDY_DTYPE_F32, FDY_SHAPE(8), &f->x, NULL),
      FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "a0", FDY_DTYPE_F32,
                                            FDY_SHAPE(4), &f->a0, NULL),
                   FDY_OK);
  fdy_tensor_id reads[] = {f->w, f->x};
  fdy_op_desc op = {.name = "op0",
                    .kind = "test.matvec",
                    .param = 5,
                    .reads = reads,
                    .read_count = 2,
                    .writes = &f->a0,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, NULL), FDY_OK);
  assert_int_equal(fdy_graph_add_activation(f->g, "a1", FDY_DTYPE_F32,
                                            FDY_SHAPE(4), &f->a1, NULL),
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
  assert_int_equal(t.dtype, FDY_DTYPE_F32);
  assert_int_equal(t.bytes, 128);
  assert_int_equal(t.extent_count, 1);
  assert_ptr_equal(t.extents[0].host, host_bytes);
  assert_int_equal(t.producer, -1);
  assert_int_equal(fdy_graph_tensor(f->g, f->a0, &t, &err), FDY_OK);
  assert_int_equal(t.role, FDY_TENSOR_ACTIVATION);
  assert_int_equal(t.producer, 0);
  assert_int_equal(fdy_graph_tensor(f->g, (fdy_tensor_id){4}, &t, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(err.kind, FDY_ERR_NOT_FOUND);
  fdy_op_info op;
  assert_int_equal(fdy_graph_op(f->g, (fdy_op_id){0}, &op, &err), FDY_OK);
  assert_string_equal(op.name, "op0");
  assert_string_equal(op.kind, "test.matvec");
  assert_int_equal(op.param, 5);
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
  assert_int_equal(fdy_graph_find_tensor(f->g, "nope", &id, &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "nope");
  uint64_t wb = 0;
  assert_int_equal(fdy_graph_weight_bytes(f->g, &wb, &err), FDY_OK);
  assert_int_equal(wb, 128);
  assert_string_equal(fdy_tensor_role_name(FDY_TENSOR_INPUT), "input");
}

static void test_validate_unproduced_activation(void **state) {
  fixture *f = *state;
  fdy_error err;
  assert_int_equal(fdy_graph_validate(f->g, &err),
                   FDY_ERR_GRAPH_READ_BEFORE_WRITE);
  assert_int_equal(err.ids[0], f->a1.v);
  assert_string_equal(err.name, "a1");
  fdy_tensor_id reads[] = {f->a0};
  fdy_op_desc op = {.name = "op1",
                    .kind = "k",
                    .reads = reads,
                    .read_count = 1,
                    .writes = &f->a1,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(f->g, &op, NULL, &err), FDY_OK);
  assert_int_equal(fdy_graph_validate(f->g, &err), FDY_OK);
}

/* Completes the fixture so that validate passes, takes a snapshot, runs one
 * failing add_op and checks its kind, fields and that nothing changed. */
static void expect_op_fails(fixture *f, const fdy_op_desc *op, fdy_status kind,
                            int64_t tensor) {
  fdy_error err;
  snapshot before = take(f->g);
  fdy_op_id id = {77};
  assert_int_equal(fdy_graph_add_op(f->g, op, &id, &err), kind);
  assert_int_equal(err.kind, kind);
  assert_int_equal(id.v, 77);
  if (tensor >= 0) {
    assert_int_equal(err.ids[0], tensor);
  }
  snapshot after = take(f->g);
  assert_true(after.fingerprint == before.fingerprint);
  assert_int_equal(after.tensors, before.tensors);
  assert_int_equal(after.ops, before.ops);
  assert_memory_equal(after.producers, before.producers,
                      sizeof(before.producers));
}

static void test_add_op_errors(void **state) {
  fixture *f = *state;
  fdy_tensor_id unknown = {99};
  fdy_tensor_id reads_unknown[] = {f->w, unknown};
  fdy_op_desc op = {.name = "bad",
                    .kind = "k",
                    .reads = reads_unknown,
                    .read_count = 2,
                    .writes = &f->a1,
                    .write_count = 1};
  expect_op_fails(f, &op, FDY_ERR_GRAPH_UNKNOWN_TENSOR, 99);

  op.reads = &f->a0;
  op.read_count = 1;
  op.writes = &unknown;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_UNKNOWN_TENSOR, 99);

  /* a1 is read before any op produces it. */
  op.reads = &f->a1;
  op.writes = &f->a1;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_READ_BEFORE_WRITE, f->a1.v);

  /* a0 already has op0 as producer; the valid write of a1 listed first must
   * not stick. */
  fdy_tensor_id writes_twice[] = {f->a1, f->a0};
  op.reads = &f->x;
  op.writes = writes_twice;
  op.write_count = 2;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, f->a0.v);

  fdy_tensor_id same_twice[] = {f->a1, f->a1};
  op.writes = same_twice;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, f->a1.v);

  op.write_count = 1;
  op.writes = &f->w;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_ROLE, f->w.v);
  op.writes = &f->x;
  expect_op_fails(f, &op, FDY_ERR_GRAPH_ROLE, f->x.v);

  op.writes = &f->a1;
  op.name = "op0";
  expect_op_fails(f, &op, FDY_ERR_GRAPH_DUPLICATE_NAME, -1);
  op.name = "";
  expect_op_fails(f, &op, FDY_ERR_INVALID_ARGUMENT, -1);
  op.name = NULL;
  expect_op_fails(f, &op, FDY_ERR_INVALID_ARGUMENT, -1);
  op.name = "ok";
  op.kind = "";
  expect_op_fails(f, &op, FDY_ERR_INVALID_ARGUMENT, -1);
  op.kind = "k";
  op.reads = NULL;
  expect_op_fails(f, &op, FDY_ERR_INVALID_ARGUMENT, -1);
  expect_op_fails(f, NULL, FDY_ERR_INVALID_ARGUMENT, -1);

  /* After all those failures a valid op still succeeds. */
  op.reads = &f->a0;
  fdy_op_id id;
  assert_int_equal(fdy_graph_add_op(f->g, &op, &id, NULL), FDY_OK);
  assert_int_equal(id.v, 1);
  assert_int_equal(fdy_graph_validate(f->g, NULL), FDY_OK);
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
  snapshot after = take(f->g);
  assert_true(after.fingerprint == before.fingerprint);
  assert_int_equal(after.tensors, before.tensors);
  assert_int_equal(after.weight_bytes, before.weight_bytes);
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

  /* Mutating the clone does not touch the original. */
  snapshot before = take(f->g);
  fdy_op_desc op = {.name = "op1",
                    .kind = "k",
                    .reads = &f->a0,
                    .read_count = 1,
                    .writes = &f->a1,
                    .write_count = 1};
  assert_int_equal(fdy_graph_add_op(c, &op, NULL, &err), FDY_OK);
  assert_false(fdy_graph_same_structure(c, f->g));
  assert_true(fdy_graph_fingerprint(c) != fdy_graph_fingerprint(f->g));
  snapshot after = take(f->g);
  assert_true(after.fingerprint == before.fingerprint);
  assert_int_equal(after.ops, 1);
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

static void test_synthetic_small(void **state) {
  (void)state;
  fdy_error err;
  enum { L = 4, W = 40 };
  static unsigned char data[L][W];
  const void *ptrs[L];
  for (int i = 0; i < L; i++) {
    ptrs[i] = data[i];
  }
  fdy_graph *g = NULL;
  assert_int_equal(fdy_synthetic_graph_create(L, W, ptrs, &g, &err), FDY_OK);
  assert_int_equal(fdy_graph_validate(g, &err), FDY_OK);
  assert_int_equal(fdy_graph_tensor_count(g), 2 * L);
  assert_int_equal(fdy_graph_op_count(g), L);
  for (uint32_t i = 0; i < L; i++) {
    char name[64];
    fdy_tensor_id w, a;
    snprintf(name, sizeof(name), "layer.%u.weight", i);
    assert_int_equal(fdy_graph_find_tensor(g, name, &w, &err), FDY_OK);
    snprintf(name, sizeof(name), "layer.%u.out", i);
    assert_int_equal(fdy_graph_find_tensor(g, name, &a, &err), FDY_OK);
    fdy_tensor_info t;
    assert_int_equal(fdy_graph_tensor(g, w, &t, &err), FDY_OK);
    assert_int_equal(t.dtype, FDY_DTYPE_U8);
    assert_true(fdy_shape_equal(t.shape, FDY_SHAPE(W)));
    assert_int_equal(t.extent_count, 1);
    assert_ptr_equal(t.extents[0].host, data[i]);
    assert_int_equal(fdy_graph_tensor(g, a, &t, &err), FDY_OK);
    assert_int_equal(t.dtype, FDY_DTYPE_U64);
    assert_true(fdy_shape_equal(t.shape, FDY_SHAPE(1)));
    assert_int_equal(t.producer, i);
    fdy_op_info op;
    assert_int_equal(fdy_graph_op(g, (fdy_op_id){i}, &op, &err), FDY_OK);
    snprintf(name, sizeof(name), "layer.%u", i);
    assert_string_equal(op.name, name);
    assert_string_equal(op.kind, FDY_OP_SYNTHETIC_CHECKSUM);
    assert_int_equal(op.param, i);
    assert_int_equal(op.read_count, i > 0 ? 2 : 1);
    assert_int_equal(op.reads[0].v, w.v);
    assert_int_equal(op.write_count, 1);
    assert_int_equal(op.writes[0].v, a.v);
    if (i > 0) {
      fdy_tensor_id prev;
      snprintf(name, sizeof(name), "layer.%u.out", i - 1);
      assert_int_equal(fdy_graph_find_tensor(g, name, &prev, &err), FDY_OK);
      assert_int_equal(op.reads[1].v, prev.v);
    }
  }
  /* Bound and described twins share their structure. */
  fdy_graph *described = NULL;
  assert_int_equal(fdy_synthetic_graph_create(L, W, NULL, &described, &err),
                   FDY_OK);
  assert_true(fdy_graph_same_structure(g, described));
  assert_true(fdy_graph_fingerprint(g) == fdy_graph_fingerprint(described));
  fdy_graph_destroy(g);
  fdy_graph_destroy(described);

  fdy_graph *empty = NULL;
  assert_int_equal(fdy_synthetic_graph_create(0, W, NULL, &empty, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_op_count(empty), 0);
  assert_int_equal(fdy_graph_validate(empty, &err), FDY_OK);
  fdy_graph_destroy(empty);

  fdy_graph *bad = (fdy_graph *)0x1;
  assert_int_equal(fdy_synthetic_graph_create(3, 0, NULL, &bad, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_ptr_equal(bad, (fdy_graph *)0x1);
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
                        .kind = FDY_OP_SYNTHETIC_CHECKSUM,
                        .param = i,
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

#if defined(__SANITIZE_ADDRESS__)
#define FOUNDRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FOUNDRY_ASAN 1
#endif
#endif

/* More than 20 GiB of weights described as file ranges allocate nothing of
 * that size. Outside ASan (which reserves terabytes of address space) the
 * graph is built in a child limited to 1 GiB of address space, where an
 * allocation of three weights is shown to fail first. */
static void test_big_file_weights_allocate_nothing(void **state) {
  (void)state;
#ifdef FOUNDRY_ASAN
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
      cmocka_unit_test_setup_teardown(test_add_weight_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather_and_described_weights, setup,
                                      teardown),
      cmocka_unit_test(test_weight_bytes_overflow),
      cmocka_unit_test_setup_teardown(test_clone_fingerprint_structure, setup,
                                      teardown),
      cmocka_unit_test(test_synthetic_small),
      cmocka_unit_test(test_big_file_weights_allocate_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
