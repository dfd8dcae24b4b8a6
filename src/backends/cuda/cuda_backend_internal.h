/* The backend object of the CUDA backend and the helpers its host files
 * share: cuda_backend.c (creation, launch, drain, destroy, the table, the
 * device queries), cuda_faults.c (errors, the attribution of device faults,
 * the lost state), cuda_memory.c (device buffers and the reference rule,
 * host registration) and cuda_streams.c (streams, events, copies, waits and
 * event times). Only those four include it; the other files of the backend
 * and the kernels see cuda_internal.h. */
#ifndef FOUNDRY_CUDA_BACKEND_INTERNAL_H
#define FOUNDRY_CUDA_BACKEND_INTERNAL_H

#include "cuda_internal.h"

#include "handle_list.h"

#define CUDA_WORD_SETS 1024 /* set 0 is the internal stream's */

/* A device buffer: live on buffers, or retired (the reference rule). */
struct fdy_backend_buffer {
  fdy_list_node node; /* on buffers, or on retired once released */
  void *data;
  uint64_t bytes;
  cudaEvent_t fence; /* retired: completes once no earlier work remains */
};

/* A host range given to host_register, and what of it is pinned. */
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

/* A backend stream and its place in the fault attribution. */
struct fdy_backend_stream {
  fdy_list_node node;
  cudaStream_t stream;
  uint32_t words; /* index of its checksum word set */
  uint64_t id;    /* unique over the backend's life */
  /* its first submission since its last event recording (seq 0: none), and
   * its last submission */
  cuda_submission pending, last;
};

/* A backend event and its current recording. */
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

/* The backend; base comes first (fdy_cuda_backend_of). */
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

/* The state of b, a backend of the CUDA table. */
static inline cuda_backend *fdy_cuda_backend_of(fdy_backend *b) {
  return (cuda_backend *)b;
}

/* Makes b's device current; fails with FDY_ERR_BACKEND naming op
 * (cuda_backend.c). */
fdy_status fdy_cuda_set_device(cuda_backend *b, fdy_error *err, const char *op);

/* ---- faults and the lost state (cuda_faults.c) ----------------------------
 */

/* Enters the lost state after sticky error rc, met by entry `op`: the fault
 * is attributed (see the top of cuda_faults.c) and err gets the error every
 * later entry repeats: FDY_ERR_BACKEND, backend_op = the entry of the
 * earliest unfinished submission (else op), name = its op kind (launches),
 * ids = the first and last submission of the range. */
fdy_status fdy_cuda_lose(cuda_backend *b, cudaError_t rc, const char *op,
                         fdy_error *err);
/* The error of any entry once the backend is lost: FDY_ERR_BACKEND,
 * backend_op = op, the other fields of the attributed error, and a message
 * repeating it. */
fdy_status fdy_cuda_fail_lost(const cuda_backend *b, const char *op,
                              fdy_error *err);
/* An entry's result: after a failure, asks the internal stream whether the
 * context took a sticky error (every call reports one then) and if so
 * enters the lost state, replacing err with the attributed error. */
fdy_status fdy_cuda_settle(cuda_backend *b, fdy_status st, const char *op,
                           fdy_error *err);
/* Counts a copy (op NULL) or a launch of op queued on s. */
void fdy_cuda_count_submission(cuda_backend *b, fdy_backend_stream *s,
                               const char *entry, const fdy_op *op);

/* ---- buffers and host registrations (cuda_memory.c) -----------------------
 */

/* Frees buf; once the backend is lost, only its handle. */
void fdy_cuda_buffer_free(const cuda_backend *b, fdy_backend_buffer *buf);
/* Frees the retired buffers whose fence completed; with `wait`, all of
 * them. A fence that reports a sticky error loses the backend (entry op
 * met it); one that reports another error frees its buffer too (the work
 * before it is over, one way or the other). */
void fdy_cuda_sweep_retired(cuda_backend *b, bool wait, const char *op);
/* The first registration on b->hosts that holds [ptr, ptr + bytes), or
 * NULL. */
fdy_backend_host *fdy_cuda_find_host(cuda_backend *b, const void *ptr,
                                     uint64_t bytes);
/* Entries of the backend table (backend.h). */
fdy_status fdy_cuda_buffer_alloc(fdy_backend *base, uint64_t bytes,
                                 fdy_backend_buffer **out, fdy_error *err);
void fdy_cuda_buffer_release(fdy_backend *base, fdy_backend_buffer *buffer);
fdy_status fdy_cuda_host_register(fdy_backend *base, const void *ptr,
                                  uint64_t bytes, fdy_backend_host **out,
                                  fdy_error *err);
void fdy_cuda_host_unregister(fdy_backend *base, fdy_backend_host *host);

/* ---- streams, events, copies and waits (cuda_streams.c) -------------------
 */

/* Entries of the backend table (backend.h). */
fdy_status fdy_cuda_stream_create(fdy_backend *base, fdy_backend_stream **out,
                                  fdy_error *err);
void fdy_cuda_stream_destroy(fdy_backend *base, fdy_backend_stream *stream);
fdy_status fdy_cuda_event_create(fdy_backend *base, fdy_backend_event **out,
                                 fdy_error *err);
void fdy_cuda_event_destroy(fdy_backend *base, fdy_backend_event *event);
fdy_status fdy_cuda_event_record(fdy_backend *base, fdy_backend_stream *stream,
                                 fdy_backend_event *event, fdy_error *err);
fdy_status fdy_cuda_copy_to_device(fdy_backend *base,
                                   fdy_backend_stream *stream,
                                   fdy_backend_buffer *dst, uint64_t dst_offset,
                                   const void *src, uint64_t bytes,
                                   fdy_error *err);
fdy_status fdy_cuda_copy_to_host(fdy_backend *base, fdy_backend_stream *stream,
                                 void *dst, fdy_backend_buffer *src,
                                 uint64_t src_offset, uint64_t bytes,
                                 fdy_error *err);
fdy_status fdy_cuda_stream_wait(fdy_backend *base, fdy_backend_stream *stream,
                                fdy_backend_event *event, fdy_error *err);
fdy_status fdy_cuda_host_wait(fdy_backend *base, fdy_backend_event *event,
                              fdy_error *err);
fdy_status fdy_cuda_event_time(fdy_backend *base, fdy_backend_event *event,
                               int64_t *out_ns, fdy_error *err);

#endif
