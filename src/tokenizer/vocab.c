/* The tokenizer's vocabulary: the dense id table, the byte arena, the hash
 * map from token bytes to ids, completion of a loaded tokenizer (regexes,
 * BOS/EOS), the properties of the public API and fdy_tokens. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "foundry/input.h"
#include "tokenizer_internal.h"

fdy_status tok_create(const char *source, uint32_t capacity,
                      fdy_tokenizer **out, fdy_error *err) {
  *out = NULL;
  fdy_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  tok->bos = -1;
  tok->eos = -1;
  tok->unk = -1;
  for (int b = 0; b < 256; b++) {
    tok->byte_ids[b] = -1;
  }
  /* At most half the map's slots are used: 2^k >= 2 * capacity. */
  uint64_t slots = 16;
  while (slots < 2 * (uint64_t)capacity) {
    slots *= 2;
  }
  tok->source = strdup(source);
  tok->tokens = calloc(capacity ? capacity : 1, sizeof *tok->tokens);
  tok->map = calloc((size_t)slots, sizeof *tok->map);
  if (slots > UINT32_MAX || !tok->source || !tok->tokens || !tok->map) {
    fdy_tokenizer_destroy(tok);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  tok->capacity = capacity;
  tok->map_mask = (uint32_t)(slots - 1);
  *out = tok;
  return FDY_OK;
}

tok_define_result tok_arena_append(fdy_tokenizer *tok, const char *bytes,
                                   size_t len, tok_span *span) {
  if (len > UINT32_MAX - tok->arena_len) {
    return TOK_TOO_LARGE;
  }
  if (tok->arena_len + len > tok->arena_cap) {
    size_t cap = tok->arena_cap ? tok->arena_cap : 4096;
    while (cap < tok->arena_len + len) {
      cap *= 2;
    }
    char *arena = realloc(tok->arena, cap);
    if (!arena) {
      return TOK_NO_MEMORY;
    }
    tok->arena = arena;
    tok->arena_cap = cap;
  }
  if (len > 0) {
    memcpy(tok->arena + tok->arena_len, bytes, len);
  }
  *span = (tok_span){(uint32_t)tok->arena_len, (uint32_t)len};
  tok->arena_len += len;
  return TOK_DEFINED;
}

tok_define_result tok_define(fdy_tokenizer *tok, uint32_t id, const char *bytes,
                             size_t len, bool special, uint8_t added,
                             int32_t *other) {
  if (id >= tok->capacity) {
    return TOK_ID_RANGE;
  }
  if (tok->tokens[id].len != 0) {
    *other = (int32_t)id;
    return TOK_DUPLICATE_ID;
  }
  if (!added) {
    int32_t found = tok_lookup(tok, bytes, len);
    if (found >= 0) {
      *other = found;
      return TOK_DUPLICATE_BYTES;
    }
  }
  tok_span span;
  tok_define_result r = tok_arena_append(tok, bytes, len, &span);
  if (r != TOK_DEFINED) {
    return r;
  }
  tok->tokens[id] =
      (tok_entry){span.offset, span.len, TOK_NO_RANK, special, added, !added};
  if (added) {
    return TOK_DEFINED;
  }
  /* The map has room: at most capacity of its 2 * capacity slots fill. */
  uint64_t h = tok_hash(bytes, len);
  uint32_t i = (uint32_t)h & tok->map_mask;
  while (tok->map[i] != 0) {
    i = (i + 1) & tok->map_mask;
  }
  tok->map[i] = (h >> 32) << 32 | ((uint64_t)id + 1);
  if (len == 1) {
    tok->byte_ids[(unsigned char)bytes[0]] = (int32_t)id;
  }
  return TOK_DEFINED;
}

/* Appends s to a growing pattern buffer. */
static bool append(char **buf, size_t *len, size_t *cap, const char *s,
                   size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap : 256;
    while (c < *len + n + 1) {
      c *= 2;
    }
    char *b = realloc(*buf, c);
    if (!b) {
      return false;
    }
    *buf = b;
    *cap = c;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = '\0';
  return true;
}

static int by_length_desc(const void *a, const void *b) {
  uint32_t la = ((const tok_added *)a)->match.len;
  uint32_t lb = ((const tok_added *)b)->match.len;
  return la < lb ? 1 : la > lb ? -1 : 0;
}

