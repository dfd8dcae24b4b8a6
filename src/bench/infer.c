/* `foundry infer-bench` (foundry/infer_bench.h): the protocol's prompt, the
 * weight bytes of a decode step and the bytes its plan streams, the
 * executions on one session of `batch` sequences (prefills, then decode
 * steps of one row per sequence, each step timed), their statistics, the
 * ceilings, the traced execution and its Chrome trace, the console summary
 * and the report. */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_internal.h"
#include "foundry/infer_bench.h"
#include "foundry/op_table.h"
#include "foundry/registry.h"
#include "foundry/speculative.h"

#define INFER_CEILING_REPEATS 10u
/* Rates print in GiB/s, sizes in binary units (fdy_format_bytes), as
 * everywhere in the CLI; the report has bytes per second. */
#define GIB 1073741824.0

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
    bool lookup = fdy_op_row_of(info.kind)->flags & FDY_OP_EMBEDDING;
    uint64_t rows = lookup && t.shape.rank > 0 ? t.shape.dims[0] : 1;
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

fdy_status fdy_infer_copied_weight_bytes(const fdy_plan *plan,
                                         const char *section, uint64_t *bytes,
                                         uint64_t *largest, fdy_error *err) {
  *bytes = 0;
  if (largest) {
    *largest = 0;
  }
  int64_t index = fdy_plan_find_section(plan, section);
  if (index < 0) {
    return fdy_error_set(err, FDY_ERR_NOT_FOUND,
                         "the plan has no section \"%s\"", section);
  }
  const fdy_section *sec = fdy_plan_section(plan, (size_t)index);
  const fdy_graph *g = fdy_plan_graph(plan);
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    fdy_tensor_info t;
    if (c->kind != FDY_CMD_PREFETCH ||
        fdy_graph_tensor(g, c->u.prefetch.weight, &t, NULL) != FDY_OK) {
      continue;
    }
    *bytes += t.bytes;
    if (largest && t.bytes > *largest) {
      *largest = t.bytes;
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
  if (o->batch == 0 || o->batch > FDY_LLAMA_MAX_SEQUENCES ||
      (o->prompt_file && o->batch > 1)) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  o->prompt_file && o->batch > 1
                      ? "--prompt-file gives one prompt: --batch must be 1 "
                        "(1 to %u with seeded prompts), got %" PRIu32
                      : "--batch must be from 1 to %u, got %" PRIu32,
                  FDY_LLAMA_MAX_SEQUENCES, o->batch);
    if (err) {
      snprintf(err->name, sizeof err->name, "--batch");
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  if (o->draft_dir && (o->batch != 1 || o->draft_tokens == 0 ||
                       o->draft_tokens > FDY_LLAMA_MAX_DRAFT_TOKENS)) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  o->batch != 1
                      ? "--draft-model decodes one sequence: --batch must be "
                        "1, got %" PRIu32
                      : "--draft-tokens must be from 1 to %" PRIu32,
                  o->batch != 1 ? o->batch : FDY_LLAMA_MAX_DRAFT_TOKENS);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s",
               o->batch != 1 ? "--batch" : "--draft-tokens");
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
  fdy_status st = o->trace_path
                      ? bench_check_distinct(o->report_path, o->trace_path, err)
                      : FDY_OK;
  if (st == FDY_OK) {
    st = bench_check_output("--report", o->report_path, err);
  }
  if (st == FDY_OK && o->trace_path) {
    st = bench_check_output("--trace", o->trace_path, err);
  }
  return st;
}

/* One execution's times (seconds): the whole call, the prefills of every
 * sequence, the decode steps; decode tokens/s of each sequence (steps /
 * decode) and of the batch (batch x steps / decode). */
typedef struct infer_execution {
  double total, prefill, decode, decode_tps, aggregate_tps;
  fdy_llama_speculative_stats speculative; /* with a draft */
} infer_execution;

/* One executor run of the traced execution: a prefill chunk of `tokens`
 * ids, or a decode step of `tokens` rows. */
typedef struct trace_run {
  uint32_t tokens;
  int64_t begin_ns, end_ns; /* fdy_now_ns around the call */
  size_t first, count;      /* its timings: infer_trace.timings[first..] */
} trace_run;

/* The traced execution: every run's command timings, and its ids. */
typedef struct infer_trace {
  trace_run *runs;
  size_t run_count;
  fdy_command_timing *timings;
  size_t timing_count, timing_cap;
  int32_t *ids;  /* batch x gen_tokens, as infer_batch.ids */
  bool same_ids; /* the ids of the measured executions */
  bool written;  /* the trace file is in place */
} infer_trace;

/* Buffers of an execution: the slots of the decode rows (0 to batch - 1),
 * the ids fed to a step and those it returns (batch each), and the ids
 * generated (batch x gen_tokens: sequence k's at k x gen_tokens). */
typedef struct infer_batch {
  uint32_t *slots;
  int32_t *feed, *next, *ids;
} infer_batch;

typedef struct infer_state {
  const fdy_infer_options *opt;
  int64_t started_unix;
  bool have_caps;
  fdy_device_caps caps;
  fdy_llama_session *session;
  fdy_llama_session *draft; /* with --draft-model: the draft's, resident */
  fdy_executor_stats setup;
  uint32_t context;
  uint32_t prefill_rows;
  uint64_t budget; /* the plan's weight budget, default resolved */
  uint64_t decode_weight_bytes;
  /* weight bytes copied from the host: by setup (resident), by each run of
   * the steps (streamed), and the largest streamed copy */
  uint64_t resident_weight_bytes, streamed_decode_bytes;
  uint64_t streamed_bytes; /* the distinct weights that are streamed */
  uint64_t streamed_prefill_bytes, largest_streamed_bytes;
  json_t *resident_units, *streamed_units; /* names of the weights */
  bool have_in_use; /* cuda: memory in use with the session created */
  uint64_t in_use_bytes;
  uint64_t peak_rss_bytes; /* after the measured executions */
  bench_ceiling d2d, read, h2d;
  uint32_t done; /* executions finished, warmup first */
  infer_execution *runs;
  uint32_t steps;       /* decode steps per execution: gen_tokens - 1 */
  double *step_seconds; /* execution i's steps at i x steps */
  infer_batch batch;
  int32_t *first_ids; /* the first execution's ids (as batch.ids) */
  bool same_ids;      /* every execution produced first_ids */
  bool have_stats;
  fdy_executor_stats after; /* the session's stats after the measured runs */
  fdy_bench_stats total;
  fdy_bench_interval total_ci;
  double prefill_median, decode_median, decode_tps_median;
  double aggregate_tps_median;
  /* over the steps of the measured executions (when there are steps) */
  double step_p50, step_p99, step_mean;
  infer_trace trace;
  const char *stage;
} infer_state;

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
  json_object_set_new(p, "batch", jint(o->batch));
  json_object_set_new(p, "ignore_eos", json_true());
  json_object_set_new(p, "warmup", jint(o->warmup));
  json_object_set_new(p, "iterations", jint(o->iterations));
  json_object_set_new(p, "bootstrap_resamples", jint(o->bootstrap_resamples));
  json_object_set_new(p, "context", jint(s->context));
  json_object_set_new(p, "prefill_rows", jint(s->prefill_rows));
  json_object_set_new(p, "kv_dtype", json_string(fdy_dtype_name(o->kv_dtype)));
  json_object_set_new(p, "graphs", json_boolean(!o->no_graphs));
  json_object_set_new(p, "dependent_launch",
                      json_boolean(o->backend_name != NULL &&
                                   strcmp(o->backend_name, "cuda") == 0 &&
                                   !o->serial_launch));
  json_object_set_new(p, "prompt_ids", ids_json(o->prompt, o->prompt_count));
  json_object_set_new(
      p, "sequence_prompts",
      o->prompt_file
          ? json_null()
          : json_string("sequence k (0 to batch - 1): the prompt rule from "
                        "seed + k (mod 2^64); prompt_ids are sequence 0's"));
  json_object_set_new(
      p, "execution",
      json_string("session reset + each sequence's prompt prefilled in its "
                  "slot (fdy_llama_session_append: runs of up to "
                  "prefill_rows ids) + gen_tokens - 1 decode steps of batch "
                  "rows (fdy_llama_session_decode, host wall time of each "
                  "step); setup (session creation) outside"));
  return p;
}

