/* Hugging Face tokenizer files as MLX checkpoints ship them:
 * tokenizer.json, a BPE of one of two kinds, and tokenizer_config.json
 * (bos_token, eos_token, added_tokens_decoder, chat_template).
 * - Byte-level (Llama 3, GPT-2, Qwen): model.vocab and model.merges in the
 *   GPT-2 byte-to-character alphabet, Split/Digits + ByteLevel
 *   pre-tokenizers, the ByteLevel decoder.
 * - SentencePiece-style (Llama 2, Mistral, TinyLlama): a vocabulary in
 *   UTF-8 with "\u2581" for spaces; the Prepend + Replace normalizer or the
 *   Metaspace pre-tokenizer; byte_fallback to <0xNN> tokens, unk_token;
 *   the Replace/ByteFallback/Fuse/Strip or Metaspace decoders.
 * Both take added_tokens, ignore_merges and NFC. Strict: every field read
 * is checked, anything else is refused, and errors name the file and the
 * entry. */
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

static fdy_error *err_of(const hf_file *f) {
  return f->err;
}

/* GPT-2's pre-tokenizer regex: ByteLevel's use_regex. */
#define GPT2_PATTERN                                                           \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"         \
  "\\s+(?!\\S)|\\s+"

/* A literal as a PCRE2 pattern: ASCII punctuation escaped as \x{..}. */
static char *literal_pattern(const char *s, size_t len) {
  char *p = malloc(len * 6 + 1);
  size_t at = 0;
  for (size_t i = 0; p && i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z')) {
      p[at++] = (char)c;
    } else {
      at += (size_t)snprintf(p + at, 7, "\\x{%02x}", c);
    }
  }
  if (p) {
    p[at] = '\0';
  }
  return p;
}

static fdy_status bool_field(const hf_file *f, json_t *obj, const char *key,
                             const char *entry, bool dflt, bool *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return FDY_OK;
  }
  if (!json_is_boolean(v)) {
    char name[FDY_ERROR_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", entry, key);
    return entry_error(f, FDY_ERR_SCHEMA, name, "must be true or false");
  }
  *out = json_is_true(v);
  return FDY_OK;
}

/* A string of at most TOK_MAX_LITERAL bytes (non-empty when nonempty). */
static fdy_status literal_field(const hf_file *f, json_t *v, const char *entry,
                                bool nonempty, tok_literal *lit) {
  if (!json_is_string(v) || (nonempty && json_string_length(v) == 0)) {
    return entry_error(f, FDY_ERR_SCHEMA, entry, "must be a %sstring",
                       nonempty ? "non-empty " : "");
  }
  size_t len = json_string_length(v);
  if (len > TOK_MAX_LITERAL) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                       "'%.64s' has %zu bytes; Foundry takes at most %d",
                       json_string_value(v), len, TOK_MAX_LITERAL);
  }
  memcpy(lit->bytes, json_string_value(v), len);
  lit->len = (uint8_t)len;
  return FDY_OK;
}

/* Replace's {"pattern": {"String": from}, "content": to} (a normalizer or
 * a decoder); a Regex pattern is not supported. */
static fdy_status replace_fields(const hf_file *f, json_t *obj,
                                 const char *entry, tok_literal *from,
                                 tok_literal *to) {
  char name[FDY_ERROR_NAME_MAX];
  json_t *pattern = json_object_get(obj, "pattern");
  snprintf(name, sizeof name, "%s.pattern", entry);
  if (json_object_get(pattern, "Regex")) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, name,
                       "is a Regex; Foundry supports a String pattern");
  }
  fdy_status s =
      literal_field(f, json_object_get(pattern, "String"), name, true, from);
  snprintf(name, sizeof name, "%s.content", entry);
  return s != FDY_OK ? s
                     : literal_field(f, json_object_get(obj, "content"), name,
                                     false, to);
}

/* One normalizer (entry names it) appended to norms. */
static fdy_status add_normalizer(const hf_file *f, json_t *n, const char *entry,
                                 tok_norm *norms, uint32_t *count) {
  const char *t = json_string_value(json_object_get(n, "type"));
  if (!t) {
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "must be an object with a string type");
  }
  if (*count == TOK_MAX_NORMS) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                       "is one normalizer too many (Foundry takes %d)",
                       TOK_MAX_NORMS);
  }
  tok_norm *step = &norms[*count];
  *step = (tok_norm){0};
  char name[FDY_ERROR_NAME_MAX];
  fdy_status s = FDY_OK;
  if (strcmp(t, "NFC") == 0) {
    step->kind = TOK_NORM_NFC;
    if (!fdy_tokenizer_nfc_available()) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                         "is NFC, which needs ICU; this build of Foundry "
                         "lacks it (install libicu-dev and rebuild)");
    }
  } else if (strcmp(t, "Prepend") == 0) {
    step->kind = TOK_NORM_PREPEND;
    snprintf(name, sizeof name, "%s.prepend", entry);
    s = literal_field(f, json_object_get(n, "prepend"), name, false, &step->to);
  } else if (strcmp(t, "Replace") == 0) {
    step->kind = TOK_NORM_REPLACE;
    s = replace_fields(f, n, entry, &step->from, &step->to);
  } else {
    return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                       "is '%s'; Foundry supports NFC, Prepend, Replace and "
                       "a Sequence of them",
                       t);
  }
  *count += s == FDY_OK;
  return s;
}

