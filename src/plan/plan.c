/* Plan construction: create/destroy, appending and removing commands,
 * accessors, command equality and the graph-match check. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const command_kind_names[] = {
    [FDY_CMD_ALLOCATE] = "allocate", [FDY_CMD_PREFETCH] = "prefetch",
    [FDY_CMD_WAIT] = "wait",         [FDY_CMD_LAUNCH] = "launch",
    [FDY_CMD_RELEASE] = "release",
};

const char *fdy_command_kind_name(fdy_command_kind kind) {
  if ((unsigned)kind > FDY_CMD_RELEASE) {
    return "unknown";
  }
  return command_kind_names[kind];
}

fdy_status fdy_plan_create(const fdy_graph *graph, uint64_t budget_bytes,
                           uint32_t stream_count, uint32_t slot_count,
                           uint32_t event_count, fdy_plan **out,
                           fdy_error *err) {
  fdy_plan *plan = NULL;
  fdy_status st = FDY_OK;
  if (out != NULL) {
    *out = NULL;
  }
  if (out == NULL || graph == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan create needs a graph and an output pointer");
  }
  if (stream_count == 0 || stream_count > FDY_PLAN_MAX_STREAMS) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "stream count %u is outside 1..%u", stream_count,
                       FDY_PLAN_MAX_STREAMS);
    goto cleanup;
  }
  if (slot_count > FDY_PLAN_MAX_SLOTS) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "slot count %u is above the limit %u", slot_count,
                       FDY_PLAN_MAX_SLOTS);
    goto cleanup;
  }
  if (event_count > FDY_PLAN_MAX_EVENTS) {
    st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "event count %u is above the limit %u", event_count,
                       FDY_PLAN_MAX_EVENTS);
    goto cleanup;
  }
  plan = calloc(1, sizeof(*plan));
  if (plan == NULL) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory for a plan");
    goto cleanup;
  }
  st = fdy_graph_clone(graph, &plan->graph, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  plan->budget_bytes = budget_bytes;
  plan->stream_count = stream_count;
  plan->slot_count = slot_count;
  plan->event_count = event_count;
  *out = plan;
  plan = NULL;
cleanup:
  fdy_plan_destroy(plan);
  return st;
}

void fdy_plan_destroy(fdy_plan *plan) {
  if (plan == NULL) {
    return;
  }
  fdy_graph_destroy(plan->graph);
  free(plan->commands);
  free(plan);
}

/* Copies only the members `src->kind` makes meaningful into a zeroed command,
 * so stored commands carry no stale bytes from other union members. */
static void command_canonical(const fdy_command *src, fdy_command *dst) {
  memset(dst, 0, sizeof(*dst));
  dst->kind = src->kind;
  switch (src->kind) {
  case FDY_CMD_ALLOCATE:
    dst->u.allocate.slot = src->u.allocate.slot;
    dst->u.allocate.bytes = src->u.allocate.bytes;
    break;
  case FDY_CMD_PREFETCH:
    dst->u.prefetch.weight = src->u.prefetch.weight;
    dst->u.prefetch.slot = src->u.prefetch.slot;
    dst->u.prefetch.stream = src->u.prefetch.stream;
    dst->u.prefetch.signal = src->u.prefetch.signal;
    break;
  case FDY_CMD_WAIT:
    dst->u.wait.event = src->u.wait.event;
    dst->u.wait.host = src->u.wait.host;
    if (!src->u.wait.host) {
      dst->u.wait.stream = src->u.wait.stream;
    }
    break;
  case FDY_CMD_LAUNCH:
    dst->u.launch.op = src->u.launch.op;
    dst->u.launch.stream = src->u.launch.stream;
    dst->u.launch.signal = src->u.launch.signal;
    dst->u.launch.binding_count = src->u.launch.binding_count;
    for (uint32_t i = 0; i < src->u.launch.binding_count; i++) {
      dst->u.launch.bindings[i] = src->u.launch.bindings[i];
    }
    break;
  case FDY_CMD_RELEASE:
    dst->u.release.slot = src->u.release.slot;
    break;
  }
}

fdy_status fdy_plan_append(fdy_plan *plan, const fdy_command *command,
                           fdy_error *err) {
  if (plan == NULL || command == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan append needs a plan and a command");
  }
  if ((unsigned)command->kind > FDY_CMD_RELEASE) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "unknown command kind %d", (int)command->kind);
  }
  if (command->kind == FDY_CMD_LAUNCH &&
      command->u.launch.binding_count > FDY_MAX_BINDINGS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "launch has %u bindings, at most %d are allowed",
                         command->u.launch.binding_count, FDY_MAX_BINDINGS);
  }
  if (plan->command_count == plan->command_cap) {
    size_t cap = plan->command_cap == 0 ? 16 : plan->command_cap * 2;
    if (cap > SIZE_MAX / sizeof(fdy_command)) {
      return fdy_error_set(err, FDY_ERR_OVERFLOW, "too many plan commands");
    }
    fdy_command *grown = realloc(plan->commands, cap * sizeof(fdy_command));
    if (grown == NULL) {
      return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY,
                           "out of memory for %zu plan commands", cap);
    }
    plan->commands = grown;
    plan->command_cap = cap;
  }
  command_canonical(command, &plan->commands[plan->command_count]);
  plan->command_count++;
  return FDY_OK;
}