/* How the steps ran: recorded as graphs (and how many each run launched)
 * or command by command. */
static json_t *graphs_json(const infer_state *s) {
  json_t *g = json_object();
  json_object_set_new(g, "requested", json_boolean(!s->opt->no_graphs));
  json_object_set_new(g, "steps_recorded", jint(s->setup.graph_steps));
  json_object_set_new(g, "steps_refused", jint(s->setup.graph_fallbacks));
  json_object_set_new(g, "graphs", jint(s->setup.graphs));
  json_object_set_new(g, "launches_by_last_decode_run",
                      s->have_stats ? jint(s->after.last_run_graph_launches)
                                    : json_null());
  return g;
}

static json_t *environment_json(const infer_state *s) {
  json_t *o = json_object();
  json_object_set_new(o, "started_utc", bench_started_json(s->started_unix));
  json_object_set_new(o, "backend", bench_json_text(s->opt->backend_name));
  uint32_t threads = fdy_backend_threads(s->opt->backend);
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

/* The checkpoint's files as the manifest lists them (fdy_manifest_json),
 * the time hashing took and the manifest checked against; null when not
 * recorded. */
static json_t *checkpoint_json(const fdy_infer_options *o) {
  if (!o->checkpoint) {
    return json_null();
  }
  char *text = fdy_manifest_json(o->checkpoint);
  json_t *manifest = text ? json_loads(text, 0, NULL) : NULL;
  free(text);
  json_t *c = json_object();
  json_object_set(c, "files", json_object_get(manifest, "files"));
  json_object_set_new(c, "hash_seconds", jreal(o->checkpoint->hash_seconds));
  json_object_set_new(c, "manifest",
                      o->pinned_manifest ? bench_json_text(o->pinned_manifest)
                                         : json_null());
  json_decref(manifest);
  return c;
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
  json_object_set_new(m, "checkpoint", checkpoint_json(s->opt));
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

static json_t *units_json(json_t *units) {
  return units ? json_incref(units) : json_null();
}

static json_t *weights_json(const infer_state *s) {
  const fdy_infer_options *o = s->opt;
  const uint64_t *b = s->setup.class_bytes;
  json_t *w = json_object();
  json_object_set_new(w, "budget_bytes", jint(s->budget));
  json_object_set_new(
      w, "budget_source",
      json_string(o->weight_budget ? "--weight-budget" : "device memory"));
  json_object_set_new(
      w, "buffers", jint(o->buffers ? o->buffers : FDY_LLAMA_DEFAULT_BUFFERS));
  json_object_set_new(w, "resident_bytes", jint(s->resident_weight_bytes));
  json_object_set_new(w, "streamed_bytes", jint(s->streamed_bytes));
  json_object_set_new(w, "streamed_bytes_per_decode_token",
                      jint(s->streamed_decode_bytes));
  json_object_set_new(w, "streamed_bytes_per_decode_step",
                      jint(s->streamed_decode_bytes));
  json_object_set_new(w, "streamed_bytes_per_prefill_run",
                      jint(s->streamed_prefill_bytes));
  json_object_set_new(w, "largest_streamed_bytes",
                      jint(s->largest_streamed_bytes));
  json_object_set_new(w, "device_resident_bytes", jint(b[FDY_BUFFER_RESIDENT]));
  json_object_set_new(w, "device_slot_bytes", jint(b[FDY_BUFFER_SLOT]));
  json_object_set_new(w, "resident_units", units_json(s->resident_units));
  json_object_set_new(w, "streamed_units", units_json(s->streamed_units));
  return w;
}

static json_t *host_memory_json(const infer_state *s) {
  json_t *h = json_object();
  json_object_set_new(h, "peak_rss_bytes",
                      s->peak_rss_bytes ? jint(s->peak_rss_bytes)
                                        : json_null());
  json_object_set_new(h, "mapped_bytes", jint(s->setup.mapped_bytes));
  json_object_set_new(h, "registered_bytes", jint(s->setup.registered_bytes));
  json_object_set_new(h, "staging_bytes", jint(s->setup.staging_bytes));
  json_object_set_new(h, "packed_bytes", jint(s->setup.packed_bytes));
  json_object_set_new(h, "pack_streamed", json_boolean(!s->opt->skip_packing));
  json_object_set_new(
      h, "note",
      json_string("peak_rss: getrusage maximum resident set of the process "
                  "after the measured executions; mapped: checkpoint files "
                  "mapped by the executor's create (those no step reads are "
                  "unmapped after setup); registered: host memory "
                  "registered with the backend after create (pinned on "
                  "cuda); packed: page-locked copies of the streamed units, "
                  "one copy each per token (--pack-streamed)"));
  return h;
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

/* Decode tokens/s of each sequence that streaming allows: the
 * host-to-device ceiling over the bytes streamed per decode step (a token
 * of every sequence). */
static double streaming_bound(const infer_state *s) {
  return s->h2d.bytes_per_second / (double)s->streamed_decode_bytes;
}

/* The same for the batch: batch x the steps/s that streaming allows. */
static double aggregate_bound(const infer_state *s) {
  return s->opt->batch * streaming_bound(s);
}

static const char *streaming_note(const infer_state *s) {
  if (s->streamed_decode_bytes == 0) {
    return "every weight is resident: nothing is streamed per token";
  }
  if (!s->h2d.available) {
    return "the host-to-device ceiling is measured on the cuda backend only";
  }
  return "bound = h2d ceiling / streamed bytes per decode step (one token "
         "of each sequence); fraction = median decode tokens/s of a sequence "
         "/ bound; aggregate bound = batch x bound";
}

static json_t *streaming_json(const infer_state *s) {
  bool bound = s->h2d.available && s->streamed_decode_bytes > 0;
  json_t *o = json_object();
  json_object_set_new(o, "streamed_bytes_per_decode_token",
                      jint(s->streamed_decode_bytes));
  json_object_set_new(
      o, "h2d",
      ceiling_json(&s->h2d, "fdy_cuda_measure_h2d from registered (pinned) "
                            "host memory, one copy of the largest streamed "
                            "weight"));
  json_object_set_new(o, "decode_tokens_per_second_bound",
                      bound ? jreal(streaming_bound(s)) : json_null());
  json_object_set_new(o, "fraction_of_bound",
                      bound && s->have_stats
                          ? jreal(s->decode_tps_median / streaming_bound(s))
                          : json_null());
  json_object_set_new(o, "aggregate_decode_tokens_per_second_bound",
                      bound ? jreal(aggregate_bound(s)) : json_null());
  json_object_set_new(o, "note", json_string(streaming_note(s)));
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
    json_object_set_new(o, "aggregate_decode_tokens_per_second",
                        jreal(x->aggregate_tps));
    json_t *steps = s->draft ? json_null() : json_array();
    for (uint32_t k = 0; !s->draft && k < s->steps; k++) {
      json_array_append_new(steps,
                            jreal(s->step_seconds[(size_t)i * s->steps + k]));
    }
    json_object_set_new(o, "decode_step_seconds", steps);
    json_array_append_new(a, o);
  }
  return a;
}

/* The bound of adaptive K: twice the start, within the most a draft
 * proposes. */
static uint32_t max_draft_tokens(const fdy_infer_options *o) {
  uint32_t twice = 2 * o->draft_tokens;
  return o->draft_fixed                       ? o->draft_tokens
         : twice < FDY_LLAMA_MAX_DRAFT_TOKENS ? twice
                                              : FDY_LLAMA_MAX_DRAFT_TOKENS;
}

/* The measured executions' speculative counts, summed. */
static fdy_llama_speculative_stats speculative_sums(const infer_state *s) {
  fdy_llama_speculative_stats sum = {0};
  for (uint32_t i = s->opt->warmup; i < s->done; i++) {
    const fdy_llama_speculative_stats *x = &s->runs[i].speculative;
    sum.target_passes += x->target_passes;
    sum.draft_passes += x->draft_passes;
    sum.proposed += x->proposed;
    sum.accepted += x->accepted;
    sum.target_seconds += x->target_seconds;
    sum.draft_seconds += x->draft_seconds;
  }
  return sum;
}

/* With a draft: K, the acceptance, the ids per target pass and the
 * draft's and the target's seconds per decoded id over the measured
 * executions; null without. */
static json_t *speculative_json(const infer_state *s) {
  const fdy_infer_options *o = s->opt;
  if (!s->draft || !s->have_stats) {
    return json_null();
  }
  fdy_llama_speculative_stats sum = speculative_sums(s);
  double ids = (double)(s->done - o->warmup) * s->steps;
  json_t *x = json_object();
  json_object_set_new(x, "draft_model", bench_json_text(o->draft_dir));
  json_object_set_new(x, "draft_tokens", jint(o->draft_tokens));
  json_object_set_new(x, "max_draft_tokens", jint(max_draft_tokens(o)));
  json_object_set_new(x, "adaptive", json_boolean(!o->draft_fixed));
  json_object_set_new(x, "target_passes", jint(sum.target_passes));
  json_object_set_new(x, "draft_passes", jint(sum.draft_passes));
  json_object_set_new(x, "proposed", jint(sum.proposed));
  json_object_set_new(x, "accepted", jint(sum.accepted));
  json_object_set_new(x, "acceptance_rate",
                      sum.proposed ? jreal((double)sum.accepted / sum.proposed)
                                   : json_null());
  json_object_set_new(x, "ids_per_target_pass",
                      sum.target_passes ? jreal(ids / sum.target_passes)
                                        : json_null());
  json_object_set_new(x, "draft_seconds_per_id",
                      ids > 0 ? jreal(sum.draft_seconds / ids) : json_null());
  json_object_set_new(x, "target_seconds_per_id",
                      ids > 0 ? jreal(sum.target_seconds / ids) : json_null());
  return x;
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
  json_object_set_new(
      st, "prefill_tokens_per_second",
      jreal((double)o->batch * o->prompt_count / s->prefill_median));
  json_object_set_new(st, "time_to_first_token_seconds",
                      jreal(s->prefill_median));
  json_object_set_new(st, "decode_median_seconds", jreal(s->decode_median));
  json_object_set_new(st, "decode_tokens_per_second",
                      jreal(s->decode_tps_median));
  json_object_set_new(st, "aggregate_decode_tokens_per_second",
                      jreal(s->aggregate_tps_median));
  json_t *steps = json_null();
  if (s->steps > 0 && !s->draft) {
    steps = json_object();
    json_object_set_new(steps, "p50", jreal(s->step_p50));
    json_object_set_new(steps, "p99", jreal(s->step_p99));
    json_object_set_new(steps, "mean", jreal(s->step_mean));
    json_object_set_new(steps, "count",
                        jint((uint64_t)o->iterations * s->steps));
  }
  json_object_set_new(st, "decode_step_seconds", steps);
  return st;
}

static json_t *report_json(const infer_state *s, fdy_status status,
                           const fdy_error *err) {
  json_t *e = NULL;
  json_t *r = bench_report_open(FDY_INFER_REPORT_FORMAT,
                                FDY_INFER_REPORT_VERSION, status, err, &e);
  if (!r) {
    return NULL;
  }
  if (e) {
    json_object_set_new(e, "stage", json_string(s->stage));
  }
  json_object_set_new(r, "implementation", json_string("foundry"));
  json_object_set_new(r, "backend", bench_json_text(s->opt->backend_name));
  json_object_set_new(r, "build", bench_build_json());
  json_object_set_new(r, "environment", environment_json(s));
  json_object_set_new(r, "invocation",
                      bench_invocation_json(s->opt->argc, s->opt->argv));
  json_object_set_new(r, "model", model_json(s));
  json_object_set_new(r, "speculative", speculative_json(s));
  json_object_set_new(r, "protocol", protocol_json(s));
  json_object_set_new(r, "setup_seconds",
                      jreal((double)s->setup.setup_ns * 1e-9));
  json_object_set_new(r, "memory", memory_json(s));
  json_object_set_new(r, "graphs", graphs_json(s));
  json_object_set_new(r, "weights", weights_json(s));
  json_object_set_new(r, "host_memory", host_memory_json(s));
  json_object_set_new(r, "bandwidth", bandwidth_json(s));
  json_object_set_new(r, "streaming", streaming_json(s));
  json_object_set_new(r, "executions", executions_json(s));
  json_object_set_new(r, "statistics", statistics_json(s));
  const fdy_infer_options *o = s->opt;
  bool have_ids = s->done > 0;
  json_object_set_new(r, "generated_ids",
                      ids_json(s->first_ids, have_ids ? o->gen_tokens : 0));
  json_t *by_sequence = json_array();
  for (uint32_t k = 0; have_ids && k < o->batch; k++) {
    json_array_append_new(
        by_sequence,
        ids_json(s->first_ids + (size_t)k * o->gen_tokens, o->gen_tokens));
  }
  json_object_set_new(r, "generated_ids_by_sequence", by_sequence);
  json_object_set_new(r, "ids_identical_across_executions",
                      have_ids ? json_boolean(s->same_ids) : json_null());
  json_object_set_new(r, "trace",
                      s->trace.written ? bench_json_text(s->opt->trace_path)
                                       : json_null());
  return r;
}

/* True on the cpu backend, whose "device" memory is host memory: the
 * console does not call it the device's. */
static bool on_host(const fdy_infer_options *o) {
  return o->backend_name && strcmp(o->backend_name, "cpu") == 0;
}

/* The weights under the budget, and host memory. */
static void print_weights(const infer_state *s, FILE *out) {
  const fdy_infer_options *o = s->opt;
  char budget[32], resident[32], streamed[32], slots[32];
  fprintf(out,
          "weights: %s resident, %s streamed per decode token (step) through "
          "%s of slots (budget %s%s, %" PRIu32 " buffers; %" PRIu32
          " prefill rows)\n",
          fdy_format_bytes(s->resident_weight_bytes, resident, sizeof resident),
          fdy_format_bytes(s->streamed_decode_bytes, streamed, sizeof streamed),
          fdy_format_bytes(s->setup.class_bytes[FDY_BUFFER_SLOT], slots,
                           sizeof slots),
          fdy_format_bytes(s->budget, budget, sizeof budget),
          o->weight_budget ? ""
          : on_host(o)     ? ": host memory (cpu backend)"
                           : ": the device's memory",
          o->buffers ? o->buffers : FDY_LLAMA_DEFAULT_BUFFERS, s->prefill_rows);
  char rss[32], mapped[32], registered[32], packed[32];
  fprintf(out,
          "host memory: peak RSS %s, checkpoint mapped %s, registered "
          "with the backend %s, streamed units packed %s%s\n",
          fdy_format_bytes(s->peak_rss_bytes, rss, sizeof rss),
          fdy_format_bytes(s->setup.mapped_bytes, mapped, sizeof mapped),
          fdy_format_bytes(s->setup.registered_bytes, registered,
                           sizeof registered),
          fdy_format_bytes(s->setup.packed_bytes, packed, sizeof packed),
          o->skip_packing ? " (--pack-streamed off)" : "");
}

/* Decode against the bound of the host-to-device ceiling. */
static void print_streaming(const infer_state *s, FILE *out) {
  if (s->streamed_decode_bytes == 0) {
    return;
  }
  if (!s->h2d.available) {
    fprintf(out, "streaming: host-to-device ceiling not measured on this "
                 "backend\n");
    return;
  }
  char per_token[32];
  fprintf(
      out,
      "streaming: host-to-device %.2f GiB/s (pinned, same run) / %s "
      "per token = %.1f tokens/s bound; decode %.1f tokens/s = %.1f%% "
      "of it\n",
      s->h2d.bytes_per_second / GIB,
      fdy_format_bytes(s->streamed_decode_bytes, per_token, sizeof per_token),
      streaming_bound(s), s->decode_tps_median,
      100.0 * s->decode_tps_median / streaming_bound(s));
  if (s->opt->batch > 1) {
    fprintf(out,
            "streaming, batch of %" PRIu32 ": %.1f tokens/s aggregate bound; "
            "decode %.1f tokens/s aggregate\n",
            s->opt->batch, aggregate_bound(s), s->aggregate_tps_median);
  }
}

static void print_summary(const infer_state *s, FILE *out) {
  const fdy_infer_options *o = s->opt;
  const uint64_t *b = s->setup.class_bytes;
  char w[32], kv[32], act[32], rd[32];
  fprintf(out,
          "foundry infer-bench: %s backend%s%s, protocol %s (%" PRIu32
          " prompt ids, %" PRIu32 " generated, EOS ignored) for %" PRIu32
          " sequence%s, %" PRIu32 " measured executions after %" PRIu32
          " warmup\n",
          o->backend_name, s->have_caps ? ", " : "",
          s->have_caps ? s->caps.name : "", protocol_name(o), o->prompt_count,
          o->gen_tokens, o->batch, o->batch == 1 ? "" : "s", o->iterations,
          o->warmup);
  fprintf(out, "setup: %.3f s (session creation, weights uploaded)\n",
          (double)s->setup.setup_ns * 1e-9);
  fprintf(out, "end to end: median %.4f s (95%% CI %.4f .. %.4f)\n",
          s->total.median, s->total_ci.low, s->total_ci.high);
  fprintf(out,
          "prefill: median %.4f s, %.1f tokens/s; time to first token "
          "%.4f s%s\n",
          s->prefill_median,
          (double)o->batch * o->prompt_count / s->prefill_median,
          s->prefill_median, o->batch > 1 ? " (every sequence's)" : "");
  if (o->batch > 1) {
    fprintf(out,
            "decode: median %.1f tokens/s per sequence, %.1f tokens/s "
            "aggregate over %" PRIu32 " sequences\n",
            s->decode_tps_median, s->aggregate_tps_median, o->batch);
  } else {
    fprintf(out, "decode: median %.1f tokens/s\n", s->decode_tps_median);
  }
  if (s->steps > 0 && !s->draft) {
    fprintf(out,
            "decode step of %" PRIu32 " row%s: p50 %.3f ms, p99 %.3f ms, "
            "mean %.3f ms\n",
            o->batch, o->batch == 1 ? "" : "s", s->step_p50 * 1e3,
            s->step_p99 * 1e3, s->step_mean * 1e3);
  }
  if (s->draft) {
    fdy_llama_speculative_stats sum = speculative_sums(s);
    double ids = (double)o->iterations * s->steps;
    fprintf(out,
            "speculative: K %" PRIu32 "%s, %.1f%% of %" PRIu64
            " proposed ids accepted, %.2f ids per target pass; per id: "
            "draft %.3f ms, target %.3f ms\n",
            o->draft_tokens, o->draft_fixed ? " fixed" : " adaptive",
            sum.proposed ? 100.0 * (double)sum.accepted / sum.proposed : 0.0,
            sum.proposed, sum.target_passes ? ids / sum.target_passes : 0.0,
            ids > 0 ? sum.draft_seconds / ids * 1e3 : 0.0,
            ids > 0 ? sum.target_seconds / ids * 1e3 : 0.0);
  }
  fprintf(out, "%s: weights %s, KV cache %s, activations %s\n",
          on_host(s->opt) ? "host memory of the cpu backend" : "device memory",
          fdy_format_bytes(b[FDY_BUFFER_RESIDENT] + b[FDY_BUFFER_SLOT], w,
                           sizeof w),
          fdy_format_bytes(b[FDY_BUFFER_STATE], kv, sizeof kv),
          fdy_format_bytes(b[FDY_BUFFER_ARENA], act, sizeof act));
  print_weights(s, out);
  fprintf(out, "decode bandwidth: %s per token x %.1f tokens/s = %.2f GiB/s",
          fdy_format_bytes(s->decode_weight_bytes, rd, sizeof rd),
          s->decode_tps_median, achieved_bandwidth(s) / GIB);
  if (s->d2d.available) {
    fprintf(out, " (%.1f%% of the %.2f GiB/s device-to-device copy",
            100.0 * achieved_bandwidth(s) / s->d2d.bytes_per_second,
            s->d2d.bytes_per_second / GIB);
    if (s->read.available) {
      fprintf(out, ", read kernel %.2f GiB/s", s->read.bytes_per_second / GIB);
    }
    fprintf(out, ")\n");
  } else {
    fprintf(out, " (device bandwidth not measured on this backend)\n");
  }
  print_streaming(s, out);
  fprintf(out, "generated ids identical across executions: %s\n",
          s->same_ids ? "yes" : "NO");
}

/* The host-to-device ceiling: copies of the largest streamed weight's
 * bytes from page-locked host memory (registered with the backend, as the
 * executor registers the checkpoint's mappings). */
static fdy_status measure_h2d(infer_state *s, fdy_error *err) {
  fdy_backend *b = s->opt->backend;
  bench_ceiling c = {.available = true,
                     .bytes = s->largest_streamed_bytes,
                     .repeats = INFER_CEILING_REPEATS};
  void *host = NULL;
  if (c.bytes > SIZE_MAX || posix_memalign(&host, 4096, (size_t)c.bytes)) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory for the host-to-device ceiling's "
                         "%" PRIu64 " bytes",
                         c.bytes);
  }
  memset(host, 0x5a, (size_t)c.bytes);
  fdy_status st =
      fdy_backend_measure_ceiling(b, FDY_CEILING_H2D_PINNED, host, c.bytes,
                                  c.repeats, &c.bytes_per_second, err);
  free(host);
  if (st != FDY_OK) {
    fdy_error_prefix(err, "measuring the host-to-device ceiling");
    return st;
  }
  s->h2d = c;
  return FDY_OK;
}

