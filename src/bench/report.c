/* Outputs of `foundry bench`: the console summary and the versioned JSON
 * report (docs/benchmark.md describes every field), and the report pieces
 * and the never-overwrite writer both benchmarks share. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench_internal.h"
#include "foundry/build_info.h"
#include "foundry/new_file.h"
#include "foundry/registry.h"

/* ---- JSON helpers
 * ------------------------------------------------------------ */

json_t *bench_json_text(const char *s) {
  if (!s) {
    return json_null();
  }
  char *text = fdy_utf8_sanitize(s);
  json_t *j = text ? json_string(text) : NULL;
  free(text);
  return j;
}

static json_t *jstr(const char *s) {
  return bench_json_text(s);
}

static json_t *jinterval(fdy_bench_interval v) {
  json_t *o = json_object();
  json_object_set_new(o, "low", jreal(v.low));
  json_object_set_new(o, "high", jreal(v.high));
  return o;
}

static json_t *jhex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return json_string(buf);
}

/* ---- report sections
 * ---------------------------------------------------------- */

json_t *bench_build_json(void) {
  const fdy_build_info *b = fdy_build_info_get();
  int runtime = 0, driver = 0;
  fdy_backend_runtime_versions("cuda", &runtime, &driver);
  json_t *o = json_object();
  json_object_set_new(o, "version", jstr(b->version));
  json_object_set_new(o, "git_commit", jstr(b->git_commit));
  json_object_set_new(o, "git_dirty", json_boolean(b->git_dirty));
  json_object_set_new(o, "compiler", jstr(b->compiler));
  json_object_set_new(o, "flags", jstr(b->flags));
  json_object_set_new(o, "build_type", jstr(b->build_type));
  json_object_set_new(o, "sanitizers", jstr(b->sanitizers));
  json_object_set_new(o, "cuda_backend", jstr(b->cuda));
  json_object_set_new(o, "cuda_runtime_version",
                      runtime ? json_integer(runtime) : json_null());
  json_object_set_new(o, "cuda_driver_version",
                      driver ? json_integer(driver) : json_null());
  return o;
}

/* "model name" of the first processor in /proc/cpuinfo, or NULL. */
static json_t *cpu_model(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) {
    return json_null();
  }
  char line[512];
  json_t *model = NULL;
  while (!model && fgets(line, sizeof line, f)) {
    const char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      colon++;
      while (*colon == ' ' || *colon == '\t') {
        colon++;
      }
      line[strcspn(line, "\n")] = '\0';
      model = jstr(colon);
    }
  }
  fclose(f);
  return model ? model : json_null();
}

json_t *bench_started_json(int64_t started_unix) {
  char when[32] = "";
  time_t t = (time_t)started_unix;
  struct tm tm;
  if (gmtime_r(&t, &tm)) {
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  }
  return json_string(when);
}

json_t *bench_host_json(void) {
  json_t *host = json_object();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  json_object_set_new(host, "cpu_count",
                      cpus > 0 ? json_integer(cpus) : json_null());
  json_object_set_new(host, "cpu_model", cpu_model());
  json_object_set_new(host, "memory_bytes",
                      pages > 0 && page > 0
                          ? jint((uint64_t)pages * (uint64_t)page)
                          : json_null());
  struct utsname u;
  if (uname(&u) == 0) {
    json_object_set_new(host, "os", jstr(u.sysname));
    json_object_set_new(host, "os_release", jstr(u.release));
    json_object_set_new(host, "machine", jstr(u.machine));
  }
  return host;
}

