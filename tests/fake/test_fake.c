/* Unit tests of the fake backend: the call log and statistics, completion
 * only on host_wait/drain (per stream, through stream waits, events
 * recorded many times), data movement in both directions and the checksum
 * op with store_data, the reference rule (deferred frees), unsupported
 * kinds, the workspace option, violation counting, and store_data copies
 * from and to a truncated file mapping (FDY_ERR_IO at host_wait or drain,
 * the backend usable after drain), and graphs (recording, replay with
 * joined streams and fresh host data, refusals and misuse). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fault/chain_scenario.h"
#include "foundry/checksum.h"
#include "foundry/fake.h"
#include "shrunk_mapping.h"

#include <stdlib.h>
#include <string.h>

static fdy_backend *make_fake(const fdy_fake_options *options) {
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_fake_backend_create(options, &b, &err), FDY_OK);
  assert_non_null(b);
  return b;
}

static fdy_backend *make_storing(void) {
  fdy_fake_options o = {.store_data = true};
  return make_fake(&o);
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

static fdy_backend_stream *new_stream(fdy_backend *b) {
  fdy_backend_stream *s = NULL;
  assert_int_equal(b->ops->stream_create(b, &s, NULL), FDY_OK);
  return s;
}

static fdy_backend_buffer *new_buffer(fdy_backend *b, uint64_t bytes) {
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, bytes, &buf, NULL), FDY_OK);
  return buf;
}

static fdy_backend_event *new_event(fdy_backend *b) {
  fdy_backend_event *e = NULL;
  assert_int_equal(b->ops->event_create(b, &e, NULL), FDY_OK);
  return e;
}

static void record(fdy_backend *b, fdy_backend_stream *s,
                   fdy_backend_event *e) {
  assert_int_equal(b->ops->event_record(b, s, e, NULL), FDY_OK);
}

static void to_device(fdy_backend *b, fdy_backend_stream *s,
                      fdy_backend_buffer *dst, uint64_t offset, const void *src,
                      uint64_t bytes) {
  assert_int_equal(b->ops->copy_to_device(b, s, dst, offset, src, bytes, NULL),
                   FDY_OK);
}

/* ---- basics -------------------------------------------------------------- */

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
  for (int k = 0; k < FDY_OP_KIND_COUNT; k++) {
    fdy_op op = {.kind = (fdy_op_kind)k};
    assert_true(b->ops->supports_op(b, &op));
  }
  fdy_op add = {.kind = FDY_OP_ADD};
  assert_int_equal(b->ops->workspace_bytes(b, &add), 0);
  assert_int_equal(fdy_fake_call_count(b), 2 + FDY_OP_KIND_COUNT);
  const fdy_fake_call *c = fdy_fake_call_at(b, 0);
  assert_int_equal(c->number, 1);
  assert_string_equal(c->op, "capabilities");
  assert_int_equal(c->status, FDY_OK);
  assert_int_equal(c->handle, -1);
  assert_int_equal(c->stream, -1);
  assert_int_equal(c->op_kind, -1);
  c = fdy_fake_call_at(b, 1 + FDY_OP_ARGMAX);
  assert_string_equal(c->op, "supports_op");
  assert_int_equal(c->op_kind, FDY_OP_ARGMAX);
  c = fdy_fake_call_at(b, 1 + FDY_OP_KIND_COUNT);
  assert_string_equal(c->op, "workspace_bytes");
  assert_int_equal(c->op_kind, FDY_OP_ADD);
  assert_null(fdy_fake_call_at(b, 2 + FDY_OP_KIND_COUNT));
  assert_int_equal(fdy_fake_count_calls(b, "supports_op"), FDY_OP_KIND_COUNT);
  assert_int_equal(fdy_fake_count_calls(b, NULL), 0);
  assert_int_equal(fdy_fake_get_stats(b).calls, 2 + FDY_OP_KIND_COUNT);
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
  o = (fdy_fake_options){.unsupported_kinds =
                             FDY_FAKE_KIND_BIT(FDY_OP_KIND_COUNT)};
  assert_int_equal(fdy_fake_backend_create(&o, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(b);
  assert_int_equal(fdy_fake_backend_create(NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
}

static void test_buffer_log_and_stats(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  fdy_backend_buffer *x = new_buffer(b, 1000);
  fdy_backend_buffer *y = new_buffer(b, 24);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 2);
  assert_int_equal(s.buffer_allocs, 2);
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
  assert_string_equal(err.backend_op, "buffer_alloc");
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.violations, 1);
  assert_int_equal(s.buffer_allocs, 2);
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
  assert_string_equal(err.backend_op, "buffer_alloc");
  assert_int_equal(fdy_fake_call_at(b, 3)->status, FDY_ERR_BACKEND);
  assert_int_equal(fdy_fake_get_stats(b).buffer_allocs, 2);
  b->ops->buffer_release(b, x);
  b->ops->buffer_release(b, y);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* ---- completion and data ------------------------------------------------- */

/* A gather of two copies, a chained checksum launch after a stream wait and
 * a copy back: nothing moves until the host waits, and a host wait on the
 * copy stream's event completes the copies only. */
static void test_completion_and_data(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  fdy_error err;
  enum { N = 1000 };
  unsigned char *data = chain_random_bytes(N, 7);
  assert_non_null(data);
  const uint64_t prev_value = 0x1234567890ABCDEFull;
  uint64_t result = 0;
  fdy_backend_stream *copy = new_stream(b), *compute = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 1024);
  fdy_backend_buffer *words = new_buffer(b, 512); /* prev at 0, out at 256 */
  fdy_backend_event *copied = new_event(b), *done = new_event(b);
  to_device(b, copy, buf, 0, data, 600);
  to_device(b, copy, buf, 600, data + 600, N - 600);
  to_device(b, copy, words, 0, &prev_value, sizeof(prev_value));
  record(b, copy, copied);
  assert_int_equal(b->ops->stream_wait(b, compute, copied, &err), FDY_OK);
  fdy_tensor_view prev = chain_view(words, 0, FDY_DTYPE_U64, 1);
  fdy_op op = chain_checksum_op(buf, N, &prev,
                                chain_view(words, 256, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, compute, &op, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_host(b, compute, &result, words, 256, 8, &err), FDY_OK);
  record(b, compute, done);

  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 5);
  assert_int_equal(s.copies_to_device, 3);
  assert_int_equal(s.bytes_to_device, N + 8);
  assert_int_equal(s.copies_to_host, 1);
  assert_int_equal(s.bytes_to_host, 8);
  assert_int_equal(s.launches, 1);
  assert_int_equal(s.launches_by_kind[FDY_OP_CHECKSUM], 1);
  assert_int_equal(s.event_records, 2);
  assert_int_equal(s.stream_waits, 1);
  int64_t t = 0;
  assert_int_equal(b->ops->event_time(b, done, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  assert_int_equal(b->ops->host_wait(b, copied, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 2);
  assert_int_equal(result, 0);
  int64_t t_copied = 0;
  assert_int_equal(b->ops->event_time(b, copied, &t_copied, &err), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, done, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  assert_int_equal(result,
                   fdy_checksum(data, N) + prev_value * FDY_CHAIN_PRIME);
  assert_int_equal(b->ops->event_time(b, done, &t, &err), FDY_OK);
  assert_true(t_copied > 0 && t_copied <= t);
  /* waiting again on a completed recording is fine */
  assert_int_equal(b->ops->host_wait(b, copied, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).host_waits, 3);

  /* the launch is logged with its stream, kind, input bytes and output */
  size_t i = 0;
  while (strcmp(fdy_fake_call_at(b, i)->op, "launch") != 0) {
    i++;
  }
  const fdy_fake_call *c = fdy_fake_call_at(b, i);
  assert_int_equal(c->op_kind, FDY_OP_CHECKSUM);
  assert_int_equal(c->bytes, N + 8);
  assert_true(c->stream >= 0 && c->handle >= 0);

  b->ops->event_destroy(b, copied);
  b->ops->event_destroy(b, done);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, words);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  assert_all_released(b);
  assert_int_equal(fdy_fake_get_stats(b).deferred_frees, 0);
  free(data);
  fdy_backend_destroy(b);
}

/* Streams complete independently: a host wait on one stream's event does
 * not complete another stream's work it was not ordered after. */
static void test_streams_independent(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  unsigned char x[64] = {1}, y[64] = {2};
  fdy_backend_stream *s1 = new_stream(b), *s2 = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 512);
  fdy_backend_event *e1 = new_event(b), *e2 = new_event(b);
  to_device(b, s1, buf, 0, x, sizeof(x));
  record(b, s1, e1);
  to_device(b, s2, buf, 256, y, sizeof(y));
  record(b, s2, e2);
  assert_int_equal(b->ops->host_wait(b, e2, NULL), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 1);
  assert_int_equal(b->ops->host_wait(b, e1, NULL), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  unsigned char back[64];
  assert_int_equal(b->ops->copy_to_host(b, s1, back, buf, 256, 64, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  assert_memory_equal(back, y, 64);
  /* an event recorded on a stream with nothing pending is complete */
  record(b, s2, e2);
  int64_t t = 0;
  assert_int_equal(b->ops->event_time(b, e2, &t, NULL), FDY_OK);
  b->ops->event_destroy(b, e1);
  b->ops->event_destroy(b, e2);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s1);
  b->ops->stream_destroy(b, s2);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* One event recorded again and again: a stream wait orders after the
 * recording current at the wait, a host wait completes the current one. */
static void test_event_rerecorded(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  unsigned char a[64] = {3}, c[64] = {4};
  fdy_backend_stream *s1 = new_stream(b), *s2 = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 512);
  fdy_backend_event *e = new_event(b), *f = new_event(b);
  to_device(b, s1, buf, 0, a, sizeof(a)); /* A */
  record(b, s1, e);                       /* e = after A */
  assert_int_equal(b->ops->stream_wait(b, s2, e, NULL), FDY_OK);
  to_device(b, s1, buf, 0, c, sizeof(c)); /* C, after the wait */
  record(b, s1, e);                       /* e = after C */
  unsigned char back[64] = {0};
  assert_int_equal(b->ops->copy_to_host(b, s2, back, buf, 0, 64, NULL), FDY_OK);
  record(b, s2, f);
  /* s2's copy waits for A only: C is still pending afterwards */
  assert_int_equal(b->ops->host_wait(b, f, NULL), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 1);
  assert_memory_equal(back, a, 64);
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).pending_work, 0);
  b->ops->event_destroy(b, e);
  b->ops->event_destroy(b, f);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s1);
  b->ops->stream_destroy(b, s2);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* Kinds other than the checksum write nothing, with store_data too. */
static void test_other_kinds_write_nothing(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 1024);
  fdy_op op = {.kind = FDY_OP_ADD, .input_count = 3, .output_count = 1};
  op.inputs[0] = chain_view(buf, 0, FDY_DTYPE_I32, 2);
  op.inputs[1] = (fdy_tensor_view){.buffer = buf,
                                   .offset = 256,
                                   .dtype = FDY_DTYPE_F32,
                                   .shape = {2, {1, 4}}};
  op.inputs[2] = op.inputs[1];
  op.inputs[2].offset = 512;
  op.outputs[0] = op.inputs[1];
  op.outputs[0].offset = 768;
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  unsigned char back[16];
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 768, 16, NULL),
                   FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < 16; i++) {
    assert_int_equal(back[i], 0xA5);
  }
  assert_int_equal(fdy_fake_get_stats(b).launches_by_kind[FDY_OP_ADD], 1);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* The reference rule: a buffer released while a launch reading it is
 * pending keeps its memory until that launch completes. */
static void test_deferred_free(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  unsigned char data[256];
  for (int i = 0; i < 256; i++) {
    data[i] = (unsigned char)(i * 7 + 1);
  }
  uint64_t result = 0;
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 256);
  fdy_backend_buffer *out = new_buffer(b, 256);
  fdy_backend_event *ran = new_event(b);
  to_device(b, s, buf, 0, data, sizeof(data));
  fdy_op op = chain_checksum_op(buf, 256, NULL,
                                chain_view(out, 0, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, &result, out, 0, 8, NULL),
                   FDY_OK);
  record(b, s, ran);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, out);
  fdy_fake_stats st = fdy_fake_get_stats(b);
  assert_int_equal(st.live_buffers, 2);
  assert_int_equal(st.buffer_bytes, 512);
  assert_int_equal(st.deferred_frees, 0);
  assert_int_equal(b->ops->host_wait(b, ran, NULL), FDY_OK);
  st = fdy_fake_get_stats(b);
  assert_int_equal(st.live_buffers, 0);
  assert_int_equal(st.deferred_frees, 2);
  assert_int_equal(result, fdy_checksum(data, sizeof(data)));
  b->ops->event_destroy(b, ran);
  b->ops->stream_destroy(b, s);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* ---- options ------------------------------------------------------------- */

