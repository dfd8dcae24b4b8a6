/* The fake backend (include/foundry/fake.h): a test double of the backend
 * contract. Every call is logged. Each stream keeps its own FIFO queue of
 * pending items: copies, launches, and the waits stream_wait inserts (a wait
 * names the recording it waits for: a stream and a sequence number). Work is
 * never run at submission: host_wait completes a recording's stream up to
 * the recorded item, completing first, at each wait it meets, the stream it
 * waits for; drain completes every queue. Sequence numbers are global and
 * increasing, so a wait always names earlier items and this terminates.
 *
 * Handles are never freed before the backend is destroyed: a released one
 * stays as a tombstone, so a caller that uses it is caught and counted as a
 * violation instead of touching freed memory. Buffer memory (store_data) is
 * freed as soon as no caller reference and no pending work holds it; a free
 * postponed by pending work is counted as deferred.
 *
 * Copies move bytes with fdy_host_copy: one from or to caller memory that
 * cannot be read or written (a truncated file mapping) keeps its failure,
 * which every host_wait returns until a drain reports (unless a host_wait
 * did) and clears it.
 *
 * Graphs: a recording is a list of the calls made while it is open; a
 * replay joins the graph's streams (each waits for the others' tails),
 * submits each call again through the same functions the entries use, and
 * joins them again. */
#include "foundry/fake.h"

#include "foundry/checksum.h"
#include "foundry/host_copy.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(FDY_OP_KIND_COUNT <= 32,
               "unsupported_kinds is a 32-bit mask of op kinds");

#define FAKE_POISON    0xA5
#define FAKE_MAX_VIEWS (FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS + 1)
#define ID_OF(handle)  ((handle) != NULL ? (handle)->id : -1)

struct fdy_backend_buffer {
  int64_t id;
  uint64_t bytes;
  unsigned char *data; /* store_data only */
  bool held;           /* the caller's reference is not released yet */
  bool alive;          /* memory still held */
  uint32_t work_refs;  /* views of pending work items using it */
};

typedef enum fake_work_kind {
  FAKE_COPY_TO_DEVICE,
  FAKE_COPY_TO_HOST,
  FAKE_LAUNCH,
  FAKE_WAIT,
} fake_work_kind;

typedef struct fake_work {
  fake_work_kind kind;
  uint64_t seq;
  /* copies */
  fdy_backend_buffer *buffer;
  uint64_t offset;
  const void *src; /* to device */
  void *dst;       /* to host */
  uint64_t bytes;
  /* launch: a copy of the op, and the bytes of its first input */
  fdy_op op;
  uint64_t data_bytes;
  /* wait: the recording waited for */
  struct fdy_backend_stream *wait_stream;
  uint64_t wait_seq;
} fake_work;

struct fdy_backend_stream {
  int64_t id;
  bool alive;
  uint64_t last_seq;     /* of the last item submitted to it, 0 = none */
  uint64_t pending_work; /* copies and launches among its pending items */
  fake_work *items;      /* pending items are items[head .. count) */
  size_t head, count, cap;
};

struct fdy_backend_event {
  int64_t id;
  bool alive;
  const fdy_backend_graph *recorded_in; /* the recording it was last
                                           recorded in, if any */
  bool recorded;
  bool complete; /* the current recording was observed complete */
  fdy_backend_stream *stream;
  uint64_t seq; /* the recording: stream's items up to seq */
  int64_t time_ns;
};

struct fdy_backend_host {
  int64_t id;
  bool alive;
  const void *ptr;
  uint64_t bytes;
};

/* A call appended to a recording. */
typedef enum fake_call_kind {
  REC_COPY_TO_DEVICE,
  REC_COPY_TO_HOST,
  REC_LAUNCH,
  REC_EVENT_RECORD,
  REC_STREAM_WAIT,
} fake_call_kind;

typedef struct fake_recorded {
  fake_call_kind kind;
  fdy_backend_stream *stream;
  fdy_backend_buffer *buffer; /* copies */
  uint64_t offset, bytes;
  const void *src;
  void *dst;
  fdy_op op; /* launch */
  uint64_t data_bytes;
  fdy_backend_event *event; /* record, wait */
} fake_recorded;

struct fdy_backend_graph {
  int64_t id;
  bool alive;   /* made by graph_end, not destroyed */
  bool refused; /* a call could not be recorded */
  fdy_backend_stream **streams;
  uint32_t stream_count;
  fake_recorded *calls;
  size_t count, cap;
};

typedef struct ptr_array {
  void **items;
  size_t count, cap;
} ptr_array;

typedef struct fake_backend {
  fdy_backend base;
  fdy_backend_ops ops; /* fake_ops, less the graph entries unless
                          fdy_fake_options.graphs */
  fdy_device_caps caps;
  bool store_data;
  uint32_t unsupported_kinds;
  uint64_t workspace_bytes;
  fdy_fake_call *log;
  size_t log_count, log_cap;
  int64_t next_id;
  uint64_t next_seq;
  ptr_array buffers, events, streams, hosts, graphs;
  fdy_backend_graph *recording; /* open between graph_begin and graph_end */
  fdy_fake_stats stats;
  fdy_error failure;     /* first failed copy since the last drain */
  bool failure_reported; /* a host_wait returned it */
} fake_backend;

static void fake_destroy(fdy_backend *b);

