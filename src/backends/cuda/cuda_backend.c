/* The CUDA backend: the backend contract over the CUDA runtime.
 *
 * Slots are cudaMalloc allocations; each runtime stream is a non-blocking
 * CUDA stream; every copy and launch records a start and an end CUDA event
 * (with timing), and its fdy_backend_event carries them. Host payloads are
 * copied straight from registered (page-locked) memory, or through the
 * staging ring (cuda_staging.c) in staged mode and for unregistered memory.
 *
 * Work records and references: every accepted copy or launch is an event
 * object on the pending list. It holds one reference on every buffer it
 * touches and one on itself; the caller holds another on the event. A sweep
 * (in host_wait, drain, buffer_release and when result slots run out) queries
 * the end event of pending work; completed work drops its references,
 * publishes its launch result and frees its result slot. So a buffer released
 * while work still reads it is freed (cudaFree) only once that work completed.
 *
 * Results: each launch gets a result slot (device words plus mapped
 * page-locked host words, from a fixed pool). The kernel's last block writes
 * the sum into the host words; the sweep that observes the launch complete
 * applies fdy_checksum_finish and stores it into desc->result, which is no
 * later than host_wait or drain observing the event.
 *
 * Timestamps: at creation a calibration event is recorded on an idle stream
 * and synchronized; its host time is taken as the midpoint of fdy_now_ns()
 * before the record and after the synchronize (the best of a few tries), so
 * it is within half that window (a few microseconds) of the device time.
 * An event's host time is then calib_host_ns + cudaEventElapsedTime(calib,
 * ev) * 1e6. cudaEventElapsedTime is a float in milliseconds with about
 * 0.5 us resolution; its 24-bit mantissa adds about 1 us of rounding per 10 s
 * since creation, and the GPU and host clocks may drift apart by a few ppm.
 *
 * The runtime calls the backend from one thread at a time (backend.h), so
 * the backend's own state needs no lock; only the staging fill threads run
 * beside the caller. Every CUDA call is checked and a failure becomes an
 * fdy_error with the CUDA error's name and string, except in cleanup paths
 * (release, destroy, unwinding after a failure), which cannot report one and
 * pass the call's result to fdy_cuda_ignore instead. */
#include "cuda_internal.h"

#include "foundry/checksum.h"
#include "foundry/graph.h"
#include "handle_list.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_ALIGNMENT               256
#define CUDA_RESULT_SLOTS            4096 /* slot 0 is reserved for internal launches */
#define CUDA_DEFAULT_STAGING_BYTES   (16 * FDY_MIB)
#define CUDA_DEFAULT_STAGING_BUFFERS 4
#define CUDA_CALIBRATION_TRIES       5

struct fdy_backend_buffer {
  fdy_list_node node;
  uint32_t refs;
  void *data;
  uint64_t bytes;
};

struct fdy_backend_host {
  fdy_list_node node;
  const void *ptr;
  uint64_t bytes;
  /* the part of [ptr, ptr + bytes) that cudaHostRegister page-locked
   * (registered mode): all of it, or only its whole pages when an edge page
   * was already pinned; empty when pin_begin == pin_end */
  uintptr_t pin_begin, pin_end;
};

struct fdy_backend_stream {
  fdy_list_node node;
  cudaStream_t stream;
};

/* One accepted copy or launch, and the handle the caller gets for it. */
struct fdy_backend_event {
  fdy_list_node node; /* on the backend's list of live events */
  uint32_t refs;      /* caller + pending */
  cudaEvent_t start, end;
  bool pending; /* on the pending list: completion not yet observed */
  bool tracked; /* end was recorded, so completion can be queried */
  struct fdy_backend_event *pending_next;
  uint32_t buffer_count;
  fdy_backend_buffer *buffers[FDY_MAX_LAUNCH_WEIGHTS];
  /* launch */
  uint32_t op_index;
  int32_t result_slot; /* -1 for copies */
  uint64_t *result;    /* caller's result word, or NULL */
  uint64_t bytes;      /* checksummed bytes */
};

typedef struct cuda_backend {
  fdy_backend base;
  fdy_cuda_ctx ctx;
  fdy_cuda_options opts;
  char name[128];
  uint64_t page_bytes; /* host page size */
  uint32_t copy_engines;
  cudaEvent_t calib;
  int64_t calib_host_ns;
  fdy_list_node buffers, events, streams, hosts;
  fdy_backend_event *pending;        /* work whose completion is not observed */
  fdy_backend_event *free_events;    /* released records, CUDA events kept */
  fdy_cuda_result_dev *result_dev;   /* CUDA_RESULT_SLOTS */
  fdy_cuda_result_host *result_host; /* CUDA_RESULT_SLOTS, mapped */
  uint32_t *free_slots;
  uint32_t free_slot_count;
  fdy_cuda_staging *staging;
  uint64_t alloc_calls, copy_calls, launch_calls;
  /* first error seen by a sweep outside host_wait/drain, reported by the
   * next host_wait or drain */
  fdy_status deferred;
  fdy_error deferred_err;
} cuda_backend;

static const fdy_backend_ops cuda_ops;

static cuda_backend *cuda_of(fdy_backend *b) {
  return (cuda_backend *)b;
}

/* ---- errors ----------------------------------------------------------------
 */

