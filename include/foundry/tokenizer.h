/* BPE tokenizers: byte-level (Llama 3, GPT-2, Qwen) and SentencePiece-style
 * (Llama 2, Mistral): loading the tiktoken ranks file or a Hugging Face
 * tokenizer.json (+ tokenizer_config.json), encoding text to token ids,
 * decoding ids to bytes, and a streaming decoder that never splits a UTF-8
 * character. docs/tokenizer.md describes the file formats,
 * the pre-tokenizer and the behaviour on text that is not valid UTF-8.
 *
 * Thread-safety: a tokenizer is used by one thread at a time (encoding uses
 * its regex match data and scratch buffers); separate tokenizers are
 * independent. Decoding functions take a const tokenizer and may run
 * concurrently with each other but not with an encode on the same one. */
#ifndef FOUNDRY_TOKENIZER_H
#define FOUNDRY_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_tokenizer fdy_tokenizer;

/* ---- loading -------------------------------------------------------------
 */

/* Loads a tiktoken ranks file ("base64(token bytes) SPACE rank" per line,
 * ranks 0..n-1 each exactly once, in any order) with the Llama 3
 * pre-tokenizer regex and the 256 Llama 3 special tokens after the n ranks
 * (ids n..n+255, <|begin_of_text|> first; Llama 3 has n = 128000). Errors
 * name the file in err->name and, for a bad line, its 1-based number in
 * err->line: FDY_ERR_IO/NOT_FOUND (cannot read, or not a regular file: a
 * FIFO fails at once), FDY_ERR_FORMAT (larger than 1 GiB, bad
 * base64, an empty token, a missing or non-numeric rank, a duplicate rank
 * or token, a rank below n missing, no ranks, a byte without a
 * single-byte token), FDY_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
fdy_status fdy_tokenizer_load_tiktoken(const char *path, fdy_tokenizer **out,
                                       fdy_error *err);

/* Loads a Hugging Face tokenizer.json (docs/tokenizer.md): a BPE with
 * model.vocab, model.merges as strings or pairs, ignore_merges, and
 * added_tokens with Hugging Face's semantics, of one of two kinds.
 * Byte-level: Split/Digits/ByteLevel pre-tokenizers, the ByteLevel
 * decoder. SentencePiece-style: a vocabulary in UTF-8, no pre-tokenizer or
 * Metaspace, byte_fallback, unk_token and fuse_unk, the Metaspace decoder
 * or Replace/ByteFallback/Fuse/Strip. Both: NFC, Prepend and Replace
 * normalizers. When config_path is not NULL, also its
 * tokenizer_config.json (bos_token, eos_token, add_bos_token,
 * added_tokens_decoder, chat_template). Strict: errors name the file in
 * the message and the entry in err->name ("model.merges[17]",
 * "normalizer.normalizers[1].pattern"): FDY_ERR_PARSE (not JSON, a NUL
 * byte included; err->line/column set, err->name the file),
 * FDY_ERR_SCHEMA (wrong structure; duplicate ids or spellings; an added
 * token spelled like a vocabulary token of another id; a null decoder; an
 * unk_token outside the vocabulary; a Split regex that can match the empty
 * string or backtracks catastrophically), FDY_ERR_UNSUPPORTED (valid but
 * a component or value Foundry does not handle; a byte_fallback vocabulary
 * without all 256 <0xNN> tokens), FDY_ERR_IO/NOT_FOUND
 * (as for tiktoken), FDY_ERR_FORMAT (larger than 1 GiB),
 * FDY_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
fdy_status fdy_tokenizer_load_hf(const char *tokenizer_json_path,
                                 const char *config_path, fdy_tokenizer **out,
                                 fdy_error *err);

/* Opens the tokenizer at path. A directory (a model checkpoint): its
 * tokenizer.json (with tokenizer_config.json when present), else its
 * tiktoken tokenizer.model; neither is FDY_ERR_NOT_FOUND naming both. A
 * file: a tokenizer.json when its first non-blank byte is '{' (with the
 * tokenizer_config.json of its directory when present), else a tiktoken
 * ranks file. A file present under one of these names but not a regular
 * file (a FIFO, a directory) is FDY_ERR_IO naming it, at once. Errors as
 * for the two loaders above. */
