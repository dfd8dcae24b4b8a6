/* `foundry generate`: greedy Llama generation from prompt token ids or a
 * text prompt (prompt.c) on the float32 CPU path. Prints the generated ids
 * (the text for a text prompt) and the prefill and decode speeds, as text
 * or (--json) one JSON object. Bad ids, an empty prompt and more tokens
 * than the context holds are reported before any work. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/llama_session.h"
#include "prompt.h"

void fdy_cmd_generate_help(FILE *out) {
  fprintf(out,
          "usage: foundry generate --model DIR (--prompt TEXT | "
          "--prompt-file PATH |\n"
          "                        --prompt-ids 1,2,3) --max-tokens N "
          "[options]\n"
          "\n"
          "Prefills the prompt on a Llama MLX 4-bit checkpoint, then\n"
          "decodes up to N ids greedily, stopping after an EOS id from\n"
          "config.json. Prints the generated ids (the text, for a text\n"
          "prompt) and the prefill and decode speed in tokens/s.\n"
          "\n"
          "options:\n"
          "  --prompt TEXT    text, encoded as BOS + its ids\n"
          "  --prompt-file PATH  the same from a file's raw bytes\n"
          "  --tokenizer FILE a tokenizer.json or tiktoken file instead of\n"
          "                   the model directory's\n"
          "  --backend NAME   cpu (the default and, for now, the only one)\n"
          "  --threads T      worker threads (default: online CPUs)\n"
          "  --context C      KV cache positions (default 1024, at most\n"
          "                   the model's max_position_embeddings)\n"
          "  --ignore-eos     decode all N ids even after an EOS id\n"
          "  --json           print one JSON object instead of text\n");
}

static int print_json(const char *model_dir, uint32_t prompt_count,
                      const fdy_llama_generation *gen, uint32_t threads,
                      uint32_t context) {
  json_t *ids = json_array();
  for (uint32_t i = 0; ids && i < gen->count; i++) {
    json_array_append_new(ids, json_integer(gen->ids[i]));
  }
  json_t *root = json_pack(
      "{s:s, s:s, s:I, s:I, s:I, s:o, s:b, s:f, s:f, s:f, s:f}", "model",
      model_dir, "backend", "cpu", "threads", (json_int_t)threads, "context",
      (json_int_t)context, "prompt_tokens", (json_int_t)prompt_count, "ids",
      ids, "stopped_at_eos", gen->stopped_at_eos, "prefill_seconds",
      gen->prefill_seconds, "prefill_tokens_per_second",
      gen->prefill_tokens_per_second, "decode_seconds", gen->decode_seconds,
      "decode_tokens_per_second", gen->decode_tokens_per_second);
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) {
    fprintf(stderr, "foundry: error: out of memory writing JSON\n");
    return FDY_EXIT_FAILURE;
  }
  printf("%s\n", text);
  free(text);
  return FDY_EXIT_OK;
}

static void print_text(uint32_t prompt_count, const fdy_llama_generation *gen,
                       uint32_t threads, bool ids) {
  if (ids) {
    printf("ids:");
    for (uint32_t i = 0; i < gen->count; i++) {
      printf("%s%" PRId32, i ? "," : " ", gen->ids[i]);
    }
    printf("\n");
  }
  printf("generated %" PRIu32 " ids%s\n", gen->count,
         gen->stopped_at_eos ? ", stopped at EOS" : "");
  printf("prefill: %" PRIu32 " tokens in %.3f s, %.2f tokens/s\n", prompt_count,
         gen->prefill_seconds, gen->prefill_tokens_per_second);
  printf("decode: %" PRIu32 " tokens in %.3f s, %.2f tokens/s (cpu, %" PRIu32
         " threads)\n",
         gen->count > 0 ? gen->count - 1 : 0, gen->decode_seconds,
         gen->decode_tokens_per_second, threads);
}

int fdy_cmd_generate(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_PROMPT,
    OPT_MAX,
    OPT_BACKEND,
    OPT_THREADS,
    OPT_CONTEXT,
    OPT_IGNORE_EOS,
    OPT_JSON,
    OPT_TEXT,
    OPT_TEXT_FILE,
    OPT_TOKENIZER
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"prompt-ids", required_argument, NULL, OPT_PROMPT},
      {"max-tokens", required_argument, NULL, OPT_MAX},
      {"backend", required_argument, NULL, OPT_BACKEND},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
      {"json", no_argument, NULL, OPT_JSON},
      {"prompt", required_argument, NULL, OPT_TEXT},
      {"prompt-file", required_argument, NULL, OPT_TEXT_FILE},
      {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *prompt_text = NULL, *backend = "cpu";
  const char *text = NULL, *text_file = NULL, *tokenizer_path = NULL;
  uint64_t max_tokens = 0, threads = 0, context = 0;
  bool have_max = false, ignore_eos = false, json = false;
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
    case OPT_PROMPT:
      prompt_text = optarg;
      break;
    case OPT_MAX:
      status = fdy_cli_parse_uint("--max-tokens", optarg, 1, UINT32_MAX,
                                  &max_tokens, &err);
      have_max = true;
      break;
    case OPT_BACKEND:
      backend = optarg;
      break;
    case OPT_THREADS:
      status = fdy_cli_parse_uint("--threads", optarg, 1, 256, &threads, &err);
      break;
    case OPT_CONTEXT:
      status = fdy_cli_parse_uint("--context", optarg, 1, UINT32_MAX, &context,
                                  &err);
      break;
    case OPT_IGNORE_EOS:
      ignore_eos = true;
      break;
    case OPT_JSON:
      json = true;
      break;
    case OPT_TEXT:
      text = optarg;
      break;
    case OPT_TEXT_FILE:
      text_file = optarg;
      break;
    case OPT_TOKENIZER:
      tokenizer_path = optarg;
      break;
    case ':':
      return fdy_cli_usage("generate", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("generate", "unknown option '%s'", argv[optind - 1]);
    }
    if (status != FDY_OK) {
      return fdy_cli_usage("generate", "%s", err.message);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("generate", "unexpected argument '%s'", argv[optind]);
  }
  if (!model_dir || !have_max ||
      (prompt_text != NULL) + (text != NULL) + (text_file != NULL) != 1) {
    return fdy_cli_usage("generate", "--model, --max-tokens and one of "
                                     "--prompt, --prompt-file and --prompt-ids "
                                     "are required");
  }
  if (strcmp(backend, "cpu") != 0) {
    return fdy_cli_usage("generate", "--backend '%s' is not supported; use cpu",
                         backend);
  }
  int32_t *prompt = NULL;
  uint32_t prompt_count = 0;
  if (prompt_text && fdy_cli_parse_ids("--prompt-ids", prompt_text, &prompt,
                                       &prompt_count, &err) != FDY_OK) {
    return fdy_cli_usage("generate", "%s", err.message);
  }

  int code = FDY_EXIT_FAILURE;
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_generation gen = {0};
  fdy_llama_session_options session_options = {(uint32_t)context,
                                               (uint32_t)threads};
  fdy_tokenizer *tok = NULL;
  if (!prompt_text && (fdy_cli_open_tokenizer(model_dir, tokenizer_path, &tok,
                                              &err) != FDY_OK ||
                       fdy_cli_prompt_ids(tok, text, text_file, &prompt,
                                          &prompt_count, &err) != FDY_OK)) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (fdy_llama_open(model_dir, &model, &err) != FDY_OK ||
      fdy_llama_session_create(model, &session_options, &session, &err) !=
          FDY_OK ||
      fdy_llama_generate(session, prompt, prompt_count, (uint32_t)max_tokens,
                         ignore_eos, &gen, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  uint32_t used_threads = fdy_llama_session_threads(session);
  uint32_t used_context = fdy_llama_session_context(session);
  if (json) {
    code =
        print_json(model_dir, prompt_count, &gen, used_threads, used_context);
  } else if (tok && fdy_cli_print_generated(tok, gen.ids, gen.count, stdout,
                                            &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    print_text(prompt_count, &gen, used_threads, !tok);
    code = fdy_cli_finish_stdout();
  }

cleanup:
  fdy_llama_generation_free(&gen);
  fdy_llama_session_destroy(session);
  fdy_llama_close(model);
  fdy_tokenizer_destroy(tok);
  free(prompt);
  return code;
}