static fdy_status measure_ceilings(infer_state *s, fdy_error *err) {
  if (strcmp(s->opt->backend_name, "cuda") != 0) {
    return FDY_OK;
  }
  s->stage = "ceilings";
  bench_ceiling c = {.available = true,
                     .bytes = FDY_INFER_CEILING_BYTES,
                     .repeats = INFER_CEILING_REPEATS};
  fdy_status st =
      fdy_backend_measure_ceiling(s->opt->backend, FDY_CEILING_D2D, NULL,
                                  c.bytes, c.repeats, &c.bytes_per_second, err);
  if (st != FDY_OK) {
    return st;
  }
  s->d2d = c;
  st =
      fdy_backend_measure_ceiling(s->opt->backend, FDY_CEILING_CHECKSUM, NULL,
                                  c.bytes, c.repeats, &c.bytes_per_second, err);
  if (st == FDY_OK) {
    s->read = c;
  }
  if (st == FDY_OK && s->streamed_decode_bytes > 0) {
    st = measure_h2d(s, err);
  }
  return st;
}

/* The context check of fdy_llama_generate, before any work: each sequence
 * uses prompt_count + gen_tokens - 1 positions (the last id is not fed). */
static fdy_status check_context(const infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  uint64_t needed = (uint64_t)o->prompt_count + o->gen_tokens - 1;
  if (needed <= s->context) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_CONTEXT,
                "a prompt of %" PRIu32 " ids and %" PRIu32
                " new ids need %" PRIu64 " positions (every id but the last "
                "is fed back), but the context holds %" PRIu32,
                o->prompt_count, o->gen_tokens, needed, s->context);
  if (err) {
    err->expected = s->context;
    err->actual = needed;
  }
  return FDY_ERR_CONTEXT;
}

