/* The planner (fdy_plan_build in plan.h): chooses per weight between
 * resident and streamed under the weight budget, lays out the arena, state
 * and io buffers, and emits setup, one section per step and teardown.
 *
 * Streaming is N-buffered: the streamed weights of a step flow through a
 * ring of N equal slots filled on the copy stream. A slot is refilled as
 * soon as the launch that last reads its weight is queued, the copy stream
 * waiting for that launch's event, so with N >= 2 the transfer of later
 * weights overlaps the compute of earlier ops and no host wait is needed
 * before the end of the step. */
#include "plan_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNUSED_WEIGHT UINT32_MAX

typedef struct live_block {
  uint64_t offset, bytes;
  size_t last_use; /* position in the step of the last reader */
} live_block;

typedef struct planner {
  const fdy_graph *graph;
  const fdy_plan_step *steps;
  size_t step_count;
  uint64_t alignment;
  uint32_t buffers_wanted;
  size_t tensor_count, op_count;
  fdy_tensor_info *tensors; /* by tensor id */
  /* weights */
  uint32_t *first_use;   /* weight -> global op index of first use */
  bool *resident;        /* weight -> resident */
  uint64_t *resident_at; /* weight -> offset in the resident buffer */
  uint64_t resident_bytes;
  uint64_t slot_bytes;
  uint32_t slots;
  /* buffer ids (FDY_NO_BUFFER when absent) */
  uint32_t resident_buffer, first_slot, arena, state, io;
  uint64_t arena_bytes, state_bytes, io_bytes;
  fdy_placement *placements;
  /* emission */
  fdy_plan *plan;
  uint32_t next_event;
  fdy_status st;
  fdy_error *err;
} planner;

static fdy_status oom(fdy_error *err) {
  return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory planning");
}

static fdy_status align(const planner *p, uint64_t bytes, uint64_t *out) {
  return fdy_align_up(bytes, p->alignment, out, p->err);
}

/* The weight an operand reads (itself or the weight it views), or
 * UNUSED_WEIGHT. */
static uint32_t weight_of(const planner *p, fdy_tensor_id id) {
  const fdy_tensor_info *t = &p->tensors[id.v];
  if (t->role == FDY_TENSOR_WEIGHT) {
    return id.v;
  }
  if (t->role == FDY_TENSOR_WEIGHT_VIEW) {
    return (uint32_t)t->weight;
  }
  return UNUSED_WEIGHT;
}

static fdy_status check_steps(planner *p) {
  if (p->step_count == 0 || p->steps == NULL) {
    return fdy_error_set(p->err, FDY_ERR_INVALID_ARGUMENT,
                         "a plan needs at least one step");
  }
  bool *seen = calloc(p->op_count + 1, sizeof(bool));
  if (seen == NULL) {
    return oom(p->err);
  }
  fdy_status st = FDY_OK;
  for (size_t s = 0; s < p->step_count && st == FDY_OK; s++) {
    const fdy_plan_step *step = &p->steps[s];
    for (size_t i = 0; i < step->op_count && st == FDY_OK; i++) {
      uint32_t op = step->ops[i].v;
      if (op >= p->op_count || seen[op] ||
          (i > 0 && op <= step->ops[i - 1].v)) {
        st = fdy_error_set(p->err, FDY_ERR_INVALID_ARGUMENT,
                           "step '%s' lists op %u out of graph order, twice, "
                           "or beyond the graph's %zu ops",
                           step->name, op, p->op_count);
      } else {
        seen[op] = true;
      }
    }
    for (size_t i = 0; i < step->output_count && st == FDY_OK; i++) {
      uint32_t t = step->outputs[i].v;
      fdy_tensor_role role =
          t < p->tensor_count ? p->tensors[t].role : FDY_TENSOR_WEIGHT;
      if (role == FDY_TENSOR_WEIGHT || role == FDY_TENSOR_WEIGHT_VIEW) {
        st = fdy_error_set(p->err, FDY_ERR_INVALID_ARGUMENT,
                           "step '%s' output %u is not an activation, state "
                           "or input tensor",
                           step->name, t);
      }
    }
  }
  free(seen);
  return st;
}

