/* Foundry runtime: the executor, which runs a validated plan on a backend.
 *
 * fdy_executor_create does the work of a plan's life once: a preflight with
 * no backend side effects (plan validation, the caller's graph equal to the
 * plan's in structure, every op supported, every prefetched weight bound to
 * host memory or file ranges of exactly its size, buffers within the
 * device's memory and largest allocation), then streams, events, buffers,
 * per-stream op workspaces, file mappings and host registrations, host
 * staging for step inputs and outputs, every launch's op resolved to tensor
 * views, and the plan's setup section (allocations and resident uploads).
 * fdy_executor_run then runs one step: it only issues backend calls and
 * allocates nothing. fdy_executor_destroy runs teardown and releases
 * everything.
 *
 * Graphs. When the backend records graphs (graph_begin and the rest in
 * backend.h) and neither collect_timings nor no_graphs is set, create cuts
 * every step at its host waits and records each stretch of device
 * commands as one graph; a run launches them. Batch-size buckets: a step
 * whose launches read a step input declared with fdy_graph_set_step_rows
 * (graph.h) for R >= 2 rows is recorded once per bucket b = 1, 2, 4, ...
 * below R, and R: in bucket b every row-indexed operand (graph.h) of its
 * launches has leading dimension b (the step input FDY_STEP_ELEMENTS(b)
 * elements), its copies of row-indexed tensors in and out move b rows, and
 * for b >= 2 each op's variant_rows is R (ops.h), so that a backend picks
 * the kernel variants of the full step and every row is computed bitwise
 * as in the full step; for b = 1 the ops are plain one-row ops (their
 * one-row kernels may round differently). A bucket whose narrowed ops
 * fail fdy_op_check or supports_op is left out (the next larger one
 * serves). A run of such a step reads the count from the step input's
 * staging (FDY_STEP_COUNT) and launches the smallest bucket of at least
 * that many rows (the last for a larger count), so its grids cover the
 * active rows, not R; output rows at or beyond the bucket are not copied
 * out (they keep the run's poison). The narrowed ops and copies are made
 * at create: runs allocate nothing. Without graphs every run issues the
 * step at its full rows, as before.
 *
 * On any failure (create or run) the executor drains the backend, releases
 * everything it acquired, and reports in *err: kind, the failing
 * command_index, backend_op (e.g. "copy_to_device"), and, when the cleanup
 * itself failed, cleanup_kind/cleanup_message. A copy from a mapped weight
 * file that was truncated while in use fails with FDY_ERR_IO (the backends
 * read host memory with fdy_host_copy, and so does packing), reported by
 * the host wait that observes it (or by create, while packing); the
 * executor then names the file that shrank (name, expected = bytes mapped,
 * actual = bytes now). A run that would copy from the registered mapping
 * of a file that already shrank fails so before it issues anything
 * (command_index -1). Mappings that no step reads (resident uploads and
 * packed weights only) are unmapped once setup is done, so runs never
 * read them. A failed executor refuses
 * further runs (FDY_ERR_INVALID_ARGUMENT) and must still be destroyed.
 * Nothing leaks on any path.
 *
 * Not thread-safe: one thread uses an executor (and its backend) at a
 * time. */
#ifndef FOUNDRY_RUNTIME_H
#define FOUNDRY_RUNTIME_H

#include "foundry/backend.h"
#include "foundry/core.h"
#include "foundry/graph.h"
#include "foundry/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_executor fdy_executor;

typedef struct fdy_executor_options {
  bool collect_timings; /* per-command timings of each run */
  /* Do not register host memory (weights' host extents and mappings, step
   * staging) with the backend: the caller registered it already, or wants
   * staged copies. */
  bool skip_host_registration;
  /* Issue every command of every run even when the backend can record and
   * replay steps (graphs, above). */
  bool no_graphs;
  /* Copy streamed weights extent by extent from the mapped files and host
   * extents at every prefetch instead of packing them (to measure the
   * difference). By default a streamed weight (one a step prefetches) of
   * more than one extent, such as a Llama layer unit of 23 tensors, is
   * packed once at create into an owned, page-aligned host buffer laid out
   * as its slot image (extents in order, padding zeroed), read from the
   * files with guarded copies and registered: a prefetch is then one copy
   * of the whole unit from page-locked memory, and runs never read the
   * files (a file truncated after create cannot fail a run). The cost is
   * host memory: the packed bytes (fdy_executor_stats.packed_bytes).
   * Single-extent weights are already one copy and are never packed. */
  bool skip_packing;
} fdy_executor_options;

/* How the runs of a step issue their work (fdy_executor_step_mode). */
typedef enum fdy_step_mode {
  FDY_STEP_COMMANDS = 0, /* command by command: the backend has no graph
                            entries, or collect_timings or no_graphs */
  FDY_STEP_GRAPHS,       /* recorded at create (per bucket, above),
                            replayed by every run */
  FDY_STEP_FALLBACK,     /* the backend refused to record it: command by
                            command */
} fdy_step_mode;

