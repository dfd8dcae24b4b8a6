/* Plan JSON: a versioned, self-describing document (format, version, the
 * graph's structure and fingerprint, budget, table sizes, commands) with a
 * deterministic encoder and a strict decoder. The decoder rejects unknown
 * fields, wrong types, negative or out-of-range integers and unknown command
 * kinds with the JSON path of the offending value in err->name. The format is
 * documented in docs/plan-format.md. */
#include "plan_internal.h"

#include "foundry/input.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_JSON_INT ((uint64_t)INT64_MAX)

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

/* JSON path of member `key` of the value at `path` ("$" is the root). */
static void join(char *dst, size_t cap, const char *path, const char *key) {
  if (path[0] == '\0' || strcmp(path, "$") == 0) {
    concat(dst, cap, key, "", "");
  } else {
    concat(dst, cap, path, ".", key);
  }
}

/* JSON path of element i of the array at `path`. */
static void item(char *dst, size_t cap, const char *path, size_t i) {
  char index[32];
  snprintf(index, sizeof(index), "[%zu]", i);
  concat(dst, cap, path, index, "");
}

/* ---- encoding ------------------------------------------------------------ */

/* jansson integers are signed 64-bit: bigger values cannot be written. */
static fdy_status put_u64(json_t *obj, const char *key, uint64_t value,
                          const char *where, fdy_error *err) {
  if (value > MAX_JSON_INT) {
    char path[FDY_ERROR_NAME_MAX];
    join(path, sizeof(path), where, key);
    fdy_status st = fdy_error_set(
        err, FDY_ERR_UNSUPPORTED,
        "%s = %llu does not fit a JSON integer (at most 2^63 - 1)", path,
        (unsigned long long)value);
    if (err != NULL) {
      snprintf(err->name, sizeof(err->name), "%s", path);
    }
    return st;
  }
  if (json_object_set_new(obj, key, json_integer((json_int_t)value)) != 0) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory encoding a plan");
  }
  return FDY_OK;
}

static fdy_status oom(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                       "out of memory encoding a plan");
}

static fdy_status append_new(json_t *array, json_t *value, fdy_error *err) {
  if (value == NULL || json_array_append_new(array, value) != 0) {
    return oom(err);
  }
  return FDY_OK;
}

static fdy_status set_new(json_t *obj, const char *key, json_t *value,
                          fdy_error *err) {
  if (value == NULL || json_object_set_new(obj, key, value) != 0) {
    return oom(err);
  }
  return FDY_OK;
}

static fdy_status ids_array(const fdy_tensor_id *ids, size_t count,
                            json_t **out, fdy_error *err) {
  json_t *array = json_array();
  if (array == NULL) {
    return oom(err);
  }
  for (size_t i = 0; i < count; i++) {
    if (json_array_append_new(array, json_integer(ids[i].v)) != 0) {
      json_decref(array);
      return oom(err);
    }
  }
  *out = array;
  return FDY_OK;
}