/* ---- weights: resident or streamed
 * ------------------------------------------ */

/* A weight in the residency order: higher priority first, then earlier
 * first use (position in the order of first use). */
typedef struct ranked_weight {
  uint32_t weight;
  uint32_t priority;
  size_t position;
  uint64_t bytes; /* aligned */
} ranked_weight;

static int by_residency_order(const void *a, const void *b) {
  const ranked_weight *x = a, *y = b;
  if (x->priority != y->priority) {
    return x->priority > y->priority ? -1 : 1;
  }
  return x->position < y->position ? -1 : x->position > y->position;
}

/* prefix + slots * slot_bytes, or UINT64_MAX when it overflows. */
static uint64_t split_cost(uint64_t prefix, uint32_t slots,
                           uint64_t slot_bytes) {
  uint64_t ring = 0, cost = 0;
  if (__builtin_mul_overflow(slot_bytes, (uint64_t)slots, &ring) ||
      __builtin_add_overflow(prefix, ring, &cost)) {
    return UINT64_MAX;
  }
  return cost;
}

/* The weights read by the steps' ops, in order of first use, with their
 * aligned bytes; *total their sum. */
static fdy_status rank_weights(planner *p, ranked_weight *ranked, size_t *used,
                               uint64_t *total) {
  *used = 0;
  *total = 0;
  fdy_status st = FDY_OK;
  for (size_t o = 0; o < p->op_count && st == FDY_OK; o++) {
    fdy_op_info op;
    st = fdy_graph_op(p->graph, (fdy_op_id){(uint32_t)o}, &op, p->err);
    for (size_t i = 0; st == FDY_OK && i < op.read_count; i++) {
      uint32_t w = weight_of(p, op.reads[i]);
      if (w == UNUSED_WEIGHT || p->first_use[w] != UNUSED_WEIGHT) {
        continue;
      }
      uint64_t bytes = 0;
      st = align(p, p->tensors[w].bytes, &bytes);
      if (st == FDY_OK) {
        st = fdy_add_u64(*total, bytes, total, p->err);
      }
      p->first_use[w] = (uint32_t)o;
      ranked[*used] =
          (ranked_weight){.weight = w,
                          .priority = p->tensors[w].residency_priority,
                          .position = *used,
                          .bytes = bytes};
      (*used)++;
    }
  }
  if (st == FDY_OK && *used > 1) {
    qsort(ranked, *used, sizeof(*ranked), by_residency_order);
  }
  return st;
}

/* Keeps resident the longest prefix of the residency order that fits the
 * budget together with N slots of the largest weight left to stream (N =
 * min(buffers, weights left)), then each later weight, in order, that
 * still fits beside the prefix and those slots; the slots are sized to the
 * largest weight that streams. When none fits: FDY_ERR_BUDGET naming the
 * smallest budget of any plan (every weight resident, total bytes, or the
 * cheapest prefix with its slots). */
