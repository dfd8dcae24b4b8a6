/* The `foundry bench` protocol: backend and device-limit checks, untimed
 * setup (plans, payload, the expected chain result, host registration,
 * ceilings, one executor per configuration), rotating rounds of timed
 * executor runs each verified against the host's chain result, executor
 * teardown, the statistics, and the outputs (console, report, trace). */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_internal.h"
#include "foundry/checksum.h"
#include "foundry/graph.h"
#include "foundry/registry.h"

void bench_progress(bool on, const char *who, const char *fmt, ...) {
  if (!on) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* GiB/s of the payload at a median of median_ms. */
static double throughput_gib_s(uint64_t payload_bytes, double median_ms) {
  return (double)payload_bytes / (median_ms / 1e3) / (double)FDY_GIB;
}

fdy_status bench_memory_in_use(fdy_backend *b, uint64_t *out, fdy_error *err) {
  fdy_device_caps caps;
  fdy_status st = b->ops->capabilities(b, &caps, err);
  *out = st == FDY_OK ? caps.total_memory - caps.free_memory : 0;
  return st;
}

static fdy_status create_backend(bench_state *s, bench_hooks *hooks,
                                 fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "backend";
  s->backend_kind = o->backend;
  if (s->backend_kind == FDY_BENCH_BACKEND_AUTO) {
    s->backend_kind = fdy_backend_available("cuda") ? FDY_BENCH_BACKEND_CUDA
                                                    : FDY_BENCH_BACKEND_CPU;
  }
  fdy_backend_config config = {0};
  if (s->backend_kind == FDY_BENCH_BACKEND_CUDA) {
    if (o->cpu_memory_bytes != 0) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "--cpu-memory applies to the cpu backend only "
                           "(auto chose cuda)");
    }
    config = (fdy_backend_config){.device = o->cuda_device,
                                  .host_mode = o->host_mode,
                                  .staging_bytes = BENCH_STAGING_BYTES,
                                  .staging_buffers = BENCH_STAGING_BUFFERS};
  } else {
    if (o->host_mode == FDY_HOST_STAGED) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "--host-mode staged applies to the cuda backend "
                           "only (%s chose cpu)",
                           o->backend == FDY_BENCH_BACKEND_AUTO ? "auto"
                                                                : "--backend");
    }
    config = (fdy_backend_config){.memory_bytes = o->cpu_memory_bytes};
  }
  const char *name = fdy_bench_backend_name(s->backend_kind);
  fdy_status st = fdy_backend_create_named(name, &config, &s->device, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "creating the %s backend", name);
    return st;
  }
  s->backend = s->device;
  if (hooks && hooks->wrap) {
    st = hooks->wrap(hooks, s->device, &s->backend, err);
    if (st != FDY_OK) {
      s->backend = NULL;
      return st;
    }
  }
  st = s->backend->ops->capabilities(s->backend, &s->caps, err);
  if (st != FDY_OK) {
    return st;
  }
  s->have_caps = true;
  if (s->backend_kind == FDY_BENCH_BACKEND_CUDA &&
      bench_memory_in_use(s->device, &s->memory_in_use_backend, NULL) ==
          FDY_OK) {
    s->have_memory_in_use = true;
  }
  return FDY_OK;
}

