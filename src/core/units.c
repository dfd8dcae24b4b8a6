/* Binary byte units: parsing "450MiB"-style sizes and formatting them back. */
#include "foundry/core.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *suffix;
  unsigned shift;
} units[] = {
    {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40},
};

fdy_status fdy_parse_bytes(const char *text, uint64_t *out, fdy_error *err) {
  if (!text || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "byte size text is missing");
  }
  const char *p = text;
  if (*p < '0' || *p > '9') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "byte size '%s' must start with a digit", text);
  }
  uint64_t value = 0;
  bool overflow = false;
  while (*p >= '0' && *p <= '9') {
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, (uint64_t)(*p - '0'), &value)) {
      overflow = true;
    }
    p++;
  }
  if (*p == ' ' && p[1] != '\0') {
    p++;
  }
  unsigned shift = 0;
  if (*p != '\0') {
    bool known = false;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
      if (strcmp(p, units[i].suffix) == 0) {
        shift = units[i].shift;
        known = true;
        break;
      }
    }
    if (!known) {
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "byte size '%s' has an unknown unit (use B, KiB, "
                           "MiB, GiB or TiB)",
                           text);
    }
  }
  if (overflow || (shift > 0 && value > (UINT64_MAX >> shift))) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "byte size '%s' does not fit 64 bits", text);
  }
  *out = value << shift;
  return FDY_OK;
}

char *fdy_format_bytes(uint64_t bytes, char *buf, size_t cap) {
  if (cap == 0) {
    return buf;
  }
  size_t u = sizeof(units) / sizeof(units[0]) - 1;
  while (u > 0 && bytes < ((uint64_t)1 << units[u].shift)) {
    u--;
  }
  uint64_t unit = (uint64_t)1 << units[u].shift;
  if (bytes % unit == 0) {
    snprintf(buf, cap, "%" PRIu64 " %s", bytes / unit, units[u].suffix);
  } else {
    uint64_t whole = bytes / unit;
    /* The remainder is below 2^40, so remainder * 100 cannot overflow. */
    uint64_t hundredths = ((bytes % unit) * 100 + unit / 2) / unit;
    if (hundredths >= 100) {
      whole++;
      hundredths -= 100;
    }
    snprintf(buf, cap, "%" PRIu64 ".%02" PRIu64 " %s", whole, hundredths,
             units[u].suffix);
  }
  return buf;
}
