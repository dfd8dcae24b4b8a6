/* NORM_MLP_Q4, a Llama layer's whole MLP in one op:
 *   y = x + SWIGLU(n W_gate^T, n W_up^T) W_down^T,  n = RMSNORM(x, norm),
 * for one row (the decode step), x of I inputs, F intermediate features,
 * MLX 4-bit weights (group 64, F16 scales). Not in src: the backend runs
 * the pair NORM_SWIGLU_Q4 + MATMUL_ADD_Q4 (two kernels).
 *
 * Versions:
 *   1  three plain kernels (1 / rms; a warp a gate/up row; a warp a down
 *      row with the residual): the lab's GPU baseline, no tensor cores.
 *   2  branch `mlp-tma` (docs/tuning-log.md entry 54's slab kernel with
 *      its down columns by TMA tensor copies; never measured: the session
 *      that built it got no device, and entry 57's ring superseded the
 *      slab design). Block b owns 64 features: it computes their h with
 *      the GEMV's tensor-core items (gemv_q4.cuh) while one thread's 3 x 12
 *      tensor copies bring the same 64 columns of W_down (32 bytes of each
 *      of the I rows, with the aligned 8 scales and biases that hold the
 *      slab's) into shared memory on an mbarrier, then multiplies h by
 *      them: partial[b][r]; mlp_reduce_kernel adds the 128 partials to x
 *      in a fixed order. Entry 54's cp.async version of the same kernel
 *      measured 27.07 us in a chain of 20 against 11.85 + 9.03 for the
 *      pair (its copies issued 12,288 L1 wavefronts a block); the tensor
 *      copies were to remove those. Recovered from the diffs
 *      call77/mlp-cuda.diff and mlp-tma.diff of the deleted docs/results:
 *      the kernel's code is the branch's, less the step tensor.
 *
 * Build: with the project (CMake builds lab/ when CUDA is found), or
 *   nvcc -O3 -arch=sm_90a -o mlp_q4_tma lab/cuda/mlp_q4_tma.cu
 * Run: mlp_q4_tma [VERSION] [--in I] [--ffn F] [--repeats N]
 * checks every version against the CPU reference (relative error) and
 * times it (median of N launches, each after an L2 flush) against the
 * device-to-device copy rate measured in the same run. */
#include "baseline.cuh"
#include "common.cuh"
#include "gemv_q4.cuh"

#include <cuda.h>

#define MLP_WARPS         16
#define MLP_THREADS       (MLP_WARPS * 32)
#define MLP_SLAB          64 /* features of a block: gate/up rows, down columns */
#define MLP_TILE          16 /* rows of a tile */
#define MLP_GATE_TILES    (MLP_SLAB / MLP_TILE)
#define MLP_TILE_WARPS    (MLP_WARPS / MLP_GATE_TILES) /* warps on a gate tile */
#define MLP_STEP          128  /* inputs of a column step */
#define MLP_BOX_ROWS      256  /* down rows of a tensor copy (TMA box) */
#define MLP_HELD_QUADS    2048 /* quads of x a block holds in registers */
#define MLP_REDUCE_ROWS   32
#define MLP_REDUCE_SLICES 8
#define MLP_REDUCE_HELD   16 /* partials a reduce thread loads at once */
/* The fast path's shared memory bound: the opt-in of the H100 and H200
 * (227 KB), which sm_90 builds target. */
#define MLP_MAX_SHARED (227u * 1024u)

/* A quantized matrix: weight chunks, scales and biases (F16 or BF16). */
typedef struct mlp_matrix {
  const uint4 *weight;
  const uint16_t *scales, *biases;
} mlp_matrix;

/* The fast path's launch: I = in inputs (x's width, down's rows), F = ffn
 * features; gate and up share their group (32 << group_shift) and scale
 * dtype (bf16), down has its own (down_group_shift, down_bf16). partials
 * holds ffn / MLP_SLAB rows of in floats. */
