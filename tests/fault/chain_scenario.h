/* A checksum chain driven straight through the backend contract, the way
 * the executor drives a streamed plan: layers copied from host memory into
 * a ring of slots on a copy stream, one FDY_OP_CHECKSUM launch per layer on
 * a compute stream chaining its result into a small state buffer, events
 * created once and recorded every round, slot reuse ordered by stream waits
 * alone, a workspace when the backend asks for one (workspace_bytes), and
 * the final result read back by one copy_to_host per round
 * (then the time of its event, when the backend has event_time). On
 * any failure it drains and releases everything it acquired, and reports
 * the first failure with a cleanup failure in cleanup_kind.
 *
 * Written once for the fault tests (over the fake and CPU backends) and the
 * CUDA tests, which include it as "fault/chain_scenario.h". Header only. */
#ifndef FOUNDRY_TEST_CHAIN_SCENARIO_H
#define FOUNDRY_TEST_CHAIN_SCENARIO_H

#include "foundry/backend.h"
#include "foundry/checksum.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN_MAX_SLOTS 4

typedef struct chain_spec {
  uint32_t layers;
  uint64_t layer_bytes;             /* a multiple of 8 */
  const unsigned char *const *data; /* layers pointers of layer_bytes */
  uint32_t slots;                   /* 1 .. CHAIN_MAX_SLOTS */
  uint32_t rounds;                  /* runs of the whole chain */
  uint32_t passes;                  /* params.checksum.passes */
  bool register_host;               /* host_register the layers first */
} chain_spec;

/* The chain's result: c = fdy_checksum(layer) + c * FDY_CHAIN_PRIME. */
static inline uint64_t chain_expected(const chain_spec *spec) {
  uint64_t c = 0;
  for (uint32_t i = 0; i < spec->layers; i++) {
    c = fdy_checksum(spec->data[i], spec->layer_bytes) + c * FDY_CHAIN_PRIME;
  }
  return c;
}

/* Random non-zero bytes from a SplitMix64 stream (malloc'd; NULL when out
 * of memory). */
static inline unsigned char *chain_random_bytes(uint64_t n, uint64_t seed) {
  unsigned char *p = malloc(n > 0 ? n : 1);
  uint64_t x = seed;
  for (uint64_t i = 0; p && i < n; i++) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = (unsigned char)(z % 255 + 1);
  }
  return p;
}

/* A view of `elements` elements of dtype at offset in buffer (rank 1). */
static inline fdy_tensor_view chain_view(fdy_backend_buffer *buffer,
                                         uint64_t offset, fdy_dtype dtype,
                                         uint64_t elements) {
  fdy_tensor_view v = {.buffer = buffer, .offset = offset, .dtype = dtype};
  v.shape = FDY_SHAPE(elements);
  return v;
}

/* The checksum op over data (bytes at offset 0 of data), chaining prev
 * (NULL: none) into out. */
static inline fdy_op chain_checksum_op(fdy_backend_buffer *data, uint64_t bytes,
                                       const fdy_tensor_view *prev,
                                       fdy_tensor_view out, uint32_t passes) {
  fdy_op op = {.kind = FDY_OP_CHECKSUM, .output_count = 1};
  op.params.checksum.passes = passes;
  op.inputs[op.input_count++] = chain_view(data, 0, FDY_DTYPE_U8, bytes);
  if (prev) {
    op.inputs[op.input_count++] = *prev;
  }
  op.outputs[0] = out;
  return op;
}

/* Keeps the first failure in err; a later one goes to cleanup_kind. */
static inline void chain_keep(fdy_status *first, fdy_status st,
                              const fdy_error *local, fdy_error *err) {
  if (st == FDY_OK) {
    return;
  }
  if (*first == FDY_OK) {
    *first = st;
    if (err) {
      *err = *local;
    }
  } else if (err && err->cleanup_kind == FDY_OK) {
    err->cleanup_kind = st;
    snprintf(err->cleanup_message, sizeof err->cleanup_message, "%.255s",
             local->message);
  }
}

/* Runs spec on b; *result is the chain's result read back in the last
 * round (poisoned before every round). Returns the first failure. */
static inline fdy_status chain_run(fdy_backend *b, const chain_spec *spec,
                                   uint64_t *result, fdy_error *err) {
  const fdy_backend_ops *o = b->ops;
  fdy_status first = FDY_OK;
  fdy_error local;
  fdy_backend_stream *copy = NULL, *compute = NULL;
  fdy_backend_event *copied[CHAIN_MAX_SLOTS] = {0};
  fdy_backend_event *consumed[CHAIN_MAX_SLOTS] = {0};
  bool consumed_recorded[CHAIN_MAX_SLOTS] = {0};
  fdy_backend_event *done = NULL;
  fdy_backend_buffer *slot[CHAIN_MAX_SLOTS] = {0};
  fdy_backend_buffer *state = NULL;
  fdy_backend_buffer *workspace = NULL;
  uint64_t workspace_bytes = 0;
  fdy_backend_host **hosts = calloc(spec->layers + 1, sizeof(*hosts));
  uint64_t *host_result = aligned_alloc(4096, 4096);
  fdy_device_caps caps;
  uint64_t slot_bytes = 0;
  if (err) {
    fdy_error_clear(err);
  }
  if (!hosts || !host_result || spec->slots == 0 ||
      spec->slots > CHAIN_MAX_SLOTS) {
    first = fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                          "chain: bad spec or out of memory");
    goto cleanup;
  }