static void test_unsupported_kinds(void **state) {
  (void)state;
  fdy_fake_options o = {.unsupported_kinds =
                            FDY_FAKE_KIND_BIT(FDY_OP_CHECKSUM) |
                            FDY_FAKE_KIND_BIT(FDY_OP_ATTENTION)};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  fdy_op attention = {.kind = FDY_OP_ATTENTION};
  fdy_op add = {.kind = FDY_OP_ADD};
  assert_false(b->ops->supports_op(b, &attention));
  assert_true(b->ops->supports_op(b, &add));
  assert_int_equal(fdy_fake_call_at(b, 0)->status, FDY_ERR_UNSUPPORTED);
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 512);
  fdy_op op = chain_checksum_op(buf, 256, NULL,
                                chain_view(buf, 256, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "launch");
  fdy_fake_stats st = fdy_fake_get_stats(b);
  assert_int_equal(st.launches, 0);
  assert_int_equal(st.pending_work, 0);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  assert_all_released(b);
  fdy_backend_destroy(b);
}

/* workspace_bytes asks for scratch; a launch must bring that much. */
static void test_workspace(void **state) {
  (void)state;
  fdy_fake_options o = {.workspace_bytes = 1000};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 512);
  fdy_backend_buffer *scratch = new_buffer(b, 1024);
  fdy_op op = chain_checksum_op(buf, 256, NULL,
                                chain_view(buf, 256, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->workspace_bytes(b, &op), 1000);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op.workspace = chain_view(scratch, 0, FDY_DTYPE_U8, 999);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_get_stats(b).violations, 2);
  op.workspace = chain_view(scratch, 0, FDY_DTYPE_U8, 1000);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_OK);
  /* the workspace is referenced by the pending launch too */
  b->ops->buffer_release(b, scratch);
  assert_int_equal(fdy_fake_get_stats(b).live_buffers, 2);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).deferred_frees, 1);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  fdy_fake_stats st = fdy_fake_get_stats(b);
  assert_int_equal(st.violations, 2);
  assert_int_equal(st.live_buffers, 0);
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
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_hosts, 1);
  assert_int_equal(s.host_registrations, 1);
  assert_int_equal(fdy_fake_call_at(b, 0)->bytes, sizeof(data));
  b->ops->host_unregister(b, h);
  assert_int_equal(b->ops->host_register(b, NULL, 4, &h, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.host_registrations, 1);
  assert_int_equal(s.violations, 1);
  fdy_backend_destroy(b);
}

