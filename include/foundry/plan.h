/* Foundry execution plans: a program over a graph (setup, named steps that
 * run many times, teardown) as commands over memory classes, with static
 * validation, strict JSON encoding and the planner.
 *
 * Memory classes: a plan declares buffers, each of one class:
 * - resident: weights uploaded by setup, live until teardown;
 * - slot: streamed weights, refilled by steps;
 * - arena: activations at offsets the planner assigned from lifetimes;
 * - state: tensors that persist across runs (the KV cache);
 * - io: the step inputs (filled from the host by one copy per run).
 * Resident and slot bytes count against the weight budget; arena, state and
 * io bytes are reported separately. Every activation, state and input
 * tensor has a placement (buffer, offset), offsets multiples of
 * FDY_TENSOR_ALIGNMENT.
 *
 * Sections: section 0 is "setup", the last is "teardown", the ones between
 * are steps with unique names (e.g. "prefill", "decode"). A run of a step
 * starts with every event unsignalled (events are scoped to one run of a
 * section) and every setup transfer complete.
 *
 * Execution model the validator proves plans against:
 * - Streams are FIFO queues: work on stream s starts after all earlier work
 *   on s completed. Copies and launches run on a stream and signal an event
 *   when their work completes.
 * - `wait` with host = true blocks the host until the event completed; with
 *   host = false, later work on `stream` starts after the event completed.
 * - Completion is transitive (one vector clock per stream, per event and for
 *   the host). An event is "ordered before" work on stream t when it was
 *   signalled on t earlier, or t's clock covers it (stream waits,
 *   transitively), or the host observed it before the work was issued.
 *
 * Static checks come first: sections (at least setup and teardown, names
 * unique: SECTION_COMMAND, command_index = the command count or the
 * section's first command) and placements (PLACEMENT, or
 * PLACEMENT_HAZARD for two state or two input tensors sharing bytes;
 * command_index -1, err->name the tensor, ids[0] the tensor).
 * Rules of the commands (the first violation in command order is
 * reported, with command_index, the section's name in err->name and the
 * ids involved: ids[0] the buffer, op or tensor of the command, ids[1] the
 * other party, e.g. the event of the unordered work):
 * - allocate (setup only, else SECTION_COMMAND): buffer not live
 *   (DOUBLE_ALLOCATION), resident + slot live bytes within budget_bytes
 *   (BUDGET_EXCEEDED, checked arithmetic).
 * - release (teardown only): buffer live (SLOT_NOT_ALLOCATED) and idle.
 * - prefetch: weight is a weight (NOT_A_WEIGHT); buffer live
 *   (SLOT_NOT_ALLOCATED) and of class resident in setup, slot in steps
 *   (SECTION_COMMAND); offset aligned and weight inside the buffer
 *   (SLOT_TOO_SMALL); every earlier transfer into and launch reading the
 *   overlapping bytes in this run is ordered before the copy's stream
 *   (SLOT_BUSY: stream order suffices, no host wait needed).
 * - copy_input (steps): an input tensor; copy_output (steps): a placed
 *   tensor (else PLACEMENT) whose latest write in this run is ordered
 *   before (PRODUCER_NOT_AWAITED; activations and inputs must have been
 *   written in this run). Copies and launches touching a buffer that is
 *   not allocated: SLOT_NOT_ALLOCATED.
 * - wait: the event was signalled earlier in this section
 *   (EVENT_NOT_SIGNALLED).
 * - launch (steps): a step launches ops in increasing graph order, each at
 *   most once per run (OP_ORDER; steps may launch different subsets, e.g.
 *   the prefill ops and the decode ops of one graph); bindings are exactly the
 *   weights the op reads directly or through views, each once
 *   (BINDING_MISMATCH), bound to the buffer and offset where the latest
 *   transfer of that weight put it (in this run for slots, in setup for
 *   resident buffers) and that transfer ordered before the launch
 *   (TRANSFER_NOT_AWAITED); every activation it reads was produced in this
 *   run by a launch ordered before it (PRODUCER_NOT_AWAITED); the bytes it
 *   writes are not read or written by another op or copy of this run that
 *   is not ordered before it, nor by its own operands, and a tensor it
 *   reads was not overwritten since its latest write (PLACEMENT_HAZARD);
 *   an input it reads was copied in this run, ordered before it
 *   (PRODUCER_NOT_AWAITED).
 * - every copy and launch signals an event not yet signalled in this
 *   section (EVENT_REUSED).
 * - end of every section: every event observed by the host
 *   (UNSYNCHRONIZED_END); end of the plan: no live buffer (UNRELEASED_END)
 *   and every op of the graph launched by some step (INCOMPLETE).
 * - placements: inside their buffer, aligned, of class arena
 *   (activations), state (state tensors) or io (inputs); two tensors whose
 *   bytes overlap are never live at once in a step (PLACEMENT_HAZARD is
 *   the dynamic check above).
 * - any id outside its table: UNKNOWN_ID.
 * Because each step starts from the same state (setup done, nothing
 * pending), validating setup, each step once and teardown proves every
 * sequence setup, step*, teardown.
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
#define FDY_PLAN_VERSION 2
#define FDY_MAX_BINDINGS 8
/* Table limits fdy_plan_create (and so the JSON decoder) enforces, so that a
 * hostile document cannot make validation allocate without bound. */
