/* The graph: tensors (weights, weight views, inputs, activations, state) and
 * an ordered list of typed ops, with structural validation (fdy_op_check on
 * every op's operands). Every mutator validates and allocates all
 * it needs before it changes anything, so a failed call leaves the graph as it
 * was. Tensor and op names are found through hash maps (open addressing,
 * FNV-1a, linear probing, grown at half load), so building and checking a
 * graph takes time linear in its size. */
#include "foundry/graph.h"
#include "foundry/op_table.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct graph_tensor {
  char *name;
  fdy_tensor_role role;
  fdy_dtype dtype;
  fdy_shape shape;
  uint64_t bytes;
  size_t extent_count;
  fdy_extent *extents; /* paths owned */
  int64_t producer;
  int64_t weight;              /* views: the weight, else -1 */
  uint64_t offset;             /* views: byte offset in the weight */
  uint32_t residency_priority; /* weights: the planner's hint */
  uint64_t step_rows;          /* step inputs: fdy_graph_set_step_rows */
} graph_tensor;

typedef struct graph_op {
  char *name;
  fdy_op_kind kind;
  fdy_op_params params; /* normalized: other kinds' members zero */
  size_t read_count;
  fdy_tensor_id *reads;
  size_t write_count;
  fdy_tensor_id *writes;
} graph_op;

/* One entry of a name map; the name is borrowed from its tensor or op. */
typedef struct name_slot {
  uint64_t hash;
  const char *name; /* NULL marks an empty slot */
  uint32_t index;   /* the tensor's or op's index */
} name_slot;

/* Names to indices. No entry is ever removed (graphs only grow), so there
 * are no tombstones. */
typedef struct name_map {
  name_slot *slots;
  size_t cap; /* 0 or a power of two, at least twice the names held */
} name_map;

struct fdy_graph {
  char *name;
  size_t tensor_count, tensor_cap;
  graph_tensor *tensors;
  size_t op_count, op_cap;
  graph_op *ops;
  name_map tensor_names, op_names;
};

const char *fdy_tensor_role_name(fdy_tensor_role role) {
  switch (role) {
  case FDY_TENSOR_WEIGHT:
    return "weight";
  case FDY_TENSOR_INPUT:
    return "input";
  case FDY_TENSOR_ACTIVATION:
    return "activation";
  case FDY_TENSOR_WEIGHT_VIEW:
    return "weight_view";
  case FDY_TENSOR_STATE:
    return "state";
  case FDY_TENSOR_ROLE_COUNT:
    break;
  }
  return "unknown";
}

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) {
    memcpy(d, s, n);
  }
  return d;
}

static fdy_status oom(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of host memory");
}

static void set_tensor_fields(fdy_error *err, int64_t id, const char *name) {
  if (err) {
    err->ids[0] = id;
    snprintf(err->name, sizeof(err->name), "%s", name ? name : "");
  }
}

static void free_extents(fdy_extent *extents, size_t count) {
  if (!extents) {
    return;
  }
  for (size_t i = 0; i < count; i++) {
    free((char *)extents[i].path);
  }
  free(extents);
}

static void free_tensor(graph_tensor *t) {
  free(t->name);
  free_extents(t->extents, t->extent_count);
}

static void free_op(graph_op *op) {
  free(op->name);
  free(op->reads);
  free(op->writes);
}

/* Deep copy of count extents (paths duplicated); NULL on allocation failure
 * or when count is 0 (then *ok stays true). */
static fdy_extent *copy_extents(const fdy_extent *src, size_t count, bool *ok) {
  *ok = true;
  if (count == 0) {
    return NULL;
  }
  fdy_extent *dst = calloc(count, sizeof(*dst));
  if (!dst) {
    *ok = false;
    return NULL;
  }
  for (size_t i = 0; i < count; i++) {
    dst[i] = src[i];
    dst[i].path = NULL;
    if (src[i].kind == FDY_EXTENT_FILE) {
      dst[i].path = dup_string(src[i].path);
      if (!dst[i].path) {
        free_extents(dst, count);
        *ok = false;
        return NULL;
      }
    }
  }
  return dst;
}

static fdy_tensor_id *copy_ids(const fdy_tensor_id *src, size_t count,
                               bool *ok) {
  *ok = true;
  if (count == 0) {
    return NULL;
  }
  fdy_tensor_id *dst = malloc(count * sizeof(*dst));
  if (!dst) {
    *ok = false;
    return NULL;
  }
  memcpy(dst, src, count * sizeof(*dst));
  return dst;
}

