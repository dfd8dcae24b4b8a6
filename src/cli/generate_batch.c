/* `foundry generate --prompts-file` (generate_batch.h): reads and checks
 * every line of the prompts file (a JSON object: "ids" or a text "prompt",
 * and "max_tokens" where given; an error names the line), generates the
 * prompts by continuous batching (fdy_llama_generate_batch: a finished
 * one's slot refilled with the next) and prints one JSON line per prompt
 * in the file's order, the totals on stderr. cmd_generate.c parses the
 * flags and calls fdy_cli_generate_batch. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "foundry/cpu.h"
#include "foundry/llama_session.h"
#include "generate_batch.h"
#include "prompt.h"

/* The prompts of a prompts file, in its order (line i + 1 is prompt i). */
typedef struct prompt_list {
  fdy_llama_batch_prompt *prompts; /* [count]; each one's ids malloc'd */
  uint32_t count;
  uint64_t positions; /* the most positions one prompt needs: ids +
                         max_tokens - 1 */
  uint32_t widest;    /* the line of that prompt */
} prompt_list;

static void free_lines(char **lines, uint32_t count) {
  for (uint32_t i = 0; lines && i < count; i++) {
    free(lines[i]);
  }
  free(lines);
}

static void prompt_list_free(prompt_list *list) {
  for (uint32_t i = 0; list->prompts && i < list->count; i++) {
    free((int32_t *)list->prompts[i].ids);
  }
  free(list->prompts);
  *list = (prompt_list){0};
}

/* Fails unless every id is in the model's vocabulary. */
static fdy_status check_vocab(const int32_t *ids, uint32_t count,
                              uint32_t vocab, fdy_error *err) {
  for (uint32_t i = 0; i < count; i++) {
    if ((uint32_t)ids[i] >= vocab) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "id %" PRId32 " (item %" PRIu32
                           ") is outside the model's vocabulary (0 to "
                           "%" PRIu32 ")",
                           ids[i], i + 1, vocab - 1);
    }
  }
  return FDY_OK;
}

/* A line's "ids": a non-empty array of token ids. */
static fdy_status json_prompt_ids(const json_t *array, int32_t **out,
                                  uint32_t *count, fdy_error *err) {
  size_t n = json_is_array(array) ? json_array_size(array) : 0;
  if (n == 0 || n > UINT32_MAX) {
    return fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "\"ids\" must be an array of 1 to %" PRIu32 " token ids", UINT32_MAX);
  }
  int32_t *ids = malloc(sizeof *ids * n);
  if (!ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    const json_t *item = json_array_get(array, i);
    json_int_t v = json_is_integer(item) ? json_integer_value(item) : -1;
    if (v < 0 || v > INT32_MAX) {
      free(ids);
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "\"ids\" item %zu is not a token id (an integer "
                           "from 0 to %d)",
                           i + 1, INT32_MAX);
    }
    ids[i] = (int32_t)v;
  }
  *out = ids;
  *count = (uint32_t)n;
  return FDY_OK;
}

/* A line's keys: "ids" or "prompt", and "max_tokens" where given; any
 * other key is an error. */
static fdy_status line_keys(json_t *root, const json_t **ids,
                            const json_t **prompt, const json_t **max,
                            fdy_error *err) {
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, "ids") == 0) {
      *ids = value;
    } else if (strcmp(key, "prompt") == 0) {
      *prompt = value;
    } else if (strcmp(key, "max_tokens") == 0) {
      *max = value;
    } else {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "unknown key \"%s\" (a line has \"ids\" or "
                           "\"prompt\", and may have \"max_tokens\")",
                           key);
    }
  }
  if ((*ids != NULL) == (*prompt != NULL)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a line needs exactly one of \"ids\" and \"prompt\"");
  }
  return FDY_OK;
}

/* A line's "max_tokens" (max, NULL when absent) else default_max (0 =
 * none, an error). */
static fdy_status line_max_tokens(const json_t *max, uint64_t default_max,
                                  uint64_t *out, fdy_error *err) {
  *out = default_max;
  if (max) {
    json_int_t v = json_is_integer(max) ? json_integer_value(max) : 0;
    if (v < 1 || (uint64_t)v > UINT32_MAX) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "\"max_tokens\" must be an integer from 1 to "
                           "%" PRIu32,
                           UINT32_MAX);
    }
    *out = (uint64_t)v;
  }
  if (*out == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "no \"max_tokens\": give it on the line or "
                         "--max-tokens for every line");
  }
  return FDY_OK;
}