static fdy_status budget_error(fdy_error *err, uint64_t limit, uint64_t need,
                               const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status budget_error(fdy_error *err, uint64_t limit, uint64_t need,
                               const char *fmt, ...) {
  char what[FDY_ERROR_MESSAGE_MAX - 128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  char a[32], b[32];
  fdy_error_set(err, FDY_ERR_BUDGET, "%s: %s needed, %s available", what,
                fdy_format_bytes(need, a, sizeof a),
                fdy_format_bytes(limit, b, sizeof b));
  if (err) {
    err->expected = limit;
    err->actual = need;
  }
  return FDY_ERR_BUDGET;
}

/* Slot sizes and budgets against the device, then the host payload against
 * physical memory: all before anything large is allocated. Every
 * configuration's executor lives through the rounds, so their slots count
 * together. */
static fdy_status check_limits(bench_state *s, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "device_limits";
  s->alignment = s->caps.alignment > FDY_TENSOR_ALIGNMENT
                     ? s->caps.alignment
                     : FDY_TENSOR_ALIGNMENT;
  fdy_status st =
      fdy_align_up(s->weight_bytes, s->alignment, &s->slot_bytes, err);
  for (uint32_t k = 0; st == FDY_OK && k < o->buffer_count; k++) {
    bench_config *c = &s->configs[k];
    st = fdy_mul_u64(s->slot_bytes, o->buffers[k], &c->budget_bytes, err);
    if (st == FDY_OK) {
      st = fdy_add_u64(s->total_slot_bytes, c->budget_bytes,
                       &s->total_slot_bytes, err);
    }
    if (c->budget_bytes > s->max_budget_bytes) {
      s->max_budget_bytes = c->budget_bytes;
    }
  }
  if (st != FDY_OK) {
    return st;
  }
  if (s->slot_bytes > s->caps.max_allocation) {
    return budget_error(err, s->caps.max_allocation, s->slot_bytes,
                        "a slot exceeds the maximum allocation of %s",
                        s->caps.name);
  }
  if (s->total_slot_bytes > s->caps.total_memory) {
    return budget_error(err, s->caps.total_memory, s->total_slot_bytes,
                        "the slots of all configurations (their executors "
                        "live together) exceed the memory of %s",
                        s->caps.name);
  }
  if (s->caps.free_memory != 0 && s->total_slot_bytes > s->caps.free_memory) {
    return budget_error(err, s->caps.free_memory, s->total_slot_bytes,
                        "the slots of all configurations (their executors "
                        "live together) exceed the free memory of %s",
                        s->caps.name);
  }
  s->stage = "host_limits";
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    uint64_t host = (uint64_t)pages * (uint64_t)page, need = s->payload_bytes;
    if (s->backend_kind == FDY_BENCH_BACKEND_CPU &&
        (fdy_add_u64(need, s->total_slot_bytes, &need, err) != FDY_OK ||
         fdy_add_u64(need, s->slot_bytes, &need, err) != FDY_OK)) {
      return FDY_ERR_OVERFLOW;
    }
    if (need > host) {
      return budget_error(err, host, need,
                          "the payload%s exceeds the host's physical memory",
                          s->backend_kind == FDY_BENCH_BACKEND_CPU
                              ? " plus the cpu backend's slots"
                              : "");
    }
  }
  return FDY_OK;
}

/* One plan per configuration over the described chain: a weight budget of
 * exactly its slots, so that every weight streams. */
static fdy_status make_plans(bench_state *s, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "plans";
  fdy_graph *described = NULL;
  fdy_status st = fdy_synthetic_graph_create(
      o->layers, s->weight_bytes, o->compute_passes, NULL, &described, err);
  for (uint32_t k = 0; st == FDY_OK && k < o->buffer_count; k++) {
    bench_config *c = &s->configs[k];
    fdy_planner_options po = {.weight_budget = c->budget_bytes,
                              .buffers = o->buffers[k],
                              .alignment = s->alignment};
    st = fdy_synthetic_plan_build(described, &po, &c->plan, err);
    if (st == FDY_OK) {
      st = fdy_plan_validate(c->plan, &c->summary, err);
    }
    if (st == FDY_OK) {
      const fdy_section *step = fdy_plan_section(
          c->plan, (size_t)fdy_plan_find_section(c->plan, FDY_BENCH_STEP));
      c->step_commands = step->count;
    }
    if (st != FDY_OK) {
      fdy_error_prefix(err, "the %" PRIu32 "-buffer plan", o->buffers[k]);
    }
  }
  fdy_graph_destroy(described);
  return st;
}

/* Deterministic payload, the chain's expected result (folded on the host
 * from each layer's fdy_checksum) and the bound graph. */
static fdy_status make_payload(bench_state *s, bench_hooks *hooks,
                               fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "payload";
  long page = sysconf(_SC_PAGESIZE);
  void *p = NULL;
  if (posix_memalign(&p, page > 0 ? (size_t)page : 4096,
                     (size_t)s->payload_bytes) != 0) {
    char a[32];
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "cannot allocate the %s payload",
                         fdy_format_bytes(s->payload_bytes, a, sizeof a));
  }
  s->payload = p;
  const void **layer_data = calloc(o->layers, sizeof *layer_data);
  if (!layer_data) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  char size[32];
  bench_progress(s->opt->progress, "bench",
                 "generating %s of payload (%" PRIu32 " layers)",
                 fdy_format_bytes(s->payload_bytes, size, sizeof size),
                 o->layers);
  s->expected = 0;
  for (uint32_t i = 0; i < o->layers; i++) {
    unsigned char *layer = s->payload + (uint64_t)i * s->weight_bytes;
    fdy_bench_fill_layer(layer, s->weight_bytes, o->seed, i);
    s->expected =
        fdy_checksum(layer, s->weight_bytes) + s->expected * FDY_CHAIN_PRIME;
    layer_data[i] = layer;
  }
  if (hooks) {
    hooks->payload_generated = true;
  }
  fdy_status st =
      fdy_synthetic_graph_create(o->layers, s->weight_bytes, o->compute_passes,
                                 layer_data, &s->graph, err);
  free(layer_data);
  if (st == FDY_OK) {
    st = fdy_synthetic_output(s->graph, &s->output, err);
  }
  return st;
}

