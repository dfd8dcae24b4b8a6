/* The CUDA backend: the backend contract over the CUDA runtime.
 *
 * Buffers are cudaMalloc allocations; each backend stream is a non-blocking
 * CUDA stream with its own set of checksum words (a slot of a pool
 * allocated at creation, so creating a stream allocates no device memory);
 * each backend event is one CUDA event (with timing), recorded with
 * cudaEventRecord as often as the caller likes. Copies and launches only
 * enqueue: nothing is tracked per submission, so a recorded step costs the
 * host no more than its CUDA calls. A launch checks the op (fdy_op_check,
 * supports_op in cuda_ops.c), resolves its views (and the workspace of a
 * MATMUL_Q4 of several rows) to device addresses and
 * enqueues its kernels through fdy_cuda_op_enqueue (ops_kernels.cu), the
 * CHECKSUM kind's among them.
 *
 * Host memory is copied straight from and to registered (page-locked)
 * memory, or through the staging ring (cuda_staging.c) in staged mode and
 * for memory that is not registered.
 *
 * Reference rule: a buffer released while work submitted since the last
 * drain may use it is retired instead of freed: the internal stream waits
 * for every stream (one reusable join event), then records the buffer's
 * fence event; the buffer is freed (cudaFree) once the fence completed, as
 * seen by a sweep in a later release, host_wait or drain. Streams are
 * synchronized before they are destroyed, so no work hides on a stream that
 * is gone.
 *
 * Timestamps: at creation a calibration event is recorded on an idle stream
 * and synchronized; its host time is taken as the midpoint of fdy_now_ns()
 * before the record and after the synchronize (the best of a few tries), so
 * it is within half that window (a few microseconds) of the device time.
 * An event's host time is then calib_host_ns + cudaEventElapsedTime(calib,
 * ev) * 1e6. cudaEventElapsedTime is a float in milliseconds with about
 * 0.5 us resolution; its 24-bit mantissa adds about 1 us of rounding per 10 s
 * since creation, and the GPU and host clocks may drift apart by a few ppm.
 *
 * The executor calls the backend from one thread at a time (backend.h), so
 * the backend's own state needs no lock; only the staging fill threads and
 * CUDA's host-function thread run beside the caller, on staging buffers
 * only. Every CUDA call is checked and a failure becomes an fdy_error with
 * the CUDA error's name and string, except in cleanup paths (release,
 * destroy, unwinding after a failure), which cannot report one and pass the
 * call's result to fdy_cuda_ignore instead.
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
#include "cuda_internal.h"

#include "handle_list.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_ALIGNMENT               256
#define CUDA_WORD_SETS               1024 /* set 0 is the internal stream's */
#define CUDA_DEFAULT_STAGING_BYTES   (16 * FDY_MIB)
#define CUDA_DEFAULT_STAGING_BUFFERS 4
#define CUDA_CALIBRATION_TRIES       5

struct fdy_backend_buffer {
  fdy_list_node node; /* on buffers, or on retired once released */
  void *data;
  uint64_t bytes;
  cudaEvent_t fence; /* retired: completes once no earlier work remains */
};

struct fdy_backend_host {
  fdy_list_node node;
  const void *ptr;
  uint64_t bytes;
  /* the part of [ptr, ptr + bytes) that cudaHostRegister page-locked
   * (registered mode): all of it, or only its whole pages when an edge page
   * was already pinned; empty when pin_begin == pin_end */
  uintptr_t pin_begin, pin_end;
  bool read_only; /* pinned with cudaHostRegisterReadOnly */
};

/* A copy or launch as the fault attribution names it. */
typedef struct cuda_submission {
  uint64_t seq;      /* 1-based over the backend's copies and launches; 0 =
                      * none */
  const char *entry; /* "copy_to_device", "copy_to_host", "launch" */
  fdy_op_kind kind;  /* of a launch (unused for copies) */
} cuda_submission;

struct fdy_backend_stream {
  fdy_list_node node;
  cudaStream_t stream;
  uint32_t words; /* index of its checksum word set */
  uint64_t id;    /* unique over the backend's life */
  /* its first submission since its last event recording (seq 0: none), and
   * its last submission */
  cuda_submission pending, last;
};

struct fdy_backend_event {
  fdy_list_node node;
  cudaEvent_t event;
  bool recorded;
  /* the current recording: its stream's id, the submissions it follows
   * since the stream's previous recording ([first, last]; first = last
   * when none), and whether the host saw it complete */
  uint64_t stream_id;
  cuda_submission first, last;
  bool seen_done;
};

typedef struct cuda_backend {
  fdy_backend base;
  fdy_cuda_ctx ctx;
  fdy_cuda_options opts;
  char name[128];
  uint64_t page_bytes; /* host page size */
  uint32_t copy_engines;
  cudaEvent_t calib;
  int64_t calib_host_ns;
  cudaEvent_t join; /* recorded on each stream to fence a release */
  fdy_list_node buffers, retired, events, streams, hosts;
  fdy_cuda_checksum_words *words; /* CUDA_WORD_SETS on the device */
  uint32_t *free_words;           /* indices of unused word sets */
  uint32_t free_word_count;
  fdy_cuda_staging *staging;
  bool submitted;       /* copies or launches since the last successful drain */
  uint64_t submissions; /* copies and launches so far */
  uint64_t streams_made;
  /* after a sticky error: no CUDA call is made any more, and every entry
   * fails with lost_error */
  bool lost;
  fdy_error lost_error;
} cuda_backend;

static const fdy_backend_ops cuda_ops;

static cuda_backend *cuda_of(fdy_backend *b) {
  return (cuda_backend *)b;
}

/* ---- errors ----------------------------------------------------------------
 */

