/* Foundry benchmark: its workload (the synthetic checksum chain and its
 * plan), the `foundry bench` streaming protocol, its statistics and its
 * outputs (console summary, versioned JSON report, Chrome trace), and the
 * executor overhead benchmark (`foundry bench --overhead`).
 *
 * The statistics are exposed so that tests (and scripts/bench_summary.py,
 * which re-implements them) can check them exactly:
 * - median, mean, sample standard deviation (n - 1; 0 for one sample), min,
 *   max of a sample;
 * - percentile-bootstrap 95% intervals for the median and the mean, and a
 *   paired interval for the speedup median(base) / median(x) that resamples
 *   whole rounds (the same indices for both samples).
 *
 * Resampler (documented so a script reproduces it bit for bit):
 * - SplitMix64: state += 0x9E3779B97F4A7C15; z = state;
 *   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) *
 *   0x94D049BB133111EB; return z ^ (z >> 31)   (all mod 2^64).
 * - Each bootstrap uses its own generator whose initial state is
 *   fdy_bench_stream_seed(seed, stream): the (stream + 1)-th output of a
 *   SplitMix64 whose initial state is `seed`. Streams of the benchmark, for
 *   the configuration at index k of the buffers list: 3k (median), 3k + 1
 *   (mean), 3k + 2 (speedup against the baseline).
 * - One resample draws n indices, each `next() % n`, in order; the statistic
 *   of the resample is computed on the drawn values in draw order (the mean
 *   sums them left to right).
 * - The interval is the 2.5th and 97.5th percentiles of the sorted resample
 *   statistics with linear interpolation: h = (B - 1) * p, i = floor(h),
 *   q = v[i] + (h - i) * (v[i + 1] - v[i])  (v[i] when i = B - 1).
 *
 * All functions are reentrant. */
#ifndef FOUNDRY_BENCH_H
#define FOUNDRY_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "foundry/backend.h"
#include "foundry/core.h"
#include "foundry/graph.h"
#include "foundry/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_BENCH_REPORT_FORMAT  "foundry.bench.report"
#define FDY_BENCH_REPORT_VERSION 2
#define FDY_BENCH_MAX_CONFIGS    16
#define FDY_BENCH_MAX_BUFFERS    64
#define FDY_BENCH_MAX_RESAMPLES  1000000u
#define FDY_BENCH_CONFIDENCE     0.95
/* First payload stream: layer i's bytes come from stream
 * FDY_BENCH_PAYLOAD_STREAM + i (see fdy_bench_fill_layer). */
#define FDY_BENCH_PAYLOAD_STREAM ((uint64_t)1 << 32)

/* ---- the workload ----------------------------------------------------------
 */

/* The name of the chain plan's one step, run once per execution. */
#define FDY_BENCH_STEP "pass"

/* The synthetic chain: `layers` ops "layer.i" of kind FDY_OP_CHECKSUM with
 * params.checksum.passes = passes (0 counts as 1), op i reading weight
 * "layer.i.weight" (U8 [weight_bytes]) and, from i = 1 on, the previous
 * op's output, and writing "layer.i.out" (U64 [1]):
 *   out_0 = fdy_checksum(w_0),  out_i = fdy_checksum(w_i) + out_{i-1} *
 *   FDY_CHAIN_PRIME (mod 2^64).
 * layer_data (layers pointers of weight_bytes each, borrowed for the
 * graph's life) binds the weights to host memory; NULL only describes them
 * (for planning). FDY_ERR_INVALID_ARGUMENT for 0 layers or a weight size
 * that is not a positive multiple of 8 (actual = weight_bytes). The caller
 * owns *out (fdy_graph_destroy). */
fdy_status fdy_synthetic_graph_create(uint32_t layers, uint64_t weight_bytes,
                                      uint32_t passes,
                                      const void *const *layer_data,
                                      fdy_graph **out, fdy_error *err);
/* The chain's result: the output of its last op. FDY_ERR_INVALID_ARGUMENT
 * for a graph without ops or a NULL out. */
