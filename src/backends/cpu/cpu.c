/* The CPU backend: the backend contract implemented on the host with
 * pthreads, so the whole system runs without a GPU, and the reference
 * implementation of every op (kernels.c, matmul_q4.c) on one thread pool
 * (core's foundry/pool.h).
 *
 * Each stream is a worker thread draining a FIFO of items: copy to device,
 * copy to host, launch, record, wait. One backend mutex guards all shared
 * state: the queues, reference counts, the memory budget and event
 * progress; each event has a condition variable broadcast when a recording
 * of it completes, and `idle` is broadcast when no submitted item is left.
 * Workers drop the mutex while they copy or run an op, so streams run
 * concurrently; ops of several streams take turns on the pool.
 *
 * Events are created once and recorded many times: event_record bumps the
 * event's generation and queues a record item carrying it; the item
 * completes that recording (with its fdy_now_ns time) once everything
 * queued before it on its stream completed. stream_wait and host_wait wait
 * for the generation current when they are called, so a later recording
 * does not delay them. A wait is satisfied once that recording, or a later
 * one, completed: exact whenever an event's recordings complete in the
 * order they were made (recorded on one stream, or each new recording
 * ordered after the previous one).
 *
 * Reference rule: buffers and events are reference counted; the caller
 * holds one reference, and each queued item holds one on every buffer and
 * event it touches, so a buffer released while queued work still uses it
 * stays alive (and counted against the budget) until that work completed.
 * All live objects are also on lists so that destroy frees whatever the
 * caller did not release. Completed items go to a free list and are
 * reused, so steady-state submission does not allocate.
 *
 * Failures of submitted work (backend.h): copies to and from caller memory
 * go through fdy_host_copy, so a file mapping whose file shrank fails the
 * copy with FDY_ERR_IO instead of killing the process. The copy's stream
 * fails: its later copies and launches are skipped, its records complete
 * their events as failed, and a stream that waits on a failed event fails
 * too. The backend keeps the first failure (b->failure) for host_wait and
 * drain; drain clears it. */
#include "foundry/cpu.h"
#include "foundry/host_copy.h"
#include "foundry/op_table.h"
#include "foundry/pool.h"

#include "entry_errors.h"
#include "handle_list.h"
#include "kernels.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CPU_DEFAULT_ALIGNMENT 64

typedef struct cpu_backend cpu_backend;

struct fdy_backend_buffer {
  fdy_list_node node;
  uint32_t refs;
  unsigned char *data;
  uint64_t bytes;
};

struct fdy_backend_event {
  fdy_list_node node;
  uint32_t refs;
  uint64_t recorded;       /* recordings made (the current one's generation) */
  uint64_t completed;      /* highest generation completed */
  int64_t completed_ns;    /* fdy_now_ns when `completed` completed */
  bool failed;             /* `completed` followed failed work */
  pthread_cond_t progress; /* broadcast when `completed` grows */
};

struct fdy_backend_host {
  fdy_list_node node;
  const void *ptr;
  uint64_t bytes;
};

typedef enum cpu_item_kind {
  CPU_COPY_TO_DEVICE = 0,
  CPU_COPY_TO_HOST,
  CPU_LAUNCH,
  CPU_RECORD,
  CPU_WAIT,
} cpu_item_kind;

typedef struct cpu_item {
  struct cpu_item *next;
  cpu_item_kind kind;
  /* record, wait */
  fdy_backend_event *event;
  uint64_t generation;
  /* copies */
  fdy_backend_buffer *buffer;
  uint64_t offset;
  const void *src; /* to device */
  void *dst;       /* to host */
  uint64_t bytes;
  /* launch: every view's buffer holds a reference */
  fdy_op op;
} cpu_item;

struct fdy_backend_stream {
  fdy_list_node node;
  cpu_backend *owner;
  pthread_t thread;
  pthread_cond_t work; /* signalled when an item arrives or stop is set */
  cpu_item *head, *tail;
  bool stop;
  bool failed; /* work on it failed: later copies and launches are skipped */
};

struct cpu_backend {
  fdy_backend base;
  pthread_mutex_t mu;
  pthread_cond_t idle; /* broadcast when pending drops to 0 */
  uint64_t pending;    /* submitted items not yet completed */
  fdy_budget budget;
  uint64_t alignment;
  fdy_pool *pool;
  cpu_item *free_items;                          /* completed, for reuse */
  fdy_list_node buffers, events, streams, hosts; /* list heads */
  uint64_t submitted;    /* copies and launches queued (backend.h) */
  fdy_error failure;     /* first failure of work since the last drain */
  bool failure_reported; /* a host_wait returned it */
};