fdy_status fdy_cuda_fail(fdy_error *err, fdy_status kind, const char *op,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(err, kind, NULL, 0, 0, fmt, ap);
  va_end(ap);
  fdy_error_prefix(err, "cuda %s", op);
  if (err != NULL) {
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
  }
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

/* Enters the lost state after sticky error rc, met by entry `op`: the fault
 * is attributed (see the top of the file) and err gets the error every
 * later entry repeats: FDY_ERR_BACKEND, backend_op = the entry of the
 * earliest unfinished submission (else op), name = its op kind (launches),
 * ids = the first and last submission of the range. */
static fdy_status lose(cuda_backend *b, cudaError_t rc, const char *op,
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

/* The error of any entry once the backend is lost: FDY_ERR_BACKEND,
 * backend_op = op, the other fields of the attributed error, and a message
 * repeating it. */
static fdy_status fail_lost(const cuda_backend *b, const char *op,
                            fdy_error *err) {
  if (err != NULL) {
    *err = b->lost_error;
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
    fdy_error_prefix(err, "cuda %s: the device was lost", op);
  }
  return FDY_ERR_BACKEND;
}

/* An entry's result: after a failure, asks the internal stream whether the
 * context took a sticky error (every call reports one then) and if so
 * enters the lost state, replacing err with the attributed error. */
static fdy_status settle(cuda_backend *b, fdy_status st, const char *op,
                         fdy_error *err) {
  if (st == FDY_OK || b->lost) {
    return st;
  }
  cudaError_t probe = cudaStreamQuery(b->ctx.internal);
  if (fdy_cuda_error_is_sticky(probe)) {
    return lose(b, probe, op, err);
  }
  if (probe != cudaSuccess) {
    cudaGetLastError();
  }
  return st;
}

/* Counts a copy (op NULL) or a launch of op queued on s. */
static void count_submission(cuda_backend *b, fdy_backend_stream *s,
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

static fdy_status set_device(cuda_backend *b, fdy_error *err, const char *op) {
  return fdy_cuda_check(cudaSetDevice(b->ctx.device), err, op, "cudaSetDevice");
}

fdy_status fdy_cuda_ctx_of(fdy_backend *b, const char *op, fdy_cuda_ctx **out,
                           fdy_error *err) {
  *out = NULL;
  if (b == NULL || b->ops != &cuda_ops) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "the backend is not a CUDA backend");
  }
  if (cuda_of(b)->lost) {
    return fail_lost(cuda_of(b), op, err);
  }
  fdy_status st = set_device(cuda_of(b), err, op);
  if (st == FDY_OK) {
    *out = &cuda_of(b)->ctx;
  }
  return st;
}

/* Keeps the first failure of a sequence: when st is one and *first is still
 * FDY_OK, sets *first to st and copies local into err. */
static void keep_first(fdy_status *first, fdy_status st, const fdy_error *local,
                       fdy_error *err) {
  if (st != FDY_OK && *first == FDY_OK) {
    *first = st;
    if (err != NULL) {
      *err = *local;
    }
  }
}

/* ---- buffers and the reference rule ---------------------------------------
 */

/* Frees buf; once the backend is lost, only its handle. */
static void buffer_free(const cuda_backend *b, fdy_backend_buffer *buf) {
  fdy_list_unlink(&buf->node);
  if (!b->lost) {
    if (buf->fence != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(buf->fence));
    }
    fdy_cuda_ignore(cudaFree(buf->data));
  }
  free(buf);
}

/* Frees the retired buffers whose fence completed; with `wait`, all of
 * them. A fence that reports a sticky error loses the backend (entry op
 * met it); one that reports another error frees its buffer too (the work
 * before it is over, one way or the other). */
static void sweep_retired(cuda_backend *b, bool wait, const char *op) {
  fdy_list_node *n = b->retired.next;
  while (n != &b->retired) {
    fdy_backend_buffer *buf = (fdy_backend_buffer *)n;
    n = n->next;
    cudaError_t rc =
        wait ? cudaEventSynchronize(buf->fence) : cudaEventQuery(buf->fence);
    if (rc == cudaErrorNotReady) {
      cudaGetLastError();
      continue;
    }
    if (fdy_cuda_error_is_sticky(rc)) {
      lose(b, rc, op, NULL);
      return;
    }
    fdy_cuda_ignore(rc);
    buffer_free(b, buf);
  }
}

/* Records buf's fence on the internal stream after it waited for every
 * stream's work submitted so far. */
static cudaError_t fence_after_all(cuda_backend *b, fdy_backend_buffer *buf) {
  cudaError_t rc =
      cudaEventCreateWithFlags(&buf->fence, cudaEventDisableTiming);
  if (rc != cudaSuccess) {
    buf->fence = NULL;
    return rc;
  }
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    cudaStream_t s = ((fdy_backend_stream *)n)->stream;
    rc = cudaEventRecord(b->join, s);
    if (rc == cudaSuccess) {
      rc = cudaStreamWaitEvent(b->ctx.internal, b->join, 0);
    }
    if (rc != cudaSuccess) {
      return rc;
    }
  }
  return cudaEventRecord(buf->fence, b->ctx.internal);
}

/* Waits for every stream (cleanup: errors are dropped). */
static void synchronize_streams(cuda_backend *b) {
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    fdy_cuda_ignore(cudaStreamSynchronize(((fdy_backend_stream *)n)->stream));
  }
}

cudaStream_t fdy_cuda_stream_of(const fdy_backend_stream *stream) {
  return stream->stream;
}

void fdy_cuda_note_submitted(fdy_backend *b) {
  cuda_of(b)->submitted = true;
}

/* ---- entries ---------------------------------------------------------------
 */

static fdy_status cuda_capabilities(fdy_backend *base, fdy_device_caps *out,
                                    fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "capabilities",
                         "out is NULL");
  }
  memset(out, 0, sizeof *out);
  if (b->lost) {
    return fail_lost(b, "capabilities", err);
  }
  fdy_status st = set_device(b, err, "capabilities");
  if (st != FDY_OK) {
    return settle(b, st, "capabilities", err);
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "capabilities", "cudaMemGetInfo");
  if (st != FDY_OK) {
    return settle(b, st, "capabilities", err);
  }
  snprintf(out->name, sizeof out->name, "%s", b->name);
  out->total_memory = total_bytes;
  out->free_memory = free_bytes;
  /* cudaMalloc can take at most what is free; the driver reports no other
   * limit. */
  out->max_allocation = free_bytes;
  out->alignment = CUDA_ALIGNMENT;
  out->concurrent_copy_compute = b->copy_engines > 0;
  out->copy_engines = b->copy_engines;
  return FDY_OK;
}

static bool cuda_supports_op(fdy_backend *base, const fdy_op *op) {
  return fdy_cuda_op_supported(&cuda_of(base)->ctx, op);
}

/* UINT64_MAX when the op is not supported (no workspace can be that big). */
static uint64_t cuda_workspace_bytes(fdy_backend *base, const fdy_op *op) {
  return op != NULL && cuda_supports_op(base, op)
             ? fdy_cuda_op_workspace_bytes(op)
             : UINT64_MAX;
}

