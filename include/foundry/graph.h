/* Foundry graph: an ordered list of typed ops (include/foundry/ops.h) that
 * read and write tensors.
 *
 * Tensors are weights (described as host memory or file ranges and never
 * loaded by the graph), weight views (a typed tensor at an offset inside a
 * weight), inputs (provided by the caller at every run), activations
 * (written by exactly one op) or state (persists across runs, e.g. the KV
 * cache; ops whose kind says so update it in place). A weight may be a
 * gather of several extents (for example every tensor of one Llama decoder
 * layer) so that one weight is one streamable unit: its bytes are the
 * concatenation of its extents, in order; padding extents keep the views
 * inside it aligned.
 *
 * Every mutation validates before it changes anything: a failed call leaves
 * the graph exactly as it was. Not thread-safe; a graph may be shared
 * read-only between threads once built. */
#ifndef FOUNDRY_GRAPH_H
#define FOUNDRY_GRAPH_H

#include "foundry/core.h"
#include "foundry/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_graph fdy_graph;

typedef enum fdy_tensor_role {
  FDY_TENSOR_WEIGHT = 0,  /* read-only bytes from host memory or a file */
  FDY_TENSOR_INPUT,       /* provided by the caller, no producer op */
  FDY_TENSOR_ACTIVATION,  /* produced by exactly one op */
  FDY_TENSOR_WEIGHT_VIEW, /* typed bytes inside a weight */
  FDY_TENSOR_STATE,       /* persists across runs; no producer */
  FDY_TENSOR_ROLE_COUNT
} fdy_tensor_role;

/* Alignment of weight views inside their weight (and of every tensor a plan
 * places in a buffer). */
#define FDY_TENSOR_ALIGNMENT 256

/* "weight", "input", "activation", "weight_view", "state"; "unknown" out
 * of range. */
const char *fdy_tensor_role_name(fdy_tensor_role role);

typedef enum fdy_extent_kind {
  FDY_EXTENT_HOST = 0, /* [host, host + length) in caller memory */
  FDY_EXTENT_FILE,     /* [offset, offset + length) of the file at path */
  FDY_EXTENT_PADDING,  /* length bytes no op reads (never copied) */
} fdy_extent_kind;

/* One contiguous piece of a weight. The graph copies `path` but never reads
 * the file or dereferences `host`; the caller keeps host memory alive for as
 * long as plans run against this graph. */
typedef struct fdy_extent {
  fdy_extent_kind kind;
  const void *host; /* FDY_EXTENT_HOST */
  const char *path; /* FDY_EXTENT_FILE */
  uint64_t offset;  /* FDY_EXTENT_FILE: byte offset in the file */
  uint64_t length;  /* bytes */
} fdy_extent;

/* Read-only view of a tensor, valid until the graph is mutated or destroyed. */
typedef struct fdy_tensor_info {
  const char *name;
  fdy_tensor_role role;
  fdy_dtype dtype;
  fdy_shape shape;
  uint64_t bytes;              /* dtype size * elements */
  size_t extent_count;         /* weights: 0 means "described, not bound" */
  const fdy_extent *extents;   /* weights: extent_count entries */
  int64_t producer;            /* activations: producing op index, else -1 */
  int64_t weight;              /* weight views: the weight's id, else -1 */
  uint64_t offset;             /* weight views: byte offset in the weight */
  uint32_t residency_priority; /* weights: the planner's hint (see
                                  fdy_graph_set_residency_priority), else 0 */
  uint64_t step_rows;          /* a step input's rows (see
                                  fdy_graph_set_step_rows), else 0 */
} fdy_tensor_info;

/* Read-only view of an op, valid until the graph is mutated or destroyed. */
typedef struct fdy_op_info {
  const char *name;
  fdy_op_kind kind;
  fdy_op_params params; /* members other than the kind's are zero */
  size_t read_count;    /* the op's inputs, in operand order */
  const fdy_tensor_id *reads;
  size_t write_count; /* the op's outputs, in operand order */
  const fdy_tensor_id *writes;
} fdy_op_info;

