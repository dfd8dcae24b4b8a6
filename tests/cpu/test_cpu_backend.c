/* The CPU backend's own tests, called directly through its ops table (the
 * cases every backend shares are the contract suite's,
 * tests/contract/test_backend_contract.c): options, allocation against the
 * memory budget, what it allows beyond the contract (empty copies, waits
 * on events never recorded), the fields of its refusals, streams taking
 * turns on the pool, copies from and to a file mapping whose file was
 * truncated (FDY_ERR_IO at host_wait or drain, the stream's later work
 * skipped, across stream waits too, the backend usable again after drain),
 * and threads that cannot start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend_calls.h"
#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "shrunk_mapping.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static fdy_backend *make_cpu(uint64_t memory, uint32_t threads) {
  fdy_cpu_options opts = {.memory_bytes = memory, .threads = threads};
  fdy_backend *b = NULL;
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, NULL), FDY_OK);
  assert_non_null(b);
  return b;
}

/* A checksum of n bytes at data_offset of data (the chain's first link
 * when prev is NULL) into the U64 at out_offset of out. Its workspace, if
 * any, is `ws` from ws_offset. */
typedef struct checksum_views {
  fdy_backend_buffer *data;
  uint64_t data_offset, n;
  fdy_backend_buffer *prev;
  uint64_t prev_offset;
  fdy_backend_buffer *out;
  uint64_t out_offset;
  fdy_backend_buffer *ws;
  uint64_t ws_offset, ws_bytes;
} checksum_views;

static fdy_op checksum_op(const checksum_views *v) {
  fdy_op op = {.kind = FDY_OP_CHECKSUM, .input_count = 1, .output_count = 1};
  op.inputs[0] =
      (fdy_tensor_view){v->data, v->data_offset, FDY_DTYPE_U8, FDY_SHAPE(v->n)};
  if (v->prev != NULL) {
    op.input_count = 2;
    op.inputs[1] =
        (fdy_tensor_view){v->prev, v->prev_offset, FDY_DTYPE_U64, FDY_SHAPE(1)};
  }
  op.outputs[0] =
      (fdy_tensor_view){v->out, v->out_offset, FDY_DTYPE_U64, FDY_SHAPE(1)};
  if (v->ws != NULL) {
    op.workspace = (fdy_tensor_view){v->ws, v->ws_offset, FDY_DTYPE_U8,
                                     FDY_SHAPE(v->ws_bytes)};
  }
  return op;
}

/* A workspace buffer big enough for a checksum of n bytes (never empty). */
static fdy_backend_buffer *checksum_workspace(fdy_backend *b, uint64_t n,
                                              uint64_t *bytes) {
  checksum_views v = {.n = n};
  fdy_op op = checksum_op(&v);
  *bytes = b->ops->workspace_bytes(b, &op);
  assert_true(*bytes > 0);
  return make_buffer(b, *bytes);
}

static void test_create_and_caps(void **state) {
  (void)state;
  fdy_backend *b = NULL;
  assert_int_equal(fdy_cpu_backend_create(NULL, &b, NULL), FDY_OK);
  assert_string_equal(b->ops->name, "cpu");
  assert_string_equal(fdy_backend_name(b), "cpu");
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_string_equal(caps.name, "cpu");
  assert_true(caps.total_memory > 0);
  assert_int_equal(caps.max_allocation, caps.total_memory);
  assert_int_equal(caps.free_memory, caps.total_memory);
  assert_int_equal(caps.alignment, 64);
  assert_true(caps.concurrent_copy_compute);
  uint32_t threads = fdy_cpu_backend_threads(b);
  assert_true(threads >= 1 && threads <= FDY_CPU_MAX_THREADS);
  fdy_backend_destroy(b);

  fdy_cpu_options opts = {
      .memory_bytes = 4096, .alignment = 4096, .threads = 3};
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, NULL), FDY_OK);
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_int_equal(caps.total_memory, 4096);
  assert_int_equal(caps.alignment, 4096);
  assert_int_equal(fdy_cpu_backend_threads(b), 3);
  fdy_backend_destroy(b);
  opts.threads = FDY_CPU_MAX_THREADS;
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, NULL), FDY_OK);
  assert_int_equal(fdy_cpu_backend_threads(b), FDY_CPU_MAX_THREADS);
  fdy_backend_destroy(b);
  assert_int_equal(fdy_cpu_backend_threads(NULL), 0);
  fdy_backend_destroy(NULL);
}