static const fdy_backend_ops cpu_ops;

static cpu_backend *cpu_of(fdy_backend *b) {
  return (cpu_backend *)b;
}

static fdy_status cpu_fail(fdy_error *err, fdy_status kind, const char *op,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The failure of entry op (entry_errors.h). */
static fdy_status cpu_fail(fdy_error *err, fdy_status kind, const char *op,
                           const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_entry_vfail(err, kind, "cpu", op, fmt, ap);
  va_end(ap);
  return kind;
}

/* Marks an error another module filled as entry op's failure. */
static fdy_status cpu_tag(fdy_error *err, fdy_status kind, const char *op) {
  return fdy_entry_tag(err, kind, "cpu", op);
}

/* Puts a new handle's node on the backend's list head. */
static void track(cpu_backend *b, fdy_list_node *head, fdy_list_node *node) {
  pthread_mutex_lock(&b->mu);
  fdy_list_push(head, node);
  pthread_mutex_unlock(&b->mu);
}

/* Takes a handle's node off its list. */
static void untrack(cpu_backend *b, fdy_list_node *node) {
  pthread_mutex_lock(&b->mu);
  fdy_list_unlink(node);
  pthread_mutex_unlock(&b->mu);
}

/* ---- reference counting and items (callers hold b->mu) -------------------
 */

static void buffer_free_locked(cpu_backend *b, fdy_backend_buffer *buf) {
  fdy_list_unlink(&buf->node);
  fdy_budget_release(&b->budget, buf->bytes);
  free(buf->data);
  free(buf);
}

static void buffer_unref_locked(cpu_backend *b, fdy_backend_buffer *buf) {
  if (buf != NULL && --buf->refs == 0) {
    buffer_free_locked(b, buf);
  }
}

static void event_free_locked(fdy_backend_event *e) {
  fdy_list_unlink(&e->node);
  pthread_cond_destroy(&e->progress);
  free(e);
}

static void event_unref_locked(fdy_backend_event *e) {
  if (e != NULL && --e->refs == 0) {
    event_free_locked(e);
  }
}

/* Calls fn on every buffer a launch item references. */
static void launch_buffers(cpu_item *item,
                           void (*fn)(cpu_backend *, fdy_backend_buffer *),
                           cpu_backend *b) {
  for (uint32_t i = 0; i < item->op.input_count; i++) {
    fn(b, item->op.inputs[i].buffer);
  }
  for (uint32_t i = 0; i < item->op.output_count; i++) {
    fn(b, item->op.outputs[i].buffer);
  }
  fn(b, item->op.workspace.buffer);
}

static void buffer_ref_locked(cpu_backend *b, fdy_backend_buffer *buf) {
  (void)b;
  if (buf != NULL) {
    buf->refs++;
  }
}

/* An item to overwrite, from the free list or new; NULL when out of
 * memory. */
static cpu_item *item_get_locked(cpu_backend *b) {
  cpu_item *item = b->free_items;
  if (item != NULL) {
    b->free_items = item->next;
    return item;
  }
  return malloc(sizeof *item);
}

/* Takes the references a queued item holds on its event and buffers;
 * item_complete_locked drops them. */
static void item_ref_locked(cpu_backend *b, cpu_item *item) {
  if (item->event != NULL) {
    item->event->refs++;
  }
  buffer_ref_locked(b, item->buffer);
  if (item->kind == CPU_LAUNCH) {
    launch_buffers(item, buffer_ref_locked, b);
  }
}

/* Drops the item's references and puts it on the free list. */
static void item_complete_locked(cpu_backend *b, cpu_item *item) {
  event_unref_locked(item->event);
  buffer_unref_locked(b, item->buffer);
  if (item->kind == CPU_LAUNCH) {
    launch_buffers(item, buffer_unref_locked, b);
  }
  item->next = b->free_items;
  b->free_items = item;
  if (--b->pending == 0) {
    pthread_cond_broadcast(&b->idle);
  }
}

/* ---- worker ----------------------------------------------------------------
 */

static void *view_data(const fdy_tensor_view *v) {
  return v->buffer->data + v->offset;
}

static void launch_run(cpu_backend *b, const fdy_op *op) {
  fdy_cpu_args args = {.op = op};
  for (uint32_t i = 0; i < op->input_count; i++) {
    args.inputs[i] = view_data(&op->inputs[i]);
  }
  for (uint32_t i = 0; i < op->output_count; i++) {
    args.outputs[i] = view_data(&op->outputs[i]);
  }
  if (op->workspace.buffer != NULL) {
    args.workspace = view_data(&op->workspace);
  }
  fdy_cpu_op_run(b->pool, &args);
}

/* Runs an item that does not wait; called without b->mu. Copies fail with
 * FDY_ERR_IO when caller memory cannot be read or written. */
static fdy_status item_run(cpu_backend *b, cpu_item *item, fdy_error *err) {
  fdy_status st = FDY_OK;
  switch (item->kind) {
  case CPU_COPY_TO_DEVICE:
    st = fdy_host_copy(item->buffer->data + item->offset, item->src,
                       item->bytes, err);
    return st == FDY_OK ? st : cpu_tag(err, st, "copy_to_device");
  case CPU_COPY_TO_HOST:
    st = fdy_host_copy(item->dst, item->buffer->data + item->offset,
                       item->bytes, err);
    return st == FDY_OK ? st : cpu_tag(err, st, "copy_to_host");
  case CPU_LAUNCH:
    launch_run(b, &item->op);
    break;
  case CPU_RECORD:
  case CPU_WAIT:
    break;
  }
  return st;
}

/* Work on s failed with *error: s skips its later work; the backend keeps
 * the first failure. */
static void stream_fail_locked(cpu_backend *b, fdy_backend_stream *s,
                               const fdy_error *error) {
  s->failed = true;
  if (b->failure.kind == FDY_OK) {
    b->failure = *error;
  }
}

/* Forgets a failure once drain reported it: every stream runs work again. */
static void failure_clear_locked(cpu_backend *b) {
  if (b->failure.kind == FDY_OK) {
    return;
  }
  fdy_error_clear(&b->failure);
  b->failure_reported = false;
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    ((fdy_backend_stream *)n)->failed = false;
  }
  for (fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
    ((fdy_backend_event *)n)->failed = false;
  }
}