typedef struct mlp_params {
  mlp_matrix gate, up, down;
  const uint16_t *norm;
  bool norm_bf16, bf16, down_bf16;
  unsigned int in, ffn, group_shift, down_group_shift;
  double eps;
  float *partials;
} mlp_params;

/* The block's dynamic shared memory (mlp_shared_bytes), from a 128-byte
 * aligned base: the slab's down columns (row r at 32 r bytes, chunk c at
 * 16 c), per down row the 8 scales and 8 biases of the aligned group of 8
 * that holds the slab's (the tensor copies' boxes), x staged (F16 hi and
 * lo, 4 bytes an input) with its chunks' (sum, 2^-e), the gate/up warps'
 * row sums, h staged alike; every region at a multiple of 16 bytes. */
typedef struct mlp_shared {
  uint4 *down;
  uint16_t *scales, *biases; /* [row][8] */
  __half *xs;
  float2 *xchunk;
  float *sums; /* [tile][tile warp][16 rows][gate, up] */
  __half *hs;
  float2 *hchunk;
} mlp_shared;

static __host__ __device__ unsigned long long mlp_boxes(unsigned int in) {
  return (in + MLP_BOX_ROWS - 1) / MLP_BOX_ROWS;
}

static __device__ unsigned long long mlp_down_tiles(unsigned int in) {
  return (in + MLP_TILE - 1) / MLP_TILE;
}

static __host__ __device__ unsigned long long
mlp_align16(unsigned long long n) {
  return (n + 15) / 16 * 16;
}

static __host__ __device__ unsigned long long
mlp_shared_bytes(unsigned int in) {
  const unsigned long long rows = mlp_boxes(in) * MLP_BOX_ROWS;
  return 128 + rows * 32 + 2 * rows * 16 + (unsigned long long)in * 4 +
         mlp_align16(in / 32 * sizeof(float2)) +
         MLP_GATE_TILES * MLP_TILE_WARPS * MLP_TILE * 2 * sizeof(float) +
         MLP_SLAB * 4 + 2 * sizeof(float2);
}

static __device__ __forceinline__ mlp_shared mlp_shared_at(unsigned char *base,
                                                           unsigned int in) {
  const unsigned long long rows = mlp_boxes(in) * MLP_BOX_ROWS;
  mlp_shared s;
  unsigned char *at =
      (unsigned char *)(((uintptr_t)base + 127) & ~(uintptr_t)127);
  s.down = (uint4 *)at;
  at += rows * 32;
  s.scales = (uint16_t *)at;
  at += rows * 16;
  s.biases = (uint16_t *)at;
  at += rows * 16;
  s.xs = (__half *)at;
  at += (unsigned long long)in * 4;
  s.xchunk = (float2 *)at;
  at += mlp_align16(in / 32 * sizeof(float2));
  s.sums = (float *)at;
  at += MLP_GATE_TILES * MLP_TILE_WARPS * MLP_TILE * 2 * sizeof(float);
  s.hs = (__half *)at;
  at += MLP_SLAB * 4;
  s.hchunk = (float2 *)at;
  return s;
}

/* The element index of down's scale (or bias) of row r for the slab's
 * chunk c: its row holds ffn >> (5 + shift) groups. */
static __device__ __forceinline__ unsigned long long
mlp_down_group_at(const mlp_params &p, unsigned int slab, unsigned int r,
                  unsigned int c) {
  const unsigned int shift = 5 + p.down_group_shift;
  return (unsigned long long)r * (p.ffn >> shift) +
         ((slab * MLP_SLAB + c * 32) >> shift);
}

/* The slab's tensor copies (TMA), issued by one thread: per box of
 * MLP_BOX_ROWS down rows, the rows' 32 bytes of the slab's columns, and
 * their 16 bytes of scales and of biases (the aligned 8 groups that hold
 * the slab's), all completing on *arrived (rows past the matrix: zeros). */
