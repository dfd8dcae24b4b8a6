/* Static plan validation: replays setup, each step once and teardown
 * against the execution model documented in plan.h (FIFO streams, events
 * scoped to one run of a section, host and stream waits) with one vector
 * clock per stream, per signalled event and for the host, and reports the
 * first rule violation in command order.
 *
 * Memory is checked at byte granularity: every copy and launch of a run
 * leaves an access record (buffer, byte range, read or write, tensor,
 * event) so that a write is proven ordered after every earlier access of
 * the bytes it overwrites, and a read proven to see the bytes its tensor's
 * latest write left. A buffer's records form an interval tree, so that a
 * check visits only the records of the bytes it touches (plus a path of
 * the tree) and validation stays near linear in the plan's length however
 * many tensors a buffer holds. Nothing outside the validator's own scratch
 * memory is touched. */
#include "plan_internal.h"

#include "foundry/op_table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* One access of a run (or of setup, for resident contents). */
typedef struct access {
  uint64_t begin, end;
  uint32_t event;  /* signal of the work; NONE once observed by the host */
  uint32_t tensor; /* tensor (weight, activation, ...) the bytes belong to */
  bool write;
} access;

/* A record of a buffer's access log: a node of a treap ordered by
 * (begin, seq), seq being the order in which accesses were logged (from 1),
 * whose max_end is the largest end in its subtree (an interval tree) and
 * max_write the largest seq of a write in it (0: none). */
typedef struct log_node {
  access a;
  uint64_t seq;
  uint64_t max_end;
  uint64_t max_write;
  uint32_t left, right; /* node indices, or NONE */
  uint32_t priority;    /* heap order: a parent's is at least its children's */
} log_node;

typedef struct buffer_state {
  bool live;
  bool ever_allocated;
  log_node *nodes; /* node pool; freed nodes are chained through `left` */
  uint32_t node_count, node_cap;
  uint32_t root, free_nodes; /* NONE when empty */
} buffer_state;

static void log_clear(buffer_state *buf) {
  buf->node_count = 0;
  buf->root = NONE;
  buf->free_nodes = NONE;
}

typedef struct validator {
  const fdy_plan *plan;
  const fdy_graph *graph;
  uint32_t streams;
  size_t tensor_count, op_count;
  buffer_state *buffers;
  /* vector clocks, reset at every section */
  uint32_t *event_signal; /* event id -> signal index + 1, or 0 */
  uint32_t *signal_stream, *signal_seq, *signal_event;
  uint32_t *signal_clock; /* signal index -> clock (streams entries) */
  size_t signal_count;
  uint32_t *stream_clock; /* stream -> clock (streams entries) */
  uint32_t *stream_seq;
  bool *stream_used;
  uint32_t *host_clock;
  uint32_t *issue_clock;
  /* per run */
  uint32_t *tensor_write; /* tensor -> event of its latest write, or NONE */
  bool *tensor_written;   /* tensor written in this run */
  int64_t last_op;        /* last op launched in this run, or -1 */
  bool *op_launched;      /* ever, for INCOMPLETE */
  uint64_t live_weight_bytes;
  uint64_t run_transfer_bytes;
  uint64_t access_seq; /* accesses logged so far */
  uint32_t random;     /* xorshift state for treap priorities */
  uint64_t log_visits; /* access-log nodes visited (work measure) */
  const char *section; /* name of the section being replayed */
  size_t section_index;
  fdy_plan_summary summary;
} validator;

__attribute__((format(printf, 7, 8))) static fdy_status
fail(validator *v, fdy_error *err, fdy_status kind, size_t index, int64_t id0,
     int64_t id1, const char *fmt, ...) {
  char text[FDY_ERROR_MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (v->section != NULL) {
    fdy_error_set(err, kind, "command %zu (%s): %s", index, v->section, text);
  } else {
    fdy_error_set(err, kind, "command %zu: %s", index, text);
  }
  if (err != NULL) {
    err->command_index = (int64_t)index;
    err->ids[0] = id0;
    err->ids[1] = id1;
    snprintf(err->name, sizeof(err->name), "%s",
             v->section != NULL ? v->section : "");
  }
  return kind;
}

static fdy_status unknown_id(validator *v, fdy_error *err, size_t index,
                             const char *table, uint32_t id, uint32_t size) {
  fdy_status st =
      fail(v, err, FDY_ERR_PLAN_UNKNOWN_ID, index, id, -1,
           "%s %u is out of range (the plan has %u)", table, id, size);
  if (err != NULL) {
    err->expected = size;
    err->actual = id;
  }
  return st;
}

static void validator_free(validator *v) {
  if (v->buffers != NULL) {
    for (uint32_t i = 0; i < v->plan->buffer_count; i++) {
      free(v->buffers[i].nodes);
    }
  }
  free(v->buffers);
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
  free(v->tensor_write);
  free(v->tensor_written);
  free(v->op_launched);
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
  v->buffers = calloc(plan->buffer_count + 1, sizeof(*v->buffers));
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
  v->tensor_write = calloc(v->tensor_count + 1, sizeof(uint32_t));
  v->tensor_written = calloc(v->tensor_count + 1, sizeof(bool));
  v->op_launched = calloc(v->op_count + 1, sizeof(bool));
  for (uint32_t b = 0; v->buffers != NULL && b < plan->buffer_count; b++) {
    v->buffers[b].root = NONE;
    v->buffers[b].free_nodes = NONE;
  }
  /* Treap priorities from a seed no plan can predict, so that no plan can
   * be written to make a log a deep chain (the recursion's depth). The
   * results do not depend on the tree's shape. */
  uint64_t seed = (uint64_t)fdy_now_ns() ^ (uint64_t)(uintptr_t)v;
  seed = (seed ^ (seed >> 31)) * 0x9e3779b97f4a7c15u;
  v->random = (uint32_t)(seed >> 32) | 1u;
  if (v->buffers == NULL || v->event_signal == NULL ||
      v->signal_stream == NULL || v->signal_seq == NULL ||
      v->signal_event == NULL || v->signal_clock == NULL ||
      v->stream_clock == NULL || v->stream_seq == NULL ||
      v->stream_used == NULL || v->host_clock == NULL ||
      v->issue_clock == NULL || v->tensor_write == NULL ||
      v->tensor_written == NULL || v->op_launched == NULL) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                         "out of memory validating a plan");
  }
  return FDY_OK;
}

/* ---- clocks
 * ------------------------------------------------------------------ */

static void clock_join(uint32_t *into, const uint32_t *from, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (from[i] > into[i]) {
      into[i] = from[i];
    }
  }
}

/* True when `clock` proves that event `event` completed; NONE (an access
 * the host observed in an earlier section) always is. */