/* The normalizer: none, one of add_normalizer's, or a Sequence of them. */
static fdy_status read_normalizer(const hf_file *f, json_t *root,
                                  tok_norm *norms, uint32_t *count) {
  json_t *n = json_object_get(root, "normalizer");
  *count = 0;
  if (!n || json_is_null(n)) {
    return FDY_OK;
  }
  const char *t = json_string_value(json_object_get(n, "type"));
  if (!t || strcmp(t, "Sequence") != 0) {
    return add_normalizer(f, n, "normalizer", norms, count);
  }
  json_t *list = json_object_get(n, "normalizers");
  if (!json_is_array(list)) {
    return entry_error(f, FDY_ERR_SCHEMA, "normalizer.normalizers",
                       "must be an array");
  }
  size_t i;
  json_t *item;
  json_array_foreach(list, i, item) {
    char entry[64];
    snprintf(entry, sizeof entry, "normalizer.normalizers[%zu]", i);
    fdy_status s = add_normalizer(f, item, entry, norms, count);
    if (s != FDY_OK) {
      return s;
    }
  }
  return FDY_OK;
}

/* Metaspace's fields (the pre-tokenizer's and the decoder's):
 * replacement (one character), prepend_scheme (always, the default;
 * first; never), the older add_prefix_space (false only with never, as
 * Hugging Face checks) and split (default true). */
static fdy_status metaspace_fields(const hf_file *f, json_t *m,
                                   const char *entry, tok_literal *meta,
                                   tok_prepend *prepend, bool *split) {
  char name[FDY_ERROR_NAME_MAX];
  snprintf(name, sizeof name, "%s.replacement", entry);
  json_t *r = json_object_get(m, "replacement");
  size_t len = json_string_length(r);
  if (!json_is_string(r) || len == 0 ||
      fdy_utf8_char_length(json_string_value(r), len) != len) {
    return entry_error(f, FDY_ERR_SCHEMA, name, "must be one character");
  }
  memcpy(meta->bytes, json_string_value(r), len);
  meta->len = (uint8_t)len;
  static const char *const schemes[] = {"never", "first", "always"};
  json_t *scheme = json_object_get(m, "prepend_scheme");
  *prepend = TOK_PREPEND_ALWAYS;
  if (scheme && !json_is_null(scheme)) {
    const char *v = json_string_value(scheme);
    int k = 0;
    while (k < 3 && !(v && strcmp(v, schemes[k]) == 0)) {
      k++;
    }
    if (k == 3) {
      snprintf(name, sizeof name, "%s.prepend_scheme", entry);
      return entry_error(f, FDY_ERR_SCHEMA, name,
                         "must be \"always\", \"first\" or \"never\"");
    }
    *prepend = (tok_prepend)k;
  }
  bool add_prefix_space = true;
  fdy_status s =
      bool_field(f, m, "add_prefix_space", entry, true, &add_prefix_space);
  if (s == FDY_OK && !add_prefix_space && *prepend != TOK_PREPEND_NEVER) {
    snprintf(name, sizeof name, "%s.add_prefix_space", entry);
    return entry_error(f, FDY_ERR_SCHEMA, name,
                       "is false, which needs prepend_scheme \"never\"");
  }
  return s != FDY_OK ? s : bool_field(f, m, "split", entry, true, split);
}

/* The Metaspace pre-tokenizer: tok->meta and its prepend scheme, and when
 * it splits, a step that cuts before each replacement character (Hugging
 * Face's MergedWithNext): "a\u2581\u2581b" is "a", "\u2581", "\u2581b". */
static fdy_status read_metaspace(const hf_file *f, fdy_tokenizer *tok,
                                 json_t *m, const char *entry) {
  bool split = true;
  fdy_status s =
      metaspace_fields(f, m, entry, &tok->meta, &tok->meta_prepend, &split);
  if (s != FDY_OK || !split) {
    return s;
  }
  char *lit = literal_pattern(tok->meta.bytes, tok->meta.len);
  if (!lit) {
    return fdy_error_set(err_of(f), FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  char pattern[128];
  snprintf(pattern, sizeof pattern, "%s[^%s]*|[^%s]+", lit, lit, lit);
  free(lit);
  tok_step step = {0};
  snprintf(step.field, sizeof step.field, "%s", entry);
  return tok_add_step(tok, pattern, PCRE2_ZERO_TERMINATED, &step, err_of(f));
}

/* The decoder of a SentencePiece-style BPE, as it acts on each token
 * (tok->drop_first and tok->strip hold the rest). */
typedef struct hf_decoder {
  tok_literal from, to; /* Replace (Metaspace: the replacement by " ") */
  bool byte_fallback;   /* ByteFallback: <0xNN> is the byte NN */
} hf_decoder;

/* Strip after Fuse: up to start leading content bytes of the text go. */
static fdy_status read_strip(const hf_file *f, fdy_tokenizer *tok, json_t *d,
                             const char *entry) {
  char name[FDY_ERROR_NAME_MAX];
  json_t *content = json_object_get(d, "content");
  json_t *start = json_object_get(d, "start");
  json_t *stop = json_object_get(d, "stop");
  snprintf(name, sizeof name, "%s.content", entry);
  if (!json_is_string(content) || json_string_length(content) != 1 ||
      (unsigned char)json_string_value(content)[0] >= 0x80) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, name,
                       "must be one ASCII character");
  }
  snprintf(name, sizeof name, "%s.start", entry);
  if (!json_is_integer(start) || json_integer_value(start) < 0 ||
      json_integer_value(start) > UINT32_MAX) {
    return entry_error(f, FDY_ERR_SCHEMA, name, "must be a count");
  }
  snprintf(name, sizeof name, "%s.stop", entry);
  if (!json_is_integer(stop) || json_integer_value(stop) != 0) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, name,
                       "must be 0; Foundry strips only the start");
  }
  tok->strip = json_string_value(content)[0];
  tok->strip_count = (uint32_t)json_integer_value(start);
  return FDY_OK;
}