/* A fake backend is recognized by its destroy entry. */
static fake_backend *fake_of(fdy_backend *b) {
  assert(b && b->ops->destroy == fake_destroy);
  return (fake_backend *)b;
}

static const fake_backend *fake_of_const(const fdy_backend *b) {
  assert(b && b->ops->destroy == fake_destroy);
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

/* A zeroed handle of `size` bytes on list, or NULL when out of memory. */
static void *handle_new(ptr_array *list, size_t size) {
  void *handle = calloc(1, size);
  if (handle && !ptr_array_push(list, handle)) {
    free(handle);
    return NULL;
  }
  return handle;
}

/* ---- the call log -------------------------------------------------------- */

/* Logs the start of a call and returns its number. A log entry that cannot
 * be stored (host out of memory) is dropped; the call still counts. */
static uint64_t call_begin(fake_backend *f, const char *op, uint64_t bytes,
                           int64_t handle, int64_t stream) {
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
                                           .handle = handle,
                                           .stream = stream,
                                           .op_kind = -1,
                                           .recorded = f->recording != NULL};
  return number;
}

static fdy_fake_call *call_entry(fake_backend *f, uint64_t number) {
  if (f->log_count > 0 && f->log[f->log_count - 1].number == number) {
    return &f->log[f->log_count - 1];
  }
  return NULL;
}

/* Records the outcome of call `number` (and the handle it created, when
 * handle >= 0) and returns status. */
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

static void call_set_kind(fake_backend *f, uint64_t number, fdy_op_kind kind) {
  fdy_fake_call *entry = call_entry(f, number);
  if (entry) {
    entry->op_kind = (int)kind;
  }
}

/* Ends call `number` of entry op as failed with kind: err gets the
 * printf-formatted message (the whole of it) and backend_op = op. */
static fdy_status fail_call(fake_backend *f, uint64_t number, fdy_error *err,
                            fdy_status kind, const char *op, const char *fmt,
                            ...) __attribute__((format(printf, 6, 7)));

static fdy_status fail_call(fake_backend *f, uint64_t number, fdy_error *err,
                            fdy_status kind, const char *op, const char *fmt,
                            ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(err, kind, NULL, 0, 0, fmt, ap);
  va_end(ap);
  if (err) {
    strcpy(err->backend_op, op);
  }
  return call_end(f, number, kind, -1);
}

static fdy_status fail_violation(fake_backend *f, uint64_t number,
                                 const char *op, const char *what,
                                 fdy_error *err) {
  f->stats.violations++;
  return fail_call(f, number, err, FDY_ERR_INVALID_ARGUMENT, op,
                   "fake backend: %s: %s", op, what);
}

/* A violation in an entry that returns no status. */
static void note_violation(fake_backend *f, uint64_t number) {
  f->stats.violations++;
  call_end(f, number, FDY_ERR_INVALID_ARGUMENT, -1);
}

static fdy_status fail_out_of_memory(fake_backend *f, uint64_t number,
                                     const char *op, fdy_error *err) {
  fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "fake backend: %s: out of memory",
                op);
  return call_end(f, number, FDY_ERR_OUT_OF_MEMORY, -1);
}

/* ---- completion ---------------------------------------------------------- */

