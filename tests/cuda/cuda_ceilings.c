/* cuda_ceilings: prints the CUDA backend's measured ceilings at a few sizes:
 * H2D from cudaHostAlloc memory, from malloc memory registered through the
 * backend and from the same memory unregistered; D2D counting bytes read and
 * written; the checksum kernel alone; then the checksum kernel's rate at
 * several grid sizes (the tuning knob; see docs/tuning-log.md). Not a test:
 * timings never decide one. Usage: cuda_ceilings [repeats]. */
#include "cuda_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const fdy_error *err) {
  fprintf(stderr, "cuda_ceilings: %s: %s\n", what, err->message);
  return 1;
}

/* Median checksum rate over a filled resident buffer with a given grid. */
static int grid_rate(fdy_backend *b, uint64_t bytes, int blocks,
                     uint32_t repeats, double *rate) {
  fdy_error err;
  fdy_cuda_ctx *ctx = fdy_cuda_ctx_of(b, "grid_rate", &err);
  void *data = NULL, *flush = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double *t = calloc(repeats, sizeof *t);
  if (ctx == NULL || t == NULL || cudaMalloc(&data, bytes) != cudaSuccess ||
      cudaMalloc(&flush, 2 * ctx->l2_bytes) != cudaSuccess ||
      cudaMemset(flush, 1, 2 * ctx->l2_bytes) != cudaSuccess ||
      cudaEventCreate(&e0) != cudaSuccess ||
      cudaEventCreate(&e1) != cudaSuccess ||
      fdy_cuda_fill_enqueue(data, bytes, 7, ctx->internal) != cudaSuccess) {
    return 1;
  }
  for (uint32_t r = 0; r <= repeats; r++) {
    fdy_cuda_checksum_enqueue(flush, 2 * ctx->l2_bytes, 1, ctx->max_blocks,
                              ctx->internal_dev, ctx->internal_host,
                              ctx->internal);
    cudaEventRecord(e0, ctx->internal);
    fdy_cuda_checksum_enqueue(data, bytes, 1, blocks, ctx->internal_dev,
                              ctx->internal_host, ctx->internal);
    cudaEventRecord(e1, ctx->internal);
    if (cudaEventSynchronize(e1) != cudaSuccess) {
      return 1;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r > 0) {
      t[r - 1] = ms / 1e3;
    }
  }
  for (uint32_t i = 0; i < repeats; i++) {
    for (uint32_t j = i + 1; j < repeats; j++) {
      if (t[j] < t[i]) {
        double x = t[i];
        t[i] = t[j];
        t[j] = x;
      }
    }
  }
  *rate = (double)bytes / t[repeats / 2];
  free(t);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(data);
  cudaFree(flush);
  return 0;
}

/* Host-timed copy_to_device of bytes from pageable memory through a staged
 * backend (fill threads + staging ring), median of repeats. */
static int staged_rate(uint64_t bytes, uint32_t repeats, double *rate) {
  fdy_error err;
  fdy_cuda_options opts = {.host_mode = FDY_CUDA_HOST_STAGED};
  fdy_backend *b = NULL;
  fdy_backend_stream *s = NULL;
  fdy_backend_buffer *buf = NULL;
  unsigned char *src = malloc(bytes);
  double best = 0;
  if (src == NULL || fdy_cuda_backend_create(&opts, &b, &err) != FDY_OK ||
      b->ops->stream_create(b, &s, &err) != FDY_OK ||
      b->ops->buffer_alloc(b, bytes, &buf, &err) != FDY_OK) {
    return 1;
  }
  memset(src, 0x33, bytes);
  for (uint32_t r = 0; r <= repeats; r++) {
    fdy_backend_event *e = NULL;
    int64_t t0 = fdy_now_ns();
    if (b->ops->copy_to_device(b, s, buf, 0, src, bytes, &e, &err) != FDY_OK ||
        b->ops->host_wait(b, e, &err) != FDY_OK) {
      return fail("staged copy", &err);
    }
    int64_t t1 = fdy_now_ns();
    b->ops->event_release(b, e);
    double rr = (double)bytes / ((double)(t1 - t0) / 1e9);
    if (r > 0 && rr > best) {
      best = rr;
    }
  }
  *rate = best;
  b->ops->buffer_release(b, buf);
  b->ops->stream_destroy(b, s);
  fdy_backend_destroy(b);
  free(src);
  return 0;
}

int main(int argc, char **argv) {
  uint32_t repeats = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 20;
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
  fdy_cuda_ctx *ctx = fdy_cuda_ctx_of(b, "main", &err);
  printf("device %s, runtime %d, driver %d, copy engines %u, max blocks %d, "
         "L2 %llu\n",
         caps.name, rv, dv, caps.copy_engines, ctx->max_blocks,
         (unsigned long long)ctx->l2_bytes);
  const uint64_t sizes[] = {64u << 20, 256u << 20, 1u << 30};
  printf("%10s %12s %12s %12s %12s %9s\n", "bytes", "h2d_pinned",
         "h2d_pageable", "d2d_rw", "checksum", "cs/d2d");
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
  fdy_backend_destroy(b);
  return 0;
}
