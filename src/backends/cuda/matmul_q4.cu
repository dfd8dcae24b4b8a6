/* MATMUL_Q4 on CUDA: y = x W^T with MLX affine 4-bit weights (U32 words
 * of 8 nibbles, low first; w = s * q + b per group of 32, 64 or 128 inputs,
 * s and b F16 or BF16). Two kernels, chosen from the shape of x alone:
 *
 * - x of one row (decode): a matrix-vector kernel that streams the weights
 *   at memory speed. A warp computes R output rows at once (R = 4 from
 *   GEMV_WIDE_ROWS rows, else 2: shapes alone choose), walking them in
 *   16-byte chunks (32 nibbles, 32 inputs): lane l takes chunks l, l + 32,
 *   ... of each, so each warp load reads 512 contiguous bytes; an item is
 *   GEMV_CHUNKS / R chunks of each of the R rows per lane, and a lane keeps
 *   one item in flight while it computes the previous one (two register
 *   stages, the next item loaded before the current one is used). The R
 *   chunks of one column share x: each lane reads a chunk's 32 inputs from
 *   shared memory once for all R (8 16-byte reads per R * 16 weight
 *   bytes). Warps take groups of R rows g, g + W, ... (W the warps of the
 *   grid: at most GEMV_BLOCKS_SM blocks of 8 warps per multiprocessor, and
 *   no more than the groups need when each warp takes as many as that cap
 *   makes necessary), so the staging of x below is shared by 8 warps and, for
 *   the larger matrices, by several groups of each. The weights are read
 *   with ld.global.nc.L1::no_allocate so that they do not evict x from L1.
 *   Each block first stores x in shared memory, a chunk per 36 floats (32
 *   and 4 of padding: 16-byte reads of the 8 lanes of a quarter warp hit
 *   distinct banks), prescaled for the nibble trick below, and the sum of x
 *   over each chunk (a butterfly over the 8 lanes that staged it, in an
 *   order fixed by the width).
 *   A nibble at bits 4j..4j+3 of a word (j < 4) becomes a float without a
 *   shift: (word & 0xf << 4j) | 0x4b000000 is the float 2^23 + q 16^j, so
 *   subtracting 2^23 gives q 16^j exactly, and x was stored times 16^-j,
 *   so their product is q x exactly (the high half of the word, shifted
 *   down by 16, is read the same way). Per chunk the lane adds
 *   s (q . x) + b sum(x): the CPU backend's formulation y = sum_g s_g (q_g .
 *   x_g) + b_g sum(x_g) (src/backends/cpu/matmul_q4.c) with each group's
 *   terms split by chunks; a butterfly sums the lanes. The prescaling by
   16^-j is exact unless x * 16^-3 is subnormal (|x| < 2^-114), where the
 *   product loses bits far below any other term's rounding.
 * - x of several rows (prefill): F16 tensor-core tiles with F32 sums
 *   (matmul_q4_mma.cu), within about 1e-3 of the float result.
 *
 * The GEMV also runs the fused decode kinds (template flags): several
 * weights over one x in one launch (warps walk the rows of all of them in
 * order, a group of R rows may span two of them), an RMSNorm prologue
 * (each block sums x's squares in a fixed order and stages x * inv * norm
 * instead of x), a SwiGLU epilogue (a warp's rows are its gate rows, then
 * its up rows; lane r writes silu(gate) * up of row r) and a residual
 * epilogue (lane r writes residual + sum). Only one-row ops are
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

#define GEMV_THREADS   256
#define GEMV_WARPS     (GEMV_THREADS / 32)
#define GEMV_BLOCKS_SM 2  /* resident blocks per multiprocessor (registers) */
#define GEMV_CHUNKS    4  /* 16-byte chunks per lane per item, all rows */
#define GEMV_STRIDE    36 /* shared floats per chunk: 32 inputs + padding */
#define GEMV_WIDE_ROWS 16384 /* from this many rows a warp takes 4 at once */

/* ---- matrix-vector ----------------------------------------------------------
 */

/* One item of a warp's work: kRows rows of one part (GEMV_CHUNKS / kRows
 * chunks per row per lane: chunk (part * span + u) * 32 + lane), with the
 * raw halves of their scales and biases; chunks past the row or of rows
 * past the matrices are zero and never used. */
template <int kRows> struct gemv_stage {
  static const int kSpan = GEMV_CHUNKS / kRows;
  uint4 q[kRows][kSpan];
  unsigned short s[kRows][kSpan], b[kRows][kSpan];
};

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

