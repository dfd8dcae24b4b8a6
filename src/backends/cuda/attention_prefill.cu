/* ATTENTION's prefill variant (q has several rows) on CUDA: flash
 * attention after the append kernel of attention.cu has stored the step's
 * k and v rows in the caches. One of two kernels, chosen from head_dim d:
 *
 * 1. tensor cores (d a multiple of 16, up to 128): query tiles of
 *    MMA_ROWS = 16 rows, paired short with long (tiles j and n - 1 - j of
 *    n) so that every block of a causal prefill from position 0 sees about
 *    the same number of key positions. Block (pair, kv head, part) runs
 *    both tiles for up to MMA_MAX_HEADS query heads that share one kv head
 *    (a group of up to 4 in one part; llama-3.2-3b: the group of 3, so 6
 *    warps), a warp per tile and head, over key/value tiles of MMA_KV = 64
 *    positions from 0 up to the last position of its rows (a warp skips
 *    the tiles past its own rows' last), so a key/value tile is read once
 *    for all the block's heads and both query tiles. Key/value tiles are
 *    double buffered: the threads start the copies of the next tile
 *    (cp.async of 16 bytes, zeros past the last position) before they work
 *    on the current one. An F16 cache is staged as it is (rows
 *    of d + 8 halves) and used in place; an F32 cache is staged as it is
 *    (rows of d floats), then rounded to nearest even into one F16 tile.
 *    q is rounded to F16 into the warp's A fragments (registers) once.
 *    S = q k with mma.sync m16n8k16 (F16 in, F32 accumulate; 8 n-tiles of
 *    8 positions, d / 16 k-steps in order); the causal mask (a position
 *    after the row's is -inf) only where the tile reaches past the warp's
 *    first row; an online softmax per row in float: m_new = max(m, tile
 *    max) (lanes, then a quad butterfly), alpha = exp2((m - m_new) scale
 *    log2e), p = exp2((s - m_new) scale log2e) rounded to F16, l = l alpha
 *    + the rounded p (each lane its 16 columns of the tile; the quad's four
 *    sums added by a butterfly at the end), O = O alpha + P V with mma,
 *    P's C fragments of two n-tiles being the A fragment of one k-step of
 *    16 positions, the values' B fragments loaded by ldmatrix.trans from
 *    the staged rows; finally O / l. Every sum runs in an order fixed by
 *    the shapes (the mma k-steps, tiles in order).
 * 2. float (any other d): the SIMT kernel. Block (tile, head) runs
 *    PREFILL_Q query rows of one head over key/value tiles of PREFILL_KV
 *    positions staged in shared memory: scores S = q k * scale (causal
 *    mask), an online softmax in float with the row sums in double (m_new
 *    = max(m, tile max), alpha = expf(m - m_new), p = expf(s - m_new), l =
 *    l alpha + sum p), and the output accumulator O = O alpha + P V in
 *    shared memory; finally O / l.
 * The float kernel runs the query tiles from the last (most positions) to
 * the first; the tensor-core kernel's pairs start with the longest.
 *
 * Precision against the CPU backend (float scores, exp in float summed in
 * double): the float kernel stays near the CPU's own rounding error. The
 * tensor-core kernel rounds q, k, v (an F32 cache) and p to F16, a
 * relative error of at most 2^-11 each: a score s = sum q_i k_i moves by
 * about 2^-11 sqrt(2) |q||k| / sqrt(d) (random rounding over d terms),
 * times the scale, so a weight moves by that much relatively, and the
 * output (a weighted mean of v) by about that plus v's and p's own 2^-11:
 * a few 1e-4 relative for scores of order one (tests/cuda/test_cuda_ops.c
 * checks MMA_BOUND, 2e-3).
 *
 * The rows are one chunk of one sequence s (row t at position p0 + t; p0
 * and s are row 0's in the step): every key and value comes from s's
 * region of the caches. A row whose position lies outside the cache, or
 * every row when s does, is NaN. Rows at or beyond the step's count are
 * neither read nor written; the count, p0 and s are read by the kernels
 * when they run. PDL: the kernels wait (fdy_grid_wait) before reading q or
 * the caches. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define ATTENTION_THREADS 128
#define ATTENTION_WARPS   (ATTENTION_THREADS / 32)

#define PREFILL_Q       32               /* query rows of a block */
#define PREFILL_KV      32               /* positions of a key/value tile */
#define PREFILL_S_WIDTH (PREFILL_KV + 4) /* floats of a row of S */

#define MMA_ROWS        16  /* query rows of a tile (a warp's) */
#define MMA_KV          64  /* positions of a tensor-core key/value tile */
#define MMA_MAX_D       128 /* the largest head_dim on the tensor cores */
#define MMA_MAX_HEADS   4   /* query heads of a tensor-core block, at most */
#define MMA_MAX_THREADS (32 * 2 * MMA_MAX_HEADS)

/* The kernels' thread layouts are written for these values. */
static_assert(ATTENTION_THREADS == 128 && PREFILL_Q == 32 && PREFILL_KV == 32,
              "prefill thread layout");
static_assert(MMA_ROWS == 16 && MMA_KV == 64 && MMA_MAX_THREADS <= 1024,
              "tensor-core prefill layout");

/* Query tile `tile` of tile_rows rows of the chunk (row t at position
 * p0 + t of sequence s, p0 and s row 0's in the step): r0 its first row,
 * nr its active rows (0: none), p0 the position of row r0, end the bound
 * of the positions that lie in the cache (context, or 0 when s lies
 * outside the cache: no row's does), last the last key position its rows
 * read (-1: none, every row lies outside the cache or none is active),
 * first the cache row of position 0 of sequence s (0 when s lies outside).
 * Reads only the step tensor (allowed before fdy_grid_wait). */
