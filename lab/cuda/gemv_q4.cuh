/* Building blocks of the one-row tensor-core GEMV over MLX affine 4-bit
 * weights, as branch `mlp` (docs/tuning-log.md entry 54) split them out of
 * src/backends/cuda/matmul_q4.cu for its fused MLP: the streamed weight
 * loads, the nibbles to exact F16 integers, the m16n8k16 mmas of a chunk
 * against x's B fragments, a chunk's sums with its scale and bias, and the
 * staging of x per 32-input chunk. src/backends/cuda/matmul_q4.cu's header
 * comment explains the formulation (which lane holds which chunk, how x is
 * split into F16 hi and lo, why the sums are exact up to the float
 * additions); the backend's own copy of these lives inline there. Device
 * code only. */
#ifndef FOUNDRY_LAB_GEMV_Q4_CUH
#define FOUNDRY_LAB_GEMV_Q4_CUH

#include "common.cuh"

/* The loads of one column step of a warp: lane (g, t)'s chunk of rows g and
 * g + 8 with their scales and biases (zero where the row or the chunk does
 * not exist). */
typedef struct gemv_stage {
  uint4 q0, q8;
  unsigned short s0, b0, s8, b8;
} gemv_stage;

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

/* Lane (g, t)'s chunk c of rows r0 and r8 of a matrix (chunks 16-byte
 * chunks and groups groups a row) with their scales and biases (zero
 * where v0, v8 are false). */
static __device__ __forceinline__ void
gemv_load_rows(const uint4 *weight, const uint16_t *scales,
               const uint16_t *biases, unsigned int chunks, unsigned int groups,
               unsigned int c, unsigned int group, unsigned int r0,
               unsigned int r8, bool v0, bool v8, gemv_stage *st) {
  const unsigned long long o0 = (unsigned long long)r0 * chunks + c;
  const unsigned long long o8 = (unsigned long long)r8 * chunks + c;
  const unsigned long long g0 = (unsigned long long)r0 * groups + group;
  const unsigned long long g8 = (unsigned long long)r8 * groups + group;
  st->q0 = v0 ? load_streamed(weight + o0) : make_uint4(0, 0, 0, 0);
  st->q8 = v8 ? load_streamed(weight + o8) : make_uint4(0, 0, 0, 0);
  st->s0 = v0 ? __ldg(scales + g0) : 0;
  st->b0 = v0 ? __ldg(biases + g0) : 0;
  st->s8 = v8 ? __ldg(scales + g8) : 0;
  st->b8 = v8 ? __ldg(biases + g8) : 0;
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
  *acc0 = fmaf(half_bits(st.s0, bf16), dot0 * x.y, *acc0);
  *acc0 = fmaf(half_bits(st.b0, bf16), x.x, *acc0);
  *acc8 = fmaf(half_bits(st.s8, bf16), dot8 * x.y, *acc8);
  *acc8 = fmaf(half_bits(st.b8, bf16), x.x, *acc8);
}

static __device__ __forceinline__ float4 quad_at(const float *x,
                                                 unsigned int k4) {
  return __ldg((const float4 *)x + k4);
}

static __device__ __forceinline__ float norm_half(uint2 raw, int i, bool bf16) {
  const uint32_t word = i < 2 ? raw.x : raw.y;
  return half_bits((unsigned short)(i % 2 ? word >> 16 : word & 0xffffu), bf16);
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
gemv_stage_quad(bool norm_bf16, unsigned int k4, bool valid, float4 u,
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
        v[i] *= norm_half(norm, i, norm_bf16);
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

#endif