static bool buffer_usable(const fdy_backend_buffer *buffer) {
  return buffer && buffer->held;
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

static void buffer_unref_work(fake_backend *f, fdy_backend_buffer *buffer) {
  buffer->work_refs--;
  if (buffer->alive && !buffer->held && buffer->work_refs == 0) {
    buffer_free_memory(f, buffer, true);
  }
}

/* The views of op that name a buffer: inputs, outputs, then the workspace
 * when it has one. Counts are within bounds (checked by the caller). */
static size_t op_views(const fdy_op *op, const fdy_tensor_view **views) {
  size_t n = 0;
  for (uint32_t i = 0; i < op->input_count; i++) {
    views[n++] = &op->inputs[i];
  }
  for (uint32_t i = 0; i < op->output_count; i++) {
    views[n++] = &op->outputs[i];
  }
  if (op->workspace.buffer) {
    views[n++] = &op->workspace;
  }
  return n;
}

/* Writes fdy_checksum(data) + prev * FDY_CHAIN_PRIME into the output. */
static void run_checksum(const fake_work *w) {
  const fdy_op *op = &w->op;
  const fdy_tensor_view *data = &op->inputs[0];
  uint64_t value =
      fdy_checksum(data->buffer->data + data->offset, w->data_bytes);
  if (op->input_count > 1) {
    uint64_t prev;
    memcpy(&prev, op->inputs[1].buffer->data + op->inputs[1].offset,
           sizeof(prev));
    value += prev * FDY_CHAIN_PRIME;
  }
  memcpy(op->outputs[0].buffer->data + op->outputs[0].offset, &value,
         sizeof(value));
}

/* Runs a copy or launch item and drops its references. */
static void run_work(fake_backend *f, fdy_backend_stream *s, fake_work *w) {
  if (w->kind == FAKE_LAUNCH) {
    if (f->store_data && w->op.kind == FDY_OP_CHECKSUM) {
      run_checksum(w);
    }
    const fdy_tensor_view *views[FAKE_MAX_VIEWS];
    size_t n = op_views(&w->op, views);
    for (size_t i = 0; i < n; i++) {
      buffer_unref_work(f, views[i]->buffer);
    }
  } else {
    fdy_error error;
    fdy_status st = FDY_OK;
    bool to_device = w->kind == FAKE_COPY_TO_DEVICE;
    if (f->store_data && to_device) {
      st = fdy_host_copy(w->buffer->data + w->offset, w->src, w->bytes, &error);
    } else if (f->store_data) {
      st = fdy_host_copy(w->dst, w->buffer->data + w->offset, w->bytes, &error);
    }
    if (st != FDY_OK && f->failure.kind == FDY_OK) {
      const char *op = to_device ? "copy_to_device" : "copy_to_host";
      fdy_error_prefix(&error, "fake backend: %s", op);
      snprintf(error.backend_op, sizeof error.backend_op, "%s", op);
      f->failure = error;
    }
    buffer_unref_work(f, w->buffer);
  }
  s->pending_work--;
  f->stats.pending_work--;
}

/* Completes the items of s with a sequence number up to seq, in order; a
 * wait first completes what it waits for. */
static void complete_through(fake_backend *f, fdy_backend_stream *s,
                             uint64_t seq) {
  while (s->head < s->count && s->items[s->head].seq <= seq) {
    fake_work *w = &s->items[s->head];
    if (w->kind == FAKE_WAIT) {
      complete_through(f, w->wait_stream, w->wait_seq);
    } else {
      run_work(f, s, w);
    }
    s->head++;
  }
  if (s->head == s->count) {
    s->head = s->count = 0;
  }
}

static void complete_all(fake_backend *f) {
  for (size_t i = 0; i < f->streams.count; i++) {
    complete_through(f, f->streams.items[i], UINT64_MAX);
  }
}

/* True when nothing up to the event's recording is pending. */
static bool recording_done(const fdy_backend_event *e) {
  const fdy_backend_stream *s = e->stream;
  return s->head == s->count || s->items[s->head].seq > e->seq;
}

/* Marks recordings that completed, with the time they were observed. */
static void refresh_events(fake_backend *f) {
  int64_t now = fdy_now_ns();
  for (size_t i = 0; i < f->events.count; i++) {
    fdy_backend_event *e = f->events.items[i];
    if (e->alive && e->recorded && !e->complete && recording_done(e)) {
      e->complete = true;
      e->time_ns = now;
    }
  }
}

/* Appends w to s (w->seq assigned here). */
static bool stream_push(fake_backend *f, fdy_backend_stream *s,
                        const fake_work *w) {
  if (s->count == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    fake_work *items = realloc(s->items, cap * sizeof(*items));
    if (!items) {
      return false;
    }
    s->items = items;
    s->cap = cap;
  }
  s->items[s->count] = *w;
  s->items[s->count].seq = ++f->next_seq;
  s->last_seq = s->items[s->count].seq;
  s->count++;
  return true;
}

/* Queues a copy or launch on s and takes its buffer references. */
static bool submit(fake_backend *f, fdy_backend_stream *s, const fake_work *w) {
  if (!stream_push(f, s, w)) {
    return false;
  }
  if (w->kind == FAKE_LAUNCH) {
    const fdy_tensor_view *views[FAKE_MAX_VIEWS];
    size_t n = op_views(&w->op, views);
    for (size_t i = 0; i < n; i++) {
      views[i]->buffer->work_refs++;
    }
  } else {
    w->buffer->work_refs++;
  }
  s->pending_work++;
  f->stats.pending_work++;
  return true;
}

/* ---- submission, shared by the entries and graph replays ----------------- */

static bool issue_copy(fake_backend *f, const fake_recorded *c) {
  bool to_device = c->kind == REC_COPY_TO_DEVICE;
  fake_work w = {.kind = to_device ? FAKE_COPY_TO_DEVICE : FAKE_COPY_TO_HOST,
                 .buffer = c->buffer,
                 .offset = c->offset,
                 .src = c->src,
                 .dst = c->dst,
                 .bytes = c->bytes};
  if (!submit(f, c->stream, &w)) {
    return false;
  }
  if (to_device) {
    f->stats.copies_to_device++;
    f->stats.bytes_to_device += c->bytes;
  } else {
    f->stats.copies_to_host++;
    f->stats.bytes_to_host += c->bytes;
  }
  return true;
}

static bool issue_launch(fake_backend *f, const fake_recorded *c) {
  fake_work w = {.kind = FAKE_LAUNCH, .op = c->op, .data_bytes = c->data_bytes};
  if (!submit(f, c->stream, &w)) {
    return false;
  }
  f->stats.launches++;
  f->stats.launches_by_kind[c->op.kind]++;
  return true;
}

static void issue_event_record(fake_backend *f, fdy_backend_stream *stream,
                               fdy_backend_event *event) {
  event->recorded = true;
  event->stream = stream;
  event->seq = stream->last_seq;
  event->complete = recording_done(event);
  event->time_ns = event->complete ? fdy_now_ns() : 0;
  f->stats.event_records++;
}

/* Queues on stream a wait for the items of `other` up to seq. Nothing to
 * wait for when they completed or are this stream's own (its queue is in
 * order already). */
static bool wait_for(fake_backend *f, fdy_backend_stream *stream,
                     fdy_backend_stream *other, uint64_t seq) {
  if (other == stream || other->head == other->count ||
      other->items[other->head].seq > seq) {
    return true;
  }
  fake_work w = {.kind = FAKE_WAIT, .wait_stream = other, .wait_seq = seq};
  return stream_push(f, stream, &w);
}

static bool issue_stream_wait(fake_backend *f, fdy_backend_stream *stream,
                              fdy_backend_event *event) {
  if (!wait_for(f, stream, event->stream, event->seq)) {
    return false;
  }
  f->stats.stream_waits++;
  return true;
}

/* True when [ptr, ptr + bytes) lies inside one live host registration. */
static bool host_registered(const fake_backend *f, const void *ptr,
                            uint64_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (size_t i = 0; i < f->hosts.count; i++) {
    const fdy_backend_host *h = f->hosts.items[i];
    uintptr_t h0 = (uintptr_t)h->ptr;
    if (h->alive && p >= h0 && p - h0 <= h->bytes &&
        bytes <= h->bytes - (p - h0)) {
      return true;
    }
  }
  return false;
}

/* Appends a checked call to the open recording (fake.h, graphs). */
static fdy_status record_call(fake_backend *f, uint64_t n, const char *op,
                              const fake_recorded *c, fdy_error *err) {
  fdy_backend_graph *g = f->recording;
  bool member = false;
  for (uint32_t i = 0; i < g->stream_count; i++) {
    member = member || g->streams[i] == c->stream;
  }
  if (!member) {
    return fail_violation(f, n, op, "a stream outside the recording", err);
  }
  if ((c->kind == REC_COPY_TO_DEVICE || c->kind == REC_COPY_TO_HOST) &&
      !host_registered(f, c->kind == REC_COPY_TO_DEVICE ? c->src : c->dst,
                       c->bytes)) {
    g->refused = true;
    return fail_call(f, n, err, FDY_ERR_UNSUPPORTED, op,
                     "fake backend: %s: a copy from or to host memory that "
                     "is not registered cannot be recorded",
                     op);
  }
  if (g->count == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 16;
    fake_recorded *calls = realloc(g->calls, cap * sizeof(*calls));
    if (!calls) {
      g->refused = true;
      return fail_out_of_memory(f, n, op, err);
    }
    g->calls = calls;
    g->cap = cap;
  }
  g->calls[g->count++] = *c;
  f->stats.recorded_calls++;
  return call_end(f, n, FDY_OK, -1);
}

/* ---- entries ------------------------------------------------------------- */

static fdy_status fake_capabilities(fdy_backend *b, fdy_device_caps *out,
                                    fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "capabilities", 0, -1, -1);
  if (!out) {
    return fail_violation(f, n, "capabilities", "NULL output", err);
  }
  *out = f->caps;
  return call_end(f, n, FDY_OK, -1);
}

