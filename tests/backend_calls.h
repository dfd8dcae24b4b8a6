/* Helpers of the backend tests (the contract suite in tests/contract and
 * the backends' own tests): the calls of the backend contract that must
 * succeed, as cmocka assertions, and random non-zero test data. Include
 * after <cmocka.h>. Header only. */
#ifndef FOUNDRY_TEST_BACKEND_CALLS_H
#define FOUNDRY_TEST_BACKEND_CALLS_H

#include "fault/chain_scenario.h"
#include "foundry/backend.h"

/* n random non-zero bytes (malloc'd) from a SplitMix64 stream of seed. */
static inline unsigned char *random_bytes(uint64_t n, uint64_t seed) {
  unsigned char *p = chain_random_bytes(n, seed);
  assert_non_null(p);
  return p;
}

static inline fdy_backend_stream *make_stream(fdy_backend *b) {
  fdy_backend_stream *s = NULL;
  assert_int_equal(b->ops->stream_create(b, &s, NULL), FDY_OK);
  assert_non_null(s);
  return s;
}

static inline fdy_backend_event *make_event(fdy_backend *b) {
  fdy_backend_event *e = NULL;
  assert_int_equal(b->ops->event_create(b, &e, NULL), FDY_OK);
  assert_non_null(e);
  return e;
}

static inline fdy_backend_buffer *make_buffer(fdy_backend *b, uint64_t bytes) {
  fdy_backend_buffer *buf = NULL;
  assert_int_equal(b->ops->buffer_alloc(b, bytes, &buf, NULL), FDY_OK);
  assert_non_null(buf);
  return buf;
}

/* Records e after the work on s so far and waits for it. */
static inline void record_and_wait(fdy_backend *b, fdy_backend_stream *s,
                                   fdy_backend_event *e) {
  assert_int_equal(b->ops->event_record(b, s, e, NULL), FDY_OK);
  assert_int_equal(b->ops->host_wait(b, e, NULL), FDY_OK);
}

#endif
