/* Contract tests of the CPU backend, called directly through its ops table:
 * options, allocation against the memory budget, copies both ways, the
 * CHECKSUM op, events created once and recorded many times, stream and
 * host waits (each for the recording current when it was called), event
 * times, ordering across streams, the reference rule for released buffers,
 * drain/destroy with pending work, rejection of bad arguments (copies
 * and views outside their buffer never crash), copies from and to a file
 * mapping whose file was truncated (FDY_ERR_IO at host_wait or drain, the
 * stream's later work skipped, across stream waits too, the backend usable
 * again after drain), and threads that cannot start. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "shrunk_mapping.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Random non-zero bytes from a SplitMix64 stream. */
static unsigned char *random_bytes(uint64_t n, uint64_t seed) {
  unsigned char *p = malloc(n);
  assert_non_null(p);
  uint64_t x = seed;
  for (uint64_t i = 0; i < n; i++) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (unsigned char)(z % 255 + 1);
  }
  return p;
}

static fdy_backend *make_cpu(uint64_t memory, uint32_t threads) {
  fdy_cpu_options opts = {.memory_bytes = memory, .threads = threads};
  fdy_backend *b = NULL;
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, NULL), FDY_OK);
  assert_non_null(b);
  return b;
}

static fdy_backend_stream *make_stream(fdy_backend *b) {
  fdy_backend_stream *s = NULL;
  assert_int_equal(b->ops->stream_create(b, &s, NULL), FDY_OK);
  assert_non_null(s);
  return s;
}

static fdy_backend_event *make_event(fdy_backend *b) {
  fdy_backend_event *e = NULL;
  assert_int_equal(b->ops->event_create(b, &e, NULL), FDY_OK);
  assert_non_null(e);
  return e;
}

static fdy_backend_buffer *make_buffer(fdy_backend *b, uint64_t bytes) {
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, bytes, &buf, NULL), FDY_OK);
  assert_non_null(buf);
  return buf;
}

static void record_and_wait(fdy_backend *b, fdy_backend_stream *s,
                            fdy_backend_event *e) {
  assert_int_equal(b->ops->event_record(b, s, e, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
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

/* Copies in two pieces to the device and back to the host at offsets. */
static void test_copy_round_trip(void **state) {
  (void)state;
  const uint64_t n = 100003;
  fdy_backend *b = make_cpu(1 << 20, 2);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, n + 1000);
  unsigned char *data = random_bytes(n, 1);
  unsigned char *back = calloc(n + 2, 1);
  assert_non_null(back);
  uint64_t half = n / 2;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1000, data, half, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1000 + half, data + half,
                                          n - half, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, back + 1, buf, 1000, n, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back + 1, data, n);
  assert_int_equal(back[0], 0);
  assert_int_equal(back[n + 1], 0);
  /* empty copies are fine */
  assert_int_equal(b->ops->copy_to_device(b, s, buf, n + 1000, NULL, 0, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, NULL, buf, 0, 0, NULL), FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(data);
  free(back);
}

/* Copies data, checksums it (with and without a previous link, any number
 * of passes) and copies the result back, all on one stream. */
static void copy_and_checksum(uint32_t passes, uint64_t n) {
  fdy_backend *b = make_cpu(1 << 24, 3);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  uint64_t prev_at = (n + 255) / 256 * 256, out_at = prev_at + 256;
  fdy_backend_buffer *buf = make_buffer(b, out_at + 8);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  unsigned char *data = random_bytes(n, n + passes);
  uint64_t prev = 0x0123456789ABCDEFull;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, prev_at, &prev, 8, NULL),
                   FDY_OK);
  checksum_views v = {buf, 0, n, buf, prev_at, buf, out_at, ws, 0, ws_bytes};
  fdy_op op = checksum_op(&v);
  op.params.checksum.passes = passes;
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  uint64_t chained = 0, first = 0;
  assert_int_equal(b->ops->copy_to_host(b, s, &chained, buf, out_at, 8, NULL),
                   FDY_OK);
  v.prev = NULL;
  op = checksum_op(&v);
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, &first, buf, out_at, 8, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_true(first == fdy_checksum(data, n));
  assert_true(chained == fdy_checksum(data, n) + prev * FDY_CHAIN_PRIME);
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(data);
}