static json_t *environment_json(const bench_state *s) {
  json_t *o = json_object();
  json_object_set_new(o, "started_utc", bench_started_json(s->started_unix));
  json_object_set_new(o, "backend",
                      json_string(fdy_bench_backend_name(s->backend_kind)));
  json_t *dev = json_null();
  if (s->have_caps) {
    dev = json_object();
    json_object_set_new(dev, "name", jstr(s->caps.name));
    json_object_set_new(dev, "total_memory_bytes", jint(s->caps.total_memory));
    json_object_set_new(dev, "free_memory_bytes", jint(s->caps.free_memory));
    json_object_set_new(dev, "max_allocation_bytes",
                        jint(s->caps.max_allocation));
    json_object_set_new(dev, "alignment_bytes", jint(s->caps.alignment));
    json_object_set_new(dev, "concurrent_copy_compute",
                        json_boolean(s->caps.concurrent_copy_compute));
    json_object_set_new(dev, "copy_engines", jint(s->caps.copy_engines));
  }
  json_object_set_new(o, "device", dev);
  json_object_set_new(o, "host", bench_host_json());
  return o;
}

json_t *bench_invocation_json(int argc, char *const *argv) {
  json_t *inv = json_object();
  json_t *args = json_array();
  for (int i = 0; argv && i < argc; i++) {
    json_array_append_new(args, jstr(argv[i]));
  }
  json_object_set_new(inv, "program", json_string("foundry"));
  json_object_set_new(inv, "argv", args);
  return inv;
}

static json_t *parameters_json(const bench_state *s) {
  const fdy_bench_options *o = s->opt;
  json_t *p = json_object();
  char seed[24];
  snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
  bool cuda = s->backend_kind == FDY_BENCH_BACKEND_CUDA;
  json_object_set_new(p, "backend_requested",
                      json_string(fdy_bench_backend_name(o->backend)));
  json_object_set_new(p, "layers", jint(o->layers));
  json_object_set_new(p, "weight_mib", jint(o->weight_mib));
  json_object_set_new(p, "weight_bytes", jint(s->weight_bytes));
  json_object_set_new(p, "payload_bytes", jint(s->payload_bytes));
  json_object_set_new(p, "iterations", jint(o->iterations));
  json_object_set_new(p, "warmup", jint(o->warmup));
  json_object_set_new(p, "bootstrap_resamples", jint(o->bootstrap_resamples));
  json_object_set_new(p, "seed", json_string(seed));
  json_t *buffers = json_array();
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    json_array_append_new(buffers, jint(o->buffers[k]));
  }
  json_object_set_new(p, "buffers", buffers);
  json_object_set_new(p, "compute_passes", jint(o->compute_passes));
  json_object_set_new(p, "host_mode",
                      cuda ? json_string(fdy_host_mode_name(o->host_mode))
                           : json_null());
  json_object_set_new(p, "cuda_device",
                      cuda ? json_integer(o->cuda_device) : json_null());
  json_object_set_new(p, "cpu_memory_bytes",
                      o->cpu_memory_bytes ? jint(o->cpu_memory_bytes)
                                          : json_null());
  json_object_set_new(p, "report_path", jstr(o->report_path));
  json_object_set_new(p, "trace_path", jstr(o->trace_path));
  return p;
}

static json_t *protocol_json(const bench_state *s) {
  const fdy_bench_options *o = s->opt;
  json_t *p = json_object();
  json_object_set_new(p, "rounds", jint((uint64_t)o->warmup + o->iterations));
  json_object_set_new(p, "order",
                      json_string("round r runs every configuration once, "
                                  "starting at configuration r mod count"));
  json_object_set_new(
      p, "setup",
      json_string("one executor per configuration, created once before the "
                  "rounds (preflight, streams, events, slots, arena, output "
                  "staging) and torn down after them; its time and bytes are "
                  "reported per plan, never inside an execution"));
  json_object_set_new(
      p, "timer",
      json_string("fdy_now_ns (CLOCK_MONOTONIC) right before "
                  "fdy_executor_run of step \"" FDY_BENCH_STEP "\" and right "
                  "after it returned: issue, transfers, kernels, the copy of "
                  "the result, the step's final host wait and device "
                  "timestamp collection"));
  json_object_set_new(p, "collect_timings", json_true());
  json_object_set_new(p, "verification",
                      json_string("after every execution, outside the timer, "
                                  "the chain's result (the last layer's "
                                  "output, copied to the host by the step) "
                                  "equals the fold of every layer's "
                                  "fdy_checksum computed on the host"));
  json_object_set_new(p, "confidence", json_real(FDY_BENCH_CONFIDENCE));
  json_object_set_new(p, "resampler",
                      json_string("SplitMix64 percentile bootstrap, streams "
                                  "3k (median), 3k+1 (mean), 3k+2 (paired "
                                  "speedup) for configuration k (bench.h)"));
  json_object_set_new(p, "ceiling_repeats", jint(BENCH_CEILING_REPEATS));
  return p;
}

