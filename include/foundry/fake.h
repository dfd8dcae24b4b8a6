/* The fake backend: a test double of the backend contract, shipped in the
 * library. It records every call in an inspectable, numbered log, counts
 * what was created, submitted and waited for, and catches contract breaches
 * by its caller.
 *
 * Completion. Submitted work (copies, launches) stays pending until the
 * host observes it: host_wait on an event completes the event's current
 * recording, that is every item submitted to the recording's stream before
 * it, and, through stream_wait, whatever those items were ordered after on
 * other streams. drain completes everything. Work on a stream completes in
 * submission order. An event's time (event_time) is the host clock when its
 * recording was observed complete.
 *
 * Data. With store_data the backend holds real buffer bytes (new buffers are
 * filled with 0xA5 so bytes never written show up): a copy moves its bytes
 * when it completes, in both directions, so a source changed or freed
 * before then is caught; a launch of FDY_OP_CHECKSUM writes
 * fdy_checksum(data) + prev * FDY_CHAIN_PRIME (mod 2^64; prev 0 when the op
 * has no prev input) into its output view when it completes. Launches of
 * other kinds write nothing. Without store_data no memory of buffer size is
 * allocated and no launch writes anything.
 *
 * Contract checks. A launch runs fdy_op_check, and every view must lie
 * inside a live buffer at an offset that is a multiple of caps.alignment
 * (the workspace too, at least workspace_bytes of it when that option is
 * set). Using a released, destroyed or NULL handle, a double release, waiting
 * on an event never recorded, an out-of-range copy, an op that fails
 * fdy_op_check, and destroying a stream with pending work or an event whose
 * recording is pending are violations: each is counted, and fails the call
 * with FDY_ERR_INVALID_ARGUMENT where the call returns a status. Handles are
 * kept as tombstones until the backend is destroyed, so a misuse never
 * touches freed memory. A launch of a kind in unsupported_kinds fails with
 * FDY_ERR_UNSUPPORTED (not a violation).
 *
 * Reference rule: a buffer released while pending work uses it keeps its
 * memory until that work completed (a deferred free, counted).
 *
 * Graphs (options.graphs; backend.h): between graph_begin and graph_end,
 * copies, launches, event records and stream waits are checked as usual,
 * logged (fdy_fake_call.recorded) and appended to the recording instead of
 * being submitted; they count in recorded_calls, not in the submission
 * counters. graph_launch first orders the graph after every earlier item of
 * its streams, submits the recorded calls again in order (counted as
 * copies, launches, ... like direct calls, but logged as the one
 * graph_launch), then orders every stream after all of it, as a CUDA graph
 * launch with its streams joined would. Like the CUDA backend, which would
 * have to stage it, a copy whose host memory is not inside one host
 * registration cannot be recorded: FDY_ERR_UNSUPPORTED, and graph_end
 * fails with it. Violations: a graph_begin while recording (or with no,
 * NULL, dead or repeated streams), a recorded call on a stream outside the
 * recording, a recorded stream_wait on an event not recorded earlier in
 * the same recording, host_wait, event_time or drain while recording,
 * graph_end without a recording, launching or destroying a dead graph, and
 * a replay whose buffers were released.
 *
 * The fake never fails on its own (except for its device memory limit,
 * host memory exhaustion, and a store_data copy from or to caller memory
 * that cannot be read or written, such as a truncated file mapping: every
 * host_wait returns FDY_ERR_IO until drain reports and clears it, as
 * backend.h says): faults come from the fault wrapper (foundry/fault.h).
 * Not thread-safe, like every backend (backend.h). */
#ifndef FOUNDRY_FAKE_H
#define FOUNDRY_FAKE_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The bit of one kind in fdy_fake_options.unsupported_kinds. */
#define FDY_FAKE_KIND_BIT(kind) ((uint32_t)1 << (uint32_t)(kind))

typedef struct fdy_fake_options {
  fdy_device_caps caps;       /* reported capabilities; zero total_memory means
                                 16 GiB, zero max_allocation means total_memory,
                                 zero alignment means 256, empty name "fake" */
  bool store_data;            /* hold real bytes (small tests only) */
  uint32_t unsupported_kinds; /* FDY_FAKE_KIND_BIT of each fdy_op_kind that
                                 supports_op refuses and launch fails */
  uint64_t workspace_bytes;   /* scratch bytes workspace_bytes asks for
                                 every op; 0 = none */
  bool graphs;                /* offer graph_begin, graph_end, graph_launch
                                 and graph_destroy (above) */
} fdy_fake_options;

