/* The runtime interpreter (include/foundry/runtime.h): preflight checks that
 * touch no backend state, then one pass over the plan's commands, mapping
 * plan streams, slots and events to backend handles. Every handle the run
 * acquires sits in a table indexed by its plan id, so one cleanup path
 * (drain, then release everything in the tables) serves success and every
 * failure alike. Backend errors are decorated with the failing command and
 * backend entry; a failure of the cleanup drain goes to cleanup_kind. */
#include "foundry/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct rt_mapping {
  const char *path; /* owned by the graph */
  void *base;
  uint64_t size;
} rt_mapping;

typedef struct rt_state {
  const fdy_plan *plan;
  const fdy_graph *graph; /* the graph whose extents are copied */
  fdy_backend *b;
  const fdy_backend_ops *ops;
  bool collect;
  uint32_t stream_count, slot_count, event_count;
  size_t command_count, op_count;
  fdy_backend_stream **streams;
  fdy_backend_buffer **slots;
  uint64_t *slot_bytes;
  fdy_backend_event **events;       /* by plan event id */
  fdy_backend_event **first_events; /* timings: first copy of a gather */
  rt_mapping *maps;
  size_t map_count;
  uint64_t *op_results;
  fdy_command_timing *timings;
  uint64_t live_bytes, peak_bytes;
} rt_state;

void fdy_run_result_free(fdy_run_result *result) {
  if (!result) {
    return;
  }
  free(result->op_results);
  free(result->timings);
  memset(result, 0, sizeof(*result));
}

/* Turns a failed backend call into the run's error: kind as the backend
 * reported it, plus the command and the entry. */
static fdy_status backend_failed(fdy_error *e, fdy_status status,
                                 int64_t command_index, const char *op) {
  if (e->kind != status) {
    e->kind = status;
  }
  e->command_index = command_index;
  snprintf(e->backend_op, sizeof(e->backend_op), "%s", op);
  if (command_index >= 0) {
    fdy_error_prefix(e, "command %lld: backend %s failed",
                     (long long)command_index, op);
  } else {
    fdy_error_prefix(e, "backend %s failed", op);
  }
  return status;
}

