/* UTF-8 validation and the U+FFFD replacement of invalid bytes
 * (include/foundry/core.h). */
#include "foundry/core.h"

#include <stdlib.h>
#include <string.h>

size_t fdy_utf8_char_length(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  unsigned char c = p[0];
  size_t k = c < 0x80                 ? 1
             : c >= 0xC2 && c <= 0xDF ? 2
             : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4
                                      : 0;
  if (k == 0 || k > n) {
    return 0;
  }
  /* the second byte's range excludes overlong forms (E0, F0), surrogates
   * (ED) and code points above U+10FFFF (F4) */
  for (size_t i = 1; i < k; i++) {
    unsigned char lo = 0x80, hi = 0xBF;
    if (i == 1) {
      lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    }
    if (p[i] < lo || p[i] > hi) {
      return 0;
    }
  }
  return k;
}

bool fdy_utf8_valid(const char *s) {
  if (s == NULL) {
    return false;
  }
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = fdy_utf8_char_length((const char *)p, 4);
    if (n == 0) {
      return false;
    }
    p += n;
  }
  return true;
}

char *fdy_utf8_sanitize(const char *s) {
  if (s == NULL) {
    return NULL;
  }
  size_t len = strlen(s);
  if (len > (SIZE_MAX - 1) / 3) {
    return NULL;
  }
  char *out = malloc(3 * len + 1); /* each byte at most becomes 3 */
  if (out == NULL) {
    return NULL;
  }
  const unsigned char *p = (const unsigned char *)s;
  char *o = out;
  while (*p) {
    size_t n = fdy_utf8_char_length((const char *)p, 4);
    if (n == 0) {
      memcpy(o, "\xEF\xBF\xBD", 3);
      o += 3;
      p++;
    } else {
      memcpy(o, p, n);
      o += n;
      p += n;
    }
  }
  *o = '\0';
  return out;
}