/* Bytes per memory class ("resident", "slot", ...). */
static json_t *class_bytes_json(const uint64_t *bytes) {
  json_t *o = json_object();
  for (int c = 0; c < FDY_BUFFER_CLASS_COUNT; c++) {
    json_object_set_new(o, fdy_buffer_class_name((fdy_buffer_class)c),
                        jint(bytes[c]));
  }
  return o;
}

/* What executor create did for a configuration, or null before it. */
static json_t *setup_json(const bench_config *c) {
  if (!c->created) {
    return json_null();
  }
  const fdy_executor_stats *x = &c->setup;
  json_t *o = json_object();
  json_object_set_new(o, "create_ns", json_integer(x->setup_ns));
  json_object_set_new(o, "upload_ns", json_integer(x->upload_ns));
  json_object_set_new(o, "device_bytes", class_bytes_json(x->class_bytes));
  json_object_set_new(o, "workspace_bytes", jint(x->workspace_bytes));
  json_object_set_new(o, "registered_bytes", jint(x->registered_bytes));
  json_object_set_new(o, "staging_bytes", jint(x->staging_bytes));
  json_object_set_new(o, "transfer_bytes", jint(x->setup_transfer_bytes));
  return o;
}

static json_t *plans_json(const bench_state *s) {
  json_t *a = json_array();
  for (uint32_t k = 0; k < s->opt->buffer_count && s->configs[k].plan; k++) {
    const bench_config *c = &s->configs[k];
    const fdy_plan_summary *m = &c->summary;
    json_t *p = json_object();
    json_object_set_new(p, "buffers", jint(s->opt->buffers[k]));
    json_object_set_new(p, "slots",
                        jint(m->class_bytes[FDY_BUFFER_SLOT] / s->slot_bytes));
    json_object_set_new(p, "slot_bytes", jint(s->slot_bytes));
    json_object_set_new(p, "budget_bytes", jint(c->budget_bytes));
    json_object_set_new(p, "commands", jint(m->commands));
    json_object_set_new(p, "step_commands", jint(c->step_commands));
    json_object_set_new(p, "ops", jint(m->ops));
    json_object_set_new(p, "peak_bytes", jint(m->peak_weight_bytes));
    json_object_set_new(p, "transfer_bytes", jint(m->step_transfer_bytes));
    json_object_set_new(p, "streams", jint(m->streams));
    json_object_set_new(p, "class_bytes", class_bytes_json(m->class_bytes));
    json_object_set_new(p, "setup", setup_json(c));
    json_array_append_new(a, p);
  }
  return a;
}

static bool execution_ok(const bench_execution *x) {
  return x->outcome == FDY_OK && x->checksum == BENCH_CHECKSUM_OK;
}

/* The execution that stopped the run, or NULL: a failed execution is the
 * last one started. */
static const bench_execution *failed_execution(const bench_state *s) {
  const bench_execution *last =
      s->execution_count ? &s->executions[s->execution_count - 1] : NULL;
  return last && !execution_ok(last) ? last : NULL;
}

/* Max of peak_slot_bytes over the executions. */
static uint64_t peak_slot_bytes(const bench_state *s) {
  uint64_t peak = 0;
  for (size_t i = 0; i < s->execution_count; i++) {
    if (s->executions[i].peak_slot_bytes > peak) {
      peak = s->executions[i].peak_slot_bytes;
    }
  }
  return peak;
}