static fdy_status encode_graph(const fdy_graph *graph, json_t **out,
                               fdy_error *err) {
  json_t *g = json_object();
  json_t *tensors = json_array();
  json_t *ops = json_array();
  fdy_status st = FDY_OK;
  char fingerprint[17];
  char where[64];
  if (g == NULL || tensors == NULL || ops == NULL) {
    st = oom(err);
    goto cleanup;
  }
  snprintf(fingerprint, sizeof(fingerprint), "%016" PRIx64,
           fdy_graph_fingerprint(graph));
  st = set_new(g, "name", json_string(fdy_graph_name(graph)), err);
  if (st == FDY_OK) {
    st = set_new(g, "fingerprint", json_string(fingerprint), err);
  }
  for (size_t i = 0; st == FDY_OK && i < fdy_graph_tensor_count(graph); i++) {
    fdy_tensor_info info;
    json_t *shape = NULL;
    st = fdy_graph_tensor(graph, (fdy_tensor_id){(uint32_t)i}, &info, err);
    if (st != FDY_OK) {
      break;
    }
    json_t *t = json_pack("{s:s, s:s, s:s}", "name", info.name, "role",
                          fdy_tensor_role_name(info.role), "dtype",
                          fdy_dtype_name(info.dtype));
    shape = json_array();
    if (t == NULL || shape == NULL) {
      json_decref(t);
      json_decref(shape);
      st = oom(err);
      break;
    }
    for (uint32_t d = 0; d < info.shape.rank; d++) {
      if (info.shape.dims[d] > MAX_JSON_INT) {
        st = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                           "a dimension of tensor '%s' does not fit a JSON "
                           "integer",
                           info.name);
        break;
      }
      if (json_array_append_new(
              shape, json_integer((json_int_t)info.shape.dims[d])) != 0) {
        st = oom(err);
        break;
      }
    }
    if (st == FDY_OK) {
      st = set_new(t, "shape", shape, err);
      shape = NULL;
    }
    json_decref(shape);
    if (st == FDY_OK) {
      st = append_new(tensors, t, err);
    } else {
      json_decref(t);
    }
  }
  for (size_t i = 0; st == FDY_OK && i < fdy_graph_op_count(graph); i++) {
    fdy_op_info info;
    json_t *reads = NULL, *writes = NULL;
    st = fdy_graph_op(graph, (fdy_op_id){(uint32_t)i}, &info, err);
    if (st != FDY_OK) {
      break;
    }
    json_t *o = json_pack("{s:s, s:s}", "name", info.name, "kind", info.kind);
    if (o == NULL) {
      st = oom(err);
      break;
    }
    snprintf(where, sizeof(where), "graph.ops[%zu]", i);
    st = put_u64(o, "param", info.param, where, err);
    if (st == FDY_OK) {
      st = ids_array(info.reads, info.read_count, &reads, err);
    }
    if (st == FDY_OK) {
      st = set_new(o, "reads", reads, err);
    }
    if (st == FDY_OK) {
      st = ids_array(info.writes, info.write_count, &writes, err);
    }
    if (st == FDY_OK) {
      st = set_new(o, "writes", writes, err);
    }
    if (st == FDY_OK) {
      st = append_new(ops, o, err);
    } else {
      json_decref(o);
    }
  }
  if (st == FDY_OK) {
    st = set_new(g, "tensors", tensors, err);
    tensors = NULL;
  }
  if (st == FDY_OK) {
    st = set_new(g, "ops", ops, err);
    ops = NULL;
  }
  if (st == FDY_OK) {
    *out = g;
    g = NULL;
  }
cleanup:
  json_decref(g);
  json_decref(tensors);
  json_decref(ops);
  return st;
}

static json_t *encode_command(const fdy_command *c, size_t index,
                              fdy_status *st, fdy_error *err) {
  json_t *o = NULL;
  char where[64];
  switch (c->kind) {
  case FDY_CMD_ALLOCATE:
    o = json_pack("{s:s, s:I}", "kind", "allocate", "slot",
                  (json_int_t)c->u.allocate.slot.v);
    if (o != NULL) {
      snprintf(where, sizeof(where), "commands[%zu]", index);
      *st = put_u64(o, "bytes", c->u.allocate.bytes, where, err);
      if (*st != FDY_OK) {
        json_decref(o);
        return NULL;
      }
    }
    break;
  case FDY_CMD_PREFETCH:
    o = json_pack("{s:s, s:I, s:I, s:I, s:I}", "kind", "prefetch", "weight",
                  (json_int_t)c->u.prefetch.weight.v, "slot",
                  (json_int_t)c->u.prefetch.slot.v, "stream",
                  (json_int_t)c->u.prefetch.stream.v, "signal",
                  (json_int_t)c->u.prefetch.signal.v);
    break;
  case FDY_CMD_WAIT:
    if (c->u.wait.host) {
      o = json_pack("{s:s, s:I, s:b}", "kind", "wait", "event",
                    (json_int_t)c->u.wait.event.v, "host", 1);
    } else {
      o = json_pack("{s:s, s:I, s:I}", "kind", "wait", "event",
                    (json_int_t)c->u.wait.event.v, "stream",
                    (json_int_t)c->u.wait.stream.v);
    }
    break;
  case FDY_CMD_LAUNCH: {
    json_t *bindings = json_array();
    if (bindings == NULL) {
      break;
    }
    for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
      if (json_array_append_new(
              bindings,
              json_pack("{s:I, s:I}", "weight",
                        (json_int_t)c->u.launch.bindings[i].weight.v, "slot",
                        (json_int_t)c->u.launch.bindings[i].slot.v)) != 0) {
        json_decref(bindings);
        bindings = NULL;
        break;
      }
    }
    if (bindings == NULL) {
      break;
    }
    o = json_pack("{s:s, s:I, s:I, s:I, s:o}", "kind", "launch", "op",
                  (json_int_t)c->u.launch.op.v, "stream",
                  (json_int_t)c->u.launch.stream.v, "signal",
                  (json_int_t)c->u.launch.signal.v, "bindings", bindings);
    break;
  }
  case FDY_CMD_RELEASE:
    o = json_pack("{s:s, s:I}", "kind", "release", "slot",
                  (json_int_t)c->u.release.slot.v);
    break;
  }
  if (o == NULL) {
    *st = oom(err);
  }
  return o;
}