typedef struct prefill_tile {
  unsigned int r0, nr;
  long long p0, end, last;
  unsigned long long first;
} prefill_tile;

static __device__ __forceinline__ prefill_tile
prefill_tile_at(const int32_t *step, unsigned int rows, unsigned int tile_rows,
                unsigned int tile, unsigned long long context,
                unsigned long long sequences) {
  const unsigned int active = fdy_active_rows(step, rows);
  const long long s = step[FDY_STEP_SEQUENCE(0)];
  const bool in = s >= 0 && (unsigned long long)s < sequences;
  prefill_tile t;
  t.r0 = tile * tile_rows;
  t.nr = t.r0 < active ? min(tile_rows, active - t.r0) : 0;
  t.p0 = (long long)step[FDY_STEP_POSITION(0)] + t.r0;
  t.end = in ? (long long)context : 0;
  t.last = t.nr == 0 || t.p0 >= t.end ? -1 : min(t.p0 + t.nr - 1, t.end - 1);
  t.first = in ? (unsigned long long)s * context : 0;
  return t;
}

/* ---- prefill in float (SIMT) ---------------------------------------------
 */

/* The float kernel's shared memory: the rows' sums (row_l, PREFILL_Q
 * doubles), S (PREFILL_Q x PREFILL_S_WIDTH floats), the rows' maxima and
 * rescales (row_m, row_alpha: PREFILL_Q floats each), q and the key tile
 * (Qs, Ks: rows of d + 1 floats: no bank conflicts when threads read one
 * element of different rows), the value tile and the output accumulator
 * (Vs, Os: rows of d floats). */
typedef struct prefill_smem {
  double *row_l;
  float *S, *row_m, *row_alpha, *Qs, *Ks, *Vs, *Os;
} prefill_smem;

static __device__ __forceinline__ prefill_smem prefill_smem_at(double *base,
                                                               unsigned int d) {
  prefill_smem sm;
  sm.row_l = base;
  sm.S = (float *)(sm.row_l + PREFILL_Q);
  sm.row_m = sm.S + PREFILL_Q * PREFILL_S_WIDTH;
  sm.row_alpha = sm.row_m + PREFILL_Q;
  sm.Qs = sm.row_alpha + PREFILL_Q;
  sm.Ks = sm.Qs + PREFILL_Q * (d + 1);
  sm.Vs = sm.Ks + PREFILL_KV * (d + 1);
  sm.Os = sm.Vs + PREFILL_KV * d;
  return sm;
}

/* The tile's q rows (head h of rows r0 .. r0 + nr - 1; zero past nr) into
 * Qs, the output accumulator zeroed, the rows' sums 0 and maxima -inf. */
static __device__ __forceinline__ void
prefill_load_q(const prefill_smem *sm, const float *q, unsigned int r0,
               unsigned int nr, unsigned long long q_dim, unsigned int h,
               unsigned int d) {
  for (unsigned int i = threadIdx.x; i < PREFILL_Q * d; i += blockDim.x) {
    const unsigned int r = i / d, j = i % d;
    sm->Qs[r * (d + 1) + j] =
        r < nr ? q[(r0 + r) * q_dim + (unsigned long long)h * d + j] : 0.0f;
    sm->Os[i] = 0.0f;
  }
  for (unsigned int r = threadIdx.x; r < PREFILL_Q; r += blockDim.x) {
    sm->row_l[r] = 0.0;
    sm->row_m[r] = -CUDART_INF_F;
  }
}

/* The key and value tile of positions kv0 .. kv0 + PREFILL_KV - 1 (zeros
 * past last) of the kv head at kv_at into Ks and Vs, a float4 of a row a
 * thread at a time. */
static __device__ __forceinline__ void
prefill_load_kv(const prefill_smem *sm, const void *k_cache,
                const void *v_cache, bool f16, bool vec, long long kv0,
                long long last, unsigned long long kv_dim,
                unsigned long long kv_at, unsigned int d) {
  const unsigned int d4 = (d + 3) / 4;
  for (unsigned int i = threadIdx.x; i < PREFILL_KV * d4; i += blockDim.x) {
    const unsigned int c = i / d4, j4 = i % d4;
    const long long p = kv0 + c;
    const unsigned long long at = (unsigned long long)p * kv_dim + kv_at;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 kk =
        p <= last ? fdy_cache_load4(k_cache, f16, vec, at, j4, d) : zero;
    const float4 vv =
        p <= last ? fdy_cache_load4(v_cache, f16, vec, at, j4, d) : zero;
    const float ke[4] = {kk.x, kk.y, kk.z, kk.w};
    const float ve[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
      if (4 * j4 + e < d) {
        sm->Ks[c * (d + 1) + 4 * j4 + e] = ke[e];
        sm->Vs[c * d + 4 * j4 + e] = ve[e];
      }
    }
  }
}

/* The scores of the tile, S = q k * scale: thread (rg, cg) dots rows rg,
 * rg + 16 with columns cg + 8 i (fmaf over the d elements in order); -inf
 * where the row is not active or outside the cache, or the position lies
 * after the row's (the causal mask). */
