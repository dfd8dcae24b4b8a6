/* Foundry graph: an ordered list of ops that read and write tensors.
 *
 * Tensors are weights (described as host memory or file ranges and never
 * loaded by the graph), inputs (provided by the caller at run time) or
 * activations (written by exactly one op). A weight may be a gather of several
 * extents (for example every tensor of one Llama decoder layer) so that one
 * weight is one streamable unit: its bytes are the concatenation of its
 * extents, in order.
 *
 * Every mutation validates before it changes anything: a failed call leaves
 * the graph exactly as it was. Not thread-safe; a graph may be shared
 * read-only between threads once built. */
#ifndef FOUNDRY_GRAPH_H
#define FOUNDRY_GRAPH_H

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_graph fdy_graph;

typedef enum fdy_tensor_role {
  FDY_TENSOR_WEIGHT = 0, /* read-only bytes from host memory or a file */
  FDY_TENSOR_INPUT,      /* provided by the caller, no producer op */
  FDY_TENSOR_ACTIVATION, /* produced by exactly one op */
} fdy_tensor_role;

const char *fdy_tensor_role_name(fdy_tensor_role role);

typedef enum fdy_extent_kind {
  FDY_EXTENT_HOST = 0, /* [host, host + length) in caller memory */
  FDY_EXTENT_FILE,     /* [offset, offset + length) of the file at path */
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
  uint64_t bytes;            /* dtype size * elements */
  size_t extent_count;       /* weights: 0 means "described, not bound" */
  const fdy_extent *extents; /* weights: extent_count entries */
  int64_t producer;          /* activations: producing op index, else -1 */
} fdy_tensor_info;

/* Read-only view of an op, valid until the graph is mutated or destroyed. */
typedef struct fdy_op_info {
  const char *name;
  const char *kind; /* e.g. "synthetic.checksum", "llama.decoder_layer" */
  uint64_t param;   /* kind-specific integer (e.g. layer index) */
  size_t read_count;
  const fdy_tensor_id *reads;
  size_t write_count;
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
/* Adds a caller-provided input tensor. */
fdy_status fdy_graph_add_input(fdy_graph *graph, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               fdy_tensor_id *out, fdy_error *err);
/* Adds an activation; it must later be written by exactly one op. */
fdy_status fdy_graph_add_activation(fdy_graph *graph, const char *name,
                                    fdy_dtype dtype, fdy_shape shape,
                                    fdy_tensor_id *out, fdy_error *err);

/* Description of an op to append. */
typedef struct fdy_op_desc {
  const char *name;
  const char *kind;
  uint64_t param;
  const fdy_tensor_id *reads;
  size_t read_count;
  const fdy_tensor_id *writes;
  size_t write_count;
} fdy_op_desc;

/* Appends an op after all existing ops. Errors: unknown tensor ids
 * (FDY_ERR_GRAPH_UNKNOWN_TENSOR), reading an activation whose producer has
 * not been added yet (FDY_ERR_GRAPH_READ_BEFORE_WRITE), writing a weight or an
 * input (FDY_ERR_GRAPH_ROLE), writing an activation that already has a
 * producer (FDY_ERR_GRAPH_MULTIPLE_PRODUCERS), empty name or kind, duplicate
 * op name. */
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
 * dtype, shape) and ops (name, kind, param, reads, writes). Extents are not
 * part of it, so a described graph and its bound twin match. */
uint64_t fdy_graph_fingerprint(const fdy_graph *graph);
/* True when both graphs have the same structure (see fingerprint), compared
 * field by field. */
bool fdy_graph_same_structure(const fdy_graph *a, const fdy_graph *b);

/* ---- the synthetic workload
 * ---------------------------------------------------- */

#define FDY_OP_SYNTHETIC_CHECKSUM "synthetic.checksum"

/* Builds the synthetic chain used by `foundry plan` and `foundry bench`:
 * weights "layer.<i>.weight" (U8 [weight_bytes]), activations "layer.<i>.out"
 * (U64 [1]) and ops "layer.<i>" of kind synthetic.checksum with param i, where
 * op i reads weight i and (for i > 0) activation i-1 and writes activation i.
 * layer_data may be NULL (weights described, not bound) or hold `layers`
 * pointers to weight_bytes each, used as host extents. layers may be 0 (empty
 * graph); weight_bytes must be > 0. */
fdy_status fdy_synthetic_graph_create(uint32_t layers, uint64_t weight_bytes,
                                      const void *const *layer_data,
                                      fdy_graph **out, fdy_error *err);

#ifdef __cplusplus
}
#endif
#endif