static void *worker_main(void *arg) {
  fdy_backend_stream *s = arg;
  cpu_backend *b = s->owner;
  fdy_error error;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (s->head == NULL && !s->stop) {
      pthread_cond_wait(&s->work, &b->mu);
    }
    cpu_item *item = s->head;
    if (item == NULL) {
      break;
    }
    if (item->kind == CPU_WAIT) {
      while (item->event->completed < item->generation) {
        pthread_cond_wait(&item->event->progress, &b->mu);
      }
      s->failed = s->failed || item->event->failed;
    } else if (item->kind == CPU_RECORD) {
      fdy_backend_event *e = item->event;
      if (item->generation > e->completed) {
        e->completed = item->generation;
        e->completed_ns = fdy_now_ns();
        e->failed = s->failed;
        pthread_cond_broadcast(&e->progress);
      }
    } else if (!s->failed) {
      pthread_mutex_unlock(&b->mu);
      fdy_status st = item_run(b, item, &error);
      pthread_mutex_lock(&b->mu);
      if (st != FDY_OK) {
        stream_fail_locked(b, s, &error);
      }
    }
    s->head = item->next;
    if (s->head == NULL) {
      s->tail = NULL;
    }
    item_complete_locked(b, item);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void enqueue_locked(cpu_backend *b, fdy_backend_stream *s,
                           cpu_item *item) {
  item->next = NULL;
  if (s->tail != NULL) {
    s->tail->next = item;
  } else {
    s->head = item;
  }
  s->tail = item;
  b->pending++;
  if (item->kind == CPU_COPY_TO_DEVICE || item->kind == CPU_COPY_TO_HOST ||
      item->kind == CPU_LAUNCH) {
    b->submitted++;
  }
  pthread_cond_signal(&s->work);
}

/* Queues a copy of item on stream with its references; fails entry op
 * with FDY_ERR_OUT_OF_MEMORY when no item can be allocated. */
static fdy_status queue_locked(cpu_backend *b, fdy_backend_stream *stream,
                               const cpu_item *item, const char *op,
                               fdy_error *err) {
  cpu_item *queued = item_get_locked(b);
  if (queued == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, op,
                    "cannot allocate a work item");
  }
  *queued = *item;
  item_ref_locked(b, queued);
  enqueue_locked(b, stream, queued);
  return FDY_OK;
}

static void drain_locked(cpu_backend *b) {
  while (b->pending > 0) {
    pthread_cond_wait(&b->idle, &b->mu);
  }
}

/* ---- entries
 * ----------------------------------------------------------------- */

static fdy_status cpu_capabilities(fdy_backend *base, fdy_device_caps *out,
                                   fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "capabilities",
                    "out is NULL");
  }
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "cpu");
  pthread_mutex_lock(&b->mu);
  out->total_memory = b->budget.capacity;
  out->free_memory = b->budget.capacity - b->budget.used;
  pthread_mutex_unlock(&b->mu);
  out->max_allocation = b->budget.capacity;
  out->alignment = b->alignment;
  out->concurrent_copy_compute = true;
  out->copy_engines = 0;
  return FDY_OK;
}

