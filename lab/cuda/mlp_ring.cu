/* NORM_MLP_Q4 of one row as one persistent kernel with a TMA weight ring:
 *   y = x + SWIGLU(n W_gate^T, n W_up^T) W_down^T,  n = RMSNORM(x, norm),
 * x of I inputs, F intermediate features, MLX 4-bit weights (group 64, F16
 * scales); llama-3.2-3b: I 3,072, F 8,192 (42.5 MB of weights a layer).
 *
 * Versions:
 *   1  three plain kernels (baseline.cuh's naive_mlp, as mlp_q4_tma's 1).
 *   2  the MLP ring (docs/tuning-log.md entry 57: branch `mlp-ring`, lost
 *      with the branch and rebuilt here from the entry's row on
 *      ring_q4.cuh's parts; never run): one block of 17 warps a
 *      multiprocessor. Warp 16, the producer, takes units from a global
 *      counter in list order and copies each into a free slot of the ring
 *      (3 slots of 57 KB at I 3,072); warps 0-15 compute the slots' units
 *      in the order taken. The unit list:
 *        [0, F/16)            gate/up units: 16 rows of gate and of up
 *                             over all I inputs; h's range 1 (features
 *                             F/2 .. F) first, then range 0;
 *        [F/16, F/16 + I/16)  down units of tile t (rows 16 t .. 16 t +
 *                             15) over range 1 of h (F/2 inputs);
 *        [F/16 + I/16, end)   down units of tile t over range 0.
 *      A gate/up unit writes its 16 values of h to global memory and
 *      counts them on its range's counter; a block's first down unit of a
 *      range waits until that counter says the whole range of h is written
 *      and stages the range from L2 into shared memory (x is staged, normed,
 *      before the first unit). A range-1 down unit writes its 16 partial
 *      sums and counts them on its tile's counter; the tile's range-0 unit
 *      waits for that count and writes y = x + (its sums + the partial).
 *      The row's one counter of gate/up units is one a range here: with
 *      range 1 first, range-1 down units wait only for gate/up units taken
 *      F/32 units before the last ones.
 *      Predicted: the pair's ~22.5 us a layer -> 14-16 us, because weights
 *      stream from the kernel's first instruction and a block starts down
 *      units while the last gate/up units are still in flight.
 *
 * Build: with the project (CMake builds lab/ when CUDA is found), or
 *   nvcc -O3 -arch=sm_90a -o mlp_ring lab/cuda/mlp_ring.cu
 * Run: mlp_ring [VERSION] [--in I] [--ffn F] [--repeats N]
 * checks every version against the CPU reference (relative error, y
 * poisoned with NaN first) before and after the timed launches, and times
 * it (median of N launches, each after an L2 flush) against the device-to-
 * device copy rate measured in the same run.
 *   mlp_ring --simulate N
 * needs no GPU: it plays the unit list's protocol N times with random
 * block counts, residency, slots and interleavings (mlp_ring_simulate). */
#include "baseline.cuh"
#include "ring_q4.cuh"

#include <cuda/atomic>

#define MLP_RING_MAX_SLOTS 8
#define MLP_RING_RANGES    2 /* down's inputs (h) in two halves */

/* The counters (unsigned ints in global memory, zero at a launch's start):
 * the next unit of the list to take, h's values written per range, the
 * blocks that have finished, then per down tile the partial sums of its
 * range-1 unit written. */
#define MLP_RING_NEXT   0
#define MLP_RING_H      1 /* + range */
#define MLP_RING_EXITED (MLP_RING_H + MLP_RING_RANGES)
#define MLP_RING_TILES  (MLP_RING_EXITED + 1) /* + tile */

typedef cuda::atomic_ref<unsigned int, cuda::thread_scope_device> mlp_counter;

enum { MLP_RING_GATE_UP, MLP_RING_DOWN };

typedef struct mlp_ring_unit {
  unsigned int kind, tile, range; /* tile: 16 rows of gate/up, or of down */
} mlp_ring_unit;

static __host__ __device__ inline unsigned int
mlp_ring_units(unsigned int in, unsigned int ffn) {
  return ffn / RING_TILE + MLP_RING_RANGES * (in / RING_TILE);
}

/* Unit k of the list (k < mlp_ring_units; in a multiple of 16, ffn of 32). */
static __host__ __device__ inline mlp_ring_unit
mlp_ring_unit_at(unsigned int in, unsigned int ffn, unsigned int k) {
  const unsigned int gate_units = ffn / RING_TILE, half = gate_units / 2;
  const unsigned int tiles = in / RING_TILE;
  mlp_ring_unit u;
  if (k < gate_units) {
    u.kind = MLP_RING_GATE_UP;
    u.tile = (k + half) % gate_units;
    u.range = u.tile / half;
    return u;
  }
  k -= gate_units;
  u.kind = MLP_RING_DOWN;
  u.tile = k % tiles;
  u.range = MLP_RING_RANGES - 1 - k / tiles;
  return u;
}

