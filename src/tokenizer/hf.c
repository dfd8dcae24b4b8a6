/* Hugging Face tokenizer files as MLX checkpoints ship them:
 * tokenizer.json (a ByteLevel BPE: model.vocab and model.merges in the
 * GPT-2 byte-to-character alphabet, added_tokens, a Split-regex +
 * ByteLevel pre-tokenizer, a ByteLevel decoder) and tokenizer_config.json
 * (bos_token, eos_token, added_tokens_decoder, chat_template). Strict:
 * every field read is checked, and errors name the file and the entry. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"
#include "tokenizer_internal.h"

typedef struct hf_file {
  const char *path;
  fdy_error *err;
} hf_file;

static fdy_status entry_error(const hf_file *f, fdy_status kind,
                              const char *entry, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "PATH: entry 'ENTRY' MESSAGE"; err->name = the entry. */
static fdy_status entry_error(const hf_file *f, fdy_status kind,
                              const char *entry, const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  fdy_error_set(f->err, kind, "%s: entry '%s' %s", f->path, entry, message);
  if (f->err) {
    snprintf(f->err->name, sizeof f->err->name, "%s", entry);
  }
  return kind;
}

static fdy_status load_json(const hf_file *f, json_t **out) {
  char *text = NULL;
  size_t len = 0;
  *out = NULL;
  fdy_status status = tok_read_file(f->path, &text, &len, f->err);
  if (status == FDY_OK && fdy_json_check_text(text, len, f->err) != FDY_OK) {
    fdy_error_prefix(f->err, "%s", f->path);
    if (f->err) {
      snprintf(f->err->name, sizeof f->err->name, "%s", f->path);
    }
    status = FDY_ERR_PARSE;
  }
  if (status != FDY_OK) {
    free(text);
    return status;
  }
  /* A UTF-8 byte-order mark, which some editors write, is not JSON text
   * (RFC 8259 lets a parser ignore it): skipped, as Python's utf-8-sig. */
  const size_t bom = len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
  json_error_t jerr;
  *out = json_loadb(text + bom, len - bom, JSON_REJECT_DUPLICATES, &jerr);
  free(text);
  if (!*out) {
    fdy_error_set(f->err, FDY_ERR_PARSE,
                  "%s: not valid JSON (line %d, column %d): %s", f->path,
                  jerr.line, jerr.column, jerr.text);
    if (f->err) {
      f->err->line = jerr.line;
      f->err->column = jerr.column;
      snprintf(f->err->name, sizeof f->err->name, "%s", f->path);
    }
    return FDY_ERR_PARSE;
  }
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return entry_error(f, FDY_ERR_SCHEMA, "(root)", "must be an object");
  }
  return FDY_OK;
}

/* ---- the GPT-2 byte-level alphabet ----------------------------------- */

/* Byte b is written as character b when printable (33-126, 161-172,
 * 174-255), else as 256 + its index among the others. */
#define ALPHABET_SIZE 324

static void byte_alphabet(int16_t to_byte[ALPHABET_SIZE]) {
  int next = 256;
  for (int c = 0; c < ALPHABET_SIZE; c++) {
    to_byte[c] = -1;
  }
  for (int b = 0; b < 256; b++) {
    bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    to_byte[printable ? b : next++] = (int16_t)b;
  }
}

/* Decodes a token written in the byte-level alphabet (valid UTF-8, as
 * jansson guarantees) into out (room for strlen(s) bytes). False when a
 * character is outside the alphabet. */
static bool from_alphabet(const int16_t to_byte[ALPHABET_SIZE], const char *s,
                          size_t len, char *out, size_t *n) {
  size_t at = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < len) {
      cp = (uint32_t)(c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F);
      i += 2;
    } else {
      return false; /* 3- and 4-byte characters are all outside */
    }
    if (cp >= ALPHABET_SIZE || to_byte[cp] < 0) {
      return false;
    }
    out[at++] = (char)to_byte[cp];
  }
  *n = at;
  return true;
}

/* ---- tokenizer.json --------------------------------------------------- */

/* A field that must be absent or null, or have the one accepted value
 * (accept may be NULL: only absent/null). */
