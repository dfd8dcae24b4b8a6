/* The backend registry: the one place that makes a backend from its name
 * ("cpu", "cuda", "fake", "fault") and options, so that callers (the CLI,
 * the benchmark) reach backends through the contract of backend.h alone
 * and include no backend's own header. */
#ifndef FOUNDRY_REGISTRY_H
#define FOUNDRY_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "foundry/backend.h"
#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct fdy_fake_options;
struct fdy_fault_options;

/* Options of fdy_backend_create_named; each applies to the backends named
 * and is ignored by the others. Zero is every default. */
typedef struct fdy_backend_config {
  uint32_t threads;         /* cpu: pool threads; 0 = the online CPUs */
  uint64_t memory_bytes;    /* cpu: "device" memory; 0 = half of physical */
  int device;               /* cuda: device ordinal */
  fdy_host_mode host_mode;  /* cuda */
  uint64_t staging_bytes;   /* cuda: each staging buffer; 0 = the default */
  uint32_t staging_buffers; /* cuda: ring size; 0 = the default */
  bool serial_launch;       /* cuda: no programmatic dependent launches */
  const struct fdy_fake_options *fake;   /* fake: its options, or NULL */
  fdy_backend *inner;                    /* fault: the backend it wraps
                                            (borrowed; outlives it) */
  const struct fdy_fault_options *fault; /* fault: its options (required) */
} fdy_backend_config;

/* Creates the backend `name` with config (NULL: defaults), as its own
 * create function does (cpu.h, cuda.h, fake.h, fault.h: their errors).
 * An unknown name, or fault without inner or options, is
 * FDY_ERR_INVALID_ARGUMENT (name = the name). The caller owns *out
 * (fdy_backend_destroy); *out is NULL on failure. */
fdy_status fdy_backend_create_named(const char *name,
                                    const fdy_backend_config *config,
                                    fdy_backend **out, fdy_error *err);

/* Whether backend `name` can be created here: cpu, fake and fault always;
 * cuda when built with CUDA and a device is visible. */
bool fdy_backend_available(const char *name);

/* Pool threads of a backend that runs ops on host threads (cpu), 0 for the
 * others and NULL. */
uint32_t fdy_backend_threads(const fdy_backend *b);

/* The versions of the runtime under a backend, as it encodes them (cuda:
 * the CUDA runtime and driver, e.g. 13000); 0 when unknown or not built. */
void fdy_backend_runtime_versions(const char *name, int *runtime_version,
                                  int *driver_version);

/* "registered", "staged", "unknown". */
const char *fdy_host_mode_name(fdy_host_mode mode);

#ifdef __cplusplus
}
#endif
#endif
