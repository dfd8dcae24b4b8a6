/* The synthetic checksum (definition in include/foundry/checksum.h), part of
 * the CPU backend: its CHECKSUM op and the benchmark's expected values
 * compute exactly this. */
#include "foundry/checksum.h"

#include <string.h>

static inline uint64_t checksum_term(uint64_t word, uint64_t index) {
  uint64_t z = word ^ ((index + 1) * FDY_CHECKSUM_POSITION_KEY);
  z *= FDY_CHECKSUM_MIX_KEY;
  return z ^ (z >> 33);
}

uint64_t fdy_checksum_partial(const uint64_t *words, uint64_t first_word,
                              uint64_t count) {
  uint64_t sum = 0;
  for (uint64_t i = first_word; i < first_word + count; i++) {
    sum += checksum_term(words[i], i);
  }
  return sum;
}

uint64_t fdy_checksum_finish(uint64_t sum, uint64_t n) {
  uint64_t z = sum ^ n;
  z ^= z >> 33;
  z *= FDY_CHECKSUM_MIX_KEY;
  z ^= z >> 33;
  z *= FDY_CHECKSUM_FINAL_KEY;
  z ^= z >> 33;
  return z;
}

uint64_t fdy_checksum(const void *data, uint64_t n) {
  const unsigned char *bytes = data;
  uint64_t whole = n / 8;
  uint64_t sum = 0;
  for (uint64_t i = 0; i < whole; i++) {
    uint64_t word;
    memcpy(&word, bytes + i * 8, 8);
    sum += checksum_term(word, i);
  }
  if (n % 8 != 0) {
    uint64_t word = 0;
    memcpy(&word, bytes + whole * 8, n % 8);
    sum += checksum_term(word, whole);
  }
  return fdy_checksum_finish(sum, n);
}
