/* Internal interface of the CUDA backend, shared by its host-side C files
 * (cuda_backend.c, cuda_faults.c, cuda_memory.c, cuda_streams.c,
 * cuda_ops.c, cuda_staging.c, cuda_measure.c, cuda_graph.c) and the
 * kernel files (checksum_kernel.cu, ops_kernels.cu, matmul_q4.cu,
 * matmul_q4_mma.cu, linear.cu, attention.cu, attention_prefill.cu,
 * attention_batch.cu). Not installed; outside
 * src/backends/cuda only the CUDA tests include it. */
#ifndef FOUNDRY_CUDA_INTERNAL_H
#define FOUNDRY_CUDA_INTERNAL_H

#include "../handle_list.h"
#include "foundry/cuda.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (cuda_faults.c) -----------------------------------------------
 */

/* Sets err to kind with "cuda <op>: <message>" and backend_op = op. */
fdy_status fdy_cuda_fail(fdy_error *err, fdy_status kind, const char *op,
                         const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* FDY_OK for cudaSuccess; otherwise clears CUDA's last error and fails with
 * FDY_ERR_BACKEND naming `what` and the CUDA error name and string. */
fdy_status fdy_cuda_check(cudaError_t rc, fdy_error *err, const char *op,
                          const char *what);
/* For the CUDA calls of cleanup paths (release, destroy, unwinding after a
 * failure), which have no way to report an error: drops rc deliberately and
 * clears CUDA's last error, so that it cannot surface as the error of a later,
 * unrelated call (a kernel launch reads cudaGetLastError). */
void fdy_cuda_ignore(cudaError_t rc);
/* True for the errors after which the CUDA documentation says the context
 * is unusable and "any further CUDA work will return the same error": a
 * kernel that faulted (cudaErrorIllegalAddress, LaunchFailure,
 * MisalignedAddress, IllegalInstruction, HardwareStackError, Assert,
 * InvalidPc, InvalidAddressSpace, LaunchTimeout, TensorMemoryLeak), a
 * contained hardware error, a terminated MPS client, a failed external
 * device. The backend that sees one is lost (cuda.h). */
bool fdy_cuda_error_is_sticky(cudaError_t rc);

/* ---- test hook (tests/cuda/test_cuda_lost.c) ------------------------------
 */

/* Points buffer's device address at `address`, which must not be device
 * memory, so that a launch with a view of it faults on the device the way
 * a kernel bug would, and the device is lost. Only for the device-loss
 * tests; no production path calls it. */
void fdy_cuda_test_misdirect_buffer(fdy_backend_buffer *buffer,
                                    uintptr_t address);

/* ---- backend state the measurement helpers use (cuda_backend.c) -----------
 */

typedef struct fdy_cuda_checksum_words fdy_cuda_checksum_words;

typedef struct fdy_cuda_ctx {
  int device;
  int max_blocks;        /* checksum grid for large inputs */
  int sm_count;          /* multiprocessors */
  uint64_t smem_optin;   /* dynamic shared memory one block may use */
  uint64_t l2_bytes;     /* L2 cache size */
  cudaStream_t internal; /* warm-up, measurements, release fences */
  /* the word set of the internal stream, and its sink word, where
   * launches whose result nobody reads write it */
  fdy_cuda_checksum_words *internal_words;
  uint64_t *internal_sink;
  /* graphs (cuda_graph.c): the live ones, freed by destroy, and the one
   * being recorded (NULL when none) */
  fdy_list_node graphs;
  fdy_backend_graph *capture;
} fdy_cuda_ctx;

/* *out = the state of b when b is a CUDA backend, and makes its device
 * current. Fails with FDY_ERR_INVALID_ARGUMENT naming op when b is NULL or
 * not a CUDA backend, FDY_ERR_BACKEND when cudaSetDevice fails; *out is NULL
 * then. */
fdy_status fdy_cuda_ctx_of(fdy_backend *b, const char *op, fdy_cuda_ctx **out,
                           fdy_error *err);

/* The CUDA stream of a backend stream (cuda_streams.c). */
cudaStream_t fdy_cuda_stream_of(const fdy_backend_stream *stream);
/* Notes that work was submitted since the last drain, so that a buffer
 * released now is fenced (the reference rule; cuda_memory.c). */
void fdy_cuda_note_submitted(fdy_backend *b);

/* ---- graphs (cuda_graph.c) ------------------------------------------------
 */

/* The graph entries of the backend table (backend.h). */
fdy_status fdy_cuda_graph_begin(fdy_backend *b,
                                fdy_backend_stream *const *streams,
                                uint32_t count, fdy_error *err);
fdy_status fdy_cuda_graph_end(fdy_backend *b, fdy_backend_graph **out,
                              fdy_error *err);
fdy_status fdy_cuda_graph_launch(fdy_backend *b, fdy_backend_graph *graph,
                                 fdy_error *err);
void fdy_cuda_graph_destroy(fdy_backend *b, fdy_backend_graph *graph);
/* A copy that would go through the staging ring while ctx->capture is
 * open: marks the recording refused (graph_end fails with the same error)
 * and fails with FDY_ERR_UNSUPPORTED naming op. */
fdy_status fdy_cuda_capture_refuse(fdy_cuda_ctx *ctx, const char *op,
                                   fdy_error *err);
/* Ends an open capture and frees every graph (backend destroy, after the
 * drain). */
void fdy_cuda_graphs_destroy_all(fdy_cuda_ctx *ctx);

/* ---- staging ring (cuda_staging.c) ----------------------------------------
 */

typedef struct fdy_cuda_staging fdy_cuda_staging;

/* `buffers` page-locked buffers of `buffer_bytes` each and `parts` - 1 fill
 * threads (the caller fills one part of every chunk itself). */
fdy_status fdy_cuda_staging_create(uint64_t buffer_bytes, uint32_t buffers,
                                   uint32_t parts, fdy_cuda_staging **out,
                                   fdy_error *err);
/* Waits for every DMA out of the ring, then frees it; NULL is a no-op.
 * With device_lost (after a sticky error, fdy_cuda_error_is_sticky) it
 * makes no CUDA call: it stops the fill threads and frees host memory only;
 * the pinned buffers and events stay with the unusable context. */
void fdy_cuda_staging_destroy(fdy_cuda_staging *s, bool device_lost);
/* Copies bytes from pageable src to device dst on stream, chunk by chunk:
 * waits until the next staging buffer's previous use completed (its event),
 * fills it on the fill threads, queues its DMA and records its event.
 * Returns once the last chunk is queued, so filling chunk i + 1 overlaps the
 * DMA of chunk i. On failure some chunks may be queued (drain waits). */
fdy_status fdy_cuda_staging_copy(fdy_cuda_staging *s, cudaStream_t stream,
                                 void *dst, const void *src, uint64_t bytes,
                                 fdy_error *err);
/* Copies bytes from device src to pageable host dst in stream order, chunk
 * by chunk: waits until the next staging buffer's previous use completed,
 * queues the DMA into it, then a host function (cudaLaunchHostFunc) that
 * copies it to dst, and records its event. Returns once the last chunk is
 * queued; dst holds the bytes once the stream passed them. On failure some
 * chunks may be queued (drain waits). */
fdy_status fdy_cuda_staging_copy_to_host(fdy_cuda_staging *s,
                                         cudaStream_t stream, void *dst,
                                         const void *src, uint64_t bytes,
                                         fdy_error *err);

/* The measure_ceiling entry of the backend (cuda_measure.c): the
 * fdy_cuda_measure_* helpers of cuda.h by kind; FDY_CEILING_H2D_PINNED
 * registers src with host_register for the measurement. */
fdy_status fdy_cuda_measure_ceiling(fdy_backend *b, fdy_ceiling_kind kind,
                                    const void *src, uint64_t bytes,
                                    uint32_t repeats, double *bytes_per_second,
                                    fdy_error *err);

/* ---- checksum kernel (checksum_kernel.cu) ---------------------------------
 */

/* Counters of the op kernels whose last block finishes the work (ARGMAX
 * over several blocks a row, the one-row ATTENTION), per stream. */
#define FDY_CUDA_OP_COUNTERS 64

/* Device words of the launches of one stream (launches on one stream run
 * one after the other, so they share them). Zero before a launch; the
 * checksum kernel's blocks add into sum and diff and count themselves in
 * blocks_done, and the last block zeroes them again, so the stream's next
 * launch finds them ready. The op kernels count their blocks in
 * op_counters the same way: the block that finds itself last zeroes the
 * counter again. */
struct fdy_cuda_checksum_words {
  unsigned long long sum;  /* sum of term_i mod 2^64 over the first pass */
  unsigned long long diff; /* non-zero when a later pass disagreed */
  unsigned long long sink; /* output of internal launches (not read) */
  unsigned int blocks_done;
  unsigned int pad;
  unsigned int op_counters[FDY_CUDA_OP_COUNTERS];
};

/* Threads per block of the checksum kernel, and the resident blocks per SM
 * its register budget is sized for (__launch_bounds__). Overridable at
 * compile time only for tuning experiments (docs/tuning-log.md). */
#ifndef FDY_CUDA_CHECKSUM_THREADS
#define FDY_CUDA_CHECKSUM_THREADS 512
#endif
#ifndef FDY_CUDA_CHECKSUM_MIN_BLOCKS
#define FDY_CUDA_CHECKSUM_MIN_BLOCKS 2
#endif

/* Most resident blocks of the checksum kernel per multiprocessor. */
cudaError_t fdy_cuda_checksum_occupancy(int *blocks_per_sm);

/* Enqueues the checksum op on stream: *out = fdy_checksum(data[0, bytes))
 * + *prev * FDY_CHAIN_PRIME (prev NULL: 0), in device memory. `passes`
 * reads of data (>= 1; when they disagree the output is complemented, so a
 * chain check fails), `max_blocks` the grid size for large inputs, words
 * the stream's word set. data must be 16-byte aligned. Returns the launch
 * error (cudaGetLastError after the launch). */
cudaError_t fdy_cuda_checksum_enqueue(const void *data, uint64_t bytes,
                                      uint32_t passes, int max_blocks,
                                      fdy_cuda_checksum_words *words,
                                      const uint64_t *prev, uint64_t *out,
                                      cudaStream_t stream);

/* Fills bytes at data with non-zero pseudo-random bytes derived from seed. */
cudaError_t fdy_cuda_fill_enqueue(void *data, uint64_t bytes, uint64_t seed,
                                  cudaStream_t stream);

/* ---- op kernels (cuda_ops.c, ops_kernels.cu, matmul_q4.cu, attention.cu)
 */

/* Most rope pairs (head_dim / 2): the rope kernel takes its inverse
 * frequencies, computed on the host, as a kernel parameter. */
#define FDY_CUDA_ROPE_MAX_PAIRS 256
/* The inverse frequency of each rope pair (fdy_rope_inverse_frequency,
 * computed on the host), a kernel parameter of the rope kernels. */
typedef struct fdy_cuda_rope_table {
  double inv[FDY_CUDA_ROPE_MAX_PAIRS];
} fdy_cuda_rope_table;
/* Rows of x per block of the tensor-core MATMUL_Q4 kernel (several rows of
 * x); its grid has ceil(rows / FDY_CUDA_GEMM_ROWS) blocks in y, at most
 * 65535. */
#define FDY_CUDA_GEMM_ROWS  128
#define FDY_CUDA_MAX_GRID_Y 65535u

/* The table of the rope of op (a ROPE or ROPE_ATTENTION op of at most
 * FDY_CUDA_ROPE_MAX_PAIRS pairs), zero past its pairs. */
fdy_cuda_rope_table fdy_cuda_rope_table_of(const fdy_op *op);

/* Whether the kernels run op (not NULL): it passes fdy_op_check, every
 * dimension is below 2^31 (the checksum's byte count aside), and the
 * launch fits the device (shared memory, grid limits, rope pairs). */
bool fdy_cuda_op_supported(const fdy_cuda_ctx *ctx, const fdy_op *op);

/* A supported op whose views resolved to device addresses: in[i] is
 * op->inputs[i], outputs[j] op->outputs[j], out the first output. */
typedef struct fdy_cuda_op_args {
  const fdy_op *op;
  void *in[FDY_OP_MAX_INPUTS];
  void *out;
  void *workspace; /* fdy_cuda_op_workspace_bytes of scratch, or NULL */
  void *outputs[FDY_OP_MAX_OUTPUTS];
  int sm_count;   /* sizes persistent grids (results do not depend on it) */
  int max_blocks; /* the checksum grid for large inputs */
  /* the stream's words (the checksum's sums; counters below are its
   * op_counters) */
  fdy_cuda_checksum_words *words;
  /* FDY_CUDA_OP_COUNTERS counters of the stream's words, zero between
   * launches on the stream (struct fdy_cuda_checksum_words) */
  unsigned int *counters;
  /* launch as a programmatic dependent launch (fdy_launch in
   * cuda_device.h): the op's kernels follow fdy_grid_wait's rules */
  bool dependent;
} fdy_cuda_op_args;

/* Dynamic shared memory bytes a launch of op needs (0 when none). */
uint64_t fdy_cuda_op_shared_bytes(const fdy_op *op);
uint64_t fdy_cuda_matmul_q4_shared_bytes(const fdy_op *op);
uint64_t fdy_cuda_matmul_q4_mma_shared_bytes(const fdy_op *op);
uint64_t fdy_cuda_attention_shared_bytes(const fdy_op *op);
/* Device scratch bytes a launch of a supported op needs in op->workspace
 * (0 when none; from the op's shapes only): the partial results of the
 * one-row (decode) ATTENTION and ROPE_ATTENTION and of ARGMAX over rows
 * split between blocks; MATMUL_Q4 and the fused matmul kinds with several
 * rows of x keep x (normed where the kind says) in F16 there, and partial
 * sums when they split the inputs. */
uint64_t fdy_cuda_op_workspace_bytes(const fdy_op *op);
uint64_t fdy_cuda_attention_workspace_bytes(const fdy_op *op);
uint64_t fdy_cuda_argmax_workspace_bytes(const fdy_op *op);
uint64_t fdy_cuda_matmul_q4_mma_workspace_bytes(const fdy_op *op);
/* Whether the grid of an ATTENTION or ROPE_ATTENTION launch fits CUDA's
 * limits (and, for ROPE_ATTENTION, whether its rope has at most
 * FDY_CUDA_ROPE_MAX_PAIRS pairs). */
bool fdy_cuda_attention_grid_fits(const fdy_op *op);

/* Loads every op kernel (so device memory in use does not change at a
 * first launch) and lets those with dynamic shared memory use up to
 * smem_optin bytes. Called once by backend create. */
cudaError_t fdy_cuda_ops_prepare(uint64_t smem_optin);

/* Lets kernel use as much dynamic shared memory as the opt-in limit leaves
 * beside its static shared arrays (cudaFuncSetAttribute refuses a dynamic
 * limit that, with the static bytes, exceeds the opt-in). */
static inline cudaError_t fdy_cuda_allow_dynamic_shared(const void *kernel,
                                                        uint64_t smem_optin) {
  struct cudaFuncAttributes attributes;
  cudaError_t rc = cudaFuncGetAttributes(&attributes, kernel);
  if (rc == cudaSuccess) {
    rc = cudaFuncSetAttribute(kernel,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)(smem_optin - attributes.sharedSizeBytes));
  }
  return rc;
}
cudaError_t fdy_cuda_matmul_q4_prepare(uint64_t smem_optin);
cudaError_t fdy_cuda_matmul_q4_mma_prepare(uint64_t smem_optin);
cudaError_t fdy_cuda_attention_prepare(uint64_t smem_optin);

