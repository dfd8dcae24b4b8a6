/* The CUDA kernels of the row-wise and element-wise op kinds (EMBED_Q4,
 * RMSNORM, ROPE, SWIGLU, ADD, ADD_BIAS, LAST_ROW, ARGMAX, SAMPLE), and the
 * dispatch of every kind but CHECKSUM (MATMUL_Q4 in matmul_q4.cu, ATTENTION in
 * attention.cu, the 8-bit and unquantized embeddings and matmuls in
 * linear.cu).
 *
 * Grids are sized from the tensors' shapes: row kinds launch one block per
 * row of the tensor and the blocks of rows at or beyond the step's count
 * return at once, so a launch reads the count (and the ids or positions) from
 * device memory when it runs and can be captured in a graph. Element-wise
 * kinds run a grid-stride loop over count * n elements, 16 bytes per access
 * when the row width is a multiple of 4 (the views are 256-byte aligned).
 *
 * The arithmetic is the CPU backend's (src/backends/cpu/kernels.c), which
 * never contracts a multiply and an add: the dequantized embedding s * q + b
 * and the rope rotation use __fmul_rn/__fadd_rn so they round alike (the
 * embedding is bitwise equal); RMSNorm sums squares in double (a fixed
 * tree) and scales by (float)(1 / sqrt(mean + eps)), x times that times the
 * weight, with 16-byte loads of x and 8-byte (F16, BF16) or 16-byte (F32)
 * loads of the weight; rope angles
 * are (double)position * inv with cos and sin in double rounded to float, the
 * inverse frequencies coming from the host (fdy_rope_inverse_frequency) as
 * a kernel parameter; SwiGLU is g / (1 + expf(-g)) * up (expf may differ
 * from the C library's in the last bit). ARGMAX compares (NaN last, value,
 * lower index), a total order, so its reduction gives exactly the CPU's
 * answer whatever the split: a long row is cut between blocks whose
 * winners the last block to finish reduces (a counter of the stream's,
 * zeroed again by that block, so the launch can be replayed in a graph).
 *
 * SAMPLE runs ARGMAX's kernel over its logits into workspace, then a
 * block per row that does the op's definition with the CPU's arithmetic
 * (src/core/sample_math.h, every double operation an explicitly rounded
 * intrinsic): a greedy row takes the argmax; a sampled row's radix select
 * counts with integer atomics (exact), each thread sums whole chunks of
 * FDY_SAMPLE_CHUNK ids in id order and thread 0 sums the chunks in order
 * and walks them, so its id is the CPU's.
 *
 * Every kernel is launched by fdy_launch and follows its rules (PDL,
 * cuda_device.h): it lets the next kernel start at once and waits for the
 * previous one before touching activations; rope computes its angles
 * before that wait. */
#include "cuda_device.h"
#include "cuda_internal.h"

#include "foundry/op_table.h"

#include "../../core/sample_math.h"

#define ROW_THREADS       256 /* embed, rmsnorm, rope */
#define RMSNORM_HELD      4   /* float4 of a row a thread keeps */
#define ELEMENT_THREADS   256 /* swiglu, add, last_row */
#define ELEMENT_BLOCKS_SM 8   /* resident element-wise blocks per SM */
#define ARGMAX_THREADS    256
#define ARGMAX_WARPS      (ARGMAX_THREADS / 32)
#define ARGMAX_LOADS      4 /* 16-byte loads a thread issues at once */
#define ARGMAX_SPAN       (ARGMAX_THREADS * ARGMAX_LOADS) /* loads */
#define ARGMAX_MAX_PARTS  64 /* blocks of one row */
#define SAMPLE_THREADS    512

/* ---- embedding ------------------------------------------------------------
 */

/* Block t writes row t: the dequantized table row of id step[ID(t)], or
 * NaN for an id outside the table. Each thread expands whole words (8
 * values, two 16-byte stores). */
