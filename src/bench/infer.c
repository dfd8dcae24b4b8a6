/* `foundry infer-bench` (foundry/infer_bench.h): the protocol's prompt, the
 * weight bytes of a decode token, the executions on one session, their
 * statistics, the console summary and the report. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_internal.h"
#include "foundry/cpu.h"
#include "foundry/infer_bench.h"

#define INFER_CEILING_REPEATS 10u

static bool is_special(const fdy_llama_config *c, int32_t id) {
  if (id == c->bos_id) {
    return true;
  }
  for (uint32_t i = 0; i < c->eos_count && i < FDY_LLAMA_MAX_EOS; i++) {
    if (c->eos_ids[i] == id) {
      return true;
    }
  }
  return false;
}

void fdy_infer_prompt_ids(const fdy_llama_config *config, uint64_t seed,
                          int32_t *ids, uint32_t count) {
  fdy_splitmix64 g = {.state =
                          fdy_bench_stream_seed(seed, FDY_INFER_PROMPT_STREAM)};
  for (uint32_t i = 0; i < count; i++) {
    int32_t id;
    do {
      id = (int32_t)(fdy_splitmix64_next(&g) % config->vocab_size);
    } while (is_special(config, id));
    ids[i] = id;
  }
}

/* Bytes of the weights (and views) op `op` reads per token. */
static uint64_t op_weight_bytes(const fdy_graph *g, fdy_op_id op) {
  fdy_op_info info;
  if (fdy_graph_op(g, op, &info, NULL) != FDY_OK) {
    return 0;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < info.read_count; i++) {
    fdy_tensor_info t;
    if (fdy_graph_tensor(g, info.reads[i], &t, NULL) != FDY_OK ||
        (t.role != FDY_TENSOR_WEIGHT && t.role != FDY_TENSOR_WEIGHT_VIEW)) {
      continue;
    }
    uint64_t rows =
        info.kind == FDY_OP_EMBED_Q4 && t.shape.rank > 0 ? t.shape.dims[0] : 1;
    bytes += t.bytes / (rows ? rows : 1);
  }
  return bytes;
}

fdy_status fdy_infer_decode_weight_bytes(const fdy_plan *plan, uint64_t *out,
                                         fdy_error *err) {
  *out = 0;
  int64_t step = fdy_plan_find_section(plan, "decode");
  if (step < 0) {
    return fdy_error_set(err, FDY_ERR_NOT_FOUND,
                         "the plan has no step \"decode\"");
  }
  const fdy_section *sec = fdy_plan_section(plan, (size_t)step);
  const fdy_graph *g = fdy_plan_graph(plan);
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_LAUNCH) {
      *out += op_weight_bytes(g, c->u.launch.op);
    }
  }
  return FDY_OK;
}

fdy_status fdy_infer_check_options(const fdy_infer_options *o, fdy_error *err) {
  const char *zero = o->prompt_count == 0 ? "--prompt-tokens"
                     : o->gen_tokens == 0 ? "--gen-tokens"
                     : o->iterations == 0 ? "--iterations"
                     : o->bootstrap_resamples == 0 ||
                             o->bootstrap_resamples > FDY_BENCH_MAX_RESAMPLES
                         ? "--bootstrap-resamples"
                         : NULL;
  if (zero) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s must be positive%s", zero,
                  strcmp(zero, "--bootstrap-resamples") == 0
                      ? " and at most 1000000"
                      : "");
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", zero);
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if ((uint64_t)o->warmup + o->iterations > UINT32_MAX) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "--warmup plus --iterations exceed 4294967295");
    if (err) {
      snprintf(err->name, sizeof err->name, "--warmup");
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (!o->report_path) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "--report is required");
  }
  return bench_check_output("--report", o->report_path, err);
}

/* One execution's times (seconds) and ids. */
typedef struct infer_execution {
  double total, prefill, decode, decode_tps;
} infer_execution;