static fdy_status choose_split(planner *p, const ranked_weight *ranked,
                               size_t used, uint64_t total, uint64_t budget) {
  uint64_t *largest_after = malloc((used + 1) * sizeof(uint64_t));
  if (largest_after == NULL) {
    return oom(p->err);
  }
  largest_after[used] = 0;
  for (size_t i = used; i-- > 0;) {
    largest_after[i] = ranked[i].bytes > largest_after[i + 1]
                           ? ranked[i].bytes
                           : largest_after[i + 1];
  }
  int64_t best = -1;
  uint64_t minimum = total, prefix = 0, cheapest_prefix = 0;
  uint32_t cheapest_slots = 0;
  uint64_t cheapest_slot_bytes = 0;
  for (size_t kept = 0; kept < used; kept++) {
    size_t left = used - kept;
    uint32_t slots =
        left < p->buffers_wanted ? (uint32_t)left : p->buffers_wanted;
    uint64_t cost = split_cost(prefix, slots, largest_after[kept]);
    if (cost <= budget) {
      best = (int64_t)kept;
    }
    if (cost < minimum) {
      minimum = cost;
      cheapest_prefix = prefix;
      cheapest_slots = slots;
      cheapest_slot_bytes = largest_after[kept];
    }
    prefix += ranked[kept].bytes; /* at most total: no overflow */
  }
  fdy_status st = FDY_OK;
  if (best < 0) {
    char how[128];
    if (cheapest_slots == 0) {
      snprintf(how, sizeof how, "every weight resident");
    } else {
      snprintf(how, sizeof how, "%llu bytes resident and %u slots of %llu",
               (unsigned long long)cheapest_prefix, cheapest_slots,
               (unsigned long long)cheapest_slot_bytes);
    }
    st = fdy_error_set(p->err, FDY_ERR_BUDGET,
                       "the weight budget of %llu bytes holds neither every "
                       "weight (%llu bytes) nor any split into resident "
                       "weights and up to %u slots for the rest; at least %llu "
                       "bytes are needed (%s)",
                       (unsigned long long)budget, (unsigned long long)total,
                       p->buffers_wanted, (unsigned long long)minimum, how);
    if (p->err != NULL) {
      p->err->expected = budget;
      p->err->actual = minimum;
    }
  } else {
    size_t left = used - (size_t)best;
    uint32_t slots =
        left < p->buffers_wanted ? (uint32_t)left : p->buffers_wanted;
    uint64_t ring = slots * largest_after[best]; /* within the budget */
    uint64_t resident = 0;
    for (size_t i = 0; i < used; i++) {
      /* The prefix, then each later weight that still fits beside the ring
       * (which only shrinks as weights leave the streamed set). */
      uint64_t with = resident + ranked[i].bytes; /* at most total */
      if (i < (size_t)best || (with <= budget && ring <= budget - with)) {
        p->resident[ranked[i].weight] = true;
        resident = with;
      }
    }
    uint32_t streamed = 0;
    for (size_t i = 0; i < used; i++) {
      if (!p->resident[ranked[i].weight]) {
        streamed++;
        p->slot_bytes =
            ranked[i].bytes > p->slot_bytes ? ranked[i].bytes : p->slot_bytes;
      }
    }
    p->slots = streamed < p->buffers_wanted ? streamed : p->buffers_wanted;
  }
  free(largest_after);
  return st;
}

static fdy_status choose_residency(planner *p, uint64_t budget) {
  size_t n = p->tensor_count;
  p->first_use = malloc((n + 1) * sizeof(uint32_t));
  p->resident = calloc(n + 1, sizeof(bool));
  p->resident_at = calloc(n + 1, sizeof(uint64_t));
  if (p->first_use == NULL || p->resident == NULL || p->resident_at == NULL) {
    return oom(p->err);
  }
  for (size_t t = 0; t < n; t++) {
    p->first_use[t] = UNUSED_WEIGHT;
  }
  ranked_weight *ranked = malloc((n + 1) * sizeof(*ranked));
  if (ranked == NULL) {
    return oom(p->err);
  }
  size_t used = 0;
  uint64_t total = 0;
  fdy_status st = rank_weights(p, ranked, &used, &total);
  if (st == FDY_OK && total <= budget) {
    for (size_t i = 0; i < used; i++) {
      p->resident[ranked[i].weight] = true;
    }
  } else if (st == FDY_OK) {
    st = choose_split(p, ranked, used, total, budget);
  }
  /* Resident offsets in the residency order. */
  for (size_t i = 0; st == FDY_OK && i < used; i++) {
    uint32_t w = ranked[i].weight;
    if (p->resident[w]) {
      p->resident_at[w] = p->resident_bytes;
      st = fdy_add_u64(p->resident_bytes, ranked[i].bytes, &p->resident_bytes,
                       p->err);
    }
  }
  free(ranked);
  return st;
}

/* ---- placements
 * -------------------------------------------------------------- */

