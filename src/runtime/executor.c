/* The executor (include/foundry/runtime.h): preflight checks that touch no
 * backend state, then everything a plan's life needs acquired once
 * (streams, events, file mappings, host registrations, staging, buffers by
 * running setup, per-stream workspaces, every launch resolved to an fdy_op
 * of tensor views), so that a run of a step only walks its commands and
 * issues backend calls. Every handle sits in a table indexed by its plan
 * id, so one cleanup path (drain, then release everything) serves destroy
 * and every failure alike. Backend errors are decorated with the failing
 * command and backend entry; a failure of the cleanup drain goes to
 * cleanup_kind. An I/O failure names a mapped weight file that shrank
 * (backends read mappings with fdy_host_copy, which turns the SIGBUS of a
 * truncated file into FDY_ERR_IO).
 *
 * Graphs (runtime.h): after setup and resolving, each step is cut at its
 * host waits into stretches of device commands; each stretch is issued
 * once between graph_begin and graph_end over all streams, and a run
 * launches the stretches' graphs, each followed, where the plan has host
 * waits after it, by one host wait on the executor's own event recorded on
 * stream 0 after the graph (graph_launch joins every stream of the graph
 * into stream 0, backend.h). A step that reads a declared step input
 * (fdy_graph_set_step_rows) is recorded once per batch-size bucket, its
 * launches and copies narrowed to the bucket's rows from copies made at
 * create (plan_buckets); a run launches the bucket of its count. */
#include "foundry/runtime.h"

#include "foundry/host_copy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A copy or launch that failed on the device after its call returned,
 * reported by a later call `reporter` of command `index` (a host wait or
 * an event time): the backend names the faulting entry and its submission
 * number (backend.h, submitted: ids[0] == ids[1]). When a command of this
 * executor submitted it, the error is attributed to that command
 * (command_index, and the message names both); else to `index`, as any
 * failed call. */
static fdy_status reported_failure(const fdy_executor *x, fdy_error *e,
                                   fdy_status status, size_t index,
                                   const char *reporter) {
  const bool names_submission = status == FDY_ERR_BACKEND &&
                                x->ops->submitted != NULL && e->ids[0] > 0 &&
                                e->ids[0] == e->ids[1] &&
                                (strcmp(e->backend_op, "launch") == 0 ||
                                 strcmp(e->backend_op, "copy_to_device") == 0 ||
                                 strcmp(e->backend_op, "copy_to_host") == 0);
  for (size_t i = 0; names_submission && i < fdy_plan_command_count(x->plan);
       i++) {
    const ex_command *c = &x->cmds[i];
    if ((uint64_t)e->ids[0] > c->submitted_before &&
        (uint64_t)e->ids[0] <= c->submitted_after) {
      e->kind = status;
      e->command_index = (int64_t)i;
      fdy_error_prefix(e,
                       "command %zu: %s failed on the device (reported by "
                       "%s of command %zu)",
                       i, e->backend_op, reporter, index);
      return status;
    }
  }
  return backend_failed(e, status, (int64_t)index, reporter);
}