fdy_status fdy_cuda_fail(fdy_error *err, fdy_status kind, const char *op,
                         const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  fdy_error_set(err, kind, "cuda %s: %s", op, message);
  if (err != NULL) {
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
  }
  return kind;
}

fdy_status fdy_cuda_check(cudaError_t rc, fdy_error *err, const char *op,
                          const char *what) {
  if (rc == cudaSuccess) {
    return FDY_OK;
  }
  cudaGetLastError();
  return fdy_cuda_fail(err, FDY_ERR_BACKEND, op, "%s failed: %s (%s)", what,
                       cudaGetErrorName(rc), cudaGetErrorString(rc));
}

void fdy_cuda_ignore(cudaError_t rc) {
  (void)rc;
  cudaGetLastError();
}

static fdy_status injected(fdy_error *err, const char *op, uint64_t call) {
  return fdy_cuda_fail(err, FDY_ERR_BACKEND, op,
                       "injected failure of %s at call %llu", op,
                       (unsigned long long)call);
}

static fdy_status set_device(cuda_backend *b, fdy_error *err, const char *op) {
  return fdy_cuda_check(cudaSetDevice(b->ctx.device), err, op, "cudaSetDevice");
}

fdy_status fdy_cuda_ctx_of(fdy_backend *b, const char *op, fdy_cuda_ctx **out,
                           fdy_error *err) {
  *out = NULL;
  if (b == NULL || b->ops != &cuda_ops) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "the backend is not a CUDA backend");
  }
  fdy_status st = set_device(cuda_of(b), err, op);
  if (st == FDY_OK) {
    *out = &cuda_of(b)->ctx;
  }
  return st;
}

/* Keeps the first failure of a sequence: when st is one and *first is still
 * FDY_OK, sets *first to st and copies local into err. */
static void keep_first(fdy_status *first, fdy_status st, const fdy_error *local,
                       fdy_error *err) {
  if (st != FDY_OK && *first == FDY_OK) {
    *first = st;
    if (err != NULL) {
      *err = *local;
    }
  }
}

/* ---- references and completion ---------------------------------------------
 */

static void buffer_free(fdy_backend_buffer *buf) {
  fdy_list_unlink(&buf->node);
  fdy_cuda_ignore(cudaFree(buf->data));
  free(buf);
}

static void buffer_unref(fdy_backend_buffer *buf) {
  if (--buf->refs == 0) {
    buffer_free(buf);
  }
}

static void event_destroy(fdy_backend_event *e) {
  if (e->start != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(e->start));
  }
  if (e->end != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(e->end));
  }
  free(e);
}

/* Recycles a record whose last reference went away. */
static void event_unref(cuda_backend *b, fdy_backend_event *e) {
  if (--e->refs == 0) {
    fdy_list_unlink(&e->node);
    e->pending_next = b->free_events;
    b->free_events = e;
  }
}

/* A record with two references (caller + pending) and both CUDA events. */
static fdy_status event_new(cuda_backend *b, const char *op,
                            fdy_backend_event **out, fdy_error *err) {
  fdy_backend_event *e = b->free_events;
  if (e != NULL) {
    b->free_events = e->pending_next;
    cudaEvent_t start = e->start, end = e->end;
    memset(e, 0, sizeof *e);
    e->start = start;
    e->end = end;
  } else {
    e = calloc(1, sizeof *e);
    if (e == NULL) {
      return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, op,
                           "cannot allocate an event");
    }
    fdy_status st =
        fdy_cuda_check(cudaEventCreate(&e->start), err, op, "cudaEventCreate");
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaEventCreate(&e->end), err, op, "cudaEventCreate");
    }
    if (st != FDY_OK) {
      event_destroy(e);
      return st;
    }
  }
  e->refs = 2;
  e->result_slot = -1;
  fdy_list_push(&b->events, &e->node);
  *out = e;
  return FDY_OK;
}

static void defer_error(cuda_backend *b, fdy_status st, const fdy_error *err) {
  if (b->deferred == FDY_OK) {
    b->deferred = st;
    b->deferred_err = *err;
  }
}

/* Ends work e: rc is the outcome of its end event. Publishes its result
 * when it succeeded; returns the error otherwise. Untracked work (it failed
 * while or before being submitted, so the caller got no handle and already
 * has the error) has no outcome to report, and rc is not looked at. */
static fdy_status work_finish(cuda_backend *b, fdy_backend_event *e,
                              cudaError_t rc, fdy_error *err) {
  fdy_status st = FDY_OK;
  if (e->tracked) {
    st = fdy_cuda_check(rc, err,
                        e->result_slot >= 0 ? "launch" : "copy_to_device",
                        "the submitted work");
  }
  if (st == FDY_OK && e->tracked && e->result_slot >= 0) {
    const fdy_cuda_result_host *h = &b->result_host[e->result_slot];
    if (h->diff != 0) {
      st = fdy_cuda_fail(err, FDY_ERR_BACKEND, "launch",
                         "op %u: the compute passes over the slot "
                         "disagreed (the data changed during the kernel)",
                         e->op_index);
      if (err != NULL) {
        err->ids[0] = e->op_index;
      }
    } else if (e->result != NULL) {
      *e->result = fdy_checksum_finish(h->sum, e->bytes);
    }
  }
  if (e->result_slot >= 0) {
    b->free_slots[b->free_slot_count++] = (uint32_t)e->result_slot;
    e->result_slot = -1;
  }
  for (uint32_t i = 0; i < e->buffer_count; i++) {
    buffer_unref(e->buffers[i]);
  }
  e->buffer_count = 0;
  e->pending = false;
  event_unref(b, e);
  return st;
}