/* A chain run many rounds: every object is made before the first round,
 * and each round adds one launch per op and no allocation. */
static void test_rounds_allocate_nothing(void **state) {
  (void)state;
  enum { LAYERS = 3, ROUNDS = 20 };
  unsigned char *data[LAYERS];
  for (int i = 0; i < LAYERS; i++) {
    data[i] = chain_random_bytes(2048, 90 + (uint64_t)i);
  }
  chain_spec spec = {.layers = LAYERS,
                     .layer_bytes = 2048,
                     .data = (const unsigned char *const *)data,
                     .slots = 2,
                     .rounds = ROUNDS,
                     .register_host = true};
  fdy_backend *b = make_storing();
  fdy_error err;
  uint64_t result = 0;
  assert_int_equal(chain_run(b, &spec, &result, &err), FDY_OK);
  assert_int_equal(result, chain_expected(&spec));
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.launches, LAYERS * ROUNDS);
  assert_int_equal(s.buffer_allocs, 3);
  assert_int_equal(s.streams_created, 2);
  assert_int_equal(s.events_created, 5);
  assert_int_equal(s.host_registrations, LAYERS + 1);
  assert_int_equal(s.copies_to_host, ROUNDS);
  assert_all_released(b);
  /* every allocation, registration and creation came before the first
   * launch */
  size_t first_launch = 0;
  while (strcmp(fdy_fake_call_at(b, first_launch)->op, "launch") != 0) {
    first_launch++;
  }
  for (size_t i = first_launch; i < fdy_fake_call_count(b); i++) {
    const char *op = fdy_fake_call_at(b, i)->op;
    assert_true(
        strcmp(op, "buffer_alloc") != 0 && strcmp(op, "host_register") != 0 &&
        strcmp(op, "event_create") != 0 && strcmp(op, "stream_create") != 0);
  }
  fdy_backend_destroy(b);
  for (int i = 0; i < LAYERS; i++) {
    free(data[i]);
  }
}