static __device__ __forceinline__ void
prefill_scores(const prefill_smem *sm, long long kv0, long long p0,
               unsigned int nr, long long end, unsigned int d, float scale) {
  const unsigned int rg = threadIdx.x / 8, cg = threadIdx.x % 8;
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  for (unsigned int k = 0; k < d; k++) {
    const float q0 = sm->Qs[rg * (d + 1) + k];
    const float q1 = sm->Qs[(rg + 16) * (d + 1) + k];
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float kk = sm->Ks[(cg + 8 * i) * (d + 1) + k];
      acc[0][i] = fmaf(q0, kk, acc[0][i]);
      acc[1][i] = fmaf(q1, kk, acc[1][i]);
    }
  }
#pragma unroll
  for (int a = 0; a < 2; a++) {
    const unsigned int r = rg + 16 * a;
    const long long row_p = p0 + r;
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const long long p = kv0 + cg + 8 * i;
      const bool seen = r < nr && row_p >= 0 && row_p < end && p <= row_p;
      sm->S[r * PREFILL_S_WIDTH + cg + 8 * i] =
          seen ? acc[a][i] * scale : -CUDART_INF_F;
    }
  }
}

/* The online softmax of the tile, four threads per row, eight columns
 * each: m_new = max(m, tile max), p = expf(s - m_new) in place of S (0
 * while nothing is seen), alpha = expf(m - m_new) into row_alpha (1 while
 * nothing is seen), l = l alpha + sum p (in double). */
static __device__ __forceinline__ void prefill_softmax(const prefill_smem *sm) {
  const unsigned int r = threadIdx.x / 4, part = threadIdx.x % 4;
  float *s = sm->S + r * PREFILL_S_WIDTH + part * 8;
  float m_tile = -CUDART_INF_F;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    m_tile = fmaxf(m_tile, s[i]);
  }
  m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 1));
  m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, 2));
  const float m_old = sm->row_m[r];
  const float m_new = fmaxf(m_old, m_tile);
  const bool none = m_new == -CUDART_INF_F; /* nothing seen yet */
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; i++) {
    const float p = none ? 0.0f : expf(s[i] - m_new);
    s[i] = p;
    sum += p;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  __syncwarp(); /* every lane read row_m before it changes */
  if (part == 0) {
    const float alpha = none ? 1.0f : expf(m_old - m_new);
    sm->row_alpha[r] = alpha;
    sm->row_m[r] = m_new;
    sm->row_l[r] = sm->row_l[r] * alpha + sum;
  }
}

/* The output accumulator, O = O alpha + P V: warp w rows w + 4 i, lanes on
 * columns, the tile's positions in order. */
static __device__ __forceinline__ void prefill_output(const prefill_smem *sm,
                                                      unsigned int d) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (unsigned int j = lane; j < d; j += 32) {
    float acc[PREFILL_Q / ATTENTION_WARPS];
#pragma unroll
    for (int i = 0; i < PREFILL_Q / ATTENTION_WARPS; i++) {
      const unsigned int r = warp + ATTENTION_WARPS * i;
      acc[i] = sm->Os[r * d + j] * sm->row_alpha[r];
    }
    for (unsigned int c = 0; c < PREFILL_KV; c += 4) {
      const float v0 = sm->Vs[c * d + j], v1 = sm->Vs[(c + 1) * d + j];
      const float v2 = sm->Vs[(c + 2) * d + j], v3 = sm->Vs[(c + 3) * d + j];
#pragma unroll
      for (int i = 0; i < PREFILL_Q / ATTENTION_WARPS; i++) {
        const unsigned int r = warp + ATTENTION_WARPS * i;
        const float4 p = *(const float4 *)&sm->S[r * PREFILL_S_WIDTH + c];
        acc[i] = fmaf(p.x, v0, acc[i]);
        acc[i] = fmaf(p.y, v1, acc[i]);
        acc[i] = fmaf(p.z, v2, acc[i]);
        acc[i] = fmaf(p.w, v3, acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < PREFILL_Q / ATTENTION_WARPS; i++) {
      sm->Os[(warp + ATTENTION_WARPS * i) * d + j] = acc[i];
    }
  }
}

/* The tile's output rows, O / l (NaN for a row outside the cache). */
static __device__ __forceinline__ void
prefill_write(const prefill_smem *sm, float *out, unsigned int r0,
              unsigned int nr, long long p0, long long end,
              unsigned long long q_dim, unsigned int h, unsigned int d) {
  for (unsigned int i = threadIdx.x; i < nr * d; i += blockDim.x) {
    const unsigned int r = i / d, j = i % d;
    const long long row_p = p0 + r;
    float *o = out + (r0 + r) * q_dim + (unsigned long long)h * d + j;
    *o = row_p >= 0 && row_p < end
             ? sm->Os[r * d + j] * (float)(1.0 / sm->row_l[r])
             : CUDART_NAN_F;
  }
}

/* Block (tile, head): the tile's rows of one head over the key/value tiles
 * from position 0 to the last its rows read (shared memory: prefill_smem). */
__global__ void __launch_bounds__(ATTENTION_THREADS)
    prefill_kernel(const int32_t *step, const float *q, const void *k_cache,
                   const void *v_cache, bool f16, bool vec, unsigned int heads,
                   unsigned int group, unsigned int d, unsigned int rows,
                   unsigned long long context, unsigned long long sequences,
                   float *out) {
  extern __shared__ double prefill_shared[];
  const prefill_smem sm = prefill_smem_at(prefill_shared, d);
  fdy_grid_launch_dependents();
  /* tiles from the last (the most positions) to the first, heads inner */
  const unsigned int tiles = (rows + PREFILL_Q - 1) / PREFILL_Q;
  const prefill_tile pt =
      prefill_tile_at(step, rows, PREFILL_Q, tiles - 1 - blockIdx.x / heads,
                      context, sequences);
  if (pt.nr == 0) {
    return;
  }
  const unsigned int h = blockIdx.x % heads;
  /* kv_at: the kv head's elements of position 0 of the chunk's sequence */
  const unsigned long long q_dim = (unsigned long long)heads * d,
                           kv_dim = (unsigned long long)(heads / group) * d,
                           kv_at = pt.first * kv_dim +
                                   (unsigned long long)(h / group) * d;
  fdy_grid_wait();

  prefill_load_q(&sm, q, pt.r0, pt.nr, q_dim, h, d);
  const float scale = (float)(1.0 / sqrt((double)d));
  for (long long kv0 = 0; kv0 <= pt.last; kv0 += PREFILL_KV) {
    __syncthreads(); /* the previous tile is used up; the first: Qs, Os */
    prefill_load_kv(&sm, k_cache, v_cache, f16, vec, kv0, pt.last, kv_dim,
                    kv_at, d);
    __syncthreads();
    prefill_scores(&sm, kv0, pt.p0, pt.nr, pt.end, d, scale);
    __syncthreads();
    prefill_softmax(&sm);
    __syncthreads();
    prefill_output(&sm, d);
  }
  __syncthreads();
  prefill_write(&sm, out, pt.r0, pt.nr, pt.p0, pt.end, q_dim, h, d);
}

/* ---- prefill on the tensor cores -----------------------------------------
 */

/* Whether the tensor-core kernel runs head_dim d. */
static bool mma_fits(unsigned int d) {
  return d % 16 == 0 && d > 0 && d <= MMA_MAX_D;
}

/* Halves of a key or value row staged in F16: 8 halves of padding put the
 * 8 rows a fragment load (or an ldmatrix phase) reads in different banks
 * ((d + 8) / 2 words a row, an odd number of 4-word groups). */
static __host__ __device__ constexpr unsigned int mma_k_stride(unsigned int d) {
  return d + 8;
}

/* Bytes of one K/V stage (MMA_KV rows of keys, then of values) of a cache
 * of F16 (rows of mma_k_stride(d) halves, used by the mma as they are) or
 * of F32 (rows of d floats, converted into the F16 tile after the two
 * stages). */
static __host__ __device__ constexpr unsigned int
mma_stage_bytes(unsigned int d, bool f16) {
  return f16 ? 2 * MMA_KV * mma_k_stride(d) * 2 : 2 * MMA_KV * d * 4;
}

static __device__ __forceinline__ uint32_t half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *(const uint32_t *)&h;
}

