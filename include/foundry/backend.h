/* The backend contract: what the executor needs from a device, as a table
 * of function pointers. Backends (fake, cpu, cuda) fill a `static const`
 * table with designated initializers; entries marked optional may be NULL
 * and the executor checks them before use.
 *
 * The model is the CUDA stream model: buffers, streams (FIFO queues of
 * copies and op launches), events created once and recorded many times,
 * stream waits and host waits. A step of a plan is a sequence of these
 * calls whose operands all live in device buffers (no host words written
 * by launches, no parameters baked in per run), so a backend can capture
 * it once and replay it.
 *
 * Handles (buffers, streams, events, host registrations) are opaque to the
 * executor. Reference rule: work that a backend accepted (copy, launch)
 * keeps every buffer it touches alive until that work completed, even when
 * the executor releases its handle earlier; `buffer_release` only drops the
 * caller's reference.
 *
 * Failure rule: an entry that returns an error may still have submitted
 * work; `drain` then waits for everything. No entry may exit or abort on a
 * device error.
 *
 * Failed work: work a backend accepted may fail later, e.g. a copy from
 * caller memory that cannot be read (a file mapping whose file was
 * truncated: FDY_ERR_IO, backend_op "copy_to_device"; host memory is read
 * with fdy_host_copy, foundry/host_copy.h). host_wait on an event recorded
 * after the failed work, on its stream or on a stream ordered after it by
 * stream_wait, returns that error; work ordered after it is skipped or runs
 * harmlessly. drain returns the error unless a host_wait returned it, and
 * clears it: later work runs again. A backend may report a failure sooner
 * (from the entry that submitted the work, or from any host_wait).
 *
 * Graphs (optional: graph_begin, graph_end, graph_launch, graph_destroy,
 * all four or none): a backend may record a section of stream work once
 * and replay it. Between graph_begin and graph_end the caller issues only
 * stream-ordered calls (copy_to_device, copy_to_host, launch, event_record,
 * stream_wait) on the streams given to graph_begin; they are checked as
 * usual but recorded, not run. graph_launch then runs the recorded work as
 * if those calls were issued again in the same order, with two orderings
 * added: the graph starts after all work submitted earlier to any of its
 * streams, and work submitted later to any of them starts after the whole
 * graph. Events recorded inside a graph order work inside it only: to
 * observe a replay from the host, record an event on one of the graph's
 * streams after graph_launch and host_wait that. Host memory a recorded
 * copy reads or writes is read or written at every replay (write a step's
 * inputs into the same host memory before each launch); it, and every
 * buffer the recorded calls use, must stay valid until graph_destroy. A
 * stream_wait inside a recording names an event recorded earlier in the
 * same recording. A backend that cannot record a call (e.g. a copy
 * from host memory it would have to stage) fails that call with
 * FDY_ERR_UNSUPPORTED; the recording then ends at graph_end, which fails
 * too. Any entry may fail with FDY_ERR_BACKEND; after a failed graph_begin
 * nothing is recording, and graph_end always ends the recording.
 *
 * Thread-safety: the executor calls a backend from one thread at a time. */
#ifndef FOUNDRY_BACKEND_H
#define FOUNDRY_BACKEND_H

#include "foundry/core.h"
#include "foundry/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_backend fdy_backend;
typedef struct fdy_backend_stream fdy_backend_stream;
typedef struct fdy_backend_event fdy_backend_event;
typedef struct fdy_backend_host fdy_backend_host;
typedef struct fdy_backend_graph fdy_backend_graph;

/* The same-run ceilings of measure_ceiling. */
typedef enum fdy_ceiling_kind {
  FDY_CEILING_H2D = 0,    /* host-to-device copies from the caller's src */
  FDY_CEILING_H2D_PINNED, /* the same from src page-locked for the run */
  FDY_CEILING_D2D,        /* device-to-device copies: bytes read + written */
  FDY_CEILING_CHECKSUM,   /* the CHECKSUM op over a resident buffer: bytes
                             read */
} fdy_ceiling_kind;

/* How a backend's copies meet host memory (a backend without the choice
 * ignores it): straight from memory registered with host_register, or
 * through pinned staging buffers for all host memory. */
typedef enum fdy_host_mode {
  FDY_HOST_REGISTERED = 0,
  FDY_HOST_STAGED,
} fdy_host_mode;

