/* The N-buffered streaming planner: ops run in graph order on the compute
 * stream, their weights flow through a ring of equal slots filled on the copy
 * stream. With N >= 2 slots the refill of the slot read by op k-1 is issued
 * as soon as op k is queued, so the transfer of weight k+N-1 overlaps the
 * compute of op k; with N = 1 the single slot is refilled after each op. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct planner {
  fdy_plan *plan;
  uint32_t next_event;
  fdy_status st;
  fdy_error *err;
} planner;

static void emit(planner *p, const fdy_command *c) {
  if (p->st == FDY_OK) {
    p->st = fdy_plan_append(p->plan, c, p->err);
  }
}

static uint32_t new_event(planner *p) {
  return p->next_event++;
}

static void emit_allocate(planner *p, uint32_t slot, uint64_t bytes) {
  fdy_command c = {.kind = FDY_CMD_ALLOCATE};
  c.u.allocate.slot.v = slot;
  c.u.allocate.bytes = bytes;
  emit(p, &c);
}

static uint32_t emit_prefetch(planner *p, uint32_t weight, uint32_t slot) {
  fdy_command c = {.kind = FDY_CMD_PREFETCH};
  c.u.prefetch.weight.v = weight;
  c.u.prefetch.slot.v = slot;
  c.u.prefetch.stream = FDY_STREAM_COPY;
  c.u.prefetch.signal.v = new_event(p);
  emit(p, &c);
  return c.u.prefetch.signal.v;
}

static void emit_wait(planner *p, uint32_t event, bool host) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.host = host;
  c.u.wait.stream = FDY_STREAM_COMPUTE;
  emit(p, &c);
}

static uint32_t emit_launch(planner *p, uint32_t op, int64_t weight,
                            uint32_t slot) {
  fdy_command c = {.kind = FDY_CMD_LAUNCH};
  c.u.launch.op.v = op;
  c.u.launch.stream = FDY_STREAM_COMPUTE;
  c.u.launch.signal.v = new_event(p);
  if (weight >= 0) {
    c.u.launch.binding_count = 1;
    c.u.launch.bindings[0].weight.v = (uint32_t)weight;
    c.u.launch.bindings[0].slot.v = slot;
  }
  emit(p, &c);
  return c.u.launch.signal.v;
}

static void emit_release(planner *p, uint32_t slot) {
  fdy_command c = {.kind = FDY_CMD_RELEASE};
  c.u.release.slot.v = slot;
  emit(p, &c);
}

/* Finds the single weight op `id` reads: *weight = its id or -1. */
static fdy_status op_weight(const fdy_graph *graph, uint32_t id,
                            int64_t *weight, uint64_t *bytes, fdy_error *err) {
  fdy_op_info op;
  fdy_status st = fdy_graph_op(graph, (fdy_op_id){id}, &op, err);
  if (st != FDY_OK) {
    return st;
  }
  *weight = -1;
  *bytes = 0;
  for (size_t i = 0; i < op.read_count; i++) {
    fdy_tensor_info info;
    st = fdy_graph_tensor(graph, op.reads[i], &info, err);
    if (st != FDY_OK) {
      return st;
    }
    if (info.role != FDY_TENSOR_WEIGHT || *weight == op.reads[i].v) {
      continue;
    }
    if (*weight >= 0) {
      fdy_status bad = fdy_error_set(
          err, FDY_ERR_UNSUPPORTED,
          "op '%s' reads more than one weight; the streaming planner "
          "streams one weight per op",
          op.name);
      if (err != NULL) {
        snprintf(err->name, sizeof(err->name), "%s", op.name);
        err->ids[0] = id;
      }
      return bad;
    }
    *weight = op.reads[i].v;
    *bytes = info.bytes;
  }
  return FDY_OK;
}

