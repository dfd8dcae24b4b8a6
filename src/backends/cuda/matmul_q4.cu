/* MATMUL_Q4 on CUDA: y = x W^T with MLX affine 4-bit weights (U32 words
 * of 8 nibbles, low first; w = s * q + b per group of 32, 64 or 128 inputs,
 * s and b F16 or BF16). Two kernels, chosen from the shape of x alone:
 *
 * - x of one row (decode): a matrix-vector kernel that streams the weights
 *   at memory speed. A warp computes one output row at a time, walking the
 *   row in 16-byte chunks (32 nibbles, 32 inputs): lane l takes chunks l,
 *   l + 32, ..., so each warp load reads 512 contiguous bytes, and a lane
 *   keeps GEMV_SPAN chunks (with their scales and biases) in flight while
 *   it computes the previous ones (two register stages, the next item
 *   loaded before the current one is used). Warps take rows o, o + W, ...
 *   (W the warps of the grid, at most GEMV_BLOCKS_SM blocks per
 *   multiprocessor, so every multiprocessor has work even at 1024 rows).
 *   The weights are read with ld.global.nc.L1::no_allocate so that they do
 *   not evict x from L1. Each block first stores x in shared memory, a
 *   chunk per 36 floats (32 and 4 of padding: 16-byte reads of the 8 lanes
 *   of a quarter warp hit distinct banks), prescaled for the nibble trick
 *   below, and the sum of x over each chunk.
 *   A nibble at bits 4j..4j+3 of a word (j < 4) becomes a float without a
 *   shift: (word & 0xf << 4j) | 0x4b000000 is the float 2^23 + q 16^j, so
 *   subtracting 2^23 gives q 16^j exactly, and x was stored times 16^-j,
 *   so their product is q x exactly (the high half of the word, shifted
 *   down by 16, is read the same way). Per chunk the lane adds
 *   s (q . x) + b sum(x): the CPU backend's formulation y = sum_g s_g (q_g .
 *   x_g) + b_g sum(x_g) (src/backends/cpu/matmul_q4.c) with each group's
 *   terms split by chunks; a butterfly sums the lanes. The prescaling by
 *   16^-j is exact unless x * 16^-3 is subnormal (|x| < 2^-114), where the
 *   product loses bits far below any other term's rounding.
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

#define GEMV_THREADS   128
#define GEMV_WARPS     (GEMV_THREADS / 32)
#define GEMV_BLOCKS_SM 6  /* resident blocks per multiprocessor (registers) */
#define GEMV_SPAN      4  /* 16-byte chunks per lane per item */
#define GEMV_STRIDE    36 /* shared floats per chunk: 32 inputs + padding */

/* ---- matrix-vector ----------------------------------------------------------
 */

/* One item of a warp's work: GEMV_SPAN chunks of one weight row per lane
 * (chunk part * 32 * GEMV_SPAN + 32 u + lane), with the raw halves of their
 * scales and biases; chunks past the row are zero and never used. */
typedef struct gemv_stage {
  uint4 q[GEMV_SPAN];
  unsigned short s[GEMV_SPAN], b[GEMV_SPAN];
} gemv_stage;