/* A line's ids: its "ids", or its "prompt" text through tok. */
static fdy_status line_ids(const json_t *ids, const json_t *prompt,
                           fdy_tokenizer *tok, int32_t **out, uint32_t *count,
                           fdy_error *err) {
  if (ids) {
    return json_prompt_ids(ids, out, count, err);
  }
  if (!json_is_string(prompt)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "\"prompt\" must be a string");
  }
  if (!tok) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a text \"prompt\" needs a tokenizer, and the model "
                         "directory has none (give --tokenizer FILE, or "
                         "\"ids\")");
  }
  return fdy_cli_prompt_ids(tok, json_string_value(prompt), NULL, out, count,
                            err);
}

/* One line of a prompts file: a JSON object with "ids" (token ids) or
 * "prompt" (text, BOS + its ids through tok), and optionally "max_tokens"
 * (else default_max; 0 = none). Errors do not name the line. */
static fdy_status parse_prompt_line(const char *line, size_t len,
                                    fdy_tokenizer *tok, uint32_t vocab,
                                    uint64_t default_max,
                                    fdy_llama_batch_prompt *out,
                                    fdy_error *err) {
  json_error_t jerr;
  json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
  const json_t *ids = NULL, *prompt = NULL, *max = NULL;
  int32_t *prompt_ids = NULL;
  uint32_t count = 0;
  uint64_t max_tokens = 0;
  fdy_status st = FDY_OK;
  if (!root) {
    st = fdy_error_set(err, FDY_ERR_PARSE, "%s (column %d)", jerr.text,
                       jerr.column);
  } else if (!json_is_object(root)) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "a line must be a JSON object");
  } else {
    st = line_keys(root, &ids, &prompt, &max, err);
  }
  if (st == FDY_OK) {
    st = line_max_tokens(max, default_max, &max_tokens, err);
  }
  if (st == FDY_OK) {
    st = line_ids(ids, prompt, tok, &prompt_ids, &count, err);
  }
  if (st == FDY_OK) {
    st = check_vocab(prompt_ids, count, vocab, err);
  }
  if (st == FDY_OK) {
    *out = (fdy_llama_batch_prompt){
        .ids = prompt_ids, .count = count, .max_tokens = (uint32_t)max_tokens};
    prompt_ids = NULL;
  }
  free(prompt_ids);
  json_decref(root);
  return st;
}

/* Reads the prompts file at path: one JSON object per line (a last line
 * may end without a newline); an empty line, or one of blanks, is an
 * error. Every error names the line. */
static fdy_status read_prompts(const char *path, fdy_tokenizer *tok,
                               uint32_t vocab, uint64_t default_max,
                               prompt_list *list, fdy_error *err) {
  char *text = NULL;
  size_t len = 0;
  *list = (prompt_list){0};
  fdy_status st = fdy_cli_read_file(path, "prompts file", &text, &len, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t lines = len > 0 && text[len - 1] != '\n';
  for (size_t i = 0; i < len; i++) {
    lines += text[i] == '\n';
  }
  if (lines == 0 || lines > UINT32_MAX) {
    st = fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "%s holds %s: give 1 to %" PRIu32 " lines, a JSON object each", path,
        lines ? "too many lines" : "no prompts", UINT32_MAX);
    goto cleanup;
  }
  list->prompts = calloc(lines, sizeof *list->prompts);
  if (!list->prompts) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  const char *line = text;
  for (uint32_t n = 1; n <= lines; n++) {
    const char *newline = memchr(line, '\n', len - (size_t)(line - text));
    size_t line_len =
        newline ? (size_t)(newline - line) : len - (size_t)(line - text);
    if (strspn(line, " \t\r") >= line_len) {
      st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the line is empty (each line holds one prompt)");
    } else {
      st = parse_prompt_line(line, line_len, tok, vocab, default_max,
                             &list->prompts[n - 1], err);
    }
    if (st != FDY_OK) {
      fdy_error_prefix(err, "%s line %" PRIu32, path, n);
      goto cleanup;
    }
    list->count = n;
    const fdy_llama_batch_prompt *p = &list->prompts[n - 1];
    uint64_t positions = (uint64_t)p->count + p->max_tokens - 1;
    if (positions > list->positions) {
      list->positions = positions;
      list->widest = n;
    }
    line += line_len + 1;
  }

cleanup:
  if (st != FDY_OK) {
    prompt_list_free(list);
  }
  free(text);
  return st;
}

/* The text of generated ids as a JSON string: special ids left out, bytes
 * that are not UTF-8 replaced by U+FFFD (NUL bytes kept). */