/* Makes room for one more element; changes nothing visible. */
static bool grow(void **items, size_t *cap, size_t count, size_t size) {
  if (count < *cap) {
    return true;
  }
  size_t next = *cap ? *cap * 2 : 16;
  if (next > SIZE_MAX / size) {
    return false;
  }
  void *p = realloc(*items, next * size);
  if (!p) {
    return false;
  }
  *items = p;
  *cap = next;
  return true;
}

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME  0x100000001b3ull

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= FNV_PRIME;
  }
  return h;
}

static uint64_t name_hash(const char *name) {
  return fnv_bytes(FNV_OFFSET, name, strlen(name));
}

/* The index named `name` (whose hash is `hash`), or -1. */
static int64_t map_find(const name_map *m, const char *name, uint64_t hash) {
  if (m->cap == 0) {
    return -1;
  }
  for (size_t i = (size_t)hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    const name_slot *slot = &m->slots[i];
    if (!slot->name) {
      return -1;
    }
    if (slot->hash == hash && strcmp(slot->name, name) == 0) {
      return slot->index;
    }
  }
}

/* Stores an entry whose name is not in the map; there is room for it. */
static void map_put(name_map *m, name_slot entry) {
  size_t i = (size_t)entry.hash & (m->cap - 1);
  while (m->slots[i].name) {
    i = (i + 1) & (m->cap - 1);
  }
  m->slots[i] = entry;
}

/* Makes room for `count` names at no more than half load. On failure the
 * map is unchanged; on success it holds the same names. */
static bool map_reserve(name_map *m, size_t count) {
  if (count <= m->cap / 2) {
    return true;
  }
  size_t cap = m->cap ? m->cap : 16;
  while (cap / 2 < count) {
    if (cap > SIZE_MAX / 2 / sizeof(name_slot)) {
      return false;
    }
    cap *= 2;
  }
  name_map next = {.slots = calloc(cap, sizeof(name_slot)), .cap = cap};
  if (!next.slots) {
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (m->slots[i].name) {
      map_put(&next, m->slots[i]);
    }
  }
  free(m->slots);
  *m = next;
  return true;
}

/* Adds a name whose room map_reserve made; never fails. */
static void map_insert(name_map *m, const char *name, uint64_t hash,
                       size_t index) {
  map_put(m, (name_slot){.hash = hash, .name = name, .index = (uint32_t)index});
}

fdy_status fdy_graph_create(const char *name, fdy_graph **out, fdy_error *err) {
  if (!name || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "graph name and output are required");
  }
  fdy_graph *g = calloc(1, sizeof(*g));
  if (!g) {
    return oom(err);
  }
  g->name = dup_string(name);
  if (!g->name) {
    free(g);
    return oom(err);
  }
  *out = g;
  return FDY_OK;
}

void fdy_graph_destroy(fdy_graph *graph) {
  if (!graph) {
    return;
  }
  for (size_t i = 0; i < graph->tensor_count; i++) {
    free_tensor(&graph->tensors[i]);
  }
  for (size_t i = 0; i < graph->op_count; i++) {
    free_op(&graph->ops[i]);
  }
  free(graph->tensors);
  free(graph->ops);
  free(graph->tensor_names.slots);
  free(graph->op_names.slots);
  free(graph->name);
  free(graph);
}

fdy_status fdy_graph_clone(const fdy_graph *graph, fdy_graph **out,
                           fdy_error *err) {
  if (!graph || !out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "graph and output are required");
  }
  fdy_graph *g = NULL;
  fdy_status s = fdy_graph_create(graph->name, &g, err);
  if (s != FDY_OK) {
    return s;
  }
  if (graph->tensor_count > 0) {
    g->tensors = calloc(graph->tensor_count, sizeof(*g->tensors));
    if (!g->tensors) {
      s = oom(err);
      goto cleanup;
    }
    g->tensor_cap = graph->tensor_count;
  }
  for (size_t i = 0; i < graph->tensor_count; i++) {
    const graph_tensor *src = &graph->tensors[i];
    graph_tensor *dst = &g->tensors[i];
    bool ok;
    *dst = *src;
    dst->name = dup_string(src->name);
    dst->extents = copy_extents(src->extents, src->extent_count, &ok);
    g->tensor_count = i + 1;
    if (!dst->name || !ok) {
      dst->extent_count = ok ? dst->extent_count : 0;
      s = oom(err);
      goto cleanup;
    }
  }
  if (graph->op_count > 0) {
    g->ops = calloc(graph->op_count, sizeof(*g->ops));
    if (!g->ops) {
      s = oom(err);
      goto cleanup;
    }
    g->op_cap = graph->op_count;
  }
  for (size_t i = 0; i < graph->op_count; i++) {
    const graph_op *src = &graph->ops[i];
    graph_op *dst = &g->ops[i];
    bool ok_r, ok_w;
    *dst = *src;
    dst->name = dup_string(src->name);
    dst->reads = copy_ids(src->reads, src->read_count, &ok_r);
    dst->writes = copy_ids(src->writes, src->write_count, &ok_w);
    g->op_count = i + 1;
    if (!dst->name || !ok_r || !ok_w) {
      s = oom(err);
      goto cleanup;
    }
  }
  if (!map_reserve(&g->tensor_names, g->tensor_count) ||
      !map_reserve(&g->op_names, g->op_count)) {
    s = oom(err);
    goto cleanup;
  }
  for (size_t i = 0; i < g->tensor_count; i++) {
    const char *n = g->tensors[i].name;
    map_insert(&g->tensor_names, n, name_hash(n), i);
  }
  for (size_t i = 0; i < g->op_count; i++) {
    const char *n = g->ops[i].name;
    map_insert(&g->op_names, n, name_hash(n), i);
  }
  *out = g;
  g = NULL;
  s = FDY_OK;