fdy_status fdy_synthetic_output(const fdy_graph *chain, fdy_tensor_id *out,
                                fdy_error *err);
/* fdy_plan_build over the chain with one step FDY_BENCH_STEP that launches
 * every op and copies the chain's result to the host (its errors). With a
 * weight budget of N slots of the largest aligned weight and more than N
 * layers, every weight streams through N slots. */
fdy_status fdy_synthetic_plan_build(const fdy_graph *chain,
                                    const fdy_planner_options *options,
                                    fdy_plan **out, fdy_error *err);

/* ---- statistics ------------------------------------------------------------
 */

typedef struct fdy_splitmix64 {
  uint64_t state;
} fdy_splitmix64;

/* Advances g and returns the next output (see the top of this file). */
uint64_t fdy_splitmix64_next(fdy_splitmix64 *g);
/* Initial state of bootstrap/payload stream `stream` under `seed`. */
uint64_t fdy_bench_stream_seed(uint64_t seed, uint64_t stream);

/* Summary of one sample. */
typedef struct fdy_bench_stats {
  size_t n;
  double median, mean, stddev, min, max;
} fdy_bench_stats;

/* Median of n > 0 values (the mean of the two middle values when n is even);
 * x is not modified. FDY_ERR_INVALID_ARGUMENT for n == 0, OUT_OF_MEMORY. */
fdy_status fdy_bench_median(const double *x, size_t n, double *out,
                            fdy_error *err);
/* Mean (left-to-right sum / n) of n > 0 values. */
double fdy_bench_mean(const double *x, size_t n);
/* Sample standard deviation sqrt(sum (x - mean)^2 / (n - 1)); 0 for n == 1. */
double fdy_bench_stddev(const double *x, size_t n);
/* Fills every field of *out from n > 0 values. */
fdy_status fdy_bench_describe(const double *x, size_t n, fdy_bench_stats *out,
                              fdy_error *err);
/* Percentile p in [0, 1] of n > 0 ascending values (interpolation above). */
double fdy_bench_percentile_sorted(const double *sorted, size_t n, double p);

typedef enum fdy_bench_statistic {
  FDY_BENCH_STAT_MEDIAN = 0,
  FDY_BENCH_STAT_MEAN,
} fdy_bench_statistic;

typedef struct fdy_bench_interval {
  double low, high;
} fdy_bench_interval;

/* Percentile-bootstrap 95% interval of `stat` over n > 0 values with
 * `resamples` (1 .. FDY_BENCH_MAX_RESAMPLES) resamples from a SplitMix64
 * whose initial state is `stream_state`. */
fdy_status fdy_bench_bootstrap(const double *x, size_t n,
                               fdy_bench_statistic stat, uint32_t resamples,
                               uint64_t stream_state, fdy_bench_interval *out,
                               fdy_error *err);
/* Paired speedup median(base) / median(x) over n > 0 rounds (base[r] and x[r]
 * measured in the same round): *point is the speedup of the full sample and
 * *out its percentile-bootstrap 95% interval resampling whole rounds. */
fdy_status fdy_bench_paired_speedup(const double *base, const double *x,
                                    size_t n, uint32_t resamples,
                                    uint64_t stream_state, double *point,
                                    fdy_bench_interval *out, fdy_error *err);

/* Fills weight_bytes of layer `layer` of the payload: little-endian words of
 * a SplitMix64 with initial state fdy_bench_stream_seed(seed,
 * FDY_BENCH_PAYLOAD_STREAM + layer), the last word truncated. */
void fdy_bench_fill_layer(void *dst, uint64_t weight_bytes, uint64_t seed,
                          uint32_t layer);

/* ---- the benchmark
 * ------------------------------------------------------------- */

typedef enum fdy_bench_backend {
  FDY_BENCH_BACKEND_AUTO = 0, /* cuda when a device is present, else cpu */
  FDY_BENCH_BACKEND_CPU,
  FDY_BENCH_BACKEND_CUDA,
} fdy_bench_backend;

