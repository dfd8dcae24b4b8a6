/* Status names, the rich fdy_error value, monotonic time and the version
 * string. */
#include "foundry/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const status_names[FDY_STATUS_COUNT] = {
    [FDY_OK] = "ok",
    [FDY_ERR_INVALID_ARGUMENT] = "invalid_argument",
    [FDY_ERR_OVERFLOW] = "overflow",
    [FDY_ERR_OUT_OF_MEMORY] = "out_of_memory",
    [FDY_ERR_IO] = "io",
    [FDY_ERR_EXISTS] = "exists",
    [FDY_ERR_NOT_FOUND] = "not_found",
    [FDY_ERR_UNSUPPORTED] = "unsupported",
    [FDY_ERR_PARSE] = "parse",
    [FDY_ERR_SCHEMA] = "schema",
    [FDY_ERR_FORMAT] = "format",
    [FDY_ERR_BUDGET] = "budget",
    [FDY_ERR_BACKEND] = "backend",
    [FDY_ERR_CHECKSUM] = "checksum",
    [FDY_ERR_TOLERANCE] = "tolerance",
    [FDY_ERR_CONTEXT] = "context",
    [FDY_ERR_GRAPH_UNKNOWN_TENSOR] = "graph_unknown_tensor",
    [FDY_ERR_GRAPH_DUPLICATE_NAME] = "graph_duplicate_name",
    [FDY_ERR_GRAPH_READ_BEFORE_WRITE] = "graph_read_before_write",
    [FDY_ERR_GRAPH_MULTIPLE_PRODUCERS] = "graph_multiple_producers",
    [FDY_ERR_GRAPH_WEIGHT_SIZE] = "graph_weight_size",
    [FDY_ERR_GRAPH_FILE_RANGE] = "graph_file_range",
    [FDY_ERR_GRAPH_ROLE] = "graph_role",
    [FDY_ERR_PLAN_UNKNOWN_ID] = "plan_unknown_id",
    [FDY_ERR_PLAN_DOUBLE_ALLOCATION] = "plan_double_allocation",
    [FDY_ERR_PLAN_SLOT_NOT_ALLOCATED] = "plan_slot_not_allocated",
    [FDY_ERR_PLAN_BUDGET_EXCEEDED] = "plan_budget_exceeded",
    [FDY_ERR_PLAN_SLOT_TOO_SMALL] = "plan_slot_too_small",
    [FDY_ERR_PLAN_NOT_A_WEIGHT] = "plan_not_a_weight",
    [FDY_ERR_PLAN_TRANSFER_NOT_AWAITED] = "plan_transfer_not_awaited",
    [FDY_ERR_PLAN_PRODUCER_NOT_AWAITED] = "plan_producer_not_awaited",
    [FDY_ERR_PLAN_SLOT_BUSY] = "plan_slot_busy",
    [FDY_ERR_PLAN_EVENT_REUSED] = "plan_event_reused",
    [FDY_ERR_PLAN_EVENT_NOT_SIGNALLED] = "plan_event_not_signalled",
    [FDY_ERR_PLAN_OP_ORDER] = "plan_op_order",
    [FDY_ERR_PLAN_BINDING_MISMATCH] = "plan_binding_mismatch",
    [FDY_ERR_PLAN_UNSYNCHRONIZED_END] = "plan_unsynchronized_end",
    [FDY_ERR_PLAN_UNRELEASED_END] = "plan_unreleased_end",
    [FDY_ERR_PLAN_INCOMPLETE] = "plan_incomplete",
    [FDY_ERR_PLAN_SECTION_COMMAND] = "plan_section_command",
    [FDY_ERR_PLAN_PLACEMENT] = "plan_placement",
    [FDY_ERR_PLAN_PLACEMENT_HAZARD] = "plan_placement_hazard",
};

const char *fdy_status_name(fdy_status status) {
  if ((unsigned)status >= FDY_STATUS_COUNT || !status_names[status]) {
    return "unknown_status";
  }
  return status_names[status];
}

void fdy_error_clear(fdy_error *err) {
  if (!err) {
    return;
  }
  memset(err, 0, sizeof(*err));
  err->kind = FDY_OK;
  err->command_index = -1;
  err->ids[0] = -1;
  err->ids[1] = -1;
  err->line = -1;
  err->column = -1;
  err->cleanup_kind = FDY_OK;
}

fdy_status fdy_error_vsetf(fdy_error *err, fdy_status kind, const char *name,
                           uint64_t expected, uint64_t actual, const char *fmt,
                           va_list ap) {
  if (!err) {
    return kind;
  }
  fdy_error_clear(err);
  err->kind = kind;
  err->expected = expected;
  err->actual = actual;
  if (name) {
    snprintf(err->name, sizeof(err->name), "%s", name);
  }
  vsnprintf(err->message, sizeof(err->message), fmt, ap);
  return kind;
}

fdy_status fdy_error_setf(fdy_error *err, fdy_status kind, const char *name,
                          uint64_t expected, uint64_t actual, const char *fmt,
                          ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(err, kind, name, expected, actual, fmt, ap);
  va_end(ap);
  return kind;
}

fdy_status fdy_error_set(fdy_error *err, fdy_status kind, const char *fmt,
                         ...) {
  va_list ap;
  va_start(ap, fmt);
  fdy_error_vsetf(err, kind, NULL, 0, 0, fmt, ap);
  va_end(ap);
  return kind;
}

char *fdy_escape_controls(const char *text, char *buf, size_t cap) {
  if (cap == 0) {
    return buf;
  }
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    char one[5];
    const char *named = *p == '\n'   ? "\\n"
                        : *p == '\r' ? "\\r"
                        : *p == '\t' ? "\\t"
                                     : NULL;
    if (named) {
      snprintf(one, sizeof one, "%s", named);
    } else if (*p < 0x20 || *p == 0x7f) {
      snprintf(one, sizeof one, "\\x%02x", *p);
    } else {
      one[0] = (char)*p;
      one[1] = '\0';
    }
    const size_t len = strlen(one);
    if (n + len >= cap) {
      break;
    }
    memcpy(buf + n, one, len);
    n += len;
  }
  buf[n] = '\0';
  return buf;
}

/* Puts prefix and then sep (each cut at the buffer end) before
 * err->message. */
static void error_prepend(fdy_error *err, const char *sep, const char *fmt,
                          va_list ap) {
  char prefix[FDY_ERROR_MESSAGE_MAX];
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  size_t cap = sizeof(err->message);
  size_t plen = strnlen(prefix, cap - 1);
  size_t slen = strlen(sep);
  size_t head = plen + slen < cap ? plen + slen : cap - 1;
  size_t mlen = strnlen(err->message, cap - 1);
  if (mlen > cap - 1 - head) {
    mlen = cap - 1 - head;
  }
  memmove(err->message + head, err->message, mlen);
  memcpy(err->message, prefix, head < plen ? head : plen);
  if (head == plen + slen) {
    memcpy(err->message + plen, sep, slen);
  }
  err->message[head + mlen] = '\0';
}

void fdy_error_prefix(fdy_error *err, const char *fmt, ...) {
  if (!err) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  error_prepend(err, ": ", fmt, ap);
  va_end(ap);
}

void fdy_error_prepend(fdy_error *err, const char *fmt, ...) {
  if (!err) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  error_prepend(err, "", fmt, ap);
  va_end(ap);
}

int64_t fdy_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

const char *fdy_version(void) {
  return FDY_VERSION_STRING;
}