cleanup:
  fdy_graph_destroy(g);
  return s;
}

static int64_t find_tensor(const fdy_graph *g, const char *name) {
  return map_find(&g->tensor_names, name, name_hash(name));
}

static int64_t find_op(const fdy_graph *g, const char *name) {
  return map_find(&g->op_names, name, name_hash(name));
}

/* Checks what every tensor needs (name, dtype, shape) and computes bytes. */
static fdy_status check_tensor(const fdy_graph *g, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               uint64_t *bytes, fdy_error *err) {
  if (!g || !name || name[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a tensor needs a graph and a non-empty name");
  }
  int64_t dup = find_tensor(g, name);
  if (dup >= 0) {
    fdy_status s = fdy_error_set(err, FDY_ERR_GRAPH_DUPLICATE_NAME,
                                 "tensor '%s' already exists", name);
    set_tensor_fields(err, dup, name);
    return s;
  }
  fdy_status s = fdy_tensor_bytes(dtype, shape, bytes, err);
  if (s != FDY_OK) {
    fdy_error_prefix(err, "tensor '%s'", name);
    set_tensor_fields(err, -1, name);
  }
  return s;
}

/* Checks a weight's extents against its byte size. */
static fdy_status check_extents(const char *name, uint64_t bytes,
                                const fdy_extent *extents, size_t count,
                                fdy_error *err) {
  fdy_status s = FDY_OK;
  if (count > 0 && !extents) {
    s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "weight '%s' has %zu extents but no array", name, count);
    goto done;
  }
  uint64_t total = 0;
  for (size_t i = 0; i < count; i++) {
    const fdy_extent *e = &extents[i];
    if (e->length == 0) {
      s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                        "weight '%s' extent %zu has zero length", name, i);
      goto done;
    }
    if (e->kind == FDY_EXTENT_HOST) {
      if (!e->host) {
        s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                          "weight '%s' host extent %zu has no pointer", name,
                          i);
        goto done;
      }
    } else if (e->kind == FDY_EXTENT_FILE) {
      uint64_t end;
      if (!e->path || e->path[0] == '\0') {
        s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                          "weight '%s' file extent %zu has no path", name, i);
        goto done;
      }
      if (__builtin_add_overflow(e->offset, e->length, &end)) {
        s = fdy_error_set(err, FDY_ERR_GRAPH_FILE_RANGE,
                          "weight '%s' file extent %zu: offset %" PRIu64
                          " + length %" PRIu64 " overflows 64 bits",
                          name, i, e->offset, e->length);
        goto done;
      }
    } else if (e->kind != FDY_EXTENT_PADDING) {
      s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                        "weight '%s' extent %zu has an invalid kind %d", name,
                        i, (int)e->kind);
      goto done;
    }
    if (__builtin_add_overflow(total, e->length, &total)) {
      s = fdy_error_set(err, FDY_ERR_GRAPH_WEIGHT_SIZE,
                        "weight '%s' extent lengths overflow 64 bits", name);
      if (err) {
        err->expected = bytes;
        err->actual = UINT64_MAX;
      }
      goto done;
    }
  }
  if (count > 0 && total != bytes) {
    s = fdy_error_set(err, FDY_ERR_GRAPH_WEIGHT_SIZE,
                      "weight '%s' extents hold %" PRIu64
                      " bytes but its shape and dtype need %" PRIu64,
                      name, total, bytes);
    if (err) {
      err->expected = bytes;
      err->actual = total;
    }
  }
done:
  if (s != FDY_OK) {
    set_tensor_fields(err, -1, name);
  }
  return s;
}

