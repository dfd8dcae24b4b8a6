/* The tokenizer's internal representation, shared by the loaders
 * (tiktoken.c, hf.c), the vocabulary (vocab.c), the normalizers
 * (normalize.c, nfc.c), the encoder (encode.c) and the decoders
 * (decode.c). A tokenizer is a dense id table over one byte arena, a hash
 * map from the bytes of each ordinary token to its id, the added and
 * special tokens, the normalizer steps and the pre-tokenizer steps. Two
 * kinds of BPE share it: byte-level (tiktoken, GPT-2's alphabet: a piece
 * starts as single bytes) and SentencePiece-style (a vocabulary in UTF-8:
 * a piece starts as characters, char_units). */
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

/* Flags of an added token (tok_entry.added): how its spelling is found in
 * text (Hugging Face's AddedToken). */
enum {
  TOK_ADDED = 1u << 0,       /* an added token: found in text before BPE */
  TOK_LSTRIP = 1u << 1,      /* takes the whitespace on its left */
  TOK_RSTRIP = 1u << 2,      /* takes the whitespace on its right */
  TOK_SINGLE_WORD = 1u << 3, /* only between non-word characters */
  TOK_NORMALIZED = 1u << 4,  /* found in the normalized text */
};

/* PCRE2's match and depth limits for the probe texts of tok_add_step,
 * and for one pcre2_match call when encoding: TOK_MATCH_LIMIT_BASE +
 * TOK_MATCH_LIMIT_PER_BYTE for each byte of text left. */
#define TOK_PROBE_MATCH_LIMIT    1000000u
#define TOK_MATCH_LIMIT_BASE     10000000u
#define TOK_MATCH_LIMIT_PER_BYTE 64u

typedef struct tok_entry {
  uint32_t offset; /* of its bytes in the arena */
  uint32_t len;    /* bytes; 0 = id not (yet) defined */
  uint32_t rank;   /* merge priority (lower merges first), or TOK_NO_RANK */
  bool special;    /* a special token: found only with FDY_ENCODE_SPECIAL */
  uint8_t added;   /* TOK_ADDED and its flags, or 0 */
  bool in_map;     /* an ordinary (model) token, in the map */
} tok_entry;

/* A merge of Hugging Face's BPE: the pair (left id, right id) makes id
 * with priority rank (its index in model.merges). */
typedef struct tok_merge {
  uint64_t key; /* (uint64_t)left << 32 | right */
  uint32_t rank;
  uint32_t id1; /* id + 1; 0 = empty slot */
} tok_merge;

/* One step of the pre-tokenizer: every piece of the step before is split
 * by the regex (Split, ByteLevel's use_regex, Digits), after a space is put
 * before a piece that does not start with one (ByteLevel's
 * add_prefix_space). */
#define TOK_MAX_STEPS 8
typedef struct tok_step {
  pcre2_code *re;    /* NULL: no splitting */
  bool removed;      /* Removed: the delimiters are dropped; else Isolated */
  bool invert;       /* the pattern matches the pieces, not the delimiters */
  bool prefix_space; /* ByteLevel's add_prefix_space */
  char field[96];    /* the tokenizer.json entry, for errors */
} tok_step;

/* A short literal of a normalizer, pre-tokenizer or decoder step (Hugging
 * Face's Prepend, a Replace with a String pattern, Metaspace's
 * replacement). */
#define TOK_MAX_LITERAL 32
typedef struct tok_literal {
  char bytes[TOK_MAX_LITERAL];
  uint8_t len; /* 0: none */
} tok_literal;

/* One normalizer step, applied in order to the text between the added
 * tokens matched as written: NFC; Prepend(to) before text that is not
 * empty; Replace(from, to) of every occurrence, left to right. */
#define TOK_MAX_NORMS 4
typedef enum tok_norm_kind {
  TOK_NORM_NFC,
  TOK_NORM_PREPEND,
  TOK_NORM_REPLACE,
} tok_norm_kind;
typedef struct tok_norm {
  tok_norm_kind kind;
  tok_literal from, to;
} tok_norm;