/* Finishes every pending record whose completion can be observed now; with
 * `all`, every pending record (after a drain synchronized everything).
 * Returns the first error. */
static fdy_status sweep(cuda_backend *b, bool all, fdy_error *err) {
  fdy_status first = FDY_OK;
  fdy_backend_event **link = &b->pending;
  while (*link != NULL) {
    fdy_backend_event *e = *link;
    cudaError_t rc = cudaSuccess;
    if (e->tracked) {
      rc = all ? cudaEventSynchronize(e->end) : cudaEventQuery(e->end);
    } else if (!all) {
      link = &e->pending_next;
      continue;
    }
    if (rc == cudaErrorNotReady) {
      cudaGetLastError();
      link = &e->pending_next;
      continue;
    }
    *link = e->pending_next;
    e->pending_next = NULL;
    fdy_error local;
    keep_first(&first, work_finish(b, e, rc, &local), &local, err);
  }
  return first;
}

/* A sweep whose errors are kept for the next host_wait or drain. */
static void sweep_quietly(cuda_backend *b) {
  fdy_error e;
  fdy_status st = sweep(b, false, &e);
  if (st != FDY_OK) {
    defer_error(b, st, &e);
  }
}

static fdy_status take_deferred(cuda_backend *b, fdy_error *err) {
  fdy_status st = b->deferred;
  if (st != FDY_OK) {
    if (err != NULL) {
      *err = b->deferred_err;
    }
    b->deferred = FDY_OK;
  }
  return st;
}

static void pending_push(cuda_backend *b, fdy_backend_event *e) {
  e->pending = true;
  e->pending_next = b->pending;
  b->pending = e;
}

/* Ends the submission of work e (from event_new, its buffers referenced) on
 * stream s; st is the outcome so far and submitted whether any of its DMA or
 * kernel was queued. Records its end event and returns e in *out, tracked
 * and pending. On failure the caller gets no handle and loses its
 * reference: queued work stays pending, untracked, so that its buffers live
 * until a drain; work that queued nothing is finished at once. */
static fdy_status work_accept(cuda_backend *b, fdy_backend_event *e,
                              cudaStream_t s, const char *op, fdy_status st,
                              bool submitted, fdy_backend_event **out,
                              fdy_error *err) {
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventRecord(e->end, s), err, op,
                        "cudaEventRecord (end)");
  }
  if (st != FDY_OK) {
    e->refs = 1;
    if (submitted) {
      pending_push(b, e);
    } else {
      work_finish(b, e, cudaSuccess, NULL);
    }
    return st;
  }
  e->tracked = true;
  pending_push(b, e);
  *out = e;
  return FDY_OK;
}

/* ---- entries ---------------------------------------------------------------
 */

static fdy_status cuda_capabilities(fdy_backend *base, fdy_device_caps *out,
                                    fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "capabilities",
                         "out is NULL");
  }
  memset(out, 0, sizeof *out);
  fdy_status st = set_device(b, err, "capabilities");
  if (st != FDY_OK) {
    return st;
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "capabilities", "cudaMemGetInfo");
  if (st != FDY_OK) {
    return st;
  }
  snprintf(out->name, sizeof out->name, "%s", b->name);
  out->total_memory = total_bytes;
  out->free_memory = free_bytes;
  /* cudaMalloc can take at most what is free; the driver reports no other
   * limit. */
  out->max_allocation = free_bytes;
  out->alignment = CUDA_ALIGNMENT;
  out->concurrent_copy_compute = b->copy_engines > 0;
  out->copy_engines = b->copy_engines;
  return FDY_OK;
}

static bool cuda_supports_op(fdy_backend *base, const char *kind) {
  (void)base;
  return kind != NULL && strcmp(kind, FDY_OP_SYNTHETIC_CHECKSUM) == 0;
}

static fdy_status cuda_buffer_alloc(fdy_backend *base, uint64_t bytes,
                                    fdy_backend_buffer **out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                         "out is NULL");
  }
  *out = NULL;
  uint64_t call = ++b->alloc_calls;
  if (bytes == 0 || bytes > SIZE_MAX) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                         "a buffer of %llu bytes was requested",
                         (unsigned long long)bytes);
  }
  if (b->opts.fail_alloc_at == call) {
    return injected(err, "buffer_alloc", call);
  }
  fdy_status st = set_device(b, err, "buffer_alloc");
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_buffer *buf = calloc(1, sizeof *buf);
  if (buf == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "buffer_alloc",
                         "cannot allocate a buffer handle");
  }
  cudaError_t rc = cudaMalloc(&buf->data, (size_t)bytes);
  if (rc != cudaSuccess) {
    free(buf);
    st = fdy_cuda_check(rc, err, "buffer_alloc", "cudaMalloc");
    if (err != NULL) {
      err->actual = bytes;
    }
    return st;
  }
  buf->refs = 1;
  buf->bytes = bytes;
  fdy_list_push(&b->buffers, &buf->node);
  *out = buf;
  return FDY_OK;
}

static void cuda_buffer_release(fdy_backend *base, fdy_backend_buffer *buffer) {
  cuda_backend *b = cuda_of(base);
  if (buffer == NULL) {
    return;
  }
  fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  buffer_unref(buffer);
  sweep_quietly(b);
}

