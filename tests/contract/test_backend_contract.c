/* The backend contract suite: the same cases run against every backend,
 * each made by name through the registry (foundry/registry.h): fake (with
 * store_data, so copies move bytes and CHECKSUM writes its result), cpu,
 * fault wrapping cpu (never failing: a transparent wrapper passes every
 * case), and cuda when a device is there. Outputs are written between
 * sentinels, on the device and on the host, and checked untouched.
 *
 * Cases: capabilities; copies both ways at offsets, in pieces; CHECKSUM
 * against fdy_checksum on random non-zero data, with and without a previous
 * link, any number of passes; one event recorded again for every layer
 * ordering two streams; a stream wait for the recording current when it was
 * called; event times; the reference rule (buffers released while queued
 * work uses them); destroy with work pending; drain repeated; bad copies,
 * events and launches refused before anything is queued (the backend works
 * afterwards); copies from and to registered host memory; a copy from a
 * file mapping whose file was truncated (FDY_ERR_IO from copy_to_device, at
 * the copy or at the wait, and the backend works after a drain); the
 * checksum chain of tests/fault/chain_scenario.h.
 *
 * What differs between backends is asked of the backend (its alignment,
 * its workspace, whether an optional entry is there), not assumed.
 * Backend-specific cases stay in the backends' own tests
 * (tests/cpu/test_cpu_backend.c, tests/cuda/test_cuda.c, tests/fake,
 * tests/fault).
 *
 * Usage: test_backend_contract [NAME...] runs the suite over the backends
 * named (fake, cpu, fault, cuda), by default fake, cpu and fault. Named
 * alone, cuda without a device exits 77 (skipped) unless
 * FOUNDRY_REQUIRE_CUDA=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "backend_calls.h"
#include "fault/chain_scenario.h"
#include "foundry/checksum.h"
#include "foundry/fake.h"
#include "foundry/fault.h"
#include "foundry/registry.h"
#include "shrunk_mapping.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON   0xDEADBEEFCAFEF00Dull
#define SENTINEL 0x5Au

/* ---- the backend under test ---------------------------------------------
 */

static const char *target; /* fake, cpu, fault, cuda */
static fdy_backend *inner; /* fault: the cpu backend it wraps */

static fdy_backend *make_backend(void) {
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_fake_options fake = {.store_data = true};
  fdy_fault_options never = {0};
  fdy_backend_config config = {
      .threads = 3, .memory_bytes = 512 * FDY_MIB, .fake = &fake};
  fdy_status st = FDY_OK;
  if (strcmp(target, "fault") == 0) {
    st = fdy_backend_create_named("cpu", &config, &inner, &err);
    config.inner = inner;
    config.fault = &never;
  }
  if (st == FDY_OK) {
    st = fdy_backend_create_named(target, &config, &b, &err);
  }
  if (st != FDY_OK) {
    print_error("%s: create failed: %s\n", target, err.message);
  }
  assert_int_equal(st, FDY_OK);
  assert_non_null(b);
  return b;
}

static void destroy_backend(fdy_backend *b) {
  fdy_backend_destroy(b);
  fdy_backend_destroy(inner);
  inner = NULL;
}

static uint64_t alignment_of(fdy_backend *b) {
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, NULL), FDY_OK);
  assert_true(caps.alignment >= 8);
  return caps.alignment;
}

static uint64_t round_up(uint64_t n, uint64_t to) {
  return (n + to - 1) / to * to;
}

/* Fills bytes of buf from offset with SENTINEL (on stream s). */
static void fill_sentinel(fdy_backend *b, fdy_backend_stream *s,
                          fdy_backend_buffer *buf, uint64_t offset,
                          uint64_t bytes) {
  unsigned char *p = malloc(bytes);
  assert_non_null(p);
  memset(p, SENTINEL, bytes);
  fdy_backend_event *e = make_event(b);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, offset, p, bytes, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  b->ops->event_destroy(b, e);
  free(p);
}

