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

/* A decode block (decode_kernel): block (x, y), x = kv head x slices +
 * slice, over the query heads h0 .. h0 + gn - 1 of its slice (g0 the
 * first's index in the kv head's group), for the step's row at `position`
 * (-1: outside the cache). `last` is that position (0 outside the cache;
 * positions and chunk starts are 32-bit, below context, below 2^31: with
 * the sequence's 64-bit region in kv_at, 64-bit ones took the kernel past
 * its 128 registers), `chunks` the chunks of `chunk` positions up to it.
 * own_at: the kv head's elements in the step's rows; kv_at: in the caches
 * at position 0 of the row's sequence. The shared memory, float4 units of
 * d4 = ceil(d / 4): the warps' partial outputs (warp_out, ATTENTION_WARPS x
 * DECODE_GROUP x d4), the q rows and the step's k row (q_rows,
 * (DECODE_GROUP + 1) x d4), then DECODE_GROUP x scores_stride = max(chunk,
 * DECODE_MAX_CHUNKS) floats (a chunk's scores, or the combine's weights),
 * then DECODE_GROUP floats (inv, the combine's 1 / L). */
typedef struct decode_block {
  float4 *warp_out, *q_rows;
  float *scores, *inv;
  unsigned int d, d4, chunk, scores_stride;
  unsigned int g0, gn, h0;
  long long position;
  unsigned int last, chunks;
  unsigned int lane, warp;
  unsigned long long kv_dim, own_at, kv_at;
  bool f16, vec;
} decode_block;

/* The block's shared memory (decode_block's d .. inv). */
static __device__ __forceinline__ void decode_block_layout(decode_block *b,
                                                           float4 *shared,
                                                           unsigned int d,
                                                           unsigned int chunk) {
  b->d = d;
  b->d4 = (d + 3) / 4;
  b->chunk = chunk;
  b->scores_stride = max(chunk, (unsigned int)DECODE_MAX_CHUNKS);
  b->warp_out = shared;
  b->q_rows = b->warp_out + ATTENTION_WARPS * DECODE_GROUP * b->d4;
  b->scores = (float *)(b->q_rows + (DECODE_GROUP + 1) * b->d4);
  b->inv = b->scores + DECODE_GROUP * b->scores_stride;
}

/* The block's heads and the step's row (the rest of decode_block), after
 * decode_block_layout. Reads the step tensor only (allowed before
 * fdy_grid_wait). */
static __device__ __forceinline__ void
decode_block_place(decode_block *b, const int32_t *step, bool f16, bool vec,
                   unsigned int heads, unsigned int group, unsigned int slices,
                   unsigned long long context, unsigned long long sequences) {
  const unsigned int d = b->d;
  const unsigned int kv_head = blockIdx.x / slices;
  b->g0 = (blockIdx.x % slices) * DECODE_GROUP;
  b->gn = min((unsigned int)DECODE_GROUP, group - b->g0);
  b->h0 = kv_head * group + b->g0;
  const fdy_kv_row row = fdy_kv_row_of(step, 0, 0, context, sequences);
  b->position = row.position;
  b->last = row.position < 0 ? 0 : (unsigned int)row.position;
  b->lane = threadIdx.x % 32;
  b->warp = threadIdx.x / 32;
  b->kv_dim = (unsigned long long)(heads / group) * d;
  b->own_at = (unsigned long long)kv_head * d;
  b->kv_at = row.sequence * context * b->kv_dim + b->own_at;
  b->chunks = (unsigned int)(b->last / b->chunk) + 1;
  b->f16 = f16;
  b->vec = vec;
}

/* Before fdy_grid_wait (it needs nothing of the kernels before): the held
 * round of the block's first chunk, the keys and values that the first
 * round of its scores and of its weighted sum use (warp w positions w,
 * w + 16, ..., lane element group j4 = lane: the float4s each thread later
 * uses, the last position's left for the step's rows; each chunk loads the
 * next one's once it is done with its own). None when the step's row lies
 * outside the cache. */
static __device__ __forceinline__ void
decode_hold_first(const decode_block *b, const void *k_cache,
                  const void *v_cache, uint4 held_key[DECODE_INFLIGHT],
                  uint4 held_value[DECODE_INFLIGHT]) {
  const unsigned long long begin = (unsigned long long)blockIdx.y * b->chunk;
  const unsigned int n = b->position >= 0
                             ? held_positions(blockIdx.y, b->chunks, b->chunk,
                                              b->last, b->lane, b->d4)
                             : 0;
  cache_rows(held_key, k_cache, b->f16, b->vec, begin, b->warp, n, b->last,
             b->kv_dim, b->kv_at, b->lane, b->d);
  cache_rows(held_value, v_cache, b->f16, b->vec, begin, b->warp, n, b->last,
             b->kv_dim, b->kv_at, b->lane, b->d);
}

