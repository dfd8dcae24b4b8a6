/* Unit tests of the runtime interpreter against the fake backend: streamed
 * runs with real data, a backend without its optional entries, preflight
 * rejections without backend side effects, hand-built plans (gathered host
 * extents, file extents), and fault injection at every backend call of a
 * triple-buffered run in both fail modes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/fake.h"
#include "foundry/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAYER_BYTES 1000u /* not a multiple of 8 or of the alignment */
#define SLOT_BYTES  1024u
#define ALIGNMENT   256u
#define BUDGET      (64 * FDY_MIB)

static void fill_random(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x1234567;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)((x >> 24) | 1); /* non-zero */
  }
}

/* A synthetic chain with random per-layer data and its streaming plan. */
typedef struct workload {
  uint32_t layers;
  uint64_t bytes;
  unsigned char **data;
  fdy_graph *graph;
  fdy_plan *plan;
} workload;

static void workload_make(workload *w, uint32_t layers, uint64_t bytes,
                          uint32_t buffers) {
  fdy_error err;
  memset(w, 0, sizeof(*w));
  w->layers = layers;
  w->bytes = bytes;
  w->data = calloc(layers ? layers : 1, sizeof(*w->data));
  assert_non_null(w->data);
  for (uint32_t i = 0; i < layers; i++) {
    w->data[i] = malloc(bytes);
    assert_non_null(w->data[i]);
    fill_random(w->data[i], bytes, i + 1);
  }
  assert_int_equal(fdy_synthetic_graph_create(layers, bytes,
                                              (const void *const *)w->data,
                                              &w->graph, &err),
                   FDY_OK);
  assert_int_equal(
      fdy_plan_streaming(w->graph, BUDGET, buffers, ALIGNMENT, &w->plan, &err),
      FDY_OK);
  assert_int_equal(fdy_plan_validate(w->plan, NULL, &err), FDY_OK);
}

static void workload_free(workload *w) {
  fdy_plan_destroy(w->plan);
  fdy_graph_destroy(w->graph);
  for (uint32_t i = 0; i < w->layers; i++) {
    free(w->data[i]);
  }
  free(w->data);
}

static fdy_backend *make_fake(const fdy_fake_options *options) {
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_fake_backend_create(options, &b, &err), FDY_OK);
  return b;
}

static void assert_all_released(const fdy_backend *b) {
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.live_events, 0);
  assert_int_equal(s.live_streams, 0);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.buffer_bytes, 0);
  assert_int_equal(s.violations, 0);
}

/* Only the side-effect-free queries may have been called. */
static void assert_no_side_effects(const fdy_backend *b) {
  for (size_t i = 0; i < fdy_fake_call_count(b); i++) {
    const char *op = fdy_fake_call_at(b, i)->op;
    assert_true(strcmp(op, "capabilities") == 0 ||
                strcmp(op, "supports_op") == 0);
  }
  assert_all_released(b);
  assert_int_equal(fdy_fake_get_stats(b).drains, 0);
}

static void assert_zero_result(const fdy_run_result *r) {
  assert_int_equal(r->op_count, 0);
  assert_null(r->op_results);
  assert_int_equal(r->timing_count, 0);
  assert_null(r->timings);
  assert_int_equal(r->peak_slot_bytes, 0);
}

static void assert_results_match(const workload *w, const fdy_run_result *r) {
  assert_int_equal(r->op_count, w->layers);
  for (uint32_t i = 0; i < w->layers; i++) {
    assert_int_equal(r->op_results[i], fdy_checksum(w->data[i], w->bytes));
  }
}

/* ---- successful runs --------------------------------------------------------
 */

