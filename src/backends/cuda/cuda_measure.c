/* Measurement helpers of the CUDA backend (fdy_cuda_measure_*): the ceilings
 * the benchmark compares plan runs against, outside any plan. Each runs on
 * the backend's internal stream, warms up once, times every repeat with a
 * pair of CUDA events and returns the median rate. Device-to-device and
 * checksum repeats first read a scratch buffer of twice the L2 size
 * (untimed) so that no repeat reads what the previous one left in L2.
 * Temporaries are freed on every path. */
#include "cuda_internal.h"

#include <stdlib.h>

typedef struct measure {
  fdy_cuda_ctx *ctx;
  const char *op;
  uint32_t repeats;
  cudaEvent_t start, end;
  void *flush; /* 2 x L2 bytes, or NULL */
  uint64_t flush_bytes;
  double *seconds; /* repeats entries */
} measure;

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, uint32_t n) {
  qsort(v, n, sizeof *v, compare_double);
  return n % 2 != 0 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void measure_end(measure *m) {
  if (m->start != NULL) {
    cudaEventDestroy(m->start);
  }
  if (m->end != NULL) {
    cudaEventDestroy(m->end);
  }
  if (m->ctx != NULL) {
    cudaStreamSynchronize(m->ctx->internal);
  }
  cudaFree(m->flush);
  cudaGetLastError();
  free(m->seconds);
}

static fdy_status measure_begin(measure *m, fdy_backend *b, const char *op,
                                uint64_t bytes, uint32_t repeats, bool flush,
                                double *bytes_per_second, fdy_error *err) {
  *m = (measure){.op = op, .repeats = repeats};
  if (bytes_per_second == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "bytes_per_second is NULL");
  }
  *bytes_per_second = 0;
  if (bytes == 0 || repeats == 0 || bytes > SIZE_MAX) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "bytes and repeats must be non-zero");
  }
  m->ctx = fdy_cuda_ctx_of(b, op, err);
  if (m->ctx == NULL) {
    return err != NULL ? err->kind : FDY_ERR_INVALID_ARGUMENT;
  }
  m->seconds = calloc(repeats, sizeof *m->seconds);
  if (m->seconds == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, op,
                         "cannot allocate %u timings", repeats);
  }
  fdy_status st =
      fdy_cuda_check(cudaEventCreate(&m->start), err, op, "cudaEventCreate");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventCreate(&m->end), err, op, "cudaEventCreate");
  }
  if (st == FDY_OK && flush && m->ctx->l2_bytes > 0) {
    m->flush_bytes = 2 * m->ctx->l2_bytes;
    st = fdy_cuda_check(cudaMalloc(&m->flush, (size_t)m->flush_bytes), err, op,
                        "cudaMalloc of the L2 scratch buffer");
    if (st != FDY_OK) {
      m->flush = NULL;
    } else {
      st = fdy_cuda_check(cudaMemsetAsync(m->flush, 1, (size_t)m->flush_bytes,
                                          m->ctx->internal),
                          err, op, "cudaMemsetAsync of the L2 scratch buffer");
    }
  }
  return st;
}

/* Untimed: read the scratch buffer (with the checksum kernel) so that L2
 * holds none of the inputs, and only clean lines: a flush by writing would
 * leave dirty lines whose write-back competes with the timed reads. */
static fdy_status flush_l2(measure *m, fdy_error *err) {
  if (m->flush == NULL) {
    return FDY_OK;
  }
  return fdy_cuda_check(
      fdy_cuda_checksum_enqueue(m->flush, m->flush_bytes, 1, m->ctx->max_blocks,
                                m->ctx->internal_dev, m->ctx->internal_host,
                                m->ctx->internal),
      err, m->op, "the L2 flush kernel launch");
}

static fdy_status record(measure *m, cudaEvent_t ev, fdy_error *err) {
  return fdy_cuda_check(cudaEventRecord(ev, m->ctx->internal), err, m->op,
                        "cudaEventRecord");
}

/* Waits for repeat rep and stores its time. */
static fdy_status collect(measure *m, uint32_t rep, fdy_error *err) {
  float ms = 0;
  fdy_status st = fdy_cuda_check(cudaEventSynchronize(m->end), err, m->op,
                                 "cudaEventSynchronize");
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaEventElapsedTime(&ms, m->start, m->end), err, m->op,
                        "cudaEventElapsedTime");
  }
  if (st == FDY_OK && ms <= 0) {
    ms = 1e-6f; /* below the timer's resolution */
  }
  m->seconds[rep] = (double)ms / 1e3;
  return st;
}