/* Decode step t (1 to gen_tokens - 1) of every sequence: row k feeds
 * sequence k's id t - 1 of ids (batch x gen_tokens, sequence k's at k x
 * gen_tokens) and stores the step's id as its id t. *begin and *end: the
 * host clock around fdy_llama_session_decode (which ends with a host
 * wait). */
static fdy_status decode_step(infer_state *s, int32_t *ids, uint32_t t,
                              int64_t *begin, int64_t *end, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  infer_batch *b = &s->batch;
  for (uint32_t k = 0; k < o->batch; k++) {
    b->feed[k] = ids[(size_t)k * o->gen_tokens + t - 1];
  }
  *begin = fdy_now_ns();
  fdy_status st = fdy_llama_session_decode(s->session, b->slots, b->feed,
                                           o->batch, b->next, NULL, err);
  *end = fdy_now_ns();
  for (uint32_t k = 0; st == FDY_OK && k < o->batch; k++) {
    ids[(size_t)k * o->gen_tokens + t] = b->next[k];
  }
  return st;
}

/* Execution i with the draft: fdy_llama_generate_speculative of the prompt
 * (EOS ignored) into s->batch.ids; the prefill is both prompts', the
 * decode everything after; no per-step times. */
static fdy_status execute_speculative(infer_state *s, uint32_t i,
                                      fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  fdy_llama_generate_options go = {.max_tokens = o->gen_tokens,
                                   .ignore_eos = true};
  fdy_llama_speculative_options spec = {.draft_tokens = o->draft_tokens,
                                        .max_draft_tokens = max_draft_tokens(o),
                                        .fixed = o->draft_fixed};
  fdy_llama_generation g;
  fdy_llama_speculative_stats stats;
  int64_t t0 = fdy_now_ns();
  fdy_status st = fdy_llama_generate_speculative(s->session, s->draft,
                                                 o->prompt, o->prompt_count,
                                                 &go, &spec, &g, &stats, err);
  int64_t t1 = fdy_now_ns();
  if (st != FDY_OK) {
    return st;
  }
  memcpy(s->batch.ids, g.ids, sizeof *g.ids * g.count);
  double tps =
      s->steps > 0 && g.decode_seconds > 0 ? s->steps / g.decode_seconds : 0.0;
  s->runs[i] = (infer_execution){.total = (double)(t1 - t0) * 1e-9,
                                 .prefill = g.prefill_seconds,
                                 .decode = g.decode_seconds,
                                 .decode_tps = tps,
                                 .aggregate_tps = tps,
                                 .speculative = stats};
  fdy_llama_generation_free(&g);
  return FDY_OK;
}