/* Forward progress (no deadlock, whatever the number of blocks resident):
 *   (a) every wait of a unit is on units earlier in the list: a down unit
 *       of range r on the F/32 gate/up units of range r (all before every
 *       down unit), a range-0 down unit on its tile's range-1 unit (I/16
 *       earlier);
 *   (b) a block takes units in list order (one counter, fetch_add) and
 *       computes them in the order taken (the ring is FIFO);
 *   (c) a unit is taken only by a running block, and only when the block
 *       has a free slot for it; its copies are issued right after, with no
 *       wait in between, and complete by themselves;
 *   (d) apart from (a), a unit waits only for its block's earlier units
 *       (the ring, the consumer barriers) and its own copies.
 * Claim: every taken unit completes. By induction on the list index k:
 * unit k sits in block B's ring; B's earlier units have smaller indices
 * (b) and complete; its copies land (c); the units it waits on (a) have
 * indices below k, which the counter handed out before k, so each is
 * done or held by a running block (c) and completes. Then every block's
 * producer gets a free slot again and takes indices until one is past the
 * list; every block ends. No unit waits on a block that has not started
 * (such a block holds no unit), so the grid need not be resident at once.
 * mlp_ring_simulate plays this protocol with random residency and
 * interleavings and checks it. */

typedef struct mlp_ring_params {
  ring_matrix gate, up, down;
  ring_layout gate_up_layout; /* both matrices' 16 rows in a slot */
  ring_layout down_layout;    /* 16 rows of down over one range of h */
  const float *x;
  const uint16_t *norm;
  unsigned int in, ffn, units, slots, slot_bytes, group_shift;
  double eps;
  float *h;       /* ffn floats */
  float *partial; /* in floats: the range-1 units' sums */
  float *y;
  unsigned int *counters; /* MLP_RING_TILES + in / 16 */
} mlp_ring_params;

/* Dynamic shared memory: the slots from a 128-byte aligned base, then x
 * staged (F16 hi and lo, 4 bytes an input) and its chunks' (sum, 2^-e),
 * then one range of h staged alike. */
static __host__ __device__ inline unsigned long long
mlp_ring_shared_bytes(unsigned int in, unsigned int ffn, unsigned int slots,
                      unsigned int slot_bytes) {
  const unsigned long long range = ffn / MLP_RING_RANGES;
  return 128 + (unsigned long long)slots * slot_bytes +
         (unsigned long long)in * 4 + in / 32 * 8 + range * 4 + range / 32 * 8;
}

/* Spins until *counter >= target, each load an acquire at device scope
 * (what the releases counted on it wrote is visible to the caller after
 * it returns); traps after RING_TIMEOUT_NS naming the wait. */
static __device__ __forceinline__ void mlp_ring_wait(unsigned int *counter,
                                                     unsigned int target,
                                                     const char *what,
                                                     unsigned int which) {
  mlp_counter c(*counter);
  const unsigned long long start = global_ns();
  while (c.load(cuda::memory_order_acquire) < target) {
    if (global_ns() - start > RING_TIMEOUT_NS) {
      printf("ring kernel: block %u thread %u waited 10 s for %s %u\n",
             blockIdx.x, threadIdx.x, what, which);
      __trap();
    }
    __nanosleep(256);
  }
}

/* The producer warp: takes unit k (lane 0, relaxed fetch_add: the counter
 * hands out indices and publishes nothing) once slot n % slots is free,
 * writes k into unit_of, arms the slot's "full" barrier with the unit's
 * bytes and issues its copies. Slot i's n-th use (n = 0, 1, ...) waits for
 * phase n - 1 of empty[i] (all 16 consumer warps done reading it); the
 * consumers wait for phase n of full[i], whose arrival (a release at CTA
 * scope) also publishes unit_of[i]. Past the list it arrives on full
 * without bytes: the consumers' end marker. */
static __device__ __forceinline__ void
mlp_ring_produce(const mlp_ring_params &p, unsigned char *slots, uint64_t *full,
                 uint64_t *empty, unsigned int *unit_of) {
  const unsigned int lane = threadIdx.x % 32;
  mlp_counter next(p.counters[MLP_RING_NEXT]);
  for (unsigned int n = 0;; n++) {
    const unsigned int i = n % p.slots;
    if (n >= p.slots) {
      mbarrier_wait(&empty[i], (n / p.slots - 1) & 1, "empty", i);
    }
    unsigned int k = 0;
    if (lane == 0) {
      k = next.fetch_add(1, cuda::memory_order_relaxed);
      unit_of[i] = k;
    }
    k = __shfl_sync(0xffffffffu, k, 0);
    if (k >= p.units) {
      if (lane == 0) {
        mbarrier_arrive(&full[i]);
      }
      return;
    }
    const mlp_ring_unit u = mlp_ring_unit_at(p.in, p.ffn, k);
    const unsigned int row0 = u.tile * RING_TILE;
    unsigned char *slot = slots + (unsigned long long)i * p.slot_bytes;
    if (u.kind == MLP_RING_GATE_UP) {
      if (lane == 0) {
        mbarrier_arrive_expect_tx(
            &full[i], ring_unit_bytes(p.gate, p.gate_up_layout, row0) +
                          ring_unit_bytes(p.up, p.gate_up_layout, row0));
      }
      __syncwarp();
      ring_copy_unit(p.gate, p.gate_up_layout, 0, 2, row0, 0, 0, slot,
                     &full[i]);
      ring_copy_unit(p.up, p.gate_up_layout, 1, 2, row0, 0, 0, slot, &full[i]);
    } else {
      if (lane == 0) {
        mbarrier_arrive_expect_tx(&full[i],
                                  ring_unit_bytes(p.down, p.down_layout, row0));
      }
      __syncwarp();
      ring_copy_unit(p.down, p.down_layout, 0, 1, row0,
                     u.range * p.down_layout.row_bytes,
                     u.range * p.down_layout.scale_bytes, slot, &full[i]);
    }
  }
}