/* q rows 0 .. gn - 1 of the slice's heads and the step's k row (row
 * DECODE_GROUP) into q_rows, rotated by the rope at position `last` for
 * ROPE_ATTENTION (item i: row i / half, pair i % half; pair, cos_p and
 * sin_p are the thread's first pair's, from before the wait, and a
 * thread's pair changes only when half does not divide the block, so its
 * cos and sin are computed again only then), zero past d. */
static __device__ __forceinline__ void
decode_stage_q_k(const decode_block *b, const float *q, const float *k_new,
                 bool rope, const fdy_cuda_rope_table &table, unsigned int pair,
                 float cos_p, float sin_p) {
  const unsigned int d = b->d, d4 = b->d4, gn = b->gn;
  const unsigned int half = d / 2;
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
          const float *x = r < gn ? q + (unsigned long long)(b->h0 + r) * d
                                  : k_new + b->own_at;
          x0[t] = x[j];
          x1[t] = x[j + half];
        }
      }
#pragma unroll
      for (int t = 0; t < 2; t++) {
        const unsigned int i = i0 + t * blockDim.x;
        if (i < items) {
          const unsigned int r = i / half, j = i % half;
          float *dst = (float *)(b->q_rows + (r < gn ? r : DECODE_GROUP) * d4);
          if (j != pair) {
            fdy_rope_cos_sin((double)b->last, table.inv[j], &cos_p, &sin_p);
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
          r < gn ? q + (unsigned long long)(b->h0 + r) * d : k_new + b->own_at;
      ((float *)(b->q_rows + (r < gn ? r : DECODE_GROUP) * d4))[j] = x[j];
    }
  }
  for (unsigned int i = threadIdx.x; i < (gn + 1) * (4 * d4 - d);
       i += blockDim.x) {
    const unsigned int r = i / (4 * d4 - d), j = d + i % (4 * d4 - d);
    ((float *)(b->q_rows + (r < gn ? r : DECODE_GROUP) * d4))[j] = 0.0f;
  }
}

/* The bits of the keys of a scores round (positions base, base + 16, ...
 * of the chunk at `begin` of n positions, elements 4 j4 ..): the held
 * round's on the warp's first round and the lane's first element group,
 * else the cache's (cache_rows), and then L2 is asked for the values of
 * those positions that the weighted sum reads next. */
static __device__ __forceinline__ void
decode_key_bits(uint4 bits[DECODE_INFLIGHT], const decode_block *b,
                const uint4 held_key[DECODE_INFLIGHT], const void *k_cache,
                const void *v_cache, unsigned int begin, unsigned int base,
                unsigned int n, unsigned int j4) {
  if (base == b->warp && j4 == b->lane) {
#pragma unroll
    for (int u = 0; u < DECODE_INFLIGHT; u++) {
      bits[u] = held_key[u];
    }
    return;
  }
  cache_rows(bits, k_cache, b->f16, b->vec, begin, base, n, b->last, b->kv_dim,
             b->kv_at, j4, b->d);
#pragma unroll
  for (int u = 0; u < DECODE_INFLIGHT; u++) {
    const unsigned int pp = base + u * ATTENTION_WARPS;
    if (b->vec && pp < n && begin + pp != b->last) {
      const unsigned long long at =
          (begin + pp) * b->kv_dim + b->kv_at + 4 * j4;
      prefetch_l2(b->f16 ? (const void *)((const uint16_t *)v_cache + at)
                         : (const void *)((const float *)v_cache + at));
    }
  }
}

/* The scores of a chunk of n positions at `begin`, times scale, into
 * scores[g scores_stride + position - begin] for the gn heads: warp w dots
 * positions w, w + 16, ..., DECODE_INFLIGHT at once (lanes on 4 elements,
 * q from shared memory, the keys of the first round held), then the
 * round's 16 dots summed at once by fdy_warp_sums16 (DECODE_INFLIGHT x
 * DECODE_GROUP = 16; lane 2 k holds dot k = u DECODE_GROUP + g's sum). */
