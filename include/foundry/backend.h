/* The backend contract: what the runtime needs from a device, as a table of
 * function pointers. Backends (fake, cpu, cuda) fill a `static const` table
 * with designated initializers; entries marked optional may be NULL and the
 * runtime checks them before use.
 *
 * Handles (buffers, streams, events, host registrations) are opaque to the
 * runtime. Reference rule: work that a backend accepted (copy, launch) keeps
 * every buffer it touches alive until that work completed, even when the
 * runtime releases its handle earlier; `*_release` only drops the caller's
 * reference.
 *
 * Failure rule: an entry that returns an error either submitted nothing or,
 * when it did submit work, still returns no handle; `drain` then waits for
 * everything. No entry may exit or abort on a device error.
 *
 * Thread-safety: the runtime calls a backend from one thread at a time. */
#ifndef FOUNDRY_BACKEND_H
#define FOUNDRY_BACKEND_H

#include "foundry/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fdy_backend fdy_backend;
typedef struct fdy_backend_buffer fdy_backend_buffer;
typedef struct fdy_backend_stream fdy_backend_stream;
typedef struct fdy_backend_event fdy_backend_event;
typedef struct fdy_backend_host fdy_backend_host;

/* Most weights one launch binds (equals FDY_MAX_BINDINGS of plans). */
#define FDY_MAX_LAUNCH_WEIGHTS 8

/* One weight bound to an op launch. */
typedef struct fdy_launch_weight {
  fdy_backend_buffer *buffer; /* slot holding the weight from offset 0 */
  uint64_t bytes;             /* the weight's bytes (<= slot bytes) */
} fdy_launch_weight;

/* Everything a backend needs to run one op. */
typedef struct fdy_launch_desc {
  const char *kind;  /* op kind, e.g. FDY_OP_SYNTHETIC_CHECKSUM */
  uint64_t param;    /* op param from the graph */
  uint32_t op_index; /* index of the op in graph order */
  uint32_t weight_count;
  fdy_launch_weight weights[FDY_MAX_LAUNCH_WEIGHTS];
  /* Host word the op's 64-bit result is stored into. The backend writes it
   * no later than when the launch's event is observed complete by host_wait
   * or drain. Must stay valid until then. */
  uint64_t *result;
} fdy_launch_desc;

/* Device-side timestamps of one completed event, on the host's
 * CLOCK_MONOTONIC nanosecond scale (see fdy_now_ns) as well as the backend
 * can align them. */
typedef struct fdy_event_times {
  int64_t start_ns;
  int64_t end_ns;
} fdy_event_times;

typedef struct fdy_backend_ops {
  const char *name; /* "fake", "cpu", "cuda" */

  fdy_status (*capabilities)(fdy_backend *b, fdy_device_caps *out,
                             fdy_error *err);
  /* True when the backend can launch ops of this kind. */
  bool (*supports_op)(fdy_backend *b, const char *kind);

  fdy_status (*buffer_alloc)(fdy_backend *b, uint64_t bytes,
                             fdy_backend_buffer **out, fdy_error *err);
  /* Drops the caller's reference (memory freed once no work uses it). */
  void (*buffer_release)(fdy_backend *b, fdy_backend_buffer *buffer);

  /* Optional: page-lock caller memory in place so copies from it are direct.
   * Copies from unregistered memory must still work (staged). */
  fdy_status (*host_register)(fdy_backend *b, const void *ptr, uint64_t bytes,
                              fdy_backend_host **out, fdy_error *err);
  void (*host_unregister)(fdy_backend *b, fdy_backend_host *host);

  fdy_status (*stream_create)(fdy_backend *b, fdy_backend_stream **out,
                              fdy_error *err);
  /* Destroys a stream; callers drain first. */
  void (*stream_destroy)(fdy_backend *b, fdy_backend_stream *stream);

  /* Copies bytes from host src into dst at dst_offset on stream; *out is an
   * event that completes with the copy. src must stay valid until then. */
  fdy_status (*copy_to_device)(fdy_backend *b, fdy_backend_stream *stream,
                               fdy_backend_buffer *dst, uint64_t dst_offset,
                               const void *src, uint64_t bytes,
                               fdy_backend_event **out, fdy_error *err);
  /* Runs an op on stream; *out completes with it. */
  fdy_status (*launch)(fdy_backend *b, fdy_backend_stream *stream,
                       const fdy_launch_desc *desc, fdy_backend_event **out,
                       fdy_error *err);
  /* Later work on stream starts after event completed. */
  fdy_status (*stream_wait)(fdy_backend *b, fdy_backend_stream *stream,
                            fdy_backend_event *event, fdy_error *err);
  /* Blocks the host until event completed. */
  fdy_status (*host_wait)(fdy_backend *b, fdy_backend_event *event,
                          fdy_error *err);
  /* Optional: timestamps of a completed event. */
  fdy_status (*event_times)(fdy_backend *b, fdy_backend_event *event,
                            fdy_event_times *out, fdy_error *err);
  void (*event_release)(fdy_backend *b, fdy_backend_event *event);

  /* Waits for all submitted work on every stream. Safe to call at any time,
   * also after failures. */
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
/* Name of the backend ("cpu", ...). */
static inline const char *fdy_backend_name(const fdy_backend *b) {
  return b->ops->name;
}

#ifdef __cplusplus
}
#endif
#endif
