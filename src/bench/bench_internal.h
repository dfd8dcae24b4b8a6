/* Internals of `foundry bench` shared by its source files: the state of one
 * run (setup, executors, executions, statistics), the report and trace
 * writers, the never-overwrite JSON writer and the test hooks. Not a public
 * header: only src/bench and tests/bench include it. */
#ifndef FOUNDRY_BENCH_INTERNAL_H
#define FOUNDRY_BENCH_INTERNAL_H

#include <jansson.h>
#include <math.h>

#include "foundry/backend.h"
#include "foundry/bench.h"
#include "foundry/plan.h"
#include "foundry/runtime.h"

/* Repeats of each ceiling measurement (after one discarded warm copy). */
#define BENCH_CEILING_REPEATS 10u
/* All executions are traced when their commands (rounds x the step
 * commands of every configuration's plan) add up to at most this many
 * timing records; beyond, only the last measured execution of each
 * configuration is kept. */
#define BENCH_TRACE_ALL_LIMIT 200000u
/* Staging ring the bench asks of the CUDA backend in staged mode. */
#define BENCH_STAGING_BYTES   (16u * FDY_MIB)
#define BENCH_STAGING_BUFFERS 4u
/* Alignment assumed by fdy_bench_check_options for the slot-size overflow
 * check (no backend is known yet; real backends align far less). */
#define BENCH_CHECK_ALIGNMENT ((uint64_t)1 << 16)

/* Test-only controls of one run (tests/bench); fdy_bench_run passes none. */
typedef struct bench_hooks {
  bool corrupt;              /* in: flip a bit of one execution's result */
  uint64_t corrupt_sequence; /* in: the execution whose result is flipped */
  /* in: wrap the real backend (tests: in the fault backend) so that every
   * backend call of the run goes through *out; the ceilings and memory
   * readings keep using the real one. unwrap is called right before the
   * wrapper is destroyed (tests read its counters). ctx is the tests'. */
  fdy_status (*wrap)(struct bench_hooks *h, fdy_backend *inner,
                     fdy_backend **out, fdy_error *err);
  void (*unwrap)(struct bench_hooks *h, fdy_backend *wrapper);
  void *ctx;
  /* in: a file created (empty) right before the outputs are written, as if
   * another process had raced the run to that path */
  const char *create_before_outputs;
  bool payload_generated; /* out: the payload was allocated and filled */
} bench_hooks;

/* A device-memory reading not taken (bench_state.memory_in_use_*). */
#define BENCH_NOT_MEASURED UINT64_MAX

/* One execution of one configuration. */
typedef struct bench_execution {
  uint64_t sequence;
  bool measured;               /* false: warmup */
  uint32_t round;              /* over all rounds, warmup first */
  uint32_t position;           /* index within the round */
  uint32_t config;             /* index in the buffers list */
  int64_t begin_ns;            /* fdy_now_ns() right before fdy_executor_run */
  int64_t end_ns;              /* fdy_now_ns() right after it returned */
  fdy_status outcome;          /* the executor's status */
  int checksum;                /* BENCH_CHECKSUM_* */
  uint64_t peak_slot_bytes;    /* the plan's peak_weight_bytes, 0 if failed */
  int64_t copy_ns;             /* sum of prefetch device spans, or -1 */
  int64_t compute_ns;          /* sum of launch device spans, or -1 */
  size_t timing_count;         /* timings kept for the trace, or 0 */
  fdy_command_timing *timings; /* a copy of fdy_executor_timings */
} bench_execution;

enum {
  BENCH_CHECKSUM_NOT_CHECKED = 0,
  BENCH_CHECKSUM_OK,
  BENCH_CHECKSUM_MISMATCH,
};

/* Statistics of one configuration (milliseconds). */
typedef struct bench_config_stats {
  fdy_bench_stats time;                  /* elapsed ms */
  fdy_bench_interval median_ci, mean_ci; /* ms */
  double throughput_gib_s;               /* payload / median */
  double fraction_of_h2d;                /* throughput / H2D ceiling */
  double speedup;                        /* median(first) / median(this) */
  fdy_bench_interval speedup_ci;
} bench_config_stats;

/* Copy/compute overlap derived from the first configuration's device
 * timings (medians over its measured executions). */
