/* `foundry bench`: parses the flags into fdy_bench_options and runs the
 * streaming benchmark (src/bench), or with --overhead parses its own flags
 * into fdy_bench_overhead_options and measures the executor's host cost.
 * Usage errors (bad flags, and the flag combinations the options checks
 * refuse before any work) exit 2; an existing output file, a missing or
 * unwritable directory, like every failure of the run itself, exits 1, as
 * for `foundry plan`. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/bench.h"

void fdy_cmd_bench_help(FILE *out) {
  fprintf(
      out,
      "usage: foundry bench [options]\n"
      "\n"
      "Streams a synthetic chain of checksum layers (deterministic\n"
      "in-memory weights) through 1, 2 and 3 device buffers, one\n"
      "executor per buffer count created once, verifies the chain's\n"
      "result of every execution, and prints per-configuration times\n"
      "with 95%% bootstrap intervals, throughput against the\n"
      "host-to-device ceiling measured in the same run, speedups,\n"
      "copy/compute overlap and each executor's setup time. See\n"
      "docs/benchmark.md.\n"
      "\n"
      "options:\n"
      "  --backend auto|cpu|cuda     backend (default auto: cuda when a\n"
      "                              device is present, else cpu)\n"
      "  --layers N                  layers, more than every buffer\n"
      "                              count (default 48)\n"
      "  --weight-mib M              MiB per layer (default 64)\n"
      "  --iterations N              measured rounds (default 10)\n"
      "  --warmup N                  discarded rounds first (default 2)\n"
      "  --bootstrap-resamples N     1 to 1000000 (default 10000)\n"
      "  --seed N                    payload and bootstrap seed "
      "(default 0)\n"
      "  --buffers LIST              buffer counts, e.g. 1,2,3 (default)\n"
      "  --compute-passes K          checksum passes per layer "
      "(default 1)\n"
      "  --host-mode registered|staged\n"
      "                              cuda host memory (default "
      "registered)\n"
      "  --device N                  cuda device ordinal (default 0)\n"
      "  --cpu-memory SIZE           cpu backend device memory, e.g.\n"
      "                              8GiB (default half of RAM)\n"
      "  --report PATH               write the JSON report (never\n"
      "                              overwrites)\n"
      "  --trace PATH                write a Chrome trace (needs "
      "--report)\n"
      "  --progress, --no-progress   progress lines on stderr (default:\n"
      "                              when stderr is a terminal)\n"
      "\n"
      "usage: foundry bench --overhead [--ops N] [--op-bytes N] [--runs N]\n"
      "                     [--warmup N] [--report PATH] [--progress]\n"
      "\n"
      "Measures the executor's host cost per op on a chain of small\n"
      "checksum ops (default 1000 ops of 4096 bytes, 200 timed runs\n"
      "after 20 warmup) on the fake and cpu backends, resident and\n"
      "streamed: one run of an executor created once against creating,\n"
      "running and destroying an executor per run.\n"
      "\n"
      "exit status: 0 success; 1 the run failed (the report, if asked\n"
      "for, is still written with status \"failed\"), or an output file\n"
      "already exists (never overwritten) or its directory is missing\n"
      "or unwritable (all checked before any work),\n"
      "or standard output could not be written; 2 usage error.\n");
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage(const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  return fdy_cli_usage("bench", "%s", message);
}

/* "1,2,3" into the fdy_bench_options at value: buffers and buffer_count
 * (fdy_cli_parse_list); range and distinctness are checked by
 * fdy_bench_check_options. */
static fdy_status parse_buffers(const char *flag, const char *text, void *value,
                                fdy_error *err) {
  fdy_bench_options *o = value;
  uint64_t *values = NULL;
  uint32_t n = 0;
  fdy_status st =
      fdy_cli_parse_list(flag, text, 0, UINT32_MAX, &values, &n, err);
  if (st != FDY_OK) {
    return st;
  }
  if (n > FDY_BENCH_MAX_CONFIGS) {
    free(values);
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s takes at most %d buffer counts", flag,
                         FDY_BENCH_MAX_CONFIGS);
  }
  for (uint32_t i = 0; i < n; i++) {
    o->buffers[i] = (uint32_t)values[i];
  }
  o->buffer_count = n;
  free(values);
  return FDY_OK;
}

/* Prints a failed run's errors as every failure ("foundry: error: ...",
 * fdy_cli_fail); exit status 1. written_report is the report's path when
 * this run put it in place (fdy_bench_written), else NULL: a file another
 * process created at the path is never named as recording the failure. */
static int run_failed(const fdy_error *err, const char *written_report) {
  fdy_cli_fail(err);
  if (written_report) {
    fprintf(stderr, "foundry bench: the report %s records the failure\n",
            written_report);
  }
  return FDY_EXIT_FAILURE;
}

/* An option check's refusal: a failure (exit 1, "foundry: error: ...") for
 * an existing output file, a missing directory or one where no file can be
 * created, else a usage error (exit 2, "foundry bench: error: ..."). */
static int refused(fdy_status checked, const fdy_error *err) {
  if (checked == FDY_ERR_EXISTS || checked == FDY_ERR_NOT_FOUND ||
      checked == FDY_ERR_IO) {
    return fdy_cli_fail(err);
  }
  return usage("%s", err->message);
}

