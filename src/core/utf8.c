/* UTF-8 validation and the U+FFFD replacement of invalid bytes
 * (include/foundry/core.h). */
#include "foundry/core.h"

#include <stdlib.h>
#include <string.h>

static bool continuation(unsigned char c) {
  return (c & 0xC0) == 0x80;
}

/* Length of the well-formed sequence starting at p (1 to 4), or 0. The
 * second byte's range excludes overlong forms (E0, F0), surrogates (ED) and
 * code points above U+10FFFF (F4); the string's NUL ends any sequence. */
static size_t sequence_length(const unsigned char *p) {
  unsigned char c = p[0];
  if (c < 0x80) {
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    lo = c == 0xE0 ? 0xA0 : 0x80;
    hi = c == 0xED ? 0x9F : 0xBF;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    lo = c == 0xF0 ? 0x90 : 0x80;
    hi = c == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (p[1] < lo || p[1] > hi) {
    return 0;
  }
  for (size_t i = 2; i < n; i++) {
    if (!continuation(p[i])) {
      return 0;
    }
  }
  return n;
}

bool fdy_utf8_valid(const char *s) {
  if (s == NULL) {
    return false;
  }
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = sequence_length(p);
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
    size_t n = sequence_length(p);
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