/* q . x over one word: its 8 nibbles against the prescaled inputs lo, hi. */
static __device__ __forceinline__ float word_dot(uint32_t word, float4 lo,
                                                 float4 hi) {
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

/* The geometry of one launch, the same for every warp. A virtual row is a
 * row of the matrices in order (for kSwiglu, the row of both gate and up);
 * a warp takes the virtual rows of its groups of kRows. */
typedef struct gemv_geometry {
  unsigned int chunks;      /* 16-byte chunks per weight row: in / 32 */
  unsigned int parts;       /* items per row */
  unsigned int halves;      /* matrices a virtual row reads: 2 for kSwiglu */
  unsigned int total;       /* virtual rows */
  unsigned int warps;       /* warps of the grid: the stride of groups */
  unsigned int group_shift; /* chunk c lies in group c >> group_shift */
} gemv_geometry;

/* Where a warp is in its work: a group of rows, the matrix of the virtual
 * rows it reads (kSwiglu: 0 gate, 1 up) and the part of those rows. */
typedef struct gemv_cursor {
  unsigned int group, half, part;
} gemv_cursor;

static __device__ __forceinline__ void gemv_advance(gemv_cursor *cur,
                                                    const gemv_geometry *g) {
  if (++cur->part < g->parts) {
    return;
  }
  cur->part = 0;
  if (++cur->half < g->halves) {
    return;
  }
  cur->half = 0;
  cur->group += g->warps;
}

/* The matrix and row that virtual row v reads at half h; false past the
 * last virtual row. */
template <bool kSwiglu>
static __device__ __forceinline__ bool
gemv_row_of(const gemv_params &p, const gemv_geometry *g, unsigned int v,
            unsigned int h, unsigned int *matrix, unsigned int *row) {
  if (v >= g->total) {
    return false;
  }
  unsigned int j = kSwiglu ? h : 0;
  if (!kSwiglu) {
    while (j + 1 < p.count && v >= p.m[j].rows) {
      v -= p.m[j].rows;
      j++;
    }
  }
  *matrix = j;
  *row = v;
  return true;
}

/* The loads of the item at cur. */
template <bool kSwiglu, int kRows>
static __device__ __forceinline__ void
gemv_issue(const gemv_params &p, const gemv_geometry *g, gemv_cursor cur,
           unsigned int lane, gemv_stage<kRows> *st) {
  const int span = gemv_stage<kRows>::kSpan;
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    unsigned int matrix = 0, row = 0;
    const bool valid = gemv_row_of<kSwiglu>(p, g, cur.group * kRows + r,
                                            cur.half, &matrix, &row);
    const gemv_matrix *m = &p.m[matrix];
    const unsigned long long groups = g->chunks >> g->group_shift;
    const uint4 *w_row = m->weight + (unsigned long long)row * g->chunks;
    const unsigned short *s_row =
        (const unsigned short *)m->scales + (unsigned long long)row * groups;
    const unsigned short *b_row =
        (const unsigned short *)m->biases + (unsigned long long)row * groups;
#pragma unroll
    for (int u = 0; u < span; u++) {
      const unsigned int c = (cur.part * span + u) * 32 + lane;
      if (valid && c < g->chunks) {
        st->q[r][u] = load_streamed(w_row + c);
        st->s[r][u] = __ldg(s_row + (c >> g->group_shift));
        st->b[r][u] = __ldg(b_row + (c >> g->group_shift));
      } else {
        st->q[r][u] = make_uint4(0u, 0u, 0u, 0u);
        st->s[r][u] = 0;
        st->b[r][u] = 0;
      }
    }
  }
}

/* The item at cur added into acc: per chunk, one read of x from shared
 * memory serves the chunk of every row of the item. */
template <int kRows>
static __device__ __forceinline__ void
gemv_compute(const float *xs, const float *xsum, const gemv_geometry *g,
             gemv_cursor cur, unsigned int lane, bool bf16,
             const gemv_stage<kRows> *st, float acc[kRows]) {
  const int span = gemv_stage<kRows>::kSpan;
#pragma unroll
  for (int u = 0; u < span; u++) {
    const unsigned int c = (cur.part * span + u) * 32 + lane;
    if (c < g->chunks) {
      const float4 *xc = (const float4 *)(xs + c * GEMV_STRIDE);
      const float sum_x = xsum[c];
      float d[kRows][4];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float4 lo = xc[2 * k], hi = xc[2 * k + 1];
#pragma unroll
        for (int r = 0; r < kRows; r++) {
          const uint4 q = st->q[r][u];
          d[r][k] = word_dot(k == 0   ? q.x
                             : k == 1 ? q.y
                             : k == 2 ? q.z
                                      : q.w,
                             lo, hi);
        }
      }
#pragma unroll
      for (int r = 0; r < kRows; r++) {
        const float dot = (d[r][0] + d[r][1]) + (d[r][2] + d[r][3]);
        acc[r] = fmaf(half_bits(st->s[r][u], bf16), dot, acc[r]);
        acc[r] = fmaf(half_bits(st->b[r][u], bf16), sum_x, acc[r]);
      }
    }
  }
}