/* Enqueues the kernels of the op on stream; returns the launch error
 * (cudaGetLastError after the launches). Step values are read by the
 * kernels, never here. */
cudaError_t fdy_cuda_op_enqueue(const fdy_cuda_op_args *a, cudaStream_t stream);
cudaError_t fdy_cuda_matmul_q4_enqueue(const fdy_cuda_op_args *a,
                                       cudaStream_t stream);
/* MATMUL_Q4, NORM_MATMUL_Q4, NORM_SWIGLU_Q4 and MATMUL_ADD_Q4 with
 * several rows of x on the tensor cores (matmul_q4_mma.cu). */
cudaError_t fdy_cuda_matmul_q4_mma_enqueue(const fdy_cuda_op_args *a,
                                           cudaStream_t stream);
/* Its block shapes, for cuda_kernel_bench: how many there are, the name of
 * shape c (NULL past the last), whether shape c runs op (NORM_SWIGLU_Q4
 * runs on the shapes whose warps hold n-tiles in pairs), the one an op
 * gets (chosen from the op's shapes alone among those measured that run
 * it), and the workspace bytes and the launches of op with shape c (c
 * below fdy_cuda_matmul_q4_mma_shapes(), a shape that runs op;
 * a->workspace holds fdy_cuda_matmul_q4_mma_shape_workspace_bytes). Every
 * shape gives the same sums in the same order wherever the splits of the
 * inputs are equal. */
