/* The fake backend (include/foundry/fake.h): a test double of the backend
 * contract. Every call is logged; submitted work (copies, launches) waits in
 * one FIFO queue and completes only on host_wait (everything up to the awaited
 * event) or drain. Handles are never freed before the backend is destroyed:
 * a released handle stays as a tombstone, so a caller that uses it is caught
 * and counted as a violation instead of touching freed memory. Buffer memory
 * (store_data) is freed as soon as no caller reference and no pending work
 * holds it; a free postponed by pending work is counted as deferred. */
#include "foundry/fake.h"

#include "foundry/checksum.h"
#include "foundry/graph.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct fdy_backend_buffer {
  int64_t id;
  uint64_t bytes;
  unsigned char *data; /* store_data only */
  bool held;           /* the caller's reference is not released yet */
  bool alive;          /* memory still held */
  uint32_t work_refs;  /* pending work items using it */
};

struct fdy_backend_event {
  int64_t id;
  bool held;
  bool alive;
  bool complete;
  uint64_t work_seq; /* sequence number of the work that completes it */
  fdy_event_times times;
};

struct fdy_backend_stream {
  int64_t id;
  bool alive;
  uint64_t pending; /* pending work items on this stream */
};

struct fdy_backend_host {
  int64_t id;
  bool alive;
};

typedef enum fake_work_kind {
  FAKE_WORK_COPY,
  FAKE_WORK_LAUNCH,
} fake_work_kind;

typedef struct fake_work {
  fake_work_kind kind;
  uint64_t seq;
  fdy_backend_stream *stream;
  fdy_backend_event *event;
  uint32_t buffer_count;
  fdy_backend_buffer *buffers[FDY_MAX_LAUNCH_WEIGHTS];
  uint64_t bytes[FDY_MAX_LAUNCH_WEIGHTS]; /* bytes used of each buffer */
  uint64_t dst_offset;                    /* copies */
  const void *src;                        /* copies */
  bool checksum;                          /* launches of synthetic.checksum */
  uint64_t *result;                       /* launches, may be NULL */
} fake_work;

typedef struct ptr_array {
  void **items;
  size_t count, cap;
} ptr_array;

typedef struct fake_backend {
  fdy_backend base;
  fdy_device_caps caps;
  uint64_t fail_at_call;
  fdy_fake_fail_mode fail_mode;
  bool store_data;
  bool fail_drain;
  char *unsupported_kind;
  fdy_fake_call *log;
  size_t log_count, log_cap;
  int64_t next_id;
  uint64_t next_seq;
  ptr_array buffers, events, streams, hosts;
  fake_work *work; /* pending work is work[work_head .. work_count) */
  size_t work_head, work_count, work_cap;
  fdy_fake_stats stats;
} fake_backend;

static const fdy_backend_ops fake_ops;

static fake_backend *fake_of(fdy_backend *b) {
  assert(b && b->ops == &fake_ops);
  return (fake_backend *)b;
}

static const fake_backend *fake_of_const(const fdy_backend *b) {
  assert(b && b->ops == &fake_ops);
  return (const fake_backend *)b;
}

static bool ptr_array_push(ptr_array *a, void *item) {
  if (a->count == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    void **items = realloc(a->items, cap * sizeof(*items));
    if (!items) {
      return false;
    }
    a->items = items;
    a->cap = cap;
  }
  a->items[a->count++] = item;
  return true;
}

static void ptr_array_free(ptr_array *a) {
  for (size_t i = 0; i < a->count; i++) {
    free(a->items[i]);
  }
  free(a->items);
  a->items = NULL;
  a->count = a->cap = 0;
}

/* Logs the start of a call and returns its number. A log entry that cannot
 * be stored (host out of memory) is dropped; the call still counts. */
static uint64_t call_begin(fake_backend *f, const char *op, uint64_t bytes,
                           int64_t handle) {
  uint64_t number = ++f->stats.calls;
  if (f->log_count == f->log_cap) {
    size_t cap = f->log_cap ? f->log_cap * 2 : 64;
    fdy_fake_call *log = realloc(f->log, cap * sizeof(*log));
    if (!log) {
      return number;
    }
    f->log = log;
    f->log_cap = cap;
  }
  f->log[f->log_count++] = (fdy_fake_call){.number = number,
                                           .op = op,
                                           .status = FDY_OK,
                                           .bytes = bytes,
                                           .handle = handle};
  return number;
}