static fdy_status expect_value(const hf_file *f, json_t *obj, const char *key,
                               const char *entry, json_t *accept) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v) || (accept && json_equal(v, accept))) {
    return FDY_OK;
  }
  char *shown = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
  fdy_status s = entry_error(
      f, FDY_ERR_UNSUPPORTED, entry, "is %.64s; Foundry supports only %s",
      shown ? shown : "unprintable", accept ? "null or that default" : "null");
  free(shown);
  return s;
}

static fdy_status check_model(const hf_file *f, json_t *model,
                              bool *ignore_merges) {
  if (!json_is_object(model)) {
    return entry_error(f, FDY_ERR_SCHEMA, "model", "must be an object");
  }
  json_t *type = json_object_get(model, "type");
  if (!json_is_string(type)) {
    return entry_error(f, FDY_ERR_SCHEMA, "model.type", "must be a string");
  }
  if (strcmp(json_string_value(type), "BPE") != 0) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "model.type",
                       "is '%s'; Foundry reads only BPE tokenizers",
                       json_string_value(type));
  }
  json_t *empty = json_string("");
  json_t *no = json_false();
  fdy_status s = FDY_OK;
  if (!empty || !no) {
    s = fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "dropout", "model.dropout", NULL);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "unk_token", "model.unk_token", NULL);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "continuing_subword_prefix",
                     "model.continuing_subword_prefix", empty);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "end_of_word_suffix", "model.end_of_word_suffix",
                     empty);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "byte_fallback", "model.byte_fallback", no);
  }
  json_decref(empty);
  json_decref(no);
  if (s != FDY_OK) {
    return s;
  }
  json_t *ignore = json_object_get(model, "ignore_merges");
  if (ignore && !json_is_boolean(ignore)) {
    return entry_error(f, FDY_ERR_SCHEMA, "model.ignore_merges",
                       "must be true or false");
  }
  *ignore_merges = ignore && json_is_true(ignore);
  return FDY_OK;
}

/* The pre-tokenizer must be Sequence[Split(Regex, Isolated), ByteLevel
 * without prefix space or its own regex]; *pattern is the Split regex. */
static fdy_status check_pipeline(const hf_file *f, json_t *root,
                                 const char **pattern) {
  fdy_status s = expect_value(f, root, "normalizer", "normalizer", NULL);
  if (s != FDY_OK) {
    return s;
  }
  json_t *decoder = json_object_get(root, "decoder");
  json_t *dtype = json_object_get(decoder, "type");
  if (decoder && !json_is_null(decoder) &&
      !(json_is_string(dtype) &&
        strcmp(json_string_value(dtype), "ByteLevel") == 0)) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "decoder", "must be ByteLevel");
  }
  json_t *pre = json_object_get(root, "pre_tokenizer");
  const char *type = NULL, *split_type = NULL, *behavior = NULL, *regex = NULL,
             *bl_type = NULL;
  json_t *split = NULL, *bytelevel = NULL;
  int invert = 0, prefix = 0, use_regex = 0;
  json_error_t jerr;
  if (json_unpack_ex(pre, &jerr, 0, "{s:s, s:[oo!]}", "type", &type,
                     "pretokenizers", &split, &bytelevel) != 0 ||
      strcmp(type, "Sequence") != 0) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "pre_tokenizer",
                       "must be a Sequence of a Split regex and ByteLevel "
                       "(as for Llama 3)");
  }
  if (json_unpack_ex(split, &jerr, 0, "{s:s, s:{s:s}, s:s, s:b}", "type",
                     &split_type, "pattern", "Regex", &regex, "behavior",
                     &behavior, "invert", &invert) != 0 ||
      strcmp(split_type, "Split") != 0 || strcmp(behavior, "Isolated") != 0 ||
      invert) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[0]",
                       "must be a Split with a Regex pattern, behavior "
                       "Isolated and invert false");
  }
  if (json_unpack_ex(bytelevel, &jerr, 0, "{s:s, s:b, s:b}", "type", &bl_type,
                     "add_prefix_space", &prefix, "use_regex",
                     &use_regex) != 0 ||
      strcmp(bl_type, "ByteLevel") != 0 || prefix || use_regex) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "pre_tokenizer.pretokenizers[1]",
                       "must be ByteLevel with add_prefix_space and "
                       "use_regex false");
  }
  *pattern = regex;
  return FDY_OK;
}

