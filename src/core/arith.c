/* Checked uint64 arithmetic and alignment: overflow is an error the caller
 * sees, never a wrap. */
#include "foundry/core.h"

#include <inttypes.h>

fdy_status fdy_add_u64(uint64_t a, uint64_t b, uint64_t *out, fdy_error *err) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "%" PRIu64 " + %" PRIu64 " overflows 64 bits", a, b);
  }
  *out = r;
  return FDY_OK;
}

fdy_status fdy_mul_u64(uint64_t a, uint64_t b, uint64_t *out, fdy_error *err) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "%" PRIu64 " * %" PRIu64 " overflows 64 bits", a, b);
  }
  *out = r;
  return FDY_OK;
}

bool fdy_is_power_of_two(uint64_t alignment) {
  return alignment != 0 && (alignment & (alignment - 1)) == 0;
}

fdy_status fdy_align_up(uint64_t size, uint64_t alignment, uint64_t *out,
                        fdy_error *err) {
  if (!fdy_is_power_of_two(alignment)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "alignment %" PRIu64 " is not a power of two",
                         alignment);
  }
  uint64_t r;
  if (__builtin_add_overflow(size, alignment - 1, &r)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "aligning %" PRIu64 " up to %" PRIu64
                         " overflows 64 bits",
                         size, alignment);
  }
  *out = r & ~(alignment - 1);
  return FDY_OK;
}
