/* `foundry infer-bench`: end-to-end Llama inference benchmark
 * (foundry/infer_bench.h, docs/infer-bench.md). Parses the flags, checks
 * the report path before any work, opens the model and the backend, builds
 * the prompts (sequence k's from --seed + k, or the --prompt-file's) and
 * runs the benchmark. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_draft.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "foundry/infer_bench.h"
#include "foundry/speculative.h"

void fdy_cmd_infer_bench_help(FILE *out) {
  fprintf(
      out,
      "usage: foundry infer-bench --model DIR --report PATH [--trace PATH]\n"
      "                           [options]\n"
      "\n"
      "Measures Llama inference end to end with protocol %s: %u\n"
      "prompt ids from --seed, then %u greedy ids with EOS ignored;\n"
      "2 warmup and 10 measured executions (session reset + prefill +\n"
      "decode) on one session created once. With --batch B, B sequences\n"
      "(prompts from --seed to --seed + B - 1) are prefilled one after\n"
      "the other and decoded together, B rows per decode step. Prints\n"
      "the end-to-end median with a bootstrap interval, prefill and\n"
      "decode speed (per sequence and aggregate), the decode step's p50\n"
      "and p99, time to first token, device memory and the achieved\n"
      "decode bandwidth, the weights resident and streamed per decode\n"
      "step, host memory and (cuda, weights streamed) decode against\n"
      "the bound of the host-to-device ceiling, and writes a JSON\n"
      "report (%s\n"
      "version %d; never overwritten). --trace PATH writes a Chrome\n"
      "trace of one more, unmeasured execution: every command of each\n"
      "prefill and decode run on a row per plan stream (never\n"
      "overwritten).\n"
      "\n"
      "options:\n"
      "  --backend NAME      cpu (the default) or cuda\n"
      "  --threads T         cpu backend threads (default: online CPUs)\n"
      "  --seed S            prompt ids and bootstrap (default 0)\n"
      "  --prompt-file PATH  prompt ids from a file (comma-separated)\n"
      "  --prompt-tokens N   prompt ids from the seed (default %u)\n"
      "  --gen-tokens N      ids generated per sequence and execution\n"
      "                      (default %u)\n"
      "  --batch B           sequences decoded together, 1 to %u\n"
      "                      (default 1; 1 with --prompt-file)\n"
      "  --warmup N          discarded executions (default 2)\n"
      "  --iterations N      measured executions (default 10)\n"
      "  --context C         KV cache positions of each sequence\n"
      "                      (default: prompt + generated ids)\n"
      "  --kv-dtype D        KV cache dtype: f32 (default) or f16\n"
      "  --draft-model DIR   speculative decoding: DIR's model, resident\n"
      "                      on the same backend, proposes ids that the\n"
      "                      model verifies in one pass (greedy, the\n"
      "                      same ids; --batch 1); the report adds the\n"
      "                      acceptance and ids per target pass\n"
      "  --draft-tokens K    ids proposed per pass, 1 to %u (default 4;\n"
      "                      adaptive up to 2 K unless --draft-fixed)\n"
      "  --draft-fixed       keep K fixed\n",
      FDY_INFER_PROTOCOL, FDY_INFER_PROMPT_TOKENS, FDY_INFER_GEN_TOKENS,
      FDY_INFER_REPORT_FORMAT, FDY_INFER_REPORT_VERSION,
      FDY_INFER_PROMPT_TOKENS, FDY_INFER_GEN_TOKENS, FDY_LLAMA_MAX_SEQUENCES,
      FDY_LLAMA_MAX_DRAFT_TOKENS);
  fdy_cli_session_flags_help(out);
  fprintf(out,
          "\n"
          "exit status: 0 success, 1 failure (model, backend, an existing\n"
          "report or trace, an impossible weight budget), 2 usage "
          "error.\n");
}

/* The command's options, as parsed. */
typedef struct infer_bench_args {
  const char *model_dir, *report, *trace, *prompt_file;
  fdy_cli_session_flags session;
  fdy_cli_draft_flags draft;
  uint64_t seed, prompt_tokens, gen_tokens, warmup, iterations, batch;
  bool have_prompt_tokens;
} infer_bench_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("model", infer_bench_args, model_dir)},
    {FDY_CLI_SESSION_ROWS(infer_bench_args, session)},
    {FDY_CLI_TEXT("report", infer_bench_args, report)},
    {FDY_CLI_TEXT("trace", infer_bench_args, trace)},
    {FDY_CLI_U64("seed", infer_bench_args, seed, 0, UINT64_MAX)},
    {FDY_CLI_TEXT("prompt-file", infer_bench_args, prompt_file)},
    {FDY_CLI_U64("prompt-tokens", infer_bench_args, prompt_tokens, 1,
                 UINT32_MAX),
     FDY_CLI_GIVEN(infer_bench_args, have_prompt_tokens)},
    {FDY_CLI_U64("gen-tokens", infer_bench_args, gen_tokens, 1, UINT32_MAX)},
    {FDY_CLI_U64("warmup", infer_bench_args, warmup, 0, UINT32_MAX / 2)},
    {FDY_CLI_U64("iterations", infer_bench_args, iterations, 1,
                 UINT32_MAX / 2)},
    {FDY_CLI_U64("batch", infer_bench_args, batch, 1, FDY_LLAMA_MAX_SEQUENCES)},
    {FDY_CLI_DRAFT_ROWS(infer_bench_args, draft)},
    {FDY_CLI_ENGINE_ROWS(infer_bench_args, session)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, infer_bench_args *a) {
  *a = (infer_bench_args){.session = FDY_CLI_SESSION_FLAGS_DEFAULT,
                          .prompt_tokens = FDY_INFER_PROMPT_TOKENS,
                          .gen_tokens = FDY_INFER_GEN_TOKENS,
                          .warmup = 2,
                          .iterations = 10,
                          .batch = 1};
  int code = fdy_cli_parse_flags("infer-bench", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->model_dir || !a->report) {
    return fdy_cli_usage("infer-bench", "--model and --report are required");
  }
  if (a->prompt_file && a->have_prompt_tokens) {
    return fdy_cli_usage("infer-bench",
                         "--prompt-file and --prompt-tokens exclude each "
                         "other");
  }
  int orphan = fdy_cli_draft_check("infer-bench", &a->draft);
  if (orphan) {
    return orphan;
  }
  if (strcmp(a->session.backend, "cpu") != 0 && a->session.threads) {
    return fdy_cli_usage("infer-bench", "--threads applies to the cpu backend");
  }
  return FDY_EXIT_OK;
}