/* Timing of one command of the last run (fdy_executor_timings). */
typedef struct fdy_command_timing {
  uint32_t command_index;
  fdy_command_kind kind;
  int32_t stream;          /* plan stream id, -1 for host-side commands */
  int64_t host_begin_ns;   /* fdy_now_ns() before issuing */
  int64_t host_end_ns;     /* after issuing (host waits: after the wait) */
  int64_t device_start_ns; /* from backend event_time, or -1 */
  int64_t device_end_ns;   /* from backend event_time, or -1 */
} fdy_command_timing;

/* What create set up, and the graphs of the last run, for reports. */
typedef struct fdy_executor_stats {
  int64_t setup_ns;  /* create, preflight to setup done */
  int64_t upload_ns; /* the setup section alone */
  uint64_t class_bytes[FDY_BUFFER_CLASS_COUNT]; /* device bytes per class */
  uint64_t workspace_bytes;                     /* op workspaces, all streams */
  uint64_t registered_bytes; /* host memory registered with the backend */
  uint64_t staging_bytes;    /* host staging of step inputs and outputs */
  uint64_t mapped_bytes;     /* checkpoint files mapped by create */
  uint64_t packed_bytes;     /* host buffers of packed streamed weights
                                (skip_packing), page-aligned sizes */
  uint64_t setup_transfer_bytes;
  uint32_t graph_steps;             /* steps recorded as graphs */
  uint32_t graph_fallbacks;         /* steps the backend refused to record */
  uint32_t bucket_steps;            /* of graph_steps, those recorded per
                                       batch-size bucket (above) */
  uint64_t graphs;                  /* graphs recorded, all steps and
                                       buckets */
  uint64_t last_run_graph_launches; /* by the last run (1 per token for a
                                       decode step recorded whole) */
  uint64_t graph_launches;          /* by every run so far */
  uint64_t last_run_rows; /* the bucket's rows the last run's graphs were
                             recorded for; 0 when its step has no buckets
                             or it ran command by command */
} fdy_executor_stats;

/* Preflight only (see above): no backend side effects. graph may be NULL to
 * use the plan's own graph (which must then have bound weights). */
fdy_status fdy_executor_preflight(const fdy_plan *plan, const fdy_graph *graph,
                                  fdy_backend *backend, fdy_error *err);

/* Creates an executor (see above). The plan, the graph (NULL = the plan's)
 * and the backend must outlive it; host extents must stay valid and
 * unchanged. options may be NULL. On failure *out is NULL and nothing is
 * left acquired. */
fdy_status fdy_executor_create(const fdy_plan *plan, const fdy_graph *graph,
                               fdy_backend *backend,
                               const fdy_executor_options *options,
                               fdy_executor **out, fdy_error *err);

/* Runs teardown (releases every buffer), drains, frees everything. NULL is
 * a no-op. Cleanup errors are ignored here; a caller that needs them calls
 * fdy_executor_finish first. */
void fdy_executor_destroy(fdy_executor *executor);

/* Runs teardown and drains, reporting a failure; destroy afterwards. */
fdy_status fdy_executor_finish(fdy_executor *executor, fdy_error *err);

/* Host staging of input tensor `tensor`: write its bytes before a run that
 * copies it in. NULL (and *bytes 0) when the plan never copies it in. Valid
 * until destroy. */
void *fdy_executor_input(fdy_executor *executor, fdy_tensor_id tensor,
                         uint64_t *bytes);
/* Host copy of a tensor a step copies out, filled by the last run that
 * copied it (every output's bytes are set to 0xff before each run, so a
 * value a run did not copy out is never mistaken for a result). NULL (and
 * *bytes 0) when no step copies it out. */
const void *fdy_executor_output(const fdy_executor *executor,
                                fdy_tensor_id tensor, uint64_t *bytes);

/* Index of the section named name (a step), or -1. */
int64_t fdy_executor_step(const fdy_executor *executor, const char *name);

/* Runs section `step` (a step: neither setup nor teardown) once. */
fdy_status fdy_executor_run(fdy_executor *executor, size_t step,
                            fdy_error *err);

/* How runs of section `step` issue their work; FDY_STEP_COMMANDS for a
 * section that is not a step. For FDY_STEP_FALLBACK, *why (when not NULL)
 * receives the backend's refusal (kind FDY_ERR_UNSUPPORTED, backend_op,
 * command_index of the call it refused); otherwise it is cleared. */
fdy_step_mode fdy_executor_step_mode(const fdy_executor *executor, size_t step,
                                     fdy_error *why);

/* Timings of the last run's commands (collect_timings), else NULL. */
const fdy_command_timing *fdy_executor_timings(const fdy_executor *executor,
                                               size_t *count);
fdy_executor_stats fdy_executor_get_stats(const fdy_executor *executor);

#ifdef __cplusplus
}
#endif
#endif