static fdy_status cuda_buffer_alloc(fdy_backend *base, uint64_t bytes,
                                    fdy_backend_buffer **out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                         "out is NULL");
  }
  *out = NULL;
  if (bytes == 0 || bytes > SIZE_MAX) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "buffer_alloc",
                         "a buffer of %llu bytes was requested",
                         (unsigned long long)bytes);
  }
  if (b->lost) {
    return fail_lost(b, "buffer_alloc", err);
  }
  fdy_status st = set_device(b, err, "buffer_alloc");
  if (st != FDY_OK) {
    return settle(b, st, "buffer_alloc", err);
  }
  fdy_backend_buffer *buf = calloc(1, sizeof *buf);
  if (buf == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "buffer_alloc",
                         "cannot allocate a buffer handle");
  }
  cudaError_t rc = cudaMalloc(&buf->data, (size_t)bytes);
  if (rc != cudaSuccess) {
    free(buf);
    st = fdy_cuda_check(rc, err, "buffer_alloc", "cudaMalloc");
    if (err != NULL) {
      err->actual = bytes;
    }
    return settle(b, st, "buffer_alloc", err);
  }
  buf->bytes = bytes;
  fdy_list_push(&b->buffers, &buf->node);
  *out = buf;
  return FDY_OK;
}

void fdy_cuda_test_misdirect_buffer(fdy_backend_buffer *buffer,
                                    uintptr_t address) {
  buffer->data = (void *)address;
}

static void cuda_buffer_release(fdy_backend *base, fdy_backend_buffer *buffer) {
  cuda_backend *b = cuda_of(base);
  if (buffer == NULL) {
    return;
  }
  if (b->lost) {
    buffer_free(b, buffer);
    return;
  }
  fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  fdy_list_unlink(&buffer->node);
  if (b->submitted) {
    cudaError_t rc = fence_after_all(b, buffer);
    if (rc == cudaSuccess) {
      fdy_list_push(&b->retired, &buffer->node);
      sweep_retired(b, false, "buffer_release");
      return;
    }
    if (fdy_cuda_error_is_sticky(rc)) {
      lose(b, rc, "buffer_release", NULL);
      buffer_free(b, buffer);
      return;
    }
    /* no fence: wait here for whatever may still use the buffer */
    fdy_cuda_ignore(rc);
    synchronize_streams(b);
    fdy_cuda_ignore(cudaStreamSynchronize(b->ctx.internal));
  }
  buffer_free(b, buffer);
  sweep_retired(b, false, "buffer_release");
}

static fdy_backend_host *find_host(cuda_backend *b, const void *ptr,
                                   uint64_t bytes) {
  uintptr_t p = (uintptr_t)ptr;
  for (fdy_list_node *n = b->hosts.next; n != &b->hosts; n = n->next) {
    fdy_backend_host *h = (fdy_backend_host *)n;
    uintptr_t h0 = (uintptr_t)h->ptr;
    if (p >= h0 && p - h0 <= h->bytes && bytes <= h->bytes - (p - h0)) {
      return h;
    }
  }
  return NULL;
}

/* True when a page of [begin, end) belongs to a private, read-only mapping
 * of a file. cudaHostRegisterReadOnly does not return on those (seen with
 * driver 580.159.04 on Linux 6.18: MAP_PRIVATE | PROT_READ of an ext4 file,
 * populated or not), while shared file mappings, tmpfs and anonymous memory
 * register in well under a millisecond. Without /proc it says false. */
static bool private_file_mapping(uintptr_t begin, uintptr_t end) {
  FILE *maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) {
    return false;
  }
  char line[4352]; /* start-end perms offset dev inode path (PATH_MAX) */
  bool found = false;
  while (!found && fgets(line, sizeof line, maps) != NULL) {
    unsigned long lo = 0, hi = 0, inode = 0;
    char perms[5] = "";
    if (sscanf(line, "%lx-%lx %4s %*s %*s %lu", &lo, &hi, perms, &inode) == 4 &&
        lo < end && hi > begin) {
      found = perms[1] != 'w' && perms[3] == 'p' && inode != 0;
    }
  }
  fclose(maps);
  return found;
}

/* Page-locks [begin, end): writable when it can, else read-only (a read-only
 * shared file mapping, say), which is tried after any failure but "already
 * registered", except on a private read-only file mapping (*refused is set
 * then; see private_file_mapping). Returns the first attempt's error when
 * the second is not made or fails. */
static cudaError_t pin(uintptr_t begin, uintptr_t end, bool *read_only,
                       bool *refused) {
  void *p = (void *)begin;
  *read_only = false;
  cudaError_t rc =
      cudaHostRegister(p, (size_t)(end - begin), cudaHostRegisterDefault);
  if (rc == cudaSuccess || rc == cudaErrorHostMemoryAlreadyRegistered) {
    return rc;
  }
  cudaGetLastError();
  if (private_file_mapping(begin, end)) {
    *refused = true;
    return rc;
  }
  cudaError_t ro =
      cudaHostRegister(p, (size_t)(end - begin), cudaHostRegisterReadOnly);
  if (ro == cudaSuccess) {
    *read_only = true;
    return ro;
  }
  cudaGetLastError();
  return ro == cudaErrorHostMemoryAlreadyRegistered ? ro : rc;
}

/* In registered mode the range is page-locked (pin), which pins every page
 * the range touches. When a page at an edge is already pinned (an adjacent
 * registration shares it), only the whole pages inside the range are
 * pinned, and copies stage the partial edge pages (under a page each). In
 * staged mode the range is only recorded: every copy is staged anyway, so
 * the mode measures copies from pageable memory. */
static fdy_status cuda_host_register(fdy_backend *base, const void *ptr,
                                     uint64_t bytes, fdy_backend_host **out,
                                     fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                         "out is NULL");
  }
  *out = NULL;
  if (ptr == NULL || bytes == 0 || bytes > UINTPTR_MAX - (uintptr_t)ptr) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_register",
                         "a NULL, empty or wrapping host range was given");
  }
  if (b->lost) {
    return fail_lost(b, "host_register", err);
  }
  fdy_status st = set_device(b, err, "host_register");
  if (st != FDY_OK) {
    return settle(b, st, "host_register", err);
  }
  fdy_backend_host *h = calloc(1, sizeof *h);
  if (h == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "host_register",
                         "cannot allocate a registration handle");
  }
  if (b->opts.host_mode == FDY_CUDA_HOST_REGISTERED) {
    uintptr_t page = (uintptr_t)b->page_bytes;
    uintptr_t begin = (uintptr_t)ptr, end = begin + (uintptr_t)bytes;
    bool refused = false;
    cudaError_t rc = pin(begin, end, &h->read_only, &refused);
    if (rc == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();
      begin = (begin + page - 1) & ~(page - 1);
      end &= ~(page - 1);
      rc = end > begin ? pin(begin, end, &h->read_only, &refused) : cudaSuccess;
    }
    if (refused) {
      free(h);
      return fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "host_register",
                           "a private read-only file mapping cannot be "
                           "page-locked (cudaHostRegisterReadOnly does not "
                           "return on one); map the file MAP_SHARED, or copy "
                           "from it unregistered (staged)");
    }
    if (rc != cudaSuccess) {
      free(h);
      return settle(
          b, fdy_cuda_check(rc, err, "host_register", "cudaHostRegister"),
          "host_register", err);
    }
    h->pin_begin = begin;
    h->pin_end = end > begin ? end : begin;
  }
  h->ptr = ptr;
  h->bytes = bytes;
  fdy_list_push(&b->hosts, &h->node);
  *out = h;
  return FDY_OK;
}