__global__ void __launch_bounds__(ROW_THREADS)
    embed_kernel(const int32_t *step, const uint32_t *table,
                 const uint16_t *scales, const uint16_t *biases, bool bf16,
                 unsigned long long vocab, unsigned int hidden,
                 unsigned int group, unsigned int rows, float *out) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const int id = step[FDY_STEP_ID(t)];
  float *o = out + (unsigned long long)t * hidden;
  if (id < 0 || (unsigned long long)id >= vocab) {
    for (unsigned int i = threadIdx.x; i < hidden; i += blockDim.x) {
      o[i] = CUDART_NAN_F;
    }
    return;
  }
  const unsigned int words = hidden / 8;
  const unsigned int groups = hidden / group;
  const uint32_t *row = table + (unsigned long long)id * words;
  const unsigned long long first = (unsigned long long)id * groups;
  for (unsigned int w = threadIdx.x; w < words; w += blockDim.x) {
    const uint32_t word = row[w];
    const unsigned int g = w * 8 / group;
    const float s = fdy_half_at(scales, bf16, first + g);
    const float b = fdy_half_at(biases, bf16, first + g);
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
      v[j] = __fadd_rn(__fmul_rn(s, fdy_nibble(word, j)), b);
    }
    float4 *dst = (float4 *)(o + 8ull * w);
    dst[0] = make_float4(v[0], v[1], v[2], v[3]);
    dst[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

/* ---- rmsnorm --------------------------------------------------------------
 */

/* Element i4 of a row of F16 or BF16 weights, 4 at a time (one 8-byte
 * load; the row starts 8-byte aligned). */
static __device__ __forceinline__ float4 halves4(const uint16_t *p, bool bf16,
                                                 unsigned int i4) {
  const uint2 w = ((const uint2 *)p)[i4];
  const uint16_t h[4] = {(uint16_t)(w.x & 0xffffu), (uint16_t)(w.x >> 16),
                         (uint16_t)(w.y & 0xffffu), (uint16_t)(w.y >> 16)};
  float f[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    f[k] = bf16 ? __uint_as_float((unsigned int)h[k] << 16)
                : __half2float(__ushort_as_half(h[k]));
  }
  return make_float4(f[0], f[1], f[2], f[3]);
}

/* Elements 4 i4 .. 4 i4 + 3 of an F32 (f32) or F16/BF16 norm weight. */
static __device__ __forceinline__ float4 weight4(const void *p, bool f32,
                                                 bool bf16, unsigned int i4) {
  return f32 ? ((const float4 *)p)[i4] : halves4((const uint16_t *)p, bf16, i4);
}

/* Element i of an F32 (f32) or F16/BF16 norm weight. */
static __device__ __forceinline__ float weight_at(const void *p, bool f32,
                                                  bool bf16, unsigned int i) {
  return f32 ? ((const float *)p)[i]
             : fdy_half_at((const uint16_t *)p, bf16, i);
}

static __device__ __forceinline__ double squares4(float4 v, double sum) {
  sum += (double)v.x * v.x;
  sum += (double)v.y * v.y;
  sum += (double)v.z * v.z;
  return sum + (double)v.w * v.w;
}

static __device__ __forceinline__ float4 norm4(float4 v, float inv, float4 w) {
  return make_float4(v.x * inv * w.x, v.y * inv * w.y, v.z * inv * w.z,
                     v.w * inv * w.w);
}

/* Block b normalizes segment b of n values: segment b % segments of row
 * b / segments (segments per row: 1 for a whole row, the heads for
 * Qwen3's q and k). vec4 (n a multiple of 4): each thread loads
 * its first RMSNORM_HELD float4 of x and of the weight at once and keeps
 * them for the output (rows up to 4096 are read once); the rest of a longer
 * row is read again. Each thread sums its squares in double in a fixed
 * order, then the block (fdy_block_sum_double). */
__global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_kernel(const int32_t *step, const float *x, const void *weight,
                   bool f32, bool bf16, unsigned int n, unsigned int segments,
                   unsigned int rows, double eps, bool vec4, float *out) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  __shared__ double scratch[ROW_THREADS / 32];
  const unsigned int t = blockIdx.x / segments;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const float *xr = x + (unsigned long long)blockIdx.x * n;
  float *o = out + (unsigned long long)blockIdx.x * n;
  double sum = 0.0;
  if (!vec4) {
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
      const double v = xr[i];
      sum += v * v;
    }
    sum = fdy_block_sum_double(sum, scratch);
    const float inv = (float)(1.0 / sqrt(sum / n + eps));
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
      o[i] = xr[i] * inv * weight_at(weight, f32, bf16, i);
    }
    return;
  }
  const float4 *x4 = (const float4 *)xr;
  float4 *o4 = (float4 *)o;
  const unsigned int n4 = n / 4;
  float4 held_x[RMSNORM_HELD], held_w[RMSNORM_HELD];
#pragma unroll
  for (int k = 0; k < RMSNORM_HELD; k++) {
    const unsigned int i4 = threadIdx.x + k * ROW_THREADS;
    if (i4 < n4) {
      held_x[k] = x4[i4];
      held_w[k] = weight4(weight, f32, bf16, i4);
    }
  }
#pragma unroll
  for (int k = 0; k < RMSNORM_HELD; k++) {
    if (threadIdx.x + k * ROW_THREADS < n4) {
      sum = squares4(held_x[k], sum);
    }
  }
  for (unsigned int i4 = threadIdx.x + RMSNORM_HELD * ROW_THREADS; i4 < n4;
       i4 += ROW_THREADS) {
    sum = squares4(x4[i4], sum);
  }
  sum = fdy_block_sum_double(sum, scratch);
  const float inv = (float)(1.0 / sqrt(sum / n + eps));