/* Range r of h into hs / hchunk by the consumer warps, once all of its
 * F/2 values are written: thread 0 waits with acquire loads, the consumer
 * barrier (bar.sync: CTA-scope ordering, cumulative) orders the other
 * threads' loads after its acquire, and the loads go to L2 (ld.global.cg:
 * h was written by other multiprocessors during this launch; never the
 * non-coherent __ldg path). The caller has passed a consumer barrier since
 * any warp last read hs. */
static __device__ __forceinline__ void
mlp_ring_stage_h(const mlp_ring_params &p, unsigned int r, __half *hs,
                 float2 *hchunk) {
  const unsigned int lane = threadIdx.x % 32, half = p.ffn / MLP_RING_RANGES;
  if (threadIdx.x == 0) {
    mlp_ring_wait(&p.counters[MLP_RING_H + r], half, "h range", r);
  }
  ring_consumers_sync();
  const float4 *h = (const float4 *)(p.h + (unsigned long long)r * half);
  const unsigned int quads = half / 4;
  float unused = 0.0f;
  for (unsigned int base = threadIdx.x - lane; base < quads;
       base += RING_CONSUMERS * 32) {
    const unsigned int k4 = base + lane;
    const bool valid = k4 < quads;
    gemv_stage_quad<false>(false, k4, valid,
                           valid ? __ldcg(h + k4)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f),
                           make_uint2(0u, 0u), hs, hchunk, &unused);
  }
  ring_consumers_sync();
}

/* The warp's column steps w, w + 16, ... of a slot's `matrices` matrices
 * (inputs staged in vs / vchunk): matrix 0's rows g and g + 8 into a[0],
 * a[1], matrix 1's (gate/up's up) into a[2], a[3]. */
static __device__ __forceinline__ void
mlp_ring_compute(const unsigned char *slot, const ring_layout &l,
                 unsigned int matrices, unsigned int group_shift,
                 const __half *vs, const float2 *vchunk, float a[4]) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int t = lane % 4;
  const unsigned int chunks = l.row_bytes / 16, steps = (chunks + 3) / 4;
  for (unsigned int step = warp; step < steps; step += RING_CONSUMERS) {
    const unsigned int c = step * 4 + t < chunks ? step * 4 + t : 0;
    gemv_stage st;
    ring_load_item(slot, l, 0, matrices, step, group_shift, RING_TILE, &st);
    ring_compute_item(st, c, vs, vchunk, false, &a[0], &a[1]);
    if (matrices == 2) {
      ring_load_item(slot, l, 1, matrices, step, group_shift, RING_TILE, &st);
      ring_compute_item(st, c, vs, vchunk, false, &a[2], &a[3]);
    }
  }
}

/* Warp 15's lanes r < 16 finish row r of unit u from the 16 warps' sums
 * (s[w][r] = (matrix 0, matrix 1)). Each lane counts its own value with a
 * release fetch_add at device scope after writing it, so a waiter's
 * acquire load that reads the count synchronizes with every counted
 * write (all 16 lanes' release sequences end in the value it reads); a
 * range-0 lane waits for its tile's count itself (acquire). */
static __device__ __forceinline__ void
mlp_ring_finish(const mlp_ring_params &p, mlp_ring_unit u,
                const float (*s)[RING_TILE][2], float inv) {
  const unsigned int r = threadIdx.x % 32;
  float a = 0.0f, b = 0.0f;
  for (unsigned int w = 0; w < RING_CONSUMERS; w++) {
    a += s[w][r][0];
    b += s[w][r][1];
  }
  const unsigned int row = u.tile * RING_TILE + r;
  if (u.kind == MLP_RING_GATE_UP) {
    const float gate = a * inv, up = b * inv;
    p.h[row] = gate / (1.0f + expf(-gate)) * up;
    mlp_counter(p.counters[MLP_RING_H + u.range])
        .fetch_add(1, cuda::memory_order_release);
  } else if (u.range == 1) {
    p.partial[row] = a;
    mlp_counter(p.counters[MLP_RING_TILES + u.tile])
        .fetch_add(1, cuda::memory_order_release);
  } else {
    mlp_ring_wait(&p.counters[MLP_RING_TILES + u.tile], RING_TILE, "tile",
                  u.tile);
    p.y[row] = __ldg(p.x + row) + (a + __ldcg(p.partial + row));
  }
}