static bool covers(const validator *v, const uint32_t *clock, uint32_t event) {
  if (event == NONE) {
    return true;
  }
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

/* Records work issued on `stream` that signals `event`. */
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

/* Forgets every event and clock: a new section (one run) starts with all
 * earlier work observed by the host. Only resident buffers keep their
 * access logs (marked observed): what setup uploaded stays valid, while a
 * run may rely on nothing an earlier run left in slots, the arena or io. */
static void start_section(validator *v) {
  for (size_t sig = 0; sig < v->signal_count; sig++) {
    v->event_signal[v->signal_event[sig]] = 0;
  }
  v->signal_count = 0;
  memset(v->stream_clock, 0,
         (size_t)v->streams * v->streams * sizeof(uint32_t));
  memset(v->stream_seq, 0, v->streams * sizeof(uint32_t));
  memset(v->host_clock, 0, v->streams * sizeof(uint32_t));
  for (uint32_t b = 0; b < v->plan->buffer_count; b++) {
    buffer_state *buf = &v->buffers[b];
    if (v->plan->buffers[b].cls != FDY_BUFFER_RESIDENT) {
      log_clear(buf);
    }
    for (uint32_t i = 0; i < buf->node_count; i++) {
      buf->nodes[i].a.event = NONE; /* freed nodes too: harmless */
    }
  }
  for (size_t t = 0; t < v->tensor_count; t++) {
    v->tensor_write[t] = NONE;
    v->tensor_written[t] = false;
  }
  v->last_op = -1;
  v->run_transfer_bytes = 0;
}

/* ---- byte accesses
 * ----------------------------------------------------------- */

/* A buffer's access log is a treap (a binary search tree by (begin, seq),
 * a heap by random priority, so expected O(log n) deep) whose nodes carry
 * the largest end of their subtree: the accesses overlapping a byte range
 * are found by a descent that skips every subtree ending at or before the
 * range and every right subtree beginning at or after its end. Every node
 * entered counts in log_visits. */

static uint32_t next_priority(validator *v) {
  uint32_t x = v->random; /* xorshift32, never 0 */
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  v->random = x;
  return x;
}

static uint64_t max_end_of(const buffer_state *buf, uint32_t t) {
  return t == NONE ? 0 : buf->nodes[t].max_end;
}

static uint64_t max_write_of(const buffer_state *buf, uint32_t t) {
  return t == NONE ? 0 : buf->nodes[t].max_write;
}

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t m = a > b ? a : b;
  return m > c ? m : c;
}

static void update(buffer_state *buf, uint32_t t) {
  log_node *n = &buf->nodes[t];
  n->max_end =
      max3(n->a.end, max_end_of(buf, n->left), max_end_of(buf, n->right));
  n->max_write = max3(n->a.write ? n->seq : 0, max_write_of(buf, n->left),
                      max_write_of(buf, n->right));
}

/* Splits tree t into the nodes ordered before (begin, seq) and the rest. */
static void split(validator *v, buffer_state *buf, uint32_t t, uint64_t begin,
                  uint64_t seq, uint32_t *before, uint32_t *rest) {
  if (t == NONE) {
    *before = NONE;
    *rest = NONE;
    return;
  }
  v->log_visits++;
  log_node *n = &buf->nodes[t];
  if (n->a.begin < begin || (n->a.begin == begin && n->seq < seq)) {
    split(v, buf, n->right, begin, seq, &n->right, rest);
    *before = t;
  } else {
    split(v, buf, n->left, begin, seq, before, &n->left);
    *rest = t;
  }
  update(buf, t);
}

/* Joins two trees, every node of `a` ordered before every node of `b`. */
static uint32_t merge(validator *v, buffer_state *buf, uint32_t a, uint32_t b) {
  if (a == NONE) {
    return b;
  }
  if (b == NONE) {
    return a;
  }
  v->log_visits++;
  if (buf->nodes[a].priority >= buf->nodes[b].priority) {
    uint32_t right = merge(v, buf, buf->nodes[a].right, b);
    buf->nodes[a].right = right;
    update(buf, a);
    return a;
  }
  uint32_t left = merge(v, buf, a, buf->nodes[b].left);
  buf->nodes[b].left = left;
  update(buf, b);
  return b;
}

static void free_node(buffer_state *buf, uint32_t t) {
  buf->nodes[t].left = buf->free_nodes;
  buf->free_nodes = t;
}

static void free_tree(validator *v, buffer_state *buf, uint32_t t) {
  if (t == NONE) {
    return;
  }
  v->log_visits++;
  uint32_t left = buf->nodes[t].left, right = buf->nodes[t].right;
  free_tree(v, buf, left);
  free_tree(v, buf, right);
  free_node(buf, t);
}

/* Removes from tree t, whose accesses all begin inside a write ending at
 * `end`, those that end inside it too. */
static uint32_t drop_inside(validator *v, buffer_state *buf, uint32_t t,
                            uint64_t end) {
  if (t == NONE) {
    return NONE;
  }
  v->log_visits++;
  if (buf->nodes[t].max_end <= end) {
    free_tree(v, buf, t);
    return NONE;
  }
  uint32_t left = drop_inside(v, buf, buf->nodes[t].left, end);
  uint32_t right = drop_inside(v, buf, buf->nodes[t].right, end);
  if (buf->nodes[t].a.end <= end) {
    free_node(buf, t);
    return merge(v, buf, left, right);
  }
  buf->nodes[t].left = left;
  buf->nodes[t].right = right;
  update(buf, t);
  return t;
}

/* Logs an access. A write was proven ordered after every earlier access of
 * its bytes (or failed), so the earlier accesses that lie wholly inside it
 * can never decide a later check (what is ordered after the write is
 * ordered after them; what is not fails against the write itself): they
 * are dropped, which keeps a log as long as the live tensors of its buffer
 * (and the reads of them since their writes). */
static fdy_status log_access(validator *v, uint32_t buffer, access a,
                             fdy_error *err) {
  buffer_state *buf = &v->buffers[buffer];
  uint32_t t = buf->free_nodes;
  if (t != NONE) {
    buf->free_nodes = buf->nodes[t].left;
  } else {
    if (buf->node_count == buf->node_cap) {
      uint32_t cap = buf->node_cap == 0 ? 16 : buf->node_cap * 2;
      log_node *grown = buf->node_cap >= NONE / 4
                            ? NULL
                            : realloc(buf->nodes, cap * sizeof(log_node));
      if (grown == NULL) {
        return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                             "out of memory validating a plan");
      }
      buf->nodes = grown;
      buf->node_cap = cap;
    }
    t = buf->node_count++;
  }
  if (a.write) {
    uint32_t before, inside, after;
    split(v, buf, buf->root, a.begin, 0, &before, &inside);
    split(v, buf, inside, a.end, UINT64_MAX, &inside, &after);
    inside = drop_inside(v, buf, inside, a.end);
    buf->root = merge(v, buf, merge(v, buf, before, inside), after);
  }
  /* the newest access goes after every other of the same begin */
  uint64_t seq = ++v->access_seq;
  buf->nodes[t] = (log_node){.a = a,
                             .seq = seq,
                             .max_end = a.end,
                             .max_write = a.write ? seq : 0,
                             .left = NONE,
                             .right = NONE,
                             .priority = next_priority(v)};
  uint32_t before, after;
  split(v, buf, buf->root, a.begin, seq, &before, &after);
  buf->root = merge(v, buf, merge(v, buf, before, t), after);
  return FDY_OK;
}

