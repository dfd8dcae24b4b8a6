/* MATMUL_Q4 on CUDA: y = x W^T with MLX affine 4-bit weights (U32 words
 * of 8 nibbles, low first; w = s * q + b per group of 32, 64 or 128 inputs,
 * s and b F16 or BF16). Two kernels, chosen from the shape of x alone:
 *
 * - x of one row (decode): a matrix-vector kernel on the tensor cores
 *   (below; docs/tuning-log.md entry 15).
 * - x of several rows (prefill): F16 tensor-core tiles with F32 sums
 *   (matmul_q4_mma.cu), within about 1e-3 of the float result.
 *
 * The matrix-vector kernel keeps the CPU backend's formulation (src/
 * backends/cpu/matmul_q4.c), y = sum over 32-input chunks of
 * s (q . x) + b sum(x), with every q . x on the tensor cores and exact up to
 * the float sums: mma.sync m16n8k16 (F16 in, F32 sums) with the weights as
 * A (16 output rows x 16 inputs) and x as B. A thread owns one 16-byte
 * chunk (32 nibbles of one quantization group) of row g and of row g + 8 of
 * a 16-row tile (lane = 4 g + t; the quad t = 0..3 reads 64 contiguous
 * bytes of a row), and turns each 32-bit word into exact F16 integers with
 * 9 instructions (lop3 (w & 0x000f000f) | 0x64006400 = (1024 + n0,
 * 1024 + n4), (w & 0x00f000f0) | 0x64006400 = (1024 + 16 n1, 1024 + 16 n5),
 * the same of w >> 8, then a subtraction of 1024 or an FMA by 1/16 and
 * -64). Its 4 words feed 8 mmas: word j's pairs (n0, n4), (n1, n5) are
 * mma 2j's A registers of rows g and g + 8, (n2, n6), (n3, n7) mma 2j + 1's
 * (the even mmas accumulate in one set of C registers, the odd ones in
 * another, added at the end: two dependent chains instead of one).
 * The k rows 2t, 2t + 1, 2t + 8, 2t + 9 of an mma are thread t's, so B
 * column 2t holds x_hi and column 2t + 1 x_lo of thread t's inputs at the
 * matching nibble positions (zero elsewhere: B-thread (g, t) loads only
 * when g / 2 == t): C[row][2t] + C[row][2t + 1] is then thread t's own dot
 * product, and thread (g, t) receives exactly its chunk's (hi, lo) sums of
 * rows g and g + 8 in c0..c3. x = x_hi + x_lo (both F16) after a scaling
 * by 2^e per 32-input chunk that puts the chunk's max |x| in [2^14, 2^15)
 * (no F16 overflow for any finite x; x_lo keeps the bits x_hi drops, so
 * x_hi + x_lo is x to ~2^-22 of the chunk's max |x|), staged once per block
 * in shared memory in the order the B fragments are read (one 16-byte read
 * per two mmas), with each chunk's sum of x and 2^-e in float (no
 * reduction over the block before the items: docs/tuning-log.md entry 47).
 * Per chunk the thread adds s (c0 + c1) 2^-e + b sum(x).
 *
 * Work: tiles of 16 output rows (a tile never spans two matrices of a
 * fused launch); a block takes tiles b, b + G, ... (G blocks); inside a
 * block the W warps split each tile's inputs (warp w takes the 128-input
 * column steps w, w + W, ...), so every warp streams its weights with
 * 2 16-byte loads per lane per item (a column step of a tile) and three
 * items in flight (two issued ahead), the first three (SwiGLU: two) issued
 * before the kernel waits for the previous one (PDL). With SwiGLU an item is
 * a column step of the tile's rows in both the gate and the up matrix:
 * four 16-byte loads per lane, one set of B fragments and one sum of x for
 * its 16 mmas, two items in flight (4 KB a warp; three items would spill),
 * each matrix's sums in the same order as in items of its own. A warp sums
 * its lanes' chunks of a row over t (xor 1, 2) into shared memory, per
 * tile and matrix; after the last tile the block adds the warps' sums in
 * warp order and writes the rows. W follows the launch's count of tiles times
 * halves (gemv_warps): 16 warps, one block per SM, up to 384 (x
 * staged once per SM, half the steps per warp: q/k/v, o, down of the
 * llama decode), 8 warps, two blocks per SM, above (gate/up + SwiGLU, the
 * LM head). Every sum's order depends on the shapes only (not on the
 * grid), so results are deterministic.
 *
 * The kernel also runs the fused decode kinds (template flags): several
 * weights over one x (their tiles in order), an RMSNorm (x * norm staged
 * instead of x, the rows' sums times 1 / rms, whose sum of squares is
 * added while x is staged and read after the items), a SwiGLU epilogue (a
 * tile is computed for the gate and the up matrix; y = silu(gate) * up)
 * and a residual epilogue (y = residual + x W^T, the residual of a
 * thread's first row loaded right after the wait, with x: entry 47).
 * Rows at or beyond the step tensor's row count (0 or 1) are neither read
 * nor written; a row of a 1-row op and the same row of a many-row op are
 * not bitwise equal. */
#include "cuda_device.h"
#include "cuda_internal.h"

#include <string.h>
#include <type_traits>

#define GEMV_NARROW_WARPS 8    /* warps of a block, two blocks per SM */
#define GEMV_WIDE_WARPS   16   /* warps of a block, one block per SM */
#define GEMV_WIDE_TILES   384  /* launches of up to this many tile halves */
#define GEMV_TILE         16   /* output rows of a tile */
#define GEMV_MAX_TILES    32   /* tiles a block takes (their sums in shared) */
#define GEMV_STEP         128  /* inputs of a column step: 4 chunks of 32 */
#define GEMV_HELD_QUADS   2048 /* quads of x a block keeps in registers */

/* ---- matrix-vector ----------------------------------------------------------
 */

/* One weight matrix of a GEMV launch and the output it writes; its tiles
 * are first_tile .. first_tile + ceil(rows / 16) - 1 of the launch. */
typedef struct gemv_matrix {
  const uint4 *weight;
  const uint16_t *scales, *biases;
  float *y;
  unsigned int rows, first_tile;
} gemv_matrix;

