/* What the source files of `foundry infer-bench` share: the state of one
 * run, which infer.c fills (options, session, measurements, executions,
 * statistics, the traced execution) and infer_report.c (the report and the
 * console summary) and infer_trace.c (the Chrome trace) read. Not a public
 * header: only src/bench includes it. */
#ifndef FOUNDRY_INFER_INTERNAL_H
#define FOUNDRY_INFER_INTERNAL_H

#include <stdio.h>

#include "bench_internal.h"
#include "foundry/infer_bench.h"
#include "foundry/speculative.h"

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

/* The most ids a draft proposes in a round: --draft-tokens with
 * --draft-fixed, else (adaptive K) twice it, within
 * FDY_LLAMA_MAX_DRAFT_TOKENS. */
uint32_t infer_max_draft_tokens(const fdy_infer_options *o);

/* The report of a finished or failed run (status = the run's status, err
 * its error when failed). A new reference, NULL when out of memory. */
json_t *infer_report_json(const infer_state *s, fdy_status status,
                          const fdy_error *err);
/* Prints the console summary of a successful run. */
void infer_print_summary(const infer_state *s, FILE *out);

/* The Chrome Trace Event document of the traced execution (s->trace, on
 * the plan of s->session). A new reference, NULL when out of memory. */
json_t *infer_trace_json(const infer_state *s);

#endif