/* The consumer warps: x staged (normed) once, then the ring's units in the
 * order taken until the end marker. Slot n % slots holds the n-th unit;
 * every warp frees it (one arrival on empty) once its items are read, and
 * the sums are double buffered by n % 2, so one consumer barrier a unit
 * suffices: warp 15 reads s[n % 2] after barrier n while the others write
 * s[(n + 1) % 2], and none writes s[n % 2] again before barrier n + 1,
 * which warp 15 joins after finishing unit n. */
static __device__ __forceinline__ void
mlp_ring_consume(const mlp_ring_params &p, const unsigned char *slots,
                 __half *xs, float2 *xchunk, __half *hs, float2 *hchunk,
                 uint64_t *full, uint64_t *empty, const unsigned int *unit_of,
                 float (*sums)[RING_CONSUMERS][RING_TILE][2],
                 float *warp_squares) {
  const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned int g = lane / 4, t = lane % 4;
  grid_wait();
  float squares = ring_stage_x<true>(p.x, p.norm, p.in, xs, xchunk);
  squares = warp_sum(squares);
  if (lane == 0) {
    warp_squares[warp] = squares;
  }
  ring_consumers_sync();
  float total = 0.0f;
  for (unsigned int w = 0; w < RING_CONSUMERS; w++) {
    total += warp_squares[w];
  }
  const float inv = (float)(1.0 / sqrt((double)total / p.in + p.eps));
  unsigned int staged = MLP_RING_RANGES; /* h's range in hs: none yet */
  for (unsigned int n = 0;; n++) {
    const unsigned int i = n % p.slots;
    mbarrier_wait(&full[i], (n / p.slots) & 1, "full", i);
    const unsigned int k = unit_of[i];
    if (k >= p.units) {
      return;
    }
    const mlp_ring_unit u = mlp_ring_unit_at(p.in, p.ffn, k);
    const unsigned char *slot = slots + (unsigned long long)i * p.slot_bytes;
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (u.kind == MLP_RING_GATE_UP) {
      mlp_ring_compute(slot, p.gate_up_layout, 2, p.group_shift, xs, xchunk, a);
    } else {
      if (u.range != staged) {
        mlp_ring_stage_h(p, u.range, hs, hchunk);
        staged = u.range;
      }
      mlp_ring_compute(slot, p.down_layout, 1, p.group_shift, hs, hchunk, a);
    }
    __syncwarp();
    if (lane == 0) {
      mbarrier_arrive(&empty[i]);
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      a[j] += __shfl_xor_sync(0xffffffffu, a[j], 1);
      a[j] += __shfl_xor_sync(0xffffffffu, a[j], 2);
    }
    if (t == 0) {
      sums[n % 2][warp][g][0] = a[0];
      sums[n % 2][warp][g + 8][0] = a[1];
      sums[n % 2][warp][g][1] = a[2];
      sums[n % 2][warp][g + 8][1] = a[3];
    }
    ring_consumers_sync();
    /* warp 15: at I 3,072 one gate/up step where warps 0-7 have two */
    if (warp == RING_CONSUMERS - 1 && lane < RING_TILE) {
      mlp_ring_finish(p, u, sums[n % 2], inv);
    }
  }
}

__global__ void __launch_bounds__(RING_THREADS, 1)
    mlp_ring_kernel(mlp_ring_params p) {
  extern __shared__ __align__(16) unsigned char ring_dynamic[];
  __shared__ __align__(8) uint64_t full[MLP_RING_MAX_SLOTS];
  __shared__ __align__(8) uint64_t empty[MLP_RING_MAX_SLOTS];
  __shared__ unsigned int unit_of[MLP_RING_MAX_SLOTS];
  __shared__ float sums[2][RING_CONSUMERS][RING_TILE][2];
  __shared__ float warp_squares[RING_CONSUMERS];
  __shared__ bool last_out;
  unsigned char *slots =
      (unsigned char *)(((uintptr_t)ring_dynamic + 127) & ~(uintptr_t)127);
  __half *xs = (__half *)(slots + (unsigned long long)p.slots * p.slot_bytes);
  float2 *xchunk = (float2 *)(xs + 2ull * p.in);
  __half *hs = (__half *)(xchunk + p.in / 32);
  float2 *hchunk = (float2 *)(hs + 2ull * (p.ffn / MLP_RING_RANGES));
  grid_launch_dependents();
  ring_init_barriers(full, empty, p.slots);
  /* The producer takes units (and streams weights) before the grid wait:
   * the counters must not be shared with a launch still running (stream
   * order without programmatic dependent launch, as here). */
  if (threadIdx.x / 32 == RING_CONSUMERS) {
    mlp_ring_produce(p, slots, full, empty, unit_of);
  } else {
    mlp_ring_consume(p, slots, xs, xchunk, hs, hchunk, full, empty, unit_of,
                     sums, warp_squares);
  }

  /* The counters' reset for the next launch, with no host memset: after
   * the block barrier, thread 0's acq_rel fetch_add on the exit counter
   * orders all of the block's counter operations before it (bar.sync is
   * cumulative); the block that reads gridDim.x - 1 is the last out, sees
   * every block's operations as done, and zeroes all counters with plain
   * stores, which the next launch sees after this one ends. The host zeroes
   * them once when it allocates them; a launch that traps leaves them
   * dirty (the program exits). */
  __syncthreads();
  if (threadIdx.x == 0) {
    mlp_counter exited(p.counters[MLP_RING_EXITED]);
    last_out = exited.fetch_add(1, cuda::memory_order_acq_rel) == gridDim.x - 1;
  }
  __syncthreads();
  if (last_out) {
    for (unsigned int j = threadIdx.x; j < MLP_RING_TILES + p.in / RING_TILE;
         j += blockDim.x) {
      p.counters[j] = 0;
    }
  }
}