/* A GEMV launch: the matrices share x, the input width, the group size and
 * the scale dtype. With kNorm, x is first normalized by RMSNorm (norm, eps);
 * with kSwiglu, matrices 0 and 1 are gate and up (the tiles are the gate's,
 * each computed for both) and m[0].y receives silu(gate) * up; with
 * kResidual, y = residual + x W^T. */
typedef struct gemv_params {
  gemv_matrix m[FDY_OP_MAX_OUTPUTS];
  unsigned int count; /* matrices */
  unsigned int tiles; /* of the launch (kSwiglu: of the gate) */
  unsigned int in, group_shift;
  bool bf16;
  const uint16_t *norm;
  bool norm_bf16;
  double eps;
  const float *residual;
} gemv_params;

/* The loads of one column step of a warp: lane (g, t)'s chunk of rows g and
 * g + 8 with their scales and biases (zero where the row or the chunk does
 * not exist). */
typedef struct gemv_stage {
  uint4 q0, q8;
  unsigned short s0, b0, s8, b8;
} gemv_stage;

/* The loads of one column step of a kSwiglu warp: the same lanes' chunks
 * of the same rows of the gate and of the up matrix. */
typedef struct gemv_pair_stage {
  gemv_stage gate, up;
} gemv_pair_stage;

/* Where a warp's loads are: item n of its items (tile-major, then the
 * column step), the tile's rows it reads. */
typedef struct gemv_issue_cursor {
  unsigned int n, step, tile;
  const uint4 *w0, *w8;
  const unsigned short *s0, *b0, *s8, *b8;
  bool v0, v8;
} gemv_issue_cursor;

/* The same for a kSwiglu warp, whose items are the column steps of both
 * matrices: rows r0 = g and r8 = g + 8 of the tile (0 where the row does
 * not exist), at the same place in the gate and the up matrix (their shapes
 * are equal). */
typedef struct gemv_pair_cursor {
  unsigned int n, step, tile;
  unsigned int r0, r8;
  bool v0, v8;
} gemv_pair_cursor;

/* A weight chunk that is read once: not allocated in L1, and the L2 asked
 * to fetch the 128 bytes around it (a quad reads 64 of a row; the next 64
 * are the next warp's step). Results the same; decode +1.3%, the LM head
 * 90.3 -> 86.3 us (docs/tuning-log.md entry 45). */
static __device__ __forceinline__ uint4 load_streamed(const uint4 *p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/* (w & mask) | 0x64006400: two nibbles as the F16 pair (1024 + a, 1024 + b)
 * (a, b scaled by 16 for the high nibble of a byte). */
static __device__ __forceinline__ uint32_t nibble_pair(uint32_t w,
                                                       uint32_t mask) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;"
      : "=r"(r)
      : "r"(w), "r"(mask), "r"(0x64006400u));
  return r;
}

static __device__ __forceinline__ uint32_t minus_1024(uint32_t v) {
  __half2 h = *reinterpret_cast<__half2 *>(&v);
  h = __hsub2(h, __floats2half2_rn(1024.0f, 1024.0f));
  return *reinterpret_cast<uint32_t *>(&h);
}

static __device__ __forceinline__ uint32_t sixteenth_minus_64(uint32_t v) {
  __half2 h = *reinterpret_cast<__half2 *>(&v);
  h = __hfma2(h, __floats2half2_rn(0.0625f, 0.0625f),
              __floats2half2_rn(-64.0f, -64.0f));
  return *reinterpret_cast<uint32_t *>(&h);
}

/* The exact F16 pairs (n0, n4), (n1, n5), (n2, n6), (n3, n7) of a word. */
static __device__ __forceinline__ void word_pairs(uint32_t w, uint32_t p[4]) {
  const uint32_t high = w >> 8;
  p[0] = minus_1024(nibble_pair(w, 0x000f000fu));
  p[1] = sixteenth_minus_64(nibble_pair(w, 0x00f000f0u));
  p[2] = minus_1024(nibble_pair(high, 0x000f000fu));
  p[3] = sixteenth_minus_64(nibble_pair(high, 0x00f000f0u));
}

