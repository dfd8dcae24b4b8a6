/* The tiktoken ranks file (Meta's tokenizer.model for Llama 3): one line
 * per token, "base64(token bytes) SPACE rank", ranks 0..n-1 in any order,
 * blank lines skipped as tiktoken does. The Llama 3 pre-tokenizer and 256
 * special tokens (ids n..n+255) complete it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define SPECIAL_COUNT 256

typedef struct parser {
  const char *path;
  fdy_error *err;
  uint32_t *line_of; /* the line that defined each rank */
} parser;

static fdy_status line_error(const parser *p, uint32_t line, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));

/* FDY_ERR_FORMAT "PATH:LINE: MESSAGE", err->line = line, err->name = path. */
static fdy_status line_error(const parser *p, uint32_t line, const char *fmt,
                             ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof message, fmt, args);
  va_end(args);
  fdy_error_set(p->err, FDY_ERR_FORMAT, "%s:%u: %s", p->path, line, message);
  if (p->err) {
    p->err->line = line;
    snprintf(p->err->name, sizeof p->err->name, "%s", p->path);
  }
  return FDY_ERR_FORMAT;
}

static int base64_value(unsigned char c) {
  return c >= 'A' && c <= 'Z'   ? c - 'A'
         : c >= 'a' && c <= 'z' ? c - 'a' + 26
         : c >= '0' && c <= '9' ? c - '0' + 52
         : c == '+'             ? 62
         : c == '/'             ? 63
                                : -1;
}

/* Strict standard base64 with padding; *n bytes into out (room for
 * len / 4 * 3). False on any bad character, length or padding. */
static bool base64_decode(const char *in, size_t len, char *out, size_t *n) {
  if (len == 0 || len % 4 != 0) {
    return false;
  }
  size_t pad = in[len - 1] == '=' ? (in[len - 2] == '=' ? 2 : 1) : 0;
  size_t at = 0;
  for (size_t i = 0; i < len; i += 4) {
    uint32_t v = 0;
    for (size_t k = 0; k < 4; k++) {
      int d = (i + k >= len - pad) ? 0 : base64_value((unsigned char)in[i + k]);
      if (d < 0) {
        return false;
      }
      v = v << 6 | (uint32_t)d;
    }
    out[at++] = (char)(v >> 16);
    out[at++] = (char)(v >> 8);
    out[at++] = (char)v;
  }
  /* Padding bits must be zero, as a canonical encoder writes them. */
  uint32_t last = (uint32_t)base64_value((unsigned char)in[len - 1 - pad]);
  if ((pad == 1 && (last & 0x3)) || (pad == 2 && (last & 0xF))) {
    return false;
  }
  *n = at - pad;
  return true;
}

static fdy_status parse_line(fdy_tokenizer *tok, const parser *p, uint32_t line,
                             const char *text, size_t len, uint32_t ranks,
                             char *scratch) {
  const char *space = memchr(text, ' ', len);
  if (!space || space + 1 == text + len) {
    return line_error(p, line, "missing rank (expected 'BASE64 RANK')");
  }
  size_t b64_len = (size_t)(space - text);
  uint64_t rank = 0;
  for (const char *c = space + 1; c < text + len; c++) {
    if (*c < '0' || *c > '9') {
      return line_error(
          p, line, "rank '%.*s' is not a number",
          (int)(text + len - space - 1 > 32 ? 32 : text + len - space - 1),
          space + 1);
    }
    rank = rank * 10 + (uint64_t)(*c - '0');
    if (rank >= ranks) {
      return line_error(p, line,
                        "rank out of range: the file has %u ranks, so they "
                        "are 0 to %u (one is missing or wrong)",
                        ranks, ranks - 1);
    }
  }
  size_t n = 0;
  if (!base64_decode(text, b64_len, scratch, &n)) {
    return line_error(p, line, "bad base64 '%.*s'",
                      (int)(b64_len > 64 ? 64 : b64_len), text);
  }
  int32_t other = -1;
  switch (tok_define(tok, (uint32_t)rank, scratch, n, false, 0, &other)) {
  case TOK_DEFINED:
    p->line_of[rank] = line;
    return FDY_OK;
  case TOK_DUPLICATE_ID:
    return line_error(p, line, "duplicate rank %llu (also on line %u)",
                      (unsigned long long)rank, p->line_of[rank]);
  case TOK_DUPLICATE_BYTES:
    return line_error(p, line,
                      "duplicate token: rank %d (line %u) has the same bytes",
                      other, p->line_of[other]);
  case TOK_NO_MEMORY:
    return fdy_error_set(p->err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  case TOK_ID_RANGE:
  case TOK_TOO_LARGE:
    break;
  }
  return line_error(p, line, "token does not fit the tokenizer");
}

/* The Llama 3 special token i (0 to 255), as Meta's tokenizer names it. */
static void special_name(uint32_t i, char *buf, size_t cap) {
  static const char *const named[] = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|finetune_right_pad_id|>",
      "<|reserved_special_token_2|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|eom_id|>",
      "<|eot_id|>",
      "<|python_tag|>",
  };
  const uint32_t count = sizeof named / sizeof named[0];
  if (i < count) {
    snprintf(buf, cap, "%s", named[i]);
  } else {
    snprintf(buf, cap, "<|reserved_special_token_%u|>", i - count + 3);
  }
}

