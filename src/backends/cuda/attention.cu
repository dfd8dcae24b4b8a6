/* ATTENTION on CUDA: two kernels in stream order.
 *
 * 1. append: block t stores rows t of k and v at cache position p0 + t
 *    (F32 copied, F16 rounded to nearest even like the CPU backend), for
 *    the step's rows whose position lies in the cache.
 * 2. attention: block (t, h) runs query head h of row t over cache
 *    positions 0..p0 + t (it reads rows the append kernel wrote, hence the
 *    second launch), 128 threads: each warp takes every fourth position,
 *    four positions at a time, and dots q (in shared memory) with their key
 *    rows, lanes striding over the head dimension (coalesced), a butterfly
 *    summing each; the scores,
 *    scaled by (float)(1 / sqrt(d)), are kept in shared memory (context
 *    floats; supports_op refuses a context that does not fit). Then the
 *    block's maximum, exp(score - max) in float summed in double (a fixed
 *    tree), and each output element j is one thread's sequential sum over
 *    positions of (e_p / sum) * v_p[j], loads coalesced across threads.
 *    A row whose position lies outside the cache is NaN. This is the CPU
 *    backend's arithmetic (src/backends/cpu/kernels.c) up to the order of
 *    the dot products' additions and fused multiply-adds.
 *
 * Rows at or beyond the step's count are neither read nor written; the
 * count and p0 are read by the kernels when they run. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define APPEND_THREADS      256
#define ATTENTION_THREADS   128
#define ATTENTION_WARPS     (ATTENTION_THREADS / 32)
#define ATTENTION_POSITIONS 4 /* key rows a warp dots at once */

static __device__ __forceinline__ float cache_at(const void *cache, bool f16,
                                                 unsigned long long i) {
  return f16 ? __half2float(__ushort_as_half(((const uint16_t *)cache)[i]))
             : ((const float *)cache)[i];
}

static __device__ __forceinline__ void
cache_store(void *cache, bool f16, unsigned long long i, float v) {
  if (f16) {
    ((uint16_t *)cache)[i] = __half_as_ushort(__float2half_rn(v));
  } else {
    ((float *)cache)[i] = v;
  }
}

__global__ void __launch_bounds__(APPEND_THREADS)
    append_kernel(const int32_t *step, const float *k, const float *v,
                  void *k_cache, void *v_cache, bool f16, unsigned int kv_dim,
                  unsigned int rows, unsigned long long context) {
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const long long p = (long long)step[FDY_STEP_POSITION] + t;
  if (p < 0 || (unsigned long long)p >= context) {
    return;
  }
  const unsigned long long src = (unsigned long long)t * kv_dim;
  const unsigned long long dst = (unsigned long long)p * kv_dim;
  for (unsigned int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    cache_store(k_cache, f16, dst + i, k[src + i]);
    cache_store(v_cache, f16, dst + i, v[src + i]);
  }
}

/* Shared memory: ATTENTION_WARPS doubles (the sum's scratch), as many
 * floats (the warps' maxima), q (d floats), the scores (context floats). */