static fdy_status json_text(const fdy_tokenizer *tok, const int32_t *ids,
                            uint32_t count, json_t **out, fdy_error *err) {
  *out = NULL;
  int32_t *kept = malloc(sizeof *kept * (count ? count : 1));
  char *bytes = NULL, *utf8 = NULL;
  size_t len = 0, n = 0;
  fdy_status st =
      kept ? FDY_OK
           : fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  for (uint32_t i = 0; st == FDY_OK && i < count; i++) {
    if (ids[i] < 0 || (uint32_t)ids[i] >= fdy_tokenizer_vocab_size(tok) ||
        !fdy_tokenizer_is_special(tok, ids[i])) {
      kept[n++] = ids[i];
    }
  }
  if (st == FDY_OK) {
    st = fdy_tokenizer_decode(tok, kept, n, &bytes, &len, err);
  }
  /* each byte becomes at most 3; the segments between NULs one by one */
  if (st == FDY_OK && !(utf8 = malloc(3 * len + 1))) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  size_t used = 0;
  for (size_t at = 0; st == FDY_OK && at <= len;) {
    char *segment = fdy_utf8_sanitize(bytes + at);
    if (!segment) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    size_t segment_len = strlen(segment);
    memcpy(utf8 + used, segment, segment_len + 1);
    free(segment);
    used += segment_len;
    at += strlen(bytes + at);
    if (at < len) {
      used++; /* the NUL copied after the segment */
    }
    at++;
  }
  if (st == FDY_OK && !(*out = json_stringn(utf8, used))) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  free(utf8);
  free(bytes);
  free(kept);
  return st;
}

/* One JSON line per prompt, in order: index, ids, stopped_at_eos and with
 * a tokenizer the text; *out is a malloc'd array of gen->count malloc'd
 * strings, all made before any is printed. */
static fdy_status batch_lines(const fdy_llama_batch_generation *gen,
                              const fdy_tokenizer *tok, char ***out,
                              fdy_error *err) {
  char **lines = calloc(gen->count, sizeof *lines);
  fdy_status st =
      lines ? FDY_OK
            : fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  for (uint32_t i = 0; st == FDY_OK && i < gen->count; i++) {
    const fdy_llama_batch_sequence *seq = &gen->sequences[i];
    json_t *text = NULL;
    if (tok) {
      st = json_text(tok, seq->ids, seq->count, &text, err);
    }
    json_t *root =
        st == FDY_OK ? json_pack("{s:I, s:o, s:b}", "index", (json_int_t)i,
                                 "ids", fdy_cli_json_ids(seq->ids, seq->count),
                                 "stopped_at_eos", seq->stopped_at_eos)
                     : NULL;
    if (root && text && json_object_set(root, "text", text) != 0) {
      json_decref(root);
      root = NULL;
    }
    json_decref(text);
    lines[i] = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (st == FDY_OK && !lines[i]) {
      st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory writing JSON");
    }
  }
  if (st != FDY_OK) {
    free_lines(lines, gen->count);
    lines = NULL;
  }
  *out = lines;
  return st;
}

/* A prompts file's generation: what it holds and what it gave. */
typedef struct batch_run {
  fdy_tokenizer *tok; /* the model directory's, or --tokenizer's */
  fdy_llama_model *model;
  fdy_backend *engine;
  fdy_llama_session *session;
  prompt_list list;
  uint32_t sequences; /* at once */
  fdy_llama_batch_generation gen;
  char **lines; /* [gen.count] JSON */
} batch_run;

static void batch_run_close(batch_run *r) {
  free_lines(r->lines, r->gen.count);
  fdy_llama_batch_generation_free(&r->gen);
  prompt_list_free(&r->list);
  fdy_llama_session_destroy(r->session);
  fdy_backend_destroy(r->engine);
  fdy_llama_close(r->model);
  fdy_tokenizer_destroy(r->tok);
}

/* The checkpoint (against --manifest), the tokenizer (the model
 * directory's when it has one; an explicit one must open), the model and
 * every line read and checked; flags->context, when not given, the most
 * positions a line needs. */