/* Execution i into s->batch.ids: session reset, each sequence's prompt
 * appended to its slot (one append each), then the decode steps, each
 * timed into s->step_seconds. */
static fdy_status execute(infer_state *s, uint32_t i, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  if (s->draft) {
    return execute_speculative(s, i, err);
  }
  int32_t *ids = s->batch.ids;
  double *steps = s->step_seconds + (size_t)i * s->steps;
  int64_t t0 = fdy_now_ns();
  fdy_llama_session_reset(s->session);
  int64_t t1 = fdy_now_ns();
  fdy_status st = FDY_OK;
  for (uint32_t k = 0; st == FDY_OK && k < o->batch; k++) {
    st = fdy_llama_session_append(s->session, k,
                                  o->prompt + (size_t)k * o->prompt_count,
                                  o->prompt_count, NULL, NULL, err);
    ids[(size_t)k * o->gen_tokens] = fdy_llama_session_slot_next(s->session, k);
  }
  int64_t t2 = fdy_now_ns();
  for (uint32_t t = 1; st == FDY_OK && t < o->gen_tokens; t++) {
    int64_t begin, end;
    st = decode_step(s, ids, t, &begin, &end, err);
    steps[t - 1] = (double)(end - begin) * 1e-9;
  }
  int64_t t3 = fdy_now_ns();
  if (st != FDY_OK) {
    return st;
  }
  double decode = (double)(t3 - t2) * 1e-9;
  double tps = s->steps > 0 && decode > 0 ? s->steps / decode : 0.0;
  s->runs[i] = (infer_execution){.total = (double)(t3 - t0) * 1e-9,
                                 .prefill = (double)(t2 - t1) * 1e-9,
                                 .decode = decode,
                                 .decode_tps = tps,
                                 .aggregate_tps = o->batch * tps};
  return FDY_OK;
}

