/* The staging ring of the CUDA backend: copies between pageable host memory
 * and the device go through a few page-locked buffers. On the way in, each
 * chunk is filled by the caller and a few fill threads (memcpy of one part
 * each), then moved to the device with cudaMemcpyAsync. On the way out, the
 * DMA into the buffer is followed on the stream by a host function
 * (cudaLaunchHostFunc, run by a CUDA thread) that copies it to its
 * destination. Either way an event recorded after the buffer's last use
 * guards its reuse. The ring is used round-robin by every stream; the host
 * waits on a buffer's event before using it again, so at most `buffers`
 * chunks are in flight. Filling reads the caller's memory with
 * fdy_host_copy, so a truncated file mapping fails the copy with FDY_ERR_IO
 * (nothing of the chunk is queued) instead of killing the process. */
#include "cuda_internal.h"

#include "foundry/host_copy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Chunks below this are filled by the caller alone. */
#define STAGING_PARALLEL_MIN ((uint64_t)1 << 20)

/* One chunk on its way out: the host function's argument. */
typedef struct staging_out {
  void *dst;
  const void *src; /* the staging buffer */
  size_t bytes;
} staging_out;

struct fdy_cuda_staging {
  uint64_t buffer_bytes;
  uint32_t count; /* buffers */
  uint32_t next;  /* buffer the next chunk goes to */
  void **buffers;
  cudaEvent_t *ready; /* recorded after the buffer's latest use */
  bool *used;         /* ready[i] was recorded at least once */
  staging_out *out;   /* per buffer: its chunk on the way out */
  /* fill threads: part p (1 .. parts - 1) of the current job */
  uint32_t parts;
  uint32_t threads_started;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t go;   /* a new job or stop */
  pthread_cond_t done; /* remaining reached 0 */
  /* which of the three were initialized (only those are destroyed) */
  bool mu_ready, go_ready, done_ready;
  uint64_t generation;
  uint32_t remaining;
  bool stop;
  unsigned char *job_dst;
  const unsigned char *job_src;
  uint64_t job_bytes;
  fdy_error job_error; /* first failed part of the job (kind FDY_OK: none) */
};

typedef struct fill_arg {
  fdy_cuda_staging *s;
  uint32_t part;
} fill_arg;

/* Bytes [*begin, *end) of part p of a job split in `parts`. */
static void part_range(uint64_t bytes, uint32_t parts, uint32_t p,
                       uint64_t *begin, uint64_t *end) {
  uint64_t piece = (bytes / parts + 63) & ~(uint64_t)63;
  *begin = piece * p < bytes ? piece * p : bytes;
  *end = p + 1 == parts || piece * (p + 1) > bytes ? bytes : piece * (p + 1);
}

static void *fill_main(void *arg) {
  fill_arg a = *(fill_arg *)arg;
  free(arg);
  fdy_cuda_staging *s = a.s;
  uint64_t seen = 0;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->generation == seen && !s->stop) {
      pthread_cond_wait(&s->go, &s->mu);
    }
    if (s->stop) {
      break;
    }
    seen = s->generation;
    unsigned char *dst = s->job_dst;
    const unsigned char *src = s->job_src;
    uint64_t bytes = s->job_bytes, begin = 0, end = 0;
    pthread_mutex_unlock(&s->mu);
    part_range(bytes, s->parts, a.part, &begin, &end);
    fdy_error error;
    fdy_status st = end > begin ? fdy_host_copy(dst + begin, src + begin,
                                                end - begin, &error)
                                : FDY_OK;
    pthread_mutex_lock(&s->mu);
    if (st != FDY_OK && s->job_error.kind == FDY_OK) {
      s->job_error = error;
    }
    if (--s->remaining == 0) {
      pthread_cond_signal(&s->done);
    }
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Tags a failed fill as the failure of copy_to_device. */
static fdy_status fill_status(fdy_status st, fdy_error *err) {
  if (st != FDY_OK && err != NULL) {
    fdy_error_prefix(err, "cuda copy_to_device");
    snprintf(err->backend_op, sizeof err->backend_op, "copy_to_device");
  }
  return st;
}