#pragma unroll
  for (int k = 0; k < RMSNORM_HELD; k++) {
    const unsigned int i4 = threadIdx.x + k * ROW_THREADS;
    if (i4 < n4) {
      o4[i4] = norm4(held_x[k], inv, held_w[k]);
    }
  }
  for (unsigned int i4 = threadIdx.x + RMSNORM_HELD * ROW_THREADS; i4 < n4;
       i4 += ROW_THREADS) {
    o4[i4] = norm4(x4[i4], inv, weight4(weight, f32, bf16, i4));
  }
}

/* ---- rope -----------------------------------------------------------------
 */

/* Block t rotates row t at its position step[FDY_STEP_POSITION(t)]: cos
 * and sin of each pair once into shared memory (from the step only: before
 * the wait for the kernel that wrote x), then every (head, pair) of the
 * row. */
__global__ void __launch_bounds__(ROW_THREADS)
    rope_kernel(const int32_t *step, const float *x, float *out,
                unsigned int width, unsigned int head_dim, unsigned int rows,
                const __grid_constant__ fdy_cuda_rope_table table) {
  fdy_grid_launch_dependents();
  __shared__ float cos_j[FDY_CUDA_ROPE_MAX_PAIRS];
  __shared__ float sin_j[FDY_CUDA_ROPE_MAX_PAIRS];
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const unsigned int half = head_dim / 2;
  const double position = (double)step[FDY_STEP_POSITION(t)];
  for (unsigned int j = threadIdx.x; j < half; j += blockDim.x) {
    fdy_rope_cos_sin(position, table.inv[j], &cos_j[j], &sin_j[j]);
  }
  __syncthreads();
  fdy_grid_wait(); /* x is an earlier kernel's output */
  const float *xr = x + (unsigned long long)t * width;
  float *o = out + (unsigned long long)t * width;
  const unsigned int pairs = width / 2;
  for (unsigned int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const unsigned int j = i % half;
    const unsigned int at = (i / half) * head_dim + j;
    const float2 r = fdy_rope_rotate(xr[at], xr[at + half], cos_j[j], sin_j[j]);
    o[at] = r.x;
    o[at + half] = r.y;
  }
}

/* ---- swiglu, add, last_row ------------------------------------------------
 */

static __device__ __forceinline__ float binary(bool swiglu, float a, float b) {
  return swiglu ? a / (1.0f + expf(-a)) * b : a + b;
}

/* out = swiglu(a, b) or a + b over the first count rows of n values; vec4:
 * n is a multiple of 4, so every row starts 16-byte aligned. */
__global__ void __launch_bounds__(ELEMENT_THREADS)
    binary_kernel(const int32_t *step, const float *a, const float *b,
                  float *out, unsigned int n, unsigned int rows, bool swiglu,
                  bool vec4) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned long long count =
      (unsigned long long)fdy_active_rows(step, rows) * n;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i =
      (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (vec4) {
    const float4 *a4 = (const float4 *)a, *b4 = (const float4 *)b;
    float4 *o4 = (float4 *)out;
    for (; i < count / 4; i += stride) {
      const float4 u = a4[i], v = b4[i];
      o4[i] = make_float4(binary(swiglu, u.x, v.x), binary(swiglu, u.y, v.y),
                          binary(swiglu, u.z, v.z), binary(swiglu, u.w, v.w));
    }
    return;
  }
  for (; i < count; i += stride) {
    out[i] = binary(swiglu, a[i], b[i]);
  }
}

/* ---- add_bias -------------------------------------------------------------
 */

/* out = x + bias over the first count rows of n values: element i of a row
 * adds bias[i] (F32, F16 or BF16), one F32 add as the CPU's. */
__global__ void __launch_bounds__(ELEMENT_THREADS)
    add_bias_kernel(const int32_t *step, const float *x, const void *bias,
                    bool f32, bool bf16, float *out, unsigned int n,
                    unsigned int rows) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned long long count =
      (unsigned long long)fdy_active_rows(step, rows) * n;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i =
           (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    out[i] = x[i] + weight_at(bias, f32, bf16, (unsigned int)(i % n));
  }
}