static fdy_fake_call *call_entry(fake_backend *f, uint64_t number) {
  if (f->log_count > 0 && f->log[f->log_count - 1].number == number) {
    return &f->log[f->log_count - 1];
  }
  return NULL;
}

/* Records the outcome of call `number` and returns status. */
static fdy_status call_end(fake_backend *f, uint64_t number, fdy_status status,
                           int64_t handle) {
  fdy_fake_call *entry = call_entry(f, number);
  if (entry) {
    entry->status = status;
    if (handle >= 0) {
      entry->handle = handle;
    }
  }
  return status;
}

static bool injected(const fake_backend *f, uint64_t number) {
  return f->fail_at_call != 0 && f->fail_at_call == number;
}

static fdy_status fail_injected(fake_backend *f, uint64_t number,
                                const char *op, fdy_error *err) {
  fdy_error_set(err, FDY_ERR_BACKEND,
                "fake backend: injected failure of %s at call %llu", op,
                (unsigned long long)number);
  return call_end(f, number, FDY_ERR_BACKEND, -1);
}

static fdy_status fail_violation(fake_backend *f, uint64_t number,
                                 const char *op, const char *what,
                                 fdy_error *err) {
  f->stats.violations++;
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT, "fake backend: %s: %s", op,
                what);
  return call_end(f, number, FDY_ERR_INVALID_ARGUMENT, -1);
}

static void buffer_free_memory(fake_backend *f, fdy_backend_buffer *buffer,
                               bool deferred) {
  free(buffer->data);
  buffer->data = NULL;
  buffer->alive = false;
  f->stats.live_buffers--;
  f->stats.buffer_bytes -= buffer->bytes;
  if (deferred) {
    f->stats.deferred_frees++;
  }
}

static void event_drop(fake_backend *f, fdy_backend_event *event) {
  if (event->alive && !event->held && event->complete) {
    event->alive = false;
    f->stats.live_events--;
  }
}

static uint64_t launch_value(const fake_work *w) {
  uint64_t value = 0;
  for (uint32_t i = 0; i < w->buffer_count; i++) {
    value += fdy_checksum(w->buffers[i]->data, w->bytes[i]);
  }
  return value;
}

/* Runs the oldest pending work item and drops its references. */
static void complete_front(fake_backend *f) {
  fake_work *w = &f->work[f->work_head++];
  if (f->store_data && w->kind == FAKE_WORK_COPY) {
    memcpy(w->buffers[0]->data + w->dst_offset, w->src, w->bytes[0]);
  }
  if (w->kind == FAKE_WORK_LAUNCH && w->result) {
    *w->result = f->store_data && w->checksum ? launch_value(w) : 0;
  }
  for (uint32_t i = 0; i < w->buffer_count; i++) {
    fdy_backend_buffer *buffer = w->buffers[i];
    buffer->work_refs--;
    if (buffer->alive && !buffer->held && buffer->work_refs == 0) {
      buffer_free_memory(f, buffer, true);
    }
  }
  w->event->complete = true;
  w->event->times.end_ns = fdy_now_ns();
  event_drop(f, w->event);
  w->stream->pending--;
  f->stats.pending_work--;
  if (f->work_head == f->work_count) {
    f->work_head = f->work_count = 0;
  }
}

static void complete_through(fake_backend *f, uint64_t seq) {
  while (f->work_head < f->work_count && f->work[f->work_head].seq <= seq) {
    complete_front(f);
  }
}

static void complete_all(fake_backend *f) {
  while (f->work_head < f->work_count) {
    complete_front(f);
  }
}

/* Queues w (buffers, stream and event already set) and takes its
 * references; the event is new and held only when returned to the caller. */