/* ---- violations ---------------------------------------------------------- */

/* Misuse is caught on tombstones, counted, and never touches freed memory. */
static void test_violations(void **state) {
  (void)state;
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  unsigned char data[8] = {1};
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 512);
  fdy_backend_event *e = new_event(b), *never = new_event(b);
  uint64_t v = 0;
  /* 1: a copy out of range */
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 508, data, 8, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "copy_to_device");
  /* 2, 3: waits on an event never recorded */
  assert_int_equal(b->ops->host_wait(b, never, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_wait(b, s, never, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* 4: an op that fails fdy_op_check (data not whole words) */
  fdy_op bad = chain_checksum_op(buf, 7, NULL,
                                 chain_view(buf, 256, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, s, &bad, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "launch");
  /* 5: a view at an offset that is not a multiple of the alignment */
  fdy_op misaligned = chain_checksum_op(
      buf, 8, NULL, chain_view(buf, 264, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, s, &misaligned, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* 6: a view outside its buffer */
  fdy_op outside = chain_checksum_op(buf, 512, NULL,
                                     chain_view(buf, 512, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, s, &outside, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_get_stats(b).launches, 0);
  /* pending work and a pending recording */
  to_device(b, s, buf, 0, data, 8);
  record(b, s, e);
  /* 7: an event destroyed while its recording is pending */
  b->ops->event_destroy(b, e);
  /* 8: a host wait on the destroyed event */
  assert_int_equal(b->ops->host_wait(b, e, &err), FDY_ERR_INVALID_ARGUMENT);
  /* 9: destroyed twice */
  b->ops->event_destroy(b, e);
  b->ops->buffer_release(b, buf);
  /* 10: released twice */
  b->ops->buffer_release(b, buf);
  /* 11: a copy into the released buffer */
  assert_int_equal(b->ops->copy_to_host(b, s, &v, buf, 0, 8, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* 12: a stream destroyed with pending work */
  b->ops->stream_destroy(b, s);
  /* 13: a launch on the destroyed stream */
  assert_int_equal(b->ops->launch(b, s, &bad, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_fake_stats st = fdy_fake_get_stats(b);
  assert_int_equal(st.violations, 13);
  assert_int_equal(st.live_streams, 0);
  assert_int_equal(st.live_buffers, 1); /* the copy still holds it */
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  st = fdy_fake_get_stats(b);
  assert_int_equal(st.pending_work, 0);
  assert_int_equal(st.live_buffers, 0);
  assert_int_equal(st.deferred_frees, 1);
  b->ops->event_destroy(b, never);
  assert_int_equal(fdy_fake_get_stats(b).live_events, 0);
  fdy_backend_destroy(b);
}

/* Destroy completes and frees whatever the caller left behind. */
static void test_destroy_with_outstanding_work(void **state) {
  (void)state;
  fdy_backend *b = make_storing();
  unsigned char data[16] = {5};
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 16);
  fdy_backend_event *e = new_event(b);
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->host_register(b, data, 16, &h, NULL), FDY_OK);
  to_device(b, s, buf, 0, data, 16);
  record(b, s, e);
  fdy_backend_destroy(b);
}

/* A copy from the page of a mapping whose file is gone fails when it
 * completes: host_wait returns FDY_ERR_IO (copy_to_device) until a drain,
 * which does not report it again; a failure no host_wait saw is drain's
 * (copy_to_host into the gone page); good copies work after drain. */
static void test_truncated_mapping(void **state) {
  (void)state;
  shrunk_mapping m;
  assert_int_equal(shrunk_make(&m, true), 0);
  fdy_backend *b = make_storing();
  fdy_backend_stream *s = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 64);
  fdy_backend_event *e = new_event(b);
  fdy_error err;
  to_device(b, s, buf, 0, m.map + m.page, 64);
  record(b, s, e);
  fdy_error_clear(&err);
  assert_int_equal(b->ops->host_wait(b, e, &err), FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_ERR_IO);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_host(b, s, m.map + 2 * m.page, buf, 0, 64, NULL), FDY_OK);
  fdy_error_clear(&err);
  assert_int_equal(b->ops->drain(b, &err), FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_host");
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  unsigned char good[64], back[64];
  memset(good, 0x3c, sizeof good);
  to_device(b, s, buf, 0, good, sizeof good);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, sizeof back, NULL),
                   FDY_OK);
  record(b, s, e);
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  assert_memory_equal(back, good, sizeof good);
  b->ops->event_destroy(b, e);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  assert_all_released(b);
  fdy_backend_destroy(b);
  shrunk_remove(&m);
}

/* ---- graphs ---------------------------------------------------------------
 */

static fdy_backend_host *registered(fdy_backend *b, const void *p,
                                    uint64_t bytes) {
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->host_register(b, p, bytes, &h, NULL), FDY_OK);
  return h;
}

/* Calls between graph_begin and graph_end are recorded, not run; each
 * launch of the graph runs them again, reading the host memory anew, after
 * the earlier work of every graph stream and before later work on any. */
static void test_graph_record_and_replay(void **state) {
  (void)state;
  fdy_fake_options o = {.store_data = true, .graphs = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  assert_non_null(b->ops->graph_begin);
  unsigned char *data = chain_random_bytes(512, 3);
  uint64_t *result = calloc(1, 4096);
  assert_non_null(data);
  assert_non_null(result);
  fdy_backend_host *hd = registered(b, data, 512);
  fdy_backend_host *hr = registered(b, result, 4096);
  fdy_backend_stream *copy = new_stream(b), *compute = new_stream(b);
  fdy_backend_stream *streams[2] = {compute, copy};
  fdy_backend_buffer *buf = new_buffer(b, 512), *out = new_buffer(b, 256);
  fdy_backend_event *copied = new_event(b), *done = new_event(b);

  assert_int_equal(b->ops->graph_begin(b, streams, 2, &err), FDY_OK);
  to_device(b, copy, buf, 0, data, 512);
  record(b, copy, copied);
  assert_int_equal(b->ops->stream_wait(b, compute, copied, &err), FDY_OK);
  fdy_op op = chain_checksum_op(buf, 512, NULL,
                                chain_view(out, 0, FDY_DTYPE_U64, 1), 1);
  assert_int_equal(b->ops->launch(b, compute, &op, &err), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, compute, result, out, 0, 8, &err),
                   FDY_OK);
  fdy_backend_graph *graph = NULL;
  assert_int_equal(b->ops->graph_end(b, &graph, &err), FDY_OK);
  assert_non_null(graph);
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.recorded_calls, 5);
  assert_int_equal(s.launches, 0);
  assert_int_equal(s.copies_to_device, 0);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.live_graphs, 1);
  assert_true(fdy_fake_call_at(b, fdy_fake_call_count(b) - 2)->recorded);
  assert_false(fdy_fake_call_at(b, fdy_fake_call_count(b) - 1)->recorded);

  for (int round = 0; round < 3; round++) {
    data[7] = (unsigned char)(round + 1);
    *result = 0;
    assert_int_equal(b->ops->graph_launch(b, graph, &err), FDY_OK);
    /* the copy stream's event after the graph covers the compute stream's
     * work of the graph (the streams are joined) */
    record(b, copy, done);
    assert_int_equal(b->ops->host_wait(b, done, &err), FDY_OK);
    assert_int_equal(*result, fdy_checksum(data, 512));
  }
  s = fdy_fake_get_stats(b);
  assert_int_equal(s.graph_launches, 3);
  assert_int_equal(s.launches, 3);
  assert_int_equal(s.copies_to_device, 3);
  assert_int_equal(s.copies_to_host, 3);
  assert_int_equal(s.pending_work, 0);

  b->ops->graph_destroy(b, graph);
  b->ops->event_destroy(b, copied);
  b->ops->event_destroy(b, done);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, out);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  b->ops->host_unregister(b, hd);
  b->ops->host_unregister(b, hr);
  assert_all_released(b);
  assert_int_equal(fdy_fake_get_stats(b).live_graphs, 0);
  free(data);
  free(result);
  fdy_backend_destroy(b);
}

/* Without the option the entries are absent; a copy from unregistered
 * memory is refused (FDY_ERR_UNSUPPORTED) and fails graph_end; misuse is
 * counted, a replay of released buffers too. */
static void test_graph_refusals_and_violations(void **state) {
  (void)state;
  fdy_backend *plain = make_fake(NULL);
  assert_null(plain->ops->graph_begin);
  assert_null(plain->ops->graph_launch);
  fdy_backend_destroy(plain);

  fdy_fake_options o = {.graphs = true};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  unsigned char host[64] = {1};
  fdy_backend_stream *s = new_stream(b), *other = new_stream(b);
  fdy_backend_buffer *buf = new_buffer(b, 256);
  fdy_backend_event *e = new_event(b);
  fdy_backend_graph *graph = NULL;

  assert_int_equal(b->ops->graph_begin(b, &s, 1, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, 0, host, sizeof host, &err),
      FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "copy_to_device");
  assert_int_equal(b->ops->graph_end(b, &graph, &err), FDY_ERR_UNSUPPORTED);
  assert_null(graph);
  assert_int_equal(fdy_fake_get_stats(b).violations, 0);

  fdy_backend_stream *twice[2] = {s, s};
  assert_int_equal(b->ops->graph_begin(b, twice, 2, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->graph_end(b, &graph, &err),
                   FDY_ERR_INVALID_ARGUMENT); /* nothing recording */
  assert_int_equal(b->ops->graph_begin(b, &s, 1, &err), FDY_OK);
  assert_int_equal(b->ops->graph_begin(b, &s, 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  record(b, s, e);
  assert_int_equal(b->ops->host_wait(b, e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->event_record(b, other, e, &err),
                   FDY_ERR_INVALID_ARGUMENT); /* not a recorded stream */
  assert_int_equal(b->ops->graph_end(b, &graph, &err), FDY_OK);
  assert_int_equal(fdy_fake_get_stats(b).violations, 5);
  /* the event was only recorded inside the recording: waiting on it
   * outside is waiting on an event never recorded */
  assert_int_equal(b->ops->stream_wait(b, other, e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  b->ops->graph_destroy(b, graph);
  b->ops->graph_destroy(b, graph);
  assert_int_equal(b->ops->graph_launch(b, graph, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_get_stats(b).violations, 8);
  assert_int_equal(fdy_fake_get_stats(b).live_graphs, 0);
  /* a replay whose buffer was released */
  fdy_backend_host *h = registered(b, host, sizeof host);
  assert_int_equal(b->ops->graph_begin(b, &s, 1, &err), FDY_OK);
  to_device(b, s, buf, 0, host, sizeof host);
  assert_int_equal(b->ops->graph_end(b, &graph, &err), FDY_OK);
  b->ops->buffer_release(b, buf);
  assert_int_equal(b->ops->graph_launch(b, graph, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_get_stats(b).violations, 9);
  assert_int_equal(fdy_fake_get_stats(b).copies_to_device, 0);
  b->ops->graph_destroy(b, graph);
  b->ops->host_unregister(b, h);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  b->ops->stream_destroy(b, other);
  fdy_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_and_capabilities),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_buffer_log_and_stats),
      cmocka_unit_test(test_device_memory_limits),
      cmocka_unit_test(test_completion_and_data),
      cmocka_unit_test(test_streams_independent),
      cmocka_unit_test(test_event_rerecorded),
      cmocka_unit_test(test_other_kinds_write_nothing),
      cmocka_unit_test(test_deferred_free),
      cmocka_unit_test(test_unsupported_kinds),
      cmocka_unit_test(test_workspace),
      cmocka_unit_test(test_host_registration),
      cmocka_unit_test(test_rounds_allocate_nothing),
      cmocka_unit_test(test_violations),
      cmocka_unit_test(test_destroy_with_outstanding_work),
      cmocka_unit_test(test_truncated_mapping),
      cmocka_unit_test(test_graph_record_and_replay),
      cmocka_unit_test(test_graph_refusals_and_violations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