static bool kind_supported(const fake_backend *f, fdy_op_kind kind) {
  return (unsigned)kind < FDY_OP_KIND_COUNT &&
         (f->unsupported_kinds & FDY_FAKE_KIND_BIT(kind)) == 0;
}

static bool fake_supports_op(fdy_backend *b, const fdy_op *op) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "supports_op", 0, -1, -1);
  if (!op) {
    note_violation(f, n);
    return false;
  }
  call_set_kind(f, n, op->kind);
  bool ok = kind_supported(f, op->kind);
  call_end(f, n, ok ? FDY_OK : FDY_ERR_UNSUPPORTED, -1);
  return ok;
}

static uint64_t fake_workspace_bytes(fdy_backend *b, const fdy_op *op) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "workspace_bytes", 0, -1, -1);
  if (!op) {
    note_violation(f, n);
    return 0;
  }
  call_set_kind(f, n, op->kind);
  return f->workspace_bytes;
}

static fdy_status fake_buffer_alloc(fdy_backend *b, uint64_t bytes,
                                    fdy_backend_buffer **out, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "buffer_alloc", bytes, -1, -1);
  if (out) {
    *out = NULL;
  }
  if (!out || bytes == 0) {
    return fail_violation(f, n, "buffer_alloc", "zero bytes or NULL output",
                          err);
  }
  uint64_t total;
  if (bytes > f->caps.max_allocation ||
      __builtin_add_overflow(f->stats.buffer_bytes, bytes, &total) ||
      total > f->caps.total_memory) {
    fdy_status st = fail_call(
        f, n, err, FDY_ERR_BACKEND, "buffer_alloc",
        "fake backend: cannot allocate %llu bytes (%llu in use of %llu, at "
        "most %llu at once)",
        (unsigned long long)bytes, (unsigned long long)f->stats.buffer_bytes,
        (unsigned long long)f->caps.total_memory,
        (unsigned long long)f->caps.max_allocation);
    if (err) {
      err->expected = f->caps.total_memory;
      err->actual = bytes;
    }
    return st;
  }
  fdy_backend_buffer *buffer = calloc(1, sizeof(*buffer));
  unsigned char *data = f->store_data ? malloc(bytes) : NULL;
  if (!buffer || (f->store_data && !data) ||
      !ptr_array_push(&f->buffers, buffer)) {
    free(buffer);
    free(data);
    return fail_out_of_memory(f, n, "buffer_alloc", err);
  }
  if (data) {
    memset(data, FAKE_POISON, bytes);
  }
  buffer->id = f->next_id++;
  buffer->bytes = bytes;
  buffer->data = data;
  buffer->held = true;
  buffer->alive = true;
  f->stats.live_buffers++;
  f->stats.buffer_allocs++;
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
                          ID_OF(buffer), -1);
  if (!buffer) {
    return;
  }
  if (!buffer->held) {
    note_violation(f, n);
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
  uint64_t n = call_begin(f, "host_register", bytes, -1, -1);
  if (out) {
    *out = NULL;
  }
  if (!ptr || bytes == 0 || !out) {
    return fail_violation(f, n, "host_register",
                          "NULL memory, zero bytes or NULL output", err);
  }
  fdy_backend_host *host = handle_new(&f->hosts, sizeof(*host));
  if (!host) {
    return fail_out_of_memory(f, n, "host_register", err);
  }
  host->id = f->next_id++;
  host->alive = true;
  host->ptr = ptr;
  host->bytes = bytes;
  f->stats.live_hosts++;
  f->stats.host_registrations++;
  *out = host;
  return call_end(f, n, FDY_OK, host->id);
}

