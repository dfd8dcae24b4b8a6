/* The fault backend (include/foundry/fault.h): forwards every entry to the
 * inner backend and fails the counted call fail_at_call, before or after
 * the inner entry ran, or simulates a device fault of one submission.
 *
 * Each wrapper carries its own copy of the entry table, made from a static
 * template: it takes the inner backend's name, and its optional entries are
 * NULL where the inner backend's are, so callers that check for an optional
 * entry see the inner backend's answer. A wrapper is recognized by its
 * destroy entry. */
#include "foundry/fault.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fault_backend {
  fdy_backend base;
  fdy_backend_ops ops; /* the template with the inner name and optionals */
  fdy_backend *inner;  /* borrowed */
  fdy_fault_options opts;
  fdy_fault_stats stats;
  /* the simulated device fault (device_fault_at_submission): its entry
   * and, for a launch, op kind; seq 0 until that submission happened */
  uint64_t device_fault_seq;
  const char *device_fault_op;
  bool device_fault_is_launch;
  fdy_op_kind device_fault_kind;
} fault_backend;

static void fault_destroy(fdy_backend *b);

static fault_backend *fault_of(fdy_backend *b) {
  assert(b && b->ops->destroy == fault_destroy);
  return (fault_backend *)b;
}

static const fdy_backend_ops *inner_ops(const fault_backend *f) {
  return f->inner->ops;
}

/* Counts a call of entry op; true when it is the one to fail. */
static bool count_call(fault_backend *f, const char *op) {
  uint64_t n = ++f->stats.calls;
  if (f->opts.fail_at_call == 0 || n != f->opts.fail_at_call) {
    return false;
  }
  f->stats.fired = true;
  f->stats.fired_op = op;
  return true;
}

static bool fail_before(const fault_backend *f, bool hit) {
  return hit && f->opts.mode == FDY_FAULT_BEFORE_SUBMIT;
}

static fdy_status injected(const fault_backend *f, const char *op,
                           fdy_error *err) {
  fdy_error_set(err, FDY_ERR_BACKEND,
                "fault(%s): injected failure of %s at call %llu (%s submit)",
                inner_ops(f)->name, op, (unsigned long long)f->stats.calls,
                f->opts.mode == FDY_FAULT_BEFORE_SUBMIT ? "before" : "after");
  if (err) {
    strcpy(err->backend_op, op);
  }
  return FDY_ERR_BACKEND;
}

/* After a copy or launch the inner backend queued: whether it was the
 * submission device_fault_at_submission (the inner backend's numbering). */
static void note_submission(fault_backend *f, const char *op,
                            const fdy_op *launched) {
  if (f->opts.device_fault_at_submission == 0 || f->device_fault_seq != 0 ||
      inner_ops(f)->submitted(f->inner) != f->opts.device_fault_at_submission) {
    return;
  }
  f->device_fault_seq = f->opts.device_fault_at_submission;
  f->device_fault_op = op;
  f->device_fault_is_launch = launched != NULL;
  if (launched != NULL) {
    f->device_fault_kind = launched->kind;
  }
}

/* The simulated device fault, once its submission was made: what CUDA
 * reports for a kernel that faulted (cuda.h), at every host_wait,
 * event_time and drain from then on. */
static fdy_status device_fault(const fault_backend *f, fdy_error *err) {
  if (f->device_fault_seq == 0) {
    return FDY_OK;
  }
  fdy_error_set(err, FDY_ERR_BACKEND,
                "fault(%s): simulated device fault of %s (submission %llu)",
                inner_ops(f)->name, f->device_fault_op,
                (unsigned long long)f->device_fault_seq);
  if (err) {
    strcpy(err->backend_op, f->device_fault_op);
    if (f->device_fault_is_launch) {
      snprintf(err->name, sizeof err->name, "%s",
               fdy_op_kind_name(f->device_fault_kind));
    }
    err->ids[0] = (int64_t)f->device_fault_seq;
    err->ids[1] = (int64_t)f->device_fault_seq;
  }
  return FDY_ERR_BACKEND;
}

