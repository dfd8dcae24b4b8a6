/* MATMUL_Q4 for x of several rows (prefill) on the tensor cores: y = x W^T
 * with MLX affine 4-bit weights (w = s * q + b per group of 32, 64 or 128
 * inputs), as F16 products with F32 accumulation (mma.sync m16n8k16); and
 * the fused kinds of several rows the same way (ops.h): NORM_MATMUL_Q4
 * (the rmsnorm in step 1, the tiles of its 1 to 3 weights in one launch,
 * a tile never spanning two, each writing its own output), MATMUL_ADD_Q4
 * (the residual added in the epilogue) and NORM_SWIGLU_Q4 (the rmsnorm in
 * step 1; gate's and up's rows interleaved 8 by 8 in the tiles, so a lane
 * holds gate and up of the same outputs and writes silu(gate) * up).
 *
 * 1. half_rows_kernel, a block per active row of x: for the norm kinds the
 *    row first becomes RMSNORM's x inv norm (inv = 1 / sqrt(mean(x^2) +
 *    eps), the squares summed in double in rmsnorm_kernel's order, so the
 *    normed row is the RMSNORM op's bit for bit). The row's largest |x|
 *    gives a power of two 2^e that brings it into [2^14, 2^15), so no value
 *    overflows F16 (65504) and none is lost to subnormals whatever the
 *    activations' range; the row x 2^e is rounded to F16 into the
 *    workspace (xh) and 2^-e kept (yscale). Within each block of 64 inputs
 *    xh stores input k = 16t + 8c + 4i + j at 16j + 8c + 2t + i (t, j in
 *    0..3, c, i in 0..1): the order in which a thread of the mma meets the
 *    nibbles of its two weight words (below), padded with zeros to a
 *    multiple of 64.
 * 2. mma_q4_kernel, a block per 128 rows x BN outputs and per split of the
 *    inputs, in one of a few block shapes (template instances; the table
 *    mma_shapes below, with the H200's measured times): WM x WN warps of
 *    16 MT x 8 NT outputs, BN = 8 NT WN, 1 or 2 blocks per
 *    multiprocessor. The op gets the measured shape of least predicted
 *    time from its shapes alone (waves of blocks x k-blocks per block x the
 *    shape's time per k-block): 2 x 4 warps of 64 x 16 at 2 blocks per SM
 *    (16 warps, 116 registers), where the tiles of 64 outputs fill the
 *    slots (gate/up, k/v); 2 x 4 warps of 64 x 24 at 2 blocks per SM (128
 *    registers) with the inputs split in 2, where 3072 outputs make too few
 *    tiles of 96 for 264 slots (q/o, down). 4 stages of cp.async (zero-filled
 * past the active rows, the outputs and the inputs) bring 64 inputs of xh (16
 * KB, 16-byte chunks XOR-swizzled by row so ldmatrix is conflict-free) and BN
 *    rows of 8 weight words. Each thread's copy offsets and validity are
 *    computed once (one 64-bit offset per operand, advanced per stage).
 *    Lane (g, t) = (lane / 4, lane % 4) reads words 2t and 2t + 1 of its
 *    weight row once per 64 inputs; for k-step j the pairs (nibble j,
 *    nibble j + 4) of each word become half2 values exactly: one lop3 of
 *    the word (or of the word >> 8, for j = 2, 3) with 0x000f000f (even j)
 *    or 0x00f000f0 (odd j), or 0x64006400, is 1024 + q or 1024 + 16 q; minus
 *    1024, or times 1/16 minus 64 in one fma, is q; and w = s * q + b is
 *    one F16 fma (rounded once; the scales and biases of the group, read a
 *    step ahead, are F16 exactly or BF16 rounded to F16). These are the mma's
 *    B fragments for the permuted order of step 1, and ldmatrix reads the
 *    matching A fragments.
 * 3. With one split the kernel writes y = acc 2^-e (MATMUL_ADD_Q4: the
 *    residual + acc 2^-e; NORM_SWIGLU_Q4: silu(g) u of g, u = acc 2^-e of
 *    gate and up); with several, each split writes its partial sums to the
 *    workspace and sum_splits_kernel adds them in split order, then scales
 *    and applies the same epilogue.
 *
 * The three kernels launch as programmatic dependent launches when the op
 * asks (a->dependent): mma_q4_kernel issues the copies of its first stages'
 * weights and reads their scales before it waits for half_rows_kernel.
 *
 * The block shape and the split are chosen from the op's shapes only
 * (rows, or variant_rows when more: ops.h; the outputs of all its matrices
 * together, inputs; NORM_SWIGLU_Q4 among the shapes of an even NT), for
 * the H200's 132 multiprocessors, so
 * every output element is summed in the same order on every device and
 * run: results are deterministic, with no atomics. Shapes without a k-split
 * within the block sum every output in the same order (k-blocks in order,
 * k-steps in order within each), so they agree bitwise wherever their
 * splits agree. Rows at or beyond the step's count are neither read nor
 * written.
 *
 * Precision: x and w rounded to F16 (relative 2^-11 each) with exact
 * products and F32 sums give a relative error of about 4e-4 against the
 * float CPU backend on uncorrelated data. A dequantized weight whose
 * |s * q + b| exceeds 65504 becomes infinite (no MLX checkpoint has
 * weights near that size). */
#include "cuda_device.h"
#include "cuda_internal.h"

#include <string.h>

#define MMA_THREADS   256
#define MMA_BM        FDY_CUDA_GEMM_ROWS /* rows of x per block: 128 */
#define MMA_BK        64                 /* inputs per stage */
#define MMA_STAGES    4
#define MMA_A_BYTES   (MMA_BM * MMA_BK * 2) /* one stage of xh */
#define MMA_ROW_BYTES 32                    /* one stage of a weight row */
#define MMA_SMS       132                   /* the H200's multiprocessors */
#define MMA_MAX_SPLIT 8
#define MMA_ALIGN     256ull /* workspace parts start at this alignment */

/* ---- step 1: rows of x to F16 ----------------------------------------------
 */

/* Element k of row xr after the norm: xr[k] itself without one (norm
 * NULL), else xr[k] inv norm[k] as RMSNORM computes it. */
