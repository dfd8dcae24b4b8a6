/* Device helpers of the CUDA op kernels (ops_kernels.cu, matmul_q4.cu,
 * attention.cu): the step tensor's row count, half loads, and sums whose
 * order is fixed by the block shape alone (butterflies within a warp, then
 * the warps' sums in warp order), so that a result never depends on
 * scheduling. Included by .cu files only. */
#ifndef FOUNDRY_CUDA_DEVICE_H
#define FOUNDRY_CUDA_DEVICE_H

#include "foundry/ops.h"

#include <cuda_fp16.h>
#include <math_constants.h>
#include <stdint.h>

/* Rows an op processes: step[FDY_STEP_COUNT] clamped to [0, rows]. */
static __device__ __forceinline__ unsigned int
fdy_active_rows(const int32_t *step, unsigned long long rows) {
  const int count = step[FDY_STEP_COUNT];
  if (count <= 0) {
    return 0;
  }
  return (unsigned long long)count < rows ? (unsigned int)count
                                          : (unsigned int)rows;
}

/* Element i of an F16 (bf16 false) or BF16 vector, exactly. */
static __device__ __forceinline__ float
fdy_half_at(const uint16_t *p, bool bf16, unsigned long long i) {
  const uint16_t h = p[i];
  return bf16 ? __uint_as_float((unsigned int)h << 16)
              : __half2float(__ushort_as_half(h));
}

/* The nibble of a packed word at position j (low first) as a float: the
 * exponent trick 2^23 + q - 2^23, exact. */
static __device__ __forceinline__ float fdy_nibble(uint32_t word, int j) {
  return __uint_as_float(0x4b000000u | ((word >> (4 * j)) & 0xfu)) - 8388608.0f;
}

/* Sum over the warp; every lane gets the same value. */
static __device__ __forceinline__ float fdy_warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

static __device__ __forceinline__ double fdy_warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

/* Sum over the block (blockDim.x a multiple of 32); every thread gets the
 * same value. scratch: blockDim.x / 32 doubles of shared memory. Every
 * thread of the block must call it (it synchronizes twice: shared memory
 * written before the call is visible to every thread after it). */
static __device__ __forceinline__ double fdy_block_sum_double(double v,
                                                              double *scratch) {
  const unsigned int warps = blockDim.x / 32;
  v = fdy_warp_sum_double(v);
  if (threadIdx.x % 32 == 0) {
    scratch[threadIdx.x / 32] = v;
  }
  __syncthreads();
  double total = 0.0;
  for (unsigned int w = 0; w < warps; w++) {
    total += scratch[w];
  }
  __syncthreads();
  return total;
}

#endif
