/* MLX 4-bit dequantization and half-precision conversion.
 *
 * A quantized row packs 8 nibbles per little-endian U32, low nibble first:
 * element i is (W[i / 8] >> (4 * (i % 8))) & 0xF and its value is
 * scales[i / group] * q + biases[i / group]. Scales and biases are F16 or
 * BF16. Loads are bytewise
 * little-endian: MLX data may be unaligned. */
#include <pthread.h>
#include <string.h>

#include "infer.h"

/* Every F16 value as a float, built once (pthread_once): rows convert two
 * halves per group, which a table lookup keeps cheap. */
static float f16_table[1 << 16];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

float fdy_llama_f16_to_float(uint16_t h) {
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

float fdy_llama_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float out;
  memcpy(&out, &bits, sizeof out);
  return out;
}

static void f16_table_init(void) {
  for (uint32_t h = 0; h < (1u << 16); h++) {
    f16_table[h] = fdy_llama_f16_to_float((uint16_t)h);
  }
}

void fdy_llama_halves_to_float(const void *data, fdy_dtype dtype,
                               uint64_t first, uint32_t count, float *out) {
  const unsigned char *b = (const unsigned char *)data + 2 * first;
  if (dtype == FDY_DTYPE_BF16) {
    for (uint32_t i = 0; i < count; i++) {
      out[i] =
          fdy_llama_bf16_to_float((uint16_t)(b[2 * i] | b[2 * i + 1] << 8));
    }
    return;
  }
  pthread_once(&f16_once, f16_table_init);
  for (uint32_t i = 0; i < count; i++) {
    out[i] = f16_table[b[2 * i] | b[2 * i + 1] << 8];
  }
}

float fdy_llama_half_at(const void *data, fdy_dtype dtype, uint64_t i) {
  const unsigned char *b = (const unsigned char *)data + 2 * i;
  uint16_t h = (uint16_t)(b[0] | (b[1] << 8));
  return dtype == FDY_DTYPE_BF16 ? fdy_llama_bf16_to_float(h)
                                 : fdy_llama_f16_to_float(h);
}

void fdy_llama_dequantize_row(const fdy_llama_qlinear *linear,
                              fdy_dtype scale_dtype, uint32_t row, float *out) {
  uint32_t in = linear->in_features;
  uint32_t groups = (uint32_t)linear->scales->shape.dims[1];
  uint32_t group = in / groups;
  const unsigned char *words = (const unsigned char *)linear->weight->data +
                               (uint64_t)row * (in / 8) * 4;
  uint64_t first = (uint64_t)row * groups;
  for (uint32_t g = 0; g < groups; g++) {
    float scale =
        fdy_llama_half_at(linear->scales->data, scale_dtype, first + g);
    float bias =
        fdy_llama_half_at(linear->biases->data, scale_dtype, first + g);
    float *o = out + (uint64_t)g * group;
    const unsigned char *w = words + (uint64_t)g * (group / 8) * 4;
    for (uint32_t k = 0; k < group / 8; k++) {
      const unsigned char *b = w + 4 * k;
      uint32_t word = (uint32_t)b[0] | (uint32_t)b[1] << 8 |
                      (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      for (uint32_t j = 0; j < 8; j++) {
        o[8 * k + j] = scale * (float)((word >> (4 * j)) & 0xfu) + bias;
      }
    }
  }
}
