/* Internal interface of the CUDA backend, shared by its host-side C files
 * (cuda_backend.c, cuda_staging.c, cuda_measure.c) and the kernel file
 * (checksum_kernel.cu). Not installed; nothing outside src/backends/cuda
 * includes it. */
#ifndef FOUNDRY_CUDA_INTERNAL_H
#define FOUNDRY_CUDA_INTERNAL_H

#include "foundry/cuda.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors (cuda_backend.c) ----------------------------------------------
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

/* ---- backend state the measurement helpers use (cuda_backend.c) -----------
 */

typedef struct fdy_cuda_result_dev fdy_cuda_result_dev;
typedef struct fdy_cuda_result_host fdy_cuda_result_host;

typedef struct fdy_cuda_ctx {
  int device;
  int max_blocks;        /* checksum grid for large inputs */
  uint64_t l2_bytes;     /* L2 cache size */
  cudaStream_t internal; /* calibration, warm-up, measurements */
  /* result words of slot 0, reserved for internal synchronous launches */
  fdy_cuda_result_dev *internal_dev;
  fdy_cuda_result_host *internal_host;
} fdy_cuda_ctx;

/* *out = the state of b when b is a CUDA backend, and makes its device
 * current. Fails with FDY_ERR_INVALID_ARGUMENT naming op when b is NULL or
 * not a CUDA backend, FDY_ERR_BACKEND when cudaSetDevice fails; *out is NULL
 * then. */
fdy_status fdy_cuda_ctx_of(fdy_backend *b, const char *op, fdy_cuda_ctx **out,
                           fdy_error *err);

/* ---- staging ring (cuda_staging.c) ----------------------------------------
 */

typedef struct fdy_cuda_staging fdy_cuda_staging;

/* `buffers` page-locked buffers of `buffer_bytes` each and `parts` - 1 fill
 * threads (the caller fills one part of every chunk itself). */
fdy_status fdy_cuda_staging_create(uint64_t buffer_bytes, uint32_t buffers,
                                   uint32_t parts, fdy_cuda_staging **out,
                                   fdy_error *err);
/* Waits for every DMA out of the ring, then frees it; NULL is a no-op. */
void fdy_cuda_staging_destroy(fdy_cuda_staging *s);
/* Copies bytes from pageable src to device dst on stream, chunk by chunk:
 * waits until the next staging buffer's previous DMA completed (its event),
 * fills it on the fill threads, queues its DMA and records its event. Returns
 * once the last chunk is queued, so filling chunk i + 1 overlaps the DMA of
 * chunk i. *submitted is set when any DMA was queued (also on failure). */
fdy_status fdy_cuda_staging_copy(fdy_cuda_staging *s, cudaStream_t stream,
                                 void *dst, const void *src, uint64_t bytes,
                                 bool *submitted, fdy_error *err);

/* ---- checksum kernel (checksum_kernel.cu) ---------------------------------
 */

/* Device words of one checksum launch. Zero before the launch; the kernel's
 * last block reads them, writes the host words and zeroes them again, so a
 * slot is ready for its next launch as soon as the previous one completed. */
struct fdy_cuda_result_dev {
  unsigned long long sum;  /* sum of term_i mod 2^64 over the first pass */
  unsigned long long diff; /* non-zero when a later pass disagreed */
  unsigned int blocks_done;
  unsigned int pad[3];
};

/* Host words one launch delivers (page-locked, mapped). */
struct fdy_cuda_result_host {
  uint64_t sum;  /* the unfinished sum; fdy_checksum_finish(sum, bytes) */
  uint64_t diff; /* non-zero when passes disagreed */
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

/* Enqueues the checksum kernel over data[0, bytes) on stream: `passes` reads
 * (>= 1), `max_blocks` the grid size for large inputs; dev and host are the
 * launch's result words (host: a device-accessible mapped pointer). Returns
 * the launch error (cudaGetLastError after the launch). */
cudaError_t fdy_cuda_checksum_enqueue(const void *data, uint64_t bytes,
                                      uint32_t passes, int max_blocks,
                                      fdy_cuda_result_dev *dev,
                                      fdy_cuda_result_host *host,
                                      cudaStream_t stream);

/* Fills bytes at data with non-zero pseudo-random bytes derived from seed. */
cudaError_t fdy_cuda_fill_enqueue(void *data, uint64_t bytes, uint64_t seed,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