static fdy_status fault_capabilities(fdy_backend *b, fdy_device_caps *out,
                                     fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "capabilities");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->capabilities(f->inner, out, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
  }
  if (out) {
    memset(out, 0, sizeof(*out));
  }
  return injected(f, "capabilities", err);
}

static bool fault_supports_op(fdy_backend *b, const fdy_op *op) {
  fault_backend *f = fault_of(b);
  return inner_ops(f)->supports_op(f->inner, op);
}

static uint64_t fault_workspace_bytes(fdy_backend *b, const fdy_op *op) {
  fault_backend *f = fault_of(b);
  return inner_ops(f)->workspace_bytes(f->inner, op);
}

/* Create entries: after submit, the handle the inner entry made is given
 * back before the failure is reported. */

static fdy_status fault_buffer_alloc(fdy_backend *b, uint64_t bytes,
                                     fdy_backend_buffer **out, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "buffer_alloc");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->buffer_alloc(f->inner, bytes, out, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
    inner_ops(f)->buffer_release(f->inner, *out);
  }
  if (out) {
    *out = NULL;
  }
  return injected(f, "buffer_alloc", err);
}

static void fault_buffer_release(fdy_backend *b, fdy_backend_buffer *buffer) {
  fault_backend *f = fault_of(b);
  inner_ops(f)->buffer_release(f->inner, buffer);
}

static fdy_status fault_host_register(fdy_backend *b, const void *ptr,
                                      uint64_t bytes, fdy_backend_host **out,
                                      fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "host_register");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->host_register(f->inner, ptr, bytes, out, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
    inner_ops(f)->host_unregister(f->inner, *out);
  }
  if (out) {
    *out = NULL;
  }
  return injected(f, "host_register", err);
}

static void fault_host_unregister(fdy_backend *b, fdy_backend_host *host) {
  fault_backend *f = fault_of(b);
  inner_ops(f)->host_unregister(f->inner, host);
}

static fdy_status fault_stream_create(fdy_backend *b, fdy_backend_stream **out,
                                      fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "stream_create");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->stream_create(f->inner, out, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
    inner_ops(f)->stream_destroy(f->inner, *out);
  }
  if (out) {
    *out = NULL;
  }
  return injected(f, "stream_create", err);
}

static void fault_stream_destroy(fdy_backend *b, fdy_backend_stream *stream) {
  fault_backend *f = fault_of(b);
  inner_ops(f)->stream_destroy(f->inner, stream);
}

static fdy_status fault_event_create(fdy_backend *b, fdy_backend_event **out,
                                     fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "event_create");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->event_create(f->inner, out, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
    inner_ops(f)->event_destroy(f->inner, *out);
  }
  if (out) {
    *out = NULL;
  }
  return injected(f, "event_create", err);
}

static void fault_event_destroy(fdy_backend *b, fdy_backend_event *event) {
  fault_backend *f = fault_of(b);
  inner_ops(f)->event_destroy(f->inner, event);
}

/* Stream-ordered entries and waits: after submit, the work was queued (or
 * waited for) before the failure is reported. */

static fdy_status fault_event_record(fdy_backend *b, fdy_backend_stream *stream,
                                     fdy_backend_event *event, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "event_record");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->event_record(f->inner, stream, event, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
  }
  return injected(f, "event_record", err);
}

static fdy_status fault_copy_to_device(fdy_backend *b,
                                       fdy_backend_stream *stream,
                                       fdy_backend_buffer *dst,
                                       uint64_t dst_offset, const void *src,
                                       uint64_t bytes, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "copy_to_device");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->copy_to_device(f->inner, stream, dst,
                                                 dst_offset, src, bytes, err);
    if (st != FDY_OK || !hit) {
      if (st == FDY_OK) {
        note_submission(f, "copy_to_device", NULL);
      }
      return st;
    }
  }
  return injected(f, "copy_to_device", err);
}

static fdy_status fault_copy_to_host(fdy_backend *b, fdy_backend_stream *stream,
                                     void *dst, fdy_backend_buffer *src,
                                     uint64_t src_offset, uint64_t bytes,
                                     fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "copy_to_host");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->copy_to_host(f->inner, stream, dst, src,
                                               src_offset, bytes, err);
    if (st != FDY_OK || !hit) {
      if (st == FDY_OK) {
        note_submission(f, "copy_to_host", NULL);
      }
      return st;
    }
  }
  return injected(f, "copy_to_host", err);
}

