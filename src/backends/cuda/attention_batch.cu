/* ROPE_ATTENTION of several rows on CUDA: a step of rows, row t at its own
 * position p = step[FDY_STEP_POSITION(t)] of its own sequence
 * s = step[FDY_STEP_SEQUENCE(t)] (attention.cu keeps one row on its decode
 * kernel, bitwise as before). Rows may share a sequence at distinct
 * positions (a prompt chunk of one sequence beside decode rows of others):
 * every row's rotated k and its v are appended at (s, p) before any row
 * attends, then row t attends positions 0..p of region s as the cache
 * holds them, the appends of the step's other rows included. A row's
 * result depends on its own operands, its sequence's cache and the shapes
 * only, not on the other rows of the step or their order.
 *
 * Two kernels, launched through fdy_launch (programmatic dependent
 * launches when the op asks; the attention's fdy_grid_wait waits for the
 * appends):
 * 1. append: block (t, kv head), a thread per rope pair j (d / 2 threads
 *    rounded up to whole warps). Before fdy_grid_wait it reads only the
 *    step and computes the rope's cos and sin of its pair at p (in double,
 *    rounded to float); after it (every block waits, so that the kernel
 *    completes after those before it), it rotates elements j and j + d / 2
 *    of row t's k of its kv head by the CPU's float expressions without
 *    FMA (fdy_rope_rotate) and stores them and the same elements of row
 *    t's v at (s, p) (F32 copied, F16 rounded to nearest even), so the
 *    cache receives the rotated k bitwise as the CPU's rope then attention
 *    append it.
 * 2. attention: block (t, kv head, slice) runs up to BATCH_GROUP query
 *    heads of one kv head for row t (a group of 3 or 4, llama-3.2-3b's and
 *    llama-3.1-8b's, in one slice), so each key and value row of the kv
 *    head is read once per (row, kv head). Before fdy_grid_wait it reads
 *    only the step and puts the rope's cos and sin at p in shared memory
 *    (as the append's). After it: the rows' q of its heads rotated there
 *    alike, and positions 0..p, p included, read from the cache (position
 *    p holds exactly the rotated k and the v of row t as the append stored
 *    them).
 *
 * The positions 0..p of region s are taken in chunks of BATCH_CHUNK, with
 * an online softmax across chunks (per head: M the running maximum, L the
 * running sum in double):
 *   scores: warp w dots positions w, w + BATCH_WARPS, ...,
 *     BATCH_INFLIGHT key rows at once with the heads' q (lanes on 4
 *     consecutive elements: one 16-byte F32 or 8-byte F16 load, coalesced;
 *     q from shared memory), each lane's products summed in element order
 *     by FMA, the round's 16 dots summed across the warp by one butterfly
 *     (fdy_warp_sums16), times (float)(1 / sqrt(d)), into shared memory;
 *   softmax: warp g for head g: m = max(M, the chunk's scores) (lanes,
 *     then a butterfly), e = expf(score - m) in place, l = their float sum
 *     (lanes in position order, then a butterfly), alpha = expf(M - m)
 *     (none for the first chunk), M = m, L = L alpha + l;
 *   values: warp w rescales its own partial output by alpha and adds e v
 *     over its positions in order (lanes on 4 elements).
 * The output element j of a head is the warps' partial outputs added in
 * warp order, times (float)(1 / L). Every order of addition follows the
 * shapes and p only; there are no atomics.
 *
 * Against the CPU backend (exp(score - max) in float summed in double,
 * sequential float sums over positions): a weight here is the CPU's up to
 * the rescales by alpha (each an expf within 2 ulp, one per chunk), and the
 * sums over positions are shorter than the CPU's sequential ones, so the
 * relative difference stays near the CPU's own rounding error, as the
 * decode kernel's.
 *
 * A row whose position or sequence lies outside the cache is NaN and
 * appends nothing. Rows at or beyond the step's count are neither read nor
 * written. Two rows at the same position of one sequence (outside the
 * op's contract) leave unspecified values there, never an access outside
 * the views. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define BATCH_THREADS   256
#define BATCH_WARPS     (BATCH_THREADS / 32)
#define BATCH_BLOCKS_SM 4   /* resident blocks per SM */
#define BATCH_GROUP     4   /* query heads of one kv head per block */
#define BATCH_INFLIGHT  4   /* key or value rows a warp loads at once */
#define BATCH_CHUNK     256 /* positions whose scores a block holds at once */