static fdy_status oom(fdy_error *e) {
  return fdy_error_set(e, FDY_ERR_OUT_OF_MEMORY, "executor: out of memory");
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

/* The op of graph op `id` with dtypes and shapes (no buffers yet). */
static fdy_status op_of(const fdy_graph *graph, uint32_t id, fdy_op *out,
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
    fdy_status st = op_of(graph, (uint32_t)i, &op, &info, e);
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
    return backend_failed(e, st, -1, "capabilities");
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
static fdy_status preflight(const fdy_plan *plan, const fdy_graph *graph,
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
  fdy_status st = preflight(plan, graph, backend, &effective, &summary, &e);
  if (err) {
    *err = e;
  }
  return st;
}

/* ---- host memory: mappings, registrations, staging
 * ---------------------------- */

static const ex_mapping *find_mapping(const fdy_executor *x, const char *path) {
  for (size_t i = 0; i < x->map_count; i++) {
    if (strcmp(x->maps[i].path, path) == 0) {
      return &x->maps[i];
    }
  }
  return NULL;
}

static fdy_status map_error(fdy_error *e, fdy_status kind, const char *path,
                            uint64_t size, uint64_t need) {
  fdy_error_set(e, kind, "%s holds %llu bytes, a weight needs %llu", path,
                (unsigned long long)size, (unsigned long long)need);
  e->expected = need;
  e->actual = size;
  snprintf(e->name, sizeof(e->name), "%s", path);
  return kind;
}

/* Registers [ptr, ptr + bytes) with the backend (when the executor
 * registers host memory and the backend can); *out (may be NULL) the
 * registration, or NULL when none was made. */
static fdy_status register_host(fdy_executor *x, const void *ptr,
                                uint64_t bytes, fdy_backend_host **out,
                                fdy_error *e) {
  if (out != NULL) {
    *out = NULL;
  }
  if (!x->registers_host || x->ops->host_register == NULL || bytes == 0) {
    return FDY_OK;
  }
  if (x->host_count == x->host_cap) {
    size_t cap = x->host_cap ? x->host_cap * 2 : 16;
    fdy_backend_host **grown = realloc(x->hosts, cap * sizeof(*grown));
    if (grown == NULL) {
      return oom(e);
    }
    x->hosts = grown;
    x->host_cap = cap;
  }
  fdy_backend_host *host = NULL;
  fdy_status st = x->ops->host_register(x->b, ptr, bytes, &host, e);
  if (st != FDY_OK) {
    return backend_failed(e, st, -1, "host_register");
  }
  x->hosts[x->host_count++] = host;
  x->stats.registered_bytes += bytes;
  if (out != NULL) {
    *out = host;
  }
  return FDY_OK;
}

/* Maps the file at path once (the mapping in *out), registering it with
 * the backend when `registered` (unpacked copies read it), also when an
 * earlier call mapped it without. */
static fdy_status map_file(fdy_executor *x, const char *path, uint64_t need,
                           bool registered, ex_mapping **out, fdy_error *e) {
  ex_mapping *have = (ex_mapping *)find_mapping(x, path);
  if (have) {
    if (have->size < need) {
      return map_error(e, FDY_ERR_GRAPH_FILE_RANGE, path, have->size, need);
    }
    *out = have;
    return registered && have->host == NULL
               ? register_host(x, have->base, have->size, &have->host, e)
               : FDY_OK;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  if (!S_ISREG(sb.st_mode) || size < need || size == 0) {
    close(fd);
    return map_error(e, FDY_ERR_GRAPH_FILE_RANGE, path, size, need);
  }
  void *base = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  int code = errno;
  close(fd);
  if (base == MAP_FAILED) {
    fdy_error_set(e, FDY_ERR_IO, "cannot map %s: %s", path, strerror(code));
    snprintf(e->name, sizeof(e->name), "%s", path);
    return FDY_ERR_IO;
  }
  ex_mapping *m = &x->maps[x->map_count++];
  *m = (ex_mapping){.path = path, .base = base, .size = size};
  x->stats.mapped_bytes += size;
  *out = m;
  return registered ? register_host(x, base, size, &m->host, e) : FDY_OK;
}

/* Resolves prefetch command i of weight `info` into one copy per
 * non-padding extent from the mapped files (registered) and host extents
 * (registered once per distinct pointer). */
static fdy_status resolve_extent_copies(fdy_executor *x, size_t i,
                                        const fdy_tensor_info *info,
                                        bool in_step, fdy_error *e) {
  ex_command *rc = &x->cmds[i];
  rc->first_copy = x->copy_count;
  uint64_t at = 0;
  fdy_status st = FDY_OK;
  for (size_t k = 0; st == FDY_OK && k < info->extent_count; k++) {
    const fdy_extent *ext = &info->extents[k];
    const void *src = NULL;
    if (ext->kind == FDY_EXTENT_FILE) {
      ex_mapping *m = NULL;
      st = map_file(x, ext->path, ext->offset + ext->length, true, &m, e);
      if (st == FDY_OK) {
        m->step_use = m->step_use || in_step;
        src = (const unsigned char *)m->base + ext->offset;
      }
    } else if (ext->kind == FDY_EXTENT_HOST) {
      src = ext->host;
      bool seen = false;
      for (size_t j = 0; j < x->copy_count && !seen; j++) {
        seen = x->copies[j].src == src;
      }
      if (!seen) {
        st = register_host(x, src, ext->length, NULL, e);
      }
    }
    if (st == FDY_OK && src != NULL) {
      x->copies[x->copy_count++] = (ex_copy){src, at, ext->length};
      rc->copy_count++;
    }
    at += ext->length;
  }
  return st;
}

/* The packed image of weight w: an owned, page-aligned host buffer laid
 * out exactly as the weight's bytes in its slot (extents in order, padding
 * zeroed), filled once with guarded copies (a file truncated under its
 * mapping is FDY_ERR_IO, never a SIGBUS) and registered with the backend. */
static fdy_status pack_weight(fdy_executor *x, uint32_t w,
                              const fdy_tensor_info *info, fdy_error *e) {
  uint64_t bytes = 0;
  fdy_status st = fdy_align_up(info->bytes, STAGING_ALIGNMENT, &bytes, e);
  if (st != FDY_OK) {
    return st;
  }
  if (bytes > SIZE_MAX ||
      posix_memalign(&x->packed[w], STAGING_ALIGNMENT, (size_t)bytes) != 0) {
    x->packed[w] = NULL;
    return oom(e);
  }
  unsigned char *image = x->packed[w];
  x->stats.packed_bytes += bytes;
  uint64_t at = 0;
  for (size_t k = 0; st == FDY_OK && k < info->extent_count; k++) {
    const fdy_extent *ext = &info->extents[k];
    if (ext->kind == FDY_EXTENT_FILE) {
      ex_mapping *m = NULL;
      st = map_file(x, ext->path, ext->offset + ext->length, false, &m, e);
      if (st == FDY_OK) {
        st = fdy_host_copy(image + at,
                           (const unsigned char *)m->base + ext->offset,
                           ext->length, e);
      }
      if (st != FDY_OK) {
        snprintf(e->name, sizeof(e->name), "%s", ext->path);
        fdy_error_prefix(e, "packing weight %s from %s", info->name, ext->path);
      }
    } else if (ext->kind == FDY_EXTENT_HOST) {
      st = fdy_host_copy(image + at, ext->host, ext->length, e);
    } else {
      memset(image + at, 0, (size_t)ext->length);
    }
    at += ext->length;
  }
  if (st == FDY_OK) {
    memset(image + info->bytes, 0, (size_t)(bytes - info->bytes));
    st = register_host(x, image, bytes, NULL, e);
  }
  return st;
}

/* Whether weight w is packed: a streamed weight (prefetched by a step) of
 * more than one extent to copy, when the executor packs. */
static bool packs(const fdy_executor *x, const bool *streamed,
                  const fdy_tensor_info *info, uint32_t w) {
  size_t pieces = 0;
  for (size_t k = 0; k < info->extent_count; k++) {
    pieces += info->extents[k].kind != FDY_EXTENT_PADDING;
  }
  return x->packs_streamed && streamed[w] && pieces > 1;
}

/* Maps every file a prefetched weight reads (once per path), packs the
 * streamed weights that take more than one copy (one copy per prefetch from
 * their packed image), registers the mappings unpacked copies read and the
 * host extents, and resolves every prefetch into copies. */
static fdy_status prepare_weights(fdy_executor *x, fdy_error *e) {
  size_t extents = 0;
  size_t setup_end = fdy_plan_section(x->plan, 0)->count;
  x->packed = calloc(x->tensor_count + 1, sizeof(*x->packed));
  bool *streamed = calloc(x->tensor_count + 1, sizeof(bool));
  fdy_status st = x->packed && streamed ? FDY_OK : oom(e);
  for (size_t i = 0; st == FDY_OK && i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    fdy_tensor_info info;
    if (c->kind != FDY_CMD_PREFETCH) {
      continue;
    }
    st = tensor_info(x->graph, c->u.prefetch.weight.v, &info, e);
    extents += info.extent_count;
    streamed[c->u.prefetch.weight.v] |= i >= setup_end;
  }
  if (st == FDY_OK) {
    x->maps = calloc(extents + 1, sizeof(*x->maps));
    x->copies = calloc(extents + 1, sizeof(*x->copies));
    st = x->maps && x->copies ? FDY_OK : oom(e);
  }
  /* Unpacked weights first, so that the mappings they read are registered
   * before packing reads the files. */
  for (int packed = 0; packed < 2 && st == FDY_OK; packed++) {
    for (size_t i = 0; st == FDY_OK && i < x->command_count; i++) {
      const fdy_command *c = fdy_plan_command(x->plan, i);
      if (c->kind != FDY_CMD_PREFETCH) {
        continue;
      }
      uint32_t w = c->u.prefetch.weight.v;
      fdy_tensor_info info;
      st = tensor_info(x->graph, w, &info, e);
      if (st != FDY_OK || packs(x, streamed, &info, w) != (packed == 1)) {
        continue;
      }
      if (!packed) {
        st = resolve_extent_copies(x, i, &info, i >= setup_end, e);
      } else {
        if (x->packed[w] == NULL) {
          st = pack_weight(x, w, &info, e);
        }
        x->cmds[i].first_copy = x->copy_count;
        x->cmds[i].copy_count = 1;
        x->copies[x->copy_count++] = (ex_copy){x->packed[w], 0, info.bytes};
      }
      if (st != FDY_OK) {
        e->command_index = (int64_t)i;
      }
    }
  }
  free(streamed);
  return st;
}

/* After setup: unmaps (and unregisters) the files no step reads any more
 * (those only resident uploads and packing read), so that runs never touch
 * them. */
static void release_setup_mappings(fdy_executor *x) {
  size_t kept = 0;
  for (size_t i = 0; i < x->map_count; i++) {
    ex_mapping *m = &x->maps[i];
    if (m->step_use) {
      x->maps[kept++] = *m;
      continue;
    }
    for (size_t h = 0; m->host != NULL && h < x->host_count; h++) {
      if (x->hosts[h] == m->host) {
        x->ops->host_unregister(x->b, m->host);
        x->hosts[h] = x->hosts[--x->host_count];
        x->stats.registered_bytes -= m->size;
        break;
      }
    }
    munmap(m->base, (size_t)m->size);
  }
  x->map_count = kept;
}

/* Page-aligned host staging for every tensor a step copies in or out. */
static fdy_status prepare_staging(fdy_executor *x, fdy_error *e) {
  x->staging = calloc(x->tensor_count + 1, sizeof(*x->staging));
  if (!x->staging) {
    return oom(e);
  }
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_COPY_INPUT && c->kind != FDY_CMD_COPY_OUTPUT) {
      continue;
    }
    uint32_t t = c->u.copy.tensor.v;
    ex_staging *s = &x->staging[t];
    if (s->data == NULL) {
      fdy_tensor_info info;
      fdy_status st = tensor_info(x->graph, t, &info, e);
      if (st != FDY_OK) {
        return st;
      }
      uint64_t bytes = 0;
      st = fdy_align_up(info.bytes, STAGING_ALIGNMENT, &bytes, e);
      if (st != FDY_OK) {
        return st;
      }
      if (bytes > SIZE_MAX ||
          posix_memalign(&s->data, STAGING_ALIGNMENT, (size_t)bytes) != 0) {
        s->data = NULL;
        return oom(e);
      }
      memset(s->data, 0, (size_t)bytes);
      s->bytes = info.bytes;
      x->stats.staging_bytes += bytes;
      st = register_host(x, s->data, bytes, NULL, e);
      if (st != FDY_OK) {
        return st;
      }
    }
    s->input = s->input || c->kind == FDY_CMD_COPY_INPUT;
    s->output = s->output || c->kind == FDY_CMD_COPY_OUTPUT;
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    x->cmds[i].host = s->data;
    x->cmds[i].offset = p.offset;
    x->cmds[i].bytes = s->bytes;
  }
  return FDY_OK;
}

/* ---- resolving launches
 * ------------------------------------------------------ */

/* The view of operand tensor t of a launch: its placement, or where the
 * launch's binding puts its weight. */
static fdy_status resolve_view(fdy_executor *x, const fdy_command *c,
                               fdy_tensor_id t, fdy_tensor_view *view,
                               fdy_error *e) {
  fdy_tensor_info info;
  fdy_status st = fdy_graph_tensor(x->graph, t, &info, e);
  if (st != FDY_OK) {
    return st;
  }
  if (info.role == FDY_TENSOR_WEIGHT || info.role == FDY_TENSOR_WEIGHT_VIEW) {
    uint32_t weight =
        info.role == FDY_TENSOR_WEIGHT ? t.v : (uint32_t)info.weight;
    for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
      const fdy_binding *b = &c->u.launch.bindings[i];
      if (b->weight.v == weight) {
        view->buffer = x->buffers[b->buffer.v];
        view->offset = b->offset + info.offset;
        return FDY_OK;
      }
    }
    return fdy_error_set(e, FDY_ERR_PLAN_BINDING_MISMATCH,
                         "no binding for weight %u", weight);
  }
  fdy_placement p = fdy_plan_placement(x->plan, t);
  view->buffer = x->buffers[p.buffer.v];
  view->offset = p.offset;
  return FDY_OK;
}

