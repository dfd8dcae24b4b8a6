/* The CPU backend: a real implementation of the backend contract on the host
 * and the reference implementation of every op kind (include/foundry/ops.h).
 * Streams are worker threads, events are re-recordable objects with
 * condition variables, device buffers are aligned host allocations counted
 * against a memory budget, transfers are memcpy, and ops run multi-threaded
 * on one thread pool with results that do not depend on its size. The
 * whole system runs on any machine with it. */
#ifndef FOUNDRY_CPU_H
#define FOUNDRY_CPU_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most threads of the CPU backend's pool. */
#define FDY_CPU_MAX_THREADS 256u

typedef struct fdy_cpu_options {
  uint64_t memory_bytes; /* "device" memory; 0 = half of physical memory */
  uint64_t alignment;    /* buffer alignment, a power of two; 0 = 64 */
  uint32_t threads;      /* pool threads that run an op (the running
                            stream's own thread included); 0 = the online
                            CPUs, at most FDY_CPU_MAX_THREADS */
} fdy_cpu_options;

/* Creates a CPU backend; options may be NULL (defaults). Errors:
 * FDY_ERR_INVALID_ARGUMENT for an alignment that is not a power of two
 * (actual = alignment) or threads above FDY_CPU_MAX_THREADS (expected = the
 * limit, actual = threads); FDY_ERR_BACKEND when a thread or pthread
 * primitive cannot be created; FDY_ERR_OUT_OF_MEMORY. The caller owns
 * *out (fdy_backend_destroy); *out is NULL on failure. */
fdy_status fdy_cpu_backend_create(const fdy_cpu_options *options,
                                  fdy_backend **out, fdy_error *err);

/* Launch refusals of the CPU backend (nothing is queued), beyond the
 * errors of fdy_op_check: FDY_ERR_UNSUPPORTED when supports_op is false (a
 * dimension of 2^31 or more, a tensor of 2^40 elements or more; name = the
 * kind); FDY_ERR_INVALID_ARGUMENT with ids[0] = the view (inputs, then
 * outputs, then the workspace as input_count + output_count) for a view
 * without a buffer, reaching past its buffer (expected = buffer bytes,
 * actual = end) or not at a multiple of the alignment (expected =
 * alignment, actual = offset), and for a workspace smaller than
 * workspace_bytes (expected = needed, actual = given). workspace_bytes is
 * UINT64_MAX for an op the backend does not support. */

/* Threads of a CPU backend's pool (caller included); 0 when backend is NULL
 * or not a CPU backend. Workspace sizes (workspace_bytes) grow with it. */
uint32_t fdy_cpu_backend_threads(const fdy_backend *backend);

#ifdef __cplusplus
}
#endif
#endif
