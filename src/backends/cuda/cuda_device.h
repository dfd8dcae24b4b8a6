/* Device helpers of the CUDA op kernels (ops_kernels.cu, matmul_q4.cu,
 * matmul_q4_mma.cu, attention.cu, attention_prefill.cu,
 * attention_batch.cu): programmatic dependent launch, the step tensor's
 * row count and a row's place in the KV cache, half and KV cache loads and
 * stores, the rope's angles and rotation (the CPU backend's arithmetic),
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

/* Where a row of ATTENTION or ROPE_ATTENTION lies in a KV cache of
 * `sequences` regions of `context` positions: position
 * step[FDY_STEP_POSITION(r)] + offset of sequence
 * step[FDY_STEP_SEQUENCE(r)] (row t of ATTENTION's chunk: r = 0, offset t;
 * row t of ROPE_ATTENTION: r = t, offset 0). position is -1 and sequence 0
 * when the position or the sequence lies outside the cache. Reads only
 * the step tensor (allowed before fdy_grid_wait). */
typedef struct fdy_kv_row {
  long long position;
  unsigned long long sequence;
} fdy_kv_row;

static __device__ __forceinline__ fdy_kv_row
fdy_kv_row_of(const int32_t *step, unsigned int r, unsigned int offset,
              unsigned long long context, unsigned long long sequences) {
  const long long p = (long long)step[FDY_STEP_POSITION(r)] + offset;
  const long long s = step[FDY_STEP_SEQUENCE(r)];
  fdy_kv_row row = {-1, 0};
  if (p >= 0 && (unsigned long long)p < context && s >= 0 &&
      (unsigned long long)s < sequences) {
    row.position = p;
    row.sequence = (unsigned long long)s;
  }
  return row;
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

/* Stores v at element i of a KV cache of F32 (f16 false) or F16 values
 * (rounded to nearest even, as the CPU backend appends). */
static __device__ __forceinline__ void
fdy_cache_store(void *cache, bool f16, unsigned long long i, float v) {
  if (f16) {
    ((uint16_t *)cache)[i] = __half_as_ushort(__float2half_rn(v));
  } else {
    ((float *)cache)[i] = v;
  }
}

/* v as an F16 cache holds it once appended (rounded to nearest even), or v
 * itself for an F32 cache. */
static __device__ __forceinline__ float fdy_cache_round(bool f16, float v) {
  return f16 ? __half2float(__float2half_rn(v)) : v;
}

/* The rope's cos and sin of the pair of inverse frequency inv at
 * `position`: the angle and both functions in double, rounded to float
 * (the CPU backend's). */
static __device__ __forceinline__ void
fdy_rope_cos_sin(double position, double inv, float *c, float *s) {
  double ds = 0.0, dc = 0.0;
  sincos(position * inv, &ds, &dc);
  *c = (float)dc;
  *s = (float)ds;
}

/* The pair (x0, x1) rotated by cos c and sin s: the CPU backend's float
 * expressions, each product and difference rounded alike (no FMA). */
static __device__ __forceinline__ float2 fdy_rope_rotate(float x0, float x1,
                                                         float c, float s) {
  return make_float2(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)),
                     __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
}

/* acc + a . b, one FMA per element in element order. */
static __device__ __forceinline__ float fdy_dot4(float4 a, float4 b,
                                                 float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

/* a x + y, one FMA per element. */
static __device__ __forceinline__ float4 fdy_axpy4(float a, float4 x,
                                                   float4 y) {
  return make_float4(fmaf(a, x.x, y.x), fmaf(a, x.y, y.y), fmaf(a, x.z, y.z),
                     fmaf(a, x.w, y.w));
}

/* Maximum over the warp; every lane gets the same value. */
static __device__ __forceinline__ float fdy_warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
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

/* One step of fdy_warp_sums16: a lane keeps values 0 .. kWidth - 1 (lanes
 * without `offset`) or kWidth .. 2 kWidth - 1 (lanes with it), adding the
 * partner's copy of them; bit selects, so that the choice is not turned
 * into an index into local memory. */
template <int kWidth>
static __device__ __forceinline__ void fdy_warp_sums_step(float v[16],
                                                          unsigned int offset) {
  const unsigned int upper = (threadIdx.x & offset) != 0 ? ~0u : 0u;
#pragma unroll
  for (int i = 0; i < kWidth; i++) {
    const unsigned int lo = __float_as_uint(v[i]);
    const unsigned int hi = __float_as_uint(v[i + kWidth]);
    const float keep = __uint_as_float((hi & upper) | (lo & ~upper));
    const float send = __uint_as_float((lo & upper) | (hi & ~upper));
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
  }
}

/* The warp sums of 16 values at once: at each xor step a lane keeps half
 * of its values and sends the other half, so 16 shuffles instead of 16 x 5.
 * Returns the sum of value lane / 2 (lanes 2k and 2k + 1 hold value k's:
 * the steps over lane bits 4, 3, 2, 1 keep the values whose index has
 * those bits); each value's sum is the same tree of additions as
 * fdy_warp_sum's (bitwise equal). Every lane of the warp must call it. */
static __device__ __forceinline__ float fdy_warp_sums16(float v[16]) {
  fdy_warp_sums_step<8>(v, 16);
  fdy_warp_sums_step<4>(v, 8);
  fdy_warp_sums_step<2>(v, 4);
  fdy_warp_sums_step<1>(v, 2);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
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
