#ifndef FOUNDRY_INPUT_H
#define FOUNDRY_INPUT_H
/* Reading input files and checking input text, the same way for every reader
 * (plans, config.json, the safetensors index, shards, references), and the
 * path of a file in a directory.
 *
 * Files: only regular files are read. The file is opened with O_NONBLOCK and
 * checked with fstat before anything else, so a FIFO, a device or a
 * directory given as an input fails at once (FDY_ERR_IO) instead of blocking
 * in open(2) or read(2). Every file error names the path (err->name) and
 * reads "cannot open WHAT 'PATH': strerror" or "WHAT 'PATH' is not a
 * regular file (a fifo)", WHAT being the caller's noun ("plan file").
 *
 * JSON text: jansson 2.14 accepts a NUL byte directly after a number or a
 * literal (`"version": 1\0,`); RFC 8259 allows none anywhere (a NUL inside a
 * string must be escaped). Every JSON reader runs fdy_json_check_text before
 * json_loadb. Thread-safe: all functions are reentrant. */
#include <stddef.h>
#include <stdint.h>

#include "foundry/core.h"

/* Opens path read-only for a regular file: *fd (close-on-exec, blocking
 * again) and *size in bytes. FDY_ERR_NOT_FOUND when path does not exist,
 * FDY_ERR_IO when it cannot be opened or is not a regular file,
 * FDY_ERR_INVALID_ARGUMENT for a NULL or empty path. On failure *fd is -1
 * and nothing stays open. */
fdy_status fdy_input_open(const char *path, const char *what, int *fd,
                          uint64_t *size, fdy_error *err);

/* Reads the whole regular file path (fdy_input_open) to end of file into
 * *text, malloc'd, NUL-terminated after *len bytes (the caller frees it).
 * It reads to end of file, whatever size fstat gave: a /proc file, whose
 * size reads as 0, is read in full, not as empty. FDY_ERR_FORMAT ("WHAT
 * 'PATH' is larger than the limit of 64 MiB (67108864 bytes)", expected =
 * limit, actual = the size, or the bytes read once past the limit) when
 * the file holds more than limit bytes, before any read when its stated
 * size says so; FDY_ERR_IO when a read fails, FDY_ERR_OUT_OF_MEMORY. On
 * failure *text is NULL. */
fdy_status fdy_input_read(const char *path, const char *what, uint64_t limit,
                          char **text, size_t *len, fdy_error *err);

/* FDY_OK when len bytes of text hold no NUL byte; else FDY_ERR_PARSE with
 * the 1-based line and column (in bytes) of the first one, and a message
 * "NUL byte at line L, column C (JSON text cannot contain one)" that the
 * caller prefixes with the document's name. */
fdy_status fdy_json_check_text(const char *text, size_t len, fdy_error *err);

/* "DIR/FILE", malloc'd (the caller frees it); NULL when out of memory. */
char *fdy_path_join(const char *dir, const char *file);

#endif