#define FDY_PLAN_MAX_STREAMS  64
#define FDY_PLAN_MAX_BUFFERS  ((uint32_t)1 << 16)
#define FDY_PLAN_MAX_EVENTS   ((uint32_t)1 << 24)
#define FDY_PLAN_MAX_SECTIONS 64
#define FDY_PLAN_NAME_MAX     32

typedef enum fdy_buffer_class {
  FDY_BUFFER_RESIDENT = 0,
  FDY_BUFFER_SLOT,
  FDY_BUFFER_ARENA,
  FDY_BUFFER_STATE,
  FDY_BUFFER_IO,
  FDY_BUFFER_CLASS_COUNT
} fdy_buffer_class;

/* "resident", "slot", "arena", "state", "io". */
const char *fdy_buffer_class_name(fdy_buffer_class cls);

typedef enum fdy_command_kind {
  FDY_CMD_ALLOCATE = 0,
  FDY_CMD_PREFETCH,    /* a weight's bytes into a buffer */
  FDY_CMD_COPY_INPUT,  /* a step input from the host into its placement */
  FDY_CMD_COPY_OUTPUT, /* a tensor from its placement to the host */
  FDY_CMD_WAIT,
  FDY_CMD_LAUNCH,
  FDY_CMD_RELEASE,
  FDY_CMD_KIND_COUNT
} fdy_command_kind;

/* "allocate", "prefetch", "copy_input", "copy_output", "wait", "launch",
 * "release". */
const char *fdy_command_kind_name(fdy_command_kind kind);

/* Where an op finds a weight: the buffer and the byte offset of its first
 * byte. A view of the weight is at offset + the view's offset. */
typedef struct fdy_binding {
  fdy_tensor_id weight;
  fdy_buffer_id buffer;
  uint64_t offset;
} fdy_binding;

/* One plan command; only the member for `kind` is meaningful. */
typedef struct fdy_command {
  fdy_command_kind kind;
  union {
    struct {
      fdy_buffer_id buffer;
    } allocate;
    struct {
      fdy_tensor_id weight;
      fdy_buffer_id buffer;
      uint64_t offset;
      fdy_stream_id stream;
      fdy_event_id signal;
    } prefetch;
    struct {
      fdy_tensor_id tensor;
      fdy_stream_id stream;
      fdy_event_id signal;
    } copy; /* copy_input and copy_output */
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
      fdy_buffer_id buffer;
    } release;
  } u;
} fdy_command;

/* The plan stream a command is issued on (prefetches, copies, launches,
 * stream waits), or -1 for host waits and the setup/teardown kinds. */
int32_t fdy_command_stream(const fdy_command *command);

/* A buffer of the plan. */
typedef struct fdy_plan_buffer {
  fdy_buffer_class cls;
  uint64_t bytes;
} fdy_plan_buffer;

/* Where a tensor lives; buffer.v == FDY_NO_BUFFER when it has no placement
 * (weights and weight views live where the bindings put them). */
#define FDY_NO_BUFFER UINT32_MAX
typedef struct fdy_placement {
  fdy_buffer_id buffer;
  uint64_t offset;
} fdy_placement;

/* A section: commands [first, first + count). */
typedef struct fdy_section {
  char name[FDY_PLAN_NAME_MAX];
  size_t first, count;
} fdy_section;