static __device__ __forceinline__ void
decode_scores(const decode_block *b, const uint4 held_key[DECODE_INFLIGHT],
              const void *k_cache, const void *v_cache, const float *k_own,
              unsigned int begin, unsigned int n, float scale) {
  const unsigned int lane = b->lane, d4 = b->d4;
  for (unsigned int base = b->warp; base < n;
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
      decode_key_bits(bits, b, held_key, k_cache, v_cache, begin, base, n, j4);
      float4 key[DECODE_INFLIGHT];
      rows_of(key, bits, k_own, b->f16, b->vec, begin, base, b->last, j4, b->d);
#pragma unroll
      for (int g = 0; g < DECODE_GROUP; g++) {
        if (g < b->gn) {
          const float4 qv = b->q_rows[g * d4 + j4];
#pragma unroll
          for (int u = 0; u < DECODE_INFLIGHT; u++) {
            dot[u][g] = fdy_dot4(qv, key[u], dot[u][g]);
          }
        }
      }
    }
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
    const unsigned int i = lane / 2;
    const unsigned int u = i / DECODE_GROUP, g = i % DECODE_GROUP;
    const unsigned int pp = base + u * ATTENTION_WARPS;
    if (lane % 2 == 0 && pp < n && g < b->gn) {
      b->scores[g * b->scores_stride + pp] = total * scale;
    }
  }
}

/* The softmax of chunk c's n scores, warp g head g's: its maximum m,
 * e = expf(score - m) in place of each score and their float sum l (lanes,
 * then a butterfly); (m, l) to the workspace at the chunk's index. */
static __device__ __forceinline__ void
decode_softmax(const decode_block *b, const decode_partials &partials,
               unsigned int heads, unsigned int c, unsigned int n) {
  const unsigned int lane = b->lane, warp = b->warp;
  if (warp >= b->gn) {
    return;
  }
  float *s = b->scores + warp * b->scores_stride;
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
    partials.ml[(unsigned long long)c * heads + b->h0 + warp] =
        make_float2(m, l);
  }
}

/* The weighted values of a chunk of n positions at `begin`: per head, the
 * unnormalized sum of e * v over warp w's positions w, w + 16, ... in
 * order (lanes on 4 elements, DECODE_INFLIGHT value rows loaded at once,
 * the values of the first round held) into warp_out's row of (w, head). */
static __device__ __forceinline__ void
decode_weighted_values(const decode_block *b,
                       const uint4 held_value[DECODE_INFLIGHT],
                       const void *v_cache, const float *v_own,
                       unsigned int begin, unsigned int n) {
  const unsigned int lane = b->lane, warp = b->warp, d4 = b->d4;
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
        cache_rows(bits, v_cache, b->f16, b->vec, begin, base, n, b->last,
                   b->kv_dim, b->kv_at, j4, b->d);
      }
      float4 value[DECODE_INFLIGHT];
      rows_of(value, bits, v_own, b->f16, b->vec, begin, base, b->last, j4,
              b->d);