static fdy_status run_executions(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  uint32_t total = o->warmup + o->iterations;
  size_t id_bytes = sizeof *s->batch.ids * o->batch * (size_t)o->gen_tokens;
  s->stage = "executions";
  s->same_ids = true;
  fdy_status st = check_context(s, err);
  for (uint32_t i = 0; st == FDY_OK && i < total; i++) {
    st = execute(s, i, err);
    if (st != FDY_OK) {
      break;
    }
    s->done = i + 1;
    if (i == 0) {
      memcpy(s->first_ids, s->batch.ids, id_bytes);
    } else if (memcmp(s->batch.ids, s->first_ids, id_bytes) != 0) {
      s->same_ids = false;
    }
    bench_progress(o->progress, "infer-bench",
                   "%s %" PRIu32 "/%" PRIu32 ": %.4f s",
                   i < o->warmup ? "warmup" : "execution",
                   i < o->warmup ? i + 1 : i + 1 - o->warmup,
                   i < o->warmup ? o->warmup : o->iterations, s->runs[i].total);
  }
  return st;
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

/* The decode steps of the measured executions: mean (in execution order),
 * p50 and p99 (fdy_bench_percentile_sorted). */
static fdy_status step_statistics(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  size_t n = (size_t)o->iterations * s->steps;
  double *v = malloc(sizeof *v * n);
  if (!v) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  memcpy(v, s->step_seconds + (size_t)o->warmup * s->steps, sizeof *v * n);
  s->step_mean = fdy_bench_mean(v, n);
  bench_sort(v, n);
  s->step_p50 = fdy_bench_percentile_sorted(v, n, 0.50);
  s->step_p99 = fdy_bench_percentile_sorted(v, n, 0.99);
  free(v);
  return FDY_OK;
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
  if (st == FDY_OK) {
    st = measured_median(s, x, offsetof(infer_execution, aggregate_tps),
                         &s->aggregate_tps_median, err);
  }
  if (st == FDY_OK && s->steps > 0 && !s->draft) {
    st = step_statistics(s, err);
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
  s->after = fdy_llama_session_stats(s->session);
  return st;
}

/* The distinct weights that the plan's section prefetches, in order of
 * their first copy: their names (a new array) and their bytes (bytes may be
 * NULL). */
static json_t *prefetched_units(const fdy_plan *plan, const char *section,
                                uint64_t *bytes) {
  uint64_t sum = 0;
  int64_t index = fdy_plan_find_section(plan, section);
  json_t *names = json_array();
  if (index < 0 || !names) {
    return names;
  }
  const fdy_section *sec = fdy_plan_section(plan, (size_t)index);
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    fdy_tensor_info t;
    if (c->kind != FDY_CMD_PREFETCH ||
        fdy_graph_tensor(fdy_plan_graph(plan), c->u.prefetch.weight, &t,
                         NULL) != FDY_OK) {
      continue;
    }
    bool seen = false;
    for (size_t k = 0; k < json_array_size(names) && !seen; k++) {
      seen = strcmp(json_string_value(json_array_get(names, k)), t.name) == 0;
    }
    if (!seen) {
      json_array_append_new(names, bench_json_text(t.name));
      sum += t.bytes;
    }
  }
  if (bytes) {
    *bytes = sum;
  }
  return names;
}

/* What the plan of the session keeps resident and streams. */
static fdy_status describe_plan(infer_state *s, fdy_error *err) {
  const fdy_plan *plan = fdy_llama_session_plan(s->session);
  s->context = fdy_llama_session_context(s->session);
  s->prefill_rows = fdy_llama_session_prefill_rows(s->session);
  s->budget = fdy_plan_budget(plan);
  s->setup = fdy_llama_session_stats(s->session);
  uint64_t largest_prefill = 0;
  fdy_status st =
      fdy_infer_decode_weight_bytes(plan, &s->decode_weight_bytes, err);
  if (st == FDY_OK) {
    st = fdy_infer_copied_weight_bytes(plan, "setup", &s->resident_weight_bytes,
                                       NULL, err);
  }
  if (st == FDY_OK) {
    st =
        fdy_infer_copied_weight_bytes(plan, "decode", &s->streamed_decode_bytes,
                                      &s->largest_streamed_bytes, err);
  }
  if (st == FDY_OK) {
    st = fdy_infer_copied_weight_bytes(
        plan, "prefill", &s->streamed_prefill_bytes, &largest_prefill, err);
  }
  if (largest_prefill > s->largest_streamed_bytes) {
    s->largest_streamed_bytes = largest_prefill;
  }
  s->resident_units = prefetched_units(plan, "setup", NULL);
  s->streamed_units = prefetched_units(plan, "decode", &s->streamed_bytes);
  return st;
}

static fdy_llama_session_options
session_options(const infer_state *s, uint64_t context, bool timings) {
  const fdy_infer_options *o = s->opt;
  /* --prefill-rows above the context runs as the context (rows beyond it
   * could never run, and would size the activations) */
  const uint32_t rows =
      o->prefill_rows < context ? o->prefill_rows : (uint32_t)context;
  return (fdy_llama_session_options){
      .backend = o->backend,
      .context = (uint32_t)context,
      .max_sequences = o->batch,
      .step_rows = o->draft_model ? max_draft_tokens(o) + 1 : o->batch,
      .prefill_rows = rows,
      .kv_dtype = o->kv_dtype,
      .weight_budget = o->weight_budget,
      .buffers = o->buffers,
      .no_graphs = o->no_graphs,
      .skip_packing = o->skip_packing,
      .ids_only = true,
      .collect_timings = timings};
}

/* Appends the timings of the session's latest run as run `tokens`. */
static fdy_status record_run(infer_state *s, uint32_t tokens, int64_t begin,
                             int64_t end, fdy_error *err) {
  infer_trace *t = &s->trace;
  size_t count = 0;
  const fdy_command_timing *timings =
      fdy_llama_session_timings(s->session, &count);
  if (t->timing_count + count > t->timing_cap) {
    size_t cap = 2 * (t->timing_count + count);
    fdy_command_timing *grown = realloc(t->timings, sizeof *grown * cap);
    if (!grown) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    t->timings = grown;
    t->timing_cap = cap;
  }
  if (count) {
    memcpy(t->timings + t->timing_count, timings, sizeof *timings * count);
  }
  t->runs[t->run_count++] = (trace_run){.tokens = tokens,
                                        .begin_ns = begin,
                                        .end_ns = end,
                                        .first = t->timing_count,
                                        .count = count};
  t->timing_count += count;
  return FDY_OK;
}

/* The traced execution: the measured session is replaced (device memory
 * for one) by one that collects timings, which runs what an execution runs
 * (each sequence's prompt in prefill runs of up to prefill_rows ids, then
 * gen_tokens - 1 decode steps of batch rows feeding back the device
 * argmax) one executor run at a time, so that every run's timings are
 * kept. */
static fdy_status run_trace(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  infer_trace *t = &s->trace;
  s->stage = "trace";
  fdy_llama_session_destroy(s->session);
  s->session = NULL;
  fdy_llama_session_options so = session_options(s, s->context, true);
  fdy_status st = fdy_llama_session_create(o->model, &so, &s->session, err);
  if (st != FDY_OK) {
    return st;
  }
  uint32_t rows = fdy_llama_session_prefill_rows(s->session);
  size_t chunks = (o->prompt_count + (size_t)rows - 1) / rows;
  size_t runs = o->batch * chunks + s->steps;
  t->runs = calloc(runs, sizeof *t->runs);
  t->ids = calloc((size_t)o->batch * o->gen_tokens, sizeof *t->ids);
  if (!t->runs || !t->ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t k = 0; st == FDY_OK && k < o->batch; k++) {
    const int32_t *prompt = o->prompt + (size_t)k * o->prompt_count;
    for (uint32_t done = 0; st == FDY_OK && done < o->prompt_count;) {
      uint32_t n =
          o->prompt_count - done < rows ? o->prompt_count - done : rows;
      int64_t begin = fdy_now_ns();
      st = fdy_llama_session_append(s->session, k, prompt + done, n, NULL, NULL,
                                    err);
      int64_t end = fdy_now_ns();
      st = st == FDY_OK ? record_run(s, n, begin, end, err) : st;
      done += n;
    }
    t->ids[(size_t)k * o->gen_tokens] =
        fdy_llama_session_slot_next(s->session, k);
  }
  for (uint32_t step = 1; st == FDY_OK && step < o->gen_tokens; step++) {
    int64_t begin, end;
    st = decode_step(s, t->ids, step, &begin, &end, err);
    st = st == FDY_OK ? record_run(s, o->batch, begin, end, err) : st;
  }
  t->same_ids = st == FDY_OK &&
                memcmp(t->ids, s->first_ids,
                       sizeof *t->ids * o->batch * (size_t)o->gen_tokens) == 0;
  return st;
}

/* ---- the trace ---------------------------------------------------------- */

/* Rows of the trace: the host, then one per plan stream. */
enum { TRACE_TID_HOST = 1, TRACE_TID_STREAM0 = 2 };

/* The name of the section that holds command `index`. */
static const char *section_of(const fdy_plan *plan, uint32_t index) {
  for (size_t k = 0; k < fdy_plan_section_count(plan); k++) {
    const fdy_section *sec = fdy_plan_section(plan, k);
    if (index >= sec->first && index < sec->first + sec->count) {
      return sec->name;
    }
  }
  return "?";
}

/* "rmsnorm decode.layer.0.attn_norm", "prefetch layer.3", "copy_input
 * decode.step", "wait host (event 41)", "wait stream 0 (event 7)". */
static void command_name(const fdy_plan *plan, const fdy_command *c, char *buf,
                         size_t cap) {
  const fdy_graph *g = fdy_plan_graph(plan);
  const char *kind = fdy_command_kind_name(c->kind);
  fdy_op_info op;
  fdy_tensor_info t;
  switch (c->kind) {
  case FDY_CMD_LAUNCH:
    if (fdy_graph_op(g, c->u.launch.op, &op, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", fdy_op_kind_name(op.kind), op.name);
      return;
    }
    break;
  case FDY_CMD_PREFETCH:
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    if (fdy_graph_tensor(g,
                         c->kind == FDY_CMD_PREFETCH ? c->u.prefetch.weight
                                                     : c->u.copy.tensor,
                         &t, NULL) == FDY_OK) {
      snprintf(buf, cap, "%s %s", kind, t.name);
      return;
    }
    break;
  case FDY_CMD_WAIT:
    if (c->u.wait.host) {
      snprintf(buf, cap, "wait host (event %" PRIu32 ")", c->u.wait.event.v);
    } else {
      snprintf(buf, cap, "wait stream %" PRIu32 " (event %" PRIu32 ")",
               c->u.wait.stream.v, c->u.wait.event.v);
    }
    return;
  default:
    break;
  }
  snprintf(buf, cap, "%s", kind);
}

static const char *command_category(fdy_command_kind kind) {
  return kind == FDY_CMD_LAUNCH ? "launch"
         : kind == FDY_CMD_WAIT ? "wait"
                                : "copy";
}

/* "stream 1: weight prefetches, stream waits": what the steps put on it. */
static void stream_row_name(const fdy_plan *plan, uint32_t stream, char *buf,
                            size_t cap) {
  bool seen[FDY_CMD_KIND_COUNT] = {false};
  size_t sections = fdy_plan_section_count(plan);
  for (size_t k = 1; k + 1 < sections; k++) {
    const fdy_section *sec = fdy_plan_section(plan, k);
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      const fdy_command *c = fdy_plan_command(plan, i);
      if (fdy_command_stream(c) == (int32_t)stream) {
        seen[c->kind] = true;
      }
    }
  }
  static const struct {
    fdy_command_kind kind;
    const char *what;
  } parts[] = {{FDY_CMD_LAUNCH, "op launches"},
               {FDY_CMD_PREFETCH, "weight prefetches"},
               {FDY_CMD_COPY_INPUT, "input copies"},
               {FDY_CMD_COPY_OUTPUT, "output copies"},
               {FDY_CMD_WAIT, "stream waits"}};
  int used = snprintf(buf, cap, "stream %" PRIu32 ":", stream);
  const char *sep = " ";
  bool any = false;
  for (size_t k = 0; k < FDY_CMD_KIND_COUNT; k++) {
    any = any || seen[k];
  }
  if (!any) {
    snprintf(buf, cap, "stream %" PRIu32 ": idle in the steps", stream);
    return;
  }
  for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
    if (seen[parts[p].kind] && used >= 0 && (size_t)used < cap) {
      used +=
          snprintf(buf + used, cap - (size_t)used, "%s%s", sep, parts[p].what);
      sep = ", ";
    }
  }
}

