/* CUDA graphs end to end (label gpu; exit 77 without a device unless
 * FOUNDRY_REQUIRE_CUDA=1): Llama fixtures prefilled and decoded for 16
 * greedy tokens through executors on the CUDA backend, with graphs (each
 * step captured at create, replayed per run) and without (no_graphs):
 * identical ids and bitwise identical logits, and the same with every
 * kernel launched serially (no programmatic dependent launch), with every
 * weight resident
 * and with the layers streamed through two slots (a copy stream and a
 * compute stream captured together), F32 and F16 KV caches; a streamed
 * run's ids and logits bitwise those of the resident run; the logits
 * also agree with the CPU backend fed the same ids (relative error within
 * FDY_LLAMA_BACKEND_TOLERANCE: the CUDA prefill multiplies in F16). The
 * executor poisons outputs before each run. Staged host copies cannot be
 * captured: the steps fall back to commands, reported, with the same
 * results. A fault sweep through the fault wrapper over create and two
 * replays: a clear error, and the backend whole afterwards. Batch-size
 * buckets (runtime.h): sessions of several sequences decode through steps
 * of varying counts with graphs (each step launched as the graph of its
 * bucket) and without: for every count of 2 or more, ids and logits
 * bitwise equal (the buckets' ops choose their kernels as the full step's,
 * ops.h variant_rows). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "foundry/cpu.h"
#include "foundry/cuda.h"
#include "foundry/fault.h"
#include "foundry/llama.h"
#include "foundry/llama_session.h"
#include "foundry/runtime.h"

#define TOKENS       16
#define PROMPT       8
#define CONTEXT      64
#define PREFILL_ROWS 16

static const char *const fixtures[] = {
    "llama3-micro",          "llama3-tiny",         "llama3-micro-untied-g32",
    "llama3-micro-mha-g128", "llama3-micro-q8-g32", "llama3-micro-bf16",
    "llama3-micro-f32",      "llama3-micro-mixed",  "mistral-micro",
    "qwen2-micro",           "qwen3-micro"};

typedef struct model_case {
  fdy_llama_model *model;
  fdy_graph *graph;
  fdy_llama_graph_io io;
  fdy_plan *plan;
  uint32_t vocab;
} model_case;

/* What one decode produced: the ids fed and chosen, and every step's
 * logits (the prefill's last row first). */
typedef struct trace {
  int32_t ids[TOKENS + 1];
  float *logits; /* (TOKENS + 1) x vocab */
  fdy_step_mode modes[2];
  uint64_t graph_launches;
} trace;

static void fixture_model(const char *fixture, char *buf, size_t cap) {
  const char *dir = getenv("FOUNDRY_TEST_DATA");
  snprintf(buf, cap, "%s/%s/model", dir ? dir : "tests/data", fixture);
}

/* streamed: a budget of two slots of the largest weight, so that the layers
 * stream; else everything resident. */
static void case_make(model_case *m, const char *fixture, fdy_dtype kv,
                      bool streamed) {
  char dir[512];
  fdy_error err;
  memset(m, 0, sizeof *m);
  fixture_model(fixture, dir, sizeof dir);
  assert_int_equal(fdy_llama_open(dir, &m->model, &err), FDY_OK);
  m->vocab = fdy_llama_model_config(m->model)->vocab_size;
  fdy_llama_graph_options go = {
      .context = CONTEXT, .prefill_rows = PREFILL_ROWS, .kv_dtype = kv};
  assert_int_equal(fdy_llama_graph(m->model, &go, &m->graph, &m->io, &err),
                   FDY_OK);
  uint64_t budget = FDY_GIB;
  if (streamed) {
    uint64_t largest = 0;
    for (size_t t = 0; t < fdy_graph_tensor_count(m->graph); t++) {
      fdy_tensor_info info;
      assert_int_equal(
          fdy_graph_tensor(m->graph, (fdy_tensor_id){(uint32_t)t}, &info, &err),
          FDY_OK);
      if (info.role == FDY_TENSOR_WEIGHT && info.bytes > largest) {
        largest = info.bytes;
      }
    }
    budget = 2 * largest;
  }
  assert_int_equal(fdy_llama_plan(m->graph, &m->io, budget, 2, &m->plan, &err),
                   FDY_OK);
}

