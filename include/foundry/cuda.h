/* The CUDA backend: slots are cudaMalloc allocations, one CUDA stream per
 * runtime stream, CUDA events for completion and timestamps, and the
 * synthetic.checksum kernel. Host payloads are either page-locked in place
 * (host_register, done once by the caller in untimed setup) or staged through
 * a small ring of pinned buffers filled by host threads.
 *
 * Built only when CUDA is enabled (FOUNDRY_HAVE_CUDA); without it
 * fdy_cuda_backend_create returns FDY_ERR_UNSUPPORTED and
 * fdy_cuda_device_count returns 0. */
#ifndef FOUNDRY_CUDA_H
#define FOUNDRY_CUDA_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fdy_cuda_host_mode {
  FDY_CUDA_HOST_REGISTERED = 0, /* copies straight from registered memory */
  FDY_CUDA_HOST_STAGED,         /* copies through pinned staging buffers */
} fdy_cuda_host_mode;

const char *fdy_cuda_host_mode_name(fdy_cuda_host_mode mode);

typedef struct fdy_cuda_options {
  int device; /* CUDA device ordinal */
  fdy_cuda_host_mode host_mode;
  uint64_t staging_bytes;   /* each staging buffer; 0 = 16 MiB */
  uint32_t staging_buffers; /* ring size; 0 = 4 */
  uint32_t compute_passes;  /* checksum kernel reads its slot K times; 0=1 */
  uint64_t fail_alloc_at;   /* tests: 1-based buffer_alloc call to fail */
  uint64_t fail_copy_at;    /* tests: 1-based copy_to_device call to fail */
  uint64_t fail_launch_at;  /* tests: 1-based launch call to fail */
  /* tests: 1-based copy_to_device / launch call that fails after its DMA or
   * kernel was queued (as if recording its end event failed), so the
   * submitted work must be drained before its memory is reused */
  uint64_t fail_copy_submitted_at;
  uint64_t fail_launch_submitted_at;
} fdy_cuda_options;

/* Number of usable CUDA devices; 0 when none or CUDA is not built. */
int fdy_cuda_device_count(void);

/* options may be NULL (defaults: device 0, registered). */
fdy_status fdy_cuda_backend_create(const fdy_cuda_options *options,
                                   fdy_backend **out, fdy_error *err);

/* Runtime and driver versions as CUDA encodes them (e.g. 13000), 0 when
 * unknown. */
void fdy_cuda_versions(int *runtime_version, int *driver_version);

/* Bytes of device memory in use on the backend's device right now
 * (total - free from cudaMemGetInfo). FDY_ERR_INVALID_ARGUMENT when out is
 * NULL or b is not a CUDA backend (*out is 0 then). */
fdy_status fdy_cuda_memory_in_use(fdy_backend *b, uint64_t *out,
                                  fdy_error *err);

/* Measurement helpers for the benchmark's ceilings, outside any plan. Each
 * runs one untimed warm-up, then `repeats` timed runs, and sets
 * *bytes_per_second from the median time (0 on failure).
 * Host-to-device: plain cudaMemcpyAsync copies of `bytes` from src (which
 * the caller registered or not, matching the mode measured). Device-to-
 * device: copies of `bytes` between two device buffers, counting bytes read
 * plus written. Checksum: the checksum kernel alone over a resident buffer
 * of `bytes`, bytes read per second. FDY_ERR_INVALID_ARGUMENT when b is not
 * a CUDA backend, bytes or repeats is 0, or src or bytes_per_second is
 * NULL. */
fdy_status fdy_cuda_measure_h2d(fdy_backend *b, const void *src, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err);
fdy_status fdy_cuda_measure_d2d(fdy_backend *b, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err);
fdy_status fdy_cuda_measure_checksum(fdy_backend *b, uint64_t bytes,
                                     uint32_t repeats, double *bytes_per_second,
                                     fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
