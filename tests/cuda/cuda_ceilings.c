/* cuda_ceilings: prints the CUDA backend's measured ceilings at a few sizes:
 * H2D from cudaHostAlloc memory, from malloc memory registered through the
 * backend and from the same memory unregistered; D2D counting bytes read and
 * written; the checksum kernel alone; then the checksum kernel's rate at
 * several grid sizes (the tuning knob; see docs/tuning-log.md), and the
 * time of one checksum and one D2D copy against size (their fixed cost is
 * the intercept). Not a test: timings never decide one.
 * Usage: cuda_ceilings [repeats]. */
#include "cuda_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const fdy_error *err) {
  fprintf(stderr, "cuda_ceilings: %s: %s\n", what, err->message);
  return 1;
}

/* Reports a failed CUDA call; true when e is cudaSuccess. */
static bool cuda_ok(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "cuda_ceilings: %s: %s\n", what, cudaGetErrorString(e));
  }
  return e == cudaSuccess;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median checksum rate over a filled resident buffer with a given grid
 * (at most `blocks`), each repeat after a read of 2 x L2 so that it reads
 * from memory. Returns 0, or 1 with the failure printed. */
static int grid_rate(fdy_backend *b, uint64_t bytes, int blocks,
                     uint32_t repeats, double *rate) {
  fdy_error err;
  fdy_cuda_ctx *ctx = NULL;
  if (fdy_cuda_ctx_of(b, "grid_rate", &ctx, &err) != FDY_OK) {
    return fail("grid_rate", &err);
  }
  void *data = NULL, *flush = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double *t = calloc(repeats, sizeof *t);
  const uint64_t flush_bytes = 2 * ctx->l2_bytes;
  bool ok = t != NULL && cuda_ok(cudaMalloc(&data, bytes), "cudaMalloc") &&
            cuda_ok(cudaMalloc(&flush, flush_bytes), "cudaMalloc") &&
            cuda_ok(cudaMemsetAsync(flush, 1, flush_bytes, ctx->internal),
                    "cudaMemsetAsync") &&
            cuda_ok(cudaEventCreate(&e0), "cudaEventCreate") &&
            cuda_ok(cudaEventCreate(&e1), "cudaEventCreate") &&
            cuda_ok(fdy_cuda_fill_enqueue(data, bytes, 7, ctx->internal),
                    "fill kernel");
  for (uint32_t r = 0; ok && r <= repeats; r++) {
    float ms = 0;
    ok = cuda_ok(fdy_cuda_checksum_enqueue(flush, flush_bytes, 1,
                                           ctx->max_blocks, ctx->internal_words,
                                           NULL, ctx->internal_sink,
                                           ctx->internal),
                 "L2 flush kernel") &&
         cuda_ok(cudaEventRecord(e0, ctx->internal), "cudaEventRecord") &&
         cuda_ok(fdy_cuda_checksum_enqueue(data, bytes, 1, blocks,
                                           ctx->internal_words, NULL,
                                           ctx->internal_sink, ctx->internal),
                 "checksum kernel") &&
         cuda_ok(cudaEventRecord(e1, ctx->internal), "cudaEventRecord") &&
         cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize") &&
         cuda_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (ok && r > 0) {
      t[r - 1] = ms / 1e3;
    }
  }
  if (ok) {
    qsort(t, repeats, sizeof *t, compare_double);
    *rate = (double)bytes / t[repeats / 2];
  }
  free(t);
  if (e0 != NULL) {
    cudaEventDestroy(e0);
  }
  if (e1 != NULL) {
    cudaEventDestroy(e1);
  }
  cudaFree(data);
  cudaFree(flush);
  return ok ? 0 : 1;
}

/* Host-timed copy_to_device of bytes from pageable memory through a staged
 * backend (fill threads + staging ring), best of repeats. Returns 0, or 1
 * with the failure printed. */
static int staged_rate(uint64_t bytes, uint32_t repeats, double *rate) {
  fdy_error err;
  fdy_cuda_options opts = {.host_mode = FDY_CUDA_HOST_STAGED};
  fdy_backend *b = NULL;
  fdy_backend_stream *s = NULL;
  fdy_backend_buffer *buf = NULL;
  fdy_backend_event *e = NULL;
  unsigned char *src = malloc(bytes);
  double best = 0;
  int rc = 1;
  if (src == NULL) {
    fprintf(stderr, "cuda_ceilings: out of memory\n");
    return 1;
  }
  if (fdy_cuda_backend_create(&opts, &b, &err) != FDY_OK ||
      b->ops->stream_create(b, &s, &err) != FDY_OK ||
      b->ops->event_create(b, &e, &err) != FDY_OK ||
      b->ops->buffer_alloc(b, bytes, &buf, &err) != FDY_OK) {
    fail("staged backend", &err);
    goto cleanup;
  }
  memset(src, 0x33, bytes);
  for (uint32_t r = 0; r <= repeats; r++) {
    int64_t t0 = fdy_now_ns();
    if (b->ops->copy_to_device(b, s, buf, 0, src, bytes, &err) != FDY_OK ||
        b->ops->event_record(b, s, e, &err) != FDY_OK ||
        b->ops->host_wait(b, e, &err) != FDY_OK) {
      fail("staged copy", &err);
      goto cleanup;
    }
    int64_t t1 = fdy_now_ns();
    double rr = (double)bytes / ((double)(t1 - t0) / 1e9);
    if (r > 0 && rr > best) {
      best = rr;
    }
  }
  *rate = best;
  rc = 0;

cleanup:
  if (b != NULL) {
    b->ops->drain(b, NULL);
    b->ops->buffer_release(b, buf);
    b->ops->event_destroy(b, e);
    b->ops->stream_destroy(b, s);
    fdy_backend_destroy(b);
  }
  free(src);
  return rc;
}