static void case_free(model_case *m) {
  fdy_plan_destroy(m->plan);
  fdy_graph_destroy(m->graph);
  fdy_llama_close(m->model);
}

static void copy_logits(const fdy_executor *x, fdy_tensor_id t, float *dst,
                        uint32_t vocab) {
  uint64_t bytes = 0;
  const float *src = fdy_executor_output(x, t, &bytes);
  assert_non_null(src);
  assert_true(bytes >= (uint64_t)vocab * sizeof(float));
  /* the last row (prefill outputs the last row only without all_logits) */
  memcpy(dst, (const unsigned char *)src + bytes - vocab * sizeof(float),
         vocab * sizeof(float));
}

/* Prefills PROMPT ids and decodes TOKENS tokens on backend b. forced (NULL:
 * greedy) gives the ids to feed instead of the argmax, so that another
 * backend can be compared step by step. */
static fdy_status decode(const model_case *m, fdy_backend *b,
                         const fdy_executor_options *o, const int32_t *forced,
                         trace *out, fdy_error *err) {
  fdy_executor *x = NULL;
  fdy_status st = fdy_executor_create(m->plan, m->graph, b, o, &x, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t prefill = (size_t)fdy_executor_step(x, "prefill");
  size_t step = (size_t)fdy_executor_step(x, "decode");
  out->modes[0] = fdy_executor_step_mode(x, prefill, NULL);
  out->modes[1] = fdy_executor_step_mode(x, step, NULL);
  out->graph_launches = 0;
  uint64_t bytes = 0;
  int32_t *in = fdy_executor_input(x, m->io.prefill_step, &bytes);
  assert_non_null(in);
  in[FDY_STEP_COUNT] = PROMPT;
  for (int32_t i = 0; i < PROMPT; i++) {
    fdy_step_set_row(in, (uint32_t)i, (i * 37 + 11) % (int32_t)m->vocab, 0,
                     (uint32_t)i);
  }
  st = fdy_executor_run(x, prefill, err);
  for (int32_t t = 0; st == FDY_OK && t <= TOKENS; t++) {
    if (t > 0) {
      int32_t *d = fdy_executor_input(x, m->io.decode_step, NULL);
      d[FDY_STEP_COUNT] = 1;
      fdy_step_set_row(d, 0, out->ids[t - 1], 0, (uint32_t)(PROMPT + t - 1));
      st = fdy_executor_run(x, step, err);
      if (st != FDY_OK) {
        break;
      }
      out->graph_launches += fdy_executor_get_stats(x).last_run_graph_launches;
    }
    fdy_tensor_id logits = t == 0 ? m->io.prefill_logits : m->io.decode_logits;
    fdy_tensor_id next = t == 0 ? m->io.prefill_next : m->io.decode_next;
    copy_logits(x, logits, out->logits + (size_t)t * m->vocab, m->vocab);
    const int32_t *chosen = fdy_executor_output(x, next, NULL);
    assert_non_null(chosen);
    assert_true(chosen[0] >= 0 && (uint32_t)chosen[0] < m->vocab);
    out->ids[t] = forced ? forced[t] : chosen[0];
  }
  if (st == FDY_OK) {
    st = fdy_executor_finish(x, err);
  }
  fdy_executor_destroy(x);
  return st;
}

static trace trace_new(const model_case *m) {
  trace t;
  memset(&t, 0, sizeof t);
  t.logits = malloc((size_t)(TOKENS + 1) * m->vocab * sizeof(float));
  assert_non_null(t.logits);
  return t;
}

static double relative_error(const float *a, const float *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  return den > 0 ? sqrt(num / den) : INFINITY;
}

/* serial: kernels start after the previous one completed (no programmatic
 * dependent launch, which the default backend uses). */
static fdy_backend *cuda_backend(fdy_cuda_host_mode mode, bool serial) {
  fdy_cuda_options co = {.host_mode = mode, .serial_launch = serial};
  fdy_backend *b = NULL;
  fdy_error err;
  assert_int_equal(fdy_cuda_backend_create(&co, &b, &err), FDY_OK);
  return b;
}

static void test_graphs_bitwise_equal(void **state) {
  (void)state;
  fdy_backend *gpu = cuda_backend(FDY_CUDA_HOST_REGISTERED, false);
  fdy_backend *serial = cuda_backend(FDY_CUDA_HOST_REGISTERED, true);
  fdy_backend *cpu = NULL;
  fdy_error err;
  fdy_cpu_options cpo = {.threads = 4};
  assert_int_equal(fdy_cpu_backend_create(&cpo, &cpu, &err), FDY_OK);
  const fdy_dtype kvs[] = {FDY_DTYPE_F32, FDY_DTYPE_F16};
  const fdy_executor_options commands = {.no_graphs = true};
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    for (int k = 0; k < 2; k++) {
      trace resident; /* the resident run's, for the streamed one */
      for (int streamed = 0; streamed < 2; streamed++) {
        model_case m;
        case_make(&m, fixtures[f], kvs[k], streamed);
        trace g = trace_new(&m), c = trace_new(&m), ref = trace_new(&m),
              sg = trace_new(&m);
        fdy_status st = decode(&m, gpu, NULL, NULL, &g, &err);
        if (st != FDY_OK) {
          print_error("%s with graphs: %s\n", fixtures[f], err.message);
        }
        assert_int_equal(st, FDY_OK);
        assert_int_equal(g.modes[0], FDY_STEP_GRAPHS);
        assert_int_equal(g.modes[1], FDY_STEP_GRAPHS);
        assert_int_equal(g.graph_launches, TOKENS);
        assert_int_equal(decode(&m, gpu, &commands, NULL, &c, &err), FDY_OK);
        assert_int_equal(c.modes[1], FDY_STEP_COMMANDS);
        assert_int_equal(c.graph_launches, 0);
        assert_memory_equal(g.ids, c.ids, sizeof g.ids);
        assert_memory_equal(g.logits, c.logits,
                            (size_t)(TOKENS + 1) * m.vocab * sizeof(float));
        /* kernels launched serially, graphs on: the same bits */
        assert_int_equal(decode(&m, serial, NULL, NULL, &sg, &err), FDY_OK);
        assert_memory_equal(g.ids, sg.ids, sizeof g.ids);
        assert_memory_equal(g.logits, sg.logits,
                            (size_t)(TOKENS + 1) * m.vocab * sizeof(float));
        free(sg.logits);
        /* the CPU backend fed the same ids */
        assert_int_equal(decode(&m, cpu, NULL, g.ids, &ref, &err), FDY_OK);
        double worst = 0;
        for (int t = 0; t <= TOKENS; t++) {
          double e = relative_error(g.logits + (size_t)t * m.vocab,
                                    ref.logits + (size_t)t * m.vocab, m.vocab);
          worst = e <= worst ? worst : e; /* a NaN sticks */
        }
        print_message("  %-26s %s KV, %s: 16 tokens with and without graphs "
                      "and dependent launches bitwise equal; vs cpu %.3e\n",
                      fixtures[f], fdy_dtype_name(kvs[k]),
                      streamed ? "streamed" : "resident", worst);
        assert_true(worst <= FDY_LLAMA_BACKEND_TOLERANCE);
        if (!streamed) {
          resident = g;
        } else {
          /* the same op sequence whatever the budget: bitwise equal */
          assert_memory_equal(g.ids, resident.ids, sizeof g.ids);
          assert_memory_equal(g.logits, resident.logits,
                              (size_t)(TOKENS + 1) * m.vocab * sizeof(float));
          free(resident.logits);
          free(g.logits);
        }
        free(c.logits);
        free(ref.logits);
        case_free(&m);
      }
    }
  }
  fdy_backend_destroy(cpu);
  fdy_backend_destroy(serial);
  fdy_backend_destroy(gpu);
}

