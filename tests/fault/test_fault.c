/* Unit tests of the fault backend: it is transparent when told nothing
 * (name, optional entries, results, counts), each entry fails before and
 * after submitting with FDY_ERR_BACKEND and backend_op set, and a sweep
 * that fails every counted call of a checksum chain in turn, over the fake
 * and the CPU backend, gets that failure back with everything released and
 * the submitted work drained; fail_drain reports a cleanup failure; the
 * graph entries are forwarded, counted and failed without leaving a
 * recording open or a graph behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fault/chain_scenario.h"
#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "foundry/fake.h"
#include "foundry/fault.h"

#include <stdlib.h>
#include <string.h>

enum { LAYERS = 5, LAYER_BYTES = 4104 };

typedef struct fixture {
  unsigned char *data[LAYERS];
  chain_spec spec;
  uint64_t expected;
} fixture;

static int setup(void **state) {
  fixture *fx = calloc(1, sizeof(*fx));
  assert_non_null(fx);
  for (uint32_t i = 0; i < LAYERS; i++) {
    fx->data[i] = chain_random_bytes(LAYER_BYTES, 40 + i);
    assert_non_null(fx->data[i]);
  }
  fx->spec = (chain_spec){.layers = LAYERS,
                          .layer_bytes = LAYER_BYTES,
                          .data = (const unsigned char *const *)fx->data,
                          .slots = 2,
                          .rounds = 2,
                          .passes = 1,
                          .register_host = true};
  fx->expected = chain_expected(&fx->spec);
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture *fx = *state;
  for (uint32_t i = 0; i < LAYERS; i++) {
    free(fx->data[i]);
  }
  free(fx);
  return 0;
}

static fdy_backend *make_fake(void) {
  fdy_fake_options o = {.store_data = true};
  fdy_backend *b = NULL;
  assert_int_equal(fdy_fake_backend_create(&o, &b, NULL), FDY_OK);
  return b;
}

static fdy_backend *make_cpu(void) {
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_cpu_backend_create(NULL, &b, &err), FDY_OK);
  return b;
}

static fdy_backend *wrap(fdy_backend *inner, uint64_t at, fdy_fault_mode mode,
                         bool fail_drain) {
  fdy_fault_options o = {
      .fail_at_call = at, .mode = mode, .fail_drain = fail_drain};
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_fault_backend_create(inner, &o, &b, &err), FDY_OK);
  assert_non_null(b);
  return b;
}

/* Everything the chain acquired on the fake is released, nothing is
 * pending, and the chain broke no rule. */
static void assert_fake_clean(const fdy_backend *fake) {
  fdy_fake_stats s = fdy_fake_get_stats(fake);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.live_events, 0);
  assert_int_equal(s.live_streams, 0);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.buffer_bytes, 0);
  assert_int_equal(s.violations, 0);
}

/* Calls of the fake's log made by entries that return a status. */
static uint64_t fake_status_calls(const fdy_backend *fake) {
  static const char *const counted[] = {
      "capabilities", "buffer_alloc", "host_register",  "stream_create",
      "event_create", "event_record", "copy_to_device", "copy_to_host",
      "launch",       "stream_wait",  "host_wait",      "event_time",
      "drain"};
  uint64_t n = 0;
  for (size_t i = 0; i < sizeof(counted) / sizeof(counted[0]); i++) {
    n += fdy_fake_count_calls(fake, counted[i]);
  }
  return n;
}

/* ---- transparency -------------------------------------------------------- */

