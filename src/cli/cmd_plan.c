/* `foundry plan`: exports the plan fdy_plan_build makes of a workload's
 * graph as JSON (--dump; the workload is the benchmark's synthetic checksum
 * chain, or a Llama checkpoint with --model) or loads and statically
 * validates a plan file (--check). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/bench.h"
#include "foundry/llama_session.h"
#include "foundry/plan.h"

#define DEFAULT_LAYERS     48
#define DEFAULT_WEIGHT_MIB 450
#define DEFAULT_BUFFERS    3
#define DEFAULT_BUDGET     "4GiB"
#define DEFAULT_ALIGNMENT  FDY_TENSOR_ALIGNMENT
/* Bounds that refuse absurd chains before any work: a plan of a million
 * layers is a few million commands to build and validate. */
#define MAX_LAYERS  65536u
#define MAX_BUFFERS 4096u

void fdy_cmd_plan_help(FILE *out) {
  fprintf(
      out,
      "usage: foundry plan --dump PATH [options]\n"
      "       foundry plan --dump PATH --model DIR [options]\n"
      "       foundry plan --check PATH\n"
      "\n"
      "--dump writes the plan of a synthetic chain of checksum layers, or\n"
      "with --model of a Llama checkpoint (steps prefill and decode, each\n"
      "copying out the next id as generate, chat and infer-bench run\n"
      "them), as JSON (PATH '-' is standard output; an existing file is\n"
      "never overwritten): the weights that fit the budget next to B slots\n"
      "stay resident, the others stream through the slots (all resident when\n"
      "they all fit). --check loads a plan file, validates it\n"
      "statically and prints a one-line summary on stdout (exit 0) or the\n"
      "first error with its command index on stderr (exit 1). After a dump\n"
      "the summary goes to stdout, or to stderr when the plan does.\n"
      "\n"
      "options for --dump:\n"
      "  --layers N         layers in the chain, 1 to %u (default %d)\n"
      "  --weight-mib M     weight bytes per layer in MiB (default %d)\n"
      "  --model DIR        plan this Llama checkpoint instead of a chain\n"
      "  --context C        with --model: KV cache positions (default: the\n"
      "                     model's max_position_embeddings, at most 4096)\n"
      "  --buffers B        slots for streamed weights, 1 to %u (default %d)\n"
      "  --budget SIZE      weight budget, e.g. 4GiB (default %s; with\n"
      "                     --model: every weight resident)\n"
      "  --alignment BYTES  chain: buffer offset and size alignment, a power "
      "of\n"
      "                     two of at least %d (default %d)\n",
      MAX_LAYERS, DEFAULT_LAYERS, DEFAULT_WEIGHT_MIB, MAX_BUFFERS,
      DEFAULT_BUFFERS, DEFAULT_BUDGET, FDY_TENSOR_ALIGNMENT, DEFAULT_ALIGNMENT);
}