static_assert(BATCH_INFLIGHT * BATCH_GROUP == 16, "fdy_warp_sums16");
static_assert(BATCH_WARPS >= BATCH_GROUP, "a warp per head's softmax");

/* ---- the append ---------------------------------------------------------
 */

/* Block x: row t = x / kv_heads, kv head x % kv_heads; thread j: rope pair
 * j (none past d / 2). See the top of the file. */
static __global__ void __launch_bounds__(FDY_CUDA_ROPE_MAX_PAIRS)
    batch_append_kernel(const int32_t *step, const float *k_new,
                        const float *v_new, void *k_cache, void *v_cache,
                        bool f16, unsigned int kv_heads, unsigned int d,
                        unsigned int rows, unsigned long long context,
                        unsigned long long sequences,
                        const __grid_constant__ fdy_cuda_rope_table table) {
  fdy_grid_launch_dependents();
  const unsigned int t = blockIdx.x / kv_heads;
  const unsigned int kv_head = blockIdx.x % kv_heads;
  const unsigned int half = d / 2, j = threadIdx.x;
  fdy_kv_row row = {-1, 0};
  if (t < fdy_active_rows(step, rows)) {
    row = fdy_kv_row_of(step, t, 0, context, sequences);
  }
  float c = 0.0f, s = 0.0f;
  if (row.position >= 0 && j < half) {
    fdy_rope_cos_sin((double)row.position, table.inv[j], &c, &s);
  }
  fdy_grid_wait(); /* k and v come from the kernels before */
  if (row.position < 0 || j >= half) {
    return;
  }
  const unsigned long long kv_dim = (unsigned long long)kv_heads * d;
  const unsigned long long src = t * kv_dim + (unsigned long long)kv_head * d;
  const unsigned long long dst =
      (row.sequence * context + (unsigned long long)row.position) * kv_dim +
      (unsigned long long)kv_head * d;
  /* fdy_cache_store rounds as the cache holds the values (F16: to nearest
   * even), once */
  const float2 y = fdy_rope_rotate(k_new[src + j], k_new[src + j + half], c, s);
  fdy_cache_store(k_cache, f16, dst + j, y.x);
  fdy_cache_store(k_cache, f16, dst + j + half, y.y);
  fdy_cache_store(v_cache, f16, dst + j, v_new[src + j]);
  fdy_cache_store(v_cache, f16, dst + j + half, v_new[src + j + half]);
}

/* ---- the attention ------------------------------------------------------
 */

/* The block's shared memory, in float4 rows of d4 = ceil(d / 4): the
 * warps' partial outputs (BATCH_WARPS x BATCH_GROUP rows) and the rotated
 * q rows (BATCH_GROUP; zero past d); then per head the running sum L
 * (doubles); then the chunk's scores (BATCH_GROUP x BATCH_CHUNK floats),
 * per head the running maximum M and the chunk's rescale alpha, and the
 * rope's cos and sin of each pair (d / 2 floats each). */
typedef struct batch_smem {
  float4 *warp_out, *q_rows;
  double *l;
  float *scores, *m, *alpha, *cos_j, *sin_j;
} batch_smem;

static __device__ __forceinline__ batch_smem batch_smem_at(float4 *base,
                                                           unsigned int d) {
  const unsigned int d4 = (d + 3) / 4;
  batch_smem sm;
  sm.warp_out = base;
  sm.q_rows = sm.warp_out + BATCH_WARPS * BATCH_GROUP * d4;
  sm.l = (double *)(sm.q_rows + BATCH_GROUP * d4);
  sm.scores = (float *)(sm.l + BATCH_GROUP);
  sm.m = sm.scores + BATCH_GROUP * BATCH_CHUNK;
  sm.alpha = sm.m + BATCH_GROUP;
  sm.cos_j = sm.alpha + BATCH_GROUP;
  sm.sin_j = sm.cos_j + d / 2;
  return sm;
}

