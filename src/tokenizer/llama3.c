/* The Llama 3 tokenizer built into Foundry: the 128,000 tiktoken ranks of
 * tests/data/tokenizer/llama3-tokenizer.model, embedded at build time
 * (cmake/embed_text.cmake), written out as the tokenizer.json and
 * tokenizer_config.json of a Hugging Face checkpoint, as transformers'
 * TikTokenConverter writes them (scripts/make_tokenizer_json.py is the
 * same in Python). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer_internal.h"

/* llama3_ranks.c, generated from the ranks file */
extern const char tok_llama3_ranks[];
extern const unsigned long tok_llama3_ranks_len;

/* Meta-Llama-3-Instruct's chat_template. */
static const char chat_template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

/* GPT-2's bytes_to_unicode: the character of each byte, as UTF-8. */
typedef struct alphabet {
  char utf8[256][3];
  uint8_t len[256];
} alphabet;

static void alphabet_init(alphabet *a) {
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; b++) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                     (b >= 174 && b <= 255);
    uint32_t cp = printable ? b : 256 + extra++;
    if (cp < 0x80) {
      a->utf8[b][0] = (char)cp;
      a->len[b] = 1;
    } else {
      a->utf8[b][0] = (char)(0xC0 | (cp >> 6));
      a->utf8[b][1] = (char)(0x80 | (cp & 0x3F));
      a->len[b] = 2;
    }
  }
}

/* The token's bytes in the alphabet (+ ' ' + right's when right >= 0)
 * into *buf, grown as needed; NULL when out of memory. */
static char *spell(const fdy_tokenizer *tok, const alphabet *a, uint32_t id,
                   int32_t right, char **buf, size_t *cap) {
  const tok_entry *l = &tok->tokens[id];
  size_t need = 2 * (size_t)l->len + 2;
  if (right >= 0) {
    need += 2 * (size_t)tok->tokens[right].len + 1;
  }
  if (need > *cap) {
    char *p = realloc(*buf, need);
    if (!p) {
      return NULL;
    }
    *buf = p;
    *cap = need;
  }
  size_t n = 0;
  for (int side = 0; side < (right >= 0 ? 2 : 1); side++) {
    const tok_entry *e = side ? &tok->tokens[right] : l;
    if (side) {
      (*buf)[n++] = ' ';
    }
    for (uint32_t i = 0; i < e->len; i++) {
      uint8_t b = (uint8_t)tok->arena[e->offset + i];
      memcpy(*buf + n, a->utf8[b], a->len[b]);
      n += a->len[b];
    }
  }
  (*buf)[n] = '\0';
  return *buf;
}

/* model.vocab and model.merges of the ranks 0..ranks-1: for every token
 * in rank order, each split of it into two tokens, ordered by the ranks
 * of the two parts (ids are ranks). */