static fdy_status add_tensor(fdy_graph *g, const char *name,
                             fdy_tensor_role role, fdy_dtype dtype,
                             fdy_shape shape, const fdy_extent *extents,
                             size_t extent_count, fdy_tensor_id *out,
                             fdy_error *err) {
  uint64_t bytes;
  fdy_status s = check_tensor(g, name, dtype, shape, &bytes, err);
  if (s != FDY_OK) {
    return s;
  }
  if (role == FDY_TENSOR_WEIGHT) {
    s = check_extents(name, bytes, extents, extent_count, err);
    if (s != FDY_OK) {
      return s;
    }
  }
  if (g->tensor_count >= UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "too many tensors");
  }
  graph_tensor t = {.role = role,
                    .dtype = dtype,
                    .shape = shape,
                    .bytes = bytes,
                    .extent_count = extent_count,
                    .producer = -1,
                    .weight = -1};
  bool ok;
  t.name = dup_string(name);
  t.extents = copy_extents(extents, extent_count, &ok);
  if (!t.name || !ok ||
      !grow((void **)&g->tensors, &g->tensor_cap, g->tensor_count,
            sizeof(*g->tensors)) ||
      !map_reserve(&g->tensor_names, g->tensor_count + 1)) {
    t.extent_count = ok ? t.extent_count : 0;
    free_tensor(&t);
    return oom(err);
  }
  map_insert(&g->tensor_names, t.name, name_hash(t.name), g->tensor_count);
  g->tensors[g->tensor_count] = t;
  if (out) {
    out->v = (uint32_t)g->tensor_count;
  }
  g->tensor_count++;
  return FDY_OK;
}

fdy_status fdy_graph_add_weight(fdy_graph *graph, const char *name,
                                fdy_dtype dtype, fdy_shape shape,
                                const fdy_extent *extents, size_t extent_count,
                                fdy_tensor_id *out, fdy_error *err) {
  return add_tensor(graph, name, FDY_TENSOR_WEIGHT, dtype, shape, extents,
                    extent_count, out, err);
}

fdy_status fdy_graph_set_residency_priority(fdy_graph *graph,
                                            fdy_tensor_id weight,
                                            uint32_t priority, fdy_error *err) {
  if (!graph || weight.v >= graph->tensor_count) {
    fdy_status s = fdy_error_set(
        err, FDY_ERR_GRAPH_UNKNOWN_TENSOR,
        "no weight with id %" PRIu32 " to give a residency priority", weight.v);
    if (err) {
      err->ids[0] = weight.v;
    }
    return s;
  }
  graph_tensor *t = &graph->tensors[weight.v];
  if (t->role != FDY_TENSOR_WEIGHT) {
    fdy_status s = fdy_error_set(err, FDY_ERR_GRAPH_ROLE,
                                 "tensor '%s' is a %s, not a weight: only "
                                 "weights have a residency priority",
                                 t->name, fdy_tensor_role_name(t->role));
    set_tensor_fields(err, weight.v, t->name);
    return s;
  }
  t->residency_priority = priority;
  return FDY_OK;
}

fdy_status fdy_graph_set_step_rows(fdy_graph *graph, fdy_tensor_id step,
                                   uint64_t rows, fdy_error *err) {
  if (!graph || step.v >= graph->tensor_count) {
    fdy_status s = fdy_error_set(
        err, FDY_ERR_GRAPH_UNKNOWN_TENSOR,
        "no input with id %" PRIu32 " to declare a step tensor", step.v);
    if (err) {
      err->ids[0] = step.v;
    }
    return s;
  }
  graph_tensor *t = &graph->tensors[step.v];
  if (t->role != FDY_TENSOR_INPUT) {
    fdy_status s = fdy_error_set(err, FDY_ERR_GRAPH_ROLE,
                                 "tensor '%s' is a %s, not an input: only "
                                 "inputs are step tensors",
                                 t->name, fdy_tensor_role_name(t->role));
    set_tensor_fields(err, step.v, t->name);
    return s;
  }
  const uint64_t elements =
      rows == 0 || rows > (UINT64_MAX - 1) / 3 ? 0 : FDY_STEP_ELEMENTS(rows);
  if (elements == 0 || t->dtype != FDY_DTYPE_I32 || t->shape.rank != 1 ||
      t->shape.dims[0] != elements) {
    fdy_status s =
        fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                      "input '%s' is not the I32 step tensor of %" PRIu64
                      " rows (%" PRIu64 " elements)",
                      t->name, rows, elements);
    set_tensor_fields(err, step.v, t->name);
    if (err) {
      err->expected = elements;
      err->actual = t->shape.rank == 1 ? t->shape.dims[0] : 0;
    }
    return s;
  }
  t->step_rows = rows;
  return FDY_OK;
}