static void test_triple_buffered_run(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_run_options ro = {.collect_timings = true};
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, &ro, &r, &err), FDY_OK);
  assert_int_equal(err.kind, FDY_OK);
  assert_results_match(&w, &r);
  for (uint32_t i = 1; i < w.layers; i++) {
    assert_true(r.op_results[i] != r.op_results[i - 1]);
  }
  assert_int_equal(r.peak_slot_bytes, 3 * SLOT_BYTES);
  assert_true(r.begin_ns <= r.end_ns);

  size_t commands = fdy_plan_command_count(w.plan);
  assert_int_equal(r.timing_count, commands);
  for (size_t i = 0; i < commands; i++) {
    const fdy_command *c = fdy_plan_command(w.plan, i);
    const fdy_command_timing *t = &r.timings[i];
    assert_int_equal(t->command_index, i);
    assert_int_equal(t->kind, c->kind);
    assert_true(t->host_begin_ns <= t->host_end_ns);
    assert_true(t->live_slot_bytes <= 3 * SLOT_BYTES);
    if (c->kind == FDY_CMD_PREFETCH || c->kind == FDY_CMD_LAUNCH) {
      assert_true(t->stream >= 0);
      assert_true(t->device_start_ns >= 0);
      assert_true(t->device_start_ns <= t->device_end_ns);
    } else {
      assert_int_equal(t->device_start_ns, -1);
      assert_int_equal(t->device_end_ns, -1);
    }
    if (c->kind == FDY_CMD_ALLOCATE || c->kind == FDY_CMD_RELEASE ||
        (c->kind == FDY_CMD_WAIT && c->u.wait.host)) {
      assert_int_equal(t->stream, -1);
    }
  }
  assert_int_equal(r.timings[commands - 1].live_slot_bytes, 0);

  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.peak_buffer_bytes, 3 * SLOT_BYTES);
  assert_int_equal(s.deferred_frees, 0);
  assert_true(s.drains >= 1);
  assert_int_equal(fdy_fake_count_calls(b, "buffer_alloc"), 3);
  assert_int_equal(fdy_fake_count_calls(b, "buffer_release"), 3);
  assert_int_equal(fdy_fake_count_calls(b, "copy_to_device"), 6);
  assert_int_equal(fdy_fake_count_calls(b, "launch"), 6);
  assert_int_equal(fdy_fake_count_calls(b, "stream_create"),
                   fdy_plan_stream_count(w.plan));
  assert_int_equal(fdy_fake_count_calls(b, "stream_destroy"),
                   fdy_plan_stream_count(w.plan));
  assert_all_released(b);

  /* The same backend runs the plan again. */
  fdy_run_result_free(&r);
  assert_null(r.op_results);
  assert_int_equal(fdy_runtime_execute(w.plan, w.graph, b, NULL, &r, &err),
                   FDY_OK);
  assert_results_match(&w, &r);
  assert_null(r.timings);
  fdy_run_result_free(&r);
  fdy_run_result_free(NULL);
  assert_all_released(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

/* A backend that forwards every required entry to a fake backend and leaves
 * the optional ones (host_register, host_unregister, event_times) NULL. */
typedef struct bare_backend {
  fdy_backend base; /* first member: ops = &bare_ops */
  fdy_backend *inner;
} bare_backend;

static fdy_backend *inner_of(fdy_backend *b) {
  return ((bare_backend *)b)->inner;
}

static fdy_status bare_capabilities(fdy_backend *b, fdy_device_caps *out,
                                    fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->capabilities(f, out, err);
}

static bool bare_supports_op(fdy_backend *b, const char *kind) {
  fdy_backend *f = inner_of(b);
  return f->ops->supports_op(f, kind);
}

static fdy_status bare_buffer_alloc(fdy_backend *b, uint64_t bytes,
                                    fdy_backend_buffer **out, fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->buffer_alloc(f, bytes, out, err);
}

static void bare_buffer_release(fdy_backend *b, fdy_backend_buffer *buffer) {
  fdy_backend *f = inner_of(b);
  f->ops->buffer_release(f, buffer);
}

static fdy_status bare_stream_create(fdy_backend *b, fdy_backend_stream **out,
                                     fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->stream_create(f, out, err);
}

static void bare_stream_destroy(fdy_backend *b, fdy_backend_stream *stream) {
  fdy_backend *f = inner_of(b);
  f->ops->stream_destroy(f, stream);
}

static fdy_status bare_copy_to_device(fdy_backend *b,
                                      fdy_backend_stream *stream,
                                      fdy_backend_buffer *dst,
                                      uint64_t dst_offset, const void *src,
                                      uint64_t bytes, fdy_backend_event **out,
                                      fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->copy_to_device(f, stream, dst, dst_offset, src, bytes, out,
                                err);
}

static fdy_status bare_launch(fdy_backend *b, fdy_backend_stream *stream,
                              const fdy_launch_desc *desc,
                              fdy_backend_event **out, fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->launch(f, stream, desc, out, err);
}

static fdy_status bare_stream_wait(fdy_backend *b, fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->stream_wait(f, stream, event, err);
}

static fdy_status bare_host_wait(fdy_backend *b, fdy_backend_event *event,
                                 fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->host_wait(f, event, err);
}

static void bare_event_release(fdy_backend *b, fdy_backend_event *event) {
  fdy_backend *f = inner_of(b);
  f->ops->event_release(f, event);
}

static fdy_status bare_drain(fdy_backend *b, fdy_error *err) {
  fdy_backend *f = inner_of(b);
  return f->ops->drain(f, err);
}

/* The test owns the wrapper and destroys the fake itself. */
static void bare_destroy(fdy_backend *b) {
  (void)b;
}

static const fdy_backend_ops bare_ops = {
    .name = "bare",
    .capabilities = bare_capabilities,
    .supports_op = bare_supports_op,
    .buffer_alloc = bare_buffer_alloc,
    .buffer_release = bare_buffer_release,
    .host_register = NULL,
    .host_unregister = NULL,
    .stream_create = bare_stream_create,
    .stream_destroy = bare_stream_destroy,
    .copy_to_device = bare_copy_to_device,
    .launch = bare_launch,
    .stream_wait = bare_stream_wait,
    .host_wait = bare_host_wait,
    .event_times = NULL,
    .event_release = bare_event_release,
    .drain = bare_drain,
    .destroy = bare_destroy,
};

/* Without the optional entries a triple-buffered run with timings succeeds;
 * device times are unknown (-1, as runtime.h says) and nothing leaks. */
static void test_optional_backend_entries_null(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_fake_options o = {.store_data = true};
  fdy_backend *fake = make_fake(&o);
  bare_backend bare = {.base = {.ops = &bare_ops, .self = NULL}, .inner = fake};
  fdy_run_options ro = {.collect_timings = true};
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, &bare.base, &ro, &r, &err),
                   FDY_OK);
  assert_int_equal(err.kind, FDY_OK);
  assert_results_match(&w, &r);
  assert_int_equal(r.peak_slot_bytes, 3 * SLOT_BYTES);
  size_t commands = fdy_plan_command_count(w.plan);
  assert_int_equal(r.timing_count, commands);
  size_t device_work = 0;
  for (size_t i = 0; i < commands; i++) {
    const fdy_command *c = fdy_plan_command(w.plan, i);
    const fdy_command_timing *t = &r.timings[i];
    assert_int_equal(t->command_index, i);
    assert_true(t->host_begin_ns <= t->host_end_ns);
    assert_int_equal(t->device_start_ns, -1);
    assert_int_equal(t->device_end_ns, -1);
    device_work += c->kind == FDY_CMD_PREFETCH || c->kind == FDY_CMD_LAUNCH;
  }
  assert_int_equal(device_work, 12);
  assert_int_equal(fdy_fake_count_calls(fake, "event_times"), 0);
  assert_int_equal(fdy_fake_count_calls(fake, "host_register"), 0);
  assert_int_equal(fdy_fake_count_calls(fake, "copy_to_device"), 6);
  assert_int_equal(fdy_fake_count_calls(fake, "launch"), 6);
  assert_all_released(fake);
  fdy_run_result_free(&r);

  /* The same run through the fake itself does read device times. */
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, fake, &ro, &r, &err),
                   FDY_OK);
  assert_true(fdy_fake_count_calls(fake, "event_times") >= 12);
  fdy_run_result_free(&r);
  assert_all_released(fake);
  fdy_backend_destroy(fake);
  workload_free(&w);
}

