/* ATTENTION and ROPE_ATTENTION on CUDA: one of three variants chosen from
 * the shapes alone (the kind and the rows of q). Every kernel is a
 * programmatic dependent launch when the op asks (cuda_device.h). The KV
 * caches hold S regions of `context` positions, one per sequence; a row
 * reads and appends in its sequence's region only (fdy_kv_row_of: a
 * decode row's own position and sequence, a prefill chunk's row 0's).
 *
 * 1. decode (q has one row): one kernel, launched through fdy_launch (a
 *    programmatic dependent launch when the op asks: the step and the cache
 *    positions before p, which earlier steps wrote, are read before
 *    fdy_grid_wait; q, k, v and position p after). Before the wait each
 *    thread loads into registers the key and value float4s of its block's
 *    first chunk that its first round of the dots and of the weighted sum
 *    use (below; not position p's; a block of several chunks loads the next
 *    one's alike once it is done with its own), and for ROPE_ATTENTION the
 *    cos and sin of its first pair; it writes nothing. After it, each block
 *    puts its heads' q rows and its kv head's new k row in shared memory;
 *    for ROPE_ATTENTION rotated there by the rope at position p (each
 *    thread's cos and sin in double, rounded to float, the rotation the
 *    CPU's float expression without FMA), so the cache receives the rotated
 *    k bitwise as the CPU's rope then attention append it. The positions
 *    0..p are cut into chunks of decode_chunk(context) positions (a power of
 *    two from 64, so that a full cache has at most DECODE_MAX_CHUNKS
 *    chunks). Block (kv head, slice, y) takes chunks y, y + gridDim.y, ...
 *    for up to DECODE_GROUP query heads of that kv head, which share its K
 *    and V loads: each warp dots DECODE_INFLIGHT key rows at once with the
 *    heads' q (lanes on 4 consecutive elements: one 16-byte F32 or 8-byte
 *    F16 load, coalesced; q from shared memory, and past the first round the
 *    value rows requested from L2 at once), the round's 16 dots summed by
 *    one butterfly that keeps half of a lane's values at each step
 *    (fdy_warp_sums16: 16 shuffles, each sum the tree of a butterfly of its
 *    own; docs/tuning-log.md entry 53), times (float)(1 / sqrt(d)); then
 *    per head the chunk's maximum m, e = expf(score - m) and their float
 *    sum l (lanes, then a butterfly), and the unnormalized sum of e * v
 *    over the chunk's positions (each warp its positions, the warps' sums
 *    added in warp order). m, l and the partial output go to the op's
 *    workspace at the chunk's index. The append: the block that holds the
 *    chunk of position p (slice 0) stores the step's k and v rows of its
 *    kv head there (F32 copied, F16 rounded to nearest even like the CPU
 *    backend); every block reads position p from the step's rows (rounded
 *    alike), never from the cache, so no block waits for it. combine: the
 *    last block of a kv head slice to finish (a counter of the stream's,
 *    zeroed again by that block, so a graph can replay the launch) reads
 *    the chunks of the slice's heads (each (m, l) once; a warp's partials
 *    of all its heads of DECODE_COMBINE_ROUND chunks at once):
 *    M = max m_c, w_c = expf(m_c - M), L = sum of l_c w_c in double
 *    (lanes, then a butterfly), and output element
 *    j = (sum of w_c o_c[j]) * (float)(1 / L), warp w summing chunks w,
 *    w + 16, ... in order, then the sixteen warps' sums in order. The
 *    grid's y extent follows the multiprocessor count; the chunk size and
 *    every order of addition follow the shapes only.
 * 2. batch (ROPE_ATTENTION of several rows: a step of decode rows and
 *    prompt chunks): every row's rotated k and v appended first, then one
 *    block per row, kv head and slice of its query heads, each row at its
 *    own position and sequence, reading its positions from the cache
 *    (attention_batch.cu).
 * 3. prefill (ATTENTION of several rows): the append kernel (block t
 *    stores rows t of k and v at position p0 + t of the chunk's sequence,
 *    for the step's rows whose position lies in the cache), then flash
 *    attention (attention_prefill.cu).
 *
 * Against the CPU backend (src/backends/cpu/kernels.c: exp(score - max) in
 * float summed in double, sequential float sums over positions): every
 * weight here is the CPU's up to a few roundings (expf of a shifted score
 * times one or a few expf rescales, each within 2 ulp), and the sums over
 * positions are shorter (chunks, tiles) than the CPU's sequential ones, so
 * the relative difference stays near the CPU's own rounding error (see
 * docs/tuning-log.md, "flash attention").
 *
 * A row whose position or sequence lies outside the cache is NaN and
 * appends nothing. Rows at or beyond the step's count are neither read nor
 * written; the count, positions and sequences are read by the kernels when
 * they run. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define APPEND_THREADS    256
#define ATTENTION_THREADS 512
#define ATTENTION_WARPS   (ATTENTION_THREADS / 32)

#define DECODE_GROUP         4   /* query heads of one kv head per block */
#define DECODE_INFLIGHT      4   /* key or value rows a warp loads at once */
#define DECODE_MIN_CHUNK     64  /* positions, a power of two */
#define DECODE_MAX_CHUNKS    128 /* chunks of a full cache */
#define DECODE_BLOCKS_SM     1   /* decode blocks per multiprocessor */
#define DECODE_COMBINE_ROUND 4   /* chunks a warp's combine loads at once */