/* ---- batch-size buckets
 * ------------------------------------------------------ */

/* The declared step input (fdy_graph_set_step_rows) the launches of
 * section s read, and its rows in *rows; UINT32_MAX when they read none,
 * or several different ones (then nothing is narrowed). */
static uint32_t step_input_of(const fdy_executor *x, size_t s, uint64_t *rows) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  uint32_t found = UINT32_MAX;
  *rows = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    fdy_op_info info;
    if (c->kind != FDY_CMD_LAUNCH ||
        fdy_graph_op(x->graph, c->u.launch.op, &info, NULL) != FDY_OK) {
      continue;
    }
    for (size_t k = 0; k < info.read_count; k++) {
      fdy_tensor_info t;
      if (fdy_graph_tensor(x->graph, info.reads[k], &t, NULL) != FDY_OK ||
          t.step_rows == 0 || info.reads[k].v == found) {
        continue;
      }
      if (found != UINT32_MAX) {
        return UINT32_MAX;
      }
      found = info.reads[k].v;
      *rows = t.step_rows;
    }
  }
  return found;
}

/* The leading dimension of tensor t narrowed to b of the step's `rows`
 * rows (graph.h): the step input's elements, or b for an input or
 * activation whose leading dimension is rows; 0 when t is not
 * row-indexed. */
static uint64_t narrowed_dim(const fdy_executor *x, fdy_tensor_id t,
                             uint32_t input, uint64_t rows, uint64_t b) {
  fdy_tensor_info info;
  if (fdy_graph_tensor(x->graph, t, &info, NULL) != FDY_OK) {
    return 0;
  }
  if (t.v == input) {
    return FDY_STEP_ELEMENTS(b);
  }
  bool indexed =
      (info.role == FDY_TENSOR_INPUT || info.role == FDY_TENSOR_ACTIVATION) &&
      info.shape.rank >= 1 && info.shape.dims[0] == rows;
  return indexed ? b : 0;
}

/* Fills bucket b of step s: its launches' ops (from the resolved ones,
 * row-indexed operands narrowed, variant_rows the full rows for b >= 2,
 * ops.h) and its copies' bytes. False when a narrowed op fails
 * fdy_op_check or the backend does not support it (the bucket is then not
 * used). */
static bool narrow_bucket(fdy_executor *x, size_t s, uint64_t rows, uint64_t b,
                          fdy_op *ops, uint64_t *bytes) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  const ex_step *step = &x->steps[s];
  size_t n = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind == FDY_CMD_COPY_INPUT || c->kind == FDY_CMD_COPY_OUTPUT) {
      uint64_t dim =
          narrowed_dim(x, c->u.copy.tensor, step->step_input, rows, b);
      fdy_tensor_info info;
      if (dim != 0 &&
          fdy_graph_tensor(x->graph, c->u.copy.tensor, &info, NULL) == FDY_OK) {
        bytes[i - sec->first] = info.bytes / info.shape.dims[0] * dim;
      }
      continue;
    }
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    fdy_op *op = &ops[n++];
    *op = *x->cmds[i].op;
    fdy_op_info info;
    if (fdy_graph_op(x->graph, c->u.launch.op, &info, NULL) != FDY_OK) {
      return false;
    }
    for (size_t k = 0; k < info.read_count + info.write_count; k++) {
      bool input = k < info.read_count;
      fdy_tensor_id t =
          input ? info.reads[k] : info.writes[k - info.read_count];
      fdy_tensor_view *v =
          input ? &op->inputs[k] : &op->outputs[k - info.read_count];
      uint64_t dim = narrowed_dim(x, t, step->step_input, rows, b);
      if (dim != 0) {
        v->shape.dims[0] = dim;
      }
    }
    op->variant_rows = b >= 2 ? rows : 0;
    if (fdy_op_check(op, NULL) != FDY_OK || !x->ops->supports_op(x->b, op)) {
      return false;
    }
  }
  return true;
}

