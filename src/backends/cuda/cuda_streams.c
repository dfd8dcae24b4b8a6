/* Streams, events, copies, waits and event times of the CUDA backend.
 *
 * Each backend stream is a non-blocking CUDA stream with its own set of
 * checksum words (a slot of a pool allocated at creation, so creating a
 * stream allocates no device memory); each backend event is one CUDA event
 * (with timing), recorded with cudaEventRecord as often as the caller
 * likes. Streams are synchronized before they are destroyed, so no work
 * hides on a stream that is gone.
 *
 * Host memory is copied straight from and to registered (page-locked)
 * memory, or through the staging ring (cuda_staging.c) in staged mode and
 * for memory that is not registered.
 *
 * Timestamps: at creation a calibration event is recorded on an idle stream
 * and synchronized; its host time is taken as the midpoint of fdy_now_ns()
 * before the record and after the synchronize (the best of a few tries), so
 * it is within half that window (a few microseconds) of the device time.
 * An event's host time is then calib_host_ns + cudaEventElapsedTime(calib,
 * ev) * 1e6. cudaEventElapsedTime is a float in milliseconds with about
 * 0.5 us resolution; its 24-bit mantissa adds about 1 us of rounding per 10 s
 * since creation, and the GPU and host clocks may drift apart by a few ppm. */
#include "../entry_errors.h"
#include "cuda_backend_internal.h"

#include <math.h>
#include <stdlib.h>

/* ---- streams and events ----------------------------------------------------
 */

cudaStream_t fdy_cuda_stream_of(const fdy_backend_stream *stream) {
  return stream->stream;
}

fdy_status fdy_cuda_stream_create(fdy_backend *base, fdy_backend_stream **out,
                                  fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
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
    return fdy_cuda_fail_lost(b, "stream_create", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "stream_create");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "stream_create", err);
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
    return fdy_cuda_settle(b, st, "stream_create", err);
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
    return fdy_cuda_settle(b, st, "stream_create", err);
  }
  s->id = ++b->streams_made;
  b->free_word_count--;
  fdy_list_push(&b->streams, &s->node);
  *out = s;
  return FDY_OK;
}

/* Work still queued on the stream completes first. */
void fdy_cuda_stream_destroy(fdy_backend *base, fdy_backend_stream *stream) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (stream == NULL) {
    return;
  }
  if (!b->lost) {
    fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
    cudaError_t rc = cudaStreamSynchronize(stream->stream);
    if (fdy_cuda_error_is_sticky(rc)) {
      fdy_cuda_lose(b, rc, "stream_destroy", NULL);
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

fdy_status fdy_cuda_event_create(fdy_backend *base, fdy_backend_event **out,
                                 fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (out == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_create",
                         "out is NULL");
  }
  *out = NULL;
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "event_create", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "event_create");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "event_create", err);
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
    return fdy_cuda_settle(b, st, "event_create", err);
  }
  fdy_list_push(&b->events, &e->node);
  *out = e;
  return FDY_OK;
}

void fdy_cuda_event_destroy(fdy_backend *base, fdy_backend_event *event) {
  cuda_backend *b = fdy_cuda_backend_of(base);
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

fdy_status fdy_cuda_event_record(fdy_backend *base, fdy_backend_stream *stream,
                                 fdy_backend_event *event, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (stream == NULL || event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_record",
                         "NULL stream or event");
  }
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "event_record", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "event_record");
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
  return fdy_cuda_settle(b, st, "event_record", err);
}

/* ---- copies ----------------------------------------------------------------
 */

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
  const fdy_backend_host *h = fdy_cuda_find_host(b, host, bytes);
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

/* Checks a copy's arguments; op names the entry. A range past the buffer
 * is the error every backend gives (fdy_entry_check_copy_range). */
static fdy_status check_copy(const char *op, const fdy_backend_stream *stream,
                             const fdy_backend_buffer *buffer, const void *host,
                             uint64_t offset, uint64_t bytes, fdy_error *err) {
  if (stream == NULL || buffer == NULL || (host == NULL && bytes > 0)) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "NULL stream, buffer or host memory");
  }
  return fdy_entry_check_copy_range("cuda", op, offset, bytes, buffer->bytes,
                                    err);
}

fdy_status fdy_cuda_copy_to_device(fdy_backend *base,
                                   fdy_backend_stream *stream,
                                   fdy_backend_buffer *dst, uint64_t dst_offset,
                                   const void *src, uint64_t bytes,
                                   fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  const char *op = "copy_to_device";
  if (b->lost) {
    return fdy_cuda_fail_lost(b, op, err);
  }
  fdy_status st = check_copy(op, stream, dst, src, dst_offset, bytes, err);
  if (st == FDY_OK) {
    st = fdy_cuda_set_device(b, err, op);
  }
  if (st != FDY_OK || bytes == 0) {
    return fdy_cuda_settle(b, st, op, err);
  }
  fdy_cuda_count_submission(b, stream, op, NULL);
  st = copy_pieces(b, stream->stream, (unsigned char *)dst->data + dst_offset,
                   src, bytes, false, err);
  return fdy_cuda_settle(b, st, op, err);
}

fdy_status fdy_cuda_copy_to_host(fdy_backend *base, fdy_backend_stream *stream,
                                 void *dst, fdy_backend_buffer *src,
                                 uint64_t src_offset, uint64_t bytes,
                                 fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  const char *op = "copy_to_host";
  if (b->lost) {
    return fdy_cuda_fail_lost(b, op, err);
  }
  fdy_status st = check_copy(op, stream, src, dst, src_offset, bytes, err);
  if (st == FDY_OK) {
    st = fdy_cuda_set_device(b, err, op);
  }
  if (st != FDY_OK || bytes == 0) {
    return fdy_cuda_settle(b, st, op, err);
  }
  fdy_cuda_count_submission(b, stream, op, NULL);
  st = copy_pieces(b, stream->stream, (unsigned char *)src->data + src_offset,
                   dst, bytes, true, err);
  return fdy_cuda_settle(b, st, op, err);
}

/* ---- waits and event times -------------------------------------------------
 */

fdy_status fdy_cuda_stream_wait(fdy_backend *base, fdy_backend_stream *stream,
                                fdy_backend_event *event, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (stream == NULL || event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "stream_wait",
                         "NULL stream or event");
  }
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "stream_wait", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "stream_wait");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaStreamWaitEvent(stream->stream, event->event, 0),
                        err, "stream_wait", "cudaStreamWaitEvent");
  }
  return fdy_cuda_settle(b, st, "stream_wait", err);
}

fdy_status fdy_cuda_host_wait(fdy_backend *base, fdy_backend_event *event,
                              fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (event == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "host_wait",
                         "NULL event");
  }
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "host_wait", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "host_wait");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventSynchronize(event->event), err, "host_wait",
                        "cudaEventSynchronize");
  }
  if (st == FDY_OK) {
    event->seen_done = event->recorded;
    fdy_cuda_sweep_retired(b, false, "host_wait");
  }
  return fdy_cuda_settle(b, st, "host_wait", err);
}

fdy_status fdy_cuda_event_time(fdy_backend *base, fdy_backend_event *event,
                               int64_t *out_ns, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (event == NULL || out_ns == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                         "NULL event or output");
  }
  if (!event->recorded) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "event_time",
                         "the event was never recorded");
  }
  if (b->lost) {
    return fdy_cuda_fail_lost(b, "event_time", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "event_time");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "event_time", err);
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
  return fdy_cuda_settle(b, st, "event_time", err);
}
