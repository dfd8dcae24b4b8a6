/* Static plan validation: replays the commands against the execution model
 * documented in plan.h (FIFO streams, events, host and stream waits) with one
 * vector clock per stream, per signalled event and for the host, and reports
 * the first rule violation in command order. Nothing outside the validator's
 * own scratch memory is touched. */
#include "plan_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-slot state since its latest allocation. `pending` holds the events of
 * the transfers into it and of the launches that read it which the host has
 * not been proven to observe yet. */
typedef struct slot_state {
  bool live;
  bool ever_allocated;
  bool has_transfer;
  uint64_t bytes;
  uint32_t weight;         /* tensor of the latest transfer */
  uint32_t transfer_event; /* event of the latest transfer */
  uint32_t *pending;
  size_t pending_count, pending_cap;
} slot_state;

typedef struct validator {
  const fdy_plan *plan;
  const fdy_graph *graph;
  uint32_t streams;
  size_t tensor_count;
  size_t op_count;
  slot_state *slots;
  uint32_t *event_signal; /* event id -> signal index + 1, or 0 */
  /* signal index -> stream, position on that stream (1-based), event id */
  uint32_t *signal_stream, *signal_seq, *signal_event;
  uint32_t *signal_clock; /* signal index -> clock (streams entries) */
  size_t signal_count;
  uint32_t *stream_clock; /* stream -> clock (streams entries) */
  uint32_t *stream_seq;   /* signals issued on each stream */
  bool *stream_used;
  uint32_t *host_clock;
  uint32_t *issue_clock; /* scratch: clock of the work being issued */
  int64_t *op_event;     /* op -> launch event, or -1 */
  size_t next_op;
  uint64_t live_bytes;
  fdy_plan_summary summary;
} validator;

__attribute__((format(printf, 6, 7))) static fdy_status
fail(fdy_error *err, fdy_status kind, size_t index, int64_t id0, int64_t id1,
     const char *fmt, ...) {
  char text[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  fdy_error_set(err, kind, "command %zu: %s", index, text);
  if (err != NULL) {
    err->command_index = (int64_t)index;
    err->ids[0] = id0;
    err->ids[1] = id1;
  }
  return kind;
}

static fdy_status unknown_id(fdy_error *err, size_t index, const char *table,
                             uint32_t id, uint32_t size) {
  fdy_status st =
      fail(err, FDY_ERR_PLAN_UNKNOWN_ID, index, id, -1,
           "%s %u is out of range (the plan has %u)", table, id, size);
  if (err != NULL) {
    snprintf(err->name, sizeof(err->name), "%s", table);
    err->expected = size;
    err->actual = id;
  }
  return st;
}

static void validator_free(validator *v) {
  if (v->slots != NULL) {
    for (uint32_t i = 0; i < v->plan->slot_count; i++) {
      free(v->slots[i].pending);
    }
  }
  free(v->slots);
  free(v->event_signal);
  free(v->signal_stream);
  free(v->signal_seq);
  free(v->signal_event);
  free(v->signal_clock);
  free(v->stream_clock);
  free(v->stream_seq);
  free(v->stream_used);
  free(v->host_clock);
  free(v->issue_clock);
  free(v->op_event);
}

static fdy_status validator_init(validator *v, const fdy_plan *plan,
                                 fdy_error *err) {
  memset(v, 0, sizeof(*v));
  v->plan = plan;
  v->graph = plan->graph;
  v->streams = plan->stream_count;
  v->tensor_count = fdy_graph_tensor_count(plan->graph);
  v->op_count = fdy_graph_op_count(plan->graph);
  size_t n = plan->command_count;
  size_t s = plan->stream_count;
  if (n >= UINT32_MAX || n > SIZE_MAX / (s * sizeof(uint32_t)) - 1) {
    return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                         "a plan of %zu commands is too large to validate", n);
  }
  v->slots = calloc(plan->slot_count + 1, sizeof(*v->slots));
  v->event_signal = calloc((size_t)plan->event_count + 1, sizeof(uint32_t));
  v->signal_stream = calloc(n + 1, sizeof(uint32_t));
  v->signal_seq = calloc(n + 1, sizeof(uint32_t));
  v->signal_event = calloc(n + 1, sizeof(uint32_t));
  v->signal_clock = calloc(n * s + 1, sizeof(uint32_t));
  v->stream_clock = calloc(s * s, sizeof(uint32_t));
  v->stream_seq = calloc(s, sizeof(uint32_t));
  v->stream_used = calloc(s, sizeof(bool));
  v->host_clock = calloc(s, sizeof(uint32_t));
  v->issue_clock = calloc(s, sizeof(uint32_t));
  v->op_event = malloc((v->op_count + 1) * sizeof(int64_t));
  if (v->slots == NULL || v->event_signal == NULL || v->signal_stream == NULL ||
      v->signal_seq == NULL || v->signal_event == NULL ||
      v->signal_clock == NULL || v->stream_clock == NULL ||
      v->stream_seq == NULL || v->stream_used == NULL ||
      v->host_clock == NULL || v->issue_clock == NULL || v->op_event == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory validating a plan");
  }
  for (size_t i = 0; i < v->op_count; i++) {
    v->op_event[i] = -1;
  }
  return FDY_OK;
}

