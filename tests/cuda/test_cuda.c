/* CUDA backend tests (label gpu): capabilities, the checksum kernel against
 * fdy_checksum on random non-zero data with poisoned results, compute
 * passes, the reference rule, streaming plans with 1, 2 and 3 buffers in
 * registered and staged modes through the runtime, injected failures (device
 * memory in use returns to its level before the run), bad inputs, and the
 * measurement helpers. Exits 77 (skipped) without a CUDA device unless
 * FOUNDRY_REQUIRE_CUDA=1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "foundry/cuda.h"
#include "foundry/graph.h"
#include "foundry/plan.h"
#include "foundry/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON 0xDEADBEEFCAFEF00Dull

/* Random non-zero bytes from a SplitMix64 stream. */
static unsigned char *random_bytes(uint64_t n, uint64_t seed) {
  unsigned char *p = malloc(n > 0 ? n : 1);
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

static fdy_backend *make_backend(const fdy_cuda_options *opts) {
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_status st = fdy_cuda_backend_create(opts, &b, &err);
  if (st != FDY_OK) {
    print_error("create failed: %s\n", err.message);
  }
  assert_int_equal(st, FDY_OK);
  assert_non_null(b);
  return b;
}

static uint64_t memory_in_use(fdy_backend *b) {
  fdy_error err;
  uint64_t used = 0;
  assert_int_equal(fdy_cuda_memory_in_use(b, &used, &err), FDY_OK);
  return used;
}

/* A new stream and a new buffer of `bytes` on b. */
static void open_slot(fdy_backend *b, uint64_t bytes, fdy_backend_stream **s,
                      fdy_backend_buffer **buf) {
  fdy_error err;
  assert_int_equal(b->ops->stream_create(b, s, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, bytes, buf, &err), FDY_OK);
}

/* Launches op op_index, the checksum of the first n bytes of buf, on s with
 * its result word *result poisoned first; returns its event. */
static fdy_backend_event *launch_checksum(fdy_backend *b, fdy_backend_stream *s,
                                          fdy_backend_buffer *buf, uint64_t n,
                                          uint32_t op_index, uint64_t *result) {
  fdy_error err;
  fdy_backend_event *done = NULL;
  *result = POISON;
  fdy_launch_desc d = {.kind = FDY_OP_SYNTHETIC_CHECKSUM,
                       .op_index = op_index,
                       .weight_count = 1,
                       .weights = {{.buffer = buf, .bytes = n}},
                       .result = result};
  assert_int_equal(b->ops->launch(b, s, &d, &done, &err), FDY_OK);
  return done;
}

/* Copies data into a fresh buffer (staged unless registered), checksums the
 * first n bytes on the device with the result word poisoned, and returns the
 * result. */
static uint64_t device_checksum(fdy_backend *b, const void *data, uint64_t n,
                                uint64_t slot_bytes, uint64_t dst_offset) {
  fdy_error err;
  const fdy_backend_ops *o = b->ops;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_stream *s = NULL;
  fdy_backend_event *copied = NULL;
  open_slot(b, slot_bytes, &s, &buf);
  assert_int_equal(
      o->copy_to_device(b, s, buf, dst_offset, data, n, &copied, &err), FDY_OK);
  uint64_t result = 0;
  fdy_backend_event *done = launch_checksum(b, s, buf, n, 3, &result);
  assert_int_equal(o->host_wait(b, done, &err), FDY_OK);
  assert_int_equal(o->host_wait(b, copied, &err), FDY_OK);
  fdy_event_times t;
  assert_int_equal(o->event_times(b, done, &t, &err), FDY_OK);
  assert_true(t.start_ns <= t.end_ns);
  o->event_release(b, copied);
  o->event_release(b, done);
  o->buffer_release(b, buf);
  o->stream_destroy(b, s);
  return result;
}

/* ---- capabilities and the kernel ------------------------------------------
 */

static void test_capabilities(void **state) {
  (void)state;
  fdy_error err;
  fdy_backend *b = make_backend(NULL);
  fdy_device_caps caps;
  assert_int_equal(b->ops->capabilities(b, &caps, &err), FDY_OK);
  assert_string_equal(fdy_backend_name(b), "cuda");
  assert_true(strlen(caps.name) > 0);
  assert_true(caps.total_memory >= FDY_GIB);
  assert_true(caps.free_memory > 0 && caps.free_memory <= caps.total_memory);
  assert_true(caps.max_allocation > 0 &&
              caps.max_allocation <= caps.total_memory);
  assert_int_equal(caps.alignment, 256);
  assert_true(caps.copy_engines >= 1);
  assert_true(caps.concurrent_copy_compute);
  assert_true(b->ops->supports_op(b, FDY_OP_SYNTHETIC_CHECKSUM));
  assert_false(b->ops->supports_op(b, "llama.decoder_layer"));
  assert_false(b->ops->supports_op(b, NULL));
  int rv = 0, dv = 0;
  fdy_cuda_versions(&rv, &dv);
  assert_true(rv >= 12000);
  assert_true(dv >= rv);
  uint64_t used = memory_in_use(b);
  assert_true(used > 0 && used <= caps.total_memory);
  assert_string_equal(fdy_cuda_host_mode_name(FDY_CUDA_HOST_STAGED), "staged");
  print_message("device %s, %.1f GiB, %u copy engines, runtime %d driver %d\n",
                caps.name, (double)caps.total_memory / (double)FDY_GIB,
                caps.copy_engines, rv, dv);
  fdy_backend_destroy(b);
}

static void test_kernel_matches_reference(void **state) {
  (void)state;
  const uint64_t sizes[] = {0,          1,
                            7,          8,
                            9,          15,
                            16,         17,
                            31,         33,
                            4095,       4097,
                            65536 + 24, (1u << 20) + 3,
                            64u << 20,  (64u << 20) + 5};
  fdy_backend *b = make_backend(NULL);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t n = sizes[i];
    unsigned char *data = random_bytes(n, 77 + i);
    uint64_t got = device_checksum(b, data, n, n > 0 ? n : 1, 0);
    assert_int_not_equal(got, POISON);
    assert_int_equal(got, fdy_checksum(data, n));
    free(data);
  }
  fdy_backend_destroy(b);
}

