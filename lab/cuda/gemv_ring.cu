/* NORM_MATMUL_Q4 of one row through a TMA weight ring: y = (n W^T) with
 * n = RMSNORM(x, norm) (or y = x W^T with --no-norm), the decode's LM head
 * (W 128,256 x 3,072, 222 MB, 4-bit group 64, F16 scales).
 *
 * Versions:
 *   1  a plain kernel, a warp a row (baseline.cuh).
 *   2  the ring (docs/tuning-log.md entry 58, branch `mlp-ring` c98dcee's
 *      gemv_ring.cu, lost with the branch and rebuilt here from the
 *      entry's description; never measured): one block of 17 warps a
 *      multiprocessor takes tiles b, b + G, ... (G blocks); a tile is 16
 *      rows over all inputs (28.5 KB with scales at I = 3,072); warp 16
 *      copies tiles into as many slots as fit (7 at I = 3,072: 204 KB in
 *      flight a multiprocessor) and waits only for free slots; warps 0-15
 *      stage x once (normed), then compute each tile's 24 column steps
 *      (warp w the steps w, w + 16: warps 0-7 two, 8-15 one) with the
 *      GEMV's tensor-core items and free the slot; warp 15 adds the 16
 *      warps' sums in warp order and writes the rows (times 1 / rms). The
 *      last tile copies only its rows. Entry 49: the backend's final norm
 *      + LM head takes 88 us a token (2.5 TB/s); a ring that never stops
 *      streaming was predicted at 55-60 us.
 *
 * Build: with the project (CMake builds lab/ when CUDA is found), or
 *   nvcc -O3 -arch=sm_90a -o gemv_ring lab/cuda/gemv_ring.cu
 * Run: gemv_ring [VERSION] [--rows R] [--in I] [--no-norm] [--repeats N]
 * checks each version against the CPU reference and times it (median of
 * N launches after an L2 flush) against the same run's device-to-device
 * copy rate. Compare with cuda_kernel_bench's LM head line (the backend's
 * kernel) on the same device. */
#include "baseline.cuh"
#include "ring_q4.cuh"

#define RING_MAX_SLOTS 8

typedef struct gemv_ring_params {
  ring_matrix m;
  ring_layout l;
  const uint16_t *norm; /* F16, in values; NULL: no norm */
  unsigned int in, rows, tiles, slots, slot_bytes, group_shift;
  double eps;
  float *y;
} gemv_ring_params;

/* Dynamic shared memory: the slots from a 128-byte aligned base, then x
 * staged (F16 hi and lo, 4 bytes an input) and its chunks' (sum, 2^-e). */
static __host__ __device__ inline unsigned long long
gemv_ring_shared_bytes(unsigned int in, unsigned int slots,
                       unsigned int slot_bytes) {
  return 128 + (unsigned long long)slots * slot_bytes +
         (unsigned long long)in * 4 + in / 32 * 8;
}