static void test_create_rejects_bad_options(void **state) {
  (void)state;
  fdy_cpu_options opts = {.memory_bytes = 4096, .alignment = 48};
  fdy_backend *b = (fdy_backend *)&opts;
  fdy_error err;
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.actual, 48);
  assert_string_equal(err.backend_op, "create");
  assert_null(b);
  opts = (fdy_cpu_options){.threads = FDY_CPU_MAX_THREADS + 1};
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, FDY_CPU_MAX_THREADS);
  assert_int_equal(err.actual, FDY_CPU_MAX_THREADS + 1);
  assert_null(b);
  assert_int_equal(fdy_cpu_backend_create(NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_alloc_budget(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(10000, 1);
  fdy_error err;
  fdy_backend_buffer *a = make_buffer(b, 6000);
  fdy_backend_buffer *c = make_buffer(b, 4000); /* exactly full */
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_int_equal(caps.free_memory, 0);

  fdy_backend_buffer *x = (fdy_backend_buffer *)&err;
  assert_int_equal(b->ops->buffer_alloc(b, 1, &x, &err), FDY_ERR_BUDGET);
  assert_null(x);
  assert_int_equal(err.kind, FDY_ERR_BUDGET);
  assert_int_equal(err.expected, 10000);
  assert_int_equal(err.actual, 10001);
  assert_string_equal(err.backend_op, "buffer_alloc");

  b->ops->buffer_release(b, c);
  x = make_buffer(b, 4000);
  b->ops->buffer_release(b, x);
  b->ops->buffer_release(b, a);
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_int_equal(caps.free_memory, 10000);
  b->ops->buffer_release(b, NULL);
  fdy_backend_destroy(b);
}

static void test_alloc_rejects_zero_and_oversized(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_error err;
  fdy_backend_buffer *x = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, 0, &x, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_null(x);
  assert_int_equal(b->ops->buffer_alloc(b, (1 << 20) + 1, &x, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.expected, 1 << 20);
  assert_null(x);
  assert_int_equal(b->ops->buffer_alloc(b, UINT64_MAX, &x, &err),
                   FDY_ERR_BUDGET);
  assert_null(x);
  assert_int_equal(b->ops->buffer_alloc(b, 16, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_int_equal(caps.free_memory, 1 << 20);
  fdy_backend_destroy(b);
}

/* What the CPU backend allows beyond the contract (the suite,
 * tests/contract): empty copies with NULL pointers, and waits on an event
 * never recorded, which return at once. */
static void test_empty_copies_and_unrecorded_waits(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 2);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, 1000);
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  assert_int_equal(b->ops->stream_wait(b, s, e, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1000, NULL, 0, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, NULL, buf, 0, 0, NULL), FDY_OK);
  record_and_wait(b, s, e);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
}

/* The fields of the CPU backend's refusals (the refusals themselves are
 * the suite's): the bounds a copy or view broke, the operand (ids[0]:
 * inputs, then outputs, then the workspace), the alignment, and the
 * entry. */
static void test_refusal_fields(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 2);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, 1088);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, 512, &ws_bytes);
  unsigned char data[1100] = {0};
  fdy_error err;

  assert_int_equal(b->ops->copy_to_device(b, s, buf, 89, data, 1000, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1088);
  assert_int_equal(err.actual, 1089);
  assert_int_equal(b->ops->copy_to_host(b, s, data, buf, 1087, 2, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1088);
  assert_int_equal(err.actual, 1089);
  assert_int_equal(b->ops->event_record(b, s, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "event_record");

  checksum_views good = {.data = buf,
                         .n = 512,
                         .out = buf,
                         .out_offset = 1024,
                         .ws = ws,
                         .ws_bytes = ws_bytes};
  fdy_op op = checksum_op(&good);
  /* fdy_op_check's error, marked as the launch's */
  op.inputs[0].shape = FDY_SHAPE(500);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_string_equal(err.backend_op, "launch");
  /* supported by the kind's table but not by the backend */
  fdy_op top = {.kind = FDY_OP_ARGMAX, .input_count = 1, .output_count = 1};
  top.inputs[0] =
      (fdy_tensor_view){buf, 0, FDY_DTYPE_F32, FDY_SHAPE(1, (uint64_t)1 << 31)};
  top.outputs[0] = (fdy_tensor_view){buf, 0, FDY_DTYPE_I32, FDY_SHAPE(1)};
  assert_int_equal(b->ops->launch(b, s, &top, &err), FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, "argmax");
  assert_string_equal(err.backend_op, "launch");
  /* a view without a buffer */
  op = checksum_op(&good);
  op.outputs[0].buffer = NULL;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  /* views past the buffer's end, or wrapping around */
  op = checksum_op(&good);
  op.inputs[0].offset = 640; /* 640 + 512 > 1088 */
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_int_equal(err.expected, 1088);
  assert_int_equal(err.actual, 1152);
  op = checksum_op(&good);
  op.outputs[0].offset = UINT64_MAX - 63;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  /* offsets not a multiple of the backend's alignment (64) */
  op = checksum_op(&good);
  op.outputs[0].offset = 1016; /* element-aligned, still refused */
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 64);
  assert_int_equal(err.actual, 1016);
  op = checksum_op(&good);
  op.workspace.offset = 8;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  /* a workspace outside its buffer */
  op = checksum_op(&good);
  op.workspace.offset = 64;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 2);
  assert_int_equal(err.expected, ws_bytes);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
}

/* Several streams copy and checksum at the same time (their ops take turns
 * on the pool), each into its own buffers; a final stream waits on all of
 * them. A buffer released while its stream still uses it stays counted
 * against the budget until that work completed. */
static void test_concurrent_streams(void **state) {
  (void)state;
  enum { STREAMS = 3, ROUNDS = 4 };
  const uint64_t n = 256u << 10;
  const uint64_t slot = n + 256;
  uint64_t ws_bytes = 0;
  fdy_backend *probe = make_cpu(1 << 20, 3);
  fdy_backend_buffer *probe_ws = checksum_workspace(probe, n, &ws_bytes);
  probe->ops->buffer_release(probe, probe_ws);
  fdy_backend_destroy(probe);
  fdy_backend *b = make_cpu(STREAMS * (slot + ws_bytes), 3);
  fdy_backend_stream *s[STREAMS];
  fdy_backend_buffer *buf[STREAMS], *ws[STREAMS];
  fdy_backend_event *last[STREAMS];
  unsigned char *data[STREAMS];
  uint64_t results[STREAMS][ROUNDS];
  for (int i = 0; i < STREAMS; i++) {
    s[i] = make_stream(b);
    buf[i] = make_buffer(b, slot);
    ws[i] = make_buffer(b, ws_bytes);
    last[i] = make_event(b);
    data[i] = random_bytes(n, 500 + (uint64_t)i);
  }
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < STREAMS; i++) {
      assert_int_equal(
          b->ops->copy_to_device(b, s[i], buf[i], 0, data[i], n, NULL), FDY_OK);
      checksum_views v = {.data = buf[i],
                          .n = n,
                          .out = buf[i],
                          .out_offset = n,
                          .ws = ws[i],
                          .ws_bytes = ws_bytes};
      fdy_op op = checksum_op(&v);
      op.params.checksum.passes = 2;
      assert_int_equal(b->ops->launch(b, s[i], &op, NULL), FDY_OK);
      assert_int_equal(
          b->ops->copy_to_host(b, s[i], &results[i][r], buf[i], n, 8, NULL),
          FDY_OK);
      assert_int_equal(b->ops->event_record(b, s[i], last[i], NULL), FDY_OK);
    }
  }
  fdy_backend_stream *joiner = make_stream(b);
  fdy_backend_event *joined = make_event(b);
  for (int i = 0; i < STREAMS; i++) {
    assert_int_equal(b->ops->stream_wait(b, joiner, last[i], NULL), FDY_OK);
  }
  b->ops->buffer_release(b, buf[0]);
  /* buf[0]'s bytes stay counted until stream 0's work completed; after
   * waiting for it, another buffer of its size fits. */
  assert_int_equal(b->ops->host_wait(b, last[0], NULL), FDY_OK);
  fdy_backend_buffer *tail = make_buffer(b, slot);
  assert_int_equal(b->ops->copy_to_device(b, joiner, tail, 0, data[1], n, NULL),
                   FDY_OK);
  uint64_t tail_result = 0;
  checksum_views v = {.data = tail,
                      .n = n,
                      .out = tail,
                      .out_offset = n,
                      .ws = ws[0],
                      .ws_bytes = ws_bytes};
  fdy_op op = checksum_op(&v);
  assert_int_equal(b->ops->launch(b, joiner, &op, NULL), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_host(b, joiner, &tail_result, tail, n, 8, NULL), FDY_OK);
  record_and_wait(b, joiner, joined);
  /* The joiner waited for every stream's last round: all results are in. */
  for (int i = 0; i < STREAMS; i++) {
    for (int r = 0; r < ROUNDS; r++) {
      assert_true(results[i][r] == fdy_checksum(data[i], n));
    }
  }
  assert_true(tail_result == fdy_checksum(data[1], n));
  for (int i = 0; i < STREAMS; i++) {
    b->ops->event_destroy(b, last[i]);
    if (i > 0) {
      b->ops->buffer_release(b, buf[i]);
    }
    b->ops->buffer_release(b, ws[i]);
    b->ops->stream_destroy(b, s[i]);
    free(data[i]);
  }
  b->ops->event_destroy(b, joined);
  b->ops->buffer_release(b, tail);
  b->ops->stream_destroy(b, joiner);
  fdy_backend_destroy(b);
}

