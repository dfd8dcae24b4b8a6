/* Executor tests: a streamed checksum chain and a Llama checkpoint run
 * through plans on the fake backend (call accounting: nothing allocated or
 * registered after create, one launch per planned op), on the CPU backend
 * (results), and through the fault wrapper (every backend call of create
 * and of a Llama decode step failed, before and after submitting: a clear
 * error, everything drained and released), and steps recorded as graphs
 * and replayed on the fake backend (same results, one graph launch per
 * run, fallback reported, the fault sweep over recording and replay). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "foundry/checksum.h"
#include "foundry/cpu.h"
#include "foundry/fake.h"
#include "foundry/fault.h"
#include "foundry/llama.h"
#include "foundry/runtime.h"

#define CHAIN_LAYERS 5
#define CHAIN_BYTES  4096u

/* ---- the checksum chain
 * ------------------------------------------------------ */

typedef struct chain {
  unsigned char data[CHAIN_LAYERS][CHAIN_BYTES];
  fdy_graph *graph;
  fdy_plan *plan;
  fdy_tensor_id out;
  uint64_t expected;
} chain;

/* Weights of host extents, each op checksumming its weight into the chain;
 * streamed through `buffers` slots (a budget of exactly those slots). */
static void chain_make(chain *c, uint32_t buffers) {
  fdy_error err;
  memset(c, 0, sizeof(*c));
  assert_int_equal(fdy_graph_create("chain", &c->graph, &err), FDY_OK);
  fdy_tensor_id prev = {0};
  fdy_op_id ops[CHAIN_LAYERS];
  for (uint32_t i = 0; i < CHAIN_LAYERS; i++) {
    for (uint32_t k = 0; k < CHAIN_BYTES; k++) {
      c->data[i][k] = (unsigned char)(k * 7 + i * 13 + 1);
    }
    char name[32];
    fdy_tensor_id w, out;
    fdy_extent e = {
        .kind = FDY_EXTENT_HOST, .host = c->data[i], .length = CHAIN_BYTES};
    snprintf(name, sizeof name, "w%u", i);
    assert_int_equal(fdy_graph_add_weight(c->graph, name, FDY_DTYPE_U8,
                                          FDY_SHAPE(CHAIN_BYTES), &e, 1, &w,
                                          &err),
                     FDY_OK);
    snprintf(name, sizeof name, "out%u", i);
    assert_int_equal(fdy_graph_add_activation(c->graph, name, FDY_DTYPE_U64,
                                              FDY_SHAPE(1), &out, &err),
                     FDY_OK);
    fdy_tensor_id reads[2] = {w, prev};
    snprintf(name, sizeof name, "op%u", i);
    fdy_op_desc d = {.name = name,
                     .kind = FDY_OP_CHECKSUM,
                     .reads = reads,
                     .read_count = i ? 2 : 1,
                     .writes = &out,
                     .write_count = 1};
    assert_int_equal(fdy_graph_add_op(c->graph, &d, &ops[i], &err), FDY_OK);
    prev = out;
    c->expected =
        fdy_checksum(c->data[i], CHAIN_BYTES) + c->expected * FDY_CHAIN_PRIME;
  }
  c->out = prev;
  fdy_plan_step step = {"pass", ops, CHAIN_LAYERS, &c->out, 1};
  fdy_planner_options po = {.weight_budget = (uint64_t)buffers * CHAIN_BYTES,
                            .buffers = buffers};
  assert_int_equal(fdy_plan_build(c->graph, &step, 1, &po, &c->plan, &err),
                   FDY_OK);
}

static void chain_free(chain *c) {
  fdy_plan_destroy(c->plan);
  fdy_graph_destroy(c->graph);
}

static uint64_t chain_result(const fdy_executor *x, const chain *c) {
  uint64_t bytes = 0;
  const uint64_t *out = fdy_executor_output(x, c->out, &bytes);
  assert_non_null(out);
  assert_int_equal(bytes, sizeof(uint64_t));
  return *out;
}

static void test_chain_on_cpu(void **state) {
  (void)state;
  for (uint32_t buffers = 1; buffers <= 3; buffers++) {
    chain c;
    chain_make(&c, buffers);
    fdy_error err;
    fdy_backend *b = NULL;
    fdy_executor *x = NULL;
    assert_int_equal(fdy_cpu_backend_create(NULL, &b, &err), FDY_OK);
    assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                     FDY_OK);
    int64_t step = fdy_executor_step(x, "pass");
    assert_true(step > 0);
    for (int run = 0; run < 3; run++) {
      assert_int_equal(fdy_executor_run(x, (size_t)step, &err), FDY_OK);
      assert_true(chain_result(x, &c) == c.expected);
    }
    /* A changed weight shows in the next run: weights stream every run. */
    c.data[2][5] ^= 0x40;
    uint64_t changed = 0;
    for (uint32_t i = 0; i < CHAIN_LAYERS; i++) {
      changed =
          fdy_checksum(c.data[i], CHAIN_BYTES) + changed * FDY_CHAIN_PRIME;
    }
    assert_int_equal(fdy_executor_run(x, (size_t)step, &err), FDY_OK);
    assert_true(chain_result(x, &c) == changed);
    assert_int_equal(fdy_executor_finish(x, &err), FDY_OK);
    fdy_executor_destroy(x);
    fdy_backend_destroy(b);
    chain_free(&c);
  }
}

