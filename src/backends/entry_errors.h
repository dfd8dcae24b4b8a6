/* The errors of backend entries, written alike by every backend that
 * includes this (cpu, cuda): the message starts with the backend
 * and the entry ("cpu copy_to_device: ...") and backend_op names the
 * entry. Header only. */
#ifndef FOUNDRY_BACKENDS_ENTRY_ERRORS_H
#define FOUNDRY_BACKENDS_ENTRY_ERRORS_H

#include "foundry/core.h"

#include <stdarg.h>
#include <stdio.h>

/* Marks err, which another module filled (it may be NULL), as a failure
 * of entry op of backend ("cpu"): prefixes "<backend> <op>: " to the
 * message and sets backend_op = op. Returns kind. */
static inline fdy_status fdy_entry_tag(fdy_error *err, fdy_status kind,
                                       const char *backend, const char *op) {
  if (err != NULL) {
    snprintf(err->backend_op, sizeof err->backend_op, "%s", op);
    fdy_error_prefix(err, "%s %s", backend, op);
  }
  return kind;
}

/* Fills err (may be NULL) with kind and the printf-formatted message as
 * the failure of entry op of backend (fdy_entry_tag). Returns kind. */
static inline fdy_status fdy_entry_vfail(fdy_error *err, fdy_status kind,
                                         const char *backend, const char *op,
                                         const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

static inline fdy_status fdy_entry_vfail(fdy_error *err, fdy_status kind,
                                         const char *backend, const char *op,
                                         const char *fmt, va_list ap) {
  fdy_error_vsetf(err, kind, NULL, 0, 0, fmt, ap);
  return fdy_entry_tag(err, kind, backend, op);
}

/* FDY_OK when [offset, offset + bytes) lies inside a buffer of
 * buffer_bytes bytes; else FDY_ERR_INVALID_ARGUMENT from entry op of
 * backend (a copy) with expected = buffer_bytes and actual = the end of
 * the range (UINT64_MAX when it overflows). */
static inline fdy_status
fdy_entry_check_copy_range(const char *backend, const char *op, uint64_t offset,
                           uint64_t bytes, uint64_t buffer_bytes,
                           fdy_error *err) {
  uint64_t end = 0;
  bool overflow = __builtin_add_overflow(offset, bytes, &end);
  if (!overflow && end <= buffer_bytes) {
    return FDY_OK;
  }
  fdy_error_setf(
      err, FDY_ERR_INVALID_ARGUMENT, NULL, buffer_bytes,
      overflow ? UINT64_MAX : end,
      "copy of %llu bytes at offset %llu exceeds the buffer's %llu bytes",
      (unsigned long long)bytes, (unsigned long long)offset,
      (unsigned long long)buffer_bytes);
  return fdy_entry_tag(err, FDY_ERR_INVALID_ARGUMENT, backend, op);
}

#endif
