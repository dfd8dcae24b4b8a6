/* Measurement helpers of the CUDA backend (fdy_cuda_measure_*): the ceilings
 * the benchmark compares plan runs against, outside any plan. Each runs on
 * the backend's internal stream, warms up once, times every repeat with a
 * pair of CUDA events and returns the median rate. Device-to-device and
 * checksum repeats first read a scratch buffer of twice the L2 size
 * (untimed) so that no repeat reads what the previous one left in L2.
 * Temporaries are freed on every path. */
#include "cuda_internal.h"

#include <stdlib.h>

typedef struct measure measure;

/* Enqueues the measured operation once on the internal stream. */
typedef fdy_status (*measure_op)(const measure *m, fdy_error *err);

struct measure {
  fdy_cuda_ctx *ctx;
  const char *op;
  uint64_t bytes;
  uint32_t repeats;
  cudaEvent_t start, end;
  void *flush; /* 2 x L2 bytes, or NULL */
  uint64_t flush_bytes;
  const void *host; /* H2D: the caller's source */
  void *input;      /* D2D, checksum: filled device input, owned */
  void *output;     /* H2D, D2D: device destination, owned */
  double *seconds;  /* repeats entries */
};

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
    fdy_cuda_ignore(cudaEventDestroy(m->start));
  }
  if (m->end != NULL) {
    fdy_cuda_ignore(cudaEventDestroy(m->end));
  }
  if (m->ctx != NULL) { /* else nothing was allocated (a lost backend) */
    fdy_cuda_ignore(cudaStreamSynchronize(m->ctx->internal));
    fdy_cuda_ignore(cudaFree(m->flush));
    fdy_cuda_ignore(cudaFree(m->input));
    fdy_cuda_ignore(cudaFree(m->output));
  }
  free(m->seconds);
}

static fdy_status measure_begin(measure *m, fdy_backend *b, const char *op,
                                uint64_t bytes, uint32_t repeats, bool flush,
                                double *bytes_per_second, fdy_error *err) {
  *m = (measure){.op = op, .bytes = bytes, .repeats = repeats};
  if (bytes_per_second == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "bytes_per_second is NULL");
  }
  *bytes_per_second = 0;
  if (bytes == 0 || repeats == 0 || bytes > SIZE_MAX) {
    return fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, op,
                         "bytes and repeats must be non-zero");
  }
  fdy_status st = fdy_cuda_ctx_of(b, op, &m->ctx, err);
  if (st != FDY_OK) {
    return st;
  }
  m->seconds = calloc(repeats, sizeof *m->seconds);
  if (m->seconds == NULL) {
    return fdy_cuda_fail(err, FDY_ERR_OUT_OF_MEMORY, op,
                         "cannot allocate %u timings", repeats);
  }
  st = fdy_cuda_check(cudaEventCreate(&m->start), err, op, "cudaEventCreate");
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

/* *out = a device buffer of m->bytes (freed by measure_end). */
static fdy_status device_alloc(measure *m, void **out, fdy_error *err) {
  fdy_status st = fdy_cuda_check(cudaMalloc(out, (size_t)m->bytes), err, m->op,
                                 "cudaMalloc");
  if (st != FDY_OK) {
    *out = NULL;
  }
  return st;
}

/* Fills m->input with pseudo-random bytes from seed. */
static fdy_status fill_input(const measure *m, uint64_t seed, fdy_error *err) {
  return fdy_cuda_check(
      fdy_cuda_fill_enqueue(m->input, m->bytes, seed, m->ctx->internal), err,
      m->op, "the fill kernel launch");
}

/* Untimed: read the scratch buffer (with the checksum kernel) so that L2
 * holds none of the inputs, and only clean lines: a flush by writing would
 * leave dirty lines whose write-back competes with the timed reads. */
static fdy_status flush_l2(const measure *m, fdy_error *err) {
  if (m->flush == NULL) {
    return FDY_OK;
  }
  return fdy_cuda_check(
      fdy_cuda_checksum_enqueue(m->flush, m->flush_bytes, 1, m->ctx->max_blocks,
                                m->ctx->internal_words, NULL,
                                m->ctx->internal_sink, m->ctx->internal),
      err, m->op, "the L2 flush kernel launch");
}

