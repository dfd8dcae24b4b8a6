/* The lab's plain GPU baselines: no tensor cores, no shared-memory
 * staging, one warp a weight row. They are what a lab variant must beat
 * first and a second check of the CPU reference on the device. */
#ifndef FOUNDRY_LAB_BASELINE_CUH
#define FOUNDRY_LAB_BASELINE_CUH

#include "common.cuh"

#define NAIVE_WARPS 8

/* inv[0] = 1 / rms(x) (one block of 256 threads). */
__global__ void naive_rms_kernel(const float *x, unsigned int in, double eps,
                                 float *inv) {
  __shared__ float partial[8];
  float s = 0.0f;
  for (unsigned int i = threadIdx.x; i < in; i += blockDim.x) {
    s = fmaf(x[i], x[i], s);
  }
  s = warp_sum(s);
  if (threadIdx.x % 32 == 0) {
    partial[threadIdx.x / 32] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < 8; w++) {
      total += partial[w];
    }
    inv[0] = (float)(1.0 / sqrt((double)total / in + eps));
  }
}

/* One row r of W (in inputs, groups of `group`) dotted with v (times
 * norm when given), by one warp: lane l the words l, l + 32, ... */
static __device__ float naive_row_dot(const uint32_t *w, const uint16_t *s,
                                      const uint16_t *b, unsigned int r,
                                      unsigned int in, unsigned int group,
                                      const float *v, const uint16_t *norm) {
  const unsigned int words = in / 8, groups = in / group;
  float acc = 0.0f;
  for (unsigned int k = threadIdx.x % 32; k < words; k += 32) {
    const uint32_t word = w[(size_t)r * words + k];
    const unsigned int g = k * 8 / group;
    const float scale = half_bits(s[(size_t)r * groups + g], false);
    const float bias = half_bits(b[(size_t)r * groups + g], false);
#pragma unroll
    for (int j = 0; j < 8; j++) {
      float xv = v[k * 8 + j];
      if (norm) {
        xv *= half_bits(norm[k * 8 + j], false);
      }
      acc = fmaf(fmaf(scale, nibble(word, j), bias), xv, acc);
    }
  }
  return warp_sum(acc);
}

/* y = x W^T (times 1 / rms when inv is given, x times norm when norm is
 * given): a warp a row. */
__global__ void naive_gemv_kernel(const float *x, const uint16_t *norm,
                                  const float *inv, lab_q4 m, float *y) {
  const unsigned int r = blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;
  if (r >= m.rows) {
    return;
  }
  const float v = naive_row_dot(m.dw, m.ds, m.db, r, m.in, m.group, x, norm);
  if (threadIdx.x % 32 == 0) {
    y[r] = inv ? v * inv[0] : v;
  }
}

/* The MLP of one row (lab_mlp_cpu) as three plain kernels: inv[0] = 1 /
 * rms(x), h = silu(n W_gate^T) (n W_up^T) (a warp a row of both), then y =
 * x + h W_down^T (a warp a row). */
__global__ void naive_gate_up_kernel(const float *x, const uint16_t *norm,
                                     const float *inv, lab_q4 gate, lab_q4 up,
                                     float *h) {
  const unsigned int r = blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;
  if (r >= gate.rows) {
    return;
  }
  const float gv = naive_row_dot(gate.dw, gate.ds, gate.db, r, gate.in,
                                 gate.group, x, norm) *
                   inv[0];
  const float uv =
      naive_row_dot(up.dw, up.ds, up.db, r, up.in, up.group, x, norm) * inv[0];
  if (threadIdx.x % 32 == 0) {
    h[r] = gv / (1.0f + expf(-gv)) * uv;
  }
}

__global__ void naive_down_kernel(const float *x, const float *h, lab_q4 down,
                                  float *y) {
  const unsigned int r = blockIdx.x * NAIVE_WARPS + threadIdx.x / 32;
  if (r >= down.rows) {
    return;
  }
  const float v =
      naive_row_dot(down.dw, down.ds, down.db, r, down.in, down.group, h, NULL);
  if (threadIdx.x % 32 == 0) {
    y[r] = x[r] + v;
  }
}

/* Launches the three on the default stream: inv (1 float) and h
 * (gate.rows floats) are scratch, y has down.rows floats. */
static inline void naive_mlp(const float *x, const uint16_t *norm, double eps,
                             lab_q4 gate, lab_q4 up, lab_q4 down, float *inv,
                             float *h, float *y) {
  naive_rms_kernel<<<1, 256>>>(x, gate.in, eps, inv);
  naive_gate_up_kernel<<<(gate.rows + NAIVE_WARPS - 1) / NAIVE_WARPS,
                         NAIVE_WARPS * 32>>>(x, norm, inv, gate, up, h);
  naive_down_kernel<<<(down.rows + NAIVE_WARPS - 1) / NAIVE_WARPS,
                      NAIVE_WARPS * 32>>>(x, h, down, y);
}

#endif