/* c += A B on the tensor cores (m16n8k16, F16 in, F32 sums). */
static __device__ __forceinline__ void mma_16816(float c[4], uint32_t a0,
                                                 uint32_t a1, uint32_t a2,
                                                 uint32_t a3, uint32_t b0,
                                                 uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The warp's column steps of a tile: w, w + kWarps, ... below steps. */
template <unsigned int kWarps>
static __device__ __forceinline__ unsigned int warp_steps(unsigned int steps,
                                                          unsigned int warp) {
  return steps > warp ? (steps - warp + kWarps - 1) / kWarps : 0;
}

/* The matrix of the launch that tile `tile` of the launch belongs to
 * (kSwiglu: 0, the gate, whose tiles the launch walks). */
template <bool kSwiglu>
static __device__ __forceinline__ unsigned int
gemv_matrix_of(const gemv_params &p, unsigned int tile) {
  unsigned int j = 0;
  if (!kSwiglu) {
    while (j + 1 < p.count && tile >= p.m[j + 1].first_tile) {
      j++;
    }
  }
  return j;
}

/* Points the cursor at the rows of its tile (of the block's tiles). */
static __device__ __forceinline__ void gemv_point(const gemv_params &p,
                                                  unsigned int groups,
                                                  unsigned int chunks,
                                                  gemv_issue_cursor *cur) {
  const unsigned int tile = blockIdx.x + cur->tile * gridDim.x;
  const gemv_matrix *m = &p.m[gemv_matrix_of<false>(p, tile)];
  const unsigned int g = (threadIdx.x % 32) / 4;
  const unsigned int row = (tile - m->first_tile) * GEMV_TILE;
  cur->v0 = row + g < m->rows;
  cur->v8 = row + g + 8 < m->rows;
  const unsigned long long r0 = cur->v0 ? row + g : 0;
  const unsigned long long r8 = cur->v8 ? row + g + 8 : 0;
  cur->w0 = m->weight + r0 * chunks;
  cur->w8 = m->weight + r8 * chunks;
  cur->s0 = (const unsigned short *)m->scales + r0 * groups;
  cur->b0 = (const unsigned short *)m->biases + r0 * groups;
  cur->s8 = (const unsigned short *)m->scales + r8 * groups;
  cur->b8 = (const unsigned short *)m->biases + r8 * groups;
}

/* Points a kSwiglu cursor at the rows of its tile (of the block's tiles). */
static __device__ __forceinline__ void gemv_point(const gemv_params &p,
                                                  unsigned int, unsigned int,
                                                  gemv_pair_cursor *cur) {
  const unsigned int g = (threadIdx.x % 32) / 4;
  const unsigned int row = (blockIdx.x + cur->tile * gridDim.x) * GEMV_TILE;
  cur->v0 = row + g < p.m[0].rows;
  cur->v8 = row + g + 8 < p.m[0].rows;
  cur->r0 = cur->v0 ? row + g : 0;
  cur->r8 = cur->v8 ? row + g + 8 : 0;
}

/* Issues the loads of the cursor's item into st (nothing past the last
 * item) and moves the cursor on. */
template <unsigned int kWarps>
static __device__ __forceinline__ void
gemv_issue(const gemv_params &p, unsigned int items, unsigned int my_steps,
           unsigned int groups, unsigned int chunks, gemv_issue_cursor *cur,
           gemv_stage *st) {
  if (cur->n >= items) {
    return;
  }
  const unsigned int warp = threadIdx.x / 32, t = threadIdx.x % 4;
  const unsigned int c = (warp + cur->step * kWarps) * 4 + t;
  const bool in = c < chunks;
  const unsigned int group = c >> p.group_shift;
  st->q0 = in && cur->v0 ? load_streamed(cur->w0 + c) : make_uint4(0, 0, 0, 0);
  st->q8 = in && cur->v8 ? load_streamed(cur->w8 + c) : make_uint4(0, 0, 0, 0);
  st->s0 = in && cur->v0 ? __ldg(cur->s0 + group) : 0;
  st->b0 = in && cur->v0 ? __ldg(cur->b0 + group) : 0;
  st->s8 = in && cur->v8 ? __ldg(cur->s8 + group) : 0;
  st->b8 = in && cur->v8 ? __ldg(cur->b8 + group) : 0;
  cur->n++;
  if (++cur->step == my_steps && cur->n < items) {
    cur->step = 0;
    cur->tile++;
    gemv_point(p, groups, chunks, cur);
  }
}

/* Lane (g, t)'s chunk c of rows r0 and r8 of m with their scales and biases
 * (zero where v0, v8 are false). */
static __device__ __forceinline__ void
gemv_load_rows(const gemv_matrix &m, unsigned int chunks, unsigned int groups,
               unsigned int c, unsigned int group, unsigned int r0,
               unsigned int r8, bool v0, bool v8, gemv_stage *st) {
  const unsigned long long o0 = (unsigned long long)r0 * chunks + c;
  const unsigned long long o8 = (unsigned long long)r8 * chunks + c;
  const unsigned long long g0 = (unsigned long long)r0 * groups + group;
  const unsigned long long g8 = (unsigned long long)r8 * groups + group;
  st->q0 = v0 ? load_streamed(m.weight + o0) : make_uint4(0, 0, 0, 0);
  st->q8 = v8 ? load_streamed(m.weight + o8) : make_uint4(0, 0, 0, 0);
  st->s0 = v0 ? __ldg((const unsigned short *)m.scales + g0) : 0;
  st->b0 = v0 ? __ldg((const unsigned short *)m.biases + g0) : 0;
  st->s8 = v8 ? __ldg((const unsigned short *)m.scales + g8) : 0;
  st->b8 = v8 ? __ldg((const unsigned short *)m.biases + g8) : 0;
}

/* The same for a kSwiglu warp: the item's chunk in the gate and the up
 * matrix. */
template <unsigned int kWarps>
static __device__ __forceinline__ void
gemv_issue(const gemv_params &p, unsigned int items, unsigned int my_steps,
           unsigned int groups, unsigned int chunks, gemv_pair_cursor *cur,
           gemv_pair_stage *st) {
  if (cur->n >= items) {
    return;
  }
  const unsigned int warp = threadIdx.x / 32, t = threadIdx.x % 4;
  const unsigned int c = (warp + cur->step * kWarps) * 4 + t;
  const bool in = c < chunks;
  const unsigned int group = c >> p.group_shift;
  gemv_load_rows(p.m[0], chunks, groups, c, group, cur->r0, cur->r8,
                 in && cur->v0, in && cur->v8, &st->gate);
  gemv_load_rows(p.m[1], chunks, groups, c, group, cur->r0, cur->r8,
                 in && cur->v0, in && cur->v8, &st->up);
  cur->n++;
  if (++cur->step == my_steps && cur->n < items) {
    cur->step = 0;
    cur->tile++;
    gemv_point(p, groups, chunks, cur);
  }
}

/* Where a warp's computation is (item n, at step of tile, as the issue
 * cursor), and its lane's sums of rows g and g + 8 so far. */
typedef struct gemv_compute_cursor {
  unsigned int n, step, tile;
  float acc0, acc8;
} gemv_compute_cursor;

/* The same for a kSwiglu warp: the sums of the gate's rows (acc0, acc8) and
 * of the up matrix's (up0, up8). */
typedef struct gemv_pair_compute_cursor {
  unsigned int n, step, tile;
  float acc0, acc8, up0, up8;
} gemv_pair_compute_cursor;

/* Where lane (g, t) of warp `warp` finds x for its chunk of column step
 * `step` (of kWarps warps' steps): the chunk (0 past the last, whose
 * weights are zero), whether the lane feeds B (g / 2 == t) and its B
 * fragments in shared memory. */
typedef struct gemv_x_place {
  unsigned int chunk;
  bool feeds_b;
  const uint4 *b;
} gemv_x_place;

template <unsigned int kWarps>
static __device__ __forceinline__ gemv_x_place gemv_x_at(const __half *xs,
                                                         unsigned int chunks,
                                                         unsigned int warp,
                                                         unsigned int step) {
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int g = lane / 4, t = lane % 4;
  const unsigned int c = (warp + step * kWarps) * 4 + t;
  gemv_x_place x;
  x.chunk = c < chunks ? c : 0;
  x.feeds_b = g / 2 == t;
  x.b = (const uint4 *)(xs + (x.chunk * 2 + g % 2) * 32);
  return x;
}

/* Word j's 8 mmas of rows g (w0) and g + 8 (w8) against B fragments b:
 * the even ones into d, the odd ones into e. */
static __device__ __forceinline__ void
gemv_word_mmas(float d[4], float e[4], uint32_t w0, uint32_t w8, uint4 b) {
  uint32_t r0[4], r8[4];
  word_pairs(w0, r0);
  word_pairs(w8, r8);
  mma_16816(d, r0[0], r8[0], r0[1], r8[1], b.x, b.y);
  mma_16816(e, r0[2], r8[2], r0[3], r8[3], b.z, b.w);
}

/* The chunk's dot products of rows g and g + 8 (hi + lo) added into acc0
 * and acc8 with their scales and biases: s dot 2^-e + b sum(x), with the
 * chunk's staging (x.x the sum of x, x.y 2^-e). */
static __device__ __forceinline__ void
gemv_accumulate(const gemv_stage &st, const float d[4], const float e[4],
                float2 x, bool bf16, float *acc0, float *acc8) {
  const float dot0 = (d[0] + e[0]) + (d[1] + e[1]); /* row g: hi + lo */
  const float dot8 = (d[2] + e[2]) + (d[3] + e[3]); /* row g + 8 */
  *acc0 = fmaf(fdy_half_bits(st.s0, bf16), dot0 * x.y, *acc0);
  *acc0 = fmaf(fdy_half_bits(st.b0, bf16), x.x, *acc0);
  *acc8 = fmaf(fdy_half_bits(st.s8, bf16), dot8 * x.y, *acc8);
  *acc8 = fmaf(fdy_half_bits(st.b8, bf16), x.x, *acc8);
}

/* Adds the item at the cursor into its sums; at the warp's last step of a
 * tile, sums the quad's lanes and leaves the warp's row sums in partial. */
template <unsigned int kWarps>
static __device__ __forceinline__ void
gemv_compute(const __half *xs, const float2 *xchunk, unsigned int chunks,
             bool bf16, unsigned int items, unsigned int my_steps,
             const gemv_stage *st, gemv_compute_cursor *cur, float *partial) {
  if (cur->n >= items) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int g = lane / 4, t = lane % 4;
  const gemv_x_place x = gemv_x_at<kWarps>(xs, chunks, warp, cur->step);
  /* the even mmas into d, the odd ones into e: two dependent chains of 4
   * (docs/tuning-log.md, entry 30) */
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t w0[4] = {st->q0.x, st->q0.y, st->q0.z, st->q0.w};
  const uint32_t w8[4] = {st->q8.x, st->q8.y, st->q8.z, st->q8.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    gemv_word_mmas(d, e, w0[j], w8[j],
                   x.feeds_b ? x.b[j] : make_uint4(0, 0, 0, 0));
  }
  gemv_accumulate(*st, d, e, xchunk[x.chunk], bf16, &cur->acc0, &cur->acc8);
  cur->n++;
  if (++cur->step < my_steps) {
    return;
  }
  float v0 = cur->acc0, v8 = cur->acc8;
  v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
  v8 += __shfl_xor_sync(0xffffffffu, v8, 1);
  v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
  v8 += __shfl_xor_sync(0xffffffffu, v8, 2);
  if (t == 0) {
    float *slot = partial + (cur->tile * kWarps + warp) * GEMV_TILE;
    slot[g] = v0;
    slot[g + 8] = v8;
  }
  cur->acc0 = 0.0f;
  cur->acc8 = 0.0f;
  cur->step = 0;
  cur->tile++;
}

/* The same for a kSwiglu warp: one set of B fragments and one sum of x for
 * the chunks of both matrices, each matrix's sums in the order of a
 * separate item of it (bitwise the same); at the warp's last step of a
 * tile, leaves the gate's row sums in partial's (tile, 0) slots and the up
 * matrix's in its (tile, 1) slots. */
template <unsigned int kWarps>
static __device__ __forceinline__ void
gemv_compute(const __half *xs, const float2 *xchunk, unsigned int chunks,
             bool bf16, unsigned int items, unsigned int my_steps,
             const gemv_pair_stage *st, gemv_pair_compute_cursor *cur,
             float *partial) {
  if (cur->n >= items) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int g = lane / 4, t = lane % 4;
  const gemv_x_place x = gemv_x_at<kWarps>(xs, chunks, warp, cur->step);
  /* per matrix, the even mmas into d, the odd ones into e: four dependent
   * chains of 4 */
  float dg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, eg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float du[4] = {0.0f, 0.0f, 0.0f, 0.0f}, eu[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t g0[4] = {st->gate.q0.x, st->gate.q0.y, st->gate.q0.z,
                          st->gate.q0.w};
  const uint32_t g8[4] = {st->gate.q8.x, st->gate.q8.y, st->gate.q8.z,
                          st->gate.q8.w};
  const uint32_t u0[4] = {st->up.q0.x, st->up.q0.y, st->up.q0.z, st->up.q0.w};
  const uint32_t u8[4] = {st->up.q8.x, st->up.q8.y, st->up.q8.z, st->up.q8.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const uint4 b = x.feeds_b ? x.b[j] : make_uint4(0, 0, 0, 0);
    gemv_word_mmas(dg, eg, g0[j], g8[j], b);
    gemv_word_mmas(du, eu, u0[j], u8[j], b);
  }
  const float2 staged = xchunk[x.chunk];
  gemv_accumulate(st->gate, dg, eg, staged, bf16, &cur->acc0, &cur->acc8);
  gemv_accumulate(st->up, du, eu, staged, bf16, &cur->up0, &cur->up8);
  cur->n++;
  if (++cur->step < my_steps) {
    return;
  }
  float v[4] = {cur->acc0, cur->acc8, cur->up0, cur->up8};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] += __shfl_xor_sync(0xffffffffu, v[i], 1);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] += __shfl_xor_sync(0xffffffffu, v[i], 2);
  }
  if (t == 0) {
    float *gate = partial + ((cur->tile * 2) * kWarps + warp) * GEMV_TILE;
    float *up = partial + ((cur->tile * 2 + 1) * kWarps + warp) * GEMV_TILE;
    gate[g] = v[0];
    gate[g + 8] = v[1];
    up[g] = v[2];
    up[g + 8] = v[3];
  }
  cur->acc0 = 0.0f;
  cur->acc8 = 0.0f;
  cur->up0 = 0.0f;
  cur->up8 = 0.0f;
  cur->step = 0;
  cur->tile++;
}

