/* Contract tests of the CPU backend, called directly through its ops table
 * without the runtime: allocation against the memory budget, copies and the
 * synthetic.checksum launch, ordering across streams, event timestamps, the
 * reference rule for released buffers, drain/destroy with pending work and
 * rejection of bad arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "foundry/graph.h"

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

static fdy_backend *make_cpu(uint64_t memory, uint32_t passes) {
  fdy_cpu_options opts = {.memory_bytes = memory, .compute_passes = passes};
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, &err), FDY_OK);
  assert_non_null(b);
  return b;
}

static fdy_backend_stream *make_stream(fdy_backend *b) {
  fdy_backend_stream *s = NULL;
  assert_int_equal(b->ops->stream_create(b, &s, NULL), FDY_OK);
  assert_non_null(s);
  return s;
}

static fdy_backend_buffer *make_buffer(fdy_backend *b, uint64_t bytes) {
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, bytes, &buf, NULL), FDY_OK);
  assert_non_null(buf);
  return buf;
}

static fdy_launch_desc checksum_desc(fdy_backend_buffer *buf, uint64_t bytes,
                                     uint64_t *result) {
  fdy_launch_desc d = {
      .kind = FDY_OP_SYNTHETIC_CHECKSUM, .weight_count = 1, .result = result};
  d.weights[0].buffer = buf;
  d.weights[0].bytes = bytes;
  return d;
}

static void test_create_and_caps(void **state) {
  (void)state;
  fdy_backend *b = NULL;
  assert_int_equal(fdy_cpu_backend_create(NULL, &b, NULL), FDY_OK);
  assert_string_equal(b->ops->name, "cpu");
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_string_equal(caps.name, "cpu");
  assert_true(caps.total_memory > 0);
  assert_int_equal(caps.max_allocation, caps.total_memory);
  assert_int_equal(caps.free_memory, caps.total_memory);
  assert_int_equal(caps.alignment, 64);
  assert_true(caps.concurrent_copy_compute);
  assert_true(b->ops->supports_op(b, FDY_OP_SYNTHETIC_CHECKSUM));
  assert_false(b->ops->supports_op(b, "llama.decoder_layer"));
  assert_false(b->ops->supports_op(b, NULL));
  b->ops->destroy(b);

  fdy_cpu_options opts = {.memory_bytes = 4096, .alignment = 4096};
  assert_int_equal(fdy_cpu_backend_create(&opts, &b, NULL), FDY_OK);
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_int_equal(caps.total_memory, 4096);
  assert_int_equal(caps.alignment, 4096);
  b->ops->destroy(b);
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
  b->ops->destroy(b);
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
  b->ops->destroy(b);
}

/* Copies data in two pieces, then checksums on the same stream. */
static void copy_and_checksum(uint32_t passes, uint64_t n) {
  fdy_backend *b = make_cpu(1 << 24, passes);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, n + 64);
  unsigned char *data = random_bytes(n, n + passes);
  uint64_t half = n / 2;
  fdy_backend_event *c1 = NULL, *c2 = NULL, *l = NULL;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, half, &c1, NULL),
                   FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, half, data + half, n - half, &c2, NULL),
      FDY_OK);
  uint64_t result = 0xDEADBEEFull;
  fdy_launch_desc d = checksum_desc(buf, n, &result);
  assert_int_equal(b->ops->launch(b, s, &d, &l, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, l, NULL), FDY_OK);
  assert_int_equal(result, fdy_checksum(data, n));
  assert_int_not_equal(result, fdy_checksum(data, n - 1));
  b->ops->event_release(b, c1);
  b->ops->event_release(b, c2);
  b->ops->event_release(b, l);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  b->ops->destroy(b);
  free(data);
}

static void test_copy_then_checksum(void **state) {
  (void)state;
  copy_and_checksum(1, 4099);
  copy_and_checksum(1, 1 << 20);
  copy_and_checksum(1, 1);
}

static void test_compute_passes_same_result(void **state) {
  (void)state;
  copy_and_checksum(4, 4099);
  copy_and_checksum(3, 65536);
}

/* A launch on the compute stream that waits for a copy on the copy stream
 * sees the copied bytes; its result is written by drain. */