static __device__ __forceinline__ void
mlp_copy_down(const mlp_params &p, unsigned int slab, const mlp_shared &s,
              const CUtensorMap *weights, const CUtensorMap *scales,
              const CUtensorMap *biases, uint64_t *arrived) {
  const unsigned int barrier = (unsigned int)__cvta_generic_to_shared(arrived);
  const unsigned int boxes = (unsigned int)mlp_boxes(p.in);
  const unsigned int bytes = boxes * MLP_BOX_ROWS * (32 + 16 + 16);
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier),
      "r"(bytes)
      : "memory");
  const int column = (int)(slab * 8); /* U32 words of a row */
  const int group = (int)(mlp_down_group_at(p, slab, 0, 0) & ~7ull);
  for (unsigned int b = 0; b < boxes; b++) {
    const int row = (int)(b * MLP_BOX_ROWS);
    const unsigned int dst[3] = {
        (unsigned int)__cvta_generic_to_shared(s.down + row * 2),
        (unsigned int)__cvta_generic_to_shared(s.scales + row * 8),
        (unsigned int)__cvta_generic_to_shared(s.biases + row * 8)};
    const CUtensorMap *maps[3] = {weights, scales, biases};
    const int columns[3] = {column, group, group};
#pragma unroll
    for (int k = 0; k < 3; k++) {
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
          "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst[k]),
          "l"(maps[k]), "r"(columns[k]), "r"(row), "r"(barrier)
          : "memory");
    }
  }
}

/* Waits until the tensor copies' bytes have arrived (phase 0). */
static __device__ __forceinline__ void mlp_wait_copies(uint64_t *arrived) {
  const unsigned int barrier = (unsigned int)__cvta_generic_to_shared(arrived);
  unsigned int done = 0;
  while (!done) {
    asm volatile("{ .reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(barrier)
                 : "memory");
  }
}

/* One gate/up item of lane (g, t): chunk `chunk` of rows r0 = g and r8 =
 * g + 8 of the warp's tile in both matrices. */
typedef struct mlp_pair {
  gemv_stage gate, up;
} mlp_pair;

static __device__ __forceinline__ void mlp_load_pair(const mlp_params &p,
                                                     unsigned int row0,
                                                     unsigned int step,
                                                     mlp_pair *st) {
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned int chunks = p.in / 32, groups = chunks >> p.group_shift;
  const unsigned int c = step * 4 + t;
  const bool in = c < chunks;
  const unsigned int r0 = row0 + g, r8 = row0 + g + 8;
  const unsigned int group = c >> p.group_shift;
  gemv_load_rows(p.gate.weight, p.gate.scales, p.gate.biases, chunks, groups, c,
                 group, r0, r8, in, in, &st->gate);
  gemv_load_rows(p.up.weight, p.up.scales, p.up.biases, chunks, groups, c,
                 group, r0, r8, in, in, &st->up);
}

/* Adds the item of column step `step` into the lane's gate sums (g0, g8)
 * and up sums (u0, u8). */