static const char *checksum_name(int c) {
  switch (c) {
  case BENCH_CHECKSUM_OK:
    return "ok";
  case BENCH_CHECKSUM_MISMATCH:
    return "mismatch";
  default:
    return "not_checked";
  }
}

static json_t *executions_json(const bench_state *s) {
  json_t *a = json_array();
  int64_t origin = bench_origin_ns(s);
  for (size_t i = 0; i < s->execution_count; i++) {
    const bench_execution *x = &s->executions[i];
    json_t *e = json_object();
    bool ok = execution_ok(x);
    json_object_set_new(e, "sequence", jint(x->sequence));
    json_object_set_new(e, "phase",
                        json_string(x->measured ? "measured" : "warmup"));
    json_object_set_new(e, "round", jint(x->round));
    json_object_set_new(e, "position", jint(x->position));
    json_object_set_new(e, "config", jint(x->config));
    json_object_set_new(e, "buffers", jint(s->opt->buffers[x->config]));
    json_object_set_new(e, "start_offset_ns",
                        json_integer(x->begin_ns - origin));
    json_object_set_new(e, "elapsed_ns", json_integer(x->end_ns - x->begin_ns));
    json_object_set_new(
        e, "outcome",
        json_string(ok ? "ok"
                       : fdy_status_name(x->outcome != FDY_OK
                                             ? x->outcome
                                             : FDY_ERR_CHECKSUM)));
    json_object_set_new(e, "checksum", json_string(checksum_name(x->checksum)));
    json_object_set_new(e, "peak_slot_bytes", jint(x->peak_slot_bytes));
    json_object_set_new(e, "device_copy_ns",
                        x->copy_ns >= 0 ? json_integer(x->copy_ns)
                                        : json_null());
    json_object_set_new(e, "device_compute_ns",
                        x->compute_ns >= 0 ? json_integer(x->compute_ns)
                                           : json_null());
    json_object_set_new(e, "traced", json_boolean(x->timing_count > 0));
    json_array_append_new(a, e);
  }
  return a;
}

static json_t *ceiling_json(const bench_ceiling *c, const char *method,
                            const char *host_memory) {
  if (!c->available) {
    return json_null();
  }
  json_t *o = json_object();
  json_object_set_new(o, "method", json_string(method));
  if (host_memory) {
    json_object_set_new(o, "host_memory", json_string(host_memory));
  }
  json_object_set_new(o, "bytes", jint(c->bytes));
  json_object_set_new(o, "repeats", jint(c->repeats));
  json_object_set_new(o, "bytes_per_second", jreal(c->bytes_per_second));
  json_object_set_new(o, "gib_per_second",
                      jreal(c->bytes_per_second / (double)FDY_GIB));
  return o;
}

/* The host memory the host-to-device ceiling copied from. */
static const char *h2d_host_memory(const bench_state *s) {
  return s->registration ? "registered" : "pageable";
}

static json_t *ceilings_json(const bench_state *s) {
  bool cuda = s->backend_kind == FDY_BENCH_BACKEND_CUDA;
  json_t *o = json_object();
  json_object_set_new(
      o, "h2d",
      ceiling_json(&s->h2d,
                   cuda ? "fdy_cuda_measure_h2d (cudaMemcpyAsync, median)"
                        : "memcpy into a slot-sized host buffer (median)",
                   h2d_host_memory(s)));
  json_object_set_new(
      o, "d2d",
      ceiling_json(&s->d2d, "fdy_cuda_measure_d2d (bytes read + written)",
                   NULL));
  json_t *k =
      ceiling_json(&s->kernel, "fdy_cuda_measure_checksum (bytes read)", NULL);
  if (s->kernel.available && s->d2d.available) {
    json_object_set_new(
        k, "fraction_of_d2d",
        jreal(s->kernel.bytes_per_second / s->d2d.bytes_per_second));
  }
  json_object_set_new(o, "checksum_kernel", k);
  return o;
}