typedef struct infer_state {
  const fdy_infer_options *opt;
  int64_t started_unix;
  bool have_caps;
  fdy_device_caps caps;
  fdy_llama_session *session;
  fdy_executor_stats setup;
  uint32_t context;
  uint64_t decode_weight_bytes;
  bool have_in_use; /* cuda: memory in use with the session created */
  uint64_t in_use_bytes;
  bench_ceiling d2d, read;
  uint32_t done; /* executions finished, warmup first */
  infer_execution *runs;
  int32_t *first_ids; /* the first execution's ids */
  uint32_t first_count;
  bool same_ids; /* every execution produced first_ids */
  bool have_stats;
  fdy_bench_stats total;
  fdy_bench_interval total_ci;
  double prefill_median, decode_median, decode_tps_median;
  const char *stage;
} infer_state;

static json_t *jreal(double x) {
  return isfinite(x) ? json_real(x) : json_null();
}

static json_t *jint(uint64_t v) {
  return json_integer((json_int_t)v);
}

static json_t *ids_json(const int32_t *ids, uint32_t count) {
  json_t *a = json_array();
  for (uint32_t i = 0; ids && i < count; i++) {
    json_array_append_new(a, json_integer(ids[i]));
  }
  return a;
}

static const char *protocol_name(const fdy_infer_options *o) {
  return !o->prompt_file && o->prompt_count == FDY_INFER_PROMPT_TOKENS &&
                 o->gen_tokens == FDY_INFER_GEN_TOKENS
             ? FDY_INFER_PROTOCOL
             : "custom";
}

static json_t *protocol_json(const infer_state *s) {
  const fdy_infer_options *o = s->opt;
  char seed[24];
  snprintf(seed, sizeof seed, "%" PRIu64, o->seed);
  json_t *p = json_object();
  json_object_set_new(p, "name", json_string(protocol_name(o)));
  json_object_set_new(p, "prompt_source",
                      json_string(o->prompt_file ? "file" : "seed"));
  json_object_set_new(p, "prompt_file", bench_json_text(o->prompt_file));
  json_object_set_new(p, "seed", json_string(seed));
  json_object_set_new(p, "prompt_tokens", jint(o->prompt_count));
  json_object_set_new(p, "gen_tokens", jint(o->gen_tokens));
  json_object_set_new(p, "ignore_eos", json_true());
  json_object_set_new(p, "warmup", jint(o->warmup));
  json_object_set_new(p, "iterations", jint(o->iterations));
  json_object_set_new(p, "bootstrap_resamples", jint(o->bootstrap_resamples));
  json_object_set_new(p, "context", jint(s->context));
  json_object_set_new(p, "prompt_ids", ids_json(o->prompt, o->prompt_count));
  json_object_set_new(
      p, "execution",
      json_string("session reset + prefill of the prompt + gen_tokens - 1 "
                  "single-token decode passes (fdy_llama_generate); setup "
                  "(session creation) outside"));
  return p;
}

static json_t *environment_json(const infer_state *s) {
  json_t *o = json_object();
  json_object_set_new(o, "started_utc", bench_started_json(s->started_unix));
  json_object_set_new(o, "backend", bench_json_text(s->opt->backend_name));
  uint32_t threads = fdy_cpu_backend_threads(s->opt->backend);
  json_object_set_new(o, "threads", threads ? jint(threads) : json_null());
  json_t *dev = json_null();
  if (s->have_caps) {
    dev = json_object();
    json_object_set_new(dev, "name", bench_json_text(s->caps.name));
    json_object_set_new(dev, "total_memory_bytes", jint(s->caps.total_memory));
  }
  json_object_set_new(o, "device", dev);
  json_object_set_new(o, "host", bench_host_json());
  return o;
}