static fdy_status tensor_info(const fdy_graph *graph, uint32_t id,
                              fdy_tensor_info *out, fdy_error *e) {
  return fdy_graph_tensor(graph, (fdy_tensor_id){id}, out, e);
}

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
      {"copy_to_device", o->copy_to_device != NULL},
      {"launch", o->launch != NULL},
      {"stream_wait", o->stream_wait != NULL},
      {"host_wait", o->host_wait != NULL},
      {"event_release", o->event_release != NULL},
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
    fdy_status st = tensor_info(planned, (uint32_t)i, &p, e);
    if (st == FDY_OK) {
      st = tensor_info(given, (uint32_t)i, &g, e);
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
  fdy_status st = tensor_info(graph, tensor, &info, e);
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

static fdy_status check_ops_supported(const fdy_graph *graph, fdy_backend *b,
                                      fdy_error *e) {
  size_t count = fdy_graph_op_count(graph);
  for (size_t i = 0; i < count; i++) {
    fdy_op_info op;
    fdy_status st = fdy_graph_op(graph, (fdy_op_id){(uint32_t)i}, &op, e);
    if (st != FDY_OK) {
      return st;
    }
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) {
      fdy_op_info prev;
      st = fdy_graph_op(graph, (fdy_op_id){(uint32_t)j}, &prev, e);
      if (st != FDY_OK) {
        return st;
      }
      seen = strcmp(prev.kind, op.kind) == 0;
    }
    if (!seen && !b->ops->supports_op(b, op.kind)) {
      fdy_error_set(e, FDY_ERR_UNSUPPORTED,
                    "backend %s does not support op kind %s (op %s)",
                    b->ops->name, op.kind, op.name);
      e->ids[0] = (int64_t)i;
      snprintf(e->name, sizeof(e->name), "%s", op.kind);
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
    return backend_failed(e, st, -1, "capabilities");
  }
  uint64_t budget = fdy_plan_budget(plan);
  if (budget > caps.total_memory) {
    fdy_error_set(e, FDY_ERR_BUDGET,
                  "the plan's budget of %llu bytes is above the %llu bytes "
                  "of device memory of %s",
                  (unsigned long long)budget,
                  (unsigned long long)caps.total_memory, caps.name);
    e->expected = caps.total_memory;
    e->actual = budget;
    return FDY_ERR_BUDGET;
  }
  size_t count = fdy_plan_command_count(plan);
  for (size_t i = 0; i < count; i++) {
    const fdy_command *c = fdy_plan_command(plan, i);
    if (c->kind == FDY_CMD_ALLOCATE && caps.max_allocation != 0 &&
        c->u.allocate.bytes > caps.max_allocation) {
      fdy_error_set(e, FDY_ERR_BUDGET,
                    "command %zu allocates %llu bytes, above the device's "
                    "largest allocation of %llu bytes",
                    i, (unsigned long long)c->u.allocate.bytes,
                    (unsigned long long)caps.max_allocation);
      e->command_index = (int64_t)i;
      e->ids[0] = c->u.allocate.slot.v;
      e->expected = caps.max_allocation;
      e->actual = c->u.allocate.bytes;
      return FDY_ERR_BUDGET;
    }
  }
  return FDY_OK;
}

/* Checks in order of cost: arguments, the backend table, the graph, plan
 * validation, weight bindings (none of these call the backend), then the
 * backend's queries (supports_op, capabilities). */
static fdy_status preflight(const fdy_plan *plan, const fdy_graph *graph,
                            fdy_backend *b, const fdy_graph **effective,
                            fdy_error *e) {
  if (!plan || !b || !b->ops) {
    return fdy_error_set(e, FDY_ERR_INVALID_ARGUMENT,
                         "runtime: NULL plan or backend");
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
  st = fdy_plan_validate(plan, NULL, e);
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

fdy_status fdy_runtime_preflight(const fdy_plan *plan, const fdy_graph *graph,
                                 fdy_backend *backend, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  const fdy_graph *effective = NULL;
  fdy_status st = preflight(plan, graph, backend, &effective, &e);
  if (err) {
    *err = e;
  }
  return st;
}

/* ---- execution
 * ---------------------------------------------------------------- */

static const rt_mapping *find_mapping(const rt_state *s, const char *path) {
  for (size_t i = 0; i < s->map_count; i++) {
    if (strcmp(s->maps[i].path, path) == 0) {
      return &s->maps[i];
    }
  }
  return NULL;
}

static fdy_status map_file(rt_state *s, const char *path, uint64_t need,
                           fdy_error *e) {
  const rt_mapping *have = find_mapping(s, path);
  if (have) {
    if (have->size < need) {
      fdy_error_set(e, FDY_ERR_GRAPH_FILE_RANGE,
                    "%s holds %llu bytes, a weight needs %llu", path,
                    (unsigned long long)have->size, (unsigned long long)need);
      e->expected = need;
      e->actual = have->size;
      snprintf(e->name, sizeof(e->name), "%s", path);
      return FDY_ERR_GRAPH_FILE_RANGE;
    }
    return FDY_OK;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0) {
    int code = errno;
    if (fd >= 0) {
      close(fd);
    }
    fdy_error_set(e, FDY_ERR_IO, "cannot open %s: %s", path, strerror(code));
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_IO;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < need || size == 0) {
    close(fd);
    fdy_error_set(e, FDY_ERR_GRAPH_FILE_RANGE,
                  "%s holds %llu bytes, a weight needs %llu", path,
                  (unsigned long long)size, (unsigned long long)need);
    e->expected = need;
    e->actual = size;
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_GRAPH_FILE_RANGE;
  }
  void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int code = errno;
  close(fd);
  if (base == MAP_FAILED) {
    fdy_error_set(e, FDY_ERR_IO, "cannot map %s: %s", path, strerror(code));
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_IO;
  }
  s->maps[s->map_count++] =
      (rt_mapping){.path = path, .base = base, .size = size};
  return FDY_OK;
}

/* Maps every file that a prefetched weight reads, once per path. */
static fdy_status map_files(rt_state *s, fdy_error *e) {
  size_t extents = 0;
  for (size_t i = 0; i < s->command_count; i++) {
    const fdy_command *c = fdy_plan_command(s->plan, i);
    fdy_tensor_info info;
    if (c->kind != FDY_CMD_PREFETCH) {
      continue;
    }
    fdy_status st = tensor_info(s->graph, c->u.prefetch.weight.v, &info, e);
    if (st != FDY_OK) {
      return st;
    }
    extents += info.extent_count;
  }
  if (extents == 0) {
    return FDY_OK;
  }
  s->maps = calloc(extents, sizeof(*s->maps));
  if (!s->maps) {
    return fdy_error_set(e, FDY_ERR_OUT_OF_MEMORY, "runtime: out of memory");
  }
  for (size_t i = 0; i < s->command_count; i++) {
    const fdy_command *c = fdy_plan_command(s->plan, i);
    fdy_tensor_info info;
    if (c->kind != FDY_CMD_PREFETCH) {
      continue;
    }
    fdy_status st = tensor_info(s->graph, c->u.prefetch.weight.v, &info, e);
    for (size_t k = 0; st == FDY_OK && k < info.extent_count; k++) {
      const fdy_extent *x = &info.extents[k];
      if (x->kind == FDY_EXTENT_FILE) {
        st = map_file(s, x->path, x->offset + x->length, e);
      }
    }
    if (st != FDY_OK) {
      e->command_index = (int64_t)i;
      return st;
    }
  }
  return FDY_OK;
}

static fdy_status state_init(rt_state *s, fdy_error *e) {
  s->stream_count = fdy_plan_stream_count(s->plan);
  s->slot_count = fdy_plan_slot_count(s->plan);
  s->event_count = fdy_plan_event_count(s->plan);
  s->command_count = fdy_plan_command_count(s->plan);
  s->op_count = fdy_graph_op_count(s->graph);
  s->streams =
      calloc(s->stream_count ? s->stream_count : 1, sizeof(*s->streams));
  s->slots = calloc(s->slot_count ? s->slot_count : 1, sizeof(*s->slots));
  s->slot_bytes =
      calloc(s->slot_count ? s->slot_count : 1, sizeof(*s->slot_bytes));
  s->events = calloc(s->event_count ? s->event_count : 1, sizeof(*s->events));
  s->first_events =
      calloc(s->event_count ? s->event_count : 1, sizeof(*s->first_events));
  s->op_results = calloc(s->op_count ? s->op_count : 1, sizeof(*s->op_results));
  if (s->collect && s->command_count > 0) {
    s->timings = calloc(s->command_count, sizeof(*s->timings));
  }
  if (!s->streams || !s->slots || !s->slot_bytes || !s->events ||
      !s->first_events || !s->op_results ||
      (s->collect && s->command_count > 0 && !s->timings)) {
    return fdy_error_set(e, FDY_ERR_OUT_OF_MEMORY, "runtime: out of memory");
  }
  return FDY_OK;
}

static fdy_status create_streams(rt_state *s, fdy_error *e) {
  for (uint32_t i = 0; i < s->stream_count; i++) {
    fdy_status st = s->ops->stream_create(s->b, &s->streams[i], e);
    if (st != FDY_OK) {
      s->streams[i] = NULL;
      fdy_error_prefix(e, "plan stream %u", i);
      return backend_failed(e, st, -1, "stream_create");
    }
  }
  return FDY_OK;
}

/* Stores a new backend event for plan event `id`; an event it replaces (an
 * earlier copy of the same gathered weight, which the new one completes
 * after) is kept for timings or released. */
static void set_event(rt_state *s, uint32_t id, fdy_backend_event *event) {
  fdy_backend_event *old = s->events[id];
  s->events[id] = event;
  if (old) {
    if (s->collect && !s->first_events[id]) {
      s->first_events[id] = old;
    } else {
      s->ops->event_release(s->b, old);
    }
  }
}

static fdy_status run_prefetch(rt_state *s, size_t index, const fdy_command *c,
                               fdy_error *e) {
  fdy_tensor_info info;
  fdy_status st = tensor_info(s->graph, c->u.prefetch.weight.v, &info, e);
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_buffer *dst = s->slots[c->u.prefetch.slot.v];
  fdy_backend_stream *stream = s->streams[c->u.prefetch.stream.v];
  uint64_t offset = 0;
  for (size_t k = 0; k < info.extent_count; k++) {
    const fdy_extent *x = &info.extents[k];
    const void *src = x->host;
    if (x->kind == FDY_EXTENT_FILE) {
      src = (const unsigned char *)find_mapping(s, x->path)->base + x->offset;
    }
    fdy_backend_event *event = NULL;
    st = s->ops->copy_to_device(s->b, stream, dst, offset, src, x->length,
                                &event, e);
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)index, "copy_to_device");
    }
    set_event(s, c->u.prefetch.signal.v, event);
    offset += x->length;
  }
  return FDY_OK;
}