/* The block's gn q rows at q_row (heads in order, d floats each) into
 * shared memory, rotated by the rope of cos_j and sin_j; zero past d. */
static __device__ void batch_q_rows(const batch_smem *sm, const float *q_row,
                                    unsigned int gn, unsigned int d) {
  const unsigned int half = d / 2, d4 = (d + 3) / 4, pad = 4 * d4 - d;
  for (unsigned int i = threadIdx.x; i < gn * half; i += blockDim.x) {
    const unsigned int r = i / half, j = i % half;
    const float *x = q_row + (unsigned long long)r * d;
    const float2 y =
        fdy_rope_rotate(x[j], x[j + half], sm->cos_j[j], sm->sin_j[j]);
    float *dst = (float *)(sm->q_rows + r * d4);
    dst[j] = y.x;
    dst[j + half] = y.y;
  }
  for (unsigned int i = threadIdx.x; i < gn * pad; i += blockDim.x) {
    ((float *)(sm->q_rows + i / pad * d4))[d + i % pad] = 0.0f;
  }
}

/* Key or value elements 4 j4 .. 4 j4 + 3 of the BATCH_INFLIGHT positions
 * c0 + b, c0 + b + BATCH_WARPS, ... of a chunk of n positions from c0: the
 * cache's (the kv head's row of position p at base + p kv_dim), zeros past
 * the chunk. */
static __device__ __forceinline__ void
batch_rows4(float4 rows[BATCH_INFLIGHT], const void *cache, bool f16, bool vec,
            unsigned long long base, unsigned long long kv_dim,
            unsigned long long c0, unsigned int b, unsigned int n,
            unsigned int j4, unsigned int d) {
#pragma unroll
  for (int u = 0; u < BATCH_INFLIGHT; u++) {
    const unsigned int pp = b + u * BATCH_WARPS;
    rows[u] = pp >= n ? make_float4(0.0f, 0.0f, 0.0f, 0.0f)
                      : fdy_cache_load4(cache, f16, vec,
                                        base + (c0 + pp) * kv_dim, j4, d);
  }
}

/* The scores of a chunk of n positions from c0, times scale, into
 * scores[g BATCH_CHUNK + position - c0] for the gn heads: warp w dots
 * positions w, w + BATCH_WARPS, ..., BATCH_INFLIGHT of them at once, lanes
 * on 4 elements, then fdy_warp_sums16 (lane 2 k holds dot
 * k = u BATCH_GROUP + g's sum). */
static __device__ __forceinline__ void
batch_scores(const batch_smem *sm, const void *k_cache, bool f16, bool vec,
             unsigned long long base, unsigned long long kv_dim,
             unsigned long long c0, unsigned int n, unsigned int d,
             unsigned int gn, float scale) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int d4 = (d + 3) / 4;
  for (unsigned int b = warp; b < n; b += BATCH_WARPS * BATCH_INFLIGHT) {
    float dot[BATCH_INFLIGHT * BATCH_GROUP];
#pragma unroll
    for (int i = 0; i < BATCH_INFLIGHT * BATCH_GROUP; i++) {
      dot[i] = 0.0f;
    }
    for (unsigned int j4 = lane; j4 < d4; j4 += 32) {
      float4 key[BATCH_INFLIGHT];
      batch_rows4(key, k_cache, f16, vec, base, kv_dim, c0, b, n, j4, d);
#pragma unroll
      for (int g = 0; g < BATCH_GROUP; g++) {
        if ((unsigned int)g < gn) {
          const float4 qv = sm->q_rows[g * d4 + j4];
#pragma unroll
          for (int u = 0; u < BATCH_INFLIGHT; u++) {
            dot[u * BATCH_GROUP + g] =
                fdy_dot4(qv, key[u], dot[u * BATCH_GROUP + g]);
          }
        }
      }
    }
    const float total = fdy_warp_sums16(dot);
    const unsigned int k = lane / 2;
    const unsigned int u = k / BATCH_GROUP, g = k % BATCH_GROUP;
    const unsigned int pp = b + u * BATCH_WARPS;
    if (lane % 2 == 0 && pp < n && g < gn) {
      sm->scores[g * BATCH_CHUNK + pp] = total * scale;
    }
  }
}

