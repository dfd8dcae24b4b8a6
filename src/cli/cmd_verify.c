/* `foundry verify`: runs a reference's prompt on a Llama checkpoint through
 * the engine (a session with every prefill row's logits) and
 * compares the prompt logits and the greedy continuation with the reference
 * outputs (expected.safetensors). Prints both relative errors and the greedy
 * agreement; exits 1 when outside the tolerance of the backend. With
 * --against, compares one backend with another on a prompt from --seed
 * instead (fdy_llama_compare) and prints a row per greedy step. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
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

/* --tolerance: a finite non-negative number into the double at value. */
static fdy_status parse_tolerance(const char *flag, const char *text,
                                  void *value, fdy_error *err) {
  char *end = NULL;
  double number = text && *text ? strtod(text, &end) : NAN;
  if (!end || *end != '\0' || !isfinite(number) || number < 0.0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s must be a finite non-negative number, got '%s'",
                         flag, text ? text : "");
  }
  *(double *)value = number;
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

/* The command's options, as parsed. */
typedef struct verify_args {
  const char *model_dir, *reference, *against;
  fdy_cli_session_flags session;
  double tolerance; /* < 0: the backend's default */
  uint64_t against_threads, prompt_tokens, steps, seed;
  bool compare_flag; /* a flag of --against given */
} verify_args;

static const fdy_cli_flag flags[] = {
    {FDY_CLI_TEXT("model", verify_args, model_dir)},
    {FDY_CLI_TEXT("reference", verify_args, reference)},
    {FDY_CLI_SESSION_ROWS(verify_args, session)},
    {FDY_CLI_PARSE("tolerance", verify_args, tolerance, parse_tolerance)},
    {FDY_CLI_ENGINE_ROWS(verify_args, session)},
    {FDY_CLI_TEXT("against", verify_args, against)},
    {FDY_CLI_U64("against-threads", verify_args, against_threads, 1, 256),
     FDY_CLI_GIVEN(verify_args, compare_flag)},
    {FDY_CLI_U64("prompt-tokens", verify_args, prompt_tokens, 1,
                 UINT32_MAX / 2),
     FDY_CLI_GIVEN(verify_args, compare_flag)},
    {FDY_CLI_U64("steps", verify_args, steps, 1, UINT32_MAX / 2),
     FDY_CLI_GIVEN(verify_args, compare_flag)},
    {FDY_CLI_U64("seed", verify_args, seed, 0, UINT64_MAX),
     FDY_CLI_GIVEN(verify_args, compare_flag)},
    {FDY_CLI_END},
};

/* The flags into *a, and the checks between them: FDY_EXIT_OK or the
 * usage error printed. */
static int parse(int argc, char **argv, verify_args *a) {
  *a = (verify_args){.session = FDY_CLI_SESSION_FLAGS_DEFAULT,
                     .tolerance = -1.0,
                     .prompt_tokens = 64,
                     .steps = 16};
  int code = fdy_cli_parse_flags("verify", argc, argv, flags, a, NULL);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (!a->model_dir || (a->reference != NULL) == (a->against != NULL)) {
    return fdy_cli_usage("verify",
                         "--model and one of --reference and --against are "
                         "required");
  }
  if (a->compare_flag && !a->against) {
    return fdy_cli_usage("verify", "--against-threads, --prompt-tokens, "
                                   "--steps and --seed need --against");
  }
  if (a->against && strcmp(a->against, "cpu") != 0 &&
      strcmp(a->against, "cuda") != 0) {
    return fdy_cli_usage("verify", "--against must be cpu or cuda, got '%s'",
                         a->against);
  }
  return FDY_EXIT_OK;
}

static void print_verify(const char *reference, const char *backend,
                         double tolerance, const fdy_llama_verify_result *r) {
  printf("reference: %s (%" PRIu32 " prompt tokens, %" PRIu32
         " greedy tokens)\n",
         reference, r->prompt_tokens, r->greedy_tokens);
  printf("backend: %s, tolerance %g\n", backend, tolerance);
  printf("logits relative error: %.3e\n", r->logits_relative_error);
  printf("greedy logits relative error: %.3e\n", r->greedy_relative_error);
  printf("greedy agreement: %" PRIu32 "/%" PRIu32 "\n", r->greedy_matches,
         r->greedy_tokens);
  printf("verify: %s\n", r->passed ? "passed" : "FAILED");
  if (!r->passed) {
    fprintf(stderr, "foundry: error: outputs differ from the reference "
                    "beyond the tolerance\n");
  }
}

/* --reference: the reference's prompt through one session with every
 * prefill row's logits, compared within tolerance. */
static int run_reference(const verify_args *a, double tolerance) {
  int code = FDY_EXIT_FAILURE;
  fdy_error err;
  fdy_backend *engine = NULL;
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_verify_result result;
  const fdy_cli_session_flags *f = &a->session;
  if (fdy_llama_open(a->model_dir, &model, &err) != FDY_OK ||
      fdy_cli_backend_create(f->backend, (uint32_t)f->threads, f->serial_launch,
                             &engine, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  fdy_llama_session_options session_options =
      fdy_cli_session_options(f, engine);
  session_options.all_logits = true;
  fdy_cli_cap_prefill_rows(&session_options, fdy_llama_model_config(model));
  if (fdy_llama_session_create(model, &session_options, &session, &err) !=
      FDY_OK) {
    fdy_cli_explain_budget(f, &err);
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (fdy_llama_verify(session, a->reference, tolerance, &result, &err) !=
      FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  print_verify(a->reference, f->backend, tolerance, &result);
  code = result.passed ? FDY_EXIT_OK : FDY_EXIT_FAILURE;

cleanup:
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(engine);
  fdy_llama_close(model);
  return code;
}

int fdy_cmd_verify(int argc, char **argv) {
  verify_args a;
  int code = parse(argc, argv, &a);
  if (code != FDY_EXIT_OK) {
    return code;
  }
  fdy_error pin_err;
  if (fdy_cli_check_manifest(&a.session, a.model_dir, NULL, &pin_err) !=
      FDY_OK) {
    return fdy_cli_fail(&pin_err);
  }
  if (a.against) {
    against_run r = {.model_dir = a.model_dir,
                     .against = a.against,
                     .flags = &a.session,
                     .against_threads = (uint32_t)a.against_threads,
                     .prompt_tokens = (uint32_t)a.prompt_tokens,
                     .steps = (uint32_t)a.steps,
                     .seed = a.seed,
                     .tolerance = a.tolerance >= 0.0
                                      ? a.tolerance
                                      : FDY_LLAMA_BACKEND_TOLERANCE};
    return run_against(&r);
  }
  double tolerance = a.tolerance;
  if (tolerance < 0.0) {
    tolerance = strcmp(a.session.backend, "cuda") == 0
                    ? FDY_LLAMA_BACKEND_TOLERANCE
                    : FDY_LLAMA_CPU_TOLERANCE;
  }
  return run_reference(&a, tolerance);
}