static void clock_join(uint32_t *into, const uint32_t *from, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (from[i] > into[i]) {
      into[i] = from[i];
    }
  }
}

/* True when `clock` proves that event `event` (already signalled) completed. */
static bool covers(const validator *v, const uint32_t *clock, uint32_t event) {
  uint32_t sig = v->event_signal[event] - 1;
  return clock[v->signal_stream[sig]] >= v->signal_seq[sig];
}

/* Computes into issue_clock what is ordered before work issued now on
 * `stream`: the stream's clock joined with what the host observed. */
static void prepare_issue(validator *v, uint32_t stream) {
  memcpy(v->issue_clock, &v->stream_clock[(size_t)stream * v->streams],
         v->streams * sizeof(uint32_t));
  clock_join(v->issue_clock, v->host_clock, v->streams);
}

/* Records work issued on `stream` that signals `event`: its clock is the
 * issue clock plus itself; later work on the stream is ordered after it. */
static void issue_signal(validator *v, uint32_t stream, uint32_t event) {
  size_t sig = v->signal_count++;
  uint32_t *stream_clock = &v->stream_clock[(size_t)stream * v->streams];
  v->stream_seq[stream]++;
  v->issue_clock[stream] = v->stream_seq[stream];
  memcpy(stream_clock, v->issue_clock, v->streams * sizeof(uint32_t));
  memcpy(&v->signal_clock[sig * v->streams], v->issue_clock,
         v->streams * sizeof(uint32_t));
  v->signal_stream[sig] = stream;
  v->signal_seq[sig] = v->stream_seq[stream];
  v->signal_event[sig] = event;
  v->event_signal[event] = (uint32_t)sig + 1;
  v->stream_used[stream] = true;
}

static fdy_status slot_add_pending(slot_state *slot, uint32_t event,
                                   fdy_error *err) {
  if (slot->pending_count == slot->pending_cap) {
    size_t cap = slot->pending_cap == 0 ? 4 : slot->pending_cap * 2;
    uint32_t *grown = realloc(slot->pending, cap * sizeof(uint32_t));
    if (grown == NULL) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "out of memory validating a plan");
    }
    slot->pending = grown;
    slot->pending_cap = cap;
  }
  slot->pending[slot->pending_count++] = event;
  return FDY_OK;
}

/* Drops the pending events the host observed; returns the first one it did
 * not observe, or -1 when the slot is idle. */
static int64_t slot_busy_event(const validator *v, slot_state *slot) {
  size_t kept = 0;
  for (size_t i = 0; i < slot->pending_count; i++) {
    if (!covers(v, v->host_clock, slot->pending[i])) {
      slot->pending[kept++] = slot->pending[i];
    }
  }
  slot->pending_count = kept;
  return kept == 0 ? -1 : (int64_t)slot->pending[0];
}

static fdy_status check_new_event(const validator *v, size_t index,
                                  uint32_t event, fdy_error *err) {
  if (v->event_signal[event] != 0) {
    return fail(err, FDY_ERR_PLAN_EVENT_REUSED, index, event, -1,
                "event %u is signalled a second time", event);
  }
  return FDY_OK;
}