static fdy_status record(const measure *m, cudaEvent_t ev, fdy_error *err) {
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

/* One untimed warm-up, then m->repeats timed runs of op, each after the L2
 * flush (when m has one); *seconds = the median time of a run. */
static fdy_status time_median(measure *m, measure_op op, double *seconds,
                              fdy_error *err) {
  fdy_status st = FDY_OK;
  for (int64_t rep = -1; st == FDY_OK && rep < (int64_t)m->repeats; rep++) {
    st = flush_l2(m, err);
    if (st == FDY_OK) {
      st = record(m, m->start, err);
    }
    if (st == FDY_OK) {
      st = op(m, err);
    }
    if (st == FDY_OK) {
      st = record(m, m->end, err);
    }
    if (st == FDY_OK) {
      st = collect(m, rep < 0 ? 0 : (uint32_t)rep, err);
    }
  }
  if (st == FDY_OK) {
    *seconds = median(m->seconds, m->repeats);
  }
  return st;
}

static fdy_status enqueue_h2d(const measure *m, fdy_error *err) {
  return fdy_cuda_check(cudaMemcpyAsync(m->output, m->host, (size_t)m->bytes,
                                        cudaMemcpyHostToDevice,
                                        m->ctx->internal),
                        err, m->op, "cudaMemcpyAsync");
}

static fdy_status enqueue_d2d(const measure *m, fdy_error *err) {
  return fdy_cuda_check(cudaMemcpyAsync(m->output, m->input, (size_t)m->bytes,
                                        cudaMemcpyDeviceToDevice,
                                        m->ctx->internal),
                        err, m->op, "cudaMemcpyAsync");
}

static fdy_status enqueue_checksum(const measure *m, fdy_error *err) {
  return fdy_cuda_check(
      fdy_cuda_checksum_enqueue(m->input, m->bytes, 1, m->ctx->max_blocks,
                                m->ctx->internal_words, NULL,
                                m->ctx->internal_sink, m->ctx->internal),
      err, m->op, "the checksum kernel launch");
}

fdy_status fdy_cuda_measure_h2d(fdy_backend *b, const void *src, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  measure m;
  double seconds = 0;
  fdy_status st = measure_begin(&m, b, "measure_h2d", bytes, repeats, false,
                                bytes_per_second, err);
  if (st == FDY_OK && src == NULL) {
    st = fdy_cuda_fail(err, FDY_ERR_INVALID_ARGUMENT, m.op, "src is NULL");
  }
  m.host = src;
  if (st == FDY_OK) {
    st = device_alloc(&m, &m.output, err);
  }
  if (st == FDY_OK) {
    st = time_median(&m, enqueue_h2d, &seconds, err);
  }
  if (st == FDY_OK) {
    *bytes_per_second = (double)bytes / seconds;
  }
  measure_end(&m);
  return st;
}

fdy_status fdy_cuda_measure_d2d(fdy_backend *b, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  measure m;
  double seconds = 0;
  fdy_status st = measure_begin(&m, b, "measure_d2d", bytes, repeats, true,
                                bytes_per_second, err);
  if (st == FDY_OK) {
    st = device_alloc(&m, &m.input, err);
  }
  if (st == FDY_OK) {
    st = device_alloc(&m, &m.output, err);
  }
  if (st == FDY_OK) {
    st = fill_input(&m, 1, err);
  }
  if (st == FDY_OK) {
    st = time_median(&m, enqueue_d2d, &seconds, err);
  }
  if (st == FDY_OK) {
    /* bytes read plus bytes written */
    *bytes_per_second = 2.0 * (double)bytes / seconds;
  }
  measure_end(&m);
  return st;
}

fdy_status fdy_cuda_measure_checksum(fdy_backend *b, uint64_t bytes,
                                     uint32_t repeats, double *bytes_per_second,
                                     fdy_error *err) {
  measure m;
  double seconds = 0;
  fdy_status st = measure_begin(&m, b, "measure_checksum", bytes, repeats, true,
                                bytes_per_second, err);
  if (st == FDY_OK) {
    st = device_alloc(&m, &m.input, err);
  }
  if (st == FDY_OK) {
    st = fill_input(&m, 2, err);
  }
  if (st == FDY_OK) {
    st = time_median(&m, enqueue_checksum, &seconds, err);
  }
  if (st == FDY_OK) {
    *bytes_per_second = (double)bytes / seconds;
  }
  measure_end(&m);
  return st;
}

fdy_status fdy_cuda_measure_ceiling(fdy_backend *b, fdy_ceiling_kind kind,
                                    const void *src, uint64_t bytes,
                                    uint32_t repeats, double *bytes_per_second,
                                    fdy_error *err) {
  switch (kind) {
  case FDY_CEILING_H2D:
    return fdy_cuda_measure_h2d(b, src, bytes, repeats, bytes_per_second, err);
  case FDY_CEILING_H2D_PINNED: {
    fdy_backend_host *registration = NULL;
    fdy_status st =
        src == NULL ? FDY_OK
                    : b->ops->host_register(b, src, bytes, &registration, err);
    if (st == FDY_OK) {
      st = fdy_cuda_measure_h2d(b, src, bytes, repeats, bytes_per_second, err);
    }
    if (registration != NULL) {
      b->ops->host_unregister(b, registration);
    }
    return st;
  }
  case FDY_CEILING_D2D:
    return fdy_cuda_measure_d2d(b, bytes, repeats, bytes_per_second, err);
  case FDY_CEILING_CHECKSUM:
    return fdy_cuda_measure_checksum(b, bytes, repeats, bytes_per_second, err);
  }
  if (bytes_per_second != NULL) {
    *bytes_per_second = 0;
  }
  return FDY_OK;
}