static json_t *bpe_model(const fdy_tokenizer *tok, uint32_t ranks) {
  alphabet a;
  alphabet_init(&a);
  json_t *vocab = json_object(), *merges = json_array();
  json_t *model = json_pack(
      "{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b}", "type", "BPE", "dropout",
      "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
      "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 1);
  char *buf = NULL;
  size_t cap = 0;
  int32_t *pairs = NULL; /* the splits of a token: lefts, then rights */
  uint32_t pairs_cap = 0;
  bool ok = vocab && merges && model;
  for (uint32_t id = 0; ok && id < ranks; id++) {
    ok = spell(tok, &a, id, -1, &buf, &cap) &&
         json_object_set_new(vocab, buf, json_integer(id)) == 0;
    const tok_entry *e = &tok->tokens[id];
    const char *bytes = tok->arena + e->offset;
    if (ok && e->len > pairs_cap) {
      int32_t *p = realloc(pairs, 2 * sizeof *pairs * e->len);
      ok = p != NULL;
      pairs = ok ? p : pairs;
      pairs_cap = ok ? e->len : pairs_cap;
    }
    int32_t *left = pairs, *right = pairs + pairs_cap;
    uint32_t n = 0;
    for (uint32_t i = 1; ok && i < e->len; i++) {
      int32_t l = tok_lookup(tok, bytes, i);
      int32_t r = l >= 0 ? tok_lookup(tok, bytes + i, e->len - i) : -1;
      if (r < 0) {
        continue;
      }
      uint32_t j = n++;
      while (j > 0 &&
             (left[j - 1] > l || (left[j - 1] == l && right[j - 1] > r))) {
        left[j] = left[j - 1];
        right[j] = right[j - 1];
        j--;
      }
      left[j] = l;
      right[j] = r;
    }
    for (uint32_t j = 0; ok && j < n; j++) {
      ok = spell(tok, &a, (uint32_t)left[j], right[j], &buf, &cap) &&
           json_array_append_new(merges, json_string(buf)) == 0;
    }
  }
  free(buf);
  free(pairs);
  if (ok && json_object_set(model, "vocab", vocab) == 0 &&
      json_object_set(model, "merges", merges) == 0) {
    json_decref(vocab);
    json_decref(merges);
    return model;
  }
  json_decref(vocab);
  json_decref(merges);
  json_decref(model);
  return NULL;
}

/* The special token id's spelling as a JSON string. */
static json_t *special(const fdy_tokenizer *tok, uint32_t id) {
  const tok_entry *e = &tok->tokens[id];
  return json_stringn(tok->arena + e->offset, e->len);
}

static json_t *added_token(const fdy_tokenizer *tok, uint32_t id,
                           bool with_id) {
  json_t *t = json_pack("{s:o, s:b, s:b, s:b, s:b, s:b}", "content",
                        special(tok, id), "single_word", 0, "lstrip", 0,
                        "rstrip", 0, "normalized", 0, "special", 1);
  if (t && with_id && json_object_set_new(t, "id", json_integer(id)) != 0) {
    json_decref(t);
    t = NULL;
  }
  return t;
}

static json_t *tokenizer_json(const fdy_tokenizer *tok, uint32_t ranks) {
  json_t *added = json_array();
  for (uint32_t id = ranks; added && id < tok->count; id++) {
    if (json_array_append_new(added, added_token(tok, id, true)) != 0) {
      json_decref(added);
      added = NULL;
    }
  }
  json_t *bos = special(tok, (uint32_t)tok->bos);
  json_t *model = bpe_model(tok, ranks);
  if (!added || !bos || !model) {
    json_decref(added);
    json_decref(bos);
    json_decref(model);
    return NULL;
  }
  json_t *seq_a =
      json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A", "type_id", 0);
  json_t *seq_b =
      json_pack("{s:{s:s, s:i}}", "Sequence", "id", "B", "type_id", 1);
  json_t *root = json_pack(
      "{s:s, s:n, s:n, s:o, s:n,"
      " s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
      " s:{s:s, s:[{s:{s:O, s:i}}, O], s:[{s:{s:O, s:i}}, O, {s:{s:O, s:i}}, "
      "O],"
      " s:{s:{s:O, s:[i], s:[O]}}},"
      " s:{s:s, s:b, s:b, s:b}, s:o}",
      "version", "1.0", "truncation", "padding", "added_tokens", added,
      "normalizer", "pre_tokenizer", "type", "Sequence", "pretokenizers",
      "type", "Split", "pattern", "Regex", TOK_LLAMA3_PATTERN, "behavior",
      "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
      "trim_offsets", 1, "use_regex", 0, "post_processor", "type",
      "TemplateProcessing", "single", "SpecialToken", "id", bos, "type_id", 0,
      seq_a, "pair", "SpecialToken", "id", bos, "type_id", 0, seq_a,
      "SpecialToken", "id", bos, "type_id", 1, seq_b, "special_tokens",
      json_string_value(bos), "id", bos, "ids", tok->bos, "tokens", bos,
      "decoder", "type", "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1,
      "use_regex", 1, "model", model);
  json_decref(seq_a);
  json_decref(seq_b);
  json_decref(bos);
  return root;
}

static json_t *config_json(const fdy_tokenizer *tok, uint32_t ranks) {
  json_t *decoder = json_object();
  for (uint32_t id = ranks; decoder && id < tok->count; id++) {
    char key[16];
    snprintf(key, sizeof key, "%u", id);
    if (json_object_set_new(decoder, key, added_token(tok, id, false)) != 0) {
      json_decref(decoder);
      decoder = NULL;
    }
  }
  int32_t eot = fdy_tokenizer_special_id(tok, "<|eot_id|>");
  if (!decoder || eot < 0) {
    json_decref(decoder);
    return NULL;
  }
  return json_pack("{s:o, s:o, s:o, s:s, s:b, s:i, s:s}", "bos_token",
                   special(tok, (uint32_t)tok->bos), "eos_token",
                   special(tok, (uint32_t)eot), "added_tokens_decoder", decoder,
                   "chat_template", chat_template,
                   "clean_up_tokenization_spaces", 1, "model_max_length",
                   131072, "tokenizer_class", "PreTrainedTokenizerFast");
}

/* Writes doc to dir/name, which must not exist. */
static fdy_status write_new(const char *dir, const char *name, json_t *doc,
                            fdy_error *err) {
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= sizeof path) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "%s: path too long",
                         dir);
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    int e = errno;
    if (fd >= 0) {
      close(fd);
    }
    return fdy_error_setf(err, FDY_ERR_IO, path, 0, 0, "%s: cannot create: %s",
                          path, strerror(e));
  }
  bool ok = json_dumpf(doc, f, JSON_INDENT(1)) == 0 && fputc('\n', f) != EOF;
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    return fdy_error_setf(err, FDY_ERR_IO, path, 0, 0, "%s: writing failed: %s",
                          path, strerror(errno));
  }
  return FDY_OK;
}

fdy_status fdy_tokenizer_write_llama3(const char *dir, fdy_error *err) {
  fdy_tokenizer *tok = NULL;
  json_t *tokenizer = NULL, *config = NULL;
  fdy_status s =
      tok_load_tiktoken_text("the built-in Llama 3 ranks", tok_llama3_ranks,
                             (size_t)tok_llama3_ranks_len, &tok, err);
  if (s != FDY_OK) {
    goto cleanup;
  }
  const uint32_t ranks = tok->count - 256; /* the Llama 3 special tokens */
  tokenizer = tokenizer_json(tok, ranks);
  config = config_json(tok, ranks);
  if (!tokenizer || !config) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  s = write_new(dir, "tokenizer.json", tokenizer, err);
  if (s == FDY_OK) {
    s = write_new(dir, "tokenizer_config.json", config, err);
  }
cleanup:
  json_decref(tokenizer);
  json_decref(config);
  fdy_tokenizer_destroy(tok);
  return s;
}
