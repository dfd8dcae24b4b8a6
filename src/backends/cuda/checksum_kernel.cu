/* The checksum op's kernel: fdy_checksum (include/foundry/checksum.h) over
 * a device range, at close to memory bandwidth, chained with the previous
 * result: out = fdy_checksum(data) + prev * FDY_CHAIN_PRIME, all in device
 * memory.
 *
 * Each thread walks 16-byte pairs of words in a grid-stride loop, UNROLL
 * (4) independent 16-byte loads in flight per iteration (the remainder too),
 * and keeps the position keys (i + 1) * POSITION_KEY as running sums so the
 * only multiply per word is the mix. Partial sums (mod 2^64) are reduced with
 * warp shuffles, then across the block's warps in shared memory, and each block
 * adds its sum to the stream's device word with one atomicAdd. The last block
 * to finish (counted with an acq_rel atomic add) takes the sum, zeroes the
 * words for the stream's next launch, applies the final mixing
 * (fdy_checksum_finish, written again below for the device) and writes the
 * chained result; prev is loaded by every block before it counts itself, so
 * its latency hides behind the count (docs/tuning-log.md, entries 4-5).
 *
 * passes: the data is read `passes` times. The loads are volatile inline
 * PTX, so no pass can be merged or dropped, and every later pass's partial
 * sum is compared with the first one's (diff), so every pass's arithmetic
 * is live too. The result is the first pass's; a disagreement (the data
 * changed under the kernel) complements the output, so a chain check
 * catches it. */
#include "cuda_internal.h"

#include "foundry/checksum.h"
#include "foundry/ops.h"

#define WARPS (FDY_CUDA_CHECKSUM_THREADS / 32)

static __device__ __forceinline__ void
load_pair(const void *p, unsigned long long *a, unsigned long long *b) {
  asm volatile("ld.global.nc.v2.u64 {%0, %1}, [%2];"
               : "=l"(*a), "=l"(*b)
               : "l"(p));
}

static __device__ __forceinline__ unsigned long long
term(unsigned long long word, unsigned long long position_key) {
  unsigned long long z = (word ^ position_key) * FDY_CHECKSUM_MIX_KEY;
  return z ^ (z >> 33);
}

/* Pairs of words each thread loads before it uses any (loads in flight). */
#ifndef FDY_CUDA_CHECKSUM_UNROLL
#define FDY_CUDA_CHECKSUM_UNROLL 4
#endif
#define UNROLL FDY_CUDA_CHECKSUM_UNROLL

/* Sum of term_i over this thread's words of one pass. The remainder (fewer
 * than UNROLL pairs) is loaded all at once too, under guards, so that the
 * tail costs one memory latency rather than one per pair. */
static __device__ __forceinline__ unsigned long long
thread_pass(const unsigned char *data, unsigned long long bytes,
            unsigned long long tid, unsigned long long stride) {
  const unsigned long long words = bytes / 8;
  const unsigned long long pairs = words / 2;
  const unsigned long long key = FDY_CHECKSUM_POSITION_KEY;
  /* word 2i has key (2i + 1) * K, word 2i + 1 has (2i + 2) * K */
  const unsigned long long step = 2 * stride * key;
  unsigned long long k0 = (2 * tid + 1) * key;
  unsigned long long s = 0;
  unsigned long long i = tid;
  const unsigned char *p = data + 16 * tid;
  const unsigned long long pstep = 16 * stride;
  unsigned long long a[UNROLL], b[UNROLL];
  for (; i + (UNROLL - 1) * stride < pairs; i += UNROLL * stride) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      load_pair(p + u * pstep, &a[u], &b[u]);
    }
    unsigned long long k = k0;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      s += term(a[u], k) + term(b[u], k + key);
      k += step;
    }
    k0 = k;
    p += UNROLL * pstep;
  }
#pragma unroll
  for (int u = 0; u < UNROLL - 1; u++) {
    a[u] = 0;
    b[u] = 0;
    if (i + u * stride < pairs) {
      load_pair(p + u * pstep, &a[u], &b[u]);
    }
  }
#pragma unroll
  for (int u = 0; u < UNROLL - 1; u++) {
    if (i + u * stride < pairs) {
      s += term(a[u], k0) + term(b[u], k0 + key);
    }
    k0 += step;
  }
  if (tid == 0) {
    if (words % 2 != 0) {
      const volatile unsigned long long *w =
          (const volatile unsigned long long *)data;
      s += term(w[words - 1], words * key);
    }
    unsigned long long rest = bytes % 8;
    if (rest != 0) {
      const volatile unsigned char *tail = data + 8 * words;
      unsigned long long w = 0;
      for (unsigned long long j = 0; j < rest; j++) {
        w |= (unsigned long long)tail[j] << (8 * j);
      }
      s += term(w, (words + 1) * key);
    }
  }
  return s;
}