static void test_every_buffer_count(void **state) {
  (void)state;
  for (uint32_t buffers = 1; buffers <= 7; buffers++) {
    workload w;
    workload_make(&w, 6, LAYER_BYTES, buffers);
    fdy_fake_options o = {.store_data = true};
    fdy_backend *b = make_fake(&o);
    fdy_run_result r;
    fdy_error err;
    assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                     FDY_OK);
    assert_results_match(&w, &r);
    uint32_t slots = buffers < 6 ? buffers : 6;
    assert_int_equal(r.peak_slot_bytes, slots * SLOT_BYTES);
    fdy_run_result_free(&r);
    assert_all_released(b);
    fdy_backend_destroy(b);
    workload_free(&w);
  }
}

static void test_empty_plan(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 0, LAYER_BYTES, 3);
  fdy_backend *b = make_fake(NULL);
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_OK);
  assert_int_equal(r.op_count, 0);
  assert_null(r.op_results);
  assert_int_equal(r.peak_slot_bytes, 0);
  fdy_run_result_free(&r);
  assert_all_released(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

/* A plan over a described graph (as decoded from JSON) runs against a bound
 * twin passed by the caller. */
static void test_described_plan_with_bound_graph(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 4, LAYER_BYTES, 2);
  fdy_graph *described = NULL;
  fdy_plan *plan = NULL;
  fdy_error err;
  assert_int_equal(
      fdy_synthetic_graph_create(4, LAYER_BYTES, NULL, &described, &err),
      FDY_OK);
  assert_int_equal(
      fdy_plan_streaming(described, BUDGET, 2, ALIGNMENT, &plan, &err), FDY_OK);
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(plan, w.graph, b, NULL, &r, &err),
                   FDY_OK);
  assert_results_match(&w, &r);
  fdy_run_result_free(&r);
  assert_all_released(b);
  fdy_backend_destroy(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(described);
  workload_free(&w);
}

