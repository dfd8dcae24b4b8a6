/* Plan JSON, version 2 (docs/plan-format.md): a deterministic encoder and a
 * strict decoder over jansson. Commands, bindings, placements and op
 * parameters (from the op table, foundry/op_table.h) are described once,
 * as tables of (key, type, offset) fields that both directions walk. The
 * decoder rejects unknown fields, wrong types, out-of-range integers and
 * unknown names with the JSON path of the offending value in err->name (and the
 * global command index where one applies); it rebuilds the graph and the plan
 * through their public mutators and does not validate the plan. */
#include "plan_internal.h"

#include "foundry/input.h"
#include "foundry/op_table.h"

#include <assert.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jansson integers are signed 64-bit. */
#define JSON_UINT_MAX ((uint64_t)INT64_MAX)
/* Integers a double holds exactly (accepted where a number is expected). */
#define JSON_EXACT_DOUBLE ((json_int_t)1 << 53)
#define PATH_MAX_LEN      FDY_ERROR_NAME_MAX

/* ---- field tables ---------------------------------------------------------
 */

typedef enum field_type {
  FIELD_U32,  /* uint32_t: JSON integer 0..2^32-1 */
  FIELD_U64,  /* uint64_t: JSON integer 0..2^63-1 */
  FIELD_F64,  /* double: JSON number, finite */
  FIELD_BOOL, /* bool: true or false */
} field_type;

typedef struct field {
  const char *key;
  field_type type;
  size_t offset; /* in the struct the table describes */
} field;

typedef struct field_table {
  const field *fields;
  size_t count;
} field_table;

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define TABLE(a)                                                               \
  { a, COUNT(a) }
#define CMD(kind, member, key, type)                                           \
  { key, type, offsetof(fdy_command, u.kind.member) }

static const field allocate_fields[] = {
    CMD(allocate, buffer.v, "buffer", FIELD_U32),
};
static const field prefetch_fields[] = {
    CMD(prefetch, weight.v, "weight", FIELD_U32),
    CMD(prefetch, buffer.v, "buffer", FIELD_U32),
    CMD(prefetch, offset, "offset", FIELD_U64),
    CMD(prefetch, stream.v, "stream", FIELD_U32),
    CMD(prefetch, signal.v, "signal", FIELD_U32),
};
static const field copy_fields[] = {
    CMD(copy, tensor.v, "tensor", FIELD_U32),
    CMD(copy, stream.v, "stream", FIELD_U32),
    CMD(copy, signal.v, "signal", FIELD_U32),
};
/* Followed by exactly one of "host": true or "stream". */
static const field wait_fields[] = {
    CMD(wait, event.v, "event", FIELD_U32),
};
/* Followed by "bindings". */
static const field launch_fields[] = {
    CMD(launch, op.v, "op", FIELD_U32),
    CMD(launch, stream.v, "stream", FIELD_U32),
    CMD(launch, signal.v, "signal", FIELD_U32),
};
static const field release_fields[] = {
    CMD(release, buffer.v, "buffer", FIELD_U32),
};

static const field_table command_fields[FDY_CMD_KIND_COUNT] = {
    [FDY_CMD_ALLOCATE] = TABLE(allocate_fields),
    [FDY_CMD_PREFETCH] = TABLE(prefetch_fields),
    [FDY_CMD_COPY_INPUT] = TABLE(copy_fields),
    [FDY_CMD_COPY_OUTPUT] = TABLE(copy_fields),
    [FDY_CMD_WAIT] = TABLE(wait_fields),
    [FDY_CMD_LAUNCH] = TABLE(launch_fields),
    [FDY_CMD_RELEASE] = TABLE(release_fields),
};

static const field binding_fields[] = {
    {"weight", FIELD_U32, offsetof(fdy_binding, weight.v)},
    {"buffer", FIELD_U32, offsetof(fdy_binding, buffer.v)},
    {"offset", FIELD_U64, offsetof(fdy_binding, offset)},
};

/* Follows "tensor"; buffer FDY_NO_BUFFER is refused (it means unplaced). */
static const field placement_fields[] = {
    {"buffer", FIELD_U32, offsetof(fdy_placement, buffer.v)},
    {"offset", FIELD_U64, offsetof(fdy_placement, offset)},
};

/* The fields of a kind's parameters: its op table row's, in its order.
 * fields has room for FDY_OP_MAX_PARAMS; returns the count. */
static size_t op_param_fields(fdy_op_kind kind, field *fields) {
  static const field_type types[] = {[FDY_OP_PARAM_U32] = FIELD_U32,
                                     [FDY_OP_PARAM_F64] = FIELD_F64,
                                     [FDY_OP_PARAM_BOOL] = FIELD_BOOL};
  const fdy_op_row *row = fdy_op_row_of(kind);
  assert(row->param_count <= FDY_OP_MAX_PARAMS);
  for (uint32_t i = 0; i < row->param_count; i++) {
    const fdy_op_param *p = &row->params[i];
    fields[i] = (field){p->key, types[p->type], p->offset};
  }
  return row->param_count;
}

/* ---- JSON paths -----------------------------------------------------------
 */

/* dst = a b c, truncated to cap - 1 characters. */
static void concat(char *dst, size_t cap, const char *a, const char *b,
                   const char *c) {
  const char *parts[3] = {a, b, c};
  size_t used = 0;
  for (size_t p = 0; p < 3; p++) {
    size_t n = strlen(parts[p]);
    if (n > cap - 1 - used) {
      n = cap - 1 - used;
    }
    memcpy(dst + used, parts[p], n);
    used += n;
  }
  dst[used] = '\0';
}

/* Path of member `key` of the value at `path` ("" is the document). */
static void join(char *dst, size_t cap, const char *path, const char *key) {
  concat(dst, cap, path, path[0] == '\0' ? "" : ".", key);
}

/* Path of element i of the array at `path`. */
static void item(char *dst, size_t cap, const char *path, size_t i) {
  char index[32];
  snprintf(index, sizeof(index), "[%zu]", i);
  concat(dst, cap, path, index, "");
}

/* Sets err's JSON path and command index (err may be NULL). */
static void locate(fdy_error *err, const char *path, int64_t command_index) {
  if (err != NULL) {
    snprintf(err->name, sizeof(err->name), "%s", path);
    err->command_index = command_index;
  }
}

