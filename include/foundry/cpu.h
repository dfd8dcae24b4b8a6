/* The CPU backend: a real implementation of the backend contract on the host.
 * Worker threads are streams, events are objects with condition variables,
 * device slots are aligned host allocations counted against a memory budget,
 * transfers are memcpy, and it runs synthetic.checksum (fdy_checksum) with a
 * compute-passes knob. The whole system runs on any machine with it. */
#ifndef FOUNDRY_CPU_H
#define FOUNDRY_CPU_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_cpu_options {
  uint64_t memory_bytes;   /* "device" memory; 0 = half of physical memory */
  uint64_t alignment;      /* slot alignment; 0 = 64 */
  uint32_t compute_passes; /* synthetic.checksum reads its slot this many
                              times (result unchanged); 0 = 1 */
} fdy_cpu_options;

/* options may be NULL (defaults). */
fdy_status fdy_cpu_backend_create(const fdy_cpu_options *options,
                                  fdy_backend **out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