static bool cpu_supports_op(fdy_backend *base, const fdy_op *op) {
  cpu_backend *b = cpu_of(base);
  return op != NULL && fdy_cpu_op_supported(op, fdy_pool_threads(b->pool));
}

/* UINT64_MAX when the op is not supported (no workspace can be that big). */
static uint64_t cpu_workspace_bytes(fdy_backend *base, const fdy_op *op) {
  cpu_backend *b = cpu_of(base);
  uint64_t bytes = 0;
  if (!cpu_supports_op(base, op) ||
      fdy_cpu_op_workspace(op, fdy_pool_threads(b->pool), &bytes, NULL) !=
          FDY_OK) {
    return UINT64_MAX;
  }
  return bytes;
}

static fdy_status cpu_buffer_alloc(fdy_backend *base, uint64_t bytes,
                                   fdy_backend_buffer **out, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  fdy_backend_buffer *buf = NULL;
  void *data = NULL;
  fdy_status st = FDY_OK;
  bool reserved = false;
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                    "out is NULL");
  }
  *out = NULL;
  if (bytes == 0) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                    "a buffer of 0 bytes was requested");
  }
  pthread_mutex_lock(&b->mu);
  st = fdy_budget_reserve(&b->budget, bytes, err);
  pthread_mutex_unlock(&b->mu);
  if (st != FDY_OK) {
    cpu_tag(err, st, "buffer_alloc");
    goto cleanup;
  }
  reserved = true;
  size_t align =
      b->alignment < sizeof(void *) ? sizeof(void *) : (size_t)b->alignment;
  if (bytes > SIZE_MAX || posix_memalign(&data, align, (size_t)bytes) != 0) {
    data = NULL;
    st = cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "buffer_alloc",
                  "cannot allocate %llu bytes", (unsigned long long)bytes);
    goto cleanup;
  }
  buf = calloc(1, sizeof *buf);
  if (buf == NULL) {
    st = cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "buffer_alloc",
                  "cannot allocate a buffer handle");
    goto cleanup;
  }
  buf->refs = 1;
  buf->data = data;
  buf->bytes = bytes;
  track(b, &b->buffers, &buf->node);
  *out = buf;
  return FDY_OK;

cleanup:
  free(data);
  if (reserved) {
    pthread_mutex_lock(&b->mu);
    fdy_budget_release(&b->budget, bytes);
    pthread_mutex_unlock(&b->mu);
  }
  return st;
}

static void cpu_buffer_release(fdy_backend *base, fdy_backend_buffer *buffer) {
  cpu_backend *b = cpu_of(base);
  pthread_mutex_lock(&b->mu);
  buffer_unref_locked(b, buffer);
  pthread_mutex_unlock(&b->mu);
}

static fdy_status cpu_host_register(fdy_backend *base, const void *ptr,
                                    uint64_t bytes, fdy_backend_host **out,
                                    fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                    "out is NULL");
  }
  *out = NULL;
  if (ptr == NULL || bytes == 0) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                    "a NULL or empty host range was given");
  }
  fdy_backend_host *h = calloc(1, sizeof *h);
  if (h == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "host_register",
                    "cannot allocate a registration handle");
  }
  h->ptr = ptr;
  h->bytes = bytes;
  track(b, &b->hosts, &h->node);
  *out = h;
  return FDY_OK;
}

static void cpu_host_unregister(fdy_backend *base, fdy_backend_host *host) {
  cpu_backend *b = cpu_of(base);
  if (host == NULL) {
    return;
  }
  untrack(b, &host->node);
  free(host);
}

static fdy_status cpu_stream_create(fdy_backend *base, fdy_backend_stream **out,
                                    fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  fdy_backend_stream *s = NULL;
  bool cond_ready = false;
  fdy_status st = FDY_OK;
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_create",
                    "out is NULL");
  }
  *out = NULL;
  s = calloc(1, sizeof *s);
  if (s == NULL) {
    st = cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "stream_create",
                  "cannot allocate a stream");
    goto cleanup;
  }
  s->owner = b;
  int rc = pthread_cond_init(&s->work, NULL);
  if (rc != 0) {
    st = cpu_fail(err, FDY_ERR_BACKEND, "stream_create",
                  "pthread_cond_init failed: %s", strerror(rc));
    goto cleanup;
  }
  cond_ready = true;
  rc = pthread_create(&s->thread, NULL, worker_main, s);
  if (rc != 0) {
    st = cpu_fail(err, FDY_ERR_BACKEND, "stream_create",
                  "cannot start the stream's worker thread: pthread_create "
                  "failed: %s",
                  strerror(rc));
    goto cleanup;
  }
  track(b, &b->streams, &s->node);
  *out = s;
  return FDY_OK;

