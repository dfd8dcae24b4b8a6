/* Shared helpers for the plan tests: command constructors and tiny graphs. */
#ifndef FOUNDRY_TEST_PLAN_HELPERS_H
#define FOUNDRY_TEST_PLAN_HELPERS_H

#include "foundry/plan.h"

static inline fdy_command c_alloc(uint32_t slot, uint64_t bytes) {
  fdy_command c = {.kind = FDY_CMD_ALLOCATE};
  c.u.allocate.slot.v = slot;
  c.u.allocate.bytes = bytes;
  return c;
}

static inline fdy_command c_prefetch(uint32_t weight, uint32_t slot,
                                     uint32_t stream, uint32_t signal) {
  fdy_command c = {.kind = FDY_CMD_PREFETCH};
  c.u.prefetch.weight.v = weight;
  c.u.prefetch.slot.v = slot;
  c.u.prefetch.stream.v = stream;
  c.u.prefetch.signal.v = signal;
  return c;
}

static inline fdy_command c_wait_stream(uint32_t event, uint32_t stream) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.stream.v = stream;
  return c;
}

static inline fdy_command c_wait_host(uint32_t event) {
  fdy_command c = {.kind = FDY_CMD_WAIT};
  c.u.wait.event.v = event;
  c.u.wait.host = true;
  return c;
}

/* Launch with up to two bindings (weight, slot); pass count 0..2. */
static inline fdy_command c_launch(uint32_t op, uint32_t stream,
                                   uint32_t signal, uint32_t count, uint32_t w0,
                                   uint32_t s0, uint32_t w1, uint32_t s1) {
  fdy_command c = {.kind = FDY_CMD_LAUNCH};
  c.u.launch.op.v = op;
  c.u.launch.stream.v = stream;
  c.u.launch.signal.v = signal;
  c.u.launch.binding_count = count;
  c.u.launch.bindings[0].weight.v = w0;
  c.u.launch.bindings[0].slot.v = s0;
  c.u.launch.bindings[1].weight.v = w1;
  c.u.launch.bindings[1].slot.v = s1;
  return c;
}

static inline fdy_command c_release(uint32_t slot) {
  fdy_command c = {.kind = FDY_CMD_RELEASE};
  c.u.release.slot.v = slot;
  return c;
}

#endif