static void assert_sentinel(const unsigned char *p, uint64_t bytes) {
  for (uint64_t i = 0; i < bytes; i++) {
    assert_int_equal(p[i], SENTINEL);
  }
}

/* A checksum of n bytes at offset 0 of data (the chain's first link when
 * prev is NULL) into the U64 at out_offset of out, with the workspace the
 * backend asks for (ws: a buffer of at least that, or NULL when none). */
static fdy_op checksum_op(fdy_backend_buffer *data, uint64_t n,
                          const fdy_tensor_view *prev, fdy_backend_buffer *out,
                          uint64_t out_offset, fdy_backend_buffer *ws,
                          uint64_t ws_bytes, uint32_t passes) {
  fdy_op op = chain_checksum_op(
      data, n, prev, chain_view(out, out_offset, FDY_DTYPE_U64, 1), passes);
  if (ws != NULL) {
    op.workspace = chain_view(ws, 0, FDY_DTYPE_U8, ws_bytes);
  }
  return op;
}

/* The workspace a checksum of n bytes asks for: NULL when none. */
static fdy_backend_buffer *checksum_workspace(fdy_backend *b, uint64_t n,
                                              uint64_t *bytes) {
  fdy_op op = chain_checksum_op(NULL, n, NULL,
                                chain_view(NULL, 0, FDY_DTYPE_U64, 1), 1);
  *bytes = b->ops->workspace_bytes(b, &op);
  assert_true(*bytes != UINT64_MAX);
  return *bytes > 0 ? make_buffer(b, *bytes) : NULL;
}

static void release(fdy_backend *b, fdy_backend_buffer *buf) {
  if (buf != NULL) {
    b->ops->buffer_release(b, buf);
  }
}

/* ---- cases --------------------------------------------------------------
 */

static void test_capabilities(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  fdy_device_caps caps;
  fdy_error err;
  assert_int_equal(b->ops->capabilities(b, &caps, &err), FDY_OK);
  assert_true(strlen(fdy_backend_name(b)) > 0);
  assert_string_equal(fdy_backend_name(b),
                      strcmp(target, "fault") == 0 ? "cpu" : target);
  assert_true(caps.total_memory > 0);
  assert_true(caps.free_memory <= caps.total_memory);
  assert_true(caps.max_allocation > 0 &&
              caps.max_allocation <= caps.total_memory);
  assert_true(caps.alignment >= 8 &&
              (caps.alignment & (caps.alignment - 1)) == 0);
  assert_int_equal(b->ops->capabilities(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_op checksum = chain_checksum_op(NULL, 1024, NULL,
                                      chain_view(NULL, 0, FDY_DTYPE_U64, 1), 1);
  assert_true(b->ops->supports_op(b, &checksum));
  assert_true(b->ops->workspace_bytes(b, &checksum) != UINT64_MAX);
  destroy_backend(b);
}

/* Copies in two pieces into the middle of a buffer filled with sentinels
 * and back into host memory between sentinels: the bytes arrive, nothing
 * around them changes on either side. */
static void test_copy_round_trip(void **state) {
  (void)state;
  const uint64_t n = 100003, at = 1000, size = n + 2000;
  fdy_backend *b = make_backend();
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, size);
  fill_sentinel(b, s, buf, 0, size);
  unsigned char *data = random_bytes(n, 1);
  unsigned char *back = malloc(size + 2);
  assert_non_null(back);
  uint64_t half = n / 2;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, at, data, half, NULL),
                   FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, s, buf, at + half, data + half, n - half, NULL),
      FDY_OK);
  /* the copy of the middle, between host sentinels */
  memset(back, SENTINEL, size + 2);
  assert_int_equal(b->ops->copy_to_host(b, s, back + 1, buf, at, n, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back + 1, data, n);
  assert_int_equal(back[0], SENTINEL);
  assert_sentinel(back + 1 + n, size + 1 - n);
  /* the whole buffer: the device bytes around the copy are untouched */
  memset(back, 0, size);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, size, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_sentinel(back, at);
  assert_memory_equal(back + at, data, n);
  assert_sentinel(back + at + n, size - at - n);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  destroy_backend(b);
  free(data);
  free(back);
}