static fdy_status register_payload(bench_state *s, fdy_error *err) {
  s->stage = "registration";
  if (s->backend_kind != FDY_BENCH_BACKEND_CUDA ||
      s->opt->host_mode != FDY_HOST_REGISTERED ||
      !s->backend->ops->host_register) {
    return FDY_OK;
  }
  bench_progress(s->opt->progress, "bench",
                 "registering the payload with the device");
  fdy_status st = s->backend->ops->host_register(
      s->backend, s->payload, s->payload_bytes, &s->registration, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "registering the payload");
  }
  return st;
}

static int compare_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* cpu: median time of a plain memcpy of one layer into a slot-sized host
 * buffer (warmed by one discarded copy), layers taken in turn. */
static fdy_status cpu_h2d_ceiling(bench_state *s, fdy_error *err) {
  void *dst = NULL;
  if (posix_memalign(&dst, 64, (size_t)s->slot_bytes) != 0) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "cannot allocate the ceiling buffer");
  }
  int64_t ns[BENCH_CEILING_REPEATS];
  memcpy(dst, s->payload, (size_t)s->weight_bytes);
  for (uint32_t r = 0; r < BENCH_CEILING_REPEATS; r++) {
    const unsigned char *src =
        s->payload + (uint64_t)(r % s->opt->layers) * s->weight_bytes;
    int64_t t0 = fdy_now_ns();
    memcpy(dst, src, (size_t)s->weight_bytes);
    __asm__ volatile("" : : "r"(dst) : "memory");
    ns[r] = fdy_now_ns() - t0;
  }
  free(dst);
  qsort(ns, BENCH_CEILING_REPEATS, sizeof ns[0], compare_i64);
  double median_ns = (double)(ns[BENCH_CEILING_REPEATS / 2 - 1] +
                              ns[BENCH_CEILING_REPEATS / 2]) /
                     2.0;
  s->h2d = (bench_ceiling){.available = true,
                           .bytes = s->weight_bytes,
                           .repeats = BENCH_CEILING_REPEATS,
                           .bytes_per_second = (double)s->weight_bytes /
                                               (fmax(median_ns, 1.0) / 1e9)};
  return FDY_OK;
}

/* Ceiling `kind` over the weight bytes (from src, or NULL: on the device),
 * measured on the backend itself, not a wrapper, into *out; on failure
 * err says "measuring WHAT" and *out is unchanged. */