static json_t *statistics_json(const bench_state *s) {
  if (!s->have_stats) {
    return json_null();
  }
  const fdy_bench_options *o = s->opt;
  json_t *st = json_object();
  json_object_set_new(st, "unit", json_string("ms"));
  json_object_set_new(st, "ceilings", ceilings_json(s));
  json_t *configs = json_array();
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    const bench_config_stats *c = &s->stats[k];
    json_t *j = json_object();
    json_object_set_new(j, "config", jint(k));
    json_object_set_new(j, "buffers", jint(o->buffers[k]));
    json_object_set_new(j, "samples", jint(c->time.n));
    json_object_set_new(j, "median_ms", jreal(c->time.median));
    json_object_set_new(j, "mean_ms", jreal(c->time.mean));
    json_object_set_new(j, "stddev_ms", jreal(c->time.stddev));
    json_object_set_new(j, "min_ms", jreal(c->time.min));
    json_object_set_new(j, "max_ms", jreal(c->time.max));
    json_object_set_new(j, "median_ci_ms", jinterval(c->median_ci));
    json_object_set_new(j, "mean_ci_ms", jinterval(c->mean_ci));
    json_object_set_new(j, "throughput_gib_per_second",
                        jreal(c->throughput_gib_s));
    json_object_set_new(j, "fraction_of_h2d_ceiling",
                        jreal(c->fraction_of_h2d));
    json_t *sp = json_object();
    json_object_set_new(sp, "baseline_buffers", jint(o->buffers[0]));
    json_object_set_new(sp, "point", jreal(c->speedup));
    json_object_set_new(sp, "low", jreal(c->speedup_ci.low));
    json_object_set_new(sp, "high", jreal(c->speedup_ci.high));
    json_object_set_new(j, "speedup", sp);
    json_t *streams = json_object();
    json_object_set_new(streams, "median",
                        jint(bench_stream(k, BENCH_STREAM_MEDIAN)));
    json_object_set_new(streams, "mean",
                        jint(bench_stream(k, BENCH_STREAM_MEAN)));
    json_object_set_new(streams, "speedup",
                        jint(bench_stream(k, BENCH_STREAM_SPEEDUP)));
    json_object_set_new(j, "bootstrap_streams", streams);
    json_array_append_new(configs, j);
  }
  json_object_set_new(st, "configurations", configs);
  json_t *ov = json_null();
  if (s->overlap.available) {
    bool compared = o->buffer_count > 1;
    ov = json_object();
    json_object_set_new(ov, "baseline_buffers", jint(o->buffers[0]));
    json_object_set_new(ov, "compared_buffers",
                        compared ? jint(o->buffers[o->buffer_count - 1])
                                 : json_null());
    json_object_set_new(ov, "copy_ms", jreal(s->overlap.copy_ms));
    json_object_set_new(ov, "compute_ms", jreal(s->overlap.compute_ms));
    json_object_set_new(ov, "ideal_speedup", jreal(s->overlap.ideal_speedup));
    json_object_set_new(ov, "measured_speedup",
                        compared ? jreal(s->overlap.measured_speedup)
                                 : json_null());
    json_object_set_new(ov, "fraction_of_ideal",
                        compared ? jreal(s->overlap.fraction_of_ideal)
                                 : json_null());
  }
  json_object_set_new(st, "overlap", ov);
  return st;
}

/* A device-memory reading, or null when it was not taken. */
static json_t *measured(uint64_t bytes) {
  return bytes == BENCH_NOT_MEASURED ? json_null() : jint(bytes);
}

