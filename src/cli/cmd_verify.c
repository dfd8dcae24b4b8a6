/* `foundry verify`: runs a reference's prompt on a Llama checkpoint through
 * the engine (a session with every prefill row's logits) and
 * compares the prompt logits and the greedy continuation with the reference
 * outputs (expected.safetensors). Prints both relative errors and the greedy
 * agreement; exits 1 when outside the tolerance of the backend. With
 * --against, compares one backend with another on a prompt from --seed
 * instead (fdy_llama_compare) and prints a row per greedy step. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/infer_bench.h"
#include "foundry/llama_session.h"

void fdy_cmd_verify_help(FILE *out) {
  fprintf(out,
          "usage: foundry verify --model DIR --reference expected.safetensors "
          "[options]\n"
          "       foundry verify --model DIR --against cpu [--backend cuda] "
          "[options]\n"
          "\n"
          "Runs the reference's prompt_ids, compares the logits at every\n"
          "prompt position and along the greedy continuation with the\n"
          "reference (relative error ||a - b|| / ||b||) and checks that the\n"
          "greedy ids agree. Exit 0 within the tolerance, 1 outside it.\n"
          "\n"
          "options:\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --tolerance X    relative error allowed (default %g on cpu,\n"
          "                   %g on cuda, whose prefill multiplies in F16)\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions (default: the model's\n"
          "                   max_position_embeddings, at most 4096)\n"
          "  --kv-dtype D     KV cache dtype: f32 (default) or f16 (with\n"
          "                   --against, on both backends)\n",
          FDY_LLAMA_CPU_TOLERANCE, FDY_LLAMA_BACKEND_TOLERANCE);
  fdy_cli_session_flags_help(out);
  fprintf(out,
          "\n"
          "--against NAME compares --backend with backend NAME (cpu or\n"
          "cuda) on a prompt of --prompt-tokens ids (default 64) from --seed\n"
          "(the infer-bench rule): the prompt's logits within --tolerance\n"
          "(default %g), then --steps greedy steps (default 16) teacher-\n"
          "forced with NAME's ids, printing per step NAME's top-2 margin,\n"
          "the largest absolute logit difference and both ids. Every step\n"
          "whose margin exceeds twice its difference must pick the same id.\n"
          "  --against-threads T  threads of a cpu --against backend\n"
          "--weight-budget and --buffers apply to --backend's session; the\n"
          "--against session keeps every weight resident.\n",
          FDY_LLAMA_BACKEND_TOLERANCE);
}

static fdy_status parse_tolerance(const char *text, double *out,
                                  fdy_error *err) {
  char *end = NULL;
  double value = text && *text ? strtod(text, &end) : NAN;
  if (!end || *end != '\0' || !isfinite(value) || value < 0.0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "--tolerance must be a finite non-negative number, "
                         "got '%s'",
                         text ? text : "");
  }
  *out = value;
  return FDY_OK;
}

/* What --against runs. */
typedef struct against_run {
  const char *model_dir, *against;
  const fdy_cli_session_flags *flags; /* of --backend's session */
  uint32_t against_threads, prompt_tokens, steps;
  uint64_t seed;
  double tolerance;
} against_run;

static void print_comparison(const against_run *r,
                             const fdy_llama_compare_result *c) {
  printf("backend %s against %s: %" PRIu32 " prompt ids (seed %" PRIu64
         "), tolerance %g\n",
         r->flags->backend, r->against, c->prompt_tokens, r->seed,
         r->tolerance);
  printf("logits relative error: %.3e (%s)\n", c->logits_relative_error,
         c->logits_ok ? "ok" : "FAILED");
  printf("step  %s-id  %s-id  margin  max-abs-diff  must-agree  agree\n",
         r->against, r->flags->backend);
  for (uint32_t k = 0; k < c->step_count; k++) {
    const fdy_llama_compare_step *s = &c->steps[k];
    printf("%4" PRIu32 "  %" PRId32 "  %" PRId32 "  %.4e  %.4e  %s  %s\n", k,
           s->reference_id, s->id, s->margin, s->max_abs_diff,
           s->must_agree ? "yes" : "no",
           s->id == s->reference_id ? "yes" : "no");
  }
  printf("largest absolute logit difference: %.4e\n", c->max_abs_diff);
  printf("greedy steps: %s\n", c->steps_ok ? "ok" : "FAILED");
  printf("verify: %s\n", c->logits_ok && c->steps_ok ? "passed" : "FAILED");
}

