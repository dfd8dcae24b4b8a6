/* Shared helpers of the CLI commands (see cli_util.h). */
#include "cli_util.h"

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

fdy_status fdy_cli_read_file(const char *path, char **out, size_t *len,
                             fdy_error *err) {
  *out = NULL;
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    return fdy_error_set(err, errno == ENOENT ? FDY_ERR_NOT_FOUND : FDY_ERR_IO,
                         "cannot open '%s': %s", path, strerror(errno));
  }
  fdy_status status = FDY_OK;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 4096) {
      cap = cap ? cap * 2 : 65536;
      char *grown = realloc(buf, cap);
      if (!grown) {
        status = fdy_error_set(err, FDY_ERR_OUT_OF_MEMORY, "out of memory");
        goto cleanup;
      }
      buf = grown;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) {
      break;
    }
  }
  if (ferror(f)) {
    status = fdy_error_set(err, FDY_ERR_IO, "cannot read '%s': %s", path,
                           strerror(errno));
    goto cleanup;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  buf = NULL;
cleanup:
  free(buf);
  fclose(f);
  return status;
}

int fdy_cli_finish_stdout(void) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "foundry: error: cannot write standard output: %s\n",
            strerror(errno));
    return FDY_EXIT_FAILURE;
  }
  return FDY_EXIT_OK;
}

bool fdy_cli_stderr_is_tty(void) {
  return isatty(STDERR_FILENO) == 1;
}