static fdy_status fault_launch(fdy_backend *b, fdy_backend_stream *stream,
                               const fdy_op *op, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "launch");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->launch(f->inner, stream, op, err);
    if (st != FDY_OK || !hit) {
      if (st == FDY_OK) {
        note_submission(f, "launch", op);
      }
      return st;
    }
  }
  return injected(f, "launch", err);
}

static fdy_status fault_stream_wait(fdy_backend *b, fdy_backend_stream *stream,
                                    fdy_backend_event *event, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "stream_wait");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->stream_wait(f->inner, stream, event, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
  }
  return injected(f, "stream_wait", err);
}

static fdy_status fault_host_wait(fdy_backend *b, fdy_backend_event *event,
                                  fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "host_wait");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->host_wait(f->inner, event, err);
    if (st != FDY_OK || !hit) {
      return st == FDY_OK ? device_fault(f, err) : st;
    }
  }
  return injected(f, "host_wait", err);
}

static fdy_status fault_event_time(fdy_backend *b, fdy_backend_event *event,
                                   int64_t *out_ns, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "event_time");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->event_time(f->inner, event, out_ns, err);
    if (st == FDY_OK && !hit) {
      st = device_fault(f, err);
      if (st != FDY_OK && out_ns) {
        *out_ns = 0;
      }
    }
    if (st != FDY_OK || !hit) {
      return st;
    }
  }
  if (out_ns) {
    *out_ns = 0;
  }
  return injected(f, "event_time", err);
}

/* Graph entries. A graph_begin failed after submit ends the inner
 * recording again, and graph_end always ends it (a failed one destroys the
 * inner graph), so that a failed call leaves nothing recording, as
 * backend.h promises. */

static fdy_status fault_graph_begin(fdy_backend *b,
                                    fdy_backend_stream *const *streams,
                                    uint32_t count, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "graph_begin");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->graph_begin(f->inner, streams, count, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
    fdy_backend_graph *graph = NULL;
    if (inner_ops(f)->graph_end(f->inner, &graph, NULL) == FDY_OK) {
      inner_ops(f)->graph_destroy(f->inner, graph);
    }
  }
  return injected(f, "graph_begin", err);
}

static fdy_status fault_graph_end(fdy_backend *b, fdy_backend_graph **out,
                                  fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "graph_end");
  fdy_status st = inner_ops(f)->graph_end(f->inner, out, hit ? NULL : err);
  if (!hit) {
    return st;
  }
  if (st == FDY_OK && out) {
    inner_ops(f)->graph_destroy(f->inner, *out);
    *out = NULL;
  }
  return injected(f, "graph_end", err);
}

static fdy_status fault_graph_launch(fdy_backend *b, fdy_backend_graph *graph,
                                     fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "graph_launch");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->graph_launch(f->inner, graph, err);
    if (st != FDY_OK || !hit) {
      return st;
    }
  }
  return injected(f, "graph_launch", err);
}

static void fault_graph_destroy(fdy_backend *b, fdy_backend_graph *graph) {
  fault_backend *f = fault_of(b);
  inner_ops(f)->graph_destroy(f->inner, graph);
}

static fdy_status fault_drain(fdy_backend *b, fdy_error *err) {
  fault_backend *f = fault_of(b);
  bool hit = count_call(f, "drain");
  if (!fail_before(f, hit)) {
    fdy_status st = inner_ops(f)->drain(f->inner, err);
    if (st == FDY_OK && !hit) {
      st = device_fault(f, err);
    }
    if (st != FDY_OK || (!hit && !f->opts.fail_drain)) {
      return st;
    }
  }
  if (hit) {
    return injected(f, "drain", err);
  }
  fdy_error_set(err, FDY_ERR_BACKEND,
                "fault(%s): drain told to fail (after draining)",
                inner_ops(f)->name);
  if (err) {
    strcpy(err->backend_op, "drain");
  }
  return FDY_ERR_BACKEND;
}