fdy_status fdy_plan_to_json(const fdy_plan *plan, char **out, fdy_error *err) {
  json_t *root = NULL;
  json_t *graph = NULL;
  json_t *commands = NULL;
  fdy_status st = FDY_OK;
  if (plan == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan encoding needs a plan and an output pointer");
  }
  *out = NULL;
  root = json_pack("{s:s, s:i}", "format", FDY_PLAN_FORMAT, "version",
                   FDY_PLAN_VERSION);
  commands = json_array();
  if (root == NULL || commands == NULL) {
    st = oom(err);
    goto cleanup;
  }
  st = encode_graph(plan->graph, &graph, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  st = set_new(root, "graph", graph, err);
  graph = NULL;
  if (st == FDY_OK) {
    st = put_u64(root, "budget_bytes", plan->budget_bytes, "$", err);
  }
  if (st == FDY_OK) {
    st = put_u64(root, "streams", plan->stream_count, "$", err);
  }
  if (st == FDY_OK) {
    st = put_u64(root, "slots", plan->slot_count, "$", err);
  }
  if (st == FDY_OK) {
    st = put_u64(root, "events", plan->event_count, "$", err);
  }
  for (size_t i = 0; st == FDY_OK && i < plan->command_count; i++) {
    json_t *c = encode_command(&plan->commands[i], i, &st, err);
    if (c != NULL) {
      st = append_new(commands, c, err);
    }
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  st = set_new(root, "commands", commands, err);
  commands = NULL;
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = json_dumps(root, JSON_INDENT(2));
  if (*out == NULL) {
    st = oom(err);
  }
cleanup:
  json_decref(root);
  json_decref(graph);
  json_decref(commands);
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
  if (err != NULL) {
    snprintf(err->name, sizeof(err->name), "%s", path);
    err->command_index = command_index;
  }
  return FDY_ERR_SCHEMA;
}

static fdy_status check_keys(const json_t *obj, const char *path,
                             const char *const *allowed, size_t n,
                             int64_t command_index, fdy_error *err) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)obj, key, value) {
    bool known = false;
    for (size_t i = 0; i < n && !known; i++) {
      known = strcmp(key, allowed[i]) == 0;
    }
    if (!known) {
      char where[FDY_ERROR_NAME_MAX];
      join(where, sizeof(where), path, key);
      return schema(err, where, command_index, "unknown field");
    }
  }
  return FDY_OK;
}

static fdy_status get_field(const json_t *obj, const char *path,
                            const char *key, int64_t command_index,
                            json_t **out, fdy_error *err) {
  *out = json_object_get(obj, key);
  if (*out == NULL) {
    char where[FDY_ERROR_NAME_MAX];
    join(where, sizeof(where), path, key);
    return schema(err, where, command_index, "missing field");
  }
  return FDY_OK;
}