/* ---- --simulate: the unit list's protocol, off the device --------------- */

/* A block of the simulation: its producer's ring (FIFO of taken indices,
 * whether each unit's copies have landed), its consumers' state. */
typedef struct sim_block {
  unsigned int unit[MLP_RING_MAX_SLOTS];
  bool landed[MLP_RING_MAX_SLOTS];
  unsigned int head, size; /* the ring's oldest entry, entries held */
  unsigned int staged;     /* h's range staged (MLP_RING_RANGES: none) */
  bool finishing;          /* warp 15 on `current`'s epilogue */
  mlp_ring_unit current;   /* the unit being finished */
  bool started, produced, consumed, exited;
  unsigned int speed; /* 1-100: how often it is picked */
} sim_block;

typedef struct sim_run {
  unsigned int in, ffn, units, slots, blocks, resident, running;
  sim_block *b;
  unsigned int *counters, *ran;
  bool *h_written, *partial_written, *y_written;
} sim_run;

enum {
  SIM_START,
  SIM_TAKE,
  SIM_LAND,
  SIM_COMPUTE,
  SIM_FINISH,
  SIM_END,
  SIM_EXIT,
  SIM_ACTIONS
};

static bool sim_fail(const sim_run *s, const char *what) {
  fprintf(stderr,
          "simulate: %s (I %u, F %u, %u blocks, %u resident, %u "
          "slots)\n",
          what, s->in, s->ffn, s->blocks, s->resident, s->slots);
  return false;
}

/* Whether action a of block b is enabled: the kernel's waits as guards. */
static bool sim_enabled(const sim_run *s, const sim_block *b, int a) {
  const unsigned int half = s->ffn / MLP_RING_RANGES;
  const unsigned int k = b->unit[b->head];
  const bool head_ready = b->started && !b->consumed && !b->finishing &&
                          b->size > 0 && b->landed[b->head];
  switch (a) {
  case SIM_START:
    return !b->started && s->running < s->resident;
  case SIM_TAKE:
    return b->started && !b->produced && b->size < s->slots;
  case SIM_LAND:
    for (unsigned int j = 0; j < b->size; j++) {
      if (!b->landed[(b->head + j) % s->slots]) {
        return true;
      }
    }
    return false;
  case SIM_COMPUTE: {
    if (!head_ready || k >= s->units) {
      return false;
    }
    const mlp_ring_unit u = mlp_ring_unit_at(s->in, s->ffn, k);
    return u.kind == MLP_RING_GATE_UP || u.range == b->staged ||
           s->counters[MLP_RING_H + u.range] >= half;
  }
  case SIM_FINISH:
    return b->finishing &&
           !(b->current.kind == MLP_RING_DOWN && b->current.range == 0 &&
             s->counters[MLP_RING_TILES + b->current.tile] < RING_TILE);
  case SIM_END:
    return head_ready && k >= s->units;
  case SIM_EXIT:
    return b->produced && b->consumed && !b->exited;
  }
  return false;
}