typedef struct fdy_plan fdy_plan;

/* Field-wise equality of the members that `kind` makes meaningful (bindings
 * compared in order, up to binding_count). */
bool fdy_command_equal(const fdy_command *a, const fdy_command *b);

/* Creates an empty plan over a deep copy of `graph`: a weight budget of
 * budget_bytes, stream_count streams (1..FDY_PLAN_MAX_STREAMS), the
 * buffer table (copied; up to FDY_PLAN_MAX_BUFFERS, every bytes > 0, a
 * known class), event_count event ids, every tensor unplaced, and one
 * section "setup" that holds every command appended until the next
 * fdy_plan_begin_section. Out-of-range counts or buffers:
 * FDY_ERR_INVALID_ARGUMENT. */
fdy_status fdy_plan_create(const fdy_graph *graph, uint64_t budget_bytes,
                           uint32_t stream_count,
                           const fdy_plan_buffer *buffers,
                           uint32_t buffer_count, uint32_t event_count,
                           fdy_plan **out, fdy_error *err);
void fdy_plan_destroy(fdy_plan *plan);

/* Places tensor `tensor` at buffer/offset (replacing an earlier placement).
 * Ids are checked by validation, not here; an unknown tensor id is
 * FDY_ERR_NOT_FOUND. */
fdy_status fdy_plan_place(fdy_plan *plan, fdy_tensor_id tensor,
                          fdy_placement placement, fdy_error *err);
/* Starts a new section named name (1..FDY_PLAN_NAME_MAX-1 bytes of
 * [a-z0-9_], else FDY_ERR_INVALID_ARGUMENT; more than FDY_PLAN_MAX_SECTIONS
 * FDY_ERR_INVALID_ARGUMENT). Later appends go to it. The last section of a
 * plan must be named "teardown" and the others unique (validation). */
fdy_status fdy_plan_begin_section(fdy_plan *plan, const char *name,
                                  fdy_error *err);

/* Appends a command (copied; members of other kinds are zeroed) to the
 * current section. Appending does not validate ids or rules; only an
 * unknown kind or binding_count above FDY_MAX_BINDINGS is refused
 * (FDY_ERR_INVALID_ARGUMENT). */
fdy_status fdy_plan_append(fdy_plan *plan, const fdy_command *command,
                           fdy_error *err);
/* Removes command `index`, shifting later ones down and shrinking its
 * section (used by tools and tests that derive broken plans).
 * FDY_ERR_NOT_FOUND when out of range. */
fdy_status fdy_plan_remove(fdy_plan *plan, size_t index, fdy_error *err);

const fdy_graph *fdy_plan_graph(const fdy_plan *plan);
uint64_t fdy_plan_budget(const fdy_plan *plan);
uint32_t fdy_plan_stream_count(const fdy_plan *plan);
uint32_t fdy_plan_buffer_count(const fdy_plan *plan);
/* The buffer table entry; NULL out of range. */
const fdy_plan_buffer *fdy_plan_buffer_at(const fdy_plan *plan, uint32_t id);
uint32_t fdy_plan_event_count(const fdy_plan *plan);
/* The tensor's placement ({FDY_NO_BUFFER, 0} when unplaced or out of
 * range). */
fdy_placement fdy_plan_placement(const fdy_plan *plan, fdy_tensor_id tensor);
size_t fdy_plan_section_count(const fdy_plan *plan);
/* Pointer into the plan, valid until the next mutation; NULL out of
 * range. */
const fdy_section *fdy_plan_section(const fdy_plan *plan, size_t index);
/* Index of the section named name, or -1. */
int64_t fdy_plan_find_section(const fdy_plan *plan, const char *name);
size_t fdy_plan_command_count(const fdy_plan *plan);
/* Pointer into the plan, valid until the next mutation; NULL out of range. */
const fdy_command *fdy_plan_command(const fdy_plan *plan, size_t index);

/* Summary facts established by a successful validation. */
typedef struct fdy_plan_summary {
  size_t commands;
  size_t ops;
  uint32_t buffers;
  uint64_t class_bytes[FDY_BUFFER_CLASS_COUNT]; /* allocated per class */
  uint64_t peak_weight_bytes;    /* highest live resident + slot bytes */
  uint64_t setup_transfer_bytes; /* weight bytes uploaded by setup */
  uint64_t step_transfer_bytes;  /* weight bytes one run of the step with
                                    the most transfers copies */
  uint32_t streams;              /* distinct streams that run or wait */
} fdy_plan_summary;