/* In staged mode every host copy goes through the staging ring, which
 * cannot be captured: both steps fall back to commands, say why, and give
 * the same results as a registered run without graphs. */
static void test_staged_falls_back(void **state) {
  (void)state;
  fdy_backend *staged = cuda_backend(FDY_CUDA_HOST_STAGED, false);
  fdy_backend *gpu = cuda_backend(FDY_CUDA_HOST_REGISTERED, false);
  model_case m;
  case_make(&m, "llama3-micro", FDY_DTYPE_F32, true);
  fdy_error err;
  fdy_executor *x = NULL;
  assert_int_equal(fdy_executor_create(m.plan, m.graph, staged, NULL, &x, &err),
                   FDY_OK);
  fdy_error why;
  size_t step = (size_t)fdy_executor_step(x, "decode");
  assert_int_equal(fdy_executor_step_mode(x, step, &why), FDY_STEP_FALLBACK);
  assert_int_equal(why.kind, FDY_ERR_UNSUPPORTED);
  assert_true(strncmp(why.backend_op, "copy_to_", 8) == 0);
  assert_int_equal(fdy_executor_get_stats(x).graph_fallbacks, 2);
  fdy_executor_destroy(x);
  trace s = trace_new(&m), c = trace_new(&m);
  const fdy_executor_options commands = {.no_graphs = true};
  assert_int_equal(decode(&m, staged, NULL, NULL, &s, &err), FDY_OK);
  assert_int_equal(s.modes[1], FDY_STEP_FALLBACK);
  assert_int_equal(s.graph_launches, 0);
  assert_int_equal(decode(&m, gpu, &commands, NULL, &c, &err), FDY_OK);
  assert_memory_equal(s.ids, c.ids, sizeof s.ids);
  assert_memory_equal(s.logits, c.logits,
                      (size_t)(TOKENS + 1) * m.vocab * sizeof(float));
  free(s.logits);
  free(c.logits);
  case_free(&m);
  fdy_backend_destroy(gpu);
  fdy_backend_destroy(staged);
}