/* Performs action a of block b, checking the data each step relies on. */
static bool sim_act(sim_run *s, sim_block *b, int a) {
  const unsigned int half = s->ffn / MLP_RING_RANGES;
  const unsigned int tiles = s->in / RING_TILE;
  switch (a) {
  case SIM_START:
    b->started = true;
    s->running++;
    return true;
  case SIM_TAKE: {
    const unsigned int at = (b->head + b->size) % s->slots;
    b->unit[at] = s->counters[MLP_RING_NEXT]++;
    b->landed[at] = b->unit[at] >= s->units; /* the end marker: no bytes */
    b->produced = b->unit[at] >= s->units;
    b->size++;
    return true;
  }
  case SIM_LAND: {
    unsigned int j = lab_rand32() % b->size;
    while (b->landed[(b->head + j) % s->slots]) {
      j = (j + 1) % b->size;
    }
    b->landed[(b->head + j) % s->slots] = true;
    return true;
  }
  case SIM_COMPUTE: {
    const unsigned int k = b->unit[b->head];
    const mlp_ring_unit u = mlp_ring_unit_at(s->in, s->ffn, k);
    s->ran[k]++;
    if (u.kind == MLP_RING_DOWN && u.range != b->staged) {
      for (unsigned int f = u.range * half; f < (u.range + 1) * half; f++) {
        if (!s->h_written[f]) {
          return sim_fail(s, "h staged before it was written");
        }
      }
      b->staged = u.range;
    }
    b->head = (b->head + 1) % s->slots; /* the slot is free */
    b->size--;
    b->current = u;
    b->finishing = true;
    return true;
  }
  case SIM_FINISH: {
    const mlp_ring_unit u = b->current;
    b->finishing = false;
    if (u.kind == MLP_RING_GATE_UP) {
      for (unsigned int r = 0; r < RING_TILE; r++) {
        if (s->h_written[u.tile * RING_TILE + r]) {
          return sim_fail(s, "h written twice");
        }
        s->h_written[u.tile * RING_TILE + r] = true;
      }
      s->counters[MLP_RING_H + u.range] += RING_TILE;
    } else if (u.range == 1) {
      s->partial_written[u.tile] = true;
      s->counters[MLP_RING_TILES + u.tile] += RING_TILE;
    } else {
      if (!s->partial_written[u.tile] || s->y_written[u.tile]) {
        return sim_fail(s, "y written before its partial, or twice");
      }
      s->y_written[u.tile] = true;
    }
    return true;
  }
  case SIM_END:
    b->head = (b->head + 1) % s->slots;
    b->size--;
    b->consumed = true;
    return true;
  case SIM_EXIT:
    b->exited = true;
    s->running--;
    if (++s->counters[MLP_RING_EXITED] == s->blocks) {
      memset(s->counters, 0, sizeof(unsigned int) * (MLP_RING_TILES + tiles));
    }
    return true;
  }
  return false;
}

/* One launch: picks a block at random (weighted by its speed), performs
 * one of its enabled actions at random; when no block has one, every
 * block must have exited, else it is a deadlock. */
static bool sim_launch(sim_run *s) {
  const unsigned int tiles = s->in / RING_TILE;
  for (;;) {
    unsigned int pick = lab_rand32() % s->blocks;
    for (int tries = 0; tries < 8; tries++) {
      if (lab_rand32() % 100 < s->b[pick].speed) {
        break;
      }
      pick = lab_rand32() % s->blocks;
    }
    int actions[SIM_ACTIONS], count = 0;
    unsigned int scanned = 0;
    for (; scanned < s->blocks && count == 0; scanned++) {
      for (int a = 0; a < SIM_ACTIONS; a++) {
        if (sim_enabled(s, &s->b[pick], a)) {
          actions[count++] = a;
        }
      }
      if (count == 0) {
        pick = (pick + 1) % s->blocks;
      }
    }
    if (count == 0) {
      break;
    }
    if (!sim_act(s, &s->b[pick], actions[lab_rand32() % count])) {
      return false;
    }
  }
  for (unsigned int i = 0; i < s->blocks; i++) {
    if (!s->b[i].exited) {
      const sim_block *b = &s->b[i];
      fprintf(stderr, "simulate: block %u stuck: %u held, head %u, %s\n", i,
              b->size, b->size ? b->unit[b->head] : 0,
              b->finishing ? "finishing" : "waiting");
      return sim_fail(s, "deadlock");
    }
  }
  for (unsigned int k = 0; k < s->units; k++) {
    if (s->ran[k] != 1) {
      return sim_fail(s, "a unit did not run exactly once");
    }
  }
  for (unsigned int t = 0; t < tiles; t++) {
    if (!s->y_written[t]) {
      return sim_fail(s, "a tile of y was not written");
    }
  }
  for (unsigned int j = 0; j < MLP_RING_TILES + tiles; j++) {
    if (s->counters[j] != 0) {
      return sim_fail(s, "counters not zero after the launch");
    }
  }
  return true;
}

/* N runs of two launches each on the same counters: half at the given
 * shape, half at small random ones (I 16-384, F 32-512); 1-160 blocks,
 * 1 to all of them resident at once, 2-8 slots. */
static int mlp_ring_simulate(int runs, unsigned int in, unsigned int ffn) {
  unsigned long long units = 0, steps = 0;
  for (int run = 0; run < runs; run++) {
    sim_run s;
    memset(&s, 0, sizeof s);
    s.in = run % 2 ? RING_TILE * (1 + lab_rand32() % 24) : in;
    s.ffn = run % 2 ? 2 * RING_TILE * (1 + lab_rand32() % 16) : ffn;
    s.units = mlp_ring_units(s.in, s.ffn);
    s.slots = 2 + lab_rand32() % (MLP_RING_MAX_SLOTS - 1);
    s.blocks = 1 + lab_rand32() % 160;
    s.resident = run % 4 == 0 ? s.blocks : 1 + lab_rand32() % s.blocks;
    const unsigned int tiles = s.in / RING_TILE;
    s.counters =
        (unsigned int *)calloc(MLP_RING_TILES + tiles, sizeof(unsigned int));
    s.b = (sim_block *)malloc(sizeof(sim_block) * s.blocks);
    s.ran = (unsigned int *)malloc(sizeof(unsigned int) * s.units);
    s.h_written = (bool *)malloc(s.ffn);
    s.partial_written = (bool *)malloc(tiles);
    s.y_written = (bool *)malloc(tiles);
    bool ok = true;
    for (int launch = 0; launch < 2 && ok; launch++) {
      memset(s.b, 0, sizeof(sim_block) * s.blocks);
      for (unsigned int i = 0; i < s.blocks; i++) {
        s.b[i].staged = MLP_RING_RANGES;
        s.b[i].speed = 1 + lab_rand32() % 100;
      }
      memset(s.ran, 0, sizeof(unsigned int) * s.units);
      memset(s.h_written, 0, s.ffn);
      memset(s.partial_written, 0, tiles);
      memset(s.y_written, 0, tiles);
      ok = sim_launch(&s);
      units += s.units;
      steps++;
    }
    free(s.counters);
    free(s.b);
    free(s.ran);
    free(s.h_written);
    free(s.partial_written);
    free(s.y_written);
    if (!ok) {
      fprintf(stderr, "simulate: run %d failed\n", run);
      return 1;
    }
  }
  printf("simulate: %d runs, %llu launches, %llu units: no deadlock, every "
         "unit ran once, y complete, counters zero after every launch\n",
         runs, steps, units);
  return 0;
}