static json_t *memory_json(const bench_state *s) {
  /* the ring the cuda backend was created with in staged mode */
  bool staging = s->device && s->backend_kind == FDY_BENCH_BACKEND_CUDA &&
                 s->opt->host_mode == FDY_HOST_STAGED;
  json_t *m = json_object();
  json_object_set_new(m, "host_payload_bytes",
                      jint(s->payload ? s->payload_bytes : 0));
  json_object_set_new(m, "host_registered_bytes",
                      jint(s->registration ? s->payload_bytes : 0));
  json_object_set_new(
      m, "host_staging_bytes",
      jint(staging ? (uint64_t)BENCH_STAGING_BYTES * BENCH_STAGING_BUFFERS
                   : 0));
  json_object_set_new(m, "device_slot_bytes", jint(s->slot_bytes));
  json_object_set_new(m, "device_slot_budget_bytes", jint(s->max_budget_bytes));
  json_object_set_new(m, "device_slot_total_bytes", jint(s->total_slot_bytes));
  json_object_set_new(m, "device_slot_peak_bytes", jint(peak_slot_bytes(s)));
  json_t *use = json_null();
  if (s->have_memory_in_use) {
    use = json_object();
    json_object_set_new(use, "after_backend_creation",
                        jint(s->memory_in_use_backend));
    json_object_set_new(use, "after_setup", measured(s->memory_in_use_setup));
    json_object_set_new(use, "with_slots",
                        measured(s->memory_in_use_executors));
    json_object_set_new(use, "after_rounds", measured(s->memory_in_use_rounds));
  }
  json_object_set_new(m, "device_memory_in_use_bytes", use);
  return m;
}

static json_t *limitations_json(const bench_state *s) {
  json_t *a = json_array();
  json_array_append_new(
      a, json_string(
             s->opt->compute_passes > 1
                 ? "Synthetic workload: each layer is compute_passes "
                   "checksum passes over its weight bytes, compute that "
                   "stands in for a real decoder layer's only in duration; "
                   "its memory traffic and arithmetic differ."
                 : "Synthetic workload: each layer is one checksum pass "
                   "over its weight bytes, far less compute per byte than "
                   "a real decoder layer, so the runs are transfer bound."));
  json_array_append_new(
      a, json_string("The payload lives in host memory and is never read "
                     "from disk: storage bandwidth is not part of any "
                     "number."));
  json_array_append_new(
      a, json_string("Elapsed times cover the whole fdy_executor_run call: "
                     "command issue, the final host wait and device timestamp "
                     "collection, not only transfers and kernels; executor "
                     "setup (allocation, registration) is outside them."));
  json_array_append_new(
      a, json_string("Each execution is verified by the chain's result "
                     "alone: a wrong layer changes it, but which layer was "
                     "wrong is not known."));
  json_array_append_new(
      a, json_string("Intervals treat rounds as exchangeable samples; slow "
                     "drift during the run is only mitigated by rotating the "
                     "order, not modelled."));
  json_array_append_new(
      a, json_string("The ideal speedup assumes the 1-buffer copy and compute "
                     "times would overlap perfectly without contending for "
                     "memory bandwidth; it is an upper bound."));
  if (s->backend_kind == FDY_BENCH_BACKEND_CPU) {
    json_array_append_new(
        a, json_string("cpu backend: device memory is host memory and the "
                       "transfer is memcpy on a worker thread; the numbers "
                       "describe this host, not a GPU."));
  }
  if (s->opt->iterations < 10) {
    json_array_append_new(
        a, json_string("Fewer than 10 measured rounds: the bootstrap "
                       "intervals are coarse."));
  }
  if (s->opt->trace_path && !s->trace_all) {
    json_array_append_new(
        a, json_string("The trace holds only the last measured execution of "
                       "each configuration (the run had too many commands "
                       "to trace them all)."));
  }
  return a;
}

json_t *bench_error_json(const fdy_error *err) {
  json_t *e = json_object();
  json_object_set_new(e, "kind", json_string(fdy_status_name(err->kind)));
  json_object_set_new(e, "message", jstr(err->message));
  json_object_set_new(e, "command_index",
                      err->command_index >= 0 ? json_integer(err->command_index)
                                              : json_null());
  json_t *ids = json_array();
  json_array_append_new(ids, json_integer(err->ids[0]));
  json_array_append_new(ids, json_integer(err->ids[1]));
  json_object_set_new(e, "ids", ids);
  if (err->kind == FDY_ERR_CHECKSUM) {
    json_object_set_new(e, "expected", jhex(err->expected));
    json_object_set_new(e, "actual", jhex(err->actual));
  } else {
    json_object_set_new(e, "expected", jint(err->expected));
    json_object_set_new(e, "actual", jint(err->actual));
  }
  json_object_set_new(e, "backend_op", jstr(err->backend_op));
  json_t *cleanup = json_null();
  if (err->cleanup_kind != FDY_OK) {
    cleanup = json_object();
    json_object_set_new(cleanup, "kind",
                        json_string(fdy_status_name(err->cleanup_kind)));
    json_object_set_new(cleanup, "message", jstr(err->cleanup_message));
  }
  json_object_set_new(e, "cleanup", cleanup);
  return e;
}

