/* Unit tests of the fake backend: the call log, statistics, completion only
 * on host_wait/drain, data movement with store_data, the reference rule
 * (deferred frees), fault injection in both modes and violation counting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/fake.h"
#include "foundry/graph.h"

#include <stdlib.h>
#include <string.h>

static fdy_backend *make_fake(const fdy_fake_options *options) {
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_fake_backend_create(options, &b, &err), FDY_OK);
  assert_non_null(b);
  return b;
}

static void fill_random(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)(x >> 24) | 1; /* non-zero */
  }
}

static void assert_all_released(const fdy_backend *b) {
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.live_events, 0);
  assert_int_equal(s.live_streams, 0);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.buffer_bytes, 0);
  assert_int_equal(s.violations, 0);
}

static void test_defaults_and_capabilities(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  assert_string_equal(fdy_backend_name(b), "fake");
  fdy_device_caps caps;
  fdy_error err;
  assert_int_equal(b->ops->capabilities(b, &caps, &err), FDY_OK);
  assert_int_equal(caps.total_memory, 16 * FDY_GIB);
  assert_int_equal(caps.max_allocation, 16 * FDY_GIB);
  assert_int_equal(caps.alignment, 256);
  assert_string_equal(caps.name, "fake");
  assert_true(b->ops->supports_op(b, FDY_OP_SYNTHETIC_CHECKSUM));
  assert_true(b->ops->supports_op(b, "llama.decoder_layer"));
  assert_int_equal(fdy_fake_call_count(b), 3);
  const fdy_fake_call *c = fdy_fake_call_at(b, 0);
  assert_int_equal(c->number, 1);
  assert_string_equal(c->op, "capabilities");
  assert_int_equal(c->status, FDY_OK);
  assert_int_equal(c->handle, -1);
  assert_null(fdy_fake_call_at(b, 3));
  assert_int_equal(fdy_fake_count_calls(b, "supports_op"), 2);
  assert_int_equal(fdy_fake_get_stats(b).calls, 3);
  fdy_backend_destroy(b);
  fdy_backend_destroy(NULL);
}