fdy_status fdy_graph_add_weight_view(fdy_graph *graph, const char *name,
                                     fdy_tensor_id weight, uint64_t offset,
                                     fdy_dtype dtype, fdy_shape shape,
                                     fdy_tensor_id *out, fdy_error *err) {
  if (!graph || weight.v >= graph->tensor_count ||
      graph->tensors[weight.v].role != FDY_TENSOR_WEIGHT) {
    fdy_status s = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                                 "weight view '%s' needs a weight (id %" PRIu32
                                 ") to view",
                                 name ? name : "", weight.v);
    set_tensor_fields(err, weight.v, name);
    return s;
  }
  const graph_tensor *w = &graph->tensors[weight.v];
  if (offset % FDY_TENSOR_ALIGNMENT != 0) {
    fdy_status s = fdy_error_set(
        err, FDY_ERR_INVALID_ARGUMENT,
        "weight view '%s' at offset %" PRIu64 " of '%s' is not %d-byte aligned",
        name ? name : "", offset, w->name, FDY_TENSOR_ALIGNMENT);
    set_tensor_fields(err, -1, name);
    return s;
  }
  uint64_t bytes = 0, end = 0;
  fdy_status s = fdy_tensor_bytes(dtype, shape, &bytes, err);
  if (s == FDY_OK &&
      (__builtin_add_overflow(offset, bytes, &end) || end > w->bytes)) {
    s = fdy_error_set(err, FDY_ERR_GRAPH_WEIGHT_SIZE,
                      "weight view '%s' ends at byte %" PRIu64
                      " beyond weight '%s' of %" PRIu64 " bytes",
                      name ? name : "", end, w->name, w->bytes);
    if (err) {
      err->expected = w->bytes;
      err->actual = end;
    }
  }
  if (s != FDY_OK) {
    set_tensor_fields(err, -1, name);
    return s;
  }
  fdy_tensor_id id = {0};
  s = add_tensor(graph, name, FDY_TENSOR_WEIGHT_VIEW, dtype, shape, NULL, 0,
                 &id, err);
  if (s != FDY_OK) {
    return s;
  }
  graph->tensors[id.v].weight = weight.v;
  graph->tensors[id.v].offset = offset;
  if (out) {
    *out = id;
  }
  return FDY_OK;
}

fdy_status fdy_graph_add_state(fdy_graph *graph, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               fdy_tensor_id *out, fdy_error *err) {
  return add_tensor(graph, name, FDY_TENSOR_STATE, dtype, shape, NULL, 0, out,
                    err);
}

fdy_status fdy_graph_add_input(fdy_graph *graph, const char *name,
                               fdy_dtype dtype, fdy_shape shape,
                               fdy_tensor_id *out, fdy_error *err) {
  return add_tensor(graph, name, FDY_TENSOR_INPUT, dtype, shape, NULL, 0, out,
                    err);
}

fdy_status fdy_graph_add_activation(fdy_graph *graph, const char *name,
                                    fdy_dtype dtype, fdy_shape shape,
                                    fdy_tensor_id *out, fdy_error *err) {
  return add_tensor(graph, name, FDY_TENSOR_ACTIVATION, dtype, shape, NULL, 0,
                    out, err);
}

static fdy_status op_error(fdy_error *err, fdy_status kind, const char *op,
                           const fdy_graph *g, fdy_tensor_id id,
                           const char *what) {
  bool known = id.v < g->tensor_count;
  const char *tname = known ? g->tensors[id.v].name : "";
  fdy_status s;
  if (known) {
    s = fdy_error_set(err, kind, "op '%s' %s tensor '%s'", op, what, tname);
  } else {
    s = fdy_error_set(err, kind, "op '%s' %s unknown tensor id %" PRIu32, op,
                      what, id.v);
  }
  set_tensor_fields(err, (int64_t)id.v, tname);
  return s;
}

/* fdy_op_check on the op the description makes of the tensors' dtypes and
 * shapes; an error names the op and keeps the operand index in ids[0]. */