static fdy_status run_launch(rt_state *s, size_t index, const fdy_command *c,
                             fdy_error *e) {
  fdy_op_info op;
  fdy_status st = fdy_graph_op(s->graph, c->u.launch.op, &op, e);
  if (st != FDY_OK) {
    return st;
  }
  fdy_launch_desc desc = {.kind = op.kind,
                          .param = op.param,
                          .op_index = c->u.launch.op.v,
                          .result = &s->op_results[c->u.launch.op.v]};
  /* Weights in the order the op reads them; validation proved the bindings
   * are exactly these weights. */
  for (size_t r = 0; r < op.read_count; r++) {
    for (uint32_t k = 0; k < c->u.launch.binding_count; k++) {
      const fdy_binding *bind = &c->u.launch.bindings[k];
      if (bind->weight.v != op.reads[r].v ||
          desc.weight_count == FDY_MAX_LAUNCH_WEIGHTS) {
        continue;
      }
      fdy_tensor_info info;
      st = tensor_info(s->graph, bind->weight.v, &info, e);
      if (st != FDY_OK) {
        return st;
      }
      desc.weights[desc.weight_count++] = (fdy_launch_weight){
          .buffer = s->slots[bind->slot.v], .bytes = info.bytes};
    }
  }
  fdy_backend_event *event = NULL;
  st = s->ops->launch(s->b, s->streams[c->u.launch.stream.v], &desc, &event, e);
  if (st != FDY_OK) {
    return backend_failed(e, st, (int64_t)index, "launch");
  }
  set_event(s, c->u.launch.signal.v, event);
  return FDY_OK;
}