/* ---- failed work: copies from and to a truncated file mapping ----------- */

/* A copy from the mapped page that is gone is accepted and fails when it
 * runs: host_wait reports FDY_ERR_IO from copy_to_device (until drain), the
 * stream's later copy is skipped, and after drain the same stream copies
 * good memory again. */
static void test_copy_from_truncated_mapping(void **state) {
  (void)state;
  shrunk_mapping m;
  assert_int_equal(shrunk_make(&m, false), 0);
  size_t page = m.page;
  fdy_backend *b = make_cpu(64 * FDY_MIB, 2);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, 3 * page);
  unsigned char *zeros = calloc(1, page);
  unsigned char *good = random_bytes(page, 7);
  unsigned char *out = malloc(3 * page);
  assert_non_null(zeros);
  assert_non_null(out);
  fdy_error err;
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, 2 * page, zeros, page, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, m.map, page, &err),
                   FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, page, m.map + page, page, &err),
      FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, 2 * page, good, page, &err), FDY_OK);
  assert_int_equal(b->ops->event_record(b, s, e, &err), FDY_OK);
  fdy_error_clear(&err);
  assert_int_equal(b->ops->host_wait(b, e, &err), FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_ERR_IO);
  /* reported by host_wait already */
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  /* the copy after the failure was skipped */
  assert_int_equal(b->ops->copy_to_host(b, s, out, buf, 0, 3 * page, &err),
                   FDY_OK);
  record_and_wait(b, s, e);
  for (size_t i = 0; i < page; i++) {
    assert_int_equal(out[i], shrunk_pattern(i));
  }
  assert_memory_equal(out + 2 * page, zeros, page);
  /* the stream runs work again */
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, 2 * page, good, page, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, out, buf, 2 * page, page, &err),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(out, good, page);
  free(out);
  free(good);
  free(zeros);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  shrunk_remove(&m);
}

