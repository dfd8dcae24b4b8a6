/* The kernel lab's shared helpers (llm.c's dev/cuda/common.h): error
 * checks, random MLX 4-bit matrices (U32 words of 8 nibbles, low first;
 * w = s q + b per group of `group` inputs, F16 scales and biases), the CPU
 * references every lab file checks against (in double), relative error,
 * and timing with CUDA events after an L2 flush against the device-to-
 * device copy rate measured in the same run.
 *
 * The lab is standalone: it includes nothing from src/, so a kernel here
 * keeps compiling while the backend changes. The device helpers below are
 * copies of src/backends/cuda/cuda_device.h's (same names without the
 * fdy_ prefix). Hopper only (sm_90a): TMA and mbarriers. */
#ifndef FOUNDRY_LAB_COMMON_CUH
#define FOUNDRY_LAB_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t check_rc_ = (call);                                            \
    if (check_rc_ != cudaSuccess) {                                            \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
              cudaGetErrorString(check_rc_));                                  \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* ---- device helpers (copies of cuda_device.h's) ------------------------ */

/* Programmatic dependent launch: no-ops without the launch attribute. */
static __device__ __forceinline__ void grid_wait(void) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

static __device__ __forceinline__ void grid_launch_dependents(void) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* The F16 (bf16 false) or BF16 value with bits h, exactly. */
static __device__ __forceinline__ float half_bits(uint16_t h, bool bf16) {
  return bf16 ? __uint_as_float((unsigned int)h << 16)
              : __half2float(__ushort_as_half(h));
}

/* The nibble of a packed word at position j (low first), exactly. */
static __device__ __forceinline__ float nibble(uint32_t word, int j) {
  return __uint_as_float(0x4b000000u | ((word >> (4 * j)) & 0xfu)) - 8388608.0f;
}

static __device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

/* ---- host data ---------------------------------------------------------- */

/* A quantized matrix of `rows` x `in`: host copies and device copies. */
typedef struct lab_q4 {
  unsigned int rows, in, group;
  uint32_t *w;     /* rows x in / 8 */
  uint16_t *s, *b; /* rows x in / group, F16 bits */
  uint32_t *dw;    /* device */
  uint16_t *ds, *db;
} lab_q4;

static uint64_t lab_rng = 0x9e3779b97f4a7c15ull;

static inline uint32_t lab_rand32(void) {
  lab_rng ^= lab_rng << 13;
  lab_rng ^= lab_rng >> 7;
  lab_rng ^= lab_rng << 17;
  return (uint32_t)(lab_rng >> 16);
}

/* Uniform in [lo, hi). */
static inline float lab_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)(lab_rand32() & 0xffffff) / 16777216.0f;
}

static inline uint16_t lab_f16(float v) {
  return __half_as_ushort(__float2half_rn(v));
}

static inline float lab_f16_value(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

static inline void *lab_device_copy(const void *host, size_t bytes) {
  void *d = NULL;
  CHECK(cudaMalloc(&d, bytes));
  CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  return d;
}

/* Random non-zero weights: scales of either sign around 0.01, biases
 * around -0.08 (as a trained 4-bit checkpoint's are). */
static inline lab_q4 lab_q4_random(unsigned int rows, unsigned int in,
                                   unsigned int group) {
  lab_q4 m;
  m.rows = rows;
  m.in = in;
  m.group = group;
  const size_t words = (size_t)rows * in / 8,
               groups = (size_t)rows * in / group;
  m.w = (uint32_t *)malloc(words * 4);
  m.s = (uint16_t *)malloc(groups * 2);
  m.b = (uint16_t *)malloc(groups * 2);
  for (size_t i = 0; i < words; i++) {
    m.w[i] = lab_rand32() ^ (lab_rand32() << 16);
  }
  for (size_t i = 0; i < groups; i++) {
    const float s = lab_uniform(0.005f, 0.02f);
    m.s[i] = lab_f16(lab_rand32() & 1 ? s : -s);
    m.b[i] = lab_f16(lab_uniform(-0.12f, -0.04f));
  }
  m.dw = (uint32_t *)lab_device_copy(m.w, words * 4);
  m.ds = (uint16_t *)lab_device_copy(m.s, groups * 2);
  m.db = (uint16_t *)lab_device_copy(m.b, groups * 2);
  return m;
}

static inline void lab_q4_free(lab_q4 *m) {
  free(m->w);
  free(m->s);
  free(m->b);
  cudaFree(m->dw);
  cudaFree(m->ds);
  cudaFree(m->db);
}

static inline size_t lab_q4_bytes(const lab_q4 *m) {
  return (size_t)m->rows * m->in / 2 + (size_t)m->rows * m->in / m->group * 4;
}

static inline float *lab_random_vector(size_t n, float lo, float hi) {
  float *v = (float *)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    v[i] = lab_uniform(lo, hi);
  }
  return v;
}

/* ---- CPU references (double) -------------------------------------------- */

/* y = x W^T for one row of x. */
static inline void lab_q4_gemv_cpu(const lab_q4 *m, const double *x,
                                   double *y) {
  const unsigned int groups = m->in / m->group;
  for (unsigned int r = 0; r < m->rows; r++) {
    double acc = 0.0;
    for (unsigned int g = 0; g < groups; g++) {
      double dot = 0.0, sum = 0.0;
      for (unsigned int k = g * m->group; k < (g + 1) * m->group; k++) {
        const uint32_t word = m->w[((size_t)r * m->in + k) / 8];
        const double q = (double)((word >> (4 * (k % 8))) & 0xfu);
        dot += q * x[k];
        sum += x[k];
      }
      const size_t at = (size_t)r * groups + g;
      acc += lab_f16_value(m->s[at]) * dot + lab_f16_value(m->b[at]) * sum;
    }
    y[r] = acc;
  }
}