/* Static validation (see the rules above). No side effects. summary may be
 * NULL. The plan's graph is checked first (fdy_graph_validate, its error
 * kind unchanged). Errors at the end of the plan carry command_index = the
 * command count. */
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
/* Strict decode: the format is checked first, then the version (any
 * other than FDY_PLAN_VERSION is FDY_ERR_UNSUPPORTED, name "version",
 * expected = FDY_PLAN_VERSION, actual = the version found); unknown fields,
 * wrong types, negative or out-of-range integers and unknown kinds are
 * FDY_ERR_SCHEMA with name = the JSON path (e.g.
 * "sections[1].commands[3].buffer") and command_index set where it
 * applies; syntax errors, a NUL byte included, are FDY_ERR_PARSE with
 * line/column. Graph mutations keep their own error kinds. The decoded
 * graph's weights have no extents. Decoding does not validate the plan. */
fdy_status fdy_plan_from_json(const char *text, size_t length, fdy_plan **out,
                              fdy_error *err);
/* Reads and decodes a regular file (a FIFO, directory or device is
 * refused at once); FDY_ERR_IO / FDY_ERR_NOT_FOUND with name = path. */
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

/* One step to plan: the ops it launches (increasing graph order) and the
 * tensors it copies back to the host at the end of every run. */
typedef struct fdy_plan_step {
  const char *name;
  const fdy_op_id *ops;
  size_t op_count;
  const fdy_tensor_id *outputs;
  size_t output_count;
} fdy_plan_step;

typedef struct fdy_planner_options {
  uint64_t weight_budget; /* device bytes for resident weights and slots */
  uint32_t buffers;       /* slots for streamed weights, >= 1 */
  uint64_t alignment;     /* buffer offsets and sizes; a power of two >=
                             FDY_TENSOR_ALIGNMENT, 0 = FDY_TENSOR_ALIGNMENT */
} fdy_planner_options;

/* The planner: one choice between resident and streamed per weight.
 * - The residency order: the weights the steps read, by decreasing
 *   residency priority (fdy_graph_set_residency_priority; 0 by default),
 * *   then in order of first use (a total order: plans are deterministic). When
 * all of them fit the budget they are all resident (one resident buffer,
 *   uploaded by setup, each weight at an aligned offset). Otherwise the
 *   longest prefix of the order that fits the budget together with
 *   N = min(buffers, weights left) slots of the largest aligned weight left
 *   stays resident, then each later weight, in order, that still fits
 *   beside them and those N slots (a small head after the layers, say); the
 *   rest streams through N = min(buffers, weights streamed) slots sized to
 *   the largest STREAMED weight (a large weight kept resident never sizes a
 *   slot).
 * - Each step: copy_input of every input its ops read (compute stream);
 *   streamed weights prefetched on the copy stream into slot k mod N in
 *   order of first use, the copy stream waiting for the launch that last
 *   read the slot (no host wait), the compute stream waiting for each
 *   transfer before the first launch that reads it; ops launched in order
 *   on the compute stream; copy_output of the outputs; one host wait.
 * - Activations are placed in one arena: offsets assigned per step from
 *   lifetimes (first-fit; a tensor's bytes are free again after its last
 *   reader in the step; outputs live to the end). State and inputs get
 *   consecutive aligned offsets in one state and one io buffer.
 * - Setup allocates every buffer and uploads the resident weights;
 *   teardown releases everything.
 * Errors: buffers == 0, a bad alignment, no steps, an op listed out of
 * order or twice, an output that is a weight (FDY_ERR_INVALID_ARGUMENT);
 * a budget that no prefix fits (FDY_ERR_BUDGET with expected = budget,
 * actual = the minimum: the smallest of every weight's bytes and, over the
 * prefixes, prefix bytes + N slots of the largest weight left; the message
 * says which split it is); overflow. A budget equal to the minimum plans.
 * The result passes fdy_plan_validate. */
fdy_status fdy_plan_build(const fdy_graph *graph, const fdy_plan_step *steps,
                          size_t step_count, const fdy_planner_options *options,
                          fdy_plan **out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