static void test_copy_then_checksum(void **state) {
  (void)state;
  copy_and_checksum(1, 4096);
  copy_and_checksum(1, 1 << 20);
  copy_and_checksum(1, 8);
  copy_and_checksum(4, 4104);
  copy_and_checksum(3, 65536);
}

/* One event, recorded after each layer's copy on the copy stream and waited
 * for by the compute stream right away, while the copy stream runs ahead:
 * each wait is for its own layer's recording, so every checksum reads a
 * complete layer. */
static void test_rerecorded_event_orders_streams(void **state) {
  (void)state;
  const uint64_t n = 4u << 20;
  enum { LAYERS = 4 };
  fdy_backend *b = make_cpu(64u << 20, 2);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  fdy_backend_event *copied = make_event(b), *done = make_event(b);
  unsigned char *data[LAYERS];
  fdy_backend_buffer *buf[LAYERS];
  fdy_backend_buffer *out = make_buffer(b, 64 * LAYERS);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  uint64_t results[8 * LAYERS] = {0}; /* one result per 64 bytes */
  for (int i = 0; i < LAYERS; i++) {
    data[i] = random_bytes(n, 100 + (uint64_t)i);
    buf[i] = make_buffer(b, n);
    assert_int_equal(
        b->ops->copy_to_device(b, copy, buf[i], 0, data[i], n, NULL), FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, copied, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, copied, NULL), FDY_OK);
    checksum_views v = {.data = buf[i],
                        .n = n,
                        .out = out,
                        .out_offset = 64 * (uint64_t)i,
                        .ws = ws,
                        .ws_bytes = ws_bytes};
    fdy_op op = checksum_op(&v);
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
  }
  assert_int_equal(
      b->ops->copy_to_host(b, compute, results, out, 0, sizeof results, NULL),
      FDY_OK);
  record_and_wait(b, compute, done);
  for (int i = 0; i < LAYERS; i++) {
    assert_true(results[8 * i] == fdy_checksum(data[i], n));
  }
  /* the last copy completed before the launch that waited for it */
  int64_t copied_at = 0, done_at = 0;
  assert_int_equal(b->ops->event_time(b, copied, &copied_at, NULL), FDY_OK);
  assert_int_equal(b->ops->event_time(b, done, &done_at, NULL), FDY_OK);
  assert_true(copied_at <= done_at);
  for (int i = 0; i < LAYERS; i++) {
    b->ops->buffer_release(b, buf[i]);
    free(data[i]);
  }
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, out);
  b->ops->event_destroy(b, copied);
  b->ops->event_destroy(b, done);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  fdy_backend_destroy(b);
}

/* A stream wait is for the recording current when it was called: a stream
 * that waits on an event and then records the same event itself must not
 * wait for its own later recording (that would never complete). */
static void test_wait_is_for_the_current_recording(void **state) {
  (void)state;
  const uint64_t n = 8u << 20;
  fdy_backend *b = make_cpu(64u << 20, 2);
  fdy_backend_stream *s1 = make_stream(b), *s2 = make_stream(b);
  fdy_backend_event *e = make_event(b), *f = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  fdy_backend_buffer *out = make_buffer(b, 8);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  unsigned char *data = random_bytes(n, 5);
  assert_int_equal(b->ops->copy_to_device(b, s1, buf, 0, data, n, NULL),
                   FDY_OK);
  checksum_views v = {
      .data = buf, .n = n, .out = out, .ws = ws, .ws_bytes = ws_bytes};
  fdy_op op = checksum_op(&v);
  op.params.checksum.passes = 4;
  assert_int_equal(b->ops->launch(b, s1, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->event_record(b, s1, e, NULL), FDY_OK); /* #1 */
  assert_int_equal(b->ops->stream_wait(b, s2, e, NULL), FDY_OK);  /* #1 */
  uint64_t seen = 0;
  assert_int_equal(b->ops->copy_to_host(b, s2, &seen, out, 0, 8, NULL), FDY_OK);
  assert_int_equal(b->ops->event_record(b, s2, e, NULL), FDY_OK); /* #2 */
  assert_int_equal(b->ops->event_record(b, s2, f, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, f, NULL), FDY_OK);
  /* s2 waited for recording #1: the checksum was in place */
  assert_true(seen == fdy_checksum(data, n));
  /* host_wait waits for recording #2, the current one */
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  int64_t te = 0, tf = 0;
  assert_int_equal(b->ops->event_time(b, e, &te, NULL), FDY_OK);
  assert_int_equal(b->ops->event_time(b, f, &tf, NULL), FDY_OK);
  assert_true(te <= tf);
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, out);
  b->ops->event_destroy(b, e);
  b->ops->event_destroy(b, f);
  b->ops->stream_destroy(b, s1);
  b->ops->stream_destroy(b, s2);
  fdy_backend_destroy(b);
  free(data);
}