static void fake_host_unregister(fdy_backend *b, fdy_backend_host *host) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "host_unregister", 0, ID_OF(host), -1);
  if (!host) {
    return;
  }
  if (!host->alive) {
    note_violation(f, n);
    return;
  }
  host->alive = false;
  f->stats.live_hosts--;
}

static fdy_status fake_stream_create(fdy_backend *b, fdy_backend_stream **out,
                                     fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_create", 0, -1, -1);
  if (!out) {
    return fail_violation(f, n, "stream_create", "NULL output", err);
  }
  *out = NULL;
  fdy_backend_stream *stream = handle_new(&f->streams, sizeof(*stream));
  if (!stream) {
    return fail_out_of_memory(f, n, "stream_create", err);
  }
  stream->id = f->next_id++;
  stream->alive = true;
  f->stats.live_streams++;
  f->stats.streams_created++;
  *out = stream;
  return call_end(f, n, FDY_OK, stream->id);
}

/* A stream destroyed with pending work is a violation; the work still
 * completes on a later host_wait or drain. */
static void fake_stream_destroy(fdy_backend *b, fdy_backend_stream *stream) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_destroy", 0, ID_OF(stream), -1);
  if (!stream) {
    return;
  }
  if (!stream->alive || stream->pending_work > 0) {
    note_violation(f, n);
    if (!stream->alive) {
      return;
    }
  }
  stream->alive = false;
  f->stats.live_streams--;
}

static fdy_status fake_event_create(fdy_backend *b, fdy_backend_event **out,
                                    fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_create", 0, -1, -1);
  if (!out) {
    return fail_violation(f, n, "event_create", "NULL output", err);
  }
  *out = NULL;
  fdy_backend_event *event = handle_new(&f->events, sizeof(*event));
  if (!event) {
    return fail_out_of_memory(f, n, "event_create", err);
  }
  event->id = f->next_id++;
  event->alive = true;
  f->stats.live_events++;
  f->stats.events_created++;
  *out = event;
  return call_end(f, n, FDY_OK, event->id);
}

/* An event destroyed while its recording is pending is a violation. */
static void fake_event_destroy(fdy_backend *b, fdy_backend_event *event) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_destroy", 0, ID_OF(event), -1);
  if (!event) {
    return;
  }
  if (!event->alive) {
    note_violation(f, n);
    return;
  }
  if (event->recorded && !recording_done(event)) {
    note_violation(f, n);
  }
  event->alive = false;
  f->stats.live_events--;
}

static fdy_status fake_event_record(fdy_backend *b, fdy_backend_stream *stream,
                                    fdy_backend_event *event, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_record", 0, ID_OF(event), ID_OF(stream));
  if (!stream || !stream->alive || !event || !event->alive) {
    return fail_violation(f, n, "event_record", "bad stream or event", err);
  }
  if (f->recording) {
    event->recorded_in = f->recording;
    return record_call(f, n, "event_record",
                       &(fake_recorded){.kind = REC_EVENT_RECORD,
                                        .stream = stream,
                                        .event = event},
                       err);
  }
  issue_event_record(f, stream, event);
  return call_end(f, n, FDY_OK, -1);
}

/* Records c, a copy or launch that passed its checks, into the open
 * recording, or submits it; ends call n of entry op. */
static fdy_status record_or_issue(fake_backend *f, uint64_t n, const char *op,
                                  const fake_recorded *c, fdy_error *err) {
  if (f->recording) {
    return record_call(f, n, op, c, err);
  }
  bool issued = c->kind == REC_LAUNCH ? issue_launch(f, c) : issue_copy(f, c);
  if (!issued) {
    return fail_out_of_memory(f, n, op, err);
  }
  return call_end(f, n, FDY_OK, -1);
}

/* A copy between caller memory (src to the device, dst to the host) and
 * [offset, offset + bytes) of buffer: kind REC_COPY_TO_DEVICE or
 * REC_COPY_TO_HOST. */
static fdy_status fake_copy(fdy_backend *b, fake_call_kind kind,
                            fdy_backend_stream *stream,
                            fdy_backend_buffer *buffer, uint64_t offset,
                            const void *src, void *dst, uint64_t bytes,
                            fdy_error *err) {
  fake_backend *f = fake_of(b);
  bool to_device = kind == REC_COPY_TO_DEVICE;
  const char *op = to_device ? "copy_to_device" : "copy_to_host";
  uint64_t n = call_begin(f, op, bytes, ID_OF(buffer), ID_OF(stream));
  const void *host = to_device ? src : dst;
  uint64_t end;
  if (!stream || !stream->alive || !buffer_usable(buffer) || !host ||
      bytes == 0 || __builtin_add_overflow(offset, bytes, &end) ||
      end > buffer->bytes) {
    return fail_violation(f, n, op, "bad stream, buffer, host memory or range",
                          err);
  }
  fake_recorded c = {.kind = kind,
                     .stream = stream,
                     .buffer = buffer,
                     .offset = offset,
                     .src = src,
                     .dst = dst,
                     .bytes = bytes};
  return record_or_issue(f, n, op, &c, err);
}