/* Consecutive aligned offsets for every tensor of `role`. */
static fdy_status place_consecutive(planner *p, fdy_tensor_role role,
                                    uint64_t *bytes) {
  *bytes = 0;
  for (size_t t = 0; t < p->tensor_count; t++) {
    if (p->tensors[t].role != role) {
      continue;
    }
    uint64_t size = 0;
    fdy_status st = align(p, p->tensors[t].bytes, &size);
    if (st != FDY_OK) {
      return st;
    }
    p->placements[t].offset = *bytes;
    st = fdy_add_u64(*bytes, size, bytes, p->err);
    if (st != FDY_OK) {
      return st;
    }
  }
  return FDY_OK;
}

/* Lowest aligned offset where `bytes` fit between the live blocks. */
static uint64_t first_fit(const live_block *live, size_t count,
                          uint64_t bytes) {
  uint64_t offset = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t i = 0; i < count; i++) {
      const live_block *b = &live[i];
      if (b->offset < offset + bytes && offset < b->offset + b->bytes) {
        offset = b->offset + b->bytes;
        moved = true;
      }
    }
  }
  return offset;
}

/* First-fit placement of one step's activations from their lifetimes. */
static fdy_status place_step_arena(planner *p, const fdy_plan_step *step) {
  size_t n = step->op_count;
  size_t *last_use = malloc((p->tensor_count + 1) * sizeof(size_t));
  live_block *live = malloc((p->tensor_count + 1) * sizeof(live_block));
  fdy_status st = last_use && live ? FDY_OK : oom(p->err);
  size_t live_count = 0;
  for (size_t t = 0; st == FDY_OK && t < p->tensor_count; t++) {
    last_use[t] = 0;
  }
  for (size_t j = 0; st == FDY_OK && j < n; j++) {
    fdy_op_info op;
    st = fdy_graph_op(p->graph, step->ops[j], &op, p->err);
    for (size_t i = 0; st == FDY_OK && i < op.read_count; i++) {
      last_use[op.reads[i].v] = j;
    }
    for (size_t i = 0; st == FDY_OK && i < op.write_count; i++) {
      last_use[op.writes[i].v] = j;
    }
  }
  for (size_t i = 0; st == FDY_OK && i < step->output_count; i++) {
    last_use[step->outputs[i].v] = SIZE_MAX;
  }
  for (size_t j = 0; st == FDY_OK && j < n; j++) {
    size_t kept = 0;
    for (size_t i = 0; i < live_count; i++) {
      if (live[i].last_use >= j) {
        live[kept++] = live[i];
      }
    }
    live_count = kept;
    fdy_op_info op;
    st = fdy_graph_op(p->graph, step->ops[j], &op, p->err);
    for (size_t i = 0; st == FDY_OK && i < op.write_count; i++) {
      uint32_t t = op.writes[i].v;
      uint64_t bytes = 0, end = 0;
      st = align(p, p->tensors[t].bytes, &bytes);
      if (st != FDY_OK) {
        break;
      }
      uint64_t offset = first_fit(live, live_count, bytes);
      if (__builtin_add_overflow(offset, bytes, &end)) {
        st = fdy_error_set(p->err, FDY_ERR_OVERFLOW,
                           "the arena of step '%s' overflows 64 bits",
                           step->name);
        break;
      }
      p->placements[t] = (fdy_placement){{p->arena}, offset};
      live[live_count++] = (live_block){offset, bytes, last_use[t]};
      p->arena_bytes = end > p->arena_bytes ? end : p->arena_bytes;
    }
  }
  free(last_use);
  free(live);
  return st;
}

