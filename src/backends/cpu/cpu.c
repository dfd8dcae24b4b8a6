/* The CPU backend: the backend contract implemented on the host with
 * pthreads, so the whole system runs without a GPU.
 *
 * Each stream is a worker thread draining a FIFO queue of work items (copy,
 * launch, wait). One backend mutex guards every piece of shared state: the
 * queues, reference counts, the memory budget and event completion; each
 * event has its own condition variable that is broadcast when it completes,
 * and `idle` is broadcast when no submitted work is left. Workers drop the
 * mutex while they copy or checksum, so streams run concurrently.
 *
 * Reference rule: every object (buffer, event) is reference counted; the
 * caller holds one reference, and each queued work item holds one on every
 * buffer and event it touches, so a buffer released while queued work still
 * reads it stays alive (and counted against the budget) until that work
 * completed. Launch results are kept in their event and written to the
 * caller's result word by host_wait or drain, on the caller's thread, once
 * they observe the launch complete. All live objects are also on a list so
 * destroy frees whatever the caller did not release. */
#include "foundry/cpu.h"

#include "foundry/checksum.h"
#include "foundry/graph.h"
#include "handle_list.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CPU_DEFAULT_ALIGNMENT 64

/* Intrusive list node; the first member of every tracked object. */
typedef struct cpu_backend cpu_backend;

struct fdy_backend_buffer {
  fdy_list_node node;
  uint32_t refs;
  void *data;
  uint64_t bytes;
};

struct fdy_backend_event {
  fdy_list_node node;
  uint32_t refs;
  bool done;
  pthread_cond_t completed; /* broadcast when done becomes true */
  int64_t start_ns, end_ns;
  uint64_t *result; /* launch: caller's result word, or NULL */
  uint64_t value;   /* launch: the result once done */
  struct fdy_backend_event *unpublished_next;
};

struct fdy_backend_host {
  fdy_list_node node;
  const void *ptr;
  uint64_t bytes;
};

typedef enum cpu_work_kind {
  CPU_WORK_COPY = 0,
  CPU_WORK_LAUNCH,
  CPU_WORK_WAIT,
} cpu_work_kind;

typedef struct cpu_work {
  struct cpu_work *next;
  cpu_work_kind kind;
  fdy_backend_event *signal; /* copy, launch: completes with the work */
  fdy_backend_event *wait;   /* wait: the event the stream waits for */
  /* copy */
  fdy_backend_buffer *dst;
  uint64_t dst_offset;
  const void *src;
  uint64_t bytes;
  /* launch: weights[0] is checksummed, all are kept alive */
  uint32_t weight_count;
  fdy_backend_buffer *weights[FDY_MAX_LAUNCH_WEIGHTS];
  uint64_t weight_bytes[FDY_MAX_LAUNCH_WEIGHTS];
} cpu_work;

struct fdy_backend_stream {
  fdy_list_node node;
  cpu_backend *owner;
  pthread_t thread;
  pthread_cond_t work; /* signalled when work arrives or stop is set */
  cpu_work *head, *tail;
  bool stop;
};

struct cpu_backend {
  fdy_backend base;
  pthread_mutex_t mu;
  pthread_cond_t idle; /* broadcast when pending drops to 0 */
  uint64_t pending;    /* submitted work items not yet completed */
  fdy_budget budget;
  uint64_t alignment;
  uint32_t compute_passes;
  fdy_list_node buffers, events, streams, hosts; /* list heads */
  fdy_backend_event *unpublished; /* launches whose result is not written */
};

static cpu_backend *cpu_of(fdy_backend *b) {
  return (cpu_backend *)b;
}

