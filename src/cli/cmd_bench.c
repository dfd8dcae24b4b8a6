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

/* `foundry bench --overhead ...`. */
static int bench_overhead(int argc, char **argv) {
  enum {
    OPT_OVERHEAD = 256,
    OPT_OPS,
    OPT_OP_BYTES,
    OPT_RUNS,
    OPT_WARMUP,
    OPT_REPORT,
    OPT_PROGRESS,
    OPT_NO_PROGRESS
  };
  static const struct option longopts[] = {
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
  fdy_bench_overhead_options o;
  fdy_bench_overhead_options_default(&o);
  o.progress = fdy_cli_stderr_is_tty();
  o.console = stdout;
  o.argc = argc;
  o.argv = argv;
  fdy_error err;
  fdy_error_clear(&err);
  const int repeated = fdy_cli_check_repeats("bench", argc, argv, longopts);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    fdy_status st = FDY_OK;
    switch (opt) {
    case OPT_OVERHEAD:
      break;
    case OPT_OPS:
      st = parse_u32("--ops", optarg, &o.ops, &err);
      break;
    case OPT_OP_BYTES:
      st = fdy_cli_parse_uint("--op-bytes", optarg, 0, UINT64_MAX, &o.op_bytes,
                              &err);
      break;
    case OPT_RUNS:
      st = parse_u32("--runs", optarg, &o.runs, &err);
      break;
    case OPT_WARMUP:
      st = parse_u32("--warmup", optarg, &o.warmup, &err);
      break;
    case OPT_REPORT:
      o.report_path = optarg;
      break;
    case OPT_PROGRESS:
      o.progress = true;
      break;
    case OPT_NO_PROGRESS:
      o.progress = false;
      break;
    case ':':
      return usage("%s needs a value", argv[optind - 1]);
    default:
      return usage("'%s' does not apply to --overhead", argv[optind - 1]);
    }
    if (st != FDY_OK) {
      return usage("%s", err.message);
    }
  }
  if (optind < argc) {
    return usage("unexpected argument '%s'", argv[optind]);
  }
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

int fdy_cmd_bench(int argc, char **argv) {
  enum {
    OPT_BACKEND = 256,
    OPT_LAYERS,
    OPT_WEIGHT,
    OPT_ITERATIONS,
    OPT_WARMUP,
    OPT_RESAMPLES,
    OPT_SEED,
    OPT_BUFFERS,
    OPT_PASSES,
    OPT_HOST_MODE,
    OPT_DEVICE,
    OPT_CPU_MEMORY,
    OPT_REPORT,
    OPT_TRACE,
    OPT_PROGRESS,
    OPT_NO_PROGRESS
  };
  static const struct option longopts[] = {
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
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--overhead") == 0) {
      return bench_overhead(argc, argv);
    }
  }
  fdy_bench_options o;
  fdy_bench_options_default(&o);
  o.progress = fdy_cli_stderr_is_tty();
  o.console = stdout;
  o.argc = argc;
  o.argv = argv;
  bool host_mode_seen = false;
  fdy_error err;
  fdy_error_clear(&err);
  const int repeated = fdy_cli_check_repeats("bench", argc, argv, longopts);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    fdy_status st = FDY_OK;
    uint64_t v = 0;
    switch (opt) {
    case OPT_BACKEND:
      if (strcmp(optarg, "auto") == 0) {
        o.backend = FDY_BENCH_BACKEND_AUTO;
      } else if (strcmp(optarg, "cpu") == 0) {
        o.backend = FDY_BENCH_BACKEND_CPU;
      } else if (strcmp(optarg, "cuda") == 0) {
        o.backend = FDY_BENCH_BACKEND_CUDA;
      } else {
        return usage("--backend must be auto, cpu or cuda, got '%s'", optarg);
      }
      break;
    case OPT_LAYERS:
      st = parse_u32("--layers", optarg, &o.layers, &err);
      break;
    case OPT_WEIGHT:
      st = fdy_cli_parse_uint("--weight-mib", optarg, 0, UINT64_MAX,
                              &o.weight_mib, &err);
      break;
    case OPT_ITERATIONS:
      st = parse_u32("--iterations", optarg, &o.iterations, &err);
      break;
    case OPT_WARMUP:
      st = parse_u32("--warmup", optarg, &o.warmup, &err);
      break;
    case OPT_RESAMPLES:
      st = parse_u32("--bootstrap-resamples", optarg, &o.bootstrap_resamples,
                     &err);
      break;
    case OPT_SEED:
      st = fdy_cli_parse_uint("--seed", optarg, 0, UINT64_MAX, &o.seed, &err);
      break;
    case OPT_BUFFERS:
      st = parse_buffers(optarg, &o, &err);
      break;
    case OPT_PASSES:
      st = parse_u32("--compute-passes", optarg, &o.compute_passes, &err);
      break;
    case OPT_HOST_MODE:
      host_mode_seen = true;
      if (strcmp(optarg, "registered") == 0) {
        o.host_mode = FDY_HOST_REGISTERED;
      } else if (strcmp(optarg, "staged") == 0) {
        o.host_mode = FDY_HOST_STAGED;
      } else {
        return usage("--host-mode must be registered or staged, got '%s'",
                     optarg);
      }
      break;
    case OPT_DEVICE:
      st = fdy_cli_parse_uint("--device", optarg, 0, INT32_MAX, &v, &err);
      o.cuda_device = (int)v;
      break;
    case OPT_CPU_MEMORY:
      st =
          fdy_cli_parse_size("--cpu-memory", optarg, &o.cpu_memory_bytes, &err);
      break;
    case OPT_REPORT:
      o.report_path = optarg;
      break;
    case OPT_TRACE:
      o.trace_path = optarg;
      break;
    case OPT_PROGRESS:
      o.progress = true;
      break;
    case OPT_NO_PROGRESS:
      o.progress = false;
      break;
    case ':':
      return usage("%s needs a value", argv[optind - 1]);
    default:
      return usage("unknown option '%s'", argv[optind - 1]);
    }
    if (st != FDY_OK) {
      return usage("%s", err.message);
    }
  }
  if (optind < argc) {
    return usage("unexpected argument '%s'", argv[optind]);
  }
  if (host_mode_seen && o.backend == FDY_BENCH_BACKEND_CPU) {
    return usage("--host-mode applies to the cuda backend only");
  }
  fdy_status checked = fdy_bench_check_options(&o, &err);
  if (checked != FDY_OK) {
    return refused(checked, &err);
  }
  fdy_bench_written written;
  if (fdy_bench_run(&o, &written, &err) != FDY_OK) {
    return run_failed(&err, written.report ? o.report_path : NULL);
  }
  return FDY_EXIT_OK;
}