static fdy_status place_tensors(planner *p) {
  p->placements = malloc((p->tensor_count + 1) * sizeof(fdy_placement));
  if (p->placements == NULL) {
    return oom(p->err);
  }
  bool any_activation = false;
  for (size_t t = 0; t < p->tensor_count; t++) {
    p->placements[t] = (fdy_placement){{FDY_NO_BUFFER}, 0};
    any_activation =
        any_activation || p->tensors[t].role == FDY_TENSOR_ACTIVATION;
  }
  fdy_status st = place_consecutive(p, FDY_TENSOR_STATE, &p->state_bytes);
  if (st == FDY_OK) {
    st = place_consecutive(p, FDY_TENSOR_INPUT, &p->io_bytes);
  }
  /* Buffer ids: resident, slots, arena, state, io (those that exist). */
  uint32_t next = 0;
  p->resident_buffer = p->resident_bytes > 0 ? next++ : FDY_NO_BUFFER;
  p->first_slot = next;
  next += p->slots;
  p->arena = any_activation ? next++ : FDY_NO_BUFFER;
  p->state = p->state_bytes > 0 ? next++ : FDY_NO_BUFFER;
  p->io = p->io_bytes > 0 ? next++ : FDY_NO_BUFFER;
  for (size_t t = 0; t < p->tensor_count; t++) {
    if (p->tensors[t].role == FDY_TENSOR_STATE) {
      p->placements[t].buffer.v = p->state;
    } else if (p->tensors[t].role == FDY_TENSOR_INPUT) {
      p->placements[t].buffer.v = p->io;
    }
  }
  for (size_t s = 0; st == FDY_OK && s < p->step_count; s++) {
    st = place_step_arena(p, &p->steps[s]);
  }
  return st;
}

/* ---- emission
 * ---------------------------------------------------------------- */

static void emit(planner *p, const fdy_command *c) {
  if (p->st == FDY_OK) {
    p->st = fdy_plan_append(p->plan, c, p->err);
  }
}

static uint32_t emit_prefetch(planner *p, uint32_t weight, uint32_t buffer,
                              uint64_t offset) {
  fdy_command c = {.kind = FDY_CMD_PREFETCH};
  c.u.prefetch.weight.v = weight;
  c.u.prefetch.buffer.v = buffer;
  c.u.prefetch.offset = offset;
  c.u.prefetch.stream = FDY_STREAM_COPY;
  c.u.prefetch.signal.v = p->next_event++;
  emit(p, &c);
  return c.u.prefetch.signal.v;
}

static void emit_wait(planner *p, uint32_t event, bool host,
                      fdy_stream_id stream) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.host = host;
  c.u.wait.stream = stream;
  emit(p, &c);
}

static uint32_t emit_copy(planner *p, fdy_command_kind kind, uint32_t tensor) {
  fdy_command c = {.kind = kind};
  c.u.copy.tensor.v = tensor;
  c.u.copy.stream = FDY_STREAM_COMPUTE;
  c.u.copy.signal.v = p->next_event++;
  emit(p, &c);
  return c.u.copy.signal.v;
}

static void emit_buffers(planner *p, fdy_command_kind kind) {
  for (uint32_t b = 0; b < fdy_plan_buffer_count(p->plan); b++) {
    fdy_command c = {.kind = kind};
    c.u.allocate.buffer.v = b; /* allocate and release share the layout */
    if (kind == FDY_CMD_RELEASE) {
      c.u.release.buffer.v = b;
    }
    emit(p, &c);
  }
}

static void emit_setup(planner *p) {
  emit_buffers(p, FDY_CMD_ALLOCATE);
  int64_t last = -1;
  for (size_t w = 0; w < p->tensor_count; w++) {
    if (p->resident[w]) {
      last =
          emit_prefetch(p, (uint32_t)w, p->resident_buffer, p->resident_at[w]);
    }
  }
  if (last >= 0) {
    emit_wait(p, (uint32_t)last, true, FDY_STREAM_COPY);
  }
}

/* The loads of one step: each load is one transfer of a streamed weight
 * into slot k mod N, in order. A weight read again while fewer than N
 * loads were made since its latest load reuses it; otherwise (a tied LM
 * head reading the embedding at the end of the step, say) it is loaded
 * again. The same rule run twice (collect, then emit) gives the same
 * assignment. */
typedef struct step_loads {
  uint32_t *weight;   /* load -> weight */
  size_t *last_pos;   /* load -> position of its last reader in the step */
  uint32_t *transfer; /* load -> prefetch event, UINT32_MAX until issued */
  uint32_t *reader;   /* load -> event of its last reader's launch */
  bool *awaited;      /* load -> the compute stream waited for it */
  size_t count;       /* loads of the step */
  int64_t *current;   /* weight -> its latest load, or -1 */
  size_t assigned;    /* loads assigned so far by load_of */
} step_loads;