/* Block t stores rows t of k and v at position p0 + t of the chunk's
 * sequence (fdy_kv_row_of of row 0), when that lies in the cache. */
__global__ void __launch_bounds__(APPEND_THREADS)
    append_kernel(const int32_t *step, const float *k, const float *v,
                  void *k_cache, void *v_cache, bool f16, unsigned int kv_dim,
                  unsigned int rows, unsigned long long context,
                  unsigned long long sequences) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const fdy_kv_row at = fdy_kv_row_of(step, 0, t, context, sequences);
  if (at.position < 0) {
    return;
  }
  const unsigned long long src = (unsigned long long)t * kv_dim;
  const unsigned long long dst =
      (at.sequence * context + (unsigned long long)at.position) * kv_dim;
  for (unsigned int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    fdy_cache_store(k_cache, f16, dst + i, k[src + i]);
    fdy_cache_store(v_cache, f16, dst + i, v[src + i]);
  }
}

/* ---- decode: chunks, then the combine by the last block ------------------
 */

/* The decode variant's workspace: (m, l) per chunk and head, then (at a
 * multiple of 16 bytes) the partial outputs, 4 ceil(d / 4) floats per chunk
 * and head (zero past d). */
typedef struct decode_partials {
  float2 *ml;
  float *o;
} decode_partials;

/* The decode step's own key or value row (F32, the op's k or v input at
 * the kv head): elements 4 j4 .. 4 j4 + 3 as the cache holds them once
 * appended (F16: rounded to nearest even). */
static __device__ __forceinline__ float4 new_row4(const float *row, bool f16,
                                                  bool vec, unsigned int j4,
                                                  unsigned int d) {
  const float4 x = fdy_cache_load4(row, false, vec, 0, j4, d);
  if (!f16) {
    return x;
  }
  return make_float4(
      __half2float(__float2half_rn(x.x)), __half2float(__float2half_rn(x.y)),
      __half2float(__float2half_rn(x.z)), __half2float(__float2half_rn(x.w)));
}

/* The bits of cache elements 4 j4 .. 4 j4 + 3 at `at`, loaded but not
 * converted, so that nothing waits for the load before the values are
 * used (bits_float4): vec F16 the 8 bytes in x and y, vec F32 the 16
 * bytes, otherwise the bits of fdy_cache_load4's floats. */
static __device__ __forceinline__ uint4 cache_bits4(const void *cache, bool f16,
                                                    bool vec,
                                                    unsigned long long at,
                                                    unsigned int j4,
                                                    unsigned int d) {
  if (vec) {
    if (f16) {
      const uint2 w = *(const uint2 *)((const uint16_t *)cache + at + 4 * j4);
      return make_uint4(w.x, w.y, 0u, 0u);
    }
    return *(const uint4 *)((const float *)cache + at + 4 * j4);
  }
  const float4 x = fdy_cache_load4(cache, f16, false, at, j4, d);
  return make_uint4(__float_as_uint(x.x), __float_as_uint(x.y),
                    __float_as_uint(x.z), __float_as_uint(x.w));
}

/* cache_bits4's bits as the floats that fdy_cache_load4 returns for them
 * (the same conversion; all-zero bits are zeros). */
static __device__ __forceinline__ float4 bits_float4(uint4 b, bool f16,
                                                     bool vec) {
  if (vec && f16) {
    return fdy_half4_float4(make_uint2(b.x, b.y));
  }
  return make_float4(__uint_as_float(b.x), __uint_as_float(b.y),
                     __uint_as_float(b.z), __uint_as_float(b.w));
}

/* The bits (cache_bits4) of key or value elements 4 j4 .. of a warp's
 * DECODE_INFLIGHT positions base, base + ATTENTION_WARPS, ... of the n
 * positions of the chunk at `begin`: the cache's before the last position
 * (earlier steps wrote them, so they may be read before fdy_grid_wait),
 * zero at the last position (this launch writes the cache's; rows_of puts
 * the step's row there) and past the chunk. */
static __device__ __forceinline__ void
cache_rows(uint4 bits[DECODE_INFLIGHT], const void *cache, bool f16, bool vec,
           unsigned long long begin, unsigned int base, unsigned int n,
           unsigned long long last, unsigned long long kv_dim,
           unsigned long long kv_at, unsigned int j4, unsigned int d) {
#pragma unroll
  for (int u = 0; u < DECODE_INFLIGHT; u++) {
    const unsigned int pp = base + u * ATTENTION_WARPS;
    bits[u] =
        pp < n && begin + pp != last
            ? cache_bits4(cache, f16, vec, (begin + pp) * kv_dim + kv_at, j4, d)
            : make_uint4(0u, 0u, 0u, 0u);
  }
}

