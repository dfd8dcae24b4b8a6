/* The CUDA kernels of the 8-bit and unquantized embeddings and matmuls
 * (EMBED_Q8, EMBED_DENSE, MATMUL_Q8, MATMUL_DENSE): simple and exact in
 * their dequantization, not tuned.
 *
 * A weight value is the CPU backend's (src/backends/cpu/linear.c): scale
 * * q + bias rounded after the product and after the sum
 * (__fmul_rn/__fadd_rn), q the bytes of a packed word low first, or the
 * stored F32, F16 or BF16 value converted exactly; so the embeddings are
 * bitwise the CPU's. The embedding launches a block per output row (the
 * blocks of rows at or beyond the step's count return at once). The
 * matmul launches a warp per (output feature, row of x): a block of
 * LINEAR_WARPS features of one row; each lane sums a strided share of the
 * inputs in float (a whole packed word at a time for 8 bits) and the warp
 * adds the lanes' sums in a fixed butterfly, so a result does not depend
 * on scheduling (its order differs from the CPU's: equal within rounding).
 *
 * Every kernel is launched by fdy_launch and follows its rules (PDL,
 * cuda_device.h): it lets the next kernel start at once and waits for the
 * previous one before touching activations. */
#include "cuda_device.h"
#include "cuda_internal.h"

#define LINEAR_THREADS 256
#define LINEAR_WARPS   (LINEAR_THREADS / 32)

/* Element i of an F32, F16 or BF16 vector, exactly. */
static __device__ __forceinline__ float value_at(const void *p, fdy_dtype dtype,
                                                 unsigned long long i) {
  return dtype == FDY_DTYPE_F32
             ? ((const float *)p)[i]
             : fdy_half_at((const uint16_t *)p, dtype == FDY_DTYPE_BF16, i);
}

/* A weight matrix of `n` values a row: 8-bit packed (q8; dtype is the
 * scales') or dense (dtype is the values'). */
typedef struct linear_weight {
  const void *data;
  const uint16_t *scales, *biases; /* q8 only */
  fdy_dtype dtype;
  bool q8;
  unsigned int n;
  unsigned int group; /* q8 only */
} linear_weight;

/* The dequantized value of packed byte q of group g of row r. */
static __device__ __forceinline__ float
q8_value(const linear_weight *w, unsigned long long g, unsigned int q) {
  const bool bf16 = w->dtype == FDY_DTYPE_BF16;
  return __fadd_rn(__fmul_rn(fdy_half_at(w->scales, bf16, g), (float)q),
                   fdy_half_at(w->biases, bf16, g));
}

/* Value i of row r. */
static __device__ __forceinline__ float
weight_at(const linear_weight *w, unsigned long long r, unsigned int i) {
  const unsigned long long at = r * w->n + i;
  if (!w->q8) {
    return value_at(w->data, w->dtype, at);
  }
  const unsigned long long g = r * (w->n / w->group) + i / w->group;
  return q8_value(w, g, ((const uint8_t *)w->data)[at]);
}

/* Block t writes row t: the table row of id step[ID(t)] as F32, or NaN for
 * an id outside the table. */
__global__ void __launch_bounds__(LINEAR_THREADS)
    embed_linear_kernel(const int32_t *step, linear_weight w,
                        unsigned long long vocab, unsigned int rows,
                        float *out) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned int t = blockIdx.x;
  if (t >= fdy_active_rows(step, rows)) {
    return;
  }
  const int id = step[FDY_STEP_ID(t)];
  float *o = out + (unsigned long long)t * w.n;
  const bool inside = id >= 0 && (unsigned long long)id < vocab;
  for (unsigned int i = threadIdx.x; i < w.n; i += blockDim.x) {
    o[i] = inside ? weight_at(&w, (unsigned long long)id, i) : CUDART_NAN_F;
  }
}

/* Warp k of block (b, t) writes y[t][b * LINEAR_WARPS + k]: that weight
 * row's dot product with row t of x. */