/* ---- preflight
 * ------------------------------------------------------------------ */

static void test_preflight_accepts_valid_plan(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, b, &err), FDY_OK);
  assert_int_equal(fdy_runtime_preflight(w.plan, w.graph, b, NULL), FDY_OK);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_preflight_unsupported_op(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_fake_options o = {.unsupported_kind = FDY_OP_SYNTHETIC_CHECKSUM};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, b, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_int_equal(err.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.name, FDY_OP_SYNTHETIC_CHECKSUM);
  assert_int_equal(err.ids[0], 0);
  assert_string_equal(err.backend_op, "supports_op");
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_zero_result(&r);
  /* One query per distinct kind. */
  assert_int_equal(fdy_fake_count_calls(b, "supports_op"), 2);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_preflight_missing_weight(void **state) {
  (void)state;
  fdy_graph *described = NULL;
  fdy_plan *plan = NULL;
  fdy_error err;
  assert_int_equal(
      fdy_synthetic_graph_create(6, LAYER_BYTES, NULL, &described, &err),
      FDY_OK);
  assert_int_equal(
      fdy_plan_streaming(described, BUDGET, 3, ALIGNMENT, &plan, &err), FDY_OK);
  size_t first_prefetch = 0;
  while (fdy_plan_command(plan, first_prefetch)->kind != FDY_CMD_PREFETCH) {
    first_prefetch++;
  }
  fdy_tensor_id w0;
  assert_int_equal(
      fdy_graph_find_tensor(described, "layer.0.weight", &w0, &err), FDY_OK);
  fdy_backend *b = make_fake(NULL);
  assert_int_equal(fdy_runtime_preflight(plan, NULL, b, &err),
                   FDY_ERR_NOT_FOUND);
  assert_int_equal(err.command_index, first_prefetch);
  assert_int_equal(err.ids[0], w0.v);
  assert_string_equal(err.name, "layer.0.weight");
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_NOT_FOUND);
  assert_zero_result(&r);
  assert_int_equal(fdy_fake_call_count(b), 0);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(described);
}

static void test_preflight_wrong_weight_size(void **state) {
  (void)state;
  workload planned, other;
  workload_make(&planned, 6, LAYER_BYTES, 3);
  workload_make(&other, 6, LAYER_BYTES / 2, 3);
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(planned.plan, other.graph, b, &err),
                   FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_int_equal(err.expected, LAYER_BYTES);
  assert_int_equal(err.actual, LAYER_BYTES / 2);
  assert_string_equal(err.name, "layer.0.weight");
  fdy_run_result r;
  assert_int_equal(
      fdy_runtime_execute(planned.plan, other.graph, b, NULL, &r, &err),
      FDY_ERR_GRAPH_WEIGHT_SIZE);
  assert_zero_result(&r);
  assert_int_equal(fdy_fake_call_count(b), 0);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  workload_free(&other);
  workload_free(&planned);
}

static void test_preflight_graph_mismatch(void **state) {
  (void)state;
  workload planned, other;
  workload_make(&planned, 6, LAYER_BYTES, 3);
  workload_make(&other, 5, LAYER_BYTES, 3);
  fdy_backend *b = make_fake(NULL);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(planned.plan, other.graph, b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_call_count(b), 0);
  fdy_backend_destroy(b);
  workload_free(&other);
  workload_free(&planned);
}