/* cache_rows' rows as floats, the last position's from the step's own row
 * (`own`, as new_row4). After fdy_grid_wait only. */
static __device__ __forceinline__ void
rows_of(float4 rows[DECODE_INFLIGHT], const uint4 bits[DECODE_INFLIGHT],
        const float *own, bool f16, bool vec, unsigned long long begin,
        unsigned int base, unsigned long long last, unsigned int j4,
        unsigned int d) {
#pragma unroll
  for (int u = 0; u < DECODE_INFLIGHT; u++) {
    rows[u] = begin + base + u * ATTENTION_WARPS == last
                  ? new_row4(own, f16, vec, j4, d)
                  : bits_float4(bits[u], f16, vec);
  }
}

/* Positions of chunk c (of `chunk` positions, `chunks` up to the last)
 * in the held round of a lane (cache_rows' n): none when c is past the
 * chunks or the lane past the row's d4 float4s. */
static __device__ __forceinline__ unsigned int
held_positions(unsigned int c, unsigned int chunks, unsigned int chunk,
               unsigned long long last, unsigned int lane, unsigned int d4) {
  return c < chunks && lane < d4
             ? (unsigned int)min((unsigned long long)chunk,
                                 last + 1 - (unsigned long long)c * chunk)
             : 0;
}

/* Asks L2 for the 16 bytes at p (F16: 8) ahead of their load. */
static __device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* The combine of the heads h0 .. h0 + gn - 1 over `chunks` chunks: warp g
 * finds head g's M = max m_c, the weights w_c = expf(m_c - M) (into
 * `weight`, DECODE_MAX_CHUNKS a head) and L = sum of l_c w_c in double
 * (lanes, then a butterfly); then per head, lanes on 4 elements, warp w
 * sums w_c o_c over chunks w, w + 16, ... in order (into warp_out), and
 * output element j is the warps' sums added in warp order times
 * (float)(1 / L). Partials are read from L2 (__ldcg): other blocks of this
 * launch wrote them. */