cleanup:
  if (cond_ready) {
    pthread_cond_destroy(&s->work);
  }
  free(s);
  return st;
}

/* The worker finishes its queue before it exits, so destroying a stream with
 * queued work is safe (it waits for that work). */
static void cpu_stream_destroy(fdy_backend *base, fdy_backend_stream *stream) {
  cpu_backend *b = cpu_of(base);
  if (stream == NULL) {
    return;
  }
  pthread_mutex_lock(&b->mu);
  stream->stop = true;
  pthread_cond_signal(&stream->work);
  pthread_mutex_unlock(&b->mu);
  pthread_join(stream->thread, NULL);
  untrack(b, &stream->node);
  pthread_cond_destroy(&stream->work);
  free(stream);
}

static fdy_status cpu_event_create(fdy_backend *base, fdy_backend_event **out,
                                   fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_create",
                    "out is NULL");
  }
  *out = NULL;
  fdy_backend_event *e = calloc(1, sizeof *e);
  if (e == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "event_create",
                    "cannot allocate an event");
  }
  int rc = pthread_cond_init(&e->progress, NULL);
  if (rc != 0) {
    free(e);
    return cpu_fail(err, FDY_ERR_BACKEND, "event_create",
                    "pthread_cond_init failed: %s", strerror(rc));
  }
  e->refs = 1;
  track(b, &b->events, &e->node);
  *out = e;
  return FDY_OK;
}

/* Drops the caller's reference: queued items that use the event keep it. */
static void cpu_event_destroy(fdy_backend *base, fdy_backend_event *event) {
  cpu_backend *b = cpu_of(base);
  pthread_mutex_lock(&b->mu);
  event_unref_locked(event);
  pthread_mutex_unlock(&b->mu);
}

/* Queues an item with an event reference (record, wait). */
static fdy_status queue_event_item(cpu_backend *b, fdy_backend_stream *stream,
                                   fdy_backend_event *event, cpu_item_kind kind,
                                   const char *op, fdy_error *err) {
  if (stream == NULL || event == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, op, "NULL stream or event");
  }
  fdy_status st = FDY_OK;
  pthread_mutex_lock(&b->mu);
  /* A wait has nothing to wait for when the current recording (if any)
   * completed; a failed one is queued so that the stream fails in its
   * order. A record makes the next generation current. */
  if (kind == CPU_RECORD || event->failed ||
      (event->recorded != 0 && event->completed < event->recorded)) {
    uint64_t generation = event->recorded + (kind == CPU_RECORD ? 1 : 0);
    cpu_item item = {.kind = kind, .event = event, .generation = generation};
    st = queue_locked(b, stream, &item, op, err);
    if (st == FDY_OK) {
      event->recorded = generation;
    }
  }
  pthread_mutex_unlock(&b->mu);
  return st;
}

static fdy_status cpu_event_record(fdy_backend *base,
                                   fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  return queue_event_item(cpu_of(base), stream, event, CPU_RECORD,
                          "event_record", err);
}

static fdy_status cpu_stream_wait(fdy_backend *base, fdy_backend_stream *stream,
                                  fdy_backend_event *event, fdy_error *err) {
  return queue_event_item(cpu_of(base), stream, event, CPU_WAIT, "stream_wait",
                          err);
}

/* Queues a copy between host memory (src for CPU_COPY_TO_DEVICE, dst for
 * CPU_COPY_TO_HOST) and [offset, offset + bytes) of buffer, which must lie
 * inside it. */
static fdy_status queue_copy(cpu_backend *b, fdy_backend_stream *stream,
                             cpu_item_kind kind, fdy_backend_buffer *buffer,
                             uint64_t offset, const void *src, void *dst,
                             uint64_t bytes, const char *op, fdy_error *err) {
  bool host_missing = kind == CPU_COPY_TO_DEVICE ? src == NULL : dst == NULL;
  if (stream == NULL || buffer == NULL || (host_missing && bytes > 0)) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                    "NULL stream, buffer or host pointer");
  }
  fdy_status st =
      fdy_entry_check_copy_range("cpu", op, offset, bytes, buffer->bytes, err);
  if (st != FDY_OK) {
    return st;
  }
  cpu_item item = {.kind = kind,
                   .buffer = buffer,
                   .offset = offset,
                   .src = src,
                   .dst = dst,
                   .bytes = bytes};
  pthread_mutex_lock(&b->mu);
  st = queue_locked(b, stream, &item, op, err);
  pthread_mutex_unlock(&b->mu);
  return st;
}