fdy_status fdy_cuda_measure_h2d(fdy_backend *b, const void *src, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  measure m;
  void *dst = NULL;
  fdy_status st = measure_begin(&m, b, "measure_h2d", bytes, repeats, false,
                                bytes_per_second, err);
  if (st == FDY_OK && src == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, m.op, "src is NULL");
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaMalloc(&dst, (size_t)bytes), err, m.op,
                        "cudaMalloc");
    if (st != FDY_OK) {
      dst = NULL;
    }
  }
  for (int64_t rep = -1; st == FDY_OK && rep < (int64_t)repeats; rep++) {
    st = record(&m, m.start, err);
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaMemcpyAsync(dst, src, (size_t)bytes,
                                          cudaMemcpyHostToDevice,
                                          m.ctx->internal),
                          err, m.op, "cudaMemcpyAsync");
    }
    if (st == FDY_OK) {
      st = record(&m, m.end, err);
    }
    if (st == FDY_OK) {
      st = collect(&m, rep < 0 ? 0 : (uint32_t)rep, err);
    }
  }
  if (st == FDY_OK) {
    *bytes_per_second = (double)bytes / median(m.seconds, repeats);
  }
  measure_end(&m);
  cudaFree(dst);
  cudaGetLastError();
  return st;
}

fdy_status fdy_cuda_measure_d2d(fdy_backend *b, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  measure m;
  void *from = NULL, *to = NULL;
  fdy_status st = measure_begin(&m, b, "measure_d2d", bytes, repeats, true,
                                bytes_per_second, err);
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaMalloc(&from, (size_t)bytes), err, m.op,
                        "cudaMalloc");
    if (st != FDY_OK) {
      from = NULL;
    }
  }
  if (st == FDY_OK) {
    st =
        fdy_cuda_check(cudaMalloc(&to, (size_t)bytes), err, m.op, "cudaMalloc");
    if (st != FDY_OK) {
      to = NULL;
    }
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(fdy_cuda_fill_enqueue(from, bytes, 1, m.ctx->internal),
                        err, m.op, "the fill kernel launch");
  }
  for (int64_t rep = -1; st == FDY_OK && rep < (int64_t)repeats; rep++) {
    st = flush_l2(&m, err);
    if (st == FDY_OK) {
      st = record(&m, m.start, err);
    }
    if (st == FDY_OK) {
      st = fdy_cuda_check(cudaMemcpyAsync(to, from, (size_t)bytes,
                                          cudaMemcpyDeviceToDevice,
                                          m.ctx->internal),
                          err, m.op, "cudaMemcpyAsync");
    }
    if (st == FDY_OK) {
      st = record(&m, m.end, err);
    }
    if (st == FDY_OK) {
      st = collect(&m, rep < 0 ? 0 : (uint32_t)rep, err);
    }
  }
  if (st == FDY_OK) {
    *bytes_per_second = 2.0 * (double)bytes / median(m.seconds, repeats);
  }
  measure_end(&m);
  cudaFree(from);
  cudaFree(to);
  cudaGetLastError();
  return st;
}

fdy_status fdy_cuda_measure_checksum(fdy_backend *b, uint64_t bytes,
                                     uint32_t repeats, double *bytes_per_second,
                                     fdy_error *err) {
  measure m;
  void *data = NULL;
  fdy_status st = measure_begin(&m, b, "measure_checksum", bytes, repeats, true,
                                bytes_per_second, err);
  if (st == FDY_OK) {
    st = fdy_cuda_check(cudaMalloc(&data, (size_t)bytes), err, m.op,
                        "cudaMalloc");
    if (st != FDY_OK) {
      data = NULL;
    }
  }
  if (st == FDY_OK) {
    st = fdy_cuda_check(fdy_cuda_fill_enqueue(data, bytes, 2, m.ctx->internal),
                        err, m.op, "the fill kernel launch");
  }
  for (int64_t rep = -1; st == FDY_OK && rep < (int64_t)repeats; rep++) {
    st = flush_l2(&m, err);
    if (st == FDY_OK) {
      st = record(&m, m.start, err);
    }
    if (st == FDY_OK) {
      st = fdy_cuda_check(
          fdy_cuda_checksum_enqueue(data, bytes, 1, m.ctx->max_blocks,
                                    m.ctx->internal_dev, m.ctx->internal_host,
                                    m.ctx->internal),
          err, m.op, "the checksum kernel launch");
    }
    if (st == FDY_OK) {
      st = record(&m, m.end, err);
    }
    if (st == FDY_OK) {
      st = collect(&m, rep < 0 ? 0 : (uint32_t)rep, err);
    }
  }
  if (st == FDY_OK) {
    *bytes_per_second = (double)bytes / median(m.seconds, repeats);
  }
  measure_end(&m);
  cudaFree(data);
  cudaGetLastError();
  return st;
}