/* 16 bytes from global src to shared dst, asynchronously (cp.async, L2
 * only); zeros instead when !full (src is not read). */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src,
                                                  bool full) {
  const unsigned int to = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(to),
               "l"(src), "r"(full ? 16 : 0)
               : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are pending. */
template <int N> static __device__ __forceinline__ void cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Starts the copies of the key and value rows kv0 .. kv0 + MMA_KV - 1 of
 * the kv head at kv_at (elements of ESIZE bytes) into the stage at st
 * (keys, then values, rows of `stride` bytes); rows past last are zeros.
 * The block's threads take 16-byte pieces i, i + blockDim.x, ... */
template <unsigned int D, unsigned int ESIZE>
static __device__ __forceinline__ void
mma_stage_start(const void *k_cache, const void *v_cache, long long kv0,
                long long last, unsigned long long kv_dim,
                unsigned long long kv_at, unsigned char *st,
                unsigned int stride) {
  constexpr unsigned int PIECES = D * ESIZE / 16; /* of a row */
  for (unsigned int i = threadIdx.x; i < MMA_KV * PIECES; i += blockDim.x) {
    const unsigned int c = i / PIECES, j = i % PIECES;
    const long long p = kv0 + c;
    const bool full = p <= last;
    const unsigned long long at =
        ((unsigned long long)(full ? p : 0) * kv_dim + kv_at) * ESIZE + 16 * j;
    unsigned char *to = st + c * stride + 16 * j;
    cp_async16(to, (const unsigned char *)k_cache + at, full);
    cp_async16(to + MMA_KV * stride, (const unsigned char *)v_cache + at, full);
  }
}

/* The F32 stage at st rounded to nearest even into the F16 tile at kw
 * (keys, then values, rows of mma_k_stride(D) halves). */
template <unsigned int D>
static __device__ __forceinline__ void mma_convert(const float *st,
                                                   __half *kw) {
  constexpr unsigned int KS = mma_k_stride(D);
  for (unsigned int i = threadIdx.x; i < 2 * MMA_KV * (D / 4);
       i += blockDim.x) {
    const unsigned int c = i / (D / 4), j = 4 * (i % (D / 4));
    const float4 f = *(const float4 *)(st + c * D + j);
    *(uint2 *)(kw + c * KS + j) =
        make_uint2(half2_bits(f.x, f.y), half2_bits(f.z, f.w));
  }
}

/* c += a b: m16n8k16, F16 in, F32 accumulate. */
static __device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4],
                                                uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Four 8 x 8 matrices of halves from shared memory: lanes 8 j .. 8 j + 7
 * give the addresses of matrix j's rows (16 bytes each); lane 4 g + t gets
 * in r[j] matrix j's elements [g][2 t] and [g][2 t + 1], or transposed
 * (ldmatrix_x4_trans) [2 t][g] and [2 t + 1][g]. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4],
                                                   const __half *row) {
  const unsigned int at = (unsigned int)__cvta_generic_to_shared(row);
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(at)
      : "memory");
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4],
                                                         const __half *row) {
  const unsigned int at = (unsigned int)__cvta_generic_to_shared(row);
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(at)
      : "memory");
}

