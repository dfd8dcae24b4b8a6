/* The fault backend: a wrapper that forwards every entry of the backend
 * contract to an inner backend (any backend: fake, cpu, cuda) and fails one
 * chosen call, so that the failure path of every caller can be tested call
 * by call on real backends.
 *
 * Counting. Calls are counted over the entries that return an fdy_status
 * (capabilities, buffer_alloc, host_register, stream_create, event_create,
 * event_record, copy_to_device, copy_to_host, launch, stream_wait,
 * host_wait, event_time, graph_begin, graph_end, graph_launch, drain),
 * 1-based, in the order they reach the
 * wrapper. The other entries (supports_op, workspace_bytes, releases,
 * destroys) are forwarded and never fail; measure_ceiling is forwarded
 * uncounted. A test runs its scenario once to read the count
 * (fdy_fault_get_stats), then sweeps fail_at_call over 1 .. count.
 *
 * The injected failure is FDY_ERR_BACKEND with backend_op set to the entry's
 * name ("launch") and a message naming the call number and the mode:
 *   FDY_FAULT_BEFORE_SUBMIT: the inner backend is not called; outputs are
 *     NULL (handles) or zero (capabilities, event_time).
 *   FDY_FAULT_AFTER_SUBMIT: the inner entry runs first, so its work is
 *     submitted (a copy or launch is queued; host_wait and drain have waited
 *     when they return); then the call reports the failure. A handle the
 *     inner entry created (buffer, host registration, stream, event) is
 *     released again inside the wrapper and the caller gets NULL, as a
 *     failed create leaves its outputs. When the inner entry itself fails,
 *     its own error is returned.
 *   Graph entries keep backend.h's promise that nothing is recording after
 *   a failed graph_begin or any graph_end: an injected graph_begin failure
 *   after submit ends the inner recording again, and graph_end always
 *   calls the inner graph_end (in both modes) and, when injected, destroys
 *   the graph it made and returns NULL.
 * fail_drain makes every drain report FDY_ERR_BACKEND after the inner drain
 * completed, to test the reporting of cleanup failures.
 * device_fault_at_submission simulates a kernel or copy that faults on the
 * device (cuda.h, device faults): the copy or launch the inner backend
 * numbers so (its `submitted` count right after the call, backend.h) runs
 * normally, then every later host_wait, event_time and drain fails as CUDA
 * reports such a fault: FDY_ERR_BACKEND, backend_op = the faulting entry
 * ("launch", "copy_to_device", "copy_to_host"), name = the op kind of a
 * launch, ids[0] = ids[1] = the submission number. (Other entries keep
 * working: unlike CUDA, the simulation does not lose the backend.) It needs
 * an inner backend with `submitted` (cpu, cuda).
 *
 * Ownership: the wrapper borrows the inner backend, which must outlive it;
 * destroying the wrapper frees the wrapper only. Handles obtained through
 * the wrapper are the inner backend's own and stay valid on it. The
 * wrapper's name (fdy_backend_name) is the inner backend's, and an optional
 * entry is NULL exactly when the inner backend's is, so the wrapper is
 * transparent to its caller. Not thread-safe, like every backend. */
#ifndef FOUNDRY_FAULT_H
#define FOUNDRY_FAULT_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fdy_fault_mode {
  FDY_FAULT_BEFORE_SUBMIT = 0, /* fail without calling the inner backend */
  FDY_FAULT_AFTER_SUBMIT,      /* call the inner backend, then fail */
} fdy_fault_mode;

typedef struct fdy_fault_options {
  uint64_t fail_at_call; /* 1-based counted call to fail; 0 = never */
  fdy_fault_mode mode;
  bool fail_drain; /* every drain reports FDY_ERR_BACKEND after draining */
  /* 1-based submission of the inner backend to fault on the device (later
   * host waits, event times and drains report it); 0 = none */
  uint64_t device_fault_at_submission;
} fdy_fault_options;

typedef struct fdy_fault_stats {
  uint64_t calls;       /* counted calls that reached the wrapper so far */
  bool fired;           /* call fail_at_call happened and was failed */
  const char *fired_op; /* its entry name (static), or NULL */
} fdy_fault_stats;

/* Wraps inner (borrowed; not NULL). options may be NULL (never fail).
 * Errors: FDY_ERR_INVALID_ARGUMENT for a NULL inner or out, an unknown
 * mode, or a device fault over an inner backend without `submitted`;
 * FDY_ERR_OUT_OF_MEMORY. Freed by fdy_backend_destroy, which leaves
 * inner alone. */
fdy_status fdy_fault_backend_create(fdy_backend *inner,
                                    const fdy_fault_options *options,
                                    fdy_backend **out, fdy_error *err);

/* The counters of a fault backend (b must be one: assert). */
fdy_fault_stats fdy_fault_get_stats(const fdy_backend *b);

#ifdef __cplusplus
}
#endif
#endif