static bool overlaps(const access *a, uint64_t begin, uint64_t end) {
  return a->begin < end && begin < a->end;
}

/* Into *found: the earliest access of tree t overlapping [begin, end) not
 * ordered before the work being issued (issue_clock), or leaves it. */
static void find_unordered(validator *v, const buffer_state *buf, uint32_t t,
                           uint64_t begin, uint64_t end,
                           const log_node **found) {
  while (t != NONE && buf->nodes[t].max_end > begin) {
    v->log_visits++;
    const log_node *n = &buf->nodes[t];
    find_unordered(v, buf, n->left, begin, end, found);
    if (n->a.begin >= end) {
      return; /* and so does everything to its right */
    }
    if (overlaps(&n->a, begin, end) &&
        (*found == NULL || n->seq < (*found)->seq) &&
        !covers(v, v->issue_clock, n->a.event)) {
      *found = n;
    }
    t = n->right;
  }
}

/* Into *found: the latest write of tree t overlapping [begin, end), or
 * leaves it. Subtrees without a later write than *found are skipped, so
 * reads piling up on the same bytes (a tensor every op reads) cost
 * nothing here. */
static void find_latest_write(validator *v, const buffer_state *buf, uint32_t t,
                              uint64_t begin, uint64_t end,
                              const log_node **found) {
  while (t != NONE && buf->nodes[t].max_end > begin &&
         buf->nodes[t].max_write > (*found == NULL ? 0 : (*found)->seq)) {
    v->log_visits++;
    const log_node *n = &buf->nodes[t];
    if (n->a.begin < end) { /* else nothing to its right overlaps */
      find_latest_write(v, buf, n->right, begin, end, found);
      if (n->a.write && overlaps(&n->a, begin, end) &&
          (*found == NULL || n->seq > (*found)->seq)) {
        *found = n;
      }
    }
    t = n->left;
  }
}

/* The first earlier access of [begin, end) not ordered before the work
 * being issued (issue_clock), or NULL. */
static const access *unordered_access(validator *v, uint32_t buffer,
                                      uint64_t begin, uint64_t end) {
  const buffer_state *buf = &v->buffers[buffer];
  const log_node *found = NULL;
  find_unordered(v, buf, buf->root, begin, end, &found);
  return found != NULL ? &found->a : NULL;
}

/* The latest write of [begin, end), or NULL. */
static const access *latest_write(validator *v, uint32_t buffer, uint64_t begin,
                                  uint64_t end) {
  const buffer_state *buf = &v->buffers[buffer];
  const log_node *found = NULL;
  find_latest_write(v, buf, buf->root, begin, end, &found);
  return found != NULL ? &found->a : NULL;
}

/* The latest write of [begin, end) by a tensor other than `tensor` after
 * that tensor's own latest write there, or NULL. */
static const access *clobbering_write(validator *v, uint32_t buffer,
                                      uint64_t begin, uint64_t end,
                                      uint32_t tensor) {
  const access *a = latest_write(v, buffer, begin, end);
  return a == NULL || a->tensor == tensor ? NULL : a;
}

static fdy_status check_new_event(validator *v, fdy_error *err, size_t index,
                                  uint32_t event) {
  if (v->event_signal[event] != 0) {
    return fail(v, err, FDY_ERR_PLAN_EVENT_REUSED, index, event, -1,
                "event %u is signalled a second time", event);
  }
  return FDY_OK;
}

static fdy_status check_stream_event(validator *v, fdy_error *err, size_t index,
                                     uint32_t stream, uint32_t event) {
  if (stream >= v->streams) {
    return unknown_id(v, err, index, "stream", stream, v->streams);
  }
  if (event >= v->plan->event_count) {
    return unknown_id(v, err, index, "event", event, v->plan->event_count);
  }
  return FDY_OK;
}

/* ---- commands
 * ---------------------------------------------------------------- */

static bool is_setup(const validator *v) {
  return v->section_index == 0;
}

static bool is_teardown(const validator *v) {
  return v->section_index + 1 == v->plan->section_count &&
         v->plan->section_count > 1;
}

static bool is_step(const validator *v) {
  return !is_setup(v) && !is_teardown(v);
}

static fdy_status misplaced_command(validator *v, fdy_error *err, size_t index,
                                    const fdy_command *c) {
  return fail(v, err, FDY_ERR_PLAN_SECTION_COMMAND, index, -1, -1,
              "a %s command may not appear in section '%s'",
              fdy_command_kind_name(c->kind), v->section);
}

static uint64_t weight_bytes_of(const fdy_plan_buffer *b) {
  return b->cls == FDY_BUFFER_RESIDENT || b->cls == FDY_BUFFER_SLOT ? b->bytes
                                                                    : 0;
}

static fdy_status do_allocate(validator *v, size_t index, const fdy_command *c,
                              fdy_error *err) {
  uint32_t id = c->u.allocate.buffer.v;
  if (!is_setup(v)) {
    return misplaced_command(v, err, index, c);
  }
  if (id >= v->plan->buffer_count) {
    return unknown_id(v, err, index, "buffer", id, v->plan->buffer_count);
  }
  buffer_state *buf = &v->buffers[id];
  const fdy_plan_buffer *pb = &v->plan->buffers[id];
  if (buf->live) {
    return fail(v, err, FDY_ERR_PLAN_DOUBLE_ALLOCATION, index, id, -1,
                "buffer %u is allocated while it is live", id);
  }
  uint64_t live;
  bool wrapped =
      __builtin_add_overflow(v->live_weight_bytes, weight_bytes_of(pb), &live);
  if (wrapped || live > v->plan->budget_bytes) {
    uint64_t shown = wrapped ? UINT64_MAX : live;
    fdy_status st =
        fail(v, err, FDY_ERR_PLAN_BUDGET_EXCEEDED, index, id, -1,
             "allocating %llu bytes for %s buffer %u brings live weight bytes "
             "to %s%llu, above the budget of %llu",
             (unsigned long long)pb->bytes, fdy_buffer_class_name(pb->cls), id,
             wrapped ? "more than " : "", (unsigned long long)shown,
             (unsigned long long)v->plan->budget_bytes);
    if (err != NULL) {
      err->expected = v->plan->budget_bytes;
      err->actual = shown;
    }
    return st;
  }
  v->live_weight_bytes = live;
  if (live > v->summary.peak_weight_bytes) {
    v->summary.peak_weight_bytes = live;
  }
  if (!buf->ever_allocated) {
    v->summary.buffers++;
    if (__builtin_add_overflow(v->summary.class_bytes[pb->cls], pb->bytes,
                               &v->summary.class_bytes[pb->cls])) {
      return fail(v, err, FDY_ERR_OVERFLOW, index, id, -1,
                  "the %s buffers' bytes overflow 64 bits",
                  fdy_buffer_class_name(pb->cls));
    }
  }
  buf->live = true;
  buf->ever_allocated = true;
  log_clear(buf);
  return FDY_OK;
}