/* "auto", "cpu", "cuda". */
const char *fdy_bench_backend_name(fdy_bench_backend backend);

/* The outputs a run (fdy_bench_run, fdy_bench_overhead) put in place. */
typedef struct fdy_bench_written {
  bool report; /* the report is at options->report_path */
  bool trace;  /* the trace is at options->trace_path */
} fdy_bench_written;

/* Every flag of `foundry bench`. Strings are borrowed for the call. */
typedef struct fdy_bench_options {
  fdy_bench_backend backend;    /* --backend (auto) */
  uint32_t layers;              /* --layers, > 0 (48) */
  uint64_t weight_mib;          /* --weight-mib, > 0 (64): MiB per layer */
  uint32_t iterations;          /* --iterations, > 0 (10): measured rounds */
  uint32_t warmup;              /* --warmup (2): discarded rounds */
  uint32_t bootstrap_resamples; /* --bootstrap-resamples, 1 .. 1e6 (10000) */
  uint64_t seed;                /* --seed (0): payload and bootstrap */
  uint32_t buffer_count;        /* --buffers list length (3) */
  uint32_t buffers[FDY_BENCH_MAX_CONFIGS]; /* distinct, 1 .. MAX (1,2,3) */
  uint32_t compute_passes;   /* --compute-passes, > 0 (1): the chain ops'
                                params.checksum.passes */
  fdy_host_mode host_mode;   /* --host-mode, cuda only (registered) */
  int cuda_device;           /* --device (0) */
  uint64_t cpu_memory_bytes; /* --cpu-memory: CPU "device" memory (0 =
                                the backend's default) */
  const char *report_path;   /* --report, or NULL */
  const char *trace_path;    /* --trace (requires report_path), or NULL */
  int argc;                  /* invocation recorded in the report */
  char *const *argv;
  FILE *console; /* summary table; NULL = none */
  bool progress; /* progress lines on stderr: setup steps, each execution */
} fdy_bench_options;

/* The defaults of the issue (see the field comments). */
void fdy_bench_options_default(fdy_bench_options *options);

/* Everything that can be checked without a backend, in this order (each
 * FDY_ERR_INVALID_ARGUMENT unless said otherwise): positive
 * layers/weight/iterations/resamples/passes (name = the flag), resamples <=
 * 1e6, the buffers list (1 .. FDY_BENCH_MAX_CONFIGS entries, each 1 ..
 * FDY_BENCH_MAX_BUFFERS, distinct; ids name the entries), warmup +
 * iterations within 32 bits and the payload and slot sizes within 64 bits
 * (FDY_ERR_OVERFLOW), more layers than the largest buffer count (name =
 * "--layers", expected = that count, actual = layers: with as many slots
 * as layers the planner keeps every weight resident and nothing streams),
 * a known backend and host mode, a non-negative device, cpu_memory_bytes
 * with backend cuda; then the outputs: trace without report, the same file
 * for both, then each as fdy_new_file_check proves it writable now: an
 * empty name, one ending in '/' or longer than NAME_MAX, an existing file
 * (FDY_ERR_EXISTS), a missing directory (FDY_ERR_NOT_FOUND), a directory
 * where no file can be created (FDY_ERR_IO), each with name = the path.
 * Leaves nothing behind (the check creates a temporary file beside each
 * output and removes it). */
fdy_status fdy_bench_check_options(const fdy_bench_options *options,
                                   fdy_error *err);