static fdy_backend_host *find_host(cuda_backend *b, const void *ptr,
                                   uint64_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (fdy_list_node *n = b->hosts.next; n != &b->hosts; n = n->next) {
    fdy_backend_host *h = (fdy_backend_host *)n;
    uintptr_t h0 = (uintptr_t)h->ptr;
    if (p >= h0 && p - h0 <= h->bytes && bytes <= h->bytes - (p - h0)) {
      return h;
    }
  }
  return NULL;
}

/* In registered mode the range is page-locked with cudaHostRegister (read-
 * only mappings are retried with cudaHostRegisterReadOnly), which pins every
 * page the range touches. When a page at an edge is already pinned (an
 * adjacent registration shares it), only the whole pages inside the range
 * are pinned, and copies stage the partial edge pages (under a page each).
 * In staged mode the range is only recorded: every copy is staged anyway, so
 * the mode measures copies from pageable memory. */
static cudaError_t pin(uintptr_t begin, uintptr_t end) {
  void *p = (void *)begin;
  cudaError_t rc =
      cudaHostRegister(p, (size_t)(end - begin), cudaHostRegisterDefault);
  if (rc == cudaErrorInvalidValue || rc == cudaErrorNotSupported) {
    cudaGetLastError();
    rc = cudaHostRegister(p, (size_t)(end - begin), cudaHostRegisterReadOnly);
  }
  return rc;
}

static fdy_status cuda_host_register(fdy_backend *base, const void *ptr,
                                     uint64_t bytes, fdy_backend_host **out,
                                     fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                         "out is NULL");
  }
  *out = NULL;
  if (ptr == NULL || bytes == 0 || bytes > UINTPTR_MAX - (uintptr_t)ptr) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                         "a NULL, empty or wrapping host range was given");
  }
  fdy_status st = set_device(b, err, "host_register");
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_host *h = calloc(1, sizeof *h);
  if (h == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "host_register",
                         "cannot allocate a registration handle");
  }
  if (b->opts.host_mode == FDY_CUDA_HOST_REGISTERED) {
    uintptr_t page = (uintptr_t)b->page_bytes;
    uintptr_t begin = (uintptr_t)ptr, end = begin + (uintptr_t)bytes;
    cudaError_t rc = pin(begin, end);
    if (rc == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      begin = (begin + page - 1) & ~(page - 1);
      end &= ~(page - 1);
      rc = end > begin ? pin(begin, end) : cudaSuccess;
    }
    if (rc != cudaSuccess) {
      free(h);
      return fdy_cuda_check(rc, err, "host_register", "cudaHostRegister");
    }
    h->pin_begin = begin;
    h->pin_end = end > begin ? end : begin;
  }
  h->ptr = ptr;
  h->bytes = bytes;
  fdy_list_push(&b->hosts, &h->node);
  *out = h;
  return FDY_OK;
}

static void cuda_host_unregister(fdy_backend *base, fdy_backend_host *host) {
  cuda_backend *b = cuda_of(base);
  if (host == NULL) {
    return;
  }
  fdy_list_unlink(&host->node);
  if (host->pin_end > host->pin_begin) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
    fdy_cuda_ignore(cudaHostUnregister((void *)host->pin_begin));
  }
  free(host);
}

/* Queues the copy of [src, src + bytes) to `to`: the part inside a
 * registration's pinned pages straight, the rest through the staging ring. */
static fdy_status copy_pieces(cuda_backend *b, cudaStream_t s,
                              unsigned char *to, const void *src,
                              uint64_t bytes, bool *submitted, fdy_error *err) {
  const char *op = "copy_to_device";
  uintptr_t p0 = (uintptr_t)src, p1 = p0 + (uintptr_t)bytes;
  uintptr_t d0 = p0, d1 = p0; /* the direct part */
  const fdy_backend_host *h = find_host(b, src, bytes);
  if (h != NULL && h->pin_end > h->pin_begin) {
    d0 = p0 > h->pin_begin ? p0 : h->pin_begin;
    d1 = p1 < h->pin_end ? p1 : h->pin_end;
  }
  bool any = false;
  fdy_status st = FDY_OK;
  *submitted = false;
  if (d1 <= d0) {
    return fdy_cuda_staging_copy(b->staging, s, to, src, bytes, submitted, err);
  }
  if (d0 > p0) {
    st = fdy_cuda_staging_copy(b->staging, s, to, src, d0 - p0, &any, err);
    *submitted = any;
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaMemcpyAsync(to + (d0 - p0), (const void *)d0,
                                        (size_t)(d1 - d0),
                                        cudaMemcpyHostToDevice, s),
                        err, op, "cudaMemcpyAsync");
    *submitted = *submitted || st == FDY_OK;
  }
  if (st == FDY_OK && p1 > d1) {
    st = fdy_cuda_staging_copy(b->staging, s, to + (d1 - p0), (const void *)d1,
                               p1 - d1, &any, err);
    *submitted = *submitted || any;
  }
  return st;
}

static fdy_status cuda_stream_create(fdy_backend *base,
                                     fdy_backend_stream **out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_create",
                         "out is NULL");
  }
  *out = NULL;
  fdy_status st = set_device(b, err, "stream_create");
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_stream *s = calloc(1, sizeof *s);
  if (s == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "stream_create",
                         "cannot allocate a stream");
  }
  st = fdy_cuda_check(
      cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), err,
      "stream_create", "cudaStreamCreateWithFlags");
  if (st != FDY_OK) {
    free(s);
    return st;
  }
  fdy_list_push(&b->streams, &s->node);
  *out = s;
  return FDY_OK;
}