/* Copies n bytes, checksums them into a word between sentinel words (with
 * and without a previous link, `passes` passes) and reads the words back;
 * every result is fdy_checksum's, and the neighbours are untouched. */
static void checksum_case(fdy_backend *b, uint64_t n, uint32_t passes,
                          uint64_t seed) {
  const uint64_t align = alignment_of(b);
  const uint64_t prev_at = round_up(n, align), out_at = prev_at + align;
  const uint64_t size = out_at + 2 * align;
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, size);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  fill_sentinel(b, s, buf, 0, size);
  unsigned char *data = random_bytes(n, seed);
  const uint64_t prev = 0x0123456789ABCDEFull;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, prev_at, &prev, 8, NULL),
                   FDY_OK);
  fdy_tensor_view prev_view = chain_view(buf, prev_at, FDY_DTYPE_U64, 1);
  uint64_t *words = malloc(2 * align);
  assert_non_null(words);
  uint64_t results[2];
  for (int chained = 0; chained < 2; chained++) {
    fdy_op op = checksum_op(buf, n, chained ? &prev_view : NULL, buf, out_at,
                            ws, ws_bytes, passes);
    assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
    for (uint64_t i = 0; i < 2 * align / 8; i++) {
      words[i] = POISON;
    }
    assert_int_equal(
        b->ops->copy_to_host(b, s, words, buf, out_at, 2 * align, NULL),
        FDY_OK);
    record_and_wait(b, s, e);
    results[chained] = words[0];
    assert_sentinel((const unsigned char *)words + 8, 2 * align - 8);
  }
  assert_true(results[0] == fdy_checksum(data, n));
  assert_true(results[1] == fdy_checksum(data, n) + prev * FDY_CHAIN_PRIME);
  /* the data and the previous link were only read */
  unsigned char *back = malloc(out_at);
  assert_non_null(back);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, out_at, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back, data, n);
  assert_sentinel(back + n, prev_at - n);
  assert_memory_equal(back + prev_at, &prev, 8);
  free(back);
  free(words);
  free(data);
  release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
}