/* A stream that waits on the event of a failed stream fails too, whether
 * the event completed before stream_wait was called or after: its launch
 * is skipped and host_wait on its own event reports the failure. */
static void test_failure_crosses_stream_waits(void **state) {
  (void)state;
  shrunk_mapping m;
  assert_int_equal(shrunk_make(&m, false), 0);
  fdy_backend *b = make_cpu(64 * FDY_MIB, 2);
  fdy_backend_stream *copy = make_stream(b), *compute = make_stream(b);
  fdy_backend_event *copied = make_event(b), *done = make_event(b);
  uint64_t n = 4096, ws_bytes = 0;
  fdy_backend_buffer *data = make_buffer(b, n), *sum = make_buffer(b, 64);
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  checksum_views v = {
      .data = data, .n = n, .out = sum, .ws = ws, .ws_bytes = ws_bytes};
  fdy_op op = checksum_op(&v);
  uint64_t untouched = 0x0123456789abcdefull, result = 0;
  fdy_error err;
  for (int completed_first = 0; completed_first < 2; completed_first++) {
    assert_int_equal(b->ops->copy_to_device(b, compute, sum, 0, &untouched,
                                            sizeof untouched, &err),
                     FDY_OK);
    record_and_wait(b, compute, done);
    assert_int_equal(
        b->ops->copy_to_device(b, copy, data, 0, m.map + m.page, n, &err),
        FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, copied, &err), FDY_OK);
    if (completed_first) {
      assert_int_equal(b->ops->host_wait(b, copied, &err), FDY_ERR_IO);
    }
    assert_int_equal(b->ops->stream_wait(b, compute, copied, &err), FDY_OK);
    assert_int_equal(b->ops->launch(b, compute, &op, &err), FDY_OK);
    assert_int_equal(b->ops->event_record(b, compute, done, &err), FDY_OK);
    fdy_error_clear(&err);
    assert_int_equal(b->ops->host_wait(b, done, &err), FDY_ERR_IO);
    assert_string_equal(err.backend_op, "copy_to_device");
    assert_int_equal(b->ops->drain(b, &err), FDY_OK);
    /* the checksum did not run */
    assert_int_equal(
        b->ops->copy_to_host(b, compute, &result, sum, 0, sizeof result, &err),
        FDY_OK);
    record_and_wait(b, compute, done);
    assert_true(result == untouched);
  }
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, sum);
  b->ops->buffer_release(b, data);
  b->ops->event_destroy(b, done);
  b->ops->event_destroy(b, copied);
  b->ops->stream_destroy(b, compute);
  b->ops->stream_destroy(b, copy);
  fdy_backend_destroy(b);
  shrunk_remove(&m);
}