static void test_compute_passes_same_result(void **state) {
  (void)state;
  const uint64_t n = (8u << 20) + 13;
  unsigned char *data = random_bytes(n, 5);
  fdy_cuda_options one = {.compute_passes = 1};
  fdy_cuda_options eight = {.compute_passes = 8};
  fdy_backend *b1 = make_backend(&one);
  fdy_backend *b8 = make_backend(&eight);
  uint64_t r1 = device_checksum(b1, data, n, n, 0);
  uint64_t r8 = device_checksum(b8, data, n, n, 0);
  assert_int_equal(r1, fdy_checksum(data, n));
  assert_int_equal(r8, r1);
  fdy_backend_destroy(b1);
  fdy_backend_destroy(b8);
  free(data);
}

/* A layer copied to the wrong place in its slot does not pass. */
static void test_wrong_position_fails(void **state) {
  (void)state;
  const uint64_t n = 1u << 20;
  unsigned char *data = random_bytes(n, 9);
  fdy_backend *b = make_backend(NULL);
  uint64_t right = device_checksum(b, data, n, n + 8, 0);
  assert_int_equal(right, fdy_checksum(data, n));
  /* The same bytes 8 bytes further into the slot: the launch over the
   * first n bytes sees every word at a shifted position. */
  uint64_t shifted = device_checksum(b, data, n, n + 8, 8);
  assert_int_not_equal(shifted, right);
  /* Two words swapped. */
  uint64_t w0, w1;
  memcpy(&w0, data + 4096, 8);
  memcpy(&w1, data + 8192, 8);
  memcpy(data + 4096, &w1, 8);
  memcpy(data + 8192, &w0, 8);
  uint64_t swapped = device_checksum(b, data, n, n, 0);
  assert_int_not_equal(swapped, right);
  assert_int_equal(swapped, fdy_checksum(data, n));
  fdy_backend_destroy(b);
  free(data);
}

/* Staging through a ring smaller than the copy, in several chunks that
 * reuse each buffer, and registered mode falling back to staging for
 * memory that is not registered. */