static __device__ __forceinline__ float normed_at(const float *xr,
                                                  const uint16_t *norm,
                                                  bool norm_bf16, float inv,
                                                  unsigned int k) {
  return norm == NULL ? xr[k] : xr[k] * inv * fdy_half_at(norm, norm_bf16, k);
}

__global__ void __launch_bounds__(MMA_THREADS)
    half_rows_kernel(const int32_t *step, const float *x, unsigned int rows,
                     unsigned int in, unsigned int in64, const uint16_t *norm,
                     bool norm_bf16, double eps, __half *xh, float *yscale) {
  __shared__ float warp_max[MMA_THREADS / 32];
  __shared__ double warp_sum[MMA_THREADS / 32];
  fdy_grid_launch_dependents();
  const unsigned int row = blockIdx.x;
  if (row >= fdy_active_rows(step, rows)) {
    return;
  }
  fdy_grid_wait();
  const float *xr = x + (unsigned long long)row * in;
  float inv = 1.0f;
  if (norm != NULL) { /* the squares in rmsnorm_kernel's order */
    double sum = 0.0;
    if (in % 4 == 0) {
      const float4 *x4 = (const float4 *)xr;
      for (unsigned int i4 = threadIdx.x; i4 < in / 4; i4 += blockDim.x) {
        const float4 v = x4[i4];
        sum += (double)v.x * v.x;
        sum += (double)v.y * v.y;
        sum += (double)v.z * v.z;
        sum += (double)v.w * v.w;
      }
    } else {
      for (unsigned int k = threadIdx.x; k < in; k += blockDim.x) {
        const double v = xr[k];
        sum += v * v;
      }
    }
    sum = fdy_block_sum_double(sum, warp_sum);
    inv = (float)(1.0 / sqrt(sum / in + eps));
  }
  float m = 0.0f;
  for (unsigned int k = threadIdx.x; k < in; k += blockDim.x) {
    m = fmaxf(m, fabsf(normed_at(xr, norm, norm_bf16, inv, k)));
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  }
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = m;
  }
  __syncthreads();
  m = 0.0f;
  for (unsigned int w = 0; w < MMA_THREADS / 32; w++) {
    m = fmaxf(m, warp_max[w]);
  }
  /* m = f 2^ex with f in [0.5, 1): x 2^(15 - ex) peaks in [2^14, 2^15) */
  int shift = 0;
  if (m > 0.0f && m <= CUDART_MAX_NORMAL_F) {
    int ex = 0;
    frexpf(m, &ex);
    shift = min(15 - ex, 126);
  }
  const float up = ldexpf(1.0f, shift);
  if (threadIdx.x == 0) {
    yscale[row] = ldexpf(1.0f, -shift);
  }
  __half2 *out = (__half2 *)(xh + (unsigned long long)row * in64);
  for (unsigned int p2 = threadIdx.x; p2 < in64 / 2; p2 += blockDim.x) {
    /* positions 2 p2 and 2 p2 + 1: i = 0 and 1 of (j, c, t) */
    const unsigned int p = 2 * p2, base = p & ~63u, q = p & 63u;
    const unsigned int j = q / 16, c = (q / 8) % 2, t = (q / 2) % 4;
    const unsigned int k = base + 16 * t + 8 * c + j;
    const float lo =
        k < in ? normed_at(xr, norm, norm_bf16, inv, k) * up : 0.0f;
    const float hi =
        k + 4 < in ? normed_at(xr, norm, norm_bf16, inv, k + 4) * up : 0.0f;
    out[p2] = __floats2half2_rn(lo, hi);
  }
}

/* ---- step 2: the tensor-core tiles
 * -------------------------------------------
 */

static __device__ __forceinline__ unsigned int shared_address(const void *p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}

/* 16 bytes from global to shared, zeros where valid is false. */
static __device__ __forceinline__ void copy16(unsigned int dst, const void *src,
                                              bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ void commit_copies(void) {
  asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits until at most MMA_STAGES - 2 groups of copies are in flight. */
static __device__ __forceinline__ void wait_copies(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(MMA_STAGES - 2) : "memory");
}

static __device__ __forceinline__ void load_a(unsigned int address,
                                              uint32_t a[4]) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
      : "r"(address));
}

static __device__ __forceinline__ void
mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The two nibbles of v in bits 0-3 and 16-19 (high false) or 4-7 and
 * 20-23 (high true) as the half2 s * q + b, each rounded once: one lop3
 * makes 1024 + q (or 1024 + 16 q) of them, an exact subtraction (or fma by
 * 1/16 and -64) q, then one fma. */
static __device__ __forceinline__ uint32_t dequantize_pair(uint32_t v,
                                                           bool high,
                                                           uint32_t s2,
                                                           uint32_t b2) {
  uint32_t biased, q, w;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;\n" /* (a & b) | c */
      : "=r"(biased)
      : "r"(v), "r"(high ? 0x00f000f0u : 0x000f000fu), "r"(0x64006400u));
  if (high) {
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n"
        : "=r"(q)
        : "r"(biased), "r"(0x2c002c00u), "r"(0xd400d400u)); /* 1/16, -64 */
  } else {
    asm("sub.rn.f16x2 %0, %1, %2;\n"
        : "=r"(q)
        : "r"(biased), "r"(0x64006400u)); /* 1024 */
  }
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(w) : "r"(q), "r"(s2), "r"(b2));
  return w;
}

/* A scale or bias (F16 or BF16 bits) as a half2 of two equal F16 values. */
static __device__ __forceinline__ uint32_t half2_of(uint16_t bits, bool bf16) {
  uint16_t h = bits;
  if (bf16) {
    h = __half_as_ushort(
        __float2half_rn(__uint_as_float((uint32_t)bits << 16)));
  }
  return (uint32_t)h | (uint32_t)h << 16;
}

/* The shared address of the buffer of stage kb. */
static __device__ __forceinline__ unsigned int
stage_buffer(unsigned int base, unsigned int kb, unsigned int bn) {
  return base + (kb % MMA_STAGES) * (MMA_A_BYTES + bn * MMA_ROW_BYTES);
}