/* Decodes one vocab or merge token into buf; *n bytes. */
static fdy_status token_text(const hf_file *f, const int16_t *to_byte,
                             json_t *v, const char *entry, char *buf,
                             size_t *n) {
  if (!json_is_string(v)) {
    return entry_error(f, FDY_ERR_SCHEMA, entry, "must be a string");
  }
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0 || !from_alphabet(to_byte, s, len, buf, n)) {
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "'%.64s' is not a token in the byte-level alphabet", s);
  }
  return FDY_OK;
}

static fdy_status define_error(const hf_file *f, const fdy_tokenizer *tok,
                               tok_define_result r, const char *entry,
                               json_int_t id, int32_t other) {
  switch (r) {
  case TOK_DUPLICATE_ID:
    return entry_error(f, FDY_ERR_SCHEMA, entry, "reuses id %lld",
                       (long long)id);
  case TOK_DUPLICATE_BYTES:
    return entry_error(f, FDY_ERR_SCHEMA, entry, "has the same bytes as id %d",
                       other);
  case TOK_ID_RANGE:
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "id %lld is out of range: the file has %u tokens, so "
                       "ids are 0 to %u (one is missing or wrong)",
                       (long long)id, tok->capacity, tok->capacity - 1);
  case TOK_NO_MEMORY:
    return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  case TOK_TOO_LARGE:
  case TOK_DEFINED:
    break;
  }
  return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                     "does not fit: the tokens pass 4 GiB");
}

static fdy_status read_id(const hf_file *f, json_t *v, const char *entry,
                          json_int_t *id) {
  if (!json_is_integer(v) || json_integer_value(v) < 0 ||
      json_integer_value(v) >= INT32_MAX) {
    return entry_error(f, FDY_ERR_SCHEMA, entry, "must be an id from 0 to %d",
                       INT32_MAX - 1);
  }
  *id = json_integer_value(v);
  return FDY_OK;
}

static fdy_status read_vocab(const hf_file *f, fdy_tokenizer *tok,
                             const int16_t *to_byte, json_t *vocab, char *buf) {
  const char *key;
  json_t *v;
  json_object_foreach(vocab, key, v) {
    char entry[FDY_ERROR_NAME_MAX];
    snprintf(entry, sizeof entry, "model.vocab[\"%s\"]", key);
    json_int_t id = 0;
    size_t n = 0;
    json_t *name = json_string(key);
    fdy_status s =
        name ? token_text(f, to_byte, name, entry, buf, &n)
             : fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    json_decref(name);
    if (s == FDY_OK) {
      s = read_id(f, v, entry, &id);
    }
    if (s != FDY_OK) {
      return s;
    }
    int32_t other = -1;
    tok_define_result r = tok_define(tok, (uint32_t)id, buf, n, false, &other);
    if (r != TOK_DEFINED) {
      return define_error(f, tok, r, entry, id, other);
    }
  }
  return FDY_OK;
}

static fdy_status read_added(const hf_file *f, fdy_tokenizer *tok,
                             json_t *added) {
  size_t i;
  json_t *item;
  json_array_foreach(added, i, item) {
    char entry[64];
    snprintf(entry, sizeof entry, "added_tokens[%zu]", i);
    json_t *content = json_object_get(item, "content");
    json_t *special = json_object_get(item, "special");
    json_int_t id = 0;
    fdy_status s = read_id(f, json_object_get(item, "id"), entry, &id);
    if (s != FDY_OK) {
      return s;
    }
    if (!json_is_string(content) || json_string_length(content) == 0) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "content must be a non-empty string");
    }
    if (!json_is_boolean(special)) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "special must be true or false");
    }
    if (!json_is_true(special)) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                         "is not special; Foundry supports only special "
                         "added tokens");
    }
    static const char *const flags[] = {"lstrip", "rstrip", "single_word"};
    for (size_t k = 0; k < 3; k++) {
      json_t *flag = json_object_get(item, flags[k]);
      if (flag && !json_is_false(flag)) {
        return entry_error(f, FDY_ERR_UNSUPPORTED, entry, "%s must be false",
                           flags[k]);
      }
    }
    int32_t other = -1;
    tok_define_result r =
        tok_define(tok, (uint32_t)id, json_string_value(content),
                   json_string_length(content), true, &other);
    if (r != TOK_DEFINED) {
      return define_error(f, tok, r, entry, id, other);
    }
  }
  return FDY_OK;
}

