/* The CUDA kernels of the row-wise and element-wise op kinds (EMBED_Q4,
 * RMSNORM, ROPE, SWIGLU, ADD, LAST_ROW, ARGMAX), and the dispatch of every
 * kind but CHECKSUM (MATMUL_Q4 in matmul_q4.cu, ATTENTION in attention.cu).
 *
 * Grids are sized from the tensors' shapes: row kinds launch one block per
 * row of the tensor and the blocks of rows at or beyond the step's count
 * return at once, so a launch reads the count (and the position) from
 * device memory when it runs and can be captured in a graph. Element-wise
 * kinds run a grid-stride loop over count * n elements, 16 bytes per access
 * when the row width is a multiple of 4 (the views are 256-byte aligned).
 *
 * The arithmetic is the CPU backend's (src/backends/cpu/kernels.c), which
 * never contracts a multiply and an add: the dequantized embedding s * q + b
 * and the rope rotation use __fmul_rn/__fadd_rn so they round alike (the
 * embedding is bitwise equal); RMSNorm sums squares in double (a fixed
 * tree) and scales by (float)(1 / sqrt(mean + eps)); rope angles are
 * (double)position * inv with cos and sin in double rounded to float, the
 * inverse frequencies coming from the host (fdy_rope_inverse_frequency) as
 * a kernel parameter; SwiGLU is g / (1 + expf(-g)) * up (expf may differ
 * from the C library's in the last bit). ARGMAX compares (NaN last, value,
 * lower index), a total order, so its tree reduction gives exactly the
 * CPU's answer. */
#include "cuda_device.h"
#include "cuda_internal.h"

#include <string.h>

#define ROW_THREADS       256  /* embed, rmsnorm, rope */
#define ELEMENT_THREADS   256  /* swiglu, add, last_row */
#define ELEMENT_BLOCKS_SM 8    /* resident element-wise blocks per SM */
#define ARGMAX_THREADS    1024 /* one block per row */
#define ARGMAX_WARPS      (ARGMAX_THREADS / 32)

/* ---- embedding ------------------------------------------------------------
 */

/* Block t writes row t: the dequantized table row of id step[IDS + t], or
 * NaN for an id outside the table. Each thread expands whole words (8
 * values, two 16-byte stores). */
__global__ void __launch_bounds__(ROW_THREADS)
    embed_kernel(const int32_t *step, const uint32_t *table,
                 const uint16_t *scales, const uint16_t *biases, bool bf16,
                 unsigned long long vocab, unsigned int hidden,
                 unsigned int group, unsigned int rows, float *out) {
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const int id = step[FDY_STEP_IDS + t];
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

__global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_kernel(const int32_t *step, const float *x, const uint16_t *weight,
                   bool bf16, unsigned int n, unsigned int rows, double eps,
                   float *out) {
  __shared__ double scratch[ROW_THREADS / 32];
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const float *xr = x + (unsigned long long)t * n;
  float *o = out + (unsigned long long)t * n;
  double sum = 0.0;
  for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
    const double v = xr[i];
    sum += v * v;
  }
  sum = fdy_block_sum_double(sum, scratch);
  const float inv = (float)(1.0 / sqrt(sum / n + eps));
  for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
    o[i] = xr[i] * inv * fdy_half_at(weight, bf16, i);
  }
}

/* ---- rope -----------------------------------------------------------------
 */

typedef struct rope_table {
  double inv[FDY_CUDA_ROPE_MAX_PAIRS]; /* inverse frequency of pair j */
} rope_table;

/* Block t rotates row t: cos and sin of each pair once into shared memory,
 * then every (head, pair) of the row. */