/* The launch of one op: what the kernels need besides the matrices. */
typedef struct mma_dims {
  unsigned int rows, in;
  unsigned int groups;      /* of the inputs: in / group */
  unsigned int group_shift; /* log2 of the group: 5, 6 or 7 */
  unsigned int in64;        /* in rounded up to 64 */
  unsigned int blocks;      /* k-blocks of 64 inputs */
  unsigned int split;       /* input ranges summed separately */
} mma_dims;

/* What the epilogue makes of a block's sums. */
enum mma_epilogue : unsigned int {
  MMA_PLAIN,    /* y = x W^T */
  MMA_RESIDUAL, /* y = residual + x W^T */
  MMA_SWIGLU,   /* y = silu(x W_gate^T) * (x W_up^T) */
};

/* A weight matrix of a launch: out outputs, its results y [rows, out],
 * the tiles of blockIdx.x first_tile .. (of `width` tile rows: out, or
 * for MMA_SWIGLU the interleaved rows of gate and up below), and with
 * split > 1 its partial sums (split x rows x width floats). */
typedef struct mma_matrix {
  const uint32_t *weight;
  const uint16_t *scales, *biases;
  float *y, *partial;
  unsigned int out, width, first_tile;
} mma_matrix;

/* The matrices of a launch: m[0 .. count) with tiles of their own (a tile
 * never spans two), or for MMA_SWIGLU (count 1) gate m[0] and up m[1] in
 * one set of tiles: tile row i of a block at n0 is gate's (i / 8 even) or
 * up's (i / 8 odd) row n0 / 2 + 8 (i / 16) + i % 8 (row_of), so a lane
 * holds the sums of gate and up of the same outputs in its n-tiles nt and
 * nt + 1; width = 16 ceil(out / 8). residual [rows, m[0].out] for
 * MMA_RESIDUAL. */
typedef struct mma_job {
  mma_matrix m[FDY_NORM_MATMUL_MAX_WEIGHTS];
  unsigned int count, epilogue;
  const float *residual;
} mma_job;

/* The matrix whose tiles hold tile (blockIdx.x) `tile`. */
static __device__ __forceinline__ mma_matrix matrix_of(const mma_job &job,
                                                       unsigned int tile) {
  mma_matrix m = job.m[0];
  if (job.count > 1 && tile >= job.m[1].first_tile) {
    m = job.m[1];
  }
  if (job.count > 2 && tile >= job.m[2].first_tile) {
    m = job.m[2];
  }
  return m;
}

/* The weight row of tile row i of the tile at n0 (tile rows of the
 * matrix): n0 + i, or with SWIGLU gate's or up's row (mma_job). */
template <bool SWIGLU>
static __device__ __forceinline__ unsigned int row_of(unsigned int n0,
                                                      unsigned int i) {
  return SWIGLU ? n0 / 2 + 8 * (i / 16) + i % 8 : n0 + i;
}

/* What a thread copies into every stage: CHUNKS 16-byte chunks of xh,
 * chunk i from tile row tid / 8 + i THREADS / 8 (THREADS a multiple of 64,
 * so all of them have the same XOR swizzle; the last one only where that
 * row is below 128: a_last), and for the first 2 BN threads (b_mine) one
 * half of a weight row. Offset in elements of xh at input 0, the weight
 * half row's words at input 0 (b_src: its matrix's first word where the
 * row does not exist); shared offsets within a stage. */
template <int CHUNKS> struct mma_copy {
  unsigned long long a_at;
  const uint32_t *b_src;
  unsigned int a_dst, b_dst, b_word; /* b_word: the half's first word */
  bool a_ok[CHUNKS];                 /* the chunk's row is active */
  bool a_last, b_mine, b_ok;         /* b_ok: the weight row exists */
};

template <int THREADS> struct mma_chunks {
  static constexpr int n = (MMA_BM * 8 + THREADS - 1) / THREADS;
};

/* This thread's copies in a block of THREADS threads at tile (row0, n0)
 * of BN tile rows of matrix m (with SWIGLU, of m and up). */
template <int THREADS, int BN, bool SWIGLU>
static __device__ __forceinline__ mma_copy<mma_chunks<THREADS>::n>
copy_of(unsigned int row0, unsigned int active, unsigned int n0,
        const mma_dims *d, const mma_matrix &m, const uint32_t *up) {
  constexpr int CHUNKS = mma_chunks<THREADS>::n;
  static_assert(THREADS % 64 == 0, "one swizzle for all of a thread's rows");
  mma_copy<CHUNKS> c;
  const unsigned int tid = threadIdx.x, r = tid / 8, k = tid % 8;
  c.a_at = (unsigned long long)(row0 + r) * d->in64 + k * 8;
  c.a_dst = r * 128 + ((k ^ (r % 8)) << 4);
#pragma unroll
  for (int i = 0; i < CHUNKS; i++) {
    c.a_ok[i] = row0 + r + i * (THREADS / 8) < active;
  }
  c.a_last = r + (CHUNKS - 1) * (THREADS / 8) < MMA_BM;
  const unsigned int wr = tid / 2, h = tid % 2, n = row_of<SWIGLU>(n0, wr);
  const uint32_t *weight = SWIGLU && (wr / 8) % 2 == 1 ? up : m.weight;
  c.b_mine = tid < 2 * BN;
  c.b_ok = c.b_mine && n < m.out;
  c.b_src =
      c.b_ok ? weight + (unsigned long long)n * (d->in / 8) + 4 * h : weight;
  c.b_dst = MMA_A_BYTES + wr * MMA_ROW_BYTES + h * 16;
  c.b_word = 4 * h;
  return c;
}

/* Copies the xh of stage kb into the shared buffer at `buffer`: 128 rows
 * of 64 inputs, this thread's chunks (zeros past the active rows). */
template <int THREADS, int CHUNKS>
static __device__ __forceinline__ void
issue_stage_a(unsigned int buffer, unsigned int kb, const mma_copy<CHUNKS> &c,
              const __half *xh, const mma_dims *d) {
  const unsigned long long at = c.a_at + kb * MMA_BK;
  const unsigned long long stride = (unsigned long long)(THREADS / 8) * d->in64;
#pragma unroll
  for (int i = 0; i < CHUNKS; i++) {
    if (i < CHUNKS - 1 || MMA_BM * 8 % THREADS == 0 || c.a_last) {
      copy16(buffer + c.a_dst + i * (THREADS / 8) * 128,
             xh + (c.a_ok[i] ? at + i * stride : 0), c.a_ok[i]);
    }
  }
}

