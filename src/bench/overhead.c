/* `foundry bench --overhead` (fdy_bench_overhead in foundry/bench.h): the
 * host cost of the executor per op. A chain of many small checksum ops is
 * planned twice (every weight resident; every weight streamed through
 * FDY_BENCH_OVERHEAD_SLOTS slots) and run on the fake and the cpu backend,
 * timing fdy_executor_run of an executor created once against creating,
 * running and destroying an executor per run, which is what the one-shot
 * runtime before the executor paid on every execution. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_internal.h"
#include "foundry/checksum.h"
#include "foundry/registry.h"

enum { PLAN_RESIDENT = 0, PLAN_STREAMED, PLAN_COUNT };
enum { BACKEND_FAKE = 0, BACKEND_CPU, BACKEND_COUNT };

static const char *const plan_names[PLAN_COUNT] = {"resident", "streamed"};
static const char *const backend_names[BACKEND_COUNT] = {"fake", "cpu"};

/* One backend and plan: both timings, in nanoseconds. */
typedef struct overhead_result {
  int backend, plan;
  bool have_run, have_cycle;
  fdy_bench_stats run;   /* fdy_executor_run of a created executor */
  fdy_bench_stats cycle; /* create + run + finish + destroy */
  bool verified;         /* every cpu result equalled the expected one */
} overhead_result;

typedef struct overhead_state {
  const fdy_bench_overhead_options *opt;
  int64_t started_unix;
  unsigned char *payload;
  uint64_t expected; /* the chain's result */
  fdy_graph *graph;  /* bound to the payload */
  fdy_tensor_id output;
  fdy_plan *plans[PLAN_COUNT];
  fdy_plan_summary summaries[PLAN_COUNT];
  size_t step_commands[PLAN_COUNT];
  size_t result_count;
  overhead_result results[BACKEND_COUNT * PLAN_COUNT];
  double *samples; /* warmup + runs */
  const char *stage;
} overhead_state;

/* The payload, the expected result, the bound chain and both plans. */
static fdy_status prepare(overhead_state *s, fdy_error *err) {
  const fdy_bench_overhead_options *o = s->opt;
  s->stage = "setup";
  uint64_t payload_bytes = o->op_bytes * o->ops, slot = 0, all = 0;
  s->payload = malloc((size_t)payload_bytes);
  const void **layer_data = calloc(o->ops, sizeof *layer_data);
  s->samples = calloc((size_t)o->warmup + o->runs, sizeof *s->samples);
  if (!s->payload || !layer_data || !s->samples) {
    free(layer_data);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t i = 0; i < o->ops; i++) {
    unsigned char *layer = s->payload + (uint64_t)i * o->op_bytes;
    fdy_bench_fill_layer(layer, o->op_bytes, 0, i);
    s->expected =
        fdy_checksum(layer, o->op_bytes) + s->expected * FDY_CHAIN_PRIME;
    layer_data[i] = layer;
  }
  fdy_status st = fdy_synthetic_graph_create(o->ops, o->op_bytes, 1, layer_data,
                                             &s->graph, err);
  free(layer_data);
  if (st == FDY_OK) {
    st = fdy_synthetic_output(s->graph, &s->output, err);
  }
  if (st == FDY_OK) {
    st = fdy_align_up(o->op_bytes, FDY_TENSOR_ALIGNMENT, &slot, err);
  }
  if (st == FDY_OK) {
    st = fdy_mul_u64(slot, o->ops, &all, err);
  }
  const uint64_t budgets[PLAN_COUNT] = {all, slot * FDY_BENCH_OVERHEAD_SLOTS};
  for (int p = 0; st == FDY_OK && p < PLAN_COUNT; p++) {
    fdy_planner_options po = {.weight_budget = budgets[p],
                              .buffers = FDY_BENCH_OVERHEAD_SLOTS};
    st = fdy_synthetic_plan_build(s->graph, &po, &s->plans[p], err);
    if (st == FDY_OK) {
      st = fdy_plan_validate(s->plans[p], &s->summaries[p], err);
    }
    if (st == FDY_OK) {
      s->step_commands[p] =
          fdy_plan_section(s->plans[p], (size_t)fdy_plan_find_section(
                                            s->plans[p], FDY_BENCH_STEP))
              ->count;
    }
  }
  return st;
}