static const fdy_cli_flag overhead_flags[] = {
    {FDY_CLI_MODE("overhead")},
    {FDY_CLI_U32("ops", fdy_bench_overhead_options, ops, 0, UINT32_MAX)},
    {FDY_CLI_U64("op-bytes", fdy_bench_overhead_options, op_bytes, 0,
                 UINT64_MAX)},
    {FDY_CLI_U32("runs", fdy_bench_overhead_options, runs, 0, UINT32_MAX)},
    {FDY_CLI_U32("warmup", fdy_bench_overhead_options, warmup, 0, UINT32_MAX)},
    {FDY_CLI_TEXT("report", fdy_bench_overhead_options, report_path)},
    {FDY_CLI_SET("progress", fdy_bench_overhead_options, progress)},
    {FDY_CLI_CLEAR("no-progress", fdy_bench_overhead_options, progress)},
    /* a flag of the streaming benchmark, or none */
    {FDY_CLI_END, .refusal = "does not apply to --overhead"},
};

/* `foundry bench --overhead ...`: the flags into fdy_bench_overhead_options,
 * checked, then the measurement (which prints its figures). */
static int bench_overhead(int argc, char **argv) {
  fdy_bench_overhead_options o;
  fdy_bench_overhead_options_default(&o);
  o.progress = fdy_cli_stderr_is_tty();
  o.console = stdout;
  o.argc = argc;
  o.argv = argv;
  int code = fdy_cli_parse_flags("bench", argc, argv, overhead_flags, &o, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status checked = fdy_bench_overhead_check_options(&o, &err);
  if (checked != FDY_OK) {
    return refused(checked, &err);
  }
  fdy_bench_written written;
  if (fdy_bench_overhead(&o, &written, &err) != FDY_OK) {
    return run_failed(&err, written.report ? o.report_path : NULL);
  }
  return FDY_EXIT_OK;
}

/* The streaming benchmark's options, as parsed. */
typedef struct bench_args {
  fdy_bench_options o;
  bool host_mode_seen;
} bench_args;

static const fdy_cli_choice backends[] = {{"auto", FDY_BENCH_BACKEND_AUTO},
                                          {"cpu", FDY_BENCH_BACKEND_CPU},
                                          {"cuda", FDY_BENCH_BACKEND_CUDA},
                                          {NULL, 0}};

static const fdy_cli_choice host_modes[] = {{"registered", FDY_HOST_REGISTERED},
                                            {"staged", FDY_HOST_STAGED},
                                            {NULL, 0}};

/* --device N: a CUDA device ordinal, 0 to INT32_MAX. */
static fdy_status parse_device(const char *flag, const char *text, void *value,
                               fdy_error *err) {
  uint64_t device = 0;
  fdy_status st = fdy_cli_parse_uint(flag, text, 0, INT32_MAX, &device, err);
  if (st == FDY_OK) {
    *(int *)value = (int)device;
  }
  return st;
}

static const fdy_cli_flag bench_flags[] = {
    {FDY_CLI_CHOICE("backend", bench_args, o.backend, backends)},
    {FDY_CLI_U32("layers", bench_args, o.layers, 0, UINT32_MAX)},
    {FDY_CLI_U64("weight-mib", bench_args, o.weight_mib, 0, UINT64_MAX)},
    {FDY_CLI_U32("iterations", bench_args, o.iterations, 0, UINT32_MAX)},
    {FDY_CLI_U32("warmup", bench_args, o.warmup, 0, UINT32_MAX)},
    {FDY_CLI_U32("bootstrap-resamples", bench_args, o.bootstrap_resamples, 0,
                 UINT32_MAX)},
    {FDY_CLI_U64("seed", bench_args, o.seed, 0, UINT64_MAX)},
    {FDY_CLI_PARSE("buffers", bench_args, o, parse_buffers)},
    {FDY_CLI_U32("compute-passes", bench_args, o.compute_passes, 0,
                 UINT32_MAX)},
    {FDY_CLI_CHOICE("host-mode", bench_args, o.host_mode, host_modes),
     FDY_CLI_GIVEN(bench_args, host_mode_seen)},
    {FDY_CLI_PARSE("device", bench_args, o.cuda_device, parse_device)},
    {FDY_CLI_SIZE("cpu-memory", bench_args, o.cpu_memory_bytes)},
    {FDY_CLI_TEXT("report", bench_args, o.report_path)},
    {FDY_CLI_TEXT("trace", bench_args, o.trace_path)},
    {FDY_CLI_SET("progress", bench_args, o.progress)},
    {FDY_CLI_CLEAR("no-progress", bench_args, o.progress)},
    {FDY_CLI_END},
};

int fdy_cmd_bench(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--overhead") == 0) {
      return bench_overhead(argc, argv);
    }
  }
  bench_args a = {.host_mode_seen = false};
  fdy_bench_options_default(&a.o);
  a.o.progress = fdy_cli_stderr_is_tty();
  a.o.console = stdout;
  a.o.argc = argc;
  a.o.argv = argv;
  int code = fdy_cli_parse_flags("bench", argc, argv, bench_flags, &a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (a.host_mode_seen && a.o.backend == FDY_BENCH_BACKEND_CPU) {
    return usage("--host-mode applies to the cuda backend only");
  }
  fdy_error err;
  fdy_error_clear(&err);
  fdy_status checked = fdy_bench_check_options(&a.o, &err);
  if (checked != FDY_OK) {
    return refused(checked, &err);
  }
  fdy_bench_written written;
  if (fdy_bench_run(&a.o, &written, &err) != FDY_OK) {
    return run_failed(&err, written.report ? a.o.report_path : NULL);
  }
  return FDY_EXIT_OK;
}