/* x of one launch as a block of kThreads reads it: thread i holds the
 * quads (4 inputs) i, i + kThreads, ... below GEMV_HELD_QUADS, all loaded at
 * once (one round trip), with the norm weights of those inputs (kNorm, raw
 * halves); quads past GEMV_HELD_QUADS (over 8192 inputs) are read again
 * when used. */
template <unsigned int kThreads> struct gemv_x {
  static constexpr int count = GEMV_HELD_QUADS / kThreads;
  float4 v[count];
  uint2 norm[count];
};

static __device__ __forceinline__ float4 quad_at(const float *x,
                                                 unsigned int k4) {
  return __ldg((const float4 *)x + k4);
}

static __device__ __forceinline__ uint2 norm_quad_at(const gemv_params &p,
                                                     unsigned int k4) {
  return __ldg((const uint2 *)p.norm + k4);
}

static __device__ __forceinline__ float norm_half(uint2 raw, int i, bool bf16) {
  const uint32_t word = i < 2 ? raw.x : raw.y;
  return fdy_half_bits((unsigned short)(i % 2 ? word >> 16 : word & 0xffffu),
                       bf16);
}

/* 2^e as a float for e in [-126, 127]. */
static __device__ __forceinline__ float power_of_two(int e) {
  return __int_as_float((e + 127) << 23);
}