static json_t *model_json(const infer_state *s) {
  const fdy_llama_config *c = fdy_llama_model_config(s->opt->model);
  json_t *m = json_object();
  json_object_set_new(m, "path", bench_json_text(s->opt->model_dir));
  json_object_set_new(m, "vocab_size", jint(c->vocab_size));
  json_object_set_new(m, "hidden_size", jint(c->hidden_size));
  json_object_set_new(m, "layers", jint(c->num_layers));
  json_object_set_new(m, "group_size", jint(c->group_size));
  json_object_set_new(m, "decode_weight_bytes_per_token",
                      jint(s->decode_weight_bytes));
  return m;
}

static json_t *memory_json(const infer_state *s) {
  const uint64_t *b = s->setup.class_bytes;
  json_t *m = json_object();
  json_object_set_new(m, "weights_resident", jint(b[FDY_BUFFER_RESIDENT]));
  json_object_set_new(m, "weights_slots", jint(b[FDY_BUFFER_SLOT]));
  json_object_set_new(m, "kv_cache", jint(b[FDY_BUFFER_STATE]));
  json_object_set_new(m, "activations", jint(b[FDY_BUFFER_ARENA]));
  json_object_set_new(m, "io", jint(b[FDY_BUFFER_IO]));
  json_object_set_new(m, "workspace", jint(s->setup.workspace_bytes));
  json_object_set_new(m, "device_in_use_bytes",
                      s->have_in_use ? jint(s->in_use_bytes) : json_null());
  return m;
}

static json_t *ceiling_json(const bench_ceiling *c, const char *method) {
  if (!c->available) {
    return json_null();
  }
  json_t *o = json_object();
  json_object_set_new(o, "method", json_string(method));
  json_object_set_new(o, "bytes", jint(c->bytes));
  json_object_set_new(o, "repeats", jint(c->repeats));
  json_object_set_new(o, "bytes_per_second", jreal(c->bytes_per_second));
  return o;
}

static double achieved_bandwidth(const infer_state *s) {
  return (double)s->decode_weight_bytes * s->decode_tps_median;
}

static json_t *bandwidth_json(const infer_state *s) {
  json_t *o = json_object();
  json_object_set_new(o, "decode_weight_bytes_per_token",
                      jint(s->decode_weight_bytes));
  json_object_set_new(o, "achieved_bytes_per_second",
                      s->have_stats ? jreal(achieved_bandwidth(s))
                                    : json_null());
  json_object_set_new(
      o, "d2d",
      ceiling_json(&s->d2d, "fdy_cuda_measure_d2d (bytes read + written)"));
  json_object_set_new(
      o, "read_kernel",
      ceiling_json(&s->read, "fdy_cuda_measure_checksum (bytes read)"));
  bool frac = s->have_stats && s->d2d.available;
  json_object_set_new(
      o, "fraction_of_d2d",
      frac ? jreal(achieved_bandwidth(s) / s->d2d.bytes_per_second)
           : json_null());
  json_object_set_new(o, "note",
                      json_string(s->d2d.available
                                      ? "achieved = weight bytes per decode "
                                        "token x median decode tokens/s"
                                      : "device bandwidth not measured on "
                                        "this backend"));
  return o;
}

static json_t *executions_json(const infer_state *s) {
  json_t *a = json_array();
  for (uint32_t i = 0; i < s->done; i++) {
    const infer_execution *x = &s->runs[i];
    json_t *o = json_object();
    json_object_set_new(o, "measured", json_boolean(i >= s->opt->warmup));
    json_object_set_new(o, "total_seconds", jreal(x->total));
    json_object_set_new(o, "prefill_seconds", jreal(x->prefill));
    json_object_set_new(o, "decode_seconds", jreal(x->decode));
    json_object_set_new(o, "decode_tokens_per_second", jreal(x->decode_tps));
    json_array_append_new(a, o);
  }
  return a;
}