static __device__ __forceinline__ void
mlp_compute_pair(const mlp_params &p, const mlp_shared &s, unsigned int step,
                 const mlp_pair &st, float *g0, float *g8, float *u0,
                 float *u8) {
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned int chunks = p.in / 32;
  const unsigned int c = step * 4 + t < chunks ? step * 4 + t : 0;
  const bool feeds_b = g / 2 == t;
  const uint4 *b = (const uint4 *)(s.xs + (c * 2 + g % 2) * 32);
  float dg[4] = {0.0f, 0.0f, 0.0f, 0.0f}, eg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float du[4] = {0.0f, 0.0f, 0.0f, 0.0f}, eu[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t gw0[4] = {st.gate.q0.x, st.gate.q0.y, st.gate.q0.z,
                           st.gate.q0.w};
  const uint32_t gw8[4] = {st.gate.q8.x, st.gate.q8.y, st.gate.q8.z,
                           st.gate.q8.w};
  const uint32_t uw0[4] = {st.up.q0.x, st.up.q0.y, st.up.q0.z, st.up.q0.w};
  const uint32_t uw8[4] = {st.up.q8.x, st.up.q8.y, st.up.q8.z, st.up.q8.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const uint4 bj = feeds_b ? b[j] : make_uint4(0, 0, 0, 0);
    gemv_word_mmas(dg, eg, gw0[j], gw8[j], bj);
    gemv_word_mmas(du, eu, uw0[j], uw8[j], bj);
  }
  const float2 staged = s.xchunk[c];
  gemv_accumulate(st.gate, dg, eg, staged, p.bf16, g0, g8);
  gemv_accumulate(st.up, du, eu, staged, p.bf16, u0, u8);
}

/* Down item i of lane (g, t): chunk t % 2 of rows g and g + 8 of tile
 * 2 i + t / 2 from shared memory, times h; returns the lane's sums of its
 * two rows with the other chunk's added (chunk order), in *y0 and *y8. */
static __device__ __forceinline__ void
mlp_down_item(const mlp_params &p, const mlp_shared &s, unsigned int slab,
              unsigned int i, float *y0, float *y8, unsigned int *row) {
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned int c = t % 2;
  const unsigned int tile = 2 * i + t / 2;
  const unsigned int r0 = tile * MLP_TILE + g, r8 = r0 + 8;
  const bool v0 = r0 < p.in, v8 = r8 < p.in;
  gemv_stage st;
  st.q0 = v0 ? s.down[r0 * 2 + c] : make_uint4(0, 0, 0, 0);
  st.q8 = v8 ? s.down[r8 * 2 + c] : make_uint4(0, 0, 0, 0);
  const unsigned int k = (unsigned int)mlp_down_group_at(p, slab, 0, c) % 8;
  st.s0 = v0 ? s.scales[r0 * 8 + k] : 0;
  st.b0 = v0 ? s.biases[r0 * 8 + k] : 0;
  st.s8 = v8 ? s.scales[r8 * 8 + k] : 0;
  st.b8 = v8 ? s.biases[r8 * 8 + k] : 0;
  const bool feeds_b = g / 2 == t;
  const uint4 *b = (const uint4 *)(s.hs + (c * 2 + g % 2) * 32);
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t q0[4] = {st.q0.x, st.q0.y, st.q0.z, st.q0.w};
  const uint32_t q8[4] = {st.q8.x, st.q8.y, st.q8.z, st.q8.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    gemv_word_mmas(d, e, q0[j], q8[j], feeds_b ? b[j] : make_uint4(0, 0, 0, 0));
  }
  float a0 = 0.0f, a8 = 0.0f;
  gemv_accumulate(st, d, e, s.hchunk[c], p.down_bf16, &a0, &a8);
  const float o0 = __shfl_xor_sync(0xffffffffu, a0, 1);
  const float o8 = __shfl_xor_sync(0xffffffffu, a8, 1);
  *y0 = a0 + o0; /* chunk 0's + chunk 1's in either lane (a + b = b + a) */
  *y8 = a8 + o8;
  *row = r0;
}

__global__ void __launch_bounds__(MLP_THREADS, 1)
    mlp_q4_kernel(const float *x, mlp_params p,
                  const __grid_constant__ CUtensorMap down_weights,
                  const __grid_constant__ CUtensorMap down_scales,
                  const __grid_constant__ CUtensorMap down_biases) {
  extern __shared__ __align__(16) unsigned char mlp_dynamic[];
  __shared__ float warp_squares[MLP_WARPS];
  __shared__ __align__(8) uint64_t arrived;
  constexpr int kHeld = MLP_HELD_QUADS / MLP_THREADS;
  grid_launch_dependents();
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int slab = blockIdx.x;
  const mlp_shared s = mlp_shared_at(mlp_dynamic, p.in);

  /* Before the wait, weights only: the slab's down columns into shared
   * memory, this warp's first two gate/up items, the norm weights of the
   * quads of x the thread holds. */
  if (threadIdx.x == 0) {
    const unsigned int barrier =
        (unsigned int)__cvta_generic_to_shared(&arrived);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n"
                 "fence.mbarrier_init.release.cluster;" ::"r"(barrier)
                 : "memory");
    mlp_copy_down(p, slab, s, &down_weights, &down_scales, &down_biases,
                  &arrived);
  }
  const unsigned int tile = warp % MLP_GATE_TILES;
  const unsigned int first_step = warp / MLP_GATE_TILES;
  const unsigned int steps = (p.in + MLP_STEP - 1) / MLP_STEP;
  const unsigned int items =
      steps > first_step
          ? (steps - first_step + MLP_TILE_WARPS - 1) / MLP_TILE_WARPS
          : 0;
  const unsigned int row0 = slab * MLP_SLAB + tile * MLP_TILE;
  mlp_pair st0, st1;
  if (items > 0) {
    mlp_load_pair(p, row0, first_step, &st0);
  }
  if (items > 1) {
    mlp_load_pair(p, row0, first_step + MLP_TILE_WARPS, &st1);
  }
  const unsigned int quads = p.in / 4;
  float4 held[kHeld];
  uint2 held_norm[kHeld];
#pragma unroll
  for (int i = 0; i < kHeld; i++) {
    const unsigned int k4 = threadIdx.x + i * MLP_THREADS;
    held_norm[i] =
        k4 < quads ? __ldg((const uint2 *)p.norm + k4) : make_uint2(0u, 0u);
  }
  grid_wait();
#pragma unroll
  for (int i = 0; i < kHeld; i++) {
    const unsigned int k4 = threadIdx.x + i * MLP_THREADS;
    held[i] = k4 < quads ? __ldg((const float4 *)x + k4)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  /* x normed and staged (the RMSNorm's 1 / rms multiplies the row sums) */
  float squares = 0.0f;
  const unsigned int warp_base = threadIdx.x - lane;
#pragma unroll
  for (int i = 0; i < kHeld; i++) {
    const unsigned int k4 = warp_base + i * MLP_THREADS + lane;
    if (warp_base + i * MLP_THREADS < quads) {
      gemv_stage_quad<true>(p.norm_bf16, k4, k4 < quads, held[i], held_norm[i],
                            s.xs, s.xchunk, &squares);
    }
  }
  for (unsigned int base = warp_base + kHeld * MLP_THREADS; base < quads;
       base += MLP_THREADS) {
    const unsigned int k4 = base + lane;
    const bool valid = k4 < quads;
    gemv_stage_quad<true>(p.norm_bf16, k4, valid,
                          valid ? __ldg((const float4 *)x + k4)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f),
                          valid ? __ldg((const uint2 *)p.norm + k4)
                                : make_uint2(0u, 0u),
                          s.xs, s.xchunk, &squares);
  }
  squares = warp_sum(squares);
  if (lane == 0) {
    warp_squares[warp] = squares;
  }
  __syncthreads();

  /* gate/up: the warp's column steps first_step, + 4, ... of its tile, two
   * items in flight */
  float g0 = 0.0f, g8 = 0.0f, u0 = 0.0f, u8 = 0.0f;
  for (unsigned int n = 0; n < items; n += 2) {
    mlp_compute_pair(p, s, first_step + n * MLP_TILE_WARPS, st0, &g0, &g8, &u0,
                     &u8);
    if (n + 2 < items) {
      mlp_load_pair(p, row0, first_step + (n + 2) * MLP_TILE_WARPS, &st0);
    }
    if (n + 1 < items) {
      mlp_compute_pair(p, s, first_step + (n + 1) * MLP_TILE_WARPS, st1, &g0,
                       &g8, &u0, &u8);
      if (n + 3 < items) {
        mlp_load_pair(p, row0, first_step + (n + 3) * MLP_TILE_WARPS, &st1);
      }
    }
  }
  float v[4] = {g0, g8, u0, u8};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] += __shfl_xor_sync(0xffffffffu, v[i], 1);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    v[i] += __shfl_xor_sync(0xffffffffu, v[i], 2);
  }
  if (lane % 4 == 0) {
    const unsigned int g = lane / 4;
    float *sums = s.sums + (tile * MLP_TILE_WARPS + first_step) * MLP_TILE * 2;
    sums[g * 2] = v[0];
    sums[(g + 8) * 2] = v[1];
    sums[g * 2 + 1] = v[2];
    sums[(g + 8) * 2 + 1] = v[3];
  }
  __syncthreads();

  /* warp 0: the slab's h = silu(gate) * up, lane l < 16 its rows 4 l ..
   * 4 l + 3, staged as x is (two chunks) */
  if (warp == 0) {
    float total = 0.0f;
    for (unsigned int w = 0; w < MLP_WARPS; w++) {
      total += warp_squares[w];
    }
    const float inv = (float)(1.0 / sqrt((double)total / p.in + p.eps));
    float h[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (lane < MLP_SLAB / 4) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const unsigned int r = lane * 4 + i;
        const float *sums =
            s.sums + (r / MLP_TILE) * MLP_TILE_WARPS * MLP_TILE * 2;
        float gate = 0.0f, up = 0.0f;
        for (unsigned int w = 0; w < MLP_TILE_WARPS; w++) {
          gate += sums[(w * MLP_TILE + r % MLP_TILE) * 2];
          up += sums[(w * MLP_TILE + r % MLP_TILE) * 2 + 1];
        }
        gate *= inv;
        up *= inv;
        h[i] = gate / (1.0f + expf(-gate)) * up;
      }
    }
    float unused = 0.0f;
    gemv_stage_quad<false>(false, lane, lane < MLP_SLAB / 4,
                           make_float4(h[0], h[1], h[2], h[3]),
                           make_uint2(0u, 0u), s.hs, s.hchunk, &unused);
  }
  __syncthreads();

  /* down: items w, w + 16, ... of two tiles each, once the slab's tensor
   * copies have arrived */
  mlp_wait_copies(&arrived);
  float *partial = p.partials + (unsigned long long)slab * p.in;
  const unsigned int down_items = (unsigned int)(mlp_down_tiles(p.in) + 1) / 2;
  for (unsigned int i = warp; i < down_items; i += MLP_WARPS) {
    float y0 = 0.0f, y8 = 0.0f;
    unsigned int r0 = 0;
    mlp_down_item(p, s, slab, i, &y0, &y8, &r0);
    if (lane % 2 == 0) {
      if (r0 < p.in) {
        partial[r0] = y0;
      }
      if (r0 + 8 < p.in) {
        partial[r0 + 8] = y8;
      }
    }
  }
}