/* The steps (by section) and, for each step that reads a declared step
 * input of R >= 2 rows, its buckets 1, 2, 4, ... below R (those whose
 * narrowed ops the backend runs) and R, with their narrowed ops and copy
 * bytes, each stream's workspace grown for the narrowed ops. Needs the
 * resolved launches. */
static fdy_status plan_buckets(fdy_executor *x, fdy_error *e) {
  size_t sections = fdy_plan_section_count(x->plan);
  x->steps = calloc(sections, sizeof(*x->steps));
  if (!x->steps) {
    return oom(e);
  }
  for (size_t s = 1; s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    uint64_t rows = 0;
    step->bucket_count = 1;
    step->step_input = step_input_of(x, s, &rows);
    if (step->step_input == UINT32_MAX || rows < 2) {
      step->step_input = UINT32_MAX;
      continue;
    }
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      step->launches += fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH;
    }
    size_t below = 0;
    for (uint64_t b = 1; b < rows && b != 0; b *= 2) {
      below++;
    }
    step->narrowed = calloc(below * step->launches + 1, sizeof(fdy_op));
    step->narrowed_bytes = calloc(below * sec->count + 1, sizeof(uint64_t));
    if (!step->narrowed || !step->narrowed_bytes) {
      return oom(e);
    }
    size_t kept = 0;
    for (uint64_t b = 1; b < rows && b != 0; b *= 2) {
      fdy_op *ops = &step->narrowed[kept * step->launches];
      uint64_t *bytes = &step->narrowed_bytes[kept * sec->count];
      memset(bytes, 0, sec->count * sizeof(*bytes));
      if (narrow_bucket(x, s, rows, b, ops, bytes)) {
        step->bucket_rows[kept++] = b;
      }
    }
    step->bucket_rows[kept] = rows;
    step->bucket_count = kept + 1;
    for (size_t j = 0; j + 1 < step->bucket_count; j++) {
      size_t n = 0;
      for (size_t i = sec->first; i < sec->first + sec->count; i++) {
        const fdy_command *c = fdy_plan_command(x->plan, i);
        if (c->kind != FDY_CMD_LAUNCH) {
          continue;
        }
        const fdy_op *op = &step->narrowed[j * step->launches + n++];
        uint64_t need =
            x->ops->workspace_bytes ? x->ops->workspace_bytes(x->b, op) : 0;
        uint32_t st = c->u.launch.stream.v;
        if (need > x->workspace_bytes[st]) {
          x->workspace_bytes[st] = need;
        }
      }
    }
  }
  return FDY_OK;
}

/* Exchanges the resolved launch ops and copy bytes of step s with those of
 * its bucket j (below its rows): called once to record bucket j, again to
 * restore. */
static void swap_bucket(fdy_executor *x, size_t s, size_t j) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  ex_step *step = &x->steps[s];
  size_t n = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    ex_command *rc = &x->cmds[i];
    if (c->kind == FDY_CMD_LAUNCH) {
      fdy_op *narrow = &step->narrowed[j * step->launches + n++];
      fdy_op held = *rc->op;
      *rc->op = *narrow;
      *narrow = held;
    } else if (c->kind == FDY_CMD_COPY_INPUT ||
               c->kind == FDY_CMD_COPY_OUTPUT) {
      uint64_t *bytes = &step->narrowed_bytes[j * sec->count + i - sec->first];
      if (*bytes != 0) {
        uint64_t held = rc->bytes;
        rc->bytes = *bytes;
        *bytes = held;
      }
    }
  }
}

/* The bucket a run of step s launches: the smallest whose rows hold the
 * count its step input's staging holds now (the last for a count above
 * every bucket; the first for a count of 0 or less). */
static size_t bucket_of(const fdy_executor *x, const ex_step *step) {
  if (step->bucket_count < 2) {
    return 0;
  }
  const int32_t *in = x->staging[step->step_input].data;
  int64_t count = in != NULL ? in[FDY_STEP_COUNT] : INT64_MAX;
  size_t j = 0;
  while (j + 1 < step->bucket_count &&
         (count < 0 ? 0 : (uint64_t)count) > step->bucket_rows[j]) {
    j++;
  }
  return j;
}

/* Every launch of the steps as an op of views, and each stream's workspace
 * sized for the largest op it runs (that of a bucket included). Needs the
 * buffers (after setup). */
static fdy_status resolve_launches(fdy_executor *x, fdy_error *e) {
  size_t launches = 0;
  for (size_t i = 0; i < x->command_count; i++) {
    launches += fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH;
  }
  x->launch_ops = calloc(launches + 1, sizeof(fdy_op));
  if (!x->launch_ops) {
    return oom(e);
  }
  size_t n = 0;
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    fdy_op *op = &x->launch_ops[n++];
    fdy_op_info info;
    fdy_status st = op_of(x->graph, c->u.launch.op.v, op, &info, e);
    for (size_t k = 0; st == FDY_OK && k < info.read_count; k++) {
      st = resolve_view(x, c, info.reads[k], &op->inputs[k], e);
    }
    for (size_t k = 0; st == FDY_OK && k < info.write_count; k++) {
      st = resolve_view(x, c, info.writes[k], &op->outputs[k], e);
    }
    if (st != FDY_OK) {
      e->command_index = (int64_t)i;
      return st;
    }
    x->cmds[i].op = op;
    uint64_t need =
        x->ops->workspace_bytes ? x->ops->workspace_bytes(x->b, op) : 0;
    uint32_t s = c->u.launch.stream.v;
    if (need > x->workspace_bytes[s]) {
      x->workspace_bytes[s] = need;
    }
  }
  if (x->graphs) {
    fdy_status st = plan_buckets(x, e);
    if (st != FDY_OK) {
      return st;
    }
  }
  for (uint32_t s = 0; s < x->stream_count; s++) {
    if (x->workspace_bytes[s] == 0) {
      continue;
    }
    fdy_status st =
        x->ops->buffer_alloc(x->b, x->workspace_bytes[s], &x->workspace[s], e);
    if (st != FDY_OK) {
      x->workspace[s] = NULL;
      fdy_error_prefix(e, "workspace of stream %u (%llu bytes)", s,
                       (unsigned long long)x->workspace_bytes[s]);
      return backend_failed(e, st, -1, "buffer_alloc");
    }
    x->stats.workspace_bytes += x->workspace_bytes[s];
  }
  for (size_t i = 0; i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (c->kind != FDY_CMD_LAUNCH) {
      continue;
    }
    uint32_t s = c->u.launch.stream.v;
    if (x->workspace[s] != NULL) {
      x->cmds[i].op->workspace =
          (fdy_tensor_view){.buffer = x->workspace[s],
                            .dtype = FDY_DTYPE_U8,
                            .shape = FDY_SHAPE(x->workspace_bytes[s])};
    }
  }
  /* the buckets' ops share their command's workspace */
  size_t sections = fdy_plan_section_count(x->plan);
  for (size_t s = 1; x->steps != NULL && s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    for (size_t j = 0; j + 1 < step->bucket_count; j++) {
      size_t k = 0;
      for (size_t i = sec->first; i < sec->first + sec->count; i++) {
        if (fdy_plan_command(x->plan, i)->kind == FDY_CMD_LAUNCH) {
          step->narrowed[j * step->launches + k++].workspace =
              x->cmds[i].op->workspace;
        }
      }
    }
  }
  return FDY_OK;
}

