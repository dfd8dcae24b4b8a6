/* Foundry core: status codes and errors, dtypes, shapes, checked byte sizes,
 * alignment, binary units, memory spaces and budgets, device capabilities and
 * typed ids. Everything here is plain data and pure functions; nothing
 * allocates except where a contract says so. Thread-safe: all functions are
 * reentrant. */
#ifndef FOUNDRY_CORE_H
#define FOUNDRY_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors -------------------------------------------------- */

/* Every fallible call returns an fdy_status: FDY_OK (0) or the kind of the
 * failure. Tests assert on kinds and error fields, never on message text. */
typedef enum fdy_status {
  FDY_OK = 0,
  /* general */
  FDY_ERR_INVALID_ARGUMENT, /* a caller passed a value outside the contract */
  FDY_ERR_OVERFLOW,         /* checked arithmetic overflowed */
  FDY_ERR_OUT_OF_MEMORY,    /* a host allocation failed */
  FDY_ERR_IO,               /* open/read/write/mmap failed (errno in message) */
  FDY_ERR_EXISTS,           /* refusing to overwrite an existing file */
  FDY_ERR_NOT_FOUND,   /* a named thing (file, tensor, command) is absent */
  FDY_ERR_UNSUPPORTED, /* valid input that Foundry does not support */
  FDY_ERR_PARSE,       /* syntax error in a document (line/column set) */
  FDY_ERR_SCHEMA,      /* well-formed document with wrong structure */
  FDY_ERR_FORMAT,      /* a binary file violates its format */
  FDY_ERR_BUDGET,      /* a memory budget would be exceeded */
  FDY_ERR_BACKEND,     /* a backend operation failed */
  FDY_ERR_CHECKSUM,    /* computed result differs from the expected one */
  FDY_ERR_TOLERANCE,   /* numerical comparison outside tolerance */
  FDY_ERR_CONTEXT,     /* sequence longer than the configured context */
  /* graph structure */
  FDY_ERR_GRAPH_UNKNOWN_TENSOR,
  FDY_ERR_GRAPH_DUPLICATE_NAME,
  FDY_ERR_GRAPH_READ_BEFORE_WRITE,
  FDY_ERR_GRAPH_MULTIPLE_PRODUCERS,
  FDY_ERR_GRAPH_WEIGHT_SIZE,
  FDY_ERR_GRAPH_FILE_RANGE,
  FDY_ERR_GRAPH_ROLE, /* e.g. an op writes a weight */
  /* plan validation */
  FDY_ERR_PLAN_UNKNOWN_ID, /* buffer/tensor/op/stream/event out of range */
  FDY_ERR_PLAN_DOUBLE_ALLOCATION,    /* allocate of a live slot */
  FDY_ERR_PLAN_SLOT_NOT_ALLOCATED,   /* use or release of a dead slot */
  FDY_ERR_PLAN_BUDGET_EXCEEDED,      /* live slot bytes above the budget */
  FDY_ERR_PLAN_SLOT_TOO_SMALL,       /* weight larger than its slot */
  FDY_ERR_PLAN_NOT_A_WEIGHT,         /* prefetch or binding of a non-weight */
  FDY_ERR_PLAN_TRANSFER_NOT_AWAITED, /* launch not ordered after its transfer */
  FDY_ERR_PLAN_PRODUCER_NOT_AWAITED, /* launch not ordered after a producer */
  FDY_ERR_PLAN_SLOT_BUSY,            /* overwrite/release before readers done */
  FDY_ERR_PLAN_EVENT_REUSED,         /* an event signalled twice */
  FDY_ERR_PLAN_EVENT_NOT_SIGNALLED,  /* wait on an event not yet signalled */
  FDY_ERR_PLAN_OP_ORDER,           /* op launched twice or out of graph order */
  FDY_ERR_PLAN_BINDING_MISMATCH,   /* bindings differ from the op's weights */
  FDY_ERR_PLAN_UNSYNCHRONIZED_END, /* an event never observed by the host */
  FDY_ERR_PLAN_UNRELEASED_END,     /* a slot still live at the end */
  FDY_ERR_PLAN_INCOMPLETE,         /* an op of the graph never launched */
  FDY_ERR_PLAN_SECTION_COMMAND,    /* a command its section may not hold */
  FDY_ERR_PLAN_PLACEMENT,          /* a tensor placed outside its class */
  FDY_ERR_PLAN_PLACEMENT_HAZARD,   /* bytes reused before their users done */
  FDY_STATUS_COUNT
} fdy_status;

