/* `foundry generate`: greedy Llama generation from prompt token ids or a
 * text prompt (prompt.c; with --chat through the Llama 3 chat template)
 * through the engine (a session's plan on the chosen backend). Prints the
 * generated ids, or for a text prompt the text while it is generated, then
 * the prefill and decode speeds and the device memory per class; or
 * (--json) one JSON object. Bad ids, an empty prompt and more tokens than
 * the context holds are reported before any work. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "foundry/chat.h"
#include "foundry/cpu.h"
#include "foundry/llama_session.h"
#include "prompt.h"

void fdy_cmd_generate_help(FILE *out) {
  fprintf(out,
          "usage: foundry generate --model DIR (--prompt-ids 1,2,3 | --prompt "
          "TEXT |\n"
          "                        --prompt-file PATH) --max-tokens N "
          "[options]\n"
          "\n"
          "Prefills the prompt on a Llama MLX 4-bit checkpoint, then decodes\n"
          "up to N ids greedily, stopping after an EOS id from config.json\n"
          "(and, for a text prompt, the tokenizer's EOS and <|eot_id|>).\n"
          "Prints the generated ids, or the text of a text prompt as it is\n"
          "generated, then the prefill and decode speed in tokens/s.\n"
          "\n"
          "options:\n"
          "  --prompt-ids IDS token ids, decimal, separated by commas\n"
          "  --prompt TEXT    text, encoded as BOS + its ids\n"
          "  --prompt-file PATH  the same from a file's raw bytes\n"
          "  --chat           apply the Llama 3 Instruct chat template to the\n"
          "                   text: a user message, then the assistant's\n"
          "                   header\n"
          "  --system TEXT    with --chat: a system message first\n"
          "  --tokenizer FILE a tokenizer.json or tiktoken file instead of\n"
          "                   the model directory's\n"
          "  --backend NAME   cpu (the default) or cuda\n"
          "  --threads T      cpu backend threads (default: online CPUs)\n"
          "  --context C      KV cache positions (default: the model's\n"
          "                   max_position_embeddings, at most 4096)\n"
          "  --kv-dtype D     KV cache dtype: f32 (default) or f16\n");
  fdy_cli_session_flags_help(out);
  fprintf(out, "  --ignore-eos     decode all N ids even after an EOS id\n"
               "  --json           print one JSON object instead of text\n");
}

/* What the run was: backend, threads (cpu) and context. */
typedef struct run_info {
  const char *model_dir;
  const char *backend;
  uint32_t threads; /* 0 for non-cpu backends */
  uint32_t context;
  fdy_executor_stats stats;
} run_info;

/* A JSON array of ids, or NULL when out of memory. */
static json_t *json_ids(const int32_t *ids, uint32_t count) {
  json_t *array = json_array();
  for (uint32_t i = 0; array && i < count; i++) {
    if (json_array_append_new(array, json_integer(ids[i]))) {
      json_decref(array);
      array = NULL;
    }
  }
  return array;
}