static fdy_status as_u64(const json_t *value, const char *where, uint64_t max,
                         int64_t command_index, uint64_t *out, fdy_error *err) {
  if (!json_is_integer(value)) {
    return schema(err, where, command_index, "expected an integer");
  }
  json_int_t v = json_integer_value(value);
  if (v < 0) {
    return schema(err, where, command_index, "negative integer %lld",
                  (long long)v);
  }
  if ((uint64_t)v > max) {
    return schema(err, where, command_index,
                  "integer %lld is out of range (at most %llu)", (long long)v,
                  (unsigned long long)max);
  }
  *out = (uint64_t)v;
  return FDY_OK;
}

static fdy_status get_u64(const json_t *obj, const char *path, const char *key,
                          uint64_t max, int64_t command_index, uint64_t *out,
                          fdy_error *err) {
  json_t *value;
  char where[FDY_ERROR_NAME_MAX];
  fdy_status st = get_field(obj, path, key, command_index, &value, err);
  if (st != FDY_OK) {
    return st;
  }
  join(where, sizeof(where), path, key);
  return as_u64(value, where, max, command_index, out, err);
}

static fdy_status get_u32(const json_t *obj, const char *path, const char *key,
                          int64_t command_index, uint32_t *out,
                          fdy_error *err) {
  uint64_t v = 0;
  fdy_status st = get_u64(obj, path, key, UINT32_MAX, command_index, &v, err);
  if (st == FDY_OK) {
    *out = (uint32_t)v;
  }
  return st;
}

static fdy_status get_string(const json_t *obj, const char *path,
                             const char *key, const char **out,
                             fdy_error *err) {
  json_t *value;
  fdy_status st = get_field(obj, path, key, -1, &value, err);
  if (st != FDY_OK) {
    return st;
  }
  if (!json_is_string(value)) {
    char where[FDY_ERROR_NAME_MAX];
    join(where, sizeof(where), path, key);
    return schema(err, where, -1, "expected a string");
  }
  *out = json_string_value(value);
  return FDY_OK;
}

static fdy_status get_array(const json_t *obj, const char *path,
                            const char *key, int64_t command_index,
                            json_t **out, fdy_error *err) {
  fdy_status st = get_field(obj, path, key, command_index, out, err);
  if (st == FDY_OK && !json_is_array(*out)) {
    char where[FDY_ERROR_NAME_MAX];
    join(where, sizeof(where), path, key);
    return schema(err, where, command_index, "expected an array");
  }
  return st;
}

static fdy_status expect_object(const json_t *value, const char *where,
                                int64_t command_index, fdy_error *err) {
  if (!json_is_object(value)) {
    return schema(err, where, command_index, "expected an object");
  }
  return FDY_OK;
}

/* Re-labels an error from a graph mutator with the JSON path it came from. */
static fdy_status graph_error(fdy_error *err, const char *where,
                              fdy_status st) {
  if (err != NULL) {
    fdy_error_prefix(err, "plan JSON: %s", where);
    snprintf(err->name, sizeof(err->name), "%s", where);
  }
  return st;
}

static fdy_status decode_ids(const json_t *obj, const char *path,
                             const char *key, fdy_tensor_id **out,
                             size_t *count, fdy_error *err) {
  json_t *array;
  char base[FDY_ERROR_NAME_MAX];
  fdy_status st = get_array(obj, path, key, -1, &array, err);
  if (st != FDY_OK) {
    return st;
  }
  join(base, sizeof(base), path, key);
  size_t n = json_array_size(array);
  fdy_tensor_id *ids = calloc(n + 1, sizeof(*ids));
  if (ids == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory decoding a plan");
  }
  for (size_t i = 0; i < n; i++) {
    char where[FDY_ERROR_NAME_MAX];
    uint64_t v = 0;
    item(where, sizeof(where), base, i);
    st = as_u64(json_array_get(array, i), where, UINT32_MAX, -1, &v, err);
    if (st != FDY_OK) {
      free(ids);
      return st;
    }
    ids[i].v = (uint32_t)v;
  }
  *out = ids;
  *count = n;
  return FDY_OK;
}