static void test_staging_ring_reuse(void **state) {
  (void)state;
  const uint64_t n = (10u << 20) + 3;
  unsigned char *data = random_bytes(n, 11);
  fdy_cuda_options staged = {.host_mode = FDY_CUDA_HOST_STAGED,
                             .staging_bytes = 1u << 20,
                             .staging_buffers = 2};
  fdy_backend *b = make_backend(&staged);
  assert_int_equal(device_checksum(b, data, n, n, 0), fdy_checksum(data, n));
  /* Two copies into one slot at offsets that split a word, as a weight of
   * two extents is prefetched. */
  fdy_error err;
  const fdy_backend_ops *o = b->ops;
  const uint64_t k = 1234567;
  fdy_backend_stream *s = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *c1 = NULL, *c2 = NULL;
  open_slot(b, n, &s, &buf);
  assert_int_equal(o->copy_to_device(b, s, buf, 0, data, k, &c1, &err), FDY_OK);
  assert_int_equal(o->copy_to_device(b, s, buf, k, data + k, n - k, &c2, &err),
                   FDY_OK);
  uint64_t result = 0;
  fdy_backend_event *done = launch_checksum(b, s, buf, n, 0, &result);
  assert_int_equal(o->host_wait(b, done, &err), FDY_OK);
  assert_int_equal(result, fdy_checksum(data, n));
  o->event_release(b, c1);
  o->event_release(b, c2);
  o->event_release(b, done);
  o->buffer_release(b, buf);
  o->stream_destroy(b, s);
  fdy_backend_destroy(b);
  fdy_cuda_options reg = {.host_mode = FDY_CUDA_HOST_REGISTERED};
  b = make_backend(&reg);
  assert_int_equal(device_checksum(b, data, n, n, 0), fdy_checksum(data, n));
  fdy_backend_destroy(b);
  free(data);
}

/* Two registrations of adjacent ranges that share a page both succeed (only
 * whole pages are pinned), and copies of ranges with unpinned edges, of
 * sub-ranges, and of a range straddling both are right. */
static void test_adjacent_registrations(void **state) {
  (void)state;
  fdy_error err;
  const uint64_t n = 64u << 10;
  unsigned char *data = random_bytes(n, 14);
  fdy_backend *b = make_backend(NULL);
  fdy_backend_host *h1 = NULL, *h2 = NULL;
  assert_int_equal(b->ops->host_register(b, data + 100, 5000, &h1, &err),
                   FDY_OK);
  assert_int_equal(b->ops->host_register(b, data + 5100, n - 5100, &h2, &err),
                   FDY_OK);
  assert_int_equal(device_checksum(b, data + 100, 5000, 5000, 0),
                   fdy_checksum(data + 100, 5000));
  assert_int_equal(device_checksum(b, data + 5100, n - 5100, n, 0),
                   fdy_checksum(data + 5100, n - 5100));
  assert_int_equal(device_checksum(b, data + 9000, 20000, 20000, 0),
                   fdy_checksum(data + 9000, 20000));
  assert_int_equal(device_checksum(b, data + 200, 3, 256, 0),
                   fdy_checksum(data + 200, 3));
  assert_int_equal(device_checksum(b, data, n, n, 0), fdy_checksum(data, n));
  b->ops->host_unregister(b, h1);
  b->ops->host_unregister(b, h2);
  b->ops->host_unregister(b, NULL);
  fdy_backend_destroy(b);
  free(data);
}

/* Reference rule: a buffer released while a copy and a launch still use it
 * stays alive until they completed, and the result is still right. */
static void test_release_while_in_flight(void **state) {
  (void)state;
  fdy_error err;
  const uint64_t n = 64u << 20;
  unsigned char *data = random_bytes(n, 12);
  fdy_cuda_options reg = {.compute_passes = 4};
  fdy_backend *b = make_backend(&reg);
  const fdy_backend_ops *o = b->ops;
  fdy_backend_host *h = NULL;
  assert_int_equal(o->host_register(b, data, n, &h, &err), FDY_OK);
  uint64_t base = memory_in_use(b);
  fdy_backend_stream *s = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *copied = NULL;
  open_slot(b, n, &s, &buf);
  assert_int_equal(o->copy_to_device(b, s, buf, 0, data, n, &copied, &err),
                   FDY_OK);
  uint64_t result = 0;
  fdy_backend_event *done = launch_checksum(b, s, buf, n, 0, &result);
  o->buffer_release(b, buf);
  assert_int_equal(o->host_wait(b, done, &err), FDY_OK);
  assert_int_equal(result, fdy_checksum(data, n));
  fdy_event_times tc, tl;
  assert_int_equal(o->event_times(b, copied, &tc, &err), FDY_OK);
  assert_int_equal(o->event_times(b, done, &tl, &err), FDY_OK);
  assert_true(tc.end_ns <= tl.start_ns + 1000);
  o->event_release(b, copied);
  o->event_release(b, done);
  assert_int_equal(o->drain(b, &err), FDY_OK);
  assert_int_equal(memory_in_use(b), base);
  o->stream_destroy(b, s);
  o->host_unregister(b, h);
  fdy_backend_destroy(b);
  free(data);
}