#define FDY_ERROR_MESSAGE_MAX 512
#define FDY_ERROR_NAME_MAX    128

/* Rich error filled by fallible calls when the caller passes a non-NULL
 * pointer. Fields that do not apply keep their "unset" values (-1 for
 * indices, 0 for sizes, "" for names). Plain value type: no ownership. */
typedef struct fdy_error {
  fdy_status kind;
  int64_t command_index; /* plan command index, or -1 */
  int64_t ids[2];        /* ids involved (slot, event, tensor, op...), or -1 */
  uint64_t expected;     /* expected bytes/count where relevant */
  uint64_t actual;       /* actual bytes/count where relevant */
  int64_t line, column;  /* PARSE: document position; else -1 (SCHEMA
                          * errors give the JSON path in name instead) */
  char name[FDY_ERROR_NAME_MAX]; /* tensor/file/field involved, or "" */
  char backend_op[64];           /* failing backend operation, or "" */
  fdy_status cleanup_kind;       /* FDY_OK unless cleanup also failed */
  char cleanup_message[256];
  char message[FDY_ERROR_MESSAGE_MAX]; /* readable, complete sentence */
} fdy_error;

/* Resets every field to its unset value. err may be NULL (no-op). */
void fdy_error_clear(fdy_error *err);

/* Clears err, sets kind and a printf-formatted message, returns kind so a
 * caller can write `return fdy_error_set(err, FDY_ERR_X, "...", ...);`.
 * err may be NULL. */