static int run_against(const against_run *r) {
  int code = FDY_EXIT_FAILURE;
  fdy_error err;
  fdy_llama_model *model = NULL;
  fdy_backend *engines[2] = {NULL, NULL};
  fdy_llama_session *sessions[2] = {NULL, NULL};
  int32_t *prompt = NULL;
  fdy_llama_compare_result result = {0};
  uint64_t context = r->flags->context ? r->flags->context
                                       : (uint64_t)r->prompt_tokens + r->steps;
  fdy_status st = fdy_llama_open(r->model_dir, &model, &err);
  if (st == FDY_OK && !r->flags->context &&
      context > fdy_llama_model_config(model)->max_position_embeddings) {
    context = fdy_llama_model_config(model)->max_position_embeddings;
  }
  const char *names[2] = {r->flags->backend, r->against};
  uint32_t threads[2] = {(uint32_t)r->flags->threads, r->against_threads};
  for (int i = 0; st == FDY_OK && i < 2; i++) {
    st = fdy_cli_backend_create(names[i], threads[i], r->flags->serial_launch,
                                &engines[i], &err);
    fdy_llama_session_options o = fdy_cli_session_options(r->flags, engines[i]);
    o.context = (uint32_t)context;
    o.all_logits = true;
    if (i == 1) {
      o.weight_budget = 0;
      o.buffers = 0;
    }
    if (st == FDY_OK) {
      fdy_cli_cap_prefill_rows(&o, fdy_llama_model_config(model));
      st = fdy_llama_session_create(model, &o, &sessions[i], &err);
    }
    if (st != FDY_OK) {
      fdy_cli_explain_budget(r->flags, &err);
    }
  }
  if (st == FDY_OK) {
    prompt = malloc(sizeof *prompt * r->prompt_tokens);
    if (!prompt) {
      st = fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
  }
  if (st == FDY_OK) {
    fdy_infer_prompt_ids(fdy_llama_model_config(model), r->seed, prompt,
                         r->prompt_tokens);
    st = fdy_llama_compare(sessions[0], sessions[1], prompt, r->prompt_tokens,
                           r->steps, r->tolerance, &result, &err);
  }
  if (st != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    print_comparison(r, &result);
    code = result.logits_ok && result.steps_ok ? FDY_EXIT_OK : FDY_EXIT_FAILURE;
    if (code != FDY_EXIT_OK) {
      fprintf(stderr,
              "foundry: error: %s differs from %s beyond the "
              "criteria\n",
              r->flags->backend, r->against);
    }
  }
  fdy_llama_compare_free(&result);
  free(prompt);
  for (int i = 0; i < 2; i++) {
    fdy_llama_session_destroy(sessions[i]);
    fdy_backend_destroy(engines[i]);
  }
  fdy_llama_close(model);
  return code;
}

int fdy_cmd_verify(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_REFERENCE,
    OPT_TOLERANCE,
    OPT_AGAINST,
    OPT_AGAINST_THREADS,
    OPT_PROMPT_TOKENS,
    OPT_STEPS,
    OPT_SEED
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"reference", required_argument, NULL, OPT_REFERENCE},
      FDY_CLI_SESSION_OPTIONS,
      {"tolerance", required_argument, NULL, OPT_TOLERANCE},
      FDY_CLI_ENGINE_OPTIONS,
      {"against", required_argument, NULL, OPT_AGAINST},
      {"against-threads", required_argument, NULL, OPT_AGAINST_THREADS},
      {"prompt-tokens", required_argument, NULL, OPT_PROMPT_TOKENS},
      {"steps", required_argument, NULL, OPT_STEPS},
      {"seed", required_argument, NULL, OPT_SEED},
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *reference = NULL;
  fdy_cli_session_flags session_flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  const char *against = NULL;
  double tolerance = -1.0;
  uint64_t against_threads = 0, prompt_tokens = 64;
  uint64_t steps = 16, seed = 0;
  bool compare_flag = false;
  fdy_error err;
  const int repeated = fdy_cli_check_repeats("verify", argc, argv, options);
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
    case OPT_REFERENCE:
      reference = optarg;
      break;
    case OPT_TOLERANCE:
      status = parse_tolerance(optarg, &tolerance, &err);
      break;
    case OPT_AGAINST:
      against = optarg;
      break;
    case OPT_AGAINST_THREADS:
      status = fdy_cli_parse_uint("--against-threads", optarg, 1, 256,
                                  &against_threads, &err);
      compare_flag = true;
      break;
    case OPT_PROMPT_TOKENS:
      status = fdy_cli_parse_uint("--prompt-tokens", optarg, 1, UINT32_MAX / 2,
                                  &prompt_tokens, &err);
      compare_flag = true;
      break;
    case OPT_STEPS:
      status = fdy_cli_parse_uint("--steps", optarg, 1, UINT32_MAX / 2, &steps,
                                  &err);
      compare_flag = true;
      break;
    case OPT_SEED:
      status = fdy_cli_parse_uint("--seed", optarg, 0, UINT64_MAX, &seed, &err);
      compare_flag = true;
      break;
    case ':':
      return fdy_cli_usage("verify", "%s needs a value", argv[optind - 1]);
    default: {
      bool handled = false;
      status =
          fdy_cli_session_flag(opt, optarg, &session_flags, &handled, &err);
      if (!handled) {
        return fdy_cli_usage("verify", "unknown option '%s'", argv[optind - 1]);
      }
      break;
    }
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("verify", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("verify", "unexpected argument '%s'", argv[optind]);
  }
  if (!model_dir || (reference != NULL) == (against != NULL)) {
    return fdy_cli_usage("verify",
                         "--model and one of --reference and --against are "
                         "required");
  }
  if (compare_flag && !against) {
    return fdy_cli_usage("verify", "--against-threads, --prompt-tokens, "
                                   "--steps and --seed need --against");
  }
  if (against && strcmp(against, "cpu") != 0 && strcmp(against, "cuda") != 0) {
    return fdy_cli_usage("verify", "--against must be cpu or cuda, got '%s'",
                         against);
  }
  fdy_error pin_err;
  if (fdy_cli_check_manifest(&session_flags, model_dir, NULL, &pin_err) !=
      FDY_OK) {
    return fdy_cli_fail(&pin_err);
  }
  if (against) {
    against_run r = {.model_dir = model_dir,
                     .against = against,
                     .flags = &session_flags,
                     .against_threads = (uint32_t)against_threads,
                     .prompt_tokens = (uint32_t)prompt_tokens,
                     .steps = (uint32_t)steps,
                     .seed = seed,
                     .tolerance = tolerance >= 0.0
                                      ? tolerance
                                      : FDY_LLAMA_BACKEND_TOLERANCE};
    return run_against(&r);
  }
  if (tolerance < 0.0) {
    tolerance = strcmp(session_flags.backend, "cuda") == 0
                    ? FDY_LLAMA_BACKEND_TOLERANCE
                    : FDY_LLAMA_CPU_TOLERANCE;
  }

  int code = FDY_EXIT_FAILURE;
  fdy_backend *engine = NULL;
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_verify_result result;
  if (fdy_llama_open(model_dir, &model, &err) != FDY_OK ||
      fdy_cli_backend_create(
          session_flags.backend, (uint32_t)session_flags.threads,
          session_flags.serial_launch, &engine, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  fdy_llama_session_options session_options =
      fdy_cli_session_options(&session_flags, engine);
  session_options.all_logits = true;
  fdy_cli_cap_prefill_rows(&session_options, fdy_llama_model_config(model));
  if (fdy_llama_session_create(model, &session_options, &session, &err) !=
      FDY_OK) {
    fdy_cli_explain_budget(&session_flags, &err);
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (fdy_llama_verify(session, reference, tolerance, &result, &err) !=
      FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  printf("reference: %s (%" PRIu32 " prompt tokens, %" PRIu32
         " greedy tokens)\n",
         reference, result.prompt_tokens, result.greedy_tokens);
  printf("backend: %s, tolerance %g\n", session_flags.backend, tolerance);
  printf("logits relative error: %.3e\n", result.logits_relative_error);
  printf("greedy logits relative error: %.3e\n", result.greedy_relative_error);
  printf("greedy agreement: %" PRIu32 "/%" PRIu32 "\n", result.greedy_matches,
         result.greedy_tokens);
  printf("verify: %s\n", result.passed ? "passed" : "FAILED");
  if (!result.passed) {
    fprintf(stderr, "foundry: error: outputs differ from the reference "
                    "beyond the tolerance\n");
  }
  code = result.passed ? FDY_EXIT_OK : FDY_EXIT_FAILURE;

cleanup:
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(engine);
  fdy_llama_close(model);
  return code;
}