static int print_json(const run_info *run, const int32_t *prompt,
                      uint32_t prompt_count, const fdy_llama_generation *gen) {
  json_t *ids = json_ids(gen->ids, gen->count);
  json_t *prompt_ids = json_ids(prompt, prompt_count);
  const uint64_t *bytes = run->stats.class_bytes;
  json_t *memory =
      json_pack("{s:I, s:I, s:I, s:I, s:I}", "weights_resident",
                (json_int_t)bytes[FDY_BUFFER_RESIDENT], "weights_slots",
                (json_int_t)bytes[FDY_BUFFER_SLOT], "kv_cache",
                (json_int_t)bytes[FDY_BUFFER_STATE], "activations",
                (json_int_t)bytes[FDY_BUFFER_ARENA], "workspace",
                (json_int_t)run->stats.workspace_bytes);
  /* the directory as given may not be UTF-8, which jansson refuses */
  char *model = fdy_utf8_sanitize(run->model_dir);
  json_t *root = json_pack(
      "{s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:b, s:f, s:f, s:f, s:f, s:f, "
      "s:o}",
      "model", model ? model : "", "backend", run->backend, "threads",
      (json_int_t)run->threads, "context", (json_int_t)run->context,
      "prompt_tokens", (json_int_t)prompt_count, "prompt_ids", prompt_ids,
      "ids", ids, "stopped_at_eos", gen->stopped_at_eos, "setup_seconds",
      (double)run->stats.setup_ns * 1e-9, "prefill_seconds",
      gen->prefill_seconds, "prefill_tokens_per_second",
      gen->prefill_tokens_per_second, "decode_seconds", gen->decode_seconds,
      "decode_tokens_per_second", gen->decode_tokens_per_second, "device_bytes",
      memory);
  free(model);
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

static void print_text(const run_info *run, uint32_t prompt_count,
                       const fdy_llama_generation *gen, bool ids) {
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
  printf("decode: %" PRIu32 " tokens in %.3f s, %.2f tokens/s (%s",
         gen->count > 0 ? gen->count - 1 : 0, gen->decode_seconds,
         gen->decode_tokens_per_second, run->backend);
  if (run->threads > 0) {
    printf(", %" PRIu32 " threads", run->threads);
  }
  printf(")\n");
  const uint64_t *bytes = run->stats.class_bytes;
  char weights[32], kv[32], act[32];
  printf("device memory: weights %s, KV cache %s (%" PRIu32
         " positions), activations %s\n",
         fdy_format_bytes(bytes[FDY_BUFFER_RESIDENT] + bytes[FDY_BUFFER_SLOT],
                          weights, sizeof weights),
         fdy_format_bytes(bytes[FDY_BUFFER_STATE], kv, sizeof kv), run->context,
         fdy_format_bytes(bytes[FDY_BUFFER_ARENA], act, sizeof act));
  if (bytes[FDY_BUFFER_SLOT] > 0) {
    char resident[32], slots[32];
    printf(
        "weights: %s resident, %s of slots for the streamed ones\n",
        fdy_format_bytes(bytes[FDY_BUFFER_RESIDENT], resident, sizeof resident),
        fdy_format_bytes(bytes[FDY_BUFFER_SLOT], slots, sizeof slots));
  }
}

/* The prompt's ids from text (text, else the file at text_file): BOS +
 * the text, or with chat the Llama 3 template of a user message (after a
 * system message when system is not NULL) on session. */
static fdy_status text_prompt(fdy_tokenizer *tok, fdy_llama_session *session,
                              bool chat, const char *system, const char *text,
                              const char *text_file, int32_t **ids,
                              uint32_t *count, fdy_error *err) {
  if (!chat) {
    return fdy_cli_prompt_ids(tok, text, text_file, ids, count, err);
  }
  char *file = NULL;
  size_t len = text ? strlen(text) : 0;
  fdy_chat *conversation = NULL;
  fdy_tokens tokens = {0};
  fdy_chat_options options = {.system = system};
  fdy_status s = text ? FDY_OK : fdy_cli_read_file(text_file, &file, &len, err);
  if (s == FDY_OK) {
    s = fdy_chat_create(session, tok, &options, &conversation, err);
  }
  if (s == FDY_OK) {
    s = fdy_chat_prompt(conversation, text ? text : file, len, &tokens, err);
  }
  if (s == FDY_OK && tokens.count > UINT32_MAX) {
    s = fdy_error_set(err, FDY_ERR_OVERFLOW, "the prompt has %zu ids",
                      tokens.count);
  }
  if (s == FDY_OK) {
    *ids = tokens.ids;
    *count = (uint32_t)tokens.count;
    tokens = (fdy_tokens){0};
  }
  fdy_tokens_free(&tokens);
  fdy_chat_destroy(conversation);
  free(file);
  return s;
}

int fdy_cmd_generate(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_PROMPT,
    OPT_MAX,
    OPT_IGNORE_EOS,
    OPT_JSON,
    OPT_TEXT,
    OPT_TEXT_FILE,
    OPT_TOKENIZER,
    OPT_CHAT,
    OPT_SYSTEM
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"prompt-ids", required_argument, NULL, OPT_PROMPT},
      {"max-tokens", required_argument, NULL, OPT_MAX},
      FDY_CLI_SESSION_OPTIONS,
      FDY_CLI_ENGINE_OPTIONS,
      {"ignore-eos", no_argument, NULL, OPT_IGNORE_EOS},
      {"json", no_argument, NULL, OPT_JSON},
      {"prompt", required_argument, NULL, OPT_TEXT},
      {"prompt-file", required_argument, NULL, OPT_TEXT_FILE},
      {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
      {"chat", no_argument, NULL, OPT_CHAT},
      {"system", required_argument, NULL, OPT_SYSTEM},
      {NULL, 0, NULL, 0},
  };
  const char *model_dir = NULL, *prompt_text = NULL;
  const char *text = NULL, *text_file = NULL, *tokenizer_path = NULL;
  const char *system = NULL;
  uint64_t max_tokens = 0;
  fdy_cli_session_flags session_flags = FDY_CLI_SESSION_FLAGS_DEFAULT;
  bool have_max = false, ignore_eos = false, json = false, chat = false;
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
    case OPT_CHAT:
      chat = true;
      break;
    case OPT_SYSTEM:
      system = optarg;
      break;
    case ':':
      return fdy_cli_usage("generate", "%s needs a value", argv[optind - 1]);
    default: {
      bool handled = false;
      status =
          fdy_cli_session_flag(opt, optarg, &session_flags, &handled, &err);
      if (!handled) {
        return fdy_cli_usage("generate", "unknown option '%s'",
                             argv[optind - 1]);
      }
      break;
    }
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
  if (chat && prompt_text) {
    return fdy_cli_usage("generate", "--chat applies the chat template to "
                                     "text: give --prompt or --prompt-file, "
                                     "not --prompt-ids");
  }
  if (system && !chat) {
    return fdy_cli_usage("generate", "--system needs --chat");
  }
  int32_t *prompt = NULL;
  uint32_t prompt_count = 0;
  if (prompt_text && fdy_cli_parse_ids("--prompt-ids", prompt_text, &prompt,
                                       &prompt_count, &err) != FDY_OK) {
    return fdy_cli_usage("generate", "%s", err.message);
  }

  int code = FDY_EXIT_FAILURE;
  fdy_backend *engine = NULL;
  fdy_llama_model *model = NULL;
  fdy_llama_session *session = NULL;
  fdy_llama_generation gen = {0};
  fdy_tokenizer *tok = NULL;
  fdy_cli_printer printer = {0};
  int32_t stop[FDY_TOKENIZER_MAX_STOP];
  fdy_llama_generate_options generate_options = {
      .max_tokens = (uint32_t)max_tokens, .ignore_eos = ignore_eos};
  if (!prompt_text &&
      fdy_cli_open_tokenizer(model_dir, tokenizer_path, &tok, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (fdy_llama_open(model_dir, &model, &err) != FDY_OK ||
      fdy_cli_backend_create(
          session_flags.backend, (uint32_t)session_flags.threads,
          session_flags.serial_launch, &engine, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  fdy_llama_session_options session_options =
      fdy_cli_session_options(&session_flags, engine);
  session_options.ids_only = true; /* greedy: the ids are all it reads */
  if (fdy_llama_session_create(model, &session_options, &session, &err) !=
      FDY_OK) {
    fdy_cli_explain_budget(&session_flags, &err);
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (tok && text_prompt(tok, session, chat, system, text, text_file, &prompt,
                         &prompt_count, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (tok) {
    /* text ends at the tokenizer's EOS and <|eot_id|> too, printed while it
     * is generated (JSON prints ids) */
    generate_options.stop_ids = stop;
    generate_options.stop_count = fdy_tokenizer_stop_ids(tok, stop);
    if (!json &&
        fdy_cli_printer_init(&printer, tok, stdout, NULL, &err) != FDY_OK) {
      code = fdy_cli_fail(&err);
      goto cleanup;
    }
    generate_options.on_token = json ? NULL : fdy_cli_printer_token;
    generate_options.ctx = &printer;
  }
  if (fdy_llama_generate(session, prompt, prompt_count, &generate_options, &gen,
                         &err) != FDY_OK ||
      (printer.stream && fdy_cli_printer_finish(&printer, &err) != FDY_OK)) {
    code = fdy_cli_fail(&err);
    goto cleanup;
  }
  if (ferror(stdout)) {
    code = fdy_cli_finish_stdout(FDY_EXIT_OK);
    goto cleanup;
  }
  run_info run = {.model_dir = model_dir,
                  .backend = session_flags.backend,
                  .threads = fdy_cpu_backend_threads(engine),
                  .context = fdy_llama_session_context(session),
                  .stats = fdy_llama_session_stats(session)};
  if (json) {
    code = print_json(&run, prompt, prompt_count, &gen);
  } else {
    print_text(&run, prompt_count, &gen, !tok);
    code = FDY_EXIT_OK;
  }

cleanup:
  fdy_cli_printer_destroy(&printer);
  fdy_llama_generation_free(&gen);
  fdy_llama_session_destroy(session);
  fdy_backend_destroy(engine);
  fdy_llama_close(model);
  fdy_tokenizer_destroy(tok);
  free(prompt);
  return code;
}
