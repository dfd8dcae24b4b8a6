/* `foundry tokenize` and `foundry detokenize`: text to Llama 3 token ids and
 * back, with the tokenizer of a model directory or an explicit tokenizer
 * file. tokenize --bench measures the encoder's throughput instead. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct source_args {
  const char *model, *tokenizer, *text, *file;
} source_args;

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

int fdy_cmd_tokenize(int argc, char **argv) {
  enum {
    OPT_MODEL = 256,
    OPT_TOKENIZER,
    OPT_TEXT,
    OPT_FILE,
    OPT_BOS,
    OPT_JSON,
    OPT_BENCH
  };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
      {"text", required_argument, NULL, OPT_TEXT},
      {"file", required_argument, NULL, OPT_FILE},
      {"bos", no_argument, NULL, OPT_BOS},
      {"json", no_argument, NULL, OPT_JSON},
      {"bench", required_argument, NULL, OPT_BENCH},
      {NULL, 0, NULL, 0},
  };
  source_args a = {0};
  bool bos = false, json = false;
  uint64_t repeats = 0;
  fdy_error err;
  const int repeated = fdy_cli_check_repeats("tokenize", argc, argv, options);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    switch (opt) {
    case OPT_MODEL:
      a.model = optarg;
      break;
    case OPT_TOKENIZER:
      a.tokenizer = optarg;
      break;
    case OPT_TEXT:
      a.text = optarg;
      break;
    case OPT_FILE:
      a.file = optarg;
      break;
    case OPT_BOS:
      bos = true;
      break;
    case OPT_JSON:
      json = true;
      break;
    case OPT_BENCH:
      if (fdy_cli_parse_uint("--bench", optarg, 1, UINT32_MAX, &repeats,
                             &err) != FDY_OK) {
        return fdy_cli_usage("tokenize", "%s", err.message);
      }
      break;
    case ':':
      return fdy_cli_usage("tokenize", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("tokenize", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("tokenize", "unexpected argument '%s'", argv[optind]);
  }
  int code = check_sources("tokenize", &a, "--text");
  if (code != FDY_EXIT_OK) {
    return code;
  }
  if (repeats > 0 && (bos || json)) {
    return fdy_cli_usage("tokenize", "--bench takes no --bos or --json");
  }
  fdy_tokenizer *tok = NULL;
  fdy_tokens tokens = {0};
  char *file = NULL;
  size_t len = a.text ? strlen(a.text) : 0;
  const char *text = a.text;
  fdy_status s = fdy_cli_open_tokenizer(a.model, a.tokenizer, &tok, &err);
  if (s == FDY_OK && a.file) {
    s = fdy_cli_read_file(a.file, "text file", &file, &len, &err);
    text = file;
  }
  if (s == FDY_OK && repeats > 0) {
    s = bench(tok, text, len, repeats, &err);
  } else if (s == FDY_OK) {
    if (bos && fdy_tokenizer_bos(tok) < 0) {
      s = fdy_error_set(&err, FDY_ERR_UNSUPPORTED,
                        "%s: the tokenizer has no beginning-of-text token",
                        fdy_tokenizer_source(tok));
    } else if (bos) {
      s = fdy_tokens_push(&tokens, fdy_tokenizer_bos(tok), &err);
    }
    if (s == FDY_OK) {
      s = fdy_tokenizer_encode(tok, text, len, 0, &tokens, &err);
    }
    if (s == FDY_OK) {
      print_ids(&tokens, json);
    }
  }
  code = s == FDY_OK ? FDY_EXIT_OK : fdy_cli_fail(&err);
  fdy_tokens_free(&tokens);
  free(file);
  fdy_tokenizer_destroy(tok);
  return code;
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

int fdy_cmd_detokenize(int argc, char **argv) {
  enum { OPT_MODEL = 256, OPT_TOKENIZER, OPT_IDS, OPT_FILE, OPT_NO_NEWLINE };
  static const struct option options[] = {
      {"model", required_argument, NULL, OPT_MODEL},
      {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
      {"ids", required_argument, NULL, OPT_IDS},
      {"file", required_argument, NULL, OPT_FILE},
      {"no-newline", no_argument, NULL, OPT_NO_NEWLINE},
      {NULL, 0, NULL, 0},
  };
  source_args a = {0};
  bool newline = true;
  fdy_error err;
  const int repeated = fdy_cli_check_repeats("detokenize", argc, argv, options);
  if (repeated != FDY_EXIT_OK) {
    return repeated;
  }
  optind = 1;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":", options, NULL)) != -1) {
    switch (opt) {
    case OPT_MODEL:
      a.model = optarg;
      break;
    case OPT_TOKENIZER:
      a.tokenizer = optarg;
      break;
    case OPT_IDS:
      a.text = optarg;
      break;
    case OPT_FILE:
      a.file = optarg;
      break;
    case OPT_NO_NEWLINE:
      newline = false;
      break;
    case ':':
      return fdy_cli_usage("detokenize", "%s needs a value", argv[optind - 1]);
    default:
      return fdy_cli_usage("detokenize", "unknown option '%s'",
                           argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return fdy_cli_usage("detokenize", "unexpected argument '%s'",
                         argv[optind]);
  }
  int code = check_sources("detokenize", &a, "--ids");
  if (code != FDY_EXIT_OK) {
    return code;
  }
  char *ids_text = NULL;
  int32_t *ids = NULL;
  uint32_t count = 0;
  fdy_tokenizer *tok = NULL;
  char *bytes = NULL;
  size_t len = 0;
  fdy_status s = FDY_OK;
  if (a.file) {
    s = fdy_cli_read_ids_file(a.file, a.file, true, &ids, &count, &err);
  } else if (!(ids_text = strdup(a.text))) {
    s = fdy_error_set(&err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  } else {
    s = parse_ids("--ids", ids_text, &ids, &count, &err);
    if (s != FDY_OK) {
      code = fdy_cli_usage("detokenize", "%s", err.message);
      goto cleanup;
    }
  }
  if (s == FDY_OK) {
    s = fdy_cli_open_tokenizer(a.model, a.tokenizer, &tok, &err);
  }
  if (s == FDY_OK) {
    s = fdy_tokenizer_decode(tok, ids, count, &bytes, &len, &err);
  }
  if (s == FDY_OK) {
    fwrite(bytes, 1, len, stdout);
    if (newline) {
      putchar('\n');
    }
  }
  code = s == FDY_OK ? FDY_EXIT_OK : fdy_cli_fail(&err);
cleanup:
  free(bytes);
  fdy_tokenizer_destroy(tok);
  free(ids);
  free(ids_text);
  return code;
}
