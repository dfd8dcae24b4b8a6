/* Device buffers and host registrations of the CUDA backend.
 *
 * Buffers are cudaMalloc allocations.
 *
 * Reference rule: a buffer released while work submitted since the last
 * drain may use it is retired instead of freed: the internal stream waits
 * for every stream (one reusable join event), then records the buffer's
 * fence event; the buffer is freed (cudaFree) once the fence completed, as
 * seen by a sweep in a later release, host_wait or drain.
 *
 * Host ranges are page-locked with cudaHostRegister in registered mode and
 * only recorded in staged mode (fdy_cuda_host_register below); the copies
 * of cuda_streams.c read them. */
#include "cuda_backend_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- buffers and the reference rule ---------------------------------------
 */

void fdy_cuda_buffer_free(const cuda_backend *b, fdy_backend_buffer *buf) {
  fdy_list_unlink(&buf->node);
  if (!b->lost) {
    if (buf->fence != NULL) {
      fdy_cuda_ignore(cudaEventDestroy(buf->fence));
    }
    fdy_cuda_ignore(cudaFree(buf->data));
  }
  free(buf);
}

void fdy_cuda_sweep_retired(cuda_backend *b, bool wait, const char *op) {
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
      fdy_cuda_lose(b, rc, op, NULL);
      return;
    }
    fdy_cuda_ignore(rc);
    fdy_cuda_buffer_free(b, buf);
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

void fdy_cuda_note_submitted(fdy_backend *b) {
  fdy_cuda_backend_of(b)->submitted = true;
}

fdy_status fdy_cuda_buffer_alloc(fdy_backend *base, uint64_t bytes,
                                 fdy_backend_buffer **out, fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
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
    return fdy_cuda_fail_lost(b, "buffer_alloc", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "buffer_alloc");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "buffer_alloc", err);
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
    return fdy_cuda_settle(b, st, "buffer_alloc", err);
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

void fdy_cuda_buffer_release(fdy_backend *base, fdy_backend_buffer *buffer) {
  cuda_backend *b = fdy_cuda_backend_of(base);
  if (buffer == NULL) {
    return;
  }
  if (b->lost) {
    fdy_cuda_buffer_free(b, buffer);
    return;
  }
  fdy_cuda_ignore(cudaSetDevice(b->ctx.device));
  fdy_list_unlink(&buffer->node);
  if (b->submitted) {
    cudaError_t rc = fence_after_all(b, buffer);
    if (rc == cudaSuccess) {
      fdy_list_push(&b->retired, &buffer->node);
      fdy_cuda_sweep_retired(b, false, "buffer_release");
      return;
    }
    if (fdy_cuda_error_is_sticky(rc)) {
      fdy_cuda_lose(b, rc, "buffer_release", NULL);
      fdy_cuda_buffer_free(b, buffer);
      return;
    }
    /* no fence: wait here for whatever may still use the buffer */
    fdy_cuda_ignore(rc);
    synchronize_streams(b);
    fdy_cuda_ignore(cudaStreamSynchronize(b->ctx.internal));
  }
  fdy_cuda_buffer_free(b, buffer);
  fdy_cuda_sweep_retired(b, false, "buffer_release");
}

/* ---- host registration -----------------------------------------------------
 */

fdy_backend_host *fdy_cuda_find_host(cuda_backend *b, const void *ptr,
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
fdy_status fdy_cuda_host_register(fdy_backend *base, const void *ptr,
                                  uint64_t bytes, fdy_backend_host **out,
                                  fdy_error *err) {
  cuda_backend *b = fdy_cuda_backend_of(base);
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
    return fdy_cuda_fail_lost(b, "host_register", err);
  }
  fdy_status st = fdy_cuda_set_device(b, err, "host_register");
  if (st != FDY_OK) {
    return fdy_cuda_settle(b, st, "host_register", err);
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
      return fdy_cuda_settle(
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

void fdy_cuda_host_unregister(fdy_backend *base, fdy_backend_host *host) {
  cuda_backend *b = fdy_cuda_backend_of(base);
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