/* ---- issuing commands
 * -------------------------------------------------------- */

static fdy_status record(fdy_executor *x, size_t index, uint32_t stream,
                         uint32_t event, fdy_error *e) {
  fdy_status st =
      x->ops->event_record(x->b, x->streams[stream], x->events[event], e);
  return st == FDY_OK ? FDY_OK
                      : backend_failed(e, st, (int64_t)index, "event_record");
}

static uint32_t command_signal(const fdy_command *c) {
  switch (c->kind) {
  case FDY_CMD_PREFETCH:
    return c->u.prefetch.signal.v;
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    return c->u.copy.signal.v;
  case FDY_CMD_LAUNCH:
    return c->u.launch.signal.v;
  default:
    return UINT32_MAX;
  }
}

static fdy_status run_command(fdy_executor *x, size_t index, fdy_error *e) {
  const fdy_command *c = fdy_plan_command(x->plan, index);
  ex_command *rc = &x->cmds[index];
  fdy_backend *b = x->b;
  if (x->ops->submitted != NULL) {
    rc->submitted_before = x->ops->submitted(b);
    rc->submitted_after = rc->submitted_before;
  }
  int32_t stream = fdy_command_stream(c);
  fdy_status st = FDY_OK;
  if (x->starts != NULL && x->starts[index] != NULL) {
    st = x->ops->event_record(b, x->streams[stream], x->starts[index], e);
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)index, "event_record");
    }
  }
  switch (c->kind) {
  case FDY_CMD_ALLOCATE: {
    uint32_t id = c->u.allocate.buffer.v;
    const fdy_plan_buffer *pb = fdy_plan_buffer_at(x->plan, id);
    st = x->ops->buffer_alloc(b, pb->bytes, &x->buffers[id], e);
    if (st != FDY_OK) {
      x->buffers[id] = NULL;
      fdy_error_prefix(e, "%s buffer %u (%llu bytes)",
                       fdy_buffer_class_name(pb->cls), id,
                       (unsigned long long)pb->bytes);
      e->ids[0] = id;
      e->actual = pb->bytes;
      return backend_failed(e, st, (int64_t)index, "buffer_alloc");
    }
    x->stats.class_bytes[pb->cls] += pb->bytes;
    return FDY_OK;
  }
  case FDY_CMD_RELEASE: {
    uint32_t id = c->u.release.buffer.v;
    x->ops->buffer_release(b, x->buffers[id]);
    x->buffers[id] = NULL;
    return FDY_OK;
  }
  case FDY_CMD_PREFETCH: {
    fdy_backend_buffer *dst = x->buffers[c->u.prefetch.buffer.v];
    for (size_t k = 0; k < rc->copy_count; k++) {
      const ex_copy *cp = &x->copies[rc->first_copy + k];
      st = x->ops->copy_to_device(b, x->streams[stream], dst,
                                  c->u.prefetch.offset + cp->offset, cp->src,
                                  cp->bytes, e);
      if (st != FDY_OK) {
        return backend_failed(e, st, (int64_t)index, "copy_to_device");
      }
    }
    break;
  }
  case FDY_CMD_COPY_INPUT: {
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    st = x->ops->copy_to_device(b, x->streams[stream], x->buffers[p.buffer.v],
                                rc->offset, rc->host, rc->bytes, e);
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)index, "copy_to_device");
    }
    break;
  }
  case FDY_CMD_COPY_OUTPUT: {
    fdy_placement p = fdy_plan_placement(x->plan, c->u.copy.tensor);
    st = x->ops->copy_to_host(b, x->streams[stream], rc->host,
                              x->buffers[p.buffer.v], rc->offset, rc->bytes, e);
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)index, "copy_to_host");
    }
    break;
  }
  case FDY_CMD_LAUNCH:
    st = x->ops->launch(b, x->streams[stream], rc->op, e);
    if (st != FDY_OK) {
      return backend_failed(e, st, (int64_t)index, "launch");
    }
    break;
  case FDY_CMD_WAIT: {
    fdy_backend_event *event = x->events[c->u.wait.event.v];
    if (c->u.wait.host) {
      st = x->ops->host_wait(b, event, e);
      return st == FDY_OK ? FDY_OK
                          : reported_failure(x, e, st, index, "host_wait");
    }
    st = x->ops->stream_wait(b, x->streams[stream], event, e);
    return st == FDY_OK ? FDY_OK
                        : backend_failed(e, st, (int64_t)index, "stream_wait");
  }
  case FDY_CMD_KIND_COUNT:
    break;
  }
  if (x->ops->submitted != NULL) {
    rc->submitted_after = x->ops->submitted(b);
  }
  return record(x, index, (uint32_t)stream, command_signal(c), e);
}

/* Runs the commands of section s; timings when collecting. */
static fdy_status run_section(fdy_executor *x, size_t s, fdy_error *e) {
  const fdy_section *sec = fdy_plan_section(x->plan, s);
  x->timing_count = 0;
  for (size_t i = sec->first; i < sec->first + sec->count; i++) {
    int64_t begin = x->collect ? fdy_now_ns() : 0;
    fdy_status st = run_command(x, i, e);
    if (st != FDY_OK) {
      return st;
    }
    if (x->collect) {
      const fdy_command *c = fdy_plan_command(x->plan, i);
      x->timings[x->timing_count++] =
          (fdy_command_timing){.command_index = (uint32_t)i,
                               .kind = c->kind,
                               .stream = fdy_command_stream(c),
                               .host_begin_ns = begin,
                               .host_end_ns = fdy_now_ns(),
                               .device_start_ns = -1,
                               .device_end_ns = -1};
    }
  }
  if (!x->collect || x->ops->event_time == NULL) {
    return FDY_OK;
  }
  for (size_t k = 0; k < x->timing_count; k++) {
    fdy_command_timing *t = &x->timings[k];
    const fdy_command *c = fdy_plan_command(x->plan, t->command_index);
    uint32_t signal = command_signal(c);
    if (signal == UINT32_MAX) {
      continue;
    }
    fdy_status st = x->ops->event_time(x->b, x->starts[t->command_index],
                                       &t->device_start_ns, e);
    if (st == FDY_OK) {
      st = x->ops->event_time(x->b, x->events[signal], &t->device_end_ns, e);
    }
    if (st != FDY_OK) {
      return reported_failure(x, e, st, t->command_index, "event_time");
    }
  }
  return FDY_OK;
}

/* ---- graphs
 * ------------------------------------------------------------------ */

static bool is_host_wait(const fdy_command *c) {
  return c->kind == FDY_CMD_WAIT && c->u.wait.host;
}

/* Cuts every step into stretches of device commands ended by a host wait
 * (or the end of the step), one set of them per bucket of the step (the
 * same stretches: bucket j's follow bucket j - 1's). */