static fdy_status run_command(rt_state *s, size_t index, fdy_error *e) {
  const fdy_command *c = fdy_plan_command(s->plan, index);
  fdy_command_timing *t = s->timings ? &s->timings[index] : NULL;
  if (t) {
    *t = (fdy_command_timing){.command_index = (uint32_t)index,
                              .kind = c->kind,
                              .stream = -1,
                              .host_begin_ns = fdy_now_ns(),
                              .device_start_ns = -1,
                              .device_end_ns = -1};
  }
  fdy_status st = FDY_OK;
  switch (c->kind) {
  case FDY_CMD_ALLOCATE: {
    uint32_t slot = c->u.allocate.slot.v;
    st = s->ops->buffer_alloc(s->b, c->u.allocate.bytes, &s->slots[slot], e);
    if (st != FDY_OK) {
      s->slots[slot] = NULL;
      return backend_failed(e, st, (int64_t)index, "buffer_alloc");
    }
    s->slot_bytes[slot] = c->u.allocate.bytes;
    s->live_bytes += c->u.allocate.bytes;
    if (s->live_bytes > s->peak_bytes) {
      s->peak_bytes = s->live_bytes;
    }
    break;
  }
  case FDY_CMD_PREFETCH:
    if (t) {
      t->stream = (int32_t)c->u.prefetch.stream.v;
    }
    st = run_prefetch(s, index, c, e);
    break;
  case FDY_CMD_WAIT: {
    fdy_backend_event *event = s->events[c->u.wait.event.v];
    if (c->u.wait.host) {
      st = s->ops->host_wait(s->b, event, e);
      if (st != FDY_OK) {
        return backend_failed(e, st, (int64_t)index, "host_wait");
      }
    } else {
      if (t) {
        t->stream = (int32_t)c->u.wait.stream.v;
      }
      st = s->ops->stream_wait(s->b, s->streams[c->u.wait.stream.v], event, e);
      if (st != FDY_OK) {
        return backend_failed(e, st, (int64_t)index, "stream_wait");
      }
    }
    break;
  }
  case FDY_CMD_LAUNCH:
    if (t) {
      t->stream = (int32_t)c->u.launch.stream.v;
    }
    st = run_launch(s, index, c, e);
    break;
  case FDY_CMD_RELEASE: {
    uint32_t slot = c->u.release.slot.v;
    s->ops->buffer_release(s->b, s->slots[slot]);
    s->slots[slot] = NULL;
    s->live_bytes -= s->slot_bytes[slot];
    s->slot_bytes[slot] = 0;
    break;
  }
  }
  if (t) {
    t->host_end_ns = fdy_now_ns();
    t->live_slot_bytes = s->live_bytes;
  }
  return st;
}