static fdy_status compile(const fdy_tokenizer *tok, const char *pattern,
                          size_t len, uint32_t options, const char *what,
                          pcre2_code **out, fdy_error *err) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  *out = pcre2_compile((PCRE2_SPTR)pattern, len, options, &code, &offset, NULL);
  if (!*out) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(code, message, sizeof message);
    fdy_status s = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                                 "%s: the %s does not compile with PCRE2 at "
                                 "offset %zu: %s",
                                 tok->source, what, (size_t)offset, message);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", tok->source);
    }
    return s;
  }
  /* JIT when this PCRE2 has it; the interpreter otherwise. */
  (void)pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
  return FDY_OK;
}

static fdy_status step_error(const fdy_tokenizer *tok, const tok_step *step,
                             fdy_status kind, const char *what,
                             fdy_error *err) {
  fdy_error_set(err, kind, "%s: entry '%s' %s", tok->source, step->field, what);
  if (err) {
    snprintf(err->name, sizeof err->name, "%s", step->field);
  }
  return kind;
}

/* Texts on which a pattern with nested or overlapping repeats backtracks
 * exponentially: a long run of one kind of character, then one that ends
 * every match attempt differently. */
static const char *const probe_texts[] = {
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!",
    "                                                 !",
    "1111111111111111111111111111111111111111111111111!",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n!",
    "a a a a a a a a a a a a a a a a a a a a a a a a a !",
    "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1\x01",
    "''''''''''''''''''''''''''''''''''''''''''''''''''a",
    "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!a",
};

fdy_status tok_add_step(fdy_tokenizer *tok, const char *pattern, size_t len,
                        const tok_step *step, fdy_error *err) {
  if (tok->step_count == TOK_MAX_STEPS) {
    return step_error(tok, step, FDY_ERR_UNSUPPORTED,
                      "is one pre-tokenizer step too many (Foundry takes 8)",
                      err);
  }
  tok_step *s = &tok->steps[tok->step_count];
  *s = *step;
  s->re = NULL;
  if (!pattern) {
    tok->step_count++;
    return FDY_OK;
  }
  char what[160];
  snprintf(what, sizeof what, "pre-tokenizer regex (%s)", step->field);
  fdy_status status = compile(tok, pattern, len,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              what, &s->re, err);
  if (status != FDY_OK) {
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", step->field);
    }
    return status;
  }
  tok->step_count++; /* owned by tok from here */
  uint32_t min = 0;
  if (pcre2_pattern_info(s->re, PCRE2_INFO_MINLENGTH, &min) != 0 || min == 0) {
    return step_error(tok, step, FDY_ERR_SCHEMA,
                      "can match the empty string; a pre-tokenizer regex "
                      "must match at least one character",
                      err);
  }
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  pcre2_match_context *mc = pcre2_match_context_create(NULL);
  if (!md || !mc) {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  pcre2_set_match_limit(mc, TOK_PROBE_MATCH_LIMIT);
  pcre2_set_depth_limit(mc, TOK_PROBE_MATCH_LIMIT);
  int bad = 0;
  for (size_t i = 0; !bad && i < sizeof probe_texts / sizeof *probe_texts;
       i++) {
    const char *t = probe_texts[i];
    size_t n = strlen(t), at = 0;
    while (at < n) {
      int rc = pcre2_match(s->re, (PCRE2_SPTR)t, n, at, 0, md, mc);
      if (rc == PCRE2_ERROR_NOMATCH) {
        break;
      }
      if (rc < 0) {
        bad = rc;
        break;
      }
      PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
      at = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
  }
  pcre2_match_data_free(md);
  pcre2_match_context_free(mc);
  if (bad) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(bad, message, sizeof message);
    char text[400];
    snprintf(text, sizeof text,
             "backtracks catastrophically: on a text of 50 bytes it passes "
             "PCRE2's limits (%s)",
             (const char *)message);
    return step_error(tok, step, FDY_ERR_SCHEMA, text, err);
  }
  return FDY_OK;
}

/* The added tokens (tok->added, longest first) with normalized ==
 * want_norm as one alternation, so that the longest spelling wins at a
 * position; ASCII punctuation is escaped as \x{..}. *out stays NULL when
 * there is none. */