static json_t *statistics_json(const infer_state *s) {
  if (!s->have_stats) {
    return json_null();
  }
  const fdy_infer_options *o = s->opt;
  json_t *st = json_object();
  json_t *e = json_object();
  json_object_set_new(e, "median_seconds", jreal(s->total.median));
  json_object_set_new(e, "median_ci_low_seconds", jreal(s->total_ci.low));
  json_object_set_new(e, "median_ci_high_seconds", jreal(s->total_ci.high));
  json_object_set_new(e, "mean_seconds", jreal(s->total.mean));
  json_object_set_new(e, "stddev_seconds", jreal(s->total.stddev));
  json_object_set_new(e, "min_seconds", jreal(s->total.min));
  json_object_set_new(e, "max_seconds", jreal(s->total.max));
  json_object_set_new(st, "end_to_end", e);
  json_object_set_new(st, "prefill_median_seconds", jreal(s->prefill_median));
  json_object_set_new(st, "prefill_tokens_per_second",
                      jreal(o->prompt_count / s->prefill_median));
  json_object_set_new(st, "time_to_first_token_seconds",
                      jreal(s->prefill_median));
  json_object_set_new(st, "decode_median_seconds", jreal(s->decode_median));
  json_object_set_new(st, "decode_tokens_per_second",
                      jreal(s->decode_tps_median));
  return st;
}

static json_t *report_json(const infer_state *s, fdy_status status,
                           const fdy_error *err) {
  json_t *r = json_object();
  if (!r) {
    return NULL;
  }
  json_object_set_new(r, "format", json_string(FDY_INFER_REPORT_FORMAT));
  json_object_set_new(r, "version", json_integer(FDY_INFER_REPORT_VERSION));
  json_object_set_new(r, "status",
                      json_string(status == FDY_OK ? "ok" : "failed"));
  json_t *e = json_null();
  if (status != FDY_OK) {
    e = bench_error_json(err);
    json_object_set_new(e, "stage", json_string(s->stage));
  }
  json_object_set_new(r, "error", e);
  json_object_set_new(r, "implementation", json_string("foundry"));
  json_object_set_new(r, "backend", bench_json_text(s->opt->backend_name));
  json_object_set_new(r, "build", bench_build_json());
  json_object_set_new(r, "environment", environment_json(s));
  json_object_set_new(r, "invocation",
                      bench_invocation_json(s->opt->argc, s->opt->argv));
  json_object_set_new(r, "model", model_json(s));
  json_object_set_new(r, "protocol", protocol_json(s));
  json_object_set_new(r, "setup_seconds",
                      jreal((double)s->setup.setup_ns * 1e-9));
  json_object_set_new(r, "memory", memory_json(s));
  json_object_set_new(r, "bandwidth", bandwidth_json(s));
  json_object_set_new(r, "executions", executions_json(s));
  json_object_set_new(r, "statistics", statistics_json(s));
  json_object_set_new(r, "generated_ids",
                      ids_json(s->first_ids, s->first_count));
  json_object_set_new(r, "ids_identical_across_executions",
                      s->first_ids ? json_boolean(s->same_ids) : json_null());
  return r;
}