static fdy_status measure_ceiling(const bench_state *s, fdy_ceiling_kind kind,
                                  const void *src, const char *what,
                                  bench_ceiling *out, fdy_error *err) {
  bench_ceiling c = {.available = true,
                     .bytes = s->weight_bytes,
                     .repeats = BENCH_CEILING_REPEATS};
  fdy_status st =
      fdy_backend_measure_ceiling(s->device, kind, src, s->weight_bytes,
                                  c.repeats, &c.bytes_per_second, err);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "measuring %s", what);
    return st;
  }
  *out = c;
  return FDY_OK;
}

static fdy_status measure_ceilings(bench_state *s, fdy_error *err) {
  s->stage = "ceilings";
  bench_progress(s->opt->progress, "bench",
                 "measuring the host-to-device ceiling");
  if (s->backend_kind == FDY_BENCH_BACKEND_CPU) {
    return cpu_h2d_ceiling(s, err);
  }
  fdy_status st = measure_ceiling(s, FDY_CEILING_H2D, s->payload,
                                  "the host-to-device ceiling", &s->h2d, err);
  if (st == FDY_OK) {
    st = measure_ceiling(s, FDY_CEILING_D2D, NULL,
                         "the device-to-device bandwidth", &s->d2d, err);
  }
  if (st == FDY_OK) {
    st = measure_ceiling(s, FDY_CEILING_CHECKSUM, NULL, "the checksum kernel",
                         &s->kernel, err);
  }
  return st;
}

/* Creates every configuration's executor (streams, events, slots, arena,
 * workspace, output staging; the bench registered the payload itself, so
 * the executor registers nothing), then reads the device memory with all
 * of them live. */
static fdy_status create_executors(bench_state *s, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "executors";
  const fdy_executor_options eo = {.collect_timings = true,
                                   .skip_host_registration = true};
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    bench_config *c = &s->configs[k];
    bench_progress(s->opt->progress, "bench",
                   "creating the %" PRIu32 "-buffer executor", o->buffers[k]);
    fdy_status st = fdy_executor_create(c->plan, s->graph, s->backend, &eo,
                                        &c->executor, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "creating the %" PRIu32 "-buffer executor",
                       o->buffers[k]);
      return st;
    }
    c->created = true;
    c->setup = fdy_executor_get_stats(c->executor);
    c->step = (size_t)fdy_executor_step(c->executor, FDY_BENCH_STEP);
  }
  if (s->have_memory_in_use &&
      bench_memory_in_use(s->device, &s->memory_in_use_executors, NULL) !=
          FDY_OK) {
    s->have_memory_in_use = false;
  }
  return FDY_OK;
}

/* Sums of the device spans of prefetches (copy) and launches (compute);
 * -1 when the backend gave no device times. */
static void device_sums(const fdy_command_timing *timings, size_t count,
                        int64_t *copy, int64_t *compute) {
  int64_t c = 0, k = 0;
  bool complete = count > 0;
  for (size_t i = 0; i < count; i++) {
    const fdy_command_timing *t = &timings[i];
    if (t->kind != FDY_CMD_PREFETCH && t->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    if (t->device_start_ns < 0 || t->device_end_ns < t->device_start_ns) {
      complete = false;
      continue;
    }
    *(t->kind == FDY_CMD_PREFETCH ? &c : &k) +=
        t->device_end_ns - t->device_start_ns;
  }
  *copy = complete ? c : -1;
  *compute = complete ? k : -1;
}

/* Keeps a copy of the last run's timings for execution x when it is to be
 * traced; frees the previously kept ones it replaces. */
static fdy_status keep_timings(bench_state *s, bench_execution *x,
                               const fdy_command_timing *timings, size_t count,
                               int64_t *last_kept, fdy_error *err) {
  if (!s->opt->trace_path || count == 0 || (!s->trace_all && !x->measured)) {
    return FDY_OK;
  }
  x->timings = malloc(count * sizeof *x->timings);
  if (!x->timings) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory keeping the timings of execution "
                         "%" PRIu64,
                         x->sequence);
  }
  memcpy(x->timings, timings, count * sizeof *x->timings);
  x->timing_count = count;
  if (!s->trace_all) {
    if (last_kept[x->config] >= 0) {
      bench_execution *old = &s->executions[last_kept[x->config]];
      free(old->timings);
      old->timings = NULL;
      old->timing_count = 0;
    }
    last_kept[x->config] = (int64_t)x->sequence;
  }
  return FDY_OK;
}