/* Work still queued on the stream completes; its records stay queryable. */
static void cuda_stream_destroy(fdy_backend *base, fdy_backend_stream *stream) {
  cuda_backend *b = cuda_of(base);
  if (stream == NULL) {
    return;
  }
  fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  fdy_list_unlink(&stream->node);
  fdy_cuda_ignore(cudaStreamDestroy(stream->stream));
  free(stream);
}

static fdy_status cuda_copy_to_device(fdy_backend *base,
                                      fdy_backend_stream *stream,
                                      fdy_backend_buffer *dst,
                                      uint64_t dst_offset, const void *src,
                                      uint64_t bytes, fdy_backend_event **out,
                                      fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  const char *op = "copy_to_device";
  uint64_t end = 0;
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op, "out is NULL");
  }
  *out = NULL;
  uint64_t call = ++b->copy_calls;
  if (stream == NULL || dst == NULL || (src == NULL && bytes > 0)) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "NULL stream, buffer or source");
  }
  if (__builtin_add_overflow(dst_offset, bytes, &end) || end > dst->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, op,
        "copy of %llu bytes at offset %llu exceeds the buffer's %llu bytes",
        (unsigned long long)bytes, (unsigned long long)dst_offset,
        (unsigned long long)dst->bytes);
    if (err != NULL) {
      err->expected = dst->bytes;
      err->actual = bytes;
    }
    return st;
  }
  if (b->opts.fail_copy_at == call) {
    return injected(err, op, call);
  }
  fdy_status st = set_device(b, err, op);
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_event *e = NULL;
  st = event_new(b, op, &e, err);
  if (st != FDY_OK) {
    return st;
  }
  e->buffers[0] = dst;
  e->buffer_count = 1;
  dst->refs++;
  cudaStream_t s = stream->stream;
  bool submitted = false;
  st = fdy_cuda_check(cudaEventRecord(e->start, s), err, op,
                      "cudaEventRecord (start)");
  if (st == FDY_OK && bytes > 0) {
    st = copy_pieces(b, s, (unsigned char *)dst->data + dst_offset, src, bytes,
                     &submitted, err);
  }
  if (st == FDY_OK && b->opts.fail_copy_submitted_at == call) {
    st = injected(err, op, call);
  }
  return work_accept(b, e, s, op, st, submitted, out, err);
}

static fdy_status launch_invalid(fdy_error *err, const fdy_launch_desc *desc,
                                 fdy_status kind, uint64_t expected,
                                 uint64_t actual, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static fdy_status launch_invalid(fdy_error *err, const fdy_launch_desc *desc,
                                 fdy_status kind, uint64_t expected,
                                 uint64_t actual, const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  fdy_cuda_fail(err, kind, "launch", "op %u: %s", desc->op_index, message);
  if (err != NULL) {
    err->ids[0] = desc->op_index;
    err->expected = expected;
    err->actual = actual;
    snprintf(err->name, sizeof err->name, "%s",
             desc->kind != NULL ? desc->kind : "");
  }
  return kind;
}

/* A free result slot, sweeping (and at worst waiting for the oldest pending
 * launch) when the pool is exhausted. */
static fdy_status take_result_slot(cuda_backend *b, uint32_t *out,
                                   fdy_error *err) {
  if (b->free_slot_count == 0) {
    sweep_quietly(b);
  }
  while (b->free_slot_count == 0) {
    fdy_backend_event *oldest = NULL;
    for (fdy_backend_event *e = b->pending; e != NULL; e = e->pending_next) {
      if (e->result_slot >= 0 && e->tracked) {
        oldest = e;
      }
    }
    if (oldest == NULL) {
      return fdy_cuda_fail(err, FDY_ERR_BACKEND, "launch",
                           "every result slot is held by untracked work; "
                           "drain first");
    }
    /* A failure here is returned again by the sweep's cudaEventQuery, which
     * finishes the launch (freeing its slot) and keeps the error. */
    fdy_cuda_ignore(cudaEventSynchronize(oldest->end));
    sweep_quietly(b);
  }
  *out = b->free_slots[--b->free_slot_count];
  return FDY_OK;
}

static fdy_status cuda_launch(fdy_backend *base, fdy_backend_stream *stream,
                              const fdy_launch_desc *desc,
                              fdy_backend_event **out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                         "out is NULL");
  }
  *out = NULL;
  uint64_t call = ++b->launch_calls;
  if (stream == NULL || desc == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                         "NULL stream or descriptor");
  }
  if (!cuda_supports_op(base, desc->kind)) {
    return launch_invalid(err, desc, FDY_ERR_UNSUPPORTED, 0, 0,
                          "op kind \"%s\" is not supported",
                          desc->kind != NULL ? desc->kind : "(null)");
  }
  if (desc->weight_count != 1) {
    return launch_invalid(err, desc, FDY_ERR_INVALID_ARGUMENT, 1,
                          desc->weight_count,
                          "synthetic.checksum binds exactly 1 weight, got %u",
                          desc->weight_count);
  }
  const fdy_launch_weight *lw = &desc->weights[0];
  if (lw->buffer == NULL || lw->bytes > lw->buffer->bytes) {
    return launch_invalid(err, desc, FDY_ERR_INVALID_ARGUMENT,
                          lw->buffer != NULL ? lw->buffer->bytes : 0, lw->bytes,
                          "weight 0 is unbound or larger than its buffer");
  }
  if (b->opts.fail_launch_at == call) {
    return injected(err, "launch", call);
  }
  fdy_status st = set_device(b, err, "launch");
  if (st != FDY_OK) {
    return st;
  }
  uint32_t slot = 0;
  st = take_result_slot(b, &slot, err);
  if (st != FDY_OK) {
    return st;
  }
  fdy_backend_event *e = NULL;
  st = event_new(b, "launch", &e, err);
  if (st != FDY_OK) {
    b->free_slots[b->free_slot_count++] = slot;
    return st;
  }
  e->result_slot = (int32_t)slot;
  e->op_index = desc->op_index;
  e->result = desc->result; /* published only once tracked work completed */
  e->bytes = lw->bytes;
  e->buffers[0] = lw->buffer;
  e->buffer_count = 1;
  lw->buffer->refs++;
  cudaStream_t s = stream->stream;
  bool submitted = false;
  st = fdy_cuda_check(cudaEventRecord(e->start, s), err, "launch",
                      "cudaEventRecord (start)");
  if (st == FDY_OK) {
    st = fdy_cuda_check(fdy_cuda_checksum_enqueue(
                            lw->buffer->data, lw->bytes, b->opts.compute_passes,
                            b->ctx.max_blocks, &b->result_dev[slot],
                            &b->result_host[slot], s),
                        err, "launch", "the checksum kernel launch");
    submitted = st == FDY_OK;
  }
  if (st == FDY_OK && b->opts.fail_launch_submitted_at == call) {
    st = injected(err, "launch", call);
  }
  st = work_accept(b, e, s, "launch", st, submitted, out, err);
  if (st != FDY_OK && err != NULL) {
    err->ids[0] = desc->op_index;
  }
  return st;
}