/* Metaspace's prepend_scheme: when the replacement goes before a piece
 * that does not start with it (first: only the piece at the start of the
 * text). */
typedef enum tok_prepend {
  TOK_PREPEND_NEVER,
  TOK_PREPEND_FIRST,
  TOK_PREPEND_ALWAYS,
} tok_prepend;

/* Bytes in the arena. */
typedef struct tok_span {
  uint32_t offset, len;
} tok_span;

/* An added token as the encoder finds it: its spelling in the text (the
 * content, or the normalized content when it is matched in the normalized
 * text), in the arena. */
typedef struct tok_added {
  uint32_t id;
  tok_span match;
} tok_added;

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
  tok_entry *tokens; /* indexed by id */
  uint32_t count;    /* ids 0..count-1 */
  uint32_t capacity; /* entries allocated in tokens */
  uint64_t *map;     /* open addressing: (hash >> 32) << 32 | (id + 1) */
  uint32_t map_mask; /* slots - 1 (a power of two minus one) */
  /* byte-level: the id of each single-byte token; char_units: of each
   * byte's <0xNN> token when byte_fallback; -1 when none */
  int32_t byte_ids[256];
  /* a piece starts as its UTF-8 characters' tokens; a character that is
   * none becomes its bytes' tokens (byte_fallback), else unk */
  bool char_units;
  bool byte_fallback;
  int32_t unk;   /* the unknown token, or -1: such a character is dropped */
  bool fuse_unk; /* a run of unknown characters is one unk */
  bool ignore_merges; /* a piece that is a token is emitted whole */
  /* Hugging Face's BPE: only the listed pairs merge, by the pair's rank
   * (else tiktoken's: any two parts whose concatenation has a rank) */
  bool pair_merges;
  tok_merge *merges; /* open addressing, merge_mask + 1 slots */
  uint32_t merge_mask;
  tok_norm norms[TOK_MAX_NORMS];
  uint32_t norm_count;
  /* Metaspace, before the steps: every space becomes meta, and meta goes
   * before a piece as meta_prepend says */
  tok_literal meta;
  tok_prepend meta_prepend;
  tok_step steps[TOK_MAX_STEPS];
  uint32_t step_count;
  /* The decoder: per id, the bytes it gives (NULL: the token's bytes);
   * the first id of a text drops every drop_first (Metaspace's decoder)
   * from its token's bytes instead; then up to strip_count leading
   * strip bytes go (Strip after Fuse). */
  tok_span *decoded;
  tok_literal drop_first;
  char strip;
  uint32_t strip_count;
  int32_t bos, eos;    /* -1 when none */
  bool add_bos;        /* a text starts with bos (fdy_tokenizer_add_bos) */
  char *chat_template; /* owned, NULL when none */
  tok_added *added;    /* the added tokens, longest match spelling first */
  uint32_t added_count;
  /* alternations of the added spellings: those matched in the text as it
   * is, and those matched in the normalized text (or NULL) */
  pcre2_code *added_raw, *added_norm;
  bool plain_added; /* some added token is not special */
  pcre2_code *word; /* \w, when an added token is single_word */
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

/* Defines id as len > 0 bytes (copied). Ordinary tokens enter the map;
 * added tokens (added != 0) do not (their bytes may equal an ordinary
 * token's). The rank of an ordinary token starts as TOK_NO_RANK. */
tok_define_result tok_define(fdy_tokenizer *tok, uint32_t id, const char *bytes,
                             size_t len, bool special, uint8_t added,
                             int32_t *other);

/* Appends len bytes to the arena: *span says where. TOK_NO_MEMORY or
 * TOK_TOO_LARGE on failure. */
tok_define_result tok_arena_append(fdy_tokenizer *tok, const char *bytes,
                                   size_t len, tok_span *span);

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

/* Compiles a pre-tokenizer regex into step (field names it in errors) and
 * appends the step. A pattern PCRE2 rejects is FDY_ERR_UNSUPPORTED; one
 * that can match the empty string, or that reaches PCRE2's match limit on
 * short probe texts (catastrophic backtracking), is FDY_ERR_SCHEMA; both
 * name the file in the message and field in err->name. */
