/* A TMA weight ring (docs/tuning-log.md entries 57-59), rebuilt in the lab
 * from the entries' description after branch `mlp-ring` was lost: one
 * block of RING_CONSUMERS + 1 warps a multiprocessor; the producer warp
 * copies units of 16 weight rows (with their scales and biases) into a
 * ring of slots in shared memory with bulk copies (cp.async.bulk, one a
 * row and kind) completing on the slot's "full" mbarrier, and waits only
 * for free slots ("empty": one arrival per consumer warp). The consumers
 * compute each unit from its slot with the GEMV's tensor-core items
 * (gemv_q4.cuh). Weights stream from the kernel's first instruction, not
 * from the previous kernel's end, and a slot is refilled as soon as it is
 * read: the ring never stops streaming while there are slots free.
 *
 * Layout of a slot (ring_layout): 16 rows of weights at weight_pitch
 * (row bytes rounded to 128, plus 64, so the 8 row pairs of a quad's
 * 16-byte loads fall in different banks), then 16 rows of scales and 16
 * of biases at scale_pitch. Every wait is bounded: after RING_TIMEOUT_NS
 * it prints the block, the thread and what it waited for, then traps (as
 * the branch did from 16f5d89), so a protocol error costs one launch, not
 * a hung device. */
#ifndef FOUNDRY_LAB_RING_Q4_CUH
#define FOUNDRY_LAB_RING_Q4_CUH

#include "gemv_q4.cuh"

#define RING_TILE       16 /* rows of a unit */
#define RING_CONSUMERS  16 /* consumer warps */
#define RING_THREADS    ((RING_CONSUMERS + 1) * 32)
#define RING_STEP       128 /* inputs of a column step (4 chunks of 32) */
#define RING_TIMEOUT_NS 10000000000ull
#define RING_MAX_SHARED (227u * 1024u) /* H100/H200 opt-in */
#define RING_BARRIER_ID 1              /* named barrier of the consumer warps */

typedef struct ring_layout {
  unsigned int row_bytes, weight_pitch;  /* weights of a row */
  unsigned int scale_bytes, scale_pitch; /* scales (or biases) of a row */
} ring_layout;

static __host__ __device__ inline unsigned long long
ring_round_up(unsigned long long n, unsigned long long to) {
  return (n + to - 1) / to * to;
}

/* A unit's rows of `inputs` inputs in groups of `group` (inputs / 2 and
 * inputs / group * 2 multiples of 16: bulk copies move 16-byte multiples). */
static __host__ __device__ inline ring_layout
ring_layout_of(unsigned long long inputs, unsigned long long group) {
  ring_layout l;
  l.row_bytes = (unsigned int)(inputs / 2);
  l.weight_pitch = (unsigned int)(ring_round_up(l.row_bytes, 128) + 64);
  l.scale_bytes = (unsigned int)(inputs / group * 2);
  l.scale_pitch = (unsigned int)(ring_round_up(l.scale_bytes, 32) + 16);
  return l;
}

/* Bytes of a slot holding `matrices` units of this layout. */
static __host__ __device__ inline unsigned long long
ring_slot_bytes(const ring_layout &l, unsigned int matrices) {
  return ring_round_up((unsigned long long)matrices * RING_TILE *
                           (l.weight_pitch + 2ull * l.scale_pitch),
                       128);
}

static __device__ __forceinline__ unsigned int shared_address(const void *p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ unsigned long long global_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __device__ __forceinline__ void mbarrier_init(uint64_t *bar,
                                                     unsigned int count) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)),
      "r"(count)
      : "memory");
}