typedef struct bench_overlap {
  bool available;
  double copy_ms, compute_ms;
  double ideal_speedup;    /* (T + C) / max(T, C) */
  double measured_speedup; /* speedup of the last configuration */
  double fraction_of_ideal;
} bench_overlap;

/* A measured ceiling (bytes per second), or unavailable. */
typedef struct bench_ceiling {
  bool available;
  uint64_t bytes; /* bytes per copy or kernel */
  uint32_t repeats;
  double bytes_per_second;
} bench_ceiling;

/* One configuration: its plan and, once created, its executor. */
typedef struct bench_config {
  uint64_t budget_bytes; /* weight budget: buffers x slot bytes */
  fdy_plan *plan;
  fdy_plan_summary summary;
  size_t step_commands;   /* commands of the step FDY_BENCH_STEP */
  fdy_executor *executor; /* NULL until created and after teardown */
  size_t step;            /* section index of FDY_BENCH_STEP */
  bool created;           /* the executor was created (setup is valid) */
  fdy_executor_stats setup;
} bench_config;

typedef struct bench_state {
  const fdy_bench_options *opt;
  /* resolved (CPU or CUDA) first thing after fdy_bench_check_options, so
   * whenever a report is written */
  fdy_bench_backend backend_kind;
  fdy_backend *device;  /* the real backend, NULL until created */
  fdy_backend *backend; /* what the run uses: device, or the fault wrapper */
  bool have_caps;
  fdy_device_caps caps;
  /* from the options (fdy_bench_check_options proved they fit) */
  uint64_t weight_bytes, payload_bytes;
  uint64_t alignment;        /* planner alignment: device, >= 256 */
  uint64_t slot_bytes;       /* weight, aligned */
  uint64_t max_budget_bytes; /* the largest configuration's slots */
  uint64_t total_slot_bytes; /* every configuration's slots (all live) */
  bench_config configs[FDY_BENCH_MAX_CONFIGS];
  unsigned char *payload;         /* layers x weight_bytes, page aligned */
  uint64_t expected;              /* the chain's result, from the host */
  fdy_graph *graph;               /* bound to the payload */
  fdy_tensor_id output;           /* the chain's result tensor */
  fdy_backend_host *registration; /* the registered payload, or NULL */
  bench_ceiling h2d, d2d, kernel;
  /* cuda: device memory in use (bench_memory_in_use); each reading is
   * BENCH_NOT_MEASURED until taken (a run that failed before it) */
  bool have_memory_in_use;
  uint64_t memory_in_use_backend;   /* after backend creation */
  uint64_t memory_in_use_setup;     /* after setup (payload, ceilings) */
  uint64_t memory_in_use_executors; /* with every executor created */
  uint64_t memory_in_use_rounds;    /* after the rounds and teardown */
  bool trace_all;
  /* executions started; a failed one (executor failure or checksum
   * mismatch) is the last, as the run stops there */
  size_t execution_count;
  bench_execution *executions;
  bool have_stats;
  bench_config_stats stats[FDY_BENCH_MAX_CONFIGS];
  bench_overlap overlap;
  bool trace_written;   /* the trace is in place (write_outputs) */
  bool report_written;  /* the report is in place (write_outputs) */
  const char *stage;    /* what the run was doing when it stopped */
  int64_t started_unix; /* time(NULL) at the start */
} bench_state;

/* fdy_bench_run with test hooks (NULL: none). */
fdy_status bench_run_hooked(const fdy_bench_options *options,
                            bench_hooks *hooks, fdy_bench_written *written,
                            fdy_error *err);

/* Device memory in use on b now: its capabilities' total_memory -
 * free_memory (the cuda backend reads both from the device). */
fdy_status bench_memory_in_use(fdy_backend *b, uint64_t *out, fdy_error *err);

/* Bootstrap streams of configuration k (see foundry/bench.h): 3k for the
 * median, 3k + 1 for the mean, 3k + 2 for the paired speedup. */
enum { BENCH_STREAM_MEDIAN = 0, BENCH_STREAM_MEAN, BENCH_STREAM_SPEEDUP };

static inline uint64_t bench_stream(uint32_t k, int which) {
  return 3ull * k + (uint64_t)which;
}