/* The decoder. A byte-level BPE: ByteLevel (or a Sequence of it). A
 * SentencePiece-style one: Metaspace, or Replace, ByteFallback, Fuse and
 * Strip, each at most once and in that order (a Sequence, or one alone),
 * Strip only after Fuse. */
static fdy_status read_decoder(const hf_file *f, fdy_tokenizer *tok,
                               json_t *root, hf_decoder *dec) {
  json_t *d = json_object_get(root, "decoder");
  if (!d || json_is_null(d)) {
    return entry_error(f, FDY_ERR_SCHEMA, "decoder",
                       "is %s; the tokenizer needs a decoder",
                       d ? "null" : "missing");
  }
  const char *t = json_string_value(json_object_get(d, "type"));
  json_t *list = json_object_get(d, "decoders");
  const char *entry = "decoder";
  bool sequence = t && strcmp(t, "Sequence") == 0;
  if (sequence && !json_is_array(list)) {
    return entry_error(f, FDY_ERR_SCHEMA, "decoder.decoders",
                       "must be an array");
  }
  if (sequence && json_array_size(list) == 1) {
    d = json_array_get(list, 0);
    t = json_string_value(json_object_get(d, "type"));
    entry = "decoder.decoders[0]";
    sequence = false;
  }
  if (!t) {
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "must be an object with a string type");
  }
  bool byte_level = strcmp(t, "ByteLevel") == 0;
  if (!tok->char_units) {
    return byte_level ? FDY_OK
                      : entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                                    "is '%s'; a byte-level BPE needs "
                                    "ByteLevel",
                                    t);
  }
  if (byte_level) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                       "is 'ByteLevel', but the pre-tokenizer has no "
                       "ByteLevel");
  }
  if (strcmp(t, "Metaspace") == 0) {
    tok_prepend prepend = TOK_PREPEND_ALWAYS;
    bool split = true;
    fdy_status s = metaspace_fields(f, d, entry, &dec->from, &prepend, &split);
    dec->to = (tok_literal){" ", 1};
    if (prepend != TOK_PREPEND_NEVER) {
      tok->drop_first = dec->from;
    }
    return s;
  }
  static const char *const order[] = {"Replace", "ByteFallback", "Fuse",
                                      "Strip"};
  size_t stage = 0, count = sequence ? json_array_size(list) : 1;
  for (size_t i = 0; i < count; i++) {
    char name[64];
    if (sequence) {
      d = json_array_get(list, i);
      t = json_string_value(json_object_get(d, "type"));
      snprintf(name, sizeof name, "decoder.decoders[%zu]", i);
      entry = name;
    }
    size_t k = stage;
    while (k < 4 && !(t && strcmp(t, order[k]) == 0)) {
      k++;
    }
    if (k == 4 || (k == 3 && stage < 3)) {
      return entry_error(
          f, FDY_ERR_UNSUPPORTED, entry,
          "is '%s'; Foundry supports Replace, ByteFallback, Fuse and Strip, "
          "each once and in that order (Strip after Fuse), or Metaspace",
          t ? t : "not an object with a type");
    }
    fdy_status s = FDY_OK;
    if (k == 0) {
      s = replace_fields(f, d, entry, &dec->from, &dec->to);
    } else if (k == 1) {
      dec->byte_fallback = true;
    } else if (k == 3) {
      s = read_strip(f, tok, d, entry);
    }
    if (s != FDY_OK) {
      return s;
    }
    stage = k + 1;
  }
  return FDY_OK;
}