/* The chunk's softmax terms of its n scores, warp g for head g < gn:
 * m = max(M, the scores), each score s replaced by e = expf(s - m),
 * alpha = expf(M - m) (0 for the first chunk), M = m and
 * L = L alpha + the float sum of the e. */
static __device__ void batch_softmax(const batch_smem *sm, unsigned int n,
                                     unsigned int gn, bool first) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (warp >= gn) {
    return;
  }
  float *s = sm->scores + warp * BATCH_CHUNK;
  const float before = first ? -CUDART_INF_F : sm->m[warp];
  float m = before;
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
  l = fdy_warp_sum(l); /* every lane has read M before lane 0 writes it */
  if (lane == 0) {
    const float alpha = first ? 0.0f : expf(before - m);
    sm->alpha[warp] = alpha;
    sm->m[warp] = m;
    sm->l[warp] = (first ? 0.0 : sm->l[warp] * alpha) + l;
  }
}

/* The chunk's weighted values: warp w's partial output of each head g < gn
 * (warp_out, the warp's own rows) rescaled by alpha (zero for the first
 * chunk), plus e v over the warp's positions w, w + BATCH_WARPS, ... of
 * the n from c0 in order, BATCH_INFLIGHT value rows loaded at once, lanes
 * on 4 elements. */
static __device__ __forceinline__ void
batch_values(const batch_smem *sm, const void *v_cache, bool f16, bool vec,
             unsigned long long base, unsigned long long kv_dim,
             unsigned long long c0, unsigned int n, unsigned int d,
             unsigned int gn, bool first) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int d4 = (d + 3) / 4;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (unsigned int j4 = lane; j4 < d4; j4 += 32) {
    float4 acc[BATCH_GROUP];
#pragma unroll
    for (int g = 0; g < BATCH_GROUP; g++) {
      acc[g] = zero;
      if (!first && (unsigned int)g < gn) {
        const float4 o = sm->warp_out[(warp * BATCH_GROUP + g) * d4 + j4];
        const float a = sm->alpha[g];
        acc[g] = make_float4(o.x * a, o.y * a, o.z * a, o.w * a);
      }
    }
    for (unsigned int b = warp; b < n; b += BATCH_WARPS * BATCH_INFLIGHT) {
      float4 value[BATCH_INFLIGHT];
      batch_rows4(value, v_cache, f16, vec, base, kv_dim, c0, b, n, j4, d);
#pragma unroll
      for (int u = 0; u < BATCH_INFLIGHT; u++) {
        const unsigned int pp = b + u * BATCH_WARPS;
#pragma unroll
        for (int g = 0; g < BATCH_GROUP; g++) {
          if (pp < n && (unsigned int)g < gn) {
            acc[g] =
                fdy_axpy4(sm->scores[g * BATCH_CHUNK + pp], value[u], acc[g]);
          }
        }
      }
    }
#pragma unroll
    for (int g = 0; g < BATCH_GROUP; g++) {
      sm->warp_out[(warp * BATCH_GROUP + g) * d4 + j4] = acc[g];
    }
  }
}

/* Output element j of head g < gn (o: the first head's d floats): the
 * warps' partial outputs added in warp order, times (float)(1 / L). */
static __device__ void batch_output(const batch_smem *sm, unsigned int gn,
                                    unsigned int d, float *o) {
  const float *wo = (const float *)sm->warp_out;
  const unsigned int width = 4 * ((d + 3) / 4);
  for (unsigned int i = threadIdx.x; i < gn * d; i += blockDim.x) {
    const unsigned int g = i / d, j = i % d;
    float acc = wo[g * width + j];
    for (unsigned int w = 1; w < BATCH_WARPS; w++) {
      acc += wo[(w * BATCH_GROUP + g) * width + j];
    }
    o[(unsigned long long)g * d + j] = acc * (float)(1.0 / sm->l[g]);
  }
}