template <bool kNorm>
__global__ void __launch_bounds__(RING_THREADS, 1)
    gemv_ring_kernel(const float *x, gemv_ring_params p) {
  extern __shared__ __align__(16) unsigned char ring_dynamic[];
  __shared__ __align__(8) uint64_t full[RING_MAX_SLOTS];
  __shared__ __align__(8) uint64_t empty[RING_MAX_SLOTS];
  __shared__ float sums[2][RING_CONSUMERS][RING_TILE];
  __shared__ float warp_squares[RING_CONSUMERS];
  unsigned char *slots =
      (unsigned char *)(((uintptr_t)ring_dynamic + 127) & ~(uintptr_t)127);
  __half *xs = (__half *)(slots + (unsigned long long)p.slots * p.slot_bytes);
  float2 *xchunk = (float2 *)(xs + 2ull * p.in);
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  grid_launch_dependents();
  ring_init_barriers(full, empty, p.slots);
  const unsigned int mine =
      blockIdx.x < p.tiles ? (p.tiles - blockIdx.x + gridDim.x - 1) / gridDim.x
                           : 0;

  if (warp == RING_CONSUMERS) {
    /* producer: weights only, so it starts before the grid wait */
    for (unsigned int n = 0; n < mine; n++) {
      const unsigned int i = n % p.slots;
      if (n >= p.slots) {
        mbarrier_wait(&empty[i], (n / p.slots - 1) & 1, "empty", i);
      }
      const unsigned int row0 = (blockIdx.x + n * gridDim.x) * RING_TILE;
      unsigned char *slot = slots + (unsigned long long)i * p.slot_bytes;
      if (lane == 0) {
        mbarrier_arrive_expect_tx(&full[i], ring_unit_bytes(p.m, p.l, row0));
      }
      __syncwarp();
      ring_copy_unit(p.m, p.l, 0, 1, row0, 0, 0, slot, &full[i]);
    }
    return;
  }

  /* consumers: x staged once */
  grid_wait();
  float squares = ring_stage_x<kNorm>(x, p.norm, p.in, xs, xchunk);
  squares = warp_sum(squares);
  if (lane == 0) {
    warp_squares[warp] = squares;
  }
  ring_consumers_sync();
  float inv = 1.0f;
  if (kNorm) {
    float total = 0.0f;
    for (unsigned int w = 0; w < RING_CONSUMERS; w++) {
      total += warp_squares[w];
    }
    inv = (float)(1.0 / sqrt((double)total / p.in + p.eps));
  }
  const unsigned int chunks = p.in / 32;
  const unsigned int steps = (chunks + 3) / 4;
  const unsigned int g = lane / 4, t = lane % 4;
  for (unsigned int n = 0; n < mine; n++) {
    const unsigned int i = n % p.slots;
    const unsigned int row0 = (blockIdx.x + n * gridDim.x) * RING_TILE;
    const unsigned int rows =
        p.rows - row0 < RING_TILE ? p.rows - row0 : RING_TILE;
    const unsigned char *slot = slots + (unsigned long long)i * p.slot_bytes;
    mbarrier_wait(&full[i], (n / p.slots) & 1, "full", i);
    float a0 = 0.0f, a8 = 0.0f;
    for (unsigned int step = warp; step < steps; step += RING_CONSUMERS) {
      gemv_stage st;
      ring_load_item(slot, p.l, 0, 1, step, p.group_shift, rows, &st);
      const unsigned int c = step * 4 + t < chunks ? step * 4 + t : 0;
      ring_compute_item(st, c, xs, xchunk, false, &a0, &a8);
    }
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&empty[i]);
    }
    a0 += __shfl_xor_sync(0xffffffffu, a0, 1);
    a8 += __shfl_xor_sync(0xffffffffu, a8, 1);
    a0 += __shfl_xor_sync(0xffffffffu, a0, 2);
    a8 += __shfl_xor_sync(0xffffffffu, a8, 2);
    if (t == 0) {
      sums[n % 2][warp][g] = a0;
      sums[n % 2][warp][g + 8] = a8;
    }
    ring_consumers_sync();
    /* warp 15 (one step a tile where warps 0-7 have two) writes the rows;
     * sums are double buffered, so no second barrier */
    if (warp == RING_CONSUMERS - 1 && lane < rows) {
      float total = 0.0f;
      for (unsigned int w = 0; w < RING_CONSUMERS; w++) {
        total += sums[n % 2][w][lane];
      }
      p.y[row0 + lane] = total * inv;
    }
  }
}

/* ---- host ---------------------------------------------------------------- */

typedef struct gemv_case {
  lab_q4 w;
  uint16_t *norm, *dnorm;
  float *x, *dx, *dy, *dinv;
  bool use_norm;
  double eps;
  int version, blocks;
  size_t shared;
  gemv_ring_params p;
} gemv_case;

static void gemv_launch(void *ctx) {
  gemv_case *c = (gemv_case *)ctx;
  if (c->version == 1) {
    if (c->use_norm) {
      naive_rms_kernel<<<1, 256>>>(c->dx, c->w.in, c->eps, c->dinv);
    }
    naive_gemv_kernel<<<(c->w.rows + NAIVE_WARPS - 1) / NAIVE_WARPS,
                        NAIVE_WARPS * 32>>>(
        c->dx, c->use_norm ? c->dnorm : NULL, c->use_norm ? c->dinv : NULL,
        c->w, c->dy);
    return;
  }
  if (c->use_norm) {
    gemv_ring_kernel<true><<<c->blocks, RING_THREADS, c->shared>>>(c->dx, c->p);
  } else {
    gemv_ring_kernel<false>
        <<<c->blocks, RING_THREADS, c->shared>>>(c->dx, c->p);
  }
}

/* The ring's launch: as many slots as fit beside x, one block an SM.
 * Returns false when fewer than 2 slots fit. */