/* The byte of a <0xNN> token (two hex digits), or -1. */
static int byte_token(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') {
    return -1;
  }
  int v = 0;
  for (int i = 3; i < 5; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

/* tok->decoded[id]: what the decoder gives for the token spelled by the
 * bytes at base. */
static fdy_status decoded_text(const hf_file *f, fdy_tokenizer *tok,
                               const hf_decoder *dec, uint32_t id,
                               tok_span base) {
  char *text = NULL;
  size_t n = 0;
  fdy_status s = tok_rewrite(tok->arena + base.offset, base.len, &dec->from,
                             &dec->to, NULL, &text, &n, f->err);
  if (s != FDY_OK) {
    return s;
  }
  int byte = dec->byte_fallback ? byte_token(text, n) : -1;
  if (byte >= 0) {
    text[0] = (char)byte;
    n = 1;
  }
  tok_define_result r = TOK_DEFINED;
  tok->decoded[id] = base;
  if (n != base.len || memcmp(text, tok->arena + base.offset, n) != 0) {
    r = tok_arena_append(tok, text, n, &tok->decoded[id]);
  }
  free(text);
  if (r == TOK_NO_MEMORY) {
    return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return r == TOK_DEFINED ? FDY_OK
                          : entry_error(f, FDY_ERR_UNSUPPORTED, "decoder",
                                        "does not fit: the tokens pass 4 GiB");
}

/* tok->decoded of a SentencePiece-style BPE (after tok_finish): each id's
 * token through the decoder, a normalized added token's as the
 * normalizer writes it (Hugging Face decodes Llama 2's <x> as " <x>"). */
static fdy_status decoded_texts(const hf_file *f, fdy_tokenizer *tok,
                                const hf_decoder *dec) {
  if (!tok->char_units) {
    return FDY_OK;
  }
  tok->decoded = malloc((size_t)tok->count * sizeof *tok->decoded);
  if (!tok->decoded) {
    return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = FDY_OK;
  for (uint32_t id = 0; s == FDY_OK && id < tok->count; id++) {
    const tok_entry *e = &tok->tokens[id];
    s = decoded_text(f, tok, dec, id, (tok_span){e->offset, e->len});
  }
  for (uint32_t i = 0; s == FDY_OK && i < tok->added_count; i++) {
    const tok_added *a = &tok->added[i];
    if (tok->tokens[a->id].added & TOK_NORMALIZED) {
      s = decoded_text(f, tok, dec, a->id, a->match);
    }
  }
  return s;
}

/* One pre-tokenizer (entry names it) as steps of tok. *byte_level is set
 * when it is the ByteLevel one. */
static fdy_status add_pre_tokenizer(const hf_file *f, fdy_tokenizer *tok,
                                    json_t *p, const char *entry,
                                    bool *byte_level) {
  const char *type = json_string_value(json_object_get(p, "type"));
  tok_step step = {0};
  *byte_level = false;
  if (!type) {
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "must be an object with a string type");
  }
  fdy_status s = FDY_OK;
  if (strcmp(type, "ByteLevel") == 0) {
    bool use_regex = true;
    s = bool_field(f, p, "add_prefix_space", entry, true, &step.prefix_space);
    if (s == FDY_OK) {
      s = bool_field(f, p, "use_regex", entry, true, &use_regex);
    }
    if (s != FDY_OK) {
      return s;
    }
    *byte_level = true;
    snprintf(step.field, sizeof step.field, "%s", entry);
    if (!use_regex && !step.prefix_space) {
      return FDY_OK; /* the byte mapping only: nothing to split */
    }
    return tok_add_step(tok, use_regex ? GPT2_PATTERN : NULL,
                        PCRE2_ZERO_TERMINATED, &step, err_of(f));
  }
  if (strcmp(type, "Digits") == 0) {
    bool individual = false;
    s = bool_field(f, p, "individual_digits", entry, false, &individual);
    if (s != FDY_OK) {
      return s;
    }
    snprintf(step.field, sizeof step.field, "%s", entry);
    return tok_add_step(tok, individual ? "\\p{N}" : "\\p{N}+",
                        PCRE2_ZERO_TERMINATED, &step, err_of(f));
  }
  if (strcmp(type, "Split") != 0) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                       "is '%s'; Foundry supports Split, ByteLevel and "
                       "Digits pre-tokenizers, or Metaspace alone",
                       type);
  }
  json_t *pattern = json_object_get(p, "pattern");
  json_t *regex = json_object_get(pattern, "Regex");
  json_t *string = json_object_get(pattern, "String");
  const char *behavior = json_string_value(json_object_get(p, "behavior"));
  bool invert = false;
  snprintf(step.field, sizeof step.field, "%s.pattern", entry);
  if (!json_is_string(regex) && !json_is_string(string)) {
    return entry_error(f, FDY_ERR_SCHEMA, step.field,
                       "must be {\"Regex\": string} or {\"String\": string}");
  }
  if (!behavior) {
    char name[FDY_ERROR_NAME_MAX];
    snprintf(name, sizeof name, "%s.behavior", entry);
    return entry_error(f, FDY_ERR_SCHEMA, name, "must be a string");
  }
  if (strcmp(behavior, "Isolated") != 0 && strcmp(behavior, "Removed") != 0) {
    char name[FDY_ERROR_NAME_MAX];
    snprintf(name, sizeof name, "%s.behavior", entry);
    return entry_error(f, FDY_ERR_UNSUPPORTED, name,
                       "is '%s'; Foundry supports Isolated and Removed",
                       behavior);
  }
  s = bool_field(f, p, "invert", entry, false, &invert);
  if (s != FDY_OK) {
    return s;
  }
  step.removed = strcmp(behavior, "Removed") == 0;
  step.invert = invert;
  if (json_is_string(regex)) {
    return tok_add_step(tok, json_string_value(regex),
                        json_string_length(regex), &step, err_of(f));
  }
  char *lit =
      literal_pattern(json_string_value(string), json_string_length(string));
  if (!lit) {
    return fdy_error_set(err_of(f), FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  s = tok_add_step(tok, lit, PCRE2_ZERO_TERMINATED, &step, err_of(f));
  free(lit);
  return s;
}

/* The pre-tokenizer. A byte-level BPE: one of Split, ByteLevel, Digits, or
 * a Sequence of them with exactly one ByteLevel, last. A
 * SentencePiece-style BPE (tok->char_units): none, or Metaspace (alone or
 * the one entry of a Sequence). */
static fdy_status read_pre_tokenizer(const hf_file *f, fdy_tokenizer *tok,
                                     json_t *root) {
  json_t *pre = json_object_get(root, "pre_tokenizer");
  const char *type = json_string_value(json_object_get(pre, "type"));
  json_t *list = json_object_get(pre, "pretokenizers");
  bool byte_level = false;
  tok->char_units = true;
  if (!pre || json_is_null(pre)) {
    return FDY_OK;
  }
  if (!type) {
    return entry_error(f, FDY_ERR_SCHEMA, "pre_tokenizer",
                       "must be an object with a string type");
  }
  json_t *first = json_array_get(list, 0);
  const char *first_type = json_string_value(json_object_get(first, "type"));
  if (strcmp(type, "Metaspace") == 0) {
    return read_metaspace(f, tok, pre, "pre_tokenizer");
  }
  if (strcmp(type, "Sequence") == 0 && json_array_size(list) == 1 &&
      first_type && strcmp(first_type, "Metaspace") == 0) {
    return read_metaspace(f, tok, first, "pre_tokenizer.pretokenizers[0]");
  }
  if (strcmp(type, "Sequence") != 0) {
    fdy_status s = add_pre_tokenizer(f, tok, pre, "pre_tokenizer", &byte_level);
    if (s == FDY_OK && !byte_level) {
      s = entry_error(f, FDY_ERR_UNSUPPORTED, "pre_tokenizer",
                      "is '%s' without ByteLevel; Foundry reads byte-level "
                      "BPEs and SentencePiece-style ones (Metaspace or no "
                      "pre-tokenizer)",
                      type);
    }
    tok->char_units = false;
    return s;
  }
  if (!json_is_array(list)) {
    return entry_error(f, FDY_ERR_SCHEMA, "pre_tokenizer.pretokenizers",
                       "must be an array");
  }
  size_t i;
  json_t *item;
  json_array_foreach(list, i, item) {
    char entry[64];
    snprintf(entry, sizeof entry, "pre_tokenizer.pretokenizers[%zu]", i);
    if (byte_level) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                         "follows ByteLevel; Foundry needs ByteLevel last");
    }
    fdy_status s = add_pre_tokenizer(f, tok, item, entry, &byte_level);
    if (s != FDY_OK) {
      return s;
    }
  }
  if (!byte_level) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "pre_tokenizer",
                       "has no ByteLevel; Foundry reads byte-level BPEs "
                       "(ByteLevel last) and SentencePiece-style ones "
                       "(Metaspace or no pre-tokenizer)");
  }
  tok->char_units = false;
  return FDY_OK;
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

