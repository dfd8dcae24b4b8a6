/* The NFC normalizer of tokenizer.json (Qwen's), through ICU when the build
 * has it (FOUNDRY_HAVE_ICU). Each maximal run of valid UTF-8 is normalized;
 * invalid bytes are kept where they are, as the encoder keeps them. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#ifdef FOUNDRY_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

bool fdy_tokenizer_nfc_available(void) {
#ifdef FOUNDRY_HAVE_ICU
  return true;
#else
  return false;
#endif
}

typedef struct buffer {
  char *p;
  size_t len, cap;
} buffer;

static bool put(buffer *b, const char *s, size_t n) {
  if (n > SIZE_MAX / 2 - b->len) {
    return false;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n) {
      cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
      return false;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n > 0) { /* an empty buffer's p is NULL, which memcpy may not take */
    memcpy(b->p + b->len, s, n);
  }
  b->len += n;
  return true;
}

#ifdef FOUNDRY_HAVE_ICU
/* One valid run with a byte >= 0x80: UTF-8 -> UTF-16 -> NFC -> UTF-8. */
static bool normalize_run(const char *s, size_t n, buffer *b) {
  UErrorCode e = U_ZERO_ERROR;
  const UNormalizer2 *nfc = unorm2_getNFCInstance(&e);
  if (U_FAILURE(e) || n > INT32_MAX / 3) {
    return false;
  }
  bool ok = false;
  int32_t len16 = 0;
  UChar *in = malloc(((size_t)n + 1) * sizeof *in);
  UChar *norm = NULL;
  char *utf8 = NULL;
  if (!in) {
    goto cleanup;
  }
  u_strFromUTF8(in, (int32_t)n + 1, &len16, s, (int32_t)n, &e);
  /* NFC of a string is at most 3 times as long (UAX #15) */
  int32_t cap16 = 3 * len16 + 1;
  norm = malloc((size_t)cap16 * sizeof *norm);
  if (U_FAILURE(e) || !norm) {
    goto cleanup;
  }
  int32_t nlen = unorm2_normalize(nfc, in, len16, norm, cap16, &e);
  int32_t cap8 = 3 * nlen + 1;
  utf8 = malloc((size_t)cap8);
  int32_t len8 = 0;
  if (U_FAILURE(e) || !utf8) {
    goto cleanup;
  }
  u_strToUTF8(utf8, cap8, &len8, norm, nlen, &e);
  ok = !U_FAILURE(e) && put(b, utf8, (size_t)len8);
cleanup:
  free(in);
  free(norm);
  free(utf8);
  return ok;
}
#endif

fdy_status tok_nfc(const char *text, size_t len, char **out, size_t *n,
                   fdy_error *err) {
  *out = NULL;
  *n = 0;
#ifndef FOUNDRY_HAVE_ICU
  (void)text;
  (void)len;
  (void)put;
  return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                       "NFC normalization needs ICU, which this build lacks");
#else
  buffer b = {0};
  const unsigned char *u = (const unsigned char *)text;
  size_t i = 0;
  bool ok = put(&b, "", 0);
  while (ok && i < len) {
    size_t run = i;
    bool ascii = true;
    size_t k;
    while (i < len &&
           (k = fdy_utf8_char_length((const char *)(u + i), len - i)) > 0) {
      ascii &= k == 1;
      i += k;
    }
    if (i > run) {
      ok = ascii ? put(&b, text + run, i - run)
                 : normalize_run(text + run, i - run, &b);
    }
    if (ok && i < len) {
      ok = put(&b, text + i, 1); /* an invalid byte, kept */
      i++;
    }
  }
  if (!ok) {
    free(b.p);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory (NFC normalization)");
  }
  *out = b.p;
  *n = b.len;
  return FDY_OK;
#endif
}
