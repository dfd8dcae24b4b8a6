/* The tokenizer's internal representation, shared by the loaders
 * (tiktoken.c, hf.c), the vocabulary (vocab.c), the encoder (encode.c) and
 * the decoders (decode.c). A tokenizer is a dense id table over one byte
 * arena, a hash map from the bytes of each ordinary token to its id, the
 * special tokens (matched only on request) and the pre-tokenizer regex. */
#ifndef FOUNDRY_TOKENIZER_INTERNAL_H
#define FOUNDRY_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <string.h>

#include "foundry/tokenizer.h"

/* No merge produces this token (or the pair is not a token). */
#define TOK_NO_RANK UINT32_MAX

/* Largest file a loader reads (Llama 3's tokenizer.json is 9 MB). */
#define TOK_MAX_FILE_BYTES ((uint64_t)1 << 30)

/* The Llama 3 pre-tokenizer (docs/tokenizer.md). */
#define TOK_LLAMA3_PATTERN                                                     \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "   \
  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct tok_entry {
  uint32_t offset; /* of its bytes in the arena */
  uint32_t len;    /* bytes; 0 = id not (yet) defined */
  uint32_t rank;   /* merge priority (lower merges first), or TOK_NO_RANK */
  bool special;    /* matched only with FDY_ENCODE_SPECIAL, not in the map */
} tok_entry;

/* Scratch of the merge loops, grown on demand and kept between calls. */
typedef struct tok_scratch {
  void *parts; /* short pieces: (piece bytes + 1) part records */
  size_t parts_cap;
  uint32_t *next, *prev; /* long pieces: linked parts by start byte */
  int32_t *ids;          /* long pieces: id of the part starting there */
  void *heap;            /* long pieces: candidate merges */
  size_t long_cap;       /* elements in next/prev/ids; heap holds 3x */
} tok_scratch;

struct fdy_tokenizer {
  char *source; /* the file loaded (owned) */
  char *arena;  /* the bytes of every token, back to back */
  size_t arena_len, arena_cap;
  tok_entry *tokens;     /* indexed by id */
  uint32_t count;        /* ids 0..count-1 */
  uint32_t capacity;     /* entries allocated in tokens */
  uint64_t *map;         /* open addressing: (hash >> 32) << 32 | (id + 1) */
  uint32_t map_mask;     /* slots - 1 (a power of two minus one) */
  int32_t byte_ids[256]; /* id of each single-byte token */
  bool ignore_merges;    /* a piece that is a token is emitted whole */
  int32_t bos, eos;      /* -1 when none */
  char *chat_template;   /* owned, NULL when none */
  pcre2_code *split;     /* the pre-tokenizer */
  uint32_t *special_ids; /* the special tokens, longest spelling first */
  uint32_t special_count;
  pcre2_code *specials; /* alternation of every special spelling, or NULL */
  pcre2_match_data *match;
  pcre2_match_context *match_context;
  pcre2_jit_stack *jit_stack;
  tok_scratch scratch;
};

/* An empty tokenizer for source (copied), ids allocated for up to
 * capacity tokens (count more than that is FDY_ERR_INVALID_ARGUMENT in
 * tok_define). */
fdy_status tok_create(const char *source, uint32_t capacity,
                      fdy_tokenizer **out, fdy_error *err);

typedef enum tok_define_result {
  TOK_DEFINED = 0,
  TOK_DUPLICATE_ID,    /* *other = the id again */
  TOK_DUPLICATE_BYTES, /* *other = the id that has these bytes */
  TOK_ID_RANGE,        /* id >= capacity */
  TOK_NO_MEMORY,
  TOK_TOO_LARGE, /* the arena would pass 4 GiB */
} tok_define_result;

/* Defines id as len > 0 bytes (copied). Ordinary tokens enter the map; special
 * tokens do not (their bytes may equal an ordinary token's). The rank of an
 * ordinary token starts as TOK_NO_RANK. */
tok_define_result tok_define(fdy_tokenizer *tok, uint32_t id, const char *bytes,
                             size_t len, bool special, int32_t *other);

/* A 64-bit hash of a short byte string (8 bytes per step). */
static inline uint64_t tok_hash(const char *p, size_t n) {
  const uint64_t k = 0x9E3779B97F4A7C15ull;
  uint64_t h = k ^ (uint64_t)n;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

/* The id of the ordinary token with these bytes, or -1 (inline: the
 * merge loops call it for every candidate pair). */
static inline int32_t tok_lookup(const fdy_tokenizer *tok, const char *bytes,
                                 size_t len) {
  uint64_t h = tok_hash(bytes, len);
  uint32_t tag = (uint32_t)(h >> 32);
  for (uint32_t i = (uint32_t)h & tok->map_mask;; i = (i + 1) & tok->map_mask) {
    uint64_t slot = tok->map[i];
    if (slot == 0) {
      return -1;
    }
    if ((uint32_t)(slot >> 32) == tag) {
      uint32_t id = (uint32_t)slot - 1;
      const tok_entry *e = &tok->tokens[id];
      if (e->len == len && memcmp(tok->arena + e->offset, bytes, len) == 0) {
        return (int32_t)id;
      }
    }
  }
}

/* Completes a tokenizer whose capacity ids are all defined (the loaders
 * define capacity distinct ids below capacity, so none is missing): count
 * = capacity, the 256 single-byte tokens present (else FDY_ERR_FORMAT,
 * err->ids[0] = the byte), the pre-tokenizer pattern and the specials
 * compiled (a pattern PCRE2 rejects: FDY_ERR_UNSUPPORTED), bos and eos
 * defaulted from <|begin_of_text|> / <|end_of_text|> when still -1. */
fdy_status tok_finish(fdy_tokenizer *tok, const char *pattern, fdy_error *err);

/* The id of the special token spelled by these bytes, or -1 (after
 * tok_finish). */
int32_t tok_special_lookup(const fdy_tokenizer *tok, const char *bytes,
                           size_t len);

/* Reads a whole regular file (at most TOK_MAX_FILE_BYTES) through
 * fdy_input_read, so that a FIFO, a device or a directory fails at once;
 * *out is malloc'd with a NUL after the len bytes. FDY_ERR_NOT_FOUND /
 * FDY_ERR_IO / FDY_ERR_FORMAT (too large: expected = the limit, actual =
 * the size), each naming path in the message and err->name. */
fdy_status tok_read_file(const char *path, char **out, size_t *len,
                         fdy_error *err);

/* Frees the encoder's scratch (part of fdy_tokenizer_destroy). */
void tok_scratch_free(tok_scratch *scratch);

#endif