__global__ void __launch_bounds__(LINEAR_THREADS)
    matmul_linear_kernel(const int32_t *step, const float *x, linear_weight w,
                         unsigned int out_features, unsigned int rows,
                         float *y) {
  fdy_grid_launch_dependents();
  fdy_grid_wait();
  const unsigned int t = blockIdx.y;
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int o = blockIdx.x * LINEAR_WARPS + threadIdx.x / 32;
  if (t >= fdy_active_rows(step, rows) || o >= out_features) {
    return; /* whole warps */
  }
  const float *xr = x + (unsigned long long)t * w.n;
  float sum = 0.0f;
  if (w.q8) {
    const uint32_t *words =
        (const uint32_t *)w.data + (unsigned long long)o * (w.n / 4);
    const unsigned long long first = (unsigned long long)o * (w.n / w.group);
    for (unsigned int k = lane; k < w.n / 4; k += 32) {
      const uint32_t word = words[k];
      const unsigned long long g = first + 4 * k / w.group;
#pragma unroll
      for (unsigned int j = 0; j < 4; j++) {
        sum += q8_value(&w, g, (word >> (8 * j)) & 0xffu) * xr[4 * k + j];
      }
    }
  } else {
    for (unsigned int i = lane; i < w.n; i += 32) {
      sum += weight_at(&w, o, i) * xr[i];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  if (lane == 0) {
    y[(unsigned long long)t * out_features + o] = sum;
  }
}

/* The weight of op whose first tensor is input `first`, n values a row. */
static linear_weight weight_of(const fdy_cuda_op_args *a, unsigned int first,
                               unsigned int n) {
  const fdy_op *op = a->op;
  linear_weight w;
  w.data = a->in[first];
  w.q8 = op->kind == FDY_OP_EMBED_Q8 || op->kind == FDY_OP_MATMUL_Q8;
  w.n = n;
  w.scales = w.q8 ? (const uint16_t *)a->in[first + 1] : NULL;
  w.biases = w.q8 ? (const uint16_t *)a->in[first + 2] : NULL;
  w.dtype = op->inputs[w.q8 ? first + 1 : first].dtype;
  w.group = w.q8 ? n / (unsigned int)op->inputs[first + 1].shape.dims[1] : 0u;
  return w;
}

extern "C" cudaError_t fdy_cuda_linear_prepare(void) {
  const void *kernels[] = {(const void *)embed_linear_kernel,
                           (const void *)matmul_linear_kernel};
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    struct cudaFuncAttributes attributes;
    const cudaError_t rc = cudaFuncGetAttributes(&attributes, kernels[i]);
    if (rc != cudaSuccess) {
      return rc;
    }
  }
  return cudaSuccess;
}

extern "C" cudaError_t fdy_cuda_linear_enqueue(const fdy_cuda_op_args *a,
                                               cudaStream_t stream) {
  const fdy_op *op = a->op;
  const int32_t *step = (const int32_t *)a->in[0];
  const fdy_shape *out = &op->outputs[0].shape;
  const unsigned int rows = (unsigned int)out->dims[0];
  const unsigned int width = (unsigned int)out->dims[1];
  if (op->kind == FDY_OP_EMBED_Q8 || op->kind == FDY_OP_EMBED_DENSE) {
    return fdy_launch(a->dependent, embed_linear_kernel, rows, LINEAR_THREADS,
                      0, stream, step, weight_of(a, 1, width),
                      (unsigned long long)op->inputs[1].shape.dims[0], rows,
                      (float *)a->out);
  }
  const unsigned int in = (unsigned int)op->inputs[1].shape.dims[1];
  const dim3 grid((width + LINEAR_WARPS - 1) / LINEAR_WARPS, rows);
  return fdy_launch(a->dependent, matmul_linear_kernel, grid, LINEAR_THREADS, 0,
                    stream, step, (const float *)a->in[1], weight_of(a, 2, in),
                    width, rows, (float *)a->out);
}