/* The benchmark's options of a (the model, backend and prompts are set by
 * run). */
static fdy_infer_options infer_options(const infer_bench_args *a, int argc,
                                       char **argv) {
  const fdy_cli_session_flags *f = &a->session;
  const fdy_llama_speculative_options spec =
      fdy_cli_draft_speculative(&a->draft);
  return (fdy_infer_options){.model_dir = a->model_dir,
                             .backend_name = f->backend,
                             .prompt_count = (uint32_t)a->prompt_tokens,
                             .prompt_file = a->prompt_file,
                             .seed = a->seed,
                             .batch = (uint32_t)a->batch,
                             .draft_dir = a->draft.dir,
                             .draft_tokens = spec.draft_tokens,
                             .draft_fixed = a->draft.fixed,
                             .gen_tokens = (uint32_t)a->gen_tokens,
                             .warmup = (uint32_t)a->warmup,
                             .iterations = (uint32_t)a->iterations,
                             .context = (uint32_t)f->context,
                             .kv_dtype = f->kv_dtype,
                             .weight_budget = f->weight_budget,
                             .buffers = (uint32_t)f->buffers,
                             .prefill_rows = (uint32_t)f->prefill_rows,
                             .no_graphs = f->no_graphs,
                             .serial_launch = f->serial_launch,
                             .skip_packing = f->skip_packing,
                             .bootstrap_resamples = 10000,
                             .report_path = a->report,
                             .trace_path = a->trace,
                             .argc = argc,
                             .argv = argv,
                             .console = stdout,
                             .progress = fdy_cli_stderr_is_tty()};
}