/* The model's settings besides its vocabulary and merges. */
typedef struct hf_model {
  bool ignore_merges, byte_fallback, fuse_unk;
  json_t *unk_token; /* a string, or NULL */
} hf_model;

static fdy_status check_model(const hf_file *f, json_t *model, hf_model *m) {
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
  fdy_status s = FDY_OK;
  if (!empty) {
    s = fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "dropout", "model.dropout", NULL);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "continuing_subword_prefix",
                     "model.continuing_subword_prefix", empty);
  }
  if (s == FDY_OK) {
    s = expect_value(f, model, "end_of_word_suffix", "model.end_of_word_suffix",
                     empty);
  }
  json_decref(empty);
  static const char *const flags[] = {"ignore_merges", "byte_fallback",
                                      "fuse_unk"};
  bool *const out[] = {&m->ignore_merges, &m->byte_fallback, &m->fuse_unk};
  for (size_t k = 0; s == FDY_OK && k < 3; k++) {
    s = bool_field(f, model, flags[k], "model", false, out[k]);
  }
  m->unk_token = json_object_get(model, "unk_token");
  if (json_is_null(m->unk_token)) {
    m->unk_token = NULL;
  }
  if (s == FDY_OK && m->unk_token && !json_is_string(m->unk_token)) {
    s = entry_error(f, FDY_ERR_SCHEMA, "model.unk_token",
                    "must be a string or null");
  }
  return s;
}

/* What a piece starts as besides its tokens. A byte-level BPE has neither
 * an unknown token nor byte fallback. A SentencePiece-style one takes its
 * <0xNN> tokens for byte_fallback (all 256 must be there) and the
 * unk_token of the vocabulary. */
