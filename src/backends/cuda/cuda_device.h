/* Device helpers of the CUDA op kernels (ops_kernels.cu, matmul_q4.cu,
 * matmul_q4_mma.cu, attention.cu, attention_prefill.cu): programmatic
 * dependent launch, the step tensor's row count, half and KV cache loads,
 * and sums whose order is fixed by the block shape alone (butterflies
 * within a warp, then the warps' sums in warp order), so that a result
 * never depends on scheduling. Included by .cu files only. */
#ifndef FOUNDRY_CUDA_DEVICE_H
#define FOUNDRY_CUDA_DEVICE_H

#include "foundry/ops.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>
#include <stdint.h>

/* Programmatic dependent launch (PDL, sm_90). A kernel launched by
 * fdy_launch with dependent true may start while the kernel before it on
 * the stream still runs. Such a kernel must call fdy_grid_wait before it
 * reads anything an earlier kernel of its chain wrote (the kernels since
 * the stream's last full dependency: a copy, an event wait, the start of
 * a graph launch), or writes anything an earlier kernel reads or writes.
 * Weights, norms and the step tensor, which only copies write, may be read
 * before it, and so may what only work before the chain wrote (a KV
 * cache's positions before the step's, which earlier steps appended).
 * fdy_grid_wait returns once every earlier kernel has completed and its
 * writes are visible. A kernel calls fdy_grid_launch_dependents once it no
 * longer needs its multiprocessors for itself alone (usually first thing):
 * the next kernel's blocks may then be scheduled and run up to their own
 * fdy_grid_wait. Both are no-ops in a kernel launched without the attribute. */
static __device__ __forceinline__ void fdy_grid_wait(void) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

static __device__ __forceinline__ void fdy_grid_launch_dependents(void) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* kernel<<<grid, block, shared, stream>>>(args...) through
 * cudaLaunchKernelEx; with dependent, as a programmatic dependent launch
 * (the kernel must follow fdy_grid_wait's rules). Returns the launch's
 * error. */
template <typename... Params, typename... Args>
static cudaError_t fdy_launch(bool dependent, void (*kernel)(Params...),
                              dim3 grid, dim3 block, size_t shared,
                              cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = dependent ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

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

/* The F16 (bf16 false) or BF16 value with bits h, exactly. */
static __device__ __forceinline__ float fdy_half_bits(uint16_t h, bool bf16) {
  return bf16 ? __uint_as_float((unsigned int)h << 16)
              : __half2float(__ushort_as_half(h));
}

/* Element i of an F16 (bf16 false) or BF16 vector, exactly. */
static __device__ __forceinline__ float
fdy_half_at(const uint16_t *p, bool bf16, unsigned long long i) {
  return fdy_half_bits(p[i], bf16);
}

/* The nibble of a packed word at position j (low first) as a float: the
 * exponent trick 2^23 + q - 2^23, exact. */
static __device__ __forceinline__ float fdy_nibble(uint32_t word, int j) {
  return __uint_as_float(0x4b000000u | ((word >> (4 * j)) & 0xfu)) - 8388608.0f;
}

/* Element i of a KV cache of F32 (f16 false) or F16 values, as a float. */
static __device__ __forceinline__ float
fdy_cache_at(const void *cache, bool f16, unsigned long long i) {
  return f16 ? __half2float(__ushort_as_half(((const uint16_t *)cache)[i]))
             : ((const float *)cache)[i];
}

/* Four F16 values (low half of w.x first) as floats, exactly. */
static __device__ __forceinline__ float4 fdy_half4_float4(uint2 w) {
  const float2 lo = __half22float2(
      __halves2half2(__ushort_as_half((unsigned short)(w.x & 0xffffu)),
                     __ushort_as_half((unsigned short)(w.x >> 16))));
  const float2 hi = __half22float2(
      __halves2half2(__ushort_as_half((unsigned short)(w.y & 0xffffu)),
                     __ushort_as_half((unsigned short)(w.y >> 16))));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}

/* Elements 4 j4 .. 4 j4 + 3 of the d elements at `at` of a cache, zero
 * past d. vec (d a multiple of 4, so `at` is too): one 16-byte F32 or
 * 8-byte F16 load. */
static __device__ __forceinline__ float4 fdy_cache_load4(const void *cache,
                                                         bool f16, bool vec,
                                                         unsigned long long at,
                                                         unsigned int j4,
                                                         unsigned int d) {
  const unsigned int j = 4 * j4;
  if (vec) {
    if (f16) {
      return fdy_half4_float4(
          *(const uint2 *)((const uint16_t *)cache + at + j));
    }
    return *(const float4 *)((const float *)cache + at + j);
  }
  return make_float4(j < d ? fdy_cache_at(cache, f16, at + j) : 0.0f,
                     j + 1 < d ? fdy_cache_at(cache, f16, at + j + 1) : 0.0f,
                     j + 2 < d ? fdy_cache_at(cache, f16, at + j + 2) : 0.0f,
                     j + 3 < d ? fdy_cache_at(cache, f16, at + j + 3) : 0.0f);
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