/* A weight chunk that is read once: not allocated in L1. */
static __device__ __forceinline__ uint4 load_streamed(const uint4 *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

static __device__ __forceinline__ float half_bits(unsigned short h, bool bf16) {
  return bf16 ? __uint_as_float((unsigned int)h << 16)
              : __half2float(__ushort_as_half(h));
}

/* Nibble j (< 4) of word times 16^j, exactly. */
static __device__ __forceinline__ float scaled_nibble(uint32_t word, int j) {
  return __uint_as_float((word & (0xfu << (4 * j))) | 0x4b000000u) - 8388608.0f;
}

/* q . x over one word: its 8 nibbles against the prescaled inputs
 * xp[0..7]. */
static __device__ __forceinline__ float word_dot(uint32_t word,
                                                 const float *xp) {
  const float4 lo = *(const float4 *)xp;
  const float4 hi = *(const float4 *)(xp + 4);
  const uint32_t high = word >> 16;
  float d0 = scaled_nibble(word, 0) * lo.x;
  float d1 = scaled_nibble(high, 0) * hi.x;
  d0 = fmaf(scaled_nibble(word, 1), lo.y, d0);
  d1 = fmaf(scaled_nibble(high, 1), hi.y, d1);
  d0 = fmaf(scaled_nibble(word, 2), lo.z, d0);
  d1 = fmaf(scaled_nibble(high, 2), hi.z, d1);
  d0 = fmaf(scaled_nibble(word, 3), lo.w, d0);
  d1 = fmaf(scaled_nibble(high, 3), hi.w, d1);
  return d0 + d1;
}

/* The geometry of one launch, the same for every warp. */
typedef struct gemv_geometry {
  unsigned int chunks;      /* 16-byte chunks per weight row: in / 32 */
  unsigned int parts;       /* items per row */
  unsigned int group_shift; /* chunk c lies in group c >> group_shift */
} gemv_geometry;

static __device__ __forceinline__ void
gemv_load(const uint4 *weight, const uint16_t *scales, const uint16_t *biases,
          const gemv_geometry *g, unsigned int row, unsigned int part,
          unsigned int lane, gemv_stage *st) {
  const uint4 *w_row = weight + (unsigned long long)row * g->chunks;
  const unsigned long long groups = g->chunks >> g->group_shift;
  const unsigned short *s_row =
      (const unsigned short *)scales + (unsigned long long)row * groups;
  const unsigned short *b_row =
      (const unsigned short *)biases + (unsigned long long)row * groups;
#pragma unroll
  for (int u = 0; u < GEMV_SPAN; u++) {
    const unsigned int c = (part * GEMV_SPAN + u) * 32 + lane;
    if (c < g->chunks) {
      st->q[u] = load_streamed(w_row + c);
      st->s[u] = __ldg(s_row + (c >> g->group_shift));
      st->b[u] = __ldg(b_row + (c >> g->group_shift));
    } else {
      st->q[u] = make_uint4(0u, 0u, 0u, 0u);
      st->s[u] = 0;
      st->b[u] = 0;
    }
  }
}

static __device__ __forceinline__ float
gemv_compute(const float *xs, const float *xsum, const gemv_geometry *g,
             unsigned int part, unsigned int lane, bool bf16,
             const gemv_stage *st, float acc) {
#pragma unroll
  for (int u = 0; u < GEMV_SPAN; u++) {
    const unsigned int c = (part * GEMV_SPAN + u) * 32 + lane;
    if (c < g->chunks) {
      const float *xc = xs + c * GEMV_STRIDE;
      const float d =
          (word_dot(st->q[u].x, xc) + word_dot(st->q[u].y, xc + 8)) +
          (word_dot(st->q[u].z, xc + 16) + word_dot(st->q[u].w, xc + 24));
      acc = fmaf(half_bits(st->s[u], bf16), d, acc);
      acc = fmaf(half_bits(st->b[u], bf16), xsum[c], acc);
    }
  }
  return acc;
}

/* After the last part of a row: the warp's sum, written by lane 0. */
static __device__ __forceinline__ float
gemv_finish(const gemv_geometry *g, unsigned int part, unsigned int row,
            unsigned int lane, float acc, float *y) {
  if (part + 1 < g->parts) {
    return acc;
  }
  acc = fdy_warp_sum(acc);
  if (lane == 0) {
    y[row] = acc;
  }
  return 0.0f;
}

__global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_SM)
    gemv_q4_kernel(const int32_t *step, const float *x, const uint4 *weight,
                   const uint16_t *scales, const uint16_t *biases, bool bf16,
                   unsigned int in, unsigned int out, unsigned int group_shift,
                   float *y) {
  extern __shared__ __align__(16) float shared[];
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int first = blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
  const unsigned int warps = gridDim.x * GEMV_WARPS;
  gemv_geometry g;
  g.chunks = in / 32;
  g.parts = (g.chunks + 32 * GEMV_SPAN - 1) / (32 * GEMV_SPAN);
  g.group_shift = group_shift;
  const unsigned int rows = first < out ? (out - 1 - first) / warps + 1 : 0;
  const unsigned int items = rows * g.parts;
  /* the first item's loads go out before x is staged */
  gemv_stage a, b;
  if (items > 0) {
    gemv_load(weight, scales, biases, &g, first, 0, lane, &a);
  }
  float *xs = shared;
  float *xsum = shared + g.chunks * GEMV_STRIDE;
  const float4 *x4 = (const float4 *)x;
  for (unsigned int k4 = threadIdx.x; k4 < in / 4; k4 += blockDim.x) {
    float4 v = x4[k4];
    v.y *= 0.0625f;
    v.z *= 0.00390625f;
    v.w *= 0.000244140625f;
    *(float4 *)(xs + (k4 / 8) * GEMV_STRIDE + (k4 % 8) * 4) = v;
  }
  for (unsigned int c = threadIdx.x; c < g.chunks; c += blockDim.x) {
    float s = 0.0f;
    for (unsigned int k = 0; k < 32; k++) {
      s += x[32 * c + k];
    }
    xsum[c] = s;
  }
  __syncthreads();
  float acc = 0.0f;
  for (unsigned int t = 0; t < items; t += 2) {
    const unsigned int row_a = first + (t / g.parts) * warps;
    const unsigned int part_a = t % g.parts;
    if (t + 1 < items) {
      gemv_load(weight, scales, biases, &g, first + ((t + 1) / g.parts) * warps,
                (t + 1) % g.parts, lane, &b);
    }
    acc = gemv_compute(xs, xsum, &g, part_a, lane, bf16, &a, acc);
    acc = gemv_finish(&g, part_a, row_a, lane, acc, y);
    if (t + 1 >= items) {
      break;
    }
    const unsigned int row_b = first + ((t + 1) / g.parts) * warps;
    const unsigned int part_b = (t + 1) % g.parts;
    if (t + 2 < items) {
      gemv_load(weight, scales, biases, &g, first + ((t + 2) / g.parts) * warps,
                (t + 2) % g.parts, lane, &a);
    }
    acc = gemv_compute(xs, xsum, &g, part_b, lane, bf16, &b, acc);
    acc = gemv_finish(&g, part_b, row_b, lane, acc, y);
  }
}

/* ---- host side ------------------------------------------------------------
 */

extern "C" uint64_t fdy_cuda_matmul_q4_shared_bytes(const fdy_op *op) {
  if (op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_shared_bytes(op);
  }
  const uint64_t chunks = op->inputs[1].shape.dims[1] / 32;
  return chunks * (GEMV_STRIDE + 1) * sizeof(float);
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
    const unsigned int group_shift = group == 32 ? 0 : group == 64 ? 1 : 2;
    gemv_q4_kernel<<<(unsigned int)blocks, GEMV_THREADS,
                     (size_t)fdy_cuda_matmul_q4_shared_bytes(op), stream>>>(
        step, x, (const uint4 *)weight, scales, biases, bf16, in, out,
        group_shift, y);
  } else {
    return fdy_cuda_matmul_q4_mma_enqueue(a, stream);
  }
  return cudaGetLastError();
}