/* The run's result word against the chain's expected result. */
static fdy_status verify(bench_state *s, bench_execution *x, bench_hooks *hooks,
                         fdy_error *err) {
  uint64_t bytes = 0, got = 0;
  const void *out =
      fdy_executor_output(s->configs[x->config].executor, s->output, &bytes);
  assert(out && bytes == sizeof got); /* the plan copies the result out */
  memcpy(&got, out, sizeof got);
  if (hooks && hooks->corrupt && hooks->corrupt_sequence == x->sequence) {
    got ^= 1;
  }
  x->checksum = BENCH_CHECKSUM_OK;
  if (got == s->expected) {
    return FDY_OK;
  }
  x->checksum = BENCH_CHECKSUM_MISMATCH;
  uint32_t last = s->opt->layers - 1;
  fdy_error_set(err, FDY_ERR_CHECKSUM,
                "execution %" PRIu64 " (%" PRIu32 " buffers): the chain's "
                "result 0x%016" PRIx64 " (layer %" PRIu32
                ") differs from the expected 0x%016" PRIx64,
                x->sequence, s->opt->buffers[x->config], got, last,
                s->expected);
  if (err) {
    err->ids[0] = last;
    err->command_index = (int64_t)x->sequence;
    err->expected = s->expected;
    err->actual = got;
  }
  return FDY_ERR_CHECKSUM;
}

/* Whether every execution is traced: the timing records of all rounds (each
 * runs every configuration's step once, one record per command) add up to
 * at most BENCH_TRACE_ALL_LIMIT. */
static bool trace_everything(const bench_state *s, uint32_t rounds) {
  uint64_t per_round = 0, records = 0;
  for (uint32_t k = 0; k < s->opt->buffer_count; k++) {
    if (fdy_add_u64(per_round, s->configs[k].step_commands, &per_round, NULL) !=
        FDY_OK) {
      return false;
    }
  }
  return fdy_mul_u64(rounds, per_round, &records, NULL) == FDY_OK &&
         records <= BENCH_TRACE_ALL_LIMIT;
}

/* One timed execution: fdy_executor_run of the step, then (untimed) its
 * device times, its timings for the trace and its verification. */
static fdy_status execute(bench_state *s, bench_execution *x,
                          bench_hooks *hooks, int64_t *last_kept,
                          fdy_error *err) {
  bench_config *c = &s->configs[x->config];
  x->begin_ns = fdy_now_ns();
  fdy_status st = fdy_executor_run(c->executor, c->step, err);
  x->end_ns = fdy_now_ns();
  x->outcome = st;
  size_t count = 0;
  const fdy_command_timing *timings = fdy_executor_timings(c->executor, &count);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "execution %" PRIu64 " (%" PRIu32 " buffers)",
                     x->sequence, s->opt->buffers[x->config]);
    return st;
  }
  x->peak_slot_bytes = c->summary.peak_weight_bytes;
  device_sums(timings, count, &x->copy_ns, &x->compute_ns);
  st = verify(s, x, hooks, err);
  if (st == FDY_OK) {
    st = keep_timings(s, x, timings, count, last_kept, err);
  }
  return st;
}