static fdy_status cut_steps(fdy_executor *x, fdy_error *e) {
  size_t sections = fdy_plan_section_count(x->plan);
  size_t total = 1;
  for (size_t s = 1; s + 1 < sections; s++) {
    size_t count = fdy_plan_section(x->plan, s)->count;
    total += count * x->steps[s].bucket_count;
  }
  x->segments = calloc(total, sizeof(*x->segments));
  if (!x->segments) {
    return oom(e);
  }
  for (size_t s = 1; s + 1 < sections; s++) {
    const fdy_section *sec = fdy_plan_section(x->plan, s);
    ex_step *step = &x->steps[s];
    ex_segment *open = NULL;
    step->first_segment = x->segment_count;
    for (size_t i = sec->first; i < sec->first + sec->count; i++) {
      if (is_host_wait(fdy_plan_command(x->plan, i))) {
        if (open != NULL) {
          open->host_wait = i;
        }
        open = NULL;
        continue;
      }
      if (open == NULL) {
        open = &x->segments[x->segment_count++];
        *open = (ex_segment){.first = i, .host_wait = SIZE_MAX};
      }
      open->count++;
    }
    step->segment_count = x->segment_count - step->first_segment;
    for (size_t j = 1; j < step->bucket_count; j++) {
      for (size_t k = 0; k < step->segment_count; k++) {
        x->segments[x->segment_count++] = x->segments[step->first_segment + k];
      }
    }
  }
  return FDY_OK;
}

static void destroy_graphs(fdy_executor *x, size_t first, size_t count) {
  for (size_t i = first; i < first + count; i++) {
    if (x->segments[i].graph != NULL) {
      x->ops->graph_destroy(x->b, x->segments[i].graph);
      x->segments[i].graph = NULL;
    }
  }
}

/* Issues the commands of seg between graph_begin and graph_end. The
 * recording always ends; on failure seg->graph is NULL and the first
 * failure is reported. */
static fdy_status record_segment(fdy_executor *x, ex_segment *seg,
                                 fdy_error *e) {
  fdy_status st = x->ops->graph_begin(x->b, x->streams, x->stream_count, e);
  if (st != FDY_OK) {
    return backend_failed(e, st, (int64_t)seg->first, "graph_begin");
  }
  for (size_t i = seg->first; st == FDY_OK && i < seg->first + seg->count;
       i++) {
    st = run_command(x, i, e);
  }
  fdy_error end_error;
  fdy_error_clear(&end_error);
  fdy_status end = x->ops->graph_end(x->b, &seg->graph, &end_error);
  if (end != FDY_OK) {
    seg->graph = NULL;
    if (st == FDY_OK) {
      *e = end_error;
      st = backend_failed(e, end, (int64_t)seg->first, "graph_end");
    }
  } else if (st != FDY_OK) {
    x->ops->graph_destroy(x->b, seg->graph);
    seg->graph = NULL;
  }
  return st;
}

/* Records every step as graphs (runtime.h). A step the backend refuses to
 * record (FDY_ERR_UNSUPPORTED) falls back to commands, with the refusal
 * kept for fdy_executor_step_mode; any other failure is returned. */
static fdy_status record_steps(fdy_executor *x, fdy_error *e) {
  fdy_status st = cut_steps(x, e);
  if (st == FDY_OK) {
    st = x->ops->event_create(x->b, &x->graph_done, e);
    if (st != FDY_OK) {
      x->graph_done = NULL;
      return backend_failed(e, st, -1, "event_create");
    }
  }
  size_t sections = fdy_plan_section_count(x->plan);
  for (size_t s = 1; st == FDY_OK && s + 1 < sections; s++) {
    ex_step *step = &x->steps[s];
    const size_t segments = step->segment_count * step->bucket_count;
    for (size_t j = 0; st == FDY_OK && j < step->bucket_count; j++) {
      const bool narrowed = j + 1 < step->bucket_count;
      if (narrowed) {
        swap_bucket(x, s, j);
      }
      for (size_t k = 0; st == FDY_OK && k < step->segment_count; k++) {
        st = record_segment(
            x, &x->segments[step->first_segment + j * step->segment_count + k],
            e);
      }
      if (narrowed) {
        swap_bucket(x, s, j);
      }
    }
    if (st == FDY_ERR_UNSUPPORTED) {
      destroy_graphs(x, step->first_segment, segments);
      step->mode = FDY_STEP_FALLBACK;
      step->why = *e;
      fdy_error_clear(e);
      x->stats.graph_fallbacks++;
      st = FDY_OK;
    } else if (st == FDY_OK) {
      step->mode = FDY_STEP_GRAPHS;
      x->stats.graph_steps++;
      x->stats.bucket_steps += step->bucket_count > 1;
      x->stats.graphs += segments;
    }
  }
  return st;
}

/* A failure of a replayed graph: attributed to the graph as a whole. */
static fdy_status graph_failed(fdy_error *e, fdy_status st,
                               const ex_segment *seg, const char *op) {
  e->kind = st;
  e->command_index = (int64_t)seg->first;
  snprintf(e->backend_op, sizeof(e->backend_op), "%s", op);
  fdy_error_prefix(e, "commands %zu to %zu (one graph): backend %s failed",
                   seg->first, seg->first + seg->count - 1, op);
  return st;
}

/* A run of a recorded step: its graphs, each followed by one host wait
 * where the plan waits after it. */
static fdy_status run_graphs(fdy_executor *x, const ex_step *step,
                             fdy_error *e) {
  const size_t bucket = bucket_of(x, step);
  x->stats.last_run_rows = step->bucket_rows[bucket];
  for (size_t k = 0; k < step->segment_count; k++) {
    const ex_segment *seg =
        &x->segments[step->first_segment + bucket * step->segment_count + k];
    fdy_status st = x->ops->graph_launch(x->b, seg->graph, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "graph_launch");
    }
    x->stats.last_run_graph_launches++;
    x->stats.graph_launches++;
    if (seg->host_wait == SIZE_MAX) {
      continue;
    }
    st = x->ops->event_record(x->b, x->streams[0], x->graph_done, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "event_record");
    }
    st = x->ops->host_wait(x->b, x->graph_done, e);
    if (st != FDY_OK) {
      return graph_failed(e, st, seg, "host_wait");
    }
  }
  return FDY_OK;
}

/* ---- life cycle
 * -------------------------------------------------------------- */

/* Drains (when asked) and releases every handle. A failed drain is recorded
 * in the cleanup fields of e when the executor already failed. */