static fdy_status cuda_stream_wait(fdy_backend *base,
                                   fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (stream == NULL || event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_wait",
                         "NULL stream or event");
  }
  fdy_status st = set_device(b, err, "stream_wait");
  if (st != FDY_OK) {
    return st;
  }
  return fdy_cuda_check(cudaStreamWaitEvent(stream->stream, event->end, 0), err,
                        "stream_wait", "cudaStreamWaitEvent");
}

static fdy_status cuda_host_wait(fdy_backend *base, fdy_backend_event *event,
                                 fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_wait",
                         "NULL event");
  }
  fdy_status st = set_device(b, err, "host_wait");
  if (st != FDY_OK) {
    return st;
  }
  if (event->pending) {
    st = fdy_cuda_check(cudaEventSynchronize(event->end), err, "host_wait",
                        "cudaEventSynchronize");
    if (st != FDY_OK) {
      return st;
    }
  }
  st = sweep(b, false, err);
  if (st != FDY_OK) {
    return st;
  }
  return take_deferred(b, err);
}

static int64_t to_host_ns(const cuda_backend *b, float ms) {
  return b->calib_host_ns + (int64_t)llround((double)ms * 1e6);
}

static fdy_status cuda_event_times(fdy_backend *base, fdy_backend_event *event,
                                   fdy_event_times *out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (event == NULL || out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_times",
                         "NULL event or output");
  }
  if (!event->tracked) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_times",
                         "the event has no device timestamps");
  }
  const cudaError_t done = cudaEventQuery(event->end);
  if (done == cudaErrorNotReady) {
    cudaGetLastError();
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_times",
                         "the event has not completed");
  }
  if (done != cudaSuccess) {
    return fdy_cuda_check(done, err, "event_times", "cudaEventQuery");
  }
  float start_ms = 0, end_ms = 0;
  fdy_status st =
      fdy_cuda_check(cudaEventElapsedTime(&start_ms, b->calib, event->start),
                     err, "event_times", "cudaEventElapsedTime (start)");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventElapsedTime(&end_ms, b->calib, event->end),
                        err, "event_times", "cudaEventElapsedTime (end)");
  }
  if (st != FDY_OK) {
    return st;
  }
  out->start_ns = to_host_ns(b, start_ms);
  out->end_ns = to_host_ns(b, end_ms);
  if (out->end_ns < out->start_ns) {
    out->end_ns = out->start_ns;
  }
  return FDY_OK;
}

static void cuda_event_release(fdy_backend *base, fdy_backend_event *event) {
  if (event == NULL) {
    return;
  }
  event_unref(cuda_of(base), event);
}

/* Synchronizes every stream of the backend, then finishes every pending
 * record (publishing results). After a failure it still finishes them all,
 * so the caller can release everything; it returns the first error. */
static fdy_status cuda_drain(fdy_backend *base, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  fdy_status first = set_device(b, err, "drain");
  fdy_error local;
  bool untracked = false;
  for (fdy_backend_event *e = b->pending; e != NULL; e = e->pending_next) {
    untracked = untracked || !e->tracked;
  }
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    fdy_status st =
        fdy_cuda_check(cudaStreamSynchronize(((fdy_backend_stream *)n)->stream),
                       &local, "drain", "cudaStreamSynchronize");
    keep_first(&first, st, &local, err);
  }
  if (untracked) {
    /* untracked work has no end event, and its stream may be destroyed */
    fdy_status st = fdy_cuda_check(cudaDeviceSynchronize(), &local, "drain",
                                   "cudaDeviceSynchronize");
    keep_first(&first, st, &local, err);
  }
  keep_first(&first, sweep(b, true, &local), &local, err);
  keep_first(&first, take_deferred(b, &local), &local, err);
  return first;
}