/* y[r] = x[r] + the slabs' partials of row r: block b rows 32 b .. 32 b +
 * 31, warp s the slabs s, s + 8, ... in order, then the 8 sums in order. */
__global__ void __launch_bounds__(MLP_REDUCE_ROWS *MLP_REDUCE_SLICES)
    mlp_reduce_kernel(const float *x, const float *partials, unsigned int slabs,
                      unsigned int in, float *y) {
  __shared__ float slices[MLP_REDUCE_SLICES][MLP_REDUCE_ROWS];
  grid_launch_dependents();
  grid_wait();
  const unsigned int lane = threadIdx.x % MLP_REDUCE_ROWS;
  const unsigned int slice = threadIdx.x / MLP_REDUCE_ROWS;
  const unsigned int r = blockIdx.x * MLP_REDUCE_ROWS + lane;
  float sum = 0.0f;
  if (r < in) {
    for (unsigned int s0 = slice; s0 < slabs;
         s0 += MLP_REDUCE_SLICES * MLP_REDUCE_HELD) {
      float part[MLP_REDUCE_HELD];
#pragma unroll
      for (int i = 0; i < MLP_REDUCE_HELD; i++) {
        const unsigned int s = s0 + i * MLP_REDUCE_SLICES;
        part[i] = s < slabs ? __ldcg(partials + (unsigned long long)s * in + r)
                            : 0.0f;
      }
#pragma unroll
      for (int i = 0; i < MLP_REDUCE_HELD; i++) {
        sum += part[i];
      }
    }
  }
  slices[slice][lane] = sum;
  __syncthreads();
  if (slice == 0 && r < in) {
    float total = slices[0][lane];
    for (unsigned int i = 1; i < MLP_REDUCE_SLICES; i++) {
      total += slices[i][lane];
    }
    y[r] = x[r] + total;
  }
}

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType,
                                    cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill);