static __device__ void combine_heads(unsigned int h0, unsigned int gn,
                                     unsigned int chunks, unsigned int heads,
                                     unsigned int d,
                                     const decode_partials *partials,
                                     float *weight, float *inv,
                                     float4 *warp_out, float *out) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int d4 = (d + 3) / 4;
  if (warp < gn) {
    const unsigned int h = h0 + warp;
    float2 ml[DECODE_MAX_CHUNKS / 32]; /* chunk lane + 32 i, read once */
    float m = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < DECODE_MAX_CHUNKS / 32; i++) {
      const unsigned int c = lane + 32 * i;
      ml[i] = c < chunks
                  ? __ldcg(&partials->ml[(unsigned long long)c * heads + h])
                  : make_float2(-CUDART_INF_F, 0.0f);
      m = fmaxf(m, ml[i].x);
    }
    m = fdy_warp_max(m);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < DECODE_MAX_CHUNKS / 32; i++) {
      const unsigned int c = lane + 32 * i;
      if (c < chunks) {
        const float w = expf(ml[i].x - m);
        weight[warp * DECODE_MAX_CHUNKS + c] = w;
        sum += (double)ml[i].y * w;
      }
    }
    sum = fdy_warp_sum_double(sum);
    if (lane == 0) {
      inv[warp] = (float)(1.0 / sum);
    }
  }
  __syncthreads();
  /* the partials of every head of DECODE_COMBINE_ROUND chunks loaded at
   * once (chunks c0, c0 + ATTENTION_WARPS, ...: a round's loads wait for
   * nothing of the round before), each head's sum in chunk order */
  const float4 *partial4 = (const float4 *)partials->o;
  for (unsigned int j4 = lane; j4 < d4; j4 += 32) {
    float4 acc[DECODE_GROUP];
#pragma unroll
    for (int g = 0; g < DECODE_GROUP; g++) {
      acc[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (unsigned int c0 = warp; c0 < chunks;
         c0 += ATTENTION_WARPS * DECODE_COMBINE_ROUND) {
      float4 part[DECODE_COMBINE_ROUND][DECODE_GROUP];
#pragma unroll
      for (int r = 0; r < DECODE_COMBINE_ROUND; r++) {
        const unsigned int c = c0 + r * ATTENTION_WARPS;
        const float4 *row =
            partial4 + ((unsigned long long)c * heads + h0) * d4 + j4;
#pragma unroll
        for (int g = 0; g < DECODE_GROUP; g++) {
          part[r][g] = c < chunks && (unsigned int)g < gn
                           ? __ldcg(row + g * d4)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int r = 0; r < DECODE_COMBINE_ROUND; r++) {
        const unsigned int c = c0 + r * ATTENTION_WARPS;
#pragma unroll
        for (int g = 0; g < DECODE_GROUP; g++) {
          if (c < chunks && (unsigned int)g < gn) {
            acc[g] = fdy_axpy4(weight[g * DECODE_MAX_CHUNKS + c], part[r][g],
                               acc[g]);
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < DECODE_GROUP; g++) {
      if ((unsigned int)g < gn) {
        warp_out[(warp * DECODE_GROUP + g) * d4 + j4] = acc[g];
      }
    }
  }
  __syncthreads();
  const float *wo = (const float *)warp_out;
  for (unsigned int i = threadIdx.x; i < gn * d; i += blockDim.x) {
    const unsigned int g = i / d, j = i % d;
    float acc = wo[g * d4 * 4 + j];
    for (unsigned int w = 1; w < ATTENTION_WARPS; w++) {
      acc += wo[(w * DECODE_GROUP + g) * d4 * 4 + j];
    }
    out[(unsigned long long)(h0 + g) * d + j] = acc * inv[g];
  }
  __syncthreads(); /* weight, inv and warp_out are reused */
}

/* Block (x, y), x = kv head x slices + slice, takes chunks y, y + gridDim.y,
 * ... for the query heads of its slice, over the region of the row's
 * sequence (kv_at starts there). The block that holds the chunk of
 * the last position in slice 0 also appends the step's k and v rows of its
 * kv head there; every block reads that position from the step's rows
 * instead of the cache, so no block waits for another. Each block then
 * counts itself done in counters[x % FDY_CUDA_OP_COUNTERS]; the last of the
 * blocks that share the counter (an acq_rel count: release, then acquire)
 * zeroes it for the stream's next launch and combines their heads.
 * Blocks of 16 warps over chunks of at least 64 positions (one held
 * round of 4 positions a warp: docs/tuning-log.md, entry 41). Registers:
 * the held round (held_key, held_value: 32) takes the kernel to ~100, so
 * __launch_bounds__ asks for DECODE_BLOCKS_SM = 1 block (128 registers).
 * Shared memory, float4 units of d4 = ceil(d / 4): the warps' partial outputs
 * (ATTENTION_WARPS x DECODE_GROUP x d4), the q rows and the step's k row
 * ((DECODE_GROUP + 1) x d4), then DECODE_GROUP x max(chunk, DECODE_MAX_CHUNKS)
 * floats (a chunk's scores, or the combine's weights), then DECODE_GROUP floats
 * (the combine's 1 / L). */
__global__ void __launch_bounds__(ATTENTION_THREADS, DECODE_BLOCKS_SM)
    decode_kernel(const int32_t *step, const float *q, const float *k_new,
                  const float *v_new, void *k_cache, void *v_cache, bool f16,
                  bool vec, unsigned int heads, unsigned int group,
                  unsigned int slices, unsigned int d,
                  unsigned long long context, unsigned long long sequences,
                  unsigned int chunk, decode_partials partials,
                  unsigned int *counters, float *out, bool rope,
                  const __grid_constant__ fdy_cuda_rope_table table) {
  extern __shared__ float4 decode_shared[];
  const unsigned int d4 = (d + 3) / 4;
  const unsigned int scores_stride =
      max(chunk, (unsigned int)DECODE_MAX_CHUNKS);
  float4 *warp_out = decode_shared;
  float4 *q_rows = warp_out + ATTENTION_WARPS * DECODE_GROUP * d4;
  float *scores = (float *)(q_rows + (DECODE_GROUP + 1) * d4);
  float *inv = scores + DECODE_GROUP * scores_stride;
  fdy_grid_launch_dependents();
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  const unsigned int kv_head = blockIdx.x / slices;
  const unsigned int g0 = (blockIdx.x % slices) * DECODE_GROUP;
  const unsigned int gn = min((unsigned int)DECODE_GROUP, group - g0);
  const unsigned int h0 = kv_head * group + g0;
  const fdy_kv_row row = fdy_kv_row_of(step, 0, 0, context, sequences);
  const long long last_p = row.position;
  /* positions and chunk starts in 32 bits (below context, below 2^31): with
   * the sequence's 64-bit region in kv_at, 64-bit ones took the kernel past
   * its 128 registers */
  const unsigned int last = last_p < 0 ? 0 : (unsigned int)last_p;
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned long long kv_dim = (unsigned long long)(heads / group) * d;
  /* the kv head's elements in the step's rows, and in the caches at
   * position 0 of the row's sequence */
  const unsigned long long own_at = (unsigned long long)kv_head * d;
  const unsigned long long kv_at = row.sequence * context * kv_dim + own_at;
  const unsigned int chunks = (unsigned int)(last / chunk) + 1;

  /* Before the wait, what needs nothing of the kernels before: the held
   * round of this block's first chunk, the keys and values that the first
   * round of its scores and of its weighted sum use (warp w positions w,
   * w + 16, ..., lane element group j4 = lane: the float4s each thread
   * later uses, the last position's left for the step's rows; each chunk
   * loads the next one's once it is done with its own), the rope's cos
   * and sin of the thread's first pair, and the scores' scale. */
  uint4 held_key[DECODE_INFLIGHT], held_value[DECODE_INFLIGHT];
  {
    const unsigned long long begin = (unsigned long long)blockIdx.y * chunk;
    const unsigned int n =
        last_p >= 0 ? held_positions(blockIdx.y, chunks, chunk, last, lane, d4)
                    : 0;
    cache_rows(held_key, k_cache, f16, vec, begin, warp, n, last, kv_dim, kv_at,
               lane, d);
    cache_rows(held_value, v_cache, f16, vec, begin, warp, n, last, kv_dim,
               kv_at, lane, d);
  }
  const unsigned int half = d / 2;
  unsigned int pair = ~0u;
  float cos_p = 0.0f, sin_p = 0.0f;
  if (rope && last_p >= 0 && threadIdx.x < (gn + 1) * half) {
    pair = threadIdx.x % half;
    fdy_rope_cos_sin((double)last, table.inv[pair], &cos_p, &sin_p);
  }
  const float scale = (float)(1.0 / sqrt((double)d));
  fdy_grid_wait(); /* q, k and v come from the kernels before */
  if (last_p < 0) {
    for (unsigned int i = threadIdx.x; blockIdx.y == 0 && i < gn * d;
         i += blockDim.x) {
      out[(unsigned long long)h0 * d + i] = CUDART_NAN_F;
    }
    return;
  }
  const float *v_own = v_new + own_at;

  /* q rows 0 .. gn - 1 of the slice's heads and the step's k row (row
   * DECODE_GROUP) into shared memory, rotated by the rope at position
   * `last` for ROPE_ATTENTION (item i: row i / half, pair i % half; a
   * thread's pair changes only when half does not divide the block, so
   * its cos and sin are computed again only then), zero past d. */
  const float *k_row = (const float *)(q_rows + DECODE_GROUP * d4);
  if (rope) {
    /* two items a step, both loaded first (one L2 trip, not two) */
    const unsigned int items = (gn + 1) * half;
    for (unsigned int i0 = threadIdx.x; i0 < items; i0 += 2 * blockDim.x) {
      float x0[2] = {0.0f, 0.0f}, x1[2] = {0.0f, 0.0f};
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const unsigned int i = i0 + t * blockDim.x;
        if (i < items) {
          const unsigned int r = i / half, j = i % half;
          const float *x =
              r < gn ? q + (unsigned long long)(h0 + r) * d : k_new + own_at;
          x0[t] = x[j];
          x1[t] = x[j + half];
        }
      }
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const unsigned int i = i0 + t * blockDim.x;
        if (i < items) {
          const unsigned int r = i / half, j = i % half;
          float *dst = (float *)(q_rows + (r < gn ? r : DECODE_GROUP) * d4);
          if (j != pair) {
            fdy_rope_cos_sin((double)last, table.inv[j], &cos_p, &sin_p);
            pair = j;
          }
          const float2 rotated = fdy_rope_rotate(x0[t], x1[t], cos_p, sin_p);
          dst[j] = rotated.x;
          dst[j + half] = rotated.y;
        }
      }
    }
  } else {
    for (unsigned int i = threadIdx.x; i < (gn + 1) * d; i += blockDim.x) {
      const unsigned int r = i / d, j = i % d;
      const float *x =
          r < gn ? q + (unsigned long long)(h0 + r) * d : k_new + own_at;
      ((float *)(q_rows + (r < gn ? r : DECODE_GROUP) * d4))[j] = x[j];
    }
  }
  for (unsigned int i = threadIdx.x; i < (gn + 1) * (4 * d4 - d);
       i += blockDim.x) {
    const unsigned int r = i / (4 * d4 - d), j = d + i % (4 * d4 - d);
    ((float *)(q_rows + (r < gn ? r : DECODE_GROUP) * d4))[j] = 0.0f;
  }
  __syncthreads();
  const float *k_own = k_row;
  if (g0 == 0 && blockIdx.y == (chunks - 1) % gridDim.y) {
    for (unsigned int i = threadIdx.x; i < d; i += blockDim.x) {
      fdy_cache_store(k_cache, f16, last * kv_dim + kv_at + i, k_own[i]);
      fdy_cache_store(v_cache, f16, last * kv_dim + kv_at + i, v_own[i]);
    }
  }

  for (unsigned int c = blockIdx.y; c < chunks; c += gridDim.y) {
    const unsigned int begin = c * chunk;
    const unsigned int n = min(chunk, last + 1 - begin);
    /* the next chunk's held round, loaded once this one's is used */
    const unsigned long long next_begin =
        begin + (unsigned long long)gridDim.y * chunk;
    const unsigned int next_n =
        held_positions(c + gridDim.y, chunks, chunk, last, lane, d4);
    /* scores: warp w dots positions w, w + 16, ..., DECODE_INFLIGHT at once
     * (lanes load their q elements alongside the keys and, past the held
     * round, ask L2 for the values the weighted sum reads next) */
    for (unsigned int base = warp; base < n;
         base += ATTENTION_WARPS * DECODE_INFLIGHT) {
      float dot[DECODE_INFLIGHT][DECODE_GROUP];
#pragma unroll
      for (int u = 0; u < DECODE_INFLIGHT; u++) {
#pragma unroll
        for (int g = 0; g < DECODE_GROUP; g++) {
          dot[u][g] = 0.0f;
        }
      }
      for (unsigned int j4 = lane; j4 < d4; j4 += 32) {
        uint4 bits[DECODE_INFLIGHT];
        if (base == warp && j4 == lane) {
#pragma unroll
          for (int u = 0; u < DECODE_INFLIGHT; u++) {
            bits[u] = held_key[u];
          }
        } else {
          cache_rows(bits, k_cache, f16, vec, begin, base, n, last, kv_dim,
                     kv_at, j4, d);
#pragma unroll
          for (int u = 0; u < DECODE_INFLIGHT; u++) {
            const unsigned int pp = base + u * ATTENTION_WARPS;
            if (vec && pp < n && begin + pp != last) {
              const unsigned long long at =
                  (begin + pp) * kv_dim + kv_at + 4 * j4;
              prefetch_l2(f16 ? (const void *)((const uint16_t *)v_cache + at)
                              : (const void *)((const float *)v_cache + at));
            }
          }
        }
        float4 key[DECODE_INFLIGHT];
        rows_of(key, bits, k_own, f16, vec, begin, base, last, j4, d);
#pragma unroll
        for (int g = 0; g < DECODE_GROUP; g++) {
          if (g < gn) {
            const float4 qv = q_rows[g * d4 + j4];
#pragma unroll
            for (int u = 0; u < DECODE_INFLIGHT; u++) {
              dot[u][g] = fdy_dot4(qv, key[u], dot[u][g]);
            }
          }
        }
      }
      /* the 16 dots' warp sums at once (DECODE_INFLIGHT x DECODE_GROUP =
       * 16); lane 2k writes value k's score */
      static_assert(DECODE_INFLIGHT * DECODE_GROUP == 16, "warp_sums16");
      float sums[16];
#pragma unroll
      for (int u = 0; u < DECODE_INFLIGHT; u++) {
#pragma unroll
        for (int g = 0; g < DECODE_GROUP; g++) {
          sums[u * DECODE_GROUP + g] = dot[u][g];
        }
      }
      const float total = fdy_warp_sums16(sums);
      {
        const unsigned int i = lane / 2;
        const unsigned int u = i / DECODE_GROUP, g = i % DECODE_GROUP;
        const unsigned int pp = base + u * ATTENTION_WARPS;
        if (lane % 2 == 0 && pp < n && g < gn) {
          scores[g * scores_stride + pp] = total * scale;
        }
      }
    }
    cache_rows(held_key, k_cache, f16, vec, next_begin, warp, next_n, last,
               kv_dim, kv_at, lane, d);
    __syncthreads();
    /* warp g: head g's maximum, weights and their sum */
    if (warp < gn) {
      float *s = scores + warp * scores_stride;
      float m = -CUDART_INF_F;
      for (unsigned int i = lane; i < n; i += 32) {
        m = fmaxf(m, s[i]);
      }
      m = fdy_warp_max(m);
      float l = 0.0f;
      for (unsigned int i = lane; i < n; i += 32) {
        const float e = expf(s[i] - m);
        s[i] = e;
        l += e;
      }
      l = fdy_warp_sum(l);
      if (lane == 0) {
        partials.ml[(unsigned long long)c * heads + h0 + warp] =
            make_float2(m, l);
      }
    }
    __syncthreads();
    /* the weighted values: warp w its positions, lanes on 4 elements */
    for (unsigned int j4 = lane; j4 < d4; j4 += 32) {
      float4 acc[DECODE_GROUP];
#pragma unroll
      for (int g = 0; g < DECODE_GROUP; g++) {
        acc[g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      for (unsigned int base = warp; base < n;
           base += ATTENTION_WARPS * DECODE_INFLIGHT) {
        uint4 bits[DECODE_INFLIGHT];
        if (base == warp && j4 == lane) {
#pragma unroll
          for (int u = 0; u < DECODE_INFLIGHT; u++) {
            bits[u] = held_value[u];
          }
        } else {
          cache_rows(bits, v_cache, f16, vec, begin, base, n, last, kv_dim,
                     kv_at, j4, d);
        }
        float4 value[DECODE_INFLIGHT];
        rows_of(value, bits, v_own, f16, vec, begin, base, last, j4, d);
#pragma unroll
        for (int u = 0; u < DECODE_INFLIGHT; u++) {
          const unsigned int pp = base + u * ATTENTION_WARPS;
          if (pp < n) {
#pragma unroll
            for (int g = 0; g < DECODE_GROUP; g++) {
              if (g < gn) {
                acc[g] =
                    fdy_axpy4(scores[g * scores_stride + pp], value[u], acc[g]);
              }
            }
          }
        }
      }
#pragma unroll
      for (int g = 0; g < DECODE_GROUP; g++) {
        warp_out[(warp * DECODE_GROUP + g) * d4 + j4] = acc[g];
      }
    }
    cache_rows(held_value, v_cache, f16, vec, next_begin, warp, next_n, last,
               kv_dim, kv_at, lane, d);
    __syncthreads();
    const float *wo = (const float *)warp_out;
    for (unsigned int i = threadIdx.x; i < gn * d4 * 4; i += blockDim.x) {
      const unsigned int g = i / (d4 * 4), j = i % (d4 * 4);
      float o = 0.0f;
      for (unsigned int w = 0; w < ATTENTION_WARPS; w++) {
        o += wo[(w * DECODE_GROUP + g) * d4 * 4 + j];
      }
      partials.o[((unsigned long long)c * heads + h0 + g) * d4 * 4 + j] = o;
    }
    __syncthreads(); /* scores and warp_out are reused by the next chunk */
  }

  /* The blocks of x, x + FDY_CUDA_OP_COUNTERS, ... count on one counter. */
  const unsigned int first_x = blockIdx.x % FDY_CUDA_OP_COUNTERS;
  bool last_block = false;
  if (threadIdx.x == 0) {
    const unsigned int sharing =
        (gridDim.x - 1 - first_x) / FDY_CUDA_OP_COUNTERS + 1;
    /* one acq_rel atomic (docs/tuning-log.md, entry 5): release orders the
     * block's partials (written before the __syncthreads above) before its
     * count, acquire lets the last block see every other block's */
    unsigned int done_before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;"
                 : "=r"(done_before)
                 : "l"(&counters[first_x])
                 : "memory");
    last_block = done_before == sharing * gridDim.y - 1;
    if (last_block) {
      atomicExch(&counters[first_x], 0u);
    }
  }
  if (__syncthreads_or(last_block) == 0) {
    return;
  }
  for (unsigned int x = first_x; x < gridDim.x; x += FDY_CUDA_OP_COUNTERS) {
    const unsigned int xg0 = (x % slices) * DECODE_GROUP;
    combine_heads((x / slices) * group + xg0,
                  min((unsigned int)DECODE_GROUP, group - xg0), chunks, heads,
                  d, &partials, scores, inv, warp_out, out);
  }
}

/* ---- shapes and launches ------------------------------------------------
 */

typedef struct attention_shape {
  unsigned int heads, kv_heads, group, d, rows, kv_dim;
  unsigned long long context, sequences; /* the caches' [S, context, kv_dim] */
  bool f16, vec;
  unsigned int chunk, slices; /* the decode variant's */
} attention_shape;

/* Positions per decode chunk: the smallest power of two from
 * DECODE_MIN_CHUNK that cuts a full cache into at most DECODE_MAX_CHUNKS. */
static unsigned int decode_chunk(unsigned long long context) {
  unsigned long long chunk = DECODE_MIN_CHUNK;
  while ((context + chunk - 1) / chunk > DECODE_MAX_CHUNKS) {
    chunk *= 2;
  }
  return (unsigned int)chunk;
}

static attention_shape shape_of(const fdy_op *op) {
  const fdy_attention_params *p = op->kind == FDY_OP_ROPE_ATTENTION
                                      ? &op->params.rope_attention.attention
                                      : &op->params.attention;
  attention_shape s;
  s.heads = p->heads;
  s.kv_heads = p->kv_heads;
  s.group = s.heads / s.kv_heads;
  s.d = p->head_dim;
  s.rows = (unsigned int)op->inputs[1].shape.dims[0];
  s.kv_dim = (unsigned int)op->inputs[2].shape.dims[1];
  s.sequences = op->inputs[4].shape.dims[0];
  s.context = op->inputs[4].shape.dims[1];
  s.f16 = op->inputs[4].dtype == FDY_DTYPE_F16;
  s.vec = s.d % 4 == 0;
  s.chunk = decode_chunk(s.context);
  s.slices = (s.group + DECODE_GROUP - 1) / DECODE_GROUP;
  return s;
}

static uint64_t decode_chunks(const attention_shape *s) {
  return (s->context + s->chunk - 1) / s->chunk;
}

/* Bytes of the decode workspace's (m, l) pairs, a multiple of 16. */
static uint64_t decode_ml_bytes(const attention_shape *s) {
  return (decode_chunks(s) * s->heads * sizeof(float2) + 15) / 16 * 16;
}

extern "C" uint64_t fdy_cuda_attention_shared_bytes(const fdy_op *op) {
  const attention_shape s = shape_of(op);
  const uint64_t d4 = (s.d + 3) / 4;
  if (s.rows == 1) {
    const uint64_t stride =
        s.chunk > DECODE_MAX_CHUNKS ? s.chunk : DECODE_MAX_CHUNKS;
    return (ATTENTION_WARPS * DECODE_GROUP + DECODE_GROUP + 1) * d4 *
               sizeof(float4) +
           (DECODE_GROUP * stride + DECODE_GROUP) * sizeof(float);
  }
  if (op->kind == FDY_OP_ROPE_ATTENTION) {
    return fdy_cuda_attention_batch_shared_bytes(op);
  }
  return fdy_cuda_attention_prefill_shared_bytes(op);
}

extern "C" uint64_t fdy_cuda_attention_workspace_bytes(const fdy_op *op) {
  const attention_shape s = shape_of(op);
  if (s.rows != 1) {
    return 0;
  }
  return decode_ml_bytes(&s) +
         decode_chunks(&s) * s.heads * ((s.d + 3) / 4) * sizeof(float4);
}

extern "C" bool fdy_cuda_attention_grid_fits(const fdy_op *op) {
  const attention_shape s = shape_of(op);
  if (op->kind == FDY_OP_ROPE_ATTENTION) {
    return s.d / 2 <= FDY_CUDA_ROPE_MAX_PAIRS &&
           (s.rows == 1 || fdy_cuda_attention_batch_grid_fits(op));
  }
  return s.rows == 1 || fdy_cuda_attention_prefill_grid_fits(op);
}

extern "C" cudaError_t fdy_cuda_attention_prepare(uint64_t smem_optin) {
  cudaError_t rc =
      fdy_cuda_allow_dynamic_shared((const void *)decode_kernel, smem_optin);
  if (rc == cudaSuccess) {
    rc = fdy_cuda_attention_prefill_prepare(smem_optin);
  }
  if (rc == cudaSuccess) {
    rc = fdy_cuda_attention_batch_prepare(smem_optin);
  }
  struct cudaFuncAttributes attributes;
  return rc != cudaSuccess ? rc
                           : cudaFuncGetAttributes(&attributes, append_kernel);
}

static cudaError_t launch_decode(const fdy_cuda_op_args *a,
                                 const attention_shape *s,
                                 cudaStream_t stream) {
  const int32_t *step = (const int32_t *)a->in[0];
  const uint64_t chunks = decode_chunks(s);
  decode_partials partials;
  partials.ml = (float2 *)a->workspace;
  partials.o = (float *)((unsigned char *)a->workspace + decode_ml_bytes(s));
  const bool rope = a->op->kind == FDY_OP_ROPE_ATTENTION;
  /* all zero for ATTENTION (no rope) */
  const fdy_cuda_rope_table table = fdy_cuda_rope_table_of(a->op);
  /* the y extent only sets how many chunks a block takes in turn */
  const uint64_t x = (uint64_t)s->kv_heads * s->slices;
  const uint64_t target = (uint64_t)DECODE_BLOCKS_SM * a->sm_count;
  const uint64_t y_fit = target > x ? target / x : 1;
  const dim3 grid((unsigned int)x,
                  (unsigned int)(y_fit < chunks ? y_fit : chunks));
  return fdy_launch(a->dependent, decode_kernel, grid, dim3(ATTENTION_THREADS),
                    (size_t)fdy_cuda_attention_shared_bytes(a->op), stream,
                    step, (const float *)a->in[1], (const float *)a->in[2],
                    (const float *)a->in[3], a->in[4], a->in[5], s->f16, s->vec,
                    s->heads, s->group, s->slices, s->d, s->context,
                    s->sequences, s->chunk, partials, a->counters,
                    (float *)a->out, rope, table);
}

/* ATTENTION or ROPE_ATTENTION: one row on decode_kernel (which rotates q
 * and k itself for ROPE_ATTENTION), ROPE_ATTENTION of several rows on the
 * batch kernel, ATTENTION of several rows by the append kernel, then the
 * prefill kernel. */
extern "C" cudaError_t fdy_cuda_attention_enqueue(const fdy_cuda_op_args *a,
                                                  cudaStream_t stream) {
  const attention_shape s = shape_of(a->op);
  const int32_t *step = (const int32_t *)a->in[0];
  if (s.rows == 1) {
    return launch_decode(a, &s, stream);
  }
  if (a->op->kind == FDY_OP_ROPE_ATTENTION) {
    return fdy_cuda_attention_batch_enqueue(a, stream);
  }
  cudaError_t rc = fdy_launch(
      a->dependent, append_kernel, s.rows, APPEND_THREADS, 0, stream, step,
      (const float *)a->in[2], (const float *)a->in[3], a->in[4], a->in[5],
      s.f16, s.kv_dim, s.rows, s.context, s.sequences);
  if (rc != cudaSuccess) {
    return rc;
  }
  return fdy_cuda_attention_prefill_enqueue(a, stream);
}