static fdy_status open_batch(const fdy_cli_batch_args *a,
                             fdy_cli_session_flags *flags, batch_run *r,
                             fdy_error *err) {
  fdy_status st = fdy_cli_check_manifest(flags, a->model_dir, NULL, err);
  if (st == FDY_OK) {
    st = fdy_cli_open_tokenizer(a->model_dir, a->tokenizer_path, &r->tok, err);
    if (st == FDY_ERR_NOT_FOUND && !a->tokenizer_path) {
      st = FDY_OK;
    }
  }
  if (st == FDY_OK) {
    st = fdy_llama_open(a->model_dir, &r->model, err);
  }
  const fdy_llama_config *config =
      st == FDY_OK ? fdy_llama_model_config(r->model) : NULL;
  if (st == FDY_OK) {
    st = read_prompts(a->path, r->tok, config->vocab_size, a->max_tokens,
                      &r->list, err);
  }
  if (st != FDY_OK || flags->context != 0) {
    return st;
  }
  if (r->list.positions > config->max_position_embeddings) {
    return fdy_error_set(err, FDY_ERR_CONTEXT,
                         "%s line %" PRIu32 ": the prompt and its new ids "
                         "need %" PRIu64 " positions (every id but the last "
                         "is fed back), above the model's "
                         "max_position_embeddings %" PRIu32,
                         a->path, r->list.widest, r->list.positions,
                         config->max_position_embeddings);
  }
  flags->context = r->list.positions;
  return FDY_OK;
}

/* The session of r->sequences slots, the prompts generated by continuous
 * batching and their JSON lines. */
static fdy_status generate_batch(const fdy_cli_batch_args *a,
                                 const fdy_cli_session_flags *flags,
                                 batch_run *r, fdy_error *err) {
  int32_t stop[FDY_TOKENIZER_MAX_STOP];
  r->sequences = a->sequences ? (uint32_t)a->sequences
                 : r->list.count < FDY_CLI_BATCH_DEFAULT_SEQUENCES
                     ? r->list.count
                     : FDY_CLI_BATCH_DEFAULT_SEQUENCES;
  fdy_status st = fdy_cli_generate_session(flags, r->model, r->sequences, 0,
                                           false, &r->engine, &r->session, err);
  if (st != FDY_OK) {
    return st;
  }
  fdy_llama_batch_options options = {.ignore_eos = a->ignore_eos,
                                     .sampling = a->sampling};
  if (r->tok) {
    /* every line ends at the tokenizer's EOS and <|eot_id|> too */
    options.stop_ids = stop;
    options.stop_count = fdy_tokenizer_stop_ids(r->tok, stop);
  }
  st = fdy_llama_generate_batch(r->session, r->list.prompts, r->list.count,
                                &options, &r->gen, err);
  if (st == FDY_ERR_CONTEXT) {
    /* --context too small for a prompt: ids[0] its index */
    fdy_error_prefix(err, "%s line %" PRId64, a->path, err->ids[0] + 1);
  }
  if (st == FDY_OK) {
    st = batch_lines(&r->gen, r->tok, &r->lines, err);
  }
  return st;
}

/* The JSON lines in order on stdout, the totals on stderr. */
static void print_batch(const fdy_cli_batch_args *a, const char *backend,
                        const batch_run *r) {
  const fdy_llama_batch_generation *gen = &r->gen;
  for (uint32_t i = 0; i < gen->count; i++) {
    printf("%s\n", r->lines[i]);
  }
  uint64_t generated = 0;
  for (uint32_t i = 0; i < gen->count; i++) {
    generated += gen->sequences[i].count;
  }
  fprintf(stderr,
          "generated %" PRIu64 " ids for %" PRIu32 " prompts, %" PRIu32
          " sequences at once (%s",
          generated, r->list.count, r->sequences, backend);
  uint32_t threads = fdy_cpu_backend_threads(r->engine);
  if (threads > 0) {
    fprintf(stderr, ", %" PRIu32 " threads", threads);
  }
  fprintf(stderr,
          "): prefill %" PRIu64 " tokens (%" PRIu64
          " in chunks beside decode rows), %.3f s alone; decode %" PRIu64
          " ids in %" PRIu64 " steps of up to %" PRIu32
          " rows in %.3f s, %.2f tokens/s\n",
          gen->prefill_tokens, gen->chunked_tokens, gen->prefill_seconds,
          gen->decode_tokens, gen->decode_steps, gen->max_rows,
          gen->decode_seconds, gen->decode_tokens_per_second);
  if (a->sampling->temperature > 0.0f) {
    fdy_cli_sampling_print(stderr, a->sampling, a->random_seed, NULL);
  }
}

int fdy_cli_generate_batch(const fdy_cli_batch_args *a,
                           fdy_cli_session_flags flags) {
  batch_run r = {0};
  fdy_error err;
  int code = FDY_EXIT_OK;
  if (open_batch(a, &flags, &r, &err) != FDY_OK ||
      generate_batch(a, &flags, &r, &err) != FDY_OK) {
    code = fdy_cli_fail(&err);
  } else {
    print_batch(a, flags.backend, &r);
  }
  batch_run_close(&r);
  return code;
}
