/* The backend registry (foundry/registry.h): names to create functions. */
#include "foundry/registry.h"

#include <stdio.h>
#include <string.h>

#include "foundry/cpu.h"
#include "foundry/cuda.h"
#include "foundry/fake.h"
#include "foundry/fault.h"

static const fdy_backend_config default_config = {0};

static fdy_status create_cpu(const fdy_backend_config *c, fdy_backend **out,
                             fdy_error *err) {
  fdy_cpu_options o = {.memory_bytes = c->memory_bytes, .threads = c->threads};
  return fdy_cpu_backend_create(&o, out, err);
}

static fdy_status create_cuda(const fdy_backend_config *c, fdy_backend **out,
                              fdy_error *err) {
  fdy_cuda_options o = {.device = c->device,
                        .host_mode = c->host_mode,
                        .staging_bytes = c->staging_bytes,
                        .staging_buffers = c->staging_buffers,
                        .serial_launch = c->serial_launch};
  return fdy_cuda_backend_create(&o, out, err);
}

static fdy_status create_fake(const fdy_backend_config *c, fdy_backend **out,
                              fdy_error *err) {
  return fdy_fake_backend_create(c->fake, out, err);
}

static fdy_status create_fault(const fdy_backend_config *c, fdy_backend **out,
                               fdy_error *err) {
  if (c->inner == NULL || c->fault == NULL) {
    fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                  "the fault backend needs an inner backend and its options");
    if (err != NULL) {
      snprintf(err->name, sizeof err->name, "fault");
    }
    return FDY_ERR_INVALID_ARGUMENT;
  }
  return fdy_fault_backend_create(c->inner, c->fault, out, err);
}

typedef struct registry_entry {
  const char *name;
  fdy_status (*create)(const fdy_backend_config *c, fdy_backend **out,
                       fdy_error *err);
} registry_entry;

static const registry_entry entries[] = {
    {"cpu", create_cpu},
    {"cuda", create_cuda},
    {"fake", create_fake},
    {"fault", create_fault},
};

fdy_status fdy_backend_create_named(const char *name,
                                    const fdy_backend_config *config,
                                    fdy_backend **out, fdy_error *err) {
  *out = NULL;
  for (size_t i = 0; name != NULL && i < sizeof entries / sizeof entries[0];
       i++) {
    if (strcmp(name, entries[i].name) == 0) {
      return entries[i].create(config ? config : &default_config, out, err);
    }
  }
  fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                "unknown backend '%s' (cpu, cuda, fake or fault)",
                name ? name : "(null)");
  if (err != NULL) {
    snprintf(err->name, sizeof err->name, "%s", name ? name : "");
  }
  return FDY_ERR_INVALID_ARGUMENT;
}

bool fdy_backend_available(const char *name) {
  if (name == NULL) {
    return false;
  }
  if (strcmp(name, "cuda") == 0) {
    return fdy_cuda_device_count() > 0;
  }
  return strcmp(name, "cpu") == 0 || strcmp(name, "fake") == 0 ||
         strcmp(name, "fault") == 0;
}

uint32_t fdy_backend_threads(const fdy_backend *b) {
  return fdy_cpu_backend_threads(b);
}

void fdy_backend_runtime_versions(const char *name, int *runtime_version,
                                  int *driver_version) {
  int rv = 0, dv = 0;
  if (name != NULL && strcmp(name, "cuda") == 0) {
    fdy_cuda_versions(&rv, &dv);
  }
  if (runtime_version != NULL) {
    *runtime_version = rv;
  }
  if (driver_version != NULL) {
    *driver_version = dv;
  }
}

const char *fdy_host_mode_name(fdy_host_mode mode) {
  return fdy_cuda_host_mode_name(mode);
}
