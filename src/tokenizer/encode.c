/* Encoding: added and special tokens (special ones on request), the
 * normalizer, Metaspace, the pre-tokenizer regexes (PCRE2, UTF-8 + UCP, JIT
 * when available, invalid UTF-8 skipped and emitted as single-byte tokens),
 * and byte-pair merging by rank: repeatedly merge the adjacent pair of the
 * lowest rank (tiktoken: of their concatenation; Hugging Face: of the
 * pair), the leftmost on ties. A piece starts as bytes (byte-level BPE) or
 * characters (SentencePiece-style, with byte fallback or an unknown token
 * for those that are no token). Short pieces use tiktoken's array scan;
 * long ones (a 1 MB run of letters is one piece) a heap, so that encoding
 * stays O(n log n). Both give the same merges. */
#include <stdio.h>
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

/* The rank and id of the pair of parts i and i + 1: tiktoken's rank of
 * their concatenation (bytes p[i].start to p[i + 2].start), or Hugging
 * Face's rank of the pair of ids. */
static inline uint32_t rank_at(const fdy_tokenizer *tok, const char *piece,
                               const part *p, uint32_t i, int32_t *id) {
  if (tok->pair_merges) {
    return tok_merge_rank(tok, p[i].id, p[i + 1].id, id);
  }
  return pair_rank(tok, piece, p[i].start, p[i + 2].start, id);
}

/* The length of the unit at p: its UTF-8 character, or 1 invalid byte. */
static uint32_t char_at(const char *p, uint32_t n) {
  size_t k = fdy_utf8_char_length(p, n);
  return k > 0 ? (uint32_t)k : 1;
}

/* The initial parts of a piece of n bytes into p (room for n), in order;
 * returns their count. A byte-level BPE takes each byte's token. A
 * SentencePiece-style one (char_units) each character's token, else its
 * bytes' <0xNN> tokens (byte_fallback), else unk (one for a run of unknown
 * characters when fuse_unk), as Hugging Face's BPE does. A unit without
 * any of these is left out. */
static uint32_t first_parts(const fdy_tokenizer *tok, const char *piece,
                            uint32_t n, part *p) {
  uint32_t count = 0;
  if (!tok->char_units) {
    for (uint32_t i = 0; i < n; i++) {
      int32_t id = tok->byte_ids[(unsigned char)piece[i]];
      if (id >= 0) {
        p[count++] = (part){i, TOK_NO_RANK, -1, id};
      }
    }
    return count;
  }
  for (uint32_t at = 0; at < n;) {
    uint32_t k = char_at(piece + at, n - at);
    int32_t id = tok_lookup(tok, piece + at, k);
    uint32_t start = at;
    if (id < 0 && tok->byte_fallback) {
      for (uint32_t end = at + k; at < end; at++) {
        p[count++] = (part){at, TOK_NO_RANK, -1,
                            tok->byte_ids[(unsigned char)piece[at]]};
      }
      continue;
    }
    at += k;
    while (id < 0 && tok->fuse_unk && at < n) {
      k = char_at(piece + at, n - at);
      if (tok_lookup(tok, piece + at, k) >= 0) {
        break;
      }
      at += k;
    }
    id = id >= 0 ? id : tok->unk;
    if (id >= 0) {
      p[count++] = (part){start, TOK_NO_RANK, -1, id};
    }
  }
  return count;
}

/* The scratch part array with room for n + 1 parts, or NULL. */
static part *parts_for(tok_scratch *s, uint32_t n) {
  if (s->parts_cap < (size_t)n + 1) {
    part *parts = realloc(s->parts, ((size_t)n + 1) * sizeof *parts);
    if (!parts) {
      return NULL;
    }
    s->parts = parts;
    s->parts_cap = (size_t)n + 1;
  }
  return s->parts;
}

static fdy_status merge_short(fdy_tokenizer *tok, const char *piece, uint32_t n,
                              fdy_tokens *out, fdy_error *err) {
  part *p = parts_for(&tok->scratch, n);
  if (!p) {
    return out_of_memory(err);
  }
  uint32_t count = first_parts(tok, piece, n, p);
  p[count++] = (part){n, TOK_NO_RANK, -1, -1};
  for (uint32_t i = 0; i + 2 < count; i++) {
    p[i].rank = rank_at(tok, piece, p, i, &p[i].pair_id);
  }
  /* count parts and a sentinel at p[count - 1] (start = n). */
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
      p[at - 1].rank = rank_at(tok, piece, p, at - 1, &p[at - 1].pair_id);
    }
    p[at].rank = at + 2 < count ? rank_at(tok, piece, p, at, &p[at].pair_id)
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