static void step_loads_free(step_loads *s) {
  free(s->weight);
  free(s->last_pos);
  free(s->transfer);
  free(s->reader);
  free(s->awaited);
  free(s->current);
}

static void step_loads_rewind(step_loads *s, size_t tensors) {
  for (size_t t = 0; t < tensors; t++) {
    s->current[t] = -1;
  }
  s->assigned = 0;
}

/* The load that serves streamed weight w at this point of the step. */
static size_t load_of(const planner *p, step_loads *s, uint32_t w) {
  int64_t k = s->current[w];
  if (k >= 0 && s->assigned - (size_t)k <= p->slots) {
    return (size_t)k;
  }
  s->current[w] = (int64_t)s->assigned;
  return s->assigned++;
}

/* The streamed weights of op `op`, each once, into weights[]. */
static size_t streamed_reads(const planner *p, const fdy_op_info *op,
                             uint32_t weights[FDY_MAX_BINDINGS]) {
  size_t n = 0;
  for (size_t i = 0; i < op->read_count; i++) {
    uint32_t w = weight_of(p, op->reads[i]);
    bool seen = w == UNUSED_WEIGHT || p->resident[w];
    for (size_t k = 0; k < n && !seen; k++) {
      seen = weights[k] == w;
    }
    if (!seen && n < FDY_MAX_BINDINGS) {
      weights[n++] = w;
    }
  }
  return n;
}

static fdy_status collect_loads(planner *p, const fdy_plan_step *step,
                                step_loads *s) {
  memset(s, 0, sizeof(*s));
  size_t cap = step->op_count * FDY_MAX_BINDINGS + 1;
  s->weight = malloc(cap * sizeof(uint32_t));
  s->last_pos = malloc(cap * sizeof(size_t));
  s->transfer = malloc(cap * sizeof(uint32_t));
  s->reader = malloc(cap * sizeof(uint32_t));
  s->awaited = calloc(cap, sizeof(bool));
  s->current = malloc((p->tensor_count + 1) * sizeof(int64_t));
  if (!s->weight || !s->last_pos || !s->transfer || !s->reader || !s->awaited ||
      !s->current) {
    return oom(p->err);
  }
  step_loads_rewind(s, p->tensor_count);
  for (size_t j = 0; j < step->op_count; j++) {
    fdy_op_info op;
    fdy_status st = fdy_graph_op(p->graph, step->ops[j], &op, p->err);
    if (st != FDY_OK) {
      return st;
    }
    uint32_t weights[FDY_MAX_BINDINGS];
    size_t n = streamed_reads(p, &op, weights);
    if (n > p->slots) {
      return fdy_error_set(p->err, FDY_ERR_INVALID_ARGUMENT,
                           "op %u reads %zu streamed weights at once but the "
                           "plan has %u slots",
                           step->ops[j].v, n, p->slots);
    }
    for (size_t b = 0; b < n; b++) {
      size_t k = load_of(p, s, weights[b]);
      s->weight[k] = weights[b];
      s->last_pos[k] = j;
      s->transfer[k] = UINT32_MAX;
    }
  }
  s->count = s->assigned;
  step_loads_rewind(s, p->tensor_count);
  return FDY_OK;
}

static void prefetch_load(planner *p, step_loads *s, size_t k) {
  uint32_t slot = p->first_slot + (uint32_t)(k % p->slots);
  if (k >= p->slots) {
    emit_wait(p, s->reader[k - p->slots], false, FDY_STREAM_COPY);
  }
  s->transfer[k] = emit_prefetch(p, s->weight[k], slot, 0);
}