static void test_chain_on_fake_allocates_nothing_per_run(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_executor *x = NULL;
  fdy_fake_options fo = {.store_data = true};
  assert_int_equal(fdy_fake_backend_create(&fo, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_OK);
  fdy_fake_stats before = fdy_fake_get_stats(b);
  size_t step = (size_t)fdy_executor_step(x, "pass");
  for (int run = 0; run < 10; run++) {
    assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
    assert_true(chain_result(x, &c) == c.expected);
  }
  fdy_fake_stats after = fdy_fake_get_stats(b);
  assert_int_equal(after.buffer_allocs, before.buffer_allocs);
  assert_int_equal(after.host_registrations, before.host_registrations);
  assert_int_equal(after.events_created, before.events_created);
  assert_int_equal(after.streams_created, before.streams_created);
  assert_int_equal(after.launches - before.launches, 10 * CHAIN_LAYERS);
  assert_int_equal(after.copies_to_device - before.copies_to_device,
                   10 * CHAIN_LAYERS);
  fdy_executor_destroy(x);
  fdy_fake_stats end = fdy_fake_get_stats(b);
  assert_int_equal(end.live_buffers, 0);
  assert_int_equal(end.live_events, 0);
  assert_int_equal(end.live_streams, 0);
  assert_int_equal(end.live_hosts, 0);
  assert_int_equal(end.violations, 0);
  fdy_backend_destroy(b);
  chain_free(&c);
}

static void test_preflight_refusals(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_executor *x = NULL;
  /* An op kind the backend does not support: refused before any call
   * that allocates. */
  fdy_fake_options fo = {.unsupported_kinds = 1u << FDY_OP_CHECKSUM};
  assert_int_equal(fdy_fake_backend_create(&fo, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_ERR_UNSUPPORTED);
  assert_null(x);
  assert_string_equal(err.backend_op, "supports_op");
  assert_int_equal(fdy_fake_get_stats(b).buffer_allocs, 0);
  fdy_backend_destroy(b);
  /* Buffers above the device's memory: FDY_ERR_BUDGET. */
  fdy_fake_options small = {.caps = {.total_memory = CHAIN_BYTES}};
  assert_int_equal(fdy_fake_backend_create(&small, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_ERR_BUDGET);
  assert_int_equal(err.expected, CHAIN_BYTES);
  assert_int_equal(fdy_fake_get_stats(b).buffer_allocs, 0);
  fdy_backend_destroy(b);
  /* A plan whose weights are described, not bound. */
  fdy_graph *described = NULL;
  assert_int_equal(fdy_graph_create("chain", &described, &err), FDY_OK);
  fdy_plan *plan = NULL;
  {
    fdy_tensor_id w, out;
    assert_int_equal(fdy_graph_add_weight(described, "w", FDY_DTYPE_U8,
                                          FDY_SHAPE(CHAIN_BYTES), NULL, 0, &w,
                                          &err),
                     FDY_OK);
    assert_int_equal(fdy_graph_add_activation(described, "out", FDY_DTYPE_U64,
                                              FDY_SHAPE(1), &out, &err),
                     FDY_OK);
    fdy_op_id op;
    fdy_op_desc d = {.name = "op",
                     .kind = FDY_OP_CHECKSUM,
                     .reads = &w,
                     .read_count = 1,
                     .writes = &out,
                     .write_count = 1};
    assert_int_equal(fdy_graph_add_op(described, &d, &op, &err), FDY_OK);
    fdy_plan_step step = {"pass", &op, 1, &out, 1};
    fdy_planner_options po = {.weight_budget = CHAIN_BYTES, .buffers = 1};
    assert_int_equal(fdy_plan_build(described, &step, 1, &po, &plan, &err),
                     FDY_OK);
  }
  assert_int_equal(fdy_fake_backend_create(NULL, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(plan, NULL, b, NULL, &x, &err),
                   FDY_ERR_NOT_FOUND);
  assert_string_equal(err.name, "w");
  assert_true(err.command_index >= 0);
  /* The caller's graph must have the plan's structure. */
  assert_int_equal(fdy_executor_create(plan, c.graph, b, NULL, &x, &err),
                   FDY_ERR_INVALID_ARGUMENT);
  fdy_backend_destroy(b);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(described);
  chain_free(&c);
}

static void test_run_refusals(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 1);
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_executor *x = NULL;
  assert_int_equal(fdy_fake_backend_create(NULL, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_OK);
  /* setup (0) and teardown (last) are not steps */
  assert_int_equal(fdy_executor_run(x, 0, &err), FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(
      fdy_executor_run(x, fdy_plan_section_count(c.plan) - 1, &err),
      FDY_ERR_INVALID_ARGUMENT);
  assert_int_equal(fdy_executor_step(x, "setup"), -1);
  assert_int_equal(fdy_executor_step(x, "nothing"), -1);
  /* no step copies a weight in */
  uint64_t bytes = 1;
  assert_null(fdy_executor_input(x, (fdy_tensor_id){0}, &bytes));
  assert_int_equal(bytes, 0);
  fdy_executor_destroy(x);
  fdy_backend_destroy(b);
  chain_free(&c);
}

/* ---- Llama through the executor
 * ---------------------------------------------- */

typedef struct llama_case {
  fdy_llama_model *model;
  fdy_graph *graph;
  fdy_llama_graph_io io;
  fdy_plan *plan;
} llama_case;

/* The bytes of weight `name` aligned to the planner's alignment, and its
 * extents to copy (not padding). */
static uint64_t unit_bytes(const fdy_graph *g, const char *name,
                           size_t *pieces) {
  fdy_tensor_id id;
  fdy_tensor_info info;
  assert_int_equal(fdy_graph_find_tensor(g, name, &id, NULL), FDY_OK);
  assert_int_equal(fdy_graph_tensor(g, id, &info, NULL), FDY_OK);
  if (pieces != NULL) {
    *pieces = 0;
    for (size_t k = 0; k < info.extent_count; k++) {
      *pieces += info.extents[k].kind != FDY_EXTENT_PADDING;
    }
  }
  return (info.bytes + FDY_TENSOR_ALIGNMENT - 1) / FDY_TENSOR_ALIGNMENT *
         FDY_TENSOR_ALIGNMENT;
}

/* llama3-micro with everything resident, or (streamed) the embedding and
 * the head resident and both layers streamed through one slot. */
static void llama_make_plan(llama_case *l, bool streamed) {
  char dir[1024];
  fdy_error err;
  snprintf(dir, sizeof dir, "%s/llama3-micro/model",
           getenv("FOUNDRY_TEST_DATA"));
  memset(l, 0, sizeof(*l));
  assert_int_equal(fdy_llama_open(dir, &l->model, &err), FDY_OK);
  fdy_llama_graph_options go = {.context = 64, .prefill_rows = 8};
  assert_int_equal(fdy_llama_graph(l->model, &go, &l->graph, &l->io, &err),
                   FDY_OK);
  uint64_t budget = FDY_GIB;
  if (streamed) {
    budget = unit_bytes(l->graph, "embed", NULL) +
             unit_bytes(l->graph, "head", NULL) +
             unit_bytes(l->graph, "layer.0", NULL);
  }
  assert_int_equal(fdy_llama_plan(l->graph, &l->io, budget, streamed ? 1 : 2,
                                  &l->plan, &err),
                   FDY_OK);
}

static void llama_make(llama_case *l) {
  llama_make_plan(l, false);
}

static void llama_free(llama_case *l) {
  fdy_plan_destroy(l->plan);
  fdy_graph_destroy(l->graph);
  fdy_llama_close(l->model);
}

/* Writes one decode token at `position` into the step input. */
static void set_decode(fdy_executor *x, const llama_case *l, int32_t id,
                       int32_t position) {
  uint64_t bytes = 0;
  int32_t *in = fdy_executor_input(x, l->io.decode_step, &bytes);
  assert_non_null(in);
  assert_int_equal(bytes, FDY_STEP_ELEMENTS(1) * sizeof(int32_t));
  fdy_step_set_chunk(in, &id, 1, 0, (uint32_t)position);
}

static void test_llama_decode_on_fake(void **state) {
  (void)state;
  llama_case l;
  llama_make(&l);
  fdy_error err;
  fdy_backend *b = NULL;
  fdy_executor *x = NULL;
  assert_int_equal(fdy_fake_backend_create(NULL, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(l.plan, l.graph, b, NULL, &x, &err),
                   FDY_OK);
  fdy_fake_stats before = fdy_fake_get_stats(b);
  size_t decode = (size_t)fdy_executor_step(x, "decode");
  for (int32_t i = 0; i < 100; i++) {
    set_decode(x, &l, i % 7, i % 64);
    assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
  }
  fdy_fake_stats after = fdy_fake_get_stats(b);
  assert_int_equal(after.launches - before.launches,
                   100 * (uint64_t)l.io.decode_op_count);
  assert_int_equal(after.buffer_allocs, before.buffer_allocs);
  assert_int_equal(after.host_registrations, before.host_registrations);
  assert_int_equal(after.events_created, before.events_created);
  /* the step and sampling inputs in, logits and next id out, per run */
  assert_int_equal(after.copies_to_device - before.copies_to_device, 200);
  assert_int_equal(after.copies_to_host - before.copies_to_host, 200);
  fdy_executor_destroy(x);
  assert_int_equal(fdy_fake_get_stats(b).live_buffers, 0);
  assert_int_equal(fdy_fake_get_stats(b).violations, 0);
  fdy_backend_destroy(b);
  llama_free(&l);
}

/* Streamed layer units on the fake backend: packed (the default), each
 * is one copy of its whole slot image per token, from a page-locked
 * image counted in packed_bytes, and the checkpoint mapping is released
 * after setup (only the resident uploads read it); with skip_packing, one
 * copy per tensor of the unit from the registered mapping, nothing
 * packed. */
static void test_llama_streamed_copies_on_fake(void **state) {
  (void)state;
  llama_case l;
  llama_make_plan(&l, true);
  size_t pieces = 0;
  uint64_t layer = unit_bytes(l.graph, "layer.0", &pieces);
  assert_true(pieces > 1);
  for (int skip = 0; skip < 2; skip++) {
    fdy_error err;
    fdy_backend *b = NULL;
    fdy_executor *x = NULL;
    fdy_executor_options eo = {.skip_packing = skip == 1};
    assert_int_equal(fdy_fake_backend_create(NULL, &b, &err), FDY_OK);
    assert_int_equal(fdy_executor_create(l.plan, l.graph, b, &eo, &x, &err),
                     FDY_OK);
    fdy_executor_stats st = fdy_executor_get_stats(x);
    uint64_t packed = 2 * ((layer + 4095) / 4096 * 4096);
    assert_int_equal(st.packed_bytes, skip ? 0 : packed);
    assert_int_equal(st.registered_bytes,
                     st.staging_bytes + (skip ? st.mapped_bytes : packed));
    fdy_fake_stats before = fdy_fake_get_stats(b);
    size_t decode = (size_t)fdy_executor_step(x, "decode");
    for (int32_t i = 0; i < 10; i++) {
      set_decode(x, &l, i % 7, i);
      assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
    }
    fdy_fake_stats after = fdy_fake_get_stats(b);
    /* per token: the step input, each of the two layers, then the
     * sampling input */
    uint64_t per_layer = skip ? pieces : 1;
    assert_int_equal(after.copies_to_device - before.copies_to_device,
                     10 * (2 + 2 * per_layer));
    if (!skip) {
      assert_int_equal(after.bytes_to_device - before.bytes_to_device,
                       10 * (FDY_STEP_ELEMENTS(1) * sizeof(int32_t) +
                             FDY_SAMPLE_FIELDS * sizeof(uint32_t) + 2 * layer));
    }
    assert_int_equal(after.host_registrations, before.host_registrations);
    fdy_executor_destroy(x);
    assert_int_equal(fdy_fake_get_stats(b).live_hosts, 0);
    assert_int_equal(fdy_fake_get_stats(b).live_buffers, 0);
    assert_int_equal(fdy_fake_get_stats(b).violations, 0);
    fdy_backend_destroy(b);
  }
  llama_free(&l);
}

/* The fault sweep of test_llama_fault_sweep over one plan. */
static void llama_fault_sweep(bool streamed) {
  llama_case l;
  llama_make_plan(&l, streamed);
  fdy_error err;
  fdy_backend *cpu = NULL;
  fdy_cpu_options co = {.threads = 2};
  assert_int_equal(fdy_cpu_backend_create(&co, &cpu, &err), FDY_OK);
  /* Count the calls of create and of one decode run. */
  fdy_backend *counting = NULL;
  fdy_executor *x = NULL;
  assert_int_equal(fdy_fault_backend_create(cpu, NULL, &counting, &err),
                   FDY_OK);
  assert_int_equal(
      fdy_executor_create(l.plan, l.graph, counting, NULL, &x, &err), FDY_OK);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  size_t decode = (size_t)fdy_executor_step(x, "decode");
  set_decode(x, &l, 3, 0);
  assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
  uint64_t decode_calls = fdy_fault_get_stats(counting).calls - create_calls;
  assert_true(decode_calls >= l.io.decode_op_count);
  fdy_executor_destroy(x);
  fdy_backend_destroy(counting);

  for (int mode = 0; mode < 2; mode++) {
    for (uint64_t n = 1; n <= create_calls + decode_calls; n++) {
      fdy_fault_options fo = {.fail_at_call = n, .mode = (fdy_fault_mode)mode};
      fdy_backend *faulty = NULL;
      assert_int_equal(fdy_fault_backend_create(cpu, &fo, &faulty, &err),
                       FDY_OK);
      x = NULL;
      fdy_status st =
          fdy_executor_create(l.plan, l.graph, faulty, NULL, &x, &err);
      if (n <= create_calls) {
        assert_int_equal(st, FDY_ERR_BACKEND);
        assert_null(x);
        assert_true(err.backend_op[0] != '\0');
      } else {
        assert_int_equal(st, FDY_OK);
        set_decode(x, &l, 3, 0);
        assert_int_equal(fdy_executor_run(x, decode, &err), FDY_ERR_BACKEND);
        assert_true(err.backend_op[0] != '\0');
        assert_true(err.command_index >= 0);
        assert_true(fdy_fault_get_stats(faulty).fired);
        assert_int_equal(fdy_executor_run(x, decode, &err),
                         FDY_ERR_INVALID_ARGUMENT);
        fdy_executor_destroy(x);
      }
      fdy_backend_destroy(faulty);
    }
  }
  /* The CPU backend is whole afterwards: a clean run still gives the same
   * next id as a fresh one. */
  assert_int_equal(fdy_executor_create(l.plan, l.graph, cpu, NULL, &x, &err),
                   FDY_OK);
  set_decode(x, &l, 3, 0);
  assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
  const int32_t *next = fdy_executor_output(x, l.io.decode_next, NULL);
  assert_non_null(next);
  assert_true(next[0] >= 0 &&
              (uint32_t)next[0] < fdy_llama_model_config(l.model)->vocab_size);
  fdy_executor_destroy(x);
  fdy_backend_destroy(cpu);
  llama_free(&l);
}

/* ---- graphs (runtime.h): steps recorded at create, replayed per run
 * ---------------------------------------------------------------------- */

static fdy_backend *graph_fake(void) {
  fdy_backend *b = NULL;
  fdy_fake_options fo = {.store_data = true, .graphs = true};
  assert_int_equal(fdy_fake_backend_create(&fo, &b, NULL), FDY_OK);
  return b;
}

/* Nothing the executor acquired is left on the fake, and it broke no rule
 * of the contract. */
static void assert_fake_clean(const fdy_backend *b) {
  fdy_fake_stats s = fdy_fake_get_stats(b);
  assert_int_equal(s.live_buffers, 0);
  assert_int_equal(s.live_events, 0);
  assert_int_equal(s.live_streams, 0);
  assert_int_equal(s.live_hosts, 0);
  assert_int_equal(s.live_graphs, 0);
  assert_int_equal(s.pending_work, 0);
  assert_int_equal(s.violations, 0);
}

/* A streamed chain (a copy stream and a compute stream, events between
 * them) is recorded across both streams and replayed: the same results as
 * runs issued command by command, one graph launch per run, the recorded
 * work submitted again in full, and nothing allocated, registered or
 * created by a run. */
static void test_graphs_replay_streamed_chain(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *b = graph_fake();
  fdy_executor *x = NULL;
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_OK);
  size_t step = (size_t)fdy_executor_step(x, "pass");
  assert_int_equal(fdy_executor_step_mode(x, step, &err), FDY_STEP_GRAPHS);
  assert_int_equal(err.kind, FDY_OK);
  fdy_executor_stats xs = fdy_executor_get_stats(x);
  assert_int_equal(xs.graph_steps, 1);
  assert_int_equal(xs.graph_fallbacks, 0);
  assert_int_equal(xs.graphs, 1);
  /* The recording spans both plan streams and their waits. */
  int64_t streams[2] = {-1, -1};
  size_t recorded_waits = 0;
  for (size_t i = 0; i < fdy_fake_call_count(b); i++) {
    const fdy_fake_call *call = fdy_fake_call_at(b, i);
    if (!call->recorded) {
      continue;
    }
    recorded_waits += strcmp(call->op, "stream_wait") == 0;
    if (strcmp(call->op, "copy_to_device") == 0) {
      streams[0] = call->stream;
    } else if (strcmp(call->op, "launch") == 0) {
      streams[1] = call->stream;
    }
  }
  assert_true(streams[0] >= 0 && streams[1] >= 0 && streams[0] != streams[1]);
  assert_true(recorded_waits > 0);
  fdy_fake_stats before = fdy_fake_get_stats(b);
  size_t calls_before = fdy_fake_call_count(b);
  for (int run = 0; run < 10; run++) {
    assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
    assert_true(chain_result(x, &c) == c.expected);
    assert_int_equal(fdy_executor_get_stats(x).last_run_graph_launches, 1);
  }
  fdy_fake_stats after = fdy_fake_get_stats(b);
  assert_int_equal(after.graph_launches - before.graph_launches, 10);
  assert_int_equal(fdy_executor_get_stats(x).graph_launches, 10);
  assert_int_equal(after.launches - before.launches, 10 * CHAIN_LAYERS);
  assert_int_equal(after.copies_to_device - before.copies_to_device,
                   10 * CHAIN_LAYERS);
  assert_int_equal(after.copies_to_host - before.copies_to_host, 10);
  assert_int_equal(after.buffer_allocs, before.buffer_allocs);
  assert_int_equal(after.host_registrations, before.host_registrations);
  assert_int_equal(after.events_created, before.events_created);
  assert_int_equal(after.streams_created, before.streams_created);
  assert_int_equal(after.graphs_recorded, before.graphs_recorded);
  /* A run issues the graph, then an event record and a host wait: no
   * command-by-command calls. */
  assert_int_equal(fdy_fake_call_count(b) - calls_before, 10 * 3);
  for (size_t i = calls_before; i < fdy_fake_call_count(b); i++) {
    const char *op = fdy_fake_call_at(b, i)->op;
    assert_true(strcmp(op, "graph_launch") == 0 ||
                strcmp(op, "event_record") == 0 ||
                strcmp(op, "host_wait") == 0);
  }
  /* The recorded copies read the weights at each replay. */
  c.data[3][9] ^= 0x11;
  uint64_t changed = 0;
  for (uint32_t i = 0; i < CHAIN_LAYERS; i++) {
    changed = fdy_checksum(c.data[i], CHAIN_BYTES) + changed * FDY_CHAIN_PRIME;
  }
  assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
  assert_true(chain_result(x, &c) == changed);
  /* The same plan issued command by command gives the same result. */
  fdy_backend *direct = graph_fake();
  fdy_executor *y = NULL;
  fdy_executor_options no = {.no_graphs = true};
  assert_int_equal(fdy_executor_create(c.plan, NULL, direct, &no, &y, &err),
                   FDY_OK);
  assert_int_equal(fdy_executor_step_mode(y, step, NULL), FDY_STEP_COMMANDS);
  assert_int_equal(fdy_executor_run(y, step, &err), FDY_OK);
  assert_true(chain_result(y, &c) == changed);
  assert_int_equal(fdy_executor_get_stats(y).last_run_graph_launches, 0);
  assert_int_equal(fdy_fake_get_stats(direct).graphs_recorded, 0);
  assert_int_equal(fdy_executor_finish(x, &err), FDY_OK);
  fdy_executor_destroy(x);
  fdy_executor_destroy(y);
  assert_fake_clean(b);
  assert_fake_clean(direct);
  fdy_backend_destroy(b);
  fdy_backend_destroy(direct);
  chain_free(&c);
}

/* Per-command timings need events between commands: no graphs then; the
 * CPU backend has no graph entries. */
static void test_graphs_not_used(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *b = graph_fake();
  fdy_executor *x = NULL;
  fdy_executor_options timed = {.collect_timings = true};
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, &timed, &x, &err),
                   FDY_OK);
  size_t step = (size_t)fdy_executor_step(x, "pass");
  assert_int_equal(fdy_executor_step_mode(x, step, NULL), FDY_STEP_COMMANDS);
  assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
  assert_true(chain_result(x, &c) == c.expected);
  size_t count = 0;
  assert_non_null(fdy_executor_timings(x, &count));
  assert_true(count > CHAIN_LAYERS);
  assert_int_equal(fdy_fake_get_stats(b).graphs_recorded, 0);
  fdy_executor_destroy(x);
  assert_fake_clean(b);
  fdy_backend_destroy(b);

  assert_int_equal(fdy_cpu_backend_create(NULL, &b, &err), FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, b, NULL, &x, &err),
                   FDY_OK);
  assert_int_equal(fdy_executor_step_mode(x, step, NULL), FDY_STEP_COMMANDS);
  assert_int_equal(fdy_executor_get_stats(x).graph_steps, 0);
  fdy_executor_destroy(x);
  fdy_backend_destroy(b);
  chain_free(&c);
}

/* A backend that refuses to record a step (the fake, like CUDA, cannot
 * record a copy from host memory that is not registered) leaves it running
 * command by command, and says so. */
static void test_graphs_fallback_is_reported(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *b = graph_fake();
  fdy_executor *x = NULL;
  fdy_executor_options unregistered = {.skip_host_registration = true};
  assert_int_equal(
      fdy_executor_create(c.plan, NULL, b, &unregistered, &x, &err), FDY_OK);
  size_t step = (size_t)fdy_executor_step(x, "pass");
  fdy_error why;
  assert_int_equal(fdy_executor_step_mode(x, step, &why), FDY_STEP_FALLBACK);
  assert_int_equal(why.kind, FDY_ERR_UNSUPPORTED);
  assert_string_equal(why.backend_op, "copy_to_device");
  assert_true(why.command_index >= 0);
  fdy_executor_stats xs = fdy_executor_get_stats(x);
  assert_int_equal(xs.graph_steps, 0);
  assert_int_equal(xs.graph_fallbacks, 1);
  assert_int_equal(fdy_fake_get_stats(b).live_graphs, 0);
  for (int run = 0; run < 3; run++) {
    assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
    assert_true(chain_result(x, &c) == c.expected);
    assert_int_equal(fdy_executor_get_stats(x).last_run_graph_launches, 0);
  }
  fdy_executor_destroy(x);
  assert_fake_clean(b);
  fdy_backend_destroy(b);
  chain_free(&c);
}

/* Every counted backend call of create (which records the step) and of
 * two replays, failed before and after submitting: a clear error naming
 * the entry that failed, nothing left acquired, recording or pending, and
 * no contract breach. */
static void test_graphs_fault_sweep(void **state) {
  (void)state;
  chain c;
  chain_make(&c, 2);
  fdy_error err;
  fdy_backend *fake = graph_fake();
  fdy_backend *counting = NULL;
  fdy_executor *x = NULL;
  assert_int_equal(fdy_fault_backend_create(fake, NULL, &counting, &err),
                   FDY_OK);
  assert_int_equal(fdy_executor_create(c.plan, NULL, counting, NULL, &x, &err),
                   FDY_OK);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  size_t step = (size_t)fdy_executor_step(x, "pass");
  assert_int_equal(fdy_executor_step_mode(x, step, NULL), FDY_STEP_GRAPHS);
  assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
  assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
  uint64_t total = fdy_fault_get_stats(counting).calls;
  fdy_executor_destroy(x);
  fdy_backend_destroy(counting);
  assert_fake_clean(fake);

  bool failed[3] = {false, false, false}; /* graph_begin, _end, _launch */
  for (int mode = 0; mode < 2; mode++) {
    for (uint64_t n = 1; n <= total; n++) {
      fdy_fault_options fo = {.fail_at_call = n, .mode = (fdy_fault_mode)mode};
      fdy_backend *faulty = NULL;
      assert_int_equal(fdy_fault_backend_create(fake, &fo, &faulty, &err),
                       FDY_OK);
      x = NULL;
      fdy_status st = fdy_executor_create(c.plan, NULL, faulty, NULL, &x, &err);
      if (n <= create_calls) {
        assert_int_equal(st, FDY_ERR_BACKEND);
        assert_null(x);
      } else {
        assert_int_equal(st, FDY_OK);
        st = fdy_executor_run(x, step, &err);
        if (st == FDY_OK) {
          st = fdy_executor_run(x, step, &err);
        }
        assert_int_equal(st, FDY_ERR_BACKEND);
        assert_true(err.command_index >= 0);
        assert_int_equal(fdy_executor_run(x, step, NULL),
                         FDY_ERR_INVALID_ARGUMENT);
        fdy_executor_destroy(x);
      }
      fdy_fault_stats fs = fdy_fault_get_stats(faulty);
      assert_true(fs.fired);
      assert_string_equal(err.backend_op, fs.fired_op);
      failed[0] = failed[0] || strcmp(fs.fired_op, "graph_begin") == 0;
      failed[1] = failed[1] || strcmp(fs.fired_op, "graph_end") == 0;
      failed[2] = failed[2] || strcmp(fs.fired_op, "graph_launch") == 0;
      fdy_backend_destroy(faulty);
      assert_fake_clean(fake);
    }
  }
  assert_true(failed[0] && failed[1] && failed[2]);
  fdy_backend_destroy(fake);
  chain_free(&c);
}

/* 100 decode steps of a Llama checkpoint replayed as graphs: one graph
 * launch per token, every planned op launched once per token by the
 * replay, nothing allocated after create. */
static void test_graphs_llama_decode_on_fake(void **state) {
  (void)state;
  llama_case l;
  llama_make(&l);
  fdy_error err;
  fdy_backend *b = graph_fake();
  fdy_executor *x = NULL;
  assert_int_equal(fdy_executor_create(l.plan, l.graph, b, NULL, &x, &err),
                   FDY_OK);
  size_t decode = (size_t)fdy_executor_step(x, "decode");
  size_t prefill = (size_t)fdy_executor_step(x, "prefill");
  assert_int_equal(fdy_executor_step_mode(x, decode, NULL), FDY_STEP_GRAPHS);
  assert_int_equal(fdy_executor_step_mode(x, prefill, NULL), FDY_STEP_GRAPHS);
  assert_int_equal(fdy_executor_get_stats(x).graph_steps, 2);
  fdy_fake_stats before = fdy_fake_get_stats(b);
  for (int32_t i = 0; i < 100; i++) {
    set_decode(x, &l, i % 7, i % 64);
    assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
    assert_int_equal(fdy_executor_get_stats(x).last_run_graph_launches, 1);
  }
  fdy_fake_stats after = fdy_fake_get_stats(b);
  assert_int_equal(after.graph_launches - before.graph_launches, 100);
  assert_int_equal(after.launches - before.launches,
                   100 * (uint64_t)l.io.decode_op_count);
  assert_int_equal(after.buffer_allocs, before.buffer_allocs);
  assert_int_equal(after.host_registrations, before.host_registrations);
  assert_int_equal(after.events_created, before.events_created);
  assert_int_equal(after.copies_to_device - before.copies_to_device, 200);
  assert_int_equal(after.copies_to_host - before.copies_to_host, 200);
  fdy_executor_destroy(x);
  assert_fake_clean(b);
  fdy_backend_destroy(b);
  llama_free(&l);
}

/* A Llama decode step of 4 sequences and 12 rows (a declared step input,
 * graph.h) recorded per batch-size bucket (runtime.h): buckets 1, 2, 4, 8
 * and 12, each recorded once at create with every launch narrowed to its
 * rows (variant_rows 12 for 2, 4 and 8; the full step's ops as they are),
 * the step input copied in for its rows and the next ids and logits out
 * for its rows; a run of count c launches the graph of the smallest bucket
 * of at least c rows and records, allocates and registers nothing. */
static void test_graphs_decode_buckets_on_fake(void **state) {
  (void)state;
  enum { ROWS = 12, BUCKETS = 5, SEQUENCES = 4 };
  static const uint64_t bucket_rows[BUCKETS] = {1, 2, 4, 8, ROWS};
  char dir[1024];
  fdy_error err;
  llama_case l;
  memset(&l, 0, sizeof l);
  snprintf(dir, sizeof dir, "%s/llama3-micro/model",
           getenv("FOUNDRY_TEST_DATA"));
  assert_int_equal(fdy_llama_open(dir, &l.model, &err), FDY_OK);
  fdy_llama_graph_options go = {.context = 64,
                                .prefill_rows = 8,
                                .sequences = SEQUENCES,
                                .step_rows = ROWS};
  assert_int_equal(fdy_llama_graph(l.model, &go, &l.graph, &l.io, &err),
                   FDY_OK);
  fdy_tensor_info step_info;
  assert_int_equal(
      fdy_graph_tensor(l.graph, l.io.decode_step, &step_info, NULL), FDY_OK);
  assert_int_equal(step_info.step_rows, ROWS);
  assert_int_equal(
      fdy_graph_tensor(l.graph, l.io.prefill_step, &step_info, NULL), FDY_OK);
  assert_int_equal(step_info.step_rows, 0);
  assert_int_equal(fdy_llama_plan(l.graph, &l.io, FDY_GIB, 2, &l.plan, &err),
                   FDY_OK);
  const uint64_t vocab = fdy_llama_model_config(l.model)->vocab_size;
  fdy_backend *b = graph_fake();
  fdy_executor *x = NULL;
  assert_int_equal(fdy_executor_create(l.plan, l.graph, b, NULL, &x, &err),
                   FDY_OK);
  size_t decode = (size_t)fdy_executor_step(x, "decode");
  assert_int_equal(fdy_executor_step_mode(x, decode, NULL), FDY_STEP_GRAPHS);
  fdy_executor_stats xs = fdy_executor_get_stats(x);
  assert_int_equal(xs.graph_steps, 2);
  assert_int_equal(xs.bucket_steps, 1);
  assert_int_equal(fdy_fake_get_stats(b).graphs_recorded, xs.graphs);
  /* The recordings of the decode step (those with a ROPE_ATTENTION), in
   * bucket order: every launch's rows the bucket's, the copies its rows'. */
  int64_t graph_of[BUCKETS];
  size_t seen = 0;
  bool attends = false;
  uint64_t low = UINT64_MAX, high = 0, variant = 0, step_copies = 0;
  uint64_t full_copies = 0;
  uint64_t to_host = 0;
  size_t launches = 0;
  for (size_t i = 0; i < fdy_fake_call_count(b); i++) {
    const fdy_fake_call *call = fdy_fake_call_at(b, i);
    if (strcmp(call->op, "graph_begin") == 0) {
      attends = false;
      low = UINT64_MAX;
      high = variant = step_copies = full_copies = to_host = 0;
      launches = 0;
      continue;
    }
    if (strcmp(call->op, "graph_end") == 0) {
      if (!attends) {
        continue;
      }
      assert_true(seen < BUCKETS);
      uint64_t rows = bucket_rows[seen];
      assert_int_equal(low, rows);
      assert_int_equal(high, rows);
      assert_int_equal(variant, rows >= 2 && rows < ROWS ? ROWS : 0);
      assert_int_equal(launches, l.io.decode_op_count);
      /* the step input in for the bucket's rows, not the step's */
      assert_true(step_copies >= 1);
      assert_int_equal(full_copies, rows < ROWS ? 0 : step_copies);
      assert_int_equal(to_host,
                       rows * sizeof(int32_t) + rows * vocab * sizeof(float));
      graph_of[seen++] = call->handle;
      continue;
    }
    if (!call->recorded) {
      continue;
    }
    if (strcmp(call->op, "launch") == 0) {
      attends |= call->op_kind == FDY_OP_ROPE_ATTENTION;
      low = call->rows < low ? call->rows : low;
      high = call->rows > high ? call->rows : high;
      variant |= call->variant_rows;
      launches++;
    } else if (strcmp(call->op, "copy_to_host") == 0) {
      to_host += call->bytes;
    } else if (strcmp(call->op, "copy_to_device") == 0 && seen < BUCKETS) {
      const uint64_t rows = bucket_rows[seen];
      step_copies += call->bytes == FDY_STEP_ELEMENTS(rows) * sizeof(int32_t);
      full_copies += call->bytes == FDY_STEP_ELEMENTS(ROWS) * sizeof(int32_t);
    }
  }
  assert_int_equal(seen, BUCKETS);
  /* Runs of counts 1 to 12 in a mixed order: the bucket of each. */
  static const uint32_t counts[] = {3, 1, 12, 5, 8, 2, 9, 4, 7, 1, 11, 6};
  const size_t runs = sizeof counts / sizeof counts[0];
  fdy_fake_stats before = fdy_fake_get_stats(b);
  uint64_t expected_to_host = 0;
  for (size_t r = 0; r < runs; r++) {
    int32_t *in = fdy_executor_input(x, l.io.decode_step, NULL);
    assert_non_null(in);
    for (uint32_t t = 0; t < counts[r]; t++) {
      fdy_step_set_row(in, t, (int32_t)(t % 7), t % SEQUENCES,
                       (uint32_t)(r + t / SEQUENCES));
    }
    in[FDY_STEP_COUNT] = (int32_t)counts[r];
    assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
    size_t j = 0;
    while (bucket_rows[j] < counts[r]) {
      j++;
    }
    xs = fdy_executor_get_stats(x);
    assert_int_equal(xs.last_run_rows, bucket_rows[j]);
    assert_int_equal(xs.last_run_graph_launches, 1);
    const fdy_fake_call *launch = NULL;
    for (size_t i = fdy_fake_call_count(b); i-- > 0 && launch == NULL;) {
      const fdy_fake_call *call = fdy_fake_call_at(b, i);
      launch = strcmp(call->op, "graph_launch") == 0 ? call : NULL;
    }
    assert_non_null(launch);
    assert_int_equal(launch->handle, graph_of[j]);
    expected_to_host += bucket_rows[j] * (sizeof(int32_t) + vocab * 4);
  }
  fdy_fake_stats after = fdy_fake_get_stats(b);
  assert_int_equal(after.graphs_recorded, before.graphs_recorded);
  assert_int_equal(after.graph_launches - before.graph_launches, runs);
  assert_int_equal(after.launches - before.launches,
                   runs * (uint64_t)l.io.decode_op_count);
  assert_int_equal(after.bytes_to_host - before.bytes_to_host,
                   expected_to_host);
  assert_int_equal(after.buffer_allocs, before.buffer_allocs);
  assert_int_equal(after.host_registrations, before.host_registrations);
  assert_int_equal(after.events_created, before.events_created);
  fdy_executor_destroy(x);
  assert_fake_clean(b);
  /* Without graphs the step runs at its full rows, as before. */
  fdy_executor_options no = {.no_graphs = true};
  assert_int_equal(fdy_executor_create(l.plan, l.graph, b, &no, &x, &err),
                   FDY_OK);
  int32_t *in = fdy_executor_input(x, l.io.decode_step, NULL);
  fdy_step_set_row(in, 0, 1, 0, 0);
  in[FDY_STEP_COUNT] = 1;
  before = fdy_fake_get_stats(b);
  assert_int_equal(fdy_executor_run(x, decode, &err), FDY_OK);
  after = fdy_fake_get_stats(b);
  assert_int_equal(fdy_executor_get_stats(x).last_run_rows, 0);
  assert_int_equal(after.bytes_to_host - before.bytes_to_host,
                   ROWS * (sizeof(int32_t) + vocab * 4));
  fdy_executor_destroy(x);
  assert_fake_clean(b);
  fdy_backend_destroy(b);
  llama_free(&l);
}

/* Every counted backend call of executor create, then of one decode step,
 * failed in both modes on the CPU backend, everything resident and with
 * the layers streamed from packed images: the error names the entry,
 * nothing is left acquired, and a failed executor refuses to run. */
static void test_llama_fault_sweep(void **state) {
  (void)state;
  for (int streamed = 0; streamed < 2; streamed++) {
    llama_fault_sweep(streamed == 1);
  }
}

int main(void) {
  if (getenv("FOUNDRY_TEST_DATA") == NULL) {
    fprintf(stderr, "FOUNDRY_TEST_DATA is not set\n");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_on_cpu),
      cmocka_unit_test(test_chain_on_fake_allocates_nothing_per_run),
      cmocka_unit_test(test_preflight_refusals),
      cmocka_unit_test(test_run_refusals),
      cmocka_unit_test(test_llama_decode_on_fake),
      cmocka_unit_test(test_llama_streamed_copies_on_fake),
      cmocka_unit_test(test_llama_fault_sweep),
      cmocka_unit_test(test_graphs_replay_streamed_chain),
      cmocka_unit_test(test_graphs_not_used),
      cmocka_unit_test(test_graphs_fallback_is_reported),
      cmocka_unit_test(test_graphs_fault_sweep),
      cmocka_unit_test(test_graphs_llama_decode_on_fake),
      cmocka_unit_test(test_graphs_decode_buckets_on_fake),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