/* A 2-D tensor map of `rows` rows of `columns` elements of `bytes` bytes
 * over global memory at base, in boxes of MLP_BOX_ROWS rows of `box`
 * elements (zeros past the rows). */
static cudaError_t mlp_tensor_map(CUtensorMap *map, const void *base,
                                  CUtensorMapDataType type, uint64_t bytes,
                                  uint64_t columns, uint64_t rows,
                                  uint32_t box) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult found;
  cudaError_t rc = cudaGetDriverEntryPointByVersion(
      "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
  if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess) {
    return rc != cudaSuccess ? rc : cudaErrorNotSupported;
  }
  const cuuint64_t dims[2] = {columns, rows};
  const cuuint64_t strides[1] = {columns * bytes};
  const cuuint32_t boxes[2] = {box, MLP_BOX_ROWS};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = ((encode_tiled_fn)fn)(
      map, type, 2, (void *)base, dims, strides, boxes, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* ---- host ---------------------------------------------------------------- */

typedef struct mlp_case {
  unsigned int in, ffn;
  lab_q4 gate, up, down;
  uint16_t *norm, *dnorm;
  float *x, *dx, *dy, *dh, *dinv, *partials;
  double eps;
  int version;
  CUtensorMap maps[3];
  mlp_params p;
} mlp_case;

static void mlp_launch(void *ctx) {
  mlp_case *c = (mlp_case *)ctx;
  if (c->version == 1) {
    naive_mlp(c->dx, c->dnorm, c->eps, c->gate, c->up, c->down, c->dinv, c->dh,
              c->dy);
    return;
  }
  const unsigned int slabs = c->ffn / MLP_SLAB;
  mlp_q4_kernel<<<slabs, MLP_THREADS, (size_t)mlp_shared_bytes(c->in)>>>(
      c->dx, c->p, c->maps[0], c->maps[1], c->maps[2]);
  mlp_reduce_kernel<<<(c->in + MLP_REDUCE_ROWS - 1) / MLP_REDUCE_ROWS,
                      MLP_REDUCE_ROWS * MLP_REDUCE_SLICES>>>(
      c->dx, c->partials, slabs, c->in, c->dy);
}

static void mlp_prepare_v2(mlp_case *c) {
  mlp_params *p = &c->p;
  memset(p, 0, sizeof *p);
  p->gate = {(const uint4 *)c->gate.dw, c->gate.ds, c->gate.db};
  p->up = {(const uint4 *)c->up.dw, c->up.ds, c->up.db};
  p->down = {(const uint4 *)c->down.dw, c->down.ds, c->down.db};
  p->norm = c->dnorm;
  p->in = c->in;
  p->ffn = c->ffn;
  p->group_shift = 1; /* groups of 64 */
  p->down_group_shift = 1;
  p->eps = c->eps;
  p->partials = c->partials;
  const uint64_t groups = c->ffn / c->down.group;
  CHECK(mlp_tensor_map(&c->maps[0], c->down.dw, CU_TENSOR_MAP_DATA_TYPE_UINT32,
                       4, c->ffn / 8, c->in, 8));
  CHECK(mlp_tensor_map(&c->maps[1], c->down.ds, CU_TENSOR_MAP_DATA_TYPE_UINT16,
                       2, groups, c->in, 8));
  CHECK(mlp_tensor_map(&c->maps[2], c->down.db, CU_TENSOR_MAP_DATA_TYPE_UINT16,
                       2, groups, c->in, 8));
  CHECK(cudaFuncSetAttribute(mlp_q4_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)mlp_shared_bytes(c->in)));
}