/* Drains and frees every object, released or not. Results of launches never
 * observed before destroy are written by the drain. */
static void cuda_destroy(fdy_backend *base) {
  cuda_backend *b = cuda_of(base);
  if (b == NULL) {
    return;
  }
  fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  if (b->pending != NULL) {
    cuda_drain(base, NULL);
  }
  while (b->streams.next != &b->streams) {
    cuda_stream_destroy(base, (fdy_backend_stream *)b->streams.next);
  }
  while (b->hosts.next != &b->hosts) {
    cuda_host_unregister(base, (fdy_backend_host *)b->hosts.next);
  }
  while (b->buffers.next != &b->buffers) {
    buffer_free((fdy_backend_buffer *)b->buffers.next);
  }
  while (b->events.next != &b->events) {
    fdy_backend_event *e = (fdy_backend_event *)b->events.next;
    fdy_list_unlink(&e->node);
    event_destroy(e);
  }
  while (b->free_events != NULL) {
    fdy_backend_event *e = b->free_events;
    b->free_events = e->pending_next;
    event_destroy(e);
  }
  fdy_cuda_staging_destroy(b->staging);
  if (b->ctx.internal != NULL) {
    fdy_cuda_ignore(cudaStreamSynchronize(b->ctx.internal));
    fdy_cuda_ignore(cudaStreamDestroy(b->ctx.internal));
  }
  if (b->calib != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(b->calib));
  }
  fdy_cuda_ignore(cudaFree(b->result_dev));
  fdy_cuda_ignore(cudaFreeHost(b->result_host));
  free(b->free_slots);
  free(b);
}

static const fdy_backend_ops cuda_ops = {
    .name = "cuda",
    .capabilities = cuda_capabilities,
    .supports_op = cuda_supports_op,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_release = cuda_buffer_release,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .copy_to_device = cuda_copy_to_device,
    .launch = cuda_launch,
    .stream_wait = cuda_stream_wait,
    .host_wait = cuda_host_wait,
    .event_times = cuda_event_times,
    .event_release = cuda_event_release,
    .drain = cuda_drain,
    .destroy = cuda_destroy,
};

/* ---- creation
 * ----------------------------------------------------------------
 */

int fdy_cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void fdy_cuda_versions(int *runtime_version, int *driver_version) {
  int rv = 0, dv = 0;
  if (cudaRuntimeGetVersion(&rv) != cudaSuccess) {
    rv = 0;
  }
  if (cudaDriverGetVersion(&dv) != cudaSuccess) {
    dv = 0;
  }
  cudaGetLastError();
  if (runtime_version != NULL) {
    *runtime_version = rv;
  }
  if (driver_version != NULL) {
    *driver_version = dv;
  }
}

fdy_status fdy_cuda_memory_in_use(fdy_backend *b, uint64_t *out,
                                  fdy_error *err) {
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "memory_in_use",
                         "out is NULL");
  }
  *out = 0;
  fdy_cuda_ctx *ctx = NULL;
  fdy_status st = fdy_cuda_ctx_of(b, "memory_in_use", &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "memory_in_use", "cudaMemGetInfo");
  if (st == FDY_OK) {
    *out = (uint64_t)(total_bytes - free_bytes);
  }
  return st;
}

/* Records calibration events on the idle internal stream and keeps the one
 * whose host window was narrowest. */
static fdy_status calibrate(cuda_backend *b, fdy_error *err) {
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < CUDA_CALIBRATION_TRIES; i++) {
    cudaEvent_t ev = NULL;
    fdy_status st = fdy_cuda_check(cudaEventCreate(&ev), err, "create",
                                   "cudaEventCreate (calibration)");
    if (st != FDY_OK) {
      return st;
    }
    int64_t t0 = fdy_now_ns();
    st = fdy_cuda_check(cudaEventRecord(ev, b->ctx.internal), err, "create",
                        "cudaEventRecord (calibration)");
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaEventSynchronize(ev), err, "create",
                          "cudaEventSynchronize (calibration)");
    }
    int64_t t1 = fdy_now_ns();
    if (st != FDY_OK) {
      fdy_cuda_ignore(cudaEventDestroy(ev));
      return st;
    }
    if (t1 - t0 < best_window) {
      best_window = t1 - t0;
      if (b->calib != NULL) {
        fdy_cuda_ignore(cudaEventDestroy(b->calib));
      }
      b->calib = ev;
      b->calib_host_ns = t0 + (t1 - t0) / 2;
    } else {
      fdy_cuda_ignore(cudaEventDestroy(ev));
    }
  }
  return FDY_OK;
}

static uint32_t fill_parts(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long parts = cpus / 2;
  if (parts < 1) {
    parts = 1;
  }
  if (parts > 8) {
    parts = 8;
  }
  return (uint32_t)parts;
}