json_t *bench_report_open(const char *format, int version, fdy_status status,
                          const fdy_error *err, json_t **error_out) {
  *error_out = NULL;
  json_t *r = json_object();
  if (!r) {
    return NULL;
  }
  json_object_set_new(r, "format", json_string(format));
  json_object_set_new(r, "version", json_integer(version));
  json_object_set_new(r, "status",
                      json_string(status == FDY_OK ? "ok" : "failed"));
  json_t *e = json_null();
  if (status != FDY_OK) {
    e = bench_error_json(err);
    *error_out = e;
  }
  json_object_set_new(r, "error", e);
  return r;
}

fdy_status bench_write_json(const char *path, json_t *doc, fdy_error *err) {
  if (!doc) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory building '%s'", path);
  }
  char *text = json_dumps(doc, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
  json_decref(doc);
  if (!text) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory encoding '%s'", path);
  }
  fdy_status st = fdy_write_new_text_file(path, text, err);
  free(text);
  return st;
}

json_t *bench_report_json(const bench_state *s, fdy_status status,
                          const fdy_error *err) {
  json_t *e = NULL;
  json_t *r = bench_report_open(FDY_BENCH_REPORT_FORMAT,
                                FDY_BENCH_REPORT_VERSION, status, err, &e);
  if (!r) {
    return NULL;
  }
  if (e) {
    const bench_execution *failed = failed_execution(s);
    json_object_set_new(e, "stage", jstr(s->stage));
    json_object_set_new(e, "sequence",
                        failed ? jint(failed->sequence) : json_null());
    json_object_set_new(e, "payload_generated", json_boolean(s->payload));
  }
  json_object_set_new(r, "build", bench_build_json());
  json_object_set_new(r, "environment", environment_json(s));
  json_object_set_new(r, "invocation",
                      bench_invocation_json(s->opt->argc, s->opt->argv));
  json_object_set_new(r, "parameters", parameters_json(s));
  json_object_set_new(r, "protocol", protocol_json(s));
  json_object_set_new(r, "plans", plans_json(s));
  json_object_set_new(r, "executions", executions_json(s));
  json_object_set_new(r, "statistics", statistics_json(s));
  json_object_set_new(r, "memory", memory_json(s));
  json_object_set_new(r, "limitations", limitations_json(s));
  json_t *trace = json_null(); /* also when the trace could not be written */
  if (s->opt->trace_path && s->trace_written) {
    trace = json_object();
    json_object_set_new(trace, "path", jstr(s->opt->trace_path));
    json_object_set_new(trace, "executions", json_string(bench_trace_scope(s)));
  }
  json_object_set_new(r, "trace", trace);
  return r;
}

/* ---- console summary
 * ------------------------------------------------------------ */