static void test_preflight_budget_above_device_memory(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_fake_options o = {.caps = {.total_memory = 32 * FDY_MIB}};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, b, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.expected, 32 * FDY_MIB);
  assert_int_equal(err.actual, BUDGET);
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_BUDGET);
  assert_zero_result(&r);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_preflight_slot_above_max_allocation(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_fake_options o = {.caps = {.max_allocation = 512}};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, b, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(fdy_plan_command(w.plan, (size_t)err.command_index)->kind,
                   FDY_CMD_ALLOCATE);
  assert_int_equal(err.expected, 512);
  assert_int_equal(err.actual, SLOT_BYTES);
  assert_no_side_effects(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_preflight_invalid_plan(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  size_t last_release = fdy_plan_command_count(w.plan);
  while (fdy_plan_command(w.plan, --last_release)->kind != FDY_CMD_RELEASE) {
  }
  fdy_error err, expected;
  assert_int_equal(fdy_plan_remove(w.plan, last_release, &err), FDY_OK);
  fdy_status kind = fdy_plan_validate(w.plan, NULL, &expected);
  assert_int_not_equal(kind, FDY_OK);
  fdy_backend *b = make_fake(NULL);
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err), kind);
  assert_int_equal(err.command_index, expected.command_index);
  assert_zero_result(&r);
  assert_int_equal(fdy_fake_call_count(b), 0);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_preflight_missing_backend_entry(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 2, LAYER_BYTES, 2);
  fdy_backend *b = make_fake(NULL);
  fdy_backend_ops ops = *b->ops;
  ops.launch = NULL;
  fdy_backend lacking = {.ops = &ops, .self = b->self};
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, &lacking, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_string_equal(err.backend_op, "launch");
  assert_int_equal(fdy_fake_call_count(b), 0);
  fdy_backend_destroy(b);
  workload_free(&w);
}

static void test_null_arguments(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 2, LAYER_BYTES, 2);
  fdy_backend *b = make_fake(NULL);
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_preflight(NULL, NULL, b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_runtime_preflight(w.plan, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_runtime_execute(NULL, NULL, b, NULL, &r, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_zero_result(&r);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, NULL, NULL),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_fake_call_count(b), 0);
  fdy_backend_destroy(b);
  workload_free(&w);
}

/* ---- hand-built plans
 * ---------------------------------------------------------- */

/* allocate, prefetch and launch on one stream, host wait, release. */
static fdy_plan *single_op_plan(const fdy_graph *g, fdy_tensor_id weight,
                                uint64_t slot_bytes) {
  fdy_plan *plan = NULL;
  fdy_error err;
  assert_int_equal(fdy_plan_create(g, BUDGET, 1, 1, 2, &plan, &err), FDY_OK);
  fdy_command c[5];
  memset(c, 0, sizeof(c));
  c[0].kind = FDY_CMD_ALLOCATE;
  c[0].u.allocate.slot.v = 0;
  c[0].u.allocate.bytes = slot_bytes;
  c[1].kind = FDY_CMD_PREFETCH;
  c[1].u.prefetch.weight = weight;
  c[1].u.prefetch.signal.v = 0;
  c[2].kind = FDY_CMD_LAUNCH;
  c[2].u.launch.op.v = 0;
  c[2].u.launch.signal.v = 1;
  c[2].u.launch.binding_count = 1;
  c[2].u.launch.bindings[0] = (fdy_binding){.weight = weight};
  c[3].kind = FDY_CMD_WAIT;
  c[3].u.wait.event.v = 1;
  c[3].u.wait.host = true;
  c[4].kind = FDY_CMD_RELEASE;
  for (size_t i = 0; i < 5; i++) {
    assert_int_equal(fdy_plan_append(plan, &c[i], &err), FDY_OK);
  }
  assert_int_equal(fdy_plan_validate(plan, NULL, &err), FDY_OK);
  return plan;
}

static fdy_graph *single_weight_graph(const fdy_extent *extents, size_t count,
                                      uint64_t bytes, fdy_tensor_id *weight) {
  fdy_graph *g = NULL;
  fdy_error err;
  fdy_tensor_id out;
  assert_int_equal(fdy_graph_create("hand", &g, &err), FDY_OK);
  assert_int_equal(fdy_graph_add_weight(g, "w", FDY_DTYPE_U8, FDY_SHAPE(bytes),
                                        extents, count, weight, &err),
                   FDY_OK);
  assert_int_equal(fdy_graph_add_activation(g, "out", FDY_DTYPE_U64,
                                            FDY_SHAPE(1), &out, &err),
                   FDY_OK);
  fdy_op_desc op = {.name = "op",
                    .kind = FDY_OP_SYNTHETIC_CHECKSUM,
                    .reads = weight,
                    .read_count = 1,
                    .writes = &out,
                    .write_count = 1};
  fdy_op_id id;
  assert_int_equal(fdy_graph_add_op(g, &op, &id, &err), FDY_OK);
  return g;
}