fdy_status fdy_tokenizer_open(const char *path, fdy_tokenizer **out,
                              fdy_error *err);

/* Whether this build normalizes NFC (it has ICU): a tokenizer.json whose
 * normalizer is NFC (Qwen's, SmolLM's) loads only then, and is refused
 * with FDY_ERR_UNSUPPORTED naming the normalizer otherwise. */
bool fdy_tokenizer_nfc_available(void);

/* Writes the Llama 3 tokenizer built into Foundry (the 128,000 ranks of
 * Meta's tokenizer.model and its 256 special tokens) into the existing
 * directory dir as a Hugging Face checkpoint has it: tokenizer.json (the
 * vocabulary in the GPT-2 byte alphabet, the merges transformers'
 * TikTokenConverter derives from the ranks, the Llama 3 pre-tokenizer)
 * and tokenizer_config.json (bos_token <|begin_of_text|>, eos_token
 * <|eot_id|>, the Llama 3 Instruct chat_template). Neither file may exist:
 * FDY_ERR_IO naming it (err->name the path), as for any failure to write;
 * FDY_ERR_OUT_OF_MEMORY. A file written before a failure stays. */
fdy_status fdy_tokenizer_write_llama3(const char *dir, fdy_error *err);

/* Frees everything; NULL is a no-op. */
void fdy_tokenizer_destroy(fdy_tokenizer *tok);

/* ---- properties ----------------------------------------------------------
 */

/* Number of ids (ranks plus special tokens): valid ids are 0..count-1. */
uint32_t fdy_tokenizer_vocab_size(const fdy_tokenizer *tok);
/* The beginning-of-text id (tokenizer_config.json's bos_token, else
 * <|begin_of_text|>), or -1 when the tokenizer has none. */
int32_t fdy_tokenizer_bos(const fdy_tokenizer *tok);
/* The end-of-text id (eos_token, else <|end_of_text|>), or -1. */
int32_t fdy_tokenizer_eos(const fdy_tokenizer *tok);
/* Whether a text prompt starts with the BOS, as Hugging Face's encode
 * with special tokens does: tokenizer_config.json's add_bos_token when it
 * has one, else whether tokenizer.json's post_processor is a
 * TemplateProcessing that starts with a special token (Llama 3); a tiktoken
 * file: true. False when the tokenizer has no BOS. */
bool fdy_tokenizer_add_bos(const fdy_tokenizer *tok);
/* True when id is a special token (valid ids only). */
bool fdy_tokenizer_is_special(const fdy_tokenizer *tok, int32_t id);
/* The id of the special token spelled name ("<|eot_id|>"), or -1. */
int32_t fdy_tokenizer_special_id(const fdy_tokenizer *tok, const char *name);
/* The most ids fdy_tokenizer_stop_ids writes. */
#define FDY_TOKENIZER_MAX_STOP 2
/* The ids that end a generated text in this vocabulary: the EOS
 * (fdy_tokenizer_eos) and <|eot_id|> (the end of a chat message), those
 * the tokenizer has, each once, in that order. Returns how many were
 * written to ids. Generation stops after these besides config.json's
 * eos_token_id list, which may lack them. */
uint32_t fdy_tokenizer_stop_ids(const fdy_tokenizer *tok,
                                int32_t ids[FDY_TOKENIZER_MAX_STOP]);
/* tokenizer_config.json's chat_template, or NULL (owned by tok). */
const char *fdy_tokenizer_chat_template(const fdy_tokenizer *tok);
/* The file the tokenizer was loaded from (owned by tok). */
const char *fdy_tokenizer_source(const fdy_tokenizer *tok);

/* ---- encoding ------------------------------------------------------------
 */

/* A growable id array. Zero-initialise it; fdy_tokens_free releases it. */
typedef struct fdy_tokens {
  int32_t *ids; /* count ids (malloc'd) */
  size_t count;
  size_t capacity;
} fdy_tokens;

void fdy_tokens_free(fdy_tokens *tokens);
/* Appends one id. FDY_ERR_OUT_OF_MEMORY / FDY_ERR_OVERFLOW leave tokens as
 * they were. */