static void test_stream_wait_orders_streams(void **state) {
  (void)state;
  const uint64_t n = 8u << 20;
  const int layers = 4;
  fdy_backend *b = make_cpu(64u << 20, 2);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  unsigned char *data[4];
  fdy_backend_buffer *buf[4];
  fdy_backend_event *copied[4], *launched[4];
  uint64_t results[4];
  for (int i = 0; i < layers; i++) {
    data[i] = random_bytes(n, 100 + (uint64_t)i);
    buf[i] = make_buffer(b, n);
    results[i] = 0;
    assert_int_equal(b->ops->copy_to_device(b, copy, buf[i], 0, data[i], n,
                                            &copied[i], NULL),
                     FDY_OK);
  }
  for (int i = 0; i < layers; i++) {
    assert_int_equal(b->ops->stream_wait(b, compute, copied[i], NULL), FDY_OK);
    fdy_launch_desc d = checksum_desc(buf[i], n, &results[i]);
    assert_int_equal(b->ops->launch(b, compute, &d, &launched[i], NULL),
                     FDY_OK);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < layers; i++) {
    assert_int_equal(results[i], fdy_checksum(data[i], n));
    fdy_event_times ct, lt;
    assert_int_equal(b->ops->event_times(b, copied[i], &ct, NULL), FDY_OK);
    assert_int_equal(b->ops->event_times(b, launched[i], &lt, NULL), FDY_OK);
    assert_true(ct.end_ns <= lt.start_ns);
    b->ops->event_release(b, copied[i]);
    b->ops->event_release(b, launched[i]);
    b->ops->buffer_release(b, buf[i]);
    free(data[i]);
  }
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  b->ops->destroy(b);
}

static void test_event_times_monotonic(void **state) {
  (void)state;
  const uint64_t n = 1 << 20;
  fdy_backend *b = make_cpu(1 << 22, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  unsigned char *data = random_bytes(n, 7);
  fdy_backend_event *ev[6];
  uint64_t result = 0;
  for (int i = 0; i < 6; i++) {
    if (i % 2 == 0) {
      assert_int_equal(
          b->ops->copy_to_device(b, s, buf, 0, data, n, &ev[i], NULL), FDY_OK);
    } else {
      fdy_launch_desc d = checksum_desc(buf, n, &result);
      assert_int_equal(b->ops->launch(b, s, &d, &ev[i], NULL), FDY_OK);
    }
  }
  assert_int_equal(b->ops->host_wait(b, ev[5], NULL), FDY_OK);
  int64_t before = fdy_now_ns();
  int64_t prev_end = 0;
  for (int i = 0; i < 6; i++) {
    fdy_event_times t;
    assert_int_equal(b->ops->event_times(b, ev[i], &t, NULL), FDY_OK);
    assert_true(t.start_ns > 0);
    assert_true(t.start_ns <= t.end_ns);
    assert_true(prev_end <= t.start_ns);
    assert_true(t.end_ns <= before);
    prev_end = t.end_ns;
    b->ops->event_release(b, ev[i]);
  }
  assert_int_equal(result, fdy_checksum(data, n));
  fdy_error err;
  fdy_event_times t;
  assert_int_equal(b->ops->event_times(b, NULL, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "event_times");
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  b->ops->destroy(b);
  free(data);
}

/* Buffers and events released right after submission stay alive until the
 * queued work that uses them completed (ASan proves no use after free). */
static void test_release_while_queued(void **state) {
  (void)state;
  const uint64_t n = 4u << 20;
  const uint64_t memory = 4 * n;
  fdy_backend *b = make_cpu(memory, 3);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  unsigned char *data = random_bytes(n, 42);
  uint64_t results[4] = {0};
  for (int i = 0; i < 4; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n);
    fdy_backend_event *c = NULL, *l = NULL;
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, &c, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, c, NULL), FDY_OK);
    b->ops->event_release(b, c);
    fdy_launch_desc d = checksum_desc(buf, n, &results[i]);
    assert_int_equal(b->ops->launch(b, compute, &d, &l, NULL), FDY_OK);
    b->ops->buffer_release(b, buf);
    b->ops->event_release(b, l);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(results[i], fdy_checksum(data, n));
  }
  /* Every buffer's memory went back to the budget after its work. */
  fdy_backend_buffer *all = make_buffer(b, memory);
  b->ops->buffer_release(b, all);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  b->ops->destroy(b);
  free(data);
}

/* destroy with work still queued and handles never released: drains, joins
 * and frees everything (ASan's leak check proves it). */