/* Block x: row t = x / (kv_heads slices), kv head (x / slices) % kv_heads,
 * slice x % slices (query heads slice BATCH_GROUP .. of the kv head's
 * group). See the top of the file. VEC (d a multiple of 4: 16-byte F32 or
 * 8-byte F16 cache loads) is a template parameter: chosen at run time
 * inside the loops, the compiler kept the registers of both kinds of load
 * (193 a thread, one block per multiprocessor). */
template <bool VEC>
__global__ void __launch_bounds__(BATCH_THREADS, BATCH_BLOCKS_SM)
    batch_kernel(const int32_t *step, const float *q, const void *k_cache,
                 const void *v_cache, bool f16, unsigned int heads,
                 unsigned int group, unsigned int slices, unsigned int d,
                 unsigned int rows, unsigned long long context,
                 unsigned long long sequences, float *out,
                 const __grid_constant__ fdy_cuda_rope_table table) {
  extern __shared__ float4 batch_shared[];
  const batch_smem sm = batch_smem_at(batch_shared, d);
  fdy_grid_launch_dependents();
  const unsigned int kv_heads = heads / group;
  const unsigned int t = blockIdx.x / (kv_heads * slices);
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const unsigned int kv_head = (blockIdx.x / slices) % kv_heads;
  const unsigned int g0 = (blockIdx.x % slices) * BATCH_GROUP;
  const unsigned int gn = min((unsigned int)BATCH_GROUP, group - g0);
  const unsigned int h0 = kv_head * group + g0;
  const fdy_kv_row row = fdy_kv_row_of(step, t, 0, context, sequences);
  const unsigned int half = d / 2;
  if (row.position >= 0) {
    for (unsigned int j = threadIdx.x; j < half; j += blockDim.x) {
      fdy_rope_cos_sin((double)row.position, table.inv[j], &sm.cos_j[j],
                       &sm.sin_j[j]);
    }
  }
  fdy_grid_wait(); /* q from the kernels before, the cache from the append */
  const unsigned long long q_dim = (unsigned long long)heads * d;
  const unsigned long long kv_dim = (unsigned long long)kv_heads * d;
  float *o = out + t * q_dim + (unsigned long long)h0 * d;
  if (row.position < 0) {
    for (unsigned int i = threadIdx.x; i < gn * d; i += blockDim.x) {
      o[i] = CUDART_NAN_F;
    }
    return;
  }
  __syncthreads(); /* cos_j and sin_j */
  batch_q_rows(&sm, q + t * q_dim + (unsigned long long)h0 * d, gn, d);
  __syncthreads();
  const unsigned long long last = (unsigned long long)row.position;
  /* the kv head's elements at position 0 of the row's sequence */
  const unsigned long long base =
      row.sequence * context * kv_dim + (unsigned long long)kv_head * d;
  const float scale = (float)(1.0 / sqrt((double)d));
  for (unsigned long long c0 = 0; c0 <= last; c0 += BATCH_CHUNK) {
    const unsigned int n =
        (unsigned int)min((unsigned long long)BATCH_CHUNK, last + 1 - c0);
    batch_scores(&sm, k_cache, f16, VEC, base, kv_dim, c0, n, d, gn, scale);
    __syncthreads();
    batch_softmax(&sm, n, gn, c0 == 0);
    __syncthreads();
    batch_values(&sm, v_cache, f16, VEC, base, kv_dim, c0, n, d, gn, c0 == 0);
    __syncthreads(); /* the scores and alpha are the next chunk's */
  }
  batch_output(&sm, gn, d, o);
}

/* ---- shapes and launches ------------------------------------------------
 */

typedef struct batch_shape {
  unsigned int heads, kv_heads, group, d, rows, slices;
  unsigned long long context, sequences; /* the caches' [S, context, ...] */
  bool f16, vec;
} batch_shape;