static fdy_status tensor_of(validator *v, uint32_t id, fdy_tensor_info *out,
                            fdy_error *err) {
  return fdy_graph_tensor(v->graph, (fdy_tensor_id){id}, out, err);
}

static fdy_status do_prefetch(validator *v, size_t index, const fdy_command *c,
                              fdy_error *err) {
  uint32_t weight = c->u.prefetch.weight.v;
  uint32_t id = c->u.prefetch.buffer.v;
  uint32_t stream = c->u.prefetch.stream.v;
  uint32_t event = c->u.prefetch.signal.v;
  if (is_teardown(v)) {
    return misplaced_command(v, err, index, c);
  }
  if (weight >= v->tensor_count) {
    return unknown_id(v, err, index, "tensor", weight,
                      (uint32_t)v->tensor_count);
  }
  if (id >= v->plan->buffer_count) {
    return unknown_id(v, err, index, "buffer", id, v->plan->buffer_count);
  }
  fdy_status st = check_stream_event(v, err, index, stream, event);
  if (st != FDY_OK) {
    return st;
  }
  fdy_tensor_info info;
  st = tensor_of(v, weight, &info, err);
  if (st != FDY_OK) {
    return st;
  }
  if (info.role != FDY_TENSOR_WEIGHT) {
    st = fail(v, err, FDY_ERR_PLAN_NOT_A_WEIGHT, index, weight, -1,
              "tensor %u ('%s') is prefetched but is not a weight", weight,
              info.name);
    return st;
  }
  fdy_buffer_class cls = v->plan->buffers[id].cls;
  if ((is_setup(v) && cls != FDY_BUFFER_RESIDENT) ||
      (is_step(v) && cls != FDY_BUFFER_SLOT)) {
    return fail(v, err, FDY_ERR_PLAN_SECTION_COMMAND, index, id, weight,
                "a prefetch in section '%s' goes into a %s buffer (%u): setup "
                "fills resident buffers, steps fill slots",
                v->section, fdy_buffer_class_name(cls), id);
  }
  buffer_state *buf = &v->buffers[id];
  if (!buf->live) {
    return fail(v, err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, id, -1,
                "prefetch into buffer %u, which is not allocated", id);
  }
  uint64_t offset = c->u.prefetch.offset, end;
  uint64_t capacity = v->plan->buffers[id].bytes;
  if (offset % FDY_TENSOR_ALIGNMENT != 0 ||
      __builtin_add_overflow(offset, info.bytes, &end) || end > capacity) {
    st = fail(v, err, FDY_ERR_PLAN_SLOT_TOO_SMALL, index, id, weight,
              "weight '%s' (%llu bytes) at offset %llu does not fit buffer %u "
              "(%llu bytes) at an aligned offset",
              info.name, (unsigned long long)info.bytes,
              (unsigned long long)offset, id, (unsigned long long)capacity);
    if (err != NULL) {
      err->expected = capacity;
      err->actual =
          offset > UINT64_MAX - info.bytes ? UINT64_MAX : offset + info.bytes;
    }
    return st;
  }
  prepare_issue(v, stream);
  const access *busy = unordered_access(v, id, offset, end);
  if (busy != NULL) {
    return fail(v, err, FDY_ERR_PLAN_SLOT_BUSY, index, id, busy->event,
                "buffer %u is overwritten on stream %u before event %u of "
                "earlier work on the same bytes is ordered before it",
                id, stream, busy->event);
  }
  st = check_new_event(v, err, index, event);
  if (st != FDY_OK) {
    return st;
  }
  issue_signal(v, stream, event);
  uint64_t *counter =
      is_setup(v) ? &v->summary.setup_transfer_bytes : &v->run_transfer_bytes;
  if (__builtin_add_overflow(*counter, info.bytes, counter)) {
    return fail(v, err, FDY_ERR_OVERFLOW, index, weight, -1,
                "transfer bytes overflow 64 bits");
  }
  return log_access(v, id, (access){offset, end, event, weight, true}, err);
}

/* Where a tensor with a placement lives: buffer id and byte range. */
static fdy_status placed_range(validator *v, fdy_error *err, size_t index,
                               uint32_t tensor, const fdy_tensor_info *info,
                               uint32_t *buffer, uint64_t *begin,
                               uint64_t *end) {
  fdy_placement p = v->plan->placements[tensor];
  *buffer = p.buffer.v;
  *begin = p.offset;
  *end = p.offset + info->bytes; /* checked by check_placements */
  if (!v->buffers[p.buffer.v].live) {
    return fail(v, err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, p.buffer.v,
                tensor,
                "tensor '%s' lives in buffer %u, which is not allocated",
                info->name, p.buffer.v);
  }
  return FDY_OK;
}

/* A read of a placed tensor: its latest write in this run (required for
 * activations and inputs) ordered before, and its bytes not overwritten
 * since by another tensor. */
static fdy_status check_placed_read(validator *v, fdy_error *err, size_t index,
                                    uint32_t tensor,
                                    const fdy_tensor_info *info,
                                    uint32_t *buffer, uint64_t *begin,
                                    uint64_t *end) {
  fdy_status st = placed_range(v, err, index, tensor, info, buffer, begin, end);
  if (st != FDY_OK) {
    return st;
  }
  bool must_be_written = info->role != FDY_TENSOR_STATE;
  if ((must_be_written && !v->tensor_written[tensor]) ||
      (v->tensor_written[tensor] &&
       !covers(v, v->issue_clock, v->tensor_write[tensor]))) {
    st = fail(v, err, FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, index, tensor,
              info->producer,
              "'%s' is read before its %s in this run is ordered before the "
              "read",
              info->name,
              info->role == FDY_TENSOR_INPUT ? "copy_input" : "producer");
    return st;
  }
  const access *clobber = clobbering_write(v, *buffer, *begin, *end, tensor);
  if (clobber != NULL) {
    st = fail(v, err, FDY_ERR_PLAN_PLACEMENT_HAZARD, index, tensor,
              clobber->tensor,
              "'%s' is read after tensor %u overwrote its bytes in buffer %u",
              info->name, clobber->tensor, *buffer);
    return st;
  }
  return FDY_OK;
}

/* A write of a placed tensor: every earlier access of its bytes ordered
 * before the writer. */