int main(int argc, char **argv) {
  int only = 0, repeats = 50;
  mlp_case c;
  memset(&c, 0, sizeof c);
  c.in = 3072; /* llama-3.2-3b */
  c.ffn = 8192;
  c.eps = 1e-5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--in") && i + 1 < argc) {
      c.in = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--ffn") && i + 1 < argc) {
      c.ffn = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = atoi(argv[++i]);
    } else {
      only = atoi(argv[i]);
    }
  }
  if (c.in % 256 != 0 || c.ffn % MLP_SLAB != 0 || repeats < 1) {
    fprintf(stderr, "usage: mlp_q4_tma [VERSION] [--in I (a multiple of "
                    "256)] [--ffn F (of 64)] [--repeats N]\n");
    return 2;
  }
  lab_require_sm90();
  c.gate = lab_q4_random(c.ffn, c.in, 64);
  c.up = lab_q4_random(c.ffn, c.in, 64);
  c.down = lab_q4_random(c.in, c.ffn, 64);
  c.x = lab_random_vector(c.in, -1.0f, 1.0f);
  c.norm = (uint16_t *)malloc(2 * (size_t)c.in);
  for (unsigned int i = 0; i < c.in; i++) {
    c.norm[i] = lab_f16(lab_uniform(0.5f, 1.5f));
  }
  c.dx = (float *)lab_device_copy(c.x, 4 * (size_t)c.in);
  c.dnorm = (uint16_t *)lab_device_copy(c.norm, 2 * (size_t)c.in);
  CHECK(cudaMalloc(&c.dy, 4 * (size_t)c.in));
  CHECK(cudaMalloc(&c.dh, 4 * (size_t)c.ffn));
  CHECK(cudaMalloc(&c.dinv, 4));
  CHECK(cudaMalloc(&c.partials, 4 * (size_t)c.in * (c.ffn / MLP_SLAB)));
  double *ref = (double *)malloc(sizeof(double) * c.in);
  float *out = (float *)malloc(sizeof(float) * c.in);
  lab_mlp_cpu(c.x, c.norm, c.eps, &c.gate, &c.up, &c.down, ref);
  const size_t bytes = lab_q4_bytes(&c.gate) + lab_q4_bytes(&c.up) +
                       lab_q4_bytes(&c.down) + 8 * (size_t)c.in;
  lab_timer timer = lab_timer_create();
  const double copy = lab_copy_gbps(&timer, 256u << 20, repeats);
  printf("I %u, F %u, %.1f MB of weights; device-to-device copy %.0f GB/s\n",
         c.in, c.ffn, bytes / 1e6, copy);
  int failed = 0;
  for (int v = 1; v <= 2; v++) {
    if (only != 0 && v != only) {
      continue;
    }
    c.version = v;
    if (v == 2) {
      if (mlp_shared_bytes(c.in) > MLP_MAX_SHARED) {
        printf("version 2: I %u needs %llu bytes of shared memory, skipped\n",
               c.in, mlp_shared_bytes(c.in));
        continue;
      }
      mlp_prepare_v2(&c);
    }
    CHECK(cudaMemset(c.dy, 0xff, 4 * (size_t)c.in)); /* poisoned: NaN */
    mlp_launch(&c);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(out, c.dy, 4 * (size_t)c.in, cudaMemcpyDeviceToHost));
    const double err = lab_relative_error(out, ref, c.in);
    const float ms = lab_time_ms(&timer, repeats, mlp_launch, &c);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    const bool ok = err < 1e-3;
    printf("version %d: relative error %.3e %s, %.2f us, %.0f GB/s, %.1f%% "
           "of the copy\n",
           v, err, ok ? "ok" : "FAILED", ms * 1e3, gbps, 100.0 * gbps / copy);
    failed |= !ok;
  }
  return failed;
}