/* Copies the weights of stage kb into the shared buffer at `buffer`: BN
 * weight rows of 8 words, this thread's half row (zeros past the outputs
 * and the inputs). */
template <int CHUNKS>
static __device__ __forceinline__ void
issue_stage_b(unsigned int buffer, unsigned int kb, const mma_copy<CHUNKS> &c,
              const mma_dims *d) {
  if (c.b_mine) {
    const bool valid = c.b_ok && kb * 8 + c.b_word < d->in / 8;
    copy16(buffer + c.b_dst, c.b_src + (valid ? kb * 8 : 0), valid);
  }
}

/* The group scale and bias (bits) of stage kb for this lane's weight rows:
 * at[nt], the first of row nt's groups in m's scales and biases (with
 * SWIGLU, odd nt in up's), where row_ok[nt] (zeros past the outputs and
 * the groups). */
template <int NT, bool SWIGLU>
static __device__ __forceinline__ void
load_scales(unsigned int kb, const unsigned long long at[NT],
            const bool row_ok[NT], const mma_matrix &m, const mma_matrix &up,
            const mma_dims *d, uint16_t s[NT], uint16_t b[NT]) {
  const unsigned int gi =
      (kb * MMA_BK + 16 * (threadIdx.x % 4)) >> d->group_shift;
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const bool valid = row_ok[nt] && gi < d->groups;
    const bool of_up = SWIGLU && nt % 2 == 1;
    const uint16_t *scales = of_up ? up.scales : m.scales;
    const uint16_t *biases = of_up ? up.biases : m.biases;
    s[nt] = valid ? __ldg(scales + at[nt] + gi) : (uint16_t)0;
    b[nt] = valid ? __ldg(biases + at[nt] + gi) : (uint16_t)0;
  }
}

/* Stores v0, v1 at dst[0], dst[1] where ok0, ok1 (one 8-byte store when
 * both are and pair: dst 8-byte aligned). */
static __device__ __forceinline__ void store2(float *dst, float v0, float v1,
                                              bool ok0, bool ok1, bool pair) {
  if (pair && ok1) {
    *(float2 *)dst = make_float2(v0, v1);
  } else {
    if (ok0) {
      dst[0] = v0;
    }
    if (ok1) {
      dst[1] = v1;
    }
  }
}

/* silu(g) * u as the CPU backend's SWIGLU computes it. */
static __device__ __forceinline__ float swiglu(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

/* Adds the products of one stage (64 inputs) to acc: the lane's weight
 * words of its NT n-tiles at b_offset in the stage's buffer, dequantized
 * with scales s2 and biases b2 (half2 each) k-step by k-step, against the
 * A fragments of its MT m16 tiles (ldmatrix at rows a_row + 16 mt, chunks
 * a_chunk[j]). */
template <int MT, int NT>
static __device__ __forceinline__ void
multiply_stage(unsigned int buffer, unsigned int a_row,
               const unsigned int a_chunk[4], unsigned int b_offset,
               const uint32_t s2[NT], const uint32_t b2[NT],
               float acc[MT][NT][4]) {
  uint2 wq[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                 : "=r"(wq[nt].x), "=r"(wq[nt].y)
                 : "r"(buffer + b_offset + nt * 8 * MMA_ROW_BYTES));
  }
#pragma unroll
  for (int j = 0; j < 4; j++) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      load_a(buffer + (a_row + mt * 16) * 128 + a_chunk[j], a[mt]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      /* step j: nibbles j, j + 4, in bits 0-3 (4-7) of the word shifted
       * by 8 (j / 2) for even (odd) j */
      const unsigned int by = 8 * (j / 2);
      const uint32_t b0 =
          dequantize_pair(wq[nt].x >> by, j % 2 == 1, s2[nt], b2[nt]);
      const uint32_t b1 =
          dequantize_pair(wq[nt].y >> by, j % 2 == 1, s2[nt], b2[nt]);
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        mma_16816(acc[mt][nt], a[mt], b0, b1);
      }
    }
  }
}

/* Stores the warp's sums acc of rows warp_row0 .. (16 MT) and tile rows
 * warp_col0 .. (8 NT) of the tile at n0 of matrix m (lane (g, t)). */
template <int MT, int NT, bool SWIGLU>
static __device__ __forceinline__ void
store_tile(const mma_job &job, const mma_matrix &m, const mma_dims &d,
           const float *yscale, unsigned int active, unsigned int warp_row0,
           unsigned int n0, unsigned int warp_col0, unsigned int g,
           unsigned int t, const float acc[MT][NT][4]) {
  /* c0, c1: row g, tile rows i = warp_col0 + 8 nt + 2t and i + 1 (weight
   * rows o and o + 1); c2, c3: row g + 8. Split: the raw sums at tile row
   * n0 + i of the partial sums; else y = the sums 2^-e (MMA_RESIDUAL: plus
   * the residual; SWIGLU: silu(gate) * up of n-tiles nt, nt + 1). */
  const bool split = d.split > 1;
  float *dst =
      split ? m.partial + (unsigned long long)blockIdx.z * d.rows * m.width
            : m.y;
  const unsigned int stride = split ? m.width : m.out;
  const bool pairs = stride % 2 == 0;
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const unsigned int r = warp_row0 + mt * 16 + g + 8 * half;
      if (r >= active) {
        continue;
      }
      const float scale = split ? 1.0f : yscale[r];
      float *yr = dst + (unsigned long long)r * stride;
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        const unsigned int i = warp_col0 + nt * 8 + 2 * t;
        const unsigned int o = row_of<SWIGLU>(n0, i);
        const bool ok0 = o < m.out, ok1 = o + 1 < m.out;
        /* rounded before any add (no fma contraction), as the unfused ops */
        float v0 = __fmul_rn(acc[mt][nt][2 * half], scale);
        float v1 = __fmul_rn(acc[mt][nt][2 * half + 1], scale);
        if (split) {
          store2(yr + n0 + i, v0, v1, ok0, ok1, pairs);
        } else if (SWIGLU) {
          if (nt % 2 == 0) {
            const float u0 = acc[mt][nt + 1][2 * half] * scale;
            const float u1 = acc[mt][nt + 1][2 * half + 1] * scale;
            store2(yr + o, swiglu(v0, u0), swiglu(v1, u1), ok0, ok1, pairs);
          }
        } else {
          if (job.epilogue == MMA_RESIDUAL) {
            const float *res = job.residual + (unsigned long long)r * m.out;
            v0 = ok0 ? res[o] + v0 : v0;
            v1 = ok1 ? res[o + 1] + v1 : v1;
          }
          store2(yr + o, v0, v1, ok0, ok1, pairs);
        }
      }
    }
  }
}