static fdy_status make_backend(int kind, fdy_backend **out, fdy_error *err) {
  return fdy_backend_create_named(kind == BACKEND_FAKE ? "fake" : "cpu", NULL,
                                  out, err);
}

/* The result of the last run against the expected one (cpu only: the fake
 * backend computes nothing). */
static fdy_status check_result(overhead_state *s, overhead_result *r,
                               fdy_executor *x, fdy_error *err) {
  if (r->backend != BACKEND_CPU) {
    return FDY_OK;
  }
  uint64_t bytes = 0, got = 0;
  memcpy(&got, fdy_executor_output(x, s->output, &bytes), sizeof got);
  if (got == s->expected) {
    return FDY_OK;
  }
  r->verified = false;
  fdy_error_set(err, FDY_ERR_CHECKSUM,
                "%s plan on the cpu backend: result 0x%016" PRIx64
                " differs from the expected 0x%016" PRIx64,
                plan_names[r->plan], got, s->expected);
  if (err) {
    err->expected = s->expected;
    err->actual = got;
  }
  return FDY_ERR_CHECKSUM;
}

/* Statistics of the timed samples (the ones after the warmup). */
static fdy_status describe(overhead_state *s, fdy_bench_stats *out,
                           fdy_error *err) {
  return fdy_bench_describe(s->samples + s->opt->warmup, s->opt->runs, out,
                            err);
}

/* fdy_executor_run of one executor created for all runs. */
static fdy_status time_runs(overhead_state *s, overhead_result *r,
                            fdy_backend *b, fdy_error *err) {
  const uint32_t total = s->opt->warmup + s->opt->runs;
  fdy_executor *x = NULL;
  fdy_status st =
      fdy_executor_create(s->plans[r->plan], s->graph, b, NULL, &x, err);
  size_t step = st == FDY_OK ? (size_t)fdy_executor_step(x, FDY_BENCH_STEP) : 0;
  for (uint32_t i = 0; st == FDY_OK && i < total; i++) {
    int64_t t0 = fdy_now_ns();
    st = fdy_executor_run(x, step, err);
    s->samples[i] = (double)(fdy_now_ns() - t0);
    if (st == FDY_OK) {
      st = check_result(s, r, x, err);
    }
  }
  if (st == FDY_OK) {
    st = fdy_executor_finish(x, err);
  }
  fdy_executor_destroy(x);
  if (st == FDY_OK) {
    st = describe(s, &r->run, err);
    r->have_run = st == FDY_OK;
  }
  return st;
}

/* Create, run once, finish and destroy, per sample (the result is checked
 * outside the timed parts). */
static fdy_status time_cycles(overhead_state *s, overhead_result *r,
                              fdy_backend *b, fdy_error *err) {
  const uint32_t total = s->opt->warmup + s->opt->runs;
  fdy_status st = FDY_OK;
  for (uint32_t i = 0; st == FDY_OK && i < total; i++) {
    fdy_executor *x = NULL;
    int64_t t0 = fdy_now_ns();
    st = fdy_executor_create(s->plans[r->plan], s->graph, b, NULL, &x, err);
    if (st == FDY_OK) {
      st = fdy_executor_run(x, (size_t)fdy_executor_step(x, FDY_BENCH_STEP),
                            err);
    }
    int64_t t1 = fdy_now_ns();
    if (st == FDY_OK) {
      st = check_result(s, r, x, err);
    }
    int64_t t2 = fdy_now_ns();
    if (st == FDY_OK) {
      st = fdy_executor_finish(x, err);
    }
    fdy_executor_destroy(x);
    s->samples[i] = (double)(t1 - t0 + fdy_now_ns() - t2);
  }
  if (st == FDY_OK) {
    st = describe(s, &r->cycle, err);
    r->have_cycle = st == FDY_OK;
  }
  return st;
}

/* Both timings of one backend and plan, each on a fresh backend (the fake
 * backend's call log grows with every call). */
