/* Half-precision conversions of the CPU backend: F16 and BF16 to float
 * (exact; F16 through a table of all 65536 values built once), and float to
 * F16 rounded to nearest even for F16 KV caches. Loads are bytewise
 * little-endian, like the checkpoint bytes they read. */
#include "kernels.h"

#include <pthread.h>
#include <string.h>

static float f16_table[1 << 16];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

float fdy_cpu_f16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    /* subnormal: normalize the mantissa */
    uint32_t e = 113u;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      e--;
    }
    bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

float fdy_cpu_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

/* Rounds m >> shift to nearest even (1 <= shift <= 31). */
static uint32_t round_shift(uint32_t m, uint32_t shift) {
  uint32_t q = m >> shift;
  uint32_t rest = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  return rest > half || (rest == half && (q & 1u)) ? q + 1 : q;
}

uint16_t fdy_cpu_float_to_f16(float value) {
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

static void f16_table_init(void) {
  for (uint32_t h = 0; h < (1u << 16); h++) {
    f16_table[h] = fdy_cpu_f16_to_float((uint16_t)h);
  }
}

const float *fdy_cpu_f16_table(void) {
  pthread_once(&f16_once, f16_table_init);
  return f16_table;
}

void fdy_cpu_halves_to_float(const void *data, fdy_dtype dtype, uint64_t first,
                             uint32_t count, float *out) {
  const unsigned char *b = (const unsigned char *)data + 2 * first;
  if (dtype == FDY_DTYPE_BF16) {
    for (uint32_t i = 0; i < count; i++) {
      out[i] = fdy_cpu_bf16_to_float((uint16_t)(b[2 * i] | b[2 * i + 1] << 8));
    }
    return;
  }
  const float *table = fdy_cpu_f16_table();
  for (uint32_t i = 0; i < count; i++) {
    out[i] = table[b[2 * i] | b[2 * i + 1] << 8];
  }
}

float fdy_cpu_half_at(const void *data, fdy_dtype dtype, uint64_t i) {
  const unsigned char *b = (const unsigned char *)data + 2 * i;
  uint16_t h = (uint16_t)(b[0] | (b[1] << 8));
  return dtype == FDY_DTYPE_BF16 ? fdy_cpu_bf16_to_float(h)
                                 : fdy_cpu_f16_to_float(h);
}