static json_t *trace_args(size_t run, const char *step) {
  json_t *args = json_object();
  json_object_set_new(args, "run", jint(run));
  json_object_set_new(args, "step", json_string(step));
  return args;
}

/* The Chrome Trace Event document of the traced execution: on the host
 * row each run (a forward) and the host waits, on the row of its plan
 * stream every other command, at device times where the backend gave
 * them. */
static json_t *trace_json(const infer_state *s) {
  const infer_trace *t = &s->trace;
  const fdy_plan *plan = fdy_llama_session_plan(s->session);
  json_t *events = json_array();
  if (!events) {
    return NULL;
  }
  char text[256];
  snprintf(text, sizeof text, "foundry infer-bench (%s backend: %s)",
           s->opt->backend_name, s->have_caps ? s->caps.name : "?");
  json_array_append_new(events, bench_trace_metadata("process_name", 0, text));
  json_array_append_new(events,
                        bench_trace_metadata("thread_name", TRACE_TID_HOST,
                                             "host: runs and host waits"));
  json_array_append_new(events, bench_trace_sort_index(TRACE_TID_HOST));
  for (uint32_t k = 0; k < fdy_plan_stream_count(plan); k++) {
    stream_row_name(plan, k, text, sizeof text);
    json_array_append_new(
        events,
        bench_trace_metadata("thread_name", TRACE_TID_STREAM0 + (int)k, text));
    json_array_append_new(events,
                          bench_trace_sort_index(TRACE_TID_STREAM0 + (int)k));
  }
  int64_t origin = t->run_count ? t->runs[0].begin_ns : 0;
  uint64_t device_timed = 0, host_timed = 0;
  for (size_t r = 0; r < t->run_count; r++) {
    const trace_run *run = &t->runs[r];
    const char *step =
        run->count ? section_of(plan, t->timings[run->first].command_index)
                   : "?";
    snprintf(text, sizeof text, "%s run %zu: %" PRIu32 " ids", step, r,
             run->tokens);
    json_t *args = trace_args(r, step);
    json_object_set_new(args, "tokens", jint(run->tokens));
    json_array_append_new(events, bench_trace_span(text, "run", TRACE_TID_HOST,
                                                   run->begin_ns, run->end_ns,
                                                   origin, args));
    for (size_t i = run->first; i < run->first + run->count; i++) {
      const fdy_command_timing *tm = &t->timings[i];
      const fdy_command *c = fdy_plan_command(plan, tm->command_index);
      if (!c) {
        continue;
      }
      command_name(plan, c, text, sizeof text);
      bool device =
          tm->device_start_ns >= 0 && tm->device_end_ns >= tm->device_start_ns;
      device_timed += device;
      host_timed += !device;
      args = trace_args(r, step);
      json_object_set_new(args, "command", jint(tm->command_index));
      json_object_set_new(args, "stream", json_integer(tm->stream));
      json_object_set_new(args, "clock",
                          json_string(device ? "device" : "host"));
      json_array_append_new(
          events,
          bench_trace_span(
              text, command_category(c->kind),
              tm->stream >= 0 ? TRACE_TID_STREAM0 + tm->stream : TRACE_TID_HOST,
              device ? tm->device_start_ns : tm->host_begin_ns,
              device ? tm->device_end_ns : tm->host_end_ns, origin, args));
    }
  }
  json_t *other = NULL;
  json_t *doc = bench_trace_doc(events, FDY_INFER_REPORT_FORMAT,
                                s->opt->report_path, &other);
  if (!doc) {
    return NULL;
  }
  json_object_set_new(
      other, "execution",
      json_string("one unmeasured execution after the measured ones, on a "
                  "session created with collect_timings: each sequence's "
                  "prefill runs, then the decode steps of batch rows, one "
                  "executor run at a time"));
  json_object_set_new(
      other, "timestamps",
      json_string("microseconds since the first run began (fdy_now_ns); "
                  "copies and launches at the device times of the "
                  "backend's events where it gives them (args.clock "
                  "\"device\"), waits and any command without them at "
                  "their host issue times (args.clock \"host\")"));
  json_object_set_new(other, "device_timed_events", jint(device_timed));
  json_object_set_new(other, "host_timed_events", jint(host_timed));
  json_object_set_new(other, "runs", jint(t->run_count));
  json_object_set_new(other, "batch", jint(s->opt->batch));
  json_object_set_new(other, "prefill_rows",
                      jint(fdy_llama_session_prefill_rows(s->session)));
  json_object_set_new(other, "ids_identical_to_measured",
                      json_boolean(t->same_ids));
  return doc;
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
  fdy_llama_session_options so = session_options(s, context, false);
  st = fdy_llama_session_create(o->model, &so, &s->session, err);
  if (st != FDY_OK) {
    return st;
  }
  if (o->draft_model) {
    /* resident on the same backend, one sequence */
    fdy_llama_session_options ds = so;
    ds.weight_budget = 0;
    ds.buffers = 0;
    ds.step_rows = 0;
    st = fdy_llama_session_create(o->draft_model, &ds, &s->draft, err);
    if (st != FDY_OK) {
      fdy_error_prefix(err, "the draft (--draft-model)");
      return st;
    }
  }
  st = describe_plan(s, err);
  if (st == FDY_OK && strcmp(o->backend_name, "cuda") == 0) {
    st = bench_memory_in_use(o->backend, &s->in_use_bytes, err);
    s->have_in_use = st == FDY_OK;
  }
  if (st == FDY_OK) {
    st = measure_ceilings(s, err);
  }
  if (st == FDY_OK) {
    st = run_executions(s, err);
  }
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    s->peak_rss_bytes = (uint64_t)usage.ru_maxrss * 1024; /* KiB on Linux */
  }
  if (st == FDY_OK) {
    st = statistics(s, err);
  }
  if (st == FDY_OK && o->trace_path) {
    st = run_trace(s, err);
  }
  return st;
}