static fdy_status submit(fake_backend *f, fake_work *w, bool hand_out,
                         fdy_backend_event **out, fdy_error *err) {
  if (f->work_count == f->work_cap) {
    size_t cap = f->work_cap ? f->work_cap * 2 : 64;
    fake_work *work = realloc(f->work, cap * sizeof(*work));
    if (!work) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "fake backend: out of host memory");
    }
    f->work = work;
    f->work_cap = cap;
  }
  fdy_backend_event *event = calloc(1, sizeof(*event));
  if (!event || !ptr_array_push(&f->events, event)) {
    free(event);
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "fake backend: out of host memory");
  }
  event->id = f->next_id++;
  event->held = hand_out;
  event->alive = true;
  event->work_seq = ++f->next_seq;
  event->times.start_ns = fdy_now_ns();
  f->stats.live_events++;
  w->seq = event->work_seq;
  w->event = event;
  for (uint32_t i = 0; i < w->buffer_count; i++) {
    w->buffers[i]->work_refs++;
  }
  w->stream->pending++;
  f->stats.pending_work++;
  f->work[f->work_count++] = *w;
  if (hand_out) {
    *out = event;
  }
  return FDY_OK;
}

/* ---- entries ---------------------------------------------------------------
 */

static fdy_status fake_capabilities(fdy_backend *b, fdy_device_caps *out,
                                    fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "capabilities", 0, -1);
  if (!out) {
    return fail_violation(f, n, "capabilities", "NULL output", err);
  }
  if (injected(f, n)) {
    return fail_injected(f, n, "capabilities", err);
  }
  *out = f->caps;
  return call_end(f, n, FDY_OK, -1);
}

static bool fake_supports_op(fdy_backend *b, const char *kind) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "supports_op", 0, -1);
  bool ok = kind && kind[0] &&
            !(f->unsupported_kind && strcmp(kind, f->unsupported_kind) == 0);
  call_end(f, n, ok ? FDY_OK : FDY_ERR_UNSUPPORTED, -1);
  return ok;
}

static fdy_status fake_buffer_alloc(fdy_backend *b, uint64_t bytes,
                                    fdy_backend_buffer **out, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "buffer_alloc", bytes, -1);
  if (!out || bytes == 0) {
    return fail_violation(f, n, "buffer_alloc", "zero bytes or NULL output",
                          err);
  }
  /* Both fail modes look the same here: an allocation that fails after it
   * was made is undone inside the backend. */
  if (injected(f, n)) {
    return fail_injected(f, n, "buffer_alloc", err);
  }
  uint64_t total;
  if (bytes > f->caps.max_allocation ||
      __builtin_add_overflow(f->stats.buffer_bytes, bytes, &total) ||
      total > f->caps.total_memory) {
    fdy_error_set(err, FDY_ERR_BACKEND,
                  "fake backend: cannot allocate %llu bytes (%llu in use of "
                  "%llu, at most %llu at once)",
                  (unsigned long long)bytes,
                  (unsigned long long)f->stats.buffer_bytes,
                  (unsigned long long)f->caps.total_memory,
                  (unsigned long long)f->caps.max_allocation);
    if (err) {
      err->expected = f->caps.total_memory;
      err->actual = bytes;
    }
    return call_end(f, n, FDY_ERR_BACKEND, -1);
  }
  fdy_backend_buffer *buffer = calloc(1, sizeof(*buffer));
  unsigned char *data = f->store_data ? malloc(bytes) : NULL;
  if (!buffer || (f->store_data && !data) ||
      !ptr_array_push(&f->buffers, buffer)) {
    free(buffer);
    free(data);
    fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                  "fake backend: out of host memory for %llu bytes",
                  (unsigned long long)bytes);
    return call_end(f, n, FDY_ERR_OUT_OF_MEMORY, -1);
  }
  if (data) {
    memset(data, 0xA5, bytes); /* poison: bytes never copied show up */
  }
  buffer->id = f->next_id++;
  buffer->bytes = bytes;
  buffer->data = data;
  buffer->held = true;
  buffer->alive = true;
  f->stats.live_buffers++;
  f->stats.buffer_bytes = total;
  if (total > f->stats.peak_buffer_bytes) {
    f->stats.peak_buffer_bytes = total;
  }
  *out = buffer;
  return call_end(f, n, FDY_OK, buffer->id);
}

static void fake_buffer_release(fdy_backend *b, fdy_backend_buffer *buffer) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "buffer_release", buffer ? buffer->bytes : 0,
                          buffer ? buffer->id : -1);
  if (!buffer) {
    return;
  }
  if (!buffer->held) {
    f->stats.violations++;
    call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
    return;
  }
  buffer->held = false;
  if (buffer->work_refs == 0) {
    buffer_free_memory(f, buffer, false);
  }
}