/* A block of WM x WN warps per 128 rows x BN = 8 NT WN tile rows of a
 * matrix of the job: warp (wm, wn) computes rows 16 MT wm .. of the tile
 * and tile rows 8 NT wn .. over the 4 k16-steps of every stage. BLOCKS
 * blocks per multiprocessor (at most 65536 / (32 WM WN BLOCKS)
 * registers). SWIGLU: the job's gate and up interleaved
 * (mma_job), the epilogue MMA_SWIGLU; else PLAIN or RESIDUAL. */
template <int WM, int WN, int MT, int NT, int BLOCKS, bool SWIGLU>
__global__ void __launch_bounds__(32 * WM * WN, BLOCKS)
    mma_q4_kernel(const int32_t *step, const __half *xh, const float *yscale,
                  bool bf16, mma_dims d, mma_job job) {
  constexpr int THREADS = 32 * WM * WN, BN = 8 * NT * WN;
  static_assert(16 * MT * WM == MMA_BM, "the warps cover the block's rows");
  static_assert(2 * BN <= THREADS, "a thread per chunk of weights");
  static_assert(!SWIGLU || NT % 2 == 0, "gate and up n-tiles in pairs");
  extern __shared__ __align__(128) unsigned char smem[];
  fdy_grid_launch_dependents();
  const unsigned int active = fdy_active_rows(step, d.rows);
  const unsigned int row0 = blockIdx.y * MMA_BM;
  if (row0 >= active) {
    return;
  }
  const mma_matrix m = matrix_of(job, blockIdx.x);
  const mma_matrix &up = job.m[1];
  const unsigned int n0 = (blockIdx.x - m.first_tile) * BN;
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int wm = warp / WN, wn = warp % WN;
  const unsigned int g = lane / 4, t = lane % 4;
  const unsigned int kb_begin =
      (unsigned int)((unsigned long long)d.blocks * blockIdx.z / d.split);
  const unsigned int kb_end =
      (unsigned int)((unsigned long long)d.blocks * (blockIdx.z + 1) / d.split);
  const unsigned int base = shared_address(smem);

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        acc[mt][nt][e] = 0.0f;
      }
    }
  }

  /* ldmatrix: lane l gives row l % 16 of its m16 tile, chunk 2j + l / 16
   * for k-step j */
  const unsigned int a_row = wm * 16 * MT + lane % 16;
  unsigned int a_chunk[4];
#pragma unroll
  for (int j = 0; j < 4; j++) {
    a_chunk[j] = ((2 * j + lane / 16) ^ (a_row % 8)) << 4;
  }
  unsigned long long s_at[NT]; /* this lane's weight rows' first groups */
  bool row_ok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const unsigned int n = row_of<SWIGLU>(n0, wn * 8 * NT + nt * 8 + g);
    row_ok[nt] = n < m.out;
    s_at[nt] = (unsigned long long)n * d.groups;
  }
  const mma_copy<mma_chunks<THREADS>::n> copy =
      copy_of<THREADS, BN, SWIGLU>(row0, active, n0, &d, m, up.weight);
  const unsigned int b_offset =
      MMA_A_BYTES + (wn * 8 * NT + g) * MMA_ROW_BYTES + 8 * t;

  /* The weights of the first stages and the first scales before the
   * wait (only xh and yscale come from the kernel before); all of them in
   * the first group of copies, so stage s has landed with group s. */
#pragma unroll
  for (int s = 0; s < MMA_STAGES - 1; s++) {
    if (kb_begin + s < kb_end) {
      issue_stage_b(stage_buffer(base, kb_begin + s, BN), kb_begin + s, copy,
                    &d);
    }
  }
  uint16_t s_next[NT], b_next[NT];
  load_scales<NT, SWIGLU>(kb_begin, s_at, row_ok, m, up, &d, s_next, b_next);
  fdy_grid_wait();
#pragma unroll
  for (int s = 0; s < MMA_STAGES - 1; s++) {
    if (kb_begin + s < kb_end) {
      issue_stage_a<THREADS>(stage_buffer(base, kb_begin + s, BN), kb_begin + s,
                             copy, xh, &d);
    }
    commit_copies();
  }

  for (unsigned int kb = kb_begin; kb < kb_end; kb++) {
    uint32_t s2[NT], b2[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      s2[nt] = half2_of(s_next[nt], bf16);
      b2[nt] = half2_of(b_next[nt], bf16);
    }
    if (kb + 1 < kb_end) {
      load_scales<NT, SWIGLU>(kb + 1, s_at, row_ok, m, up, &d, s_next, b_next);
    }
    wait_copies();
    __syncthreads(); /* stage kb landed; buffer (kb - 1) % S is free */
    if (kb + MMA_STAGES - 1 < kb_end) {
      const unsigned int next = kb + MMA_STAGES - 1;
      issue_stage_a<THREADS>(stage_buffer(base, next, BN), next, copy, xh, &d);
      issue_stage_b(stage_buffer(base, next, BN), next, copy, &d);
    }
    commit_copies();

    multiply_stage<MT, NT>(stage_buffer(base, kb, BN), a_row, a_chunk, b_offset,
                           s2, b2, acc);
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");

  store_tile<MT, NT, SWIGLU>(job, m, d, yscale, active, row0 + wm * 16 * MT, n0,
                             wn * 8 * NT, g, t, acc);
}

/* ---- step 3: the splits in order --------------------------------------------
 */

/* y of every matrix of the job from its partial sums: each element's
 * splits added in split order, times 2^-e, then the epilogue's residual or
 * silu(gate) * up. */
