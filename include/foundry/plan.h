/* Foundry execution plans: an ordered list of commands over a graph, with
 * static validation, strict JSON encoding and the streaming planner.
 *
 * Execution model the validator proves plans against:
 * - Streams are FIFO queues: work on stream s starts after all earlier work
 *   on s completed. Prefetch and launch run on a stream and signal an event
 *   when their work completes.
 * - `wait` with host = true blocks the host until the event completed; with
 *   host = false, later work on `stream` starts after the event completed.
 * - Completion is transitive: when an event signalled on stream s completes,
 *   every event signalled earlier on s and every event s waited for before it
 *   has completed too. (The validator tracks this with one vector clock per
 *   stream, per event and for the host.)
 * - An event is "ordered before" work on stream t when it was signalled on t
 *   earlier, or t's clock covers it (stream wait, transitively), or the host
 *   observed it before the work was issued.
 *
 * Rules (the validator reports the first violation in command order, with
 * command_index and the ids involved):
 * - allocate: slot not live (DOUBLE_ALLOCATION), bytes > 0 (ZERO_ALLOCATION),
 *   live bytes stay within budget_bytes (BUDGET_EXCEEDED, checked arithmetic).
 * - prefetch: weight is a weight tensor (NOT_A_WEIGHT), slot live
 *   (SLOT_NOT_ALLOCATED) and large enough (SLOT_TOO_SMALL), slot idle: every
 *   earlier transfer into it and every launch that read it were observed by
 *   the host (SLOT_BUSY); the signal event is new (EVENT_REUSED).
 * - wait: the event was signalled by an earlier command (EVENT_NOT_SIGNALLED).
 * - launch: op is the next op in graph order (OP_ORDER); bindings are exactly
 *   the weights the op reads, each once, each bound to a live slot whose
 *   latest transfer was of that weight (BINDING_MISMATCH); that transfer is
 *   ordered before the launch (TRANSFER_NOT_AWAITED); every activation the op
 *   reads was produced by a launch ordered before it (PRODUCER_NOT_AWAITED);
 *   signal event is new.
 * - release: slot live and idle (SLOT_NOT_ALLOCATED, SLOT_BUSY).
 * - end: every op launched (INCOMPLETE), every event observed by the host
 *   (UNSYNCHRONIZED_END), no live slot (UNRELEASED_END).
 * - any id outside its table: UNKNOWN_ID.
 *
 * Not thread-safe; a finished plan may be shared read-only. */
#ifndef FOUNDRY_PLAN_H
#define FOUNDRY_PLAN_H

#include "foundry/core.h"
#include "foundry/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FDY_PLAN_FORMAT  "foundry.plan"
#define FDY_PLAN_VERSION 1
#define FDY_MAX_BINDINGS 8
/* Table limits fdy_plan_create (and so the JSON decoder) enforces, so that a
 * hostile document cannot make validation allocate without bound. */
#define FDY_PLAN_MAX_STREAMS 64
#define FDY_PLAN_MAX_SLOTS   ((uint32_t)1 << 16)
#define FDY_PLAN_MAX_EVENTS  ((uint32_t)1 << 24)

typedef enum fdy_command_kind {
  FDY_CMD_ALLOCATE = 0,
  FDY_CMD_PREFETCH,
  FDY_CMD_WAIT,
  FDY_CMD_LAUNCH,
  FDY_CMD_RELEASE,
} fdy_command_kind;

/* "allocate", "prefetch", "wait", "launch", "release". */
const char *fdy_command_kind_name(fdy_command_kind kind);

typedef struct fdy_binding {
  fdy_tensor_id weight;
  fdy_slot_id slot;
} fdy_binding;

/* One plan command; only the member for `kind` is meaningful. */
typedef struct fdy_command {
  fdy_command_kind kind;
  union {
    struct {
      fdy_slot_id slot;
      uint64_t bytes;
    } allocate;
    struct {
      fdy_tensor_id weight;
      fdy_slot_id slot;
      fdy_stream_id stream;
      fdy_event_id signal;
    } prefetch;
    struct {
      fdy_event_id event;
      bool host;            /* true: the host waits */
      fdy_stream_id stream; /* host == false: this stream waits */
    } wait;
    struct {
      fdy_op_id op;
      fdy_stream_id stream;
      fdy_event_id signal;
      uint32_t binding_count;
      fdy_binding bindings[FDY_MAX_BINDINGS];
    } launch;
    struct {
      fdy_slot_id slot;
    } release;
  } u;
} fdy_command;

typedef struct fdy_plan fdy_plan;

/* Field-wise equality of the members that `kind` makes meaningful (bindings
 * compared in order, up to binding_count). */
bool fdy_command_equal(const fdy_command *a, const fdy_command *b);

/* Creates an empty plan over a deep copy of `graph` with a device budget of
 * budget_bytes, stream_count streams (ids 0..stream_count-1, at least 1),
 * slot_count slot ids and event_count event ids (ids index these tables).
 * Counts above the FDY_PLAN_MAX_* limits are FDY_ERR_INVALID_ARGUMENT. */
