/* `foundry plan`: exports the streaming plan of a synthetic layer chain as
 * JSON (--dump) or loads and statically validates a plan file (--check). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/graph.h"
#include "foundry/plan.h"

#define DEFAULT_LAYERS     48
#define DEFAULT_WEIGHT_MIB 450
#define DEFAULT_BUFFERS    3
#define DEFAULT_BUDGET     "4GiB"
#define DEFAULT_ALIGNMENT  256

void fdy_cmd_plan_help(FILE *out) {
  fprintf(
      out,
      "usage: foundry plan --dump PATH [options]\n"
      "       foundry plan --check PATH\n"
      "\n"
      "--dump writes the N-buffered streaming plan of a synthetic chain of\n"
      "checksum layers as JSON (PATH '-' is standard output; an existing\n"
      "file is never overwritten). --check loads a plan file, validates it\n"
      "statically and prints a one-line summary on stdout (exit 0) or the\n"
      "first error with its command index on stderr (exit 1). After a dump\n"
      "the summary goes to stdout, or to stderr when the plan does.\n"
      "\n"
      "options for --dump:\n"
      "  --layers N         layers in the chain (default %d)\n"
      "  --weight-mib M     weight bytes per layer in MiB (default %d)\n"
      "  --buffers B        resident weight slots (default %d)\n"
      "  --budget SIZE      device budget, e.g. 4GiB (default %s)\n"
      "  --alignment BYTES  slot size alignment, a power of two "
      "(default %d)\n",
      DEFAULT_LAYERS, DEFAULT_WEIGHT_MIB, DEFAULT_BUFFERS, DEFAULT_BUDGET,
      DEFAULT_ALIGNMENT);
}

static void print_summary(FILE *out, const char *label, const fdy_plan *plan,
                          const fdy_plan_summary *summary) {
  char peak[32], budget[32], moved[32];
  fdy_format_bytes(summary->peak_bytes, peak, sizeof peak);
  fdy_format_bytes(fdy_plan_budget(plan), budget, sizeof budget);
  fdy_format_bytes(summary->transfer_bytes, moved, sizeof moved);
  fprintf(out,
          "%s: valid, %zu commands, %zu ops, %" PRIu32 " slots, peak %s of "
          "%s budget, %s transferred, %" PRIu32 " streams\n",
          label, summary->commands, summary->ops, summary->slots, peak, budget,
          moved, summary->streams);
}

static int check_plan(const char *path) {
  fdy_error err;
  fdy_plan *plan = NULL;
  if (fdy_plan_load(path, &plan, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  fdy_plan_summary summary;
  fdy_status status = fdy_plan_validate(plan, &summary, &err);
  if (status != FDY_OK) {
    /* The message names the command index ("command 12: ...") itself. */
    fprintf(stderr, "foundry: error: %s: invalid plan (%s): %s\n", path,
            fdy_status_name(err.kind), err.message);
    fdy_plan_destroy(plan);
    return FDY_EXIT_FAILURE;
  }
  print_summary(stdout, path, plan, &summary);
  fdy_plan_destroy(plan);
  return FDY_EXIT_OK;
}

