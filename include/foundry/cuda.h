/* The CUDA backend: buffers are cudaMalloc allocations, each backend stream
 * is a non-blocking CUDA stream, each backend event one CUDA event created
 * once and recorded many times, and ops run as kernels: every kind of
 * ops.h, float32 arithmetic throughout, deterministic (a result depends on
 * the operands' values and shapes only). supports_op refuses a dimension of
 * 2^31 or more (the checksum's byte count aside), a one-row MATMUL_Q4 whose
 * input row does not fit a block's shared memory (about 50,000 features on
 * an H200), an ATTENTION whose tiles do not (a head_dim above about 440 for
 * prefill; for decode, one row, a cache above about 1 million positions at
 * head_dim 128), and rope with head_dim above 512. A one-row ATTENTION
 * needs a workspace (workspace_bytes: its chunks' partial results, about
 * heads x (head_dim + 2) x 4 bytes per 16 to 8,192 cache positions); a
 * launch without it fails with FDY_ERR_INVALID_ARGUMENT (ids[0] = the
 * operand count, name "workspace"). Row counts and positions are read from the
 * step tensor by the kernels when they run, so a recorded launch serves any
 * step. Launches read and write device memory only; nothing is written to
 * host memory except by copy_to_host. A launch refuses an op that fails
 * fdy_op_check (its error, backend_op "launch"), FDY_ERR_UNSUPPORTED (name
 * = the kind) beyond the limits above, and FDY_ERR_INVALID_ARGUMENT for a
 * view without a buffer, outside it or not at a multiple of 256 bytes
 * (ids[0] = the operand, expected = the buffer's bytes, actual = the
 * view's end).
 *
 * Host memory: copies to and from memory registered with host_register are
 * direct DMA (registered mode). Memory that is not registered, and all host
 * memory in staged mode, goes through a small ring of pinned staging
 * buffers: filled by host threads on the way in, emptied by a host function
 * queued on the stream on the way out. host_register page-locks the range
 * in place with cudaHostRegister; when that fails it tries again read-only
 * (cudaHostRegisterReadOnly), so read-only memory such as a MAP_SHARED
 * PROT_READ file mapping can be registered; copies into a read-only
 * registration are staged. A private (MAP_PRIVATE) read-only file mapping
 * is refused with FDY_ERR_UNSUPPORTED instead: cudaHostRegisterReadOnly
 * never returns on one (driver 580 on Linux 6.18); copies from it work
 * unregistered (staged). Map weight files MAP_SHARED to pin them.
 *
 * A file truncated while mapped: staged copies read the caller's memory
 * on host threads with fdy_host_copy, so copy_to_device fails at once with
 * FDY_ERR_IO. Direct DMA from a registration's pinned pages does not go
 * through the CPU, so it cannot raise SIGBUS: the truncation drops the
 * pages from the file but not the pins, and the device reads the bytes the
 * file held when it was registered (or, should a driver refuse, the copy
 * fails with FDY_ERR_IO); never other bytes (tests/cuda/test_cuda.c,
 * docs/reliability.md). A range whose file shrank before registration is
 * not pinned past its end.
 *
 * Releases: a buffer released while submitted work may still use it is
 * freed once every stream passed the point of the release (an event fence
 * observed by a later release, host_wait or drain); drain frees every
 * such buffer.
 *
 * Device faults: a kernel that faults on the device (an illegal address, a
 * device assert, ...) leaves the CUDA context unusable ("sticky" errors,
 * which every later CUDA call repeats). The entry that meets one returns
 * FDY_ERR_BACKEND attributed to the earliest copy or launch whose
 * completion the host had not seen (host_wait, event_time, drain):
 * backend_op = its entry ("launch", "copy_to_device", "copy_to_host"),
 * name = its op kind for a launch, ids[0] .. ids[1] = the range of
 * submission numbers (copies and launches counted from 1 since creation)
 * that ends at the earliest recording that did not complete; with an event
 * recorded after every command, ids[0] == ids[1] is the faulting command.
 * The backend is lost from then on: every entry fails at once with
 * FDY_ERR_BACKEND repeating that error (backend_op = the entry called) and
 * makes no CUDA call; releases and destroy free host memory only. The
 * process must restart to use the device again (CUDA's rule; other
 * backends of the process on the same device are spoilt too).
 *
 * event_time: device time of the event's recording, aligned to fdy_now_ns
 * through a reference event recorded at creation (within a few
 * microseconds; cudaEventElapsedTime resolution is about 0.5 us).
 *
 * Built only when CUDA is enabled (FOUNDRY_HAVE_CUDA); without it
 * fdy_cuda_backend_create returns FDY_ERR_UNSUPPORTED and
 * fdy_cuda_device_count returns 0. Not thread-safe, like every backend. */
#ifndef FOUNDRY_CUDA_H
#define FOUNDRY_CUDA_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The host modes of backend.h: copies straight from registered memory, or
 * through pinned staging buffers. */
typedef fdy_host_mode fdy_cuda_host_mode;
#define FDY_CUDA_HOST_REGISTERED FDY_HOST_REGISTERED
#define FDY_CUDA_HOST_STAGED     FDY_HOST_STAGED

const char *fdy_cuda_host_mode_name(fdy_cuda_host_mode mode);

typedef struct fdy_cuda_options {
  int device; /* CUDA device ordinal */
  fdy_cuda_host_mode host_mode;
  uint64_t staging_bytes;   /* each staging buffer; 0 = 16 MiB */
  uint32_t staging_buffers; /* ring size; 0 = 4 */
  /* every kernel starts only after the previous one on its stream has
   * completed; false (the default): the kernels of one-row ops (a decode
   * step's) are programmatic dependent launches, which start while the
   * previous kernel finishes and wait for its results inside (same
   * results, shorter gaps between kernels) */
  bool serial_launch;
} fdy_cuda_options;

/* Number of usable CUDA devices; 0 when none or CUDA is not built. */
int fdy_cuda_device_count(void);

/* options may be NULL (defaults: device 0, registered). Errors:
 * FDY_ERR_UNSUPPORTED without a device, FDY_ERR_INVALID_ARGUMENT for a
 * device that does not exist or an unknown host mode, FDY_ERR_BACKEND
 * (backend_op "create") when CUDA fails. Freed by fdy_backend_destroy,
 * which drains and frees whatever the caller did not release. */
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
