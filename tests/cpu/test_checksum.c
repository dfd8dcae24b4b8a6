/* Tests of the synthetic checksum function against an independent, naive
 * reimplementation of the formula documented in checksum.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "foundry/checksum.h"

/* Straight from the header: words assembled byte by byte (little-endian,
 * zero padded), constants written out literally. */
static uint64_t reference(const unsigned char *bytes, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i * 8 < n; i++) {
    uint64_t w = 0;
    for (uint64_t b = 0; b < 8; b++) {
      uint64_t at = i * 8 + b;
      uint64_t byte = at < n ? bytes[at] : 0;
      w |= byte << (8 * b);
    }
    uint64_t z = w ^ ((i + 1) * 0x9E3779B97F4A7C15ull);
    uint64_t m = z * 0xFF51AFD7ED558CCDull;
    sum += m ^ (m >> 33);
  }
  uint64_t z = sum ^ n;
  z ^= z >> 33;
  z *= 0xFF51AFD7ED558CCDull;
  z ^= z >> 33;
  z *= 0xC4CEB9FE1A85EC53ull;
  z ^= z >> 33;
  return z;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint64_t next_random(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void fill_random(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    p[i] = (unsigned char)(next_random() | 1);
  }
}

static void test_tiny_vectors(void **state) {
  (void)state;
  /* The empty range: fmix64(0) is 0. */
  assert_true(fdy_checksum("", 0) == 0);
  assert_true(reference(NULL, 0) == 0);
  const unsigned char one[1] = {0x01};
  assert_true(fdy_checksum(one, 1) == reference(one, 1));
  const unsigned char eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  assert_true(fdy_checksum(eight, 8) == reference(eight, 8));
  /* Zero padding is not the same as explicit zeros: n is mixed in. */
  const unsigned char padded[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  assert_true(fdy_checksum(one, 1) != fdy_checksum(padded, 8));
  assert_true(fdy_checksum(padded, 8) == reference(padded, 8));
}

static void test_random_lengths_and_alignment(void **state) {
  (void)state;
  unsigned char *buf = malloc(4096 + 8);
  assert_non_null(buf);
  fill_random(buf, 4096 + 8);
  for (uint64_t n = 0; n <= 200; n++) {
    for (size_t off = 0; off < 8; off++) {
      assert_true(fdy_checksum(buf + off, n) == reference(buf + off, n));
    }
  }
  assert_true(fdy_checksum(buf + 3, 4096) == reference(buf + 3, 4096));
  free(buf);
}

static void test_partial_sums_compose(void **state) {
  (void)state;
  enum { WORDS = 1000 };
  uint64_t *words = malloc(WORDS * sizeof(uint64_t));
  assert_non_null(words);
  fill_random((unsigned char *)words, WORDS * sizeof(uint64_t));
  uint64_t whole = fdy_checksum(words, WORDS * 8);
  uint64_t split = fdy_checksum_partial(words, 0, 123) +
                   fdy_checksum_partial(words, 123, 500) +
                   fdy_checksum_partial(words, 623, WORDS - 623);
  assert_true(fdy_checksum_finish(split, WORDS * 8) == whole);
  assert_true(fdy_checksum_finish(fdy_checksum_partial(words, 0, WORDS),
                                  WORDS * 8) == whole);
  assert_true(fdy_checksum_partial(words, 10, 0) == 0);
  assert_true(whole == reference((const unsigned char *)words, WORDS * 8));
  free(words);
}

static void test_position_dependence(void **state) {
  (void)state;
  uint64_t words[16];
  fill_random((unsigned char *)words, sizeof(words));
  words[3] = 0x1111111111111111ull;
  words[9] = 0x2222222222222222ull;
  uint64_t before = fdy_checksum(words, sizeof(words));
  uint64_t t = words[3];
  words[3] = words[9];
  words[9] = t;
  uint64_t after = fdy_checksum(words, sizeof(words));
  assert_true(before != after);
  /* Every single-bit flip changes the result. */
  unsigned char bytes[64];
  fill_random(bytes, sizeof(bytes));
  uint64_t base = fdy_checksum(bytes, sizeof(bytes));
  for (size_t i = 0; i < sizeof(bytes) * 8; i++) {
    bytes[i / 8] ^= (unsigned char)(1u << (i % 8));
    assert_true(fdy_checksum(bytes, sizeof(bytes)) != base);
    bytes[i / 8] ^= (unsigned char)(1u << (i % 8));
  }
  /* The same bytes at another offset of a layer (shifted by one word)
   * checksum differently. */
  uint64_t shifted[17] = {0};
  memcpy(shifted + 1, words, sizeof(words));
  assert_true(fdy_checksum_finish(fdy_checksum_partial(shifted, 1, 16),
                                  sizeof(words)) !=
              fdy_checksum(words, sizeof(words)));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiny_vectors),
      cmocka_unit_test(test_random_lengths_and_alignment),
      cmocka_unit_test(test_partial_sums_compose),
      cmocka_unit_test(test_position_dependence),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