#define CHAIN_TRY(call)                                                        \
  do {                                                                         \
    fdy_status st_ = (call);                                                   \
    chain_keep(&first, st_, &local, err);                                      \
    if (st_ != FDY_OK) {                                                       \
      goto cleanup;                                                            \
    }                                                                          \
  } while (0)
  CHAIN_TRY(o->capabilities(b, &caps, &local));
  CHAIN_TRY(
      fdy_align_up(spec->layer_bytes, caps.alignment, &slot_bytes, &local));
  CHAIN_TRY(o->stream_create(b, &copy, &local));
  CHAIN_TRY(o->stream_create(b, &compute, &local));
  for (uint32_t s = 0; s < spec->slots; s++) {
    CHAIN_TRY(o->event_create(b, &copied[s], &local));
    CHAIN_TRY(o->event_create(b, &consumed[s], &local));
    CHAIN_TRY(o->buffer_alloc(b, slot_bytes, &slot[s], &local));
  }
  CHAIN_TRY(o->event_create(b, &done, &local));
  /* scratch for the launches, when the backend asks for any */
  if (o->workspace_bytes) {
    fdy_tensor_view word = chain_view(NULL, 0, FDY_DTYPE_U64, 1);
    for (int with_prev = 0; with_prev < 2; with_prev++) {
      fdy_op shape = chain_checksum_op(NULL, spec->layer_bytes,
                                       with_prev ? &word : NULL, word, 0);
      uint64_t bytes = o->workspace_bytes(b, &shape);
      workspace_bytes = bytes > workspace_bytes ? bytes : workspace_bytes;
    }
  }
  if (workspace_bytes > 0) {
    CHAIN_TRY(o->buffer_alloc(b, workspace_bytes, &workspace, &local));
  }
  /* two result words, alternating: out of op i at word i % 2 */
  CHAIN_TRY(o->buffer_alloc(b, 2 * caps.alignment, &state, &local));
  if (spec->register_host && o->host_register) {
    for (uint32_t i = 0; i < spec->layers; i++) {
      CHAIN_TRY(o->host_register(b, spec->data[i], spec->layer_bytes, &hosts[i],
                                 &local));
    }
    CHAIN_TRY(
        o->host_register(b, host_result, 4096, &hosts[spec->layers], &local));
  }
  for (uint32_t round = 0; round < spec->rounds; round++) {
    *host_result = 0xDEADBEEFCAFEF00Dull;
    for (uint32_t i = 0; i < spec->layers; i++) {
      uint32_t s = i % spec->slots;
      if (consumed_recorded[s]) {
        CHAIN_TRY(o->stream_wait(b, copy, consumed[s], &local));
      }
      CHAIN_TRY(o->copy_to_device(b, copy, slot[s], 0, spec->data[i],
                                  spec->layer_bytes, &local));
      CHAIN_TRY(o->event_record(b, copy, copied[s], &local));
      CHAIN_TRY(o->stream_wait(b, compute, copied[s], &local));
      fdy_tensor_view prev =
          chain_view(state, ((i + 1) % 2) * caps.alignment, FDY_DTYPE_U64, 1);
      fdy_tensor_view out =
          chain_view(state, (i % 2) * caps.alignment, FDY_DTYPE_U64, 1);
      fdy_op op = chain_checksum_op(slot[s], spec->layer_bytes,
                                    i > 0 ? &prev : NULL, out, spec->passes);
      if (workspace) {
        op.workspace = chain_view(workspace, 0, FDY_DTYPE_U8, workspace_bytes);
      }
      CHAIN_TRY(o->launch(b, compute, &op, &local));
      CHAIN_TRY(o->event_record(b, compute, consumed[s], &local));
      consumed_recorded[s] = true;
    }
    CHAIN_TRY(o->copy_to_host(b, compute, host_result, state,
                              ((spec->layers - 1) % 2) * caps.alignment,
                              sizeof(uint64_t), &local));
    CHAIN_TRY(o->event_record(b, compute, done, &local));
    CHAIN_TRY(o->host_wait(b, done, &local));
    if (o->event_time) {
      int64_t at_ns = 0;
      CHAIN_TRY(o->event_time(b, done, &at_ns, &local));
    }
    *result = *host_result;
  }
#undef CHAIN_TRY

cleanup:
  chain_keep(&first, o->drain(b, &local), &local, err);
  for (uint32_t s = 0; s < CHAIN_MAX_SLOTS; s++) {
    if (copied[s]) {
      o->event_destroy(b, copied[s]);
    }
    if (consumed[s]) {
      o->event_destroy(b, consumed[s]);
    }
    if (slot[s]) {
      o->buffer_release(b, slot[s]);
    }
  }
  if (done) {
    o->event_destroy(b, done);
  }
  if (state) {
    o->buffer_release(b, state);
  }
  if (workspace) {
    o->buffer_release(b, workspace);
  }
  if (copy) {
    o->stream_destroy(b, copy);
  }
  if (compute) {
    o->stream_destroy(b, compute);
  }
  for (uint32_t i = 0; hosts && i <= spec->layers; i++) {
    if (hosts[i]) {
      o->host_unregister(b, hosts[i]);
    }
  }
  free(hosts);
  free(host_result);
  return first;
}

#endif