/* Creates an empty graph named `name` (copied). */
fdy_status fdy_graph_create(const char *name, fdy_graph **out, fdy_error *err);
/* Destroys a graph; NULL is a no-op. */
void fdy_graph_destroy(fdy_graph *graph);
/* Deep copy (names, extents and paths copied; host pointers shared). */
fdy_status fdy_graph_clone(const fdy_graph *graph, fdy_graph **out,
                           fdy_error *err);

/* Adds a weight. extent_count may be 0 to describe a weight whose bytes are
 * bound later (plans decoded from JSON). Otherwise the extents' lengths must
 * sum to the tensor's bytes (FDY_ERR_GRAPH_WEIGHT_SIZE, expected/actual set),
 * no file extent may have offset + length overflow (FDY_ERR_GRAPH_FILE_RANGE),
 * every extent needs a non-zero length and host/path as its kind requires.
 * Names are unique across tensors (FDY_ERR_GRAPH_DUPLICATE_NAME). */
fdy_status fdy_graph_add_weight(fdy_graph *graph, const char *name,
                                fdy_dtype dtype, fdy_shape shape,
                                const fdy_extent *extents, size_t extent_count,
                                fdy_tensor_id *out, fdy_error *err);
/* Adds a view of dtype/shape at byte offset inside weight `weight` (a
 * weight, not a view): offset a multiple of FDY_TENSOR_ALIGNMENT
 * (FDY_ERR_INVALID_ARGUMENT) and offset + bytes within the weight
 * (FDY_ERR_GRAPH_WEIGHT_SIZE, expected = weight bytes, actual = end). */
fdy_status fdy_graph_add_weight_view(fdy_graph *graph, const char *name,
                                     fdy_tensor_id weight, uint64_t offset,
                                     fdy_dtype dtype, fdy_shape shape,
                                     fdy_tensor_id *out, fdy_error *err);
/* Sets the residency priority of weight `weight` (0 when never set): a hint
 * to the planner (fdy_plan_build in plan.h), which keeps weights resident
 * in order of decreasing priority, then of first use. The llama graph gives
 * the embedding and the head units priority 1 so that they stay resident
 * before any layer. The priority is not part of the graph's structure (not
 * in the fingerprint, not in the plan's JSON): the plan records the choice
 * made from it. An id out of range: FDY_ERR_GRAPH_UNKNOWN_TENSOR; a tensor
 * that is not a weight: FDY_ERR_GRAPH_ROLE (ids[0] the tensor). */
fdy_status fdy_graph_set_residency_priority(fdy_graph *graph,
                                            fdy_tensor_id weight,
                                            uint32_t priority, fdy_error *err);
/* Declares input `step` the step tensor (ops.h: I32
 * [FDY_STEP_ELEMENTS(rows)], the active row count, then each row's id,
 * position and sequence) of a step of `rows` rows: its row-wise ops touch
 * only the first step[FDY_STEP_COUNT] rows of every tensor indexed by the
 * step's rows, which are, in the plan step whose launches read `step`,
 * every input and activation operand of those launches whose leading
 * dimension is `rows` (row r of it is the step's row r; weights, weight
 * views and state are never row-indexed). An executor that records steps
 * may then run such a step narrowed to b >= the count rows (batch-size
 * buckets, runtime.h), so a graph declares it only where that rule holds
 * (the Llama graph: for its decode step). Like the residency priority a
 * hint, not structure: neither in the fingerprint nor in a plan's JSON (a
 * plan loaded from JSON runs its steps at their full rows unless the
 * executor is given the declaring graph). rows 1 declares nothing to
 * narrow. Errors: an id out of range FDY_ERR_GRAPH_UNKNOWN_TENSOR; a
 * tensor that is not an input FDY_ERR_GRAPH_ROLE (ids[0] the tensor);
 * rows 0, or a dtype or shape other than I32 [FDY_STEP_ELEMENTS(rows)]:
 * FDY_ERR_INVALID_ARGUMENT (expected/actual the elements). */
