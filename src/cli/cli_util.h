/* Shared helpers of the CLI commands: error reporting and strict number
 * parsing. Messages go to stderr as "foundry: error: ..." (failures, exit 1)
 * or "foundry COMMAND: ..." plus a hint to `foundry help COMMAND` (usage
 * errors, exit 2). */
#ifndef FOUNDRY_CLI_UTIL_H
#define FOUNDRY_CLI_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "foundry/backend.h"
#include "foundry/core.h"

enum { FDY_EXIT_OK = 0, FDY_EXIT_FAILURE = 1, FDY_EXIT_USAGE = 2 };

/* Prints err (message, and the cleanup failure when there was one) as
 * "foundry: error: ..." and returns FDY_EXIT_FAILURE. */
int fdy_cli_fail(const fdy_error *err);

/* Prints "foundry COMMAND: <message>" and the help hint; returns
 * FDY_EXIT_USAGE. */
int fdy_cli_usage(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Parses a decimal integer in [min, max] for flag; on failure fills err with
 * FDY_ERR_INVALID_ARGUMENT naming the flag ("--layers must be an integer
 * from 1 to 4294967295, got 'x'"). */
fdy_status fdy_cli_parse_uint(const char *flag, const char *text, uint64_t min,
                              uint64_t max, uint64_t *out, fdy_error *err);

/* Parses a comma-separated list of int32 ids ("1,2,3"); *out is malloc'd. */
fdy_status fdy_cli_parse_ids(const char *flag, const char *text, int32_t **out,
                             uint32_t *count, fdy_error *err);

/* Creates backend `name`: "cpu" (threads: pool threads, 0 = online CPUs)
 * or "cuda" (device 0; FDY_ERR_UNSUPPORTED without a device or a CUDA
 * build). An unknown name is FDY_ERR_INVALID_ARGUMENT (a usage error). */
fdy_status fdy_cli_backend_create(const char *name, uint32_t threads,
                                  fdy_backend **out, fdy_error *err);

/* Parses a KV cache dtype flag value: "f32" or "f16". */
fdy_status fdy_cli_parse_kv_dtype(const char *text, fdy_dtype *out,
                                  fdy_error *err);

/* True when stderr is a terminal (progress output). */
bool fdy_cli_stderr_is_tty(void);

#endif