static void cuda_host_unregister(fdy_backend *base, fdy_backend_host *host) {
  cuda_backend *b = cuda_of(base);
  if (host == NULL) {
    return;
  }
  fdy_list_unlink(&host->node);
  if (host->pin_end > host->pin_begin && !b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
    fdy_cuda_ignore(cudaHostUnregister((void *)host->pin_begin));
  }
  free(host);
}

static fdy_status cuda_stream_create(fdy_backend *base,
                                     fdy_backend_stream **out, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_create",
                         "out is NULL");
  }
  *out = NULL;
  if (b->free_word_count == 0) {
    return fdy_cuda_fail(err, FDY_ERR_BACKEND, "stream_create",
                         "at most %d streams can be live at once",
                         CUDA_WORD_SETS - 1);
  }
  if (b->lost) {
    return fail_lost(b, "stream_create", err);
  }
  fdy_status st = set_device(b, err, "stream_create");
  if (st != FDY_OK) {
    return settle(b, st, "stream_create", err);
  }
  fdy_backend_stream *s = calloc(1, sizeof *s);
  if (s == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "stream_create",
                         "cannot allocate a stream");
  }
  st = fdy_cuda_check(
      cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), err,
      "stream_create", "cudaStreamCreateWithFlags");
  if (st != FDY_OK) {
    free(s);
    return settle(b, st, "stream_create", err);
  }
  /* The set's last user left it zeroed; zeroing it again in stream order
   * costs nothing and does not rely on that. */
  s->words = b->free_words[b->free_word_count - 1];
  st = fdy_cuda_check(
      cudaMemsetAsync(&b->words[s->words], 0, sizeof *b->words, s->stream), err,
      "stream_create", "cudaMemsetAsync of its words");
  if (st != FDY_OK) {
    fdy_cuda_ignore(cudaStreamDestroy(s->stream));
    free(s);
    return settle(b, st, "stream_create", err);
  }
  s->id = ++b->streams_made;
  b->free_word_count--;
  fdy_list_push(&b->streams, &s->node);
  *out = s;
  return FDY_OK;
}

/* Work still queued on the stream completes first. */
static void cuda_stream_destroy(fdy_backend *base, fdy_backend_stream *stream) {
  cuda_backend *b = cuda_of(base);
  if (stream == NULL) {
    return;
  }
  if (!b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
    cudaError_t rc = cudaStreamSynchronize(stream->stream);
    if (fdy_cuda_error_is_sticky(rc)) {
      lose(b, rc, "stream_destroy", NULL);
    } else {
      fdy_cuda_ignore(rc);
      fdy_cuda_ignore(cudaStreamDestroy(stream->stream));
      /* its recordings completed: they are no fault's suspects */
      for (fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
        fdy_backend_event *e = (fdy_backend_event *)n;
        e->seen_done = e->seen_done || e->stream_id == stream->id;
      }
    }
  }
  fdy_list_unlink(&stream->node);
  b->free_words[b->free_word_count++] = stream->words;
  free(stream);
}

static fdy_status cuda_event_create(fdy_backend *base, fdy_backend_event **out,
                                    fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_create",
                         "out is NULL");
  }
  *out = NULL;
  if (b->lost) {
    return fail_lost(b, "event_create", err);
  }
  fdy_status st = set_device(b, err, "event_create");
  if (st != FDY_OK) {
    return settle(b, st, "event_create", err);
  }
  fdy_backend_event *e = calloc(1, sizeof *e);
  if (e == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "event_create",
                         "cannot allocate an event");
  }
  st = fdy_cuda_check(cudaEventCreate(&e->event), err, "event_create",
                      "cudaEventCreate");
  if (st != FDY_OK) {
    free(e);
    return settle(b, st, "event_create", err);
  }
  fdy_list_push(&b->events, &e->node);
  *out = e;
  return FDY_OK;
}

static void cuda_event_destroy(fdy_backend *base, fdy_backend_event *event) {
  cuda_backend *b = cuda_of(base);
  if (event == NULL) {
    return;
  }
  fdy_list_unlink(&event->node);
  if (!b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
    fdy_cuda_ignore(cudaEventDestroy(event->event));
  }
  free(event);
}

static fdy_status cuda_event_record(fdy_backend *base,
                                    fdy_backend_stream *stream,
                                    fdy_backend_event *event, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (stream == NULL || event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_record",
                         "NULL stream or event");
  }
  if (b->lost) {
    return fail_lost(b, "event_record", err);
  }
  fdy_status st = set_device(b, err, "event_record");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventRecord(event->event, stream->stream), err,
                        "event_record", "cudaEventRecord");
  }
  if (st == FDY_OK) {
    event->recorded = true;
    event->stream_id = stream->id;
    event->first = stream->pending.seq != 0 ? stream->pending : stream->last;
    event->last = stream->last;
    event->seen_done = false;
    stream->pending = (cuda_submission){0};
  }
  return settle(b, st, "event_record", err);
}

/* Queues a copy between device memory dev and host memory [host, host +
 * bytes) on s: straight from or to the part inside a registration's pinned
 * pages (writable pages when copying to the host), through the staging ring
 * for the rest. */
static fdy_status copy_direct(cudaStream_t s, unsigned char *dev,
                              uintptr_t host, uint64_t bytes, bool to_host,
                              fdy_error *err) {
  cudaError_t rc = to_host
                       ? cudaMemcpyAsync((void *)host, dev, (size_t)bytes,
                                         cudaMemcpyDeviceToHost, s)
                       : cudaMemcpyAsync(dev, (const void *)host, (size_t)bytes,
                                         cudaMemcpyHostToDevice, s);
  return fdy_cuda_check(rc, err, to_host ? "copy_to_host" : "copy_to_device",
                        "cudaMemcpyAsync");
}

