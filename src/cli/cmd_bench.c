/* `foundry bench`: parses the flags into fdy_bench_options and runs the
 * streaming benchmark (src/bench), or with --overhead parses its own flags
 * into fdy_bench_overhead_options and measures the executor's host cost.
 * Usage errors (bad flags, and the flag combinations the options checks
 * refuse before any work) exit 2; an existing output file, a missing or
 * unwritable directory, like every failure of the run itself, exits 1, as
 * for `foundry plan`. */
#include <getopt.h>
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

static fdy_status parse_u32(const char *flag, const char *text, uint32_t *out,
                            fdy_error *err) {
  uint64_t v = 0;
  fdy_status st = fdy_cli_parse_uint(flag, text, 0, UINT32_MAX, &v, err);
  if (st == FDY_OK) {
    *out = (uint32_t)v;
  }
  return st;
}

/* "1,2,3" into options->buffers (fdy_cli_parse_list); range and
 * distinctness are checked by fdy_bench_check_options. */
static fdy_status parse_buffers(const char *text, fdy_bench_options *o,
                                fdy_error *err) {
  uint64_t *values = NULL;
  uint32_t n = 0;
  fdy_status st =
      fdy_cli_parse_list("--buffers", text, 0, UINT32_MAX, &values, &n, err);
  if (st != FDY_OK) {
    return st;
  }
  if (n > FDY_BENCH_MAX_CONFIGS) {
    free(values);
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--buffers takes at most %d buffer counts",
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

/* The flags of both benchmarks. */
enum {
  OPT_OVERHEAD = 256,
  OPT_OPS,
  OPT_OP_BYTES,
  OPT_RUNS,
  OPT_WARMUP,
  OPT_REPORT,
  OPT_PROGRESS,
  OPT_NO_PROGRESS,
  OPT_BACKEND,
  OPT_LAYERS,
  OPT_WEIGHT,
  OPT_ITERATIONS,
  OPT_RESAMPLES,
  OPT_SEED,
  OPT_BUFFERS,
  OPT_PASSES,
  OPT_HOST_MODE,
  OPT_DEVICE,
  OPT_CPU_MEMORY,
  OPT_TRACE
};

static const struct option overhead_options[] = {
    {"overhead", no_argument, NULL, OPT_OVERHEAD},
    {"ops", required_argument, NULL, OPT_OPS},
    {"op-bytes", required_argument, NULL, OPT_OP_BYTES},
    {"runs", required_argument, NULL, OPT_RUNS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"report", required_argument, NULL, OPT_REPORT},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {NULL, 0, NULL, 0},
};

static fdy_status parse_overhead_option(void *p, int opt, const char *arg,
                                        bool *handled, fdy_error *err) {
  fdy_bench_overhead_options *o = p;
  *handled = true;
  switch (opt) {
  case OPT_OVERHEAD:
    return FDY_OK;
  case OPT_OPS:
    return parse_u32("--ops", arg, &o->ops, err);
  case OPT_OP_BYTES:
    return fdy_cli_parse_uint("--op-bytes", arg, 0, UINT64_MAX, &o->op_bytes,
                              err);
  case OPT_RUNS:
    return parse_u32("--runs", arg, &o->runs, err);
  case OPT_WARMUP:
    return parse_u32("--warmup", arg, &o->warmup, err);
  case OPT_REPORT:
    o->report_path = arg;
    return FDY_OK;
  case OPT_PROGRESS:
  case OPT_NO_PROGRESS:
    o->progress = opt == OPT_PROGRESS;
    return FDY_OK;
  default: /* a flag of the streaming benchmark, or none */
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "'%s' does not apply to --overhead",
                         o->argv[optind - 1]);
  }
}

/* `foundry bench --overhead ...`: the flags into fdy_bench_overhead_options,
 * checked, then the measurement (which prints its figures). */
static int bench_overhead(int argc, char **argv) {
  fdy_bench_overhead_options o;
  fdy_bench_overhead_options_default(&o);
  o.progress = fdy_cli_stderr_is_tty();
  o.console = stdout;
  o.argc = argc;
  o.argv = argv;
  int code = fdy_cli_parse_options("bench", argc, argv, overhead_options,
                                   parse_overhead_option, &o, NULL);
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

static const struct option bench_options[] = {
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"weight-mib", required_argument, NULL, OPT_WEIGHT},
    {"iterations", required_argument, NULL, OPT_ITERATIONS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"bootstrap-resamples", required_argument, NULL, OPT_RESAMPLES},
    {"seed", required_argument, NULL, OPT_SEED},
    {"buffers", required_argument, NULL, OPT_BUFFERS},
    {"compute-passes", required_argument, NULL, OPT_PASSES},
    {"host-mode", required_argument, NULL, OPT_HOST_MODE},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"cpu-memory", required_argument, NULL, OPT_CPU_MEMORY},
    {"report", required_argument, NULL, OPT_REPORT},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {NULL, 0, NULL, 0},
};