static void test_transparent(void **state) {
  fixture *fx = *state;
  fdy_backend *fake = make_fake();
  fdy_backend *b = wrap(fake, 0, FDY_FAULT_BEFORE_SUBMIT, false);
  assert_string_equal(fdy_backend_name(b), "fake");
  assert_non_null(b->ops->host_register);
  assert_non_null(b->ops->event_time);
  assert_non_null(b->ops->workspace_bytes);
  fdy_error err;
  uint64_t result = 0;
  assert_int_equal(chain_run(b, &fx->spec, &result, &err), FDY_OK);
  assert_int_equal(result, fx->expected);
  fdy_fault_stats s = fdy_fault_get_stats(b);
  assert_false(s.fired);
  assert_null(s.fired_op);
  assert_true(s.calls > 30);
  assert_int_equal(s.calls, fake_status_calls(fake));
  assert_int_equal(fdy_fake_get_stats(fake).launches, 2 * LAYERS);
  assert_fake_clean(fake);
  /* uncounted entries are forwarded too */
  fdy_op op = {.kind = FDY_OP_ADD};
  assert_true(b->ops->supports_op(b, &op));
  assert_int_equal(b->ops->workspace_bytes(b, &op), 0);
  assert_int_equal(fdy_fault_get_stats(b).calls, s.calls);
  assert_int_equal(fdy_fake_count_calls(fake, "supports_op"), 1);
  fdy_backend_destroy(b);
  /* the inner backend outlives its wrapper and still works */
  assert_int_equal(chain_run(fake, &fx->spec, &result, &err), FDY_OK);
  fdy_backend_destroy(fake);
}

/* The wrapper's optional entries are NULL exactly where the inner
 * backend's are. The inner table here is never called. */
static void test_optional_entries_mirrored(void **state) {
  (void)state;
  fdy_backend *fake = make_fake();
  fdy_backend_ops ops = *fake->ops;
  ops.name = "bare";
  ops.workspace_bytes = NULL;
  ops.host_register = NULL;
  ops.host_unregister = NULL;
  ops.event_time = NULL;
  fdy_backend inner = {.ops = &ops, .self = NULL};
  fdy_backend *b = wrap(&inner, 0, FDY_FAULT_BEFORE_SUBMIT, false);
  assert_string_equal(fdy_backend_name(b), "bare");
  assert_null(b->ops->workspace_bytes);
  assert_null(b->ops->host_register);
  assert_null(b->ops->host_unregister);
  assert_null(b->ops->event_time);
  assert_null(b->ops->graph_begin); /* the fake offers graphs on request */
  assert_null(b->ops->graph_end);
  assert_null(b->ops->graph_launch);
  assert_null(b->ops->graph_destroy);
  assert_non_null(b->ops->launch);
  fdy_backend_destroy(b);
  fdy_backend_destroy(fake);
}

/* Records a graph of one event record through w; *out is NULL when a
 * graph call failed. */
static fdy_status record_one(fdy_backend *w, fdy_backend_stream *s,
                             fdy_backend_event *e, fdy_backend_graph **out,
                             fdy_error *err) {
  *out = NULL;
  fdy_status st = w->ops->graph_begin(w, &s, 1, err);
  if (st != FDY_OK) {
    return st;
  }
  assert_int_equal(w->ops->event_record(w, s, e, err), FDY_OK);
  return w->ops->graph_end(w, out, err);
}

/* graph_begin, graph_end and graph_launch are counted and fail before and
 * after submitting; after any of their failures nothing is recording and
 * no graph is left behind. */
static void test_graph_entries(void **state) {
  (void)state;
  fdy_fake_options fo = {.graphs = true};
  fdy_backend *fake = NULL;
  assert_int_equal(fdy_fake_backend_create(&fo, &fake, NULL), FDY_OK);
  fdy_backend_stream *s = NULL;
  fdy_backend_event *e = NULL;
  assert_int_equal(fake->ops->stream_create(fake, &s, NULL), FDY_OK);
  assert_int_equal(fake->ops->event_create(fake, &e, NULL), FDY_OK);
  fdy_error err;
  const char *entries[] = {"graph_begin", "graph_end", "graph_launch"};
  for (int mode = 0; mode < 2; mode++) {
    /* calls: graph_begin 1, event_record 2, graph_end 3, graph_launch 4 */
    const uint64_t at[] = {1, 3, 4};
    for (int k = 0; k < 3; k++) {
      fdy_backend *w = wrap(fake, at[k], (fdy_fault_mode)mode, false);
      assert_non_null(w->ops->graph_begin);
      fdy_backend_graph *graph = NULL;
      fdy_status st = record_one(w, s, e, &graph, &err);
      if (st == FDY_OK) {
        st = w->ops->graph_launch(w, graph, &err);
      }
      assert_int_equal(st, FDY_ERR_BACKEND);
      assert_string_equal(err.backend_op, entries[k]);
      assert_true(fdy_fault_get_stats(w).fired);
      assert_int_equal(fdy_fault_get_stats(w).calls, at[k]);
      assert_true(k == 2 ? graph != NULL : graph == NULL);
      w->ops->graph_destroy(w, graph);
      assert_int_equal(fake->ops->drain(fake, NULL), FDY_OK);
      fdy_fake_stats fs = fdy_fake_get_stats(fake);
      assert_int_equal(fs.live_graphs, 0);
      assert_int_equal(fs.violations, 0); /* the drain: nothing recording */
      fdy_backend_destroy(w);
    }
  }
  /* a launch failed after submitting ran; before, it did not */
  assert_int_equal(fdy_fake_get_stats(fake).graph_launches, 1);
  fake->ops->event_destroy(fake, e);
  fake->ops->stream_destroy(fake, s);
  fdy_backend_destroy(fake);
}