static fdy_status copy_staged(cuda_backend *b, cudaStream_t s,
                              unsigned char *dev, uintptr_t host,
                              uint64_t bytes, bool to_host, fdy_error *err) {
  if (b->ctx.capture != NULL) {
    return fdy_cuda_capture_refuse(
        &b->ctx, to_host ? "copy_to_host" : "copy_to_device", err);
  }
  return to_host ? fdy_cuda_staging_copy_to_host(b->staging, s, (void *)host,
                                                 dev, bytes, err)
                 : fdy_cuda_staging_copy(b->staging, s, dev, (const void *)host,
                                         bytes, err);
}

static fdy_status copy_pieces(cuda_backend *b, cudaStream_t s,
                              unsigned char *dev, const void *host,
                              uint64_t bytes, bool to_host, fdy_error *err) {
  uintptr_t p0 = (uintptr_t)host, p1 = p0 + (uintptr_t)bytes;
  uintptr_t d0 = p0, d1 = p0; /* the direct part */
  const fdy_backend_host *h = find_host(b, host, bytes);
  if (h != NULL && h->pin_end > h->pin_begin && !(to_host && h->read_only)) {
    d0 = p0 > h->pin_begin ? p0 : h->pin_begin;
    d1 = p1 < h->pin_end ? p1 : h->pin_end;
  }
  if (d1 <= d0) {
    return copy_staged(b, s, dev, p0, bytes, to_host, err);
  }
  fdy_status st = FDY_OK;
  if (d0 > p0) {
    st = copy_staged(b, s, dev, p0, d0 - p0, to_host, err);
  }
  if (st == FDY_OK) {
    st = copy_direct(s, dev + (d0 - p0), d0, d1 - d0, to_host, err);
  }
  if (st == FDY_OK && p1 > d1) {
    st = copy_staged(b, s, dev + (d1 - p0), d1, p1 - d1, to_host, err);
  }
  return st;
}

/* Checks a copy's arguments; op names the entry. */
static fdy_status check_copy(const char *op, const fdy_backend_stream *stream,
                             const fdy_backend_buffer *buffer, const void *host,
                             uint64_t offset, uint64_t bytes, fdy_error *err) {
  uint64_t end = 0;
  if (stream == NULL || buffer == NULL || (host == NULL && bytes > 0)) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "NULL stream, buffer or host memory");
  }
  if (__builtin_add_overflow(offset, bytes, &end) || end > buffer->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, op,
        "copy of %llu bytes at offset %llu exceeds the buffer's %llu bytes",
        (unsigned long long)bytes, (unsigned long long)offset,
        (unsigned long long)buffer->bytes);
    if (err != NULL) {
      err->expected = buffer->bytes;
      err->actual = bytes;
    }
    return st;
  }
  return FDY_OK;
}

static fdy_status cuda_copy_to_device(fdy_backend *base,
                                      fdy_backend_stream *stream,
                                      fdy_backend_buffer *dst,
                                      uint64_t dst_offset, const void *src,
                                      uint64_t bytes, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  const char *op = "copy_to_device";
  if (b->lost) {
    return fail_lost(b, op, err);
  }
  fdy_status st = check_copy(op, stream, dst, src, dst_offset, bytes, err);
  if (st == FDY_OK) {
    st = set_device(b, err, op);
  }
  if (st != FDY_OK || bytes == 0) {
    return settle(b, st, op, err);
  }
  count_submission(b, stream, op, NULL);
  st = copy_pieces(b, stream->stream, (unsigned char *)dst->data + dst_offset,
                   src, bytes, false, err);
  return settle(b, st, op, err);
}

static fdy_status cuda_copy_to_host(fdy_backend *base,
                                    fdy_backend_stream *stream, void *dst,
                                    fdy_backend_buffer *src,
                                    uint64_t src_offset, uint64_t bytes,
                                    fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  const char *op = "copy_to_host";
  if (b->lost) {
    return fail_lost(b, op, err);
  }
  fdy_status st = check_copy(op, stream, src, dst, src_offset, bytes, err);
  if (st == FDY_OK) {
    st = set_device(b, err, op);
  }
  if (st != FDY_OK || bytes == 0) {
    return settle(b, st, op, err);
  }
  count_submission(b, stream, op, NULL);
  st = copy_pieces(b, stream->stream, (unsigned char *)src->data + src_offset,
                   dst, bytes, true, err);
  return settle(b, st, op, err);
}

/* The device address of operand `index` of op (inputs, then the output):
 * the view has a buffer and lies inside it at an offset that is a multiple
 * of CUDA_ALIGNMENT. Errors: FDY_ERR_INVALID_ARGUMENT with ids[0] = index,
 * expected = the buffer's bytes, actual = the view's end, name = the kind. */
static fdy_status launch_view(const fdy_op *op, uint32_t index,
                              unsigned char **address, fdy_error *err) {
  const fdy_tensor_view *v = index < op->input_count
                                 ? &op->inputs[index]
                                 : &op->outputs[index - op->input_count];
  uint64_t n = 0, end = 0;
  if (v->buffer == NULL ||
      fdy_tensor_bytes(v->dtype, v->shape, &n, NULL) != FDY_OK ||
      v->offset % CUDA_ALIGNMENT != 0 ||
      __builtin_add_overflow(v->offset, n, &end) || end > v->buffer->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "launch",
        "%s op: operand %u is unbound, not at a multiple of %d bytes or "
        "outside its buffer",
        fdy_op_kind_name(op->kind), index, CUDA_ALIGNMENT);
    if (err != NULL) {
      err->ids[0] = index;
      err->expected = v->buffer != NULL ? v->buffer->bytes : 0;
      err->actual = end;
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return st;
  }
  *address = (unsigned char *)v->buffer->data + v->offset;
  return FDY_OK;
}

/* The device address of op's workspace when the op needs one (NULL when
 * not): at least fdy_cuda_op_workspace_bytes, inside its buffer, at a
 * multiple of CUDA_ALIGNMENT. Errors: FDY_ERR_INVALID_ARGUMENT with ids[0]
 * = input_count + output_count, expected = the bytes needed, actual = the
 * bytes given, name "workspace". */
