/* The executor's preflight (fdy_executor_preflight and the first checks of
 * create): in order of cost, checks that touch no backend state. */
#include "executor_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- preflight
 * --------------------------------------------------------------- */

static fdy_status check_ops_table(const fdy_backend *b, fdy_error *e) {
  const fdy_backend_ops *o = b->ops;
  const struct {
    const char *name;
    bool present;
  } required[] = {
      {"capabilities", o->capabilities != NULL},
      {"supports_op", o->supports_op != NULL},
      {"buffer_alloc", o->buffer_alloc != NULL},
      {"buffer_release", o->buffer_release != NULL},
      {"stream_create", o->stream_create != NULL},
      {"stream_destroy", o->stream_destroy != NULL},
      {"event_create", o->event_create != NULL},
      {"event_destroy", o->event_destroy != NULL},
      {"event_record", o->event_record != NULL},
      {"copy_to_device", o->copy_to_device != NULL},
      {"copy_to_host", o->copy_to_host != NULL},
      {"launch", o->launch != NULL},
      {"stream_wait", o->stream_wait != NULL},
      {"host_wait", o->host_wait != NULL},
      {"drain", o->drain != NULL},
  };
  for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
    if (!required[i].present) {
      fdy_error_set(e, FDY_ERR_UNSUPPORTED,
                    "backend %s lacks the required entry %s",
                    o->name ? o->name : "?", required[i].name);
      snprintf(e->backend_op, sizeof(e->backend_op), "%s", required[i].name);
      return FDY_ERR_UNSUPPORTED;
    }
  }
  return FDY_OK;
}

/* The caller's graph must be the plan's graph with extents: same tensors
 * (a weight of another size is GRAPH_WEIGHT_SIZE) and same structure. */
static fdy_status check_graph_matches(const fdy_graph *planned,
                                      const fdy_graph *given, fdy_error *e) {
  size_t count = fdy_graph_tensor_count(planned);
  if (count != fdy_graph_tensor_count(given) ||
      fdy_graph_op_count(planned) != fdy_graph_op_count(given)) {
    fdy_error_set(e, FDY_ERR_INVALID_ARGUMENT,
                  "the graph has %zu tensors and %zu ops, the plan's graph "
                  "%zu and %zu",
                  fdy_graph_tensor_count(given), fdy_graph_op_count(given),
                  count, fdy_graph_op_count(planned));
    e->expected = count;
    e->actual = fdy_graph_tensor_count(given);
    return FDY_ERR_INVALID_ARGUMENT;
  }
  for (size_t i = 0; i < count; i++) {
    fdy_tensor_info p, g;
    fdy_status st = ex_tensor_info(planned, (uint32_t)i, &p, e);
    if (st == FDY_OK) {
      st = ex_tensor_info(given, (uint32_t)i, &g, e);
    }
    if (st != FDY_OK) {
      return st;
    }
    if (p.role == FDY_TENSOR_WEIGHT && g.role == FDY_TENSOR_WEIGHT &&
        p.bytes != g.bytes) {
      fdy_error_set(e, FDY_ERR_GRAPH_WEIGHT_SIZE,
                    "weight %s has %llu bytes, the plan expects %llu", g.name,
                    (unsigned long long)g.bytes, (unsigned long long)p.bytes);
      e->ids[0] = (int64_t)i;
      e->expected = p.bytes;
      e->actual = g.bytes;
      snprintf(e->name, sizeof(e->name), "%s", g.name);
      return FDY_ERR_GRAPH_WEIGHT_SIZE;
    }
  }
  if (!fdy_graph_same_structure(planned, given)) {
    return fdy_error_set(e, FDY_ERR_INVALID_ARGUMENT,
                         "the graph's structure differs from the plan's graph");
  }
  return FDY_OK;
}

static fdy_status weight_error(fdy_error *e, fdy_status kind, size_t command,
                               uint32_t tensor, const char *name) {
  e->command_index = (int64_t)command;
  e->ids[0] = tensor;
  if (name) {
    snprintf(e->name, sizeof(e->name), "%s", name);
  }
  return kind;
}

/* A prefetched weight must be bound: extents present, summing to exactly its
 * bytes, host memory non-NULL, files holding the whole range. */