/* Pushes the pair of parts left and right (which ends at end) when a merge
 * makes it a token. */
static void push_pair(const fdy_tokenizer *tok, const char *piece,
                      const int32_t *ids, candidate *heap, size_t *size,
                      uint32_t left, uint32_t right, uint32_t end) {
  int32_t id = -1;
  uint32_t rank = tok->pair_merges
                      ? tok_merge_rank(tok, ids[left], ids[right], &id)
                      : pair_rank(tok, piece, left, end, &id);
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
  part *p = parts_for(s, n);
  if (!p) {
    return out_of_memory(err);
  }
  /* ids[i] is read only where a part starts */
  uint32_t first = n, last = n, i = 0, count = first_parts(tok, piece, n, p);
  for (uint32_t k = 0; k < count; k++) {
    i = p[k].start;
    ids[i] = p[k].id;
    if (last < n) {
      next[last] = i;
    } else {
      first = i;
    }
    prev[i] = last; /* prev[first] is never read */
    last = i;
  }
  if (last < n) {
    next[last] = n;
  }
  for (i = first; i < n && next[i] < n; i = next[i]) {
    push_pair(tok, piece, ids, heap, &size, i, next[i], next[next[i]]);
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
    if (left != first) {
      push_pair(tok, piece, ids, heap, &size, prev[left], left, c.end);
    }
    if (c.end < n) {
      push_pair(tok, piece, ids, heap, &size, left, c.end, next[c.end]);
    }
  }
  for (i = first; i < n; i = next[i]) {
    fdy_status status = fdy_tokens_push(out, ids[i], err);
    if (status != FDY_OK) {
      return status;
    }
  }
  return FDY_OK;
}

/* A byte that is not valid UTF-8: its single-byte or <0xNN> token, else
 * the unknown token, else nothing. */
static fdy_status push_byte(const fdy_tokenizer *tok, unsigned char c,
                            fdy_tokens *out, fdy_error *err) {
  int32_t id = tok->byte_ids[c] >= 0 ? tok->byte_ids[c] : tok->unk;
  return id < 0 ? FDY_OK : fdy_tokens_push(out, id, err);
}

