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
 * The GEMV also runs the fused decode kinds (template flags): several
 * weights over one x in one launch (warps walk the rows of all of them in
 * order), an RMSNorm prologue (each block sums x's squares in a fixed order
 * and stages x * inv * norm instead of x), a SwiGLU epilogue (a warp's row
 * is its gate row, then its up row; lane 0 writes silu(gate) * up) and a
 * residual epilogue (lane 0 writes residual + sum). Only one-row ops are
 * fused (supports_op refuses more rows).
 *
 * Both read the row count from the step tensor when they run (rows at or
 * beyond it are neither read nor written). Every output element is summed
 * in an order fixed by the shapes, so results are deterministic; a row of
 * a 1-row op (float) and the same row of a many-row op (F16 products) are
 * not bitwise equal. */
#include "cuda_device.h"
#include "cuda_internal.h"

#include <string.h>

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

/* One weight matrix of a GEMV launch and the output it writes. */
typedef struct gemv_matrix {
  const uint4 *weight;
  const uint16_t *scales, *biases;
  float *y;
  unsigned int rows;
} gemv_matrix;

/* A GEMV launch: the matrices share x, the input width, the group size and
 * the scale dtype. With kNorm, x is first normalized by RMSNorm (norm, eps);
 * with kSwiglu, matrices 0 and 1 are gate and up and m[0].y receives
 * silu(gate) * up; with kResidual, y = residual + x W^T. */
typedef struct gemv_params {
  gemv_matrix m[FDY_OP_MAX_OUTPUTS];
  unsigned int count; /* matrices */
  unsigned int in, group_shift;
  bool bf16;
  const uint16_t *norm;
  bool norm_bf16;
  double eps;
  const float *residual;
} gemv_params;

/* Input i of the row the GEMV multiplies: x, or x normalized
 * (x * inv * weight, the CPU's order). */
template <bool kNorm>
static __device__ __forceinline__ float
gemv_input(const float *x, const gemv_params &p, float inv, unsigned int i) {
  if (!kNorm) {
    return x[i];
  }
  return x[i] * inv * fdy_half_at(p.norm, p.norm_bf16, i);
}

/* The matrix and row of virtual row v: rows of the matrices in order (for
 * kSwiglu, v is the row of both gate and up). */
static __device__ __forceinline__ unsigned int
gemv_matrix_of(const gemv_params &p, unsigned int *v) {
  unsigned int j = 0;
  while (j + 1 < p.count && *v >= p.m[j].rows) {
    *v -= p.m[j].rows;
    j++;
  }
  return j;
}

/* Work item t of a warp: its virtual row, the matrix and row it reads, and
 * the part of that row. A virtual row has g.parts items per matrix it
 * reads (two for kSwiglu: gate first). */
template <bool kSwiglu>
static __device__ __forceinline__ void
gemv_item(const gemv_params &p, const gemv_geometry *g, unsigned int first,
          unsigned int warps, unsigned int t, unsigned int *matrix,
          unsigned int *row, unsigned int *part) {
  const unsigned int per_row = kSwiglu ? 2 * g->parts : g->parts;
  unsigned int v = first + (t / per_row) * warps;
  const unsigned int q = t % per_row;
  if (kSwiglu) {
    *matrix = q / g->parts;
  } else {
    *matrix = gemv_matrix_of(p, &v);
  }
  *row = v;
  *part = q % g->parts;
}

template <bool kSwiglu>
static __device__ __forceinline__ void
gemv_issue(const gemv_params &p, const gemv_geometry *g, unsigned int first,
           unsigned int warps, unsigned int t, unsigned int lane,
           gemv_stage *st) {
  unsigned int matrix, row, part;
  gemv_item<kSwiglu>(p, g, first, warps, t, &matrix, &row, &part);
  gemv_load(p.m[matrix].weight, p.m[matrix].scales, p.m[matrix].biases, g, row,
            part, lane, st);
}

/* Item t computed into acc; after the last part of a row the warp's sum is
 * written by lane 0 (after the up row's for kSwiglu, whose gate sum waits
 * in *gate). */
template <bool kSwiglu, bool kResidual>
static __device__ __forceinline__ float
gemv_step(const gemv_params &p, const gemv_geometry *g, const float *xs,
          const float *xsum, unsigned int first, unsigned int warps,
          unsigned int t, unsigned int lane, const gemv_stage *st, float acc,
          float *gate) {
  unsigned int matrix, row, part;
  gemv_item<kSwiglu>(p, g, first, warps, t, &matrix, &row, &part);
  acc = gemv_compute(xs, xsum, g, part, lane, p.bf16, st, acc);
  if (part + 1 < g->parts) {
    return acc;
  }
  const float sum = fdy_warp_sum(acc);
  if (kSwiglu && matrix == 0) {
    *gate = sum;
    return 0.0f;
  }
  if (lane == 0) {
    float y = sum;
    if (kSwiglu) {
      y = *gate / (1.0f + expf(-*gate)) * sum;
    } else if (kResidual) {
      y = p.residual[row] + sum;
    }
    p.m[kSwiglu ? 0 : matrix].y[row] = y;
  }
  return 0.0f;
}