static fdy_status compile_added(fdy_tokenizer *tok, bool want_norm,
                                pcre2_code **out, fdy_error *err) {
  fdy_status status = FDY_OK;
  char *pattern = NULL;
  size_t len = 0, cap = 0;
  bool first = true;
  for (size_t i = 0; i < tok->added_count; i++) {
    const tok_added *a = &tok->added[i];
    if (((tok->tokens[a->id].added & TOK_NORMALIZED) != 0) != want_norm) {
      continue;
    }
    bool ok = first || append(&pattern, &len, &cap, "|", 1);
    first = false;
    for (uint32_t k = 0; ok && k < a->match.len; k++) {
      unsigned char c = (unsigned char)tok->arena[a->match.offset + k];
      char esc[8];
      bool plain = c >= 0x80 || (c >= '0' && c <= '9') ||
                   (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      if (plain) {
        ok = append(&pattern, &len, &cap, (const char *)&c, 1);
      } else {
        snprintf(esc, sizeof esc, "\\x{%02x}", c);
        ok = append(&pattern, &len, &cap, esc, strlen(esc));
      }
    }
    if (!ok) {
      status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
  }
  if (!first) {
    status = compile(tok, pattern, len, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                     "added tokens", out, err);
  }
cleanup:
  free(pattern);
  return status;
}

fdy_status tok_finish(fdy_tokenizer *tok, bool all_bytes, fdy_error *err) {
  tok->count = tok->capacity;
  for (int b = 0; all_bytes && b < 256; b++) {
    if (tok->byte_ids[b] < 0) {
      fdy_error_set(err, FDY_ERR_FORMAT,
                    "%s: no token for the single byte 0x%02x (a byte-level "
                    "BPE needs all 256)",
                    tok->source, b);
      if (err) {
        err->ids[0] = b;
        snprintf(err->name, sizeof err->name, "%s", tok->source);
      }
      return FDY_ERR_FORMAT;
    }
  }
  size_t n = 0;
  for (uint32_t id = 0; id < tok->count; id++) {
    n += tok->tokens[id].added != 0;
  }
  if (n > 0 && !(tok->added = malloc(n * sizeof *tok->added))) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  /* a normalized token is matched as the normalizer writes it (Hugging
   * Face's AddedVocabulary): Llama 2's Prepend makes <x> "\u2581<x>" */
  for (uint32_t id = 0; id < tok->count; id++) {
    const tok_entry *e = &tok->tokens[id];
    if (!e->added) {
      continue;
    }
    tok_added *a = &tok->added[tok->added_count++];
    *a = (tok_added){id, {e->offset, e->len}};
    if (!(e->added & TOK_NORMALIZED) || tok->norm_count == 0) {
      continue;
    }
    char *norm = NULL;
    size_t len = 0;
    fdy_status s =
        tok_normalize(tok, tok->arena + e->offset, e->len, &norm, &len, err);
    tok_define_result r =
        s == FDY_OK ? tok_arena_append(tok, norm, len, &a->match) : TOK_DEFINED;
    free(norm);
    if (s != FDY_OK) {
      return s;
    }
    if (r == TOK_NO_MEMORY) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (r != TOK_DEFINED) {
      return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                           "%s: the tokens pass 4 GiB", tok->source);
    }
  }
  if (n > 0) {
    qsort(tok->added, n, sizeof *tok->added, by_length_desc);
  }
  bool single_word = false;
  for (uint32_t i = 0; i < tok->added_count; i++) {
    const tok_entry *e = &tok->tokens[tok->added[i].id];
    tok->plain_added |= !e->special;
    single_word |= (e->added & TOK_SINGLE_WORD) != 0;
  }
  fdy_status status = compile_added(tok, false, &tok->added_raw, err);
  if (status == FDY_OK && single_word) {
    status = compile(tok, "\\w", PCRE2_ZERO_TERMINATED,
                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                     "word pattern", &tok->word, err);
  }
  if (status == FDY_OK) {
    status = compile_added(tok, true, &tok->added_norm, err);
  }
  if (status != FDY_OK) {
    return status;
  }
  tok->match = pcre2_match_data_create(1, NULL);
  tok->match_context = pcre2_match_context_create(NULL);
  tok->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
  if (!tok->match || !tok->match_context || !tok->jit_stack) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  pcre2_jit_stack_assign(tok->match_context, NULL, tok->jit_stack);
  if (tok->bos < 0) {
    tok->bos = fdy_tokenizer_special_id(tok, "<|begin_of_text|>");
  }
  if (tok->eos < 0) {
    tok->eos = fdy_tokenizer_special_id(tok, "<|end_of_text|>");
  }
  return FDY_OK;
}

fdy_status tok_read_file(const char *path, char **out, size_t *len,
                         fdy_error *err) {
  return fdy_input_read(path, "tokenizer file", TOK_MAX_FILE_BYTES, out, len,
                        err);
}

void fdy_tokenizer_destroy(fdy_tokenizer *tok) {
  if (!tok) {
    return;
  }
  pcre2_jit_stack_free(tok->jit_stack);
  pcre2_match_context_free(tok->match_context);
  pcre2_match_data_free(tok->match);
  pcre2_code_free(tok->added_raw);
  pcre2_code_free(tok->added_norm);
  pcre2_code_free(tok->word);
  for (uint32_t i = 0; i < tok->step_count; i++) {
    pcre2_code_free(tok->steps[i].re);
  }
  tok_scratch_free(&tok->scratch);
  free(tok->chat_template);
  free(tok->added);
  free(tok->decoded);
  free(tok->merges);
  free(tok->map);
  free(tok->tokens);
  free(tok->arena);
  free(tok->source);
  free(tok);
}

uint32_t fdy_tokenizer_vocab_size(const fdy_tokenizer *tok) {
  return tok->count;
}

int32_t fdy_tokenizer_bos(const fdy_tokenizer *tok) {
  return tok->bos;
}

int32_t fdy_tokenizer_eos(const fdy_tokenizer *tok) {
  return tok->eos;
}

bool fdy_tokenizer_add_bos(const fdy_tokenizer *tok) {
  return tok->add_bos && tok->bos >= 0;
}

bool fdy_tokenizer_is_special(const fdy_tokenizer *tok, int32_t id) {
  return id >= 0 && (uint32_t)id < tok->count && tok->tokens[id].special;
}

int32_t tok_added_lookup(const fdy_tokenizer *tok, const char *bytes,
                         size_t len, bool special_only) {
  for (uint32_t i = 0; i < tok->added_count; i++) {
    const tok_entry *e = &tok->tokens[tok->added[i].id];
    if (e->len == len && (e->special || !special_only) &&
        memcmp(tok->arena + e->offset, bytes, len) == 0) {
      return (int32_t)tok->added[i].id;
    }
  }
  return -1;
}

int32_t fdy_tokenizer_special_id(const fdy_tokenizer *tok, const char *name) {
  return tok_added_lookup(tok, name, strlen(name), true);
}

uint32_t fdy_tokenizer_stop_ids(const fdy_tokenizer *tok,
                                int32_t ids[FDY_TOKENIZER_MAX_STOP]) {
  uint32_t n = 0;
  if (tok->eos >= 0) {
    ids[n++] = tok->eos;
  }
  int32_t eot = fdy_tokenizer_special_id(tok, "<|eot_id|>");
  if (eot >= 0 && eot != tok->eos) {
    ids[n++] = eot;
  }
  return n;
}

const char *fdy_tokenizer_chat_template(const fdy_tokenizer *tok) {
  return tok->chat_template;
}

const char *fdy_tokenizer_source(const fdy_tokenizer *tok) {
  return tok->source;
}

void fdy_tokens_free(fdy_tokens *tokens) {
  if (!tokens) {
    return;
  }
  free(tokens->ids);
  *tokens = (fdy_tokens){0};
}

fdy_status fdy_tokens_push(fdy_tokens *tokens, int32_t id, fdy_error *err) {
  if (tokens->count == tokens->capacity) {
    size_t cap = tokens->capacity ? tokens->capacity : 64;
    if (tokens->capacity > SIZE_MAX / 2 / sizeof *tokens->ids) {
      return fdy_error_set(err, FDY_ERR_OVERFLOW, "too many token ids");
    }
    cap = tokens->capacity ? tokens->capacity * 2 : cap;
    int32_t *ids = realloc(tokens->ids, cap * sizeof *ids);
    if (!ids) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    tokens->ids = ids;
    tokens->capacity = cap;
  }
  tokens->ids[tokens->count++] = id;
  return FDY_OK;
}