/* Event times lie on the fdy_now_ns clock and grow with re-recording; an
 * event never recorded has no time, and waits on it return at once. */
static void test_event_time(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_error err;
  int64_t t = 0;
  assert_int_equal(b->ops->event_time(b, e, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "event_time");
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  assert_int_equal(b->ops->stream_wait(b, s, e, NULL), FDY_OK);
  int64_t prev = 0;
  for (int i = 0; i < 5; i++) {
    int64_t before = fdy_now_ns();
    record_and_wait(b, s, e);
    int64_t after = fdy_now_ns();
    assert_int_equal(b->ops->event_time(b, e, &t, NULL), FDY_OK);
    assert_true(before <= t && t <= after);
    assert_true(prev < t);
    prev = t;
  }
  assert_int_equal(b->ops->event_time(b, NULL, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->event_time(b, e, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  b->ops->event_destroy(b, e);
  b->ops->event_destroy(b, NULL);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
}

/* Buffers and events released right after submission stay alive until the
 * queued work that uses them completed (ASan proves no use after free), and
 * their bytes return to the budget then. */
static void test_release_while_queued(void **state) {
  (void)state;
  const uint64_t n = 4u << 20;
  const uint64_t memory = 4 * n + 4096;
  fdy_backend *b = make_cpu(memory, 3);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  unsigned char *data = random_bytes(n, 42);
  uint64_t results[4] = {0};
  for (int i = 0; i < 4; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n + 8);
    uint64_t ws_bytes = 0;
    fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
    fdy_backend_event *c = make_event(b);
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, c, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, c, NULL), FDY_OK);
    b->ops->event_destroy(b, c);
    checksum_views v = {.data = buf,
                        .n = n,
                        .out = buf,
                        .out_offset = n,
                        .ws = ws,
                        .ws_bytes = ws_bytes};
    fdy_op op = checksum_op(&v);
    op.params.checksum.passes = 3;
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
    b->ops->buffer_release(b, ws);
    assert_int_equal(
        b->ops->copy_to_host(b, compute, &results[i], buf, n, 8, NULL), FDY_OK);
    b->ops->buffer_release(b, buf);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < 4; i++) {
    assert_true(results[i] == fdy_checksum(data, n));
  }
  /* Every buffer's memory went back to the budget after its work. */
  fdy_backend_buffer *all = make_buffer(b, memory);
  b->ops->buffer_release(b, all);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  fdy_backend_destroy(b);
  free(data);
}

/* destroy with work still queued and handles never released: drains, joins
 * and frees everything (ASan's leak check proves it). */
static void test_destroy_with_pending_work(void **state) {
  (void)state;
  const uint64_t n = 2u << 20;
  fdy_backend *b = make_cpu(16 * n + 4096, 2);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  fdy_backend_event *e = make_event(b);
  unsigned char *data = random_bytes(n, 9);
  fdy_backend_host *host = NULL;
  assert_int_equal(b->ops->host_register(b, data, n, &host, NULL), FDY_OK);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  for (int i = 0; i < 8; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n + 8);
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, e, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, e, NULL), FDY_OK);
    checksum_views v = {.data = buf,
                        .n = n,
                        .out = buf,
                        .out_offset = n,
                        .ws = ws,
                        .ws_bytes = ws_bytes};
    fdy_op op = checksum_op(&v);
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
  }
  fdy_backend_destroy(b);
  free(data);
}

static void test_drain_is_repeatable(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 1);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  fdy_backend_stream *s = make_stream(b);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->stream_destroy(b, s);
  b->ops->stream_destroy(b, NULL);
  fdy_backend_destroy(b);
}