unsigned int fdy_cuda_matmul_q4_mma_shapes(void);
const char *fdy_cuda_matmul_q4_mma_shape_name(unsigned int c);
bool fdy_cuda_matmul_q4_mma_shape_runs(const fdy_op *op, unsigned int c);
unsigned int fdy_cuda_matmul_q4_mma_shape_of(const fdy_op *op);
uint64_t fdy_cuda_matmul_q4_mma_shape_workspace_bytes(const fdy_op *op,
                                                      unsigned int c);
cudaError_t fdy_cuda_matmul_q4_mma_enqueue_shape(const fdy_cuda_op_args *a,
                                                 unsigned int c,
                                                 cudaStream_t stream);
/* NORM_MATMUL_Q4, NORM_SWIGLU_Q4 and MATMUL_ADD_Q4: the GEMV for one row,
 * the tensor-core kernel (matmul_q4_mma.cu) for several. */
cudaError_t fdy_cuda_fused_q4_enqueue(const fdy_cuda_op_args *a,
                                      cudaStream_t stream);
cudaError_t fdy_cuda_attention_enqueue(const fdy_cuda_op_args *a,
                                       cudaStream_t stream);
/* EMBED_Q8, EMBED_DENSE, MATMUL_Q8 and MATMUL_DENSE (linear.cu): loading
 * their kernels, and enqueueing an op on stream (the launch's error;
 * a->dependent: a programmatic dependent launch). They need no workspace
 * or dynamic shared memory; the matmul's grid has a block row per row of
 * x (at most FDY_CUDA_MAX_GRID_Y). */