fdy_status tok_load_tiktoken_text(const char *path, const char *text,
                                  size_t len, fdy_tokenizer **out,
                                  fdy_error *err) {
  *out = NULL;
  fdy_tokenizer *tok = NULL;
  char *scratch = NULL;
  parser p = {path, err, NULL};
  fdy_status status = FDY_OK;
  uint32_t ranks = 0;
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    if (end > i) {
      if (ranks == INT32_MAX - SPECIAL_COUNT) {
        status = line_error(&p, ranks + 1, "too many ranks");
        goto cleanup;
      }
      ranks++;
    }
    i = end + 1;
  }
  if (ranks == 0) {
    status = fdy_error_set(err, FDY_ERR_FORMAT, "%s: no ranks", path);
    if (err) {
      snprintf(err->name, sizeof err->name, "%s", path);
    }
    goto cleanup;
  }
  p.line_of = malloc(ranks * sizeof *p.line_of);
  scratch = malloc(len);
  if (!p.line_of || !scratch) {
    status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    goto cleanup;
  }
  status = tok_create(path, ranks + SPECIAL_COUNT, &tok, err);
  uint32_t line = 0;
  for (size_t i = 0; status == FDY_OK && i < len;) {
    const char *nl = memchr(text + i, '\n', len - i);
    size_t end = nl ? (size_t)(nl - text) : len;
    line++;
    if (end > i) {
      status = parse_line(tok, &p, line, text + i, end - i, ranks, scratch);
    }
    i = end + 1;
  }
  if (status != FDY_OK) {
    goto cleanup;
  }
  for (uint32_t id = 0; id < ranks; id++) {
    tok->tokens[id].rank = id;
  }
  for (uint32_t i = 0; i < SPECIAL_COUNT; i++) {
    char name[64];
    int32_t other = -1;
    special_name(i, name, sizeof name);
    if (tok_define(tok, ranks + i, name, strlen(name), true, TOK_ADDED,
                   &other) != TOK_DEFINED) {
      status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
      goto cleanup;
    }
  }
  tok->ignore_merges = true; /* tiktoken emits a piece that is a token */
  tok->add_bos = true;       /* Llama 3 */
  tok_step split = {.field = "pre-tokenizer"};
  status =
      tok_add_step(tok, TOK_LLAMA3_PATTERN, PCRE2_ZERO_TERMINATED, &split, err);
  if (status == FDY_OK) {
    status = tok_finish(tok, true, err);
  }
  if (status != FDY_OK) {
    goto cleanup;
  }
  *out = tok;
  tok = NULL;
cleanup:
  fdy_tokenizer_destroy(tok);
  free(scratch);
  free(p.line_of);
  return status;
}

fdy_status fdy_tokenizer_load_tiktoken(const char *path, fdy_tokenizer **out,
                                       fdy_error *err) {
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  fdy_status status = tok_read_file(path, &text, &len, err);
  if (status == FDY_OK) {
    status = tok_load_tiktoken_text(path, text, len, out, err);
  }
  free(text);
  return status;
}