fdy_status tok_add_step(fdy_tokenizer *tok, const char *pattern, size_t len,
                        const tok_step *step, fdy_error *err);

/* Completes a tokenizer whose ids and normalizer are all defined: count =
 * capacity, the 256 single-byte tokens present when all_bytes (else
 * FDY_ERR_FORMAT, err->ids[0] = the byte), the added spellings (normalized
 * ones through the normalizer) compiled, bos and eos defaulted from
 * <|begin_of_text|> / <|end_of_text|> when still -1. */
fdy_status tok_finish(fdy_tokenizer *tok, bool all_bytes, fdy_error *err);

/* The id of the added token spelled by these bytes (special ones only when
 * special_only), or -1 (after tok_finish). */
int32_t tok_added_lookup(const fdy_tokenizer *tok, const char *bytes,
                         size_t len, bool special_only);

/* The merge of the pair (left, right): its rank and *id, or TOK_NO_RANK. */
static inline uint32_t tok_merge_rank(const fdy_tokenizer *tok, int32_t left,
                                      int32_t right, int32_t *id) {
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = (uint32_t)(h >> 32) & tok->merge_mask;;
       i = (i + 1) & tok->merge_mask) {
    const tok_merge *m = &tok->merges[i];
    if (m->id1 == 0) {
      return TOK_NO_RANK;
    }
    if (m->key == key) {
      *id = (int32_t)(m->id1 - 1);
      return m->rank;
    }
  }
}

/* Reads a whole regular file (at most TOK_MAX_FILE_BYTES) through
 * fdy_input_read, so that a FIFO, a device or a directory fails at once;
 * *out is malloc'd with a NUL after the len bytes. FDY_ERR_NOT_FOUND /
 * FDY_ERR_IO / FDY_ERR_FORMAT (too large: expected = the limit, actual =
 * the size), each naming path in the message and err->name. */
fdy_status tok_read_file(const char *path, char **out, size_t *len,
                         fdy_error *err);

/* text with every `from` replaced by `to` (from->len 0: none), after
 * prefix (NULL: none), into *out (malloc'd, *n bytes). Works on bytes:
 * invalid UTF-8 is kept. FDY_ERR_OUT_OF_MEMORY, FDY_ERR_OVERFLOW. */
fdy_status tok_rewrite(const char *text, size_t len, const tok_literal *from,
                       const tok_literal *to, const tok_literal *prefix,
                       char **out, size_t *n, fdy_error *err);

/* The normalizer steps of tok on len bytes of text, into *out (malloc'd,
 * *n bytes). Errors as tok_rewrite and tok_nfc. */
fdy_status tok_normalize(const fdy_tokenizer *tok, const char *text, size_t len,
                         char **out, size_t *n, fdy_error *err);

/* Metaspace on one piece (first: it starts the text): every space becomes
 * tok->meta, then tok->meta goes before it when the scheme says so and it
 * does not start with it. Into *out (malloc'd). Errors as tok_rewrite. */
fdy_status tok_metaspace(const fdy_tokenizer *tok, const char *text, size_t len,
                         bool first, char **out, size_t *n, fdy_error *err);

/* The NFC normalization of len bytes of text (invalid UTF-8 is kept as
 * it is) into *out (malloc'd, *n bytes). FDY_ERR_UNSUPPORTED when this
 * build lacks it (fdy_tokenizer_nfc_available), FDY_ERR_OUT_OF_MEMORY. */
fdy_status tok_nfc(const char *text, size_t len, char **out, size_t *n,
                   fdy_error *err);

/* fdy_tokenizer_load_tiktoken on len bytes of text already read (path
 * names the source in the tokenizer and in errors; text is not kept). */
fdy_status tok_load_tiktoken_text(const char *path, const char *text,
                                  size_t len, fdy_tokenizer **out,
                                  fdy_error *err);

/* Frees the encoder's scratch (part of fdy_tokenizer_destroy). */
void tok_scratch_free(tok_scratch *scratch);

#endif