static void test_bad_copies_and_events(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, 1000);
  unsigned char *data = random_bytes(2000, 3);
  fdy_error err;

  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1, data, 1000, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1000);
  assert_int_equal(err.actual, 1001);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(b->ops->copy_to_device(b, s, buf, UINT64_MAX, data, 2, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, NULL, 10, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, NULL, buf, 0, data, 10, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, s, NULL, 0, data, 10, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_host(b, s, data, buf, 999, 2, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1000);
  assert_int_equal(err.actual, 1001);
  assert_string_equal(err.backend_op, "copy_to_host");
  assert_int_equal(b->ops->copy_to_host(b, s, NULL, buf, 0, 10, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_host(b, s, data, buf, UINT64_MAX, 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  assert_int_equal(b->ops->event_create(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->event_record(b, s, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "event_record");
  fdy_backend_event *e = make_event(b);
  assert_int_equal(b->ops->event_record(b, NULL, e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_wait(b, s, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_wait(b, NULL, e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->host_wait(b, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->host_register(b, NULL, 10, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_backend_host *h = (fdy_backend_host *)&err;
  assert_int_equal(b->ops->host_register(b, data, 0, &h, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(h);
  assert_int_equal(b->ops->capabilities(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_create(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  /* The backend still works after the rejected calls. */
  unsigned char back[1000];
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, 1000, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, 1000, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back, data, 1000);
  b->ops->event_destroy(b, e);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(data);
}

/* Launches refused before anything is queued: invalid or unsupported ops,
 * views without a buffer, outside their buffer or misaligned. */
static void test_bad_launches(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 2);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, 1088);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, 512, &ws_bytes);
  fdy_error err;
  checksum_views good = {.data = buf,
                         .n = 512,
                         .out = buf,
                         .out_offset = 1024,
                         .ws = ws,
                         .ws_bytes = ws_bytes};
  fdy_op op = checksum_op(&good);

  assert_int_equal(b->ops->launch(b, s, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "launch");
  assert_int_equal(b->ops->launch(b, NULL, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* fdy_op_check's error, marked as the launch's */
  op.inputs[0].shape = FDY_SHAPE(500);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  assert_string_equal(err.backend_op, "launch");
  op = checksum_op(&good);
  op.kind = FDY_OP_KIND_COUNT;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
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
  op = checksum_op(&good);
  op.inputs[0].shape = FDY_SHAPE(1096);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
  /* offsets not a multiple of the backend's alignment (64) */
  op = checksum_op(&good);
  op.outputs[0].offset = 1016; /* element-aligned, still refused */
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 1);
  assert_int_equal(err.expected, 64);
  assert_int_equal(err.actual, 1016);
  op = checksum_op(&good);
  op.inputs[0].offset = 4;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.ids[0], 0);
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

  /* nothing was queued; the good op still runs */
  unsigned char *data = random_bytes(512, 77);
  uint64_t result = 0;
  op = checksum_op(&good);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, 512, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, &result, buf, 1024, 8, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_true(result == fdy_checksum(data, 512));
  free(data);
  b->ops->buffer_release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
}

/* Copies from registered memory behave like any other copy. */
static void test_host_register(void **state) {
  (void)state;
  const uint64_t n = 12345;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  unsigned char *data = random_bytes(n, 11);
  unsigned char *back = malloc(n);
  assert_non_null(back);
  fdy_backend_host *h = NULL, *hb = NULL;
  assert_int_equal(b->ops->host_register(b, data, n, &h, NULL), FDY_OK);
  assert_int_equal(b->ops->host_register(b, back, n, &hb, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, n, NULL), FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back, data, n);
  b->ops->host_unregister(b, h);
  b->ops->host_unregister(b, hb);
  b->ops->host_unregister(b, NULL);
  b->ops->event_destroy(b, e);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(data);
  free(back);
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
      cmocka_unit_test(test_copy_round_trip),
      cmocka_unit_test(test_copy_then_checksum),
      cmocka_unit_test(test_rerecorded_event_orders_streams),
      cmocka_unit_test(test_wait_is_for_the_current_recording),
      cmocka_unit_test(test_event_time),
      cmocka_unit_test(test_release_while_queued),
      cmocka_unit_test(test_destroy_with_pending_work),
      cmocka_unit_test(test_drain_is_repeatable),
      cmocka_unit_test(test_bad_copies_and_events),
      cmocka_unit_test(test_bad_launches),
      cmocka_unit_test(test_host_register),
      cmocka_unit_test(test_concurrent_streams),
      cmocka_unit_test(test_copy_from_truncated_mapping),
      cmocka_unit_test(test_failure_crosses_stream_waits),
      cmocka_unit_test(test_drain_reports_failed_work),
      cmocka_unit_test(test_thread_start_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