/* Merge k makes its token's rank k; tiktoken-style merging needs every
 * merge of one token to be adjacent in the list (TikTokenConverter lists
 * every split of a token together, in the token's rank order). */
static fdy_status read_merges(const hf_file *f, fdy_tokenizer *tok,
                              const int16_t *to_byte, json_t *merges,
                              char *buf) {
  size_t k;
  json_t *item;
  int32_t last = -1;
  json_array_foreach(merges, k, item) {
    char entry[64];
    snprintf(entry, sizeof entry, "model.merges[%zu]", k);
    json_t *left = NULL, *right = NULL, *pair = NULL;
    if (json_is_string(item)) {
      const char *s = json_string_value(item);
      const char *space = strchr(s, ' ');
      if (!space || strchr(space + 1, ' ')) {
        return entry_error(f, FDY_ERR_SCHEMA, entry,
                           "'%.64s' must be two tokens and one space", s);
      }
      pair = json_pack("[s#s]", s, (int)(space - s), space + 1);
      if (!pair) {
        return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      }
      left = json_array_get(pair, 0);
      right = json_array_get(pair, 1);
    } else if (json_is_array(item) && json_array_size(item) == 2) {
      left = json_array_get(item, 0);
      right = json_array_get(item, 1);
    } else {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "must be \"A B\" or [\"A\", \"B\"]");
    }
    size_t a = 0, b = 0;
    fdy_status s = token_text(f, to_byte, left, entry, buf, &a);
    if (s == FDY_OK) {
      s = token_text(f, to_byte, right, entry, buf + a, &b);
    }
    json_decref(pair);
    if (s != FDY_OK) {
      return s;
    }
    if (tok_lookup(tok, buf, a) < 0 || tok_lookup(tok, buf + a, b) < 0) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "merges a token that is not in model.vocab");
    }
    int32_t id = tok_lookup(tok, buf, a + b);
    if (id < 0) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "makes a token that is not in model.vocab");
    }
    if (tok->tokens[id].rank == TOK_NO_RANK) {
      tok->tokens[id].rank = (uint32_t)k;
    } else if (id != last) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                         "makes id %d, which an earlier, not adjacent merge "
                         "(model.merges[%u]) makes too; Foundry merges by "
                         "the rank of the merged token",
                         id, tok->tokens[id].rank);
    }
    last = id;
  }
  return FDY_OK;
}

/* ---- tokenizer_config.json -------------------------------------------- */

/* bos_token / eos_token: a string, {"content": string}, or absent/null. */
static fdy_status config_token(const hf_file *f, const fdy_tokenizer *tok,
                               json_t *root, const char *key, int32_t *id) {
  json_t *v = json_object_get(root, key);
  if (!v || json_is_null(v)) {
    return FDY_OK;
  }
  if (json_is_object(v)) {
    v = json_object_get(v, "content");
  }
  if (!json_is_string(v)) {
    return entry_error(f, FDY_ERR_SCHEMA, key,
                       "must be a string or an object with a string content");
  }
  int32_t found =
      tok_special_lookup(tok, json_string_value(v), json_string_length(v));
  if (found < 0) {
    return entry_error(f, FDY_ERR_SCHEMA, key,
                       "'%.64s' is not a special token of the tokenizer",
                       json_string_value(v));
  }
  *id = found;
  return FDY_OK;
}