/* The item at cur computed into acc; after the last part of its rows the
 * warp's sums are written, row r's by lane r (after the up rows' for
 * kSwiglu, whose gate sums wait in gate). */
template <bool kSwiglu, bool kResidual, int kRows>
static __device__ __forceinline__ void
gemv_step(const gemv_params &p, const gemv_geometry *g, const float *xs,
          const float *xsum, gemv_cursor cur, unsigned int lane,
          const gemv_stage<kRows> *st, float acc[kRows], float gate[kRows]) {
  gemv_compute<kRows>(xs, xsum, g, cur, lane, p.bf16, st, acc);
  if (cur.part + 1 < g->parts) {
    return;
  }
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    const float sum = fdy_warp_sum(acc[r]);
    acc[r] = 0.0f;
    if (kSwiglu && cur.half == 0) {
      gate[r] = sum;
      continue;
    }
    unsigned int matrix = 0, row = 0;
    if (lane == (unsigned int)r &&
        gemv_row_of<kSwiglu>(p, g, cur.group * kRows + r, cur.half, &matrix,
                             &row)) {
      float y = sum;
      if (kSwiglu) {
        y = gate[r] / (1.0f + expf(-gate[r])) * sum;
      } else if (kResidual) {
        y = p.residual[row] + sum;
      }
      p.m[kSwiglu ? 0 : matrix].y[row] = y;
    }
  }
}

/* x (normalized with kNorm) into shared memory, prescaled for the nibble
 * trick, and the sum of each chunk's 32 inputs (before the prescaling) by a
 * butterfly over the 8 lanes that hold the chunk: an order fixed by the
 * width. The loads of a thread go out before its stores. */
template <bool kNorm>
static __device__ __forceinline__ void
gemv_stage_x(const float *x, const gemv_params &p, float inv, float *xs,
             float *xsum) {
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int quads = p.in / 4; /* a multiple of 8: chunks of 8 */
  const float4 *x4 = (const float4 *)x;
  for (unsigned int base = threadIdx.x - lane; base < quads;
       base += 4 * GEMV_THREADS) {
    float4 v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const unsigned int k4 = base + i * GEMV_THREADS + lane;
      v[i] = k4 < quads ? __ldg(x4 + k4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const unsigned int k4 = base + i * GEMV_THREADS + lane;
      if (kNorm && k4 < quads) {
        v[i].x = v[i].x * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4);
        v[i].y = v[i].y * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 1);
        v[i].z = v[i].z * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 2);
        v[i].w = v[i].w * inv * fdy_half_at(p.norm, p.norm_bf16, 4 * k4 + 3);
      }
      float s = (v[i].x + v[i].y) + (v[i].z + v[i].w);
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      s += __shfl_xor_sync(0xffffffffu, s, 4);
      if (k4 < quads) {
        v[i].y *= 0.0625f;
        v[i].z *= 0.00390625f;
        v[i].w *= 0.000244140625f;
        *(float4 *)(xs + (k4 / 8) * GEMV_STRIDE + (k4 % 8) * 4) = v[i];
        if (k4 % 8 == 0) {
          xsum[k4 / 8] = s;
        }
      }
    }
  }
}