/* A failure no host_wait observed is drain's to report, once; copies into
 * a truncated writable mapping fail the same way (copy_to_host). */
static void test_drain_reports_failed_work(void **state) {
  (void)state;
  shrunk_mapping m;
  assert_int_equal(shrunk_make(&m, true), 0);
  fdy_backend *b = make_cpu(64 * FDY_MIB, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, m.page);
  fdy_error err;
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, 0, m.map + 2 * m.page, m.page, &err),
      FDY_OK);
  fdy_error_clear(&err);
  assert_int_equal(b->ops->drain(b, &err), FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_host(b, s, m.map + m.page, buf, 0, m.page, &err), FDY_OK);
  fdy_error_clear(&err);
  assert_int_equal(b->ops->drain(b, &err), FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_host");
  /* good memory after the drain */
  assert_int_equal(b->ops->copy_to_host(b, s, m.map, buf, 0, 64, &err), FDY_OK);
  record_and_wait(b, s, e);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  shrunk_remove(&m);
}

/* A thread that cannot start fails with FDY_ERR_BACKEND (not out of
 * memory) naming the thread, leaves nothing behind, and the backend works
 * once threads start again. The failure comes from outside the backend:
 * the process's default thread stack (glibc's pthread_setattr_default_np)
 * is made larger than any address space. */
static void test_thread_start_failure(void **state) {
  (void)state;
  pthread_attr_t normal, huge;
  assert_int_equal(pthread_getattr_default_np(&normal), 0);
  assert_int_equal(pthread_attr_init(&huge), 0);
  assert_int_equal(pthread_attr_setstacksize(&huge, (size_t)1 << 62), 0);
  fdy_backend *b = make_cpu(1 << 20, 1); /* no pool workers */
  assert_int_equal(pthread_setattr_default_np(&huge), 0);

  fdy_error err;
  fdy_backend_stream *s = (fdy_backend_stream *)(uintptr_t)1;
  assert_int_equal(b->ops->stream_create(b, &s, &err), FDY_ERR_BACKEND);
  assert_null(s);
  assert_string_equal(err.backend_op, "stream_create");
  fdy_cpu_options opts = {.memory_bytes = 1 << 20, .threads = 4};
  fdy_backend *pooled = (fdy_backend *)(uintptr_t)1;
  assert_int_equal(fdy_cpu_backend_create(&opts, &pooled, &err),
                   FDY_ERR_BACKEND);
  assert_null(pooled);
  assert_string_equal(err.backend_op, "create");

  assert_int_equal(pthread_setattr_default_np(&normal), 0);
  s = make_stream(b);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  pooled = make_cpu(1 << 20, 4);
  fdy_backend_destroy(pooled);
  pthread_attr_destroy(&huge);
  pthread_attr_destroy(&normal);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_and_caps),
      cmocka_unit_test(test_create_rejects_bad_options),
      cmocka_unit_test(test_alloc_budget),
      cmocka_unit_test(test_alloc_rejects_zero_and_oversized),
      cmocka_unit_test(test_empty_copies_and_unrecorded_waits),
      cmocka_unit_test(test_refusal_fields),
      cmocka_unit_test(test_concurrent_streams),
      cmocka_unit_test(test_copy_from_truncated_mapping),
      cmocka_unit_test(test_failure_crosses_stream_waits),
      cmocka_unit_test(test_drain_reports_failed_work),
      cmocka_unit_test(test_thread_start_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