fdy_status fdy_error_set(fdy_error *err, fdy_status kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The one error-setting helper: fdy_error_set plus the fields that say what
 * failed: err->name = name (NULL leaves ""), err->expected and err->actual
 * (0 where they do not apply). A module's own helper that adds a prefix or
 * more fields calls fdy_error_vsetf, then fdy_error_prefix. */
fdy_status fdy_error_setf(fdy_error *err, fdy_status kind, const char *name,
                          uint64_t expected, uint64_t actual, const char *fmt,
                          ...) __attribute__((format(printf, 6, 7)));
fdy_status fdy_error_vsetf(fdy_error *err, fdy_status kind, const char *name,
                           uint64_t expected, uint64_t actual, const char *fmt,
                           va_list ap) __attribute__((format(printf, 6, 0)));

/* Prepends "prefix: " to err->message (truncating at the buffer end). */
void fdy_error_prefix(fdy_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prepends the formatted text as it is (no ": " after it). */
void fdy_error_prepend(fdy_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Copies text into buf (cap bytes, always NUL-terminated when cap > 0,
 * truncated at a whole escape) with each control byte (0x01 to 0x1f and
 * 0x7f) written as C writes it: \n, \r, \t, else \xNN. Other bytes, UTF-8
 * included, are copied. For printing a message whose names come from
 * files (a shard name with a newline, a tensor name with an escape
 * sequence) on one line of a terminal; 4 * strlen(text) + 1 bytes always
 * suffice. Returns buf. */
char *fdy_escape_controls(const char *text, char *buf, size_t cap);

/* Stable lowercase identifier of a status ("plan_slot_busy"); never NULL. */
const char *fdy_status_name(fdy_status status);

/* ---- checked arithmetic -------------------------------------------------- */

/* *out = a + b, or FDY_ERR_OVERFLOW (out untouched). */
fdy_status fdy_add_u64(uint64_t a, uint64_t b, uint64_t *out, fdy_error *err);
/* *out = a * b, or FDY_ERR_OVERFLOW (out untouched). */
fdy_status fdy_mul_u64(uint64_t a, uint64_t b, uint64_t *out, fdy_error *err);
/* True when alignment is a non-zero power of two. */
bool fdy_is_power_of_two(uint64_t alignment);
/* *out = size rounded up to a multiple of alignment. FDY_ERR_INVALID_ARGUMENT
 * when alignment is not a non-zero power of two, FDY_ERR_OVERFLOW when the
 * rounded size does not fit 64 bits. */
fdy_status fdy_align_up(uint64_t size, uint64_t alignment, uint64_t *out,
                        fdy_error *err);

/* ---- binary units ----------------------------------------------------------
 */

/* Parses "123", "123B", "64KiB", "450MiB", "4GiB", "1TiB" (binary units,
 * case-sensitive suffix, no sign, no fraction, optional single space before
 * the unit). Empty, negative, fractional, unknown units and values that do not
 * fit 64 bits are FDY_ERR_INVALID_ARGUMENT / FDY_ERR_OVERFLOW. */
fdy_status fdy_parse_bytes(const char *text, uint64_t *out, fdy_error *err);
/* Writes a human form: exact "450 MiB" when divisible, else "1.50 GiB" with
 * two decimals in the largest unit not above the value; bytes below 1 KiB as
 * "17 B". Always NUL-terminates when cap > 0. Returns buf. */
char *fdy_format_bytes(uint64_t bytes, char *buf, size_t cap);

#define FDY_KIB ((uint64_t)1 << 10)
#define FDY_MIB ((uint64_t)1 << 20)
#define FDY_GIB ((uint64_t)1 << 30)

/* ---- dtypes and shapes -----------------------------------------------------
 */

typedef enum fdy_dtype {
  FDY_DTYPE_F32 = 0,
  FDY_DTYPE_F16,
  FDY_DTYPE_BF16,
  FDY_DTYPE_F64,
  FDY_DTYPE_U32,
  FDY_DTYPE_I32,
  FDY_DTYPE_I64,
  FDY_DTYPE_U64,
  FDY_DTYPE_U8,
  FDY_DTYPE_I8,
  FDY_DTYPE_COUNT
} fdy_dtype;

/* Element size in bytes; 0 for an invalid dtype. */
uint64_t fdy_dtype_size(fdy_dtype dtype);
/* Canonical name as safetensors spells it ("F32", "BF16", "U32"...). */
const char *fdy_dtype_name(fdy_dtype dtype);
/* Inverse of fdy_dtype_name; FDY_ERR_UNSUPPORTED for an unknown name. */
fdy_status fdy_dtype_parse(const char *name, fdy_dtype *out, fdy_error *err);
/* The one float to F16 conversion: IEEE half bits of value, rounded to
 * nearest even (overflow to infinity, a NaN kept a NaN). The CPU backend's
 * F16 KV caches and the checkpoints make_model writes use it. */
uint16_t fdy_float_to_f16(float value);

#define FDY_MAX_RANK 8

/* A tensor shape: rank dims, row-major. rank 0 is a scalar (1 element). */
typedef struct fdy_shape {
  uint32_t rank;
  uint64_t dims[FDY_MAX_RANK];
} fdy_shape;

/* Builds a shape from rank dims; dims beyond rank are zeroed. rank must be
 * <= FDY_MAX_RANK (assert). */
fdy_shape fdy_shape_make(uint32_t rank, const uint64_t *dims);
#define FDY_SHAPE(...)                                                         \
  fdy_shape_make(sizeof((uint64_t[]){__VA_ARGS__}) / sizeof(uint64_t),         \
                 (uint64_t[]){__VA_ARGS__})
bool fdy_shape_equal(fdy_shape a, fdy_shape b);
/* Product of dims with overflow checking; rank > FDY_MAX_RANK is invalid. */
fdy_status fdy_shape_elements(fdy_shape shape, uint64_t *out, fdy_error *err);
/* elements * dtype size, overflow-checked. */
fdy_status fdy_tensor_bytes(fdy_dtype dtype, fdy_shape shape, uint64_t *out,
                            fdy_error *err);
/* "[28, 3072]" into buf; returns buf. */
char *fdy_shape_format(fdy_shape shape, char *buf, size_t cap);

/* ---- memory spaces and budgets ------------------------------------------- */

typedef enum fdy_memory_space {
  FDY_SPACE_HOST = 0,
  FDY_SPACE_DEVICE,
} fdy_memory_space;

const char *fdy_memory_space_name(fdy_memory_space space);

/* A byte budget in one memory space. Accepts reservations up to capacity
 * (inclusive) and rejects beyond. Plain value; not thread-safe. */
typedef struct fdy_budget {
  fdy_memory_space space;
  uint64_t capacity; /* bytes */
  uint64_t used;     /* bytes currently reserved */
  uint64_t peak;     /* highest value `used` reached */
} fdy_budget;

fdy_budget fdy_budget_make(fdy_memory_space space, uint64_t capacity);
/* Reserves bytes; FDY_ERR_BUDGET (expected = capacity, actual = would-be
 * use) when it does not fit, FDY_ERR_OVERFLOW on wrap. Unchanged on error. */
fdy_status fdy_budget_reserve(fdy_budget *budget, uint64_t bytes,
                              fdy_error *err);
/* Returns bytes to the budget; releasing more than used is a programmer bug
 * (assert). */
void fdy_budget_release(fdy_budget *budget, uint64_t bytes);

/* ---- device capabilities ----------------------------------------------------
 */

/* What a backend's device offers, as plain data. */
typedef struct fdy_device_caps {
  char name[128];               /* "NVIDIA H200", "cpu", "fake" */
  uint64_t total_memory;        /* bytes of device memory */
  uint64_t free_memory;         /* bytes free when queried (0 = unknown) */
  uint64_t max_allocation;      /* largest single allocation, bytes */
  uint64_t alignment;           /* required slot alignment, power of two */
  bool concurrent_copy_compute; /* copies can overlap kernels */
  uint32_t copy_engines;        /* async copy engines (0 = unknown) */
} fdy_device_caps;

/* ---- typed ids
 * --------------------------------------------------------------- */

/* Distinct struct types so a buffer can never be passed where an event is
 * expected. The raw value is the index in its table. */
typedef struct fdy_tensor_id {
  uint32_t v;
} fdy_tensor_id;
typedef struct fdy_op_id {
  uint32_t v;
} fdy_op_id;
typedef struct fdy_buffer_id {
  uint32_t v;
} fdy_buffer_id;
typedef struct fdy_event_id {
  uint32_t v;
} fdy_event_id;
typedef struct fdy_stream_id {
  uint32_t v;
} fdy_stream_id;

/* ---- text ------------------------------------------------------------------
 */

/* True when the NUL-terminated s is well-formed UTF-8 (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). NULL is false. */
bool fdy_utf8_valid(const char *s);
/* Bytes (1 to 4) of the well-formed UTF-8 character at p, of n bytes
 * available, or 0 when p starts none (the rule of fdy_utf8_valid). Reads
 * the bytes in order and stops at the first that fails, so a NUL ends any
 * character. */
size_t fdy_utf8_char_length(const char *p, size_t n);
/* A malloc'd copy of s in which every byte that does not belong to a
 * well-formed UTF-8 sequence is replaced by U+FFFD (EF BF BD), one per byte;
 * well-formed text is copied unchanged. The one way text that Foundry did
 * not make (paths, argv, messages quoting them) goes into JSON output, since
 * jansson refuses invalid UTF-8. NULL when s is NULL or out of memory; the
 * caller frees. */
char *fdy_utf8_sanitize(const char *s);

/* ---- monotonic time
 * ---------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t fdy_now_ns(void);

/* ---- version
 * ------------------------------------------------------------------ */

#define FDY_VERSION_STRING "0.1.0"
const char *fdy_version(void);

#ifdef __cplusplus
}
#endif
#endif