static void test_checksum_matches_reference(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  static const struct {
    uint64_t n;
    uint32_t passes;
  } cases[] = {{8, 1},         {16, 1},
               {24, 1},        {4096, 1},
               {4104, 4},      {65536 + 24, 3},
               {1u << 20, 1},  {(1u << 20) + 8, 0},
               {8u << 20, 8},  {(8u << 20) + 16, 1},
               {64u << 20, 1}, {(64u << 20) + 40, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    checksum_case(b, cases[i].n, cases[i].passes, 77 + i);
  }
  destroy_backend(b);
}

/* One event, recorded after each layer's copy on the copy stream and waited
 * for by the compute stream right away, while the copy stream runs ahead:
 * each wait is for its own layer's recording, so every checksum reads a
 * complete layer. */
static void test_rerecorded_event_orders_streams(void **state) {
  (void)state;
  const uint64_t n = 4u << 20;
  enum { LAYERS = 4 };
  fdy_backend *b = make_backend();
  const uint64_t align = alignment_of(b);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  fdy_backend_event *copied = make_event(b), *done = make_event(b);
  unsigned char *data[LAYERS];
  fdy_backend_buffer *buf[LAYERS];
  fdy_backend_buffer *out = make_buffer(b, align * LAYERS);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  uint64_t *results = malloc(align * LAYERS);
  assert_non_null(results);
  for (int i = 0; i < LAYERS; i++) {
    data[i] = random_bytes(n, 100 + (uint64_t)i);
    buf[i] = make_buffer(b, n);
    assert_int_equal(
        b->ops->copy_to_device(b, copy, buf[i], 0, data[i], n, NULL), FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, copied, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, copied, NULL), FDY_OK);
    fdy_op op =
        checksum_op(buf[i], n, NULL, out, align * (uint64_t)i, ws, ws_bytes, 1);
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
  }
  assert_int_equal(
      b->ops->copy_to_host(b, compute, results, out, 0, align * LAYERS, NULL),
      FDY_OK);
  record_and_wait(b, compute, done);
  for (int i = 0; i < LAYERS; i++) {
    assert_true(results[align / 8 * (uint64_t)i] == fdy_checksum(data[i], n));
  }
  if (b->ops->event_time != NULL) {
    /* the last copy completed before the launch that waited for it */
    int64_t copied_at = 0, done_at = 0;
    assert_int_equal(b->ops->host_wait(b, copied, NULL), FDY_OK);
    assert_int_equal(b->ops->event_time(b, copied, &copied_at, NULL), FDY_OK);
    assert_int_equal(b->ops->event_time(b, done, &done_at, NULL), FDY_OK);
    assert_true(copied_at <= done_at);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < LAYERS; i++) {
    b->ops->buffer_release(b, buf[i]);
    free(data[i]);
  }
  free(results);
  release(b, ws);
  b->ops->buffer_release(b, out);
  b->ops->event_destroy(b, copied);
  b->ops->event_destroy(b, done);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  destroy_backend(b);
}

/* A stream wait is for the recording current when it was called: a stream
 * that waits on an event and then records the same event itself must not
 * wait for its own later recording (that would never complete). */