__global__ void __launch_bounds__(MMA_THREADS)
    sum_splits_kernel(const int32_t *step, const float *yscale, mma_dims d,
                      mma_job job) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned long long active = fdy_active_rows(step, d.rows);
  const unsigned long long first =
      (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
#pragma unroll
  for (unsigned int j = 0; j < FDY_NORM_MATMUL_MAX_WEIGHTS; j++) {
    if (j >= job.count) {
      break;
    }
    const mma_matrix &m = job.m[j];
    const unsigned long long n = active * m.out;
    const unsigned long long part = (unsigned long long)d.rows * m.width;
    for (unsigned long long i = first; i < n; i += stride) {
      const unsigned long long r = i / m.out;
      const unsigned int o = (unsigned int)(i % m.out);
      const float scale = yscale[r];
      if (job.epilogue == MMA_SWIGLU) {
        const unsigned long long at = r * m.width + 16 * (o / 8) + o % 8;
        float gate = m.partial[at], up = m.partial[at + 8];
        for (unsigned int z = 1; z < d.split; z++) {
          gate += m.partial[z * part + at];
          up += m.partial[z * part + at + 8];
        }
        m.y[i] = swiglu(gate * scale, up * scale);
      } else {
        const unsigned long long at = r * m.width + o;
        float sum = m.partial[at];
        for (unsigned int z = 1; z < d.split; z++) {
          sum += m.partial[z * part + at];
        }
        const float v = __fmul_rn(sum, scale); /* rounded before the add */
        m.y[i] = job.epilogue == MMA_RESIDUAL ? job.residual[i] + v : v;
      }
    }
  }
}

/* ---- host side
 * ---------------------------------------------------------------
 */

static uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

static uint64_t aligned(uint64_t bytes) {
  return ceil_div(bytes, MMA_ALIGN) * MMA_ALIGN;
}

typedef void (*mma_kernel_fn)(const int32_t *, const __half *, const float *,
                              bool, mma_dims, mma_job);

/* A block shape: its kernel (and its SWIGLU instance, NULL where NT is
 * odd), tile rows per block, threads, blocks per multiprocessor, and the
 * microseconds a block takes per k-block of 64 inputs while its
 * multiprocessor runs all the blocks it holds, measured on the H200 at 512
 * rows (0: not measured yet; launched only when asked for by index, as
 * cuda_kernel_bench does). */
typedef struct mma_shape {
  mma_kernel_fn kernel, swiglu;
  const char *name;
  unsigned int bn, threads, blocks_per_sm;
  double us_per_kblock;
} mma_shape;

/* The SWIGLU instance of a shape whose warps hold n-tiles in pairs. */
template <int WM, int WN, int MT, int NT, int BLOCKS>
static constexpr mma_kernel_fn swiglu_instance(void) {
  if constexpr (NT % 2 == 0) {
    return mma_q4_kernel<WM, WN, MT, NT, BLOCKS, true>;
  } else {
    return NULL;
  }
}

#define MMA_SHAPE(WM, WN, MT, NT, BLOCKS, US, NAME)                            \
  {                                                                            \
    mma_q4_kernel<WM, WN, MT, NT, BLOCKS, false>,                              \
        swiglu_instance<WM, WN, MT, NT, BLOCKS>(), NAME, 8 * (NT) * (WN),      \
        32 * (WM) * (WN), BLOCKS, US                                           \
  }

/* The measured times (H200, cuda_kernel_bench --rows 512, group 64, each
 * op with its F16 conversion; docs/tuning-log.md entry 25, call 34), in us
 * for the shapes 128x64 2/SM, 128x96 1/SM, 2x6 warps, 128x96 2/SM:
 *
 *   q/o 3072 x 3072       66.3   62.7   64.7   57.6
 *   k/v 1024 x 3072       33.2   36.0   36.7   33.4
 *   gate/up 8192 x 3072  119.1  161.5  166.6  125.4
 *   down 3072 x 8192     169.2  150.1  156.1  127.1
 *
 * (a fifth shape, 128x96 as two halves of the k-steps, 16 warps, measured
 * 60.9, 36.1, 154.6, 155.9: never the fastest, removed.) A shape's
 * us_per_kblock is an op's median time over (waves x k-blocks per block):
 * gate/up's / 96 for 128x64 at 2 per SM (2 waves of 48), down's / 128 for
 * the 96-wide shapes at 1 per SM (one wave of 128), down's / 64 for 128x96
 * at 2 per SM (one wave of 256 blocks: split 2). The model picks 128x96 at
 * 2 per SM for q/o and down and 128x64 for gate/up and k/v, the fastest of
 * each row; the 2 x 6 warps (an even NT) are the other shape that runs
 * NORM_SWIGLU_Q4. The model is coarse for small ops (k/v: ~15 us
 * predicted, 33 measured) and for the LM head's 8016 tiles, which prefill
 * computes for one row. */
static const mma_shape mma_shapes[] = {
    MMA_SHAPE(2, 4, 4, 2, 2, 1.24, "128x64 2/SM, 2x4 warps of 64x16"),
    MMA_SHAPE(2, 4, 4, 3, 1, 1.17, "128x96 1/SM, 2x4 warps of 64x24"),
    MMA_SHAPE(2, 6, 4, 2, 1, 1.22, "128x96 1/SM, 2x6 warps of 64x16"),
    MMA_SHAPE(2, 4, 4, 3, 2, 1.99, "128x96 2/SM, 2x4 warps of 64x24"),
};
#define MMA_SHAPES (sizeof mma_shapes / sizeof mma_shapes[0])

/* The input of op's first weight: MATMUL_Q4 and MATMUL_ADD_Q4 at 2, the
 * norm kinds at 3 (NORM_SWIGLU_Q4's up at 6; NORM_MATMUL_Q4's weight j at
 * 3 + 3 j). */
static unsigned int first_weight(const fdy_op *op) {
  return op->kind == FDY_OP_NORM_MATMUL_Q4 || op->kind == FDY_OP_NORM_SWIGLU_Q4
             ? 3
             : 2;
}

/* The matrices of op with tiles of their own (mma_job's count). */
static unsigned int matrices_of(const fdy_op *op) {
  return op->kind == FDY_OP_NORM_MATMUL_Q4 ? op->output_count : 1;
}