/* out = row min(count, rows) - 1 of x; nothing when the count is 0. */
__global__ void __launch_bounds__(ELEMENT_THREADS)
    last_row_kernel(const int32_t *step, const float *x, float *out,
                    unsigned int n, unsigned int rows, bool vec4) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned int active = fdy_active_rows(step, rows);
  if (active == 0) {
    return;
  }
  const float *src = x + (unsigned long long)(active - 1) * n;
  const unsigned int stride = gridDim.x * blockDim.x;
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (vec4) {
    for (; i < n / 4; i += stride) {
      ((float4 *)out)[i] = ((const float4 *)src)[i];
    }
    return;
  }
  for (; i < n; i += stride) {
    out[i] = src[i];
  }
}

/* ---- argmax ---------------------------------------------------------------
 */

/* Whether (a, ai) comes before (b, bi): a number before NaN, then the larger
 * value (-0 and +0 equal), then the lower index. A strict total order, so
 * any reduction order picks the same element: the lowest index of the
 * largest number, index 0 when all are NaN. */
static __device__ __forceinline__ bool before(float a, unsigned int ai, float b,
                                              unsigned int bi) {
  const bool a_nan = isnan(a), b_nan = isnan(b);
  if (a_nan != b_nan) {
    return b_nan;
  }
  if (!a_nan && a != b) {
    return a > b;
  }
  return ai < bi;
}

/* (value, index) becomes (v, i) when (v, i) comes before it. */
static __device__ __forceinline__ void
keep_first(float v, unsigned int i, float *value, unsigned int *where) {
  if (before(v, i, *value, *where)) {
    *value = v;
    *where = i;
  }
}

/* The first of the warp's (value, where); every lane gets it. */
static __device__ __forceinline__ void warp_first(float *value,
                                                  unsigned int *where) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, *value, offset);
    const unsigned int k = __shfl_xor_sync(0xffffffffu, *where, offset);
    keep_first(v, k, value, where);
  }
}

/* Row r is cut into `parts` blocks (blockIdx.x = r * parts + part): part
 * p takes the spans of ARGMAX_SPAN loads (float4 when vec4, else floats)
 * p, p + parts, ...; each thread
 * issues its ARGMAX_LOADS loads of a span before it compares any. The
 * block's winner: warps (butterflies), then thread 0 over the warps'. With
 * one part it is the row's answer. Otherwise it goes to partial[blockIdx.x]
 * and the block counts itself done in *counter; the last block to do so
 * (every other block's winner visible to it: a fence before the count, one
 * after) zeroes the counter for the stream's next launch and reduces each
 * row's parts (warp w rows w, w + ARGMAX_WARPS, ...). (value, index) is a
 * total order, so neither the split nor the order changes the answer. */
__global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_kernel(const float *x, unsigned int rows, unsigned int n,
                  unsigned int parts, bool vec4, uint2 *partial,
                  unsigned int *counter, int32_t *out) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  __shared__ float warp_value[ARGMAX_WARPS];
  __shared__ unsigned int warp_index[ARGMAX_WARPS];
  const unsigned int row = blockIdx.x / parts, part = blockIdx.x % parts;
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float *xr = x + (unsigned long long)row * n;
  float value = CUDART_NAN_F;
  unsigned int where = 0xffffffffu;           /* after every element */
  const unsigned int per_unit = vec4 ? 4 : 1; /* elements of a load */
  const unsigned int units = n / per_unit;
  for (unsigned long long s0 = (unsigned long long)part * ARGMAX_SPAN;
       s0 < units; s0 += (unsigned long long)parts * ARGMAX_SPAN) {
    float4 v[ARGMAX_LOADS];
#pragma unroll
    for (int k = 0; k < ARGMAX_LOADS; k++) {
      const unsigned long long u = s0 + k * ARGMAX_THREADS + threadIdx.x;
      if (u < units) {
        v[k] = vec4 ? ((const float4 *)xr)[u]
                    : make_float4(xr[u], 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int k = 0; k < ARGMAX_LOADS; k++) {
      const unsigned long long u = s0 + k * ARGMAX_THREADS + threadIdx.x;
      if (u < units) {
        const unsigned int i = (unsigned int)u * per_unit;
        keep_first(v[k].x, i, &value, &where);
        if (vec4) {
          keep_first(v[k].y, i + 1, &value, &where);
          keep_first(v[k].z, i + 2, &value, &where);
          keep_first(v[k].w, i + 3, &value, &where);
        }
      }
    }
  }
  warp_first(&value, &where);
  if (lane == 0) {
    warp_value[warp] = value;
    warp_index[warp] = where;
  }
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    for (unsigned int w = 1; w < ARGMAX_WARPS; w++) {
      keep_first(warp_value[w], warp_index[w], &value, &where);
    }
    if (parts == 1) {
      out[row] = (int32_t)where;
    } else {
      partial[blockIdx.x] = make_uint2(__float_as_uint(value), where);
      __threadfence();
      last = atomicAdd(counter, 1u) == gridDim.x - 1;
      if (last) {
        atomicExch(counter, 0u);
        __threadfence();
      }
    }
  }
  if (__syncthreads_or(last) == 0) {
    return;
  }
  for (unsigned int r = warp; r < rows; r += ARGMAX_WARPS) {
    value = CUDART_NAN_F;
    where = 0xffffffffu;
    for (unsigned int p = lane; p < parts; p += 32) {
      const uint2 c = __ldcg(&partial[(unsigned long long)r * parts + p]);
      keep_first(__uint_as_float(c.x), c.y, &value, &where);
    }
    warp_first(&value, &where);
    if (lane == 0) {
      out[r] = (int32_t)where;
    }
  }
}