static fdy_status cpu_fail(fdy_error *err, fdy_status kind, const char *op,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static fdy_status cpu_fail(fdy_error *err, fdy_status kind, const char *op,
                           const char *fmt, ...) {
  char message[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  fdy_error_set(err, kind, "cpu %s: %s", op, message);
  if (err != NULL) {
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
  }
  return kind;
}

/* ---- reference counting (callers hold b->mu) ------------------------------
 */

static void buffer_free_locked(cpu_backend *b, fdy_backend_buffer *buf) {
  fdy_list_unlink(&buf->node);
  fdy_budget_release(&b->budget, buf->bytes);
  free(buf->data);
  free(buf);
}

static void buffer_unref_locked(cpu_backend *b, fdy_backend_buffer *buf) {
  if (--buf->refs == 0) {
    buffer_free_locked(b, buf);
  }
}

static void event_free_locked(fdy_backend_event *e) {
  fdy_list_unlink(&e->node);
  pthread_cond_destroy(&e->completed);
  free(e);
}

static void event_unref_locked(fdy_backend_event *e) {
  if (--e->refs == 0) {
    event_free_locked(e);
  }
}

/* Writes the result of every completed launch not yet published. */
static void publish_locked(cpu_backend *b) {
  fdy_backend_event **link = &b->unpublished;
  while (*link != NULL) {
    fdy_backend_event *e = *link;
    if (e->done) {
      *e->result = e->value;
      *link = e->unpublished_next;
      e->unpublished_next = NULL;
      event_unref_locked(e);
    } else {
      link = &e->unpublished_next;
    }
  }
}

/* ---- worker ----------------------------------------------------------------
 */

static uint64_t work_run(const cpu_backend *b, const cpu_work *w) {
  if (w->kind == CPU_WORK_COPY) {
    if (w->bytes > 0) {
      memcpy((unsigned char *)w->dst->data + w->dst_offset, w->src, w->bytes);
    }
    return 0;
  }
  /* Read through a volatile pointer so no pass can be optimized away. */
  const void *volatile data = w->weights[0]->data;
  uint64_t result = 0;
  for (uint32_t pass = 0; pass < b->compute_passes; pass++) {
    result = fdy_checksum(data, w->weight_bytes[0]);
  }
  return result;
}

static void work_complete_locked(cpu_backend *b, cpu_work *w, int64_t start,
                                 int64_t end, uint64_t value) {
  if (w->signal != NULL) {
    w->signal->start_ns = start;
    w->signal->end_ns = end;
    w->signal->value = value;
    w->signal->done = true;
    pthread_cond_broadcast(&w->signal->completed);
    event_unref_locked(w->signal);
  }
  if (w->wait != NULL) {
    event_unref_locked(w->wait);
  }
  if (w->dst != NULL) {
    buffer_unref_locked(b, w->dst);
  }
  for (uint32_t i = 0; i < w->weight_count; i++) {
    buffer_unref_locked(b, w->weights[i]);
  }
  free(w);
  if (--b->pending == 0) {
    pthread_cond_broadcast(&b->idle);
  }
}

static void *worker_main(void *arg) {
  fdy_backend_stream *s = arg;
  cpu_backend *b = s->owner;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (s->head == NULL && !s->stop) {
      pthread_cond_wait(&s->work, &b->mu);
    }
    cpu_work *w = s->head;
    if (w == NULL) {
      break;
    }
    int64_t start = 0, end = 0;
    uint64_t value = 0;
    if (w->kind == CPU_WORK_WAIT) {
      while (!w->wait->done) {
        pthread_cond_wait(&w->wait->completed, &b->mu);
      }
    } else {
      start = fdy_now_ns();
      pthread_mutex_unlock(&b->mu);
      value = work_run(b, w);
      end = fdy_now_ns();
      pthread_mutex_lock(&b->mu);
    }
    s->head = w->next;
    if (s->head == NULL) {
      s->tail = NULL;
    }
    work_complete_locked(b, w, start, end, value);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

static void enqueue_locked(cpu_backend *b, fdy_backend_stream *s, cpu_work *w) {
  w->next = NULL;
  if (s->tail != NULL) {
    s->tail->next = w;
  } else {
    s->head = w;
  }
  s->tail = w;
  b->pending++;
  pthread_cond_signal(&s->work);
}

static void drain_locked(cpu_backend *b) {
  while (b->pending > 0) {
    pthread_cond_wait(&b->idle, &b->mu);
  }
}

/* Creates an event with refs references, linked into b's list. */
static fdy_backend_event *event_new_locked(cpu_backend *b, uint32_t refs) {
  fdy_backend_event *e = calloc(1, sizeof *e);
  if (e == NULL) {
    return NULL;
  }
  if (pthread_cond_init(&e->completed, NULL) != 0) {
    free(e);
    return NULL;
  }
  e->refs = refs;
  fdy_list_push(&b->events, &e->node);
  return e;
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

static bool cpu_supports_op(fdy_backend *base, const char *kind) {
  (void)base;
  return kind != NULL && strcmp(kind, FDY_OP_SYNTHETIC_CHECKSUM) == 0;
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
    if (err != NULL) {
      snprintf(err->backend_op, sizeof err->backend_op, "buffer_alloc");
      fdy_error_prefix(err, "cpu buffer_alloc");
    }
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
  pthread_mutex_lock(&b->mu);
  fdy_list_push(&b->buffers, &buf->node);
  pthread_mutex_unlock(&b->mu);
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
  if (buffer == NULL) {
    return;
  }
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
  pthread_mutex_lock(&b->mu);
  fdy_list_push(&b->hosts, &h->node);
  pthread_mutex_unlock(&b->mu);
  *out = h;
  return FDY_OK;
}

static void cpu_host_unregister(fdy_backend *base, fdy_backend_host *host) {
  cpu_backend *b = cpu_of(base);
  if (host == NULL) {
    return;
  }
  pthread_mutex_lock(&b->mu);
  fdy_list_unlink(&host->node);
  pthread_mutex_unlock(&b->mu);
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
                  "pthread_create failed: %s", strerror(rc));
    goto cleanup;
  }
  pthread_mutex_lock(&b->mu);
  fdy_list_push(&b->streams, &s->node);
  pthread_mutex_unlock(&b->mu);
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
  pthread_mutex_lock(&b->mu);
  fdy_list_unlink(&stream->node);
  pthread_mutex_unlock(&b->mu);
  pthread_cond_destroy(&stream->work);
  free(stream);
}

static fdy_status cpu_copy_to_device(fdy_backend *base,
                                     fdy_backend_stream *stream,
                                     fdy_backend_buffer *dst,
                                     uint64_t dst_offset, const void *src,
                                     uint64_t bytes, fdy_backend_event **out,
                                     fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  uint64_t end = 0;
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "copy_to_device",
                    "out is NULL");
  }
  *out = NULL;
  if (stream == NULL || dst == NULL || (src == NULL && bytes > 0)) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "copy_to_device",
                    "NULL stream, buffer or source");
  }
  if (__builtin_add_overflow(dst_offset, bytes, &end) || end > dst->bytes) {
    fdy_status st = cpu_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "copy_to_device",
        "copy of %llu bytes at offset %llu exceeds the buffer's %llu bytes",
        (unsigned long long)bytes, (unsigned long long)dst_offset,
        (unsigned long long)dst->bytes);
    if (err != NULL) {
      err->expected = dst->bytes;
      err->actual = bytes;
    }
    return st;
  }
  cpu_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "copy_to_device",
                    "cannot allocate a work item");
  }
  pthread_mutex_lock(&b->mu);
  fdy_backend_event *e = event_new_locked(b, 2); /* caller + work */
  if (e == NULL) {
    pthread_mutex_unlock(&b->mu);
    free(w);
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "copy_to_device",
                    "cannot allocate an event");
  }
  w->kind = CPU_WORK_COPY;
  w->signal = e;
  w->dst = dst;
  dst->refs++;
  w->dst_offset = dst_offset;
  w->src = src;
  w->bytes = bytes;
  enqueue_locked(b, stream, w);
  pthread_mutex_unlock(&b->mu);
  *out = e;
  return FDY_OK;
}