static fdy_status cpu_copy_to_device(fdy_backend *base,
                                     fdy_backend_stream *stream,
                                     fdy_backend_buffer *dst,
                                     uint64_t dst_offset, const void *src,
                                     uint64_t bytes, fdy_error *err) {
  return queue_copy(cpu_of(base), stream, CPU_COPY_TO_DEVICE, dst, dst_offset,
                    src, NULL, bytes, "copy_to_device", err);
}

static fdy_status cpu_copy_to_host(fdy_backend *base,
                                   fdy_backend_stream *stream, void *dst,
                                   fdy_backend_buffer *src, uint64_t src_offset,
                                   uint64_t bytes, fdy_error *err) {
  return queue_copy(cpu_of(base), stream, CPU_COPY_TO_HOST, src, src_offset,
                    NULL, dst, bytes, "copy_to_host", err);
}

/* View `index` of a launch (inputs, then outputs, then the workspace as
 * index input_count + output_count) must have a buffer, start at a multiple
 * of `align` and lie inside the buffer. */
static fdy_status check_view(const fdy_tensor_view *v, int64_t index,
                             uint64_t align, uint64_t bytes, fdy_error *err) {
  uint64_t end = 0;
  if (v->buffer == NULL) {
    fdy_status st = cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                             "operand %lld has no buffer", (long long)index);
    if (err != NULL) {
      err->ids[0] = index;
    }
    return st;
  }
  if (v->offset % align != 0) {
    fdy_status st =
        cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                 "operand %lld starts at offset %llu, not a multiple of %llu",
                 (long long)index, (unsigned long long)v->offset,
                 (unsigned long long)align);
    if (err != NULL) {
      err->ids[0] = index;
      err->expected = align;
      err->actual = v->offset;
    }
    return st;
  }
  if (__builtin_add_overflow(v->offset, bytes, &end) ||
      end > v->buffer->bytes) {
    fdy_status st = cpu_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "launch",
        "operand %lld (%llu bytes at offset %llu) exceeds its buffer's %llu "
        "bytes",
        (long long)index, (unsigned long long)bytes,
        (unsigned long long)v->offset, (unsigned long long)v->buffer->bytes);
    if (err != NULL) {
      err->ids[0] = index;
      err->expected = v->buffer->bytes;
      err->actual = end < v->offset ? UINT64_MAX : end;
    }
    return st;
  }
  return FDY_OK;
}

/* The alignment of a view: the backend's (the contract), at least its
 * element size, and 8 bytes for what the kernels read or write as 64-bit
 * words (the checksum's data, the workspace). */
static uint64_t view_alignment(const cpu_backend *b, uint64_t element) {
  return b->alignment > element ? b->alignment : element;
}

/* Every operand in bounds and aligned; the workspace at least `need`
 * bytes. Returns the workspace view the launch keeps (none when need is
 * 0). */