static fdy_status launch_workspace(const fdy_op *op, unsigned char **address,
                                   fdy_error *err) {
  const uint64_t need = fdy_cuda_op_workspace_bytes(op);
  const fdy_tensor_view *w = &op->workspace;
  uint64_t given = 0, end = 0;
  *address = NULL;
  if (need == 0) {
    return FDY_OK;
  }
  if (w->buffer == NULL ||
      fdy_tensor_bytes(w->dtype, w->shape, &given, NULL) != FDY_OK ||
      given < need || w->offset % CUDA_ALIGNMENT != 0 ||
      __builtin_add_overflow(w->offset, given, &end) ||
      end > w->buffer->bytes) {
    fdy_status st = fdy_cuda_fail(
        err, FDY_ERR_INVALID_ARGUMENT, "launch",
        "the %s op needs a workspace of %llu bytes at a multiple of %d bytes "
        "inside its buffer, got %llu",
        fdy_op_kind_name(op->kind), (unsigned long long)need, CUDA_ALIGNMENT,
        (unsigned long long)given);
    if (err != NULL) {
      err->ids[0] = op->input_count + op->output_count;
      err->expected = need;
      err->actual = given;
      snprintf(err->name, sizeof err->name, "workspace");
    }
    return st;
  }
  *address = (unsigned char *)w->buffer->data + w->offset;
  return FDY_OK;
}

/* Whether an op computes one row (the decode chain's ops, the LM head of a
 * prefill): those are programmatic dependent launches unless serial_launch
 * is set. Ops of many rows (prefill) keep serial launches: on the H200
 * their dependent launches made a 512-token prefill 1.4 ms slower
 * (docs/tuning-log.md, entry 16), and with the later kernels no faster
 * (entry 30). */
static bool one_row_op(const fdy_op *op) {
  return op->output_count > 0 && op->outputs[0].shape.rank > 0 &&
         op->outputs[0].shape.dims[0] == 1;
}

/* Checks the op (fdy_op_check, then supports_op), resolves every view, and
 * enqueues the op's kernels through fdy_cuda_op_enqueue with the stream's
 * word set. */
static fdy_status cuda_launch(fdy_backend *base, fdy_backend_stream *stream,
                              const fdy_op *op, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (b->lost) {
    return fail_lost(b, "launch", err);
  }
  if (stream == NULL || op == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "launch",
                         "NULL stream or op");
  }
  fdy_status st = fdy_op_check(op, err);
  if (st != FDY_OK) {
    if (err != NULL) {
      snprintf(err->backend_op, sizeof err->backend_op, "launch");
    }
    return st;
  }
  if (!fdy_cuda_op_supported(&b->ctx, op)) {
    st = fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "launch",
                       "this %s op exceeds the backend's limits (dimensions "
                       "below 2^31, shared memory, grid size, rope pairs)",
                       fdy_op_kind_name(op->kind));
    if (err != NULL) {
      snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
    }
    return st;
  }
  unsigned char *address[FDY_OP_MAX_INPUTS + FDY_OP_MAX_OUTPUTS] = {NULL};
  for (uint32_t i = 0; st == FDY_OK && i < op->input_count + op->output_count;
       i++) {
    st = launch_view(op, i, &address[i], err);
  }
  unsigned char *workspace = NULL;
  if (st == FDY_OK) {
    st = launch_workspace(op, &workspace, err);
  }
  if (st == FDY_OK) {
    st = set_device(b, err, "launch");
  }
  if (st != FDY_OK) {
    return settle(b, st, "launch", err);
  }
  count_submission(b, stream, "launch", op);
  fdy_cuda_op_args args = {.op = op,
                           .workspace = workspace,
                           .sm_count = b->ctx.sm_count,
                           .max_blocks = b->ctx.max_blocks,
                           .dependent =
                               !b->opts.serial_launch && one_row_op(op),
                           .words = &b->words[stream->words],
                           .counters = &b->words[stream->words].op_counters[0]};
  for (uint32_t i = 0; i < op->input_count; i++) {
    args.in[i] = address[i];
  }
  for (uint32_t j = 0; j < op->output_count; j++) {
    args.outputs[j] = address[op->input_count + j];
  }
  args.out = args.outputs[0];
  const cudaError_t rc = fdy_cuda_op_enqueue(&args, stream->stream);
  st = fdy_cuda_check(rc, err, "launch", "the kernel launch");
  if (st != FDY_OK && err != NULL) {
    snprintf(err->name, sizeof err->name, "%s", fdy_op_kind_name(op->kind));
  }
  return settle(b, st, "launch", err);
}

static fdy_status cuda_stream_wait(fdy_backend *base,
                                   fdy_backend_stream *stream,
                                   fdy_backend_event *event, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (stream == NULL || event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_wait",
                         "NULL stream or event");
  }
  if (b->lost) {
    return fail_lost(b, "stream_wait", err);
  }
  fdy_status st = set_device(b, err, "stream_wait");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaStreamWaitEvent(stream->stream, event->event, 0),
                        err, "stream_wait", "cudaStreamWaitEvent");
  }
  return settle(b, st, "stream_wait", err);
}

static fdy_status cuda_host_wait(fdy_backend *base, fdy_backend_event *event,
                                 fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_wait",
                         "NULL event");
  }
  if (b->lost) {
    return fail_lost(b, "host_wait", err);
  }
  fdy_status st = set_device(b, err, "host_wait");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventSynchronize(event->event), err, "host_wait",
                        "cudaEventSynchronize");
  }
  if (st == FDY_OK) {
    event->seen_done = event->recorded;
    sweep_retired(b, false, "host_wait");
  }
  return settle(b, st, "host_wait", err);
}

static fdy_status cuda_event_time(fdy_backend *base, fdy_backend_event *event,
                                  int64_t *out_ns, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (event == NULL || out_ns == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                         "NULL event or output");
  }
  if (!event->recorded) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                         "the event was never recorded");
  }
  if (b->lost) {
    return fail_lost(b, "event_time", err);
  }
  fdy_status st = set_device(b, err, "event_time");
  if (st != FDY_OK) {
    return settle(b, st, "event_time", err);
  }
  const cudaError_t done = cudaEventQuery(event->event);
  if (done == cudaErrorNotReady) {
    cudaGetLastError();
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                         "the event's recording has not completed");
  }
  float ms = 0;
  st = fdy_cuda_check(done, err, "event_time", "cudaEventQuery");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventElapsedTime(&ms, b->calib, event->event), err,
                        "event_time", "cudaEventElapsedTime");
  }
  if (st == FDY_OK) {
    event->seen_done = true;
    *out_ns = b->calib_host_ns + (int64_t)llround((double)ms * 1e6);
  }
  return settle(b, st, "event_time", err);
}