__global__ void __launch_bounds__(ATTENTION_THREADS)
    attention_kernel(const int32_t *step, const float *q, const void *k_cache,
                     const void *v_cache, bool f16, unsigned int heads,
                     unsigned int group, unsigned int d, unsigned int rows,
                     unsigned long long context, float *out) {
  extern __shared__ double shared[];
  double *sum_scratch = shared;
  float *warp_max = (float *)(shared + ATTENTION_WARPS);
  float *qs = warp_max + ATTENTION_WARPS;
  float *scores = qs + d;
  const unsigned int t = blockIdx.x / heads, h = blockIdx.x % heads;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned long long q_dim = (unsigned long long)heads * d;
  const unsigned long long kv_dim = (unsigned long long)(heads / group) * d;
  float *o = out + t * q_dim + (unsigned long long)h * d;
  const long long p = (long long)step[FDY_STEP_POSITION] + t;
  if (p < 0 || (unsigned long long)p >= context) {
    for (unsigned int j = threadIdx.x; j < d; j += blockDim.x) {
      o[j] = CUDART_NAN_F;
    }
    return;
  }
  const unsigned int last = (unsigned int)p;
  const unsigned long long kv_at = (unsigned long long)(h / group) * d;
  const float *qh = q + t * q_dim + (unsigned long long)h * d;
  for (unsigned int j = threadIdx.x; j < d; j += blockDim.x) {
    qs[j] = qh[j];
  }
  __syncthreads();

  const float scale = (float)(1.0 / sqrt((double)d));
  float max = -CUDART_INF_F;
  /* warp w scores positions w, w + 4, ...: ATTENTION_POSITIONS of them at
   * once, so that their loads are in flight together */
  for (unsigned int p0 = warp; p0 <= last;
       p0 += ATTENTION_WARPS * ATTENTION_POSITIONS) {
    float dot[ATTENTION_POSITIONS];
#pragma unroll
    for (int u = 0; u < ATTENTION_POSITIONS; u++) {
      dot[u] = 0.0f;
    }
    for (unsigned int j = lane; j < d; j += 32) {
      const float qj = qs[j];
#pragma unroll
      for (int u = 0; u < ATTENTION_POSITIONS; u++) {
        const unsigned int pp = p0 + u * ATTENTION_WARPS;
        if (pp <= last) {
          dot[u] =
              fmaf(qj, cache_at(k_cache, f16, pp * kv_dim + kv_at + j), dot[u]);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < ATTENTION_POSITIONS; u++) {
      const unsigned int pp = p0 + u * ATTENTION_WARPS;
      if (pp <= last) { /* the same for every lane */
        const float s = fdy_warp_sum(dot[u]) * scale;
        if (lane == 0) {
          scores[pp] = s;
        }
        max = fmaxf(max, s);
      }
    }
  }
  if (lane == 0) {
    warp_max[warp] = max;
  }
  __syncthreads();
  max = warp_max[0];
  for (unsigned int w = 1; w < ATTENTION_WARPS; w++) {
    max = fmaxf(max, warp_max[w]);
  }

  double sum = 0.0;
  for (unsigned int pp = threadIdx.x; pp <= last; pp += blockDim.x) {
    const float e = expf(scores[pp] - max);
    scores[pp] = e;
    sum += e;
  }
  sum = fdy_block_sum_double(sum, sum_scratch);
  const float inv = (float)(1.0 / sum);

  for (unsigned int j = threadIdx.x; j < d; j += blockDim.x) {
    float acc = 0.0f;
#pragma unroll 8
    for (unsigned int pp = 0; pp <= last; pp++) {
      acc = fmaf(scores[pp] * inv,
                 cache_at(v_cache, f16, pp * kv_dim + kv_at + j), acc);
    }
    o[j] = acc;
  }
}

extern "C" uint64_t fdy_cuda_attention_shared_bytes(const fdy_op *op) {
  const uint64_t context = op->inputs[4].shape.dims[0];
  return ATTENTION_WARPS * (sizeof(double) + sizeof(float)) +
         ((uint64_t)op->params.attention.head_dim + context) * sizeof(float);
}

extern "C" cudaError_t fdy_cuda_attention_prepare(uint64_t smem_optin) {
  cudaError_t rc = cudaFuncSetAttribute(
      attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem_optin);
  if (rc == cudaSuccess) {
    struct cudaFuncAttributes attributes;
    rc = cudaFuncGetAttributes(&attributes, append_kernel);
  }
  return rc;
}

extern "C" cudaError_t fdy_cuda_attention_enqueue(const fdy_cuda_op_args *a,
                                                  cudaStream_t stream) {
  const fdy_op *op = a->op;
  const unsigned int heads = op->params.attention.heads;
  const unsigned int group = heads / op->params.attention.kv_heads;
  const unsigned int d = op->params.attention.head_dim;
  const unsigned int rows = (unsigned int)op->inputs[1].shape.dims[0];
  const unsigned int kv_dim = (unsigned int)op->inputs[2].shape.dims[1];
  const unsigned long long context = op->inputs[4].shape.dims[0];
  const bool f16 = op->inputs[4].dtype == FDY_DTYPE_F16;
  const int32_t *step = (const int32_t *)a->in[0];
  append_kernel<<<rows, APPEND_THREADS, 0, stream>>>(
      step, (const float *)a->in[2], (const float *)a->in[3], a->in[4],
      a->in[5], f16, kv_dim, rows, context);
  cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess) {
    return rc;
  }
  attention_kernel<<<rows * heads, ATTENTION_THREADS,
                     (size_t)fdy_cuda_attention_shared_bytes(op), stream>>>(
      step, (const float *)a->in[1], a->in[4], a->in[5], f16, heads, group, d,
      rows, context, (float *)a->out);
  return cudaGetLastError();
}
