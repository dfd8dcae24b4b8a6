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
  fprintf(stderr, "foundry %s: error: ", command);
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "\nTry 'foundry help %s'.\n", command);
  va_end(args);
  return FDY_EXIT_USAGE;
}

int fdy_cli_check_arguments(const char *command, int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    if (eq && eq[1] == '\0') {
      return fdy_cli_usage(command, "%.*s needs a non-empty value",
                           (int)(eq - arg), arg);
    }
    if (arg[0] != '\0') {
      continue;
    }
    if (i > 1 && strncmp(argv[i - 1], "--", 2) == 0 &&
        strchr(argv[i - 1], '=') == NULL) {
      return fdy_cli_usage(command, "%s needs a non-empty value", argv[i - 1]);
    }
    return fdy_cli_usage(command, "argument %d is empty", i);
  }
  return FDY_EXIT_OK;
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
