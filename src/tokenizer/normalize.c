/* Rewriting text as Hugging Face's normalizers (NFC, Prepend, Replace with
 * a String pattern) and the Metaspace pre-tokenizer do, on bytes: invalid
 * UTF-8 is carried through unchanged. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

fdy_status tok_rewrite(const char *text, size_t len, const tok_literal *from,
                       const tok_literal *to, const tok_literal *prefix,
                       char **out, size_t *n, fdy_error *err) {
  *out = NULL;
  *n = 0;
  size_t hits = 0;
  for (size_t i = 0; from->len > 0 && i + from->len <= len;) {
    if (memcmp(text + i, from->bytes, from->len) == 0) {
      hits++;
      i += from->len;
    } else {
      i++;
    }
  }
  uint64_t total = 0;
  if (fdy_mul_u64(hits, to->len, &total, err) != FDY_OK ||
      fdy_add_u64(total, len + (prefix ? prefix->len : 0), &total, err) !=
          FDY_OK) {
    return FDY_ERR_OVERFLOW;
  }
  if (total >= SIZE_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "normalized text too large");
  }
  char *buf = malloc((size_t)total + 1);
  if (!buf) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  size_t at = 0;
  if (prefix) {
    memcpy(buf, prefix->bytes, prefix->len);
    at = prefix->len;
  }
  for (size_t i = 0; i < len;) {
    if (from->len > 0 && i + from->len <= len &&
        memcmp(text + i, from->bytes, from->len) == 0) {
      memcpy(buf + at, to->bytes, to->len);
      at += to->len;
      i += from->len;
    } else {
      buf[at++] = text[i++];
    }
  }
  *out = buf;
  *n = at;
  return FDY_OK;
}

fdy_status tok_normalize(const fdy_tokenizer *tok, const char *text, size_t len,
                         char **out, size_t *n, fdy_error *err) {
  static const tok_literal none = {{0}, 0};
  char *cur = NULL;
  size_t cur_len = 0;
  fdy_status s =
      tok_rewrite(text, len, &none, &none, NULL, &cur, &cur_len, err);
  for (uint32_t i = 0; s == FDY_OK && i < tok->norm_count; i++) {
    const tok_norm *step = &tok->norms[i];
    char *next = NULL;
    size_t next_len = 0;
    if (step->kind == TOK_NORM_NFC) {
      s = tok_nfc(cur, cur_len, &next, &next_len, err);
    } else if (step->kind == TOK_NORM_PREPEND) {
      s = tok_rewrite(cur, cur_len, &none, &none,
                      cur_len > 0 ? &step->to : NULL, &next, &next_len, err);
    } else {
      s = tok_rewrite(cur, cur_len, &step->from, &step->to, NULL, &next,
                      &next_len, err);
    }
    free(cur);
    cur = next;
    cur_len = next_len;
  }
  if (s != FDY_OK) {
    free(cur);
    return s;
  }
  *out = cur;
  *n = cur_len;
  return FDY_OK;
}

fdy_status tok_metaspace(const fdy_tokenizer *tok, const char *text, size_t len,
                         bool first, char **out, size_t *n, fdy_error *err) {
  static const tok_literal space = {" ", 1};
  const tok_literal *meta = &tok->meta;
  bool starts = (len > 0 && text[0] == ' ') ||
                (len >= meta->len && memcmp(text, meta->bytes, meta->len) == 0);
  bool prepend = tok->meta_prepend == TOK_PREPEND_ALWAYS ||
                 (tok->meta_prepend == TOK_PREPEND_FIRST && first);
  return tok_rewrite(text, len, &space, meta, prepend && !starts ? meta : NULL,
                     out, n, err);
}