/* Results are delivered by drain too, for launches never host-waited. */
static void test_drain_delivers_results(void **state) {
  (void)state;
  fdy_error err;
  const uint64_t n = 3u << 20;
  enum { LAUNCHES = 6 };
  unsigned char *data = random_bytes(n, 13);
  fdy_backend *b = make_backend(NULL);
  const fdy_backend_ops *o = b->ops;
  fdy_backend_stream *s = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *copied = NULL, *done[LAUNCHES] = {0};
  uint64_t results[LAUNCHES];
  open_slot(b, n, &s, &buf);
  assert_int_equal(o->copy_to_device(b, s, buf, 0, data, n, &copied, &err),
                   FDY_OK);
  for (int i = 0; i < LAUNCHES; i++) {
    done[i] = launch_checksum(b, s, buf, n - (uint64_t)i, 0, &results[i]);
  }
  assert_int_equal(o->drain(b, &err), FDY_OK);
  for (int i = 0; i < LAUNCHES; i++) {
    assert_int_equal(results[i], fdy_checksum(data, n - (uint64_t)i));
    o->event_release(b, done[i]);
  }
  o->event_release(b, copied);
  o->buffer_release(b, buf);
  o->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(data);
}

/* ---- bad inputs ------------------------------------------------------------
 */