/* A weight gathered from three host extents lands contiguously. */
static void test_gathered_host_extents(void **state) {
  (void)state;
  unsigned char *data = malloc(500);
  fill_random(data, 500, 42);
  unsigned char *a = malloc(100), *bb = malloc(333), *c = malloc(67);
  memcpy(a, data, 100);
  memcpy(bb, data + 100, 333);
  memcpy(c, data + 433, 67);
  fdy_extent x[3] = {
      {.kind = FDY_EXTENT_HOST, .host = a, .length = 100},
      {.kind = FDY_EXTENT_HOST, .host = bb, .length = 333},
      {.kind = FDY_EXTENT_HOST, .host = c, .length = 67},
  };
  fdy_tensor_id weight;
  fdy_graph *g = single_weight_graph(x, 3, 500, &weight);
  fdy_plan *plan = single_op_plan(g, weight, 512);
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_run_options ro = {.collect_timings = true};
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_execute(plan, NULL, b, &ro, &r, &err), FDY_OK);
  assert_int_equal(r.op_count, 1);
  assert_int_equal(r.op_results[0], fdy_checksum(data, 500));
  assert_int_equal(r.peak_slot_bytes, 512);
  assert_true(r.timings[1].device_start_ns <= r.timings[1].device_end_ns);
  assert_int_equal(fdy_fake_count_calls(b, "copy_to_device"), 3);
  uint64_t sizes[3], n = 0;
  for (size_t i = 0; i < fdy_fake_call_count(b); i++) {
    const fdy_fake_call *call = fdy_fake_call_at(b, i);
    if (strcmp(call->op, "copy_to_device") == 0) {
      sizes[n++] = call->bytes;
    }
  }
  assert_int_equal(sizes[0], 100);
  assert_int_equal(sizes[1], 333);
  assert_int_equal(sizes[2], 67);
  fdy_run_result_free(&r);
  assert_all_released(b);
  fdy_backend_destroy(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
  free(a);
  free(bb);
  free(c);
  free(data);
}

static char *write_temp_file(const unsigned char *data, size_t n) {
  const char *dir = getenv("TMPDIR");
  char *path = malloc(4096);
  assert_non_null(path);
  snprintf(path, 4096, "%s/foundry-runtime-XXXXXX",
           dir && dir[0] ? dir : "/tmp");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
  return path;
}