static fdy_status check_placed_write(validator *v, fdy_error *err, size_t index,
                                     uint32_t tensor,
                                     const fdy_tensor_info *info,
                                     uint32_t *buffer, uint64_t *begin,
                                     uint64_t *end) {
  fdy_status st = placed_range(v, err, index, tensor, info, buffer, begin, end);
  if (st != FDY_OK) {
    return st;
  }
  const access *busy = unordered_access(v, *buffer, *begin, *end);
  if (busy != NULL) {
    st =
        fail(v, err, FDY_ERR_PLAN_PLACEMENT_HAZARD, index, tensor, busy->tensor,
             "'%s' is written while an access of tensor %u to the same "
             "bytes (event %u) is not ordered before it",
             info->name, busy->tensor, busy->event);
    return st;
  }
  return FDY_OK;
}

static fdy_status do_copy(validator *v, size_t index, const fdy_command *c,
                          fdy_error *err) {
  bool input = c->kind == FDY_CMD_COPY_INPUT;
  uint32_t tensor = c->u.copy.tensor.v;
  uint32_t stream = c->u.copy.stream.v;
  uint32_t event = c->u.copy.signal.v;
  if (!is_step(v)) {
    return misplaced_command(v, err, index, c);
  }
  if (tensor >= v->tensor_count) {
    return unknown_id(v, err, index, "tensor", tensor,
                      (uint32_t)v->tensor_count);
  }
  fdy_status st = check_stream_event(v, err, index, stream, event);
  if (st != FDY_OK) {
    return st;
  }
  fdy_tensor_info info;
  st = tensor_of(v, tensor, &info, err);
  if (st != FDY_OK) {
    return st;
  }
  bool allowed = input ? info.role == FDY_TENSOR_INPUT
                       : v->plan->placements[tensor].buffer.v != FDY_NO_BUFFER;
  if (!allowed) {
    st = fail(v, err, FDY_ERR_PLAN_PLACEMENT, index, tensor, -1,
              "%s of '%s', a %s: copy_input takes inputs, copy_output "
              "placed tensors",
              fdy_command_kind_name(c->kind), info.name,
              fdy_tensor_role_name(info.role));
    return st;
  }
  prepare_issue(v, stream);
  uint32_t buffer;
  uint64_t begin, end;
  st = input ? check_placed_write(v, err, index, tensor, &info, &buffer, &begin,
                                  &end)
             : check_placed_read(v, err, index, tensor, &info, &buffer, &begin,
                                 &end);
  if (st != FDY_OK) {
    return st;
  }
  st = check_new_event(v, err, index, event);
  if (st != FDY_OK) {
    return st;
  }
  issue_signal(v, stream, event);
  if (input) {
    v->tensor_written[tensor] = true;
    v->tensor_write[tensor] = event;
  }
  return log_access(v, buffer, (access){begin, end, event, tensor, input}, err);
}