static fdy_status fake_host_register(fdy_backend *b, const void *ptr,
                                     uint64_t bytes, fdy_backend_host **out,
                                     fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "host_register", bytes, -1);
  if (!ptr || bytes == 0 || !out) {
    return fail_violation(f, n, "host_register",
                          "NULL memory, zero bytes or NULL output", err);
  }
  if (injected(f, n)) {
    return fail_injected(f, n, "host_register", err);
  }
  fdy_backend_host *host = calloc(1, sizeof(*host));
  if (!host || !ptr_array_push(&f->hosts, host)) {
    free(host);
    fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "fake backend: out of memory");
    return call_end(f, n, FDY_ERR_OUT_OF_MEMORY, -1);
  }
  host->id = f->next_id++;
  host->alive = true;
  f->stats.live_hosts++;
  *out = host;
  return call_end(f, n, FDY_OK, host->id);
}

static void fake_host_unregister(fdy_backend *b, fdy_backend_host *host) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "host_unregister", 0, host ? host->id : -1);
  if (!host) {
    return;
  }
  if (!host->alive) {
    f->stats.violations++;
    call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
    return;
  }
  host->alive = false;
  f->stats.live_hosts--;
}

static fdy_status fake_stream_create(fdy_backend *b, fdy_backend_stream **out,
                                     fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_create", 0, -1);
  if (!out) {
    return fail_violation(f, n, "stream_create", "NULL output", err);
  }
  if (injected(f, n)) {
    return fail_injected(f, n, "stream_create", err);
  }
  fdy_backend_stream *stream = calloc(1, sizeof(*stream));
  if (!stream || !ptr_array_push(&f->streams, stream)) {
    free(stream);
    fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "fake backend: out of memory");
    return call_end(f, n, FDY_ERR_OUT_OF_MEMORY, -1);
  }
  stream->id = f->next_id++;
  stream->alive = true;
  f->stats.live_streams++;
  *out = stream;
  return call_end(f, n, FDY_OK, stream->id);
}

static void fake_stream_destroy(fdy_backend *b, fdy_backend_stream *stream) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_destroy", 0, stream ? stream->id : -1);
  if (!stream) {
    return;
  }
  if (!stream->alive || stream->pending > 0) {
    f->stats.violations++;
    call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
    if (!stream->alive) {
      return;
    }
  }
  stream->alive = false;
  f->stats.live_streams--;
}

static fdy_status fake_copy_to_device(fdy_backend *b,
                                      fdy_backend_stream *stream,
                                      fdy_backend_buffer *dst,
                                      uint64_t dst_offset, const void *src,
                                      uint64_t bytes, fdy_backend_event **out,
                                      fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "copy_to_device", bytes, -1);
  uint64_t end;
  if (!stream || !stream->alive || !dst || !dst->held || !src || !out ||
      bytes == 0 || __builtin_add_overflow(dst_offset, bytes, &end) ||
      end > dst->bytes) {
    return fail_violation(f, n, "copy_to_device",
                          "bad stream, buffer, source or range", err);
  }
  bool fail = injected(f, n);
  if (fail && f->fail_mode == FDY_FAKE_FAIL_BEFORE_SUBMIT) {
    return fail_injected(f, n, "copy_to_device", err);
  }
  fake_work w = {.kind = FAKE_WORK_COPY,
                 .stream = stream,
                 .buffer_count = 1,
                 .buffers = {dst},
                 .bytes = {bytes},
                 .dst_offset = dst_offset,
                 .src = src};
  fdy_status st = submit(f, &w, !fail, out, err);
  if (st != FDY_OK) {
    return call_end(f, n, st, -1);
  }
  if (fail) {
    fail_injected(f, n, "copy_to_device", err);
    return call_end(f, n, FDY_ERR_BACKEND, w.event->id);
  }
  return call_end(f, n, FDY_OK, w.event->id);
}