static void print_summary(const infer_state *s, FILE *out) {
  const fdy_infer_options *o = s->opt;
  const uint64_t *b = s->setup.class_bytes;
  char w[32], kv[32], act[32], rd[32];
  fprintf(out,
          "foundry infer-bench: %s backend%s%s, protocol %s (%" PRIu32
          " prompt ids, %" PRIu32 " generated, EOS ignored), %" PRIu32
          " measured executions after %" PRIu32 " warmup\n",
          o->backend_name, s->have_caps ? ", " : "",
          s->have_caps ? s->caps.name : "", protocol_name(o), o->prompt_count,
          o->gen_tokens, o->iterations, o->warmup);
  fprintf(out, "setup: %.3f s (session creation, weights uploaded)\n",
          (double)s->setup.setup_ns * 1e-9);
  fprintf(out, "end to end: median %.4f s (95%% CI %.4f .. %.4f)\n",
          s->total.median, s->total_ci.low, s->total_ci.high);
  fprintf(out,
          "prefill: median %.4f s, %.1f tokens/s; time to first token "
          "%.4f s\n",
          s->prefill_median, o->prompt_count / s->prefill_median,
          s->prefill_median);
  fprintf(out, "decode: median %.1f tokens/s\n", s->decode_tps_median);
  fprintf(out, "device memory: weights %s, KV cache %s, activations %s\n",
          fdy_format_bytes(b[FDY_BUFFER_RESIDENT] + b[FDY_BUFFER_SLOT], w,
                           sizeof w),
          fdy_format_bytes(b[FDY_BUFFER_STATE], kv, sizeof kv),
          fdy_format_bytes(b[FDY_BUFFER_ARENA], act, sizeof act));
  fprintf(out, "decode bandwidth: %s per token x %.1f tokens/s = %.1f GB/s",
          fdy_format_bytes(s->decode_weight_bytes, rd, sizeof rd),
          s->decode_tps_median, achieved_bandwidth(s) * 1e-9);
  if (s->d2d.available) {
    fprintf(out, " (%.1f%% of the %.1f GB/s device-to-device copy",
            100.0 * achieved_bandwidth(s) / s->d2d.bytes_per_second,
            s->d2d.bytes_per_second * 1e-9);
    if (s->read.available) {
      fprintf(out, ", read kernel %.1f GB/s", s->read.bytes_per_second * 1e-9);
    }
    fprintf(out, ")\n");
  } else {
    fprintf(out, " (device bandwidth not measured on this backend)\n");
  }
  fprintf(out, "generated ids identical across executions: %s\n",
          s->same_ids ? "yes" : "NO");
}

static fdy_status measure_ceilings(infer_state *s, fdy_error *err) {
  if (strcmp(s->opt->backend_name, "cuda") != 0) {
    return FDY_OK;
  }
  s->stage = "ceilings";
  bench_ceiling c = {.available = true,
                     .bytes = FDY_INFER_CEILING_BYTES,
                     .repeats = INFER_CEILING_REPEATS};
  fdy_status st = fdy_cuda_measure_d2d(s->opt->backend, c.bytes, c.repeats,
                                       &c.bytes_per_second, err);
  if (st != FDY_OK) {
    return st;
  }
  s->d2d = c;
  st = fdy_cuda_measure_checksum(s->opt->backend, c.bytes, c.repeats,
                                 &c.bytes_per_second, err);
  if (st == FDY_OK) {
    s->read = c;
  }
  return st;
}

static fdy_status run_executions(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  uint32_t total = o->warmup + o->iterations;
  s->stage = "executions";
  s->same_ids = true;
  for (uint32_t i = 0; i < total; i++) {
    fdy_llama_generation gen;
    fdy_llama_generate_options go = {.max_tokens = o->gen_tokens,
                                     .ignore_eos = true};
    int64_t t0 = fdy_now_ns();
    fdy_status st = fdy_llama_generate(s->session, o->prompt, o->prompt_count,
                                       &go, &gen, err);
    int64_t t1 = fdy_now_ns();
    if (st != FDY_OK) {
      return st;
    }
    s->runs[i] = (infer_execution){.total = (double)(t1 - t0) * 1e-9,
                                   .prefill = gen.prefill_seconds,
                                   .decode = gen.decode_seconds,
                                   .decode_tps = gen.decode_tokens_per_second};
    s->done = i + 1;
    if (!s->first_ids) {
      s->first_ids = gen.ids;
      s->first_count = gen.count;
      gen.ids = NULL;
    } else if (gen.count != s->first_count ||
               memcmp(gen.ids, s->first_ids, sizeof *gen.ids * gen.count)) {
      s->same_ids = false;
    }
    fdy_llama_generation_free(&gen);
    if (o->progress) {
      fprintf(stderr, "infer-bench: %s %" PRIu32 "/%" PRIu32 ": %.4f s\n",
              i < o->warmup ? "warmup" : "execution",
              i < o->warmup ? i + 1 : i + 1 - o->warmup,
              i < o->warmup ? o->warmup : o->iterations, s->runs[i].total);
    }
  }
  return FDY_OK;
}