static fdy_status do_allocate(validator *v, size_t index, const fdy_command *c,
                              fdy_error *err) {
  uint32_t id = c->u.allocate.slot.v;
  if (id >= v->plan->slot_count) {
    return unknown_id(err, index, "slot", id, v->plan->slot_count);
  }
  slot_state *slot = &v->slots[id];
  if (slot->live) {
    return fail(err, FDY_ERR_PLAN_DOUBLE_ALLOCATION, index, id, -1,
                "slot %u is allocated while it is live", id);
  }
  if (c->u.allocate.bytes == 0) {
    return fail(err, FDY_ERR_PLAN_ZERO_ALLOCATION, index, id, -1,
                "slot %u is allocated with 0 bytes", id);
  }
  uint64_t live;
  bool wrapped =
      __builtin_add_overflow(v->live_bytes, c->u.allocate.bytes, &live);
  if (wrapped || live > v->plan->budget_bytes) {
    uint64_t shown = wrapped ? UINT64_MAX : live;
    fdy_status st = fail(
        err, FDY_ERR_PLAN_BUDGET_EXCEEDED, index, id, -1,
        "allocating %llu bytes for slot %u brings live slot bytes to %s%llu, "
        "above the budget of %llu",
        (unsigned long long)c->u.allocate.bytes, id,
        wrapped ? "more than " : "", (unsigned long long)shown,
        (unsigned long long)v->plan->budget_bytes);
    if (err != NULL) {
      err->expected = v->plan->budget_bytes;
      err->actual = shown;
    }
    return st;
  }
  v->live_bytes = live;
  if (live > v->summary.peak_bytes) {
    v->summary.peak_bytes = live;
  }
  if (!slot->ever_allocated) {
    v->summary.slots++;
  }
  slot->live = true;
  slot->ever_allocated = true;
  slot->bytes = c->u.allocate.bytes;
  slot->has_transfer = false;
  slot->pending_count = 0;
  return FDY_OK;
}

static fdy_status do_prefetch(validator *v, size_t index, const fdy_command *c,
                              fdy_error *err) {
  uint32_t weight = c->u.prefetch.weight.v;
  uint32_t id = c->u.prefetch.slot.v;
  uint32_t stream = c->u.prefetch.stream.v;
  uint32_t event = c->u.prefetch.signal.v;
  if (weight >= v->tensor_count) {
    return unknown_id(err, index, "tensor", weight, (uint32_t)v->tensor_count);
  }
  if (id >= v->plan->slot_count) {
    return unknown_id(err, index, "slot", id, v->plan->slot_count);
  }
  if (stream >= v->streams) {
    return unknown_id(err, index, "stream", stream, v->streams);
  }
  if (event >= v->plan->event_count) {
    return unknown_id(err, index, "event", event, v->plan->event_count);
  }
  fdy_tensor_info info;
  fdy_status st =
      fdy_graph_tensor(v->graph, (fdy_tensor_id){weight}, &info, err);
  if (st != FDY_OK) {
    return st;
  }
  if (info.role != FDY_TENSOR_WEIGHT) {
    st = fail(err, FDY_ERR_PLAN_NOT_A_WEIGHT, index, weight, -1,
              "tensor %u ('%s') is prefetched but is not a weight", weight,
              info.name);
    if (err != NULL) {
      snprintf(err->name, sizeof(err->name), "%s", info.name);
    }
    return st;
  }
  slot_state *slot = &v->slots[id];
  if (!slot->live) {
    return fail(err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, id, -1,
                "prefetch into slot %u, which is not allocated", id);
  }
  if (info.bytes > slot->bytes) {
    st = fail(err, FDY_ERR_PLAN_SLOT_TOO_SMALL, index, id, weight,
              "weight '%s' (%llu bytes) does not fit slot %u (%llu bytes)",
              info.name, (unsigned long long)info.bytes, id,
              (unsigned long long)slot->bytes);
    if (err != NULL) {
      snprintf(err->name, sizeof(err->name), "%s", info.name);
      err->expected = slot->bytes;
      err->actual = info.bytes;
    }
    return st;
  }
  int64_t busy = slot_busy_event(v, slot);
  if (busy >= 0) {
    return fail(err, FDY_ERR_PLAN_SLOT_BUSY, index, id, busy,
                "slot %u is overwritten before the host observed event %lld "
                "of earlier work on it",
                id, (long long)busy);
  }
  st = check_new_event(v, index, event, err);
  if (st != FDY_OK) {
    return st;
  }
  prepare_issue(v, stream);
  issue_signal(v, stream, event);
  slot->has_transfer = true;
  slot->weight = weight;
  slot->transfer_event = event;
  if (__builtin_add_overflow(v->summary.transfer_bytes, info.bytes,
                             &v->summary.transfer_bytes)) {
    return fail(err, FDY_ERR_OVERFLOW, index, weight, -1,
                "total transfer bytes overflow 64 bits");
  }
  return slot_add_pending(slot, event, err);
}