fdy_status fdy_cuda_backend_create(const fdy_cuda_options *options,
                                   fdy_backend **out, fdy_error *err) {
  fdy_cuda_options opts = {0};
  cuda_backend *b = NULL;
  fdy_status st = FDY_OK;
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "out is NULL");
  }
  *out = NULL;
  if (options != NULL) {
    opts = *options;
  }
  if (opts.host_mode != FDY_CUDA_HOST_REGISTERED &&
      opts.host_mode != FDY_CUDA_HOST_STAGED) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "unknown host mode %d", (int)opts.host_mode);
  }
  if (opts.staging_bytes == 0) {
    opts.staging_bytes = CUDA_DEFAULT_STAGING_BYTES;
  }
  if (opts.staging_buffers == 0) {
    opts.staging_buffers = CUDA_DEFAULT_STAGING_BUFFERS;
  }
  if (opts.compute_passes == 0) {
    opts.compute_passes = 1;
  }
  int count = fdy_cuda_device_count();
  if (count == 0) {
    return fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "create",
                         "no CUDA device is available");
  }
  if (opts.device < 0 || opts.device >= count) {
    st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                       "device %d does not exist (%d devices)", opts.device,
                       count);
    if (err != NULL) {
      err->expected = (uint64_t)count;
      err->actual = (uint64_t)(int64_t)opts.device;
    }
    return st;
  }
  b = calloc(1, sizeof *b);
  if (b == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate the backend");
  }
  b->base.ops = &cuda_ops;
  b->base.self = b;
  b->opts = opts;
  b->ctx.device = opts.device;
  long page = sysconf(_SC_PAGESIZE);
  b->page_bytes = page > 0 ? (uint64_t)page : 4096;
  fdy_list_init(&b->buffers);
  fdy_list_init(&b->events);
  fdy_list_init(&b->streams);
  fdy_list_init(&b->hosts);

  st = set_device(b, err, "create");
  if (st != FDY_OK) {
    goto cleanup;
  }
  struct cudaDeviceProp prop;
  st = fdy_cuda_check(cudaGetDeviceProperties(&prop, opts.device), err,
                      "create", "cudaGetDeviceProperties");
  if (st != FDY_OK) {
    goto cleanup;
  }
  snprintf(b->name, sizeof b->name, "%.127s", prop.name);
  b->copy_engines =
      prop.asyncEngineCount > 0 ? (uint32_t)prop.asyncEngineCount : 0;
  b->ctx.l2_bytes = prop.l2CacheSize > 0 ? (uint64_t)prop.l2CacheSize : 0;
  int per_sm = 0;
  st = fdy_cuda_check(fdy_cuda_checksum_occupancy(&per_sm), err, "create",
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (st != FDY_OK) {
    goto cleanup;
  }
  b->ctx.max_blocks = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);

  st = fdy_cuda_check(
      cudaStreamCreateWithFlags(&b->ctx.internal, cudaStreamNonBlocking), err,
      "create", "cudaStreamCreateWithFlags");
  if (st != FDY_OK) {
    b->ctx.internal = NULL;
    goto cleanup;
  }
  st = fdy_cuda_check(cudaMalloc((void **)&b->result_dev,
                                 CUDA_RESULT_SLOTS * sizeof *b->result_dev),
                      err, "create", "cudaMalloc of the result slots");
  if (st != FDY_OK) {
    b->result_dev = NULL;
    goto cleanup;
  }
  /* On the internal stream, so that the warm-up's synchronize below also
   * orders it before any launch (a cudaMemset on the legacy default stream
   * is not ordered with the non-blocking streams the launches use). */
  st = fdy_cuda_check(cudaMemsetAsync(b->result_dev, 0,
                                      CUDA_RESULT_SLOTS * sizeof *b->result_dev,
                                      b->ctx.internal),
                      err, "create", "cudaMemsetAsync of the result slots");
  if (st != FDY_OK) {
    goto cleanup;
  }
  st = fdy_cuda_check(cudaHostAlloc((void **)&b->result_host,
                                    CUDA_RESULT_SLOTS * sizeof *b->result_host,
                                    cudaHostAllocMapped),
                      err, "create", "cudaHostAlloc of the result words");
  if (st != FDY_OK) {
    b->result_host = NULL;
    goto cleanup;
  }
  memset(b->result_host, 0, CUDA_RESULT_SLOTS * sizeof *b->result_host);
  b->free_slots = malloc(CUDA_RESULT_SLOTS * sizeof *b->free_slots);
  if (b->free_slots == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                       "cannot allocate the result slot list");
    goto cleanup;
  }
  for (uint32_t i = CUDA_RESULT_SLOTS - 1; i >= 1; i--) {
    b->free_slots[b->free_slot_count++] = i;
  }
  b->ctx.internal_dev = &b->result_dev[0];
  b->ctx.internal_host = &b->result_host[0];

  st = fdy_cuda_staging_create(opts.staging_bytes, opts.staging_buffers,
                               fill_parts(), &b->staging, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  /* Warm-up: loads the kernel module (lazy loading) now, so that device
   * memory in use does not change at the first launch. */
  st = fdy_cuda_check(
      fdy_cuda_checksum_enqueue(b->result_dev, 0, 1, b->ctx.max_blocks,
                                b->ctx.internal_dev, b->ctx.internal_host,
                                b->ctx.internal),
      err, "create", "the warm-up checksum launch");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaStreamSynchronize(b->ctx.internal), err, "create",
                        "cudaStreamSynchronize (warm-up)");
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  st = calibrate(b, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = &b->base;
  return FDY_OK;

cleanup:
  cuda_destroy(&b->base);
  return st;
}
