/* Decoding ids to bytes, all at once or as a stream that holds back a
 * trailing incomplete UTF-8 character until the next ids complete it. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

struct fdy_token_stream {
  const fdy_tokenizer *tok;
  char *buf;      /* the bytes handed out by the last call, then the held */
  size_t held_at; /* where the held bytes start in buf */
  size_t held;    /* bytes of an incomplete character held back (0 to 3) */
  size_t cap;
};

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
  *bytes = tok->arena + tok->tokens[id].offset;
  *len = tok->tokens[id].len;
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
    if (fdy_add_u64(total, tok->tokens[ids[i]].len, &total, err) != FDY_OK) {
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
    const tok_entry *e = &tok->tokens[ids[i]];
    memcpy(text + at, tok->arena + e->offset, e->len);
    at += e->len;
  }
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
  const char *bytes = NULL;
  size_t n = 0;
  fdy_status status =
      fdy_tokenizer_token_bytes(stream->tok, id, &bytes, &n, err);
  if (status != FDY_OK) {
    return status;
  }
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
  memcpy(stream->buf + stream->held, bytes, n);
  size_t keep = incomplete_tail((const unsigned char *)stream->buf, total);
  *text = stream->buf;
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
}