static fdy_status check_views(const cpu_backend *b, const fdy_op *op,
                              uint64_t need, fdy_tensor_view *workspace,
                              fdy_error *err) {
  uint32_t operands = op->input_count + op->output_count;
  for (uint32_t i = 0; i < operands; i++) {
    const fdy_tensor_view *v = i < op->input_count
                                   ? &op->inputs[i]
                                   : &op->outputs[i - op->input_count];
    uint64_t bytes = 0;
    fdy_tensor_bytes(v->dtype, v->shape, &bytes, NULL); /* op was checked */
    uint64_t element = fdy_op_operand_of(op, i)->flags & FDY_OPERAND_WORDS
                           ? sizeof(uint64_t)
                           : fdy_dtype_size(v->dtype);
    fdy_status st = check_view(v, i, view_alignment(b, element), bytes, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  *workspace = (fdy_tensor_view){0};
  if (need == 0) {
    return FDY_OK;
  }
  const fdy_tensor_view *w = &op->workspace;
  uint64_t given = 0;
  if (w->buffer == NULL ||
      fdy_tensor_bytes(w->dtype, w->shape, &given, NULL) != FDY_OK ||
      given < need) {
    fdy_status st =
        cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                 "the %s op needs a workspace of %llu bytes, got "
                 "%llu",
                 fdy_op_kind_name(op->kind), (unsigned long long)need,
                 (unsigned long long)given);
    if (err != NULL) {
      err->ids[0] = operands;
      err->expected = need;
      err->actual = given;
      snprintf(err->name, sizeof err->name, "workspace");
    }
    return st;
  }
  fdy_status st =
      check_view(w, operands, view_alignment(b, sizeof(uint64_t)), given, err);
  if (st == FDY_OK) {
    *workspace = *w;
  }
  return st;
}

static fdy_status cpu_launch(fdy_backend *base, fdy_backend_stream *stream,
                             const fdy_op *op, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  uint32_t threads = fdy_pool_threads(b->pool);
  if (stream == NULL || op == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                    "NULL stream or op");
  }
  fdy_status st = fdy_op_check(op, err);
  if (st != FDY_OK) {
    return cpu_tag(err, st, "launch");
  }
  if (!fdy_cpu_op_supported(op, threads)) {
    st = cpu_fail(err, FDY_ERR_UNSUPPORTED, "launch",
                  "this %s op exceeds the backend's limits (dimensions "
                  "below 2^31, tensors below 2^40 elements)",
                  fdy_op_kind_name(op->kind));
    if (err != NULL) {
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return st;
  }
  uint64_t need = 0;
  fdy_tensor_view workspace;
  st = fdy_cpu_op_workspace(op, threads, &need, err);
  if (st != FDY_OK) {
    return cpu_tag(err, st, "launch");
  }
  st = check_views(b, op, need, &workspace, err);
  if (st != FDY_OK) {
    return st;
  }
  cpu_item item = {.kind = CPU_LAUNCH, .op = *op};
  item.op.workspace = workspace;
  pthread_mutex_lock(&b->mu);
  st = queue_locked(b, stream, &item, "launch", err);
  pthread_mutex_unlock(&b->mu);
  return st;
}

static fdy_status cpu_host_wait(fdy_backend *base, fdy_backend_event *event,
                                fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (event == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_wait", "NULL event");
  }
  pthread_mutex_lock(&b->mu);
  uint64_t generation = event->recorded;
  while (event->completed < generation) {
    pthread_cond_wait(&event->progress, &b->mu);
  }
  fdy_status st = FDY_OK;
  if (event->failed) {
    st = b->failure.kind;
    b->failure_reported = true;
    if (err != NULL) {
      *err = b->failure;
    }
  }
  pthread_mutex_unlock(&b->mu);
  return st;
}

static fdy_status cpu_event_time(fdy_backend *base, fdy_backend_event *event,
                                 int64_t *out_ns, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (event == NULL || out_ns == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                    "NULL event or output");
  }
  pthread_mutex_lock(&b->mu);
  uint64_t recorded = event->recorded;
  bool done = recorded > 0 && event->completed >= recorded;
  int64_t ns = event->completed_ns;
  pthread_mutex_unlock(&b->mu);
  if (!done) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                    recorded == 0 ? "the event was never recorded"
                                  : "the event's recording has not completed");
  }
  *out_ns = ns;
  return FDY_OK;
}

/* Reports a failure no host_wait reported, and clears it. */
static fdy_status cpu_drain(fdy_backend *base, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  pthread_mutex_lock(&b->mu);
  drain_locked(b);
  fdy_status st = b->failure_reported ? FDY_OK : b->failure.kind;
  if (st != FDY_OK && err != NULL) {
    *err = b->failure;
  }
  failure_clear_locked(b);
  pthread_mutex_unlock(&b->mu);
  return st;
}