/* FDY_ERR_IO (backend_op copy_to_device) when src cannot be read. */
static fdy_status fill(fdy_cuda_staging *s, void *dst, const void *src,
                       uint64_t bytes, fdy_error *err) {
  if (s->threads_started == 0 || bytes < STAGING_PARALLEL_MIN) {
    return fill_status(fdy_host_copy(dst, src, bytes, err), err);
  }
  pthread_mutex_lock(&s->mu);
  s->job_dst = dst;
  s->job_src = src;
  s->job_bytes = bytes;
  s->remaining = s->threads_started;
  fdy_error_clear(&s->job_error);
  s->generation++;
  pthread_cond_broadcast(&s->go);
  pthread_mutex_unlock(&s->mu);
  uint64_t begin = 0, end = 0;
  part_range(bytes, s->parts, 0, &begin, &end);
  fdy_status st = fdy_host_copy(dst, src, end, err);
  pthread_mutex_lock(&s->mu);
  while (s->remaining > 0) {
    pthread_cond_wait(&s->done, &s->mu);
  }
  if (st == FDY_OK && s->job_error.kind != FDY_OK) {
    st = s->job_error.kind;
    if (err != NULL) {
      *err = s->job_error;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return fill_status(st, err);
}

fdy_status fdy_cuda_staging_create(uint64_t buffer_bytes, uint32_t buffers,
                                   uint32_t parts, fdy_cuda_staging **out,
                                   fdy_error *err) {
  fdy_status st = FDY_OK;
  *out = NULL;
  if (buffer_bytes == 0 || buffers == 0 || parts == 0 ||
      buffer_bytes > SIZE_MAX) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, "create",
                         "staging needs non-zero buffers, bytes and parts");
  }
  fdy_cuda_staging *s = calloc(1, sizeof *s);
  if (s == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate the staging ring");
  }
  s->buffer_bytes = buffer_bytes;
  s->count = buffers;
  s->parts = parts;
  int rc = pthread_mutex_init(&s->mu, NULL);
  s->mu_ready = rc == 0;
  if (rc == 0) {
    rc = pthread_cond_init(&s->go, NULL);
    s->go_ready = rc == 0;
  }
  if (rc == 0) {
    rc = pthread_cond_init(&s->done, NULL);
    s->done_ready = rc == 0;
  }
  if (rc != 0) {
    st = fdy_cuda_fail(err, FDY_ERR_BACKEND, "create",
                       "cannot set up the staging fill threads: %s failed: %s",
                       s->mu_ready ? "pthread_cond_init" : "pthread_mutex_init",
                       strerror(rc));
    goto cleanup;
  }
  s->buffers = calloc(buffers, sizeof *s->buffers);
  s->ready = calloc(buffers, sizeof *s->ready);
  s->used = calloc(buffers, sizeof *s->used);
  s->out = calloc(buffers, sizeof *s->out);
  s->threads = calloc(parts, sizeof *s->threads);
  if (s->buffers == NULL || s->ready == NULL || s->used == NULL ||
      s->out == NULL || s->threads == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                       "cannot allocate the staging ring");
    goto cleanup;
  }
  for (uint32_t i = 0; i < buffers; i++) {
    st = fdy_cuda_check(cudaHostAlloc(&s->buffers[i], (size_t)buffer_bytes,
                                      cudaHostAllocDefault),
                        err, "create", "cudaHostAlloc of a staging buffer");
    if (st != FDY_OK) {
      s->buffers[i] = NULL;
      goto cleanup;
    }
    st = fdy_cuda_check(
        cudaEventCreateWithFlags(&s->ready[i], cudaEventDisableTiming), err,
        "create", "cudaEventCreateWithFlags of a staging event");
    if (st != FDY_OK) {
      s->ready[i] = NULL;
      goto cleanup;
    }
  }
  for (uint32_t p = 1; p < parts; p++) {
    fill_arg *a = malloc(sizeof *a);
    if (a == NULL) {
      st = fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, "create",
                         "cannot allocate a fill thread argument");
      goto cleanup;
    }
    a->s = s;
    a->part = p;
    rc = pthread_create(&s->threads[p - 1], NULL, fill_main, a);
    if (rc != 0) {
      free(a);
      st = fdy_cuda_fail(err, FDY_ERR_BACKEND, "create",
                         "cannot start staging fill thread %u of %u: "
                         "pthread_create failed: %s",
                         p, parts - 1, strerror(rc));
      goto cleanup;
    }
    s->threads_started++;
  }
  *out = s;
  return FDY_OK;

cleanup:
  fdy_cuda_staging_destroy(s, false);
  return st;
}

void fdy_cuda_staging_destroy(fdy_cuda_staging *s, bool device_lost) {
  if (s == NULL) {
    return;
  }
  if (s->threads_started > 0) { /* threads start after every init */
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->go);
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->threads_started; i++) {
      pthread_join(s->threads[i], NULL);
    }
  }
  /* Creation fills the arrays only once all of them were allocated. */
  bool arrays =
      !device_lost && s->buffers != NULL && s->ready != NULL && s->used != NULL;
  for (uint32_t i = 0; arrays && i < s->count; i++) {
    if (s->ready[i] != NULL) {
      if (s->used[i]) {
        fdy_cuda_ignore(cudaEventSynchronize(s->ready[i]));
      }
      fdy_cuda_ignore(cudaEventDestroy(s->ready[i]));
    }
    if (s->buffers[i] != NULL) {
      fdy_cuda_ignore(cudaFreeHost(s->buffers[i]));
    }
  }
  if (s->done_ready) {
    pthread_cond_destroy(&s->done);
  }
  if (s->go_ready) {
    pthread_cond_destroy(&s->go);
  }
  if (s->mu_ready) {
    pthread_mutex_destroy(&s->mu);
  }
  free(s->threads);
  free(s->out);
  free(s->used);
  free(s->ready);
  free(s->buffers);
  free(s);
}