static fdy_status fake_copy_to_device(fdy_backend *b,
                                      fdy_backend_stream *stream,
                                      fdy_backend_buffer *dst,
                                      uint64_t dst_offset, const void *src,
                                      uint64_t bytes, fdy_error *err) {
  return fake_copy(b, REC_COPY_TO_DEVICE, stream, dst, dst_offset, src, NULL,
                   bytes, err);
}

static fdy_status fake_copy_to_host(fdy_backend *b, fdy_backend_stream *stream,
                                    void *dst, fdy_backend_buffer *src,
                                    uint64_t src_offset, uint64_t bytes,
                                    fdy_error *err) {
  return fake_copy(b, REC_COPY_TO_HOST, stream, src, src_offset, NULL, dst,
                   bytes, err);
}

/* Bytes of a view when it lies in a usable buffer at an aligned offset. */
static bool view_ok(const fake_backend *f, const fdy_tensor_view *v,
                    uint64_t *bytes) {
  uint64_t end;
  return buffer_usable(v->buffer) &&
         fdy_tensor_bytes(v->dtype, v->shape, bytes, NULL) == FDY_OK &&
         v->offset % f->caps.alignment == 0 &&
         !__builtin_add_overflow(v->offset, *bytes, &end) &&
         end <= v->buffer->bytes;
}

static fdy_status fake_launch(fdy_backend *b, fdy_backend_stream *stream,
                              const fdy_op *op, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "launch", 0, -1, ID_OF(stream));
  if (!stream || !stream->alive || !op) {
    return fail_violation(f, n, "launch", "bad stream or NULL op", err);
  }
  call_set_kind(f, n, op->kind);
  if (op->input_count > FDY_OP_MAX_INPUTS ||
      op->output_count > FDY_OP_MAX_OUTPUTS) {
    return fail_violation(f, n, "launch", "too many operands", err);
  }
  fdy_error local;
  if (fdy_op_check(op, &local) != FDY_OK) {
    f->stats.violations++;
    if (err) {
      *err = local;
      fdy_error_prefix(err, "fake backend: launch");
      strcpy(err->backend_op, "launch");
    }
    return call_end(f, n, FDY_ERR_INVALID_ARGUMENT, -1);
  }
  if (!kind_supported(f, op->kind)) {
    return fail_call(f, n, err, FDY_ERR_UNSUPPORTED, "launch",
                     "fake backend: op kind %s is not supported",
                     fdy_op_kind_name(op->kind));
  }
  const fdy_tensor_view *views[FAKE_MAX_VIEWS];
  size_t count = op_views(op, views);
  uint64_t input_bytes = 0, data_bytes = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t bytes = 0;
    if (!view_ok(f, views[i], &bytes)) {
      return fail_violation(
          f, n, "launch",
          "a view is unbound, released, misaligned or outside its buffer", err);
    }
    if (i < op->input_count) {
      input_bytes += bytes;
    }
    if (i == 0) {
      data_bytes = bytes;
    }
  }
  uint64_t workspace = 0;
  if (f->workspace_bytes > 0 &&
      (!op->workspace.buffer ||
       fdy_tensor_bytes(op->workspace.dtype, op->workspace.shape, &workspace,
                        NULL) != FDY_OK ||
       workspace < f->workspace_bytes)) {
    return fail_violation(f, n, "launch",
                          "the workspace is smaller than workspace_bytes", err);
  }
  fdy_fake_call *entry = call_entry(f, n);
  if (entry) {
    entry->bytes = input_bytes;
    entry->handle = op->output_count > 0 ? op->outputs[0].buffer->id : -1;
    entry->rows = op->output_count > 0 && op->outputs[0].shape.rank > 0
                      ? op->outputs[0].shape.dims[0]
                      : 0;
    entry->variant_rows = op->variant_rows;
  }
  fake_recorded c = {.kind = REC_LAUNCH,
                     .stream = stream,
                     .op = *op,
                     .data_bytes = data_bytes};
  return record_or_issue(f, n, "launch", &c, err);
}

/* Checks that event has a recording to wait for. */
static bool waitable(const fdy_backend_event *event) {
  return event && event->alive && event->recorded;
}

static fdy_status fake_stream_wait(fdy_backend *b, fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "stream_wait", 0, ID_OF(event), ID_OF(stream));
  if (f->recording) {
    if (!stream || !stream->alive || !event || !event->alive ||
        event->recorded_in != f->recording) {
      return fail_violation(f, n, "stream_wait",
                            "bad stream, or an event not recorded earlier "
                            "in this recording",
                            err);
    }
    return record_call(f, n, "stream_wait",
                       &(fake_recorded){.kind = REC_STREAM_WAIT,
                                        .stream = stream,
                                        .event = event},
                       err);
  }
  if (!stream || !stream->alive || !waitable(event)) {
    return fail_violation(f, n, "stream_wait",
                          "bad stream, or an event destroyed or never "
                          "recorded",
                          err);
  }
  if (!issue_stream_wait(f, stream, event)) {
    return fail_out_of_memory(f, n, "stream_wait", err);
  }
  return call_end(f, n, FDY_OK, -1);
}