static fdy_status encode_piece(fdy_tokenizer *tok, const char *piece,
                               uint32_t n, fdy_tokens *out, fdy_error *err) {
  if (n == 1 && !tok->char_units) {
    return push_byte(tok, (unsigned char)piece[0], out, err);
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

/* A final piece that may hold invalid UTF-8 (text between regex matches):
 * each invalid byte is its own single-byte token, the valid runs around
 * them are merged as pieces. */
static fdy_status encode_mixed(fdy_tokenizer *tok, const char *text, size_t len,
                               fdy_tokens *out, fdy_error *err) {
  const unsigned char *u = (const unsigned char *)text;
  size_t run = 0, i = 0;
  fdy_status status = FDY_OK;
  while (status == FDY_OK && i < len) {
    size_t k = fdy_utf8_char_length((const char *)(u + i), len - i);
    if (k > 0) {
      i += k;
      continue;
    }
    if (i > run) {
      status = encode_piece(tok, text + run, (uint32_t)(i - run), out, err);
    }
    if (status == FDY_OK) {
      status = push_byte(tok, u[i], out, err);
    }
    run = ++i;
  }
  if (status == FDY_OK && len > run) {
    status = encode_piece(tok, text + run, (uint32_t)(len - run), out, err);
  }
  return status;
}

static fdy_status regex_failure(const fdy_tokenizer *tok, const char *what,
                                int rc, size_t at, fdy_error *err) {
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(rc, message, sizeof message);
  fdy_status s = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                               "%s: the %s failed at byte %zu of a piece of "
                               "text: %s",
                               tok->source, what, at, message);
  if (err) {
    snprintf(err->name, sizeof err->name, "%s", tok->source);
  }
  return s;
}

/* One pcre2_match with the match and depth limits that bound its work by
 * the bytes left. */
static int match_bounded(fdy_tokenizer *tok, const pcre2_code *re,
                         const char *text, size_t len, size_t at) {
  uint64_t limit = TOK_MATCH_LIMIT_BASE +
                   (uint64_t)TOK_MATCH_LIMIT_PER_BYTE * (uint64_t)(len - at);
  uint32_t l = limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit;
  pcre2_set_match_limit(tok->match_context, l);
  pcre2_set_depth_limit(tok->match_context, l);
  return pcre2_match(re, (PCRE2_SPTR)text, len, at, 0, tok->match,
                     tok->match_context);
}

/* Pre-tokenizer step k on one piece (valid: the piece is known to be valid
 * UTF-8, a regex match), then the steps after it, then the merges. */
static fdy_status pre_tokenize(fdy_tokenizer *tok, uint32_t k, const char *text,
                               size_t len, bool valid, fdy_tokens *out,
                               fdy_error *err) {
  if (len == 0) {
    return FDY_OK;
  }
  if (k == tok->step_count) {
    return valid ? encode_piece(tok, text, (uint32_t)len, out, err)
                 : encode_mixed(tok, text, len, out, err);
  }
  const tok_step *step = &tok->steps[k];
  char *copy = NULL;
  if (step->prefix_space && text[0] != ' ') {
    if (len == SIZE_MAX || !(copy = malloc(len + 1))) {
      return out_of_memory(err);
    }
    copy[0] = ' ';
    memcpy(copy + 1, text, len);
    text = copy;
    len++;
  }
  fdy_status status = FDY_OK;
  if (!step->re) {
    status = pre_tokenize(tok, k + 1, text, len, valid, out, err);
    free(copy);
    return status;
  }
  /* Isolated: the pieces between matches and the matches; Removed: only
   * the pieces between (inverted: only the matches). */
  bool keep_gaps = !step->removed || !step->invert;
  bool keep_matches = !step->removed || step->invert;
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(tok->match);
  size_t at = 0;
  while (status == FDY_OK && at < len) {
    int rc = match_bounded(tok, step->re, text, len, at);
    if (rc == PCRE2_ERROR_NOMATCH) {
      break;
    }
    if (rc < 0) {
      char what[160];
      snprintf(what, sizeof what, "pre-tokenizer regex (%s)", step->field);
      status = regex_failure(tok, what, rc, at, err);
      break;
    }
    size_t start = ovector[0], end = ovector[1];
    if (end <= start) { /* tok_add_step refuses such patterns */
      end = start + 1;
    }
    if (keep_gaps && start > at) {
      status = pre_tokenize(tok, k + 1, text + at, start - at, false, out, err);
    }
    if (status == FDY_OK && keep_matches) {
      status =
          pre_tokenize(tok, k + 1, text + start, end - start, true, out, err);
    }
    at = end;
  }
  if (status == FDY_OK && keep_gaps && at < len) {
    status = pre_tokenize(tok, k + 1, text + at, len - at, false, out, err);
  }
  free(copy);
  return status;
}

/* Python's (and Rust's) whitespace: Unicode White_Space. */
static bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* The code point of the valid character of k bytes at p. */
static uint32_t code_point(const unsigned char *p, size_t k) {
  uint32_t cp = k == 1 ? p[0] : p[0] & (0x7F >> k);
  for (size_t i = 1; i < k; i++) {
    cp = cp << 6 | (p[i] & 0x3F);
  }
  return cp;
}

/* The start of the character that ends at end (valid UTF-8 or one byte). */
static size_t char_before(const char *text, size_t end) {
  size_t s = end - 1;
  while (s > 0 && end - s < 4 && ((unsigned char)text[s] & 0xC0) == 0x80) {
    s--;
  }
  return fdy_utf8_char_length(text + s, end - s) == end - s ? s : end - 1;
}

static bool space_at(const char *text, size_t len, size_t at, size_t *k) {
  *k = fdy_utf8_char_length(text + at, len - at);
  return *k > 0 && is_space(code_point((const unsigned char *)text + at, *k));
}

/* Whether the character at [at, end) is a word character (regex \w). */
static bool word_char(fdy_tokenizer *tok, const char *text, size_t at,
                      size_t end) {
  if (!tok->word) {
    return false;
  }
  int rc = pcre2_match(tok->word, (PCRE2_SPTR)text, end, at, PCRE2_ANCHORED,
                       tok->match, NULL);
  return rc > 0;
}

static fdy_status after_added(fdy_tokenizer *tok, int level, const char *text,
                              size_t len, bool special, bool first,
                              fdy_tokens *out, fdy_error *err);

/* The added token of this level spelled by these bytes (one was matched). */
static int32_t added_at(const fdy_tokenizer *tok, int level, const char *bytes,
                        size_t len) {
  for (uint32_t i = 0; i < tok->added_count; i++) {
    const tok_added *a = &tok->added[i];
    bool norm = (tok->tokens[a->id].added & TOK_NORMALIZED) != 0;
    if (norm == (level == 1) && a->match.len == len &&
        memcmp(tok->arena + a->match.offset, bytes, len) == 0) {
      return (int32_t)a->id;
    }
  }
  return -1;
}

/* Text split at the added tokens of one kind (level 0: those matched in the
 * text as it is; 1: those matched in the normalized text), with Hugging
 * Face's lstrip, rstrip and single_word; special ones only when special.
 * first: the text starts the text being encoded. */
static fdy_status split_added(fdy_tokenizer *tok, int level, const char *text,
                              size_t len, bool special, bool first,
                              fdy_tokens *out, fdy_error *err) {
  const pcre2_code *re = level == 0 ? tok->added_raw : tok->added_norm;
  if (!re || (!special && !tok->plain_added)) {
    return after_added(tok, level, text, len, special, first, out, err);
  }
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(tok->match);
  size_t from = 0, done = 0;
  fdy_status status = FDY_OK;
  while (status == FDY_OK && from < len) {
    int rc = pcre2_match(re, (PCRE2_SPTR)text, len, from, 0, tok->match,
                         tok->match_context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      break;
    }
    if (rc < 0) {
      return regex_failure(tok, "added tokens' pattern", rc, from, err);
    }
    size_t start = ovector[0], end = ovector[1];
    from = end;
    int32_t id = added_at(tok, level, text + start, end - start);
    const tok_entry *e = &tok->tokens[id];
    if (e->special && !special) {
      continue; /* text, as Hugging Face's encode_special_tokens */
    }
    if ((e->added & TOK_SINGLE_WORD) &&
        ((start > 0 && word_char(tok, text, char_before(text, start), start)) ||
         (end < len && word_char(tok, text, end, len)))) {
      continue;
    }
    size_t k = 0;
    if (e->added & TOK_LSTRIP) {
      while (start > done) {
        size_t s = char_before(text, start);
        if (!space_at(text, len, s, &k) || s + k != start) {
          break;
        }
        start = s;
      }
    }
    if (e->added & TOK_RSTRIP) {
      while (end < len && space_at(text, len, end, &k)) {
        end += k;
      }
    }
    if (start > done) {
      status = after_added(tok, level, text + done, start - done, special,
                           first && done == 0, out, err);
    }
    if (status == FDY_OK) {
      status = fdy_tokens_push(out, id, err);
    }
    done = end;
    from = end > from ? end : from;
  }
  if (status == FDY_OK && done < len) {
    status = after_added(tok, level, text + done, len - done, special,
                         first && done == 0, out, err);
  }
  return status;
}

/* A stretch between added tokens: after level 0, normalized and split at
 * the normalized added tokens; after level 1, Metaspace and the
 * pre-tokenizer steps. */
static fdy_status after_added(fdy_tokenizer *tok, int level, const char *text,
                              size_t len, bool special, bool first,
                              fdy_tokens *out, fdy_error *err) {
  if (len == 0) {
    return FDY_OK;
  }
  if (level == 0 && tok->norm_count == 0) {
    return split_added(tok, 1, text, len, special, first, out, err);
  }
  if (level == 1 && tok->meta.len == 0) {
    return pre_tokenize(tok, 0, text, len, false, out, err);
  }
  char *norm = NULL;
  size_t n = 0;
  fdy_status status =
      level == 0 ? tok_normalize(tok, text, len, &norm, &n, err)
                 : tok_metaspace(tok, text, len, first, &norm, &n, err);
  if (status == FDY_OK) {
    status = level == 0 ? split_added(tok, 1, norm, n, special, first, out, err)
                        : pre_tokenize(tok, 0, norm, n, false, out, err);
  }
  free(norm);
  return status;
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
  return split_added(tok, 0, text, len, (flags & FDY_ENCODE_SPECIAL) != 0, true,
                     out, err);
}