/* Waits until buffer s->next may be used again (its last use completed). */
static fdy_status take_buffer(fdy_cuda_staging *s, const char *op,
                              uint32_t *out, fdy_error *err) {
  uint32_t i = s->next;
  if (s->used[i]) {
    fdy_status st = fdy_cuda_check(cudaEventSynchronize(s->ready[i]), err, op,
                                   "cudaEventSynchronize on a staging buffer");
    if (st != FDY_OK) {
      return st;
    }
  }
  *out = i;
  return FDY_OK;
}

/* Records buffer i's event after its work on stream (st: the outcome of
 * queuing that work) and moves to the next buffer. When the event cannot be
 * recorded, the buffer's work cannot be tracked: the host waits for it here
 * and the record's error is the one reported. */
static fdy_status release_buffer(fdy_cuda_staging *s, cudaStream_t stream,
                                 uint32_t i, fdy_status st, const char *op,
                                 fdy_error *err) {
  fdy_error local;
  fdy_status rec = fdy_cuda_check(cudaEventRecord(s->ready[i], stream), &local,
                                  op, "cudaEventRecord after a staging use");
  if (rec != FDY_OK) {
    fdy_cuda_ignore(cudaStreamSynchronize(stream));
    s->used[i] = false;
    if (err != NULL) {
      *err = local;
    }
    return rec;
  }
  s->used[i] = true;
  s->next = (i + 1) % s->count;
  return st;
}

fdy_status fdy_cuda_staging_copy(fdy_cuda_staging *s, cudaStream_t stream,
                                 void *dst, const void *src, uint64_t bytes,
                                 fdy_error *err) {
  const char *op = "copy_to_device";
  const unsigned char *from = src;
  unsigned char *to = dst;
  for (uint64_t done = 0; done < bytes;) {
    uint64_t n =
        bytes - done < s->buffer_bytes ? bytes - done : s->buffer_bytes;
    uint32_t i = 0;
    fdy_status st = take_buffer(s, op, &i, err);
    if (st != FDY_OK) {
      return st;
    }
    st = fill(s, s->buffers[i], from + done, n, err);
    if (st != FDY_OK) {
      return st;
    }
    st = fdy_cuda_check(cudaMemcpyAsync(to + done, s->buffers[i], (size_t)n,
                                        cudaMemcpyHostToDevice, stream),
                        err, op, "cudaMemcpyAsync from a staging buffer");
    if (st != FDY_OK) {
      return st;
    }
    st = release_buffer(s, stream, i, st, op, err);
    if (st != FDY_OK) {
      return st;
    }
    done += n;
  }
  return FDY_OK;
}

static void CUDART_CB copy_out(void *arg) {
  const staging_out *o = arg;
  memcpy(o->dst, o->src, o->bytes);
}

fdy_status fdy_cuda_staging_copy_to_host(fdy_cuda_staging *s,
                                         cudaStream_t stream, void *dst,
                                         const void *src, uint64_t bytes,
                                         fdy_error *err) {
  const char *op = "copy_to_host";
  const unsigned char *from = src;
  unsigned char *to = dst;
  for (uint64_t done = 0; done < bytes;) {
    uint64_t n =
        bytes - done < s->buffer_bytes ? bytes - done : s->buffer_bytes;
    uint32_t i = 0;
    fdy_status st = take_buffer(s, op, &i, err);
    if (st != FDY_OK) {
      return st;
    }
    st = fdy_cuda_check(cudaMemcpyAsync(s->buffers[i], from + done, (size_t)n,
                                        cudaMemcpyDeviceToHost, stream),
                        err, op, "cudaMemcpyAsync into a staging buffer");
    if (st != FDY_OK) {
      return st;
    }
    s->out[i] = (staging_out){
        .dst = to + done, .src = s->buffers[i], .bytes = (size_t)n};
    st = fdy_cuda_check(cudaLaunchHostFunc(stream, copy_out, &s->out[i]), err,
                        op, "cudaLaunchHostFunc");
    /* the DMA into buffer i is queued either way: guard the buffer */
    st = release_buffer(s, stream, i, st, op, err);
    if (st != FDY_OK) {
      return st;
    }
    done += n;
  }
  return FDY_OK;
}