static void release_all(fdy_executor *x, bool drain, fdy_error *e) {
  if (drain && x->ops != NULL) {
    fdy_error ce;
    fdy_error_clear(&ce);
    fdy_status st = x->ops->drain(x->b, &ce);
    if (st != FDY_OK && e != NULL) {
      e->cleanup_kind = st;
      snprintf(e->cleanup_message, sizeof(e->cleanup_message),
               "drain after the failure failed: %.200s", ce.message);
    }
  }
  if (x->segments != NULL) {
    destroy_graphs(x, 0, x->segment_count);
  }
  if (x->graph_done != NULL) {
    x->ops->event_destroy(x->b, x->graph_done);
    x->graph_done = NULL;
  }
  for (uint32_t i = 0; x->events && i < x->event_count; i++) {
    if (x->events[i]) {
      x->ops->event_destroy(x->b, x->events[i]);
      x->events[i] = NULL;
    }
  }
  for (size_t i = 0; x->starts && i < x->command_count; i++) {
    if (x->starts[i]) {
      x->ops->event_destroy(x->b, x->starts[i]);
      x->starts[i] = NULL;
    }
  }
  for (uint32_t i = 0; x->buffers && i < x->buffer_count; i++) {
    if (x->buffers[i]) {
      x->ops->buffer_release(x->b, x->buffers[i]);
      x->buffers[i] = NULL;
    }
  }
  for (uint32_t i = 0; x->workspace && i < x->stream_count; i++) {
    if (x->workspace[i]) {
      x->ops->buffer_release(x->b, x->workspace[i]);
      x->workspace[i] = NULL;
    }
  }
  for (uint32_t i = 0; x->streams && i < x->stream_count; i++) {
    if (x->streams[i]) {
      x->ops->stream_destroy(x->b, x->streams[i]);
      x->streams[i] = NULL;
    }
  }
  for (size_t i = 0; i < x->host_count; i++) {
    x->ops->host_unregister(x->b, x->hosts[i]);
  }
  x->host_count = 0;
  for (size_t i = 0; i < x->map_count; i++) {
    munmap(x->maps[i].base, (size_t)x->maps[i].size);
  }
  x->map_count = 0;
}

static void free_executor(fdy_executor *x) {
  if (x->staging) {
    for (size_t t = 0; t < x->tensor_count; t++) {
      free(x->staging[t].data);
    }
  }
  free(x->staging);
  for (size_t t = 0; x->packed && t < x->tensor_count; t++) {
    free(x->packed[t]);
  }
  free(x->packed);
  free(x->streams);
  free(x->buffers);
  free(x->workspace);
  free(x->workspace_bytes);
  free(x->events);
  free(x->starts);
  free(x->maps);
  free(x->hosts);
  free(x->copies);
  free(x->cmds);
  free(x->launch_ops);
  free(x->timings);
  for (size_t s = 0; x->steps && s < fdy_plan_section_count(x->plan); s++) {
    free(x->steps[s].narrowed);
    free(x->steps[s].narrowed_bytes);
  }
  free(x->steps);
  free(x->segments);
  free(x);
}

/* An I/O failure while weight files are mapped: names the first mapped file
 * that is now shorter than its mapping (name, expected = bytes mapped,
 * actual = bytes now), the likely cause of a failed copy from it. */
static void name_shrunk_file(const fdy_executor *x, fdy_status st,
                             fdy_error *e) {
  for (size_t i = 0; st == FDY_ERR_IO && i < x->map_count; i++) {
    const ex_mapping *m = &x->maps[i];
    struct stat sb;
    if (stat(m->path, &sb) == 0 && (uint64_t)sb.st_size < m->size) {
      fdy_error_prefix(e, "weight file %s shrank from %llu to %llu bytes",
                       m->path, (unsigned long long)m->size,
                       (unsigned long long)sb.st_size);
      snprintf(e->name, sizeof(e->name), "%s", m->path);
      e->expected = m->size;
      e->actual = (uint64_t)sb.st_size;
      return;
    }
  }
}

/* A backend may read registered (page-locked) memory by DMA, which sees
 * other bytes, and no error, where the file behind a mapping was truncated
 * (the CUDA backend does: docs/reliability.md). So a mapped file that is
 * shorter than its mapping fails with FDY_ERR_IO (named by
 * name_shrunk_file), its message `why`:
 * - after create's copies and after every run (COPIED_FROM_SHRUNK_FILE):
 *   the run or create that copied from it;
 * - before every run (RUN_NOT_STARTED): the run, which then issues nothing,
 *   so a file truncated between runs is never copied from.
 * step_only: only the mappings steps copy from (unpacked streamed weights).
 * A truncation during a run is detected after it, not prevented: packed
 * streaming (the default) never reads the files during runs. */
static const char COPIED_FROM_SHRUNK_FILE[] =
    "copies from its registered pages may have read other bytes";
static const char RUN_NOT_STARTED[] =
    "the run copies from its registered pages, so it was not started";

static fdy_status check_registered_files(const fdy_executor *x, bool step_only,
                                         const char *why, fdy_error *e) {
  for (size_t i = 0; i < x->map_count; i++) {
    const ex_mapping *m = &x->maps[i];
    struct stat sb;
    if (m->host == NULL || (step_only && !m->step_use) ||
        stat(m->path, &sb) != 0 || (uint64_t)sb.st_size >= m->size) {
      continue;
    }
    /* fail_executor prefixes the file, its mapped and current sizes */
    return fdy_error_set(e, FDY_ERR_IO, "%s", why);
  }
  return FDY_OK;
}

/* Marks the executor failed after draining and releasing everything. */
static fdy_status fail_executor(fdy_executor *x, fdy_status st, fdy_error *e) {
  name_shrunk_file(x, st, e);
  release_all(x, true, e);
  x->failed = true;
  return st;
}

static fdy_status create_handles(fdy_executor *x, fdy_error *e) {
  x->streams = calloc(x->stream_count + 1, sizeof(*x->streams));
  x->buffers = calloc(x->buffer_count + 1, sizeof(*x->buffers));
  x->workspace = calloc(x->stream_count + 1, sizeof(*x->workspace));
  x->workspace_bytes = calloc(x->stream_count + 1, sizeof(uint64_t));
  x->events = calloc(x->event_count + 1, sizeof(*x->events));
  x->cmds = calloc(x->command_count + 1, sizeof(*x->cmds));
  if (x->collect) {
    x->starts = calloc(x->command_count + 1, sizeof(*x->starts));
    x->timings = calloc(x->command_count + 1, sizeof(*x->timings));
  }
  if (!x->streams || !x->buffers || !x->workspace || !x->workspace_bytes ||
      !x->events || !x->cmds || (x->collect && (!x->starts || !x->timings))) {
    return oom(e);
  }
  for (uint32_t i = 0; i < x->stream_count; i++) {
    fdy_status st = x->ops->stream_create(x->b, &x->streams[i], e);
    if (st != FDY_OK) {
      x->streams[i] = NULL;
      fdy_error_prefix(e, "plan stream %u", i);
      return backend_failed(e, st, -1, "stream_create");
    }
  }
  for (uint32_t i = 0; i < x->event_count; i++) {
    fdy_status st = x->ops->event_create(x->b, &x->events[i], e);
    if (st != FDY_OK) {
      x->events[i] = NULL;
      return backend_failed(e, st, -1, "event_create");
    }
  }
  for (size_t i = 0; x->collect && i < x->command_count; i++) {
    const fdy_command *c = fdy_plan_command(x->plan, i);
    if (command_signal(c) == UINT32_MAX) {
      continue;
    }
    fdy_status st = x->ops->event_create(x->b, &x->starts[i], e);
    if (st != FDY_OK) {
      x->starts[i] = NULL;
      return backend_failed(e, st, (int64_t)i, "event_create");
    }
  }
  return FDY_OK;
}