static fdy_status decode_tensor(fdy_graph *graph, const json_t *t,
                                const char *where, fdy_error *err) {
  static const char *const keys[] = {"name", "role", "dtype", "shape"};
  const char *name, *role, *dtype_name;
  json_t *dims;
  fdy_dtype dtype;
  fdy_tensor_id id;
  fdy_status st = expect_object(t, where, -1, err);
  if (st == FDY_OK) {
    st = check_keys(t, where, keys, 4, -1, err);
  }
  if (st == FDY_OK) {
    st = get_string(t, where, "name", &name, err);
  }
  if (st == FDY_OK) {
    st = get_string(t, where, "role", &role, err);
  }
  if (st == FDY_OK) {
    st = get_string(t, where, "dtype", &dtype_name, err);
  }
  if (st == FDY_OK) {
    st = get_array(t, where, "shape", -1, &dims, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  char field[FDY_ERROR_NAME_MAX];
  join(field, sizeof(field), where, "dtype");
  if (fdy_dtype_parse(dtype_name, &dtype, NULL) != FDY_OK) {
    return schema(err, field, -1, "unknown dtype '%s'", dtype_name);
  }
  join(field, sizeof(field), where, "shape");
  if (json_array_size(dims) > FDY_MAX_RANK) {
    return schema(err, field, -1, "rank %zu is above %d", json_array_size(dims),
                  FDY_MAX_RANK);
  }
  fdy_shape shape;
  memset(&shape, 0, sizeof(shape));
  shape.rank = (uint32_t)json_array_size(dims);
  for (uint32_t d = 0; d < shape.rank; d++) {
    char dim[FDY_ERROR_NAME_MAX];
    item(dim, sizeof(dim), field, d);
    st = as_u64(json_array_get(dims, d), dim, MAX_JSON_INT, -1, &shape.dims[d],
                err);
    if (st != FDY_OK) {
      return st;
    }
  }
  if (strcmp(role, "weight") == 0) {
    st = fdy_graph_add_weight(graph, name, dtype, shape, NULL, 0, &id, err);
  } else if (strcmp(role, "input") == 0) {
    st = fdy_graph_add_input(graph, name, dtype, shape, &id, err);
  } else if (strcmp(role, "activation") == 0) {
    st = fdy_graph_add_activation(graph, name, dtype, shape, &id, err);
  } else {
    join(field, sizeof(field), where, "role");
    return schema(err, field, -1, "unknown role '%s'", role);
  }
  return st == FDY_OK ? FDY_OK : graph_error(err, where, st);
}

static fdy_status decode_op(fdy_graph *graph, const json_t *o,
                            const char *where, fdy_error *err) {
  static const char *const keys[] = {"name", "kind", "param", "reads",
                                     "writes"};
  fdy_op_desc desc;
  fdy_tensor_id *reads = NULL, *writes = NULL;
  fdy_op_id id;
  memset(&desc, 0, sizeof(desc));
  fdy_status st = expect_object(o, where, -1, err);
  if (st == FDY_OK) {
    st = check_keys(o, where, keys, 5, -1, err);
  }
  if (st == FDY_OK) {
    st = get_string(o, where, "name", &desc.name, err);
  }
  if (st == FDY_OK) {
    st = get_string(o, where, "kind", &desc.kind, err);
  }
  if (st == FDY_OK) {
    st = get_u64(o, where, "param", MAX_JSON_INT, -1, &desc.param, err);
  }
  if (st == FDY_OK) {
    st = decode_ids(o, where, "reads", &reads, &desc.read_count, err);
  }
  if (st == FDY_OK) {
    st = decode_ids(o, where, "writes", &writes, &desc.write_count, err);
  }
  if (st == FDY_OK) {
    desc.reads = reads;
    desc.writes = writes;
    st = fdy_graph_add_op(graph, &desc, &id, err);
    if (st != FDY_OK) {
      st = graph_error(err, where, st);
    }
  }
  free(reads);
  free(writes);
  return st;
}

static fdy_status decode_graph(const json_t *g, fdy_graph **out,
                               fdy_error *err) {
  static const char *const keys[] = {"name", "fingerprint", "tensors", "ops"};
  const char *name, *fingerprint;
  json_t *tensors, *ops;
  fdy_graph *graph = NULL;
  char where[FDY_ERROR_NAME_MAX];
  fdy_status st = expect_object(g, "graph", -1, err);
  if (st == FDY_OK) {
    st = check_keys(g, "graph", keys, 4, -1, err);
  }
  if (st == FDY_OK) {
    st = get_string(g, "graph", "name", &name, err);
  }
  if (st == FDY_OK) {
    st = get_string(g, "graph", "fingerprint", &fingerprint, err);
  }
  if (st == FDY_OK) {
    st = get_array(g, "graph", "tensors", -1, &tensors, err);
  }
  if (st == FDY_OK) {
    st = get_array(g, "graph", "ops", -1, &ops, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  uint64_t declared = 0;
  bool hex = strlen(fingerprint) == 16;
  for (size_t i = 0; hex && i < 16; i++) {
    char ch = fingerprint[i];
    int digit = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                         : -1;
    hex = digit >= 0;
    declared = declared << 4 | (uint64_t)(digit < 0 ? 0 : digit);
  }
  if (!hex) {
    return schema(err, "graph.fingerprint", -1,
                  "expected 16 lowercase hex digits");
  }
  st = fdy_graph_create(name, &graph, err);
  if (st != FDY_OK) {
    return graph_error(err, "graph.name", st);
  }
  for (size_t i = 0; st == FDY_OK && i < json_array_size(tensors); i++) {
    snprintf(where, sizeof(where), "graph.tensors[%zu]", i);
    st = decode_tensor(graph, json_array_get(tensors, i), where, err);
  }
  for (size_t i = 0; st == FDY_OK && i < json_array_size(ops); i++) {
    snprintf(where, sizeof(where), "graph.ops[%zu]", i);
    st = decode_op(graph, json_array_get(ops, i), where, err);
  }
  if (st == FDY_OK) {
    uint64_t actual = fdy_graph_fingerprint(graph);
    if (actual != declared) {
      st = schema(err, "graph.fingerprint", -1,
                  "declared fingerprint %s does not match the graph's "
                  "structure (%016" PRIx64 ")",
                  fingerprint, actual);
      if (err != NULL) {
        err->expected = declared;
        err->actual = actual;
      }
    }
  }
  if (st == FDY_OK) {
    *out = graph;
    graph = NULL;
  }
  fdy_graph_destroy(graph);
  return st;
}

static fdy_status decode_bindings(const json_t *c, const char *where,
                                  int64_t index, fdy_command *cmd,
                                  fdy_error *err) {
  static const char *const keys[] = {"weight", "slot"};
  json_t *array;
  char base[FDY_ERROR_NAME_MAX];
  fdy_status st = get_array(c, where, "bindings", index, &array, err);
  if (st != FDY_OK) {
    return st;
  }
  join(base, sizeof(base), where, "bindings");
  if (json_array_size(array) > FDY_MAX_BINDINGS) {
    return schema(err, base, index, "%zu bindings, at most %d",
                  json_array_size(array), FDY_MAX_BINDINGS);
  }
  cmd->u.launch.binding_count = (uint32_t)json_array_size(array);
  for (uint32_t i = 0; i < cmd->u.launch.binding_count; i++) {
    char at[FDY_ERROR_NAME_MAX];
    json_t *b = json_array_get(array, i);
    item(at, sizeof(at), base, i);
    st = expect_object(b, at, index, err);
    if (st == FDY_OK) {
      st = check_keys(b, at, keys, 2, index, err);
    }
    if (st == FDY_OK) {
      st = get_u32(b, at, "weight", index, &cmd->u.launch.bindings[i].weight.v,
                   err);
    }
    if (st == FDY_OK) {
      st =
          get_u32(b, at, "slot", index, &cmd->u.launch.bindings[i].slot.v, err);
    }
    if (st != FDY_OK) {
      return st;
    }
  }
  return FDY_OK;
}

static fdy_status decode_command(const json_t *c, size_t i, fdy_command *cmd,
                                 fdy_error *err) {
  static const char *const allocate_keys[] = {"kind", "slot", "bytes"};
  static const char *const prefetch_keys[] = {"kind", "weight", "slot",
                                              "stream", "signal"};
  static const char *const wait_keys[] = {"kind", "event", "host", "stream"};
  static const char *const launch_keys[] = {"kind", "op", "stream", "signal",
                                            "bindings"};
  static const char *const release_keys[] = {"kind", "slot"};
  char where[FDY_ERROR_NAME_MAX];
  char field[FDY_ERROR_NAME_MAX];
  int64_t index = (int64_t)i;
  json_t *kind_value;
  snprintf(where, sizeof(where), "commands[%zu]", i);
  memset(cmd, 0, sizeof(*cmd));
  fdy_status st = expect_object(c, where, index, err);
  if (st == FDY_OK) {
    st = get_field(c, where, "kind", index, &kind_value, err);
  }
  if (st != FDY_OK) {
    return st;
  }
  join(field, sizeof(field), where, "kind");
  if (!json_is_string(kind_value)) {
    return schema(err, field, index, "expected a string");
  }
  const char *kind = json_string_value(kind_value);
  if (strcmp(kind, "allocate") == 0) {
    cmd->kind = FDY_CMD_ALLOCATE;
    st = check_keys(c, where, allocate_keys, 3, index, err);
    if (st == FDY_OK) {
      st = get_u32(c, where, "slot", index, &cmd->u.allocate.slot.v, err);
    }
    if (st == FDY_OK) {
      st = get_u64(c, where, "bytes", MAX_JSON_INT, index,
                   &cmd->u.allocate.bytes, err);
    }
  } else if (strcmp(kind, "prefetch") == 0) {
    cmd->kind = FDY_CMD_PREFETCH;
    st = check_keys(c, where, prefetch_keys, 5, index, err);
    if (st == FDY_OK) {
      st = get_u32(c, where, "weight", index, &cmd->u.prefetch.weight.v, err);
    }
    if (st == FDY_OK) {
      st = get_u32(c, where, "slot", index, &cmd->u.prefetch.slot.v, err);
    }
    if (st == FDY_OK) {
      st = get_u32(c, where, "stream", index, &cmd->u.prefetch.stream.v, err);
    }
    if (st == FDY_OK) {
      st = get_u32(c, where, "signal", index, &cmd->u.prefetch.signal.v, err);
    }
  } else if (strcmp(kind, "wait") == 0) {
    cmd->kind = FDY_CMD_WAIT;
    st = check_keys(c, where, wait_keys, 4, index, err);
    if (st == FDY_OK) {
      st = get_u32(c, where, "event", index, &cmd->u.wait.event.v, err);
    }
    json_t *host = json_object_get(c, "host");
    json_t *stream = json_object_get(c, "stream");
    if (st == FDY_OK && (host == NULL) == (stream == NULL)) {
      st = schema(err, where, index,
                  "a wait has exactly one of \"host\": true or \"stream\"");
    }
    if (st == FDY_OK && host != NULL) {
      join(field, sizeof(field), where, "host");
      if (!json_is_true(host)) {
        st = schema(err, field, index,
                    "expected true (a stream wait names \"stream\")");
      }
      cmd->u.wait.host = true;
    }
    if (st == FDY_OK && stream != NULL) {
      st = get_u32(c, where, "stream", index, &cmd->u.wait.stream.v, err);
    }
  } else if (strcmp(kind, "launch") == 0) {
    cmd->kind = FDY_CMD_LAUNCH;
    st = check_keys(c, where, launch_keys, 5, index, err);
    if (st == FDY_OK) {
      st = get_u32(c, where, "op", index, &cmd->u.launch.op.v, err);
    }
    if (st == FDY_OK) {
      st = get_u32(c, where, "stream", index, &cmd->u.launch.stream.v, err);
    }
    if (st == FDY_OK) {
      st = get_u32(c, where, "signal", index, &cmd->u.launch.signal.v, err);
    }
    if (st == FDY_OK) {
      st = decode_bindings(c, where, index, cmd, err);
    }
  } else if (strcmp(kind, "release") == 0) {
    cmd->kind = FDY_CMD_RELEASE;
    st = check_keys(c, where, release_keys, 2, index, err);
    if (st == FDY_OK) {
      st = get_u32(c, where, "slot", index, &cmd->u.release.slot.v, err);
    }
  } else {
    st = schema(err, field, index, "unknown command kind '%s'", kind);
  }
  return st;
}

fdy_status fdy_plan_from_json(const char *text, size_t length, fdy_plan **out,
                              fdy_error *err) {
  static const char *const keys[] = {"format",       "version", "graph",
                                     "budget_bytes", "streams", "slots",
                                     "events",       "commands"};
  json_t *root = NULL;
  fdy_graph *graph = NULL;
  fdy_plan *plan = NULL;
  fdy_status st = FDY_OK;
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
  root = json_loadb(text == NULL ? "" : text, length, JSON_REJECT_DUPLICATES,
                    &jerr);
  if (root == NULL) {
    st = fdy_error_set(err, FDY_ERR_PARSE, "plan JSON: line %d, column %d: %s",
                       jerr.line, jerr.column, jerr.text);
    if (err != NULL) {
      err->line = jerr.line;
      err->column = jerr.column;
    }
    goto cleanup;
  }
  if (!json_is_object(root)) {
    st = schema(err, "$", -1, "the document is not a JSON object");
    goto cleanup;
  }
  json_t *format = json_object_get(root, "format");
  if (format == NULL || !json_is_string(format) ||
      strcmp(json_string_value(format), FDY_PLAN_FORMAT) != 0) {
    st = schema(err, "format", -1, "expected \"%s\"", FDY_PLAN_FORMAT);
    goto cleanup;
  }
  json_t *version = json_object_get(root, "version");
  if (version == NULL || !json_is_integer(version) ||
      json_integer_value(version) != FDY_PLAN_VERSION) {
    st = schema(err, "version", -1, "expected version %d", FDY_PLAN_VERSION);
    goto cleanup;
  }
  st = check_keys(root, "$", keys, 8, -1, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  uint64_t budget = 0, streams = 0, slots = 0, events = 0;
  json_t *graph_value, *commands;
  st = get_u64(root, "$", "budget_bytes", MAX_JSON_INT, -1, &budget, err);
  if (st == FDY_OK) {
    st = get_u64(root, "$", "streams", FDY_PLAN_MAX_STREAMS, -1, &streams, err);
  }
  if (st == FDY_OK && streams == 0) {
    st = schema(err, "streams", -1, "a plan has at least one stream");
  }
  if (st == FDY_OK) {
    st = get_u64(root, "$", "slots", FDY_PLAN_MAX_SLOTS, -1, &slots, err);
  }
  if (st == FDY_OK) {
    st = get_u64(root, "$", "events", FDY_PLAN_MAX_EVENTS, -1, &events, err);
  }
  if (st == FDY_OK) {
    st = get_field(root, "$", "graph", -1, &graph_value, err);
  }
  if (st == FDY_OK) {
    st = get_array(root, "$", "commands", -1, &commands, err);
  }
  if (st == FDY_OK) {
    st = decode_graph(graph_value, &graph, err);
  }
  if (st == FDY_OK) {
    st = fdy_plan_create(graph, budget, (uint32_t)streams, (uint32_t)slots,
                         (uint32_t)events, &plan, err);
  }
  for (size_t i = 0; st == FDY_OK && i < json_array_size(commands); i++) {
    fdy_command cmd;
    st = decode_command(json_array_get(commands, i), i, &cmd, err);
    if (st == FDY_OK) {
      st = fdy_plan_append(plan, &cmd, err);
    }
  }
  if (st == FDY_OK) {
    *out = plan;
    plan = NULL;
  }
cleanup:
  json_decref(root);
  fdy_graph_destroy(graph);
  fdy_plan_destroy(plan);
  return st;
}