static uint64_t fault_submitted(fdy_backend *b) {
  fault_backend *f = fault_of(b);
  return inner_ops(f)->submitted(f->inner);
}

/* Forwarded, not counted: a measurement outside any plan. */
static fdy_status fault_measure_ceiling(fdy_backend *b, fdy_ceiling_kind kind,
                                        const void *src, uint64_t bytes,
                                        uint32_t repeats,
                                        double *bytes_per_second,
                                        fdy_error *err) {
  fault_backend *f = fault_of(b);
  return fdy_backend_measure_ceiling(f->inner, kind, src, bytes, repeats,
                                     bytes_per_second, err);
}

static void fault_destroy(fdy_backend *b) {
  free(fault_of(b));
}

static const fdy_backend_ops fault_template = {
    .name = "fault",
    .capabilities = fault_capabilities,
    .supports_op = fault_supports_op,
    .workspace_bytes = fault_workspace_bytes,
    .buffer_alloc = fault_buffer_alloc,
    .buffer_release = fault_buffer_release,
    .host_register = fault_host_register,
    .host_unregister = fault_host_unregister,
    .stream_create = fault_stream_create,
    .stream_destroy = fault_stream_destroy,
    .event_create = fault_event_create,
    .event_destroy = fault_event_destroy,
    .event_record = fault_event_record,
    .copy_to_device = fault_copy_to_device,
    .copy_to_host = fault_copy_to_host,
    .launch = fault_launch,
    .stream_wait = fault_stream_wait,
    .host_wait = fault_host_wait,
    .event_time = fault_event_time,
    .graph_begin = fault_graph_begin,
    .graph_end = fault_graph_end,
    .graph_launch = fault_graph_launch,
    .graph_destroy = fault_graph_destroy,
    .drain = fault_drain,
    .submitted = fault_submitted,
    .measure_ceiling = fault_measure_ceiling,
    .destroy = fault_destroy,
};

fdy_status fdy_fault_backend_create(fdy_backend *inner,
                                    const fdy_fault_options *options,
                                    fdy_backend **out, fdy_error *err) {
  fdy_fault_options defaults = {0};
  const fdy_fault_options *o = options ? options : &defaults;
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fault backend: NULL output");
  }
  *out = NULL;
  if (!inner) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fault backend: NULL inner backend");
  }
  if (o->mode != FDY_FAULT_BEFORE_SUBMIT && o->mode != FDY_FAULT_AFTER_SUBMIT) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fault backend: unknown mode %d", (int)o->mode);
  }
  if (o->device_fault_at_submission != 0 && !inner->ops->submitted) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fault backend: a device fault needs an inner "
                         "backend that numbers its submissions (%s does not)",
                         inner->ops->name);
  }
  fault_backend *f = calloc(1, sizeof(*f));
  if (!f) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "fault backend: out of memory");
  }
  const fdy_backend_ops *in = inner->ops;
  f->ops = fault_template;
  f->ops.name = in->name;
  if (!in->workspace_bytes) {
    f->ops.workspace_bytes = NULL;
  }
  if (!in->host_register || !in->host_unregister) {
    f->ops.host_register = NULL;
    f->ops.host_unregister = NULL;
  }
  if (!in->event_time) {
    f->ops.event_time = NULL;
  }
  if (!in->submitted) {
    f->ops.submitted = NULL;
  }
  if (!in->measure_ceiling) {
    f->ops.measure_ceiling = NULL;
  }
  if (!in->graph_begin || !in->graph_end || !in->graph_launch ||
      !in->graph_destroy) {
    f->ops.graph_begin = NULL;
    f->ops.graph_end = NULL;
    f->ops.graph_launch = NULL;
    f->ops.graph_destroy = NULL;
  }
  f->base.ops = &f->ops;
  f->base.self = f;
  f->inner = inner;
  f->opts = *o;
  *out = &f->base;
  return FDY_OK;
}

fdy_fault_stats fdy_fault_get_stats(const fdy_backend *b) {
  assert(b && b->ops->destroy == fault_destroy);
  return ((const fault_backend *)b)->stats;
}
