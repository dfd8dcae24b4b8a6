/* `foundry infer-bench`: end-to-end Llama inference benchmark
 * (foundry/infer_bench.h, docs/infer-bench.md). Parses the flags, checks
 * the report path before any work, opens the model and the backend, builds
 * the prompts (sequence k's from --seed + k, or the --prompt-file's) and
 * runs the benchmark. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int fdy_cmd_infer_bench(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_REPORT,
    OPT_TRACE,
    OPT_SEED,
    OPT_PROMPT_FILE,
    OPT_PROMPT_TOKENS,
    OPT_GEN_TOKENS,
    OPT_WARMUP,
    OPT_ITERATIONS,
    OPT_BATCH,
    OPT_DRAFT_MODEL,
    OPT_DRAFT_TOKENS,
    OPT_DRAFT_FIXED,
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      FDY_CLI_SESSION_OPTIONS,
      {"report", required_argument, NULL, OPT_REPORT},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"seed", required_argument, NULL, OPT_SEED},
      {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
      {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
      {"gen-tokens", required_argument, NULL, OPT_GEN_TOKENS},
      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"iterations", required_argument, NULL, OPT_ITERATIONS},
      {"batch", required_argument, NULL, OPT_BATCH},
      {"draft-model", required_argument, NULL, OPT_DRAFT_MODEL},
      {"draft-tokens", required_argument, NULL, OPT_DRAFT_TOKENS},
      {"draft-fixed", no_argument, NULL, OPT_DRAFT_FIXED},
      FDY_CLI_ENGINE_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *report = NULL, *trace = NULL;
  fdy_cli_session_flags session_flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  const char *prompt_file = NULL;
  uint64_t seed = 0, prompt_tokens = FDY_INFER_PROMPT_TOKENS;
  uint64_t gen_tokens = FDY_INFER_GEN_TOKENS, warmup = 2, iterations = 10;
  uint64_t batch = 1, draft_tokens = 4;
  const char *draft_dir = NULL;
  bool have_prompt_tokens = false, draft_flag = false, draft_fixed = false;
  fdy_error err;
  const int repeated =
      fdy_cli_check_repeats("infer-bench", argc, argv, options);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    fdy_status status = FDY_OK;
    switch (opt) {
    case OPT_MODEL:
      model_dir = optarg;
      break;
    case OPT_REPORT:
      report = optarg;
      break;
    case OPT_TRACE:
      trace = optarg;
      break;
    case OPT_SEED:
      status = fdy_cli_parse_uint("--seed", optarg, 0, UINT64_MAX, &seed, &err);
      break;
    case OPT_PROMPT_FILE:
      prompt_file = optarg;
      break;
    case OPT_PROMPT_TOKENS:
      status = fdy_cli_parse_uint("--prompt-tokens", optarg, 1, UINT32_MAX,
                                  &prompt_tokens, &err);
      have_prompt_tokens = true;
      break;
    case OPT_GEN_TOKENS:
      status = fdy_cli_parse_uint("--gen-tokens", optarg, 1, UINT32_MAX,
                                  &gen_tokens, &err);
      break;
    case OPT_WARMUP:
      status = fdy_cli_parse_uint("--warmup", optarg, 0, UINT32_MAX / 2,
                                  &warmup, &err);
      break;
    case OPT_ITERATIONS:
      status = fdy_cli_parse_uint("--iterations", optarg, 1, UINT32_MAX / 2,
                                  &iterations, &err);
      break;
    case OPT_BATCH:
      status = fdy_cli_parse_uint("--batch", optarg, 1, FDY_LLAMA_MAX_SEQUENCES,
                                  &batch, &err);
      break;
    case OPT_DRAFT_MODEL:
      draft_dir = optarg;
      break;
    case OPT_DRAFT_TOKENS:
      status =
          fdy_cli_parse_uint("--draft-tokens", optarg, 1,
                             FDY_LLAMA_MAX_DRAFT_TOKENS, &draft_tokens, &err);
      draft_flag = true;
      break;
    case OPT_DRAFT_FIXED:
      draft_fixed = draft_flag = true;
      break;
    case ':':
      return fdy_cli_usage("infer-bench", "%s needs a value", argv[optind - 1]);
    default: {
      bool handled = false;
      status =
          fdy_cli_session_flag(opt, optarg, &session_flags, &handled, &err);
      if (!handled) {
        return fdy_cli_usage("infer-bench", "unknown option '%s'",
                             argv[optind - 1]);
      }
      break;
    }
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("infer-bench", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("infer-bench", "unexpected argument '%s'",
                         argv[optind]);
  }
  if (!model_dir || !report) {
    return fdy_cli_usage("infer-bench", "--model and --report are required");
  }
  if (prompt_file && have_prompt_tokens) {
    return fdy_cli_usage("infer-bench",
                         "--prompt-file and --prompt-tokens exclude each "
                         "other");
  }
  if (draft_flag && !draft_dir) {
    return fdy_cli_usage("infer-bench",
                         "--draft-tokens and --draft-fixed need --draft-model");
  }
  if (strcmp(session_flags.backend, "cpu") != 0 && session_flags.threads) {
    return fdy_cli_usage("infer-bench", "--threads applies to the cpu backend");
  }

  fdy_infer_options o = {.model_dir = model_dir,
                         .backend_name = session_flags.backend,
                         .prompt_count = (uint32_t)prompt_tokens,
                         .prompt_file = prompt_file,
                         .seed = seed,
                         .batch = (uint32_t)batch,
                         .draft_dir = draft_dir,
                         .draft_tokens = (uint32_t)draft_tokens,
                         .draft_fixed = draft_fixed,
                         .gen_tokens = (uint32_t)gen_tokens,
                         .warmup = (uint32_t)warmup,
                         .iterations = (uint32_t)iterations,
                         .context = (uint32_t)session_flags.context,
                         .kv_dtype = session_flags.kv_dtype,
                         .weight_budget = session_flags.weight_budget,
                         .buffers = (uint32_t)session_flags.buffers,
                         .prefill_rows = (uint32_t)session_flags.prefill_rows,
                         .no_graphs = session_flags.no_graphs,
                         .serial_launch = session_flags.serial_launch,
                         .skip_packing = session_flags.skip_packing,
                         .bootstrap_resamples = 10000,
                         .report_path = report,
                         .trace_path = trace,
                         .argc = argc,
                         .argv = argv,
                         .console = stdout,
                         .progress = fdy_cli_stderr_is_tty()};
  fdy_status checked = fdy_infer_check_options(&o, &err);
  if (checked != FDY_OK) {
    return checked == FDY_ERR_INVALID_ARGUMENT
               ? fdy_cli_usage("infer-bench", "%s", err.message)
               : fdy_cli_fail(&err);
  }
  int code = FDY_EXIT_FAILURE;
  fdy_llama_model *model = NULL, *draft = NULL;
  fdy_backend *engine = NULL;
  int32_t *prompt = NULL;
  uint32_t prompt_count = 0;
  /* every report records the checkpoint's files */
  fdy_manifest checkpoint = {0};
  if (fdy_cli_check_manifest(&session_flags, model_dir, &checkpoint, &err) !=
          FDY_OK ||
      (prompt_file &&
       fdy_cli_read_ids_file(prompt_file, "--prompt-file", false, &prompt,
                             &prompt_count, &err) != FDY_OK) ||
      fdy_llama_open(model_dir, &model, &err) != FDY_OK ||
      (draft_dir && fdy_llama_open(draft_dir, &draft, &err) != FDY_OK) ||
      fdy_cli_backend_create(
          session_flags.backend, (uint32_t)session_flags.threads,
          session_flags.serial_launch, &engine, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  uint32_t vocab = fdy_llama_model_config(model)->vocab_size;
  if (draft && fdy_llama_model_config(draft)->vocab_size != vocab) {
    fdy_error_set(&err, FDY_ERR_INVALID_ARGUMENT,
                  "the draft %s has a vocabulary of %u ids, the model %u: a "
                  "draft must share the model's vocabulary",
                  draft_dir, fdy_llama_model_config(draft)->vocab_size, vocab);
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (!prompt_file) {
    prompt_count = (uint32_t)prompt_tokens;
    prompt = malloc(sizeof *prompt * prompt_count * (size_t)batch);
    if (!prompt) {
      fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      code = fdy_cli_fail(&err);
      goto cleanup;
    }
    for (uint64_t k = 0; k < batch; k++) {
      fdy_infer_prompt_ids(fdy_llama_model_config(model), seed + k,
                           prompt + k * prompt_count, prompt_count);
    }
  }
  o.model = model;
  o.draft_model = draft;
  o.checkpoint = &checkpoint;
  o.pinned_manifest = session_flags.manifest;
  o.backend = engine;
  o.prompt = prompt;
  o.prompt_count = prompt_count;
  bool written = false;
  if (fdy_infer_bench_run(&o, &written, &err) != FDY_OK) {
    fdy_cli_explain_budget(&session_flags, &err);
    code = fdy_cli_fail(&err);
    if (written) {
      fprintf(stderr,
              "foundry infer-bench: the report %s records the "
              "failure\n",
              report);
    }
    goto cleanup;
  }
  if (trace) {
    printf("trace: %s\n", trace);
  }
  printf("report: %s\n", report);
  code = FDY_EXIT_OK;

cleanup:
  fdy_llama_close(draft);
  fdy_manifest_free(&checkpoint);
  free(prompt);
  fdy_backend_destroy(engine);
  fdy_llama_close(model);
  return code;
}