static fdy_status do_wait(validator *v, size_t index, const fdy_command *c,
                          fdy_error *err) {
  uint32_t event = c->u.wait.event.v;
  if (event >= v->plan->event_count) {
    return unknown_id(v, err, index, "event", event, v->plan->event_count);
  }
  if (!c->u.wait.host && c->u.wait.stream.v >= v->streams) {
    return unknown_id(v, err, index, "stream", c->u.wait.stream.v, v->streams);
  }
  uint32_t signalled = v->event_signal[event];
  if (signalled == 0) {
    return fail(v, err, FDY_ERR_PLAN_EVENT_NOT_SIGNALLED, index, event, -1,
                "wait on event %u, which no earlier command of this section "
                "signals",
                event);
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

static fdy_status binding_mismatch(validator *v, fdy_error *err, size_t index,
                                   uint32_t op, uint32_t weight, uint64_t want,
                                   uint64_t got, const char *what) {
  fdy_status st = fail(v, err, FDY_ERR_PLAN_BINDING_MISMATCH, index, op, weight,
                       "launch of op %u: weight %u %s", op, weight, what);
  if (err != NULL) {
    err->expected = want;
    err->actual = got;
  }
  return st;
}

/* The weight an operand reads (itself or the weight it views), or NONE. */
static uint32_t weight_of_operand(const fdy_tensor_info *info, uint32_t id) {
  if (info->role == FDY_TENSOR_WEIGHT) {
    return id;
  }
  if (info->role == FDY_TENSOR_WEIGHT_VIEW) {
    return (uint32_t)info->weight;
  }
  return NONE;
}

/* Bindings are exactly the weights the op reads, each once, each where the
 * latest transfer of that weight into the buffer put it, ordered before. */
static fdy_status check_bindings(validator *v, size_t index,
                                 const fdy_command *c, const fdy_op_info *op,
                                 fdy_error *err) {
  uint32_t op_id = c->u.launch.op.v;
  uint32_t count = c->u.launch.binding_count;
  const fdy_binding *b = c->u.launch.bindings;
  uint32_t needed[FDY_OP_MAX_INPUTS];
  uint32_t needed_count = 0;
  for (size_t i = 0; i < op->read_count; i++) {
    fdy_tensor_info info;
    fdy_status st = tensor_of(v, op->reads[i].v, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    uint32_t w = weight_of_operand(&info, op->reads[i].v);
    bool seen = w == NONE;
    for (uint32_t j = 0; j < needed_count && !seen; j++) {
      seen = needed[j] == w;
    }
    if (!seen) {
      needed[needed_count++] = w;
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    bool wanted = false;
    for (uint32_t j = 0; j < needed_count; j++) {
      wanted = wanted || needed[j] == b[i].weight.v;
    }
    if (!wanted) {
      return binding_mismatch(v, err, index, op_id, b[i].weight.v, needed_count,
                              count, "is bound but the op does not read it");
    }
    for (uint32_t j = 0; j < i; j++) {
      if (b[j].weight.v == b[i].weight.v) {
        return binding_mismatch(v, err, index, op_id, b[i].weight.v,
                                needed_count, count, "is bound more than once");
      }
    }
  }
  for (uint32_t j = 0; j < needed_count; j++) {
    bool bound = false;
    for (uint32_t i = 0; i < count; i++) {
      bound = bound || b[i].weight.v == needed[j];
    }
    if (!bound) {
      return binding_mismatch(v, err, index, op_id, needed[j], needed_count,
                              count, "is read by the op but not bound");
    }
  }
  for (uint32_t i = 0; i < count; i++) {
    buffer_state *buf = &v->buffers[b[i].buffer.v];
    if (!buf->live) {
      return fail(v, err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, b[i].buffer.v,
                  b[i].weight.v,
                  "launch of op %u binds buffer %u, which is not allocated",
                  op_id, b[i].buffer.v);
    }
    fdy_tensor_info info;
    fdy_status st = tensor_of(v, b[i].weight.v, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    uint64_t begin = b[i].offset;
    uint64_t end = begin + info.bytes;
    const access *latest =
        end >= begin ? latest_write(v, b[i].buffer.v, begin, end) : NULL;
    if (latest == NULL || latest->tensor != b[i].weight.v ||
        latest->begin != begin || latest->end != end) {
      return binding_mismatch(v, err, index, op_id, b[i].weight.v,
                              latest ? latest->begin : 0, begin,
                              "is bound where the latest transfer put another "
                              "weight, another offset, or nothing");
    }
    if (!covers(v, v->issue_clock, latest->event)) {
      return fail(v, err, FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, index,
                  b[i].buffer.v, latest->event,
                  "launch of op %u is not ordered after transfer event %u "
                  "into buffer %u",
                  op_id, latest->event, b[i].buffer.v);
    }
  }
  return FDY_OK;
}

/* True when the op's kind updates input `i` in place (state). */
static bool mutates_input(fdy_op_kind kind, size_t i) {
  return (fdy_op_row_of(kind)->inputs[i].flags & FDY_OPERAND_STATE) != 0;
}

/* The checks of a launch that need no op info: it stands in the step, names
 * a known op, stream, event, tensors and buffers in its bindings, keeps
 * within FDY_MAX_BINDINGS, and comes after the run's last launched op. */
static fdy_status check_launch_ids(validator *v, size_t index,
                                   const fdy_command *c, fdy_error *err) {
  uint32_t op_id = c->u.launch.op.v;
  if (!is_step(v)) {
    return misplaced_command(v, err, index, c);
  }
  if (op_id >= v->op_count) {
    return unknown_id(v, err, index, "op", op_id, (uint32_t)v->op_count);
  }
  fdy_status st = check_stream_event(v, err, index, c->u.launch.stream.v,
                                     c->u.launch.signal.v);
  if (st != FDY_OK) {
    return st;
  }
  if (c->u.launch.binding_count > FDY_MAX_BINDINGS) {
    return fail(v, err, FDY_ERR_PLAN_BINDING_MISMATCH, index, op_id, -1,
                "launch has %u bindings, above the limit %d",
                c->u.launch.binding_count, FDY_MAX_BINDINGS);
  }
  for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
    const fdy_binding *b = &c->u.launch.bindings[i];
    if (b->weight.v >= v->tensor_count) {
      return unknown_id(v, err, index, "tensor", b->weight.v,
                        (uint32_t)v->tensor_count);
    }
    if (b->buffer.v >= v->plan->buffer_count) {
      return unknown_id(v, err, index, "buffer", b->buffer.v,
                        v->plan->buffer_count);
    }
  }
  if ((int64_t)op_id <= v->last_op) {
    return fail(v, err, FDY_ERR_PLAN_OP_ORDER, index, op_id, v->last_op,
                "op %u is launched after op %lld in this run: ops run in "
                "increasing graph order, each once",
                op_id, (long long)v->last_op);
  }
  return FDY_OK;
}

/* The byte ranges one launch reads and writes, each with its buffer. */
typedef struct {
  access reads[FDY_OP_MAX_INPUTS + FDY_MAX_BINDINGS];
  uint32_t read_buffers[FDY_OP_MAX_INPUTS + FDY_MAX_BINDINGS];
  size_t read_count;
  access writes[FDY_OP_MAX_OUTPUTS];
  uint32_t write_buffers[FDY_OP_MAX_OUTPUTS];
} launch_access;

/* Fills a->reads with the launch's bound weights, then the op's placed
 * operands (weights skipped); an operand the op mutates must also be a
 * placed write. */
static fdy_status launch_reads(validator *v, size_t index, const fdy_command *c,
                               const fdy_op_info *op, launch_access *a,
                               fdy_error *err) {
  uint32_t event = c->u.launch.signal.v;
  fdy_status st;
  a->read_count = 0;
  for (uint32_t i = 0; i < c->u.launch.binding_count; i++) {
    const fdy_binding *b = &c->u.launch.bindings[i];
    fdy_tensor_info info;
    st = tensor_of(v, b->weight.v, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    a->read_buffers[a->read_count] = b->buffer.v;
    a->reads[a->read_count++] =
        (access){b->offset, b->offset + info.bytes, event, b->weight.v, false};
  }
  for (size_t i = 0; i < op->read_count; i++) {
    fdy_tensor_info info;
    st = tensor_of(v, op->reads[i].v, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    if (info.role == FDY_TENSOR_WEIGHT || info.role == FDY_TENSOR_WEIGHT_VIEW) {
      continue;
    }
    uint32_t buffer;
    uint64_t begin, end;
    st = check_placed_read(v, err, index, op->reads[i].v, &info, &buffer,
                           &begin, &end);
    if (st == FDY_OK && mutates_input(op->kind, i)) {
      st = check_placed_write(v, err, index, op->reads[i].v, &info, &buffer,
                              &begin, &end);
    }
    if (st != FDY_OK) {
      return st;
    }
    a->read_buffers[a->read_count] = buffer;
    a->reads[a->read_count++] =
        (access){begin, end, event, op->reads[i].v, mutates_input(op->kind, i)};
  }
  return FDY_OK;
}

/* Fills a->writes with the op's placed outputs; an output over the bytes of
 * one of the launch's reads is a placement hazard. */
static fdy_status launch_writes(validator *v, size_t index,
                                const fdy_command *c, const fdy_op_info *op,
                                launch_access *a, fdy_error *err) {
  for (size_t i = 0; i < op->write_count; i++) {
    fdy_tensor_info info;
    fdy_status st = tensor_of(v, op->writes[i].v, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    uint64_t begin, end;
    st = check_placed_write(v, err, index, op->writes[i].v, &info,
                            &a->write_buffers[i], &begin, &end);
    if (st != FDY_OK) {
      return st;
    }
    a->writes[i] =
        (access){begin, end, c->u.launch.signal.v, op->writes[i].v, true};
    for (size_t k = 0; k < a->read_count; k++) {
      if (a->read_buffers[k] == a->write_buffers[i] &&
          overlaps(&a->reads[k], begin, end)) {
        return fail(v, err, FDY_ERR_PLAN_PLACEMENT_HAZARD, index,
                    op->writes[i].v, a->reads[k].tensor,
                    "op %u writes '%s' over the bytes of its own operand "
                    "(tensor %u)",
                    c->u.launch.op.v, info.name, a->reads[k].tensor);
      }
    }
  }
  return FDY_OK;
}

/* Logs the launch's accesses on its buffers and marks the tensors it writes
 * (mutated operands and outputs) as written by its event. */
static fdy_status record_launch(validator *v, uint32_t event,
                                const fdy_op_info *op, const launch_access *a,
                                fdy_error *err) {
  fdy_status st = FDY_OK;
  for (size_t i = 0; i < a->read_count && st == FDY_OK; i++) {
    st = log_access(v, a->read_buffers[i], a->reads[i], err);
    if (a->reads[i].write) {
      v->tensor_written[a->reads[i].tensor] = true;
      v->tensor_write[a->reads[i].tensor] = event;
    }
  }
  for (size_t i = 0; i < op->write_count && st == FDY_OK; i++) {
    st = log_access(v, a->write_buffers[i], a->writes[i], err);
    v->tensor_written[a->writes[i].tensor] = true;
    v->tensor_write[a->writes[i].tensor] = event;
  }
  return st;
}

/* A launch: its ids, its bindings against the op, its reads and writes
 * placed and free of hazards, a new event signalled on its stream; then its
 * accesses logged and the op marked launched. */
static fdy_status do_launch(validator *v, size_t index, const fdy_command *c,
                            fdy_error *err) {
  uint32_t op_id = c->u.launch.op.v;
  uint32_t stream = c->u.launch.stream.v;
  uint32_t event = c->u.launch.signal.v;
  fdy_status st = check_launch_ids(v, index, c, err);
  if (st != FDY_OK) {
    return st;
  }
  fdy_op_info op;
  st = fdy_graph_op(v->graph, c->u.launch.op, &op, err);
  if (st != FDY_OK) {
    return st;
  }
  prepare_issue(v, stream);
  st = check_bindings(v, index, c, &op, err);
  if (st != FDY_OK) {
    return st;
  }
  launch_access a;
  st = launch_reads(v, index, c, &op, &a, err);
  if (st == FDY_OK) {
    st = launch_writes(v, index, c, &op, &a, err);
  }
  if (st == FDY_OK) {
    st = check_new_event(v, err, index, event);
  }
  if (st != FDY_OK) {
    return st;
  }
  issue_signal(v, stream, event);
  st = record_launch(v, event, &op, &a, err);
  v->last_op = op_id;
  v->op_launched[op_id] = true;
  return st;
}

static fdy_status do_release(validator *v, size_t index, const fdy_command *c,
                             fdy_error *err) {
  uint32_t id = c->u.release.buffer.v;
  if (!is_teardown(v)) {
    return misplaced_command(v, err, index, c);
  }
  if (id >= v->plan->buffer_count) {
    return unknown_id(v, err, index, "buffer", id, v->plan->buffer_count);
  }
  buffer_state *buf = &v->buffers[id];
  if (!buf->live) {
    return fail(v, err, FDY_ERR_PLAN_SLOT_NOT_ALLOCATED, index, id, -1,
                "release of buffer %u, which is not allocated", id);
  }
  buf->live = false;
  v->live_weight_bytes -= weight_bytes_of(&v->plan->buffers[id]);
  return FDY_OK;
}

/* Every event signalled in the section observed by the host. */
static fdy_status check_section_end(validator *v, size_t index,
                                    fdy_error *err) {
  for (size_t sig = 0; sig < v->signal_count; sig++) {
    uint32_t event = v->signal_event[sig];
    if (!covers(v, v->host_clock, event)) {
      return fail(v, err, FDY_ERR_PLAN_UNSYNCHRONIZED_END, index, event, -1,
                  "end of section '%s': the host never observes event %u",
                  v->section, event);
    }
  }
  return FDY_OK;
}

static fdy_status check_plan_end(validator *v, fdy_error *err) {
  size_t index = v->plan->command_count;
  v->section = NULL;
  for (uint32_t id = 0; id < v->plan->buffer_count; id++) {
    if (v->buffers[id].live) {
      return fail(v, err, FDY_ERR_PLAN_UNRELEASED_END, index, id, -1,
                  "end of plan: buffer %u is never released", id);
    }
  }
  for (size_t op = 0; op < v->op_count; op++) {
    if (!v->op_launched[op]) {
      fdy_status st =
          fail(v, err, FDY_ERR_PLAN_INCOMPLETE, index, (int64_t)op, -1,
               "end of plan: op %zu is never launched by any step", op);
      if (err != NULL) {
        err->expected = v->op_count;
      }
      return st;
    }
  }
  return FDY_OK;
}

/* ---- static checks
 * ----------------------------------------------------------- */

static fdy_status check_sections(validator *v, fdy_error *err) {
  const fdy_plan *p = v->plan;
  if (p->section_count < 2 ||
      strcmp(p->sections[p->section_count - 1].name, "teardown") != 0) {
    return fail(v, err, FDY_ERR_PLAN_SECTION_COMMAND, p->command_count, -1, -1,
                "a plan needs sections setup, its steps and teardown last");
  }
  for (size_t i = 0; i < p->section_count; i++) {
    for (size_t j = 0; j < i; j++) {
      if (strcmp(p->sections[i].name, p->sections[j].name) == 0) {
        fdy_status st =
            fail(v, err, FDY_ERR_PLAN_SECTION_COMMAND, p->sections[i].first,
                 (int64_t)i, (int64_t)j, "section name '%s' is used twice",
                 p->sections[i].name);
        return st;
      }
    }
  }
  return FDY_OK;
}

static fdy_buffer_class class_for(fdy_tensor_role role) {
  switch (role) {
  case FDY_TENSOR_ACTIVATION:
    return FDY_BUFFER_ARENA;
  case FDY_TENSOR_STATE:
    return FDY_BUFFER_STATE;
  case FDY_TENSOR_INPUT:
    return FDY_BUFFER_IO;
  default:
    return FDY_BUFFER_CLASS_COUNT; /* weights have no placement */
  }
}

/* State and inputs are live across a whole run (state across runs), so
 * two of them may never share bytes. */
static fdy_status check_persistent_overlaps(validator *v, fdy_error *err) {
  for (size_t a = 0; a < v->tensor_count; a++) {
    fdy_tensor_info ta;
    fdy_status st = tensor_of(v, (uint32_t)a, &ta, err);
    if (st != FDY_OK) {
      return st;
    }
    if (ta.role != FDY_TENSOR_STATE && ta.role != FDY_TENSOR_INPUT) {
      continue;
    }
    fdy_placement pa = v->plan->placements[a];
    for (size_t b = 0; b < a; b++) {
      fdy_tensor_info tb;
      st = tensor_of(v, (uint32_t)b, &tb, err);
      if (st != FDY_OK) {
        return st;
      }
      fdy_placement pb = v->plan->placements[b];
      if (tb.role != ta.role || pb.buffer.v != pa.buffer.v ||
          pb.offset >= pa.offset + ta.bytes ||
          pa.offset >= pb.offset + tb.bytes) {
        continue;
      }
      fdy_error_set(err, FDY_ERR_PLAN_PLACEMENT_HAZARD,
                    "%s tensors '%s' and '%s' share bytes of buffer %u",
                    fdy_tensor_role_name(ta.role), tb.name, ta.name,
                    pa.buffer.v);
      if (err != NULL) {
        err->ids[0] = (int64_t)b;
        err->ids[1] = (int64_t)a;
        snprintf(err->name, sizeof(err->name), "%s", ta.name);
      }
      return FDY_ERR_PLAN_PLACEMENT_HAZARD;
    }
  }
  return FDY_OK;
}

static fdy_status check_placements(validator *v, fdy_error *err) {
  for (size_t t = 0; t < v->tensor_count; t++) {
    fdy_tensor_info info;
    fdy_status st = tensor_of(v, (uint32_t)t, &info, err);
    if (st != FDY_OK) {
      return st;
    }
    fdy_placement p = v->plan->placements[t];
    fdy_buffer_class want = class_for(info.role);
    bool placed = p.buffer.v != FDY_NO_BUFFER;
    const char *problem = NULL;
    uint64_t end = 0;
    if (want == FDY_BUFFER_CLASS_COUNT) {
      if (placed) {
        /* bindings place a weight: a placement of its own is an error */
        fdy_error_set(err, FDY_ERR_PLAN_PLACEMENT,
                      "tensor %zu ('%s', %s, %llu bytes) is placed at buffer "
                      "%u offset %llu: a weight takes no placement (bindings "
                      "place it)",
                      t, info.name, fdy_tensor_role_name(info.role),
                      (unsigned long long)info.bytes, p.buffer.v,
                      (unsigned long long)p.offset);
        problem = "";
      }
    } else if (!placed) {
      fdy_error_set(err, FDY_ERR_PLAN_PLACEMENT,
                    "tensor %zu ('%s', %s, %llu bytes) has no placement (it "
                    "belongs in a%s %s buffer)",
                    t, info.name, fdy_tensor_role_name(info.role),
                    (unsigned long long)info.bytes,
                    want == FDY_BUFFER_ARENA ? "n" : "",
                    fdy_buffer_class_name(want));
      problem = "";
    } else if (p.buffer.v >= v->plan->buffer_count) {
      fdy_error_set(err, FDY_ERR_PLAN_UNKNOWN_ID,
                    "tensor %zu ('%s') is placed in buffer %u; the plan has "
                    "%u buffers",
                    t, info.name, p.buffer.v, v->plan->buffer_count);
      if (err != NULL) {
        err->ids[0] = (int64_t)t;
        err->ids[1] = p.buffer.v;
        snprintf(err->name, sizeof(err->name), "%s", info.name);
      }
      return FDY_ERR_PLAN_UNKNOWN_ID;
    } else if (v->plan->buffers[p.buffer.v].cls != want) {
      problem = "its buffer is of the wrong class";
    } else if (p.offset % FDY_TENSOR_ALIGNMENT != 0) {
      problem = "its offset is not aligned";
    } else if (__builtin_add_overflow(p.offset, info.bytes, &end) ||
               end > v->plan->buffers[p.buffer.v].bytes) {
      problem = "it does not fit its buffer";
    }
    if (problem != NULL) {
      if (problem[0] != '\0') {
        fdy_error_set(err, FDY_ERR_PLAN_PLACEMENT,
                      "tensor %zu ('%s', %s, %llu bytes) at buffer %u offset "
                      "%llu: %s (it belongs in a%s %s buffer)",
                      t, info.name, fdy_tensor_role_name(info.role),
                      (unsigned long long)info.bytes, p.buffer.v,
                      (unsigned long long)p.offset, problem,
                      want == FDY_BUFFER_ARENA ? "n" : "",
                      fdy_buffer_class_name(want));
      }
      if (err != NULL) {
        err->ids[0] = (int64_t)t;
        err->ids[1] = placed ? (int64_t)p.buffer.v : -1;
        snprintf(err->name, sizeof(err->name), "%s", info.name);
      }
      return FDY_ERR_PLAN_PLACEMENT;
    }
  }
  return check_persistent_overlaps(v, err);
}

static fdy_status run_command(validator *v, size_t i, fdy_error *err) {
  const fdy_command *c = &v->plan->commands[i];
  switch (c->kind) {
  case FDY_CMD_ALLOCATE:
    return do_allocate(v, i, c, err);
  case FDY_CMD_PREFETCH:
    return do_prefetch(v, i, c, err);
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    return do_copy(v, i, c, err);
  case FDY_CMD_WAIT:
    return do_wait(v, i, c, err);
  case FDY_CMD_LAUNCH:
    return do_launch(v, i, c, err);
  case FDY_CMD_RELEASE:
    return do_release(v, i, c, err);
  case FDY_CMD_KIND_COUNT:
    break;
  }
  return fail(v, err, FDY_ERR_INVALID_ARGUMENT, i, -1, -1,
              "unknown command kind %d", (int)c->kind);
}

static fdy_status run_sections(validator *v, fdy_error *err) {
  const fdy_plan *p = v->plan;
  fdy_status st = FDY_OK;
  for (size_t s = 0; st == FDY_OK && s < p->section_count; s++) {
    const fdy_section *sec = &p->sections[s];
    v->section_index = s;
    v->section = sec->name;
    start_section(v);
    for (size_t i = sec->first; st == FDY_OK && i < sec->first + sec->count;
         i++) {
      st = run_command(v, i, err);
    }
    if (st == FDY_OK) {
      st = check_section_end(v, sec->first + sec->count, err);
    }
    if (st == FDY_OK &&
        v->run_transfer_bytes > v->summary.step_transfer_bytes) {
      v->summary.step_transfer_bytes = v->run_transfer_bytes;
    }
  }
  return st;
}

fdy_status fdy_plan_validate(const fdy_plan *plan, fdy_plan_summary *summary,
                             fdy_error *err) {
  return fdy_plan_validate_counted(plan, summary, NULL, err);
}

fdy_status fdy_plan_validate_counted(const fdy_plan *plan,
                                     fdy_plan_summary *summary,
                                     uint64_t *log_visits, fdy_error *err) {
  validator v;
  if (log_visits != NULL) {
    *log_visits = 0;
  }
  if (plan == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan validation needs a plan");
  }
  fdy_status st = fdy_graph_validate(plan->graph, err);
  if (st != FDY_OK) {
    return st;
  }
  st = validator_init(&v, plan, err);
  if (st == FDY_OK) {
    st = check_sections(&v, err);
  }
  if (st == FDY_OK) {
    st = check_placements(&v, err);
  }
  if (st == FDY_OK) {
    st = run_sections(&v, err);
  }
  if (st == FDY_OK) {
    st = check_plan_end(&v, err);
  }
  if (st == FDY_OK && summary != NULL) {
    v.summary.commands = plan->command_count;
    v.summary.ops = v.op_count;
    for (uint32_t s = 0; s < v.streams; s++) {
      v.summary.streams += v.stream_used[s] ? 1 : 0;
    }
    *summary = v.summary;
  }
  if (log_visits != NULL) {
    *log_visits = v.log_visits;
  }
  validator_free(&v);
  return st;
}