fdy_status fdy_plan_create(const fdy_graph *graph, uint64_t budget_bytes,
                           uint32_t stream_count, uint32_t slot_count,
                           uint32_t event_count, fdy_plan **out,
                           fdy_error *err);
void fdy_plan_destroy(fdy_plan *plan);

/* Appends a command (copied; members of other kinds are zeroed). Appending
 * does not validate ids or rules; only an unknown kind or binding_count above
 * FDY_MAX_BINDINGS is refused (FDY_ERR_INVALID_ARGUMENT). */
fdy_status fdy_plan_append(fdy_plan *plan, const fdy_command *command,
                           fdy_error *err);
/* Removes command `index`, shifting later ones down (used by tools and tests
 * that derive broken plans). FDY_ERR_NOT_FOUND when out of range. */
fdy_status fdy_plan_remove(fdy_plan *plan, size_t index, fdy_error *err);

const fdy_graph *fdy_plan_graph(const fdy_plan *plan);
uint64_t fdy_plan_budget(const fdy_plan *plan);
uint32_t fdy_plan_stream_count(const fdy_plan *plan);
uint32_t fdy_plan_slot_count(const fdy_plan *plan);
uint32_t fdy_plan_event_count(const fdy_plan *plan);
size_t fdy_plan_command_count(const fdy_plan *plan);
/* Pointer into the plan, valid until the next mutation; NULL out of range. */
const fdy_command *fdy_plan_command(const fdy_plan *plan, size_t index);

/* Summary facts established by a successful validation. */
typedef struct fdy_plan_summary {
  size_t commands;
  size_t ops;
  uint32_t slots;          /* distinct slots allocated */
  uint64_t peak_bytes;     /* highest live slot bytes */
  uint64_t transfer_bytes; /* sum of prefetched weight bytes */
  uint32_t streams;        /* distinct streams that run or wait on work */
} fdy_plan_summary;

/* Static validation (see the rules above). No side effects. summary may be
 * NULL. The plan's graph is checked first (fdy_graph_validate, its error kind
 * unchanged). Errors at the end of the plan carry command_index = the command
 * count. */
fdy_status fdy_plan_validate(const fdy_plan *plan, fdy_plan_summary *summary,
                             fdy_error *err);

/* FDY_OK when `graph` has the structure of the plan's graph (see
 * fdy_graph_same_structure); else FDY_ERR_INVALID_ARGUMENT with name =
 * "graph", expected = the plan graph's fingerprint, actual = graph's. */
fdy_status fdy_plan_check_graph(const fdy_plan *plan, const fdy_graph *graph,
                                fdy_error *err);

/* ---- JSON
 * --------------------------------------------------------------------- */

/* Encodes the plan (with its graph's structure, not its extents) as a JSON
 * document; *out is a malloc'd NUL-terminated string the caller frees. */
fdy_status fdy_plan_to_json(const fdy_plan *plan, char **out, fdy_error *err);
/* Strict decode: format/version checked; unknown fields, wrong types,
 * negative or out-of-range integers and unknown command kinds are
 * FDY_ERR_SCHEMA with name = the JSON path (e.g. "commands[3].slot") and
 * command_index set where it applies; syntax errors are FDY_ERR_PARSE with
 * line/column. The decoded graph's weights have no extents. Decoding does not
 * validate the plan. */
fdy_status fdy_plan_from_json(const char *text, size_t length, fdy_plan **out,
                              fdy_error *err);
/* Reads and decodes a file; FDY_ERR_IO / FDY_ERR_NOT_FOUND with name = path. */
fdy_status fdy_plan_load(const char *path, fdy_plan **out, fdy_error *err);
/* Writes the JSON to path through foundry/new_file.h: never over an existing
 * file (FDY_ERR_EXISTS), never a partial one, FDY_ERR_NOT_FOUND when the
 * directory is missing, name = path; mode 0666 & ~umask. */
fdy_status fdy_plan_save(const fdy_plan *plan, const char *path,
                         fdy_error *err);

/* ---- planner
 * ------------------------------------------------------------------- */

/* Streams the planner uses. */
#define FDY_STREAM_COPY    ((fdy_stream_id){0})
#define FDY_STREAM_COMPUTE ((fdy_stream_id){1})

/* N-buffered streaming plan: ops run in graph order on the compute stream;
 * each op's weights (at most one weight per op) are prefetched on the copy
 * stream into a ring of min(buffers, ops-with-weights) slots of equal size
 * (largest weight rounded up to `alignment`). Before launching op i the
 * compute stream waits for its transfer; after launching op i the host waits
 * for the launch that last read the slot to be refilled and prefetches the
 * next weight, so with N >= 2 the transfer of later weights overlaps op i.
 * Errors: buffers == 0 or an alignment that is not a non-zero power of two
 * (INVALID_ARGUMENT, even for an op-less graph), an op reading more than one
 * weight (UNSUPPORTED), slots that do not fit budget_bytes (FDY_ERR_BUDGET
 * with expected = budget, actual = needed), overflow. An op-less graph gives
 * an empty plan. The result passes fdy_plan_validate. */
fdy_status fdy_plan_streaming(const fdy_graph *graph, uint64_t budget_bytes,
                              uint32_t buffers, uint64_t alignment,
                              fdy_plan **out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