/* After a drain: every recording and every stream's work completed. */
static void saw_everything_done(cuda_backend *b) {
  for (fdy_list_node *n = b->events.next; n != &b->events; n = n->next) {
    fdy_backend_event *e = (fdy_backend_event *)n;
    e->seen_done = e->recorded;
  }
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    ((fdy_backend_stream *)n)->pending = (cuda_submission){0};
  }
}

/* Synchronizes every stream of the backend and the internal one, then
 * frees every retired buffer. After a failure it still does all of it, so
 * the caller can release everything; it returns the first error. Once the
 * backend is lost it waits for nothing and fails. */
static fdy_status cuda_drain(fdy_backend *base, fdy_error *err) {
  cuda_backend *b = cuda_of(base);
  if (b->lost) {
    return fail_lost(b, "drain", err);
  }
  fdy_status first = set_device(b, err, "drain");
  fdy_error local;
  for (fdy_list_node *n = b->streams.next; n != &b->streams; n = n->next) {
    fdy_status st =
        fdy_cuda_check(cudaStreamSynchronize(((fdy_backend_stream *)n)->stream),
                       &local, "drain", "cudaStreamSynchronize");
    keep_first(&first, st, &local, err);
  }
  fdy_status st = fdy_cuda_check(cudaStreamSynchronize(b->ctx.internal), &local,
                                 "drain", "cudaStreamSynchronize");
  keep_first(&first, st, &local, err);
  first = settle(b, first, "drain", err);
  if (!b->lost) {
    sweep_retired(b, true, "drain");
  }
  if (b->lost) {
    if (err != NULL) {
      *err = b->lost_error;
    }
    return FDY_ERR_BACKEND;
  }
  if (first == FDY_OK) {
    b->submitted = false;
    saw_everything_done(b);
  }
  return first;
}

/* Drains and frees every object, released or not; once the backend is
 * lost, only host memory, with no CUDA call. */
static void cuda_destroy(fdy_backend *base) {
  cuda_backend *b = cuda_of(base);
  if (!b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  }
  if (b->ctx.internal != NULL && !b->lost) {
    cuda_drain(base, NULL);
  }
  fdy_cuda_graphs_destroy_all(&b->ctx);
  while (b->streams.next != &b->streams) {
    cuda_stream_destroy(base, (fdy_backend_stream *)b->streams.next);
  }
  while (b->hosts.next != &b->hosts) {
    cuda_host_unregister(base, (fdy_backend_host *)b->hosts.next);
  }
  while (b->buffers.next != &b->buffers) {
    buffer_free(b, (fdy_backend_buffer *)b->buffers.next);
  }
  while (b->retired.next != &b->retired) {
    buffer_free(b, (fdy_backend_buffer *)b->retired.next);
  }
  while (b->events.next != &b->events) {
    cuda_event_destroy(base, (fdy_backend_event *)b->events.next);
  }
  fdy_cuda_staging_destroy(b->staging, b->lost);
  if (!b->lost) {
    if (b->ctx.internal != NULL) {
      fdy_cuda_ignore(cudaStreamSynchronize(b->ctx.internal));
      fdy_cuda_ignore(cudaStreamDestroy(b->ctx.internal));
    }
    if (b->calib != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(b->calib));
    }
    if (b->join != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(b->join));
    }
    fdy_cuda_ignore(cudaFree(b->words));
  }
  free(b->free_words);
  free(b);
}

static uint64_t cuda_submitted(fdy_backend *base) {
  return cuda_of(base)->submissions;
}

static const fdy_backend_ops cuda_ops = {
    .name = "cuda",
    .capabilities = cuda_capabilities,
    .supports_op = cuda_supports_op,
    .workspace_bytes = cuda_workspace_bytes,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_release = cuda_buffer_release,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .launch = cuda_launch,
    .stream_wait = cuda_stream_wait,
    .host_wait = cuda_host_wait,
    .event_time = cuda_event_time,
    .graph_begin = fdy_cuda_graph_begin,
    .graph_end = fdy_cuda_graph_end,
    .graph_launch = fdy_cuda_graph_launch,
    .graph_destroy = fdy_cuda_graph_destroy,
    .submitted = cuda_submitted,
    .measure_ceiling = fdy_cuda_measure_ceiling,
    .drain = cuda_drain,
    .destroy = cuda_destroy,
};

/* ---- creation
 * ----------------------------------------------------------------
 */

int fdy_cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void fdy_cuda_versions(int *runtime_version, int *driver_version) {
  int rv = 0, dv = 0;
  if (cudaRuntimeGetVersion(&rv) != cudaSuccess) {
    rv = 0;
  }
  if (cudaDriverGetVersion(&dv) != cudaSuccess) {
    dv = 0;
  }
  cudaGetLastError();
  if (runtime_version != NULL) {
    *runtime_version = rv;
  }
  if (driver_version != NULL) {
    *driver_version = dv;
  }
}

fdy_status fdy_cuda_memory_in_use(fdy_backend *b, uint64_t *out,
                                  fdy_error *err) {
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "memory_in_use",
                         "out is NULL");
  }
  *out = 0;
  fdy_cuda_ctx *ctx = NULL;
  fdy_status st = fdy_cuda_ctx_of(b, "memory_in_use", &ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  size_t free_bytes = 0, total_bytes = 0;
  st = fdy_cuda_check(cudaMemGetInfo(&free_bytes, &total_bytes), err,
                      "memory_in_use", "cudaMemGetInfo");
  if (st == FDY_OK) {
    *out = (uint64_t)(total_bytes - free_bytes);
  }
  return st;
}

/* Records calibration events on the idle internal stream and keeps the one
 * whose host window was narrowest. */
static fdy_status calibrate(cuda_backend *b, fdy_error *err) {
  int64_t best_window = INT64_MAX;
  for (int i = 0; i < CUDA_CALIBRATION_TRIES; i++) {
    cudaEvent_t ev = NULL;
    fdy_status st = fdy_cuda_check(cudaEventCreate(&ev), err, "create",
                                   "cudaEventCreate (calibration)");
    if (st != FDY_OK) {
      return st;
    }
    int64_t t0 = fdy_now_ns();
    st = fdy_cuda_check(cudaEventRecord(ev, b->ctx.internal), err, "create",
                        "cudaEventRecord (calibration)");
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaEventSynchronize(ev), err, "create",
                          "cudaEventSynchronize (calibration)");
    }
    int64_t t1 = fdy_now_ns();
    if (st != FDY_OK) {
      fdy_cuda_ignore(cudaEventDestroy(ev));
      return st;
    }
    if (t1 - t0 < best_window) {
      best_window = t1 - t0;
      if (b->calib != NULL) {
        fdy_cuda_ignore(cudaEventDestroy(b->calib));
      }
      b->calib = ev;
      b->calib_host_ns = t0 + (t1 - t0) / 2;
    } else {
      fdy_cuda_ignore(cudaEventDestroy(ev));
    }
  }
  return FDY_OK;
}