/* Drains, joins every worker and frees every object, released or not. */
static void cpu_destroy(fdy_backend *base) {
  cpu_backend *b = cpu_of(base);
  pthread_mutex_lock(&b->mu);
  drain_locked(b);
  pthread_mutex_unlock(&b->mu);
  while (b->streams.next != &b->streams) {
    cpu_stream_destroy(base, (fdy_backend_stream *)b->streams.next);
  }
  while (b->hosts.next != &b->hosts) {
    cpu_host_unregister(base, (fdy_backend_host *)b->hosts.next);
  }
  pthread_mutex_lock(&b->mu);
  while (b->buffers.next != &b->buffers) {
    buffer_free_locked(b, (fdy_backend_buffer *)b->buffers.next);
  }
  while (b->events.next != &b->events) {
    event_free_locked((fdy_backend_event *)b->events.next);
  }
  while (b->free_items != NULL) {
    cpu_item *item = b->free_items;
    b->free_items = item->next;
    free(item);
  }
  pthread_mutex_unlock(&b->mu);
  fdy_pool_destroy(b->pool);
  pthread_cond_destroy(&b->idle);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

/* Called by the thread that submits, like every entry (b->submitted only
 * changes in the submitting entries). */
static uint64_t cpu_submitted(fdy_backend *base) {
  return cpu_of(base)->submitted;
}

static const fdy_backend_ops cpu_ops = {
    .name = "cpu",
    .capabilities = cpu_capabilities,
    .supports_op = cpu_supports_op,
    .workspace_bytes = cpu_workspace_bytes,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_release = cpu_buffer_release,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .copy_to_device = cpu_copy_to_device,
    .copy_to_host = cpu_copy_to_host,
    .launch = cpu_launch,
    .stream_wait = cpu_stream_wait,
    .host_wait = cpu_host_wait,
    .event_time = cpu_event_time,
    .drain = cpu_drain,
    .submitted = cpu_submitted,
    .destroy = cpu_destroy,
};

static fdy_status default_memory(uint64_t *out, fdy_error *err) {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) {
    return cpu_fail(err, FDY_ERR_BACKEND, "create",
                    "cannot query physical memory: %s", strerror(errno));
  }
  uint64_t total = 0;
  if (fdy_mul_u64((uint64_t)pages, (uint64_t)page_size, &total, err) !=
      FDY_OK) {
    return cpu_tag(err, FDY_ERR_OVERFLOW, "create");
  }
  *out = total / 2;
  return FDY_OK;
}

static uint32_t online_cpus(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online < 1                     ? 1
         : online > FDY_CPU_MAX_THREADS ? FDY_CPU_MAX_THREADS
                                        : (uint32_t)online;
}

fdy_status fdy_cpu_backend_create(const fdy_cpu_options *options,
                                  fdy_backend **out, fdy_error *err) {
  fdy_cpu_options opts = {0};
  cpu_backend *b = NULL;
  bool mutex_ready = false, idle_ready = false;
  fdy_status st = FDY_OK;
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "create", "out is NULL");
  }
  *out = NULL;
  if (options != NULL) {
    opts = *options;
  }
  if (opts.alignment == 0) {
    opts.alignment = CPU_DEFAULT_ALIGNMENT;
  }
  if (!fdy_is_power_of_two(opts.alignment) || opts.alignment > SIZE_MAX) {
    st = cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                  "alignment %llu is not a power of two",
                  (unsigned long long)opts.alignment);
    if (err != NULL) {
      err->actual = opts.alignment;
    }
    return st;
  }
  if (opts.threads > FDY_CPU_MAX_THREADS) {
    st = cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                  "threads must be at most %u, got %u", FDY_CPU_MAX_THREADS,
                  opts.threads);
    if (err != NULL) {
      err->expected = FDY_CPU_MAX_THREADS;
      err->actual = opts.threads;
    }
    return st;
  }
  if (opts.threads == 0) {
    opts.threads = online_cpus();
  }
  if (opts.memory_bytes == 0) {
    st = default_memory(&opts.memory_bytes, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  b = calloc(1, sizeof *b);
  if (b == NULL) {
    st = cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                  "cannot allocate the backend");
    goto cleanup;
  }
  int rc = pthread_mutex_init(&b->mu, NULL);
  if (rc != 0) {
    st = cpu_fail(err, FDY_ERR_BACKEND, "create",
                  "pthread_mutex_init failed: %s", strerror(rc));
    goto cleanup;
  }
  mutex_ready = true;
  rc = pthread_cond_init(&b->idle, NULL);
  if (rc != 0) {
    st = cpu_fail(err, FDY_ERR_BACKEND, "create",
                  "pthread_cond_init failed: %s", strerror(rc));
    goto cleanup;
  }
  idle_ready = true;
  st = fdy_pool_create(opts.threads, &b->pool, err);
  if (st != FDY_OK) {
    cpu_tag(err, st, "create");
    goto cleanup;
  }
  b->base.ops = &cpu_ops;
  b->base.self = b;
  b->budget = fdy_budget_make(FDY_SPACE_DEVICE, opts.memory_bytes);
  b->alignment = opts.alignment;
  fdy_list_init(&b->buffers);
  fdy_list_init(&b->events);
  fdy_list_init(&b->streams);
  fdy_list_init(&b->hosts);
  *out = &b->base;
  return FDY_OK;

cleanup:
  if (idle_ready) {
    pthread_cond_destroy(&b->idle);
  }
  if (mutex_ready) {
    pthread_mutex_destroy(&b->mu);
  }
  free(b);
  return st;
}

uint32_t fdy_cpu_backend_threads(const fdy_backend *backend) {
  if (backend == NULL || backend->ops != &cpu_ops) {
    return 0;
  }
  return fdy_pool_threads(((const cpu_backend *)backend)->pool);
}