static fdy_status measure(overhead_state *s, int backend, int plan,
                          fdy_error *err) {
  overhead_result *r = &s->results[s->result_count++];
  *r = (overhead_result){
      .backend = backend, .plan = plan, .verified = backend == BACKEND_CPU};
  s->stage = "measure";
  bench_progress(s->opt->progress, "bench --overhead", "%s backend, %s plan",
                 backend_names[backend], plan_names[plan]);
  fdy_status st = FDY_OK;
  for (int cycle = 0; st == FDY_OK && cycle < 2; cycle++) {
    fdy_backend *b = NULL;
    st = make_backend(backend, &b, err);
    if (st == FDY_OK) {
      st = cycle ? time_cycles(s, r, b, err) : time_runs(s, r, b, err);
    }
    fdy_backend_destroy(b);
  }
  if (st != FDY_OK) {
    fdy_error_prefix(err, "%s backend, %s plan", backend_names[backend],
                     plan_names[plan]);
  }
  return st;
}

/* ---- outputs
 * ------------------------------------------------------------------ */

static json_t *timing_json(const fdy_bench_stats *t, bool have, uint32_t ops) {
  if (!have) {
    return json_null();
  }
  json_t *o = json_object();
  json_object_set_new(o, "median_ns", json_real(t->median));
  json_object_set_new(o, "mean_ns", json_real(t->mean));
  json_object_set_new(o, "stddev_ns", json_real(t->stddev));
  json_object_set_new(o, "min_ns", json_real(t->min));
  json_object_set_new(o, "max_ns", json_real(t->max));
  json_object_set_new(o, "per_op_ns", json_real(t->median / ops));
  return o;
}

static json_t *results_json(const overhead_state *s) {
  json_t *a = json_array();
  for (size_t i = 0; i < s->result_count; i++) {
    const overhead_result *r = &s->results[i];
    const fdy_plan_summary *m = &s->summaries[r->plan];
    json_t *o = json_object();
    json_object_set_new(o, "backend", json_string(backend_names[r->backend]));
    json_object_set_new(o, "plan", json_string(plan_names[r->plan]));
    json_object_set_new(
        o, "slots",
        json_integer(r->plan == PLAN_STREAMED ? FDY_BENCH_OVERHEAD_SLOTS : 0));
    json_object_set_new(o, "step_commands",
                        json_integer((json_int_t)s->step_commands[r->plan]));
    json_object_set_new(o, "step_transfer_bytes",
                        json_integer((json_int_t)m->step_transfer_bytes));
    json_object_set_new(o, "run",
                        timing_json(&r->run, r->have_run, s->opt->ops));
    json_object_set_new(o, "create_run_destroy",
                        timing_json(&r->cycle, r->have_cycle, s->opt->ops));
    json_object_set_new(o, "ratio",
                        r->have_run && r->have_cycle
                            ? json_real(r->cycle.median / r->run.median)
                            : json_null());
    json_object_set_new(o, "verified", json_boolean(r->verified));
    json_array_append_new(a, o);
  }
  return a;
}