static void test_bad_inputs(void **state) {
  (void)state;
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_cuda_options bad_device = {.device = 999};
  assert_int_equal(fdy_cuda_backend_create(&bad_device, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(b);
  assert_string_equal(err.backend_op, "create");
  fdy_cuda_options bad_mode = {.host_mode = (fdy_cuda_host_mode)7};
  assert_int_equal(fdy_cuda_backend_create(&bad_mode, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_backend_create(NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  b = make_backend(NULL);
  const fdy_backend_ops *o = b->ops;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_stream *s = NULL;
  fdy_backend_event *e = NULL;
  assert_int_equal(o->buffer_alloc(b, 0, &buf, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_null(buf);
  assert_string_equal(err.backend_op, "buffer_alloc");
  assert_int_equal(o->buffer_alloc(b, 4096, &buf, &err), FDY_OK);
  assert_int_equal(o->stream_create(b, &s, &err), FDY_OK);
  char src[64] = {1};
  assert_int_equal(o->copy_to_device(b, s, buf, 4090, src, 7, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(e);
  assert_int_equal(err.expected, 4096);
  assert_int_equal(err.actual, 7);
  assert_int_equal(o->copy_to_device(b, s, buf, UINT64_MAX, src, 2, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(o->copy_to_device(b, s, buf, 0, NULL, 2, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(o->copy_to_device(b, NULL, buf, 0, src, 2, &e, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  uint64_t result = POISON;
  fdy_launch_desc d = {.kind = "llama.decoder_layer",
                       .op_index = 4,
                       .weight_count = 1,
                       .weights = {{.buffer = buf, .bytes = 16}},
                       .result = &result};
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_UNSUPPORTED);
  assert_null(e);
  assert_int_equal(err.ids[0], 4);
  assert_string_equal(err.name, "llama.decoder_layer");
  assert_string_equal(err.backend_op, "launch");
  d.kind = NULL;
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_UNSUPPORTED);
  d.kind = FDY_OP_SYNTHETIC_CHECKSUM;
  d.weight_count = 0;
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 1);
  assert_int_equal(err.actual, 0);
  d.weight_count = 2;
  d.weights[1] = d.weights[0];
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.actual, 2);
  d.weight_count = 1;
  d.weights[0].bytes = 4097;
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.expected, 4096);
  assert_int_equal(err.actual, 4097);
  d.weights[0].buffer = NULL;
  assert_int_equal(o->launch(b, s, &d, &e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(o->launch(b, s, NULL, &e, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(result, POISON);

  assert_int_equal(o->stream_wait(b, s, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(o->host_wait(b, NULL, &err), FDY_ERR_INVALID_ARGUMENT);
  fdy_backend_host *h = NULL;
  assert_int_equal(o->host_register(b, NULL, 10, &h, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(o->host_register(b, src, 0, &h, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(h);
  assert_int_equal(o->capabilities(b, NULL, &err), FDY_ERR_INVALID_ARGUMENT);

  double rate = 1;
  assert_int_equal(fdy_cuda_measure_h2d(b, src, 0, 3, &rate, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_measure_h2d(b, NULL, 64, 3, &rate, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_measure_d2d(b, 64, 0, &rate, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_measure_checksum(b, 0, 3, &rate, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_measure_checksum(b, 64, 3, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);

  /* A CPU backend is not a CUDA backend. */
  fdy_backend *cpu = NULL;
  fdy_cpu_options cpu_opts = {.memory_bytes = 1u << 20};
  assert_int_equal(fdy_cpu_backend_create(&cpu_opts, &cpu, &err), FDY_OK);
  uint64_t used = 0;
  assert_int_equal(fdy_cuda_memory_in_use(cpu, &used, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_measure_d2d(cpu, 64, 1, &rate, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_cuda_memory_in_use(NULL, &used, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_backend_destroy(cpu);

  o->buffer_release(b, buf);
  o->stream_destroy(b, s);
  fdy_backend_destroy(b);
}

/* ---- plans through the runtime ----------------------------------------------
 */

typedef struct layers {
  uint32_t count;
  uint64_t bytes;
  unsigned char **data;
  uint64_t *expected;
} layers;

static layers make_layers(uint32_t count, uint64_t bytes, uint64_t seed) {
  layers l = {.count = count, .bytes = bytes};
  l.data = calloc(count, sizeof *l.data);
  l.expected = calloc(count, sizeof *l.expected);
  assert_non_null(l.data);
  assert_non_null(l.expected);
  for (uint32_t i = 0; i < count; i++) {
    l.data[i] = random_bytes(bytes, seed + i);
    l.expected[i] = fdy_checksum(l.data[i], bytes);
  }
  return l;
}

static void free_layers(layers *l) {
  for (uint32_t i = 0; i < l->count; i++) {
    free(l->data[i]);
  }
  free(l->data);
  free(l->expected);
}

/* Runs a `buffers`-buffered streaming plan over l on b; `reg` registers the
 * layers first (untimed setup). Returns the status; on success checks every
 * op result, the timings and that device memory is back at its level. */
static fdy_status run_plan(fdy_backend *b, const layers *l, uint32_t buffers,
                           bool reg, fdy_error *err) {
  const fdy_backend_ops *o = b->ops;
  fdy_graph *graph = NULL;
  assert_int_equal(fdy_synthetic_graph_create(l->count, l->bytes,
                                              (const void *const *)l->data,
                                              &graph, err),
                   FDY_OK);
  fdy_device_caps caps;
  assert_int_equal(o->capabilities(b, &caps, err), FDY_OK);
  uint64_t slot = 0;
  assert_int_equal(fdy_align_up(l->bytes, caps.alignment, &slot, err), FDY_OK);
  fdy_plan *plan = NULL;
  assert_int_equal(fdy_plan_streaming(graph, slot * buffers, buffers,
                                      caps.alignment, &plan, err),
                   FDY_OK);
  fdy_backend_host **hosts = calloc(l->count, sizeof *hosts);
  assert_non_null(hosts);
  for (uint32_t i = 0; reg && i < l->count; i++) {
    assert_int_equal(o->host_register(b, l->data[i], l->bytes, &hosts[i], err),
                     FDY_OK);
  }
  uint64_t base = memory_in_use(b);
  fdy_run_options run_opts = {.collect_timings = true};
  fdy_run_result result;
  fdy_status st = fdy_runtime_execute(plan, graph, b, &run_opts, &result, err);
  assert_int_equal(memory_in_use(b), base);
  if (st == FDY_OK) {
    assert_int_equal(result.op_count, l->count);
    for (uint32_t i = 0; i < l->count; i++) {
      assert_int_equal(result.op_results[i], l->expected[i]);
    }
    assert_int_equal(result.timing_count, fdy_plan_command_count(plan));
    for (size_t i = 0; i < result.timing_count; i++) {
      const fdy_command_timing *t = &result.timings[i];
      if (t->kind == FDY_CMD_PREFETCH || t->kind == FDY_CMD_LAUNCH) {
        assert_true(t->device_start_ns >= 0);
        assert_true(t->device_start_ns <= t->device_end_ns);
        /* device work starts after it was issued (1 ms for clock
         * alignment) and ends before the run's final drain returned */
        assert_true(t->device_start_ns + 1000000 >= t->host_begin_ns);
        assert_true(t->device_end_ns <= result.end_ns + 1000000);
      }
    }
  } else {
    assert_int_equal(result.op_count, 0);
    assert_null(result.op_results);
  }
  fdy_run_result_free(&result);
  for (uint32_t i = 0; i < l->count; i++) {
    o->host_unregister(b, hosts[i]);
  }
  free(hosts);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(graph);
  return st;
}

static void streaming(fdy_cuda_host_mode mode, bool reg) {
  static const struct {
    uint32_t layers;
    uint64_t bytes;
    uint32_t buffers;
  } cases[] = {
      {5, 4099, 1}, {6, (3u << 20) + 7, 2}, {9, 100003, 3},
      {2, 777, 3},  {6, 48u << 20, 3},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    layers l = make_layers(cases[c].layers, cases[c].bytes, 100 * c);
    fdy_cuda_options opts = {.host_mode = mode, .compute_passes = 2};
    fdy_backend *b = make_backend(&opts);
    fdy_error err;
    fdy_status st = run_plan(b, &l, cases[c].buffers, reg, &err);
    if (st != FDY_OK) {
      print_error("execute failed: %s\n", err.message);
    }
    assert_int_equal(st, FDY_OK);
    fdy_backend_destroy(b);
    free_layers(&l);
  }
}

static void test_streaming_registered(void **state) {
  (void)state;
  streaming(FDY_CUDA_HOST_REGISTERED, true);
}

static void test_streaming_registered_fallback(void **state) {
  (void)state;
  streaming(FDY_CUDA_HOST_REGISTERED, false);
}

static void test_streaming_staged(void **state) {
  (void)state;
  streaming(FDY_CUDA_HOST_STAGED, true);
}

/* Injected failures at several positions of alloc, copy and launch, before
 * and after the copy's DMA or the kernel was queued: the run fails with the
 * injected kind and backend entry, and device memory in use is back at its
 * level before the run (the slots are (2 MiB + 1) bytes: a leaked one would
 * show). Positions past the last call succeed. */
static void test_injected_failures(void **state) {
  (void)state;
  static const struct {
    uint64_t alloc, copy, launch, copy_submitted, launch_submitted;
    const char *op;
  } cases[] = {
      {1, 0, 0, 0, 0, "buffer_alloc"},   {2, 0, 0, 0, 0, "buffer_alloc"},
      {3, 0, 0, 0, 0, "buffer_alloc"},   {0, 1, 0, 0, 0, "copy_to_device"},
      {0, 3, 0, 0, 0, "copy_to_device"}, {0, 6, 0, 0, 0, "copy_to_device"},
      {0, 0, 1, 0, 0, "launch"},         {0, 0, 4, 0, 0, "launch"},
      {0, 0, 7, 0, 0, "launch"},         {0, 0, 0, 1, 0, "copy_to_device"},
      {0, 0, 0, 4, 0, "copy_to_device"}, {0, 0, 0, 7, 0, "copy_to_device"},
      {0, 0, 0, 0, 1, "launch"},         {0, 0, 0, 0, 5, "launch"},
      {0, 0, 0, 0, 7, "launch"},         {0, 0, 100, 100, 100, NULL},
  };
  for (fdy_cuda_host_mode mode = FDY_CUDA_HOST_REGISTERED;
       mode <= FDY_CUDA_HOST_STAGED; mode++) {
    layers l = make_layers(7, (2u << 20) + 1, 500);
    /* a backend of its own loads the kernels (and whatever else the first
     * use of the device allocates) before any level is read */
    fdy_backend *warm = make_backend(&(fdy_cuda_options){.host_mode = mode});
    assert_int_equal(device_checksum(warm, l.data[0], l.bytes, l.bytes, 0),
                     l.expected[0]);
    fdy_backend_destroy(warm);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      fdy_cuda_options opts = {
          .host_mode = mode,
          .fail_alloc_at = cases[c].alloc,
          .fail_copy_at = cases[c].copy,
          .fail_launch_at = cases[c].launch,
          .fail_copy_submitted_at = cases[c].copy_submitted,
          .fail_launch_submitted_at = cases[c].launch_submitted};
      fdy_backend *b = make_backend(&opts);
      const uint64_t level = memory_in_use(b);
      fdy_error err;
      fdy_status st =
          run_plan(b, &l, 3, mode == FDY_CUDA_HOST_REGISTERED, &err);
      if (cases[c].op == NULL) {
        assert_int_equal(st, FDY_OK);
      } else {
        assert_int_equal(st, FDY_ERR_BACKEND);
        assert_string_equal(err.backend_op, cases[c].op);
        assert_true(err.command_index >= 0);
      }
      assert_true(memory_in_use(b) <= level + (1u << 20));
      /* The backend still works after the failure. */
      assert_int_equal(device_checksum(b, l.data[0], l.bytes, l.bytes, 0),
                       l.expected[0]);
      fdy_backend_destroy(b);
    }
    free_layers(&l);
  }
}

/* ---- measurements ---------------------------------------------------------
 */

static void test_measurements(void **state) {
  (void)state;
  fdy_error err;
  fdy_backend *b = make_backend(NULL);
  uint64_t base = memory_in_use(b);
  const uint64_t n = 256u << 20;
  unsigned char *src = random_bytes(n, 3);
  fdy_backend_host *h = NULL;
  assert_int_equal(b->ops->host_register(b, src, n, &h, &err), FDY_OK);
  double h2d = 0, d2d = 0, sum = 0;
  assert_int_equal(fdy_cuda_measure_h2d(b, src, n, 10, &h2d, &err), FDY_OK);
  assert_int_equal(fdy_cuda_measure_d2d(b, n, 10, &d2d, &err), FDY_OK);
  assert_int_equal(fdy_cuda_measure_checksum(b, n, 10, &sum, &err), FDY_OK);
  print_message("256 MiB: h2d %.1f GB/s, d2d %.1f GB/s, checksum %.1f GB/s\n",
                h2d / 1e9, d2d / 1e9, sum / 1e9);
  assert_true(h2d > 1e9 && h2d < 1e12);
  assert_true(d2d > 1e10 && d2d < 1e14);
  assert_true(sum > 1e10 && sum < 1e14);
  assert_int_equal(memory_in_use(b), base);
  b->ops->host_unregister(b, h);
  fdy_backend_destroy(b);
  free(src);
}

int main(void) {
  if (fdy_cuda_device_count() == 0) {
    const char *req = getenv("FOUNDRY_REQUIRE_CUDA");
    if (req != NULL && strcmp(req, "1") == 0) {
      fprintf(stderr, "test_cuda: FOUNDRY_REQUIRE_CUDA=1 but no CUDA device\n");
      return 1;
    }
    fprintf(stderr, "test_cuda: no CUDA device, skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_capabilities),
      cmocka_unit_test(test_kernel_matches_reference),
      cmocka_unit_test(test_compute_passes_same_result),
      cmocka_unit_test(test_wrong_position_fails),
      cmocka_unit_test(test_staging_ring_reuse),
      cmocka_unit_test(test_adjacent_registrations),
      cmocka_unit_test(test_release_while_in_flight),
      cmocka_unit_test(test_drain_delivers_results),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_streaming_registered),
      cmocka_unit_test(test_streaming_registered_fallback),
      cmocka_unit_test(test_streaming_staged),
      cmocka_unit_test(test_injected_failures),
      cmocka_unit_test(test_measurements),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