/* The tile rows of op's matrix j: its outputs, or gate's and up's
 * interleaved (mma_job). */
static unsigned int width_of(const fdy_op *op, unsigned int j) {
  const unsigned int out = (unsigned int)op->outputs[j].shape.dims[1];
  return op->kind == FDY_OP_NORM_SWIGLU_Q4 ? 16 * (unsigned int)ceil_div(out, 8)
                                           : out;
}

/* The tiles of bn tile rows over every matrix of op, for one block of 128
 * rows. */
static uint64_t row_tiles(const fdy_op *op, unsigned int bn) {
  uint64_t tiles = 0;
  for (unsigned int j = 0; j < matrices_of(op); j++) {
    tiles += ceil_div(width_of(op, j), bn);
  }
  return tiles;
}

/* The rows the block shape and the split are chosen for: the op's own, or
 * its variant_rows when more (ops.h), so that a step narrowed to a
 * batch-size bucket sums every output in the order of its full rows. */
static uint64_t choice_rows(const fdy_op *op) {
  const uint64_t rows = op->inputs[1].shape.dims[0];
  return op->variant_rows > rows ? op->variant_rows : rows;
}

/* The tiles of 128 rows x bn tile rows over every matrix of op, for
 * choice_rows (what the choices weigh; the grid covers the op's rows). */
static uint64_t tiles_of(const fdy_op *op, unsigned int bn) {
  return row_tiles(op, bn) * ceil_div(choice_rows(op), MMA_BM);
}

/* The kernel of shape s for op (NULL: s cannot run it). */
static mma_kernel_fn kernel_of(const fdy_op *op, const mma_shape *s) {
  return op->kind == FDY_OP_NORM_SWIGLU_Q4 ? s->swiglu : s->kernel;
}

/* The launch of an op with block shape s, from the shapes alone. The split
 * of the inputs: one when the tiles (s->bn tile rows x 128 rows, over all
 * the op's matrices) fill at least half of the slots (MMA_SMS x
 * s->blocks_per_sm); else as many as fill them, up to MMA_MAX_SPLIT and at
 * least 4 k-blocks per split. */
static mma_dims dims_of(const fdy_op *op, const mma_shape *s) {
  mma_dims d;
  d.rows = (unsigned int)op->inputs[1].shape.dims[0];
  d.in = (unsigned int)op->inputs[1].shape.dims[1];
  d.groups = (unsigned int)op->inputs[first_weight(op) + 1].shape.dims[1];
  const unsigned int group = d.in / d.groups; /* 32, 64 or 128 (ops.h) */
  d.group_shift = group == 32 ? 5 : group == 64 ? 6 : 7;
  d.in64 = (unsigned int)ceil_div(d.in, MMA_BK) * MMA_BK;
  d.blocks = d.in64 / MMA_BK;
  const uint64_t slots = (uint64_t)MMA_SMS * s->blocks_per_sm;
  const uint64_t tiles = tiles_of(op, s->bn);
  uint64_t split = 1;
  if (2 * tiles < slots) {
    split = slots / tiles;
    split = split > MMA_MAX_SPLIT ? MMA_MAX_SPLIT : split;
    const uint64_t most = d.blocks / 4 > 0 ? d.blocks / 4 : 1;
    split = split > most ? most : split;
  }
  d.split = (unsigned int)split;
  return d;
}

/* The measured block shape of least predicted time for op among those
 * that run it: waves of blocks (over the total tile rows of its matrices)
 * x k-blocks per block x the shape's time per k-block (ties to the
 * first). */
static unsigned int shape_of(const fdy_op *op) {
  unsigned int best = 0;
  double best_us = -1.0;
  for (unsigned int c = 0; c < MMA_SHAPES; c++) {
    const mma_shape *s = &mma_shapes[c];
    if (s->us_per_kblock <= 0.0 || kernel_of(op, s) == NULL) {
      continue;
    }
    const mma_dims d = dims_of(op, s);
    const uint64_t blocks = tiles_of(op, s->bn) * d.split;
    const double us =
        (double)ceil_div(blocks, (uint64_t)MMA_SMS * s->blocks_per_sm) *
        (double)ceil_div(d.blocks, d.split) * s->us_per_kblock;
    if (best_us < 0.0 || us < best_us) {
      best = c;
      best_us = us;
    }
  }
  return best;
}

static uint64_t shared_bytes(const mma_shape *s) {
  return (uint64_t)MMA_STAGES * (MMA_A_BYTES + s->bn * MMA_ROW_BYTES);
}

extern "C" unsigned int fdy_cuda_matmul_q4_mma_shapes(void) {
  return (unsigned int)MMA_SHAPES;
}

extern "C" const char *fdy_cuda_matmul_q4_mma_shape_name(unsigned int c) {
  return c < MMA_SHAPES ? mma_shapes[c].name : NULL;
}

extern "C" bool fdy_cuda_matmul_q4_mma_shape_runs(const fdy_op *op,
                                                  unsigned int c) {
  return c < MMA_SHAPES && kernel_of(op, &mma_shapes[c]) != NULL;
}

extern "C" unsigned int fdy_cuda_matmul_q4_mma_shape_of(const fdy_op *op) {
  return shape_of(op);
}

extern "C" uint64_t fdy_cuda_matmul_q4_mma_shared_bytes(const fdy_op *op) {
  return shared_bytes(&mma_shapes[shape_of(op)]);
}

/* The bytes of matrix j's partial sums (split > 1), each matrix's at a
 * multiple of MMA_ALIGN. */
static uint64_t partial_bytes(const fdy_op *op, const mma_dims *d,
                              unsigned int j) {
  return aligned(4ull * d->split * d->rows * width_of(op, j));
}

/* Workspace: xh (rows x in64 halves), yscale (rows floats), then when
 * split the partial sums of each matrix (split x rows x width floats). */
extern "C" uint64_t
fdy_cuda_matmul_q4_mma_shape_workspace_bytes(const fdy_op *op, unsigned int c) {
  const mma_dims d = dims_of(op, &mma_shapes[c]);
  uint64_t bytes = aligned(2ull * d.rows * d.in64) + aligned(4ull * d.rows);
  for (unsigned int j = 0; d.split > 1 && j < matrices_of(op); j++) {
    bytes += partial_bytes(op, &d, j);
  }
  return bytes;
}