/* Blocks per row of an ARGMAX over rows of n: one per span of
 * ARGMAX_SPAN loads, at most ARGMAX_MAX_PARTS, and one when the grid would
 * exceed CUDA's limit. From the shape only. */
static unsigned int argmax_parts(unsigned long long rows,
                                 unsigned long long n) {
  const unsigned long long units = n % 4 == 0 ? n / 4 : n;
  unsigned long long parts = (units + ARGMAX_SPAN - 1) / ARGMAX_SPAN;
  if (parts > ARGMAX_MAX_PARTS) {
    parts = ARGMAX_MAX_PARTS;
  }
  if (parts == 0 || rows * parts > INT32_MAX) {
    parts = 1;
  }
  return (unsigned int)parts;
}

static uint64_t sample_workspace_bytes(const fdy_op *op);

/* ARGMAX's partial winners; SAMPLE's layout (sample_layout_of). */
extern "C" uint64_t fdy_cuda_argmax_workspace_bytes(const fdy_op *op) {
  if (op->kind == FDY_OP_SAMPLE) {
    return sample_workspace_bytes(op);
  }
  const unsigned long long rows = op->inputs[0].shape.dims[0];
  const unsigned int parts = argmax_parts(rows, op->inputs[0].shape.dims[1]);
  return parts > 1 ? rows * parts * sizeof(uint2) : 0;
}

/* ---- sample ---------------------------------------------------------------
 */

/* A sampled row's filters (SAMPLE in ops.h), shared by its block. */
typedef struct sample_filters {
  double m, t, min_p;
  unsigned long long min_key;
  unsigned int min_order;
} sample_filters;

static __device__ __forceinline__ bool
sample_kept(const sample_filters *f, float x, unsigned int i, double w) {
  return fdy_sample_key(x, i) >= f->min_key &&
         fdy_sample_order(x) >= f->min_order && w >= f->min_p;
}

/* The CPU's sample_sum: thread j sums chunks j, j + SAMPLE_THREADS, ...
 * (each in id order) into chunks[], thread 0 sums them in chunk order;
 * every thread gets the total. */
static __device__ double sample_sum(const sample_filters *f, const float *x,
                                    unsigned long long n, unsigned int above,
                                    bool strictly, double *chunks,
                                    double *total) {
  const unsigned long long count =
      (n + FDY_SAMPLE_CHUNK - 1) / FDY_SAMPLE_CHUNK;
  for (unsigned long long c = threadIdx.x; c < count; c += SAMPLE_THREADS) {
    const unsigned long long first = c * FDY_SAMPLE_CHUNK;
    const unsigned long long stop =
        first + FDY_SAMPLE_CHUNK < n ? first + FDY_SAMPLE_CHUNK : n;
    double sum = 0.0;
    for (unsigned long long i = first; i < stop; i++) {
      const double w = fdy_sample_weight(x[i], f->m, f->t);
      if (sample_kept(f, x[i], (unsigned int)i, w) &&
          (!strictly || fdy_sample_order(x[i]) > above)) {
        sum = __dadd_rn(sum, w);
      }
    }
    chunks[c] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (unsigned long long c = 0; c < count; c++) {
      sum = __dadd_rn(sum, chunks[c]);
    }
    *total = sum;
  }
  __syncthreads();
  const double result = *total;
  __syncthreads();
  return result;
}