fdy_status fdy_plan_remove(fdy_plan *plan, size_t index, fdy_error *err) {
  if (plan == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan remove needs a plan");
  }
  if (index >= plan->command_count) {
    fdy_status st = fdy_error_set(err, FDY_ERR_NOT_FOUND,
                                  "no command %zu (the plan has %zu)", index,
                                  plan->command_count);
    if (err != NULL) {
      err->command_index = (int64_t)index;
    }
    return st;
  }
  memmove(&plan->commands[index], &plan->commands[index + 1],
          (plan->command_count - index - 1) * sizeof(fdy_command));
  plan->command_count--;
  return FDY_OK;
}

const fdy_graph *fdy_plan_graph(const fdy_plan *plan) {
  return plan->graph;
}

uint64_t fdy_plan_budget(const fdy_plan *plan) {
  return plan->budget_bytes;
}

uint32_t fdy_plan_stream_count(const fdy_plan *plan) {
  return plan->stream_count;
}

uint32_t fdy_plan_slot_count(const fdy_plan *plan) {
  return plan->slot_count;
}

uint32_t fdy_plan_event_count(const fdy_plan *plan) {
  return plan->event_count;
}

size_t fdy_plan_command_count(const fdy_plan *plan) {
  return plan->command_count;
}

const fdy_command *fdy_plan_command(const fdy_plan *plan, size_t index) {
  if (index >= plan->command_count) {
    return NULL;
  }
  return &plan->commands[index];
}

bool fdy_command_equal(const fdy_command *a, const fdy_command *b) {
  if (a->kind != b->kind) {
    return false;
  }
  switch (a->kind) {
  case FDY_CMD_ALLOCATE:
    return a->u.allocate.slot.v == b->u.allocate.slot.v &&
           a->u.allocate.bytes == b->u.allocate.bytes;
  case FDY_CMD_PREFETCH:
    return a->u.prefetch.weight.v == b->u.prefetch.weight.v &&
           a->u.prefetch.slot.v == b->u.prefetch.slot.v &&
           a->u.prefetch.stream.v == b->u.prefetch.stream.v &&
           a->u.prefetch.signal.v == b->u.prefetch.signal.v;
  case FDY_CMD_WAIT:
    return a->u.wait.event.v == b->u.wait.event.v &&
           a->u.wait.host == b->u.wait.host &&
           (a->u.wait.host || a->u.wait.stream.v == b->u.wait.stream.v);
  case FDY_CMD_LAUNCH:
    if (a->u.launch.op.v != b->u.launch.op.v ||
        a->u.launch.stream.v != b->u.launch.stream.v ||
        a->u.launch.signal.v != b->u.launch.signal.v ||
        a->u.launch.binding_count != b->u.launch.binding_count ||
        a->u.launch.binding_count > FDY_MAX_BINDINGS) {
      return false;
    }
    for (uint32_t i = 0; i < a->u.launch.binding_count; i++) {
      if (a->u.launch.bindings[i].weight.v !=
              b->u.launch.bindings[i].weight.v ||
          a->u.launch.bindings[i].slot.v != b->u.launch.bindings[i].slot.v) {
        return false;
      }
    }
    return true;
  case FDY_CMD_RELEASE:
    return a->u.release.slot.v == b->u.release.slot.v;
  }
  return false;
}

fdy_status fdy_plan_check_graph(const fdy_plan *plan, const fdy_graph *graph,
                                fdy_error *err) {
  if (plan == NULL || graph == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan graph check needs a plan and a graph");
  }
  if (fdy_graph_same_structure(plan->graph, graph)) {
    return FDY_OK;
  }
  uint64_t want = fdy_graph_fingerprint(plan->graph);
  uint64_t got = fdy_graph_fingerprint(graph);
  fdy_status st = fdy_error_set(
      err, FDY_ERR_INVALID_ARGUMENT,
      "the plan was made for graph '%s' (fingerprint %016llx), not for graph "
      "'%s' (fingerprint %016llx)",
      fdy_graph_name(plan->graph), (unsigned long long)want,
      fdy_graph_name(graph), (unsigned long long)got);
  if (err != NULL) {
    snprintf(err->name, sizeof(err->name), "graph");
    err->expected = want;
    err->actual = got;
  }
  return st;
}