__global__ void __launch_bounds__(ROW_THREADS)
    rope_kernel(const int32_t *step, const float *x, float *out,
                unsigned int width, unsigned int head_dim, unsigned int rows,
                const __grid_constant__ rope_table table) {
  __shared__ float cos_j[FDY_CUDA_ROPE_MAX_PAIRS];
  __shared__ float sin_j[FDY_CUDA_ROPE_MAX_PAIRS];
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const unsigned int half = head_dim / 2;
  const double position = (double)((long long)step[FDY_STEP_POSITION] + t);
  for (unsigned int j = threadIdx.x; j < half; j += blockDim.x) {
    double s = 0.0, c = 0.0;
    sincos(position * table.inv[j], &s, &c);
    cos_j[j] = (float)c;
    sin_j[j] = (float)s;
  }
  __syncthreads();
  const float *xr = x + (unsigned long long)t * width;
  float *o = out + (unsigned long long)t * width;
  const unsigned int pairs = width / 2;
  for (unsigned int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const unsigned int j = i % half;
    const unsigned int at = (i / half) * head_dim + j;
    const float x0 = xr[at], x1 = xr[at + half];
    const float c = cos_j[j], s = sin_j[j];
    o[at] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    o[at + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
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

/* out = row min(count, rows) - 1 of x; nothing when the count is 0. */
__global__ void __launch_bounds__(ELEMENT_THREADS)
    last_row_kernel(const int32_t *step, const float *x, float *out,
                    unsigned int n, unsigned int rows, bool vec4) {
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

/* Block r reduces row r: each thread its strided elements, then the warp
 * (butterflies), then warp 0 over the warps' winners. */
__global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_kernel(const float *x, unsigned int n, bool vec4, int32_t *out) {
  __shared__ float best_value[ARGMAX_WARPS];
  __shared__ unsigned int best_index[ARGMAX_WARPS];
  const float *xr = x + (unsigned long long)blockIdx.x * n;
  float value = CUDART_NAN_F;
  unsigned int where = 0xffffffffu; /* after every element */
  if (vec4) {
    for (unsigned int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = ((const float4 *)xr)[i];
      const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (unsigned int k = 0; k < 4; k++) {
        if (before(e[k], 4 * i + k, value, where)) {
          value = e[k];
          where = 4 * i + k;
        }
      }
    }
  } else {
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
      if (before(xr[i], i, value, where)) {
        value = xr[i];
        where = i;
      }
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, offset);
    const unsigned int k = __shfl_xor_sync(0xffffffffu, where, offset);
    if (before(v, k, value, where)) {
      value = v;
      where = k;
    }
  }
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    best_value[warp] = value;
    best_index[warp] = where;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned int w = 1; w < ARGMAX_WARPS; w++) {
      if (before(best_value[w], best_index[w], value, where)) {
        value = best_value[w];
        where = best_index[w];
      }
    }
    out[blockIdx.x] = (int32_t)where;
  }
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

static void launch_rope(const fdy_cuda_op_args *a, cudaStream_t stream) {
  const fdy_op *op = a->op;
  rope_table table;
  memset(&table, 0, sizeof table);
  for (uint32_t j = 0; j < op->params.rope.head_dim / 2; j++) {
    table.inv[j] = fdy_rope_inverse_frequency(&op->params, j);
  }
  rope_kernel<<<dim_of(&op->inputs[1], 0), ROW_THREADS, 0, stream>>>(
      (const int32_t *)a->in[0], (const float *)a->in[1], (float *)a->out,
      dim_of(&op->inputs[1], 1), op->params.rope.head_dim,
      dim_of(&op->inputs[1], 0), table);
}

extern "C" uint64_t fdy_cuda_op_shared_bytes(const fdy_op *op) {
  switch (op->kind) {
  case FDY_OP_MATMUL_Q4:
  case FDY_OP_NORM_MATMUL_Q4:
  case FDY_OP_NORM_SWIGLU_Q4:
  case FDY_OP_MATMUL_ADD_Q4:
    return fdy_cuda_matmul_q4_shared_bytes(op);
  case FDY_OP_ATTENTION:
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
  };
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    struct cudaFuncAttributes attributes;
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernels[i]);
    if (rc != cudaSuccess) {
      return rc;
    }
  }
  const cudaError_t rc = fdy_cuda_matmul_q4_prepare(smem_optin);
  return rc == cudaSuccess ? fdy_cuda_attention_prepare(smem_optin) : rc;
}

extern "C" cudaError_t fdy_cuda_op_enqueue(const fdy_cuda_op_args *a,
                                           cudaStream_t stream) {
  const fdy_op *op = a->op;
  const fdy_tensor_view *in = op->inputs;
  const int32_t *step = (const int32_t *)a->in[0];
  switch (op->kind) {
  case FDY_OP_EMBED_Q4: {
    const unsigned int hidden = dim_of(&op->outputs[0], 1);
    embed_kernel<<<dim_of(&op->outputs[0], 0), ROW_THREADS, 0, stream>>>(
        step, (const uint32_t *)a->in[1], (const uint16_t *)a->in[2],
        (const uint16_t *)a->in[3], in[2].dtype == FDY_DTYPE_BF16,
        in[1].shape.dims[0], hidden, hidden / dim_of(&in[2], 1),
        dim_of(&op->outputs[0], 0), (float *)a->out);
    break;
  }
  case FDY_OP_RMSNORM:
    rmsnorm_kernel<<<dim_of(&in[1], 0), ROW_THREADS, 0, stream>>>(
        step, (const float *)a->in[1], (const uint16_t *)a->in[2],
        in[2].dtype == FDY_DTYPE_BF16, dim_of(&in[1], 1), dim_of(&in[1], 0),
        op->params.rmsnorm.eps, (float *)a->out);
    break;
  case FDY_OP_MATMUL_Q4:
    return fdy_cuda_matmul_q4_enqueue(a, stream);
  case FDY_OP_NORM_MATMUL_Q4:
  case FDY_OP_NORM_SWIGLU_Q4:
  case FDY_OP_MATMUL_ADD_Q4:
    return fdy_cuda_fused_q4_enqueue(a, stream);
  case FDY_OP_ROPE:
    launch_rope(a, stream);
    break;
  case FDY_OP_ATTENTION:
    return fdy_cuda_attention_enqueue(a, stream);
  case FDY_OP_SWIGLU:
  case FDY_OP_ADD: {
    const unsigned int n = dim_of(&in[1], 1), rows = dim_of(&in[1], 0);
    const bool vec4 = n % 4 == 0;
    const unsigned long long units =
        (unsigned long long)rows * n / (vec4 ? 4 : 1);
    binary_kernel<<<element_blocks(units, a->sm_count), ELEMENT_THREADS, 0,
                    stream>>>(step, (const float *)a->in[1],
                              (const float *)a->in[2], (float *)a->out, n, rows,
                              op->kind == FDY_OP_SWIGLU, vec4);
    break;
  }
  case FDY_OP_LAST_ROW: {
    const unsigned int n = dim_of(&in[1], 1);
    const bool vec4 = n % 4 == 0;
    last_row_kernel<<<element_blocks(vec4 ? n / 4 : n, a->sm_count),
                      ELEMENT_THREADS, 0, stream>>>(
        step, (const float *)a->in[1], (float *)a->out, n, dim_of(&in[1], 0),
        vec4);
    break;
  }
  case FDY_OP_ARGMAX: {
    const unsigned int n = dim_of(&in[0], 1);
    argmax_kernel<<<dim_of(&in[0], 0), ARGMAX_THREADS, 0, stream>>>(
        (const float *)a->in[0], n, n % 4 == 0, (int32_t *)a->out);
    break;
  }
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