static fdy_status check_operands(const fdy_graph *g, const fdy_op_desc *desc,
                                 fdy_error *err) {
  if (desc->read_count > FDY_OP_MAX_INPUTS ||
      desc->write_count > FDY_OP_MAX_OUTPUTS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "op '%s' has %zu inputs and %zu outputs, more than an "
                         "op can have",
                         desc->name, desc->read_count, desc->write_count);
  }
  fdy_op op = {.kind = desc->kind,
               .params = desc->params,
               .input_count = (uint32_t)desc->read_count,
               .output_count = (uint32_t)desc->write_count};
  for (size_t i = 0; i < desc->read_count; i++) {
    const graph_tensor *t = &g->tensors[desc->reads[i].v];
    op.inputs[i] = (fdy_tensor_view){.dtype = t->dtype, .shape = t->shape};
  }
  for (size_t i = 0; i < desc->write_count; i++) {
    const graph_tensor *t = &g->tensors[desc->writes[i].v];
    op.outputs[i] = (fdy_tensor_view){.dtype = t->dtype, .shape = t->shape};
  }
  fdy_status s = fdy_op_check(&op, err);
  if (s != FDY_OK) {
    fdy_error_prefix(err, "op '%s'", desc->name);
    if (err) {
      snprintf(err->name, sizeof(err->name), "%s", desc->name);
    }
  }
  return s;
}

fdy_status fdy_graph_add_op(fdy_graph *graph, const fdy_op_desc *desc,
                            fdy_op_id *out, fdy_error *err) {
  if (!graph || !desc || !desc->name || desc->name[0] == '\0') {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "an op needs a graph and a non-empty name");
  }
  const char *name = desc->name;
  if ((desc->read_count > 0 && !desc->reads) ||
      (desc->write_count > 0 && !desc->writes)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "op '%s' has tensor counts but no id arrays", name);
  }
  int64_t dup = find_op(graph, name);
  if (dup >= 0) {
    fdy_status s = fdy_error_set(err, FDY_ERR_GRAPH_DUPLICATE_NAME,
                                 "op '%s' already exists", name);
    if (err) {
      err->ids[1] = dup;
      snprintf(err->name, sizeof(err->name), "%s", name);
    }
    return s;
  }
  for (size_t i = 0; i < desc->read_count; i++) {
    fdy_tensor_id id = desc->reads[i];
    if (id.v >= graph->tensor_count) {
      return op_error(err, FDY_ERR_GRAPH_UNKNOWN_TENSOR, name, graph, id,
                      "reads");
    }
    const graph_tensor *t = &graph->tensors[id.v];
    if (t->role == FDY_TENSOR_ACTIVATION && t->producer < 0) {
      return op_error(err, FDY_ERR_GRAPH_READ_BEFORE_WRITE, name, graph, id,
                      "reads before any producer the activation");
    }
  }
  for (size_t i = 0; i < desc->write_count; i++) {
    fdy_tensor_id id = desc->writes[i];
    if (id.v >= graph->tensor_count) {
      return op_error(err, FDY_ERR_GRAPH_UNKNOWN_TENSOR, name, graph, id,
                      "writes");
    }
    const graph_tensor *t = &graph->tensors[id.v];
    if (t->role != FDY_TENSOR_ACTIVATION) {
      char what[48];
      snprintf(what, sizeof what, "writes the %s",
               fdy_tensor_role_name(t->role));
      return op_error(err, FDY_ERR_GRAPH_ROLE, name, graph, id, what);
    }
    bool twice = false;
    for (size_t j = 0; j < i; j++) {
      twice = twice || desc->writes[j].v == id.v;
    }
    if (t->producer >= 0 || twice) {
      fdy_status s = op_error(err, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, name,
                              graph, id, "writes the already produced");
      if (err) {
        err->ids[1] = t->producer;
      }
      return s;
    }
  }
  fdy_status s = check_operands(graph, desc, err);
  if (s != FDY_OK) {
    return s;
  }
  if (graph->op_count >= UINT32_MAX) {
    return fdy_error_set(err, FDY_ERR_OVERFLOW, "too many ops");
  }
  graph_op op = {.kind = desc->kind,
                 .params = fdy_op_params_normalized(desc->kind, &desc->params),
                 .read_count = desc->read_count,
                 .write_count = desc->write_count};
  bool ok_r, ok_w;
  op.name = dup_string(name);
  op.reads = copy_ids(desc->reads, desc->read_count, &ok_r);
  op.writes = copy_ids(desc->writes, desc->write_count, &ok_w);
  if (!op.name || !ok_r || !ok_w ||
      !grow((void **)&graph->ops, &graph->op_cap, graph->op_count,
            sizeof(*graph->ops)) ||
      !map_reserve(&graph->op_names, graph->op_count + 1)) {
    free_op(&op);
    return oom(err);
  }
  map_insert(&graph->op_names, op.name, name_hash(op.name), graph->op_count);
  for (size_t i = 0; i < op.write_count; i++) {
    graph->tensors[op.writes[i].v].producer = (int64_t)graph->op_count;
  }
  graph->ops[graph->op_count] = op;
  if (out) {
    out->v = (uint32_t)graph->op_count;
  }
  graph->op_count++;
  return FDY_OK;
}