/* Fragments (lane = 4 g + t): A (16 x 16) a0 = rows g, columns 2 t, 2 t + 1;
 * a1 = row g + 8, same columns; a2, a3 = columns + 8. B (16 x 8, k by n)
 * b0 = k 2 t, 2 t + 1 of column g; b1 = k + 8. C (16 x 8) c0, c1 = row g,
 * columns 2 t, 2 t + 1; c2, c3 = row g + 8. DK = d / 16. A warp's rows
 * are ra = g and rb = g + 8 of its tile. */

/* Starts the copies of the key/value tile at kv0 (rows past last: zeros)
 * into the stage at st: an F16 cache's rows of mma_k_stride(D) halves, an
 * F32 cache's of D floats (mma_stage_start). */
template <unsigned int D>
static __device__ __forceinline__ void
mma_stage_tile(const void *k_cache, const void *v_cache, bool f16,
               long long kv0, long long last, unsigned long long kv_dim,
               unsigned long long kv_at, unsigned char *st) {
  if (f16) {
    mma_stage_start<D, 2>(k_cache, v_cache, kv0, last, kv_dim, kv_at, st,
                          mma_k_stride(D) * 2);
  } else {
    mma_stage_start<D, 4>(k_cache, v_cache, kv0, last, kv_dim, kv_at, st,
                          D * 4);
  }
}

/* The warp's q rows ra and rb (at qra and qrb; zeros where in_a, in_b are
 * false) rounded to F16 into the A fragments of the DK k-steps, once. */
template <unsigned int DK>
static __device__ __forceinline__ void
mma_load_q(uint32_t qa[DK][4], const float *qra, const float *qrb, bool in_a,
           bool in_b, unsigned int t) {
#pragma unroll
  for (unsigned int kk = 0; kk < DK; kk++) {
    const unsigned int c = 16 * kk + 2 * t;
    const float2 zero = make_float2(0.0f, 0.0f);
    const float2 a0 = in_a ? *(const float2 *)(qra + c) : zero;
    const float2 a2 = in_a ? *(const float2 *)(qra + c + 8) : zero;
    const float2 b0 = in_b ? *(const float2 *)(qrb + c) : zero;
    const float2 b2 = in_b ? *(const float2 *)(qrb + c + 8) : zero;
    qa[kk][0] = half2_bits(a0.x, a0.y);
    qa[kk][1] = half2_bits(b0.x, b0.y);
    qa[kk][2] = half2_bits(a2.x, a2.y);
    qa[kk][3] = half2_bits(b2.x, b2.y);
  }
}

/* The key/value tile at kv0 (in stage s) once it has landed, the next
 * tile's copies started first into the other stage when there is one:
 * its F16 keys (the values MMA_KV rows of mma_k_stride(D) after), the
 * stage itself for an F16 cache, else the F32 stage converted into the
 * F16 tile at work. Called by every thread of the block (barriers). */