static fdy_status check_weight_bound(const fdy_graph *graph, size_t command,
                                     uint32_t tensor, fdy_error *e) {
  fdy_tensor_info info;
  fdy_status st = ex_tensor_info(graph, tensor, &info, e);
  if (st != FDY_OK) {
    return st;
  }
  if (info.extent_count == 0) {
    fdy_error_set(e, FDY_ERR_NOT_FOUND,
                  "command %zu prefetches weight %s, which is not bound to "
                  "host memory or a file",
                  command, info.name);
    return weight_error(e, FDY_ERR_NOT_FOUND, command, tensor, info.name);
  }
  uint64_t sum = 0;
  for (size_t k = 0; k < info.extent_count; k++) {
    const fdy_extent *x = &info.extents[k];
    if (__builtin_add_overflow(sum, x->length, &sum)) {
      fdy_error_set(e, FDY_ERR_OVERFLOW, "extents of weight %s overflow",
                    info.name);
      return weight_error(e, FDY_ERR_OVERFLOW, command, tensor, info.name);
    }
    if (x->kind == FDY_EXTENT_HOST && !x->host) {
      fdy_error_set(e, FDY_ERR_NOT_FOUND,
                    "weight %s has an extent without host memory", info.name);
      return weight_error(e, FDY_ERR_NOT_FOUND, command, tensor, info.name);
    }
    if (x->kind == FDY_EXTENT_FILE) {
      struct stat sb;
      uint64_t end;
      if (!x->path || stat(x->path, &sb) != 0) {
        int code = errno;
        fdy_status kind = code == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO;
        fdy_error_set(e, kind, "weight %s: cannot stat %s: %s", info.name,
                      x->path ? x->path : "(null)", strerror(code));
        return weight_error(e, kind, command, tensor, x->path);
      }
      if (__builtin_add_overflow(x->offset, x->length, &end) ||
          !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < end) {
        fdy_error_set(e, FDY_ERR_GRAPH_FILE_RANGE,
                      "weight %s: %s is not a regular file of at least %llu "
                      "bytes",
                      info.name, x->path, (unsigned long long)end);
        e->expected = end;
        e->actual = (uint64_t)sb.st_size;
        return weight_error(e, FDY_ERR_GRAPH_FILE_RANGE, command, tensor,
                            x->path);
      }
    }
  }
  if (sum != info.bytes) {
    fdy_error_set(e, FDY_ERR_GRAPH_WEIGHT_SIZE,
                  "weight %s is bound to %llu bytes, it has %llu", info.name,
                  (unsigned long long)sum, (unsigned long long)info.bytes);
    e->expected = info.bytes;
    e->actual = sum;
    return weight_error(e, FDY_ERR_GRAPH_WEIGHT_SIZE, command, tensor,
                        info.name);
  }
  return FDY_OK;
}

/* The op of graph op `id` with dtypes and shapes (no buffers yet). */
fdy_status ex_op_of(const fdy_graph *graph, uint32_t id, fdy_op *out,
                    fdy_op_info *info, fdy_error *e) {
  fdy_status st = fdy_graph_op(graph, (fdy_op_id){id}, info, e);
  if (st != FDY_OK) {
    return st;
  }
  memset(out, 0, sizeof(*out));
  out->kind = info->kind;
  out->params = info->params;
  out->input_count = (uint32_t)info->read_count;
  out->output_count = (uint32_t)info->write_count;
  for (size_t i = 0; i < info->read_count + info->write_count; i++) {
    bool input = i < info->read_count;
    fdy_tensor_id t =
        input ? info->reads[i] : info->writes[i - info->read_count];
    fdy_tensor_info ti;
    st = fdy_graph_tensor(graph, t, &ti, e);
    if (st != FDY_OK) {
      return st;
    }
    fdy_tensor_view view = {.dtype = ti.dtype, .shape = ti.shape};
    if (input) {
      out->inputs[i] = view;
    } else {
      out->outputs[i - info->read_count] = view;
    }
  }
  return FDY_OK;
}