static void test_bad_options(void **state) {
  (void)state;
  fdy_backend *b = NULL;
  fdy_error err;
  fdy_fake_options o = {.caps = {.alignment = 48}};
  assert_int_equal(fdy_fake_backend_create(&o, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_null(b);
  o = (fdy_fake_options){.fail_mode = (fdy_fake_fail_mode)7};
  assert_int_equal(fdy_fake_backend_create(&o, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_backend_create(NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_buffer_log_and_stats(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  fdy_backend_buffer *x = NULL, *y = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, 1000, &x, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 24, &y, &err), FDY_OK);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 2);
  assert_int_equal(s.buffer_bytes, 1024);
  assert_int_equal(s.peak_buffer_bytes, 1024);
  const fdy_fake_call *c0 = fdy_fake_call_at(b, 0);
  const fdy_fake_call *c1 = fdy_fake_call_at(b, 1);
  assert_string_equal(c0->op, "buffer_alloc");
  assert_int_equal(c0->bytes, 1000);
  assert_true(c0->handle >= 0);
  assert_true(c1->handle >= 0 && c1->handle != c0->handle);
  int64_t x_id = c0->handle;
  b->ops->buffer_release(b, x);
  const fdy_fake_call *c2 = fdy_fake_call_at(b, 2);
  assert_string_equal(c2->op, "buffer_release");
  assert_int_equal(c2->handle, x_id);
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 1);
  assert_int_equal(s.buffer_bytes, 24);
  assert_int_equal(s.peak_buffer_bytes, 1024);
  assert_int_equal(s.deferred_frees, 0);
  b->ops->buffer_release(b, y);
  assert_all_released(b);
  assert_int_equal(b->ops->buffer_alloc(b, 0, &x, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_get_stats(b).violations, 1);
  fdy_backend_destroy(b);
}

static void test_device_memory_limits(void **state) {
  (void)state;
  fdy_fake_options o = {
      .caps = {.total_memory = 4 * FDY_MIB, .max_allocation = 2 * FDY_MIB}};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  fdy_backend_buffer *x = NULL, *y = NULL, *z = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, 2 * FDY_MIB + 1, &x, &err),
                   FDY_ERR_BACKEND);
  assert_null(x);
  assert_int_equal(b->ops->buffer_alloc(b, 2 * FDY_MIB, &x, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 2 * FDY_MIB, &y, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 1, &z, &err), FDY_ERR_BACKEND);
  assert_int_equal(err.kind, FDY_ERR_BACKEND);
  assert_int_equal(err.expected, 4 * FDY_MIB);
  assert_int_equal(fdy_fake_call_at(b, 3)->status, FDY_ERR_BACKEND);
  b->ops->buffer_release(b, x);
  b->ops->buffer_release(b, y);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* Copies and launches stay pending until a host wait or a drain; host_wait
 * completes the awaited work and everything submitted before it. */
static void test_completion_and_data(void **state) {
  (void)state;
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  enum { N = 1000 };
  unsigned char *data = malloc(N);
  fill_random(data, N, 7);
  fdy_backend_stream *copy = NULL, *compute = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *e1 = NULL, *e2 = NULL, *e3 = NULL;
  assert_int_equal(b->ops->stream_create(b, &copy, &err), FDY_OK);
  assert_int_equal(b->ops->stream_create(b, &compute, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 1024, &buf, &err), FDY_OK);
  /* A gather: two copies at different offsets. */
  assert_int_equal(
      b->ops->copy_to_device(b, copy, buf, 0, data, 600, &e1, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, copy, buf, 600, data + 600, N - 600, &e2, &err),
      FDY_OK);
  assert_int_equal(b->ops->stream_wait(b, compute, e2, &err), FDY_OK);
  uint64_t result = 0;
  fdy_launch_desc desc = {.kind = FDY_OP_SYNTHETIC_CHECKSUM,
                          .weight_count = 1,
                          .weights = {{.buffer = buf, .bytes = N}},
                          .result = &result};
  assert_int_equal(b->ops->launch(b, compute, &desc, &e3, &err), FDY_OK);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 3);
  assert_int_equal(s.live_events, 3);
  assert_int_equal(result, 0);
  fdy_event_times t;
  assert_int_equal(b->ops->event_times(b, e3, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  assert_int_equal(b->ops->host_wait(b, e1, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 2);
  assert_int_equal(result, 0);
  assert_int_equal(b->ops->host_wait(b, e3, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  assert_int_equal(result, fdy_checksum(data, N));
  assert_int_equal(b->ops->event_times(b, e3, &t, &err), FDY_OK);
  assert_true(t.start_ns <= t.end_ns);
  /* Waiting again on a completed event is fine. */
  assert_int_equal(b->ops->host_wait(b, e1, &err), FDY_OK);

  b->ops->event_release(b, e1);
  b->ops->event_release(b, e2);
  b->ops->event_release(b, e3);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  assert_all_released(b);
  assert_int_equal(fdy_fake_get_stats(b).deferred_frees, 0);
  free(data);
  fdy_backend_destroy(b);
}

/* The reference rule: a buffer (and an event) released while a launch
 * reading it is pending stays alive until that launch completes. */
static void test_deferred_free(void **state) {
  (void)state;
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char data[256];
  fill_random(data, sizeof(data), 3);
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *copied = NULL, *ran = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 256, &buf, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, st, buf, 0, data, sizeof(data), &copied, &err),
      FDY_OK);
  uint64_t result = 0;
  fdy_launch_desc desc = {.kind = FDY_OP_SYNTHETIC_CHECKSUM,
                          .weight_count = 1,
                          .weights = {{.buffer = buf, .bytes = 256}},
                          .result = &result};
  assert_int_equal(b->ops->launch(b, st, &desc, &ran, &err), FDY_OK);
  b->ops->buffer_release(b, buf);
  b->ops->event_release(b, copied);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 1);
  assert_int_equal(s.buffer_bytes, 256);
  assert_int_equal(s.live_events, 2);
  assert_int_equal(s.deferred_frees, 0);
  assert_int_equal(b->ops->host_wait(b, ran, &err), FDY_OK);
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.deferred_frees, 1);
  assert_int_equal(s.live_events, 1);
  assert_int_equal(result, fdy_checksum(data, sizeof(data)));
  b->ops->event_release(b, ran);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_fail_before_submit(void **state) {
  (void)state;
  /* calls: 1 stream_create, 2 buffer_alloc, 3 copy_to_device */
  fdy_fake_options o = {.fail_at_call = 3,
                        .fail_mode = FDY_FAKE_FAIL_BEFORE_SUBMIT};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char data[64] = {1};
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 64, &buf, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, st, buf, 0, data, sizeof(data), &ev, &err),
      FDY_ERR_BACKEND);
  assert_int_equal(err.kind, FDY_ERR_BACKEND);
  assert_null(ev);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  assert_int_equal(fdy_fake_call_at(b, 2)->status, FDY_ERR_BACKEND);
  /* Only call 3 fails. */
  assert_int_equal(
      b->ops->copy_to_device(b, st, buf, 0, data, sizeof(data), &ev, &err),
      FDY_OK);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  b->ops->event_release(b, ev);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_fail_after_submit(void **state) {
  (void)state;
  /* calls: 1 stream_create, 2 buffer_alloc, 3 launch */
  fdy_fake_options o = {.fail_at_call = 3,
                        .fail_mode = FDY_FAKE_FAIL_AFTER_SUBMIT,
                        .store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 64, &buf, &err), FDY_OK);
  uint64_t result = 0;
  fdy_launch_desc desc = {.kind = FDY_OP_SYNTHETIC_CHECKSUM,
                          .weight_count = 1,
                          .weights = {{.buffer = buf, .bytes = 64}},
                          .result = &result};
  assert_int_equal(b->ops->launch(b, st, &desc, &ev, &err), FDY_ERR_BACKEND);
  assert_null(ev);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 1);
  assert_int_equal(s.live_events, 1); /* held by the work, not the caller */
  b->ops->buffer_release(b, buf);
  assert_int_equal(fdy_fake_get_stats(b).live_buffers, 1);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.drains, 1);
  assert_int_equal(s.deferred_frees, 1);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_fail_host_wait_after_submit(void **state) {
  (void)state;
  /* calls: 1 stream_create, 2 buffer_alloc, 3 copy, 4 host_wait */
  fdy_fake_options o = {.fail_at_call = 4,
                        .fail_mode = FDY_FAKE_FAIL_AFTER_SUBMIT};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char data[8] = {9};
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 8, &buf, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, st, buf, 0, data, 8, &ev, &err),
                   FDY_OK);
  assert_int_equal(b->ops->host_wait(b, ev, &err), FDY_ERR_BACKEND);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  b->ops->event_release(b, ev);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_fail_drain(void **state) {
  (void)state;
  fdy_fake_options o = {.fail_drain = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char data[8] = {9};
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 8, &buf, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, st, buf, 0, data, 8, &ev, &err),
                   FDY_OK);
  assert_int_equal(b->ops->drain(b, &err), FDY_ERR_BACKEND);
  assert_int_equal(err.kind, FDY_ERR_BACKEND);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.drains, 1);
  b->ops->event_release(b, ev);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_unsupported_kind(void **state) {
  (void)state;
  char kind[] = "llama.decoder_layer";
  fdy_fake_options o = {.unsupported_kind = kind};
  fdy_backend *b = make_fake(&o);
  kind[0] = 'X'; /* the backend keeps its own copy */
  fdy_error err;
  assert_false(b->ops->supports_op(b, "llama.decoder_layer"));
  assert_true(b->ops->supports_op(b, FDY_OP_SYNTHETIC_CHECKSUM));
  assert_int_equal(fdy_fake_call_at(b, 0)->status, FDY_ERR_UNSUPPORTED);
  fdy_backend_stream *st = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  fdy_launch_desc desc = {.kind = "llama.decoder_layer"};
  assert_int_equal(b->ops->launch(b, st, &desc, &ev, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(ev);
  b->ops->stream_destroy(b, st);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

static void test_host_registration(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  unsigned char data[32];
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->host_register(b, data, sizeof(data), &h, &err),
                   FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).live_hosts, 1);
  assert_int_equal(fdy_fake_call_at(b, 0)->bytes, sizeof(data));
  b->ops->host_unregister(b, h);
  assert_int_equal(b->ops->host_register(b, NULL, 4, &h, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.violations, 1);
  fdy_backend_destroy(b);
}

/* Misuse is caught on tombstones, counted, and never touches freed memory. */
static void test_violations(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  unsigned char data[8] = {1};
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 8, &buf, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, st, buf, 4, data, 8, &ev, &err),
                   FDY_ERR_INVALID_ARGUMENT); /* out of range */
  assert_int_equal(b->ops->copy_to_device(b, st, buf, 0, data, 8, &ev, &err),
                   FDY_OK);
  b->ops->event_release(b, ev);
  assert_int_equal(b->ops->host_wait(b, ev, &err), FDY_ERR_INVALID_ARGUMENT);
  b->ops->event_release(b, ev);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, st); /* with pending work */
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.violations, 5);
  assert_int_equal(s.live_streams, 0);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.live_events, 0);
  fdy_backend_destroy(b);
}

/* Destroy drains and frees whatever the caller left behind. */
static void test_destroy_with_outstanding_work(void **state) {
  (void)state;
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char data[16] = {5};
  fdy_backend_stream *st = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *ev = NULL;
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->stream_create(b, &st, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 16, &buf, &err), FDY_OK);
  assert_int_equal(b->ops->host_register(b, data, 16, &h, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, st, buf, 0, data, 16, &ev, &err),
                   FDY_OK);
  fdy_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_and_capabilities),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_buffer_log_and_stats),
      cmocka_unit_test(test_device_memory_limits),
      cmocka_unit_test(test_completion_and_data),
      cmocka_unit_test(test_deferred_free),
      cmocka_unit_test(test_fail_before_submit),
      cmocka_unit_test(test_fail_after_submit),
      cmocka_unit_test(test_fail_host_wait_after_submit),
      cmocka_unit_test(test_fail_drain),
      cmocka_unit_test(test_unsupported_kind),
      cmocka_unit_test(test_host_registration),
      cmocka_unit_test(test_violations),
      cmocka_unit_test(test_destroy_with_outstanding_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