static fdy_status cpu_launch(fdy_backend *base, fdy_backend_stream *stream,
                             const fdy_launch_desc *desc,
                             fdy_backend_event **out, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch", "out is NULL");
  }
  *out = NULL;
  if (stream == NULL || desc == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                    "NULL stream or descriptor");
  }
  if (!cpu_supports_op(base, desc->kind)) {
    fdy_status st = cpu_fail(err, FDY_ERR_UNSUPPORTED, "launch",
                             "op kind \"%s\" is not supported",
                             desc->kind != NULL ? desc->kind : "(null)");
    if (err != NULL) {
      err->ids[0] = desc->op_index;
      snprintf(err->name, sizeof err->name, "%s",
               desc->kind != NULL ? desc->kind : "");
    }
    return st;
  }
  if (desc->weight_count != 1) {
    fdy_status st =
        cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                 "op %u: synthetic.checksum binds exactly 1 weight, got %u",
                 desc->op_index, desc->weight_count);
    if (err != NULL) {
      err->ids[0] = desc->op_index;
      err->expected = 1;
      err->actual = desc->weight_count;
    }
    return st;
  }
  for (uint32_t i = 0; i < desc->weight_count; i++) {
    const fdy_launch_weight *lw = &desc->weights[i];
    if (lw->buffer == NULL || lw->bytes > lw->buffer->bytes) {
      fdy_status st =
          cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                   "op %u: weight %u is unbound or larger than its buffer",
                   desc->op_index, i);
      if (err != NULL) {
        err->ids[0] = desc->op_index;
        err->expected = lw->buffer != NULL ? lw->buffer->bytes : 0;
        err->actual = lw->bytes;
      }
      return st;
    }
  }
  cpu_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "launch",
                    "cannot allocate a work item");
  }
  pthread_mutex_lock(&b->mu);
  /* caller + work, + the unpublished list when there is a result word */
  fdy_backend_event *e = event_new_locked(b, desc->result != NULL ? 3 : 2);
  if (e == NULL) {
    pthread_mutex_unlock(&b->mu);
    free(w);
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "launch",
                    "cannot allocate an event");
  }
  w->kind = CPU_WORK_LAUNCH;
  w->signal = e;
  w->weight_count = desc->weight_count;
  for (uint32_t i = 0; i < desc->weight_count; i++) {
    w->weights[i] = desc->weights[i].buffer;
    w->weights[i]->refs++;
    w->weight_bytes[i] = desc->weights[i].bytes;
  }
  if (desc->result != NULL) {
    e->result = desc->result;
    e->unpublished_next = b->unpublished;
    b->unpublished = e;
  }
  enqueue_locked(b, stream, w);
  pthread_mutex_unlock(&b->mu);
  *out = e;
  return FDY_OK;
}