/* Every counted call of create (which captures both steps) and of a
 * prefill and two decode replays failed before and after submitting: the
 * failure comes back naming the failed entry, and the backend is whole
 * afterwards (no capture left open: a clean decode gives the reference
 * ids). */
static void test_graph_fault_sweep(void **state) {
  (void)state;
  fdy_backend *gpu = cuda_backend(FDY_CUDA_HOST_REGISTERED, false);
  model_case m;
  case_make(&m, "llama3-micro", FDY_DTYPE_F32, true);
  fdy_error err;
  trace ref = trace_new(&m), again = trace_new(&m);
  assert_int_equal(decode(&m, gpu, NULL, NULL, &ref, &err), FDY_OK);

  fdy_backend *counting = NULL;
  assert_int_equal(fdy_fault_backend_create(gpu, NULL, &counting, &err),
                   FDY_OK);
  fdy_executor *x = NULL;
  assert_int_equal(
      fdy_executor_create(m.plan, m.graph, counting, NULL, &x, &err), FDY_OK);
  uint64_t create_calls = fdy_fault_get_stats(counting).calls;
  size_t prefill = (size_t)fdy_executor_step(x, "prefill");
  size_t step = (size_t)fdy_executor_step(x, "decode");
  int32_t *in = fdy_executor_input(x, m.io.prefill_step, NULL);
  in[FDY_STEP_COUNT] = 1;
  fdy_step_set_row(in, 0, 1, 0, 0);
  int32_t *d = fdy_executor_input(x, m.io.decode_step, NULL);
  d[FDY_STEP_COUNT] = 1;
  assert_int_equal(fdy_executor_run(x, prefill, &err), FDY_OK);
  for (uint32_t p = 1; p <= 2; p++) {
    fdy_step_set_row(d, 0, 2, 0, p);
    assert_int_equal(fdy_executor_run(x, step, &err), FDY_OK);
  }
  uint64_t total = fdy_fault_get_stats(counting).calls;
  fdy_executor_destroy(x);
  fdy_backend_destroy(counting);

  unsigned graph_faults = 0;
  for (int mode = 0; mode < 2; mode++) {
    for (uint64_t n = 1; n <= total; n++) {
      fdy_fault_options fo = {.fail_at_call = n, .mode = (fdy_fault_mode)mode};
      fdy_backend *faulty = NULL;
      assert_int_equal(fdy_fault_backend_create(gpu, &fo, &faulty, &err),
                       FDY_OK);
      x = NULL;
      fdy_status st =
          fdy_executor_create(m.plan, m.graph, faulty, NULL, &x, &err);
      if (n > create_calls) {
        assert_int_equal(st, FDY_OK);
        in = fdy_executor_input(x, m.io.prefill_step, NULL);
        in[FDY_STEP_COUNT] = 1;
        fdy_step_set_row(in, 0, 1, 0, 0);
        d = fdy_executor_input(x, m.io.decode_step, NULL);
        d[FDY_STEP_COUNT] = 1;
        st = fdy_executor_run(x, prefill, &err);
        for (uint32_t p = 1; st == FDY_OK && p <= 2; p++) {
          fdy_step_set_row(d, 0, 2, 0, p);
          st = fdy_executor_run(x, step, &err);
        }
        fdy_executor_destroy(x);
      } else {
        assert_null(x);
      }
      fdy_fault_stats fs = fdy_fault_get_stats(faulty);
      assert_true(fs.fired);
      assert_int_equal(st, FDY_ERR_BACKEND);
      assert_string_equal(err.backend_op, fs.fired_op);
      graph_faults += strncmp(fs.fired_op, "graph_", 6) == 0;
      fdy_backend_destroy(faulty);
    }
  }
  assert_true(graph_faults >= 2 * 3);
  assert_int_equal(decode(&m, gpu, NULL, NULL, &again, &err), FDY_OK);
  assert_memory_equal(ref.ids, again.ids, sizeof ref.ids);
  assert_memory_equal(ref.logits, again.logits,
                      (size_t)(TOKENS + 1) * m.vocab * sizeof(float));
  free(ref.logits);
  free(again.logits);
  case_free(&m);
  fdy_backend_destroy(gpu);
}