/* The measured executions' values of one field, and their median. */
static fdy_status measured_median(const infer_state *s, double *x, size_t field,
                                  double *median, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  for (uint32_t i = 0; i < o->iterations; i++) {
    memcpy(&x[i], (const char *)&s->runs[o->warmup + i] + field, sizeof *x);
  }
  return fdy_bench_median(x, o->iterations, median, err);
}

static fdy_status statistics(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  s->stage = "statistics";
  double *x = malloc(sizeof *x * o->iterations);
  if (!x) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status st = measured_median(s, x, offsetof(infer_execution, prefill),
                                  &s->prefill_median, err);
  if (st == FDY_OK) {
    st = measured_median(s, x, offsetof(infer_execution, decode),
                         &s->decode_median, err);
  }
  if (st == FDY_OK) {
    st = measured_median(s, x, offsetof(infer_execution, decode_tps),
                         &s->decode_tps_median, err);
  }
  double total;
  if (st == FDY_OK) {
    st = measured_median(s, x, offsetof(infer_execution, total), &total, err);
  }
  if (st == FDY_OK) {
    st = fdy_bench_describe(x, o->iterations, &s->total, err);
  }
  if (st == FDY_OK) {
    st = fdy_bench_bootstrap(
        x, o->iterations, FDY_BENCH_STAT_MEDIAN, o->bootstrap_resamples,
        fdy_bench_stream_seed(o->seed, 0), &s->total_ci, err);
  }
  free(x);
  s->have_stats = st == FDY_OK;
  return st;
}

static fdy_status run(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  s->stage = "setup";
  fdy_status st = o->backend->ops->capabilities(o->backend, &s->caps, err);
  if (st != FDY_OK) {
    return st;
  }
  s->have_caps = true;
  uint64_t context =
      o->context ? o->context : (uint64_t)o->prompt_count + o->gen_tokens;
  const fdy_llama_config *c = fdy_llama_model_config(o->model);
  if (context > c->max_position_embeddings) {
    context = c->max_position_embeddings;
  }
  fdy_llama_session_options so = {.backend = o->backend,
                                  .context = (uint32_t)context};
  st = fdy_llama_session_create(o->model, &so, &s->session, err);
  if (st != FDY_OK) {
    return st;
  }
  s->context = fdy_llama_session_context(s->session);
  s->setup = fdy_llama_session_stats(s->session);
  st = fdy_infer_decode_weight_bytes(fdy_llama_session_plan(s->session),
                                     &s->decode_weight_bytes, err);
  if (st == FDY_OK && strcmp(o->backend_name, "cuda") == 0) {
    st = fdy_cuda_memory_in_use(o->backend, &s->in_use_bytes, err);
    s->have_in_use = st == FDY_OK;
  }
  if (st == FDY_OK) {
    st = measure_ceilings(s, err);
  }
  if (st == FDY_OK) {
    st = run_executions(s, err);
  }
  if (st == FDY_OK) {
    st = statistics(s, err);
  }
  return st;
}

fdy_status fdy_infer_bench_run(const fdy_infer_options *options, bool *written,
                               fdy_error *err) {
  if (written) {
    *written = false;
  }
  fdy_status st = fdy_infer_check_options(options, err);
  if (st != FDY_OK) {
    return st;
  }
  infer_state s = {
      .opt = options, .started_unix = (int64_t)time(NULL), .stage = "setup"};
  s.runs =
      calloc((size_t)options->warmup + options->iterations, sizeof *s.runs);
  if (!s.runs) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  st = run(&s, err);
  if (st == FDY_OK && options->console) {
    print_summary(&s, options->console);
  }
  fdy_error werr;
  fdy_status wst =
      bench_write_json(options->report_path, report_json(&s, st, err), &werr);
  if (wst == FDY_OK && written) {
    *written = true;
  }
  if (st == FDY_OK && wst != FDY_OK) {
    if (err) {
      *err = werr;
    }
    st = wst;
  }
  fdy_llama_session_destroy(s.session);
  free(s.first_ids);
  free(s.runs);
  return st;
}
