/* Half-precision conversions of the CPU backend: F16 and BF16 to float
 * (exact; F16 through a table of all 65536 values built once), and F32,
 * F16 or BF16 vectors to floats; float to F16 is core's fdy_float_to_f16.
 * Loads are bytewise little-endian, like the checkpoint bytes they read. */
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

void fdy_cpu_floats_of(const void *data, fdy_dtype dtype, uint64_t first,
                       uint32_t count, float *out) {
  if (dtype != FDY_DTYPE_F32) {
    fdy_cpu_halves_to_float(data, dtype, first, count, out);
    return;
  }
  const unsigned char *b = (const unsigned char *)data + 4 * first;
  for (uint32_t i = 0; i < count; i++) {
    uint32_t bits = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                    (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    memcpy(&out[i], &bits, sizeof bits);
  }
}

float fdy_cpu_half_at(const void *data, fdy_dtype dtype, uint64_t i) {
  const unsigned char *b = (const unsigned char *)data + 2 * i;
  uint16_t h = (uint16_t)(b[0] | (b[1] << 8));
  return dtype == FDY_DTYPE_BF16 ? fdy_cpu_bf16_to_float(h)
                                 : fdy_cpu_f16_to_float(h);
}