/* One quad of x into shared memory, times the norm weights (kNorm: the
 * RMSNorm's 1 / rms multiplies the output rows instead), times 2^e of its
 * chunk as F16 hi and lo in B-fragment order, and the chunk's (sum of x
 * before the scaling, 2^-e), by butterflies over the 8 lanes that hold the
 * chunk: 2^e puts the chunk's largest |x| in [2^14, 2^15) (none for 0, inf
 * or NaN). kNorm: the quad's squares (of x) are added into squares in
 * element order. Element p of a chunk (p = 8 j + r) belongs to mma m = 2 j
 * + (r / 2) % 2 at slot (r / 4) % 2 + 2 (r % 2) of its 4 halves. Called by
 * whole warps (valid false: a lane past the last quad). */
template <bool kNorm>
static __device__ __forceinline__ void
gemv_stage_quad(const gemv_params &p, unsigned int k4, bool valid, float4 u,
                uint2 norm, __half *xs, float2 *xchunk, float *squares) {
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (valid) {
    v[0] = u.x;
    v[1] = u.y;
    v[2] = u.z;
    v[3] = u.w;
    if (kNorm) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        *squares = fmaf(v[i], v[i], *squares);
        v[i] *= norm_half(norm, i, p.norm_bf16);
      }
    }
  }
  float s = (v[0] + v[1]) + (v[2] + v[3]);
  float largest =
      fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int offset = 1; offset < 8; offset *= 2) {
    s += __shfl_xor_sync(0xffffffffu, s, offset);
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  }
  if (!valid) {
    return;
  }
  int e = 0;
  if (largest > 0.0f && largest <= 3.4e38f) {
    int exponent = 0;
    frexpf(largest, &exponent); /* largest = f 2^exponent, f in [0.5, 1) */
    e = min(126, max(-126, 15 - exponent));
  }
  const float scale = power_of_two(e);
  const unsigned int c = k4 / 8;
  if (k4 % 8 == 0) {
    xchunk[c] = make_float2(s, power_of_two(-e));
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const unsigned int pos = (k4 % 8) * 4 + i; /* in the chunk */
    const unsigned int r = pos % 8;
    const unsigned int m = (pos / 8) * 2 + (r / 2) % 2;
    const unsigned int slot = (r / 4) % 2 + 2 * (r % 2);
    const float scaled = v[i] * scale;
    const __half hi = __float2half_rn(scaled);
    const __half lo = __float2half_rn(scaled - __half2float(hi));
    xs[((c * 2) * 8 + m) * 4 + slot] = hi;
    xs[((c * 2 + 1) * 8 + m) * 4 + slot] = lo;
  }
}

/* Output o of a block (tile o / GEMV_TILE of its tiles, row o % GEMV_TILE
 * of the tile): its matrix j and row, false past the block's tiles or the
 * matrix's rows. */
template <bool kSwiglu>
static __device__ __forceinline__ bool
gemv_output_row(const gemv_params &p, unsigned int o, unsigned int tiles,
                unsigned int *j, unsigned int *row) {
  if (o >= tiles * GEMV_TILE) {
    return false;
  }
  const unsigned int tile = blockIdx.x + (o / GEMV_TILE) * gridDim.x;
  *j = gemv_matrix_of<kSwiglu>(p, tile);
  *row = (tile - p.m[*j].first_tile) * GEMV_TILE + o % GEMV_TILE;
  return *row < p.m[*j].rows;
}

/* Before fdy_grid_wait (only weights): the cursor at the warp's first
 * item and the loads of its first stages issued, three (st0, st1, st2), or
 * two for kSwiglu (items of both matrices: three would spill). */
template <bool kSwiglu, unsigned int kWarps, typename Cursor, typename Stage>
static __device__ __forceinline__ void
gemv_issue_first(const gemv_params &p, unsigned int items,
                 unsigned int my_steps, unsigned int groups,
                 unsigned int chunks, Cursor *ic, Stage *st0, Stage *st1,
                 Stage *st2) {
  ic->n = 0;
  ic->step = 0;
  ic->tile = 0;
  if (items > 0) {
    gemv_point(p, groups, chunks, ic);
  }
  gemv_issue<kWarps>(p, items, my_steps, groups, chunks, ic, st0);
  gemv_issue<kWarps>(p, items, my_steps, groups, chunks, ic, st1);
  if (!kSwiglu) {
    gemv_issue<kWarps>(p, items, my_steps, groups, chunks, ic, st2);
  }
}