/* The prompts of the batch from the seed: sequence k's from seed + k. */
static fdy_status seed_prompts(const infer_bench_args *a,
                               const fdy_llama_model *model, int32_t **out,
                               uint32_t *count, fdy_error *err) {
  *count = (uint32_t)a->prompt_tokens;
  *out = malloc(sizeof **out * *count * (size_t)a->batch);
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint64_t k = 0; k < a->batch; k++) {
    fdy_infer_prompt_ids(fdy_llama_model_config(model), a->seed + k,
                         *out + k * *count, *count);
  }
  return FDY_OK;
}

/* The draft refused before any work when its vocabulary is not the
 * model's. */
static fdy_status check_draft(const infer_bench_args *a,
                              const fdy_llama_model *model,
                              const fdy_llama_model *draft, fdy_error *err) {
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  if (draft && fdy_llama_model_config(draft)->vocab_size != vocab) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the draft %s has a vocabulary of %u ids, the model "
                         "%u: a draft must share the model's vocabulary",
                         a->draft.dir,
                         fdy_llama_model_config(draft)->vocab_size, vocab);
  }
  return FDY_OK;
}

/* Opens the checkpoint (and its manifest, which every report records), the
 * draft and the backend, builds the prompts and runs the benchmark of o. */
static int run(const infer_bench_args *a, fdy_infer_options *o) {
  int code = FDY_EXIT_FAILURE;
  fdy_error err;
  fdy_llama_model *model = NULL, *draft = NULL;
  fdy_backend *engine = NULL;
  int32_t *prompt = NULL;
  uint32_t prompt_count = 0;
  fdy_manifest checkpoint = {0};
  const fdy_cli_session_flags *f = &a->session;
  if (fdy_cli_check_manifest(f, a->model_dir, &checkpoint, &err) != FDY_OK ||
      (a->prompt_file &&
       fdy_cli_read_ids_file(a->prompt_file, "--prompt-file", false, &prompt,
                             &prompt_count, &err) != FDY_OK) ||
      fdy_llama_open(a->model_dir, &model, &err) != FDY_OK ||
      (a->draft.dir && fdy_llama_open(a->draft.dir, &draft, &err) != FDY_OK) ||
      fdy_cli_backend_create(f->backend, (uint32_t)f->threads, f->serial_launch,
                             &engine, &err) != FDY_OK ||
      check_draft(a, model, draft, &err) != FDY_OK ||
      (!a->prompt_file &&
       seed_prompts(a, model, &prompt, &prompt_count, &err) != FDY_OK)) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  o->model = model;
  o->draft_model = draft;
  o->checkpoint = &checkpoint;
  o->pinned_manifest = f->manifest;
  o->backend = engine;
  o->prompt = prompt;
  o->prompt_count = prompt_count;
  bool written = false;
  if (fdy_infer_bench_run(o, &written, &err) != FDY_OK) {
    fdy_cli_explain_budget(f, &err);
    code = fdy_cli_fail(&err);
    if (written) {
      fprintf(stderr,
              "foundry infer-bench: the report %s records the "
              "failure\n",
              a->report);
    }
    goto cleanup;
  }
  code = FDY_EXIT_OK;

cleanup:
  fdy_llama_close(draft);
  fdy_manifest_free(&checkpoint);
  free(prompt);
  fdy_backend_destroy(engine);
  fdy_llama_close(model);
  return code;
}

/* The files written (the benchmark printed its figures). */
static void print(const infer_bench_args *a) {
  if (a->trace) {
    printf("trace: %s\n", a->trace);
  }
  printf("report: %s\n", a->report);
}

int fdy_cmd_infer_bench(int argc, char **argv) {
  infer_bench_args a;
  int code = parse(argc, argv, &a);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  fdy_infer_options o = infer_options(&a, argc, argv);
  /* the report path and the numbers checked before any work */
  fdy_error err;
  fdy_status checked = fdy_infer_check_options(&o, &err);
  if (checked != FDY_OK) {
    return checked == FDY_ERR_INVALID_ARGUMENT
               ? fdy_cli_usage("infer-bench", "%s", err.message)
               : fdy_cli_fail(&err);
  }
  code = run(&a, &o);
  if (code == FDY_EXIT_OK) {
    print(&a);
  }
  return code;
}