fdy_status fdy_plan_streaming(const fdy_graph *graph, uint64_t budget_bytes,
                              uint32_t buffers, uint64_t alignment,
                              fdy_plan **out, fdy_error *err) {
  int64_t *weights = NULL;    /* op -> weight tensor, or -1 */
  uint32_t *weighted = NULL;  /* j -> op of the j-th op with a weight */
  uint32_t *launch_ev = NULL; /* j -> launch event of weighted op j */
  uint32_t *pending = NULL;   /* j -> transfer event of weighted op j */
  fdy_plan *plan = NULL;
  fdy_status st = FDY_OK;
  if (graph == NULL || out == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the planner needs a graph and an output pointer");
  }
  *out = NULL;
  if (buffers == 0) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the buffer count must be at least 1");
  }
  if (!fdy_is_power_of_two(alignment)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "the slot alignment must be a non-zero power of two, "
                         "got %llu",
                         (unsigned long long)alignment);
  }
  st = fdy_graph_validate(graph, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t ops = fdy_graph_op_count(graph);
  if (ops > UINT32_MAX / 4) {
    return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                         "a graph of %zu ops is too large to plan", ops);
  }
  weights = calloc(ops + 1, sizeof(*weights));
  weighted = calloc(ops + 1, sizeof(*weighted));
  launch_ev = calloc(ops + 1, sizeof(*launch_ev));
  pending = calloc(ops + 1, sizeof(*pending));
  if (weights == NULL || weighted == NULL || launch_ev == NULL ||
      pending == NULL) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory planning");
    goto cleanup;
  }
  uint32_t weight_ops = 0;
  uint64_t largest = 0;
  for (uint32_t i = 0; i < ops; i++) {
    uint64_t bytes = 0;
    st = op_weight(graph, i, &weights[i], &bytes, err);
    if (st != FDY_OK) {
      goto cleanup;
    }
    if (weights[i] >= 0) {
      weighted[weight_ops++] = i;
      largest = bytes > largest ? bytes : largest;
    }
  }
  uint32_t slots = buffers < weight_ops ? buffers : weight_ops;
  uint64_t slot_bytes = 0, needed = 0;
  if (slots > FDY_PLAN_MAX_SLOTS) {
    st = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                       "%u slots are above the limit %u", slots,
                       FDY_PLAN_MAX_SLOTS);
    goto cleanup;
  }
  if (slots > 0) {
    st = fdy_align_up(largest, alignment, &slot_bytes, err);
    if (st == FDY_OK) {
      st = fdy_mul_u64(slot_bytes, slots, &needed, err);
    }
    if (st != FDY_OK) {
      fdy_error_prefix(err, "sizing %u slots of %llu bytes", slots,
                       (unsigned long long)largest);
      goto cleanup;
    }
  }
  if (needed > budget_bytes) {
    st = fdy_error_set(err, FDY_ERR_BUDGET,
                       "%u slots of %llu bytes need %llu bytes, above the "
                       "budget of %llu bytes",
                       slots, (unsigned long long)slot_bytes,
                       (unsigned long long)needed,
                       (unsigned long long)budget_bytes);
    if (err != NULL) {
      err->expected = budget_bytes;
      err->actual = needed;
    }
    goto cleanup;
  }
  uint32_t events = (uint32_t)(weight_ops + ops);
  if (events > FDY_PLAN_MAX_EVENTS) {
    st = fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                       "%u events are above the limit %u", events,
                       FDY_PLAN_MAX_EVENTS);
    goto cleanup;
  }
  st = fdy_plan_create(graph, budget_bytes, 2, slots, events, &plan, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  planner p = {.plan = plan, .st = FDY_OK, .err = err};
  for (uint32_t s = 0; s < slots; s++) {
    emit_allocate(&p, s, slot_bytes);
  }
  for (uint32_t j = 0; j < slots; j++) {
    pending[j] = emit_prefetch(&p, (uint32_t)weights[weighted[j]], j);
  }
  uint32_t j = 0; /* weighted ops launched so far */
  uint32_t last = 0;
  for (uint32_t i = 0; i < ops; i++) {
    if (weights[i] < 0) {
      last = emit_launch(&p, i, -1, 0);
      continue;
    }
    uint32_t slot = j % slots;
    emit_wait(&p, pending[j], false);
    last = emit_launch(&p, i, weights[i], slot);
    launch_ev[j] = last;
    /* Refill: with one slot, the slot this op reads; with more, the slot
     * the previous weighted op read, while this op is already queued. */
    int64_t done_j = slots == 1 ? (int64_t)j : (int64_t)j - 1;
    if (done_j >= 0 && (uint64_t)done_j + slots < weight_ops) {
      uint32_t next = (uint32_t)done_j + slots;
      emit_wait(&p, launch_ev[done_j], true);
      pending[next] =
          emit_prefetch(&p, (uint32_t)weights[weighted[next]], next % slots);
    }
    j++;
  }
  if (ops > 0) {
    emit_wait(&p, last, true);
  }
  for (uint32_t s = 0; s < slots; s++) {
    emit_release(&p, s);
  }
  st = p.st;
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = plan;
  plan = NULL;
cleanup:
  fdy_plan_destroy(plan);
  free(weights);
  free(weighted);
  free(launch_ev);
  free(pending);
  return st;
}