static __device__ __forceinline__ void mbarrier_init_fence(void) {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* The ring's barriers of `slots` slots, by thread 0 of the block, then a
 * block barrier: full[i] completes on the producer's arrival (and its
 * copies' bytes), empty[i] on every consumer warp's. */
static __device__ __forceinline__ void
ring_init_barriers(uint64_t *full, uint64_t *empty, unsigned int slots) {
  if (threadIdx.x == 0) {
    for (unsigned int i = 0; i < slots; i++) {
      mbarrier_init(&full[i], 1);
      mbarrier_init(&empty[i], RING_CONSUMERS);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
}

static __device__ __forceinline__ void mbarrier_arrive(uint64_t *bar) {
  asm volatile(
      "mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar))
      : "memory");
}

static __device__ __forceinline__ void
mbarrier_arrive_expect_tx(uint64_t *bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   shared_address(bar)),
               "r"(bytes)
               : "memory");
}

/* Waits for the completion of the barrier's phase of parity `parity`;
 * traps after RING_TIMEOUT_NS naming the wait. */
static __device__ __forceinline__ void mbarrier_wait(uint64_t *bar,
                                                     unsigned int parity,
                                                     const char *what,
                                                     unsigned int slot) {
  const unsigned long long start = global_ns();
  unsigned int done = 0;
  for (;;) {
    asm volatile("{ .reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(shared_address(bar)), "r"(parity)
                 : "memory");
    if (done) {
      return;
    }
    if (global_ns() - start > RING_TIMEOUT_NS) {
      printf("ring kernel: block %u thread %u waited 10 s for %s slot %u "
             "parity %u\n",
             blockIdx.x, threadIdx.x, what, slot, parity);
      __trap();
    }
  }
}

/* bytes from global src to shared dst, completing on bar (16-byte aligned
 * addresses, bytes a multiple of 16). */
static __device__ __forceinline__ void
bulk_copy(void *dst, const void *src, unsigned int bytes, uint64_t *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];" ::"r"(shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

/* A quantized matrix and the part of its rows a unit reads. */
typedef struct ring_matrix {
  const unsigned char *weight, *scales, *biases;
  unsigned int weight_row_bytes, scale_row_bytes; /* of the whole matrix */
  unsigned int rows;
} ring_matrix;

/* Bytes the copies of rows [row0, row0 + 16) of m, inputs from byte
 * `first` (scales from `first_scale`) move into a slot. */
static __device__ __forceinline__ unsigned int
ring_unit_bytes(const ring_matrix &m, const ring_layout &l, unsigned int row0) {
  const unsigned int rows =
      m.rows - row0 < RING_TILE ? m.rows - row0 : RING_TILE;
  return rows * (l.row_bytes + 2 * l.scale_bytes);
}

/* The producer warp's copies of matrix mi of a unit (rows row0 .. + 15 of
 * m, inputs from byte `first` of a weight row and `first_scale` of a scale
 * row) into slot: lane r < 16 the weights of row r, lane 16 + r its scales
 * and biases; rows past the matrix are not copied. The caller has armed
 * `full` with the unit's bytes. */
static __device__ __forceinline__ void
ring_copy_unit(const ring_matrix &m, const ring_layout &l, unsigned int mi,
               unsigned int matrices, unsigned int row0, unsigned int first,
               unsigned int first_scale, unsigned char *slot, uint64_t *full) {
  const unsigned int lane = threadIdx.x % 32, r = lane % RING_TILE;
  const unsigned long long row = (unsigned long long)row0 + r;
  if (row >= m.rows) {
    return;
  }
  if (lane < RING_TILE) {
    bulk_copy(slot + (mi * RING_TILE + r) * l.weight_pitch,
              m.weight + row * m.weight_row_bytes + first, l.row_bytes, full);
    return;
  }
  unsigned char *scales =
      slot + (unsigned long long)matrices * RING_TILE * l.weight_pitch;
  bulk_copy(scales + ((mi * 2 + 0) * RING_TILE + r) * l.scale_pitch,
            m.scales + row * m.scale_row_bytes + first_scale, l.scale_bytes,
            full);
  bulk_copy(scales + ((mi * 2 + 1) * RING_TILE + r) * l.scale_pitch,
            m.biases + row * m.scale_row_bytes + first_scale, l.scale_bytes,
            full);
}

/* Lane (g, t)'s item of column step `step` of matrix mi of a slot: chunk
 * c = 4 step + t of rows g and g + 8 (valid below `rows`), group c >>
 * group_shift, from shared memory. */
static __device__ __forceinline__ void
ring_load_item(const unsigned char *slot, const ring_layout &l, unsigned int mi,
               unsigned int matrices, unsigned int step,
               unsigned int group_shift, unsigned int rows, gemv_stage *st) {
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned int c = step * 4 + t;
  const bool in = c * 16 < l.row_bytes;
  const bool v0 = in && g < rows, v8 = in && g + 8 < rows;
  const unsigned char *w = slot + mi * RING_TILE * l.weight_pitch;
  st->q0 = v0 ? *(const uint4 *)(w + g * l.weight_pitch + c * 16)
              : make_uint4(0, 0, 0, 0);
  st->q8 = v8 ? *(const uint4 *)(w + (g + 8) * l.weight_pitch + c * 16)
              : make_uint4(0, 0, 0, 0);
  const unsigned char *sc =
      slot + (unsigned long long)matrices * RING_TILE * l.weight_pitch;
  const uint16_t *s =
      (const uint16_t *)(sc + (mi * 2) * RING_TILE * l.scale_pitch);
  const uint16_t *b =
      (const uint16_t *)(sc + (mi * 2 + 1) * RING_TILE * l.scale_pitch);
  const unsigned int group = c >> group_shift, pitch = l.scale_pitch / 2;
  st->s0 = v0 ? s[g * pitch + group] : 0;
  st->b0 = v0 ? b[g * pitch + group] : 0;
  st->s8 = v8 ? s[(g + 8) * pitch + group] : 0;
  st->b8 = v8 ? b[(g + 8) * pitch + group] : 0;
}

/* Adds item st of chunk c (c within the staged input) into acc0, acc8:
 * x staged in xs / xchunk by gemv_stage_quad. */
static __device__ __forceinline__ void
ring_compute_item(const gemv_stage &st, unsigned int c, const __half *xs,
                  const float2 *xchunk, bool bf16, float *acc0, float *acc8) {
  const unsigned int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bool feeds_b = g / 2 == t;
  const uint4 *b = (const uint4 *)(xs + (c * 2 + g % 2) * 32);
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const uint32_t q0[4] = {st.q0.x, st.q0.y, st.q0.z, st.q0.w};
  const uint32_t q8[4] = {st.q8.x, st.q8.y, st.q8.z, st.q8.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    gemv_word_mmas(d, e, q0[j], q8[j], feeds_b ? b[j] : make_uint4(0, 0, 0, 0));
  }
  gemv_accumulate(st, d, e, xchunk[c], bf16, acc0, acc8);
}

/* The consumer warps' barrier (named barrier 1; the producer never joins). */
static __device__ __forceinline__ void ring_consumers_sync(void) {
  asm volatile("bar.sync %0, %1;" ::"n"(RING_BARRIER_ID),
               "n"(RING_CONSUMERS * 32)
               : "memory");
}

/* x (n inputs, times norm when kNorm) staged by the consumer warps into
 * xs / xchunk; with kNorm, returns each thread's sum of squares of its
 * quads (0 otherwise). */
template <bool kNorm>
static __device__ __forceinline__ float
ring_stage_x(const float *x, const uint16_t *norm, unsigned int n, __half *xs,
             float2 *xchunk) {
  const unsigned int lane = threadIdx.x % 32;
  const unsigned int quads = n / 4;
  float squares = 0.0f;
  for (unsigned int base = threadIdx.x - lane; base < quads;
       base += RING_CONSUMERS * 32) {
    const unsigned int k4 = base + lane;
    const bool valid = k4 < quads;
    gemv_stage_quad<kNorm>(false, k4, valid,
                           valid ? __ldg((const float4 *)x + k4)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f),
                           valid && kNorm ? __ldg((const uint2 *)norm + k4)
                                          : make_uint2(0u, 0u),
                           xs, xchunk, &squares);
  }
  return squares;
}

/* The host's dynamic shared memory bound check and attribute. */
static inline void ring_allow_shared(const void *kernel, size_t bytes) {
  CHECK(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

#endif