static fdy_status run_rounds(bench_state *s, bench_hooks *hooks,
                             fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "rounds";
  uint32_t rounds = o->warmup + o->iterations, count = o->buffer_count;
  uint64_t total = (uint64_t)rounds * count;
  s->trace_all = trace_everything(s, rounds);
  s->executions = calloc((size_t)total, sizeof *s->executions);
  if (!s->executions) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory for %" PRIu64 " execution records",
                         total);
  }
  int64_t last_kept[FDY_BENCH_MAX_CONFIGS];
  for (uint32_t k = 0; k < FDY_BENCH_MAX_CONFIGS; k++) {
    last_kept[k] = -1;
  }
  for (uint32_t round = 0; round < rounds; round++) {
    for (uint32_t pos = 0; pos < count; pos++) {
      bench_execution *x = &s->executions[s->execution_count];
      *x = (bench_execution){.sequence = s->execution_count,
                             .measured = round >= o->warmup,
                             .round = round,
                             .position = pos,
                             .config = (round + pos) % count,
                             .copy_ns = -1,
                             .compute_ns = -1};
      s->execution_count++;
      fdy_status st = execute(s, x, hooks, last_kept, err);
      if (st != FDY_OK) {
        return st;
      }
      bench_progress(
          s->opt->progress, "bench",
          "[%zu/%" PRIu64 "] %s round %" PRIu32 ", %" PRIu32
          " buffers: %.3f ms",
          s->execution_count, total, x->measured ? "measured" : "warmup",
          x->measured ? round - o->warmup + 1 : round + 1,
          o->buffers[x->config], (double)(x->end_ns - x->begin_ns) / 1e6);
    }
  }
  return FDY_OK;
}

/* Runs every executor's teardown and destroys it (the slots are freed),
 * then reads the device memory again. */
static fdy_status teardown(bench_state *s, fdy_error *err) {
  s->stage = "teardown";
  for (uint32_t k = 0; k < s->opt->buffer_count; k++) {
    bench_config *c = &s->configs[k];
    fdy_status st = fdy_executor_finish(c->executor, err);
    fdy_executor_destroy(c->executor);
    c->executor = NULL;
    if (st != FDY_OK) {
      fdy_error_prefix(err, "tearing down the %" PRIu32 "-buffer executor",
                       s->opt->buffers[k]);
      return st;
    }
  }
  if (s->have_memory_in_use &&
      bench_memory_in_use(s->device, &s->memory_in_use_rounds, NULL) !=
          FDY_OK) {
    s->have_memory_in_use = false;
  }
  return FDY_OK;
}

/* The measured samples (ms) of every configuration in round order, those of
 * configuration k at ms[k * iterations], and the device copy and compute
 * times (ms) of the first configuration's. Returns whether all of those
 * device times were given. */
static bool gather_samples(const bench_state *s, double *ms, double *copy_ms,
                           double *compute_ms) {
  size_t n = s->opt->iterations;
  bool device_times = true;
  for (size_t i = 0; i < s->execution_count; i++) {
    const bench_execution *x = &s->executions[i];
    if (!x->measured) {
      continue;
    }
    size_t r = x->round - s->opt->warmup;
    ms[x->config * n + r] = (double)(x->end_ns - x->begin_ns) / 1e6;
    if (x->config == 0) {
      copy_ms[r] = (double)x->copy_ns / 1e6;
      compute_ms[r] = (double)x->compute_ns / 1e6;
      device_times = device_times && x->copy_ns >= 0 && x->compute_ns >= 0;
    }
  }
  return device_times;
}

/* Statistics of configuration k from its samples x and the first
 * configuration's, base (the baseline of the paired speedup). */