static json_t *report_json(const overhead_state *s, fdy_status status,
                           const fdy_error *err) {
  const fdy_bench_overhead_options *o = s->opt;
  json_t *e = NULL;
  json_t *r = bench_report_open(FDY_BENCH_OVERHEAD_FORMAT,
                                FDY_BENCH_OVERHEAD_VERSION, status, err, &e);
  if (!r) {
    return NULL;
  }
  if (e) {
    json_object_set_new(e, "stage", json_string(s->stage));
  }
  json_object_set_new(r, "build", bench_build_json());
  json_t *env = json_object();
  json_object_set_new(env, "started_utc", bench_started_json(s->started_unix));
  json_object_set_new(env, "host", bench_host_json());
  json_object_set_new(r, "environment", env);
  json_object_set_new(r, "invocation", bench_invocation_json(o->argc, o->argv));
  json_t *p = json_object();
  json_object_set_new(p, "ops", json_integer(o->ops));
  json_object_set_new(p, "op_bytes", json_integer((json_int_t)o->op_bytes));
  json_object_set_new(p, "runs", json_integer(o->runs));
  json_object_set_new(p, "warmup", json_integer(o->warmup));
  json_object_set_new(p, "streamed_slots",
                      json_integer(FDY_BENCH_OVERHEAD_SLOTS));
  json_object_set_new(r, "parameters", p);
  json_t *protocol = json_object();
  json_object_set_new(
      protocol, "run",
      json_string("fdy_executor_run of step \"" FDY_BENCH_STEP "\" of an "
                  "executor created once (no timings collected), fdy_now_ns "
                  "right before and after"));
  json_object_set_new(
      protocol, "create_run_destroy",
      json_string("fdy_executor_create, one fdy_executor_run, "
                  "fdy_executor_finish and fdy_executor_destroy per sample: "
                  "the cost of a one-shot execution"));
  json_object_set_new(
      protocol, "backends",
      json_string("a fresh backend for each backend, plan and timing; fake "
                  "with default options (computes nothing), cpu with "
                  "default options (threads = online CPUs)"));
  json_object_set_new(r, "protocol", protocol);
  json_object_set_new(r, "results", results_json(s));
  json_t *lim = json_array();
  json_array_append_new(
      lim, json_string("Host timings of a shared machine: other load and the "
                       "CPU frequency move them; compare rows of one run, not "
                       "runs of different machines."));
  json_array_append_new(
      lim, json_string("cpu rows include the worker handoff and the "
                       "checksum of each op's bytes, fake rows the fake "
                       "backend's call log; neither is a GPU's launch "
                       "cost."));
  json_object_set_new(r, "limitations", lim);
  return r;
}

static void print_table(const overhead_state *s, FILE *out) {
  const fdy_bench_overhead_options *o = s->opt;
  char bytes[32];
  fdy_format_bytes(o->op_bytes, bytes, sizeof bytes);
  fprintf(out,
          "foundry bench --overhead: %" PRIu32 " checksum ops of %s, "
          "%" PRIu32 " timed runs after %" PRIu32 " warmup per measurement\n\n",
          o->ops, bytes, o->runs, o->warmup);
  fprintf(out, "backend  plan      step cmds   run ms  per op ns"
               "   create+run+destroy ms  per op ns    ratio\n");
  for (size_t i = 0; i < s->result_count; i++) {
    const overhead_result *r = &s->results[i];
    fprintf(out, "%-7s  %-8s  %9zu %8.3f %10.1f   %21.3f %10.1f %8.2f\n",
            backend_names[r->backend], plan_names[r->plan],
            s->step_commands[r->plan], r->run.median / 1e6,
            r->run.median / o->ops, r->cycle.median / 1e6,
            r->cycle.median / o->ops, r->cycle.median / r->run.median);
  }
  fprintf(out, "\nmedians; cpu results verified against the chain's "
               "expected result\n");
}

fdy_status fdy_bench_overhead(const fdy_bench_overhead_options *options,
                              fdy_bench_written *written, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (written) {
    *written = (fdy_bench_written){0};
  }
  fdy_status st = fdy_bench_overhead_check_options(options, &e);
  if (st != FDY_OK) {
    if (err) {
      *err = e;
    }
    return st;
  }
  overhead_state s = {.opt = options, .started_unix = (int64_t)time(NULL)};
  st = prepare(&s, &e);
  for (int b = 0; st == FDY_OK && b < BACKEND_COUNT; b++) {
    for (int p = 0; st == FDY_OK && p < PLAN_COUNT; p++) {
      st = measure(&s, b, p, &e);
    }
  }
  if (st == FDY_OK && options->console) {
    print_table(&s, options->console);
  }
  if (options->report_path) {
    fdy_error we;
    fdy_error_clear(&we);
    fdy_status wst =
        bench_write_json(options->report_path, report_json(&s, st, &e), &we);
    if (written) {
      written->report = wst == FDY_OK;
    }
    if (st == FDY_OK && wst != FDY_OK) {
      st = wst;
      e = we;
    }
  }
  for (int p = 0; p < PLAN_COUNT; p++) {
    fdy_plan_destroy(s.plans[p]);
  }
  fdy_graph_destroy(s.graph);
  free(s.payload);
  free(s.samples);
  if (err) {
    *err = e;
  }
  return st;
}