static fdy_status do_wait(validator *v, size_t index, const fdy_command *c,
                          fdy_error *err) {
  uint32_t event = c->u.wait.event.v;
  if (event >= v->plan->event_count) {
    return unknown_id(err, index, "event", event, v->plan->event_count);
  }
  if (!c->u.wait.host && c->u.wait.stream.v >= v->streams) {
    return unknown_id(err, index, "stream", c->u.wait.stream.v, v->streams);
  }
  uint32_t signalled = v->event_signal[event];
  if (signalled == 0) {
    return fail(err, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, index, event, -1,
                "wait on event %u, which no earlier command signals", event);
  }
  const uint32_t *clock =
      &v->signal_clock[(size_t)(signalled - 1) * v->streams];
  if (c->u.wait.host) {
    clock_join(v->host_clock, clock, v->streams);
  } else {
    uint32_t stream = c->u.wait.stream.v;
    clock_join(&v->stream_clock[(size_t)stream * v->streams], clock,
               v->streams);
    v->stream_used[stream] = true;
  }
  return FDY_OK;
}

/* True when the op reads `weight` (as one of its reads). */
static bool op_reads(const fdy_op_info *op, uint32_t tensor) {
  for (size_t i = 0; i < op->read_count; i++) {
    if (op->reads[i].v == tensor) {
      return true;
    }
  }
  return false;
}

static fdy_status binding_mismatch(fdy_error *err, size_t index, uint32_t op,
                                   uint32_t weight, uint64_t want, uint64_t got,
                                   const char *what) {
  fdy_status st = fail(err, FDY_ERR_PLAN_BINDING_MISMATCH, index, op, weight,
                       "launch of op %u: weight %u %s", op, weight, what);
  if (err != NULL) {
    err->expected = want;
    err->actual = got;
  }
  return st;
}

