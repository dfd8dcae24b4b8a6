/* Plan construction: create/destroy, placements, sections, appending and
 * removing commands, accessors, command equality and the graph-match
 * check. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const command_kind_names[] = {
    [FDY_CMD_ALLOCATE] = "allocate",
    [FDY_CMD_PREFETCH] = "prefetch",
    [FDY_CMD_COPY_INPUT] = "copy_input",
    [FDY_CMD_COPY_OUTPUT] = "copy_output",
    [FDY_CMD_WAIT] = "wait",
    [FDY_CMD_LAUNCH] = "launch",
    [FDY_CMD_RELEASE] = "release",
};

static const char *const buffer_class_names[] = {
    [FDY_BUFFER_RESIDENT] = "resident",
    [FDY_BUFFER_SLOT] = "slot",
    [FDY_BUFFER_ARENA] = "arena",
    [FDY_BUFFER_STATE] = "state",
    [FDY_BUFFER_IO] = "io",
};

const char *fdy_command_kind_name(fdy_command_kind kind) {
  if ((unsigned)kind >= FDY_CMD_KIND_COUNT) {
    return "unknown";
  }
  return command_kind_names[kind];
}

int32_t fdy_command_stream(const fdy_command *c) {
  switch (c->kind) {
  case FDY_CMD_PREFETCH:
    return (int32_t)c->u.prefetch.stream.v;
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    return (int32_t)c->u.copy.stream.v;
  case FDY_CMD_LAUNCH:
    return (int32_t)c->u.launch.stream.v;
  case FDY_CMD_WAIT:
    return c->u.wait.host ? -1 : (int32_t)c->u.wait.stream.v;
  default:
    return -1;
  }
}

const char *fdy_buffer_class_name(fdy_buffer_class cls) {
  if ((unsigned)cls >= FDY_BUFFER_CLASS_COUNT) {
    return "unknown";
  }
  return buffer_class_names[cls];
}

fdy_status fdy_plan_create(const fdy_graph *graph, uint64_t budget_bytes,
                           uint32_t stream_count,
                           const fdy_plan_buffer *buffers,
                           uint32_t buffer_count, uint32_t event_count,
                           fdy_plan **out, fdy_error *err) {
  fdy_plan *plan = NULL;
  fdy_status st = FDY_OK;
  if (out != NULL) {
    *out = NULL;
  }
  if (out == NULL || graph == NULL || (buffer_count > 0 && buffers == NULL)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan create needs a graph, its buffers and an output "
                         "pointer");
  }
  if (stream_count == 0 || stream_count > FDY_PLAN_MAX_STREAMS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "stream count %u is outside 1..%u", stream_count,
                         FDY_PLAN_MAX_STREAMS);
  }
  if (buffer_count > FDY_PLAN_MAX_BUFFERS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "buffer count %u is above the limit %u", buffer_count,
                         FDY_PLAN_MAX_BUFFERS);
  }
  if (event_count > FDY_PLAN_MAX_EVENTS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "event count %u is above the limit %u", event_count,
                         FDY_PLAN_MAX_EVENTS);
  }
  for (uint32_t i = 0; i < buffer_count; i++) {
    if ((unsigned)buffers[i].cls >= FDY_BUFFER_CLASS_COUNT ||
        buffers[i].bytes == 0) {
      st = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "buffer %u has class %d and %llu bytes: it needs a "
                         "known class and at least one byte",
                         i, (int)buffers[i].cls,
                         (unsigned long long)buffers[i].bytes);
      if (err != NULL) {
        err->ids[0] = i;
      }
      return st;
    }
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
  size_t tensors = fdy_graph_tensor_count(graph);
  plan->buffers = calloc(buffer_count ? buffer_count : 1, sizeof(*buffers));
  plan->placements = calloc(tensors ? tensors : 1, sizeof(fdy_placement));
  if (plan->buffers == NULL || plan->placements == NULL) {
    st = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory for a plan");
    goto cleanup;
  }
  if (buffer_count > 0) {
    memcpy(plan->buffers, buffers, buffer_count * sizeof(*buffers));
  }
  for (size_t i = 0; i < tensors; i++) {
    plan->placements[i] = (fdy_placement){{FDY_NO_BUFFER}, 0};
  }
  plan->budget_bytes = budget_bytes;
  plan->stream_count = stream_count;
  plan->buffer_count = buffer_count;
  plan->event_count = event_count;
  plan->section_count = 1;
  snprintf(plan->sections[0].name, FDY_PLAN_NAME_MAX, "setup");
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
  free(plan->buffers);
  free(plan->placements);
  free(plan->commands);
  free(plan);
}

fdy_status fdy_plan_place(fdy_plan *plan, fdy_tensor_id tensor,
                          fdy_placement placement, fdy_error *err) {
  if (plan == NULL || tensor.v >= fdy_graph_tensor_count(plan->graph)) {
    fdy_status st = fdy_error_set(err, FDY_ERR_NOT_FOUND,
                                  "no tensor %u to place", tensor.v);
    if (err != NULL) {
      err->ids[0] = tensor.v;
    }
    return st;
  }
  plan->placements[tensor.v] = placement;
  return FDY_OK;
}

static bool valid_section_name(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n >= FDY_PLAN_NAME_MAX) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

fdy_status fdy_plan_begin_section(fdy_plan *plan, const char *name,
                                  fdy_error *err) {
  if (plan == NULL || !valid_section_name(name)) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a section name has 1 to %d characters of a-z, 0-9 "
                         "and _",
                         FDY_PLAN_NAME_MAX - 1);
  }
  if (plan->section_count >= FDY_PLAN_MAX_SECTIONS) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "a plan has at most %d sections",
                         FDY_PLAN_MAX_SECTIONS);
  }
  fdy_section *s = &plan->sections[plan->section_count++];
  snprintf(s->name, sizeof(s->name), "%s", name);
  s->first = plan->command_count;
  s->count = 0;
  return FDY_OK;
}

/* Copies only the members `src->kind` makes meaningful into a zeroed command,
 * so stored commands carry no stale bytes from other union members. */