/* fdy_checksum_finish: the final mixing of a complete sum of n bytes. */
static __device__ __forceinline__ unsigned long long
finish(unsigned long long sum, unsigned long long n) {
  unsigned long long z = sum ^ n;
  z ^= z >> 33;
  z *= FDY_CHECKSUM_MIX_KEY;
  z ^= z >> 33;
  z *= FDY_CHECKSUM_FINAL_KEY;
  z ^= z >> 33;
  return z;
}

__global__ void __launch_bounds__(FDY_CUDA_CHECKSUM_THREADS,
                                  FDY_CUDA_CHECKSUM_MIN_BLOCKS)
    checksum_kernel(const unsigned char *data, unsigned long long bytes,
                    unsigned int passes, fdy_cuda_checksum_words *words,
                    const unsigned long long *prev, unsigned long long *out) {
  __shared__ unsigned long long warp_sum[WARPS];
  __shared__ unsigned long long warp_diff[WARPS];
  const unsigned long long tid =
      (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long sum = thread_pass(data, bytes, tid, stride);
  unsigned long long diff = 0;
  for (unsigned int pass = 1; pass < passes; pass++) {
    diff |= thread_pass(data, bytes, tid, stride) ^ sum;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    diff |= __shfl_down_sync(0xffffffffu, diff, offset);
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_sum[warp] = sum;
    warp_diff[warp] = diff;
  }
  __syncthreads();
  if (warp != 0) {
    return;
  }
  sum = lane < WARPS ? warp_sum[lane] : 0;
  diff = lane < WARPS ? warp_diff[lane] : 0;
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
    diff |= __shfl_down_sync(0xffffffffu, diff, offset);
  }
  if (lane != 0) {
    return;
  }
  /* Issued now, used only by the last block: its latency overlaps the
   * atomics below. prev was written by earlier work in stream order. */
  const unsigned long long p = prev != NULL ? *prev : 0ull;
  atomicAdd(&words->sum, sum);
  if (diff != 0) {
    atomicOr(&words->diff, 1ull);
  }
  /* Counting this block done is one acq_rel atomic: release orders the sum
   * above before the count, acquire lets the last block see every other
   * block's sum (docs/tuning-log.md, entry 5: 0.3 us less than a fence, a
   * relaxed count and a second fence). The result goes to device memory
   * only; later work on the stream sees it after the kernel completed. */
  unsigned int done_before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
               : "=r"(done_before)
               : "l"(&words->blocks_done)
               : "memory");
  if (done_before == gridDim.x - 1) {
    unsigned long long total = atomicExch(&words->sum, 0ull);
    unsigned long long disagreed = atomicExch(&words->diff, 0ull);
    atomicExch(&words->blocks_done, 0u);
    unsigned long long r = finish(total, bytes);
    if (disagreed != 0) {
      r = ~r;
    }
    *out = r + p * FDY_CHAIN_PRIME;
  }
}

__global__ void fill_kernel(unsigned char *data, unsigned long long bytes,
                            unsigned long long seed) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i =
           (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < bytes; i += stride) {
    unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = (unsigned char)(z % 255 + 1);
  }
}

extern "C" cudaError_t fdy_cuda_checksum_occupancy(int *blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, checksum_kernel, FDY_CUDA_CHECKSUM_THREADS, 0);
}

extern "C" cudaError_t
fdy_cuda_checksum_enqueue(const void *data, uint64_t bytes, uint32_t passes,
                          int max_blocks, fdy_cuda_checksum_words *words,
                          const uint64_t *prev, uint64_t *out,
                          cudaStream_t stream) {
  /* A block per 4 pairs per thread is enough for small inputs. */
  const uint64_t per_block = (uint64_t)FDY_CUDA_CHECKSUM_THREADS * 16 * 4;
  uint64_t want = bytes / per_block + 1;
  int blocks = want < (uint64_t)max_blocks ? (int)want : max_blocks;
  if (blocks < 1) {
    blocks = 1;
  }
  checksum_kernel<<<blocks, FDY_CUDA_CHECKSUM_THREADS, 0, stream>>>(
      (const unsigned char *)data, bytes, passes < 1 ? 1 : passes, words,
      (const unsigned long long *)prev, (unsigned long long *)out);
  return cudaGetLastError();
}

extern "C" cudaError_t fdy_cuda_fill_enqueue(void *data, uint64_t bytes,
                                             uint64_t seed,
                                             cudaStream_t stream) {
  if (bytes == 0) {
    return cudaSuccess;
  }
  uint64_t want = (bytes + 255) / 256;
  int blocks = want < 4096 ? (int)want : 4096;
  fill_kernel<<<blocks, 256, 0, stream>>>((unsigned char *)data, bytes, seed);
  return cudaGetLastError();
}
