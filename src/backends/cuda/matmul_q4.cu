/* MATMUL_Q4 on CUDA: y = x W^T with MLX affine 4-bit weights (U32 words
 * of 8 nibbles, low first; w = s * q + b per group of 32, 64 or 128 inputs,
 * s and b F16 or BF16). Two kernels, chosen from the shape of x alone:
 *
 * - x of one row (decode): a matrix-vector kernel, one warp per output row
 *   on a persistent grid. The block first stores x in shared memory in an
 *   order where lane l's nibble j of word 32c + l sits at 256c + 32j + l
 *   (conflict-free reads) and the sums of x over each group. A lane then
 *   walks words l, l + 32, ... of the weight row (each warp load reads 128
 *   contiguous bytes; 4 loads in flight per lane), adds s * (q . x) per
 *   word, and the bias terms b_g * sum(x_g) over groups g = l, l + 32, ...;
 *   a butterfly sums the lanes. y = sum_g s_g (q_g . x_g) + b_g sum(x_g) is
 *   the CPU backend's formulation (src/backends/cpu/matmul_q4.c).
 * - x of several rows (prefill): F16 tensor-core tiles with F32 sums
 *   (matmul_q4_mma.cu), within about 1e-3 of the float result.
 *
 * Both read the row count from the step tensor when they run (rows at or
 * beyond it are neither read nor written). Every output element is summed
 * in an order fixed by the shapes, so results are deterministic; a row of
 * a 1-row op (float) and the same row of a many-row op (F16 products) are
 * not bitwise equal. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define GEMV_THREADS   256
#define GEMV_WARPS     (GEMV_THREADS / 32)
#define GEMV_UNROLL    4   /* weight words in flight per lane */
#define GEMV_BLOCKS_SM 4   /* persistent blocks per multiprocessor */
#define GEMV_CHUNK     256 /* inputs of 32 words, one per lane */

/* ---- matrix-vector ----------------------------------------------------------
 */

static __host__ __device__ __forceinline__ unsigned int
padded_inputs(unsigned int in) {
  return (in + GEMV_CHUNK - 1) / GEMV_CHUNK * GEMV_CHUNK;
}

/* Shared position of input i = 256c + 8l + j: 256c + 32j + l. */
static __device__ __forceinline__ unsigned int gemv_position(unsigned int i) {
  return (i & ~(GEMV_CHUNK - 1u)) | ((i & 7u) << 5) | ((i >> 3) & 31u);
}

__global__ void __launch_bounds__(GEMV_THREADS)
    gemv_q4_kernel(const int32_t *step, const float *x, const uint32_t *weight,
                   const uint16_t *scales, const uint16_t *biases, bool bf16,
                   unsigned int in, unsigned int out, unsigned int group,
                   float *y) {
  extern __shared__ float shared[];
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int groups = in / group;
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float *xs = shared;
  float *xsum = shared + padded_inputs(in);
  for (unsigned int i = threadIdx.x; i < in; i += blockDim.x) {
    xs[gemv_position(i)] = x[i];
  }
  for (unsigned int g = warp; g < groups; g += GEMV_WARPS) {
    const float *xg = x + (unsigned long long)g * group;
    float s = 0.0f;
    for (unsigned int k = lane; k < group; k += 32) {
      s += xg[k];
    }
    s = fdy_warp_sum(s);
    if (lane == 0) {
      xsum[g] = s;
    }
  }
  __syncthreads();
  const unsigned int words = in / 8;
  const unsigned int words_per_group = group / 8;
  for (unsigned int o = blockIdx.x * GEMV_WARPS + warp; o < out;
       o += gridDim.x * GEMV_WARPS) {
    const uint32_t *row = weight + (unsigned long long)o * words;
    const uint16_t *s_row = scales + (unsigned long long)o * groups;
    const uint16_t *b_row = biases + (unsigned long long)o * groups;
    float acc = 0.0f;
    for (unsigned int w0 = lane; w0 < words; w0 += 32 * GEMV_UNROLL) {
      uint32_t q[GEMV_UNROLL];
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) {
        const unsigned int w = w0 + 32u * u;
        q[u] = w < words ? __ldg(row + w) : 0u;
      }
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) {
        const unsigned int w = w0 + 32u * u;
        if (w < words) {
          /* w = 32c + lane: chunk c's inputs start at 256c */
          const float *xp = xs + (w - lane) * 8 + lane;
          float d = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; j++) {
            d = fmaf(fdy_nibble(q[u], j), xp[32 * j], d);
          }
          acc = fmaf(fdy_half_at(s_row, bf16, w / words_per_group), d, acc);
        }
      }
    }
    for (unsigned int g = lane; g < groups; g += 32) {
      acc = fmaf(fdy_half_at(b_row, bf16, g), xsum[g], acc);
    }
    acc = fdy_warp_sum(acc);
    if (lane == 0) {
      y[o] = acc;
    }
  }
}

/* ---- host side ------------------------------------------------------------
 */

extern "C" uint64_t fdy_cuda_matmul_q4_shared_bytes(const fdy_op *op) {
  if (op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_shared_bytes(op);
  }
  const unsigned int in = (unsigned int)op->inputs[1].shape.dims[1];
  const uint64_t groups = op->inputs[3].shape.dims[1];
  return ((uint64_t)padded_inputs(in) + groups) * sizeof(float);
}

extern "C" cudaError_t fdy_cuda_matmul_q4_prepare(uint64_t smem_optin) {
  cudaError_t rc = cudaFuncSetAttribute(
      gemv_q4_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
      (int)smem_optin);
  return rc == cudaSuccess ? fdy_cuda_matmul_q4_mma_prepare(smem_optin) : rc;
}

extern "C" cudaError_t fdy_cuda_matmul_q4_enqueue(const fdy_cuda_op_args *a,
                                                  cudaStream_t stream) {
  const fdy_op *op = a->op;
  const unsigned int rows = (unsigned int)op->inputs[1].shape.dims[0];
  const unsigned int in = (unsigned int)op->inputs[1].shape.dims[1];
  const unsigned int out = (unsigned int)op->outputs[0].shape.dims[1];
  const unsigned int group = in / (unsigned int)op->inputs[3].shape.dims[1];
  const bool bf16 = op->inputs[3].dtype == FDY_DTYPE_BF16;
  const int32_t *step = (const int32_t *)a->in[0];
  const float *x = (const float *)a->in[1];
  const uint32_t *weight = (const uint32_t *)a->in[2];
  const uint16_t *scales = (const uint16_t *)a->in[3];
  const uint16_t *biases = (const uint16_t *)a->in[4];
  float *y = (float *)a->out;
  if (rows == 1) {
    unsigned long long blocks = (out + GEMV_WARPS - 1) / GEMV_WARPS;
    const unsigned long long cap =
        (unsigned long long)a->sm_count * GEMV_BLOCKS_SM;
    if (blocks > cap) {
      blocks = cap;
    }
    gemv_q4_kernel<<<(unsigned int)blocks, GEMV_THREADS,
                     (size_t)fdy_cuda_matmul_q4_shared_bytes(op), stream>>>(
        step, x, weight, scales, biases, bf16, in, out, group, y);
  } else {
    return fdy_cuda_matmul_q4_mma_enqueue(a, stream);
  }
  return cudaGetLastError();
}