/* ---- host ---------------------------------------------------------------- */

typedef struct mlp_case {
  unsigned int in, ffn;
  lab_q4 gate, up, down;
  uint16_t *norm, *dnorm;
  float *x, *dx, *dy, *dh, *dinv, *dpartial;
  unsigned int *dcounters;
  double eps;
  int version, blocks;
  size_t shared;
  mlp_ring_params p;
} mlp_case;

static void mlp_launch(void *ctx) {
  mlp_case *c = (mlp_case *)ctx;
  if (c->version == 1) {
    naive_mlp(c->dx, c->dnorm, c->eps, c->gate, c->up, c->down, c->dinv, c->dh,
              c->dy);
    return;
  }
  mlp_ring_kernel<<<c->blocks, RING_THREADS, c->shared>>>(c->p);
}

static ring_matrix mlp_ring_matrix(const lab_q4 *m) {
  ring_matrix r;
  r.weight = (const unsigned char *)m->dw;
  r.scales = (const unsigned char *)m->ds;
  r.biases = (const unsigned char *)m->db;
  r.weight_row_bytes = m->in / 2;
  r.scale_row_bytes = m->in / m->group * 2;
  r.rows = m->rows;
  return r;
}

/* The ring's launch: as many slots as fit beside x and h, one block an
 * SM; the counters zeroed once. Returns false when fewer than 2 fit. */
static bool mlp_ring_prepare(mlp_case *c) {
  mlp_ring_params *p = &c->p;
  memset(p, 0, sizeof *p);
  p->gate = mlp_ring_matrix(&c->gate);
  p->up = mlp_ring_matrix(&c->up);
  p->down = mlp_ring_matrix(&c->down);
  p->gate_up_layout = ring_layout_of(c->in, 64);
  p->down_layout = ring_layout_of(c->ffn / MLP_RING_RANGES, 64);
  p->x = c->dx;
  p->norm = c->dnorm;
  p->in = c->in;
  p->ffn = c->ffn;
  p->units = mlp_ring_units(c->in, c->ffn);
  p->group_shift = 1; /* groups of 64: two chunks */
  p->eps = c->eps;
  p->h = c->dh;
  p->partial = c->dpartial;
  p->y = c->dy;
  p->counters = c->dcounters;
  const unsigned long long gate_up = ring_slot_bytes(p->gate_up_layout, 2);
  const unsigned long long down = ring_slot_bytes(p->down_layout, 1);
  p->slot_bytes = (unsigned int)(gate_up > down ? gate_up : down);
  /* the static shared memory: barriers, units, sums, squares, a flag */
  const unsigned long long fixed =
      2 * MLP_RING_MAX_SLOTS * 8 + MLP_RING_MAX_SLOTS * 4 +
      2 * RING_CONSUMERS * RING_TILE * 2 * 4 + RING_CONSUMERS * 4 + 16;
  const unsigned long long staged = mlp_ring_shared_bytes(c->in, c->ffn, 0, 0);
  if (fixed + staged + 2ull * p->slot_bytes > RING_MAX_SHARED) {
    return false;
  }
  const unsigned long long slots =
      (RING_MAX_SHARED - fixed - staged) / p->slot_bytes;
  p->slots =
      (unsigned int)(slots > MLP_RING_MAX_SLOTS ? MLP_RING_MAX_SLOTS : slots);
  c->shared =
      (size_t)mlp_ring_shared_bytes(c->in, c->ffn, p->slots, p->slot_bytes);
  int device = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&c->blocks, cudaDevAttrMultiProcessorCount,
                               device));
  ring_allow_shared((const void *)mlp_ring_kernel, c->shared);
  printf("ring: %u slots of %u bytes, %zu bytes of shared memory, %d blocks, "
         "%u units\n",
         p->slots, p->slot_bytes, c->shared, c->blocks, p->units);
  return true;
}

/* One checked launch: y poisoned with NaN, the relative error against ref;
 * for the ring also whether the counters came back to zero. */