static fdy_status emit_step(planner *p, const fdy_plan_step *step) {
  step_loads s;
  fdy_status st = collect_loads(p, step, &s);
  if (st == FDY_OK) {
    st = fdy_plan_begin_section(p->plan, step->name, p->err);
  }
  bool *copied = calloc(p->tensor_count + 1, sizeof(bool));
  if (st == FDY_OK && copied == NULL) {
    st = oom(p->err);
  }
  if (st != FDY_OK) {
    free(copied);
    step_loads_free(&s);
    return st;
  }
  int64_t last = -1;
  for (size_t k = 0; k < s.count && k < p->slots; k++) {
    prefetch_load(p, &s, k);
  }
  for (size_t j = 0; p->st == FDY_OK && j < step->op_count; j++) {
    fdy_op_info op;
    p->st = fdy_graph_op(p->graph, step->ops[j], &op, p->err);
    if (p->st != FDY_OK) {
      break;
    }
    fdy_command c = {.kind = FDY_CMD_LAUNCH};
    c.u.launch.op = step->ops[j];
    c.u.launch.stream = FDY_STREAM_COMPUTE;
    for (size_t i = 0; i < op.read_count; i++) {
      uint32_t t = op.reads[i].v;
      if (p->tensors[t].role == FDY_TENSOR_INPUT && !copied[t]) {
        copied[t] = true;
        last = emit_copy(p, FDY_CMD_COPY_INPUT, t);
      }
    }
    size_t loads[FDY_MAX_BINDINGS];
    for (size_t i = 0; i < op.read_count; i++) {
      uint32_t w = weight_of(p, op.reads[i]);
      bool bound = w == UNUSED_WEIGHT;
      for (uint32_t b = 0; b < c.u.launch.binding_count && !bound; b++) {
        bound = c.u.launch.bindings[b].weight.v == w;
      }
      if (bound || c.u.launch.binding_count == FDY_MAX_BINDINGS) {
        continue;
      }
      fdy_binding *b = &c.u.launch.bindings[c.u.launch.binding_count];
      b->weight.v = w;
      if (p->resident[w]) {
        b->buffer.v = p->resident_buffer;
        b->offset = p->resident_at[w];
      } else {
        size_t k = load_of(p, &s, w);
        assert(k < s.count && s.transfer[k] != UINT32_MAX);
        loads[c.u.launch.binding_count] = k;
        b->buffer.v = p->first_slot + (uint32_t)(k % p->slots);
        b->offset = 0;
        if (!s.awaited[k]) {
          s.awaited[k] = true;
          emit_wait(p, s.transfer[k], false, FDY_STREAM_COMPUTE);
        }
      }
      c.u.launch.binding_count++;
    }
    c.u.launch.signal.v = p->next_event++;
    last = c.u.launch.signal.v;
    emit(p, &c);
    for (uint32_t b = 0; b < c.u.launch.binding_count; b++) {
      if (p->resident[c.u.launch.bindings[b].weight.v]) {
        continue;
      }
      size_t k = loads[b];
      s.reader[k] = c.u.launch.signal.v;
      if (s.last_pos[k] == j && k + p->slots < s.count) {
        prefetch_load(p, &s, k + p->slots);
      }
    }
  }
  for (size_t i = 0; i < step->output_count; i++) {
    last = emit_copy(p, FDY_CMD_COPY_OUTPUT, step->outputs[i].v);
  }
  if (last >= 0) {
    emit_wait(p, (uint32_t)last, true, FDY_STREAM_COMPUTE);
  }
  free(copied);
  step_loads_free(&s);
  return p->st;
}