fdy_status fdy_graph_validate(const fdy_graph *graph, fdy_error *err) {
  if (!graph) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "graph is NULL");
  }
  for (size_t i = 0; i < graph->tensor_count; i++) {
    const graph_tensor *t = &graph->tensors[i];
    uint64_t bytes;
    fdy_status s = fdy_tensor_bytes(t->dtype, t->shape, &bytes, err);
    if (s != FDY_OK) {
      set_tensor_fields(err, (int64_t)i, t->name);
      return s;
    }
    if (t->role == FDY_TENSOR_WEIGHT) {
      s = check_extents(t->name, bytes, t->extents, t->extent_count, err);
      if (s != FDY_OK) {
        set_tensor_fields(err, (int64_t)i, t->name);
        return s;
      }
    }
    if (t->role == FDY_TENSOR_ACTIVATION && t->producer < 0) {
      s = fdy_error_set(err, FDY_ERR_GRAPH_READ_BEFORE_WRITE,
                        "activation '%s' has no producer op", t->name);
      set_tensor_fields(err, (int64_t)i, t->name);
      return s;
    }
  }
  for (size_t o = 0; o < graph->op_count; o++) {
    const graph_op *op = &graph->ops[o];
    for (size_t i = 0; i < op->read_count; i++) {
      fdy_tensor_id id = op->reads[i];
      if (id.v >= graph->tensor_count) {
        return op_error(err, FDY_ERR_GRAPH_UNKNOWN_TENSOR, op->name, graph, id,
                        "reads");
      }
      const graph_tensor *t = &graph->tensors[id.v];
      if (t->role == FDY_TENSOR_ACTIVATION && t->producer >= (int64_t)o) {
        return op_error(err, FDY_ERR_GRAPH_READ_BEFORE_WRITE, op->name, graph,
                        id, "reads before any producer the activation");
      }
    }
    for (size_t i = 0; i < op->write_count; i++) {
      fdy_tensor_id id = op->writes[i];
      if (id.v >= graph->tensor_count) {
        return op_error(err, FDY_ERR_GRAPH_UNKNOWN_TENSOR, op->name, graph, id,
                        "writes");
      }
      if (graph->tensors[id.v].producer != (int64_t)o) {
        return op_error(err, FDY_ERR_GRAPH_MULTIPLE_PRODUCERS, op->name, graph,
                        id, "writes the already produced");
      }
    }
  }
  return FDY_OK;
}

const char *fdy_graph_name(const fdy_graph *graph) {
  return graph->name;
}

size_t fdy_graph_tensor_count(const fdy_graph *graph) {
  return graph->tensor_count;
}

size_t fdy_graph_op_count(const fdy_graph *graph) {
  return graph->op_count;
}

fdy_status fdy_graph_tensor(const fdy_graph *graph, fdy_tensor_id id,
                            fdy_tensor_info *out, fdy_error *err) {
  if (!graph || !out || id.v >= graph->tensor_count) {
    fdy_status s = fdy_error_set(err, FDY_ERR_NOT_FOUND,
                                 "no tensor with id %" PRIu32, id.v);
    if (err) {
      err->ids[0] = id.v;
    }
    return s;
  }
  const graph_tensor *t = &graph->tensors[id.v];
  *out = (fdy_tensor_info){.name = t->name,
                           .role = t->role,
                           .dtype = t->dtype,
                           .shape = t->shape,
                           .bytes = t->bytes,
                           .extent_count = t->extent_count,
                           .extents = t->extents,
                           .producer = t->producer,
                           .weight = t->weight,
                           .offset = t->offset,
                           .residency_priority = t->residency_priority,
                           .step_rows = t->step_rows};
  return FDY_OK;
}

fdy_status fdy_graph_op(const fdy_graph *graph, fdy_op_id id, fdy_op_info *out,
                        fdy_error *err) {
  if (!graph || !out || id.v >= graph->op_count) {
    fdy_status s =
        fdy_error_set(err, FDY_ERR_NOT_FOUND, "no op with id %" PRIu32, id.v);
    if (err) {
      err->ids[0] = id.v;
    }
    return s;
  }
  const graph_op *op = &graph->ops[id.v];
  *out = (fdy_op_info){.name = op->name,
                       .kind = op->kind,
                       .params = op->params,
                       .read_count = op->read_count,
                       .reads = op->reads,
                       .write_count = op->write_count,
                       .writes = op->writes};
  return FDY_OK;
}