static bool mlp_check(mlp_case *c, const double *ref, float *out, double *err) {
  CHECK(cudaMemset(c->dy, 0xff, 4 * (size_t)c->in));
  mlp_launch(c);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(out, c->dy, 4 * (size_t)c->in, cudaMemcpyDeviceToHost));
  *err = lab_relative_error(out, ref, c->in);
  bool ok = *err < 1e-3;
  if (c->version == 2) {
    const unsigned int n = MLP_RING_TILES + c->in / RING_TILE;
    unsigned int *counters = (unsigned int *)malloc(4 * (size_t)n);
    CHECK(cudaMemcpy(counters, c->dcounters, 4 * (size_t)n,
                     cudaMemcpyDeviceToHost));
    for (unsigned int j = 0; j < n; j++) {
      if (counters[j] != 0) {
        printf("version 2: counter %u is %u after the launch\n", j,
               counters[j]);
        ok = false;
      }
    }
    free(counters);
  }
  return ok;
}

int main(int argc, char **argv) {
  int only = 0, repeats = 50, simulate = 0;
  mlp_case c;
  memset(&c, 0, sizeof c);
  c.in = 3072; /* llama-3.2-3b */
  c.ffn = 8192;
  c.eps = 1e-5;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--in") && i + 1 < argc) {
      c.in = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--ffn") && i + 1 < argc) {
      c.ffn = (unsigned int)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
      repeats = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--simulate") && i + 1 < argc) {
      simulate = atoi(argv[++i]);
    } else {
      only = atoi(argv[i]);
    }
  }
  if (c.in == 0 || c.in % 256 != 0 || c.ffn == 0 || c.ffn % 512 != 0 ||
      repeats < 1 || simulate < 0) {
    fprintf(stderr, "usage: mlp_ring [VERSION] [--in I (a multiple of 256)] "
                    "[--ffn F (of 512)] [--repeats N] [--simulate N]\n");
    return 2;
  }
  if (simulate > 0) {
    return mlp_ring_simulate(simulate, c.in, c.ffn);
  }
  lab_require_sm90();
  c.gate = lab_q4_random(c.ffn, c.in, 64);
  c.up = lab_q4_random(c.ffn, c.in, 64);
  c.down = lab_q4_random(c.in, c.ffn, 64);
  c.x = lab_random_vector(c.in, -1.0f, 1.0f);
  c.norm = (uint16_t *)malloc(2 * (size_t)c.in);
  for (unsigned int i = 0; i < c.in; i++) {
    c.norm[i] = lab_f16(lab_uniform(0.5f, 1.5f));
  }
  c.dx = (float *)lab_device_copy(c.x, 4 * (size_t)c.in);
  c.dnorm = (uint16_t *)lab_device_copy(c.norm, 2 * (size_t)c.in);
  CHECK(cudaMalloc(&c.dy, 4 * (size_t)c.in));
  CHECK(cudaMalloc(&c.dh, 4 * (size_t)c.ffn));
  CHECK(cudaMalloc(&c.dinv, 4));
  CHECK(cudaMalloc(&c.dpartial, 4 * (size_t)c.in));
  const size_t counters = 4 * (size_t)(MLP_RING_TILES + c.in / RING_TILE);
  CHECK(cudaMalloc(&c.dcounters, counters));
  CHECK(cudaMemset(c.dcounters, 0, counters)); /* once: launches reset them */
  double *ref = (double *)malloc(sizeof(double) * c.in);
  float *out = (float *)malloc(sizeof(float) * c.in);
  lab_mlp_cpu(c.x, c.norm, c.eps, &c.gate, &c.up, &c.down, ref);
  const size_t bytes = lab_q4_bytes(&c.gate) + lab_q4_bytes(&c.up) +
                       lab_q4_bytes(&c.down) + 8 * (size_t)c.in;
  lab_timer timer = lab_timer_create();
  const double copy = lab_copy_gbps(&timer, 256u << 20, repeats);
  printf("I %u, F %u, %.1f MB moved; device-to-device copy %.0f GB/s\n", c.in,
         c.ffn, bytes / 1e6, copy);
  int failed = 0;
  for (int v = 1; v <= 2; v++) {
    if (only != 0 && v != only) {
      continue;
    }
    c.version = v;
    if (v == 2 && !mlp_ring_prepare(&c)) {
      printf("version 2: fewer than 2 slots fit at I %u, F %u, skipped\n", c.in,
             c.ffn);
      continue;
    }
    double err = 0.0, err_after = 0.0;
    const bool before = mlp_check(&c, ref, out, &err);
    const float ms = lab_time_ms(&timer, repeats, mlp_launch, &c);
    const bool after = mlp_check(&c, ref, out, &err_after);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    const bool ok = before && after;
    printf("version %d: relative error %.3e (%.3e after the timed launches) "
           "%s, %.2f us, %.0f GB/s, %.1f%% of the copy\n",
           v, err, err_after, ok ? "ok" : "FAILED", ms * 1e3, gbps,
           100.0 * gbps / copy);
    failed |= !ok;
  }
  return failed;
}