static fdy_status read_units(const hf_file *f, fdy_tokenizer *tok,
                             const hf_model *m) {
  if (!tok->char_units) {
    if (m->unk_token) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, "model.unk_token",
                         "is '%.64s'; a byte-level BPE needs none",
                         json_string_value(m->unk_token));
    }
    return m->byte_fallback
               ? entry_error(f, FDY_ERR_UNSUPPORTED, "model.byte_fallback",
                             "is true; a byte-level BPE needs none")
               : FDY_OK;
  }
  /* tok_define took single-byte tokens as the byte-level ones */
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    tok->byte_ids[b] = m->byte_fallback ? tok_lookup(tok, name, 6) : -1;
    if (m->byte_fallback && tok->byte_ids[b] < 0) {
      return entry_error(f, FDY_ERR_UNSUPPORTED, "model.byte_fallback",
                         "is true, but model.vocab lacks the byte token %s "
                         "(Foundry needs all 256)",
                         name);
    }
  }
  if (m->unk_token) {
    tok->unk = tok_lookup(tok, json_string_value(m->unk_token),
                          json_string_length(m->unk_token));
    if (tok->unk < 0) {
      return entry_error(f, FDY_ERR_SCHEMA, "model.unk_token",
                         "'%.64s' is not in model.vocab",
                         json_string_value(m->unk_token));
    }
  }
  tok->byte_fallback = m->byte_fallback;
  tok->fuse_unk = m->fuse_unk;
  return FDY_OK;
}

/* Decodes one vocab or merge token into buf; *n bytes. to_byte: the
 * byte-level alphabet, or NULL for UTF-8 as it is. */
static fdy_status token_text(const hf_file *f, const int16_t *to_byte,
                             json_t *v, const char *entry, char *buf,
                             size_t *n) {
  if (!json_is_string(v)) {
    return entry_error(f, FDY_ERR_SCHEMA, entry, "must be a string");
  }
  const char *s = json_string_value(v);
  size_t len = json_string_length(v);
  if (len == 0 && !to_byte) {
    return entry_error(f, FDY_ERR_SCHEMA, entry, "is an empty token");
  }
  if (!to_byte) {
    memcpy(buf, s, len);
    *n = len;
    return FDY_OK;
  }
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
    tok_define_result r =
        tok_define(tok, (uint32_t)id, buf, n, false, 0, &other);
    if (r != TOK_DEFINED) {
      return define_error(f, tok, r, entry, id, other);
    }
  }
  return FDY_OK;
}

/* added_tokens with Hugging Face's semantics: an id may be a vocabulary
 * id when the token is spelled as the vocabulary spells it (GPT-2's
 * <|endoftext|>, SmolLM's <|im_start|>); special or not; lstrip, rstrip,
 * single_word and normalized (default: not special). Refused: two added
 * tokens of one spelling or one id, a token spelled like a vocabulary token
 * of another id, an id the vocabulary gives to another spelling. */
static fdy_status read_added(const hf_file *f, fdy_tokenizer *tok,
                             json_t *vocab, json_t *added) {
  json_t *seen = json_object();
  if (!seen) {
    return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  fdy_status s = FDY_OK;
  size_t i;
  json_t *item;
  json_array_foreach(added, i, item) {
    char entry[64];
    snprintf(entry, sizeof entry, "added_tokens[%zu]", i);
    json_t *content = json_object_get(item, "content");
    json_t *special = json_object_get(item, "special");
    json_int_t id = 0;
    s = read_id(f, json_object_get(item, "id"), entry, &id);
    if (s != FDY_OK) {
      break;
    }
    if (!json_is_string(content) || json_string_length(content) == 0) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "content must be a non-empty string");
      break;
    }
    if (!json_is_boolean(special)) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "special must be true or false");
      break;
    }
    const char *text = json_string_value(content);
    size_t len = json_string_length(content);
    bool is_special = json_is_true(special);
    static const char *const names[] = {"lstrip", "rstrip", "single_word",
                                        "normalized"};
    static const uint8_t bits[] = {TOK_LSTRIP, TOK_RSTRIP, TOK_SINGLE_WORD,
                                   TOK_NORMALIZED};
    uint8_t flags = TOK_ADDED;
    for (size_t k = 0; s == FDY_OK && k < 4; k++) {
      bool on = false;
      s = bool_field(f, item, names[k], entry, k == 3 && !is_special, &on);
      flags |= on ? bits[k] : 0;
    }
    if (s != FDY_OK) {
      break;
    }
    json_t *before = json_object_getn(seen, text, len);
    if (before) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "content '%.64s' is that of added_tokens[%lld] too", text,
                      (long long)json_integer_value(before));
      break;
    }
    if (json_object_setn_new(seen, text, len, json_integer((json_int_t)i))) {
      s = fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      break;
    }
    json_t *vid = json_object_getn(vocab, text, len);
    if (vid && json_integer_value(vid) != id) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "content '%.64s' is model.vocab's token %lld, but its "
                      "id is %lld",
                      text, (long long)json_integer_value(vid), (long long)id);
      break;
    }
    tok_entry *e = (uint64_t)id < tok->capacity ? &tok->tokens[id] : NULL;
    if (e && e->len != 0) {
      if (e->added) {
        s = entry_error(f, FDY_ERR_SCHEMA, entry,
                        "reuses id %lld of an earlier added token",
                        (long long)id);
        break;
      }
      if (!vid) {
        s = entry_error(f, FDY_ERR_SCHEMA, entry,
                        "has id %lld, which model.vocab gives to another "
                        "token",
                        (long long)id);
        break;
      }
      if (e->len != len || memcmp(tok->arena + e->offset, text, len) != 0) {
        s = entry_error(f, FDY_ERR_UNSUPPORTED, entry,
                        "'%.64s' is vocabulary token %lld, whose bytes differ "
                        "from its spelling (characters of the byte-level "
                        "alphabet); Foundry cannot match it in text",
                        text, (long long)id);
        break;
      }
      e->special = is_special;
      e->added = flags;
      continue;
    }
    int32_t other = -1;
    tok_define_result r =
        tok_define(tok, (uint32_t)id, text, len, is_special, flags, &other);
    if (r != TOK_DEFINED) {
      s = define_error(f, tok, r, entry, id, other);
      break;
    }
  }
  json_decref(seen);
  return s;
}