/* Runs the benchmark: fdy_bench_check_options, backend creation and limit
 * checks (each slot within the maximum allocation, the slots of all
 * configurations together within device memory, the payload within the
 * host's physical memory: each FDY_ERR_BUDGET with expected = the limit,
 * actual = the need), all before any payload is generated; then untimed
 * setup (plans, payload, registration, ceilings, one executor per
 * configuration), rounds of fdy_executor_run of step FDY_BENCH_STEP,
 * executor teardown, statistics, console summary, report and trace. Any
 * execution or checksum failure aborts (FDY_ERR_CHECKSUM with ids[0] = the
 * last layer, whose output is the chain's result, command_index = sequence
 * number, expected/actual = the results). Every failure after
 * fdy_bench_check_options, when a report was asked for, still writes it
 * with status "failed". The trace is written first; if it cannot be, the
 * report of an otherwise successful run records that failure; if the
 * report cannot be written, the trace is removed again, so the two appear
 * together or not at all. Neither file is ever overwritten (temporary file
 * + link). On the cpu backend (also when auto chose it), host_mode staged
 * is FDY_ERR_INVALID_ARGUMENT, as cpu_memory_bytes is on cuda. A trace
 * that could not be written leaves the report's "trace" null and its
 * error stage "outputs". *written (may be NULL) says which files this run
 * put in place, on success and on failure: a caller names the report only
 * when it is this run's, never a file another process created at its path
 * meanwhile. */
fdy_status fdy_bench_run(const fdy_bench_options *options,
                         fdy_bench_written *written, fdy_error *err);

/* ---- executor overhead -----------------------------------------------------
 */

#define FDY_BENCH_OVERHEAD_FORMAT  "foundry.bench.overhead"
#define FDY_BENCH_OVERHEAD_VERSION 1
/* Slots of the streamed plan of the overhead benchmark. */
#define FDY_BENCH_OVERHEAD_SLOTS 2u

/* Every flag of `foundry bench --overhead`. Strings are borrowed. */
typedef struct fdy_bench_overhead_options {
  uint32_t ops;            /* --ops, > FDY_BENCH_OVERHEAD_SLOTS (1000) */
  uint64_t op_bytes;       /* --op-bytes, a positive multiple of 8 (4096):
                              the weight of each op */
  uint32_t runs;           /* --runs, > 0 (200): timed runs per measurement */
  uint32_t warmup;         /* --warmup (20): untimed runs before them */
  const char *report_path; /* --report, or NULL */
  int argc;                /* invocation recorded in the report */
  char *const *argv;
  FILE *console; /* the table; NULL = none */
  bool progress; /* a line per measurement on stderr */
} fdy_bench_overhead_options;

void fdy_bench_overhead_options_default(fdy_bench_overhead_options *options);

/* Checks that leave nothing behind, each FDY_ERR_INVALID_ARGUMENT with
 * name = the flag unless said otherwise: ops > FDY_BENCH_OVERHEAD_SLOTS,
 * op_bytes a positive multiple of 8, runs > 0, warmup + runs within 32 bits
 * and ops x op_bytes within 64 bits (FDY_ERR_OVERFLOW); the report path
 * proven writable as for fdy_bench_check_options (FDY_ERR_EXISTS,
 * FDY_ERR_NOT_FOUND, FDY_ERR_IO, name = the path). */
fdy_status
fdy_bench_overhead_check_options(const fdy_bench_overhead_options *options,
                                 fdy_error *err);

/* Measures the host cost of the executor on a chain of `ops` small
 * checksum ops, on the fake backend (computes nothing: the executor's own
 * cost plus the fake's bookkeeping) and the cpu backend (also the worker
 * handoff and the checksum of op_bytes), for the plan with every weight
 * resident and for the plan streaming every weight through
 * FDY_BENCH_OVERHEAD_SLOTS slots: the time of fdy_executor_run of an
 * executor created once, against the time of creating an executor, running
 * it once and destroying it (the cost of the old one-shot runtime, which
 * rebuilt everything per execution). cpu results are verified against the
 * chain's expected result. Prints the table on console, writes the report
 * (format FDY_BENCH_OVERHEAD_FORMAT; also for a failed run) when asked.
 * Errors: fdy_bench_overhead_check_options, then backend and executor
 * failures, FDY_ERR_CHECKSUM for a wrong cpu result. *written (may be
 * NULL; trace is always false) says whether this run put the report in
 * place, on success and on failure, as for fdy_bench_run. */
fdy_status fdy_bench_overhead(const fdy_bench_overhead_options *options,
                              fdy_bench_written *written, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