/* Sessions of BATCH_SEQUENCES sequences and 160 step rows (two blocks of
 * 128 rows in the tensor-core matmul's grid, so that the buckets of 2 to
 * 8 rows narrow across the kernels' row-count choices), with graphs and
 * without, fed the same prompts of different lengths, then the same ids
 * (the graphs session's) through decode steps of 2 to 6 rows over varying
 * slots: each step's next ids and logits bitwise equal, and the graphs
 * session's step launched as the graph of its bucket (the next power of
 * two of the count). */
#define BATCH_SEQUENCES 6
#define BATCH_STEP_ROWS 160
static void test_buckets_bitwise_equal(void **state) {
  (void)state;
  fdy_backend *gpu = cuda_backend(FDY_CUDA_HOST_REGISTERED, false);
  static const uint32_t counts[] = {6, 3, 5, 2, 4, 6, 2, 5, 3, 4};
  const size_t steps = sizeof counts / sizeof counts[0];
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    char dir[512];
    fdy_error err;
    fdy_llama_model *model = NULL;
    fixture_model(fixtures[f], dir, sizeof dir);
    assert_int_equal(fdy_llama_open(dir, &model, &err), FDY_OK);
    const uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
    fdy_llama_session *s[2] = {NULL, NULL}; /* with graphs, without */
    for (int k = 0; k < 2; k++) {
      fdy_llama_session_options so = {.backend = gpu,
                                      .context = CONTEXT,
                                      .prefill_rows = PREFILL_ROWS,
                                      .max_sequences = BATCH_SEQUENCES,
                                      .step_rows = BATCH_STEP_ROWS,
                                      .no_graphs = k == 1};
      fdy_status st = fdy_llama_session_create(model, &so, &s[k], &err);
      if (st != FDY_OK) {
        print_error("%s: %s\n", fixtures[f], err.message);
      }
      assert_int_equal(st, FDY_OK);
    }
    assert_int_equal(fdy_llama_session_stats(s[0]).bucket_steps, 1);
    assert_int_equal(fdy_llama_session_stats(s[1]).bucket_steps, 0);
    int32_t last[BATCH_SEQUENCES];
    for (uint32_t q = 0; q < BATCH_SEQUENCES; q++) {
      int32_t prompt[16];
      const uint32_t length = 3 + 2 * q;
      for (uint32_t t = 0; t < length; t++) {
        prompt[t] = (int32_t)((7 * q + 13 * t + 1) % vocab);
      }
      for (int k = 0; k < 2; k++) {
        uint32_t slot = UINT32_MAX;
        assert_int_equal(
            fdy_llama_session_admit(s[k], prompt, length, &slot, &err), FDY_OK);
        assert_int_equal(slot, q);
      }
      last[q] = fdy_llama_session_slot_next(s[0], q);
      assert_int_equal(last[q], fdy_llama_session_slot_next(s[1], q));
    }
    float *logits[2];
    for (int k = 0; k < 2; k++) {
      logits[k] = malloc((size_t)BATCH_SEQUENCES * vocab * sizeof(float));
      assert_non_null(logits[k]);
    }
    for (size_t r = 0; r < steps; r++) {
      uint32_t slots[BATCH_SEQUENCES];
      int32_t ids[BATCH_SEQUENCES], next[2][BATCH_SEQUENCES];
      for (uint32_t i = 0; i < counts[r]; i++) {
        slots[i] = (uint32_t)((r + 2 * i) % BATCH_SEQUENCES);
        for (uint32_t j = 0; j < i; j++) { /* distinct slots */
          if (slots[j] == slots[i]) {
            slots[i] = (slots[i] + 1) % BATCH_SEQUENCES;
            j = UINT32_MAX; /* again from the first */
          }
        }
        ids[i] = last[slots[i]];
      }
      for (int k = 0; k < 2; k++) {
        memset(logits[k], 0, (size_t)counts[r] * vocab * sizeof(float));
        fdy_status st = fdy_llama_session_decode(s[k], slots, ids, counts[r],
                                                 next[k], logits[k], &err);
        if (st != FDY_OK) {
          print_error("%s step %zu: %s\n", fixtures[f], r, err.message);
        }
        assert_int_equal(st, FDY_OK);
      }
      uint64_t bucket = 1;
      while (bucket < counts[r]) {
        bucket *= 2;
      }
      assert_int_equal(fdy_llama_session_stats(s[0]).last_run_rows, bucket);
      assert_int_equal(fdy_llama_session_stats(s[1]).last_run_rows, 0);
      assert_memory_equal(next[0], next[1], counts[r] * sizeof(int32_t));
      assert_memory_equal(logits[0], logits[1],
                          (size_t)counts[r] * vocab * sizeof(float));
      for (uint32_t i = 0; i < counts[r]; i++) {
        last[slots[i]] = next[0][i];
      }
    }
    print_message("  %-26s %u sequences, %zu steps of 2 to 6 rows in "
                  "buckets of %u step rows: graphs and commands bitwise "
                  "equal\n",
                  fixtures[f], BATCH_SEQUENCES, steps, BATCH_STEP_ROWS);
    free(logits[0]);
    free(logits[1]);
    fdy_llama_session_destroy(s[0]);
    fdy_llama_session_destroy(s[1]);
    fdy_llama_close(model);
  }
  fdy_backend_destroy(gpu);
}

int main(void) {
  if (fdy_cuda_device_count() == 0) {
    const char *req = getenv("FOUNDRY_REQUIRE_CUDA");
    if (req != NULL && strcmp(req, "1") == 0) {
      fprintf(stderr,
              "test_cuda_graph: FOUNDRY_REQUIRE_CUDA=1 but no CUDA device\n");
      return 1;
    }
    fprintf(stderr, "test_cuda_graph: no CUDA device, skipping\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graphs_bitwise_equal),
      cmocka_unit_test(test_staged_falls_back),
      cmocka_unit_test(test_graph_fault_sweep),
      cmocka_unit_test(test_buckets_bitwise_equal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