extern "C" uint64_t fdy_cuda_matmul_q4_mma_workspace_bytes(const fdy_op *op) {
  return fdy_cuda_matmul_q4_mma_shape_workspace_bytes(op, shape_of(op));
}

extern "C" cudaError_t fdy_cuda_matmul_q4_mma_prepare(uint64_t smem_optin) {
  cudaError_t rc = cudaSuccess;
  for (size_t c = 0; rc == cudaSuccess && c < 2 * MMA_SHAPES; c++) {
    const mma_shape *s = &mma_shapes[c / 2];
    const mma_kernel_fn kernel = c % 2 == 0 ? s->kernel : s->swiglu;
    if (kernel == NULL) {
      continue;
    }
    const uint64_t bytes = shared_bytes(s);
    rc = cudaFuncSetAttribute(kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)(smem_optin < bytes ? smem_optin : bytes));
    if (rc == cudaSuccess) { /* room for blocks_per_sm blocks */
      rc = cudaFuncSetAttribute(kernel,
                                cudaFuncAttributePreferredSharedMemoryCarveout,
                                cudaSharedmemCarveoutMaxShared);
    }
  }
  const void *kernels[] = {(const void *)half_rows_kernel,
                           (const void *)sum_splits_kernel};
  for (size_t i = 0; rc == cudaSuccess && i < 2; i++) {
    struct cudaFuncAttributes attributes;
    rc = cudaFuncGetAttributes(&attributes, kernels[i]);
  }
  return rc;
}

/* The job of op (its matrices from a's inputs and outputs, tiles of bn
 * tile rows, partial sums from `partial` on). */
static mma_job job_of(const fdy_cuda_op_args *a, const mma_dims *d,
                      unsigned int bn, unsigned char *partial) {
  const fdy_op *op = a->op;
  const unsigned int w = first_weight(op);
  const bool swiglu = op->kind == FDY_OP_NORM_SWIGLU_Q4;
  mma_job job;
  memset(&job, 0, sizeof job);
  job.count = matrices_of(op);
  job.epilogue = swiglu                             ? MMA_SWIGLU
                 : op->kind == FDY_OP_MATMUL_ADD_Q4 ? MMA_RESIDUAL
                                                    : MMA_PLAIN;
  job.residual =
      op->kind == FDY_OP_MATMUL_ADD_Q4 ? (const float *)a->in[5] : NULL;
  unsigned int tile = 0;
  for (unsigned int j = 0; j < (swiglu ? 2u : job.count); j++) {
    mma_matrix *m = &job.m[j];
    const unsigned int o = swiglu ? 0 : j; /* the output of matrix j */
    m->weight = (const uint32_t *)a->in[w + 3 * j];
    m->scales = (const uint16_t *)a->in[w + 3 * j + 1];
    m->biases = (const uint16_t *)a->in[w + 3 * j + 2];
    m->y = (float *)a->outputs[o];
    m->out = (unsigned int)op->outputs[o].shape.dims[1];
    m->width = width_of(op, o);
    m->first_tile = tile;
    if (j < job.count) {
      tile += (unsigned int)ceil_div(m->width, bn);
      if (d->split > 1) {
        m->partial = (float *)partial;
        partial += partial_bytes(op, d, j);
      }
    }
  }
  return job;
}

extern "C" cudaError_t
fdy_cuda_matmul_q4_mma_enqueue_shape(const fdy_cuda_op_args *a, unsigned int c,
                                     cudaStream_t stream) {
  const fdy_op *op = a->op;
  const mma_shape *s = &mma_shapes[c];
  const mma_kernel_fn kernel = kernel_of(op, s);
  if (kernel == NULL) {
    return cudaErrorInvalidValue;
  }
  const mma_dims d = dims_of(op, s);
  const int32_t *step = (const int32_t *)a->in[0];
  unsigned char *ws = (unsigned char *)a->workspace;
  __half *xh = (__half *)ws;
  float *yscale = (float *)(ws + aligned(2ull * d.rows * d.in64));
  const mma_job job =
      job_of(a, &d, s->bn, (unsigned char *)yscale + aligned(4ull * d.rows));
  const bool norm = first_weight(op) == 3;
  cudaError_t rc = fdy_launch(
      a->dependent, half_rows_kernel, dim3(d.rows), dim3(MMA_THREADS), 0,
      stream, step, (const float *)a->in[1], d.rows, d.in, d.in64,
      norm ? (const uint16_t *)a->in[2] : (const uint16_t *)NULL,
      norm && op->inputs[2].dtype == FDY_DTYPE_BF16,
      norm ? op->params.rmsnorm.eps : 0.0, xh, yscale);
  const dim3 grid((unsigned int)row_tiles(op, s->bn),
                  (unsigned int)ceil_div(d.rows, MMA_BM), d.split);
  const bool bf16 = op->inputs[first_weight(op) + 1].dtype == FDY_DTYPE_BF16;
  if (rc == cudaSuccess) {
    rc = fdy_launch(a->dependent, kernel, grid, dim3(s->threads),
                    shared_bytes(s), stream, step, (const __half *)xh,
                    (const float *)yscale, bf16, d, job);
  }
  if (rc == cudaSuccess && d.split > 1) {
    uint64_t n = 0;
    for (unsigned int j = 0; j < job.count; j++) {
      n += (uint64_t)d.rows * job.m[j].out;
    }
    uint64_t blocks = ceil_div(n, MMA_THREADS);
    const uint64_t cap = (uint64_t)a->sm_count * 8;
    blocks = blocks > cap ? cap : blocks;
    rc = fdy_launch(a->dependent, sum_splits_kernel, dim3((unsigned int)blocks),
                    dim3(MMA_THREADS), 0, stream, step, (const float *)yscale,
                    d, job);
  }
  return rc;
}

extern "C" cudaError_t fdy_cuda_matmul_q4_mma_enqueue(const fdy_cuda_op_args *a,
                                                      cudaStream_t stream) {
  return fdy_cuda_matmul_q4_mma_enqueue_shape(a, shape_of(a->op), stream);
}