fdy_status fdy_graph_set_step_rows(fdy_graph *graph, fdy_tensor_id step,
                                   uint64_t rows, fdy_error *err);
/* Adds a state tensor (persists across runs; read, and updated in place by
 * kinds that say so, e.g. the attention's KV caches). */
fdy_status fdy_graph_add_state(fdy_graph *graph, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               fdy_tensor_id *out, fdy_error *err);
/* Adds a caller-provided input tensor. */
fdy_status fdy_graph_add_input(fdy_graph *graph, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               fdy_tensor_id *out, fdy_error *err);
/* Adds an activation; it must later be written by exactly one op. */
fdy_status fdy_graph_add_activation(fdy_graph *graph, const char *name,
                                    fdy_dtype dtype, fdy_shape shape,
                                    fdy_tensor_id *out, fdy_error *err);

/* Description of an op to append: reads are its inputs and writes its
 * outputs, in the operand order of its kind. */
typedef struct fdy_op_desc {
  const char *name;
  fdy_op_kind kind;
  fdy_op_params params;
  const fdy_tensor_id *reads;
  size_t read_count;
  const fdy_tensor_id *writes;
  size_t write_count;
} fdy_op_desc;

/* Appends an op after all existing ops. Errors: unknown tensor ids
 * (FDY_ERR_GRAPH_UNKNOWN_TENSOR), reading an activation whose producer has
 * not been added yet (FDY_ERR_GRAPH_READ_BEFORE_WRITE), writing anything but
 * an activation (FDY_ERR_GRAPH_ROLE), writing an activation that already has
 * a producer (FDY_ERR_GRAPH_MULTIPLE_PRODUCERS), empty name, duplicate op
 * name, and operands or params that fail fdy_op_check for the kind (its
 * error). */
fdy_status fdy_graph_add_op(fdy_graph *graph, const fdy_op_desc *desc,
                            fdy_op_id *out, fdy_error *err);

/* Whole-graph check: every activation has a producer and everything the
 * mutators check still holds. */
fdy_status fdy_graph_validate(const fdy_graph *graph, fdy_error *err);

const char *fdy_graph_name(const fdy_graph *graph);
size_t fdy_graph_tensor_count(const fdy_graph *graph);
size_t fdy_graph_op_count(const fdy_graph *graph);
/* Fills *out; FDY_ERR_NOT_FOUND for an id out of range. */
fdy_status fdy_graph_tensor(const fdy_graph *graph, fdy_tensor_id id,
                            fdy_tensor_info *out, fdy_error *err);
fdy_status fdy_graph_op(const fdy_graph *graph, fdy_op_id id, fdy_op_info *out,
                        fdy_error *err);
/* Looks a tensor up by name; FDY_ERR_NOT_FOUND with name set. */
fdy_status fdy_graph_find_tensor(const fdy_graph *graph, const char *name,
                                 fdy_tensor_id *out, fdy_error *err);
/* Sum of all weights' bytes (overflow-checked). */
fdy_status fdy_graph_weight_bytes(const fdy_graph *graph, uint64_t *out,
                                  fdy_error *err);

/* A 64-bit FNV-1a fingerprint of the structure: name, tensors (name, role,
 * dtype, shape, view weight and offset) and ops (name, kind, params, reads,
 * writes). Extents are not
 * part of it, so a described graph and its bound twin match. */
uint64_t fdy_graph_fingerprint(const fdy_graph *graph);
/* True when both graphs have the same structure (see fingerprint), compared
 * field by field. */
bool fdy_graph_same_structure(const fdy_graph *a, const fdy_graph *b);

#ifdef __cplusplus
}
#endif
#endif