void bench_print_summary(const bench_state *s, FILE *out) {
  const fdy_bench_options *o = s->opt;
  char weight[32], payload[32];
  fdy_format_bytes(s->weight_bytes, weight, sizeof weight);
  fdy_format_bytes(s->payload_bytes, payload, sizeof payload);
  bool cuda = s->backend_kind == FDY_BENCH_BACKEND_CUDA;
  fprintf(out,
          "foundry bench: %s backend (%s), %" PRIu32 " layers x %s = %s "
          "payload, %" PRIu32 " measured rounds after %" PRIu32
          " warmup, %" PRIu32 " compute pass%s%s%s\n",
          fdy_bench_backend_name(s->backend_kind), s->caps.name, o->layers,
          weight, payload, o->iterations, o->warmup, o->compute_passes,
          o->compute_passes == 1 ? "" : "es", cuda ? ", host memory " : "",
          cuda ? fdy_host_mode_name(o->host_mode) : "");
  fprintf(out, "host-to-device ceiling (%s, %s): %.2f GiB/s\n",
          cuda ? h2d_host_memory(s) : "memcpy", weight,
          s->h2d.bytes_per_second / (double)FDY_GIB);
  if (s->d2d.available && s->kernel.available) {
    fprintf(out,
            "device-to-device: %.2f GiB/s; checksum kernel alone: %.2f GiB/s "
            "(%.1f%% of device-to-device)\n",
            s->d2d.bytes_per_second / (double)FDY_GIB,
            s->kernel.bytes_per_second / (double)FDY_GIB,
            100.0 * s->kernel.bytes_per_second / s->d2d.bytes_per_second);
  }
  fprintf(out,
          "\nbuffers  median ms    mean ms  stddev ms     min ms     max ms"
          "   median 95%% CI         mean 95%% CI\n");
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    const bench_config_stats *c = &s->stats[k];
    fprintf(out,
            "%7" PRIu32 " %10.3f %10.3f %10.3f %10.3f %10.3f  [%.3f, %.3f]"
            "  [%.3f, %.3f]\n",
            o->buffers[k], c->time.median, c->time.mean, c->time.stddev,
            c->time.min, c->time.max, c->median_ci.low, c->median_ci.high,
            c->mean_ci.low, c->mean_ci.high);
  }
  fprintf(out,
          "\nbuffers      GiB/s  of ceiling  speedup vs %" PRIu32 "  95%% CI\n",
          o->buffers[0]);
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    const bench_config_stats *c = &s->stats[k];
    fprintf(out, "%7" PRIu32 " %10.3f %10.1f%% %13.3f  [%.3f, %.3f]\n",
            o->buffers[k], c->throughput_gib_s, 100.0 * c->fraction_of_h2d,
            c->speedup, c->speedup_ci.low, c->speedup_ci.high);
  }
  const bench_overlap *ov = &s->overlap;
  if (ov->available) {
    fprintf(out,
            "\noverlap (%" PRIu32 "-buffer device timings): copy %.3f ms, "
            "compute %.3f ms, ideal speedup (T+C)/max(T,C) = %.3f",
            o->buffers[0], ov->copy_ms, ov->compute_ms, ov->ideal_speedup);
    if (o->buffer_count > 1) {
      fprintf(out,
              "; measured %" PRIu32 "-buffer speedup %.3f = %.1f%% of "
              "ideal",
              o->buffers[o->buffer_count - 1], ov->measured_speedup,
              100.0 * ov->fraction_of_ideal);
    }
    fputc('\n', out);
  } else {
    fprintf(out, "\noverlap: the backend gave no device timings\n");
  }
  if (!cuda) {
    fprintf(out, "note: on the cpu backend the copies and the compute share "
                 "the same cores,\n"
                 "      so more buffers cannot overlap them: a speedup near "
                 "1.0 is expected;\n"
                 "      overlap needs a device with its own copy engine "
                 "(--backend cuda on a GPU)\n");
  }
  char peak[32], budget[32], total[32];
  fprintf(out,
          "device slots: peak %s of a %s budget (%s for all configurations); "
          "all %zu executions verified\n",
          fdy_format_bytes(peak_slot_bytes(s), peak, sizeof peak),
          fdy_format_bytes(s->max_budget_bytes, budget, sizeof budget),
          fdy_format_bytes(s->total_slot_bytes, total, sizeof total),
          s->execution_count);
  fprintf(out, "executor setup (outside the timings):");
  for (uint32_t k = 0; k < o->buffer_count; k++) {
    fprintf(out, "%s %" PRIu32 " buffers %.3f ms", k ? "," : "", o->buffers[k],
            (double)s->configs[k].setup.setup_ns / 1e6);
  }
  fputc('\n', out);
}