fdy_status fdy_graph_find_tensor(const fdy_graph *graph, const char *name,
                                 fdy_tensor_id *out, fdy_error *err) {
  int64_t i = (graph && name) ? find_tensor(graph, name) : -1;
  if (i < 0) {
    fdy_status s = fdy_error_set(err, FDY_ERR_NOT_FOUND, "no tensor named '%s'",
                                 name ? name : "");
    set_tensor_fields(err, -1, name);
    return s;
  }
  out->v = (uint32_t)i;
  return FDY_OK;
}

fdy_status fdy_graph_weight_bytes(const fdy_graph *graph, uint64_t *out,
                                  fdy_error *err) {
  uint64_t total = 0;
  for (size_t i = 0; i < graph->tensor_count; i++) {
    if (graph->tensors[i].role != FDY_TENSOR_WEIGHT) {
      continue;
    }
    fdy_status s = fdy_add_u64(total, graph->tensors[i].bytes, &total, err);
    if (s != FDY_OK) {
      fdy_error_prefix(err, "graph weight bytes");
      return s;
    }
  }
  *out = total;
  return FDY_OK;
}

/* Little-endian, so the fingerprint does not depend on the host. */
static uint64_t fnv_u64(uint64_t h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) {
    b[i] = (unsigned char)(v >> (8 * i));
  }
  return fnv_bytes(h, b, sizeof(b));
}

/* Strings are hashed with their terminating NUL so ("ab","c") != ("a","bc"). */
static uint64_t fnv_str(uint64_t h, const char *s) {
  return fnv_bytes(h, s, strlen(s) + 1);
}

uint64_t fdy_graph_fingerprint(const fdy_graph *graph) {
  uint64_t h = fnv_str(FNV_OFFSET, graph->name);
  h = fnv_u64(h, graph->tensor_count);
  for (size_t i = 0; i < graph->tensor_count; i++) {
    const graph_tensor *t = &graph->tensors[i];
    h = fnv_str(h, t->name);
    h = fnv_u64(h, (uint64_t)t->role);
    h = fnv_u64(h, (uint64_t)t->dtype);
    h = fnv_u64(h, t->shape.rank);
    for (uint32_t d = 0; d < t->shape.rank && d < FDY_MAX_RANK; d++) {
      h = fnv_u64(h, t->shape.dims[d]);
    }
    h = fnv_u64(h, (uint64_t)t->weight);
    h = fnv_u64(h, t->offset);
  }
  h = fnv_u64(h, graph->op_count);
  for (size_t o = 0; o < graph->op_count; o++) {
    const graph_op *op = &graph->ops[o];
    h = fnv_str(h, op->name);
    h = fnv_u64(h, (uint64_t)op->kind);
    /* params are normalized (zeroed, then the kind's fields stored); their
     * doubles hash in the host's byte order */
    h = fnv_bytes(h, &op->params, sizeof op->params);
    h = fnv_u64(h, op->read_count);
    for (size_t i = 0; i < op->read_count; i++) {
      h = fnv_u64(h, op->reads[i].v);
    }
    h = fnv_u64(h, op->write_count);
    for (size_t i = 0; i < op->write_count; i++) {
      h = fnv_u64(h, op->writes[i].v);
    }
  }
  return h;
}

static bool same_ids(const fdy_tensor_id *a, const fdy_tensor_id *b, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (a[i].v != b[i].v) {
      return false;
    }
  }
  return true;
}

bool fdy_graph_same_structure(const fdy_graph *a, const fdy_graph *b) {
  if (strcmp(a->name, b->name) != 0 || a->tensor_count != b->tensor_count ||
      a->op_count != b->op_count) {
    return false;
  }
  for (size_t i = 0; i < a->tensor_count; i++) {
    const graph_tensor *x = &a->tensors[i];
    const graph_tensor *y = &b->tensors[i];
    if (strcmp(x->name, y->name) != 0 || x->role != y->role ||
        x->dtype != y->dtype || !fdy_shape_equal(x->shape, y->shape) ||
        x->weight != y->weight || x->offset != y->offset) {
      return false;
    }
  }
  for (size_t o = 0; o < a->op_count; o++) {
    const graph_op *x = &a->ops[o];
    const graph_op *y = &b->ops[o];
    if (strcmp(x->name, y->name) != 0 || x->kind != y->kind ||
        memcmp(&x->params, &y->params, sizeof x->params) != 0 ||
        x->read_count != y->read_count || x->write_count != y->write_count ||
        !same_ids(x->reads, y->reads, x->read_count) ||
        !same_ids(x->writes, y->writes, x->write_count)) {
      return false;
    }
  }
  return true;
}
