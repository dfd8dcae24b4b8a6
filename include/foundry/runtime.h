/* Foundry runtime: interprets a validated plan against a backend.
 *
 * fdy_runtime_execute first runs a preflight with no backend side effects:
 * plan validation, graph structure equal to the plan's, every op kind
 * supported, every weight bound (host extents present, file extents mapped)
 * with exactly its declared size, budget not above device memory, each slot
 * within the device's maximum allocation. Then it creates one backend stream
 * per plan stream and issues the commands in order, mapping plan events to
 * backend events.
 *
 * On any failure it drains the backend, releases everything it acquired
 * (events, buffers, streams, file mappings) and reports in *err: kind, the
 * failing command_index, backend_op (e.g. "copy_to_device"), and, when the
 * cleanup itself failed, cleanup_kind/cleanup_message. Nothing leaks on any
 * path. Not thread-safe with respect to one backend. */
#ifndef FOUNDRY_RUNTIME_H
#define FOUNDRY_RUNTIME_H

#include "foundry/backend.h"
#include "foundry/core.h"
#include "foundry/graph.h"
#include "foundry/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Timing of one command, filled when fdy_run_options.collect_timings. */
typedef struct fdy_command_timing {
  uint32_t command_index;
  fdy_command_kind kind;
  int32_t stream;           /* plan stream id, -1 for host-side commands */
  int64_t host_begin_ns;    /* fdy_now_ns() before issuing */
  int64_t host_end_ns;      /* fdy_now_ns() after issuing (host waits: after
                               the wait returned) */
  int64_t device_start_ns;  /* from backend event_times, or -1 */
  int64_t device_end_ns;    /* from backend event_times, or -1 */
  uint64_t live_slot_bytes; /* live slot bytes after this command */
} fdy_command_timing;

typedef struct fdy_run_options {
  bool collect_timings;
} fdy_run_options;

/* Outcome of a successful run. Owned by the caller: fdy_run_result_free. */
typedef struct fdy_run_result {
  size_t op_count;
  uint64_t *op_results; /* op_count words, each op's 64-bit result */
  size_t timing_count;
  fdy_command_timing *timings; /* one per command when collected, else NULL */
  uint64_t peak_slot_bytes;    /* highest live slot bytes during the run */
  int64_t begin_ns, end_ns;    /* fdy_now_ns() at entry and after drain */
} fdy_run_result;

/* Frees the arrays in result and zeroes it; NULL is a no-op. */
void fdy_run_result_free(fdy_run_result *result);

/* Preflight only (see above): no backend side effects. graph may be NULL to
 * use the plan's own graph (which must then have bound weights). */
fdy_status fdy_runtime_preflight(const fdy_plan *plan, const fdy_graph *graph,
                                 fdy_backend *backend, fdy_error *err);

/* Preflight, then execute. On success *result is filled (zeroed first); on
 * failure *result is left zeroed. options may be NULL (defaults). */
fdy_status fdy_runtime_execute(const fdy_plan *plan, const fdy_graph *graph,
                               fdy_backend *backend,
                               const fdy_run_options *options,
                               fdy_run_result *result, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