/* The k-th largest key of the row (k >= 1), the CPU's radix select. */
static __device__ unsigned long long
sample_kth_key(const float *x, unsigned long long n, unsigned int k) {
  __shared__ unsigned int counts[256];
  __shared__ unsigned long long prefix;
  __shared__ unsigned int left;
  if (threadIdx.x == 0) {
    prefix = 0;
    left = k;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (unsigned int d = threadIdx.x; d < 256; d += SAMPLE_THREADS) {
      counts[d] = 0;
    }
    __syncthreads();
    const unsigned long long mask = shift == 56 ? 0 : ~0ull << (shift + 8);
    const unsigned long long want = prefix;
    for (unsigned long long i = threadIdx.x; i < n; i += SAMPLE_THREADS) {
      const unsigned long long key = fdy_sample_key(x[i], (unsigned int)i);
      if ((key & mask) == want) {
        atomicAdd(&counts[(key >> shift) & 0xff], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int digit = 255;
      while (counts[digit] < left) {
        left -= counts[digit];
        digit--;
      }
      prefix |= (unsigned long long)digit << shift;
    }
    __syncthreads();
  }
  return prefix;
}

/* Block r samples row r (rows at or beyond the step's count return):
 * argmax[r] is ARGMAX's answer, chunks the row's FDY_SAMPLE_CHUNK sums. */
__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(const int32_t *step, const float *x, const uint32_t *params,
                  unsigned int rows, unsigned long long n,
                  const int32_t *argmax, double *chunks, int32_t *out) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  __shared__ sample_filters f;
  __shared__ double total;
  const unsigned int r = blockIdx.x;
  if (r >= fdy_active_rows(step, rows)) {
    return;
  }
  const float *xr = x + (unsigned long long)r * n;
  const unsigned long long count =
      (n + FDY_SAMPLE_CHUNK - 1) / FDY_SAMPLE_CHUNK;
  double *row_chunks = chunks + (unsigned long long)r * count;
  const fdy_sample_row p =
      fdy_sample_row_of(params + (unsigned long long)r * FDY_SAMPLE_FIELDS);
  const int32_t a = argmax[r];
  if (!fdy_sample_row_valid(&p) || fdy_sample_row_greedy(&p) ||
      !fdy_sample_finite(xr[a])) {
    if (threadIdx.x == 0) {
      out[r] = fdy_sample_row_valid(&p) ? a : -1;
    }
    return;
  }
  if (threadIdx.x == 0) {
    f.m = (double)xr[a];
    f.t = (double)p.temperature;
    f.min_p = 0.0;
    f.min_key = 1;
    f.min_order = 0;
  }
  __syncthreads();
  if (p.top_k != 0 && p.top_k < n) {
    const unsigned long long kth = sample_kth_key(xr, n, p.top_k);
    if (threadIdx.x == 0) {
      f.min_key = kth > 1 ? kth : 1;
    }
    __syncthreads();
  }
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    const double limit = __dmul_rn(
        (double)p.top_p, sample_sum(&f, xr, n, 0, false, row_chunks, &total));
    unsigned int lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const unsigned int mid = lo + (hi - lo) / 2;
      if (sample_sum(&f, xr, n, mid, true, row_chunks, &total) < limit) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    if (threadIdx.x == 0) {
      f.min_order = lo;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    f.min_p = (double)p.min_p;
  }
  __syncthreads();
  const double sum = sample_sum(&f, xr, n, 0, false, row_chunks, &total);
  if (threadIdx.x != 0) {
    return;
  }
  const double target =
      __dmul_rn(fdy_sample_uniform_of(p.seed, p.counter), sum);
  double run = 0.0;
  for (unsigned long long c = 0; c < count; c++) {
    if (__dadd_rn(run, row_chunks[c]) > target) {
      const unsigned long long first = c * FDY_SAMPLE_CHUNK;
      const unsigned long long stop =
          first + FDY_SAMPLE_CHUNK < n ? first + FDY_SAMPLE_CHUNK : n;
      double chunk = 0.0;
      for (unsigned long long i = first; i < stop; i++) {
        const double w = fdy_sample_weight(xr[i], f.m, f.t);
        if (sample_kept(&f, xr[i], (unsigned int)i, w)) {
          chunk = __dadd_rn(chunk, w);
          if (__dadd_rn(run, chunk) > target) {
            out[r] = (int32_t)i;
            return;
          }
        }
      }
    }
    run = __dadd_rn(run, row_chunks[c]);
  }
  for (unsigned long long i = n; i-- > 0;) { /* the last kept id */
    if (sample_kept(&f, xr[i], (unsigned int)i,
                    fdy_sample_weight(xr[i], f.m, f.t))) {
      out[r] = (int32_t)i;
      return;
    }
  }
}

/* SAMPLE's workspace: each row's chunk sums, then its ARGMAX's partial
 * winners and ids. */
typedef struct sample_layout {
  unsigned long long chunks, partial, ids, total;
} sample_layout;

static sample_layout sample_layout_of(const fdy_op *op) {
  const unsigned long long rows = op->inputs[1].shape.dims[0];
  const unsigned long long n = op->inputs[1].shape.dims[1];
  const unsigned int parts = argmax_parts(rows, n);
  sample_layout l;
  l.chunks = 0;
  l.partial =
      rows * ((n + FDY_SAMPLE_CHUNK - 1) / FDY_SAMPLE_CHUNK) * sizeof(double);
  l.ids = l.partial + (parts > 1 ? rows * parts * sizeof(uint2) : 0);
  l.total = l.ids + rows * sizeof(int32_t);
  return l;
}

static uint64_t sample_workspace_bytes(const fdy_op *op) {
  return sample_layout_of(op).total;
}

static cudaError_t launch_sample(const fdy_cuda_op_args *a,
                                 cudaStream_t stream) {
  const fdy_op *op = a->op;
  const unsigned int rows = (unsigned int)op->inputs[1].shape.dims[0];
  const unsigned int n = (unsigned int)op->inputs[1].shape.dims[1];
  const unsigned int parts = argmax_parts(rows, n);
  const sample_layout l = sample_layout_of(op);
  unsigned char *ws = (unsigned char *)a->workspace;
  int32_t *ids = (int32_t *)(ws + l.ids);
  cudaError_t rc =
      fdy_launch(a->dependent, argmax_kernel, rows * parts, ARGMAX_THREADS, 0,
                 stream, (const float *)a->in[1], rows, n, parts, n % 4 == 0,
                 (uint2 *)(ws + l.partial), a->counters, ids);
  if (rc != cudaSuccess) {
    return rc;
  }
  return fdy_launch(a->dependent, sample_kernel, rows, SAMPLE_THREADS, 0,
                    stream, (const int32_t *)a->in[0], (const float *)a->in[1],
                    (const uint32_t *)a->in[2], rows, (unsigned long long)n,
                    (const int32_t *)ids, (double *)(ws + l.chunks),
                    (int32_t *)a->out);
}

/* ---- dispatch -------------------------------------------------------------
 */

static unsigned int dim_of(const fdy_tensor_view *v, int d) {
  return (unsigned int)v->shape.dims[d];
}

/* Blocks of an element-wise grid over `units` items: enough to cover them,
 * at most ELEMENT_BLOCKS_SM per multiprocessor (the loop strides). */
static unsigned int element_blocks(unsigned long long units, int sm_count) {
  unsigned long long want = (units + ELEMENT_THREADS - 1) / ELEMENT_THREADS;
  unsigned long long cap = (unsigned long long)sm_count * ELEMENT_BLOCKS_SM;
  if (want > cap) {
    want = cap;
  }
  return want > 0 ? (unsigned int)want : 1u;
}

static cudaError_t launch_rope(const fdy_cuda_op_args *a, cudaStream_t stream) {
  const fdy_op *op = a->op;
  const fdy_cuda_rope_table table = fdy_cuda_rope_table_of(op);
  return fdy_launch(a->dependent, rope_kernel, dim_of(&op->inputs[1], 0),
                    ROW_THREADS, 0, stream, (const int32_t *)a->in[0],
                    (const float *)a->in[1], (float *)a->out,
                    dim_of(&op->inputs[1], 1), op->params.rope.head_dim,
                    dim_of(&op->inputs[1], 0), table);
}

extern "C" uint64_t fdy_cuda_op_shared_bytes(const fdy_op *op) {
  if (fdy_op_row_of(op->kind)->flags & FDY_OP_Q4_MATMUL) {
    return fdy_cuda_matmul_q4_shared_bytes(op);
  }
  switch (op->kind) {
  case FDY_OP_ATTENTION:
  case FDY_OP_ROPE_ATTENTION:
    return fdy_cuda_attention_shared_bytes(op);
  default:
    return 0;
  }
}

extern "C" cudaError_t fdy_cuda_ops_prepare(uint64_t smem_optin) {
  const void *kernels[] = {
      (const void *)embed_kernel,    (const void *)rmsnorm_kernel,
      (const void *)rope_kernel,     (const void *)binary_kernel,
      (const void *)last_row_kernel, (const void *)argmax_kernel,
      (const void *)sample_kernel,   (const void *)add_bias_kernel,
  };
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    struct cudaFuncAttributes attributes;
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernels[i]);
    if (rc != cudaSuccess) {
      return rc;
    }
  }
  cudaError_t rc = fdy_cuda_matmul_q4_prepare(smem_optin);
  if (rc == cudaSuccess) {
    rc = fdy_cuda_linear_prepare();
  }
  return rc == cudaSuccess ? fdy_cuda_attention_prepare(smem_optin) : rc;
}