static fdy_status check_ops_supported(const fdy_graph *graph, fdy_backend *b,
                                      fdy_error *e) {
  size_t count = fdy_graph_op_count(graph);
  for (size_t i = 0; i < count; i++) {
    fdy_op op;
    fdy_op_info info;
    fdy_status st = ex_op_of(graph, (uint32_t)i, &op, &info, e);
    if (st != FDY_OK) {
      return st;
    }
    if (!b->ops->supports_op(b, &op)) {
      fdy_error_set(e, FDY_ERR_UNSUPPORTED,
                    "backend %s does not support op %s (kind %s) with these "
                    "dtypes and shapes",
                    b->ops->name, info.name, fdy_op_kind_name(op.kind));
      e->ids[0] = (int64_t)i;
      snprintf(e->name, sizeof(e->name), "%s", info.name);
      snprintf(e->backend_op, sizeof(e->backend_op), "supports_op");
      return FDY_ERR_UNSUPPORTED;
    }
  }
  return FDY_OK;
}

static fdy_status check_device_limits(const fdy_plan *plan, fdy_backend *b,
                                      fdy_error *e) {
  fdy_device_caps caps;
  memset(&caps, 0, sizeof(caps));
  fdy_status st = b->ops->capabilities(b, &caps, e);
  if (st != FDY_OK) {
    return ex_backend_failed(e, st, -1, "capabilities");
  }
  uint64_t total = 0;
  for (uint32_t i = 0; i < fdy_plan_buffer_count(plan); i++) {
    const fdy_plan_buffer *buf = fdy_plan_buffer_at(plan, i);
    if (caps.max_allocation != 0 && buf->bytes > caps.max_allocation) {
      fdy_error_set(e, FDY_ERR_BUDGET,
                    "%s buffer %u needs %llu bytes, above the device's "
                    "largest allocation of %llu bytes",
                    fdy_buffer_class_name(buf->cls), i,
                    (unsigned long long)buf->bytes,
                    (unsigned long long)caps.max_allocation);
      e->ids[0] = i;
      e->expected = caps.max_allocation;
      e->actual = buf->bytes;
      return FDY_ERR_BUDGET;
    }
    if (__builtin_add_overflow(total, buf->bytes, &total)) {
      total = UINT64_MAX;
    }
  }
  if (total > caps.total_memory) {
    fdy_error_set(e, FDY_ERR_BUDGET,
                  "the plan's buffers need %llu bytes, above the %llu bytes "
                  "of device memory of %s",
                  (unsigned long long)total,
                  (unsigned long long)caps.total_memory, caps.name);
    e->expected = caps.total_memory;
    e->actual = total;
    return FDY_ERR_BUDGET;
  }
  return FDY_OK;
}

/* Checks in order of cost: arguments, the backend table, the graph, plan
 * validation, weight bindings (none of these call the backend), then the
 * backend's queries (supports_op, capabilities). */
fdy_status ex_preflight(const fdy_plan *plan, const fdy_graph *graph,
                        fdy_backend *b, const fdy_graph **effective,
                        fdy_plan_summary *summary, fdy_error *e) {
  if (!plan || !b || !b->ops) {
    return fdy_error_set(e, FDY_ERR_INVALID_ARGUMENT,
                         "executor: NULL plan or backend");
  }
  fdy_status st = check_ops_table(b, e);
  if (st != FDY_OK) {
    return st;
  }
  const fdy_graph *planned = fdy_plan_graph(plan);
  if (graph && graph != planned) {
    st = check_graph_matches(planned, graph, e);
    if (st != FDY_OK) {
      return st;
    }
  } else {
    graph = planned;
  }
  st = fdy_plan_validate(plan, summary, e);
  if (st != FDY_OK) {
    return st;
  }
  size_t count = fdy_plan_command_count(plan);
  for (size_t i = 0; i < count; i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_PREFETCH) {
      st = check_weight_bound(graph, i, c->u.prefetch.weight.v, e);
      if (st != FDY_OK) {
        return st;
      }
    }
  }
  st = check_ops_supported(graph, b, e);
  if (st != FDY_OK) {
    return st;
  }
  st = check_device_limits(plan, b, e);
  if (st != FDY_OK) {
    return st;
  }
  *effective = graph;
  return FDY_OK;
}

fdy_status fdy_executor_preflight(const fdy_plan *plan, const fdy_graph *graph,
                                  fdy_backend *backend, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  const fdy_graph *effective = NULL;
  fdy_plan_summary summary;
  fdy_status st = ex_preflight(plan, graph, backend, &effective, &summary, &e);
  if (err) {
    *err = e;
  }
  return st;
}