static fdy_status fake_launch(fdy_backend *b, fdy_backend_stream *stream,
                              const fdy_launch_desc *desc,
                              fdy_backend_event **out, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t total = 0;
  bool ok = stream && stream->alive && desc && desc->kind && out &&
            desc->weight_count <= FDY_MAX_LAUNCH_WEIGHTS;
  for (uint32_t i = 0; ok && i < desc->weight_count; i++) {
    const fdy_launch_weight *wt = &desc->weights[i];
    ok = wt->buffer && wt->buffer->held && wt->bytes <= wt->buffer->bytes;
    total += ok ? wt->bytes : 0;
  }
  uint64_t n = call_begin(f, "launch", total, -1);
  if (!ok) {
    return fail_violation(f, n, "launch", "bad stream, descriptor or weight",
                          err);
  }
  if (f->unsupported_kind && strcmp(desc->kind, f->unsupported_kind) == 0) {
    fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                  "fake backend: op kind %s is not supported", desc->kind);
    return call_end(f, n, FDY_ERR_UNSUPPORTED, -1);
  }
  bool fail = injected(f, n);
  if (fail && f->fail_mode == FDY_FAKE_FAIL_BEFORE_SUBMIT) {
    return fail_injected(f, n, "launch", err);
  }
  fake_work w = {.kind = FAKE_WORK_LAUNCH,
                 .stream = stream,
                 .buffer_count = desc->weight_count,
                 .checksum = strcmp(desc->kind, FDY_OP_SYNTHETIC_CHECKSUM) == 0,
                 .result = desc->result};
  for (uint32_t i = 0; i < desc->weight_count; i++) {
    w.buffers[i] = desc->weights[i].buffer;
    w.bytes[i] = desc->weights[i].bytes;
  }
  fdy_status st = submit(f, &w, !fail, out, err);
  if (st != FDY_OK) {
    return call_end(f, n, st, -1);
  }
  if (fail) {
    fail_injected(f, n, "launch", err);
    return call_end(f, n, FDY_ERR_BACKEND, w.event->id);
  }
  return call_end(f, n, FDY_OK, w.event->id);
}

static fdy_status fake_stream_wait(fdy_backend *b, fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_wait", 0, event ? event->id : -1);
  if (!stream || !stream->alive || !event || !event->held) {
    return fail_violation(f, n, "stream_wait", "bad stream or event", err);
  }
  /* One FIFO queue for all work already orders the event first. */
  if (injected(f, n)) {
    return fail_injected(f, n, "stream_wait", err);
  }
  return call_end(f, n, FDY_OK, -1);
}

static fdy_status fake_host_wait(fdy_backend *b, fdy_backend_event *event,
                                 fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "host_wait", 0, event ? event->id : -1);
  if (!event || !event->held) {
    return fail_violation(f, n, "host_wait", "bad event", err);
  }
  bool fail = injected(f, n);
  if (fail && f->fail_mode == FDY_FAKE_FAIL_BEFORE_SUBMIT) {
    return fail_injected(f, n, "host_wait", err);
  }
  complete_through(f, event->work_seq);
  if (fail) {
    return fail_injected(f, n, "host_wait", err);
  }
  return call_end(f, n, FDY_OK, -1);
}

static fdy_status fake_event_times(fdy_backend *b, fdy_backend_event *event,
                                   fdy_event_times *out, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_times", 0, event ? event->id : -1);
  if (!event || !event->held || !out) {
    return fail_violation(f, n, "event_times", "bad event or NULL output", err);
  }
  if (injected(f, n)) {
    return fail_injected(f, n, "event_times", err);
  }
  if (!event->complete) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "fake backend: event_times of an incomplete event");
    return call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
  }
  *out = event->times;
  return call_end(f, n, FDY_OK, -1);
}

static void fake_event_release(fdy_backend *b, fdy_backend_event *event) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_release", 0, event ? event->id : -1);
  if (!event) {
    return;
  }
  if (!event->held) {
    f->stats.violations++;
    call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
    return;
  }
  event->held = false;
  event_drop(f, event);
}

static fdy_status fake_drain(fdy_backend *b, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "drain", 0, -1);
  bool fail = injected(f, n);
  if (fail && f->fail_mode == FDY_FAKE_FAIL_BEFORE_SUBMIT) {
    return fail_injected(f, n, "drain", err);
  }
  complete_all(f);
  f->stats.drains++;
  if (fail) {
    return fail_injected(f, n, "drain", err);
  }
  if (f->fail_drain) {
    fdy_error_set(err, FDY_ERR_BACKEND, "fake backend: drain told to fail");
    return call_end(f, n, FDY_ERR_BACKEND, -1);
  }
  return call_end(f, n, FDY_OK, -1);
}