/* x * norm / rms(x) (RMSNorm with F16 weights). */
static inline void lab_rmsnorm_cpu(const float *x, const uint16_t *norm,
                                   unsigned int n, double eps, double *out) {
  double squares = 0.0;
  for (unsigned int i = 0; i < n; i++) {
    squares += (double)x[i] * x[i];
  }
  const double inv = 1.0 / sqrt(squares / n + eps);
  for (unsigned int i = 0; i < n; i++) {
    out[i] = (double)x[i] * inv * lab_f16_value(norm[i]);
  }
}

/* A Llama MLP of one row: y = x + SWIGLU(n W_gate^T, n W_up^T) W_down^T,
 * n = RMSNORM(x, norm), x of gate->in inputs, gate->rows features. */
static inline void lab_mlp_cpu(const float *x, const uint16_t *norm, double eps,
                               const lab_q4 *gate, const lab_q4 *up,
                               const lab_q4 *down, double *y) {
  double *n = (double *)calloc(gate->in, sizeof(double));
  double *g = (double *)malloc(sizeof(double) * gate->rows);
  double *u = (double *)malloc(sizeof(double) * gate->rows);
  double *d = (double *)malloc(sizeof(double) * down->rows);
  lab_rmsnorm_cpu(x, norm, gate->in, eps, n);
  lab_q4_gemv_cpu(gate, n, g);
  lab_q4_gemv_cpu(up, n, u);
  for (unsigned int i = 0; i < gate->rows; i++) {
    g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
  }
  lab_q4_gemv_cpu(down, g, d);
  for (unsigned int i = 0; i < down->rows; i++) {
    y[i] = x[i] + d[i];
  }
  free(n);
  free(g);
  free(u);
  free(d);
}

/* ||out - ref|| / ||ref|| */
static inline double lab_relative_error(const float *out, const double *ref,
                                        size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double d = (double)out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- timing -------------------------------------------------------------- */

/* A scratch buffer of twice the L2, read (by a memset) before every timed
 * launch so that no launch finds its weights in L2. */
typedef struct lab_timer {
  void *flush;
  size_t flush_bytes;
  cudaEvent_t start, stop;
} lab_timer;

static inline lab_timer lab_timer_create(void) {
  lab_timer t;
  int device = 0, l2 = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  t.flush_bytes = 2 * (size_t)l2;
  CHECK(cudaMalloc(&t.flush, t.flush_bytes));
  CHECK(cudaEventCreate(&t.start));
  CHECK(cudaEventCreate(&t.stop));
  return t;
}

static inline int lab_compare_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* The median of `repeats` timings (ms) of launch(ctx), each after an L2
 * flush, following 3 untimed launches. */
static inline float lab_time_ms(lab_timer *t, int repeats,
                                void (*launch)(void *), void *ctx) {
  float *ms = (float *)malloc(sizeof(float) * (size_t)repeats);
  for (int i = 0; i < 3; i++) {
    launch(ctx);
  }
  CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < repeats; i++) {
    CHECK(cudaMemsetAsync(t->flush, i & 0xff, t->flush_bytes, 0));
    CHECK(cudaEventRecord(t->start, 0));
    launch(ctx);
    CHECK(cudaEventRecord(t->stop, 0));
    CHECK(cudaEventSynchronize(t->stop));
    CHECK(cudaGetLastError());
    CHECK(cudaEventElapsedTime(&ms[i], t->start, t->stop));
  }
  qsort(ms, (size_t)repeats, sizeof(float), lab_compare_float);
  const float median = ms[repeats / 2];
  free(ms);
  return median;
}

typedef struct lab_copy_ctx {
  void *dst, *src;
  size_t bytes;
} lab_copy_ctx;

static inline void lab_copy_launch(void *ctx) {
  lab_copy_ctx *c = (lab_copy_ctx *)ctx;
  CHECK(cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0));
}

/* The same run's ceiling: device-to-device copy of `bytes` (bytes read +
 * bytes written per second), in GB/s. */
static inline double lab_copy_gbps(lab_timer *t, size_t bytes, int repeats) {
  lab_copy_ctx c;
  c.bytes = bytes;
  CHECK(cudaMalloc(&c.dst, bytes));
  CHECK(cudaMalloc(&c.src, bytes));
  CHECK(cudaMemset(c.src, 1, bytes));
  const float ms = lab_time_ms(t, repeats, lab_copy_launch, &c);
  cudaFree(c.dst);
  cudaFree(c.src);
  return 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
}

/* Exits 77 (skipped, as the GPU tests do) without a Hopper device. */
static inline void lab_require_sm90(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "no CUDA device\n");
    exit(77);
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) {
    fprintf(stderr, "%s is sm_%d%d; the lab's kernels need sm_90\n", prop.name,
            prop.major, prop.minor);
    exit(77);
  }
  printf("device: %s, %d SMs, %zu KB shared memory opt-in a block\n", prop.name,
         prop.multiProcessorCount, prop.sharedMemPerBlockOptin / 1024);
}

#endif