/* After the final drain: device times of every prefetch and launch. */
static fdy_status collect_device_times(rt_state *s, fdy_error *e) {
  if (!s->timings || !s->ops->event_times) {
    return FDY_OK;
  }
  for (size_t i = 0; i < s->command_count; i++) {
    const fdy_command *c = fdy_plan_command(s->plan, i);
    uint32_t id;
    if (c->kind == FDY_CMD_PREFETCH) {
      id = c->u.prefetch.signal.v;
    } else if (c->kind == FDY_CMD_LAUNCH) {
      id = c->u.launch.signal.v;
    } else {
      continue;
    }
    fdy_event_times last, first;
    fdy_status st = s->ops->event_times(s->b, s->events[id], &last, e);
    if (st == FDY_OK) {
      first = last;
      if (s->first_events[id]) {
        st = s->ops->event_times(s->b, s->first_events[id], &first, e);
      }
    }
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)i, "event_times");
    }
    s->timings[i].device_start_ns = first.start_ns;
    s->timings[i].device_end_ns = last.end_ns;
  }
  return FDY_OK;
}

/* Drains (when asked) and releases every handle of the run. A failed drain is
 * recorded in the cleanup fields of e when the run already failed. */
static void cleanup(rt_state *s, bool drain, fdy_error *e) {
  if (drain) {
    fdy_error ce;
    fdy_error_clear(&ce);
    fdy_status st = s->ops->drain(s->b, &ce);
    if (st != FDY_OK) {
      e->cleanup_kind = st;
      snprintf(e->cleanup_message, sizeof(e->cleanup_message),
               "drain after the failure failed: %.200s", ce.message);
    }
  }
  for (uint32_t i = 0; s->events && i < s->event_count; i++) {
    if (s->first_events[i]) {
      s->ops->event_release(s->b, s->first_events[i]);
    }
    if (s->events[i]) {
      s->ops->event_release(s->b, s->events[i]);
    }
  }
  for (uint32_t i = 0; s->slots && i < s->slot_count; i++) {
    if (s->slots[i]) {
      s->ops->buffer_release(s->b, s->slots[i]);
    }
  }
  for (uint32_t i = 0; s->streams && i < s->stream_count; i++) {
    if (s->streams[i]) {
      s->ops->stream_destroy(s->b, s->streams[i]);
    }
  }
  for (size_t i = 0; i < s->map_count; i++) {
    munmap(s->maps[i].base, (size_t)s->maps[i].size);
  }
  free(s->maps);
  free(s->streams);
  free(s->slots);
  free(s->slot_bytes);
  free(s->events);
  free(s->first_events);
  free(s->op_results);
  free(s->timings);
}

fdy_status fdy_runtime_execute(const fdy_plan *plan, const fdy_graph *graph,
                               fdy_backend *backend,
                               const fdy_run_options *options,
                               fdy_run_result *result, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  int64_t begin_ns = fdy_now_ns();
  if (!result) {
    fdy_status st =
        fdy_error_set(&e, FDY_ERR_INVALID_ARGUMENT, "runtime: NULL result");
    if (err) {
      *err = e;
    }
    return st;
  }
  memset(result, 0, sizeof(*result));
  rt_state s = {.plan = plan, .b = backend};
  fdy_status st = preflight(plan, graph, backend, &s.graph, &e);
  if (st != FDY_OK) {
    if (err) {
      *err = e;
    }
    return st;
  }
  s.ops = backend->ops;
  s.collect = options && options->collect_timings;
  bool drained = false;
  st = state_init(&s, &e);
  if (st == FDY_OK) {
    st = map_files(&s, &e);
  }
  if (st == FDY_OK) {
    st = create_streams(&s, &e);
  }
  for (size_t i = 0; st == FDY_OK && i < s.command_count; i++) {
    st = run_command(&s, i, &e);
  }
  if (st == FDY_OK) {
    st = s.ops->drain(s.b, &e);
    if (st != FDY_OK) {
      backend_failed(&e, st, -1, "drain");
    } else {
      drained = true;
    }
  }
  if (st == FDY_OK) {
    st = collect_device_times(&s, &e);
  }
  int64_t end_ns = fdy_now_ns();
  if (st == FDY_OK) {
    *result = (fdy_run_result){.op_count = s.op_count,
                               .op_results = s.op_results,
                               .timing_count = s.timings ? s.command_count : 0,
                               .timings = s.timings,
                               .peak_slot_bytes = s.peak_bytes,
                               .begin_ns = begin_ns,
                               .end_ns = end_ns};
    if (s.op_count == 0) {
      result->op_results = NULL;
    } else {
      s.op_results = NULL;
    }
    s.timings = NULL;
  }
  cleanup(&s, !drained, &e);
  if (err) {
    *err = e;
  }
  return st;
}