static bool gemv_ring_prepare(gemv_case *c) {
  gemv_ring_params *p = &c->p;
  memset(p, 0, sizeof *p);
  p->in = c->w.in;
  p->rows = c->w.rows;
  p->tiles = (c->w.rows + RING_TILE - 1) / RING_TILE;
  p->l = ring_layout_of(c->w.in, c->w.group);
  p->slot_bytes = (unsigned int)ring_slot_bytes(p->l, 1);
  p->group_shift = c->w.group == 32 ? 0 : c->w.group == 64 ? 1 : 2;
  p->norm = c->use_norm ? c->dnorm : NULL;
  p->eps = c->eps;
  p->y = c->dy;
  p->m.weight = (const unsigned char *)c->w.dw;
  p->m.scales = (const unsigned char *)c->w.ds;
  p->m.biases = (const unsigned char *)c->w.db;
  p->m.weight_row_bytes = c->w.in / 2;
  p->m.scale_row_bytes = c->w.in / c->w.group * 2;
  p->m.rows = c->w.rows;
  /* the static shared memory: barriers, sums, squares */
  const unsigned long long fixed = 2 * RING_MAX_SLOTS * 8 +
                                   2 * RING_CONSUMERS * RING_TILE * 4 +
                                   RING_CONSUMERS * 4;
  const unsigned long long x_bytes = gemv_ring_shared_bytes(c->w.in, 0, 0);
  if (fixed + x_bytes + 2ull * p->slot_bytes > RING_MAX_SHARED) {
    return false;
  }
  unsigned long long slots =
      (RING_MAX_SHARED - fixed - x_bytes) / p->slot_bytes;
  p->slots = (unsigned int)(slots > RING_MAX_SLOTS ? RING_MAX_SLOTS : slots);
  c->shared = (size_t)gemv_ring_shared_bytes(c->w.in, p->slots, p->slot_bytes);
  int device = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&c->blocks, cudaDevAttrMultiProcessorCount,
                               device));
  ring_allow_shared((const void *)gemv_ring_kernel<true>, c->shared);
  ring_allow_shared((const void *)gemv_ring_kernel<false>, c->shared);
  printf("ring: %u slots of %u bytes, %zu bytes of shared memory, %d blocks, "
         "%u tiles\n",
         p->slots, p->slot_bytes, c->shared, c->blocks, p->tiles);
  return true;
}

int main(int argc, char **argv) {
  int only = 0, repeats = 50;
  unsigned int rows = 128256, in = 3072; /* llama-3.2-3b's LM head */
  gemv_case c;
  memset(&c, 0, sizeof c);
  c.use_norm = true;
  c.eps = 1e-5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--in") && i + 1 < argc) {
      in = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--no-norm")) {
      c.use_norm = false;
    } else {
      only = atoi(argv[i]);
    }
  }
  if (rows == 0 || in == 0 || in % 256 != 0 || repeats < 1) {
    fprintf(stderr, "usage: gemv_ring [VERSION] [--rows R] [--in I (a "
                    "multiple of 256)] [--no-norm] [--repeats N]\n");
    return 2;
  }
  lab_require_sm90();
  c.w = lab_q4_random(rows, in, 64);
  c.x = lab_random_vector(in, -1.0f, 1.0f);
  c.norm = (uint16_t *)malloc(2 * (size_t)in);
  for (unsigned int i = 0; i < in; i++) {
    c.norm[i] = lab_f16(lab_uniform(0.5f, 1.5f));
  }
  c.dx = (float *)lab_device_copy(c.x, 4 * (size_t)in);
  c.dnorm = (uint16_t *)lab_device_copy(c.norm, 2 * (size_t)in);
  CHECK(cudaMalloc(&c.dy, 4 * (size_t)rows));
  CHECK(cudaMalloc(&c.dinv, 4));
  double *n = (double *)calloc(in, sizeof(double));
  double *ref = (double *)calloc(rows, sizeof(double));
  float *out = (float *)malloc(4 * (size_t)rows);
  if (c.use_norm) {
    lab_rmsnorm_cpu(c.x, c.norm, in, c.eps, n);
  } else {
    for (unsigned int i = 0; i < in; i++) {
      n[i] = c.x[i];
    }
  }
  lab_q4_gemv_cpu(&c.w, n, ref);
  const size_t bytes = lab_q4_bytes(&c.w) + 4 * (size_t)rows + 6 * (size_t)in;
  lab_timer timer = lab_timer_create();
  const double copy = lab_copy_gbps(&timer, 256u << 20, repeats);
  printf("%u x %u, %.1f MB moved; device-to-device copy %.0f GB/s\n", rows, in,
         bytes / 1e6, copy);
  int failed = 0;
  for (int v = 1; v <= 2; v++) {
    if (only != 0 && v != only) {
      continue;
    }
    c.version = v;
    if (v == 2 && !gemv_ring_prepare(&c)) {
      printf("version 2: fewer than 2 slots fit at I %u, skipped\n", in);
      continue;
    }
    CHECK(cudaMemset(c.dy, 0xff, 4 * (size_t)rows)); /* poisoned: NaN */
    gemv_launch(&c);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(out, c.dy, 4 * (size_t)rows, cudaMemcpyDeviceToHost));
    const double err = lab_relative_error(out, ref, rows);
    const float ms = lab_time_ms(&timer, repeats, gemv_launch, &c);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    const bool ok = err < 1e-3;
    printf("version %d: relative error %.3e %s, %.2f us, %.0f GB/s, %.1f%% "
           "of the copy\n",
           v, err, ok ? "ok" : "FAILED", ms * 1e3, gbps, 100.0 * gbps / copy);
    failed |= !ok;
  }
  return failed;
}