static int write_stdout(const fdy_plan *plan) {
  fdy_error err;
  char *json = NULL;
  if (fdy_plan_to_json(plan, &json, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  fputs(json, stdout);
  fputc('\n', stdout);
  free(json);
  /* stop here, before the summary, when the plan was not written */
  return fdy_cli_finish_stdout(FDY_EXIT_OK);
}

static int dump_plan(const char *path, uint64_t layers, uint64_t weight_mib,
                     uint64_t buffers, uint64_t budget, uint64_t alignment) {
  fdy_error err;
  uint64_t weight_bytes = 0;
  if (fdy_mul_u64(weight_mib, FDY_MIB, &weight_bytes, NULL) != FDY_OK) {
    return fdy_cli_usage("plan", "--weight-mib %" PRIu64 " is too large",
                         weight_mib);
  }
  fdy_graph *graph = NULL;
  fdy_plan *plan = NULL;
  int code = FDY_EXIT_FAILURE;
  if (fdy_synthetic_graph_create((uint32_t)layers, weight_bytes, NULL, &graph,
                                 &err) != FDY_OK ||
      fdy_plan_streaming(graph, budget, (uint32_t)buffers, alignment, &plan,
                         &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  fdy_plan_summary summary;
  if (fdy_plan_validate(plan, &summary, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (strcmp(path, "-") == 0) {
    code = write_stdout(plan);
  } else if (fdy_plan_save(plan, path, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    code = FDY_EXIT_OK;
  }
  if (code == FDY_EXIT_OK) {
    bool plan_on_stdout = strcmp(path, "-") == 0;
    print_summary(plan_on_stdout ? stderr : stdout,
                  plan_on_stdout ? "plan" : path, plan, &summary);
  }
cleanup:
  fdy_plan_destroy(plan);
  fdy_graph_destroy(graph);
  return code;
}

int fdy_cmd_plan(int argc, char **argv) {
  enum {
    OPT_DUMP = 256,
    OPT_CHECK,
    OPT_LAYERS,
    OPT_WEIGHT,
    OPT_BUFFERS,
    OPT_BUDGET,
    OPT_ALIGNMENT
  };
  static const struct option options[] = {
      {"dump", required_argument, NULL, OPT_DUMP},
      {"check", required_argument, NULL, OPT_CHECK},
      {"layers", required_argument, NULL, OPT_LAYERS},
      {"weight-mib", required_argument, NULL, OPT_WEIGHT},
      {"buffers", required_argument, NULL, OPT_BUFFERS},
      {"budget", required_argument, NULL, OPT_BUDGET},
      {"alignment", required_argument, NULL, OPT_ALIGNMENT},
      {NULL, 0, NULL, 0},
  };
  const char *dump = NULL, *check = NULL;
  uint64_t layers = DEFAULT_LAYERS, weight_mib = DEFAULT_WEIGHT_MIB;
  uint64_t buffers = DEFAULT_BUFFERS, alignment = DEFAULT_ALIGNMENT;
  uint64_t budget = 4 * FDY_GIB;
  bool dump_option_seen = false;
  fdy_error err;
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    fdy_status status = FDY_OK;
    switch (opt) {
    case OPT_DUMP:
      dump = optarg;
      break;
    case OPT_CHECK:
      check = optarg;
      break;
    case OPT_LAYERS:
      status =
          fdy_cli_parse_uint("--layers", optarg, 1, UINT32_MAX, &layers, &err);
      dump_option_seen = true;
      break;
    case OPT_WEIGHT:
      status = fdy_cli_parse_uint("--weight-mib", optarg, 1, UINT32_MAX,
                                  &weight_mib, &err);
      dump_option_seen = true;
      break;
    case OPT_BUFFERS:
      status = fdy_cli_parse_uint("--buffers", optarg, 1, UINT32_MAX, &buffers,
                                  &err);
      dump_option_seen = true;
      break;
    case OPT_BUDGET:
      status = fdy_parse_bytes(optarg, &budget, &err);
      if (status != FDY_OK) {
        fdy_error_prefix(&err, "--budget");
      } else if (budget == 0) {
        status = fdy_error_set(&err, FDY_ERR_INVALID_ARGUMENT,
                               "--budget must be positive");
      }
      dump_option_seen = true;
      break;
    case OPT_ALIGNMENT:
      status = fdy_cli_parse_uint("--alignment", optarg, 1, UINT32_MAX,
                                  &alignment, &err);
      if (status == FDY_OK && !fdy_is_power_of_two(alignment)) {
        status =
            fdy_error_set(&err, FDY_ERR_INVALID_ARGUMENT,
                          "--alignment must be a power of two, got %s", optarg);
      }
      dump_option_seen = true;
      break;
    case ':':
      return fdy_cli_usage("plan", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("plan", "unknown option '%s'", argv[optind - 1]);
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("plan", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("plan", "unexpected argument '%s'", argv[optind]);
  }
  if ((dump != NULL) == (check != NULL)) {
    return fdy_cli_usage("plan", "give exactly one of --dump PATH or "
                                 "--check PATH");
  }
  if (check) {
    if (dump_option_seen) {
      return fdy_cli_usage("plan", "--check takes no planner options");
    }
    return check_plan(check);
  }
  return dump_plan(dump, layers, weight_mib, buffers, budget, alignment);
}