/* Weights read from file ranges, and files that are missing or short. */
static void test_file_extents(void **state) {
  (void)state;
  enum { FILE_BYTES = 4096 };
  unsigned char *data = malloc(FILE_BYTES);
  fill_random(data, FILE_BYTES, 99);
  char *path = write_temp_file(data, FILE_BYTES);
  unsigned char expected[1500];
  memcpy(expected, data + 100, 1000);
  memcpy(expected + 1000, data + 3000, 500);
  fdy_extent x[2] = {
      {.kind = FDY_EXTENT_FILE, .path = path, .offset = 100, .length = 1000},
      {.kind = FDY_EXTENT_FILE, .path = path, .offset = 3000, .length = 500},
  };
  fdy_tensor_id weight;
  fdy_graph *g = single_weight_graph(x, 2, 1500, &weight);
  fdy_plan *plan = single_op_plan(g, weight, 1536);
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = make_fake(&o);
  fdy_run_result r;
  fdy_error err;
  assert_int_equal(fdy_runtime_execute(plan, NULL, b, NULL, &r, &err), FDY_OK);
  assert_int_equal(r.op_results[0], fdy_checksum(expected, 1500));
  fdy_run_result_free(&r);
  assert_all_released(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  /* A range past the end of the file. */
  x[1].offset = 3700; /* 3700 + 500 > 4096 */
  g = single_weight_graph(x, 2, 1500, &weight);
  plan = single_op_plan(g, weight, 1536);
  size_t calls = fdy_fake_call_count(b);
  assert_int_equal(fdy_runtime_execute(plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_GRAPH_FILE_RANGE);
  assert_int_equal(err.expected, 4200);
  assert_int_equal(err.actual, FILE_BYTES);
  assert_int_equal(err.command_index, 1);
  assert_string_equal(err.name, path);
  assert_int_equal(fdy_fake_call_count(b), calls);
  assert_zero_result(&r);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);

  /* A missing file. */
  assert_int_equal(unlink(path), 0);
  x[1].offset = 3000;
  g = single_weight_graph(x, 2, 1500, &weight);
  plan = single_op_plan(g, weight, 1536);
  assert_int_equal(fdy_runtime_execute(plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, path);
  assert_int_equal(fdy_fake_call_count(b), calls);
  assert_all_released(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(g);
  fdy_backend_destroy(b);
  free(path);
  free(data);
}

/* ---- failures
 * ------------------------------------------------------------------ */

static bool entry_can_fail(const char *op) {
  return strcmp(op, "supports_op") != 0 && strcmp(op, "buffer_release") != 0 &&
         strcmp(op, "event_release") != 0 &&
         strcmp(op, "stream_destroy") != 0 &&
         strcmp(op, "host_unregister") != 0;
}

/* The command kind a failing entry must be attributed to; -1 for entries
 * outside any command. */
static void assert_attribution(const fdy_plan *plan, const fdy_error *err) {
  const char *op = err->backend_op;
  if (strcmp(op, "capabilities") == 0 || strcmp(op, "stream_create") == 0 ||
      strcmp(op, "drain") == 0) {
    assert_int_equal(err->command_index, -1);
    return;
  }
  assert_true(err->command_index >= 0);
  assert_true((size_t)err->command_index < fdy_plan_command_count(plan));
  const fdy_command *c = fdy_plan_command(plan, (size_t)err->command_index);
  if (strcmp(op, "buffer_alloc") == 0) {
    assert_int_equal(c->kind, FDY_CMD_ALLOCATE);
  } else if (strcmp(op, "copy_to_device") == 0) {
    assert_int_equal(c->kind, FDY_CMD_PREFETCH);
  } else if (strcmp(op, "launch") == 0) {
    assert_int_equal(c->kind, FDY_CMD_LAUNCH);
  } else if (strcmp(op, "host_wait") == 0) {
    assert_int_equal(c->kind, FDY_CMD_WAIT);
    assert_true(c->u.wait.host);
  } else if (strcmp(op, "stream_wait") == 0) {
    assert_int_equal(c->kind, FDY_CMD_WAIT);
    assert_false(c->u.wait.host);
  } else if (strcmp(op, "event_times") == 0) {
    assert_true(c->kind == FDY_CMD_PREFETCH || c->kind == FDY_CMD_LAUNCH);
  } else {
    fail_msg("unexpected failing entry %s", op);
  }
}

/* Fails every call of a triple-buffered run with timings, in both modes. */
static void test_fault_injection_every_call(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_run_options ro = {.collect_timings = true};
  fdy_run_result r;
  fdy_error err;

  fdy_fake_options clean = {.store_data = true};
  fdy_backend *b = make_fake(&clean);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, &ro, &r, &err), FDY_OK);
  fdy_run_result_free(&r);
  size_t total = fdy_fake_call_count(b);
  const char **ops = calloc(total, sizeof(*ops));
  for (size_t i = 0; i < total; i++) {
    ops[i] = fdy_fake_call_at(b, i)->op; /* string literals of the fake */
  }
  fdy_backend_destroy(b);

  size_t failures = 0;
  const fdy_fake_fail_mode modes[2] = {FDY_FAKE_FAIL_BEFORE_SUBMIT,
                                       FDY_FAKE_FAIL_AFTER_SUBMIT};
  for (int m = 0; m < 2; m++) {
    for (uint64_t n = 1; n <= total; n++) {
      fdy_fake_options o = {
          .store_data = true, .fail_at_call = n, .fail_mode = modes[m]};
      b = make_fake(&o);
      fdy_status st = fdy_runtime_execute(w.plan, NULL, b, &ro, &r, &err);
      const char *op = ops[n - 1];
      if (entry_can_fail(op)) {
        if (st == FDY_OK) {
          fail_msg("call %llu (%s) mode %d: run did not fail",
                   (unsigned long long)n, op, m);
        }
        assert_int_equal(st, FDY_ERR_BACKEND);
        assert_int_equal(err.kind, FDY_ERR_BACKEND);
        assert_string_equal(err.backend_op, op);
        assert_attribution(w.plan, &err);
        assert_int_equal(err.cleanup_kind, FDY_OK);
        assert_true(err.message[0] != '\0');
        const fdy_fake_call *call = fdy_fake_call_at(b, n - 1);
        assert_string_equal(call->op, op);
        assert_int_equal(call->status, FDY_ERR_BACKEND);
        assert_zero_result(&r);
        if (strcmp(op, "capabilities") != 0) {
          assert_true(fdy_fake_get_stats(b).drains >= 1);
        }
        failures++;
      } else {
        assert_int_equal(st, FDY_OK);
        assert_results_match(&w, &r);
        fdy_run_result_free(&r);
      }
      assert_all_released(b);
      fdy_backend_destroy(b);
    }
  }
  assert_true(failures > total); /* most calls can fail, in two modes */
  free(ops);
  workload_free(&w);
}

/* A failing cleanup drain is reported besides the first failure. */
static void test_fail_drain_reports_cleanup(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  fdy_run_result r;
  fdy_error err;

  fdy_backend *b = make_fake(NULL);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_OK);
  fdy_run_result_free(&r);
  uint64_t launch_call = 0;
  for (size_t i = 0; i < fdy_fake_call_count(b) && !launch_call; i++) {
    if (strcmp(fdy_fake_call_at(b, i)->op, "launch") == 0) {
      launch_call = fdy_fake_call_at(b, i)->number;
    }
  }
  fdy_backend_destroy(b);
  assert_true(launch_call > 0);

  fdy_fake_options o = {.fail_at_call = launch_call,
                        .fail_mode = FDY_FAKE_FAIL_AFTER_SUBMIT,
                        .fail_drain = true};
  b = make_fake(&o);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, "launch");
  assert_attribution(w.plan, &err);
  assert_int_equal(err.cleanup_kind, FDY_ERR_BACKEND);
  assert_true(err.cleanup_message[0] != '\0');
  assert_zero_result(&r);
  assert_all_released(b);
  fdy_backend_destroy(b);

  /* Without another failure the final drain is the failure, and the
   * cleanup drain fails too. */
  o = (fdy_fake_options){.fail_drain = true};
  b = make_fake(&o);
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, "drain");
  assert_int_equal(err.command_index, -1);
  assert_int_equal(err.cleanup_kind, FDY_ERR_BACKEND);
  assert_zero_result(&r);
  assert_all_released(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

/* The backend's own failures (not injected) are attributed the same way. */
static void test_device_out_of_memory(void **state) {
  (void)state;
  workload w;
  workload_make(&w, 6, LAYER_BYTES, 3);
  /* The budget fits the device, but the device is partly used: the third
   * slot does not fit. */
  fdy_fake_options o = {.caps = {.total_memory = BUDGET}};
  fdy_backend *b = make_fake(&o);
  fdy_error err;
  fdy_backend_buffer *hog = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, BUDGET - 2 * SLOT_BYTES, &hog, &err),
                   FDY_OK);
  fdy_run_result r;
  assert_int_equal(fdy_runtime_execute(w.plan, NULL, b, NULL, &r, &err),
                   FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, "buffer_alloc");
  assert_attribution(w.plan, &err);
  b->ops->buffer_release(b, hog);
  assert_all_released(b);
  fdy_backend_destroy(b);
  workload_free(&w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_triple_buffered_run),
      cmocka_unit_test(test_optional_backend_entries_null),
      cmocka_unit_test(test_every_buffer_count),
      cmocka_unit_test(test_empty_plan),
      cmocka_unit_test(test_described_plan_with_bound_graph),
      cmocka_unit_test(test_preflight_accepts_valid_plan),
      cmocka_unit_test(test_preflight_unsupported_op),
      cmocka_unit_test(test_preflight_missing_weight),
      cmocka_unit_test(test_preflight_wrong_weight_size),
      cmocka_unit_test(test_preflight_graph_mismatch),
      cmocka_unit_test(test_preflight_budget_above_device_memory),
      cmocka_unit_test(test_preflight_slot_above_max_allocation),
      cmocka_unit_test(test_preflight_invalid_plan),
      cmocka_unit_test(test_preflight_missing_backend_entry),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_gathered_host_extents),
      cmocka_unit_test(test_file_extents),
      cmocka_unit_test(test_fault_injection_every_call),
      cmocka_unit_test(test_fail_drain_reports_cleanup),
      cmocka_unit_test(test_device_out_of_memory),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