static fdy_status create_plan(planner *p, uint64_t budget) {
  uint32_t count = (p->resident_buffer != FDY_NO_BUFFER) + p->slots +
                   (p->arena != FDY_NO_BUFFER) + (p->state != FDY_NO_BUFFER) +
                   (p->io != FDY_NO_BUFFER);
  fdy_plan_buffer *buffers = calloc(count + 1, sizeof(*buffers));
  if (buffers == NULL) {
    return oom(p->err);
  }
  if (p->resident_buffer != FDY_NO_BUFFER) {
    buffers[p->resident_buffer] =
        (fdy_plan_buffer){FDY_BUFFER_RESIDENT, p->resident_bytes};
  }
  for (uint32_t i = 0; i < p->slots; i++) {
    buffers[p->first_slot + i] =
        (fdy_plan_buffer){FDY_BUFFER_SLOT, p->slot_bytes};
  }
  if (p->arena != FDY_NO_BUFFER) {
    buffers[p->arena] = (fdy_plan_buffer){FDY_BUFFER_ARENA, p->arena_bytes};
  }
  if (p->state != FDY_NO_BUFFER) {
    buffers[p->state] = (fdy_plan_buffer){FDY_BUFFER_STATE, p->state_bytes};
  }
  if (p->io != FDY_NO_BUFFER) {
    buffers[p->io] = (fdy_plan_buffer){FDY_BUFFER_IO, p->io_bytes};
  }
  fdy_status st = fdy_plan_create(p->graph, budget, 2, buffers, count,
                                  FDY_PLAN_MAX_EVENTS, &p->plan, p->err);
  free(buffers);
  for (size_t t = 0; st == FDY_OK && t < p->tensor_count; t++) {
    if (p->placements[t].buffer.v != FDY_NO_BUFFER) {
      st = fdy_plan_place(p->plan, (fdy_tensor_id){(uint32_t)t},
                          p->placements[t], p->err);
    }
  }
  return st;
}

static fdy_status emit_plan(planner *p) {
  emit_setup(p);
  for (size_t s = 0; p->st == FDY_OK && s < p->step_count; s++) {
    p->st = emit_step(p, &p->steps[s]);
  }
  if (p->st == FDY_OK) {
    p->st = fdy_plan_begin_section(p->plan, "teardown", p->err);
  }
  emit_buffers(p, FDY_CMD_RELEASE);
  p->plan->event_count = p->next_event;
  return p->st;
}

fdy_status fdy_plan_build(const fdy_graph *graph, const fdy_plan_step *steps,
                          size_t step_count, const fdy_planner_options *options,
                          fdy_plan **out, fdy_error *err) {
  if (out != NULL) {
    *out = NULL;
  }
  if (graph == NULL || options == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the planner needs a graph, options and an output");
  }
  uint64_t alignment =
      options->alignment ? options->alignment : FDY_TENSOR_ALIGNMENT;
  if (options->buffers == 0 || !fdy_is_power_of_two(alignment) ||
      alignment < FDY_TENSOR_ALIGNMENT) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the planner needs at least 1 buffer (got %u) and an "
                         "alignment that is a power of two of at least %d "
                         "(got %llu)",
                         options->buffers, FDY_TENSOR_ALIGNMENT,
                         (unsigned long long)alignment);
  }
  planner p = {.graph = graph,
               .steps = steps,
               .step_count = step_count,
               .alignment = alignment,
               .buffers_wanted = options->buffers,
               .tensor_count = fdy_graph_tensor_count(graph),
               .op_count = fdy_graph_op_count(graph),
               .err = err};
  fdy_status st = fdy_graph_validate(graph, err);
  if (st == FDY_OK) {
    p.tensors = calloc(p.tensor_count + 1, sizeof(fdy_tensor_info));
    st = p.tensors ? FDY_OK : oom(err);
  }
  for (size_t t = 0; st == FDY_OK && t < p.tensor_count; t++) {
    st = fdy_graph_tensor(graph, (fdy_tensor_id){(uint32_t)t}, &p.tensors[t],
                          err);
  }
  if (st == FDY_OK) {
    st = check_steps(&p);
  }
  if (st == FDY_OK) {
    st = choose_residency(&p, options->weight_budget);
  }
  if (st == FDY_OK) {
    st = place_tensors(&p);
  }
  if (st == FDY_OK) {
    st = create_plan(&p, options->weight_budget);
  }
  if (st == FDY_OK) {
    st = emit_plan(&p);
  }
  if (st == FDY_OK) {
    *out = p.plan;
    p.plan = NULL;
  }
  fdy_plan_destroy(p.plan);
  free(p.tensors);
  free(p.first_use);
  free(p.resident);
  free(p.resident_at);
  free(p.placements);
  return st;
}