template <bool kNorm, bool kSwiglu, bool kResidual>
__global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_SM)
    gemv_q4_kernel(const int32_t *step, const float *x, gemv_params p) {
  extern __shared__ __align__(16) float shared[];
  __shared__ float warp_squares[GEMV_WARPS];
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int first = blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
  const unsigned int warps = gridDim.x * GEMV_WARPS;
  const unsigned int in = p.in;
  gemv_geometry g;
  g.chunks = in / 32;
  g.parts = (g.chunks + 32 * GEMV_SPAN - 1) / (32 * GEMV_SPAN);
  g.group_shift = p.group_shift;
  unsigned int total = 0;
  for (unsigned int j = 0; j < (kSwiglu ? 1 : p.count); j++) {
    total += p.m[j].rows;
  }
  const unsigned int rows = first < total ? (total - 1 - first) / warps + 1 : 0;
  const unsigned int items = rows * g.parts * (kSwiglu ? 2 : 1);
  /* the first item's loads go out before x is staged */
  gemv_stage a, b;
  if (items > 0) {
    gemv_issue<kSwiglu>(p, &g, first, warps, 0, lane, &a);
  }
  float inv = 1.0f;
  if (kNorm) {
    /* the row's mean square, summed in an order fixed by the shapes */
    float squares = 0.0f;
    for (unsigned int i = threadIdx.x; i < in; i += blockDim.x) {
      squares = fmaf(x[i], x[i], squares);
    }
    squares = fdy_warp_sum(squares);
    if (lane == 0) {
      warp_squares[threadIdx.x / 32] = squares;
    }
    __syncthreads();
    float total_squares = 0.0f;
    for (unsigned int w = 0; w < GEMV_WARPS; w++) {
      total_squares += warp_squares[w];
    }
    inv = (float)(1.0 / sqrt((double)total_squares / in + p.eps));
  }
  float *xs = shared;
  float *xsum = shared + g.chunks * GEMV_STRIDE;
  for (unsigned int k4 = threadIdx.x; k4 < in / 4; k4 += blockDim.x) {
    float4 v = ((const float4 *)x)[k4];
    if (kNorm) {
      v.x = v.x * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4);
      v.y = v.y * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 1);
      v.z = v.z * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 2);
      v.w = v.w * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 3);
    }
    v.y *= 0.0625f;
    v.z *= 0.00390625f;
    v.w *= 0.000244140625f;
    *(float4 *)(xs + (k4 / 8) * GEMV_STRIDE + (k4 % 8) * 4) = v;
  }
  for (unsigned int c = threadIdx.x; c < g.chunks; c += blockDim.x) {
    float s = 0.0f;
    for (unsigned int k = 0; k < 32; k++) {
      s += gemv_input<kNorm>(x, p, inv, 32 * c + k);
    }
    xsum[c] = s;
  }
  __syncthreads();
  float acc = 0.0f, gate = 0.0f;
  for (unsigned int t = 0; t < items; t += 2) {
    if (t + 1 < items) {
      gemv_issue<kSwiglu>(p, &g, first, warps, t + 1, lane, &b);
    }
    acc = gemv_step<kSwiglu, kResidual>(p, &g, xs, xsum, first, warps, t, lane,
                                        &a, acc, &gate);
    if (t + 1 >= items) {
      break;
    }
    if (t + 2 < items) {
      gemv_issue<kSwiglu>(p, &g, first, warps, t + 2, lane, &a);
    }
    acc = gemv_step<kSwiglu, kResidual>(p, &g, xs, xsum, first, warps, t + 1,
                                        lane, &b, acc, &gate);
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

/* The GEMV instances the backend launches: plain, norm prologue, norm with
 * SwiGLU, residual epilogue. */
static const void *const gemv_kernels[] = {
    (const void *)gemv_q4_kernel<false, false, false>,
    (const void *)gemv_q4_kernel<true, false, false>,
    (const void *)gemv_q4_kernel<true, true, false>,
    (const void *)gemv_q4_kernel<false, false, true>,
};

extern "C" cudaError_t fdy_cuda_matmul_q4_prepare(uint64_t smem_optin) {
  cudaError_t rc = cudaSuccess;
  for (size_t i = 0;
       rc == cudaSuccess && i < sizeof gemv_kernels / sizeof gemv_kernels[0];
       i++) {
    rc = fdy_cuda_allow_dynamic_shared(gemv_kernels[i], smem_optin);
  }
  return rc == cudaSuccess ? fdy_cuda_matmul_q4_mma_prepare(smem_optin) : rc;
}

/* Matrix j of a launch from the weight at input w of the op of a. */
static gemv_matrix gemv_matrix_at(const fdy_cuda_op_args *a, uint32_t w,
                                  void *y) {
  gemv_matrix m;
  m.weight = (const uint4 *)a->in[w];
  m.scales = (const uint16_t *)a->in[w + 1];
  m.biases = (const uint16_t *)a->in[w + 2];
  m.y = (float *)y;
  m.rows = (unsigned int)a->op->inputs[w].shape.dims[0];
  return m;
}

/* The launch parameters of a one-row op whose first weight is input w. */
static gemv_params gemv_params_of(const fdy_cuda_op_args *a, uint32_t w) {
  const fdy_op *op = a->op;
  gemv_params p;
  memset(&p, 0, sizeof p);
  p.in = (unsigned int)op->inputs[1].shape.dims[1];
  const unsigned int group =
      p.in / (unsigned int)op->inputs[w + 1].shape.dims[1];
  p.group_shift = group == 32 ? 0 : group == 64 ? 1 : 2;
  p.bf16 = op->inputs[w + 1].dtype == FDY_DTYPE_BF16;
  return p;
}

template <bool kNorm, bool kSwiglu, bool kResidual>
static cudaError_t launch_gemv(const fdy_cuda_op_args *a, const gemv_params &p,
                               unsigned int total, cudaStream_t stream) {
  unsigned long long blocks = (total + GEMV_WARPS - 1) / GEMV_WARPS;
  const unsigned long long cap =
      (unsigned long long)a->sm_count * GEMV_BLOCKS_SM;
  if (blocks > cap) {
    blocks = cap;
  }
  gemv_q4_kernel<kNorm, kSwiglu, kResidual>
      <<<(unsigned int)blocks, GEMV_THREADS,
         (size_t)fdy_cuda_matmul_q4_shared_bytes(a->op), stream>>>(
          (const int32_t *)a->in[0], (const float *)a->in[1], p);
  return cudaGetLastError();
}

extern "C" cudaError_t fdy_cuda_fused_q4_enqueue(const fdy_cuda_op_args *a,
                                                 cudaStream_t stream) {
  const fdy_op *op = a->op;
  switch (op->kind) {
  case FDY_OP_NORM_MATMUL_Q4: {
    gemv_params p = gemv_params_of(a, 3);
    unsigned int total = 0;
    p.count = op->output_count;
    for (uint32_t j = 0; j < op->output_count; j++) {
      p.m[j] = gemv_matrix_at(a, 3 + 3 * j, a->outputs[j]);
      total += p.m[j].rows;
    }
    p.norm = (const uint16_t *)a->in[2];
    p.norm_bf16 = op->inputs[2].dtype == FDY_DTYPE_BF16;
    p.eps = op->params.rmsnorm.eps;
    return launch_gemv<true, false, false>(a, p, total, stream);
  }
  case FDY_OP_NORM_SWIGLU_Q4: {
    gemv_params p = gemv_params_of(a, 3);
    p.count = 2;
    p.m[0] = gemv_matrix_at(a, 3, a->out);
    p.m[1] = gemv_matrix_at(a, 6, a->out);
    p.norm = (const uint16_t *)a->in[2];
    p.norm_bf16 = op->inputs[2].dtype == FDY_DTYPE_BF16;
    p.eps = op->params.rmsnorm.eps;
    return launch_gemv<true, true, false>(a, p, p.m[0].rows, stream);
  }
  case FDY_OP_MATMUL_ADD_Q4: {
    gemv_params p = gemv_params_of(a, 2);
    p.count = 1;
    p.m[0] = gemv_matrix_at(a, 2, a->out);
    p.residual = (const float *)a->in[5];
    return launch_gemv<false, false, true>(a, p, p.m[0].rows, stream);
  }
  default:
    return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t fdy_cuda_matmul_q4_enqueue(const fdy_cuda_op_args *a,
                                                  cudaStream_t stream) {
  const fdy_op *op = a->op;
  if (op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_enqueue(a, stream);
  }
  gemv_params p = gemv_params_of(a, 2);
  p.count = 1;
  p.m[0] = gemv_matrix_at(a, 2, a->out);
  return launch_gemv<false, false, false>(
      a, p, (unsigned int)op->outputs[0].shape.dims[1], stream);
}
