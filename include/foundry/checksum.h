/* The synthetic checksum: a fixed 64-bit checksum over a byte range that
 * depends on every byte and on its position, so a layer copied into the
 * wrong place does not pass. The CHECKSUM op of every backend and the
 * bench's expected values compute exactly this. Implemented in the CPU
 * backend library (foundry_cpu), not in core: no module outside the
 * backends does arithmetic on workload data.
 *
 * Definition (n bytes, zero-padded to whole little-endian 64-bit words w_i,
 * i = 0 .. ceil(n/8) - 1, all arithmetic mod 2^64):
 *   term_i = mix(w_i ^ ((i + 1) * 0x9E3779B97F4A7C15))
 *   mix(z) = (z * 0xFF51AFD7ED558CCD) ^ ((z * 0xFF51AFD7ED558CCD) >> 33)
 *   sum    = term_0 + term_1 + ... (any order: addition commutes)
 *   result = fmix64(sum ^ n)
 *   fmix64(z): z ^= z >> 33; z *= 0xFF51AFD7ED558CCD; z ^= z >> 33;
 *              z *= 0xC4CEB9FE1A85EC53; z ^= z >> 33
 * The per-word work is one 64-bit multiply, so a GPU can run it near memory
 * bandwidth; the sum can be split across threads and partial sums added. */
#ifndef FOUNDRY_CHECKSUM_H
#define FOUNDRY_CHECKSUM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_CHECKSUM_POSITION_KEY 0x9E3779B97F4A7C15ull
#define FDY_CHECKSUM_MIX_KEY      0xFF51AFD7ED558CCDull
#define FDY_CHECKSUM_FINAL_KEY    0xC4CEB9FE1A85EC53ull

/* Partial sum of term_i over the words in [first_word, first_word + count)
 * of `words` (which points at word 0). */
uint64_t fdy_checksum_partial(const uint64_t *words, uint64_t first_word,
                              uint64_t count);
/* Final mixing of a complete sum for a range of n bytes. */
uint64_t fdy_checksum_finish(uint64_t sum, uint64_t n);
/* The whole checksum of n bytes at data (any alignment). All three are
 * pure and thread-safe. */
uint64_t fdy_checksum(const void *data, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