/* The norm weights of the quads the thread holds (kNorm; zeros else and
 * past the quads of x), before fdy_grid_wait. */
template <bool kNorm, unsigned int kThreads>
static __device__ __forceinline__ void gemv_hold_norm(const gemv_params &p,
                                                      unsigned int quads,
                                                      gemv_x<kThreads> *held) {
#pragma unroll
  for (int i = 0; i < gemv_x<kThreads>::count; i++) {
    const unsigned int k4 = threadIdx.x + i * kThreads;
    held->norm[i] =
        kNorm && k4 < quads ? norm_quad_at(p, k4) : make_uint2(0u, 0u);
  }
}

/* The quads of x the thread holds (zeros past the quads of x), all loaded
 * at once, after fdy_grid_wait. */
template <unsigned int kThreads>
static __device__ __forceinline__ void
gemv_hold_x(const float *x, unsigned int quads, gemv_x<kThreads> *held) {
#pragma unroll
  for (int i = 0; i < gemv_x<kThreads>::count; i++) {
    const unsigned int k4 = threadIdx.x + i * kThreads;
    held->v[i] =
        k4 < quads ? quad_at(x, k4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

/* kResidual: the residual of the thread's first output row, asked for
 * with x (one trip to L2 after the wait, not another after the sums);
 * 0 else. */
template <bool kSwiglu, bool kResidual>
static __device__ __forceinline__ float
gemv_first_residual(const gemv_params &p, unsigned int tiles) {
  float first_residual = 0.0f;
  unsigned int j = 0, row = 0;
  if (kResidual && gemv_output_row<kSwiglu>(p, threadIdx.x, tiles, &j, &row)) {
    first_residual = p.residual[row];
  }
  return first_residual;
}

/* x staged chunk by chunk (gemv_stage_quad, whole warps: the held quads,
 * then those past GEMV_HELD_QUADS read now); kNorm: the thread's squares
 * in an order fixed by the width, summed over the warp into
 * warp_squares[warp] (the block total is read after the items). lane
 * and warp: the thread's, from the kernel. */
template <bool kNorm, unsigned int kThreads>
static __device__ __forceinline__ void
gemv_stage_x(const gemv_params &p, const float *x, unsigned int quads,
             const gemv_x<kThreads> *held, __half *xs, float2 *xchunk,
             float *warp_squares, unsigned int lane, unsigned int warp) {
  constexpr int kHeld = gemv_x<kThreads>::count;
  float squares = 0.0f;
  const unsigned int warp_base = threadIdx.x - lane;
#pragma unroll
  for (int i = 0; i < kHeld; i++) {
    const unsigned int k4 = warp_base + i * kThreads + lane;
    if (warp_base + i * kThreads < quads) { /* the whole warp */
      gemv_stage_quad<kNorm>(p, k4, k4 < quads, held->v[i], held->norm[i], xs,
                             xchunk, &squares);
    }
  }
  for (unsigned int base = warp_base + kHeld * kThreads; base < quads;
       base += kThreads) {
    const unsigned int k4 = base + lane;
    const bool valid = k4 < quads;
    gemv_stage_quad<kNorm>(
        p, k4, valid,
        valid ? quad_at(x, k4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f),
        kNorm && valid ? norm_quad_at(p, k4) : make_uint2(0u, 0u), xs, xchunk,
        &squares);
  }
  if (kNorm) {
    squares = fdy_warp_sum(squares);
    if (lane == 0) {
      warp_squares[warp] = squares;
    }
  }
}

/* The block's output rows: each row's warp sums (of the warps_used warps
 * that had column steps) added in warp order, per matrix half, times
 * 1 / rms (kNorm: the warps' squares added in warp order, over the `in`
 * inputs, plus eps), then the epilogue (kSwiglu: silu(gate) * up; kResidual:
 * the residual plus the sum, the thread's first row's from first_residual). */
template <bool kNorm, bool kSwiglu, bool kResidual, unsigned int kWarps>
static __device__ __forceinline__ void
gemv_write_rows(const gemv_params &p, unsigned int in, unsigned int steps,
                unsigned int tiles, const float *partial,
                const float *warp_squares, float first_residual) {
  const unsigned int halves = kSwiglu ? 2 : 1;
  const unsigned int warps_used = steps < kWarps ? steps : kWarps;
  float inv = 1.0f;
  if (kNorm) {
    float total_squares = 0.0f;
    for (unsigned int w = 0; w < kWarps; w++) {
      total_squares += warp_squares[w];
    }
    inv = (float)(1.0 / sqrt((double)total_squares / in + p.eps));
  }
  for (unsigned int o = threadIdx.x; o < tiles * GEMV_TILE; o += blockDim.x) {
    unsigned int j = 0, row = 0;
    if (!gemv_output_row<kSwiglu>(p, o, tiles, &j, &row)) {
      continue;
    }
    const unsigned int i = o / GEMV_TILE, r = o % GEMV_TILE;
    float sum[2] = {0.0f, 0.0f};
    for (unsigned int h = 0; h < halves; h++) {
      const float *slot = partial + ((i * halves + h) * kWarps) * GEMV_TILE;
      for (unsigned int w = 0; w < warps_used; w++) {
        sum[h] += slot[w * GEMV_TILE + r];
      }
    }
    if (kNorm) {
      sum[0] *= inv;
      sum[1] *= inv;
    }
    float y = sum[0];
    if (kSwiglu) {
      y = sum[0] / (1.0f + expf(-sum[0])) * sum[1];
    } else if (kResidual) {
      y = (o == threadIdx.x ? first_residual : p.residual[row]) + sum[0];
    }
    p.m[j].y[row] = y;
  }
}

/* The matrix-vector kernel (the top of the file): the first stages' weight
 * loads issued and the norm weights held before the wait, then x held,
 * staged in shared memory, the items (a stage computed, then its next
 * loads issued) and the output rows. */
template <bool kNorm, bool kSwiglu, bool kResidual, unsigned int kWarps>
__global__ void __launch_bounds__(kWarps * 32, GEMV_WIDE_WARPS / kWarps)
    gemv_q4_kernel(const int32_t *step, const float *x, gemv_params p) {
  extern __shared__ __align__(16) unsigned char gemv_shared[];
  __shared__ float warp_squares[kWarps];
  constexpr unsigned int kThreads = kWarps * 32;
  fdy_grid_launch_dependents();
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int in = p.in;
  const unsigned int chunks = in / 32;
  const unsigned int groups = chunks >> p.group_shift;
  const unsigned int steps = (in + GEMV_STEP - 1) / GEMV_STEP;
  const unsigned int tiles =
      blockIdx.x < p.tiles ? (p.tiles - blockIdx.x - 1) / gridDim.x + 1 : 0;
  const unsigned int my_steps = warp_steps<kWarps>(steps, warp);
  const unsigned int items = tiles * my_steps; /* kSwiglu: both matrices */
  __half *xs = (__half *)gemv_shared;
  float2 *xchunk = (float2 *)(gemv_shared + (size_t)chunks * 128);
  float *partial = (float *)(xchunk + chunks);

  typedef typename std::conditional<kSwiglu, gemv_pair_cursor,
                                    gemv_issue_cursor>::type issue_cursor;
  typedef typename std::conditional<kSwiglu, gemv_pair_stage, gemv_stage>::type
      stage;
  typedef typename std::conditional<kSwiglu, gemv_pair_compute_cursor,
                                    gemv_compute_cursor>::type compute_cursor;
  issue_cursor ic;
  stage st0, st1, st2;
  gemv_issue_first<kSwiglu, kWarps>(p, items, my_steps, groups, chunks, &ic,
                                    &st0, &st1, &st2);
  const unsigned int quads = in / 4; /* a multiple of 8 */
  gemv_x<kThreads> held;
  gemv_hold_norm<kNorm>(p, quads, &held);
  fdy_grid_wait();
  gemv_hold_x(x, quads, &held);
  const float first_residual =
      gemv_first_residual<kSwiglu, kResidual>(p, tiles);
  gemv_stage_x<kNorm>(p, x, quads, &held, xs, xchunk, warp_squares, lane, warp);
  __syncthreads();

  /* the items: each stage's computed, then its next loads issued */
  compute_cursor cc = {};
  for (unsigned int n = 0; n < items; n += kSwiglu ? 2 : 3) {
    gemv_compute<kWarps>(xs, xchunk, chunks, p.bf16, items, my_steps, &st0, &cc,
                         partial);
    gemv_issue<kWarps>(p, items, my_steps, groups, chunks, &ic, &st0);
    gemv_compute<kWarps>(xs, xchunk, chunks, p.bf16, items, my_steps, &st1, &cc,
                         partial);
    gemv_issue<kWarps>(p, items, my_steps, groups, chunks, &ic, &st1);
    if (!kSwiglu) {
      gemv_compute<kWarps>(xs, xchunk, chunks, p.bf16, items, my_steps, &st2,
                           &cc, partial);
      gemv_issue<kWarps>(p, items, my_steps, groups, chunks, &ic, &st2);
    }
  }
  __syncthreads();
  gemv_write_rows<kNorm, kSwiglu, kResidual, kWarps>(
      p, in, steps, tiles, partial, warp_squares, first_residual);
}

/* ---- host side ------------------------------------------------------------
 */

/* Dynamic shared memory of a one-row launch over `in` inputs with up to
 * `tiles` tiles of `halves` matrices per block of `warps` warps: x as F16
 * hi and lo (4 bytes an input), a chunk's sum of x and 2^-e (two floats), the
 * warps' row sums. */
static uint64_t gemv_shared_bytes(uint64_t in, uint64_t tiles, uint64_t halves,
                                  uint64_t warps) {
  return in * 4 + in / 32 * 2 * sizeof(float) +
         tiles * halves * warps * GEMV_TILE * sizeof(float);
}

static uint64_t tiles_of(uint64_t rows) {
  return (rows + GEMV_TILE - 1) / GEMV_TILE;
}

/* Warps of a block of a launch over `tiles` tiles of `halves` matrices,
 * from the shape alone (it fixes the order of the sums): up to
 * GEMV_WIDE_TILES tile halves, one block of GEMV_WIDE_WARPS per
 * multiprocessor, which stages x once per SM and gives each warp half the
 * column steps; above, two blocks of GEMV_NARROW_WARPS. Measured in the
 * llama decode graph (docs/tuning-log.md, entry 39): wide blocks gain on
 * q/k/v (320), o and down (192) and lose on gate/up + SwiGLU (1024) and
 * the LM head (8016). */
static unsigned int gemv_warps(uint64_t tiles, uint64_t halves) {
  return tiles * halves <= GEMV_WIDE_TILES ? GEMV_WIDE_WARPS
                                           : GEMV_NARROW_WARPS;
}

/* The tiles of a one-row launch of op (kSwiglu: of the gate). */
static uint64_t gemv_op_tiles(const fdy_op *op) {
  switch (op->kind) {
  case FDY_OP_NORM_MATMUL_Q4: {
    uint64_t tiles = 0;
    for (uint32_t j = 0; j < op->output_count; j++) {
      tiles += tiles_of(op->inputs[3 + 3 * j].shape.dims[0]);
    }
    return tiles;
  }
  case FDY_OP_NORM_SWIGLU_Q4:
    return tiles_of(op->inputs[3].shape.dims[0]);
  default:
    return tiles_of(op->inputs[2].shape.dims[0]);
  }
}

extern "C" uint64_t fdy_cuda_matmul_q4_shared_bytes(const fdy_op *op) {
  if (op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_shared_bytes(op);
  }
  const uint64_t halves = op->kind == FDY_OP_NORM_SWIGLU_Q4 ? 2 : 1;
  const uint64_t tiles = gemv_op_tiles(op);
  return gemv_shared_bytes(op->inputs[1].shape.dims[1],
                           tiles < GEMV_MAX_TILES ? tiles : GEMV_MAX_TILES,
                           halves, gemv_warps(tiles, halves));
}

/* The GEMV instances the backend launches: plain, norm prologue, norm with
 * SwiGLU, residual epilogue, each with narrow and wide blocks. */
static const void *const gemv_kernels[] = {
    (const void *)gemv_q4_kernel<false, false, false, GEMV_NARROW_WARPS>,
    (const void *)gemv_q4_kernel<true, false, false, GEMV_NARROW_WARPS>,
    (const void *)gemv_q4_kernel<true, true, false, GEMV_NARROW_WARPS>,
    (const void *)gemv_q4_kernel<false, false, true, GEMV_NARROW_WARPS>,
    (const void *)gemv_q4_kernel<false, false, false, GEMV_WIDE_WARPS>,
    (const void *)gemv_q4_kernel<true, false, false, GEMV_WIDE_WARPS>,
    (const void *)gemv_q4_kernel<true, true, false, GEMV_WIDE_WARPS>,
    (const void *)gemv_q4_kernel<false, false, true, GEMV_WIDE_WARPS>,
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

/* Matrix j of a launch from the weight at input w of the op of a; its
 * tiles start at first_tile. */
static gemv_matrix gemv_matrix_at(const fdy_cuda_op_args *a, uint32_t w,
                                  void *y, unsigned int first_tile) {
  gemv_matrix m;
  m.weight = (const uint4 *)a->in[w];
  m.scales = (const uint16_t *)a->in[w + 1];
  m.biases = (const uint16_t *)a->in[w + 2];
  m.y = (float *)y;
  m.rows = (unsigned int)a->op->inputs[w].shape.dims[0];
  m.first_tile = first_tile;
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

/* A launch of the GEMV over p.tiles tiles in blocks of kWarps warps:
 * GEMV_WIDE_WARPS / kWarps blocks per multiprocessor (fewer when there are
 * fewer tiles, more when a block would take more than GEMV_MAX_TILES); the
 * results do not depend on the grid. */
template <bool kNorm, bool kSwiglu, bool kResidual, unsigned int kWarps>
static cudaError_t launch_gemv_warps(const fdy_cuda_op_args *a,
                                     const gemv_params &p,
                                     cudaStream_t stream) {
  unsigned long long blocks =
      (unsigned long long)a->sm_count * (GEMV_WIDE_WARPS / kWarps);
  if (blocks > p.tiles) {
    blocks = p.tiles;
  }
  const unsigned long long fewest =
      (p.tiles + GEMV_MAX_TILES - 1) / GEMV_MAX_TILES;
  if (blocks < fewest) {
    blocks = fewest;
  }
  const unsigned long long per_block = (p.tiles + blocks - 1) / blocks;
  const size_t shared =
      (size_t)gemv_shared_bytes(p.in, per_block, kSwiglu ? 2 : 1, kWarps);
  return fdy_launch(a->dependent,
                    gemv_q4_kernel<kNorm, kSwiglu, kResidual, kWarps>,
                    (unsigned int)blocks, kWarps * 32, shared, stream,
                    (const int32_t *)a->in[0], (const float *)a->in[1], p);
}

/* The launch of p with the blocks gemv_warps gives its shape. */
template <bool kNorm, bool kSwiglu, bool kResidual>
static cudaError_t launch_gemv(const fdy_cuda_op_args *a, const gemv_params &p,
                               cudaStream_t stream) {
  if (gemv_warps(p.tiles, kSwiglu ? 2 : 1) == GEMV_WIDE_WARPS) {
    return launch_gemv_warps<kNorm, kSwiglu, kResidual, GEMV_WIDE_WARPS>(
        a, p, stream);
  }
  return launch_gemv_warps<kNorm, kSwiglu, kResidual, GEMV_NARROW_WARPS>(
      a, p, stream);
}

extern "C" cudaError_t fdy_cuda_fused_q4_enqueue(const fdy_cuda_op_args *a,
                                                 cudaStream_t stream) {
  const fdy_op *op = a->op;
  if (op->inputs[1].shape.dims[0] != 1) {
    return fdy_cuda_matmul_q4_mma_enqueue(a, stream);
  }
  switch (op->kind) {
  case FDY_OP_NORM_MATMUL_Q4: {
    gemv_params p = gemv_params_of(a, 3);
    p.count = op->output_count;
    for (uint32_t j = 0; j < op->output_count; j++) {
      p.m[j] = gemv_matrix_at(a, 3 + 3 * j, a->outputs[j], p.tiles);
      p.tiles += tiles_of(p.m[j].rows);
    }
    p.norm = (const uint16_t *)a->in[2];
    p.norm_bf16 = op->inputs[2].dtype == FDY_DTYPE_BF16;
    p.eps = op->params.rmsnorm.eps;
    return launch_gemv<true, false, false>(a, p, stream);
  }
  case FDY_OP_NORM_SWIGLU_Q4: {
    gemv_params p = gemv_params_of(a, 3);
    p.count = 2;
    p.m[0] = gemv_matrix_at(a, 3, a->out, 0);
    p.m[1] = gemv_matrix_at(a, 6, a->out, 0);
    p.tiles = tiles_of(p.m[0].rows);
    p.norm = (const uint16_t *)a->in[2];
    p.norm_bf16 = op->inputs[2].dtype == FDY_DTYPE_BF16;
    p.eps = op->params.rmsnorm.eps;
    return launch_gemv<true, true, false>(a, p, stream);
  }
  case FDY_OP_MATMUL_ADD_Q4: {
    gemv_params p = gemv_params_of(a, 2);
    p.count = 1;
    p.m[0] = gemv_matrix_at(a, 2, a->out, 0);
    p.tiles = tiles_of(p.m[0].rows);
    p.residual = (const float *)a->in[5];
    return launch_gemv<false, false, true>(a, p, stream);
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
  p.m[0] = gemv_matrix_at(a, 2, a->out, 0);
  p.tiles = tiles_of(p.m[0].rows);
  return launch_gemv<false, false, false>(a, p, stream);
}
