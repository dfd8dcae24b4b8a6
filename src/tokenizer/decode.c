/* Decoding ids to bytes, all at once or as a stream that holds back a
 * trailing incomplete UTF-8 character until the next ids complete it. An
 * id gives the bytes its decoder gives (tok->decoded); the first id of a
 * text drops tok->drop_first from its token, and the text loses up to
 * tok->strip_count leading tok->strip bytes (Hugging Face's Metaspace and
 * Strip decoders). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

struct fdy_token_stream {
  const fdy_tokenizer *tok;
  char *buf;      /* the bytes handed out by the last call, then the held */
  size_t held_at; /* where the held bytes start in buf */
  size_t held;    /* bytes of an incomplete character held back (0 to 3) */
  size_t cap;
  bool started;        /* an id was pushed since the start */
  uint32_t strip_left; /* leading strip bytes that may still go */
};

/* Where the bytes of id in the middle of a decoded text are. */
static tok_span id_span(const fdy_tokenizer *tok, int32_t id) {
  const tok_entry *e = &tok->tokens[id];
  return tok->decoded ? tok->decoded[id] : (tok_span){e->offset, e->len};
}

/* The bytes of id in a decoded text (first: the text's first id) into out
 * (NULL: only counted); returns their number. */
static size_t id_text(const fdy_tokenizer *tok, int32_t id, bool first,
                      char *out) {
  const tok_entry *e = &tok->tokens[id];
  const tok_literal *drop = &tok->drop_first;
  if (first && drop->len > 0) {
    const char *p = tok->arena + e->offset;
    size_t n = 0;
    for (uint32_t i = 0; i < e->len;) {
      if (i + drop->len <= e->len &&
          memcmp(p + i, drop->bytes, drop->len) == 0) {
        i += drop->len;
        continue;
      }
      if (out) {
        out[n] = p[i];
      }
      n++;
      i++;
    }
    return n;
  }
  tok_span span = id_span(tok, id);
  if (out) {
    memcpy(out, tok->arena + span.offset, span.len);
  }
  return span.len;
}

/* How many of the n bytes at p go as leading strip bytes (at most *left,
 * which the call lowers; 0 once any byte stays). */
static size_t strip_leading(const fdy_tokenizer *tok, const char *p, size_t n,
                            uint32_t *left) {
  size_t k = 0;
  while (*left > 0 && k < n && p[k] == tok->strip) {
    k++;
    (*left)--;
  }
  if (k < n) {
    *left = 0;
  }
  return k;
}

static fdy_status bad_id(int32_t id, int64_t index, uint32_t count,
                         fdy_error *err) {
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                "token id %d is not in the vocabulary (0 to %u)", id,
                count - 1);
  if (err) {
    err->ids[0] = id;
    err->ids[1] = index;
  }
  return FDY_ERR_INVALID_ARGUMENT;
}

fdy_status fdy_tokenizer_token_bytes(const fdy_tokenizer *tok, int32_t id,
                                     const char **bytes, size_t *len,
                                     fdy_error *err) {
  if (id < 0 || (uint32_t)id >= tok->count) {
    return bad_id(id, -1, tok->count, err);
  }
  const tok_entry *e = &tok->tokens[id];
  tok_span span = e->special ? (tok_span){e->offset, e->len} : id_span(tok, id);
  *bytes = tok->arena + span.offset;
  *len = span.len;
  return FDY_OK;
}

fdy_status fdy_tokenizer_decode(const fdy_tokenizer *tok, const int32_t *ids,
                                size_t count, char **out, size_t *len,
                                fdy_error *err) {
  *out = NULL;
  *len = 0;
  uint64_t total = 0;
  for (size_t i = 0; i < count; i++) {
    if (ids[i] < 0 || (uint32_t)ids[i] >= tok->count) {
      return bad_id(ids[i], (int64_t)i, tok->count, err);
    }
    if (fdy_add_u64(total, id_text(tok, ids[i], i == 0, NULL), &total, err) !=
        FDY_OK) {
      return FDY_ERR_OVERFLOW;
    }
  }
  if (total >= SIZE_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "decoded text too large");
  }
  char *text = malloc((size_t)total + 1);
  if (!text) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  size_t at = 0;
  for (size_t i = 0; i < count; i++) {
    at += id_text(tok, ids[i], i == 0, text + at);
  }
  uint32_t left = tok->strip_count;
  size_t cut = strip_leading(tok, text, at, &left);
  memmove(text, text + cut, at - cut);
  at -= cut;
  text[at] = '\0';
  *out = text;
  *len = at;
  return FDY_OK;
}

