/* Dtypes (sizes and safetensors names) and shapes (element and byte counts,
 * formatting). */
#include "foundry/core.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  uint64_t size;
} dtypes[FDY_DTYPE_COUNT] = {
    [FDY_DTYPE_F32] = {"F32", 4},   [FDY_DTYPE_F16] = {"F16", 2},
    [FDY_DTYPE_BF16] = {"BF16", 2}, [FDY_DTYPE_F64] = {"F64", 8},
    [FDY_DTYPE_U32] = {"U32", 4},   [FDY_DTYPE_I32] = {"I32", 4},
    [FDY_DTYPE_I64] = {"I64", 8},   [FDY_DTYPE_U64] = {"U64", 8},
    [FDY_DTYPE_U8] = {"U8", 1},     [FDY_DTYPE_I8] = {"I8", 1},
};

uint64_t fdy_dtype_size(fdy_dtype dtype) {
  if ((unsigned)dtype >= FDY_DTYPE_COUNT) {
    return 0;
  }
  return dtypes[dtype].size;
}

const char *fdy_dtype_name(fdy_dtype dtype) {
  if ((unsigned)dtype >= FDY_DTYPE_COUNT) {
    return "invalid";
  }
  return dtypes[dtype].name;
}

fdy_status fdy_dtype_parse(const char *name, fdy_dtype *out, fdy_error *err) {
  if (name) {
    for (unsigned i = 0; i < FDY_DTYPE_COUNT; i++) {
      if (strcmp(name, dtypes[i].name) == 0) {
        *out = (fdy_dtype)i;
        return FDY_OK;
      }
    }
  }
  fdy_status s = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                               "unsupported dtype '%s'", name ? name : "");
  if (err && name) {
    snprintf(err->name, sizeof(err->name), "%s", name);
  }
  return s;
}

/* Rounds m >> shift to nearest even (1 <= shift <= 31). */
static uint32_t round_shift(uint32_t m, uint32_t shift) {
  uint32_t q = m >> shift;
  uint32_t rest = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  return rest > half || (rest == half && (q & 1u)) ? q + 1 : q;
}

uint16_t fdy_float_to_f16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) { /* NaN: keep the top mantissa bits, stay NaN */
    return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) { /* 65520 and above round to infinity */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (abs >= 0x38800000u) { /* normal: rebias the exponent by 127 - 15 */
    return (uint16_t)(sign | round_shift(abs - 0x38000000u, 13));
  }
  if (abs < 0x33000000u) { /* below 2^-25: rounds to zero */
    return (uint16_t)sign;
  }
  /* subnormal half: value / 2^-24 = m * 2^(e - 126), e the biased exponent */
  uint32_t e = abs >> 23;
  uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | round_shift(m, 126 - e));
}

fdy_shape fdy_shape_make(uint32_t rank, const uint64_t *dims) {
  assert(rank <= FDY_MAX_RANK);
  fdy_shape s;
  memset(&s, 0, sizeof(s));
  s.rank = rank;
  for (uint32_t i = 0; i < rank; i++) {
    s.dims[i] = dims[i];
  }
  return s;
}

bool fdy_shape_equal(fdy_shape a, fdy_shape b) {
  if (a.rank != b.rank || a.rank > FDY_MAX_RANK) {
    return false;
  }
  for (uint32_t i = 0; i < a.rank; i++) {
    if (a.dims[i] != b.dims[i]) {
      return false;
    }
  }
  return true;
}

fdy_status fdy_shape_elements(fdy_shape shape, uint64_t *out, fdy_error *err) {
  if (shape.rank > FDY_MAX_RANK) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "shape rank %" PRIu32 " exceeds %d", shape.rank,
                         FDY_MAX_RANK);
  }
  uint64_t n = 1;
  for (uint32_t i = 0; i < shape.rank; i++) {
    if (__builtin_mul_overflow(n, shape.dims[i], &n)) {
      return fdy_error_set(err, FDY_ERR_OVERFLOW,
                           "shape element count overflows 64 bits");
    }
  }
  *out = n;
  return FDY_OK;
}

fdy_status fdy_tensor_bytes(fdy_dtype dtype, fdy_shape shape, uint64_t *out,
                            fdy_error *err) {
  uint64_t size = fdy_dtype_size(dtype);
  if (size == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "invalid dtype %d",
                         (int)dtype);
  }
  uint64_t n = 0;
  fdy_status s = fdy_shape_elements(shape, &n, err);
  if (s != FDY_OK) {
    return s;
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW,
                         "tensor byte size overflows 64 bits");
  }
  *out = bytes;
  return FDY_OK;
}

char *fdy_shape_format(fdy_shape shape, char *buf, size_t cap) {
  if (cap == 0) {
    return buf;
  }
  size_t len = 0;
  buf[0] = '\0';
  uint32_t rank = shape.rank > FDY_MAX_RANK ? FDY_MAX_RANK : shape.rank;
  int n = snprintf(buf, cap, "[");
  len = n > 0 ? (size_t)n : 0;
  for (uint32_t i = 0; i < rank && len < cap; i++) {
    n = snprintf(buf + len, cap - len, "%s%" PRIu64, i ? ", " : "",
                 shape.dims[i]);
    len += n > 0 ? (size_t)n : 0;
  }
  if (len < cap) {
    snprintf(buf + len, cap - len, "]");
  }
  return buf;
}
