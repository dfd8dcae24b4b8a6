/* Foundry benchmark: the `foundry bench` streaming protocol, its statistics
 * and its outputs (console summary, versioned JSON report, Chrome trace).
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

#include "foundry/core.h"
#include "foundry/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_BENCH_REPORT_FORMAT  "foundry.bench.report"
#define FDY_BENCH_REPORT_VERSION 1
#define FDY_BENCH_MAX_CONFIGS    16
#define FDY_BENCH_MAX_BUFFERS    64
#define FDY_BENCH_MAX_RESAMPLES  1000000u
#define FDY_BENCH_CONFIDENCE     0.95
/* First payload stream: layer i's bytes come from stream
 * FDY_BENCH_PAYLOAD_STREAM + i (see fdy_bench_fill_layer). */
#define FDY_BENCH_PAYLOAD_STREAM ((uint64_t)1 << 32)

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

/* The outputs a run put in place. */
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
  uint32_t compute_passes;                 /* --compute-passes, > 0 (1) */
  fdy_cuda_host_mode host_mode; /* --host-mode, cuda only (registered) */
  int cuda_device;              /* --device (0) */
  uint64_t cpu_memory_bytes;    /* --cpu-memory: CPU "device" memory (0 =
                                   the backend's default) */
  const char *report_path;      /* --report, or NULL */
  const char *trace_path;       /* --trace (requires report_path), or NULL */
  int argc;                     /* invocation recorded in the report */
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
 * (FDY_ERR_OVERFLOW), a known backend and host mode, a non-negative device,
 * cpu_memory_bytes with backend cuda; then the outputs: trace without
 * report, the same file for both, then each as fdy_new_file_check proves
 * it writable now: an empty name, one ending in '/' or longer than NAME_MAX,
 * an existing file (FDY_ERR_EXISTS), a missing directory
 * (FDY_ERR_NOT_FOUND), a directory where no file can be created
 * (FDY_ERR_IO), each with name = the path. Leaves nothing behind (the
 * check creates a temporary file beside each output and removes it). */
fdy_status fdy_bench_check_options(const fdy_bench_options *options,
                                   fdy_error *err);

/* Runs the benchmark: fdy_bench_check_options, backend creation and limit
 * checks (each slot within the maximum allocation, the largest slot budget
 * within device memory, the payload within the host's physical memory: each
 * FDY_ERR_BUDGET with expected = the limit, actual = the need), all before
 * any payload is generated; then untimed setup, rounds, statistics, console
 * summary, report and trace. Any execution or checksum failure aborts
 * (FDY_ERR_CHECKSUM with ids[0] = layer, command_index = sequence number).
 * Every failure after fdy_bench_check_options, when a report was asked for,
 * still writes it with status "failed". The trace is written first; if it
 * cannot be, the report of an otherwise successful run records that
 * failure; if the report cannot be written, the trace is removed again, so
 * the two appear together or not at all. Neither file is ever overwritten
 * (temporary file + link). On the cpu backend (also when auto chose it),
 * host_mode staged is FDY_ERR_INVALID_ARGUMENT, as cpu_memory_bytes is on
 * cuda. A trace that could not be written leaves the report's "trace" null
 * and its error stage "outputs". *written (may be NULL) says which files
 * this run put in place, on success and on failure: a caller names the
 * report only when it is this run's, never a file another process created
 * at its path meanwhile. */
fdy_status fdy_bench_run(const fdy_bench_options *options,
                         fdy_bench_written *written, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