/* ---- encoding ------------------------------------------------------------ */

static fdy_status oom(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                       "out of memory encoding a plan");
}

/* A value the plan holds but JSON cannot carry: FDY_ERR_UNSUPPORTED. */
__attribute__((format(printf, 4, 5))) static fdy_status
unrepresentable(fdy_error *err, const char *path, int64_t command_index,
                const char *fmt, ...) {
  char text[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  fdy_error_set(err, FDY_ERR_UNSUPPORTED, "plan JSON: %s: %s", path, text);
  locate(err, path, command_index);
  return FDY_ERR_UNSUPPORTED;
}

/* Adds key = value to obj, or appends value to the array obj when key is
 * NULL. value is a new reference, consumed even on failure; NULL means
 * jansson ran out of memory creating it. */
static fdy_status put(json_t *obj, const char *key, json_t *value,
                      fdy_error *err) {
  int rc = -1;
  if (value != NULL) {
    rc = key != NULL ? json_object_set_new(obj, key, value)
                     : json_array_append_new(obj, value);
  }
  return rc == 0 ? FDY_OK : oom(err);
}

static fdy_status put_uint(json_t *obj, const char *key, uint64_t value,
                           const char *path, int64_t command_index,
                           fdy_error *err) {
  if (value > JSON_UINT_MAX) {
    char where[PATH_MAX_LEN];
    if (key != NULL) {
      join(where, sizeof(where), path, key);
    } else {
      item(where, sizeof(where), path, json_array_size(obj));
    }
    return unrepresentable(err, where, command_index,
                           "%" PRIu64 " does not fit a JSON integer (at most "
                           "2^63 - 1)",
                           value);
  }
  return put(obj, key, json_integer((json_int_t)value), err);
}

/* jansson refuses strings that are not UTF-8; tell that from out of
 * memory. */
static fdy_status put_string(json_t *obj, const char *key, const char *value,
                             const char *path, fdy_error *err) {
  json_t *s = json_string(value);
  if (s == NULL) {
    json_t *raw = json_stringn_nocheck(value, strlen(value));
    if (raw == NULL) {
      return oom(err);
    }
    json_decref(raw);
    char where[PATH_MAX_LEN];
    join(where, sizeof(where), path, key);
    return unrepresentable(err, where, -1, "'%s' is not valid UTF-8", value);
  }
  return put(obj, key, s, err);
}

static fdy_status put_fields(json_t *obj, const char *path, const field *fields,
                             size_t count, const void *base,
                             int64_t command_index, fdy_error *err) {
  const char *p = base;
  fdy_status st = FDY_OK;
  for (size_t i = 0; st == FDY_OK && i < count; i++) {
    const field *f = &fields[i];
    switch (f->type) {
    case FIELD_U32: {
      uint32_t v;
      memcpy(&v, p + f->offset, sizeof(v));
      st = put_uint(obj, f->key, v, path, command_index, err);
      break;
    }
    case FIELD_U64: {
      uint64_t v;
      memcpy(&v, p + f->offset, sizeof(v));
      st = put_uint(obj, f->key, v, path, command_index, err);
      break;
    }
    case FIELD_F64: {
      double v;
      memcpy(&v, p + f->offset, sizeof(v));
      if (!isfinite(v)) {
        char where[PATH_MAX_LEN];
        join(where, sizeof(where), path, f->key);
        return unrepresentable(err, where, command_index,
                               "%g is not a finite number", v);
      }
      st = put(obj, f->key, json_real(v), err);
      break;
    }
    case FIELD_BOOL: {
      bool v;
      memcpy(&v, p + f->offset, sizeof(v));
      st = put(obj, f->key, json_boolean(v), err);
      break;
    }
    }
  }
  return st;
}

/* Fills element i (an empty object at `path`) of an array. */
typedef fdy_status (*encode_item)(const void *ctx, size_t i, const char *path,
                                  json_t *obj, fdy_error *err);

/* obj[key] = an array of count objects, element i filled by each(ctx, i). */
static fdy_status put_objects(json_t *obj, const char *key, const char *path,
                              size_t count, encode_item each, const void *ctx,
                              fdy_error *err) {
  char base[PATH_MAX_LEN], where[PATH_MAX_LEN];
  json_t *array = json_array();
  fdy_status st = array != NULL ? FDY_OK : oom(err);
  join(base, sizeof(base), path, key);
  for (size_t i = 0; st == FDY_OK && i < count; i++) {
    json_t *o = json_object();
    item(where, sizeof(where), base, i);
    st = o != NULL ? each(ctx, i, where, o, err) : oom(err);
    if (st == FDY_OK) {
      st = put(array, NULL, o, err);
    } else {
      json_decref(o);
    }
  }
  if (st != FDY_OK) {
    json_decref(array);
    return st;
  }
  return put(obj, key, array, err);
}

static fdy_status put_ids(json_t *obj, const char *key,
                          const fdy_tensor_id *ids, size_t count,
                          fdy_error *err) {
  json_t *array = json_array();
  fdy_status st = array != NULL ? FDY_OK : oom(err);
  for (size_t i = 0; st == FDY_OK && i < count; i++) {
    st = put(array, NULL, json_integer(ids[i].v), err);
  }
  if (st != FDY_OK) {
    json_decref(array);
    return st;
  }
  return put(obj, key, array, err);
}

static fdy_status encode_tensor(const void *graph, size_t i, const char *path,
                                json_t *t, fdy_error *err) {
  char where[PATH_MAX_LEN];
  fdy_tensor_info info;
  fdy_status st =
      fdy_graph_tensor(graph, (fdy_tensor_id){(uint32_t)i}, &info, err);
  if (st == FDY_OK) {
    st = put_string(t, "name", info.name, path, err);
  }
  if (st == FDY_OK) {
    st = put(t, "role", json_string(fdy_tensor_role_name(info.role)), err);
  }
  if (st == FDY_OK) {
    st = put(t, "dtype", json_string(fdy_dtype_name(info.dtype)), err);
  }
  json_t *shape = st == FDY_OK ? json_array() : NULL;
  if (st == FDY_OK && shape == NULL) {
    st = oom(err);
  }
  join(where, sizeof(where), path, "shape");
  for (uint32_t d = 0; st == FDY_OK && d < info.shape.rank; d++) {
    st = put_uint(shape, NULL, info.shape.dims[d], where, -1, err);
  }
  if (st != FDY_OK) {
    json_decref(shape);
    return st;
  }
  st = put(t, "shape", shape, err);
  if (st == FDY_OK && info.role == FDY_TENSOR_WEIGHT_VIEW) {
    st = put_uint(t, "weight", (uint64_t)info.weight, path, -1, err);
    if (st == FDY_OK) {
      st = put_uint(t, "offset", info.offset, path, -1, err);
    }
  }
  return st;
}

static fdy_status encode_op(const void *graph, size_t i, const char *path,
                            json_t *o, fdy_error *err) {
  char where[PATH_MAX_LEN];
  fdy_op_info info;
  fdy_status st = fdy_graph_op(graph, (fdy_op_id){(uint32_t)i}, &info, err);
  if (st == FDY_OK) {
    st = put_string(o, "name", info.name, path, err);
  }
  if (st == FDY_OK) {
    st = put(o, "kind", json_string(fdy_op_kind_name(info.kind)), err);
  }
  json_t *params = st == FDY_OK ? json_object() : NULL;
  if (st == FDY_OK && params == NULL) {
    st = oom(err);
  }
  join(where, sizeof(where), path, "params");
  if (st == FDY_OK) {
    field fields[FDY_OP_MAX_PARAMS];
    size_t count = op_param_fields(info.kind, fields);
    st = put_fields(params, where, fields, count, &info.params, -1, err);
  }
  if (st != FDY_OK) {
    json_decref(params);
    return st;
  }
  st = put(o, "params", params, err);
  if (st == FDY_OK) {
    st = put_ids(o, "reads", info.reads, info.read_count, err);
  }
  if (st == FDY_OK) {
    st = put_ids(o, "writes", info.writes, info.write_count, err);
  }
  return st;
}

static fdy_status encode_graph(const fdy_graph *graph, json_t *g,
                               fdy_error *err) {
  fdy_status st = put_string(g, "name", fdy_graph_name(graph), "graph", err);
  if (st == FDY_OK) {
    st = put_objects(g, "tensors", "graph", fdy_graph_tensor_count(graph),
                     encode_tensor, graph, err);
  }
  if (st == FDY_OK) {
    st = put_objects(g, "ops", "graph", fdy_graph_op_count(graph), encode_op,
                     graph, err);
  }
  return st;
}

static fdy_status encode_buffer(const void *plan, size_t i, const char *path,
                                json_t *b, fdy_error *err) {
  const fdy_plan_buffer *buffer = &((const fdy_plan *)plan)->buffers[i];
  fdy_status st =
      put(b, "class", json_string(fdy_buffer_class_name(buffer->cls)), err);
  return st == FDY_OK ? put_uint(b, "bytes", buffer->bytes, path, -1, err) : st;
}

/* Placements are listed for placed tensors only: element i is the i-th
 * placed tensor. */
typedef struct placed {
  const fdy_plan *plan;
  const uint32_t *tensors;
} placed;

static fdy_status encode_placement(const void *ctx, size_t i, const char *path,
                                   json_t *o, fdy_error *err) {
  const placed *p = ctx;
  uint32_t tensor = p->tensors[i];
  fdy_status st = put_uint(o, "tensor", tensor, path, -1, err);
  if (st == FDY_OK) {
    st = put_fields(o, path, placement_fields, COUNT(placement_fields),
                    &p->plan->placements[tensor], -1, err);
  }
  return st;
}

static fdy_status encode_placements(const fdy_plan *plan, json_t *root,
                                    fdy_error *err) {
  size_t tensors = fdy_graph_tensor_count(plan->graph);
  uint32_t *ids = malloc((tensors ? tensors : 1) * sizeof(*ids));
  size_t count = 0;
  if (ids == NULL) {
    return oom(err);
  }
  for (size_t t = 0; t < tensors; t++) {
    if (plan->placements[t].buffer.v != FDY_NO_BUFFER) {
      ids[count++] = (uint32_t)t;
    }
  }
  placed ctx = {plan, ids};
  fdy_status st =
      put_objects(root, "placements", "", count, encode_placement, &ctx, err);
  free(ids);
  return st;
}

/* A launch and its global command index. */
typedef struct launch {
  const fdy_command *command;
  int64_t index;
} launch;

static fdy_status encode_binding(const void *ctx, size_t i, const char *path,
                                 json_t *b, fdy_error *err) {
  const launch *l = ctx;
  return put_fields(b, path, binding_fields, COUNT(binding_fields),
                    &l->command->u.launch.bindings[i], l->index, err);
}

/* The commands of one section: element i is command first + i. */
typedef struct section_commands {
  const fdy_command *commands;
  size_t first;
} section_commands;

static fdy_status encode_command(const void *ctx, size_t i, const char *path,
                                 json_t *o, fdy_error *err) {
  const section_commands *s = ctx;
  const fdy_command *c = &s->commands[s->first + i];
  int64_t index = (int64_t)(s->first + i);
  const field_table *table = &command_fields[c->kind];
  fdy_status st =
      put(o, "kind", json_string(fdy_command_kind_name(c->kind)), err);
  if (st == FDY_OK) {
    st = put_fields(o, path, table->fields, table->count, c, index, err);
  }
  if (st == FDY_OK && c->kind == FDY_CMD_WAIT) {
    st = c->u.wait.host
             ? put(o, "host", json_true(), err)
             : put_uint(o, "stream", c->u.wait.stream.v, path, index, err);
  }
  if (st == FDY_OK && c->kind == FDY_CMD_LAUNCH) {
    launch l = {c, index};
    st = put_objects(o, "bindings", path, c->u.launch.binding_count,
                     encode_binding, &l, err);
  }
  return st;
}

static fdy_status encode_section(const void *plan, size_t i, const char *path,
                                 json_t *o, fdy_error *err) {
  const fdy_plan *p = plan;
  const fdy_section *section = &p->sections[i];
  section_commands ctx = {p->commands, section->first};
  fdy_status st = put(o, "name", json_string(section->name), err);
  if (st == FDY_OK) {
    st = put_objects(o, "commands", path, section->count, encode_command, &ctx,
                     err);
  }
  return st;
}

fdy_status fdy_plan_to_json(const fdy_plan *plan, char **out, fdy_error *err) {
  if (plan == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan encoding needs a plan and an output pointer");
  }
  *out = NULL;
  json_t *root = json_object();
  json_t *graph = json_object();
  fdy_status st = root != NULL && graph != NULL ? FDY_OK : oom(err);
  if (st == FDY_OK) {
    st = put(root, "format", json_string(FDY_PLAN_FORMAT), err);
  }
  if (st == FDY_OK) {
    st = put_uint(root, "version", FDY_PLAN_VERSION, "", -1, err);
  }
  if (st == FDY_OK) {
    st = put_uint(root, "budget_bytes", plan->budget_bytes, "", -1, err);
  }
  if (st == FDY_OK) {
    st = put_uint(root, "streams", plan->stream_count, "", -1, err);
  }
  if (st == FDY_OK) {
    st = put_uint(root, "events", plan->event_count, "", -1, err);
  }
  if (st == FDY_OK) {
    st = put_objects(root, "buffers", "", plan->buffer_count, encode_buffer,
                     plan, err);
  }
  if (st == FDY_OK) {
    st = encode_graph(plan->graph, graph, err);
  }
  if (st == FDY_OK) {
    st = put(root, "graph", graph, err);
    graph = NULL;
  }
  if (st == FDY_OK) {
    st = encode_placements(plan, root, err);
  }
  if (st == FDY_OK) {
    st = put_objects(root, "sections", "", plan->section_count, encode_section,
                     plan, err);
  }
  if (st == FDY_OK) {
    *out = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    st = *out != NULL ? FDY_OK : oom(err);
  }
  json_decref(graph);
  json_decref(root);
  return st;
}

/* ---- decoding ------------------------------------------------------------ */

__attribute__((format(printf, 4, 5))) static fdy_status
schema(fdy_error *err, const char *path, int64_t command_index, const char *fmt,
       ...) {
  char text[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  fdy_error_set(err, FDY_ERR_SCHEMA, "plan JSON: %s: %s", path, text);
  locate(err, path, command_index);
  return FDY_ERR_SCHEMA;
}

/* Keeps the kind and fields of an error from a graph or plan mutator and
 * labels it with the JSON path of the value that caused it. */
static fdy_status relabel(fdy_error *err, fdy_status st, const char *path,
                          int64_t command_index) {
  if (err != NULL) {
    fdy_error_prefix(err, "plan JSON: %s", path);
  }
  locate(err, path, command_index);
  return st;
}

static bool is_key(const char *key, const field *fields, size_t count,
                   const char *const *extra, size_t extra_count) {
  for (size_t i = 0; i < count; i++) {
    if (strcmp(key, fields[i].key) == 0) {
      return true;
    }
  }
  for (size_t i = 0; i < extra_count; i++) {
    if (strcmp(key, extra[i]) == 0) {
      return true;
    }
  }
  return false;
}

/* obj must be an object whose members are among fields and extra. */
static fdy_status check_object(const json_t *obj, const char *path,
                               const field *fields, size_t count,
                               const char *const *extra, size_t extra_count,
                               int64_t command_index, fdy_error *err) {
  const char *key;
  json_t *value;
  if (!json_is_object(obj)) {
    return schema(err, path, command_index, "expected an object");
  }
  json_object_foreach((json_t *)obj, key, value) {
    if (!is_key(key, fields, count, extra, extra_count)) {
      char where[PATH_MAX_LEN];
      join(where, sizeof(where), path, key);
      return schema(err, where, command_index, "unknown field");
    }
  }
  return FDY_OK;
}

/* The member `key` of obj (required) into *out and its path into where. */
static fdy_status member(const json_t *obj, const char *path, const char *key,
                         int64_t command_index, json_t **out, char *where,
                         fdy_error *err) {
  join(where, PATH_MAX_LEN, path, key);
  *out = json_object_get(obj, key);
  if (*out == NULL) {
    return schema(err, where, command_index, "missing field");
  }
  return FDY_OK;
}

static fdy_status as_uint(const json_t *value, const char *where, uint64_t max,
                          int64_t command_index, uint64_t *out,
                          fdy_error *err) {
  if (!json_is_integer(value)) {
    return schema(err, where, command_index, "expected an integer");
  }
  json_int_t v = json_integer_value(value);
  if (v < 0 || (uint64_t)v > max) {
    return schema(err, where, command_index, "%lld is outside 0..%" PRIu64,
                  (long long)v, max);
  }
  *out = (uint64_t)v;
  return FDY_OK;
}

static fdy_status as_double(const json_t *value, const char *where,
                            int64_t command_index, double *out,
                            fdy_error *err) {
  if (json_is_real(value)) {
    *out = json_real_value(value);
    return FDY_OK;
  }
  if (json_is_integer(value)) {
    json_int_t v = json_integer_value(value);
    if (v < -JSON_EXACT_DOUBLE || v > JSON_EXACT_DOUBLE) {
      return schema(err, where, command_index,
                    "integer %lld is not exact as a double (write it as a "
                    "real)",
                    (long long)v);
    }
    *out = (double)v;
    return FDY_OK;
  }
  return schema(err, where, command_index, "expected a number");
}

static fdy_status get_uint(const json_t *obj, const char *path, const char *key,
                           uint64_t max, int64_t command_index, uint64_t *out,
                           fdy_error *err) {
  char where[PATH_MAX_LEN];
  json_t *value;
  fdy_status st = member(obj, path, key, command_index, &value, where, err);
  return st != FDY_OK ? st
                      : as_uint(value, where, max, command_index, out, err);
}

static fdy_status get_string(const json_t *obj, const char *path,
                             const char *key, const char **out,
                             fdy_error *err) {
  char where[PATH_MAX_LEN];
  json_t *value;
  fdy_status st = member(obj, path, key, -1, &value, where, err);
  if (st == FDY_OK && !json_is_string(value)) {
    st = schema(err, where, -1, "expected a string");
  }
  if (st == FDY_OK) {
    *out = json_string_value(value);
  }
  return st;
}

/* The array member `key` of obj, with at most max elements. */
static fdy_status get_array(const json_t *obj, const char *path,
                            const char *key, size_t max, int64_t command_index,
                            json_t **out, fdy_error *err) {
  char where[PATH_MAX_LEN];
  fdy_status st = member(obj, path, key, command_index, out, where, err);
  if (st == FDY_OK && !json_is_array(*out)) {
    st = schema(err, where, command_index, "expected an array");
  }
  if (st == FDY_OK && json_array_size(*out) > max) {
    st = schema(err, where, command_index, "%zu elements, at most %zu",
                json_array_size(*out), max);
  }
  return st;
}

static fdy_status get_fields(const json_t *obj, const char *path,
                             const field *fields, size_t count, void *base,
                             int64_t command_index, fdy_error *err) {
  char *p = base;
  fdy_status st = FDY_OK;
  for (size_t i = 0; st == FDY_OK && i < count; i++) {
    const field *f = &fields[i];
    char where[PATH_MAX_LEN];
    json_t *value;
    uint64_t u = 0;
    st = member(obj, path, f->key, command_index, &value, where, err);
    if (st != FDY_OK) {
      break;
    }
    switch (f->type) {
    case FIELD_U32:
      st = as_uint(value, where, UINT32_MAX, command_index, &u, err);
      if (st == FDY_OK) {
        uint32_t v = (uint32_t)u;
        memcpy(p + f->offset, &v, sizeof(v));
      }
      break;
    case FIELD_U64:
      st = as_uint(value, where, JSON_UINT_MAX, command_index, &u, err);
      if (st == FDY_OK) {
        memcpy(p + f->offset, &u, sizeof(u));
      }
      break;
    case FIELD_F64: {
      double v = 0;
      st = as_double(value, where, command_index, &v, err);
      if (st == FDY_OK) {
        memcpy(p + f->offset, &v, sizeof(v));
      }
      break;
    }
    case FIELD_BOOL:
      if (!json_is_boolean(value)) {
        st = schema(err, where, command_index, "expected true or false");
      } else {
        bool v = json_is_true(value);
        memcpy(p + f->offset, &v, sizeof(v));
      }
      break;
    }
  }
  return st;
}

static const char *buffer_class_name(int cls) {
  return fdy_buffer_class_name((fdy_buffer_class)cls);
}

static const char *tensor_role_name(int role) {
  return fdy_tensor_role_name((fdy_tensor_role)role);
}

static const char *command_kind_name(int kind) {
  return fdy_command_kind_name((fdy_command_kind)kind);
}

/* A string member naming one of count enumerators. */
static fdy_status get_enum(const json_t *obj, const char *path, const char *key,
                           const char *(*name_of)(int), int count,
                           const char *what, int64_t command_index, int *out,
                           fdy_error *err) {
  char where[PATH_MAX_LEN];
  json_t *value;
  fdy_status st = member(obj, path, key, command_index, &value, where, err);
  if (st == FDY_OK && !json_is_string(value)) {
    st = schema(err, where, command_index, "expected a string");
  }
  if (st != FDY_OK) {
    return st;
  }
  const char *name = json_string_value(value);
  for (int i = 0; i < count; i++) {
    if (strcmp(name, name_of(i)) == 0) {
      *out = i;
      return FDY_OK;
    }
  }
  return schema(err, where, command_index, "unknown %s '%s'", what, name);
}

static fdy_status decode_buffers(const json_t *root, fdy_plan_buffer **out,
                                 uint32_t *count, fdy_error *err) {
  static const char *const keys[] = {"class", "bytes"};
  json_t *array;
  fdy_status st =
      get_array(root, "", "buffers", FDY_PLAN_MAX_BUFFERS, -1, &array, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t n = json_array_size(array);
  fdy_plan_buffer *buffers = calloc(n ? n : 1, sizeof(*buffers));
  if (buffers == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory decoding %zu plan buffers", n);
  }
  for (size_t i = 0; st == FDY_OK && i < n; i++) {
    char where[PATH_MAX_LEN], bytes_path[PATH_MAX_LEN];
    const json_t *b = json_array_get(array, i);
    int cls = 0;
    item(where, sizeof(where), "buffers", i);
    st = check_object(b, where, NULL, 0, keys, COUNT(keys), -1, err);
    if (st == FDY_OK) {
      st = get_enum(b, where, "class", buffer_class_name,
                    FDY_BUFFER_CLASS_COUNT, "buffer class", -1, &cls, err);
    }
    if (st == FDY_OK) {
      buffers[i].cls = (fdy_buffer_class)cls;
      st = get_uint(b, where, "bytes", JSON_UINT_MAX, -1, &buffers[i].bytes,
                    err);
    }
    if (st == FDY_OK && buffers[i].bytes == 0) {
      join(bytes_path, sizeof(bytes_path), where, "bytes");
      st = schema(err, bytes_path, -1, "a buffer has at least one byte");
    }
  }
  if (st != FDY_OK) {
    free(buffers);
    return st;
  }
  *out = buffers;
  *count = (uint32_t)n;
  return FDY_OK;
}

static fdy_status decode_shape(const json_t *t, const char *path,
                               fdy_shape *shape, fdy_error *err) {
  char base[PATH_MAX_LEN];
  json_t *dims;
  fdy_status st = get_array(t, path, "shape", FDY_MAX_RANK, -1, &dims, err);
  memset(shape, 0, sizeof(*shape));
  join(base, sizeof(base), path, "shape");
  shape->rank = (uint32_t)(st == FDY_OK ? json_array_size(dims) : 0);
  for (uint32_t d = 0; st == FDY_OK && d < shape->rank; d++) {
    char where[PATH_MAX_LEN];
    item(where, sizeof(where), base, d);
    st = as_uint(json_array_get(dims, d), where, JSON_UINT_MAX, -1,
                 &shape->dims[d], err);
  }
  return st;
}

static fdy_status decode_tensor(fdy_graph *graph, const json_t *t,
                                const char *path, fdy_error *err) {
  static const char *const keys[] = {"name", "role", "dtype", "shape"};
  static const char *const view_keys[] = {"name",  "role",   "dtype",
                                          "shape", "weight", "offset"};
  char where[PATH_MAX_LEN];
  const char *name = NULL;
  json_t *dtype_value;
  int role = 0;
  fdy_dtype dtype;
  fdy_shape shape;
  uint64_t weight = 0, offset = 0;
  fdy_status st =
      check_object(t, path, NULL, 0, view_keys, COUNT(view_keys), -1, err);
  if (st == FDY_OK) {
    st = get_string(t, path, "name", &name, err);
  }
  if (st == FDY_OK) {
    st = get_enum(t, path, "role", tensor_role_name, FDY_TENSOR_ROLE_COUNT,
                  "tensor role", -1, &role, err);
  }
  if (st == FDY_OK && role != FDY_TENSOR_WEIGHT_VIEW) {
    st = check_object(t, path, NULL, 0, keys, COUNT(keys), -1, err);
  }
  if (st == FDY_OK) {
    st = member(t, path, "dtype", -1, &dtype_value, where, err);
  }
  if (st == FDY_OK && (!json_is_string(dtype_value) ||
                       fdy_dtype_parse(json_string_value(dtype_value), &dtype,
                                       NULL) != FDY_OK)) {
    st = schema(err, where, -1, "expected a dtype name (\"F32\", \"U8\", ...)");
  }
  if (st == FDY_OK) {
    st = decode_shape(t, path, &shape, err);
  }
  if (st == FDY_OK && role == FDY_TENSOR_WEIGHT_VIEW) {
    st = get_uint(t, path, "weight", UINT32_MAX, -1, &weight, err);
    if (st == FDY_OK) {
      st = get_uint(t, path, "offset", JSON_UINT_MAX, -1, &offset, err);
    }
  }
  if (st != FDY_OK) {
    return st;
  }
  switch ((fdy_tensor_role)role) {
  case FDY_TENSOR_WEIGHT:
    st = fdy_graph_add_weight(graph, name, dtype, shape, NULL, 0, NULL, err);
    break;
  case FDY_TENSOR_INPUT:
    st = fdy_graph_add_input(graph, name, dtype, shape, NULL, err);
    break;
  case FDY_TENSOR_ACTIVATION:
    st = fdy_graph_add_activation(graph, name, dtype, shape, NULL, err);
    break;
  case FDY_TENSOR_WEIGHT_VIEW:
    st = fdy_graph_add_weight_view(graph, name,
                                   (fdy_tensor_id){(uint32_t)weight}, offset,
                                   dtype, shape, NULL, err);
    break;
  case FDY_TENSOR_STATE:
    st = fdy_graph_add_state(graph, name, dtype, shape, NULL, err);
    break;
  case FDY_TENSOR_ROLE_COUNT:
    break; /* get_enum refused it */
  }
  return st == FDY_OK ? FDY_OK : relabel(err, st, path, -1);
}

/* reads/writes: at most max tensor ids into ids. */
static fdy_status decode_ids(const json_t *o, const char *path, const char *key,
                             size_t max, fdy_tensor_id *ids, size_t *count,
                             fdy_error *err) {
  char base[PATH_MAX_LEN];
  json_t *array;
  fdy_status st = get_array(o, path, key, max, -1, &array, err);
  join(base, sizeof(base), path, key);
  *count = st == FDY_OK ? json_array_size(array) : 0;
  for (size_t i = 0; st == FDY_OK && i < *count; i++) {
    char where[PATH_MAX_LEN];
    uint64_t v = 0;
    item(where, sizeof(where), base, i);
    st = as_uint(json_array_get(array, i), where, UINT32_MAX, -1, &v, err);
    ids[i].v = (uint32_t)v;
  }
  return st;
}

static fdy_status decode_op(fdy_graph *graph, const json_t *o, const char *path,
                            fdy_error *err) {
  static const char *const keys[] = {"name", "kind", "params", "reads",
                                     "writes"};
  char where[PATH_MAX_LEN];
  fdy_tensor_id reads[FDY_OP_MAX_INPUTS], writes[FDY_OP_MAX_OUTPUTS];
  fdy_op_desc desc;
  json_t *kind, *params;
  memset(&desc, 0, sizeof(desc));
  fdy_status st = check_object(o, path, NULL, 0, keys, COUNT(keys), -1, err);
  if (st == FDY_OK) {
    st = get_string(o, path, "name", &desc.name, err);
  }
  if (st == FDY_OK) {
    st = member(o, path, "kind", -1, &kind, where, err);
  }
  if (st == FDY_OK && (!json_is_string(kind) ||
                       fdy_op_kind_parse(json_string_value(kind), &desc.kind,
                                         NULL) != FDY_OK)) {
    st = schema(err, where, -1, "expected an op kind name (\"rmsnorm\", ...)");
  }
  if (st == FDY_OK) {
    field fields[FDY_OP_MAX_PARAMS];
    size_t count = op_param_fields(desc.kind, fields);
    st = member(o, path, "params", -1, &params, where, err);
    if (st == FDY_OK) {
      st = check_object(params, where, fields, count, NULL, 0, -1, err);
    }
    if (st == FDY_OK) {
      st = get_fields(params, where, fields, count, &desc.params, -1, err);
    }
  }
  if (st == FDY_OK) {
    st = decode_ids(o, path, "reads", FDY_OP_MAX_INPUTS, reads,
                    &desc.read_count, err);
  }
  if (st == FDY_OK) {
    st = decode_ids(o, path, "writes", FDY_OP_MAX_OUTPUTS, writes,
                    &desc.write_count, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  desc.reads = reads;
  desc.writes = writes;
  st = fdy_graph_add_op(graph, &desc, NULL, err);
  return st == FDY_OK ? FDY_OK : relabel(err, st, path, -1);
}

static fdy_status decode_graph(const json_t *root, fdy_graph **out,
                               fdy_error *err) {
  static const char *const keys[] = {"name", "tensors", "ops"};
  char where[PATH_MAX_LEN];
  const char *name = NULL;
  json_t *g, *tensors = NULL, *ops = NULL;
  fdy_graph *graph = NULL;
  fdy_status st = member(root, "", "graph", -1, &g, where, err);
  if (st == FDY_OK) {
    st = check_object(g, "graph", NULL, 0, keys, COUNT(keys), -1, err);
  }
  if (st == FDY_OK) {
    st = get_string(g, "graph", "name", &name, err);
  }
  if (st == FDY_OK) {
    st = get_array(g, "graph", "tensors", UINT32_MAX, -1, &tensors, err);
  }
  if (st == FDY_OK) {
    st = get_array(g, "graph", "ops", UINT32_MAX, -1, &ops, err);
  }
  if (st == FDY_OK) {
    st = fdy_graph_create(name, &graph, err);
  }
  for (size_t i = 0; st == FDY_OK && i < json_array_size(tensors); i++) {
    item(where, sizeof(where), "graph.tensors", i);
    st = decode_tensor(graph, json_array_get(tensors, i), where, err);
  }
  for (size_t i = 0; st == FDY_OK && i < json_array_size(ops); i++) {
    item(where, sizeof(where), "graph.ops", i);
    st = decode_op(graph, json_array_get(ops, i), where, err);
  }
  if (st == FDY_OK) {
    *out = graph;
    graph = NULL;
  }
  fdy_graph_destroy(graph);
  return st;
}

static fdy_status decode_placements(const json_t *root, fdy_plan *plan,
                                    fdy_error *err) {
  static const char *const keys[] = {"tensor"};
  size_t tensors = fdy_graph_tensor_count(plan->graph);
  json_t *array;
  fdy_status st = get_array(root, "", "placements", tensors, -1, &array, err);
  for (size_t i = 0; st == FDY_OK && i < json_array_size(array); i++) {
    char where[PATH_MAX_LEN], field_path[PATH_MAX_LEN];
    const json_t *o = json_array_get(array, i);
    fdy_placement p = {{0}, 0};
    uint64_t tensor = 0;
    item(where, sizeof(where), "placements", i);
    st = check_object(o, where, placement_fields, COUNT(placement_fields), keys,
                      COUNT(keys), -1, err);
    if (st == FDY_OK) {
      st = get_uint(o, where, "tensor", tensors - 1, -1, &tensor, err);
    }
    if (st == FDY_OK && plan->placements[tensor].buffer.v != FDY_NO_BUFFER) {
      join(field_path, sizeof(field_path), where, "tensor");
      st = schema(err, field_path, -1, "tensor %" PRIu64 " is placed twice",
                  tensor);
    }
    if (st == FDY_OK) {
      st = get_fields(o, where, placement_fields, COUNT(placement_fields), &p,
                      -1, err);
    }
    if (st == FDY_OK && p.buffer.v == FDY_NO_BUFFER) {
      join(field_path, sizeof(field_path), where, "buffer");
      st = schema(err, field_path, -1, "%u is outside 0..%u", FDY_NO_BUFFER,
                  FDY_NO_BUFFER - 1);
    }
    if (st == FDY_OK) {
      st = fdy_plan_place(plan, (fdy_tensor_id){(uint32_t)tensor}, p, err);
    }
  }
  return st;
}

static fdy_status decode_bindings(const json_t *c, const char *path,
                                  int64_t index, fdy_command *cmd,
                                  fdy_error *err) {
  char base[PATH_MAX_LEN];
  json_t *array;
  fdy_status st =
      get_array(c, path, "bindings", FDY_MAX_BINDINGS, index, &array, err);
  join(base, sizeof(base), path, "bindings");
  cmd->u.launch.binding_count =
      st == FDY_OK ? (uint32_t)json_array_size(array) : 0;
  for (uint32_t i = 0; st == FDY_OK && i < cmd->u.launch.binding_count; i++) {
    char where[PATH_MAX_LEN];
    const json_t *b = json_array_get(array, i);
    item(where, sizeof(where), base, i);
    st = check_object(b, where, binding_fields, COUNT(binding_fields), NULL, 0,
                      index, err);
    if (st == FDY_OK) {
      st = get_fields(b, where, binding_fields, COUNT(binding_fields),
                      &cmd->u.launch.bindings[i], index, err);
    }
  }
  return st;
}

static fdy_status decode_wait(const json_t *c, const char *path, int64_t index,
                              fdy_command *cmd, fdy_error *err) {
  char where[PATH_MAX_LEN];
  json_t *host = json_object_get(c, "host");
  json_t *stream = json_object_get(c, "stream");
  if ((host == NULL) == (stream == NULL)) {
    return schema(err, path, index,
                  "a wait has exactly one of \"host\": true and \"stream\"");
  }
  if (host != NULL) {
    join(where, sizeof(where), path, "host");
    if (!json_is_true(host)) {
      return schema(err, where, index,
                    "expected true (a stream wait names \"stream\")");
    }
    cmd->u.wait.host = true;
    return FDY_OK;
  }
  uint64_t v = 0;
  fdy_status st = get_uint(c, path, "stream", UINT32_MAX, index, &v, err);
  cmd->u.wait.stream.v = (uint32_t)v;
  return st;
}

static fdy_status decode_command(const json_t *c, const char *path,
                                 int64_t index, fdy_command *cmd,
                                 fdy_error *err) {
  static const char *const kind_key[] = {"kind"};
  static const char *const wait_keys[] = {"kind", "host", "stream"};
  static const char *const launch_keys[] = {"kind", "bindings"};
  int kind = 0;
  memset(cmd, 0, sizeof(*cmd));
  if (!json_is_object(c)) {
    return schema(err, path, index, "expected an object");
  }
  fdy_status st =
      get_enum(c, path, "kind", command_kind_name, FDY_CMD_KIND_COUNT,
               "command kind", index, &kind, err);
  if (st != FDY_OK) {
    return st;
  }
  cmd->kind = (fdy_command_kind)kind;
  const field_table *table = &command_fields[kind];
  const char *const *extra = kind_key;
  size_t extra_count = COUNT(kind_key);
  if (kind == FDY_CMD_WAIT) {
    extra = wait_keys;
    extra_count = COUNT(wait_keys);
  } else if (kind == FDY_CMD_LAUNCH) {
    extra = launch_keys;
    extra_count = COUNT(launch_keys);
  }
  st = check_object(c, path, table->fields, table->count, extra, extra_count,
                    index, err);
  if (st == FDY_OK) {
    st = get_fields(c, path, table->fields, table->count, cmd, index, err);
  }
  if (st == FDY_OK && kind == FDY_CMD_WAIT) {
    st = decode_wait(c, path, index, cmd, err);
  }
  if (st == FDY_OK && kind == FDY_CMD_LAUNCH) {
    st = decode_bindings(c, path, index, cmd, err);
  }
  return st;
}

static fdy_status decode_section(const json_t *o, size_t s, fdy_plan *plan,
                                 fdy_error *err) {
  static const char *const keys[] = {"name", "commands"};
  char path[PATH_MAX_LEN], where[PATH_MAX_LEN], base[PATH_MAX_LEN];
  const char *name = NULL;
  json_t *commands;
  item(path, sizeof(path), "sections", s);
  fdy_status st = check_object(o, path, NULL, 0, keys, COUNT(keys), -1, err);
  if (st == FDY_OK) {
    st = get_string(o, path, "name", &name, err);
  }
  if (st == FDY_OK) {
    st = get_array(o, path, "commands", SIZE_MAX, -1, &commands, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  join(where, sizeof(where), path, "name");
  if (s == 0 && strcmp(name, "setup") != 0) {
    return schema(err, where, -1, "the first section is \"setup\", not '%s'",
                  name);
  }
  if (s > 0) {
    st = fdy_plan_begin_section(plan, name, err);
    if (st != FDY_OK) {
      return schema(err, where, -1,
                    "'%s' is not a section name (1 to %d characters of a-z, "
                    "0-9 and _)",
                    name, FDY_PLAN_NAME_MAX - 1);
    }
  }
  join(base, sizeof(base), path, "commands");
  for (size_t i = 0; st == FDY_OK && i < json_array_size(commands); i++) {
    int64_t index = (int64_t)plan->command_count;
    fdy_command cmd;
    item(where, sizeof(where), base, i);
    st = decode_command(json_array_get(commands, i), where, index, &cmd, err);
    if (st == FDY_OK) {
      st = fdy_plan_append(plan, &cmd, err);
      if (st != FDY_OK) {
        st = relabel(err, st, where, index);
      }
    }
  }
  return st;
}

static fdy_status decode_sections(const json_t *root, fdy_plan *plan,
                                  fdy_error *err) {
  json_t *array;
  fdy_status st =
      get_array(root, "", "sections", FDY_PLAN_MAX_SECTIONS, -1, &array, err);
  if (st == FDY_OK && json_array_size(array) == 0) {
    st = schema(err, "sections", -1, "a plan has at least a setup section");
  }
  for (size_t s = 0; st == FDY_OK && s < json_array_size(array); s++) {
    st = decode_section(json_array_get(array, s), s, plan, err);
  }
  return st;
}

/* format first, then version: a document of another format or version is
 * reported as such whatever else it holds. */
static fdy_status check_format_version(const json_t *root, fdy_error *err) {
  json_t *format = json_object_get(root, "format");
  if (format == NULL || !json_is_string(format) ||
      strcmp(json_string_value(format), FDY_PLAN_FORMAT) != 0) {
    return schema(err, "format", -1, "expected \"%s\"", FDY_PLAN_FORMAT);
  }
  json_t *version = json_object_get(root, "version");
  if (version == NULL || !json_is_integer(version)) {
    return schema(err, "version", -1, "expected an integer version");
  }
  json_int_t found = json_integer_value(version);
  if (found != FDY_PLAN_VERSION) {
    fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                  "plan JSON: version %lld is not supported: this build reads "
                  "version %d (re-create the plan with this build)",
                  (long long)found, FDY_PLAN_VERSION);
    locate(err, "version", -1);
    if (err != NULL) {
      err->expected = FDY_PLAN_VERSION;
      err->actual = found < 0 ? 0 : (uint64_t)found;
    }
    return FDY_ERR_UNSUPPORTED;
  }
  return FDY_OK;
}

/* A NUL byte is never part of a plan; jansson would accept one right after
 * a number. */
static fdy_status decode_plan(const json_t *root, fdy_plan **out,
                              fdy_error *err) {
  static const char *const keys[] = {"format",  "version",    "budget_bytes",
                                     "streams", "events",     "buffers",
                                     "graph",   "placements", "sections"};
  uint64_t budget = 0, streams = 0, events = 0;
  fdy_plan_buffer *buffers = NULL;
  uint32_t buffer_count = 0;
  fdy_graph *graph = NULL;
  fdy_plan *plan = NULL;
  fdy_status st = check_object(root, "", NULL, 0, keys, COUNT(keys), -1, err);
  if (st == FDY_OK) {
    st = get_uint(root, "", "budget_bytes", JSON_UINT_MAX, -1, &budget, err);
  }
  if (st == FDY_OK) {
    st = get_uint(root, "", "streams", FDY_PLAN_MAX_STREAMS, -1, &streams, err);
  }
  if (st == FDY_OK && streams == 0) {
    st = schema(err, "streams", -1, "a plan has at least one stream");
  }
  if (st == FDY_OK) {
    st = get_uint(root, "", "events", FDY_PLAN_MAX_EVENTS, -1, &events, err);
  }
  if (st == FDY_OK) {
    st = decode_buffers(root, &buffers, &buffer_count, err);
  }
  if (st == FDY_OK) {
    st = decode_graph(root, &graph, err);
  }
  if (st == FDY_OK) {
    st = fdy_plan_create(graph, budget, (uint32_t)streams, buffers,
                         buffer_count, (uint32_t)events, &plan, err);
  }
  if (st == FDY_OK) {
    st = decode_placements(root, plan, err);
  }
  if (st == FDY_OK) {
    st = decode_sections(root, plan, err);
  }
  if (st == FDY_OK) {
    *out = plan;
    plan = NULL;
  }
  fdy_plan_destroy(plan);
  fdy_graph_destroy(graph);
  free(buffers);
  return st;
}

fdy_status fdy_plan_from_json(const char *text, size_t length, fdy_plan **out,
                              fdy_error *err) {
  json_error_t jerr;
  if (out == NULL || (text == NULL && length > 0)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan decoding needs text and an output pointer");
  }
  *out = NULL;
  if (fdy_json_check_text(text, length, err) != FDY_OK) {
    fdy_error_prefix(err, "plan JSON");
    return FDY_ERR_PARSE;
  }
  fdy_status st = FDY_OK;
  json_t *root = json_loadb(text == NULL ? "" : text, length,
                            JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL) {
    st = fdy_error_set(err, FDY_ERR_PARSE, "plan JSON: line %d, column %d: %s",
                       jerr.line, jerr.column, jerr.text);
    if (err != NULL) {
      err->line = jerr.line;
      err->column = jerr.column;
    }
    return st;
  }
  if (!json_is_object(root)) {
    st = schema(err, "$", -1, "the document is not a JSON object");
  }
  if (st == FDY_OK) {
    st = check_format_version(root, err);
  }
  if (st == FDY_OK) {
    st = decode_plan(root, out, err);
  }
  json_decref(root);
  return st;
}