fdy_status fdy_tokens_push(fdy_tokens *tokens, int32_t id, fdy_error *err);

enum {
  /* Recognise special-token spellings ("<|eot_id|>") in the text as their
   * ids. Without it they are ordinary text: user text never produces a
   * special id by accident. For chat templates only. */
  FDY_ENCODE_SPECIAL = 1u << 0,
};

/* Appends the ids of len bytes of text to out (no BOS; push it first when
 * needed). The text is split by the pre-tokenizer regex and each piece
 * merged by rank. Bytes that are not valid UTF-8 are never part of a piece:
 * each becomes its own single-byte token, and the valid text around them is
 * split as if they were not there (so decode(encode(x)) == x for any
 * bytes, when every byte has a token). Added tokens that are not special are
 * always recognised. flags: FDY_ENCODE_SPECIAL or 0; other bits
 * FDY_ERR_INVALID_ARGUMENT. Errors (out keeps its earlier ids, later ones
 * may have been appended): FDY_ERR_OUT_OF_MEMORY, FDY_ERR_INVALID_ARGUMENT
 * for text over 4 GiB, FDY_ERR_UNSUPPORTED when the regex engine fails,
 * a regex reaching PCRE2's match limits included (message says why,
 * err->name the file). Not thread-safe on one tokenizer. */
fdy_status fdy_tokenizer_encode(fdy_tokenizer *tok, const char *text,
                                size_t len, unsigned flags, fdy_tokens *out,
                                fdy_error *err);

/* ---- decoding ------------------------------------------------------------
 */

/* The bytes of one id in the middle of a decoded text (SentencePiece-style:
 * "\u2581" as a space, <0xNN> as its byte when the decoder says so); a
 * special token's spelling as written (as a chat template writes it). Not
 * NUL-terminated, owned by tok. An invalid id is
 * FDY_ERR_INVALID_ARGUMENT (err->ids[0] = id). */
fdy_status fdy_tokenizer_token_bytes(const fdy_tokenizer *tok, int32_t id,
                                     const char **bytes, size_t *len,
                                     fdy_error *err);

/* Decodes count ids into *out (malloc'd, count bytes in *len, plus a NUL
 * after them that *len does not count) as the tokenizer's decoder does:
 * each id's bytes (fdy_tokenizer_token_bytes), except that a Metaspace
 * decoder drops the replacement from the first id's token and a Strip
 * decoder removes leading characters of the text (Llama 2's first space).
 * The bytes may be invalid UTF-8 when the ids are. An invalid id is
 * FDY_ERR_INVALID_ARGUMENT with err->ids[0] = the id and err->ids[1] = its
 * index; on failure *out is NULL. */
fdy_status fdy_tokenizer_decode(const fdy_tokenizer *tok, const int32_t *ids,
                                size_t count, char **out, size_t *len,
                                fdy_error *err);

/* A streaming decoder: feeds ids one at a time and hands out bytes as soon
 * as they form whole UTF-8 characters. It holds back only a trailing
 * incomplete sequence that the next bytes could still complete; bytes that
 * can never be part of a valid character are handed out at once. The
 * concatenation of everything handed out, up to and including
 * fdy_token_stream_finish, equals fdy_tokenizer_decode of the same ids. */
typedef struct fdy_token_stream fdy_token_stream;

/* The stream reads tok, which must outlive it. */
fdy_status fdy_token_stream_create(const fdy_tokenizer *tok,
                                   fdy_token_stream **out, fdy_error *err);
void fdy_token_stream_destroy(fdy_token_stream *stream);

/* Adds one id; *text and *len are the bytes now complete (possibly 0), valid
 * until the next call on the stream. An invalid id is
 * FDY_ERR_INVALID_ARGUMENT and leaves the stream unchanged. */
fdy_status fdy_token_stream_push(fdy_token_stream *stream, int32_t id,
                                 const char **text, size_t *len,
                                 fdy_error *err);

/* Hands out whatever is held back (an incomplete sequence at the end of the
 * ids, as raw bytes) and empties the stream for reuse. */
void fdy_token_stream_finish(fdy_token_stream *stream, const char **text,
                             size_t *len);

#ifdef __cplusplus
}
#endif
#endif