fdy_status fdy_executor_create(const fdy_plan *plan, const fdy_graph *graph,
                               fdy_backend *backend,
                               const fdy_executor_options *options,
                               fdy_executor **out, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "executor create needs an output pointer");
  }
  *out = NULL;
  int64_t begin = fdy_now_ns();
  const fdy_graph *effective = NULL;
  fdy_plan_summary summary;
  fdy_status st = preflight(plan, graph, backend, &effective, &summary, &e);
  if (st != FDY_OK) {
    if (err) {
      *err = e;
    }
    return st;
  }
  fdy_executor *x = calloc(1, sizeof(*x));
  if (x == NULL) {
    return oom(err);
  }
  x->plan = plan;
  x->graph = effective;
  x->b = backend;
  x->ops = backend->ops;
  x->collect = options != NULL && options->collect_timings;
  x->registers_host = options == NULL || !options->skip_host_registration;
  const fdy_backend_ops *o = backend->ops;
  x->graphs = o->graph_begin && o->graph_end && o->graph_launch &&
              o->graph_destroy && !x->collect &&
              (options == NULL || !options->no_graphs);
  x->packs_streamed = options == NULL || !options->skip_packing;
  x->stream_count = fdy_plan_stream_count(plan);
  x->buffer_count = fdy_plan_buffer_count(plan);
  x->event_count = fdy_plan_event_count(plan);
  x->command_count = fdy_plan_command_count(plan);
  x->tensor_count = fdy_graph_tensor_count(effective);
  st = create_handles(x, &e);
  if (st == FDY_OK) {
    st = prepare_weights(x, &e);
  }
  if (st == FDY_OK) {
    st = prepare_staging(x, &e);
  }
  int64_t upload = fdy_now_ns();
  if (st == FDY_OK) {
    st = run_section(x, 0, &e);
  }
  if (st == FDY_OK) {
    st = check_registered_files(x, false, COPIED_FROM_SHRUNK_FILE, &e);
  }
  if (st == FDY_OK) {
    x->stats.upload_ns = fdy_now_ns() - upload;
    release_setup_mappings(x);
    st = resolve_launches(x, &e);
  }
  if (st == FDY_OK && x->graphs) {
    st = record_steps(x, &e);
  }
  if (st != FDY_OK) {
    name_shrunk_file(x, st, &e);
    release_all(x, true, &e);
    free_executor(x);
    if (err) {
      *err = e;
    }
    return st;
  }
  x->stats.setup_transfer_bytes = summary.setup_transfer_bytes;
  x->stats.setup_ns = fdy_now_ns() - begin;
  *out = x;
  return FDY_OK;
}

fdy_status fdy_executor_finish(fdy_executor *x, fdy_error *err) {
  fdy_error e;
  fdy_error_clear(&e);
  if (x == NULL || x->failed || x->finished) {
    return FDY_OK;
  }
  x->finished = true;
  /* Graphs use the buffers teardown releases; the last run left nothing
   * pending (every step ends observed by the host, plan.h). */
  if (x->segments != NULL) {
    destroy_graphs(x, 0, x->segment_count);
  }
  size_t teardown = fdy_plan_section_count(x->plan) - 1;
  fdy_status st = run_section(x, teardown, &e);
  if (st == FDY_OK) {
    st = x->ops->drain(x->b, &e);
    if (st != FDY_OK) {
      backend_failed(&e, st, -1, "drain");
    }
  }
  if (st != FDY_OK) {
    fail_executor(x, st, &e);
    if (err) {
      *err = e;
    }
  }
  return st;
}

void fdy_executor_destroy(fdy_executor *x) {
  if (x == NULL) {
    return;
  }
  fdy_executor_finish(x, NULL);
  release_all(x, true, NULL);
  free_executor(x);
}

void *fdy_executor_input(fdy_executor *x, fdy_tensor_id tensor,
                         uint64_t *bytes) {
  if (x == NULL || tensor.v >= x->tensor_count || !x->staging[tensor.v].input) {
    if (bytes) {
      *bytes = 0;
    }
    return NULL;
  }
  if (bytes) {
    *bytes = x->staging[tensor.v].bytes;
  }
  return x->staging[tensor.v].data;
}

const void *fdy_executor_output(const fdy_executor *x, fdy_tensor_id tensor,
                                uint64_t *bytes) {
  if (x == NULL || tensor.v >= x->tensor_count ||
      !x->staging[tensor.v].output) {
    if (bytes) {
      *bytes = 0;
    }
    return NULL;
  }
  if (bytes) {
    *bytes = x->staging[tensor.v].bytes;
  }
  return x->staging[tensor.v].data;
}

int64_t fdy_executor_step(const fdy_executor *x, const char *name) {
  int64_t s = x ? fdy_plan_find_section(x->plan, name) : -1;
  if (s <= 0 || (size_t)s + 1 >= fdy_plan_section_count(x->plan)) {
    return -1;
  }
  return s;
}

fdy_status fdy_executor_run(fdy_executor *x, size_t step, fdy_error *err) {
  if (x == NULL || x->failed || x->finished || step == 0 ||
      step + 1 >= fdy_plan_section_count(x->plan)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "executor run needs a live executor and a step "
                         "section (got section %zu%s)",
                         step, x && x->failed ? " of a failed executor" : "");
  }
  fdy_error e;
  fdy_error_clear(&e);
  /* Outputs are poisoned (all bits set: NaN for floats, -1 for integers)
   * so that a run that fails to copy one out can never pass for a result. */
  for (size_t t = 0; t < x->tensor_count; t++) {
    if (x->staging[t].output) {
      memset(x->staging[t].data, 0xff, (size_t)x->staging[t].bytes);
    }
  }
  x->stats.last_run_graph_launches = 0;
  x->stats.last_run_rows = 0;
  const ex_step *recorded = x->steps != NULL ? &x->steps[step] : NULL;
  fdy_status st = check_registered_files(x, true, RUN_NOT_STARTED, &e);
  if (st == FDY_OK) {
    st = recorded != NULL && recorded->mode == FDY_STEP_GRAPHS
             ? run_graphs(x, recorded, &e)
             : run_section(x, step, &e);
  }
  if (st == FDY_OK) {
    st = check_registered_files(x, true, COPIED_FROM_SHRUNK_FILE, &e);
  }
  if (st != FDY_OK) {
    fail_executor(x, st, &e);
    if (err) {
      *err = e;
    }
  }
  return st;
}

fdy_step_mode fdy_executor_step_mode(const fdy_executor *x, size_t step,
                                     fdy_error *why) {
  fdy_error_clear(why);
  if (x == NULL || x->steps == NULL || step == 0 ||
      step + 1 >= fdy_plan_section_count(x->plan)) {
    return FDY_STEP_COMMANDS;
  }
  const ex_step *s = &x->steps[step];
  if (s->mode == FDY_STEP_FALLBACK && why != NULL) {
    *why = s->why;
  }
  return s->mode;
}

const fdy_command_timing *fdy_executor_timings(const fdy_executor *x,
                                               size_t *count) {
  if (x == NULL || !x->collect) {
    if (count) {
      *count = 0;
    }
    return NULL;
  }
  if (count) {
    *count = x->timing_count;
  }
  return x->timings;
}

fdy_executor_stats fdy_executor_get_stats(const fdy_executor *x) {
  fdy_executor_stats none;
  memset(&none, 0, sizeof(none));
  return x ? x->stats : none;
}
