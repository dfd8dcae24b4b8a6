/* Encoding: special tokens (on request), the pre-tokenizer regex (PCRE2,
 * UTF-8 + UCP, JIT when available, invalid UTF-8 skipped and emitted as
 * single-byte tokens), and byte-pair merging by rank as tiktoken does it:
 * repeatedly merge the adjacent pair whose concatenation has the lowest
 * rank, the leftmost on ties. Short pieces use tiktoken's array scan;
 * long ones (a 1 MB run of letters is one piece) a heap, so that encoding
 * stays O(n log n). Both give the same merges. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* Pieces up to this many bytes use the array scan (quadratic, but the
 * fastest for the short pieces of ordinary text). */
#define SHORT_PIECE 128

typedef struct part {
  uint32_t start;  /* first byte of the part in the piece */
  uint32_t rank;   /* of the pair (this part, next part), or TOK_NO_RANK */
  int32_t pair_id; /* id of that pair's concatenation */
  int32_t id;      /* id of this part */
} part;

typedef struct candidate {
  uint64_t key; /* rank << 32 | start of the pair's left part */
  uint32_t end; /* end of the pair's right part */
  int32_t id;
} candidate;

void tok_scratch_free(tok_scratch *scratch) {
  free(scratch->parts);
  free(scratch->next);
  free(scratch->prev);
  free(scratch->ids);
  free(scratch->heap);
  *scratch = (tok_scratch){0};
}

static fdy_status out_of_memory(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
}

/* The rank and id of bytes [a, b) of the piece, TOK_NO_RANK when they are
 * not a token that a merge produces. */
static inline uint32_t pair_rank(const fdy_tokenizer *tok, const char *piece,
                                 uint32_t a, uint32_t b, int32_t *id) {
  int32_t found = tok_lookup(tok, piece + a, b - a);
  if (found < 0) {
    return TOK_NO_RANK;
  }
  *id = found;
  return tok->tokens[found].rank;
}

static fdy_status merge_short(fdy_tokenizer *tok, const char *piece, uint32_t n,
                              fdy_tokens *out, fdy_error *err) {
  tok_scratch *s = &tok->scratch;
  if (s->parts_cap < (size_t)n + 1) {
    part *parts = realloc(s->parts, ((size_t)n + 1) * sizeof *parts);
    if (!parts) {
      return out_of_memory(err);
    }
    s->parts = parts;
    s->parts_cap = (size_t)n + 1;
  }
  part *p = s->parts;
  for (uint32_t i = 0; i <= n; i++) {
    p[i] = (part){i, TOK_NO_RANK, -1,
                  i < n ? tok->byte_ids[(unsigned char)piece[i]] : -1};
  }
  for (uint32_t i = 0; i + 1 < n; i++) {
    p[i].rank = pair_rank(tok, piece, i, i + 2, &p[i].pair_id);
  }
  /* count parts and a sentinel at p[count - 1] (start = n). */
  uint32_t count = n + 1;
  for (;;) {
    uint32_t best = TOK_NO_RANK, at = 0;
    for (uint32_t i = 0; i + 1 < count; i++) {
      if (p[i].rank < best) {
        best = p[i].rank;
        at = i;
      }
    }
    if (best == TOK_NO_RANK) {
      break;
    }
    p[at].id = p[at].pair_id;
    memmove(&p[at + 1], &p[at + 2], (count - at - 2) * sizeof *p);
    count--;
    if (at > 0) {
      p[at - 1].rank = pair_rank(tok, piece, p[at - 1].start, p[at + 1].start,
                                 &p[at - 1].pair_id);
    }
    p[at].rank = at + 2 < count ? pair_rank(tok, piece, p[at].start,
                                            p[at + 2].start, &p[at].pair_id)
                                : TOK_NO_RANK;
  }
  for (uint32_t i = 0; i + 1 < count; i++) {
    fdy_status status = fdy_tokens_push(out, p[i].id, err);
    if (status != FDY_OK) {
      return status;
    }
  }
  return FDY_OK;
}

static void heap_push(candidate *heap, size_t *size, candidate c) {
  size_t i = (*size)++;
  while (i > 0 && c.key < heap[(i - 1) / 2].key) {
    heap[i] = heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  heap[i] = c;
}

static candidate heap_pop(candidate *heap, size_t *size) {
  candidate top = heap[0];
  candidate last = heap[--*size];
  size_t i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= *size) {
      break;
    }
    if (child + 1 < *size) {
      child += heap[child + 1].key < heap[child].key;
    }
    if (heap[child].key >= last.key) {
      break;
    }
    heap[i] = heap[child];
    i = child;
  }
  if (*size > 0) {
    heap[i] = last;
  }
  return top;
}

/* Pushes the pair that starts at left and ends at end when it is a token
 * that a merge produces. */
static void push_pair(const fdy_tokenizer *tok, const char *piece,
                      candidate *heap, size_t *size, uint32_t left,
                      uint32_t end) {
  int32_t id = -1;
  uint32_t rank = pair_rank(tok, piece, left, end, &id);
  if (rank != TOK_NO_RANK) {
    heap_push(heap, size, (candidate){(uint64_t)rank << 32 | left, end, id});
  }
}

/* Parts are named by their first byte; next[i] is the start of the part
 * after part i (n at the end), prev[i] the one before. A candidate is
 * current while its left part still exists and still ends where the
 * candidate's right part began: a pair's end only grows, so an equal end
 * means the same pair. */
