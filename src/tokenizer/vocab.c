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

tok_define_result tok_define(fdy_tokenizer *tok, uint32_t id, const char *bytes,
                             size_t len, bool special, int32_t *other) {
  if (id >= tok->capacity) {
    return TOK_ID_RANGE;
  }
  if (tok->tokens[id].len != 0) {
    *other = (int32_t)id;
    return TOK_DUPLICATE_ID;
  }
  if (!special) {
    int32_t found = tok_lookup(tok, bytes, len);
    if (found >= 0) {
      *other = found;
      return TOK_DUPLICATE_BYTES;
    }
  }
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
  memcpy(tok->arena + tok->arena_len, bytes, len);
  tok->tokens[id] = (tok_entry){(uint32_t)tok->arena_len, (uint32_t)len,
                                TOK_NO_RANK, special};
  tok->arena_len += len;
  if (special) {
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

static int by_length_desc(const void *a, const void *b, void *ctx) {
  const fdy_tokenizer *tok = ctx;
  uint32_t la = tok->tokens[*(const uint32_t *)a].len;
  uint32_t lb = tok->tokens[*(const uint32_t *)b].len;
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

/* The specials (tok->special_ids, longest first) as one alternation, so
 * that the longest spelling wins at a position; ASCII punctuation is
 * escaped as \x{..}. */
static fdy_status compile_specials(fdy_tokenizer *tok, fdy_error *err) {
  fdy_status status = FDY_OK;
  char *pattern = NULL;
  size_t len = 0, cap = 0, n = 0;
  for (uint32_t id = 0; id < tok->count; id++) {
    n += tok->tokens[id].special;
  }
  if (n == 0) {
    return FDY_OK;
  }
  tok->special_ids = malloc(n * sizeof *tok->special_ids);
  if (!tok->special_ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  for (uint32_t id = 0; id < tok->count; id++) {
    if (tok->tokens[id].special) {
      tok->special_ids[tok->special_count++] = id;
    }
  }
  qsort_r(tok->special_ids, n, sizeof *tok->special_ids, by_length_desc, tok);
  for (size_t i = 0; i < n; i++) {
    const tok_entry *e = &tok->tokens[tok->special_ids[i]];
    bool ok = i == 0 || append(&pattern, &len, &cap, "|", 1);
    for (uint32_t k = 0; ok && k < e->len; k++) {
      unsigned char c = (unsigned char)tok->arena[e->offset + k];
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
  status = compile(tok, pattern, len, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                   "special tokens", &tok->specials, err);
cleanup:
  free(pattern);
  return status;
}

fdy_status tok_finish(fdy_tokenizer *tok, const char *pattern, fdy_error *err) {
  tok->count = tok->capacity;
  for (int b = 0; b < 256; b++) {
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
  fdy_status status = compile(tok, pattern, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              "pre-tokenizer regex", &tok->split, err);
  if (status != FDY_OK || (status = compile_specials(tok, err)) != FDY_OK) {
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
  pcre2_code_free(tok->specials);
  pcre2_code_free(tok->split);
  tok_scratch_free(&tok->scratch);
  free(tok->chat_template);
  free(tok->special_ids);
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

bool fdy_tokenizer_is_special(const fdy_tokenizer *tok, int32_t id) {
  return id >= 0 && (uint32_t)id < tok->count && tok->tokens[id].special;
}

int32_t tok_special_lookup(const fdy_tokenizer *tok, const char *bytes,
                           size_t len) {
  for (uint32_t i = 0; i < tok->special_count; i++) {
    const tok_entry *e = &tok->tokens[tok->special_ids[i]];
    if (e->len == len && memcmp(tok->arena + e->offset, bytes, len) == 0) {
      return (int32_t)tok->special_ids[i];
    }
  }
  return -1;
}

int32_t fdy_tokenizer_special_id(const fdy_tokenizer *tok, const char *name) {
  return tok_special_lookup(tok, name, strlen(name));
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