/* begin_ns of the first execution (0 without one): the origin of the
 * report's start offsets and of the trace's timestamps. */
int64_t bench_origin_ns(const bench_state *s);
/* "all" or "last_measured": which executions the trace holds. */
const char *bench_trace_scope(const bench_state *s);

/* A JSON string of text that may not be UTF-8 (paths, argv, messages that
 * quote them, device names): fdy_utf8_sanitize replaces each invalid byte
 * by U+FFFD, since jansson refuses such strings; null for NULL. Every
 * string of the report and the trace that Foundry did not write itself
 * goes through it. A new reference, NULL when out of memory. */
json_t *bench_json_text(const char *s);

/* The report of a finished or failed run (status = the run's status, err its
 * error when failed). Returns a new reference. */
json_t *bench_report_json(const bench_state *s, fdy_status status,
                          const fdy_error *err);
/* The Chrome Trace Event document of the kept execution timings. */
json_t *bench_trace_json(const bench_state *s);
/* Chrome Trace Event pieces (new references) of process 1: a metadata
 * ("M") event `what` ("process_name", "thread_name") naming thread tid (0:
 * the process) `name`; the sort index of thread tid (its id); a complete
 * ("X") event from begin to end (fdy_now_ns clock) in microseconds since
 * origin, args stolen. */
json_t *bench_trace_metadata(const char *what, int tid, const char *name);
json_t *bench_trace_sort_index(int tid);
/* The Chrome Trace Event document around events (stolen): traceEvents,
 * displayTimeUnit ms and otherData, which starts with format and report
 * (report_path) and is *other (borrowed) for the caller's further fields.
 * NULL when out of memory. */
json_t *bench_trace_doc(json_t *events, const char *format,
                        const char *report_path, json_t **other);
json_t *bench_trace_span(const char *name, const char *cat, int tid,
                         int64_t begin, int64_t end, int64_t origin,
                         json_t *args);
/* Prints the console summary of a successful run. */
void bench_print_summary(const bench_state *s, FILE *out);

/* A report's number: x, or null when it is not finite (no measurement). */
static inline json_t *jreal(double x) {
  return isfinite(x) ? json_real(x) : json_null();
}

/* A report's count or byte size. */
static inline json_t *jint(uint64_t v) {
  return json_integer((json_int_t)v);
}

/* When on, a line "WHO: message" on stderr: a run's progress. */
void bench_progress(bool on, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sorts n values ascending in place (for fdy_bench_percentile_sorted). */
void bench_sort(double *v, size_t n);

/* Report pieces shared by both benchmarks (new references). */
json_t *bench_build_json(void);
/* started_utc, and the host (cpu count and model, memory, os). */
json_t *bench_host_json(void);
json_t *bench_started_json(int64_t started_unix);
json_t *bench_invocation_json(int argc, char *const *argv);
/* The error object of a failed run: kind, message, command_index, ids,
 * expected, actual (hex for FDY_ERR_CHECKSUM), backend_op, cleanup (null
 * or kind and message). */
json_t *bench_error_json(const fdy_error *err);
/* A report's opening fields: format, version, status ("ok" or "failed")
 * and error (null, or err's bench_error_json, which the caller may extend:
 * *error_out, borrowed, NULL when ok). A new reference, NULL when out of
 * memory. */
json_t *bench_report_open(const char *format, int version, fdy_status status,
                          const fdy_error *err, json_t **error_out);
/* Writes doc (stolen; NULL means out of memory) as indented JSON to path
 * through foundry/new_file.h: never over an existing file. */
fdy_status bench_write_json(const char *path, json_t *doc, fdy_error *err);
/* An output path could be written now, before any work: fdy_new_file_check
 * (a name within NAME_MAX, not taken, in an existing directory where a file
 * can be created; it creates its temporary and removes it), the error
 * prefixed with flag (see fdy_bench_check_options). */
fdy_status bench_check_output(const char *flag, const char *path,
                              fdy_error *err);
/* --trace and --report name different files, also when spelled
 * differently ("a/x.json", "./a/x.json"): else FDY_ERR_INVALID_ARGUMENT
 * (name = the trace path). */
fdy_status bench_check_distinct(const char *report_path, const char *trace_path,
                                fdy_error *err);

#endif