int main(int argc, char **argv) {
  unsigned long repeats_arg = 20;
  char *end = NULL;
  if (argc > 2 ||
      (argc == 2 && ((repeats_arg = strtoul(argv[1], &end, 10)) == 0 ||
                     *end != '\0' || repeats_arg > 10000))) {
    fprintf(stderr, "usage: cuda_ceilings [repeats: 1 to 10000, default 20]\n");
    return 2;
  }
  const uint32_t repeats = (uint32_t)repeats_arg;
  fdy_error err;
  fdy_backend *b = NULL;
  if (fdy_cuda_backend_create(NULL, &b, &err) != FDY_OK) {
    return fail("create", &err);
  }
  fdy_device_caps caps;
  if (b->ops->capabilities(b, &caps, &err) != FDY_OK) {
    return fail("capabilities", &err);
  }
  int rv = 0, dv = 0;
  fdy_cuda_versions(&rv, &dv);
  fdy_cuda_ctx *ctx = NULL;
  if (fdy_cuda_ctx_of(b, "main", &ctx, &err) != FDY_OK) {
    return fail("context", &err);
  }
  printf("device %s, runtime %d, driver %d, copy engines %u, max blocks %d, "
         "L2 %llu\n",
         caps.name, rv, dv, caps.copy_engines, ctx->max_blocks,
         (unsigned long long)ctx->l2_bytes);
  const uint64_t sizes[] = {64u << 20, 256u << 20, 1u << 30};
  printf("%10s %14s %14s %14s %14s %14s %8s\n", "bytes", "h2d_hostalloc",
         "h2d_registered", "h2d_pageable", "d2d_rw", "checksum", "cs/d2d");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    uint64_t n = sizes[i];
    unsigned char *src = malloc(n);
    if (src == NULL) {
      return 1;
    }
    memset(src, 0x5A, n);
    double pageable = 0, pinned = 0, d2d = 0, cs = 0, hostalloc = 0;
    fdy_backend_host *h = NULL;
    void *pinned_src = NULL;
    if (cudaHostAlloc(&pinned_src, n, cudaHostAllocDefault) != cudaSuccess) {
      return 1;
    }
    memset(pinned_src, 0x5A, n);
    if (fdy_cuda_measure_h2d(b, pinned_src, n, repeats, &hostalloc, &err) !=
            FDY_OK ||
        fdy_cuda_measure_h2d(b, src, n, repeats, &pageable, &err) != FDY_OK ||
        b->ops->host_register(b, src, n, &h, &err) != FDY_OK ||
        fdy_cuda_measure_h2d(b, src, n, repeats, &pinned, &err) != FDY_OK ||
        fdy_cuda_measure_d2d(b, n, repeats, &d2d, &err) != FDY_OK ||
        fdy_cuda_measure_checksum(b, n, repeats, &cs, &err) != FDY_OK) {
      return fail("measure", &err);
    }
    b->ops->host_unregister(b, h);
    cudaFreeHost(pinned_src);
    free(src);
    printf("%10llu %9.1f GB/s %9.1f GB/s %9.1f GB/s %9.1f GB/s %9.1f GB/s "
           "%7.1f%%\n",
           (unsigned long long)n, hostalloc / 1e9, pinned / 1e9, pageable / 1e9,
           d2d / 1e9, cs / 1e9, 100 * cs / d2d);
  }
  double staged = 0;
  if (staged_rate(1u << 30, 5, &staged) != 0) {
    fprintf(stderr, "cuda_ceilings: staged copy failed\n");
    return 1;
  }
  printf("staged copy_to_device of 1 GiB from pageable memory (best of 5, "
         "host-timed): %.1f GB/s\n",
         staged / 1e9);
  int sms = ctx->max_blocks; /* printed relative to the default */
  const double factors[] = {0.5, 1, 2, 4, 8};
  const uint64_t sweep_sizes[] = {64u << 20, 1u << 30};
  for (size_t z = 0; z < 2; z++) {
    printf("checksum grid sweep (%llu MiB):",
           (unsigned long long)(sweep_sizes[z] >> 20));
    for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
      int blocks = (int)(sms * factors[i]);
      double rate = 0;
      if (grid_rate(b, sweep_sizes[z], blocks, repeats, &rate) != 0) {
        fprintf(stderr, "cuda_ceilings: grid sweep failed\n");
        return 1;
      }
      printf("  %d: %.0f", blocks, rate / 1e9);
    }
    printf(" GB/s\n");
  }
  const uint64_t line_sizes[] = {4u << 10, 1u << 20, 16u << 20, 64u << 20,
                                 128u << 20};
  printf("time against size (median us): bytes, checksum, d2d copy\n");
  for (size_t i = 0; i < sizeof line_sizes / sizeof line_sizes[0]; i++) {
    uint64_t n = line_sizes[i];
    double cs = 0, d2d = 0;
    if (grid_rate(b, n, sms, repeats, &cs) != 0 ||
        fdy_cuda_measure_d2d(b, n, repeats, &d2d, &err) != FDY_OK) {
      fprintf(stderr, "cuda_ceilings: time against size failed\n");
      return 1;
    }
    printf("  %10llu %9.2f %9.2f\n", (unsigned long long)n, n / cs * 1e6,
           2.0 * n / d2d * 1e6);
  }
  fdy_backend_destroy(b);
  return 0;
}
