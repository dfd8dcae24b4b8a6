/* Errors and device faults of the CUDA backend: the fdy_error of a failed
 * CUDA call (fdy_cuda_fail, fdy_cuda_check; fdy_cuda_ignore in cleanup
 * paths), and the attribution of a device fault and the lost state that
 * follows it.
 *
 * Device faults: a kernel that faults (an illegal address, say) leaves the
 * context unusable, and every later CUDA call returns the same "sticky"
 * error, whatever work it concerns. Each copy and launch therefore gets a
 * submission number (1, 2, ... since creation) and the stream keeps its
 * first submission since its last event recording and its last one; a
 * recording remembers that range and whether the host saw it complete
 * (host_wait, event_time, drain). When an entry meets a sticky error (on a
 * failure it asks the internal stream, cudaStreamQuery), the fault is
 * attributed to the earliest work the host had not seen complete: the
 * range of the earliest recording not seen complete, or of a stream's work
 * since its last recording, whichever starts first. With an event recorded
 * after each command, that range is the faulting command. The backend is
 * then lost: that entry returns the attributed error, every later entry
 * fails at once with FDY_ERR_BACKEND naming it and makes no CUDA call, and
 * releases and destroy only free host memory (the device's memory, pinned
 * pages and streams stay with the unusable context until the process
 * exits). */
#include "../entry_errors.h"
#include "cuda_backend_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ----------------------------------------------------------------
 */

fdy_status fdy_cuda_fail(fdy_error *err, fdy_status kind, const char *op,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_entry_vfail(err, kind, "cuda", op, fmt, ap);
  va_end(ap);
  return kind;
}

fdy_status fdy_cuda_check(cudaError_t rc, fdy_error *err, const char *op,
                          const char *what) {
  if (rc == cudaSuccess) {
    return FDY_OK;
  }
  cudaGetLastError();
  return fdy_cuda_fail(err, FDY_ERR_BACKEND, op, "%s failed: %s (%s)", what,
                       cudaGetErrorName(rc), cudaGetErrorString(rc));
}

void fdy_cuda_ignore(cudaError_t rc) {
  (void)rc;
  cudaGetLastError();
}

bool fdy_cuda_error_is_sticky(cudaError_t rc) {
  switch (rc) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorContained:
  case cudaErrorMpsClientTerminated:
  case cudaErrorExternalDevice:
    return true;
  default:
    return false;
  }
}

/* ---- fault attribution and the lost state ----------------------------------
 */

/* "rmsnorm launch (submission 17)" or "copy_to_device (submission 3)". */
static void describe(const cuda_submission *s, char *out, size_t size) {
  if (s->entry != NULL && strcmp(s->entry, "launch") == 0) {
    snprintf(out, size, "%s launch (submission %llu)",
             fdy_op_kind_name(s->kind), (unsigned long long)s->seq);
  } else {
    snprintf(out, size, "%s (submission %llu)",
             s->entry != NULL ? s->entry : "work", (unsigned long long)s->seq);
  }
}

/* The highest submission on stream `id` that a recording seen complete
 * follows (0: none). */
static uint64_t seen_done_on(const cuda_backend *b, uint64_t id) {
  uint64_t done = 0;
  for (const fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
    const fdy_backend_event *e = (const fdy_backend_event *)n;
    if (e->recorded && e->seen_done && e->stream_id == id &&
        e->last.seq > done) {
      done = e->last.seq;
    }
  }
  return done;
}

/* The earliest range of work the host has not seen complete: a recording
 * not seen complete, or a stream's work since its last recording. Returns
 * false when there is none. */
static bool earliest_unfinished(const cuda_backend *b, cuda_submission *first,
                                cuda_submission *last) {
  bool found = false;
  for (const fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
    const fdy_backend_event *e = (const fdy_backend_event *)n;
    if (!e->recorded || e->seen_done || e->last.seq == 0 ||
        e->last.seq <= seen_done_on(b, e->stream_id)) {
      continue;
    }
    if (!found || e->first.seq < first->seq) {
      *first = e->first;
      *last = e->last;
      found = true;
    }
  }
  for (const fdy_list_node *n = b->streams.next; n != &b->streams;
       n = n->next) {
    const fdy_backend_stream *s = (const fdy_backend_stream *)n;
    if (s->pending.seq != 0 && (!found || s->pending.seq < first->seq)) {
      *first = s->pending;
      *last = s->last;
      found = true;
    }
  }
  return found;
}

fdy_status fdy_cuda_lose(cuda_backend *b, cudaError_t rc, const char *op,
                         fdy_error *err) {
  if (b->lost) {
    if (err != NULL) {
      *err = b->lost_error;
    }
    return FDY_ERR_BACKEND;
  }
  cuda_submission first = {0}, last = {0};
  char culprit[256] = "earlier work";
  const char *entry = op;
  bool found = earliest_unfinished(b, &first, &last);
  if (found) {
    char from[96], to[96];
    describe(&first, from, sizeof from);
    describe(&last, to, sizeof to);
    if (first.seq == last.seq) {
      snprintf(culprit, sizeof culprit, "the %s", from);
    } else {
      snprintf(culprit, sizeof culprit,
               "the work from the %s to the %s on one stream", from, to);
    }
    entry = first.entry;
  }
  fdy_error e;
  fdy_cuda_fail(&e, FDY_ERR_BACKEND, entry,
                "%s failed on the device: %s (%s), seen by %s; the device is "
                "lost: every later call fails, and the process must restart "
                "to use CUDA again",
                culprit, cudaGetErrorName(rc), cudaGetErrorString(rc), op);
  if (found) {
    e.ids[0] = (int64_t)first.seq;
    e.ids[1] = (int64_t)last.seq;
    if (strcmp(first.entry, "launch") == 0) {
      snprintf(e.name, sizeof e.name, "%s", fdy_op_kind_name(first.kind));
    }
  }
  b->lost = true;
  b->lost_error = e;
  if (err != NULL) {
    *err = e;
  }
  return FDY_ERR_BACKEND;
}

fdy_status fdy_cuda_fail_lost(const cuda_backend *b, const char *op,
                              fdy_error *err) {
  if (err != NULL) {
    *err = b->lost_error;
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
    fdy_error_prefix(err, "cuda %s: the device was lost", op);
  }
  return FDY_ERR_BACKEND;
}

fdy_status fdy_cuda_settle(cuda_backend *b, fdy_status st, const char *op,
                           fdy_error *err) {
  if (st == FDY_OK || b->lost) {
    return st;
  }
  cudaError_t probe = cudaStreamQuery(b->ctx.internal);
  if (fdy_cuda_error_is_sticky(probe)) {
    return fdy_cuda_lose(b, probe, op, err);
  }
  if (probe != cudaSuccess) {
    cudaGetLastError();
  }
  return st;
}

void fdy_cuda_count_submission(cuda_backend *b, fdy_backend_stream *s,
                               const char *entry, const fdy_op *op) {
  cuda_submission sub = {.seq = ++b->submissions, .entry = entry};
  if (op != NULL) {
    sub.kind = op->kind;
  }
  if (s->pending.seq == 0) {
    s->pending = sub;
  }
  s->last = sub;
  b->submitted = true;
}
