/* `foundry verify`: runs a reference's prompt on a Llama checkpoint through
 * the engine (a session with every prefill row's logits) and
 * compares the prompt logits and the greedy continuation with the reference
 * outputs (expected.safetensors). Prints both relative errors and the greedy
 * agreement; exits 1 when outside the tolerance of the backend. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/llama_session.h"

void fdy_cmd_verify_help(FILE *out) {
  fprintf(out,
          "usage: foundry verify --model DIR --reference expected.safetensors "
          "[options]\n"
          "\n"
          "Runs the reference's prompt_ids, compares the logits at every\n"
          "prompt position and along the greedy continuation with the\n"
          "reference (relative error ||a - b|| / ||b||) and checks that the\n"
          "greedy ids agree. Exit 0 within the tolerance, 1 outside it.\n"
          "\n"
          "options:\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --tolerance X    relative error allowed (default %g)\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions (default: the model's\n"
          "                   max_position_embeddings, at most 4096)\n",
          FDY_LLAMA_CPU_TOLERANCE);
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

int fdy_cmd_verify(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_REFERENCE,
    OPT_BACKEND,
    OPT_TOLERANCE,
    OPT_THREADS,
    OPT_CONTEXT
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"reference", required_argument, NULL, OPT_REFERENCE},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"tolerance", required_argument, NULL, OPT_TOLERANCE},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *reference = NULL, *backend = "cpu";
  double tolerance = FDY_LLAMA_CPU_TOLERANCE;
  uint64_t threads = 0, context = 0;
  fdy_error err;
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
    case OPT_BACKEND:
      backend = optarg;
      break;
    case OPT_TOLERANCE:
      status = parse_tolerance(optarg, &tolerance, &err);
      break;
    case OPT_THREADS:
      status = fdy_cli_parse_uint("--threads", optarg, 1, 256, &threads, &err);
      break;
    case OPT_CONTEXT:
      status = fdy_cli_parse_uint("--context", optarg, 1, UINT32_MAX, &context,
                                  &err);
      break;
    case ':':
      return fdy_cli_usage("verify", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("verify", "unknown option '%s'", argv[optind - 1]);
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("verify", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("verify", "unexpected argument '%s'", argv[optind]);
  }
  if (!model_dir || !reference) {
    return fdy_cli_usage("verify", "--model and --reference are required");
  }
  if (strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0) {
    return fdy_cli_usage("verify", "--backend must be cpu or cuda, got '%s'",
                         backend);
  }

  int code = FDY_EXIT_FAILURE;
  fdy_backend *engine = NULL;
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_verify_result result;
  fdy_llama_session_options session_options = {.context = (uint32_t)context,
                                               .all_logits = true};
  if (fdy_llama_open(model_dir, &model, &err) != FDY_OK ||
      fdy_cli_backend_create(backend, (uint32_t)threads, &engine, &err) !=
          FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  session_options.backend = engine;
  if (fdy_llama_session_create(model, &session_options, &session, &err) !=
          FDY_OK ||
      fdy_llama_verify(session, reference, tolerance, &result, &err) !=
          FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  printf("reference: %s (%" PRIu32 " prompt tokens, %" PRIu32
         " greedy tokens)\n",
         reference, result.prompt_tokens, result.greedy_tokens);
  printf("backend: %s, tolerance %g\n", backend, tolerance);
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