fdy_status fdy_token_stream_create(const fdy_tokenizer *tok,
                                   fdy_token_stream **out, fdy_error *err) {
  *out = calloc(1, sizeof **out);
  if (!*out) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  (*out)->tok = tok;
  (*out)->strip_left = tok->strip_count;
  return FDY_OK;
}

void fdy_token_stream_destroy(fdy_token_stream *stream) {
  if (stream) {
    free(stream->buf);
    free(stream);
  }
}

/* Length of the UTF-8 sequence a lead byte starts (2 to 4), or 0 when the
 * byte cannot start a multi-byte sequence. */
static unsigned sequence_length(unsigned char c) {
  return c >= 0xC2 && c <= 0xDF   ? 2
         : c >= 0xE0 && c <= 0xEF ? 3
         : c >= 0xF0 && c <= 0xF4 ? 4
                                  : 0;
}

/* True when byte k (1-based) of a sequence led by lead may be c. */
static bool continues(unsigned char lead, unsigned k, unsigned char c) {
  if (k == 1) {
    unsigned char lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    return c >= lo && c <= hi;
  }
  return c >= 0x80 && c <= 0xBF;
}

/* How many bytes at the end of p[0..n) are the start of a valid UTF-8
 * sequence that more bytes could complete (0 to 3). */
static size_t incomplete_tail(const unsigned char *p, size_t n) {
  for (size_t back = 1; back <= 3 && back <= n; back++) {
    unsigned char lead = p[n - back];
    if (lead < 0x80 || lead >= 0xC0) {
      unsigned need = sequence_length(lead);
      if (need <= back) {
        return 0; /* ASCII, an invalid lead, or a complete sequence */
      }
      for (unsigned k = 1; k < back; k++) {
        if (!continues(lead, k, p[n - back + k])) {
          return 0;
        }
      }
      return back;
    }
  }
  return 0;
}

fdy_status fdy_token_stream_push(fdy_token_stream *stream, int32_t id,
                                 const char **text, size_t *len,
                                 fdy_error *err) {
  const fdy_tokenizer *tok = stream->tok;
  if (id < 0 || (uint32_t)id >= tok->count) {
    return bad_id(id, -1, tok->count, err);
  }
  size_t n = id_text(tok, id, !stream->started, NULL);
  if (stream->held > 0) {
    memmove(stream->buf, stream->buf + stream->held_at, stream->held);
  }
  stream->held_at = 0;
  if (n > SIZE_MAX - stream->held) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "decoded text too large");
  }
  size_t total = stream->held + n;
  if (total > stream->cap) {
    char *buf = realloc(stream->buf, total);
    if (!buf) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
    }
    stream->buf = buf;
    stream->cap = total;
  }
  if (n > 0) {
    char *added = stream->buf + stream->held;
    id_text(tok, id, !stream->started, added);
    size_t cut = strip_leading(tok, added, n, &stream->strip_left);
    memmove(added, added + cut, n - cut);
    total -= cut;
  }
  stream->started = true;
  size_t keep = incomplete_tail((const unsigned char *)stream->buf, total);
  *text = stream->buf ? stream->buf : "";
  *len = total - keep;
  stream->held_at = total - keep;
  stream->held = keep;
  return FDY_OK;
}

void fdy_token_stream_finish(fdy_token_stream *stream, const char **text,
                             size_t *len) {
  *text = stream->buf ? stream->buf + stream->held_at : "";
  *len = stream->held;
  stream->held_at = 0;
  stream->held = 0;
  stream->started = false;
  stream->strip_left = stream->tok->strip_count;
}