static void print_summary(FILE *out, const char *label, const fdy_plan *plan,
                          const fdy_plan_summary *summary) {
  uint32_t slots = 0;
  for (uint32_t i = 0; i < fdy_plan_buffer_count(plan); i++) {
    slots += fdy_plan_buffer_at(plan, i)->cls == FDY_BUFFER_SLOT;
  }
  char peak[32], budget[32], setup[32], step[32];
  fdy_format_bytes(summary->peak_weight_bytes, peak, sizeof peak);
  fdy_format_bytes(fdy_plan_budget(plan), budget, sizeof budget);
  fdy_format_bytes(summary->setup_transfer_bytes, setup, sizeof setup);
  fdy_format_bytes(summary->step_transfer_bytes, step, sizeof step);
  fprintf(out,
          "%s: valid, %zu commands, %zu ops, %" PRIu32 " slots, peak %s of "
          "%s budget, %s uploaded by setup, %s transferred per step, "
          "%" PRIu32 " streams\n",
          label, summary->commands, summary->ops, slots, peak, budget, setup,
          step, summary->streams);
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

/* Validates the plan, writes it to path ('-': stdout) and prints its
 * summary. */
static int dump_plan(const char *path, const fdy_plan *plan) {
  fdy_error err;
  fdy_plan_summary summary;
  if (fdy_plan_validate(plan, &summary, &err) != FDY_OK) {
    return fdy_cli_fail(&err);
  }
  bool plan_on_stdout = strcmp(path, "-") == 0;
  int code = FDY_EXIT_OK;
  if (plan_on_stdout) {
    code = write_stdout(plan);
  } else if (fdy_plan_save(plan, path, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  }
  if (code == FDY_EXIT_OK) {
    print_summary(plan_on_stdout ? stderr : stdout,
                  plan_on_stdout ? "plan" : path, plan, &summary);
  }
  return code;
}

/* The plan of the synthetic chain: layers x weight_mib MiB. */
static int dump_synthetic(const char *path, uint64_t layers,
                          uint64_t weight_mib,
                          const fdy_planner_options *options) {
  fdy_error err;
  uint64_t weight_bytes = 0;
  if (fdy_mul_u64(weight_mib, FDY_MIB, &weight_bytes, NULL) != FDY_OK) {
    return fdy_cli_usage("plan", "--weight-mib %" PRIu64 " is too large",
                         weight_mib);
  }
  fdy_graph *graph = NULL;
  fdy_plan *plan = NULL;
  int code = FDY_EXIT_FAILURE;
  if (fdy_synthetic_graph_create((uint32_t)layers, weight_bytes, 1, NULL,
                                 &graph, &err) != FDY_OK ||
      fdy_synthetic_plan_build(graph, options, &plan, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    code = dump_plan(path, plan);
  }
  fdy_plan_destroy(plan);
  fdy_graph_destroy(graph);
  return code;
}

/* Sum of the aligned sizes of every weight: a budget that keeps them all
 * resident. */
static fdy_status all_resident_budget(const fdy_graph *graph,
                                      uint64_t alignment, uint64_t *out,
                                      fdy_error *err) {
  uint64_t total = 0;
  for (size_t t = 0; t < fdy_graph_tensor_count(graph); t++) {
    fdy_tensor_info info;
    uint64_t bytes = 0;
    fdy_status st =
        fdy_graph_tensor(graph, (fdy_tensor_id){(uint32_t)t}, &info, err);
    if (st == FDY_OK && info.role == FDY_TENSOR_WEIGHT) {
      st = fdy_align_up(info.bytes, alignment, &bytes, err);
      if (st == FDY_OK) {
        st = fdy_add_u64(total, bytes, &total, err);
      }
    }
    if (st != FDY_OK) {
      return st;
    }
  }
  *out = total;
  return FDY_OK;
}

/* The plan of a Llama checkpoint: steps prefill (the session's default
 * rows) and decode; budget 0 keeps every weight resident. */
static int dump_model(const char *path, const char *dir, uint32_t context,
                      uint64_t budget, uint32_t buffers) {
  fdy_error err;
  fdy_llama_model *model = NULL;
  fdy_graph *graph = NULL;
  fdy_plan *plan = NULL;
  fdy_llama_graph_io io;
  int code = FDY_EXIT_FAILURE;
  fdy_status st = fdy_llama_open(dir, &model, &err);
  if (st == FDY_OK) {
    const fdy_llama_config *c = fdy_llama_model_config(model);
    uint32_t limit = c->max_position_embeddings;
    fdy_llama_graph_options options = {.context =
                                           context ? context
                                           : limit < FDY_LLAMA_DEFAULT_CONTEXT
                                               ? limit
                                               : FDY_LLAMA_DEFAULT_CONTEXT,
                                       .kv_dtype = FDY_DTYPE_F32,
                                       .ids_only = true};
    options.prefill_rows = options.context < FDY_LLAMA_DEFAULT_PREFILL_ROWS
                               ? options.context
                               : FDY_LLAMA_DEFAULT_PREFILL_ROWS;
    st = fdy_llama_graph(model, &options, &graph, &io, &err);
  }
  if (st == FDY_OK && budget == 0) {
    st = all_resident_budget(graph, FDY_TENSOR_ALIGNMENT, &budget, &err);
  }
  if (st == FDY_OK) {
    st = fdy_llama_plan(graph, &io, budget, buffers, &plan, &err);
  }
  code = st == FDY_OK ? dump_plan(path, plan) : fdy_cli_fail(&err);
  fdy_plan_destroy(plan);
  fdy_graph_destroy(graph);
  fdy_llama_close(model);
  return code;
}

/* The command's options, as parsed. */
typedef struct plan_args {
  const char *dump, *check, *model;
  uint64_t context, layers, weight_mib, buffers, alignment;
  uint64_t budget;   /* 0: not given */
  bool chain_seen;   /* --layers, --weight-mib or --alignment */
  bool planner_seen; /* another planner option */
} plan_args;

/* --alignment: a power of two from FDY_TENSOR_ALIGNMENT to 2^32 - 1. */
static fdy_status parse_alignment(const char *flag, const char *text,
                                  void *value, fdy_error *err) {
  uint64_t alignment = 0;
  fdy_status st = fdy_cli_parse_uint(flag, text, FDY_TENSOR_ALIGNMENT,
                                     UINT32_MAX, &alignment, err);
  if (st == FDY_OK && !fdy_is_power_of_two(alignment)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s must be a power of two, got %s", flag, text);
  }
  if (st == FDY_OK) {
    *(uint64_t *)value = alignment;
  }
  return st;
}

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("dump", plan_args, dump)},
    {FDY_CLI_TEXT("check", plan_args, check)},
    {FDY_CLI_U64("layers", plan_args, layers, 1, MAX_LAYERS),
     FDY_CLI_GIVEN(plan_args, chain_seen)},
    {FDY_CLI_U64("weight-mib", plan_args, weight_mib, 1, UINT32_MAX),
     FDY_CLI_GIVEN(plan_args, chain_seen)},
    {FDY_CLI_U64("buffers", plan_args, buffers, 1, MAX_BUFFERS),
     FDY_CLI_GIVEN(plan_args, planner_seen)},
    {FDY_CLI_SIZE("budget", plan_args, budget),
     FDY_CLI_GIVEN(plan_args, planner_seen)},
    {FDY_CLI_PARSE("alignment", plan_args, alignment, parse_alignment),
     FDY_CLI_GIVEN(plan_args, chain_seen)},
    {FDY_CLI_TEXT("model", plan_args, model),
     FDY_CLI_GIVEN(plan_args, planner_seen)},
    {FDY_CLI_U64("context", plan_args, context, 1, UINT32_MAX),
     FDY_CLI_GIVEN(plan_args, planner_seen)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, plan_args *a) {
  *a = (plan_args){.layers = DEFAULT_LAYERS,
                   .weight_mib = DEFAULT_WEIGHT_MIB,
                   .buffers = DEFAULT_BUFFERS,
                   .alignment = DEFAULT_ALIGNMENT};
  int code = fdy_cli_parse_flags("plan", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if ((a->dump != NULL) == (a->check != NULL)) {
    return fdy_cli_usage("plan", "give exactly one of --dump PATH or "
                                 "--check PATH");
  }
  if (a->check && (a->chain_seen || a->planner_seen)) {
    return fdy_cli_usage("plan", "--check takes no planner options");
  }
  if (a->check) {
    return FDY_EXIT_OK;
  }
  if (a->model && a->chain_seen) {
    return fdy_cli_usage("plan", "--layers, --weight-mib and --alignment "
                                 "describe the chain; --model plans a "
                                 "checkpoint");
  }
  if (!a->model && a->context != 0) {
    return fdy_cli_usage("plan", "--context needs --model");
  }
  return FDY_EXIT_OK;
}

int fdy_cmd_plan(int argc, char **argv) {
  plan_args a;
  int code = parse(argc, argv, &a);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (a.check) {
    return check_plan(a.check);
  }
  if (a.model) {
    return dump_model(a.dump, a.model, (uint32_t)a.context, a.budget,
                      (uint32_t)a.buffers);
  }
  fdy_planner_options planner = {.weight_budget =
                                     a.budget ? a.budget : 4 * FDY_GIB,
                                 .buffers = (uint32_t)a.buffers,
                                 .alignment = a.alignment};
  return dump_synthetic(a.dump, a.layers, a.weight_mib, &planner);
}