static void fake_destroy(fdy_backend *b) {
  fake_backend *f = fake_of(b);
  complete_all(f);
  for (size_t i = 0; i < f->buffers.count; i++) {
    fdy_backend_buffer *buffer = f->buffers.items[i];
    free(buffer->data);
  }
  ptr_array_free(&f->buffers);
  ptr_array_free(&f->events);
  ptr_array_free(&f->streams);
  ptr_array_free(&f->hosts);
  free(f->work);
  free(f->log);
  free(f->unsupported_kind);
  free(f);
}

static const fdy_backend_ops fake_ops = {
    .name = "fake",
    .capabilities = fake_capabilities,
    .supports_op = fake_supports_op,
    .buffer_alloc = fake_buffer_alloc,
    .buffer_release = fake_buffer_release,
    .host_register = fake_host_register,
    .host_unregister = fake_host_unregister,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .copy_to_device = fake_copy_to_device,
    .launch = fake_launch,
    .stream_wait = fake_stream_wait,
    .host_wait = fake_host_wait,
    .event_times = fake_event_times,
    .event_release = fake_event_release,
    .drain = fake_drain,
    .destroy = fake_destroy,
};

/* ---- public
 * ------------------------------------------------------------------ */

fdy_status fdy_fake_backend_create(const fdy_fake_options *options,
                                   fdy_backend **out, fdy_error *err) {
  fdy_fake_options defaults = {0};
  const fdy_fake_options *o = options ? options : &defaults;
  if (!out) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fake backend: NULL output");
  }
  *out = NULL;
  if (o->caps.alignment != 0 && !fdy_is_power_of_two(o->caps.alignment)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fake backend: alignment %llu is not a power of two",
                         (unsigned long long)o->caps.alignment);
  }
  if (o->fail_mode != FDY_FAKE_FAIL_BEFORE_SUBMIT &&
      o->fail_mode != FDY_FAKE_FAIL_AFTER_SUBMIT) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fake backend: unknown fail mode %d",
                         (int)o->fail_mode);
  }
  fake_backend *f = calloc(1, sizeof(*f));
  if (!f) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "fake backend: out of memory");
  }
  if (o->unsupported_kind) {
    f->unsupported_kind = strdup(o->unsupported_kind);
    if (!f->unsupported_kind) {
      free(f);
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "fake backend: out of memory");
    }
  }
  f->base.ops = &fake_ops;
  f->base.self = f;
  f->caps = o->caps;
  f->caps.name[sizeof(f->caps.name) - 1] = '\0';
  if (f->caps.name[0] == '\0') {
    strcpy(f->caps.name, "fake");
  }
  if (f->caps.total_memory == 0) {
    f->caps.total_memory = 16 * FDY_GIB;
  }
  if (f->caps.max_allocation == 0) {
    f->caps.max_allocation = f->caps.total_memory;
  }
  if (f->caps.alignment == 0) {
    f->caps.alignment = 256;
  }
  f->fail_at_call = o->fail_at_call;
  f->fail_mode = o->fail_mode;
  f->store_data = o->store_data;
  f->fail_drain = o->fail_drain;
  *out = &f->base;
  return FDY_OK;
}

size_t fdy_fake_call_count(const fdy_backend *b) {
  return fake_of_const(b)->log_count;
}

const fdy_fake_call *fdy_fake_call_at(const fdy_backend *b, size_t index) {
  const fake_backend *f = fake_of_const(b);
  return index < f->log_count ? &f->log[index] : NULL;
}

fdy_fake_stats fdy_fake_get_stats(const fdy_backend *b) {
  return fake_of_const(b)->stats;
}

size_t fdy_fake_count_calls(const fdy_backend *b, const char *op) {
  const fake_backend *f = fake_of_const(b);
  size_t count = 0;
  for (size_t i = 0; op && i < f->log_count; i++) {
    count += strcmp(f->log[i].op, op) == 0;
  }
  return count;
}
