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

/* ---- counted entries ------------------------------------------------------
 *
 * Every counted entry keeps one rule. It counts the call; unless this is
 * the call to fail before submit, it runs the inner entry, and returns the
 * inner entry's status when that failed or this is not the call to fail.
 * Otherwise it reports the injected failure, having first given back what
 * the inner entry made when it ran (after submit).
 *
 * FAULT_COUNTED(entry, on_success, give_back, on_failure, (PARAMS), ARGS...)
 * defines that entry as fault_<entry>(fdy_backend *b, PARAMS), PARAMS
 * ending with the error err, and calls the inner entry with (the inner
 * backend, ARGS...). Three statements, which may use PARAMS and f (the
 * wrapper), complete it, each possibly empty:
 *   on_success runs when the inner entry succeeded and the call does not
 *     fail; it may return the entry's status instead of FDY_OK;
 *   give_back runs when the inner entry succeeded and the call then fails
 *     (after submit);
 *   on_failure runs before the injected failure is reported, in both
 *     modes (it clears the outputs). */
#define FAULT_UNPAREN(...) __VA_ARGS__
#define FAULT_COUNTED(entry, on_success, give_back, on_failure, params, ...)   \
  static fdy_status fault_##entry(fdy_backend *b, FAULT_UNPAREN params) {      \
    fault_backend *f = fault_of(b);                                            \
    bool hit = count_call(f, #entry);                                          \
    if (!fail_before(f, hit)) {                                                \
      fdy_status st = inner_ops(f)->entry(f->inner, __VA_ARGS__);              \
      if (st != FDY_OK || !hit) {                                              \
        if (st == FDY_OK) {                                                    \
          on_success;                                                          \
        }                                                                      \
        return st;                                                             \
      }                                                                        \
      give_back;                                                               \
    }                                                                          \
    on_failure;                                                                \
    return injected(f, #entry, err);                                           \
  }

/* A counted entry that forwards and does nothing more. */
#define FAULT_FORWARDED(entry, params, ...)                                    \
  FAULT_COUNTED(entry, , , , params, __VA_ARGS__)

/* A create entry (its output `out` last before err): after submit, the
 * handle the inner entry made is given back with the inner entry
 * `destroy`; in both modes the caller gets NULL, as a failed create leaves
 * its output. */
#define FAULT_CREATE(entry, destroy, params, ...)                              \
  FAULT_COUNTED(                                                               \
      entry, , inner_ops(f)->destroy(f->inner, *out),                          \
      if (out != NULL) { *out = NULL; }, params, __VA_ARGS__)

static void clear_caps(fdy_device_caps *out) {
  if (out) {
    memset(out, 0, sizeof(*out));
  }
}

static void clear_time(int64_t *out_ns) {
  if (out_ns) {
    *out_ns = 0;
  }
}

/* The outcome of an event_time whose inner entry succeeded: the simulated
 * device fault, with the time cleared, or FDY_OK. */
static fdy_status event_time_outcome(const fault_backend *f, int64_t *out_ns,
                                     fdy_error *err) {
  fdy_status st = device_fault(f, err);
  if (st != FDY_OK) {
    clear_time(out_ns);
  }
  return st;
}

/* The outcome of a drain whose inner entry succeeded: the simulated device
 * fault, else the failure fail_drain asks for, else FDY_OK. */
static fdy_status drain_outcome(const fault_backend *f, fdy_error *err) {
  fdy_status st = device_fault(f, err);
  if (st != FDY_OK || !f->opts.fail_drain) {
    return st;
  }
  fdy_error_set(err, FDY_ERR_BACKEND,
                "fault(%s): drain told to fail (after draining)",
                inner_ops(f)->name);
  if (err) {
    strcpy(err->backend_op, "drain");
  }
  return FDY_ERR_BACKEND;
}

/* A graph_begin failed after submit: ends the inner recording again and
 * destroys the graph it made, so that nothing is left recording, as
 * backend.h promises of a failed graph_begin. */
static void end_inner_recording(fault_backend *f) {
  fdy_backend_graph *graph = NULL;
  if (inner_ops(f)->graph_end(f->inner, &graph, NULL) == FDY_OK) {
    inner_ops(f)->graph_destroy(f->inner, graph);
  }
}

/* The counted entries but graph_end. Failed after submit, a create has
 * given back its handle, a stream-ordered entry has queued its work and a
 * wait has waited. A copy or launch that goes through may be the
 * submission of the simulated device fault, which host_wait, event_time
 * and drain report from then on. (Left unformatted: clang-format would
 * read the parameter lists as products.) */
/* clang-format off */
FAULT_COUNTED(capabilities, , , clear_caps(out),
              (fdy_device_caps *out, fdy_error *err),
              out, err)
FAULT_CREATE(buffer_alloc, buffer_release,
             (uint64_t bytes, fdy_backend_buffer **out, fdy_error *err),
             bytes, out, err)
FAULT_CREATE(host_register, host_unregister,
             (const void *ptr, uint64_t bytes, fdy_backend_host **out,
              fdy_error *err),
             ptr, bytes, out, err)
FAULT_CREATE(stream_create, stream_destroy,
             (fdy_backend_stream **out, fdy_error *err),
             out, err)
FAULT_CREATE(event_create, event_destroy,
             (fdy_backend_event **out, fdy_error *err),
             out, err)
FAULT_FORWARDED(event_record,
                (fdy_backend_stream *stream, fdy_backend_event *event,
                 fdy_error *err),
                stream, event, err)
FAULT_COUNTED(copy_to_device, note_submission(f, "copy_to_device", NULL), , ,
              (fdy_backend_stream *stream, fdy_backend_buffer *dst,
               uint64_t dst_offset, const void *src, uint64_t bytes,
               fdy_error *err),
              stream, dst, dst_offset, src, bytes, err)
FAULT_COUNTED(copy_to_host, note_submission(f, "copy_to_host", NULL), , ,
              (fdy_backend_stream *stream, void *dst, fdy_backend_buffer *src,
               uint64_t src_offset, uint64_t bytes, fdy_error *err),
              stream, dst, src, src_offset, bytes, err)
FAULT_COUNTED(launch, note_submission(f, "launch", op), , ,
              (fdy_backend_stream *stream, const fdy_op *op, fdy_error *err),
              stream, op, err)
FAULT_FORWARDED(stream_wait,
                (fdy_backend_stream *stream, fdy_backend_event *event,
                 fdy_error *err),
                stream, event, err)
FAULT_COUNTED(host_wait, return device_fault(f, err), , ,
              (fdy_backend_event *event, fdy_error *err),
              event, err)
FAULT_COUNTED(event_time, return event_time_outcome(f, out_ns, err), ,
              clear_time(out_ns),
              (fdy_backend_event *event, int64_t *out_ns, fdy_error *err),
              event, out_ns, err)
FAULT_COUNTED(drain, return drain_outcome(f, err), , ,
              (fdy_error *err),
              err)
FAULT_COUNTED(graph_begin, , end_inner_recording(f), ,
              (fdy_backend_stream *const *streams, uint32_t count,
               fdy_error *err),
              streams, count, err)
FAULT_FORWARDED(graph_launch,
                (fdy_backend_graph *graph, fdy_error *err),
                graph, err)
/* clang-format on */

/* graph_end always calls the inner graph_end, so that nothing is left
 * recording after it (backend.h); when it is the call to fail, the graph
 * the inner entry made is destroyed and the caller gets NULL. */
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

/* ---- forwarded entries, never counted ------------------------------------ */

static bool fault_supports_op(fdy_backend *b, const fdy_op *op) {
  fault_backend *f = fault_of(b);
  return inner_ops(f)->supports_op(f->inner, op);
}

static uint64_t fault_workspace_bytes(fdy_backend *b, const fdy_op *op) {
  fault_backend *f = fault_of(b);
  return inner_ops(f)->workspace_bytes(f->inner, op);
}

/* Defines fault_<entry>, the release or destroy entry of a handle of
 * `type`: forwarded. */
#define FAULT_RELEASE(entry, type)                                             \
  static void fault_##entry(fdy_backend *b, type *handle) {                    \
    fault_backend *f = fault_of(b);                                            \
    inner_ops(f)->entry(f->inner, handle);                                     \
  }

FAULT_RELEASE(buffer_release, fdy_backend_buffer)
FAULT_RELEASE(host_unregister, fdy_backend_host)
FAULT_RELEASE(stream_destroy, fdy_backend_stream)
FAULT_RELEASE(event_destroy, fdy_backend_event)
FAULT_RELEASE(graph_destroy, fdy_backend_graph)

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