typedef struct fdy_backend_ops {
  const char *name; /* "fake", "cpu", "cuda" */

  fdy_status (*capabilities)(fdy_backend *b, fdy_device_caps *out,
                             fdy_error *err);
  /* True when the backend can run this op (kind, parameters, dtypes and
   * shapes; buffers may be NULL). The op passed fdy_op_check. */
  bool (*supports_op)(fdy_backend *b, const fdy_op *op);
  /* Optional: scratch bytes a launch of op needs in op->workspace (0 when
   * none). NULL means no op needs any. Depends on the op's shapes only. */
  uint64_t (*workspace_bytes)(fdy_backend *b, const fdy_op *op);

  fdy_status (*buffer_alloc)(fdy_backend *b, uint64_t bytes,
                             fdy_backend_buffer **out, fdy_error *err);
  /* Drops the caller's reference (memory freed once no work uses it). */
  void (*buffer_release)(fdy_backend *b, fdy_backend_buffer *buffer);

  /* Optional: page-lock caller memory in place so copies from and to it
   * are direct. Copies from unregistered memory must still work (staged). */
  fdy_status (*host_register)(fdy_backend *b, const void *ptr, uint64_t bytes,
                              fdy_backend_host **out, fdy_error *err);
  void (*host_unregister)(fdy_backend *b, fdy_backend_host *host);

  fdy_status (*stream_create)(fdy_backend *b, fdy_backend_stream **out,
                              fdy_error *err);
  /* Destroys a stream; callers drain first. */
  void (*stream_destroy)(fdy_backend *b, fdy_backend_stream *stream);

  /* Events are created once and recorded many times. Waiting on an event
   * that was never recorded is a caller error (the fake backend counts it;
   * a real backend may return at once). */
  fdy_status (*event_create)(fdy_backend *b, fdy_backend_event **out,
                             fdy_error *err);
  /* Destroys an event; callers drain first. */
  void (*event_destroy)(fdy_backend *b, fdy_backend_event *event);
  /* The event completes once all work submitted to stream so far has
   * completed. Recording again replaces the previous completion point. */
  fdy_status (*event_record)(fdy_backend *b, fdy_backend_stream *stream,
                             fdy_backend_event *event, fdy_error *err);

  /* Copies bytes from host src into dst at dst_offset, in stream order.
   * src must stay valid and unchanged until the copy completed. */
  fdy_status (*copy_to_device)(fdy_backend *b, fdy_backend_stream *stream,
                               fdy_backend_buffer *dst, uint64_t dst_offset,
                               const void *src, uint64_t bytes, fdy_error *err);
  /* Copies bytes from src at src_offset into host dst, in stream order.
   * dst must stay valid until the copy completed; its bytes are defined
   * once an event recorded after the copy completed (host_wait) or after
   * drain. */
  fdy_status (*copy_to_host)(fdy_backend *b, fdy_backend_stream *stream,
                             void *dst, fdy_backend_buffer *src,
                             uint64_t src_offset, uint64_t bytes,
                             fdy_error *err);
  /* Runs an op in stream order. Every view of the op must lie inside its
   * buffer, at an offset that is a multiple of the capabilities' alignment
   * (kernels use vector loads); the op passed fdy_op_check and
   * supports_op. */
  fdy_status (*launch)(fdy_backend *b, fdy_backend_stream *stream,
                       const fdy_op *op, fdy_error *err);
  /* Later work on stream starts after the event's current recording
   * completed. */
  fdy_status (*stream_wait)(fdy_backend *b, fdy_backend_stream *stream,
                            fdy_backend_event *event, fdy_error *err);
  /* Blocks the host until the event's current recording completed; returns
   * the failure of work the recording followed (failed work, above). */
  fdy_status (*host_wait)(fdy_backend *b, fdy_backend_event *event,
                          fdy_error *err);
  /* Optional: the host-clock time (fdy_now_ns scale, as well as the
   * backend can align it) at which a completed event's recording
   * completed. */
  fdy_status (*event_time)(fdy_backend *b, fdy_backend_event *event,
                           int64_t *out_ns, fdy_error *err);

  /* Optional (graphs, above): starts recording the stream-ordered calls
   * on streams[0 .. count) (count >= 1, distinct streams, no recording in
   * progress). Errors: FDY_ERR_INVALID_ARGUMENT, FDY_ERR_BACKEND; nothing
   * is recording after a failure. */
  fdy_status (*graph_begin)(fdy_backend *b, fdy_backend_stream *const *streams,
                            uint32_t count, fdy_error *err);
  /* Ends the recording and makes it a graph that can be launched (CUDA:
   * instantiated). On failure (a call of the recording failed, or the
   * backend cannot make the graph) *out is NULL and nothing is recording
   * any more. */
  fdy_status (*graph_end)(fdy_backend *b, fdy_backend_graph **out,
                          fdy_error *err);
  /* Runs the graph on its streams (graphs, above). Work failing inside a
   * replay is reported like any failed work, attributed to the launch of
   * the graph as a whole. */
  fdy_status (*graph_launch)(fdy_backend *b, fdy_backend_graph *graph,
                             fdy_error *err);
  /* Frees the graph; callers drain first. NULL is a no-op. */
  void (*graph_destroy)(fdy_backend *b, fdy_backend_graph *graph);

  /* Optional: how many copies and launches were submitted since creation
   * (copy_to_device, copy_to_host and launch calls that queued work,
   * numbered from 1 in that order). A backend whose work can fault after
   * the call returned (CUDA: a kernel that faults on the device) reports
   * the fault at a later host_wait, event_time or drain as FDY_ERR_BACKEND
   * with backend_op = the faulting entry ("launch", "copy_to_device",
   * "copy_to_host") and ids[0] .. ids[1] = the range of these numbers it
   * lies in; the executor maps the number back to its command. */
  uint64_t (*submitted)(fdy_backend *b);

  /* Optional: measures a same-run ceiling outside any plan (the rates a
   * benchmark compares its runs against): one untimed warm-up, then
   * `repeats` timed runs of `bytes`, and *bytes_per_second from the median
   * time. src is the host source of FDY_CEILING_H2D (as the caller
   * registered it or not) and FDY_CEILING_H2D_PINNED (registered by the
   * backend for the measurement), NULL for the others. A backend that does
   * not measure kind sets *bytes_per_second to 0 ("not measured") and
   * returns FDY_OK; NULL means none is measured (fdy_backend_measure_ceiling
   * below). Errors: FDY_ERR_INVALID_ARGUMENT (bytes or repeats 0, src NULL
   * for a host kind), FDY_ERR_BACKEND; *bytes_per_second is 0 then. */
  fdy_status (*measure_ceiling)(fdy_backend *b, fdy_ceiling_kind kind,
                                const void *src, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err);

  /* Waits for all submitted work on every stream. Safe to call at any time,
   * also after failures. Returns a failure of work that no host_wait
   * returned, and clears it (failed work, above). */
  fdy_status (*drain)(fdy_backend *b, fdy_error *err);
  /* Frees the backend; outstanding work is drained first. */
  void (*destroy)(fdy_backend *b);
} fdy_backend_ops;

/* The common header of every backend object. Backends allocate a larger
 * struct whose first member is this one, or point `self` at their state. */
struct fdy_backend {
  const fdy_backend_ops *ops;
  void *self;
};

/* Calls b->ops->destroy; NULL is a no-op. Inline so that every backend
 * library (which links foundry_core only) provides it. */
static inline void fdy_backend_destroy(fdy_backend *b) {
  if (b) {
    b->ops->destroy(b);
  }
}
/* b->ops->measure_ceiling, or "not measured" (*bytes_per_second = 0,
 * FDY_OK) when the backend has none. */
static inline fdy_status
fdy_backend_measure_ceiling(fdy_backend *b, fdy_ceiling_kind kind,
                            const void *src, uint64_t bytes, uint32_t repeats,
                            double *bytes_per_second, fdy_error *err) {
  if (b->ops->measure_ceiling) {
    return b->ops->measure_ceiling(b, kind, src, bytes, repeats,
                                   bytes_per_second, err);
  }
  *bytes_per_second = 0;
  return FDY_OK;
}
/* Name of the backend ("cpu", ...). */
static inline const char *fdy_backend_name(const fdy_backend *b) {
  return b->ops->name;
}

#ifdef __cplusplus
}
#endif
#endif
