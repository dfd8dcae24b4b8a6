/* `foundry infer-bench` (foundry/infer_bench.h): the protocol's prompt, the
 * weight bytes of a decode step and the bytes its plan streams, the options
 * check, the ceilings, the executions on one session of `batch` sequences
 * (prefills, then decode steps of one row per sequence, each step timed),
 * their statistics, the traced execution, and the run, which writes the
 * trace (infer_trace.c), the console summary and the report
 * (infer_report.c). */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "foundry/op_table.h"
#include "infer_internal.h"

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

uint32_t infer_max_draft_tokens(const fdy_infer_options *o) {
  uint32_t twice = 2 * o->draft_tokens;
  return o->draft_fixed                       ? o->draft_tokens
         : twice < FDY_LLAMA_MAX_DRAFT_TOKENS ? twice
                                              : FDY_LLAMA_MAX_DRAFT_TOKENS;
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
                                        .max_draft_tokens =
                                            infer_max_draft_tokens(o),
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
      .step_rows = o->draft_model ? infer_max_draft_tokens(o) + 1 : o->batch,
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
    st = bench_write_json(options->trace_path, infer_trace_json(&s), err);
    s.trace.written = st == FDY_OK;
  }
  if (st == FDY_OK && options->console) {
    infer_print_summary(&s, options->console);
  }
  fdy_error werr;
  fdy_status wst = bench_write_json(options->report_path,
                                    infer_report_json(&s, st, err), &werr);
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