extern "C" cudaError_t fdy_cuda_op_enqueue(const fdy_cuda_op_args *a,
                                           cudaStream_t stream) {
  const fdy_op *op = a->op;
  const fdy_tensor_view *in = op->inputs;
  const int32_t *step = (const int32_t *)a->in[0];
  switch (op->kind) {
  case FDY_OP_CHECKSUM:
    return fdy_cuda_checksum_enqueue(
        a->in[0], in[0].shape.dims[0], op->params.checksum.passes,
        a->max_blocks, a->words,
        op->input_count == 2 ? (const uint64_t *)a->in[1] : NULL,
        (uint64_t *)a->out, stream);
  case FDY_OP_EMBED_Q4: {
    const unsigned int hidden = dim_of(&op->outputs[0], 1);
    return fdy_launch(a->dependent, embed_kernel, dim_of(&op->outputs[0], 0),
                      ROW_THREADS, 0, stream, step, (const uint32_t *)a->in[1],
                      (const uint16_t *)a->in[2], (const uint16_t *)a->in[3],
                      in[2].dtype == FDY_DTYPE_BF16,
                      (unsigned long long)in[1].shape.dims[0], hidden,
                      hidden / dim_of(&in[2], 1), dim_of(&op->outputs[0], 0),
                      (float *)a->out);
  }
  case FDY_OP_RMSNORM: { /* a block per segment of n (the weight's) */
    const unsigned int n = dim_of(&in[2], 0);
    const unsigned int segments = dim_of(&in[1], 1) / n;
    return fdy_launch(
        a->dependent, rmsnorm_kernel, dim_of(&in[1], 0) * segments, ROW_THREADS,
        0, stream, step, (const float *)a->in[1], (const void *)a->in[2],
        in[2].dtype == FDY_DTYPE_F32, in[2].dtype == FDY_DTYPE_BF16, n,
        segments, dim_of(&in[1], 0), op->params.rmsnorm.eps, n % 4 == 0,
        (float *)a->out);
  }
  case FDY_OP_MATMUL_Q4:
    return fdy_cuda_matmul_q4_enqueue(a, stream);
  case FDY_OP_NORM_MATMUL_Q4:
  case FDY_OP_NORM_SWIGLU_Q4:
  case FDY_OP_MATMUL_ADD_Q4:
    return fdy_cuda_fused_q4_enqueue(a, stream);
  case FDY_OP_ROPE:
    return launch_rope(a, stream);
  case FDY_OP_ATTENTION:
  case FDY_OP_ROPE_ATTENTION:
    return fdy_cuda_attention_enqueue(a, stream);
  case FDY_OP_SWIGLU:
  case FDY_OP_ADD: {
    const unsigned int n = dim_of(&in[1], 1), rows = dim_of(&in[1], 0);
    const bool vec4 = n % 4 == 0;
    const unsigned long long units =
        (unsigned long long)rows * n / (vec4 ? 4 : 1);
    return fdy_launch(a->dependent, binary_kernel,
                      element_blocks(units, a->sm_count), ELEMENT_THREADS, 0,
                      stream, step, (const float *)a->in[1],
                      (const float *)a->in[2], (float *)a->out, n, rows,
                      op->kind == FDY_OP_SWIGLU, vec4);
  }
  case FDY_OP_ADD_BIAS: {
    const unsigned int n = dim_of(&in[1], 1), rows = dim_of(&in[1], 0);
    return fdy_launch(a->dependent, add_bias_kernel,
                      element_blocks((unsigned long long)rows * n, a->sm_count),
                      ELEMENT_THREADS, 0, stream, step, (const float *)a->in[1],
                      (const void *)a->in[2], in[2].dtype == FDY_DTYPE_F32,
                      in[2].dtype == FDY_DTYPE_BF16, (float *)a->out, n, rows);
  }
  case FDY_OP_LAST_ROW: {
    const unsigned int n = dim_of(&in[1], 1);
    const bool vec4 = n % 4 == 0;
    return fdy_launch(a->dependent, last_row_kernel,
                      element_blocks(vec4 ? n / 4 : n, a->sm_count),
                      ELEMENT_THREADS, 0, stream, step, (const float *)a->in[1],
                      (float *)a->out, n, dim_of(&in[1], 0), vec4);
  }
  case FDY_OP_ARGMAX: {
    const unsigned int rows = dim_of(&in[0], 0), n = dim_of(&in[0], 1);
    const unsigned int parts = argmax_parts(rows, n);
    return fdy_launch(a->dependent, argmax_kernel, rows * parts, ARGMAX_THREADS,
                      0, stream, (const float *)a->in[0], rows, n, parts,
                      n % 4 == 0, (uint2 *)a->workspace, a->counters,
                      (int32_t *)a->out);
  }
  case FDY_OP_SAMPLE:
    return launch_sample(a, stream);
  case FDY_OP_EMBED_Q8:
  case FDY_OP_EMBED_DENSE:
  case FDY_OP_MATMUL_Q8:
  case FDY_OP_MATMUL_DENSE:
    return fdy_cuda_linear_enqueue(a, stream);
  default:
    return cudaErrorInvalidValue;
  }
}