template <unsigned int D>
static __device__ __forceinline__ const __half *
mma_tile(const void *k_cache, const void *v_cache, bool f16, long long kv0,
         long long last, unsigned long long kv_dim, unsigned long long kv_at,
         unsigned char *stages, unsigned int stage_bytes, unsigned int s,
         __half *work) {
  __syncthreads(); /* the tile before is used up (its stage, the F16 tile) */
  if (kv0 + MMA_KV <= last) {
    mma_stage_tile<D>(k_cache, v_cache, f16, kv0 + MMA_KV, last, kv_dim, kv_at,
                      stages + (s ^ 1u) * stage_bytes);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads(); /* the tile at kv0 has landed, every thread's part */
  if (f16) {
    return (const __half *)(stages + s * stage_bytes);
  }
  mma_convert<D>((const float *)(stages + s * stage_bytes), work);
  __syncthreads();
  return work;
}

/* The scores S = q k of the tile's 64 positions (8 n-tiles of 8) for rows
 * ra and rb: per k-step the keys' B fragments of n-tiles 2 i, 2 i + 1 by
 * one ldmatrix (matrices: positions 16 i / 16 i + 8 x elements + 0 / + 8),
 * all loaded before the k-step's mma. */
template <unsigned int DK>
static __device__ __forceinline__ void
mma_scores(float sc[8][4], const uint32_t qa[DK][4], const __half *Ks,
           unsigned int lane) {
  constexpr unsigned int KS = mma_k_stride(16 * DK);
#pragma unroll
  for (unsigned int n = 0; n < 8; n++) {
    sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
  }
  const __half *krow =
      Ks + (lane % 8 + 8 * (lane / 16)) * KS + 8 * ((lane / 8) % 2);
#pragma unroll
  for (unsigned int kk = 0; kk < DK; kk++) {
    uint32_t kb[4][4];
#pragma unroll
    for (unsigned int i = 0; i < 4; i++) {
      ldmatrix_x4(kb[i], krow + 16 * i * KS + 16 * kk);
    }
#pragma unroll
    for (unsigned int i = 0; i < 4; i++) {
      mma16816(sc[2 * i], qa[kk], kb[i][0], kb[i][1]);
      mma16816(sc[2 * i + 1], qa[kk], kb[i][2], kb[i][3]);
    }
  }
}

/* The causal mask of the tile at kv0: -inf where a position lies after
 * the row's (pa for row ra, pb for rb). */
static __device__ __forceinline__ void
mma_causal_mask(float sc[8][4], long long kv0, long long pa, long long pb,
                unsigned int t) {
#pragma unroll
  for (unsigned int n = 0; n < 8; n++) {
    const long long p = kv0 + 8 * n + 2 * t;
    sc[n][0] = p > pa ? -CUDART_INF_F : sc[n][0];
    sc[n][1] = p + 1 > pa ? -CUDART_INF_F : sc[n][1];
    sc[n][2] = p > pb ? -CUDART_INF_F : sc[n][2];
    sc[n][3] = p + 1 > pb ? -CUDART_INF_F : sc[n][3];
  }
}

/* The online softmax of the tile for rows ra and rb (running maxima m_a,
 * m_b and sums l_a, l_b of the lane's columns): m_new = max(m, tile max)
 * (lanes, then a quad butterfly), alpha = exp2((m - m_new) scale log2e)
 * rescales l and the output o, p = exp2((s - m_new) scale log2e) rounded
 * to F16 is added into l and left in pf, n-tiles 2 kk and 2 kk + 1 as
 * k-step kk's A fragment. */
template <unsigned int DK>
static __device__ __forceinline__ void
mma_softmax(const float sc[8][4], float o[2 * DK][4], uint32_t pf[4][4],
            float *m_a, float *m_b, float *l_a, float *l_b, float scale_log2) {
  float mx_a = *m_a, mx_b = *m_b;
#pragma unroll
  for (unsigned int n = 0; n < 8; n++) {
    mx_a = fmaxf(mx_a, fmaxf(sc[n][0], sc[n][1]));
    mx_b = fmaxf(mx_b, fmaxf(sc[n][2], sc[n][3]));
  }
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
  /* nothing seen yet: weights exp2(-inf) = 0, alpha 0 */
  const float base_a = mx_a == -CUDART_INF_F ? 0.0f : mx_a;
  const float base_b = mx_b == -CUDART_INF_F ? 0.0f : mx_b;
  const float alpha_a = exp2f((*m_a - base_a) * scale_log2);
  const float alpha_b = exp2f((*m_b - base_b) * scale_log2);
  *m_a = mx_a;
  *m_b = mx_b;
  *l_a *= alpha_a;
  *l_b *= alpha_b;
#pragma unroll
  for (unsigned int n = 0; n < 2 * DK; n++) {
    o[n][0] *= alpha_a;
    o[n][1] *= alpha_a;
    o[n][2] *= alpha_b;
    o[n][3] *= alpha_b;
  }
#pragma unroll
  for (unsigned int n = 0; n < 8; n++) {
    const __half2 ha =
        __floats2half2_rn(exp2f((sc[n][0] - base_a) * scale_log2),
                          exp2f((sc[n][1] - base_a) * scale_log2));
    const __half2 hb =
        __floats2half2_rn(exp2f((sc[n][2] - base_b) * scale_log2),
                          exp2f((sc[n][3] - base_b) * scale_log2));
    *l_a += __low2float(ha) + __high2float(ha);
    *l_b += __low2float(hb) + __high2float(hb);
    pf[n / 2][2 * (n % 2)] = *(const uint32_t *)&ha;
    pf[n / 2][2 * (n % 2) + 1] = *(const uint32_t *)&hb;
  }
}

/* The output, O += P V: per k-step of 16 positions the values' B fragments
 * of n-tiles 2 i, 2 i + 1 by one ldmatrix.trans (matrices: positions + 0 /
 * + 8 x elements 16 i / 16 i + 8), all loaded before the k-step's mma. */
template <unsigned int DK>
static __device__ __forceinline__ void
mma_output(float o[2 * DK][4], const uint32_t pf[4][4], const __half *Vs,
           unsigned int lane) {
  constexpr unsigned int KS = mma_k_stride(16 * DK);
  const __half *vrow =
      Vs + (lane % 8 + 8 * ((lane / 8) % 2)) * KS + 8 * (lane / 16);
#pragma unroll
  for (unsigned int kk = 0; kk < 4; kk++) {
    uint32_t vb[DK][4];
#pragma unroll
    for (unsigned int i = 0; i < DK; i++) {
      ldmatrix_x4_trans(vb[i], vrow + 16 * kk * KS + 16 * i);
    }
#pragma unroll
    for (unsigned int i = 0; i < DK; i++) {
      mma16816(o[2 * i], pf[kk], vb[i][0], vb[i][1]);
      mma16816(o[2 * i + 1], pf[kk], vb[i][2], vb[i][3]);
    }
  }
}

/* The warp's output rows ra and rb of its tile wt (head h; the lane's
 * columns): O / l, the quad's four sums of l added by a butterfly first;
 * NaN for a row outside the cache, nothing for a row past the tile's
 * active ones. */
template <unsigned int DK>
static __device__ __forceinline__ void
mma_write(const float o[2 * DK][4], float l_a, float l_b,
          const prefill_tile *wt, unsigned long long q_dim, unsigned int h,
          float *out) {
  constexpr unsigned int D = 16 * DK;
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned int ra = g, rb = g + 8;
  const long long pa = wt->p0 + ra, pb = wt->p0 + rb;
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const bool in_a = pa >= 0 && pa < wt->end;
  const bool in_b = pb >= 0 && pb < wt->end;
  const float inv_a = in_a ? 1.0f / l_a : CUDART_NAN_F;
  const float inv_b = in_b ? 1.0f / l_b : CUDART_NAN_F;
  float *oa = out + (wt->r0 + ra) * q_dim + (unsigned long long)h * D + 2 * t;
  float *ob = out + (wt->r0 + rb) * q_dim + (unsigned long long)h * D + 2 * t;
#pragma unroll
  for (unsigned int n = 0; n < 2 * DK; n++) {
    if (ra < wt->nr) {
      *(float2 *)(oa + 8 * n) =
          in_a ? make_float2(o[n][0] * inv_a, o[n][1] * inv_a)
               : make_float2(inv_a, inv_a);
    }
    if (rb < wt->nr) {
      *(float2 *)(ob + 8 * n) =
          in_b ? make_float2(o[n][2] * inv_b, o[n][3] * inv_b)
               : make_float2(inv_b, inv_b);
    }
  }
}

/* Block (pair, kv head, part): 2 block_heads warps, warp w runs head
 * part block_heads + w % block_heads of the kv head's group on query tile
 * pair (w < block_heads) or tiles - 1 - pair (the other); warps of heads
 * past the group's end, of a tile without active rows (or absent: the
 * middle one of an odd number of tiles) stage their share of the key/value
 * tiles but compute nothing. Shared memory: two stages (mma_stage_bytes), then
 * for an F32 cache the F16 tile (keys, then values, rows of mma_k_stride(d)
 * halves). */
template <unsigned int DK>
__global__ void __launch_bounds__(MMA_MAX_THREADS, 1)
    prefill_mma_kernel(const int32_t *step, const float *q, const void *k_cache,
                       const void *v_cache, bool f16, unsigned int heads,
                       unsigned int group, unsigned int block_heads,
                       unsigned int rows, unsigned long long context,
                       unsigned long long sequences, float *out) {
  constexpr unsigned int D = 16 * DK, KS = mma_k_stride(D);
  extern __shared__ uint4 mma_shared[];
  unsigned char *stages = (unsigned char *)mma_shared;
  const unsigned int stage_bytes =
      f16 ? mma_stage_bytes(D, true) : mma_stage_bytes(D, false);
  __half *work = (__half *)(stages + 2 * stage_bytes); /* F32 cache only */
  fdy_grid_launch_dependents();

  /* pair j: tiles j and tiles - 1 - j of MMA_ROWS rows (the second absent
   * when they coincide) */
  const unsigned int parts = (group + block_heads - 1) / block_heads;
  const unsigned int units = heads / group * parts;
  const unsigned int tiles = (rows + MMA_ROWS - 1) / MMA_ROWS;
  const unsigned int pair = blockIdx.x / units, unit = blockIdx.x % units;
  const prefill_tile ta =
      prefill_tile_at(step, rows, MMA_ROWS, pair, context, sequences);
  if (ta.nr == 0) { /* the other tile lies further still */
    return;
  }
  const unsigned int tile_b = tiles - 1 - pair;
  const prefill_tile tb =
      tile_b != pair
          ? prefill_tile_at(step, rows, MMA_ROWS, tile_b, context, sequences)
          : prefill_tile{0, 0, 0, 0, -1, 0};
  const long long last = max(ta.last, tb.last); /* of the block */
  const unsigned int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const prefill_tile wt = warp < block_heads ? ta : tb; /* the warp's */
  const unsigned int r0 = wt.r0, nr = wt.nr;
  const long long p0 = wt.p0;
  const unsigned int kvh = unit / parts;
  const unsigned int in_group =
      (unit % parts) * block_heads + warp % block_heads;
  const unsigned int h = kvh * group + in_group;
  /* kv_at: the kv head's elements of position 0 of the chunk's sequence */
  const unsigned long long q_dim = (unsigned long long)heads * D,
                           kv_dim = (unsigned long long)(heads / group) * D,
                           kv_at =
                               ta.first * kv_dim + (unsigned long long)kvh * D;
  /* warp-uniform: a head of the group and a tile with an active row */
  const bool active = in_group < group && nr > 0;
  const unsigned int g = lane / 4, t = lane % 4;
  const unsigned int ra = g, rb = g + 8;      /* rows in the warp's tile */
  const long long pa = p0 + ra, pb = p0 + rb; /* their positions */
  fdy_grid_wait();

  if (last >= 0) { /* the first tile's copies (none when no row is seen) */
    mma_stage_tile<D>(k_cache, v_cache, f16, 0, last, kv_dim, kv_at, stages);
    cp_async_commit();
  }
  uint32_t qa[DK][4];
  mma_load_q<DK>(qa, q + (r0 + ra) * q_dim + (unsigned long long)h * D,
                 q + (r0 + rb) * q_dim + (unsigned long long)h * D,
                 active && ra < nr, active && rb < nr, t);
  float o[2 * DK][4];
#pragma unroll
  for (unsigned int n = 0; n < 2 * DK; n++) {
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  }
  float m_a = -CUDART_INF_F, m_b = -CUDART_INF_F, l_a = 0.0f, l_b = 0.0f;
  const float scale_log2 =
      (float)(1.0 / sqrt((double)D) * 1.4426950408889634074);

  unsigned int s = 0; /* the stage of the tile at kv0 */
  for (long long kv0 = 0; kv0 <= last; kv0 += MMA_KV, s ^= 1u) {
    const __half *Ks = mma_tile<D>(k_cache, v_cache, f16, kv0, last, kv_dim,
                                   kv_at, stages, stage_bytes, s, work);
    if (!active || kv0 > wt.last) {
      continue;
    }
    float sc[8][4];
    mma_scores<DK>(sc, qa, Ks, lane);
    if (kv0 + MMA_KV - 1 > p0) { /* the tile reaches past the first row */
      mma_causal_mask(sc, kv0, pa, pb, t);
    }
    uint32_t pf[4][4];
    mma_softmax<DK>(sc, o, pf, &m_a, &m_b, &l_a, &l_b, scale_log2);
    mma_output<DK>(o, pf, Ks + MMA_KV * KS, lane);
  }
  if (!active) {
    return;
  }
  mma_write<DK>(o, l_a, l_b, &wt, q_dim, h, out);
}

/* ---- shapes and launches ------------------------------------------------
 */

typedef struct prefill_shape {
  unsigned int heads, group, d, rows;
  unsigned int block_heads; /* tensor cores: query heads of a block */
  unsigned int parts;       /* tensor cores: blocks of a kv head's group */
  unsigned long long context, sequences; /* the caches' [S, context, ...] */
  bool f16, vec, mma;
} prefill_shape;

static prefill_shape prefill_shape_of(const fdy_op *op) {
  prefill_shape s;
  s.heads = op->params.attention.heads;
  s.group = s.heads / op->params.attention.kv_heads;
  s.d = op->params.attention.head_dim;
  s.rows = (unsigned int)op->inputs[1].shape.dims[0];
  s.sequences = op->inputs[4].shape.dims[0];
  s.context = op->inputs[4].shape.dims[1];
  s.f16 = op->inputs[4].dtype == FDY_DTYPE_F16;
  s.vec = s.d % 4 == 0;
  s.mma = mma_fits(s.d);
  s.parts = (s.group + MMA_MAX_HEADS - 1) / MMA_MAX_HEADS;
  s.block_heads = (s.group + s.parts - 1) / s.parts;
  return s;
}

static uint64_t prefill_blocks(const prefill_shape *s) {
  if (s->mma) {
    const uint64_t tiles = (s->rows + MMA_ROWS - 1) / MMA_ROWS;
    return (tiles + 1) / 2 * (s->heads / s->group) * s->parts;
  }
  return (uint64_t)((s->rows + PREFILL_Q - 1) / PREFILL_Q) * s->heads;
}

extern "C" uint64_t fdy_cuda_attention_prefill_shared_bytes(const fdy_op *op) {
  const prefill_shape s = prefill_shape_of(op);
  if (s.mma) {
    return 2 * (uint64_t)mma_stage_bytes(s.d, s.f16) +
           (s.f16 ? 0 : (uint64_t)2 * MMA_KV * mma_k_stride(s.d) * 2);
  }
  return PREFILL_Q * sizeof(double) +
         (PREFILL_Q * (PREFILL_S_WIDTH + 2) +
          (uint64_t)(PREFILL_Q + PREFILL_KV) * (s.d + 1) +
          (uint64_t)(PREFILL_Q + PREFILL_KV) * s.d) *
             sizeof(float);
}

extern "C" bool fdy_cuda_attention_prefill_grid_fits(const fdy_op *op) {
  const prefill_shape s = prefill_shape_of(op);
  return prefill_blocks(&s) <= INT32_MAX;
}

/* The tensor-core kernel of head_dim 16 (i + 1). */
static void (*const mma_kernels[MMA_MAX_D / 16])(
    const int32_t *, const float *, const void *, const void *, bool,
    unsigned int, unsigned int, unsigned int, unsigned int, unsigned long long,
    unsigned long long, float *) = {
    prefill_mma_kernel<1>, prefill_mma_kernel<2>, prefill_mma_kernel<3>,
    prefill_mma_kernel<4>, prefill_mma_kernel<5>, prefill_mma_kernel<6>,
    prefill_mma_kernel<7>, prefill_mma_kernel<8>};

extern "C" cudaError_t fdy_cuda_attention_prefill_prepare(uint64_t smem_optin) {
  cudaError_t rc =
      fdy_cuda_allow_dynamic_shared((const void *)prefill_kernel, smem_optin);
  for (size_t i = 0; rc == cudaSuccess && i < MMA_MAX_D / 16; i++) {
    rc =
        fdy_cuda_allow_dynamic_shared((const void *)mma_kernels[i], smem_optin);
  }
  return rc;
}

extern "C" cudaError_t
fdy_cuda_attention_prefill_enqueue(const fdy_cuda_op_args *a,
                                   cudaStream_t stream) {
  const prefill_shape s = prefill_shape_of(a->op);
  const dim3 grid((unsigned int)prefill_blocks(&s));
  const size_t shared = (size_t)fdy_cuda_attention_prefill_shared_bytes(a->op);
  const int32_t *step = (const int32_t *)a->in[0];
  const float *q = (const float *)a->in[1];
  float *out = (float *)a->out;
  if (s.mma) {
    return fdy_launch(a->dependent, mma_kernels[s.d / 16 - 1], grid,
                      dim3(32 * 2 * s.block_heads), shared, stream, step, q,
                      (const void *)a->in[4], (const void *)a->in[5], s.f16,
                      s.heads, s.group, s.block_heads, s.rows, s.context,
                      s.sequences, out);
  }
  return fdy_launch(a->dependent, prefill_kernel, grid, dim3(ATTENTION_THREADS),
                    shared, stream, step, q, (const void *)a->in[4],
                    (const void *)a->in[5], s.f16, s.vec, s.heads, s.group, s.d,
                    s.rows, s.context, s.sequences, out);
}