static fdy_status fake_host_wait(fdy_backend *b, fdy_backend_event *event,
                                 fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "host_wait", 0, ID_OF(event), -1);
  if (f->recording) {
    return fail_violation(f, n, "host_wait", "called while recording", err);
  }
  if (!waitable(event)) {
    return fail_violation(f, n, "host_wait",
                          "an event destroyed or never recorded", err);
  }
  complete_through(f, event->stream, event->seq);
  refresh_events(f);
  f->stats.host_waits++;
  if (f->failure.kind != FDY_OK) {
    f->failure_reported = true;
    if (err) {
      *err = f->failure;
    }
  }
  return call_end(f, n, f->failure.kind, -1);
}

static fdy_status fake_event_time(fdy_backend *b, fdy_backend_event *event,
                                  int64_t *out_ns, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "event_time", 0, ID_OF(event), -1);
  if (f->recording) {
    return fail_violation(f, n, "event_time", "called while recording", err);
  }
  if (!event || !event->alive || !out_ns) {
    return fail_violation(f, n, "event_time", "bad event or NULL output", err);
  }
  if (!event->complete) {
    return fail_call(f, n, err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                     "fake backend: event_time of an event whose recording "
                     "was not observed complete");
  }
  *out_ns = event->time_ns;
  return call_end(f, n, FDY_OK, -1);
}

static fdy_status fake_drain(fdy_backend *b, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "drain", 0, -1, -1);
  if (f->recording) {
    f->stats.violations++;
  }
  complete_all(f);
  refresh_events(f);
  f->stats.drains++;
  fdy_status st = f->failure_reported ? FDY_OK : f->failure.kind;
  if (st != FDY_OK && err) {
    *err = f->failure;
  }
  fdy_error_clear(&f->failure);
  f->failure_reported = false;
  return call_end(f, n, st, -1);
}

static fdy_status fake_graph_begin(fdy_backend *b,
                                   fdy_backend_stream *const *streams,
                                   uint32_t count, fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "graph_begin", 0, -1,
                          streams && count ? ID_OF(streams[0]) : -1);
  bool ok = !f->recording && streams && count > 0;
  for (uint32_t i = 0; ok && i < count; i++) {
    ok = streams[i] && streams[i]->alive;
    for (uint32_t k = 0; ok && k < i; k++) {
      ok = streams[k] != streams[i];
    }
  }
  if (!ok) {
    return fail_violation(f, n, "graph_begin",
                          "already recording, or no, dead or repeated streams",
                          err);
  }
  fdy_backend_graph *g = calloc(1, sizeof(*g));
  fdy_backend_stream **copy = calloc(count, sizeof(*copy));
  if (!g || !copy || !ptr_array_push(&f->graphs, g)) {
    free(g);
    free(copy);
    return fail_out_of_memory(f, n, "graph_begin", err);
  }
  memcpy(copy, streams, count * sizeof(*copy));
  g->id = f->next_id++;
  g->streams = copy;
  g->stream_count = count;
  f->recording = g;
  return call_end(f, n, FDY_OK, g->id);
}

static fdy_status fake_graph_end(fdy_backend *b, fdy_backend_graph **out,
                                 fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "graph_end", 0, ID_OF(f->recording), -1);
  fdy_fake_call *entry = call_entry(f, n);
  if (entry) {
    entry->recorded = false; /* it ends the recording, is not part of it */
  }
  fdy_backend_graph *g = f->recording;
  f->recording = NULL;
  if (out) {
    *out = NULL;
  }
  if (!g || !out) {
    return fail_violation(f, n, "graph_end", "no recording or NULL output",
                          err);
  }
  if (g->refused) {
    return fail_call(f, n, err, FDY_ERR_UNSUPPORTED, "graph_end",
                     "fake backend: graph_end: a call of the recording could "
                     "not be recorded");
  }
  g->alive = true;
  f->stats.live_graphs++;
  f->stats.graphs_recorded++;
  *out = g;
  return call_end(f, n, FDY_OK, g->id);
}

/* Orders every stream of g after the current tails of all of them. */
static bool join_streams(fake_backend *f, const fdy_backend_graph *g) {
  fdy_backend_stream *first = g->streams[0];
  for (uint32_t i = 1; i < g->stream_count; i++) {
    if (!wait_for(f, first, g->streams[i], g->streams[i]->last_seq)) {
      return false;
    }
  }
  for (uint32_t i = 1; i < g->stream_count; i++) {
    if (!wait_for(f, g->streams[i], first, first->last_seq)) {
      return false;
    }
  }
  return true;
}

/* Submits a recorded call again; false with *violation when its handles
 * are no longer usable, false alone when out of memory. */