static fdy_status read_config(const hf_file *f, fdy_tokenizer *tok) {
  json_t *root = NULL;
  fdy_status s = load_json(f, &root);
  if (s == FDY_OK) {
    s = config_token(f, tok, root, "bos_token", &tok->bos);
  }
  if (s == FDY_OK) {
    s = config_token(f, tok, root, "eos_token", &tok->eos);
  }
  json_t *decoder = root ? json_object_get(root, "added_tokens_decoder") : NULL;
  if (s == FDY_OK && decoder && !json_is_object(decoder)) {
    s = entry_error(f, FDY_ERR_SCHEMA, "added_tokens_decoder",
                    "must be an object");
  }
  const char *key;
  json_t *item;
  json_object_foreach(decoder, key, item) {
    if (s != FDY_OK) {
      break;
    }
    char entry[FDY_ERROR_NAME_MAX];
    snprintf(entry, sizeof entry, "added_tokens_decoder[\"%s\"]", key);
    char *end = NULL;
    long long id = strtoll(key, &end, 10);
    json_t *content = json_object_get(item, "content");
    const char *bytes = NULL;
    size_t len = 0;
    if (!*key || *end || id < 0 || id >= tok->count) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "is not an id of the tokenizer (0 to %u)",
                      tok->count - 1);
    } else if (!json_is_string(content)) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry, "content must be a string");
    } else if (fdy_tokenizer_token_bytes(tok, (int32_t)id, &bytes, &len,
                                         f->err) == FDY_OK &&
               (len != json_string_length(content) ||
                memcmp(bytes, json_string_value(content), len) != 0 ||
                !tok->tokens[id].special)) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "'%.64s' is not special token %lld of tokenizer.json",
                      json_string_value(content), id);
    }
  }
  json_t *chat = root ? json_object_get(root, "chat_template") : NULL;
  if (s == FDY_OK && chat && !json_is_null(chat)) {
    if (!json_is_string(chat)) {
      s = entry_error(f, FDY_ERR_UNSUPPORTED, "chat_template",
                      "must be a string");
    } else if (!(tok->chat_template = strdup(json_string_value(chat)))) {
      s = fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
  }
  json_decref(root);
  return s;
}

fdy_status fdy_tokenizer_load_hf(const char *tokenizer_json_path,
                                 const char *config_path, fdy_tokenizer **out,
                                 fdy_error *err) {
  *out = NULL;
  hf_file f = {tokenizer_json_path, err};
  fdy_tokenizer *tok = NULL;
  json_t *root = NULL;
  char *buf = NULL;
  int16_t to_byte[ALPHABET_SIZE];
  byte_alphabet(to_byte);
  fdy_status s = load_json(&f, &root);
  if (s != FDY_OK) {
    goto cleanup;
  }
  json_t *model = json_object_get(root, "model");
  bool ignore_merges = false;
  const char *pattern = NULL;
  s = check_model(&f, model, &ignore_merges);
  if (s == FDY_OK) {
    s = check_pipeline(&f, root, &pattern);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  json_t *vocab = json_object_get(model, "vocab");
  json_t *merges = json_object_get(model, "merges");
  json_t *added = json_object_get(root, "added_tokens");
  if (!json_is_object(vocab)) {
    s = entry_error(&f, FDY_ERR_SCHEMA, "model.vocab", "must be an object");
  } else if (!json_is_array(merges)) {
    s = entry_error(&f, FDY_ERR_SCHEMA, "model.merges", "must be an array");
  } else if (added && !json_is_array(added)) {
    s = entry_error(&f, FDY_ERR_SCHEMA, "added_tokens", "must be an array");
  } else if (json_object_size(vocab) + json_array_size(added) >= INT32_MAX) {
    s = entry_error(&f, FDY_ERR_UNSUPPORTED, "model.vocab",
                    "has more than 2^31 tokens");
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  /* A decoded token or merge is never longer than its JSON text: the
   * longest vocab key or merge bounds the scratch buffer. */
  size_t longest = 0;
  const char *key;
  json_t *v;
  json_object_foreach(vocab, key, v) {
    size_t n = strlen(key);
    longest = n > longest ? n : longest;
  }
  size_t k;
  json_array_foreach(merges, k, v) {
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
      n += json_string_length(json_array_get(v, i));
    }
    longest = n > longest ? n : longest;
  }
  buf = malloc(longest + 1);
  uint32_t count = (uint32_t)(json_object_size(vocab) + json_array_size(added));
  if (!buf) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  s = tok_create(tokenizer_json_path, count, &tok, err);
  if (s == FDY_OK) {
    s = read_vocab(&f, tok, to_byte, vocab, buf);
  }
  if (s == FDY_OK) {
    s = read_added(&f, tok, added);
  }
  if (s == FDY_OK) {
    s = read_merges(&f, tok, to_byte, merges, buf);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  tok->ignore_merges = ignore_merges;
  s = tok_finish(tok, pattern, err);
  if (s == FDY_OK && config_path) {
    hf_file c = {config_path, err};
    s = read_config(&c, tok);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  *out = tok;
  tok = NULL;
cleanup:
  fdy_tokenizer_destroy(tok);
  free(buf);
  json_decref(root);
  return s;
}
