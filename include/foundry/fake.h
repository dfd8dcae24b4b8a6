/* The fake backend: a test double shipped in the library. It records every
 * call in an inspectable log, keeps submitted work pending until the host
 * waits on an event or drains (host_wait on event e completes e and all work
 * submitted before it), and can be told to fail at call N, before or after
 * submitting that call's work. With store_data it really holds buffer bytes:
 * copies copy and synthetic.checksum computes fdy_checksum, so results can be
 * checked; without it no memory of buffer size is allocated. A launch of
 * synthetic.checksum stores the sum (mod 2^64) of fdy_checksum over its bound
 * weights (exactly fdy_checksum of the weight for one binding); other kinds,
 * and every launch without store_data, store 0.
 *
 * Every entry call is logged and numbered, including capabilities and
 * supports_op (but not destroy). fail_at_call names a call number: an entry
 * that returns fdy_status fails there with FDY_ERR_BACKEND; entries without
 * a status (releases, stream_destroy, supports_op) are not failed. In
 * FDY_FAKE_FAIL_AFTER_SUBMIT mode copy_to_device and launch queue their work
 * (with an event no caller holds), host_wait and drain complete the work,
 * and only then the call reports the error; entries that submit no work fail
 * the same way in both modes.
 *
 * It also enforces the backend reference rule: a released buffer whose
 * memory pending work still uses stays alive until that work completes; the
 * statistics expose this so tests can prove it. */
#ifndef FOUNDRY_FAKE_H
#define FOUNDRY_FAKE_H

#include "foundry/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fdy_fake_fail_mode {
  FDY_FAKE_FAIL_BEFORE_SUBMIT = 0, /* call N returns an error, no work */
  FDY_FAKE_FAIL_AFTER_SUBMIT,      /* call N submits its work, then errors */
} fdy_fake_fail_mode;

typedef struct fdy_fake_options {
  fdy_device_caps caps;  /* reported capabilities; zero total_memory
                            means 16 GiB, zero alignment means 256 */
  uint64_t fail_at_call; /* 1-based call number to fail, 0 = never */
  fdy_fake_fail_mode fail_mode;
  bool store_data;              /* hold real bytes (small tests only) */
  const char *unsupported_kind; /* supports_op returns false for it */
  bool fail_drain;              /* drain reports an error (after completing
                                   the work), to test cleanup reporting */
} fdy_fake_options;

/* One logged call. Handle ids are unique across all handle kinds. */
typedef struct fdy_fake_call {
  uint64_t number;   /* 1-based */
  const char *op;    /* entry name: "buffer_alloc", "launch", ... */
  fdy_status status; /* what it returned */
  uint64_t bytes;    /* size argument where there is one */
  int64_t handle;    /* id of the handle created (buffer_alloc,
                        stream_create, host_register; the event of
                        copy_to_device and launch) or used, or -1 */
} fdy_fake_call;

typedef struct fdy_fake_stats {
  uint64_t calls;
  uint64_t live_buffers; /* buffers whose memory is still held */
  uint64_t live_events;
  uint64_t live_streams;
  uint64_t live_hosts;   /* host registrations */
  uint64_t pending_work; /* submitted, not yet completed */
  uint64_t drains;
  uint64_t buffer_bytes; /* bytes of live buffers */
  uint64_t peak_buffer_bytes;
  uint64_t deferred_frees; /* released while in use, freed on completion */
  uint64_t violations;     /* contract breaches by the caller: a released or
                              NULL handle used, a double release, a stream
                              destroyed with pending work (each also fails
                              the call where it can) */
} fdy_fake_stats;

/* options may be NULL (defaults). */
fdy_status fdy_fake_backend_create(const fdy_fake_options *options,
                                   fdy_backend **out, fdy_error *err);
/* b must be a fake backend (assert). The log pointer is valid until the
 * next call into the backend. */
size_t fdy_fake_call_count(const fdy_backend *b);
const fdy_fake_call *fdy_fake_call_at(const fdy_backend *b, size_t index);
fdy_fake_stats fdy_fake_get_stats(const fdy_backend *b);
/* Counts logged calls of one entry name. */
size_t fdy_fake_count_calls(const fdy_backend *b, const char *op);

#ifdef __cplusplus
}
#endif
#endif