static fdy_status check_bindings(validator *v, size_t index,
                                 const fdy_command *c, const fdy_op_info *op,
                                 fdy_error *err) {
  uint32_t op_id = c->u.launch.op.v;
  uint32_t count = c->u.launch.binding_count;
  const fdy_binding *b = c->u.launch.bindings;
  uint64_t weights = 0;
  for (size_t i = 0; i < op->read_count; i++) {
    fdy_tensor_info info;
    fdy_status st = fdy_graph_tensor(v->graph, op->reads[i], &info, err);
    if (st != FDY_OK) {
      return st;
    }
    bool seen = false;
    for (size_t j = 0; j < i; j++) {
      seen = seen || op->reads[j].v == op->reads[i].v;
    }
    if (info.role == FDY_TENSOR_WEIGHT && !seen) {
      weights++;
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    fdy_tensor_info info;
    fdy_status st = fdy_graph_tensor(v->graph, b[i].weight, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    if (info.role != FDY_TENSOR_WEIGHT) {
      st = fail(err, FDY_ERR_PLAN_NOT_A_WEIGHT, index, b[i].weight.v, op_id,
                "launch of op %u binds tensor %u ('%s'), which is not a "
                "weight",
                op_id, b[i].weight.v, info.name);
      if (err != NULL) {
        snprintf(err->name, sizeof(err->name), "%s", info.name);
      }
      return st;
    }
    if (!op_reads(op, b[i].weight.v)) {
      return binding_mismatch(err, index, op_id, b[i].weight.v, weights, count,
                              "is bound but the op does not read it");
    }
    for (uint32_t j = 0; j < i; j++) {
      if (b[j].weight.v == b[i].weight.v) {
        return binding_mismatch(err, index, op_id, b[i].weight.v, weights,
                                count, "is bound more than once");
      }
    }
  }
  if (count != weights) {
    for (size_t i = 0; i < op->read_count; i++) {
      bool bound = false;
      for (uint32_t j = 0; j < count; j++) {
        bound = bound || b[j].weight.v == op->reads[i].v;
      }
      fdy_tensor_info info;
      fdy_status st = fdy_graph_tensor(v->graph, op->reads[i], &info, err);
      if (st != FDY_OK) {
        return st;
      }
      if (!bound && info.role == FDY_TENSOR_WEIGHT) {
        return binding_mismatch(err, index, op_id, op->reads[i].v, weights,
                                count, "is read by the op but not bound");
      }
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    slot_state *slot = &v->slots[b[i].slot.v];
    if (!slot->live) {
      return fail(err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, b[i].slot.v,
                  b[i].weight.v,
                  "launch of op %u binds slot %u, which is not allocated",
                  op_id, b[i].slot.v);
    }
    if (!slot->has_transfer || slot->weight != b[i].weight.v) {
      return binding_mismatch(err, index, op_id, b[i].weight.v, weights, count,
                              "is bound to a slot whose latest transfer was "
                              "of another weight (or none)");
    }
  }
  return FDY_OK;
}

static fdy_status do_launch(validator *v, size_t index, const fdy_command *c,
                            fdy_error *err) {
  uint32_t op_id = c->u.launch.op.v;
  uint32_t stream = c->u.launch.stream.v;
  uint32_t event = c->u.launch.signal.v;
  if (op_id >= v->op_count) {
    return unknown_id(err, index, "op", op_id, (uint32_t)v->op_count);
  }
  if (stream >= v->streams) {
    return unknown_id(err, index, "stream", stream, v->streams);
  }
  if (event >= v->plan->event_count) {
    return unknown_id(err, index, "event", event, v->plan->event_count);
  }
  if (c->u.launch.binding_count > FDY_MAX_BINDINGS) {
    return fail(err, FDY_ERR_PLAN_BINDING_MISMATCH, index, op_id, -1,
                "launch has %u bindings, above the limit %d",
                c->u.launch.binding_count, FDY_MAX_BINDINGS);
  }
  for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
    const fdy_binding *b = &c->u.launch.bindings[i];
    if (b->weight.v >= v->tensor_count) {
      return unknown_id(err, index, "tensor", b->weight.v,
                        (uint32_t)v->tensor_count);
    }
    if (b->slot.v >= v->plan->slot_count) {
      return unknown_id(err, index, "slot", b->slot.v, v->plan->slot_count);
    }
  }
  if (op_id != v->next_op) {
    fdy_status st;
    if (v->next_op < v->op_count) {
      st = fail(err, FDY_ERR_PLAN_OP_ORDER, index, op_id, (int64_t)v->next_op,
                "op %u is launched where op %zu is next in graph order", op_id,
                v->next_op);
    } else {
      st = fail(err, FDY_ERR_PLAN_OP_ORDER, index, op_id, -1,
                "op %u is launched after every op was launched", op_id);
    }
    return st;
  }
  fdy_op_info op;
  fdy_status st = fdy_graph_op(v->graph, c->u.launch.op, &op, err);
  if (st != FDY_OK) {
    return st;
  }
  st = check_bindings(v, index, c, &op, err);
  if (st != FDY_OK) {
    return st;
  }
  prepare_issue(v, stream);
  for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
    const fdy_binding *b = &c->u.launch.bindings[i];
    uint32_t transfer = v->slots[b->slot.v].transfer_event;
    if (!covers(v, v->issue_clock, transfer)) {
      return fail(err, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, index, b->slot.v,
                  transfer,
                  "launch of op %u on stream %u is not ordered after "
                  "transfer event %u into slot %u",
                  op_id, stream, transfer, b->slot.v);
    }
  }
  for (size_t i = 0; i < op.read_count; i++) {
    fdy_tensor_info info;
    st = fdy_graph_tensor(v->graph, op.reads[i], &info, err);
    if (st != FDY_OK) {
      return st;
    }
    if (info.role != FDY_TENSOR_ACTIVATION || info.producer < 0) {
      continue;
    }
    int64_t producer_event = v->op_event[info.producer];
    if (producer_event < 0 ||
        !covers(v, v->issue_clock, (uint32_t)producer_event)) {
      st = fail(err, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, index, op.reads[i].v,
                info.producer,
                "launch of op %u on stream %u is not ordered after op %lld, "
                "which produces '%s'",
                op_id, stream, (long long)info.producer, info.name);
      if (err != NULL) {
        snprintf(err->name, sizeof(err->name), "%s", info.name);
      }
      return st;
    }
  }
  st = check_new_event(v, index, event, err);
  if (st != FDY_OK) {
    return st;
  }
  issue_signal(v, stream, event);
  v->op_event[op_id] = event;
  v->next_op++;
  for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
    st =
        slot_add_pending(&v->slots[c->u.launch.bindings[i].slot.v], event, err);
    if (st != FDY_OK) {
      return st;
    }
  }
  return FDY_OK;
}