static void test_bad_options(void **state) {
  (void)state;
  fdy_backend *fake = make_fake();
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_fault_backend_create(NULL, NULL, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_null(b);
  assert_int_equal(fdy_fault_backend_create(fake, NULL, NULL, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_fault_options o = {.mode = (fdy_fault_mode)9};
  assert_int_equal(fdy_fault_backend_create(fake, &o, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(err.kind, FDY_ERR_INVALID_ARGUMENT);
  assert_null(b);
  /* a device fault needs numbered submissions, which the fake lacks */
  assert_null(fake->ops->submitted);
  fdy_fault_options device = {.device_fault_at_submission = 1};
  assert_int_equal(fdy_fault_backend_create(fake, &device, &b, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(err.message, "numbers its submissions"));
  assert_null(b);
  /* NULL options: never fails */
  assert_int_equal(fdy_fault_backend_create(fake, NULL, &b, &err), FDY_OK);
  assert_null(b->ops->submitted);
  fdy_backend_destroy(b);
  fdy_backend_destroy(fake);
}

/* ---- each entry, before and after submit ----------------------------------
 */

static void assert_injected(fdy_status st, const fdy_error *err,
                            const fdy_backend *b, const char *op) {
  assert_int_equal(st, FDY_ERR_BACKEND);
  assert_int_equal(err->kind, FDY_ERR_BACKEND);
  assert_string_equal(err->backend_op, op);
  fdy_fault_stats s = fdy_fault_get_stats(b);
  assert_true(s.fired);
  assert_string_equal(s.fired_op, op);
}

/* Creates: before submit nothing is made; after submit the inner handle is
 * made and given back. Either way the caller gets NULL. */
static void test_create_entries(void **state) {
  (void)state;
  static const char *const entries[] = {"buffer_alloc", "stream_create",
                                        "event_create", "host_register"};
  unsigned char host[64];
  for (size_t e = 0; e < sizeof(entries) / sizeof(entries[0]); e++) {
    for (int mode = FDY_FAULT_BEFORE_SUBMIT; mode <= FDY_FAULT_AFTER_SUBMIT;
         mode++) {
      fdy_backend *fake = make_fake();
      fdy_backend *b = wrap(fake, 1, (fdy_fault_mode)mode, false);
      fdy_error err;
      fdy_status st = FDY_OK;
      bool handed_out = true; /* a handle came back */
      if (e == 0) {
        fdy_backend_buffer *h = (fdy_backend_buffer *)&err;
        st = b->ops->buffer_alloc(b, 64, &h, &err);
        handed_out = h != NULL;
      } else if (e == 1) {
        fdy_backend_stream *h = (fdy_backend_stream *)&err;
        st = b->ops->stream_create(b, &h, &err);
        handed_out = h != NULL;
      } else if (e == 2) {
        fdy_backend_event *h = (fdy_backend_event *)&err;
        st = b->ops->event_create(b, &h, &err);
        handed_out = h != NULL;
      } else {
        fdy_backend_host *h = (fdy_backend_host *)&err;
        st = b->ops->host_register(b, host, sizeof(host), &h, &err);
        handed_out = h != NULL;
      }
      assert_injected(st, &err, b, entries[e]);
      assert_false(handed_out);
      /* after submit the inner entry ran (and its handle was given back) */
      assert_int_equal(fdy_fake_count_calls(fake, entries[e]),
                       mode == FDY_FAULT_AFTER_SUBMIT);
      assert_fake_clean(fake);
      fdy_backend_destroy(b);
      fdy_backend_destroy(fake);
    }
  }
}

/* A stream, a buffer, a recorded event and a host word on b, for the
 * entries that need them. */
typedef struct rig {
  fdy_backend_stream *stream;
  fdy_backend_buffer *buffer; /* 512 bytes: data at 0, output at 256 */
  fdy_backend_event *event;
  uint64_t host[32];
} rig;

static void rig_open(fdy_backend *b, rig *r) {
  fdy_error err;
  memset(r, 0, sizeof(*r));
  for (int i = 0; i < 32; i++) {
    r->host[i] = 0x0101010101010101ull * (uint64_t)(i + 1);
  }
  assert_int_equal(b->ops->stream_create(b, &r->stream, &err), FDY_OK);
  assert_int_equal(b->ops->buffer_alloc(b, 512, &r->buffer, &err), FDY_OK);
  assert_int_equal(b->ops->event_create(b, &r->event, &err), FDY_OK);
}

static void rig_close(fdy_backend *b, rig *r) {
  fdy_error err;
  assert_int_equal(b->ops->drain(b, &err), FDY_OK);
  b->ops->event_destroy(b, r->event);
  b->ops->buffer_release(b, r->buffer);
  b->ops->stream_destroy(b, r->stream);
}

/* Stream-ordered entries and waits, on the fake: before submit the fake
 * sees no call and nothing is queued; after submit the work is queued (or
 * waited for) when the failure comes back. */
static void test_work_entries(void **state) {
  (void)state;
  static const char *const entries[] = {
      "copy_to_device", "copy_to_host", "launch", "event_record", "stream_wait",
      "host_wait",      "event_time",   "drain",  "capabilities"};
  for (size_t e = 0; e < sizeof(entries) / sizeof(entries[0]); e++) {
    for (int mode = FDY_FAULT_BEFORE_SUBMIT; mode <= FDY_FAULT_AFTER_SUBMIT;
         mode++) {
      const bool after = mode == FDY_FAULT_AFTER_SUBMIT;
      fdy_backend *fake = make_fake();
      rig r;
      rig_open(fake, &r);
      fdy_error err;
      /* one pending copy and a recording of it, for the waits */
      assert_int_equal(fake->ops->copy_to_device(fake, r.stream, r.buffer, 0,
                                                 r.host, 256, &err),
                       FDY_OK);
      assert_int_equal(fake->ops->event_record(fake, r.stream, r.event, &err),
                       FDY_OK);
      fdy_backend *b = wrap(fake, 1, (fdy_fault_mode)mode, false);
      const fdy_fake_stats before = fdy_fake_get_stats(fake);
      fdy_tensor_view out = chain_view(r.buffer, 256, FDY_DTYPE_U64, 1);
      fdy_op op = chain_checksum_op(r.buffer, 256, NULL, out, 1);
      fdy_device_caps caps = {.total_memory = 1};
      int64_t at_ns = 1;
      fdy_status st = FDY_OK;
      switch (e) {
      case 0:
        st = b->ops->copy_to_device(b, r.stream, r.buffer, 0, r.host, 64, &err);
        break;
      case 1:
        st = b->ops->copy_to_host(b, r.stream, r.host, r.buffer, 0, 64, &err);
        break;
      case 2:
        st = b->ops->launch(b, r.stream, &op, &err);
        break;
      case 3:
        st = b->ops->event_record(b, r.stream, r.event, &err);
        break;
      case 4:
        st = b->ops->stream_wait(b, r.stream, r.event, &err);
        break;
      case 5:
        st = b->ops->host_wait(b, r.event, &err);
        break;
      case 6:
        assert_int_equal(fake->ops->host_wait(fake, r.event, &err), FDY_OK);
        st = b->ops->event_time(b, r.event, &at_ns, &err);
        assert_int_equal(at_ns, 0);
        break;
      case 7:
        st = b->ops->drain(b, &err);
        break;
      default:
        st = b->ops->capabilities(b, &caps, &err);
        assert_int_equal(caps.total_memory, 0);
        break;
      }
      assert_injected(st, &err, b, entries[e]);
      fdy_fake_stats s = fdy_fake_get_stats(fake);
      /* less the rig's own copy and record */
      size_t forwarded =
          fdy_fake_count_calls(fake, entries[e]) - (e == 0 || e == 3 ? 1 : 0);
      assert_int_equal(forwarded, after ? 1 : 0);
      if (e <= 2) { /* a copy or launch was queued after submit only */
        assert_int_equal(s.pending_work, before.pending_work + (after ? 1 : 0));
      }
      if (e == 5 || e == 7) { /* the wait happened after submit only */
        assert_int_equal(s.pending_work, after ? 0 : 1);
      }
      fdy_backend_destroy(b);
      rig_close(fake, &r);
      assert_fake_clean(fake);
      fdy_backend_destroy(fake);
    }
  }
}

/* fail_drain: every drain drains, then reports FDY_ERR_BACKEND. */
static void test_fail_drain(void **state) {
  (void)state;
  fdy_backend *fake = make_fake();
  rig r;
  rig_open(fake, &r);
  fdy_error err;
  fdy_backend *b = wrap(fake, 0, FDY_FAULT_BEFORE_SUBMIT, true);
  assert_int_equal(
      b->ops->copy_to_device(b, r.stream, r.buffer, 0, r.host, 64, &err),
      FDY_OK);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(b->ops->drain(b, &err), FDY_ERR_BACKEND);
    assert_string_equal(err.backend_op, "drain");
    assert_int_equal(fdy_fake_get_stats(fake).pending_work, 0);
  }
  assert_false(fdy_fault_get_stats(b).fired);
  fdy_backend_destroy(b);
  rig_close(fake, &r);
  assert_fake_clean(fake);
  fdy_backend_destroy(fake);
}

/* A simulated device fault on the CPU backend: the copy before the
 * faulting one and the faulting copy itself succeed, as on CUDA; the wait
 * after it, event_time and drain report it with its entry and submission
 * number (the inner backend's numbering, which the wrapper forwards), again
 * at every later wait. (Launches, named by op kind, are covered end to end
 * by tests/llama_infer test_device_fault_attribution.) */
static void test_device_fault(void **state) {
  (void)state;
  fdy_backend *cpu = make_cpu();
  rig r;
  rig_open(cpu, &r);
  fdy_error err;
  assert_non_null(cpu->ops->submitted);
  const uint64_t first = cpu->ops->submitted(cpu) + 1;
  fdy_fault_options o = {.device_fault_at_submission = first + 1};
  fdy_backend *b = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, &o, &b, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_device(b, r.stream, r.buffer, 0, r.host, 64, &err),
      FDY_OK);
  assert_int_equal(b->ops->submitted(b), first);
  assert_int_equal(b->ops->event_record(b, r.stream, r.event, &err), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, r.event, &err), FDY_OK);
  assert_int_equal(
      b->ops->copy_to_host(b, r.stream, r.host, r.buffer, 0, 64, &err),
      FDY_OK); /* submission first + 1: the one that faults */
  assert_int_equal(b->ops->submitted(b), first + 1);
  assert_int_equal(b->ops->event_record(b, r.stream, r.event, &err), FDY_OK);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(b->ops->host_wait(b, r.event, &err), FDY_ERR_BACKEND);
    assert_string_equal(err.backend_op, "copy_to_host");
    assert_int_equal(err.ids[0], (int64_t)(first + 1));
    assert_int_equal(err.ids[1], (int64_t)(first + 1));
    assert_non_null(strstr(err.message, "simulated device fault"));
  }
  int64_t ns = 1;
  assert_int_equal(b->ops->event_time(b, r.event, &ns, &err), FDY_ERR_BACKEND);
  assert_int_equal(ns, 0);
  assert_int_equal(b->ops->drain(b, &err), FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, "copy_to_host");
  assert_false(fdy_fault_get_stats(b).fired); /* no call was failed */
  fdy_backend_destroy(b);
  /* the inner backend is unharmed */
  assert_int_equal(cpu->ops->drain(cpu, &err), FDY_OK);
  rig_close(cpu, &r);
  fdy_backend_destroy(cpu);
}

/* ---- sweeps over the chain ----------------------------------------------- */

typedef fdy_backend *(*make_inner)(void);

/* Fails each counted call of the chain in turn, in both modes: the chain
 * returns that failure, drained and released (checked on the fake), and
 * the inner backend still runs the chain afterwards. Every counted entry
 * the chain uses is hit. */
static void sweep(const fixture *fx, make_inner make, bool is_fake) {
  fdy_backend *inner = make();
  fdy_backend *probe = wrap(inner, 0, FDY_FAULT_BEFORE_SUBMIT, false);
  fdy_error err;
  uint64_t result = 0;
  assert_int_equal(chain_run(probe, &fx->spec, &result, &err), FDY_OK);
  assert_int_equal(result, fx->expected);
  const uint64_t total = fdy_fault_get_stats(probe).calls;
  fdy_backend_destroy(probe);
  fdy_backend_destroy(inner);
  const char *seen[16] = {0};
  size_t seen_count = 0;
  for (int mode = FDY_FAULT_BEFORE_SUBMIT; mode <= FDY_FAULT_AFTER_SUBMIT;
       mode++) {
    for (uint64_t at = 1; at <= total; at++) {
      inner = make();
      fdy_backend *b = wrap(inner, at, (fdy_fault_mode)mode, false);
      fdy_status st = chain_run(b, &fx->spec, &result, &err);
      fdy_fault_stats s = fdy_fault_get_stats(b);
      assert_true(s.fired);
      assert_int_equal(st, FDY_ERR_BACKEND);
      assert_int_equal(err.kind, FDY_ERR_BACKEND);
      assert_string_equal(err.backend_op, s.fired_op);
      assert_int_equal(err.cleanup_kind, FDY_OK);
      if (is_fake) {
        assert_fake_clean(inner);
      }
      size_t k = 0;
      while (k < seen_count && strcmp(seen[k], s.fired_op) != 0) {
        k++;
      }
      if (k == seen_count) {
        assert_true(seen_count < 16);
        seen[seen_count++] = s.fired_op;
      }
      fdy_backend_destroy(b);
      assert_int_equal(chain_run(inner, &fx->spec, &result, &err), FDY_OK);
      assert_int_equal(result, fx->expected);
      fdy_backend_destroy(inner);
    }
  }
  /* capabilities, stream_create, event_create, buffer_alloc, stream_wait,
   * copy_to_device, event_record, launch, copy_to_host, host_wait, drain,
   * and the optional host_register and event_time */
  inner = make();
  assert_int_equal(seen_count, 11 + (inner->ops->host_register != NULL) +
                                   (inner->ops->event_time != NULL));
  /* past the last call nothing fires */
  fdy_backend *b = wrap(inner, total + 1, FDY_FAULT_AFTER_SUBMIT, false);
  assert_int_equal(chain_run(b, &fx->spec, &result, &err), FDY_OK);
  assert_false(fdy_fault_get_stats(b).fired);
  fdy_backend_destroy(b);
  fdy_backend_destroy(inner);
}

static void test_sweep_fake(void **state) {
  sweep(*state, make_fake, true);
}

static void test_sweep_cpu(void **state) {
  sweep(*state, make_cpu, false);
}

/* A failure and a failing cleanup drain: the first is reported, the drain's
 * in cleanup_kind. */
static void test_cleanup_failure_reported(void **state) {
  fixture *fx = *state;
  fdy_backend *fake = make_fake();
  fdy_backend *b = wrap(fake, 12, FDY_FAULT_AFTER_SUBMIT, true);
  fdy_error err;
  uint64_t result = 0;
  assert_int_equal(chain_run(b, &fx->spec, &result, &err), FDY_ERR_BACKEND);
  assert_string_equal(err.backend_op, fdy_fault_get_stats(b).fired_op);
  assert_int_equal(err.cleanup_kind, FDY_ERR_BACKEND);
  assert_fake_clean(fake);
  fdy_backend_destroy(b);
  fdy_backend_destroy(fake);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_transparent, setup, teardown),
      cmocka_unit_test(test_optional_entries_mirrored),
      cmocka_unit_test(test_graph_entries),
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_create_entries),
      cmocka_unit_test(test_work_entries),
      cmocka_unit_test(test_fail_drain),
      cmocka_unit_test(test_device_fault),
      cmocka_unit_test_setup_teardown(test_sweep_fake, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sweep_cpu, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cleanup_failure_reported, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