template <bool kNorm, bool kSwiglu, bool kResidual, int kRows>
__global__ void __launch_bounds__(GEMV_THREADS, GEMV_BLOCKS_SM)
    gemv_q4_kernel(const int32_t *step, const float *x, gemv_params p) {
  extern __shared__ __align__(16) float shared[];
  __shared__ float warp_squares[GEMV_WARPS];
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int first = blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
  const unsigned int in = p.in;
  gemv_geometry g;
  g.chunks = in / 32;
  g.parts = (g.chunks + 32 * gemv_stage<kRows>::kSpan - 1) /
            (32 * gemv_stage<kRows>::kSpan);
  g.halves = kSwiglu ? 2 : 1;
  g.total = 0;
  for (unsigned int j = 0; j < (kSwiglu ? 1 : p.count); j++) {
    g.total += p.m[j].rows;
  }
  g.warps = gridDim.x * GEMV_WARPS;
  g.group_shift = p.group_shift;
  const unsigned int groups = (g.total + kRows - 1) / kRows;
  const unsigned int mine =
      first < groups ? (groups - 1 - first) / g.warps + 1 : 0;
  const unsigned int items = mine * g.parts * g.halves;
  gemv_cursor issued = {first, 0, 0};
  const gemv_cursor start = issued;
  /* the first item's loads go out before x is staged */
  gemv_stage<kRows> a, b;
  if (items > 0) {
    gemv_issue<kSwiglu, kRows>(p, &g, issued, lane, &a);
    gemv_advance(&issued, &g);
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
  gemv_stage_x<kNorm>(x, p, inv, xs, xsum);
  __syncthreads();
  float acc[kRows], gate[kRows];
#pragma unroll
  for (int r = 0; r < kRows; r++) {
    acc[r] = 0.0f;
    gate[r] = 0.0f;
  }
  gemv_cursor computed = start;
  for (unsigned int t = 0; t < items; t += 2) {
    if (t + 1 < items) {
      gemv_issue<kSwiglu, kRows>(p, &g, issued, lane, &b);
      gemv_advance(&issued, &g);
    }
    gemv_step<kSwiglu, kResidual, kRows>(p, &g, xs, xsum, computed, lane, &a,
                                         acc, gate);
    gemv_advance(&computed, &g);
    if (t + 1 >= items) {
      break;
    }
    if (t + 2 < items) {
      gemv_issue<kSwiglu, kRows>(p, &g, issued, lane, &a);
      gemv_advance(&issued, &g);
    }
    gemv_step<kSwiglu, kResidual, kRows>(p, &g, xs, xsum, computed, lane, &b,
                                         acc, gate);
    gemv_advance(&computed, &g);
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
 * SwiGLU, residual epilogue; each with 2 and with 4 rows per warp. */
static const void *const gemv_kernels[] = {
    (const void *)gemv_q4_kernel<false, false, false, 2>,
    (const void *)gemv_q4_kernel<true, false, false, 2>,
    (const void *)gemv_q4_kernel<true, true, false, 2>,
    (const void *)gemv_q4_kernel<false, false, true, 2>,
    (const void *)gemv_q4_kernel<false, false, false, 4>,
    (const void *)gemv_q4_kernel<true, false, false, 4>,
    (const void *)gemv_q4_kernel<true, true, false, 4>,
    (const void *)gemv_q4_kernel<false, false, true, 4>,
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

/* The blocks of a launch whose warps take groups of `rows` of the total
 * virtual rows: at most GEMV_BLOCKS_SM per multiprocessor, each warp as
 * many groups as that makes necessary and the grid no larger than those
 * groups need (the results do not depend on the grid). */
static unsigned int gemv_blocks(const fdy_cuda_op_args *a, unsigned int total,
                                unsigned int rows) {
  const unsigned long long groups = (total + rows - 1) / rows;
  const unsigned long long most =
      (unsigned long long)a->sm_count * GEMV_BLOCKS_SM * GEMV_WARPS;
  const unsigned long long per_warp =
      groups > most ? (groups + most - 1) / most : 1;
  const unsigned long long warps = (groups + per_warp - 1) / per_warp;
  return (unsigned int)((warps + GEMV_WARPS - 1) / GEMV_WARPS);
}

/* A launch of the GEMV: 4 rows per warp from GEMV_WIDE_ROWS virtual rows
 * (x read from shared memory once per 4 weight chunks), else 2 (twice the
 * warps for the smaller matrices). */
template <bool kNorm, bool kSwiglu, bool kResidual>
static cudaError_t launch_gemv(const fdy_cuda_op_args *a, const gemv_params &p,
                               unsigned int total, cudaStream_t stream) {
  const size_t shared = (size_t)fdy_cuda_matmul_q4_shared_bytes(a->op);
  const int32_t *step = (const int32_t *)a->in[0];
  const float *x = (const float *)a->in[1];
  if (total >= GEMV_WIDE_ROWS) {
    gemv_q4_kernel<kNorm, kSwiglu, kResidual, 4>
        <<<gemv_blocks(a, total, 4), GEMV_THREADS, shared, stream>>>(step, x,
                                                                     p);
  } else {
    gemv_q4_kernel<kNorm, kSwiglu, kResidual, 2>
        <<<gemv_blocks(a, total, 2), GEMV_THREADS, shared, stream>>>(step, x,
                                                                     p);
  }
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