#pragma unroll
      for (int u = 0; u < DECODE_INFLIGHT; u++) {
        const unsigned int pp = base + u * ATTENTION_WARPS;
        if (pp < n) {
#pragma unroll
          for (int g = 0; g < DECODE_GROUP; g++) {
            if (g < b->gn) {
              acc[g] = fdy_axpy4(b->scores[g * b->scores_stride + pp], value[u],
                                 acc[g]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < DECODE_GROUP; g++) {
      b->warp_out[(warp * DECODE_GROUP + g) * d4 + j4] = acc[g];
    }
  }
}

/* Chunk c's partial outputs: per head, element j the warps' sums added in
 * warp order, to the workspace at the chunk's index. */
static __device__ __forceinline__ void
decode_partial_output(const decode_block *b, const decode_partials &partials,
                      unsigned int heads, unsigned int c) {
  const unsigned int d4 = b->d4;
  const float *wo = (const float *)b->warp_out;
  for (unsigned int i = threadIdx.x; i < b->gn * d4 * 4; i += blockDim.x) {
    const unsigned int g = i / (d4 * 4), j = i % (d4 * 4);
    float o = 0.0f;
    for (unsigned int w = 0; w < ATTENTION_WARPS; w++) {
      o += wo[(w * DECODE_GROUP + g) * d4 * 4 + j];
    }
    partials.o[((unsigned long long)c * heads + b->h0 + g) * d4 * 4 + j] = o;
  }
}

/* Chunk c of the block: its scores, softmax, weighted values and partial
 * output (above), with the next chunk's held round (c + gridDim.y) loaded
 * once this one's is used. k_own, v_own: the step's k row (rotated, in
 * shared memory) and v row, which stand for the cache's at `last`. */
static __device__ __forceinline__ void
decode_chunk(const decode_block *b, unsigned int c, const void *k_cache,
             const void *v_cache, const float *k_own, const float *v_own,
             float scale, uint4 held_key[DECODE_INFLIGHT],
             uint4 held_value[DECODE_INFLIGHT], const decode_partials &partials,
             unsigned int heads) {
  const unsigned int begin = c * b->chunk;
  const unsigned int n = min(b->chunk, b->last + 1 - begin);
  const unsigned long long next_begin =
      begin + (unsigned long long)gridDim.y * b->chunk;
  const unsigned int next_n = held_positions(c + gridDim.y, b->chunks, b->chunk,
                                             b->last, b->lane, b->d4);
  decode_scores(b, held_key, k_cache, v_cache, k_own, begin, n, scale);
  cache_rows(held_key, k_cache, b->f16, b->vec, next_begin, b->warp, next_n,
             b->last, b->kv_dim, b->kv_at, b->lane, b->d);
  __syncthreads();
  decode_softmax(b, partials, heads, c, n);
  __syncthreads();
  decode_weighted_values(b, held_value, v_cache, v_own, begin, n);
  cache_rows(held_value, v_cache, b->f16, b->vec, next_begin, b->warp, next_n,
             b->last, b->kv_dim, b->kv_at, b->lane, b->d);
  __syncthreads();
  decode_partial_output(b, partials, heads, c);
  __syncthreads(); /* scores and warp_out are reused by the next chunk */
}

/* Counts the block done on counters[first_x] (the blocks of x = first_x,
 * first_x + FDY_CUDA_OP_COUNTERS, ... count on one counter): whether it is
 * the last of them to finish, for every thread of the block; the last one
 * zeroes the counter for the stream's next launch. One acq_rel atomic
 * (docs/tuning-log.md, entry 5): release orders the block's partials
 * (written before the caller's __syncthreads) before its count, acquire
 * lets the last block see every other block's. */
static __device__ __forceinline__ bool decode_last_block(unsigned int *counters,
                                                         unsigned int first_x) {
  bool last_block = false;
  if (threadIdx.x == 0) {
    const unsigned int sharing =
        (gridDim.x - 1 - first_x) / FDY_CUDA_OP_COUNTERS + 1;
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
  return __syncthreads_or(last_block) != 0;
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
 * Shared memory: decode_block. */
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
  decode_block b;
  decode_block_layout(&b, decode_shared, d, chunk);
  fdy_grid_launch_dependents();
  if (fdy_active_rows(step, 1) == 0) {
    return;
  }
  decode_block_place(&b, step, f16, vec, heads, group, slices, context,
                     sequences);

  /* before the wait: the held round, the rope's cos and sin of the
   * thread's first pair, and the scores' scale */
  uint4 held_key[DECODE_INFLIGHT], held_value[DECODE_INFLIGHT];
  decode_hold_first(&b, k_cache, v_cache, held_key, held_value);
  const unsigned int half = d / 2;
  unsigned int pair = ~0u;
  float cos_p = 0.0f, sin_p = 0.0f;
  if (rope && b.position >= 0 && threadIdx.x < (b.gn + 1) * half) {
    pair = threadIdx.x % half;
    fdy_rope_cos_sin((double)b.last, table.inv[pair], &cos_p, &sin_p);
  }
  const float scale = (float)(1.0 / sqrt((double)d));
  fdy_grid_wait(); /* q, k and v come from the kernels before */
  if (b.position < 0) {
    for (unsigned int i = threadIdx.x; blockIdx.y == 0 && i < b.gn * d;
         i += blockDim.x) {
      out[(unsigned long long)b.h0 * d + i] = CUDART_NAN_F;
    }
    return;
  }
  /* the step's k and v rows of the kv head, k rotated in shared memory */
  const float *v_own = v_new + b.own_at;
  const float *k_own = (const float *)(b.q_rows + DECODE_GROUP * b.d4);
  decode_stage_q_k(&b, q, k_new, rope, table, pair, cos_p, sin_p);
  __syncthreads();
  /* the append, by slice 0's block of the last position's chunk */
  if (b.g0 == 0 && blockIdx.y == (b.chunks - 1) % gridDim.y) {
    for (unsigned int i = threadIdx.x; i < d; i += blockDim.x) {
      fdy_cache_store(k_cache, f16, b.last * b.kv_dim + b.kv_at + i, k_own[i]);
      fdy_cache_store(v_cache, f16, b.last * b.kv_dim + b.kv_at + i, v_own[i]);
    }
  }
  for (unsigned int c = blockIdx.y; c < b.chunks; c += gridDim.y) {
    decode_chunk(&b, c, k_cache, v_cache, k_own, v_own, scale, held_key,
                 held_value, partials, heads);
  }

  const unsigned int first_x = blockIdx.x % FDY_CUDA_OP_COUNTERS;
  if (!decode_last_block(counters, first_x)) {
    return;
  }
  for (unsigned int x = first_x; x < gridDim.x; x += FDY_CUDA_OP_COUNTERS) {
    const unsigned int xg0 = (x % slices) * DECODE_GROUP;
    combine_heads((x / slices) * group + xg0,
                  min((unsigned int)DECODE_GROUP, group - xg0), b.chunks, heads,
                  d, &partials, b.scores, b.inv, b.warp_out, out);
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
