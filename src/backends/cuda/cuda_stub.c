/* The CUDA backend when Foundry is built without CUDA (FOUNDRY_HAVE_CUDA
 * off): no devices, and every entry that needs one says so with
 * FDY_ERR_UNSUPPORTED. */
#include "foundry/cuda.h"

#include <stdio.h>

static fdy_status stub_unsupported(fdy_error *err, const char *op) {
  fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                "cuda %s: this Foundry was built without CUDA "
                "(configure with nvcc available or -DFOUNDRY_CUDA=ON)",
                op);
  if (err != NULL) {
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
  }
  return FDY_ERR_UNSUPPORTED;
}

int fdy_cuda_device_count(void) {
  return 0;
}

fdy_status fdy_cuda_backend_create(const fdy_cuda_options *options,
                                   fdy_backend **out, fdy_error *err) {
  (void)options;
  if (out != NULL) {
    *out = NULL;
  }
  return stub_unsupported(err, "create");
}

void fdy_cuda_versions(int *runtime_version, int *driver_version) {
  if (runtime_version != NULL) {
    *runtime_version = 0;
  }
  if (driver_version != NULL) {
    *driver_version = 0;
  }
}

fdy_status fdy_cuda_memory_in_use(fdy_backend *b, uint64_t *out,
                                  fdy_error *err) {
  (void)b;
  if (out != NULL) {
    *out = 0;
  }
  return stub_unsupported(err, "memory_in_use");
}

/* The measurement helpers: no rate. */
static fdy_status stub_no_rate(double *bytes_per_second, fdy_error *err,
                               const char *op) {
  if (bytes_per_second != NULL) {
    *bytes_per_second = 0;
  }
  return stub_unsupported(err, op);
}

fdy_status fdy_cuda_measure_h2d(fdy_backend *b, const void *src, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  (void)b;
  (void)src;
  (void)bytes;
  (void)repeats;
  return stub_no_rate(bytes_per_second, err, "measure_h2d");
}

fdy_status fdy_cuda_measure_d2d(fdy_backend *b, uint64_t bytes,
                                uint32_t repeats, double *bytes_per_second,
                                fdy_error *err) {
  (void)b;
  (void)bytes;
  (void)repeats;
  return stub_no_rate(bytes_per_second, err, "measure_d2d");
}

fdy_status fdy_cuda_measure_checksum(fdy_backend *b, uint64_t bytes,
                                     uint32_t repeats, double *bytes_per_second,
                                     fdy_error *err) {
  (void)b;
  (void)bytes;
  (void)repeats;
  return stub_no_rate(bytes_per_second, err, "measure_checksum");
}