static uint32_t fill_parts(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long parts = cpus / 2;
  if (parts < 1) {
    parts = 1;
  }
  if (parts > 8) {
    parts = 8;
  }
  return (uint32_t)parts;
}

fdy_status fdy_cuda_backend_create(const fdy_cuda_options *options,
                                   fdy_backend **out, fdy_error *err) {
  fdy_cuda_options opts = {0};
  cuda_backend *b = NULL;
  fdy_status st = FDY_OK;
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "out is NULL");
  }
  *out = NULL;
  if (options != NULL) {
    opts = *options;
  }
  if (opts.host_mode != FDY_CUDA_HOST_REGISTERED &&
      opts.host_mode != FDY_CUDA_HOST_STAGED) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "unknown host mode %d", (int)opts.host_mode);
  }
  if (opts.staging_bytes == 0) {
    opts.staging_bytes = CUDA_DEFAULT_STAGING_BYTES;
  }
  if (opts.staging_buffers == 0) {
    opts.staging_buffers = CUDA_DEFAULT_STAGING_BUFFERS;
  }
  int count = fdy_cuda_device_count();
  if (count == 0) {
    return fdy_cuda_fail(err, FDY_ERR_UNSUPPORTED, "create",
                         "no CUDA device is available");
  }
  if (opts.device < 0 || opts.device >= count) {
    st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                       "device %d does not exist (%d devices)", opts.device,
                       count);
    if (err != NULL) {
      err->expected = (uint64_t)count;
      err->actual = (uint64_t)(int64_t)opts.device;
    }
    return st;
  }
  b = calloc(1, sizeof *b);
  if (b == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate the backend");
  }
  b->base.ops = &cuda_ops;
  b->base.self = b;
  b->opts = opts;
  b->ctx.device = opts.device;
  long page = sysconf(_SC_PAGESIZE);
  b->page_bytes = page > 0 ? (uint64_t)page : 4096;
  fdy_list_init(&b->buffers);
  fdy_list_init(&b->retired);
  fdy_list_init(&b->events);
  fdy_list_init(&b->streams);
  fdy_list_init(&b->hosts);
  fdy_list_init(&b->ctx.graphs);

  st = set_device(b, err, "create");
  if (st != FDY_OK) {
    goto cleanup;
  }
  struct cudaDeviceProp prop;
  st = fdy_cuda_check(cudaGetDeviceProperties(&prop, opts.device), err,
                      "create", "cudaGetDeviceProperties");
  if (st != FDY_OK) {
    goto cleanup;
  }
  snprintf(b->name, sizeof b->name, "%.127s", prop.name);
  b->copy_engines =
      prop.asyncEngineCount > 0 ? (uint32_t)prop.asyncEngineCount : 0;
  b->ctx.l2_bytes = prop.l2CacheSize > 0 ? (uint64_t)prop.l2CacheSize : 0;
  int per_sm = 0;
  st = fdy_cuda_check(fdy_cuda_checksum_occupancy(&per_sm), err, "create",
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (st != FDY_OK) {
    goto cleanup;
  }
  b->ctx.max_blocks = prop.multiProcessorCount * (per_sm > 0 ? per_sm : 1);
  b->ctx.sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  b->ctx.smem_optin = prop.sharedMemPerBlockOptin;

  st = fdy_cuda_check(
      cudaStreamCreateWithFlags(&b->ctx.internal, cudaStreamNonBlocking), err,
      "create", "cudaStreamCreateWithFlags");
  if (st != FDY_OK) {
    b->ctx.internal = NULL;
    goto cleanup;
  }
  st = fdy_cuda_check(
      cudaMalloc((void **)&b->words, CUDA_WORD_SETS * sizeof *b->words), err,
      "create", "cudaMalloc of the checksum words");
  if (st != FDY_OK) {
    b->words = NULL;
    goto cleanup;
  }
  /* On the internal stream, so that the warm-up's synchronize below also
   * orders it before any launch (a cudaMemset on the legacy default stream
   * is not ordered with the non-blocking streams the launches use). */
  st = fdy_cuda_check(cudaMemsetAsync(b->words, 0,
                                      CUDA_WORD_SETS * sizeof *b->words,
                                      b->ctx.internal),
                      err, "create", "cudaMemsetAsync of the checksum words");
  if (st != FDY_OK) {
    goto cleanup;
  }
  b->free_words = malloc(CUDA_WORD_SETS * sizeof *b->free_words);
  if (b->free_words == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                       "cannot allocate the word set list");
    goto cleanup;
  }
  for (uint32_t i = CUDA_WORD_SETS - 1; i >= 1; i--) {
    b->free_words[b->free_word_count++] = i;
  }
  b->ctx.internal_words = &b->words[0];
  b->ctx.internal_sink = (uint64_t *)&b->words[0].sink;
  st =
      fdy_cuda_check(cudaEventCreateWithFlags(&b->join, cudaEventDisableTiming),
                     err, "create", "cudaEventCreateWithFlags (join)");
  if (st != FDY_OK) {
    b->join = NULL;
    goto cleanup;
  }

  st = fdy_cuda_staging_create(opts.staging_bytes, opts.staging_buffers,
                               fill_parts(), &b->staging, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  /* Warm-up: loads the kernel module (lazy loading) now, so that device
   * memory in use does not change at the first launch. */
  st = fdy_cuda_check(
      fdy_cuda_checksum_enqueue(b->words, 0, 1, b->ctx.max_blocks,
                                b->ctx.internal_words, NULL,
                                b->ctx.internal_sink, b->ctx.internal),
      err, "create", "the warm-up checksum launch");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaStreamSynchronize(b->ctx.internal), err, "create",
                        "cudaStreamSynchronize (warm-up)");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(fdy_cuda_ops_prepare(b->ctx.smem_optin), err, "create",
                        "loading the op kernels");
  }
  if (st != FDY_OK) {
    goto cleanup;
  }
  st = calibrate(b, err);
  if (st != FDY_OK) {
    goto cleanup;
  }
  *out = &b->base;
  return FDY_OK;

cleanup:
  cuda_destroy(&b->base);
  return st;
}