/* The executions' times and steps, the decode rows' buffers and the first
 * execution's ids; free_buffers releases what was allocated. */
static fdy_status alloc_buffers(infer_state *s, fdy_error *err) {
  const fdy_infer_options *o = s->opt;
  size_t executions = (size_t)o->warmup + o->iterations;
  size_t steps, ids;
  if (__builtin_mul_overflow(executions, (size_t)s->steps, &steps) ||
      __builtin_mul_overflow((size_t)o->batch, (size_t)o->gen_tokens, &ids)) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory: the executions' decode steps or "
                         "ids overflow the address space");
  }
  infer_batch *b = &s->batch;
  s->runs = calloc(executions, sizeof *s->runs);
  s->step_seconds = calloc(steps ? steps : 1, sizeof *s->step_seconds);
  b->slots = calloc(o->batch, sizeof *b->slots);
  b->feed = calloc(o->batch, sizeof *b->feed);
  b->next = calloc(o->batch, sizeof *b->next);
  b->ids = calloc(ids, sizeof *b->ids);
  s->first_ids = calloc(ids, sizeof *s->first_ids);
  if (!s->runs || !s->step_seconds || !b->slots || !b->feed || !b->next ||
      !b->ids || !s->first_ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t k = 0; k < o->batch; k++) {
    b->slots[k] = k;
  }
  return FDY_OK;
}

static void free_buffers(infer_state *s) {
  free(s->runs);
  free(s->step_seconds);
  free(s->batch.slots);
  free(s->batch.feed);
  free(s->batch.next);
  free(s->batch.ids);
  free(s->first_ids);
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
  infer_state s = {.opt = options,
                   .started_unix = (int64_t)time(NULL),
                   .stage = "setup",
                   .steps = options->gen_tokens - 1};
  st = alloc_buffers(&s, err);
  if (st != FDY_OK) {
    free_buffers(&s);
    return st;
  }
  st = run(&s, err);
  if (st == FDY_OK && options->trace_path) {
    s.stage = "trace";
    st = bench_write_json(options->trace_path, trace_json(&s), err);
    s.trace.written = st == FDY_OK;
  }
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
  fdy_llama_session_destroy(s.draft);
  json_decref(s.resident_units);
  json_decref(s.streamed_units);
  free(s.trace.runs);
  free(s.trace.timings);
  free(s.trace.ids);
  free_buffers(&s);
  return st;
}