/* One logged call. Handle ids are unique across all handle kinds. */
typedef struct fdy_fake_call {
  uint64_t number;   /* 1-based */
  const char *op;    /* entry name: "buffer_alloc", "launch", ... (static) */
  fdy_status status; /* what it returned (FDY_ERR_UNSUPPORTED for a refusal
                        of supports_op; FDY_ERR_INVALID_ARGUMENT for a
                        violation in an entry without a status) */
  uint64_t bytes;    /* size argument: allocated, registered or copied bytes;
                        a launch's input view bytes; else 0 */
  int64_t handle;    /* id of the handle created (buffer_alloc, host_register,
                        stream_create, event_create), or of the one it is
                        about: the buffer released or copied to or from, the
                        host registration, the stream destroyed, the event
                        destroyed, recorded, waited for or timed; a launch's
                        first output buffer; -1 when none */
  int64_t stream;    /* id of the stream of a stream-ordered call, or -1 */
  int op_kind;       /* fdy_op_kind of launch, supports_op and
                        workspace_bytes, or -1 */
  bool recorded;     /* made between graph_begin and graph_end */
  uint64_t rows;     /* a launch's first output's leading dimension, else 0 */
  uint64_t variant_rows; /* a launch's op's variant_rows (ops.h), else 0 */
} fdy_fake_call;

typedef struct fdy_fake_stats {
  uint64_t calls;        /* calls logged */
  uint64_t live_buffers; /* buffers whose memory is still held */
  uint64_t live_events;  /* events created and not destroyed */
  uint64_t live_streams; /* streams created and not destroyed */
  uint64_t live_hosts;   /* host registrations not unregistered */
  uint64_t pending_work; /* copies and launches submitted, not completed */
  uint64_t buffer_bytes; /* bytes of live buffers */
  uint64_t peak_buffer_bytes;
  uint64_t deferred_frees; /* released while in use, freed on completion */
  uint64_t violations;     /* contract breaches by the caller (fake.h) */
  /* successful calls, so that tests can assert e.g. "no allocation after
   * create" or "one launch per planned op" */
  uint64_t buffer_allocs;
  uint64_t host_registrations;
  uint64_t streams_created;
  uint64_t events_created;
  uint64_t event_records;
  uint64_t copies_to_device;
  uint64_t bytes_to_device;
  uint64_t copies_to_host;
  uint64_t bytes_to_host;
  uint64_t launches;
  uint64_t launches_by_kind[FDY_OP_KIND_COUNT];
  uint64_t stream_waits;
  uint64_t host_waits;
  uint64_t drains;
  /* graphs (options.graphs) */
  uint64_t live_graphs;     /* made by graph_end and not destroyed */
  uint64_t graphs_recorded; /* successful graph_end calls */
  uint64_t recorded_calls;  /* calls appended to a recording */
  uint64_t graph_launches;  /* successful graph_launch calls */
} fdy_fake_stats;

/* Creates a fake backend; options may be NULL (defaults). Errors:
 * FDY_ERR_INVALID_ARGUMENT for a NULL out, an alignment that is not a power
 * of two, or unsupported_kinds naming a kind >= FDY_OP_KIND_COUNT;
 * FDY_ERR_OUT_OF_MEMORY. Freed by fdy_backend_destroy, which completes
 * pending work and frees whatever the caller did not release. */
fdy_status fdy_fake_backend_create(const fdy_fake_options *options,
                                   fdy_backend **out, fdy_error *err);

/* Inspection. b must be a fake backend (assert). The log entry pointer is
 * valid until the next call into the backend; index is 0-based (NULL past
 * the end). */
size_t fdy_fake_call_count(const fdy_backend *b);
const fdy_fake_call *fdy_fake_call_at(const fdy_backend *b, size_t index);
fdy_fake_stats fdy_fake_get_stats(const fdy_backend *b);
/* Counts logged calls of one entry name (op NULL: 0). */
size_t fdy_fake_count_calls(const fdy_backend *b, const char *op);

#ifdef __cplusplus
}
#endif
#endif