/* --backend and --host-mode, by name. */
static fdy_status parse_choice(int opt, const char *arg, bench_args *a,
                               fdy_error *err) {
  if (opt == OPT_BACKEND) {
    if (strcmp(arg, "auto") == 0) {
      a->o.backend = FDY_BENCH_BACKEND_AUTO;
    } else if (strcmp(arg, "cpu") == 0) {
      a->o.backend = FDY_BENCH_BACKEND_CPU;
    } else if (strcmp(arg, "cuda") == 0) {
      a->o.backend = FDY_BENCH_BACKEND_CUDA;
    } else {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "--backend must be auto, cpu or cuda, got '%s'",
                           arg);
    }
    return FDY_OK;
  }
  a->host_mode_seen = true;
  if (strcmp(arg, "registered") == 0) {
    a->o.host_mode = FDY_HOST_REGISTERED;
  } else if (strcmp(arg, "staged") == 0) {
    a->o.host_mode = FDY_HOST_STAGED;
  } else {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--host-mode must be registered or staged, got '%s'",
                         arg);
  }
  return FDY_OK;
}

static fdy_status parse_bench_option(void *p, int opt, const char *arg,
                                     bool *handled, fdy_error *err) {
  bench_args *a = p;
  fdy_bench_options *o = &a->o;
  uint64_t v = 0;
  fdy_status st = FDY_OK;
  *handled = true;
  switch (opt) {
  case OPT_BACKEND:
  case OPT_HOST_MODE:
    return parse_choice(opt, arg, a, err);
  case OPT_LAYERS:
    return parse_u32("--layers", arg, &o->layers, err);
  case OPT_WEIGHT:
    return fdy_cli_parse_uint("--weight-mib", arg, 0, UINT64_MAX,
                              &o->weight_mib, err);
  case OPT_ITERATIONS:
    return parse_u32("--iterations", arg, &o->iterations, err);
  case OPT_WARMUP:
    return parse_u32("--warmup", arg, &o->warmup, err);
  case OPT_RESAMPLES:
    return parse_u32("--bootstrap-resamples", arg, &o->bootstrap_resamples,
                     err);
  case OPT_SEED:
    return fdy_cli_parse_uint("--seed", arg, 0, UINT64_MAX, &o->seed, err);
  case OPT_BUFFERS:
    return parse_buffers(arg, o, err);
  case OPT_PASSES:
    return parse_u32("--compute-passes", arg, &o->compute_passes, err);
  case OPT_DEVICE:
    st = fdy_cli_parse_uint("--device", arg, 0, INT32_MAX, &v, err);
    o->cuda_device = (int)v;
    return st;
  case OPT_CPU_MEMORY:
    return fdy_cli_parse_size("--cpu-memory", arg, &o->cpu_memory_bytes, err);
  case OPT_REPORT:
    o->report_path = arg;
    return FDY_OK;
  case OPT_TRACE:
    o->trace_path = arg;
    return FDY_OK;
  case OPT_PROGRESS:
  case OPT_NO_PROGRESS:
    o->progress = opt == OPT_PROGRESS;
    return FDY_OK;
  default:
    *handled = false;
    return FDY_OK;
  }
}

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
  int code = fdy_cli_parse_options("bench", argc, argv, bench_options,
                                   parse_bench_option, &a, NULL);
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
