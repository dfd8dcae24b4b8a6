/* The arithmetic of the SAMPLE op (include/foundry/ops.h) that every
 * backend must do alike, written once: the counter-based uniform draw,
 * the exponential, the ranking key and a row's parameters. Compiled as C
 * (core's ops.c, the CPU backend through it) and as CUDA device code
 * (src/backends/cuda/sample.cu), where each double operation is an
 * explicitly rounded intrinsic so that nvcc never fuses a multiply and an
 * add: the two give the same bits. Not installed. */
#ifndef FOUNDRY_SAMPLE_MATH_H
#define FOUNDRY_SAMPLE_MATH_H

#include "foundry/ops.h"

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FDY_SAMPLE_FN        static __device__ __forceinline__
#define FDY_SAMPLE_ADD(a, b) __dadd_rn((a), (b))
#define FDY_SAMPLE_SUB(a, b) __dsub_rn((a), (b))
#define FDY_SAMPLE_MUL(a, b) __dmul_rn((a), (b))
#define FDY_SAMPLE_DIV(a, b) __ddiv_rn((a), (b))
#define FDY_SAMPLE_FLOOR(a)  floor(a)
#else
#include <math.h>
/* C11 without extensions never contracts (GCC's -ffp-contract=off). */
#define FDY_SAMPLE_FN        static inline
#define FDY_SAMPLE_ADD(a, b) ((a) + (b))
#define FDY_SAMPLE_SUB(a, b) ((a) - (b))
#define FDY_SAMPLE_MUL(a, b) ((a) * (b))
#define FDY_SAMPLE_DIV(a, b) ((a) / (b))
#define FDY_SAMPLE_FLOOR(a)  floor(a)
#endif

/* A row's parameters decoded from its FDY_SAMPLE_FIELDS words. */
typedef struct fdy_sample_row {
  float temperature, top_p, min_p;
  uint32_t top_k, counter;
  uint64_t seed;
} fdy_sample_row;

FDY_SAMPLE_FN float fdy_sample_word_float(uint32_t w) {
  float f;
  memcpy(&f, &w, sizeof f);
  return f;
}

FDY_SAMPLE_FN fdy_sample_row fdy_sample_row_of(const uint32_t *w) {
  fdy_sample_row r;
  r.temperature = fdy_sample_word_float(w[FDY_SAMPLE_TEMPERATURE]);
  r.top_k = w[FDY_SAMPLE_TOP_K];
  r.top_p = fdy_sample_word_float(w[FDY_SAMPLE_TOP_P]);
  r.min_p = fdy_sample_word_float(w[FDY_SAMPLE_MIN_P]);
  r.seed = (uint64_t)w[FDY_SAMPLE_SEED_LOW] | (uint64_t)w[FDY_SAMPLE_SEED_HIGH]
                                                  << 32;
  r.counter = w[FDY_SAMPLE_COUNTER];
  return r;
}

/* Whether the row's values are in range (else its id is -1). A top_p of 0
 * (a zeroed row) counts as 1. */
FDY_SAMPLE_FN bool fdy_sample_row_valid(const fdy_sample_row *r) {
  float t = r->temperature;
  return t >= 0.0f && t <= 3.4028234663852886e38f &&
         ((r->top_p > 0.0f && r->top_p <= 1.0f) || r->top_p == 0.0f) &&
         r->min_p >= 0.0f && r->min_p <= 1.0f;
}

/* Whether the row is greedy (given valid values; a non-finite maximum is
 * the caller's test). */
FDY_SAMPLE_FN bool fdy_sample_row_greedy(const fdy_sample_row *r) {
  return r->temperature == 0.0f || r->top_k == 1;
}

FDY_SAMPLE_FN double fdy_sample_uniform_of(uint64_t seed, uint32_t counter) {
  uint64_t z = seed + ((uint64_t)counter + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

FDY_SAMPLE_FN double fdy_sample_exp_of(double y) {
  if (!(y >= -708.0)) {
    return 0.0;
  }
  const double log2e = 1.4426950408889634, ln2_hi = 6.93147180369123816490e-01,
               ln2_lo = 1.90821492927058770002e-10;
  /* 1/n! for n = 13 down to 2 */
  const double inv_fact[12] = {
      1.6059043836821613e-10, 2.08767569878681e-09,   2.505210838544172e-08,
      2.755731922398589e-07,  2.7557319223985893e-06, 2.48015873015873e-05,
      0.0001984126984126984,  0.001388888888888889,   0.008333333333333333,
      0.041666666666666664,   0.16666666666666666,    0.5};
  double k = FDY_SAMPLE_FLOOR(FDY_SAMPLE_ADD(FDY_SAMPLE_MUL(y, log2e), 0.5));
  double r = FDY_SAMPLE_SUB(FDY_SAMPLE_SUB(y, FDY_SAMPLE_MUL(k, ln2_hi)),
                            FDY_SAMPLE_MUL(k, ln2_lo));
  double p = inv_fact[0];
  for (int i = 1; i < 12; i++) {
    p = FDY_SAMPLE_ADD(FDY_SAMPLE_MUL(p, r), inv_fact[i]);
  }
  p = FDY_SAMPLE_ADD(FDY_SAMPLE_MUL(p, r), 1.0);
  p = FDY_SAMPLE_ADD(FDY_SAMPLE_MUL(p, r), 1.0);
  /* k in [-1022, 0]: 2^k is a normal double, the product exact */
  uint64_t bits = (uint64_t)((int64_t)k + 1023) << 52;
  double scale;
  memcpy(&scale, &bits, sizeof scale);
  return FDY_SAMPLE_MUL(p, scale);
}

/* The order-preserving bits of a float: larger float, larger bits. */
FDY_SAMPLE_FN uint32_t fdy_sample_order(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return (b & 0x80000000u) ? ~b : b ^ 0x80000000u;
}

FDY_SAMPLE_FN bool fdy_sample_finite(float x) {
  return x - x == 0.0f;
}

/* The ranking key of id i of logit x: larger logit, then lower id, first;
 * 0 for a non-finite logit (below every finite one's). */
FDY_SAMPLE_FN uint64_t fdy_sample_key(float x, uint32_t i) {
  return fdy_sample_finite(x)
             ? (uint64_t)fdy_sample_order(x) << 32 | (uint64_t)(~i)
             : 0;
}

/* The weight of logit x against the row's maximum m at temperature t (both
 * as doubles); 0 for a non-finite x. */
FDY_SAMPLE_FN double fdy_sample_weight(float x, double m, double t) {
  return fdy_sample_finite(x) ? fdy_sample_exp_of(FDY_SAMPLE_DIV(
                                    FDY_SAMPLE_SUB((double)x, m), t))
                              : 0.0;
}

#endif