static fdy_status merge_long(fdy_tokenizer *tok, const char *piece, uint32_t n,
                             fdy_tokens *out, fdy_error *err) {
  tok_scratch *s = &tok->scratch;
  if (s->long_cap < (size_t)n + 1) {
    size_t cap = (size_t)n + 1;
    uint32_t *next = realloc(s->next, cap * sizeof *next);
    if (next) {
      s->next = next;
    }
    uint32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev) {
      s->prev = prev;
    }
    int32_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (ids) {
      s->ids = ids;
    }
    candidate *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) {
      s->heap = heap;
    }
    if (!next || !prev || !ids || !heap) {
      return out_of_memory(err);
    }
    s->long_cap = cap;
  }
  uint32_t *next = s->next, *prev = s->prev;
  int32_t *ids = s->ids;
  candidate *heap = s->heap;
  size_t size = 0;
  for (uint32_t i = 0; i < n; i++) {
    next[i] = i + 1;
    prev[i] = i - 1; /* prev[0] is never read */
    ids[i] = tok->byte_ids[(unsigned char)piece[i]];
  }
  for (uint32_t i = 0; i + 1 < n; i++) {
    push_pair(tok, piece, heap, &size, i, i + 2);
  }
  while (size > 0) {
    candidate c = heap_pop(heap, &size);
    uint32_t left = (uint32_t)c.key;
    uint32_t right = next[left];
    if (ids[left] < 0 || right >= n || next[right] != c.end) {
      continue; /* stale: one of its parts merged since */
    }
    ids[left] = c.id;
    ids[right] = -1;
    next[left] = c.end;
    if (c.end < n) {
      prev[c.end] = left;
    }
    if (left > 0) {
      push_pair(tok, piece, heap, &size, prev[left], c.end);
    }
    if (c.end < n) {
      push_pair(tok, piece, heap, &size, left, next[c.end]);
    }
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    fdy_status status = fdy_tokens_push(out, ids[i], err);
    if (status != FDY_OK) {
      return status;
    }
  }
  return FDY_OK;
}

static fdy_status encode_piece(fdy_tokenizer *tok, const char *piece,
                               uint32_t n, fdy_tokens *out, fdy_error *err) {
  if (n == 1) {
    return fdy_tokens_push(out, tok->byte_ids[(unsigned char)piece[0]], err);
  }
  if (tok->ignore_merges) {
    int32_t id = tok_lookup(tok, piece, n);
    if (id >= 0) {
      return fdy_tokens_push(out, id, err);
    }
  }
  return n <= SHORT_PIECE ? merge_short(tok, piece, n, out, err)
                          : merge_long(tok, piece, n, out, err);
}

/* One token per byte of [a, b): bytes the regex skipped (invalid UTF-8). */
static fdy_status encode_bytes(const fdy_tokenizer *tok, const char *text,
                               size_t a, size_t b, fdy_tokens *out,
                               fdy_error *err) {
  for (size_t i = a; i < b; i++) {
    fdy_status status =
        fdy_tokens_push(out, tok->byte_ids[(unsigned char)text[i]], err);
    if (status != FDY_OK) {
      return status;
    }
  }
  return FDY_OK;
}

static fdy_status regex_failure(int rc, fdy_error *err) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(rc, message, sizeof message);
  return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                       "the pre-tokenizer regex failed: %s", message);
}

/* Text without special tokens: split by the regex, merge each piece. */
static fdy_status encode_ordinary(fdy_tokenizer *tok, const char *text,
                                  size_t len, fdy_tokens *out, fdy_error *err) {
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(tok->match);
  size_t at = 0;
  while (at < len) {
    int rc = pcre2_match(tok->split, (PCRE2_SPTR)text, len, at, 0, tok->match,
                         tok->match_context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      return encode_bytes(tok, text, at, len, out, err);
    }
    if (rc < 0) {
      return regex_failure(rc, err);
    }
    size_t start = ovector[0], end = ovector[1];
    if (end <= start) {
      return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                           "the pre-tokenizer regex matched an empty string "
                           "at byte %zu",
                           start);
    }
    fdy_status status = encode_bytes(tok, text, at, start, out, err);
    if (status == FDY_OK) {
      status =
          encode_piece(tok, text + start, (uint32_t)(end - start), out, err);
    }
    if (status != FDY_OK) {
      return status;
    }
    at = end;
  }
  return FDY_OK;
}

fdy_status fdy_tokenizer_encode(fdy_tokenizer *tok, const char *text,
                                size_t len, unsigned flags, fdy_tokens *out,
                                fdy_error *err) {
  if (flags & ~(unsigned)FDY_ENCODE_SPECIAL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "unknown encode flags 0x%x", flags);
  }
  if (len > UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "text of %zu bytes: at most 4 GiB - 1 can be encoded "
                         "at once",
                         len);
  }
  if (!(flags & FDY_ENCODE_SPECIAL) || !tok->specials) {
    return encode_ordinary(tok, text, len, out, err);
  }
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(tok->match);
  size_t at = 0;
  while (at < len) {
    int rc = pcre2_match(tok->specials, (PCRE2_SPTR)text, len, at, 0,
                         tok->match, tok->match_context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      return encode_ordinary(tok, text + at, len - at, out, err);
    }
    if (rc < 0) {
      return regex_failure(rc, err);
    }
    size_t start = ovector[0], end = ovector[1];
    int32_t id = tok_special_lookup(tok, text + start, end - start);
    fdy_status status = encode_ordinary(tok, text + at, start - at, out, err);
    if (status == FDY_OK) {
      status = fdy_tokens_push(out, id, err);
    }
    if (status != FDY_OK) {
      return status;
    }
    at = end;
  }
  return FDY_OK;
}
