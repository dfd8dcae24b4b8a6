/* Shared helpers of the CLI commands (see cli_util.h). */
#include "cli_util.h"

#include "foundry/cpu.h"
#include "foundry/cuda.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fdy_cli_fail(const fdy_error *err) {
  fprintf(stderr, "foundry: error: %s\n",
          err && err->message[0] ? err->message : "unknown failure");
  if (err && err->cleanup_kind != FDY_OK) {
    fprintf(stderr, "foundry: error: cleanup also failed: %s\n",
            err->cleanup_message);
  }
  return FDY_EXIT_FAILURE;
}

int fdy_cli_usage(const char *command, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "foundry %s: ", command);
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\nTry 'foundry help %s'.\n", command);
  va_end(args);
  return FDY_EXIT_USAGE;
}

fdy_status fdy_cli_parse_uint(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t *out, fdy_error *err) {
  const char *p = text;
  bool ok = p && *p >= '0' && *p <= '9';
  uint64_t value = 0;
  for (; ok && *p; p++) {
    if (*p < '0' || *p > '9' || __builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, (uint64_t)(*p - '0'), &value)) {
      ok = false;
    }
  }
  if (!ok || value < min || value > max) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s must be an integer from %llu to %llu, got '%s'",
                         flag, (unsigned long long)min, (unsigned long long)max,
                         text ? text : "");
  }
  *out = value;
  return FDY_OK;
}

fdy_status fdy_cli_parse_ids(const char *flag, const char *text, int32_t **out,
                             uint32_t *count, fdy_error *err) {
  *out = NULL;
  *count = 0;
  if (!text || !*text) {
    return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                         "%s needs at least one id", flag);
  }
  uint32_t n = 1;
  for (const char *p = text; *p; p++) {
    n += *p == ',';
  }
  int32_t *ids = malloc(sizeof *ids * n);
  if (!ids) {
    return fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
  }
  const char *p = text;
  for (uint32_t i = 0; i < n; i++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[16];
    uint64_t value = 0;
    if (len == 0 || len >= sizeof item) {
      free(ids);
      return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                           "%s: item %u is not an id in '%s'", flag, i + 1,
                           text);
    }
    memcpy(item, p, len);
    item[len] = '\0';
    if (fdy_cli_parse_uint(flag, item, 0, INT32_MAX, &value, err) != FDY_OK) {
      free(ids);
      return err ? err->kind : FDY_ERR_INVALID_ARGUMENT;
    }
    ids[i] = (int32_t)value;
    p += len + 1;
  }
  *out = ids;
  *count = n;
  return FDY_OK;
}

bool fdy_cli_stderr_is_tty(void) {
  return isatty(STDERR_FILENO) == 1;
}

fdy_status fdy_cli_backend_create(const char *name, uint32_t threads,
                                  fdy_backend **out, fdy_error *err) {
  *out = NULL;
  if (strcmp(name, "cpu") == 0) {
    fdy_cpu_options options = {.threads = threads};
    return fdy_cpu_backend_create(&options, out, err);
  }
  if (strcmp(name, "cuda") == 0) {
    if (fdy_cuda_device_count() == 0) {
      return fdy_error_set(err, FDY_ERR_UNSUPPORTED,
                           "--backend cuda needs a CUDA device and a CUDA "
                           "build; none is available here");
    }
    return fdy_cuda_backend_create(NULL, out, err);
  }
  return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "--backend must be cpu or cuda, got '%s'", name);
}

fdy_status fdy_cli_parse_kv_dtype(const char *text, fdy_dtype *out,
                                  fdy_error *err) {
  if (strcmp(text, "f32") == 0) {
    *out = FDY_DTYPE_F32;
    return FDY_OK;
  }
  if (strcmp(text, "f16") == 0) {
    *out = FDY_DTYPE_F16;
    return FDY_OK;
  }
  return fdy_error_set(err, FDY_ERR_INVALID_ARGUMENT,
                       "--kv-dtype must be f32 or f16, got '%s'", text);
}
