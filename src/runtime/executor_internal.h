/* Private interface of the executor's files (src/runtime): the
 * executor's layout and the helpers one file gives the others. Not
 * installed; nothing outside src/runtime includes it. */
#ifndef FOUNDRY_RUNTIME_EXECUTOR_INTERNAL_H
#define FOUNDRY_RUNTIME_EXECUTOR_INTERNAL_H

#include "foundry/runtime.h"

#define STAGING_ALIGNMENT 4096

typedef struct ex_mapping {
  const char *path; /* owned by the graph */
  void *base;
  uint64_t size;
  fdy_backend_host *host; /* its registration, or NULL */
  bool step_use;          /* a step copies from it (an unpacked weight) */
} ex_mapping;

/* One host-to-device copy of a prefetch: one per non-padding extent, or
 * one from the packed image of a streamed weight. */
typedef struct ex_copy {
  const void *src;
  uint64_t offset; /* from the weight's first byte */
  uint64_t bytes;
} ex_copy;

/* A plan command resolved to what its backend calls need. */
typedef struct ex_command {
  size_t first_copy, copy_count; /* prefetch */
  void *host;                    /* copy_input / copy_output staging */
  uint64_t offset, bytes;        /* copy_input / copy_output placement */
  fdy_op *op;                    /* launch */
  /* the backend's submission numbers (backend.h, submitted) of its copies
   * or launch when it last ran command by command: (first, last]; equal
   * when it submitted nothing */
  uint64_t submitted_before, submitted_after;
} ex_command;

/* A stretch of a step's device commands between host waits, recorded as
 * one graph. */
typedef struct ex_segment {
  size_t first, count;      /* plan commands first .. first + count */
  size_t host_wait;         /* the first host wait after it, or SIZE_MAX */
  fdy_backend_graph *graph; /* NULL until recorded */
} ex_segment;

/* Batch-size buckets of a step: 1, 2, 4, ... below its rows, then its
 * rows (at most 64 powers of two below a 64-bit count, and the rows). */
#define EX_MAX_BUCKETS 65

/* How a step runs (by section index). A step whose launches read a
 * declared step input (fdy_graph_set_step_rows) of R >= 2 rows has, when
 * graphs are recorded, one set of segments per batch-size bucket: bucket
 * j's at first_segment + j * segment_count, recorded with the step's
 * launches narrowed to bucket_rows[j] rows (narrowed: the buckets below R,
 * each `launches` ops in command order) and its copies of row-indexed
 * tensors to those rows' bytes (narrowed_bytes: per bucket, per command of
 * the section, 0 where the copy keeps its bytes). The last bucket is R,
 * the commands as resolved. A step without buckets has bucket_count 1. */
typedef struct ex_step {
  fdy_step_mode mode;
  fdy_error why; /* FDY_STEP_FALLBACK: the refusal */
  size_t first_segment, segment_count;
  size_t bucket_count;
  uint64_t bucket_rows[EX_MAX_BUCKETS]; /* ascending; 0 without buckets */
  uint32_t step_input;                  /* the declared step input */
  size_t launches;                      /* launches of the section */
  fdy_op *narrowed;
  uint64_t *narrowed_bytes;
} ex_step;

/* Host staging of one input or output tensor. */
typedef struct ex_staging {
  void *data;
  uint64_t bytes;
  bool input, output;
} ex_staging;

struct fdy_executor {
  const fdy_plan *plan;
  const fdy_graph *graph; /* the graph whose extents are copied */
  fdy_backend *b;
  const fdy_backend_ops *ops;
  bool collect;
  bool registers_host;
  bool packs_streamed;
  bool failed;
  bool finished;
  uint32_t stream_count, buffer_count, event_count;
  size_t command_count, tensor_count;
  fdy_backend_stream **streams;
  fdy_backend_buffer **buffers;   /* by plan buffer id */
  fdy_backend_buffer **workspace; /* by stream, NULL when not needed */
  uint64_t *workspace_bytes;      /* by stream */
  fdy_backend_event **events;     /* by plan event id */
  fdy_backend_event **starts;     /* timings: by command */
  ex_mapping *maps;
  size_t map_count;
  fdy_backend_host **hosts; /* registrations */
  size_t host_count, host_cap;
  ex_staging *staging; /* by tensor id */
  void **packed;       /* by tensor id: a streamed weight's packed image */
  ex_copy *copies;
  size_t copy_count;
  ex_command *cmds;
  fdy_op *launch_ops;
  fdy_command_timing *timings;
  size_t timing_count;
  bool graphs;          /* the backend records steps (runtime.h) */
  ex_step *steps;       /* by section index, when graphs */
  ex_segment *segments; /* of every recorded step */
  size_t segment_count;
  fdy_backend_event *graph_done; /* recorded after a graph, host-waited */
  fdy_executor_stats stats;
};

