/* Shared helpers of the CLI commands: error reporting and strict number
 * parsing. Messages go to stderr as "foundry: error: ..." (failures, exit 1)
 * or "foundry COMMAND: ..." plus a hint to `foundry help COMMAND` (usage
 * errors, exit 2). */
#ifndef FOUNDRY_CLI_UTIL_H
#define FOUNDRY_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Reads the whole file at path as raw bytes; *out is malloc'd with a NUL
 * after the *len bytes. FDY_ERR_NOT_FOUND / FDY_ERR_IO name the path. */
fdy_status fdy_cli_read_file(const char *path, char **out, size_t *len,
                             fdy_error *err);

/* Flushes stdout; FDY_EXIT_OK, or FDY_EXIT_FAILURE after printing
 * "foundry: error: cannot write standard output: ..." (a full disk,
 * /dev/full, a closed pipe). */
int fdy_cli_finish_stdout(void);

/* True when stderr is a terminal (progress output). */
bool fdy_cli_stderr_is_tty(void);

#endif