static fdy_status do_release(validator *v, size_t index, const fdy_command *c,
                             fdy_error *err) {
  uint32_t id = c->u.release.slot.v;
  if (id >= v->plan->slot_count) {
    return unknown_id(err, index, "slot", id, v->plan->slot_count);
  }
  slot_state *slot = &v->slots[id];
  if (!slot->live) {
    return fail(err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, id, -1,
                "release of slot %u, which is not allocated", id);
  }
  int64_t busy = slot_busy_event(v, slot);
  if (busy >= 0) {
    return fail(err, FDY_ERR_PLAN_SLOT_BUSY, index, id, busy,
                "slot %u is released before the host observed event %lld of "
                "work on it",
                id, (long long)busy);
  }
  slot->live = false;
  v->live_bytes -= slot->bytes;
  return FDY_OK;
}

static fdy_status check_end(validator *v, fdy_error *err) {
  size_t index = v->plan->command_count;
  if (v->next_op < v->op_count) {
    fdy_status st =
        fail(err, FDY_ERR_PLAN_INCOMPLETE, index, (int64_t)v->next_op, -1,
             "end of plan: op %zu and later ops never launch", v->next_op);
    if (err != NULL) {
      err->expected = v->op_count;
      err->actual = v->next_op;
    }
    return st;
  }
  for (size_t sig = 0; sig < v->signal_count; sig++) {
    uint32_t event = v->signal_event[sig];
    if (!covers(v, v->host_clock, event)) {
      return fail(err, FDY_ERR_PLAN_UNSYNCHRONIZED_END, index, event, -1,
                  "end of plan: the host never observes event %u", event);
    }
  }
  for (uint32_t id = 0; id < v->plan->slot_count; id++) {
    if (v->slots[id].live) {
      return fail(err, FDY_ERR_PLAN_UNRELEASED_END, index, id, -1,
                  "end of plan: slot %u is never released", id);
    }
  }
  return FDY_OK;
}

fdy_status fdy_plan_validate(const fdy_plan *plan, fdy_plan_summary *summary,
                             fdy_error *err) {
  validator v;
  if (plan == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan validation needs a plan");
  }
  fdy_status st = fdy_graph_validate(plan->graph, err);
  if (st != FDY_OK) {
    return st;
  }
  st = validator_init(&v, plan, err);
  for (size_t i = 0; st == FDY_OK && i < plan->command_count; i++) {
    const fdy_command *c = &plan->commands[i];
    switch (c->kind) {
    case FDY_CMD_ALLOCATE:
      st = do_allocate(&v, i, c, err);
      break;
    case FDY_CMD_PREFETCH:
      st = do_prefetch(&v, i, c, err);
      break;
    case FDY_CMD_WAIT:
      st = do_wait(&v, i, c, err);
      break;
    case FDY_CMD_LAUNCH:
      st = do_launch(&v, i, c, err);
      break;
    case FDY_CMD_RELEASE:
      st = do_release(&v, i, c, err);
      break;
    default:
      st = fail(err, FDY_ERR_INVALID_ARGUMENT, i, -1, -1,
                "unknown command kind %d", (int)c->kind);
      break;
    }
  }
  if (st == FDY_OK) {
    st = check_end(&v, err);
  }
  if (st == FDY_OK && summary != NULL) {
    v.summary.commands = plan->command_count;
    v.summary.ops = v.op_count;
    for (uint32_t s = 0; s < v.streams; s++) {
      v.summary.streams += v.stream_used[s] ? 1 : 0;
    }
    *summary = v.summary;
  }
  validator_free(&v);
  return st;
}