cudaError_t fdy_cuda_linear_prepare(void);
cudaError_t fdy_cuda_linear_enqueue(const fdy_cuda_op_args *a,
                                    cudaStream_t stream);

/* ATTENTION of several rows (attention_prefill.cu), after its append: the
 * dynamic shared memory bytes of its launch, whether its grid fits CUDA's
 * limits, loading its kernels (dynamic shared memory up to smem_optin),
 * and enqueueing the flash-attention kernel on stream (the launch's
 * error; a->dependent: a programmatic dependent launch). */
uint64_t fdy_cuda_attention_prefill_shared_bytes(const fdy_op *op);
bool fdy_cuda_attention_prefill_grid_fits(const fdy_op *op);
cudaError_t fdy_cuda_attention_prefill_prepare(uint64_t smem_optin);
cudaError_t fdy_cuda_attention_prefill_enqueue(const fdy_cuda_op_args *a,
                                               cudaStream_t stream);

/* ROPE_ATTENTION of several rows (attention_batch.cu: each row at its own
 * position and sequence, rows of one sequence at distinct positions
 * allowed; an append kernel, then the attention kernel): the dynamic
 * shared memory bytes of its launches, whether their grids fit CUDA's
 * limits, loading its kernels (dynamic shared memory up to smem_optin),
 * and enqueueing them on stream (the first launch error; a->dependent:
 * programmatic dependent launches). Needs no workspace. */
uint64_t fdy_cuda_attention_batch_shared_bytes(const fdy_op *op);
bool fdy_cuda_attention_batch_grid_fits(const fdy_op *op);
cudaError_t fdy_cuda_attention_batch_prepare(uint64_t smem_optin);
cudaError_t fdy_cuda_attention_batch_enqueue(const fdy_cuda_op_args *a,
                                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