static void test_destroy_with_pending_work(void **state) {
  (void)state;
  const uint64_t n = 2u << 20;
  fdy_backend *b = make_cpu(16 * n, 2);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  unsigned char *data = random_bytes(n, 9);
  fdy_backend_host *host = NULL;
  assert_int_equal(b->ops->host_register(b, data, n, &host, NULL), FDY_OK);
  uint64_t results[8];
  for (int i = 0; i < 8; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n);
    fdy_backend_event *c = NULL, *l = NULL;
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, &c, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, c, NULL), FDY_OK);
    fdy_launch_desc d = checksum_desc(buf, n, &results[i]);
    assert_int_equal(b->ops->launch(b, compute, &d, &l, NULL), FDY_OK);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < 8; i++) {
    assert_int_equal(results[i], fdy_checksum(data, n));
  }
  /* More work, then destroy without waiting: results are not written. */
  fdy_backend_buffer *buf = make_buffer(b, n);
  fdy_backend_event *c = NULL;
  assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, &c, NULL),
                   FDY_OK);
  b->ops->destroy(b);
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
  b->ops->destroy(b);
}

static void test_bad_copy_and_launch(void **state) {
  (void)state;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, 1000);
  unsigned char *data = random_bytes(2000, 3);
  fdy_error err;
  fdy_backend_event *e = (fdy_backend_event *)&err;

  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1, data, 1000, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(e);
  assert_int_equal(err.expected, 1000);
  assert_int_equal(err.actual, 1000);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, UINT64_MAX, data, 2, &e, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, NULL, 10, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, NULL, buf, 0, data, 10, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_device(b, s, NULL, 0, data, 10, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(e);

  uint64_t result = 0;
  fdy_launch_desc d = checksum_desc(buf, 1000, &result);
  d.kind = "llama.decoder_layer";
  d.op_index = 5;
  assert_int_equal(b->ops->launch(b, s, &d, &e, &err), FDY_ERR_UNSUPPORTED);
  assert_int_equal(err.ids[0], 5);
  assert_string_equal(err.name, "llama.decoder_layer");
  assert_null(e);
  d = checksum_desc(buf, 1001, &result);
  assert_int_equal(b->ops->launch(b, s, &d, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1000);
  assert_int_equal(err.actual, 1001);
  d = checksum_desc(NULL, 10, &result);
  assert_int_equal(b->ops->launch(b, s, &d, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  d = checksum_desc(buf, 10, &result);
  d.weight_count = 0;
  assert_int_equal(b->ops->launch(b, s, &d, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  d.weight_count = FDY_MAX_LAUNCH_WEIGHTS + 1;
  assert_int_equal(b->ops->launch(b, s, &d, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->launch(b, s, NULL, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(e);
  assert_int_equal(b->ops->stream_wait(b, s, NULL, &err),
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
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  assert_int_equal(result, 0);

  /* The backend still works after the rejected calls. */
  fdy_backend_event *c = NULL, *l = NULL;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, 1000, &c, NULL),
                   FDY_OK);
  d = checksum_desc(buf, 1000, &result);
  assert_int_equal(b->ops->launch(b, s, &d, &l, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, l, NULL), FDY_OK);
  assert_int_equal(result, fdy_checksum(data, 1000));
  b->ops->event_release(b, c);
  b->ops->event_release(b, l);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  b->ops->destroy(b);
  free(data);
}

/* Copies from registered memory behave like any other copy, and a result
 * without a result word (NULL) is simply dropped. */
static void test_host_register_and_null_result(void **state) {
  (void)state;
  const uint64_t n = 12345;
  fdy_backend *b = make_cpu(1 << 20, 1);
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  unsigned char *data = random_bytes(n, 11);
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->host_register(b, data, n, &h, NULL), FDY_OK);
  fdy_backend_event *c = NULL, *l1 = NULL, *l2 = NULL;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, &c, NULL),
                   FDY_OK);
  fdy_launch_desc d = checksum_desc(buf, n, NULL);
  assert_int_equal(b->ops->launch(b, s, &d, &l1, NULL), FDY_OK);
  uint64_t result = 0;
  d = checksum_desc(buf, n, &result);
  assert_int_equal(b->ops->launch(b, s, &d, &l2, NULL), FDY_OK);
  /* Waiting on the copy does not imply the later launch completed; the
   * drain does, and writes the result. */
  assert_int_equal(b->ops->host_wait(b, c, NULL), FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  assert_int_equal(result, fdy_checksum(data, n));
  b->ops->host_unregister(b, h);
  b->ops->host_unregister(b, NULL);
  b->ops->event_release(b, c);
  b->ops->event_release(b, l1);
  b->ops->event_release(b, l2);
  b->ops->event_release(b, NULL);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  b->ops->destroy(b);
  free(data);
}

/* Several streams copy and checksum at the same time, each into its own
 * buffers; a final stream waits on all of them (TSan checks the locking). */
static void test_concurrent_streams(void **state) {
  (void)state;
  enum { STREAMS = 3, ROUNDS = 4 };
  const uint64_t n = 256u << 10;
  fdy_backend *b = make_cpu(STREAMS * n, 2);
  fdy_backend_stream *s[STREAMS];
  fdy_backend_buffer *buf[STREAMS];
  unsigned char *data[STREAMS];
  uint64_t results[STREAMS][ROUNDS];
  fdy_backend_event *last[STREAMS];
  for (int i = 0; i < STREAMS; i++) {
    s[i] = make_stream(b);
    buf[i] = make_buffer(b, n);
    data[i] = random_bytes(n, 500 + (uint64_t)i);
  }
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < STREAMS; i++) {
      fdy_backend_event *c = NULL, *l = NULL;
      assert_int_equal(
          b->ops->copy_to_device(b, s[i], buf[i], 0, data[i], n, &c, NULL),
          FDY_OK);
      fdy_launch_desc d = checksum_desc(buf[i], n, &results[i][r]);
      assert_int_equal(b->ops->launch(b, s[i], &d, &l, NULL), FDY_OK);
      b->ops->event_release(b, c);
      if (r == ROUNDS - 1) {
        last[i] = l;
      } else {
        b->ops->event_release(b, l);
      }
    }
  }
  fdy_backend_stream *joiner = make_stream(b);
  for (int i = 0; i < STREAMS; i++) {
    assert_int_equal(b->ops->stream_wait(b, joiner, last[i], NULL), FDY_OK);
  }
  fdy_backend_buffer *tail = NULL;
  fdy_backend_event *done = NULL;
  b->ops->buffer_release(b, buf[0]);
  /* buf[0] may still be in use: its bytes stay counted until stream 0's
   * last launch completed; only then does another buffer fit. */
  assert_int_equal(b->ops->host_wait(b, last[0], NULL), FDY_OK);
  tail = make_buffer(b, n);
  assert_int_equal(
      b->ops->copy_to_device(b, joiner, tail, 0, data[1], n, &done, NULL),
      FDY_OK);
  uint64_t tail_result = 0;
  fdy_backend_event *tl = NULL;
  fdy_launch_desc d = checksum_desc(tail, n, &tail_result);
  assert_int_equal(b->ops->launch(b, joiner, &d, &tl, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, tl, NULL), FDY_OK);
  /* The joiner waited for every stream's last launch: all results are in. */
  for (int i = 0; i < STREAMS; i++) {
    for (int r = 0; r < ROUNDS; r++) {
      assert_int_equal(results[i][r], fdy_checksum(data[i], n));
    }
  }
  assert_int_equal(tail_result, fdy_checksum(data[1], n));
  for (int i = 0; i < STREAMS; i++) {
    b->ops->event_release(b, last[i]);
    if (i > 0) {
      b->ops->buffer_release(b, buf[i]);
    }
    b->ops->stream_destroy(b, s[i]);
    free(data[i]);
  }
  b->ops->event_release(b, done);
  b->ops->event_release(b, tl);
  b->ops->buffer_release(b, tail);
  b->ops->stream_destroy(b, joiner);
  b->ops->destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_and_caps),
      cmocka_unit_test(test_create_rejects_bad_options),
      cmocka_unit_test(test_alloc_budget),
      cmocka_unit_test(test_alloc_rejects_zero_and_oversized),
      cmocka_unit_test(test_copy_then_checksum),
      cmocka_unit_test(test_compute_passes_same_result),
      cmocka_unit_test(test_stream_wait_orders_streams),
      cmocka_unit_test(test_event_times_monotonic),
      cmocka_unit_test(test_release_while_queued),
      cmocka_unit_test(test_destroy_with_pending_work),
      cmocka_unit_test(test_drain_is_repeatable),
      cmocka_unit_test(test_bad_copy_and_launch),
      cmocka_unit_test(test_host_register_and_null_result),
      cmocka_unit_test(test_concurrent_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