static bool replay_call(fake_backend *f, const fake_recorded *c,
                        bool *violation) {
  const fdy_tensor_view *views[FAKE_MAX_VIEWS];
  uint64_t bytes = 0;
  *violation = !c->stream->alive;
  switch (c->kind) {
  case REC_COPY_TO_DEVICE:
  case REC_COPY_TO_HOST:
    *violation = *violation || !buffer_usable(c->buffer);
    return !*violation && issue_copy(f, c);
  case REC_LAUNCH:
    for (size_t i = 0, k = op_views(&c->op, views); i < k; i++) {
      *violation = *violation || !view_ok(f, views[i], &bytes);
    }
    return !*violation && issue_launch(f, c);
  case REC_EVENT_RECORD:
    *violation = *violation || !c->event->alive;
    if (!*violation) {
      issue_event_record(f, c->stream, c->event);
    }
    return !*violation;
  case REC_STREAM_WAIT:
    *violation = *violation || !waitable(c->event);
    return !*violation && issue_stream_wait(f, c->stream, c->event);
  }
  return false;
}

static fdy_status fake_graph_launch(fdy_backend *b, fdy_backend_graph *graph,
                                    fdy_error *err) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "graph_launch", 0, ID_OF(graph),
                          graph && graph->alive ? graph->streams[0]->id : -1);
  bool ok = graph && graph->alive && !f->recording;
  for (uint32_t i = 0; ok && i < graph->stream_count; i++) {
    ok = graph->streams[i]->alive;
  }
  if (!ok) {
    return fail_violation(f, n, "graph_launch",
                          "a dead graph or stream, or called while recording",
                          err);
  }
  if (!join_streams(f, graph)) {
    return fail_out_of_memory(f, n, "graph_launch", err);
  }
  for (size_t i = 0; i < graph->count; i++) {
    bool violation = false;
    if (!replay_call(f, &graph->calls[i], &violation)) {
      return violation ? fail_violation(f, n, "graph_launch",
                                        "a recorded call uses a released or "
                                        "destroyed handle",
                                        err)
                       : fail_out_of_memory(f, n, "graph_launch", err);
    }
  }
  if (!join_streams(f, graph)) {
    return fail_out_of_memory(f, n, "graph_launch", err);
  }
  f->stats.graph_launches++;
  return call_end(f, n, FDY_OK, -1);
}

static void fake_graph_destroy(fdy_backend *b, fdy_backend_graph *graph) {
  fake_backend *f = fake_of(b);
  uint64_t n = call_begin(f, "graph_destroy", 0, ID_OF(graph), -1);
  if (!graph) {
    return;
  }
  if (!graph->alive) {
    note_violation(f, n);
    return;
  }
  graph->alive = false;
  free(graph->calls);
  graph->calls = NULL;
  graph->count = graph->cap = 0;
  f->stats.live_graphs--;
}

static void fake_destroy(fdy_backend *b) {
  fake_backend *f = fake_of(b);
  complete_all(f);
  for (size_t i = 0; i < f->buffers.count; i++) {
    fdy_backend_buffer *buffer = f->buffers.items[i];
    free(buffer->data);
    free(buffer);
  }
  for (size_t i = 0; i < f->streams.count; i++) {
    fdy_backend_stream *stream = f->streams.items[i];
    free(stream->items);
    free(stream);
  }
  for (size_t i = 0; i < f->events.count; i++) {
    free(f->events.items[i]);
  }
  for (size_t i = 0; i < f->hosts.count; i++) {
    free(f->hosts.items[i]);
  }
  for (size_t i = 0; i < f->graphs.count; i++) {
    fdy_backend_graph *graph = f->graphs.items[i];
    free(graph->calls);
    free(graph->streams);
    free(graph);
  }
  free(f->graphs.items);
  free(f->buffers.items);
  free(f->streams.items);
  free(f->events.items);
  free(f->hosts.items);
  free(f->log);
  free(f);
}

/* Every entry; a backend made without fdy_fake_options.graphs has its
 * own copy without the graph entries. */
static const fdy_backend_ops fake_ops = {
    .name = "fake",
    .capabilities = fake_capabilities,
    .supports_op = fake_supports_op,
    .workspace_bytes = fake_workspace_bytes,
    .buffer_alloc = fake_buffer_alloc,
    .buffer_release = fake_buffer_release,
    .host_register = fake_host_register,
    .host_unregister = fake_host_unregister,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .event_record = fake_event_record,
    .copy_to_device = fake_copy_to_device,
    .copy_to_host = fake_copy_to_host,
    .launch = fake_launch,
    .stream_wait = fake_stream_wait,
    .host_wait = fake_host_wait,
    .event_time = fake_event_time,
    .graph_begin = fake_graph_begin,
    .graph_end = fake_graph_end,
    .graph_launch = fake_graph_launch,
    .graph_destroy = fake_graph_destroy,
    .drain = fake_drain,
    .destroy = fake_destroy,
};

/* ---- public -------------------------------------------------------------- */

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
  if ((o->unsupported_kinds >> FDY_OP_KIND_COUNT) != 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "fake backend: unsupported_kinds 0x%x names a kind "
                         "that does not exist",
                         (unsigned)o->unsupported_kinds);
  }
  fake_backend *f = calloc(1, sizeof(*f));
  if (!f) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "fake backend: out of memory");
  }
  f->ops = fake_ops;
  if (!o->graphs) {
    f->ops.graph_begin = NULL;
    f->ops.graph_end = NULL;
    f->ops.graph_launch = NULL;
    f->ops.graph_destroy = NULL;
  }
  f->base.ops = &f->ops;
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
  f->store_data = o->store_data;
  f->unsupported_kinds = o->unsupported_kinds;
  f->workspace_bytes = o->workspace_bytes;
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