static fdy_status cpu_stream_wait(fdy_backend *base, fdy_backend_stream *stream,
                                  fdy_backend_event *event, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (stream == NULL || event == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_wait",
                    "NULL stream or event");
  }
  cpu_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    return cpu_fail(err, FDY_ERR_OUT_OF_MEMORY, "stream_wait",
                    "cannot allocate a work item");
  }
  w->kind = CPU_WORK_WAIT;
  pthread_mutex_lock(&b->mu);
  w->wait = event;
  event->refs++;
  enqueue_locked(b, stream, w);
  pthread_mutex_unlock(&b->mu);
  return FDY_OK;
}

static fdy_status cpu_host_wait(fdy_backend *base, fdy_backend_event *event,
                                fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (event == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_wait", "NULL event");
  }
  pthread_mutex_lock(&b->mu);
  while (!event->done) {
    pthread_cond_wait(&event->completed, &b->mu);
  }
  publish_locked(b);
  pthread_mutex_unlock(&b->mu);
  return FDY_OK;
}

static fdy_status cpu_event_times(fdy_backend *base, fdy_backend_event *event,
                                  fdy_event_times *out, fdy_error *err) {
  cpu_backend *b = cpu_of(base);
  if (event == NULL || out == NULL) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_times",
                    "NULL event or output");
  }
  pthread_mutex_lock(&b->mu);
  bool done = event->done;
  fdy_event_times times = {event->start_ns, event->end_ns};
  pthread_mutex_unlock(&b->mu);
  if (!done) {
    return cpu_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_times",
                    "the event has not completed");
  }
  *out = times;
  return FDY_OK;
}

static void cpu_event_release(fdy_backend *base, fdy_backend_event *event) {
  cpu_backend *b = cpu_of(base);
  if (event == NULL) {
    return;
  }
  pthread_mutex_lock(&b->mu);
  event_unref_locked(event);
  pthread_mutex_unlock(&b->mu);
}

static fdy_status cpu_drain(fdy_backend *base, fdy_error *err) {
  (void)err;
  cpu_backend *b = cpu_of(base);
  pthread_mutex_lock(&b->mu);
  drain_locked(b);
  publish_locked(b);
  pthread_mutex_unlock(&b->mu);
  return FDY_OK;
}

/* Drains, joins every worker and frees every object, released or not.
 * Results of launches never observed by host_wait or drain before destroy
 * are not written: their result words may no longer be valid. */
static void cpu_destroy(fdy_backend *base) {
  cpu_backend *b = cpu_of(base);
  if (b == NULL) {
    return;
  }
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
  b->unpublished = NULL;
  while (b->events.next != &b->events) {
    event_free_locked((fdy_backend_event *)b->events.next);
  }
  pthread_mutex_unlock(&b->mu);
  pthread_cond_destroy(&b->idle);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

static const fdy_backend_ops cpu_ops = {
    .name = "cpu",
    .capabilities = cpu_capabilities,
    .supports_op = cpu_supports_op,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_release = cpu_buffer_release,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .copy_to_device = cpu_copy_to_device,
    .launch = cpu_launch,
    .stream_wait = cpu_stream_wait,
    .host_wait = cpu_host_wait,
    .event_times = cpu_event_times,
    .event_release = cpu_event_release,
    .drain = cpu_drain,
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
    return FDY_ERR_OVERFLOW;
  }
  *out = total / 2;
  return FDY_OK;
}

fdy_status fdy_cpu_backend_create(const fdy_cpu_options *options,
                                  fdy_backend **out, fdy_error *err) {
  fdy_cpu_options opts = {0};
  cpu_backend *b = NULL;
  bool mutex_ready = false;
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
  if (opts.compute_passes == 0) {
    opts.compute_passes = 1;
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
  b->base.ops = &cpu_ops;
  b->base.self = b;
  b->budget = fdy_budget_make(FDY_SPACE_DEVICE, opts.memory_bytes);
  b->alignment = opts.alignment;
  b->compute_passes = opts.compute_passes;
  fdy_list_init(&b->buffers);
  fdy_list_init(&b->events);
  fdy_list_init(&b->streams);
  fdy_list_init(&b->hosts);
  *out = &b->base;
  return FDY_OK;

cleanup:
  if (mutex_ready) {
    pthread_mutex_destroy(&b->mu);
  }
  free(b);
  return st;
}
