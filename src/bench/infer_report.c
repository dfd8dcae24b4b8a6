/* The report of `foundry infer-bench` (format FDY_INFER_REPORT_FORMAT,
 * docs/infer-bench.md: protocol, environment, model, memory, graphs,
 * weights, host memory, bandwidth, streaming, executions, speculative
 * decoding, statistics, generated ids) and its console summary, both read
 * from the state of a run (infer.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/registry.h"
#include "infer_internal.h"

/* Rates print in GiB/s, sizes in binary units (fdy_format_bytes), as
 * everywhere in the CLI; the report has bytes per second. */
#define GIB 1073741824.0

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
  json_object_set_new(x, "max_draft_tokens", jint(infer_max_draft_tokens(o)));
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

json_t *infer_report_json(const infer_state *s, fdy_status status,
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

void infer_print_summary(const infer_state *s, FILE *out) {
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