static fdy_status config_stats(bench_state *s, uint32_t k, const double *base,
                               const double *x, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  size_t n = o->iterations;
  uint32_t resamples = o->bootstrap_resamples;
  bench_config_stats *c = &s->stats[k];
  fdy_status st = fdy_bench_describe(x, n, &c->time, err);
  if (st == FDY_OK) {
    st = fdy_bench_bootstrap(
        x, n, FDY_BENCH_STAT_MEDIAN, resamples,
        fdy_bench_stream_seed(o->seed, bench_stream(k, BENCH_STREAM_MEDIAN)),
        &c->median_ci, err);
  }
  if (st == FDY_OK) {
    st = fdy_bench_bootstrap(
        x, n, FDY_BENCH_STAT_MEAN, resamples,
        fdy_bench_stream_seed(o->seed, bench_stream(k, BENCH_STREAM_MEAN)),
        &c->mean_ci, err);
  }
  if (st == FDY_OK) {
    st = fdy_bench_paired_speedup(
        base, x, n, resamples,
        fdy_bench_stream_seed(o->seed, bench_stream(k, BENCH_STREAM_SPEEDUP)),
        &c->speedup, &c->speedup_ci, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  c->throughput_gib_s = throughput_gib_s(s->payload_bytes, c->time.median);
  c->fraction_of_h2d =
      c->throughput_gib_s * (double)FDY_GIB / s->h2d.bytes_per_second;
  return FDY_OK;
}

/* The overlap figures from the first configuration's device times (all
 * given), once every configuration's statistics exist. */
static fdy_status overlap_of(bench_state *s, const double *copy_ms,
                             const double *compute_ms, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  bench_overlap *ov = &s->overlap;
  fdy_status st = fdy_bench_median(copy_ms, o->iterations, &ov->copy_ms, err);
  if (st == FDY_OK) {
    st = fdy_bench_median(compute_ms, o->iterations, &ov->compute_ms, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  double longest = fmax(ov->copy_ms, ov->compute_ms);
  if (longest <= 0.0) {
    return FDY_OK;
  }
  ov->available = true;
  ov->ideal_speedup = (ov->copy_ms + ov->compute_ms) / longest;
  if (o->buffer_count > 1) {
    ov->measured_speedup = s->stats[o->buffer_count - 1].speedup;
    ov->fraction_of_ideal = ov->measured_speedup / ov->ideal_speedup;
  }
  return FDY_OK;
}

static fdy_status compute_statistics(bench_state *s, fdy_error *err) {
  const fdy_bench_options *o = s->opt;
  s->stage = "statistics";
  size_t n = o->iterations;
  double *all = calloc((size_t)o->buffer_count * n, sizeof *all);
  double *copy_ms = calloc(n, sizeof *copy_ms);
  double *compute_ms = calloc(n, sizeof *compute_ms);
  fdy_status st = FDY_OK;
  if (!all || !copy_ms || !compute_ms) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  bool device_times = gather_samples(s, all, copy_ms, compute_ms);
  for (uint32_t k = 0; st == FDY_OK && k < o->buffer_count; k++) {
    st = config_stats(s, k, all, all + k * n, err);
  }
  if (st == FDY_OK && device_times) {
    st = overlap_of(s, copy_ms, compute_ms, err);
  }
  s->have_stats = st == FDY_OK;
cleanup:
  free(all);
  free(copy_ms);
  free(compute_ms);
  return st;
}

/* Writes the trace (when asked for), then the report of the run whose
 * outcome is status/err. A trace that cannot be written makes a successful
 * run's report record that failure; a report that cannot be written takes
 * the trace written just before it away again, so the two appear together
 * or not at all. Returns the first write failure, in *werr. */
static fdy_status write_outputs(bench_state *s, fdy_status status,
                                const fdy_error *err, fdy_error *werr) {
  const fdy_bench_options *o = s->opt;
  if (!o->report_path) {
    return FDY_OK;
  }
  fdy_error trace_err;
  fdy_error_clear(&trace_err);
  fdy_status trace_st = FDY_OK;
  if (o->trace_path) {
    trace_st = bench_write_json(o->trace_path, bench_trace_json(s), &trace_err);
    s->trace_written = trace_st == FDY_OK;
  }
  const bool record_trace_failure = status == FDY_OK && trace_st != FDY_OK;
  fdy_status st = bench_write_json(
      o->report_path,
      bench_report_json(s, record_trace_failure ? trace_st : status,
                        record_trace_failure ? &trace_err : err),
      werr);
  if (st != FDY_OK) {
    if (s->trace_written) {
      unlink(o->trace_path);
      s->trace_written = false;
    }
    return st;
  }
  s->report_written = true;
  if (trace_st != FDY_OK) {
    *werr = trace_err;
    return trace_st;
  }
  bench_progress(s->opt->progress, "bench", "report written to %s%s%s",
                 o->report_path, o->trace_path ? ", trace to " : "",
                 o->trace_path ? o->trace_path : "");
  return FDY_OK;
}

/* cuda (when the first reading was taken): the device memory in use after
 * setup, before any executor exists. */
static void read_memory_after_setup(bench_state *s) {
  if (s->have_memory_in_use &&
      bench_memory_in_use(s->device, &s->memory_in_use_setup, NULL) != FDY_OK) {
    s->have_memory_in_use = false;
  }
}

static void state_free(bench_state *s, bench_hooks *hooks) {
  for (uint32_t k = 0; k < FDY_BENCH_MAX_CONFIGS; k++) {
    fdy_executor_destroy(s->configs[k].executor);
  }
  if (s->registration) {
    s->backend->ops->host_unregister(s->backend, s->registration);
  }
  for (uint32_t k = 0; k < FDY_BENCH_MAX_CONFIGS; k++) {
    fdy_plan_destroy(s->configs[k].plan);
  }
  for (size_t i = 0; i < s->execution_count; i++) {
    free(s->executions[i].timings);
  }
  free(s->executions);
  fdy_graph_destroy(s->graph);
  if (s->backend && s->backend != s->device) {
    if (hooks && hooks->unwrap) {
      hooks->unwrap(hooks, s->backend);
    }
    fdy_backend_destroy(s->backend);
  }
  fdy_backend_destroy(s->device);
  free(s->payload);
}

fdy_status bench_run_hooked(const fdy_bench_options *options,
                            bench_hooks *hooks, fdy_bench_written *written,
                            fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (written) {
    *written = (fdy_bench_written){0};
  }
  fdy_status st = fdy_bench_check_options(options, &e);
  if (st != FDY_OK) {
    if (err) {
      *err = e;
    }
    return st;
  }
  bench_state s = {.opt = options,
                   .weight_bytes = options->weight_mib * FDY_MIB,
                   .payload_bytes =
                       options->weight_mib * FDY_MIB * options->layers,
                   .started_unix = (int64_t)time(NULL),
                   .memory_in_use_setup = BENCH_NOT_MEASURED,
                   .memory_in_use_executors = BENCH_NOT_MEASURED,
                   .memory_in_use_rounds = BENCH_NOT_MEASURED};
  st = create_backend(&s, hooks, &e);
  if (st == FDY_OK) {
    st = check_limits(&s, &e);
  }
  if (st == FDY_OK) {
    st = make_plans(&s, &e);
  }
  if (st == FDY_OK) {
    st = make_payload(&s, hooks, &e);
  }
  if (st == FDY_OK) {
    st = register_payload(&s, &e);
  }
  if (st == FDY_OK) {
    st = measure_ceilings(&s, &e);
  }
  if (st == FDY_OK) {
    read_memory_after_setup(&s);
    st = create_executors(&s, &e);
  }
  if (st == FDY_OK) {
    st = run_rounds(&s, hooks, &e);
  }
  if (st == FDY_OK) {
    st = teardown(&s, &e);
  }
  if (st == FDY_OK) {
    st = compute_statistics(&s, &e);
  }
  if (st == FDY_OK) {
    s.stage = "outputs"; /* what is left to fail: writing the trace */
    if (options->console) {
      bench_print_summary(&s, options->console);
    }
  }
  fdy_error we;
  fdy_error_clear(&we);
  if (hooks && hooks->create_before_outputs) {
    FILE *f = fopen(hooks->create_before_outputs, "wx");
    if (f) {
      fclose(f);
    }
  }
  fdy_status wst = write_outputs(&s, st, &e, &we);
  if (st == FDY_OK && wst != FDY_OK) {
    st = wst;
    e = we;
  } else if (wst != FDY_OK) {
    e.cleanup_kind = wst;
    snprintf(e.cleanup_message, sizeof e.cleanup_message,
             "writing the report or trace failed too: %.200s", we.message);
  }
  if (written) {
    *written = (fdy_bench_written){s.report_written, s.trace_written};
  }
  state_free(&s, hooks);
  if (err) {
    *err = e;
  }
  return st;
}

fdy_status fdy_bench_run(const fdy_bench_options *options,
                         fdy_bench_written *written, fdy_error *err) {
  return bench_run_hooked(options, NULL, written, err);
}
