/* The staging ring of the CUDA backend: copies between pageable host memory
 * and the device go through a few page-locked buffers. On the way in, each
 * chunk is filled in parts on a host thread pool of the staging's own
 * (foundry/pool.h: the caller and parts - 1 workers, one fdy_host_copy a
 * part), then moved to the device with cudaMemcpyAsync. On the way out, the
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
#include "foundry/pool.h"

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

/* The outcome of one part of a fill. */
typedef struct fill_part {
  fdy_status status;
  fdy_error error;
} fill_part;

struct fdy_cuda_staging {
  uint64_t buffer_bytes;
  uint32_t count; /* buffers */
  uint32_t next;  /* buffer the next chunk goes to */
  void **buffers;
  cudaEvent_t *ready; /* recorded after the buffer's latest use */
  bool *used;         /* ready[i] was recorded at least once */
  staging_out *out;   /* per buffer: its chunk on the way out */
  uint32_t parts;     /* a chunk of STAGING_PARALLEL_MIN or more is filled in
                         this many parts */
  fdy_pool *pool;     /* parts threads, the caller included */
  fill_part *results; /* per part: the outcome of the current fill */
};

/* Bytes [*begin, *end) of part p of a job split in `parts`. */
static void part_range(uint64_t bytes, uint32_t parts, uint32_t p,
                       uint64_t *begin, uint64_t *end) {
  uint64_t piece = (bytes / parts + 63) & ~(uint64_t)63;
  *begin = piece * p < bytes ? piece * p : bytes;
  *end = p + 1 == parts || piece * (p + 1) > bytes ? bytes : piece * (p + 1);
}

/* One fill: bytes of src into dst, in s->parts parts. */
typedef struct fill_job {
  fdy_cuda_staging *s;
  unsigned char *dst;
  const unsigned char *src;
  uint64_t bytes;
} fill_job;

/* Copies parts [first, end) of the job (a pool task), each part's outcome
 * into its own result. */
static void fill_task(void *ctx, uint32_t first, uint32_t end,
                      uint32_t thread) {
  (void)thread;
  const fill_job *job = ctx;
  for (uint32_t p = first; p < end; p++) {
    uint64_t begin = 0, stop = 0;
    part_range(job->bytes, job->s->parts, p, &begin, &stop);
    fill_part *r = &job->s->results[p];
    r->status = stop > begin ? fdy_host_copy(job->dst + begin, job->src + begin,
                                             stop - begin, &r->error)
                             : FDY_OK;
  }
}

/* Tags a failed fill as the failure of copy_to_device. */
static fdy_status fill_status(fdy_status st, fdy_error *err) {
  if (st != FDY_OK && err != NULL) {
    fdy_error_prefix(err, "cuda copy_to_device");
    snprintf(err->backend_op, sizeof err->backend_op, "copy_to_device");
  }
  return st;
}

/* FDY_ERR_IO (backend_op copy_to_device) when src cannot be read: the
 * error of the first part that failed. */
static fdy_status fill(fdy_cuda_staging *s, void *dst, const void *src,
                       uint64_t bytes, fdy_error *err) {
  if (s->parts == 1 || bytes < STAGING_PARALLEL_MIN) {
    return fill_status(fdy_host_copy(dst, src, bytes, err), err);
  }
  fill_job job = {.s = s, .dst = dst, .src = src, .bytes = bytes};
  fdy_pool_run(s->pool, s->parts, 1, fill_task, &job);
  for (uint32_t p = 0; p < s->parts; p++) {
    if (s->results[p].status != FDY_OK) {
      if (err != NULL) {
        *err = s->results[p].error;
      }
      return fill_status(s->results[p].status, err);
    }
  }
  return FDY_OK;
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
  s->buffers = calloc(buffers, sizeof *s->buffers);
  s->ready = calloc(buffers, sizeof *s->ready);
  s->used = calloc(buffers, sizeof *s->used);
  s->out = calloc(buffers, sizeof *s->out);
  s->results = calloc(parts, sizeof *s->results);
  if (s->buffers == NULL || s->ready == NULL || s->used == NULL ||
      s->out == NULL || s->results == NULL) {
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
  st = fdy_pool_create(parts, &s->pool, err);
  if (st != FDY_OK) {
    if (err != NULL) {
      fdy_error_prefix(err, "cuda create: the staging fill threads");
      snprintf(err->backend_op, sizeof err->backend_op, "create");
    }
    goto cleanup;
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
  fdy_pool_destroy(s->pool);
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
  free(s->results);
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