static batch_shape batch_shape_of(const fdy_op *op) {
  const fdy_attention_params *p = &op->params.rope_attention.attention;
  batch_shape s;
  s.heads = p->heads;
  s.kv_heads = p->kv_heads;
  s.group = s.heads / s.kv_heads;
  s.d = p->head_dim;
  s.rows = (unsigned int)op->inputs[1].shape.dims[0];
  s.slices = (s.group + BATCH_GROUP - 1) / BATCH_GROUP;
  s.sequences = op->inputs[4].shape.dims[0];
  s.context = op->inputs[4].shape.dims[1];
  s.f16 = op->inputs[4].dtype == FDY_DTYPE_F16;
  s.vec = s.d % 4 == 0;
  return s;
}

/* The attention kernel's blocks; the append's are rows x kv_heads, no
 * more. */
static uint64_t batch_blocks(const batch_shape *s) {
  return (uint64_t)s->rows * s->kv_heads * s->slices;
}

/* The attention kernel's (the append has no shared memory). */
extern "C" uint64_t fdy_cuda_attention_batch_shared_bytes(const fdy_op *op) {
  const batch_shape s = batch_shape_of(op);
  const uint64_t d4 = (s.d + 3) / 4;
  return (BATCH_WARPS * BATCH_GROUP + BATCH_GROUP) * d4 * sizeof(float4) +
         BATCH_GROUP * sizeof(double) +
         (BATCH_GROUP * BATCH_CHUNK + 2 * BATCH_GROUP + (uint64_t)s.d) *
             sizeof(float);
}

/* Both grids (the append's has at most the attention's blocks, d / 2 <=
 * FDY_CUDA_ROPE_MAX_PAIRS threads: fdy_cuda_attention_grid_fits). */
extern "C" bool fdy_cuda_attention_batch_grid_fits(const fdy_op *op) {
  const batch_shape s = batch_shape_of(op);
  return batch_blocks(&s) <= INT32_MAX;
}

extern "C" cudaError_t fdy_cuda_attention_batch_prepare(uint64_t smem_optin) {
  cudaError_t rc = fdy_cuda_allow_dynamic_shared(
      (const void *)batch_kernel<true>, smem_optin);
  if (rc == cudaSuccess) {
    rc = fdy_cuda_allow_dynamic_shared((const void *)batch_kernel<false>,
                                       smem_optin);
  }
  struct cudaFuncAttributes attributes;
  return rc != cudaSuccess
             ? rc
             : cudaFuncGetAttributes(&attributes, batch_append_kernel);
}

/* The append, then the attention (each a programmatic dependent launch
 * when a->dependent). */
extern "C" cudaError_t
fdy_cuda_attention_batch_enqueue(const fdy_cuda_op_args *a,
                                 cudaStream_t stream) {
  const batch_shape s = batch_shape_of(a->op);
  const fdy_cuda_rope_table table = fdy_cuda_rope_table_of(a->op);
  const int32_t *step = (const int32_t *)a->in[0];
  const unsigned int pairs = s.d / 2;
  cudaError_t rc = fdy_launch(
      a->dependent, batch_append_kernel, dim3(s.rows * s.kv_heads),
      dim3((pairs + 31) / 32 * 32), 0, stream, step, (const float *)a->in[2],
      (const float *)a->in[3], a->in[4], a->in[5], s.f16, s.kv_heads, s.d,
      s.rows, s.context, s.sequences, table);
  if (rc != cudaSuccess) {
    return rc;
  }
  return fdy_launch(
      a->dependent, s.vec ? batch_kernel<true> : batch_kernel<false>,
      dim3((unsigned int)batch_blocks(&s)), dim3(BATCH_THREADS),
      (size_t)fdy_cuda_attention_batch_shared_bytes(a->op), stream, step,
      (const float *)a->in[1], (const void *)a->in[4], (const void *)a->in[5],
      s.f16, s.heads, s.group, s.slices, s.d, s.rows, s.context, s.sequences,
      (float *)a->out, table);
}