static void command_canonical(const fdy_command *src, fdy_command *dst) {
  memset(dst, 0, sizeof(*dst));
  dst->kind = src->kind;
  switch (src->kind) {
  case FDY_CMD_ALLOCATE:
    dst->u.allocate.buffer = src->u.allocate.buffer;
    break;
  case FDY_CMD_PREFETCH:
    dst->u.prefetch.weight = src->u.prefetch.weight;
    dst->u.prefetch.buffer = src->u.prefetch.buffer;
    dst->u.prefetch.offset = src->u.prefetch.offset;
    dst->u.prefetch.stream = src->u.prefetch.stream;
    dst->u.prefetch.signal = src->u.prefetch.signal;
    break;
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    dst->u.copy.tensor = src->u.copy.tensor;
    dst->u.copy.stream = src->u.copy.stream;
    dst->u.copy.signal = src->u.copy.signal;
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
    dst->u.release.buffer = src->u.release.buffer;
    break;
  case FDY_CMD_KIND_COUNT:
    break;
  }
}

fdy_status fdy_plan_append(fdy_plan *plan, const fdy_command *command,
                           fdy_error *err) {
  if (plan == NULL || command == NULL) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "plan append needs a plan and a command");
  }
  if ((unsigned)command->kind >= FDY_CMD_KIND_COUNT) {
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
  plan->sections[plan->section_count - 1].count++;
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
  for (size_t i = 0; i < plan->section_count; i++) {
    fdy_section *s = &plan->sections[i];
    if (index < s->first) {
      s->first--;
    } else if (index < s->first + s->count) {
      s->count--;
    }
  }
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

uint32_t fdy_plan_buffer_count(const fdy_plan *plan) {
  return plan->buffer_count;
}

const fdy_plan_buffer *fdy_plan_buffer_at(const fdy_plan *plan, uint32_t id) {
  return id < plan->buffer_count ? &plan->buffers[id] : NULL;
}

fdy_placement fdy_plan_placement(const fdy_plan *plan, fdy_tensor_id tensor) {
  if (tensor.v >= fdy_graph_tensor_count(plan->graph)) {
    return (fdy_placement){{FDY_NO_BUFFER}, 0};
  }
  return plan->placements[tensor.v];
}

size_t fdy_plan_section_count(const fdy_plan *plan) {
  return plan->section_count;
}

const fdy_section *fdy_plan_section(const fdy_plan *plan, size_t index) {
  return index < plan->section_count ? &plan->sections[index] : NULL;
}

int64_t fdy_plan_find_section(const fdy_plan *plan, const char *name) {
  for (size_t i = 0; i < plan->section_count; i++) {
    if (name != NULL && strcmp(plan->sections[i].name, name) == 0) {
      return (int64_t)i;
    }
  }
  return -1;
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
    return a->u.allocate.buffer.v == b->u.allocate.buffer.v;
  case FDY_CMD_PREFETCH:
    return a->u.prefetch.weight.v == b->u.prefetch.weight.v &&
           a->u.prefetch.buffer.v == b->u.prefetch.buffer.v &&
           a->u.prefetch.offset == b->u.prefetch.offset &&
           a->u.prefetch.stream.v == b->u.prefetch.stream.v &&
           a->u.prefetch.signal.v == b->u.prefetch.signal.v;
  case FDY_CMD_COPY_INPUT:
  case FDY_CMD_COPY_OUTPUT:
    return a->u.copy.tensor.v == b->u.copy.tensor.v &&
           a->u.copy.stream.v == b->u.copy.stream.v &&
           a->u.copy.signal.v == b->u.copy.signal.v;
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
      const fdy_binding *x = &a->u.launch.bindings[i];
      const fdy_binding *y = &b->u.launch.bindings[i];
      if (x->weight.v != y->weight.v || x->buffer.v != y->buffer.v ||
          x->offset != y->offset) {
        return false;
      }
    }
    return true;
  case FDY_CMD_RELEASE:
    return a->u.release.buffer.v == b->u.release.buffer.v;
  case FDY_CMD_KIND_COUNT:
    break;
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