/* Hugging Face's merges: merge k makes the pair (left, right) the token of
 * their concatenation, with priority k (a pair listed twice: the later). */
static fdy_status read_merges(const hf_file *f, fdy_tokenizer *tok,
                              const int16_t *to_byte, json_t *merges,
                              char *buf) {
  size_t slots = 16;
  while (slots < 2 * json_array_size(merges)) {
    slots *= 2;
  }
  if (slots > UINT32_MAX ||
      !(tok->merges = calloc(slots, sizeof *tok->merges))) {
    return fdy_error_set(f->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  tok->merge_mask = (uint32_t)(slots - 1);
  tok->pair_merges = true;
  size_t k;
  json_t *item;
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
    int32_t l = tok_lookup(tok, buf, a), r = tok_lookup(tok, buf + a, b);
    if (l < 0 || r < 0) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "merges a token that is not in model.vocab");
    }
    int32_t id = tok_lookup(tok, buf, a + b);
    if (id < 0) {
      return entry_error(f, FDY_ERR_SCHEMA, entry,
                         "makes a token that is not in model.vocab");
    }
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & tok->merge_mask;
    while (tok->merges[i].id1 != 0 && tok->merges[i].key != key) {
      i = (i + 1) & tok->merge_mask;
    }
    tok->merges[i] = (tok_merge){key, (uint32_t)k, (uint32_t)id + 1};
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
      tok_added_lookup(tok, json_string_value(v), json_string_length(v), false);
  if (found < 0) {
    return entry_error(f, FDY_ERR_SCHEMA, key,
                       "'%.64s' is not an added token of the tokenizer",
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
                !tok->tokens[id].added)) {
      s = entry_error(f, FDY_ERR_SCHEMA, entry,
                      "'%.64s' is not added token %lld of tokenizer.json",
                      json_string_value(content), id);
    }
  }
  json_t *add_bos = root ? json_object_get(root, "add_bos_token") : NULL;
  if (s == FDY_OK && add_bos && !json_is_null(add_bos)) {
    if (!json_is_boolean(add_bos)) {
      s = entry_error(f, FDY_ERR_SCHEMA, "add_bos_token",
                      "must be true or false");
    } else {
      tok->add_bos = json_is_true(add_bos);
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

/* Post-processing that puts the BOS first: a TemplateProcessing whose
 * single sequence starts with a special token (Llama 3's). */
static bool post_processor_adds_bos(json_t *root) {
  json_t *pp = json_object_get(root, "post_processor");
  const char *t = json_string_value(json_object_get(pp, "type"));
  json_t *list = json_object_get(pp, "processors");
  if (t && strcmp(t, "Sequence") == 0) {
    for (size_t i = 0; i < json_array_size(list); i++) {
      json_t *one = json_array_get(list, i);
      const char *t1 = json_string_value(json_object_get(one, "type"));
      if (t1 && strcmp(t1, "TemplateProcessing") == 0) {
        pp = one;
        t = t1;
      }
    }
  }
  if (!t || strcmp(t, "TemplateProcessing") != 0) {
    return false;
  }
  json_t *first = json_array_get(json_object_get(pp, "single"), 0);
  return json_object_get(first, "SpecialToken") != NULL;
}

/* Checks entry's id v (read_id), which must be below limit, and raises *top
 * to it. */
static fdy_status raise_top_id(const hf_file *f, json_t *v, const char *entry,
                               uint64_t limit, json_int_t *top) {
  json_int_t id = 0;
  fdy_status s = read_id(f, v, entry, &id);
  if (s != FDY_OK) {
    return s;
  }
  if ((uint64_t)id >= limit) {
    return entry_error(f, FDY_ERR_SCHEMA, entry,
                       "id %lld is out of range: the file has %llu tokens, "
                       "so ids are below that (one is missing or wrong)",
                       (long long)id, (unsigned long long)limit);
  }
  *top = id > *top ? id : *top;
  return FDY_OK;
}

/* The highest id of the vocabulary and the added tokens, each id checked;
 * an id past their count is out of range (ids may repeat, never skip). */
static fdy_status count_ids(const hf_file *f, json_t *vocab, json_t *added,
                            uint32_t *capacity) {
  uint64_t limit = json_object_size(vocab) + json_array_size(added);
  json_int_t top = -1;
  const char *key;
  json_t *v;
  fdy_status s = FDY_OK;
  json_object_foreach(vocab, key, v) {
    char entry[FDY_ERROR_NAME_MAX];
    snprintf(entry, sizeof entry, "model.vocab[\"%s\"]", key);
    if ((s = raise_top_id(f, v, entry, limit, &top)) != FDY_OK) {
      return s;
    }
  }
  size_t i;
  json_array_foreach(added, i, v) {
    char entry[64];
    snprintf(entry, sizeof entry, "added_tokens[%zu]", i);
    s = raise_top_id(f, json_object_get(v, "id"), entry, limit, &top);
    if (s != FDY_OK) {
      return s;
    }
  }
  *capacity = (uint32_t)(top + 1);
  return FDY_OK;
}

/* The tables' JSON types: model.vocab an object, model.merges an array,
 * added_tokens an array or absent, and fewer than 2^31 tokens in all. */
static fdy_status check_tables(const hf_file *f, json_t *vocab, json_t *merges,
                               json_t *added) {
  if (!json_is_object(vocab)) {
    return entry_error(f, FDY_ERR_SCHEMA, "model.vocab", "must be an object");
  }
  if (!json_is_array(merges)) {
    return entry_error(f, FDY_ERR_SCHEMA, "model.merges", "must be an array");
  }
  if (added && !json_is_array(added)) {
    return entry_error(f, FDY_ERR_SCHEMA, "added_tokens", "must be an array");
  }
  if (json_object_size(vocab) + json_array_size(added) >= INT32_MAX) {
    return entry_error(f, FDY_ERR_UNSUPPORTED, "model.vocab",
                       "has more than 2^31 tokens");
  }
  return FDY_OK;
}

/* The longest vocab key or merge (its parts together), in bytes. A decoded
 * token or merge is never longer than its JSON text, so this bounds the
 * scratch buffer for decoding them. */
static size_t longest_entry(json_t *vocab, json_t *merges) {
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
  return longest;
}

/* Every id below count has a token, from model.vocab or added_tokens. */
static fdy_status check_ids_dense(const hf_file *f, const fdy_tokenizer *tok,
                                  uint32_t count) {
  for (uint32_t id = 0; id < count; id++) {
    if (tok->tokens[id].len == 0) {
      return entry_error(f, FDY_ERR_SCHEMA, "model.vocab",
                         "lacks id %u: it is neither in model.vocab nor in "
                         "added_tokens, but ids run to %u",
                         id, count - 1);
    }
  }
  return FDY_OK;
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
  hf_model settings = {0};
  tok_norm norms[TOK_MAX_NORMS];
  uint32_t norm_count = 0;
  s = check_model(&f, model, &settings);
  if (s == FDY_OK) {
    s = read_normalizer(&f, root, norms, &norm_count);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  json_t *vocab = json_object_get(model, "vocab");
  json_t *merges = json_object_get(model, "merges");
  json_t *added = json_object_get(root, "added_tokens");
  s = check_tables(&f, vocab, merges, added);
  uint32_t count = 0;
  if (s == FDY_OK) {
    s = count_ids(&f, vocab, added, &count);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  buf = malloc(longest_entry(vocab, merges) + 1);
  if (!buf) {
    s = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  /* the pre-tokenizer tells the kind of BPE: byte-level or
   * SentencePiece-style (char_units) */
  hf_decoder dec = {0};
  s = tok_create(tokenizer_json_path, count, &tok, err);
  if (s == FDY_OK) {
    s = read_pre_tokenizer(&f, tok, root);
  }
  if (s == FDY_OK) {
    s = read_decoder(&f, tok, root, &dec);
  }
  const int16_t *alphabet = tok && tok->char_units ? NULL : to_byte;
  if (s == FDY_OK) {
    s = read_vocab(&f, tok, alphabet, vocab, buf);
  }
  if (s == FDY_OK) {
    s = read_units(&f, tok, &settings);
  }
  if (s == FDY_OK) {
    s = read_added(&f, tok, vocab, added);
  }
  if (s == FDY_OK) {
    s = check_ids_dense(&f, tok, count);
  }
  if (s == FDY_OK) {
    s = read_merges(&f, tok, alphabet, merges, buf);
  }
  if (s != FDY_OK) {
    goto cleanup;
  }
  tok->ignore_merges = settings.ignore_merges;
  memcpy(tok->norms, norms, norm_count * sizeof *norms);
  tok->norm_count = norm_count;
  tok->add_bos = post_processor_adds_bos(root);
  s = tok_finish(tok, false, err);
  if (s == FDY_OK) {
    s = decoded_texts(&f, tok, &dec);
  }
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
