/* The released text of an answer with stop strings (serve_text.h). */
#include "serve_text.h"

#include <stdlib.h>
#include <string.h>

void fdy_serve_text_init(fdy_serve_text *t, char *const *stop,
                         uint32_t stop_count) {
  *t = (fdy_serve_text){.stop = stop, .stop_count = stop_count};
}

void fdy_serve_text_destroy(fdy_serve_text *t) {
  free(t->buf);
  t->buf = NULL;
  t->len = t->cap = t->released = 0;
}

/* Bytes at the end of p[0..n) that begin a character the next bytes may
 * still complete (0 to 3): a lead byte and continuations that core's rule
 * (fdy_utf8_char_length) accepts once completed with continuation bytes
 * (0x80, 0x90 or 0xA0 cover the ranges allowed after every lead byte). */
static size_t incomplete_tail(const char *p, size_t n) {
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    unsigned char c = (unsigned char)p[n - k];
    if ((c & 0xC0) == 0x80) {
      continue;
    }
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need <= k) {
      return 0;
    }
    static const unsigned char pads[] = {0x80, 0x90, 0xA0};
    for (size_t i = 0; i < sizeof pads; i++) {
      char whole[4];
      memcpy(whole, p + n - k, k);
      memset(whole + k, pads[i], need - k);
      if (fdy_utf8_char_length(whole, need) == need) {
        return k;
      }
    }
    return 0;
  }
  return 0;
}

/* Where the text from `from` on matches stop string s: 2 whole, 1 a
 * prefix of s that reaches the end of the text, 0 no. */
static int match_at(const fdy_serve_text *t, size_t from, const char *s) {
  size_t slen = strlen(s), left = t->len - from;
  size_t m = left < slen ? left : slen;
  if (memcmp(t->buf + from, s, m) != 0) {
    return 0;
  }
  return m == slen ? 2 : 1;
}

/* Releases what is final; ends the text at the first whole stop string. */
static void settle(fdy_serve_text *t) {
  size_t hold = t->len;
  for (size_t p = t->released; p < t->len; p++) {
    for (uint32_t i = 0; i < t->stop_count; i++) {
      int m = match_at(t, p, t->stop[i]);
      if (m == 2) {
        t->len = t->released = p;
        t->buf[p] = '\0';
        t->stopped = true;
        return;
      }
      if (m == 1 && p < hold) {
        hold = p;
      }
    }
  }
  size_t whole = t->len - incomplete_tail(t->buf, t->len);
  t->released = hold < whole ? hold : whole;
}

fdy_status fdy_serve_text_push(fdy_serve_text *t, const char *bytes, size_t n,
                               fdy_error *err) {
  if (t->stopped || n == 0) {
    return FDY_OK;
  }
  size_t need;
  if (__builtin_add_overflow(t->len, n + 1, &need)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "the answer's text overflows");
  }
  if (need > t->cap) {
    size_t cap = t->cap ? t->cap : 256;
    while (cap < need) {
      if (__builtin_mul_overflow(cap, 2, &cap)) {
        return fdy_error_set(err, FDY_ERR_OVERFLOW,
                             "the answer's text overflows");
      }
    }
    char *grown = realloc(t->buf, cap);
    if (!grown) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "out of memory for the answer's text");
    }
    t->buf = grown;
    t->cap = cap;
  }
  memcpy(t->buf + t->len, bytes, n);
  t->len += n;
  t->buf[t->len] = '\0';
  settle(t);
  return FDY_OK;
}

void fdy_serve_text_finish(fdy_serve_text *t) {
  t->released = t->len;
}
