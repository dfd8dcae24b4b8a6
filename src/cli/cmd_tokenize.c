/* `foundry tokenize` and `foundry detokenize`: text to Llama 3 token ids and
 * back, with the tokenizer of a model directory or an explicit tokenizer
 * file. tokenize --bench measures the encoder's throughput instead. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "prompt.h"

void fdy_cmd_tokenize_help(FILE *out) {
  fprintf(out,
          "usage: foundry tokenize (--model DIR | --tokenizer FILE)\n"
          "                        (--text TEXT | --file PATH) [options]\n"
          "\n"
          "Prints the Llama 3 token ids of the text, comma-separated.\n"
          "--file reads raw bytes (newlines and all); bytes that are not\n"
          "UTF-8 become single-byte tokens. Special-token spellings such as\n"
          "<|eot_id|> are encoded as plain text.\n"
          "\n"
          "  --model DIR       the checkpoint's tokenizer.json (with\n"
          "                    tokenizer_config.json), else tokenizer.model\n"
          "  --tokenizer FILE  a tokenizer.json or tiktoken ranks file\n"
          "                    (overrides the model's)\n"
          "  --bos             put the beginning-of-text id first\n"
          "  --json            print {\"ids\": [...]} instead\n"
          "  --bench N         encode the text N times and print the\n"
          "                    throughput as JSON instead of the ids\n");
}

void fdy_cmd_detokenize_help(FILE *out) {
  fprintf(out,
          "usage: foundry detokenize (--model DIR | --tokenizer FILE)\n"
          "                          (--ids 1,2,3 | --file PATH)\n"
          "\n"
          "Prints the bytes of the token ids exactly, then a newline;\n"
          "special tokens print as their spelling. --file holds ids as\n"
          "'foundry tokenize' prints them (a trailing newline is allowed).\n"
          "\n"
          "  --model DIR       the checkpoint's tokenizer (as for tokenize)\n"
          "  --tokenizer FILE  a tokenizer.json or tiktoken ranks file\n"
          "  --no-newline      print the bytes alone, so that tokenize\n"
          "                    --file and detokenize round-trip a file\n");
}

/* The flags of both commands: the tokenizer and the input. */
typedef struct source_args {
  const char *model, *tokenizer, *text, *file; /* text: --text or --ids */
} source_args;

/* The source flags but the text's, which each command names its own. */
static const fdy_cli_flag source_rows[] = {
    {FDY_CLI_TEXT("model", source_args, model)},
    {FDY_CLI_TEXT("tokenizer", source_args, tokenizer)},
    {FDY_CLI_TEXT("file", source_args, file)},
    {FDY_CLI_END},
};

/* Exactly one of --model/--tokenizer and one of the inputs. */
static int check_sources(const char *command, const source_args *a,
                         const char *text_flag) {
  if (!a->model == !a->tokenizer) {
    return fdy_cli_usage(command, "give one of --model and --tokenizer");
  }
  if (!a->text == !a->file) {
    return fdy_cli_usage(command, "give one of %s and --file", text_flag);
  }
  return FDY_EXIT_OK;
}

static void print_ids(const fdy_tokens *tokens, bool json) {
  fputs(json ? "{\"ids\": [" : "", stdout);
  for (size_t i = 0; i < tokens->count; i++) {
    printf("%s%" PRId32, i ? (json ? ", " : ",") : "", tokens->ids[i]);
  }
  fputs(json ? "]}\n" : "\n", stdout);
}

static fdy_status bench(fdy_tokenizer *tok, const char *text, size_t len,
                        uint64_t repeats, fdy_error *err) {
  fdy_tokens tokens = {0};
  fdy_status s = FDY_OK;
  int64_t start = fdy_now_ns();
  for (uint64_t r = 0; s == FDY_OK && r < repeats; r++) {
    tokens.count = 0;
    s = fdy_tokenizer_encode(tok, text, len, 0, &tokens, err);
  }
  double seconds = (double)(fdy_now_ns() - start) * 1e-9;
  if (s == FDY_OK) {
    double bytes = (double)len * (double)repeats;
    printf("{\"bytes\": %zu, \"repeats\": %" PRIu64 ", \"ids\": %zu, "
           "\"seconds\": %.6f, \"mb_per_second\": %.3f}\n",
           len, repeats, tokens.count, seconds,
           seconds > 0 ? bytes / seconds / 1e6 : 0.0);
  }
  fdy_tokens_free(&tokens);
  return s;
}

/* tokenize's options, as parsed. */
typedef struct tokenize_args {
  source_args source;
  bool bos, json;
  uint64_t repeats; /* --bench; 0: encode once */
} tokenize_args;

static const fdy_cli_flag tokenize_flags[] = {
    {FDY_CLI_GROUP(source_rows,
                   FDY_CLI_AT(tokenize_args, source, source_args))},
    {FDY_CLI_TEXT("text", tokenize_args, source.text)},
    {FDY_CLI_SET("bos", tokenize_args, bos)},
    {FDY_CLI_SET("json", tokenize_args, json)},
    {FDY_CLI_U64("bench", tokenize_args, repeats, 1, UINT32_MAX)},
    {FDY_CLI_END},
};