/* Turns a failed backend call into the executor's error: kind as the
 * backend reported it, plus the command and the entry. */
fdy_status ex_backend_failed(fdy_error *e, fdy_status status,
                             int64_t command_index, const char *op);

/* The bucket a run of step s launches: the smallest whose rows hold the
 * count its step input's staging holds now (the last for a count above
 * every bucket; the first for a count of 0 or less). */
size_t ex_bucket_of(const fdy_executor *x, const ex_step *step);

uint32_t ex_command_signal(const fdy_command *c);

void ex_destroy_graphs(fdy_executor *x, size_t first, size_t count);

fdy_status ex_oom(fdy_error *e);

/* The op of graph op `id` with dtypes and shapes (no buffers yet). */
fdy_status ex_op_of(const fdy_graph *graph, uint32_t id, fdy_op *out,
                    fdy_op_info *info, fdy_error *e);

/* Checks in order of cost: arguments, the backend table, the graph, plan
 * validation, weight bindings (none of these call the backend), then the
 * backend's queries (supports_op, capabilities). */
fdy_status ex_preflight(const fdy_plan *plan, const fdy_graph *graph,
                        fdy_backend *b, const fdy_graph **effective,
                        fdy_plan_summary *summary, fdy_error *e);

/* Page-aligned host staging for every tensor a step copies in or out. */
fdy_status ex_prepare_staging(fdy_executor *x, fdy_error *e);

/* Maps every file a prefetched weight reads (once per path), packs the
 * streamed weights that take more than one copy (one copy per prefetch from
 * their packed image), registers the mappings unpacked copies read and the
 * host extents, and resolves every prefetch into copies. */
fdy_status ex_prepare_weights(fdy_executor *x, fdy_error *e);

fdy_status ex_record(fdy_executor *x, size_t index, uint32_t stream,
                     uint32_t event, fdy_error *e);

/* Records every step as graphs (runtime.h). A step the backend refuses to
 * record (FDY_ERR_UNSUPPORTED) falls back to commands, with the refusal
 * kept for fdy_executor_step_mode; any other failure is returned. */
fdy_status ex_record_steps(fdy_executor *x, fdy_error *e);

/* After setup: unmaps (and unregisters) the files no step reads any more
 * (those only resident uploads and packing read), so that runs never touch
 * them. */
void ex_release_setup_mappings(fdy_executor *x);

/* A copy or launch that failed on the device after its call returned,
 * reported by a later call `reporter` of command `index` (a host wait or
 * an event time): the backend names the faulting entry and its submission
 * number (backend.h, submitted: ids[0] == ids[1]). When a command of this
 * executor submitted it, the error is attributed to that command
 * (command_index, and the message names both); else to `index`, as any
 * failed call. */
fdy_status ex_reported_failure(const fdy_executor *x, fdy_error *e,
                               fdy_status status, size_t index,
                               const char *reporter);

/* Every launch of the steps as an op of views, and each stream's workspace
 * sized for the largest op it runs (that of a bucket included). Needs the
 * buffers (after setup). */
fdy_status ex_resolve_launches(fdy_executor *x, fdy_error *e);

fdy_status ex_run_command(fdy_executor *x, size_t index, fdy_error *e);

/* A run of a recorded step: its graphs, each followed by one host wait
 * where the plan waits after it. */
fdy_status ex_run_graphs(fdy_executor *x, const ex_step *step, fdy_error *e);

/* Runs the commands of section s; timings when collecting. */
fdy_status ex_run_section(fdy_executor *x, size_t s, fdy_error *e);

/* Exchanges the resolved launch ops and copy bytes of step s with those of
 * its bucket j (below its rows): called once to record bucket j, again to
 * restore. */
void ex_swap_bucket(fdy_executor *x, size_t s, size_t j);

fdy_status ex_tensor_info(const fdy_graph *graph, uint32_t id,
                          fdy_tensor_info *out, fdy_error *e);

#endif