static void test_wait_is_for_the_current_recording(void **state) {
  (void)state;
  const uint64_t n = 8u << 20;
  fdy_backend *b = make_backend();
  const uint64_t align = alignment_of(b);
  fdy_backend_stream *s1 = make_stream(b), *s2 = make_stream(b);
  fdy_backend_event *e = make_event(b), *f = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  fdy_backend_buffer *out = make_buffer(b, align);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  unsigned char *data = random_bytes(n, 5);
  assert_int_equal(b->ops->copy_to_device(b, s1, buf, 0, data, n, NULL),
                   FDY_OK);
  fdy_op op = checksum_op(buf, n, NULL, out, 0, ws, ws_bytes, 4);
  assert_int_equal(b->ops->launch(b, s1, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->event_record(b, s1, e, NULL), FDY_OK); /* #1 */
  assert_int_equal(b->ops->stream_wait(b, s2, e, NULL), FDY_OK);  /* #1 */
  uint64_t *seen = malloc(8);
  assert_non_null(seen);
  *seen = POISON;
  assert_int_equal(b->ops->copy_to_host(b, s2, seen, out, 0, 8, NULL), FDY_OK);
  assert_int_equal(b->ops->event_record(b, s2, e, NULL), FDY_OK); /* #2 */
  assert_int_equal(b->ops->event_record(b, s2, f, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, f, NULL), FDY_OK);
  /* s2 waited for recording #1: the checksum was in place */
  assert_true(*seen == fdy_checksum(data, n));
  /* host_wait waits for recording #2, the current one */
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
  if (b->ops->event_time != NULL) {
    int64_t te = 0, tf = 0;
    assert_int_equal(b->ops->event_time(b, e, &te, NULL), FDY_OK);
    assert_int_equal(b->ops->event_time(b, f, &tf, NULL), FDY_OK);
    assert_true(te <= tf);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  free(seen);
  release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->buffer_release(b, out);
  b->ops->event_destroy(b, e);
  b->ops->event_destroy(b, f);
  b->ops->stream_destroy(b, s1);
  b->ops->stream_destroy(b, s2);
  destroy_backend(b);
  free(data);
}

/* Event times lie on the fdy_now_ns clock (a device's no more than a
 * millisecond after the host saw it complete) and grow with re-recording; an
 * event never recorded has no time. */
static void test_event_time(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  if (b->ops->event_time == NULL) {
    destroy_backend(b);
    skip();
  }
  const int64_t slack = strcmp(target, "cuda") == 0 ? 1000000 : 0;
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_error err;
  int64_t t = 0;
  assert_int_equal(b->ops->event_time(b, e, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "event_time");
  int64_t prev = 0;
  for (int i = 0; i < 5; i++) {
    int64_t before = fdy_now_ns();
    record_and_wait(b, s, e);
    int64_t after = fdy_now_ns();
    assert_int_equal(b->ops->event_time(b, e, &t, NULL), FDY_OK);
    assert_true(slack > 0 || before <= t); /* a device's: at most later */
    assert_true(t <= after + slack);
    assert_true(prev <= t);
    prev = t;
  }
  assert_int_equal(b->ops->event_time(b, NULL, &t, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->event_time(b, e, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  b->ops->event_destroy(b, e);
  b->ops->event_destroy(b, NULL);
  b->ops->stream_destroy(b, s);
  destroy_backend(b);
}

/* Reference rule: buffers released right after submission stay alive until
 * the queued work that uses them completed; the results are right, and
 * where the backend counts its own memory (free = total at the start),
 * every byte is back after the drain. */
static void test_release_while_queued(void **state) {
  (void)state;
  const uint64_t n = 4u << 20;
  fdy_backend *b = make_backend();
  const uint64_t align = alignment_of(b);
  fdy_device_caps before, after;
  assert_int_equal(b->ops->capabilities(b, &before, NULL), FDY_OK);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  fdy_backend_event *c = make_event(b);
  unsigned char *data = random_bytes(n, 42);
  uint64_t *results = calloc(4, 8);
  assert_non_null(results);
  for (int i = 0; i < 4; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n + align);
    uint64_t ws_bytes = 0;
    fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, c, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, c, NULL), FDY_OK);
    fdy_op op = checksum_op(buf, n, NULL, buf, n, ws, ws_bytes, 3);
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
    release(b, ws);
    assert_int_equal(
        b->ops->copy_to_host(b, compute, &results[i], buf, n, 8, NULL), FDY_OK);
    b->ops->buffer_release(b, buf);
  }
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  for (int i = 0; i < 4; i++) {
    assert_true(results[i] == fdy_checksum(data, n));
  }
  assert_int_equal(b->ops->capabilities(b, &after, NULL), FDY_OK);
  if (before.free_memory == before.total_memory) {
    assert_int_equal(after.free_memory, before.free_memory);
  }
  b->ops->event_destroy(b, c);
  b->ops->stream_destroy(b, copy);
  b->ops->stream_destroy(b, compute);
  destroy_backend(b);
  free(results);
  free(data);
}

/* destroy with work still queued and handles never released: drains and
 * frees everything (ASan's leak check proves it). */
static void test_destroy_with_pending_work(void **state) {
  (void)state;
  const uint64_t n = 2u << 20;
  fdy_backend *b = make_backend();
  const uint64_t align = alignment_of(b);
  fdy_backend_stream *copy = make_stream(b);
  fdy_backend_stream *compute = make_stream(b);
  fdy_backend_event *e = make_event(b);
  unsigned char *data = random_bytes(n, 9);
  fdy_backend_host *host = NULL;
  if (b->ops->host_register != NULL) {
    assert_int_equal(b->ops->host_register(b, data, n, &host, NULL), FDY_OK);
  }
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  for (int i = 0; i < 8; i++) {
    fdy_backend_buffer *buf = make_buffer(b, n + align);
    assert_int_equal(b->ops->copy_to_device(b, copy, buf, 0, data, n, NULL),
                     FDY_OK);
    assert_int_equal(b->ops->event_record(b, copy, e, NULL), FDY_OK);
    assert_int_equal(b->ops->stream_wait(b, compute, e, NULL), FDY_OK);
    fdy_op op = checksum_op(buf, n, NULL, buf, n, ws, ws_bytes, 1);
    assert_int_equal(b->ops->launch(b, compute, &op, NULL), FDY_OK);
  }
  destroy_backend(b);
  free(data);
}

static void test_drain_is_repeatable(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  fdy_backend_stream *s = make_stream(b);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->stream_destroy(b, s);
  b->ops->stream_destroy(b, NULL);
  b->ops->buffer_release(b, NULL);
  destroy_backend(b);
}

/* Copies and events refused before anything is queued; the backend works
 * afterwards. */
static void test_bad_copies_and_events(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_buffer *buf = make_buffer(b, 1000);
  unsigned char *data = random_bytes(2000, 3);
  fdy_error err;

  fdy_backend_buffer *none = (fdy_backend_buffer *)&err;
  assert_int_equal(b->ops->buffer_alloc(b, 0, &none, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(none);
  assert_string_equal(err.backend_op, "buffer_alloc");
  assert_int_equal(b->ops->buffer_alloc(b, 16, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  assert_int_equal(b->ops->copy_to_device(b, s, buf, 1, data, 1000, &err),
                   FDY_ERR_INVALID_ARGUMENT);
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
  assert_string_equal(err.backend_op, "copy_to_host");
  assert_int_equal(b->ops->copy_to_host(b, s, NULL, buf, 0, 10, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->copy_to_host(b, s, data, buf, UINT64_MAX, 1, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  assert_int_equal(b->ops->event_create(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->event_record(b, s, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_backend_event *e = make_event(b);
  assert_int_equal(b->ops->event_record(b, NULL, e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_wait(b, s, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_wait(b, NULL, e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->host_wait(b, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(b->ops->stream_create(b, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  if (b->ops->host_register != NULL) {
    fdy_backend_host *h = (fdy_backend_host *)&err;
    assert_int_equal(b->ops->host_register(b, NULL, 10, &h, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_int_equal(b->ops->host_register(b, data, 0, &h, &err),
                     FDY_ERR_INVALID_ARGUMENT);
    assert_null(h);
  }

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
  destroy_backend(b);
  free(data);
}

/* Launches refused before anything is queued: invalid ops, views without a
 * buffer, outside their buffer or misaligned. Then the good op runs. */
static void test_bad_launches(void **state) {
  (void)state;
  fdy_backend *b = make_backend();
  const uint64_t align = alignment_of(b);
  const uint64_t n = 4 * align, size = n + align;
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, size);
  uint64_t ws_bytes = 0;
  fdy_backend_buffer *ws = checksum_workspace(b, n, &ws_bytes);
  fdy_error err;
  const fdy_op good = checksum_op(buf, n, NULL, buf, n, ws, ws_bytes, 1);
  fdy_op op = good;

  assert_int_equal(b->ops->launch(b, s, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.backend_op, "launch");
  assert_int_equal(b->ops->launch(b, NULL, &op, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  /* fdy_op_check's error, marked as the launch's */
  fdy_op add = {.kind = FDY_OP_ADD};
  assert_int_equal(b->ops->launch(b, s, &add, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_string_equal(err.name, "add");
  assert_string_equal(err.backend_op, "launch");
  op.kind = FDY_OP_KIND_COUNT;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op = good;
  op.output_count = 0;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  /* a view without a buffer */
  op = good;
  op.outputs[0].buffer = NULL;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  /* views past the buffer's end, or wrapping around */
  op = good;
  op.inputs[0].offset = 2 * align; /* 2 align + 4 align > 5 align */
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op = good;
  op.outputs[0].offset = size;
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op = good;
  op.outputs[0].offset = UINT64_MAX - (align - 1);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op = good;
  op.inputs[0].shape = FDY_SHAPE(size + 8);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  /* offsets not a multiple of the backend's alignment */
  op = good;
  op.outputs[0].offset = n - 8; /* element-aligned, still refused */
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);
  op = good;
  op.inputs[0].offset = 8;
  op.inputs[0].shape = FDY_SHAPE(n - align);
  assert_int_equal(b->ops->launch(b, s, &op, &err), FDY_ERR_INVALID_ARGUMENT);

  /* nothing was queued; the good op still runs */
  unsigned char *data = random_bytes(n, 77);
  uint64_t *result = malloc(8);
  assert_non_null(result);
  *result = POISON;
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, NULL), FDY_OK);
  op = good;
  assert_int_equal(b->ops->launch(b, s, &op, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, result, buf, n, 8, NULL), FDY_OK);
  record_and_wait(b, s, e);
  assert_true(*result == fdy_checksum(data, n));
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  free(result);
  free(data);
  release(b, ws);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  destroy_backend(b);
}

/* Copies from and to registered memory behave like any other copy. */
static void test_host_register(void **state) {
  (void)state;
  const uint64_t n = 12345;
  fdy_backend *b = make_backend();
  if (b->ops->host_register == NULL) {
    destroy_backend(b);
    skip();
  }
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, n);
  unsigned char *data = random_bytes(n, 11);
  unsigned char *back = malloc(n + 2);
  assert_non_null(back);
  memset(back, SENTINEL, n + 2);
  fdy_backend_host *h = NULL, *hb = NULL;
  assert_int_equal(b->ops->host_register(b, data, n, &h, NULL), FDY_OK);
  assert_int_equal(b->ops->host_register(b, back, n + 2, &hb, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, data, n, NULL), FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, back + 1, buf, 0, n, NULL),
                   FDY_OK);
  record_and_wait(b, s, e);
  assert_memory_equal(back + 1, data, n);
  assert_int_equal(back[0], SENTINEL);
  assert_int_equal(back[n + 1], SENTINEL);
  assert_int_equal(b->ops->drain(b, NULL), FDY_OK);
  b->ops->host_unregister(b, h);
  b->ops->host_unregister(b, hb);
  b->ops->host_unregister(b, NULL);
  b->ops->event_destroy(b, e);
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  destroy_backend(b);
  free(data);
  free(back);
}

/* A copy from the mapped page that is gone fails with FDY_ERR_IO from
 * copy_to_device: at the copy, or at the host_wait after it (a drain may
 * report it once more); after a drain the backend copies good memory. */
static void test_copy_from_truncated_mapping(void **state) {
  (void)state;
  shrunk_mapping m;
  assert_int_equal(shrunk_make(&m, false), 0);
  const uint64_t page = m.page;
  fdy_backend *b = make_backend();
  fdy_backend_stream *s = make_stream(b);
  fdy_backend_event *e = make_event(b);
  fdy_backend_buffer *buf = make_buffer(b, page);
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status st =
      b->ops->copy_to_device(b, s, buf, 0, m.map + page, page, &err);
  if (st == FDY_OK) {
    assert_int_equal(b->ops->event_record(b, s, e, &err), FDY_OK);
    st = b->ops->host_wait(b, e, &err);
  }
  assert_int_equal(st, FDY_ERR_IO);
  assert_int_equal(err.kind, FDY_ERR_IO);
  assert_string_equal(err.backend_op, "copy_to_device");
  st = b->ops->drain(b, &err);
  assert_true(st == FDY_OK || st == FDY_ERR_IO);
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  /* the kept page and good memory copy again */
  unsigned char *back = malloc(page);
  assert_non_null(back);
  assert_int_equal(b->ops->copy_to_device(b, s, buf, 0, m.map, page, &err),
                   FDY_OK);
  assert_int_equal(b->ops->copy_to_host(b, s, back, buf, 0, page, &err),
                   FDY_OK);
  record_and_wait(b, s, e);
  for (uint64_t i = 0; i < page; i++) {
    assert_int_equal(back[i], shrunk_pattern(i));
  }
  free(back);
  b->ops->buffer_release(b, buf);
  b->ops->event_destroy(b, e);
  b->ops->stream_destroy(b, s);
  destroy_backend(b);
  shrunk_remove(&m);
}

/* The checksum chain (tests/fault/chain_scenario.h): layers streamed
 * through a ring of slots, run twice on one backend. */
static void test_chain(void **state) {
  (void)state;
  static const struct {
    uint32_t layers;
    uint64_t bytes;
    uint32_t slots;
    bool reg;
  } cases[] = {
      {5, 4104, 1, false},
      {6, (3u << 20) + 8, 2, true},
      {9, 100008, 3, false},
      {2, 776, 3, true},
  };
  fdy_backend *b = make_backend();
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    unsigned char *data[9];
    for (uint32_t i = 0; i < cases[c].layers; i++) {
      data[i] = random_bytes(cases[c].bytes, 100 * c + i);
    }
    chain_spec spec = {.layers = cases[c].layers,
                       .layer_bytes = cases[c].bytes,
                       .data = (const unsigned char *const *)data,
                       .slots = cases[c].slots,
                       .rounds = 3,
                       .passes = 2,
                       .register_host =
                           cases[c].reg && b->ops->host_register != NULL};
    for (int run = 0; run < 2; run++) {
      fdy_error err;
      uint64_t result = POISON;
      fdy_status st = chain_run(b, &spec, &result, &err);
      if (st != FDY_OK) {
        print_error("chain failed: %s\n", err.message);
      }
      assert_int_equal(st, FDY_OK);
      assert_true(result == chain_expected(&spec));
    }
    for (uint32_t i = 0; i < cases[c].layers; i++) {
      free(data[i]);
    }
  }
  destroy_backend(b);
}

int main(int argc, char **argv) {
  static const char *const all[] = {"fake", "cpu", "fault"};
  const char *const *names = all;
  int count = (int)(sizeof all / sizeof all[0]);
  if (argc > 1) {
    names = (const char *const *)argv + 1;
    count = argc - 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_capabilities),
      cmocka_unit_test(test_copy_round_trip),
      cmocka_unit_test(test_checksum_matches_reference),
      cmocka_unit_test(test_rerecorded_event_orders_streams),
      cmocka_unit_test(test_wait_is_for_the_current_recording),
      cmocka_unit_test(test_event_time),
      cmocka_unit_test(test_release_while_queued),
      cmocka_unit_test(test_destroy_with_pending_work),
      cmocka_unit_test(test_drain_is_repeatable),
      cmocka_unit_test(test_bad_copies_and_events),
      cmocka_unit_test(test_bad_launches),
      cmocka_unit_test(test_host_register),
      cmocka_unit_test(test_copy_from_truncated_mapping),
      cmocka_unit_test(test_chain),
  };
  int failed = 0, ran = 0;
  for (int i = 0; i < count; i++) {
    target = names[i];
    if (!fdy_backend_available(target)) {
      const char *req = getenv("FOUNDRY_REQUIRE_CUDA");
      if (strcmp(target, "cuda") == 0 && req != NULL && strcmp(req, "1") == 0) {
        fprintf(stderr, "test_backend_contract: FOUNDRY_REQUIRE_CUDA=1 but no "
                        "CUDA device\n");
        return 1;
      }
      fprintf(stderr, "test_backend_contract: no %s backend here, skipping\n",
              target);
      continue;
    }
    ran++;
    fprintf(stderr, "test_backend_contract: the %s backend\n", target);
    failed += _cmocka_run_group_tests(
        target, tests, sizeof tests / sizeof tests[0], NULL, NULL);
  }
  if (ran == 0) {
    return 77;
  }
  return failed != 0;
}