/* The ids of text (BOS first with bos). */
static fdy_status encode(fdy_tokenizer *tok, bool bos, const char *text,
                         size_t len, fdy_tokens *tokens, fdy_error *err) {
  fdy_status s = FDY_OK;
  if (bos && fdy_tokenizer_bos(tok) < 0) {
    s = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                      "%s: the tokenizer has no beginning-of-text token",
                      fdy_tokenizer_source(tok));
  } else if (bos) {
    s = fdy_tokens_push(tokens, fdy_tokenizer_bos(tok), err);
  }
  if (s == FDY_OK) {
    s = fdy_tokenizer_encode(tok, text, len, 0, tokens, err);
  }
  return s;
}

/* The tokenizer and the text, then the ids printed (or --bench's
 * figures). */
static int tokenize_run(const tokenize_args *a) {
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  fdy_tokens tokens = {0};
  char *file = NULL;
  size_t len = a->source.text ? strlen(a->source.text) : 0;
  const char *text = a->source.text;
  fdy_status s =
      fdy_cli_open_tokenizer(a->source.model, a->source.tokenizer, &tok, &err);
  if (s == FDY_OK && a->source.file) {
    s = fdy_cli_read_file(a->source.file, "text file", &file, &len, &err);
    text = file;
  }
  if (s == FDY_OK && a->repeats > 0) {
    s = bench(tok, text, len, a->repeats, &err);
  } else if (s == FDY_OK) {
    s = encode(tok, a->bos, text, len, &tokens, &err);
    if (s == FDY_OK) {
      print_ids(&tokens, a->json);
    }
  }
  int code = s == FDY_OK ? FDY_EXIT_OK : fdy_cli_fail(&err);
  fdy_tokens_free(&tokens);
  free(file);
  fdy_tokenizer_destroy(tok);
  return code;
}

int fdy_cmd_tokenize(int argc, char **argv) {
  tokenize_args a = {.bos = false};
  int code =
      fdy_cli_parse_flags("tokenize", argc, argv, tokenize_flags, &a, NULL);
  if (code == FDY_EXIT_OK) {
    code = check_sources("tokenize", &a.source, "--text");
  }
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (a.repeats > 0 && (a.bos || a.json)) {
    return fdy_cli_usage("tokenize", "--bench takes no --bos or --json");
  }
  return tokenize_run(&a);
}

/* Ids as tokenize prints them: "1,2,3", optionally ending in whitespace;
 * empty text is no ids. */
static fdy_status parse_ids(const char *flag, char *text, int32_t **ids,
                            uint32_t *count, fdy_error *err) {
  size_t len = strlen(text);
  while (len > 0 && strchr(" \t\r\n", text[len - 1])) {
    text[--len] = '\0';
  }
  if (len == 0) {
    *ids = NULL;
    *count = 0;
    return FDY_OK;
  }
  return fdy_cli_parse_ids(flag, text, ids, count, err);
}

/* detokenize's options, as parsed. */
typedef struct detokenize_args {
  source_args source; /* text: --ids */
  bool newline;       /* off with --no-newline */
} detokenize_args;

static const fdy_cli_flag detokenize_flags[] = {
    {FDY_CLI_GROUP(source_rows,
                   FDY_CLI_AT(detokenize_args, source, source_args))},
    {FDY_CLI_TEXT("ids", detokenize_args, source.text)},
    {FDY_CLI_CLEAR("no-newline", detokenize_args, newline)},
    {FDY_CLI_END},
};

/* The ids, decoded by the tokenizer and printed. */
static int detokenize_run(const detokenize_args *a, const int32_t *ids,
                          uint32_t count) {
  fdy_error err;
  fdy_tokenizer *tok = NULL;
  char *bytes = NULL;
  size_t len = 0;
  fdy_status s =
      fdy_cli_open_tokenizer(a->source.model, a->source.tokenizer, &tok, &err);
  if (s == FDY_OK) {
    s = fdy_tokenizer_decode(tok, ids, count, &bytes, &len, &err);
  }
  if (s == FDY_OK) {
    fwrite(bytes, 1, len, stdout);
    if (a->newline) {
      putchar('\n');
    }
  }
  free(bytes);
  fdy_tokenizer_destroy(tok);
  return s == FDY_OK ? FDY_EXIT_OK : fdy_cli_fail(&err);
}

int fdy_cmd_detokenize(int argc, char **argv) {
  detokenize_args a = {.newline = true};
  int code =
      fdy_cli_parse_flags("detokenize", argc, argv, detokenize_flags, &a, NULL);
  if (code == FDY_EXIT_OK) {
    code = check_sources("detokenize", &a.source, "--ids");
  }
  if (code != FDY_EXIT_OK) {
    return code;
  }
  /* the ids: --file's, or --ids (a bad list is a usage error) */
  fdy_error err;
  char *ids_text = NULL;
  int32_t *ids = NULL;
  uint32_t count = 0;
  fdy_status s = FDY_OK;
  if (a.source.file) {
    s = fdy_cli_read_ids_file(a.source.file, a.source.file, true, &ids, &count,
                              &err);
    code = s == FDY_OK ? FDY_EXIT_OK : fdy_cli_fail(&err);
  } else if (!(ids_text = strdup(a.source.text))) {
    fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    code = fdy_cli_fail(&err);
  } else if (parse_ids("--ids", ids_text, &ids, &count, &err) != FDY_OK) {
    code = fdy_cli_usage("detokenize", "%s", err.message);
  }
  if (code == FDY_EXIT_OK) {
    code = detokenize_run(&a, ids, count);
  }
  free(ids);
  free(ids_text);
  return code;
}
